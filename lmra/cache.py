"""SQLite call cache: one row per model call, keyed on every input that changes the output.

The key (see :func:`lmra.providers.base.request_key`) covers provider, base URL, model and
the whole :class:`~lmra.providers.base.ChatRequest` (messages, temperature, max tokens,
seed, top_logprobs, options, stop, sample index). Each finished call is committed at once
(WAL journal), so a run stopped by Ctrl-C or ``kill -9`` loses no finished call and a
re-run of the same config makes zero new calls.

What is cached: only genuine answers. A call that failed (after the SDK's and the
provider's retries) is never stored, and neither is a *degraded* answer (one that lacks
the log-probabilities it was asked for after every retry): the next run asks again.

Leases: processes sharing a cache do not pay twice for a call in flight. Before a fresh
call the caller takes a lease row on its key; another process (or task) wanting the same
key waits for the answer instead of calling. A lease dies with its holder: it is released
when the call ends, ignored when its process is gone (same host) and expires after
:data:`LEASE_TTL_S` in any case.

Full disks: when a finished call cannot be written (disk full, I/O error), it is held in
memory and written with the next successful write; :meth:`CallCache.flush` retries the held
calls for a while and then raises :class:`~lmra.errors.LmraIOError` naming the cache file
and how many answered calls could not be stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lmra.errors import LmraIOError, io_reason
from lmra.providers.base import ChatRequest, ChatResult, Provider, ProviderError, collect_events, request_key

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    base_url TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires REAL NOT NULL
);
"""

#: Seconds after which a lease is ignored even if its holder seems alive (a hung process,
#: another host). Longer than one call with all its retries at the default timeout.
LEASE_TTL_S = 900.0
#: Seconds between looks at the cache while another process is making the same call.
LEASE_POLL_S = 0.2


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back an open transaction (SQLite may already have rolled it back itself, e.g. on a
    full disk); never raises over the error being handled."""
    try:
        if db.in_transaction:
            db.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _pid_alive(pid: int) -> bool:
    """True when process ``pid`` runs (a zombie — killed, not yet reaped by its parent — is dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:][:1] != "Z"
    except (OSError, ValueError):
        return True  # no /proc (not Linux): trust kill(0)


class CallCache:
    """A thread-safe SQLite store of finished calls.

    Args:
        path: database file (created with its parent folder); ``":memory:"`` for tests.
        write_retry_s: how long :meth:`flush` keeps retrying calls that could not be written.
        on_write_error: called once per episode with a message when a write fails (the CLI
            prints it), and again when held calls are written.

    Raises:
        LmraIOError: the file or its folder cannot be created or opened (read-only location …),
            naming the path.
    """

    def __init__(self, path: str | Path, *, write_retry_s: float = 60.0, on_write_error=None):
        self.path = str(path)
        self.write_retry_s = write_retry_s
        self.on_write_error = on_write_error
        self.owner = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pending: dict[str, tuple] = {}  # key → row not yet written (disk full …)
        self.write_failures = 0
        self.leases_waited = 0
        self._inflight: dict[str, asyncio.Future] = {}
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise LmraIOError(f"cannot open the call cache ({io_reason(exc)}); check that the folder exists and "
                              "is writable, or set 'cache' in the config", path=self.path) from None

    def get(self, key: str) -> ChatResult | None:
        """The cached result for ``key`` (also one held in memory after a failed write), or None."""
        if key in self.pending:
            return ChatResult.model_validate_json(self.pending[key][5])
        with self._lock:
            row = self._db.execute("SELECT result FROM calls WHERE key = ?", (key,)).fetchone()
        return ChatResult.model_validate_json(row[0]) if row else None

    def put(self, key: str, provider: Provider, request: ChatRequest, result: ChatResult) -> None:
        """Store one finished call (committed immediately). A write that fails keeps the call
        in memory (:attr:`pending`) until a later write or :meth:`flush` succeeds."""
        row = (key, provider.name, provider.base_url, provider.model_id,
               json.dumps(request.cache_payload(), ensure_ascii=False), result.model_dump_json(), time.time())
        self.pending[key] = row
        self._write_pending()

    def _write_pending(self) -> bool:
        """Try to write every held call; True when none is left."""
        if not self.pending:
            return True
        try:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.executemany("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?, ?)",
                                         list(self.pending.values()))
                    self._db.execute("COMMIT")
                except BaseException:
                    _rollback(self._db)
                    raise
        except (OSError, sqlite3.Error) as exc:
            self.write_failures += 1
            if self.write_failures == 1 and self.on_write_error is not None:
                self.on_write_error(f"cannot write to the call cache {self.path} ({io_reason(exc)}); answered calls "
                                    "are held in memory and written as soon as the disk allows")
            return False
        if self.write_failures and self.on_write_error is not None:
            self.on_write_error(f"the call cache {self.path} is writable again: {len(self.pending)} held call(s) "
                                "written")
        self.pending.clear()
        self.write_failures = 0
        return True

    def flush(self, timeout_s: float | None = None) -> None:
        """Write the calls held after failed writes, retrying for up to ``timeout_s`` seconds
        (default :attr:`write_retry_s`).

        Raises:
            LmraIOError: calls are still held after the last try (naming the cache file and
                their number).
        """
        deadline = time.monotonic() + (self.write_retry_s if timeout_s is None else timeout_s)
        while not self._write_pending():
            if time.monotonic() >= deadline:
                raise LmraIOError(f"{len(self.pending)} answered call(s) could not be stored in the call cache (disk "
                                  "full or not writable); free space and run the same command again (they will be "
                                  "asked again)", path=self.path)
            time.sleep(1.0)

    # -- leases ------------------------------------------------------------------------
    def _try_lease(self, key: str) -> bool:
        """Take the lease on ``key`` unless a live holder has it; True when taken (or when
        leases cannot be written, e.g. on a full disk: the call then simply goes ahead)."""
        now = time.time()
        try:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    row = self._db.execute("SELECT owner, host, pid, expires FROM leases WHERE key = ?",
                                           (key,)).fetchone()
                    free = (row is None or row[0] == self.owner or row[3] < now
                            or (row[1] == self.host and not _pid_alive(int(row[2]))))
                    if free:
                        self._db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)",
                                         (key, self.owner, self.host, os.getpid(), now + LEASE_TTL_S))
                    self._db.execute("COMMIT")
                except BaseException:
                    _rollback(self._db)
                    raise
        except (OSError, sqlite3.Error):
            return True
        return free

    def _release(self, key: str) -> None:
        try:
            with self._lock:
                self._db.execute("DELETE FROM leases WHERE key = ? AND owner = ?", (key, self.owner))
        except (OSError, sqlite3.Error):
            pass  # the lease expires, or dies with this process

    async def keep_lease(self, key: str) -> None:
        """Renew this process's lease on ``key`` every third of :data:`LEASE_TTL_S` while its
        call runs (a call with many slow retries outlives one lease); cancelled when it ends."""
        while True:
            await asyncio.sleep(LEASE_TTL_S / 3)
            try:
                with self._lock:
                    self._db.execute("UPDATE leases SET expires = ? WHERE key = ? AND owner = ?",
                                     (time.time() + LEASE_TTL_S, key, self.owner))
            except (OSError, sqlite3.Error):
                pass

    async def acquire(self, key: str) -> ChatResult | None:
        """Wait until this process may make the call ``key``: returns None when it holds the
        lease, or the result when another process made the call meanwhile.

        The cache is read again once the lease is taken: a holder stores its answer before it
        releases its lease, so a caller that missed the cache just before the holder finished
        finds the answer here instead of paying for the call a second time."""
        waited = False
        while not self._try_lease(key):
            if not waited:
                waited = True
                self.leases_waited += 1
            await asyncio.sleep(LEASE_POLL_S)
            hit = self.get(key)
            if hit is not None:
                return hit
        hit = self.get(key)
        if hit is not None:
            self._release(key)
            return hit
        return None

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        """Close the database (held calls, if any, are tried once more first; any still held
        are reported through ``on_write_error``: they are lost and will be asked again)."""
        if not self._write_pending() and self.on_write_error is not None:
            self.on_write_error(f"{len(self.pending)} answered call(s) could not be stored in the call cache "
                                f"{self.path} (disk full or not writable); a re-run asks them again")
        with self._lock:
            self._db.close()


#: Fault events (see :func:`lmra.providers.base.note_event`) → :class:`CallStats` fields.
_EVENT_FIELDS = {"http_429": "http_429", "http_5xx": "http_5xx", "http_4xx": "http_4xx", "timeout": "timeouts",
                 "connection": "connection_errors", "malformed": "malformed", "no_choices": "no_choices",
                 "no_logprobs": "no_logprobs"}


@dataclass
class CallStats:
    """Counts of calls made through a :class:`CachedProvider` during one run.

    Attributes:
        fresh, cached, failed: calls answered by the model, served from the cache, and
            failed after every retry.
        retries: extra attempts (the SDK's HTTP retries plus retries of faulty responses).
        http_429, http_5xx, http_4xx, timeouts, connection_errors: attempts that met each fault.
        malformed, no_choices, no_logprobs: 200 responses that were not usable (a body that is
            not a completion, no choices, an answer without the requested log-probabilities).
        degraded: answers used without what was asked for (``no_logprobs`` after every retry:
            parsed as text) and therefore not cached.
        waited: calls that waited for another process making the same call (lease).
        failed_by_kind: failures by kind (``timeout``, ``http_503``, ``malformed`` …).
        by_model: the same counts per ``provider:model`` (only on the run's total).
    """

    fresh: int = 0
    cached: int = 0
    failed: int = 0
    retries: int = 0
    http_429: int = 0
    http_5xx: int = 0
    http_4xx: int = 0
    timeouts: int = 0
    connection_errors: int = 0
    malformed: int = 0
    no_choices: int = 0
    no_logprobs: int = 0
    degraded: int = 0
    waited: int = 0
    prompt_tokens_fresh: int = 0
    completion_tokens_fresh: int = 0
    prompt_tokens_cached: int = 0
    completion_tokens_cached: int = 0
    failed_by_kind: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    by_model: dict[str, "CallStats"] = field(default_factory=dict)

    def model(self, label: str) -> "CallStats":
        """The per-model counts of ``label`` (``provider:model``), created on first use."""
        if label not in self.by_model:
            self.by_model[label] = CallStats()
        return self.by_model[label]

    @property
    def faults(self) -> int:
        """Attempts or responses that met any fault (retried or not)."""
        return (self.http_429 + self.http_5xx + self.http_4xx + self.timeouts + self.connection_errors
                + self.malformed + self.no_choices + self.no_logprobs)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("errors", "by_model", "failed_by_kind")}
        out["failed_by_kind"] = dict(sorted(self.failed_by_kind.items()))
        out["errors"] = self.errors[:50]
        if self.by_model:
            out["by_model"] = {k: v.as_dict() for k, v in sorted(self.by_model.items())}
        return out


def _record(stats: list[CallStats], events: Counter, *, fresh: bool = False, failed: str | None = None,
            error: str | None = None, result: ChatResult | None = None, cached: bool = False,
            waited: bool = False) -> None:
    retries = max(events.get("attempt", 0) - 1, events.get("retry", 0), 0)
    for s in stats:
        s.retries += retries
        for ev, attr in _EVENT_FIELDS.items():
            setattr(s, attr, getattr(s, attr) + events.get(ev, 0))
        s.waited += int(waited)
        if failed is not None:
            s.failed += 1
            s.failed_by_kind[failed] += 1
            if len(s.errors) < 200:
                s.errors.append(error or failed)
        if result is not None and cached:
            s.cached += 1
            s.prompt_tokens_cached += result.usage.prompt_tokens
            s.completion_tokens_cached += result.usage.completion_tokens
        elif result is not None and fresh:
            s.fresh += 1
            s.degraded += int(result.degraded is not None)
            s.prompt_tokens_fresh += result.usage.prompt_tokens
            s.completion_tokens_fresh += result.usage.completion_tokens


class CachedProvider:
    """Wrap a provider so that every call goes through the cache and is counted.

    Args:
        inner: the provider (possibly rate-limited).
        cache: the call cache.
        stats: the run's counts; the per-model counts go to ``stats.model("provider:model")``.

    A call raises :class:`~lmra.providers.base.ProviderError` when it failed after every
    retry; any other exception of a provider (a custom one's bug, a parse error) is turned
    into a ``ProviderError`` too, so that one bad call is counted as failed instead of ending
    the run. Cancellation and Ctrl-C pass through.
    """

    def __init__(self, inner: Provider, cache: CallCache, stats: CallStats | None = None):
        self.inner = inner
        self.cache = cache
        self.stats = stats or CallStats()
        self.name = inner.name
        self.model_id = inner.model_id
        self.base_url = inner.base_url
        self.supports_logprobs = inner.supports_logprobs
        self._targets = [self.stats, self.stats.model(f"{inner.name}:{inner.model_id}")]

    async def complete(self, request: ChatRequest) -> ChatResult:
        key = request_key(self.inner.name, self.inner.base_url, self.inner.model_id, request)
        hit = self.cache.get(key)
        if hit is not None:
            _record(self._targets, Counter(), result=hit, cached=True)
            return hit.model_copy(update={"from_cache": True})
        inflight = self.cache._inflight.get(key)
        if inflight is not None:  # the same call is in flight in this process: share its answer
            result = await asyncio.shield(inflight)
            _record(self._targets, Counter(), result=result, cached=True, waited=True)
            return result.model_copy(update={"from_cache": True})
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.cache._inflight[key] = fut
        try:
            result = await self._fresh(key, request)
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc if isinstance(exc, Exception) else ProviderError("call cancelled"))
                fut.exception()  # retrieved: never "Future exception was never retrieved"
            raise
        else:
            fut.set_result(result)
        finally:
            self.cache._inflight.pop(key, None)
        return result

    async def _fresh(self, key: str, request: ChatRequest) -> ChatResult:
        other = await self.cache.acquire(key)
        if other is not None:  # another process made this call while we waited for its lease
            _record(self._targets, Counter(), result=other, cached=True, waited=True)
            return other.model_copy(update={"from_cache": True})
        renew = asyncio.create_task(self.cache.keep_lease(key))
        try:
            with collect_events() as events:
                try:
                    result = await self.inner.complete(request)
                except ProviderError as exc:
                    _record(self._targets, events, failed=exc.kind, error=f"{type(exc).__name__}: {exc}")
                    raise
                except Exception as exc:  # noqa: BLE001 — one bad call must not end the run
                    _record(self._targets, events, failed="error", error=f"{type(exc).__name__}: {exc}")
                    raise ProviderError(f"{self.inner.name} raised {type(exc).__name__}: {exc}") from exc
            if result.degraded is None:
                self.cache.put(key, self.inner, request, result)
            _record(self._targets, events, result=result, fresh=True)
            return result
        finally:
            renew.cancel()
            self.cache._release(key)

    async def aclose(self) -> None:
        await self.inner.aclose()

"""Batch mode: send a run's model calls through the providers' batch APIs, resumably.

The flow fills the ordinary call cache, so the normal pipeline then runs unchanged and
entirely from the cache:

1. **Collect** (a dry pass). The pipeline (e.g. an audit's stages) runs with every provider
   replaced by a :class:`CollectingProvider`. It answers cached calls from the cache and,
   for every other call, records ``(cache key, request)`` and returns a *placeholder* result
   whose text carries :data:`PLACEHOLDER_MARK`. A request whose messages contain that mark
   depends on an answer not known yet (the LMRA prompt embeds the target's response): it is
   *not* collected. The pipeline calls :func:`stage_barrier` between stages, which ends the
   pass after the first stage that got placeholders, since later stages can depend on its
   answers in ways no text check sees (which prompts pass a filter). Providers without a
   batch API make their calls live during the pass.
2. **Submit**. The collected calls are grouped per provider config (name, base URL, model),
   split into chunks within the API's limits, written to ``<run>/batch/job-NNNN.requests.jsonl``
   and submitted through the provider's backend (:mod:`lmra.providers._openai_batch`,
   :mod:`lmra.providers._anthropic_batch`). Job ids and remote batch ids are written to
   ``<run>/batch/state.json`` *before and after* each remote step, so a restarted process
   never submits the same job twice.
3. **Poll and download**. Every job is polled until it ends (bounded by ``max_wait_s``); its
   results are written into the :class:`~lmra.cache.CallCache` under the key the normal path
   computes (:func:`~lmra.providers.base.request_key`, checked for every row). Items that
   failed (API error, expired, cancelled, missing) are listed per job in the state file with
   their message and counted; they are never replaced by anything.
4. **Repeat** 1–3 until a dry pass collects nothing (one round per audit stage with uncached
   calls: filter, responses, refusal labels, ratings), then run the pipeline for real: every
   call is a cache hit, and a failed batch item raises :class:`~lmra.providers.base.ProviderError` through
   :class:`BatchFailureGuard`, so the pair is counted as failed like any failed call.

If the process stops (Ctrl-C, crash, ``max_wait_s``), ``lmra batch resume RUN_DIR`` (or the
same :class:`BatchOrchestrator` on the same run folder) reloads the state, polls the jobs
already submitted, downloads them and continues.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.providers.base import ChatRequest, ChatResult, Provider, ProviderError, request_key, wrap_identity
from lmra.errors import LmraInputError, LmraIOError, io_reason
from lmra.fileio import atomic_open, write_json, write_text

STATE_VERSION = 1
#: Marks the text of a placeholder answer during a collecting pass.
PLACEHOLDER_MARK = "\u27e6lmra-batch-pending:"
STATE_DIR = "batch"
STATE_FILE = "state.json"


#: a job's remote status once the provider no longer knows its batch (HTTP 404 when polled)
GONE = "gone"


class BatchPending(RuntimeError):
    """Batches are still running when ``max_wait_s`` ran out; the state is saved.

    Continue with ``lmra batch resume RUN_DIR`` (or another :meth:`BatchOrchestrator.wait`).
    """


class BatchRoundsExhausted(RuntimeError):
    """A dry pass still found uncached calls after ``max_rounds`` batch rounds (the state is saved;
    ``lmra batch resume RUN_DIR`` runs more rounds)."""


class BatchUnsupported(RuntimeError):
    """A provider has no batch API backend (only ``openai`` and ``anthropic`` have one)."""


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def provider_id(p: Provider) -> str:
    """``name|base_url|model_id``: what makes two providers share a cache key space."""
    return f"{p.name}|{p.base_url}|{p.model_id}"


def base_provider(p: Any) -> Any:
    """Unwrap ``.inner`` chains (cache, rate limit, budget wrappers) down to the backend."""
    seen = 0
    while hasattr(p, "inner") and seen < 20:
        p, seen = p.inner, seen + 1
    return p


def backend_for(provider: Provider) -> Any:
    """The batch backend of a provider (sharing its SDK client).

    Raises:
        BatchUnsupported: the provider is neither the built-in ``openai`` nor ``anthropic`` one.
    """
    base = base_provider(provider)
    from lmra.providers.anthropic import AnthropicProvider
    from lmra.providers.openai import OpenAIProvider

    if isinstance(base, OpenAIProvider):
        from lmra.providers._openai_batch import OpenAIBatchBackend

        return OpenAIBatchBackend.from_provider(base)
    if isinstance(base, AnthropicProvider):
        from lmra.providers._anthropic_batch import AnthropicBatchBackend

        return AnthropicBatchBackend.from_provider(base)
    raise BatchUnsupported(
        f"provider '{provider.name}' (model '{provider.model_id}') has no batch API; batch mode supports the "
        "built-in 'openai' and 'anthropic' providers (others make their calls live).")


def placeholder(key: str, provider: Provider, request: ChatRequest | None = None) -> ChatResult:
    """The stand-in answer of a call that is not known yet (text carries the mark and key). A
    question asked with log-probabilities gets them, uniform over its options: read as an answer
    without them, it would be estimated by sampling (:func:`lmra.judge.options.ask_options`), and
    the dry pass would collect ``n_samples`` batch items per question the final pass never reads
    (break-it finding: 6× the judge's batch items). The pass stops at the stage's end anyway
    (:func:`stage_barrier`), so no decision rests on it."""
    probs = None
    if request is not None and request.options and provider.supports_logprobs:
        probs = {o: 1.0 / len(request.options) for o in request.options}
    return ChatResult(text=f"{PLACEHOLDER_MARK}{key[:16]}\u27e7", option_probs=probs, finish_reason="batch_pending",
                      model=provider.model_id, provider=provider.name)


def is_tainted(request: ChatRequest) -> bool:
    """True when a request embeds a placeholder answer (its real input is not known yet)."""
    return any(PLACEHOLDER_MARK in m.content for m in request.messages)


class CollectingProvider:
    """Provider used in a dry pass: answers from the cache or records the call for a batch.

    Args:
        inner: the real provider (only its ``name``, ``base_url``, ``model_id`` and
            ``supports_logprobs`` are used; it is never called).
        cache: the call cache.
        pending: keys already in a submitted, unfinished batch (not collected again).
        failed: key → message of failed batch items (raised as ProviderError, like the real pass).
        live: for a provider without a batch API, the provider (normally a
            :class:`~lmra.cache.CachedProvider`) that makes its calls live during the pass;
            calls depending on a placeholder are still held back, never sent.

    Attributes:
        collected: key → request of the uncached calls met in the pass (deduplicated).
        n_cached, n_tainted, n_live: calls answered from the cache / held back as depending
            on a placeholder / made live.
        n_placeholders: placeholder answers given (collected, pending or held back calls).
    """

    #: a dry pass's provider: the judge check collects every canary call (no early stop on placeholders)
    collecting = True

    def __init__(self, inner: Provider, cache: CallCache, *, pending: set[str] | None = None,
                 failed: dict[str, str] | None = None, live: Provider | None = None):
        self.live = live
        self.cache = cache
        wrap_identity(self, inner)  # inner, name, model_id, base_url, supports_logprobs
        self.pending = pending or set()
        self.failed = failed or {}
        self.collected: dict[str, ChatRequest] = {}
        self.n_cached = 0
        self.n_tainted = 0
        self.n_live = 0
        self.n_placeholders = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        key = request_key(self.name, self.base_url, self.model_id, request)
        hit = self.cache.get(key)
        if hit is not None:
            self.n_cached += 1
            return hit.model_copy(update={"from_cache": True})
        if key in self.failed:
            raise ProviderError(f"batch item failed: {self.failed[key]}")
        if is_tainted(request):
            self.n_tainted += 1
        elif self.live is not None:
            self.n_live += 1
            return await self.live.complete(request)
        elif key not in self.pending:
            self.collected.setdefault(key, request)
        self.n_placeholders += 1
        return placeholder(key, self, request)

    async def aclose(self) -> None:
        return None


class StopDryPass(Exception):
    """Raised by :func:`stage_barrier` to end a dry pass at a stage boundary."""


def stage_barrier(*providers: Any) -> None:
    """Call between the stages of a pipeline: ends a dry pass once a stage got placeholder answers.

    Later stages may depend on earlier answers in ways no text check can see (which prompts
    pass a filter, which responses are refusals), so a dry pass never runs a stage on
    placeholder results; those calls are collected in a later round, once the answers are
    in the cache. With real providers (no :class:`CollectingProvider`) it does nothing.

    Raises:
        StopDryPass: some collector has given a placeholder answer.
    """
    n = sum(p.n_placeholders for p in providers if isinstance(p, CollectingProvider))
    if n:
        raise StopDryPass(f"{n} answer(s) of this stage are not known yet")


def _endpoint_moved(job: dict, provider: Provider) -> str:
    """Why a batch job cannot be followed from here: its endpoint and the one its model calls now."""
    return (f"{job['id']} of this run was submitted to {job['base_url'] or 'the SDK default endpoint'} "
            f"({job['provider']}:{job['model']}), but the model now calls "
            f"{provider.base_url or 'the SDK default endpoint'} (base_url, or the SDK's OPENAI_BASE_URL / "
            "ANTHROPIC_BASE_URL in this environment): resume where the night ran, with the same endpoint")


def lacks_logprobs(request: ChatRequest, result: ChatResult) -> bool:
    """True for a batch answer to a question asked with log-probabilities (``options`` and
    ``top_logprobs``) that came without them (not stopped by the provider's safety system): as a
    live answer still without them after its retries (:func:`lmra.providers.base.retry_call`), it
    is marked ``degraded``, counted, and never cached (break-it finding: cached, one glitch night's
    answers were read by every later run on that cache, turning its combiner to ``mean``)."""
    from lmra.providers.base import FILTER_FINISH_REASONS

    return (bool(request.options) and bool(request.top_logprobs) and result.option_probs is None
            and result.finish_reason not in FILTER_FINISH_REASONS)


def batch_failure_kind(message: str) -> str:
    """The per-model failure kind of a failed batch item, from its message: ``batch_http_NNN`` (the
    API's HTTP status for the item, e.g. 400: a request it refuses, which a resume does not fix),
    ``batch_missing`` (no result in the output), ``batch_expired``, ``batch_cancelled``, else
    ``batch_error`` (break-it finding: every kind was ``error``, an HTTP 400 and a missing item
    alike). Never one of the endpoint guard's kinds: a failed item does not stop the final pass."""
    import re

    m = re.match(r"HTTP (\d{3})\b", message)
    if m:
        return f"batch_http_{m.group(1)}"
    low = message.lower()
    if low.startswith("missing from the batch output"):
        return "batch_missing"
    if "expired" in low:
        return "batch_expired"
    if "cancel" in low:
        return "batch_cancelled"
    return "batch_error"


class BatchFailureGuard:
    """Inner provider for the real pass after batches: failed items raise, nothing is replaced.

    Put it *inside* the :class:`~lmra.cache.CachedProvider`, so it is reached only on a cache
    miss. Keeps ``inner``'s identity, so cache keys are unchanged.

    Args:
        inner: the real provider.
        failed: key → message of failed batch items.
        live_fallback: a miss that is *not* a failed item (a call the dry pass did not see,
            i.e. a pipeline that is not deterministic) is sent live when True, raises
            ProviderError when False (default).
    """

    def __init__(self, inner: Provider, failed: dict[str, str], *, live_fallback: bool = False):
        self.failed = failed
        self.live_fallback = live_fallback
        wrap_identity(self, inner)  # inner, name, model_id, base_url, supports_logprobs
        self.n_live = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        key = request_key(self.name, self.base_url, self.model_id, request)
        if key in self.failed:
            raise ProviderError(f"batch item failed: {self.failed[key]}", kind=batch_failure_kind(self.failed[key]))
        if not self.live_fallback:
            raise ProviderError("call is not in the batch results (the pipeline made a call its dry pass did not)")
        self.n_live += 1
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class _Ident:
    """Provider identity for cache rows written from batch results."""

    name: str
    base_url: str
    model_id: str


class BatchOrchestrator:
    """Collect, submit, poll and download batches for one run folder; resumable.

    Args:
        run_dir: the run folder; state goes to ``run_dir/batch/``.
        cache: the call cache the results are written to (same file as the normal run).
        providers: providers that may own jobs (needed to submit and to poll). On resume,
            jobs whose provider is not given are polled through a provider rebuilt from the
            ``model_config`` saved in the state (openai / anthropic with their key variables).
        poll_interval_s: seconds between polling sweeps (> 0).
        max_wait_s: give up waiting after this many seconds and raise :class:`BatchPending`
            (state saved; resume later). Default 26 h (the APIs' 24 h window plus slack).
        max_rounds: at most this many collect/submit rounds in :meth:`prefill` (≥ 1).
        budget: optional :class:`lmra.budget.Budget`. Each submission is booked first at its
            worst-case cost (estimated prompt tokens + ``max_tokens``, batch prices), raising
            ``BudgetExceeded`` before anything is submitted; downloads count the real usage.
        log: called with one-line progress messages.
        clock, sleep: injectable for tests.

    Raises:
        ValueError: ``poll_interval_s`` ≤ 0, ``max_rounds`` < 1, or a state file of an
            unknown version.
    """

    def __init__(self, run_dir: str | Path, cache: CallCache, *, providers: Sequence[Provider] = (),
                 poll_interval_s: float = 30.0, max_wait_s: float = 26 * 3600, max_rounds: int = 8,
                 budget: Any = None, log: Callable[[str], None] = lambda msg: None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        if poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be > 0")
        if max_rounds < 1:
            raise ValueError("max_rounds must be >= 1")
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / STATE_DIR
        self.state_path = self.dir / STATE_FILE
        self.cache = cache
        self.poll_interval_s = poll_interval_s
        self.max_wait_s = max_wait_s
        self.max_rounds = max_rounds
        self.budget = budget
        self.log = log
        self._clock = clock
        self._sleep = sleep
        self._providers: dict[str, Provider] = {provider_id(p): p for p in providers}
        self._backends: dict[str, Any] = {}
        self._bookings: list[Any] = []
        self._lock_depth = 0
        self._lock_fh = None
        #: counts of the calls made live (providers without a batch API) during dry passes
        self.live_stats = CallStats()
        cache_path = cache.path if cache.path == ":memory:" else str(Path(cache.path).resolve())
        self.state = load_state(self.run_dir) or {
            "version": STATE_VERSION, "cache": cache_path, "created": _now(), "updated": _now(), "rounds": 0,
            "jobs": []}
        if self.budget is not None:  # jobs downloaded by an earlier process count against the budget
            for job in self.jobs:
                if job["state"] == "downloaded":
                    self._account(job, None)
        cache.run_only.update(self.degraded_items())  # (a resumed run's dry passes read them too)

    # -- state ------------------------------------------------------------------------------
    def save(self) -> None:
        """Write the state file atomically (:func:`lmra.fileio.write_text`: a temporary file, synced,
        renamed; removed when the write fails).

        Raises:
            LmraIOError: the folder or file cannot be written (a full disk …), naming it (break-it
                finding: "OSError: [Errno 28]" named nothing, and left an empty state.json.tmp).
        """
        self._make_dir()
        self.state["updated"] = _now()
        write_text(self.state_path, json.dumps(self.state, indent=1, ensure_ascii=False))

    def _make_dir(self) -> None:
        """Create ``<run>/batch`` if needed.

        Raises:
            LmraIOError: it cannot be created, naming it."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LmraIOError(f"cannot create the batch folder ({io_reason(exc)})", path=self.dir) from None

    @contextlib.contextmanager
    def _locked(self):
        """Advisory file lock (re-entrant in this object): two processes never drive the same
        run's batches at once.

        Raises:
            LmraIOError: another process holds the lock (the CLI says so in one paragraph, exit 1).
        """
        if self._lock_depth == 0:
            import fcntl

            self._make_dir()
            try:
                fh = (self.dir / ".lock").open("w")
            except OSError as exc:
                raise LmraIOError(f"cannot create the batch lock file ({io_reason(exc)})", path=self.dir / ".lock") from None
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                raise LmraIOError(f"another lmra process is driving the batches of {self.run_dir} (an 'lmra audit "
                                  "--batch' or 'lmra batch resume' still running): wait for it to end, or stop it "
                                  "(Ctrl-C keeps the batches and their state) and run this command again",
                                  path=self.dir / ".lock") from None
            self._lock_fh = fh
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0 and self._lock_fh is not None:
                self._lock_fh.close()
                self._lock_fh = None

    @property
    def jobs(self) -> list[dict]:
        """The jobs of the state (dicts; see ``docs/batch.md`` for the fields)."""
        return self.state["jobs"]

    def failed_items(self) -> dict[str, str]:
        """Key → message of every failed item of every downloaded job."""
        out: dict[str, str] = {}
        for job in self.jobs:
            out.update(job.get("failed") or {})
        return out

    def degraded_items(self) -> dict[str, str]:
        """Key → result JSON of every downloaded answer that came without the log-probabilities it
        asked for (:func:`lacks_logprobs`): held for this run only (:attr:`CallCache.run_only`),
        never written to the call cache. Each job keeps them in its own file
        (``batch/<job>.degraded.jsonl``, written once at its download; a state file of an earlier
        version holds them in the job's ``degraded``).

        Raises:
            LmraIOError: a job's file is missing or unreadable, naming it (its answers would be
                asked again as if never bought)."""
        out: dict[str, str] = {}
        for job in self.jobs:
            out.update(job.get("degraded") or {})
            if job.get("degraded_file"):
                out.update(self._read_degraded(job))
        return out

    def _read_degraded(self, job: dict) -> dict[str, str]:
        """Key → result JSON of the job's ``degraded_file``.

        Raises:
            LmraIOError: it is missing, unreadable or holds a line that is not one of its rows."""
        path = self.run_dir / job["degraded_file"]
        out: dict[str, str] = {}
        try:
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        row = json.loads(line)
                        out[row["key"]] = json.dumps(row["result"], ensure_ascii=False)
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise LmraIOError(f"cannot read the answers of {job['id']} that came without log-probabilities "
                              f"({io_reason(exc) if isinstance(exc, OSError) else type(exc).__name__}); "
                              f"{job.get('n_degraded', '?')} answer(s) the batch bought are in it",
                              path=path) from None
        return out

    def answered_keys(self) -> set[str]:
        """The cache keys of every call in this run's downloaded jobs: answers the run's own
        batches bought, which its final pass reads from the cache (not an earlier run's)."""
        keys: set[str] = set()
        for job in self.jobs:
            if job["state"] != "downloaded":
                continue
            with (self.run_dir / job["requests_file"]).open(encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith('{"key": "') and line[73:75] == '",':  # (as submit writes them: fast)
                        keys.add(line[9:73])
                    elif line.strip():
                        keys.add(json.loads(line)["key"])
        return keys

    def pending_keys(self) -> set[str]:
        """Keys of the calls in jobs that are not downloaded yet."""
        keys: set[str] = set()
        for job in self.jobs:
            if job["state"] != "downloaded":
                keys.update(k for k, _ in self._read_requests(job))
        return keys

    def _read_requests(self, job: dict) -> list[tuple[str, ChatRequest]]:
        out = []
        with (self.run_dir / job["requests_file"]).open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    out.append((row["key"], ChatRequest.model_validate(row["request"])))
        return out

    # -- providers and backends -----------------------------------------------------------
    def _provider_for(self, job: dict) -> Provider:
        pid = job["provider_id"]
        if pid not in self._providers:
            cfg = job.get("model_config")
            if not cfg:
                raise BatchUnsupported(f"job {job['id']}: no provider given for {pid} and no saved model config")
            from lmra.config import ModelConfig
            from lmra.providers import make_provider

            # a judge's config has extra fields (combiner …): keep those of a plain model; the endpoint the job
            # was submitted to, whatever OPENAI_BASE_URL / ANTHROPIC_BASE_URL say now (break-it finding: a
            # resume polled the variable's new server, read its 404 as a forgotten batch, bought the night again)
            fields = {k: v for k, v in cfg.items() if k in ModelConfig.model_fields}
            if job.get("base_url"):
                fields["base_url"] = job["base_url"]
            provider = make_provider(ModelConfig.model_validate(fields))
            if (provider.base_url or "") != (job.get("base_url") or ""):  # the SDK default then, the variable's now
                raise LmraInputError(_endpoint_moved(job, provider), field="base_url")
            self._providers[pid] = provider
        return self._providers[pid]

    def check_job_endpoints(self) -> None:
        """:meth:`_provider_for` of every job: a job whose endpoint this environment no longer
        reaches (the SDK default then, ``OPENAI_BASE_URL`` now) is refused before anything is
        polled, downloaded or changed (break-it finding: ``--download-only`` read the other
        server's 404 as a forgotten batch and marked the paid job failed for good).

        Raises:
            LmraInputError: as :meth:`check_endpoints`.
        """
        for job in self.jobs:
            self._provider_for(job)

    def check_endpoints(self, providers: Sequence[Provider]) -> None:
        """Refuse to go on when a model of this run now calls another endpoint than its jobs were
        submitted to — ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` (or ``base_url``) changed between
        the night and its resume: the jobs' answers are keyed to the old endpoint, and the run
        would buy them again from the new one (break-it finding: exit 0, the night audited another
        endpoint than it began on).

        Raises:
            LmraInputError: naming the job, both endpoints and the field (``base_url``).
        """
        now = {provider_id(p) for p in providers}
        for job in self.jobs:
            if job["provider_id"] in now:
                continue
            for p in providers:
                if p.name == job["provider"] and p.model_id == job["model"] and (p.base_url or "") != (job["base_url"] or ""):
                    raise LmraInputError(_endpoint_moved(job, p), field="base_url")

    def _backend(self, job: dict) -> Any:
        pid = job["provider_id"]
        if pid not in self._backends:
            self._backends[pid] = backend_for(self._provider_for(job))
        return self._backends[pid]

    @staticmethod
    def has_batch_api(provider: Provider) -> bool:
        """True when :func:`backend_for` supports the provider."""
        try:
            backend_for(provider)
        except BatchUnsupported:
            return False
        return True

    # -- collect ----------------------------------------------------------------------------
    def live_provider(self, inner: Provider) -> Provider:
        """The chain through which a provider without a batch API makes its calls live in a dry
        pass: the call cache (counting into :attr:`live_stats`) under the run's budget, so that
        ``--max-calls`` / ``--max-cost`` stop these calls as they stop an audit's (break-it
        finding: they were made past the budget)."""
        cached = CachedProvider(inner, self.cache, self.live_stats)
        if self.budget is None:
            return cached
        from lmra.budget import BudgetedProvider

        return BudgetedProvider(cached, self.budget)

    async def collect(self, providers: Sequence[Provider], pipeline: Callable[..., Awaitable[Any]]
                      ) -> list[CollectingProvider]:
        """Run ``pipeline(*collectors)`` once as a dry pass; return the collectors.

        ``pipeline`` gets one :class:`CollectingProvider` per given provider, in order. Its
        return value is ignored; it must tolerate placeholder answers (text containing
        :data:`PLACEHOLDER_MARK`, no option probabilities) and should call
        :func:`stage_barrier` between stages. Providers without a batch API
        make their (untainted) calls live through the cache during the pass.
        """
        pending, failed = self.pending_keys(), self.failed_items()
        collectors = []
        for p in providers:
            live = None if self.has_batch_api(p) else self.live_provider(p)
            collectors.append(CollectingProvider(p, self.cache, pending=pending, failed=failed, live=live))
        try:
            await pipeline(*collectors)
        except StopDryPass:
            pass
        return collectors

    # -- submit -----------------------------------------------------------------------------
    async def submit(self, provider: Provider, items: dict[str, ChatRequest]) -> list[dict]:
        """Write, book and submit ``items`` (key → request) as one or more jobs for ``provider``.

        Jobs are cut at the API's request-count and byte limits. Each job's requests file and
        state entry are written before anything is sent.

        Returns:
            The new job dicts (state ``submitted``).

        Raises:
            BatchUnsupported: the provider has no batch API.
            BudgetExceeded: the budget refuses the submission (nothing is written or sent).
            ValueError: a key is not the request's cache key.
            ProviderError: a submission failed after the SDK's retries (the job stays
                ``prepared`` and is submitted by the next :meth:`wait` / resume).
        """
        with self._locked():
            pid = provider_id(provider)
            self._providers.setdefault(pid, provider)
            backend = backend_for(provider)
            self._backends.setdefault(pid, backend)
            keys = list(items)
            for k in keys:
                if request_key(provider.name, provider.base_url, provider.model_id, items[k]) != k:
                    raise ValueError(f"item key {k[:12]}… is not the request's cache key")
            if self.budget is not None:
                self._bookings.append(self.budget.reserve(provider.name, provider.model_id,
                                                          [items[k] for k in keys], batch=True))
            lines = {k: backend.encode(k, items[k]) for k in keys}
            chunks: list[list[str]] = [[]]
            size = 0
            for k in keys:
                n = len(lines[k].encode("utf-8")) + 1
                if chunks[-1] and (len(chunks[-1]) >= backend.max_requests or size + n > backend.max_bytes):
                    chunks.append([])
                    size = 0
                chunks[-1].append(k)
                size += n
            cfg = getattr(base_provider(provider), "cfg", None)
            new_jobs = []
            self._make_dir()
            for chunk in chunks:
                job_id = f"job-{len(self.jobs) + 1:04d}"
                req_file = f"{STATE_DIR}/{job_id}.requests.jsonl"
                with atomic_open(self.run_dir / req_file) as fh:  # (a full disk: named, no cut file)
                    for k in chunk:
                        fh.write(json.dumps({"key": k, "request": items[k].cache_payload()}, ensure_ascii=False)
                                 + "\n")
                job = {"id": job_id, "provider": provider.name, "base_url": provider.base_url,
                       "model": provider.model_id, "provider_id": pid,
                       "model_config": cfg.model_dump(mode="json") if cfg is not None else None,
                       "backend": backend.name, "n_requests": len(chunk), "requests_file": req_file,
                       "state": "prepared", "remote": {}, "prepared_at": _now(), "submitted_at": None,
                       "ended_at": None, "downloaded_at": None, "n_succeeded": 0, "n_failed": 0, "failed": {},
                       "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "cost_usd": None}
                self.jobs.append(job)
                new_jobs.append((job, [lines[k] for k in chunk]))
            self.save()
            for job, job_lines in new_jobs:
                await self._submit_job(job, job_lines)
            return [j for j, _ in new_jobs]

    async def _submit_job(self, job: dict, lines: list[str] | None = None) -> None:
        backend = self._backend(job)
        if lines is None:
            lines = [backend.encode(k, r) for k, r in self._read_requests(job)]
        meta = {"lmra_run": self.run_dir.name[:500], "lmra_job": job["id"]}
        await backend.submit(lines, remote=job["remote"], metadata=meta, checkpoint=self.save)
        job["state"] = "submitted"
        job["submitted_at"] = _now()
        self.save()
        self.log(f"{job['id']}: submitted {job['n_requests']} call(s) to {job['provider']} "
                 f"'{job['model']}' as batch {job['remote'].get('batch_id')}")

    # -- poll and download -----------------------------------------------------------------
    async def poll_once(self) -> list[dict]:
        """Poll every submitted, unfinished job once (no download); save and return the jobs."""
        with self._locked():
            for job in self.jobs:
                if job["state"] == "submitted" and not job.get("ended_at"):
                    if await self._backend(job).poll(job["remote"]):
                        job["ended_at"] = _now()
            self.save()
            return self.jobs

    async def _download(self, job: dict) -> None:
        from lmra.budget import cost_of
        from lmra.providers.base import Usage, oversized_cut

        backend = self._backend(job)
        provider = self._provider_for(job)
        ident = _Ident(provider.name, provider.base_url, provider.model_id)
        requests = dict(self._read_requests(job))
        if job["remote"].get("status") == GONE:  # nothing to download from a batch the provider forgot
            results, errors = {}, {key: f"{job['remote']['gone']} (submit again: lmra batch resume --retry-failed)"
                                   for key in requests}
        else:
            results, errors = await backend.fetch(job["remote"], requests)
        usages = []
        degraded: dict[str, str] = {}
        n_cut = 0  # of them, answers far longer than max_tokens allows (oversized_cut)
        for key, result in results.items():
            req = requests[key]
            if request_key(ident.name, ident.base_url, ident.model_id, req) != key:
                errors[key] = "result key does not match the request's cache key"
                continue
            cut = oversized_cut(result, req)
            if cut is not None:  # far beyond max_tokens, as a live answer: cut, counted, never cached
                degraded[key] = cut.model_dump_json()
                n_cut += 1
            elif lacks_logprobs(req, result):  # as a live answer still without them: counted, never cached
                degraded[key] = result.model_copy(update={"degraded": "no_logprobs"}).model_dump_json()
            else:
                self.cache.put(key, ident, req, result)  # type: ignore[arg-type]
            usages.append(result.usage)
        self.cache.run_only.update(degraded)
        job.pop("degraded", None)  # (a state file of an earlier version kept them here)
        job.pop("degraded_file", None)
        if degraded:  # their own file, written once: the state file is rewritten at every poll
            job["degraded_file"] = f"{STATE_DIR}/{job['id']}.degraded.jsonl"
            with atomic_open(self.run_dir / job["degraded_file"]) as fh:  # (a full disk: named, no cut file)
                for key in sorted(degraded):
                    fh.write(json.dumps({"key": key, "result": json.loads(degraded[key])}, ensure_ascii=False)
                             + "\n")
        job["n_succeeded"] = len(usages)
        job["n_degraded"] = len(degraded)
        job["n_failed"] = len(errors)
        job["failed"] = dict(sorted(errors.items()))
        job["usage"] = {"prompt_tokens": sum(u.prompt_tokens for u in usages),
                        "completion_tokens": sum(u.completion_tokens for u in usages)}
        prices = self.budget.prices if self.budget is not None else None
        job["cost_usd"] = cost_of(Usage(**job["usage"]), job["provider"], job["model"], prices=prices, batch=True)
        job["state"] = "downloaded"
        job["downloaded_at"] = _now()
        self.save()
        if self.budget is not None:
            self._account(job, usages)
        n_bare = len(degraded) - n_cut
        self.log(f"{job['id']}: downloaded {job['n_succeeded']} result(s), {job['n_failed']} failed"
                 + (f", {n_bare} without the log-probabilities asked for (not cached: their questions are "
                    "estimated by sampling, as in a live run)" if n_bare else "")
                 + (f", {n_cut} far longer than max_tokens allows (cut to that length, not cached)" if n_cut else ""))
        for note in job["remote"].get("output_notes") or []:  # unreadable lines, results for unknown calls
            self.log(f"{job['id']}: {note}")

    def _account(self, job: dict, usages: list | None) -> None:
        """Count a downloaded job against the budget (totals only for jobs of an earlier process;
        cost is linear in tokens, so one aggregate usage plus empty ones gives the same cost)."""
        from lmra.providers.base import Usage

        if usages is None:
            n = job["n_succeeded"]
            usages = [Usage(**job["usage"])] + [Usage()] * (n - 1) if n else []
        self.budget.account(job["provider"], job["model"], usages, job["n_failed"], batch=True)

    async def wait(self) -> list[dict]:
        """Submit prepared jobs, poll submitted ones, download ended ones, until all are downloaded.

        At most ``max_wait_s / poll_interval_s + 1`` polling sweeps.

        Returns:
            All jobs.

        Raises:
            BatchPending: ``max_wait_s`` elapsed with jobs still running (state saved).
            ProviderError: an API call failed after the SDK's retries (state saved; resume).
        """
        with self._locked():
            for job in self.jobs:
                if job["state"] == "prepared":
                    await self._submit_job(job)
            deadline = self._clock() + self.max_wait_s
            while True:
                for job in [j for j in self.jobs if j["state"] == "submitted"]:
                    if not job.get("ended_at"):
                        try:
                            ended = await self._backend(job).poll(job["remote"])
                        except ProviderError as exc:
                            if exc.kind != "http_404":
                                raise
                            # the provider forgot the batch: its items fail (counted, with why), and
                            # `lmra batch resume --retry-failed` submits them again (it was stuck for good)
                            job["remote"] |= {"status": GONE, "gone": str(exc)}
                            self.log(f"{job['id']}: {exc}; its items are counted as failed (resume with "
                                     "--retry-failed to submit them again)")
                            ended = True
                        if ended:
                            job["ended_at"] = _now()
                        self.save()
                    if job.get("ended_at"):
                        await self._download(job)
                running = [j for j in self.jobs if j["state"] == "submitted"]
                if not running:
                    if self.budget is not None:  # downloads counted the real use
                        for r in self._bookings:
                            self.budget.release(r)
                        self._bookings.clear()
                    return self.jobs
                if self._clock() >= deadline:
                    raise BatchPending(
                        f"{len(running)} batch job(s) still running after {self.max_wait_s:g} s "
                        f"({', '.join(j['id'] + ': ' + str(j['remote'].get('status')) for j in running)}); "
                        f"state saved in {self.state_path}; continue with `lmra batch resume {self.run_dir}`")
                self.log(f"waiting {self.poll_interval_s:g} s: " + "; ".join(
                    f"{j['id']} {j['remote'].get('status')} {j['remote'].get('counts', {})}" for j in running))
                await self._sleep(self.poll_interval_s)

    async def cancel(self) -> list[dict]:
        """Ask the API to cancel every submitted, unfinished job; their results (finished items
        included) are downloaded by the next :meth:`wait`."""
        with self._locked():
            for job in self.jobs:
                if job["state"] == "submitted" and not job.get("ended_at"):
                    await self._backend(job).cancel(job["remote"])
                    job["cancel_requested_at"] = _now()
            self.save()
            return self.jobs

    def retry_failed(self) -> int:
        """Forget the failed items of downloaded jobs, so that the next :meth:`prefill` submits
        them again (kept under ``failed_before`` in each job). Returns how many were cleared."""
        n = 0
        for job in self.jobs:
            if job.get("failed"):
                job.setdefault("failed_before", {}).update(job["failed"])
                n += len(job["failed"])
                job["failed"] = {}
        self.save()
        return n

    # -- the whole flow ---------------------------------------------------------------------
    async def prefill(self, providers: Sequence[Provider], pipeline: Callable[..., Awaitable[Any]]) -> dict:
        """Fill the cache with every call ``pipeline`` makes, through batch APIs.

        Args:
            providers: the real providers, in the order ``pipeline`` takes them.
            pipeline: ``async pipeline(*providers)`` — the stages to run. It must be
                deterministic given the answers (same inputs → same requests).

        Returns:
            :meth:`summary`.

        Raises:
            BatchPending, ProviderError: as :meth:`wait` (state saved; resume).
            BudgetExceeded: a submission would pass the budget (nothing of it is submitted).
            BatchRoundsExhausted: still collecting after ``max_rounds`` rounds (state saved; resume).
            RuntimeError: calls depend on answers no batch will produce.
        """
        with self._locked():
            await self.wait()
            for _ in range(self.max_rounds):
                failed_before = self.live_stats.failed
                collectors = await self.collect(providers, pipeline)
                if self.live_stats.failed > failed_before:  # said, not only in the manifest (break-it finding)
                    self.log(f"{self.live_stats.failed - failed_before} live call(s) of models without a batch API "
                             "failed in this collecting pass; the next pass makes them again (a live audit would "
                             "count them as failed pairs; all are in manifest.json, batch.live_calls_in_dry_pass)")
                groups: dict[str, tuple[Provider, dict[str, ChatRequest]]] = {}
                for p, c in zip(providers, collectors):
                    if c.collected:
                        groups.setdefault(provider_id(p), (p, {}))[1].update(c.collected)
                tainted = sum(c.n_tainted for c in collectors)
                if not groups:
                    if tainted:
                        raise RuntimeError(f"{tainted} call(s) depend on answers that no batch will produce")
                    return self.summary()
                self.state["rounds"] = self.state.get("rounds", 0) + 1
                n = sum(len(items) for _, items in groups.values())
                self.log(f"round {self.state['rounds']}: {n} uncached call(s) to submit"
                         + (f", {tainted} waiting for their answers" if tainted else ""))
                for p, items in groups.values():
                    await self.submit(p, items)
                await self.wait()
            raise BatchRoundsExhausted(
                f"batch calls still being discovered after {self.max_rounds} rounds (each round submits the calls "
                f"the answers so far make known); the state is saved: 'lmra batch resume {self.run_dir}' runs more "
                "rounds without paying again for those done")

    def guard(self, provider: Provider, *, live_fallback: bool = False) -> Provider:
        """Wrap a provider for the real pass after :meth:`prefill` (see :class:`BatchFailureGuard`).

        Providers without a batch API are returned unchanged (their calls were made live).
        """
        if not self.has_batch_api(provider):
            return provider
        return BatchFailureGuard(provider, self.failed_items(), live_fallback=live_fallback)

    def summary(self) -> dict:
        """JSON-able totals for ``manifest.json``: jobs, calls, failures, tokens, cost, live calls."""
        return summarize(self.state) | {"live_calls_in_dry_pass": self.live_stats.as_dict()}


def load_state(run_dir: str | Path) -> dict | None:
    """The batch state of a run folder, or None when it has none.

    Raises:
        ValueError: the state file is from an unknown version.
    """
    path = Path(run_dir) / STATE_DIR / STATE_FILE
    if not path.exists():
        return None
    state = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a batch state (a JSON {type(state).__name__})")
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"{path}: unknown batch state version {state.get('version')}")
    return state


def summarize(state: dict) -> dict:
    """Totals over a batch state: jobs per state, calls, succeeded, failed, tokens, cost.

    ``cost_usd`` is None when any job's model has no price (or is not downloaded yet).
    """
    jobs = state["jobs"]
    costs = [j.get("cost_usd") for j in jobs if j["state"] == "downloaded"]
    return {
        "jobs": len(jobs),
        "jobs_by_state": {s: sum(j["state"] == s for j in jobs) for s in ("prepared", "submitted", "downloaded")},
        "rounds": state.get("rounds", 0),
        "calls": sum(j["n_requests"] for j in jobs),
        "succeeded": sum(j.get("n_succeeded", 0) for j in jobs),
        "failed": sum(j.get("n_failed", 0) for j in jobs),
        "degraded": sum(j.get("n_degraded", 0) for j in jobs),
        "prompt_tokens": sum(j["usage"]["prompt_tokens"] for j in jobs),
        "completion_tokens": sum(j["usage"]["completion_tokens"] for j in jobs),
        "cost_usd": sum(costs) if costs and all(c is not None for c in costs) else None,
        "failed_items": [f"{j['id']} {k[:12]}…: {m}" for j in jobs for k, m in (j.get("failed") or {}).items()][:50],
    }


# -- the audit in batch mode ---------------------------------------------------------------
def audit_pipeline(audit: Any, inputs: Any, orch: "BatchOrchestrator") -> Callable[..., Awaitable[None]]:
    """The stages of :meth:`lmra.audit.Audit.arun` (``Audit._stages``) as a dry-pass pipeline
    with stage barriers. Returns ``async pipeline(target, judge[, judge2])``. ``orch``: the
    orchestrator whose :meth:`BatchOrchestrator.live_provider` makes the live calls of a
    provider without a batch API, within its model's rate limits and calls in flight.
    """
    cfg = audit.cfg

    async def pipeline(target: Provider, judge: Provider, judge2: Provider | None = None) -> None:
        from lmra.providers.ratelimit import ModelLimits

        ps = (target, judge) + ((judge2,) if judge2 is not None else ())
        # calls in flight sized as in the audit (concurrency = "auto"): a provider without a
        # batch API makes its calls live in the pass, within its model's limits and capacity
        models = list(zip(ps, (cfg.target, cfg.judge, cfg.judge2), ("target", "judge", "judge2")))
        limits = ModelLimits.of(cfg.concurrency, [(getattr(p, "inner", p), m) for p, m, _ in models])
        for p, m, role in models:
            if isinstance(p, CollectingProvider) and p.live is not None:
                p.live = orch.live_provider(limits.wrap(p.inner, m, role))
        sem = asyncio.Semaphore(limits.run_bound())
        await audit._stages(inputs, target, judge, judge2, sem, barrier=lambda: stage_barrier(*ps))

    return pipeline


async def arun_batched(audit: Any, *, poll_interval_s: float = 30.0, max_wait_s: float = 26 * 3600,
                       budget: Any = None, log: Callable[[str], None] = lambda msg: None,
                       live_fallback: bool = False) -> Any:
    """Run an :class:`lmra.audit.Audit` with every uncached call sent through batch APIs.

    Dry passes over the audit's stages (progress muted; see :func:`audit_pipeline`) collect
    the calls; :meth:`BatchOrchestrator.prefill` submits them one stage at a time (e.g.
    round 1 target responses, round 2 LMRA ratings), waits and fills the cache; then
    ``audit.arun()`` runs normally from the cache, with failed batch items raising
    ProviderError (counted as failed calls and pairs, never replaced). The run folder gets
    ``batch/state.json`` and ``manifest.json`` a ``batch`` section. A provider without a
    batch API (llamacpp, custom) makes its calls live during the dry passes.

    Args:
        audit: the audit (its ``run_dir`` holds the batch state; run again with the same
            ``run_dir`` to resume).
        poll_interval_s, max_wait_s, budget, log: see :class:`BatchOrchestrator`.
        live_fallback: see :class:`BatchFailureGuard`.

    Returns:
        The :class:`~lmra.audit.AuditResult`.

    Raises:
        BatchPending: batches still running after ``max_wait_s`` (resume with
            ``lmra batch resume RUN_DIR``).
        BudgetExceeded, ProviderError, LmraInputError: as the audit and the orchestrator.
    """
    from lmra.audit import _Progress
    from lmra.runfolder import jsonable
    from lmra.config import dump_config

    cfg = audit.cfg
    inputs = audit.load_inputs()
    providers = [audit._target_provider(), audit._judge_provider()]
    j2 = audit._judge2_provider()
    if j2 is not None:
        providers.append(j2)
    if budget is not None:  # before any call, live or batched, and before the cache (as Audit.arun)
        audit.check_cost_limit()
    audit.claim_dir()
    started = _now()
    write_text(audit.run_dir / "config.toml", dump_config(cfg))
    cache = CallCache(cfg.cache)
    endpoints_checked = False
    try:
        orch = BatchOrchestrator(audit.run_dir, cache, providers=providers, poll_interval_s=poll_interval_s,
                                 max_wait_s=max_wait_s, budget=budget, log=log)
        orch.check_endpoints(providers)  # (before the manifest says running: a refusal leaves the night as it was)
        endpoints_checked = True
        _record_running(audit, providers, started)
        if getattr(audit, "allow_unvalidated_judge", False):  # the waiver holds for `lmra batch resume` too
            orch.state["allow_unvalidated_judge"] = True
        saved_progress = audit.progress
        audit.progress = _Progress()
        try:
            await orch.prefill(providers, audit_pipeline(audit, inputs, orch))
        finally:
            audit.progress = saved_progress
        summary = orch.summary()
        audit._target = orch.guard(providers[0], live_fallback=live_fallback)
        audit._judge = orch.guard(providers[1], live_fallback=live_fallback)
        if j2 is not None:
            audit._judge2 = orch.guard(j2, live_fallback=live_fallback)
    except BaseException as exc:
        if endpoints_checked or not isinstance(exc, LmraInputError):  # (a wrong endpoint at resume: as it was)
            _record_unfinished(audit, providers, started, exc)
        audit.release_dir()  # batches pending, killed, failed: a resume (even in this process) takes the folder
        raise
    finally:
        cache.close()
    started = _stopped_start(audit.run_dir) or started
    audit.run_only_answers = orch.degraded_items()  # the final pass reads them (counted as degraded), unstored
    audit.batch_keys = orch.answered_keys()  # this night's answers, though read from the cache (judge check)
    result = await audit.arun()
    result.manifest["started"] = started  # the night's start, not the resume's (break-it round 2)
    result.manifest["batch"] = summary
    # the calls made live in the dry passes are this run's fresh calls (the final pass read them
    # from the cache): counted so in the manifest, the console's call line and the report
    result.manifest["calls"] = with_live_calls(result.manifest["calls"], orch.live_stats.as_dict())
    write_json(audit.run_dir / "manifest.json", jsonable(result.manifest))
    return result


#: the status of a run folder whose batches were still running when the command stopped waiting
BATCH_PENDING = "batch_pending"


def _stopped_start(run_dir: str | Path) -> str | None:
    """The ``started`` of the manifest :func:`_record_unfinished` wrote (a resumed run's first start)."""
    if not stopped_in_batch(run_dir):
        return None
    try:
        started = json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8")).get("started")
    except (OSError, ValueError):
        return None
    return started if isinstance(started, str) else None


def stopped_in_batch(run_dir: str | Path) -> bool:
    """Whether a run folder's ``manifest.json`` is the one :func:`_record_unfinished` wrote (the run
    stopped before its audit pass)."""
    try:
        m = json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and m.get("stopped_in") == "batch"


def _record_unfinished(audit: Any, providers: Sequence[Provider], started: str, exc: BaseException) -> None:
    """Write a ``manifest.json`` for a batched run stopped before its audit pass began (its batches
    pending, failed to submit, interrupted), unless the folder has one: ``batch_pending``,
    ``interrupted`` or ``failed`` with the ``stop_reason``, so that ``lmra history`` lists the night
    among those that did not finish (fresh-user finding: the folder had no manifest, and the night
    was a silent gap). ``lmra batch resume`` continues it and writes the run's own manifest."""
    from lmra.runstate import stop_record

    path = audit.run_dir / "manifest.json"
    before = _batch_stage_manifest(path)
    if before is None:
        return  # the audit pass's own manifest (or one that cannot be read): it stands
    from lmra.budget import BudgetExceeded

    if isinstance(exc, BatchPending):
        status, reason = BATCH_PENDING, f"{BATCH_PENDING}: {exc} — continue with 'lmra batch resume {audit.run_dir}'"
    elif isinstance(exc, BudgetExceeded):
        status, reason = "stopped_by_budget", f"stopped by the budget: {exc} (the numbers: batch/state.json)"
    else:
        status, reason = stop_record(exc, redact=audit.cfg.redact)
    if status == "interrupted":
        state = load_state(audit.run_dir) or {}
        running = [j for j in state.get("jobs") or [] if j.get("state") == "submitted"]
        if running:  # they go on at the provider (break-it round 2: the history said only "interrupted")
            reason += (f"; {len(running)} batch job(s) submitted go on at the provider — continue with "
                       f"'lmra batch resume {audit.run_dir}' (a new 'lmra audit --batch' would pay for them again)")
    manifest = _batch_manifest(audit, providers, before.get("started", started)) | {
        "status": status, "stop_reason": reason, "finished": _now()}
    try:
        write_json(path, manifest)
    except LmraIOError:
        pass  # the disk is full: the folder stays without a manifest (the error is what the command says)


def _batch_stage_manifest(path: Path) -> dict | None:
    """The manifest at ``path`` while the run is in its batch rounds (``stopped_in: batch``; a
    folder without one counts as such), or None when the audit pass wrote its own (or it cannot
    be read): only the former may be rewritten by the batch stage."""
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"stopped_in": "batch"}
    except (OSError, ValueError):
        return None
    return before if isinstance(before, dict) and before.get("stopped_in") == "batch" else None


def _batch_manifest(audit: Any, providers: Sequence[Provider], started: str) -> dict:
    """The manifest of a batched run before its audit pass: ``stopped_in: batch``, its start,
    seed, batch folder and models (the status is the caller's)."""
    roles = dict(zip(("target", "judge", "judge2"), providers))
    manifest = {"stopped_in": "batch", "started": started, "seed": audit.cfg.seed,
                "batch": {"folder": str(audit.run_dir / "batch")}}
    return manifest | {role: {"provider": p.name, "model": p.model_id} for role, p in roles.items()}


def _record_running(audit: Any, providers: Sequence[Provider], started: str) -> None:
    """Write ``manifest.json`` ``running`` (``stopped_in: batch``) as the batch rounds start, unless
    the folder has the audit pass's own manifest: a process killed while it waits for its
    batches (a reboot, an OOM kill, a CI timeout: the likeliest time, a batch night is mostly
    waiting) leaves a folder ``lmra history`` lists as ``stale``, with the resume command (break-it
    finding: no manifest, the night was invisible). A resumed run keeps its first start.

    Raises:
        LmraIOError: the manifest cannot be written (a full disk: nothing has been submitted yet).
    """
    from lmra.runstate import RUNNING

    path = audit.run_dir / "manifest.json"
    before = _batch_stage_manifest(path)
    if before is None:
        return  # the audit pass's own manifest (or one that cannot be read): it stands
    write_json(path, _batch_manifest(audit, providers, before.get("started", started)) | {
        "status": RUNNING, "pid": os.getpid()})


#: the counts of a :meth:`CallStats.as_dict` that add up from the live calls of the dry passes
_LIVE_ADDED = ("fresh", "failed", "retries", "http_429", "http_5xx", "http_4xx", "timeouts", "connection_errors",
               "malformed", "no_choices", "no_logprobs", "no_usage", "oversized", "replaced_characters", "implausible_usage", "unreadable_cached", "degraded", "waited",
               "prompt_tokens_fresh", "completion_tokens_fresh")


def with_live_calls(calls: dict, live: dict) -> dict:
    """``calls`` (the final pass's :meth:`CallStats.as_dict`, total and ``by_model``) with the
    calls made live during the dry passes (``live``, the same form) counted as fresh: their
    counts, faults, tokens, failures and errors added, and as many answers (and their tokens)
    taken off ``cached`` — the final pass read each of them from the cache. Break-it finding:
    a batch run whose chatbot has no batch API said "0 fresh, 540 from cache" after 540 live
    calls. Returns a new dict."""
    def merged(c: dict, lv: dict) -> dict:
        out = dict(c)
        for k in _LIVE_ADDED:
            out[k] = int(c.get(k) or 0) + int(lv.get(k) or 0)
        moved = min(int(lv.get("fresh") or 0), int(c.get("cached") or 0))
        out["cached"] = int(c.get("cached") or 0) - moved
        if moved:  # the tokens of the answers moved, in proportion (each answer's own are not kept)
            share = moved / max(int(c.get("cached") or 0), 1)
            for k in ("prompt_tokens_cached", "completion_tokens_cached"):
                out[k] = int(c.get(k) or 0) - round(int(c.get(k) or 0) * share)
        kinds = dict(c.get("failed_by_kind") or {})
        for k, n in (lv.get("failed_by_kind") or {}).items():
            kinds[k] = kinds.get(k, 0) + n
        out["failed_by_kind"] = dict(sorted(kinds.items()))
        out["errors"] = (list(lv.get("errors") or []) + list(c.get("errors") or []))[:50]
        return out

    if not live or not (live.get("fresh") or live.get("failed")):
        return calls
    out = merged(calls, live)
    for part in ("by_model", "by_role"):
        if calls.get(part) or live.get(part):
            each = dict(calls.get(part) or {})
            for label, lv in (live.get(part) or {}).items():
                each[label] = merged(each.get(label) or {}, lv)
            out[part] = dict(sorted(each.items()))
    return out

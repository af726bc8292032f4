"""SQLite call cache: one row per model call, keyed on every input that changes the output.

The key (see :func:`lmra.providers.base.request_key`) covers provider, base URL, model and
the whole :class:`~lmra.providers.base.ChatRequest` (messages, temperature, max tokens,
seed, top_logprobs, options, stop, sample index). Each finished call is committed at once
(WAL journal), so a run stopped by Ctrl-C or ``kill -9`` loses no finished call and a
re-run of the same config makes zero new calls.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lmra.providers.base import ChatRequest, ChatResult, Provider, request_key

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    base_url TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class CallCache:
    """A thread-safe SQLite store of finished calls.

    Args:
        path: database file (created with its parent folder); ``":memory:"`` for tests.
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def get(self, key: str) -> ChatResult | None:
        """The cached result for ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT result FROM calls WHERE key = ?", (key,)).fetchone()
        return ChatResult.model_validate_json(row[0]) if row else None

    def put(self, key: str, provider: Provider, request: ChatRequest, result: ChatResult) -> None:
        """Store one finished call (committed immediately)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, provider.name, provider.base_url, provider.model_id,
                 json.dumps(request.cache_payload(), ensure_ascii=False), result.model_dump_json(), time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass
class CallStats:
    """Counts of calls made through a :class:`CachedProvider` during one run."""

    fresh: int = 0
    cached: int = 0
    failed: int = 0
    prompt_tokens_fresh: int = 0
    completion_tokens_fresh: int = 0
    prompt_tokens_cached: int = 0
    completion_tokens_cached: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "errors"} | {"errors": self.errors[:50]}


class CachedProvider:
    """Wrap a provider so that every call goes through the cache and is counted."""

    def __init__(self, inner: Provider, cache: CallCache, stats: CallStats | None = None):
        self.inner = inner
        self.cache = cache
        self.stats = stats or CallStats()
        self.name = inner.name
        self.model_id = inner.model_id
        self.base_url = inner.base_url
        self.supports_logprobs = inner.supports_logprobs

    async def complete(self, request: ChatRequest) -> ChatResult:
        key = request_key(self.inner.name, self.inner.base_url, self.inner.model_id, request)
        hit = self.cache.get(key)
        if hit is not None:
            self.stats.cached += 1
            self.stats.prompt_tokens_cached += hit.usage.prompt_tokens
            self.stats.completion_tokens_cached += hit.usage.completion_tokens
            return hit.model_copy(update={"from_cache": True})
        try:
            result = await self.inner.complete(request)
        except Exception as exc:
            self.stats.failed += 1
            self.stats.errors.append(f"{type(exc).__name__}: {exc}")
            raise
        self.cache.put(key, self.inner, request, result)
        self.stats.fresh += 1
        self.stats.prompt_tokens_fresh += result.usage.prompt_tokens
        self.stats.completion_tokens_fresh += result.usage.completion_tokens
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()

"""Client-side rate limits around any provider: requests per minute and tokens per minute.

:class:`RateLimitedProvider` wraps an object with the :class:`~lmra.providers.base.Provider`
protocol and delays each call so that, over any interval, the calls it lets through stay
within ``requests_per_minute`` and their tokens within ``tokens_per_minute``. It keeps the
inner provider's ``name``, ``model_id`` and ``base_url``, so cache keys do not change; put
it *inside* :class:`~lmra.cache.CachedProvider` so that cache hits are never delayed::

    CachedProvider(RateLimitedProvider(make_provider(cfg), requests_per_minute=500,
                                       tokens_per_minute=200_000), cache, stats)

Algorithm: a generic cell-rate algorithm (GCRA, the "virtual scheduling" form of a token
bucket) per limit. Each limit keeps a theoretical arrival time ``tat``; a call of cost ``c``
may start at ``max(tat - burst, now)`` and moves ``tat`` forward by ``c / rate``. The cost
is 1 for the request limit and, for the token limit, an estimate made *before* the call
(:func:`estimate_tokens`: prompt characters / 4 plus ``max_tokens``, which is also how the
big APIs count a request against their token limit). When the call returns, the estimate is
corrected with the real ``usage`` (prompt + completion tokens): ``tat`` moves by
``(actual - estimate) / rate`` and waiting calls are woken, so a pessimistic estimate does
not throttle the run. Waiting calls are served first in, first out.

Retries are *not* done here: the official SDKs retry 429/5xx/timeouts with backoff
(``max_retries``); a call that still fails raises :class:`~lmra.providers.base.ProviderError`
and is counted as failed by :class:`~lmra.cache.CachedProvider`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lmra.providers.base import ChatRequest, ChatResult, Provider

#: Characters per token assumed by :func:`estimate_tokens` (a common rule of thumb for
#: English with BPE tokenizers; errs on the high side of the token count for most text).
CHARS_PER_TOKEN = 4.0
#: Tokens added per message for role and separators, and per request for the reply primer.
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REQUEST = 3


def estimate_prompt_tokens(request: ChatRequest) -> int:
    """Estimated input tokens of ``request``: ``ceil(chars / 4)`` per message plus 4 per message plus 3.

    Returns:
        A positive integer. It is an estimate, never a tokenizer count.
    """
    total = TOKENS_PER_REQUEST
    for m in request.messages:
        total += TOKENS_PER_MESSAGE + int(-(-len(m.content) // CHARS_PER_TOKEN))
    return max(1, total)


def estimate_tokens(request: ChatRequest) -> int:
    """Worst-case tokens of one call: estimated prompt tokens plus ``max_tokens``."""
    return estimate_prompt_tokens(request) + request.max_tokens


class _Gcra:
    """One limit: ``rate`` units per second with a burst allowance of ``burst_s`` seconds."""

    def __init__(self, per_minute: float, burst_s: float):
        if per_minute <= 0:
            raise ValueError("a rate limit must be > 0 per minute")
        self.rate = per_minute / 60.0
        self.burst_s = burst_s
        self.tat = -float("inf")

    def earliest(self) -> float:
        """Monotonic time at which the next unit may start."""
        return self.tat - self.burst_s

    def take(self, cost: float, at: float) -> None:
        self.tat = max(self.tat, at) + cost / self.rate

    def adjust(self, delta_cost: float) -> None:
        self.tat += delta_cost / self.rate


class RateLimiter:
    """Requests-per-minute and tokens-per-minute limits shared by any number of calls.

    Args:
        requests_per_minute: at most this many call starts per minute (> 0), or None for no limit.
        tokens_per_minute: at most this many tokens per minute (> 0), or None for no limit.
        burst_s: how many seconds' worth of the rate may start at once after an idle
            period (≥ 0). 0 spaces calls evenly, so that *every* window, not just each
            minute on average, stays within the limit.
        max_catchup_s: a waiting call woken up to this many seconds late (event-loop
            lateness) is booked at its scheduled slot, so the achieved rate does not fall
            below the limit; a longer stall is not made up by a burst (≥ 0).
        clock: monotonic clock in seconds (injectable for tests).

    Raises:
        ValueError: a limit ≤ 0, or a negative ``burst_s`` or ``max_catchup_s``.
    """

    def __init__(self, requests_per_minute: float | None = None, tokens_per_minute: float | None = None, *,
                 burst_s: float = 0.0, max_catchup_s: float = 0.02, clock: Callable[[], float] = time.monotonic):
        if burst_s < 0 or max_catchup_s < 0:
            raise ValueError("burst_s and max_catchup_s must be >= 0")
        self.max_catchup_s = max_catchup_s
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._req = _Gcra(requests_per_minute, burst_s) if requests_per_minute is not None else None
        self._tok = _Gcra(tokens_per_minute, burst_s) if tokens_per_minute is not None else None
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._changed: asyncio.Event | None = None
        #: total seconds calls spent waiting for the limiter (for reports and benchmarks)
        self.waited_s = 0.0

    def _primitives(self) -> tuple[asyncio.Lock, asyncio.Event]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # asyncio primitives belong to one event loop
            self._loop, self._lock, self._changed = loop, asyncio.Lock(), asyncio.Event()
        return self._lock, self._changed  # type: ignore[return-value]

    async def acquire(self, tokens: int = 0) -> None:
        """Wait until a call with ``tokens`` estimated tokens may start, then book it.

        Calls are served in arrival order. A single call larger than the per-minute token
        limit is let through alone (it cannot be split) and delays the following calls.
        """
        if self._req is None and self._tok is None:
            return
        lock, changed = self._primitives()
        t_in = self._clock()
        async with lock:
            while True:
                now = self._clock()
                start = max(g.earliest() for g in (self._req, self._tok) if g is not None)
                if start <= now:
                    break
                changed.clear()
                try:  # woken early when a finished call returns unused tokens
                    await asyncio.wait_for(changed.wait(), timeout=start - now)
                except (asyncio.TimeoutError, TimeoutError):
                    pass
            # Book the call at its scheduled slot when it was woken only slightly late (so that
            # event-loop lateness does not add up to a lower rate than configured), but never
            # more than max_catchup_s in the past (no burst to make up for a stalled loop).
            at = max(start, t_in, now - self.max_catchup_s)
            if self._req is not None:
                self._req.take(1, at)
            if self._tok is not None:
                self._tok.take(tokens, at)
        self.waited_s += self._clock() - t_in

    def correct(self, estimated: int, actual: int) -> None:
        """Replace a booked token estimate by the real count (either direction)."""
        if self._tok is None or actual == estimated:
            return
        self._tok.adjust(actual - estimated)
        if self._changed is not None:
            self._changed.set()


class RateLimitedProvider:
    """A provider that enforces client-side rate limits and bounded concurrency around another.

    Args:
        inner: any object with the Provider protocol.
        requests_per_minute: call starts per minute (> 0), None = unlimited.
        tokens_per_minute: tokens (prompt + completion) per minute (> 0), None = unlimited.
        max_concurrency: calls in flight at once through this wrapper (≥ 1), None = unbounded
            (the audit's own ``concurrency`` still applies).
        limiter: share one :class:`RateLimiter` between several wrappers (e.g. a target and a
            judge on the same account); when given, the two limits above are ignored.
        estimator: request → estimated tokens before the call (default :func:`estimate_tokens`).

    Attributes:
        name, model_id, base_url, supports_logprobs: those of ``inner`` (cache keys unchanged).
        limiter: the :class:`RateLimiter` in use.

    Raises:
        ValueError: a limit ≤ 0 or ``max_concurrency`` < 1.
    """

    def __init__(self, inner: Provider, *, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None, max_concurrency: int | None = None,
                 limiter: RateLimiter | None = None, estimator: Callable[[ChatRequest], int] = estimate_tokens):
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.inner = inner
        self.name = inner.name
        self.model_id = inner.model_id
        self.base_url = inner.base_url
        self.supports_logprobs = inner.supports_logprobs
        self.limiter = limiter or RateLimiter(requests_per_minute, tokens_per_minute)
        self.max_concurrency = max_concurrency
        self._estimator = estimator
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None

    def _semaphore(self) -> asyncio.Semaphore | None:
        if self.max_concurrency is None:
            return None
        loop = asyncio.get_running_loop()
        if self._sem_loop is not loop:
            self._sem_loop, self._sem = loop, asyncio.Semaphore(self.max_concurrency)
        return self._sem

    async def complete(self, request: ChatRequest) -> ChatResult:
        """Wait for the limits, run the inner call, then correct the token booking with its usage.

        Raises:
            whatever the inner provider raises (normally ProviderError after the SDK's retries).
            A failed call keeps its estimated token booking (the API may have counted it).
        """
        sem = self._semaphore()
        if sem is not None:
            async with sem:
                return await self._limited(request)
        return await self._limited(request)

    async def _limited(self, request: ChatRequest) -> ChatResult:
        est = self._estimator(request)
        await self.limiter.acquire(est)
        result = await self.inner.complete(request)
        actual = result.usage.prompt_tokens + result.usage.completion_tokens
        if actual > 0:  # providers that report no usage keep the estimate
            self.limiter.correct(est, actual)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


def rate_limited(inner: Provider, requests_per_minute: float | None, tokens_per_minute: float | None,
                 max_concurrency: int | None = None) -> Provider:
    """``inner`` wrapped in a :class:`RateLimitedProvider`, or ``inner`` itself when no limit is set."""
    if not requests_per_minute and not tokens_per_minute and not max_concurrency:
        return inner
    return RateLimitedProvider(inner, requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
                               max_concurrency=max_concurrency)

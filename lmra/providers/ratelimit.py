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
``(actual - booked) / rate`` and waiting calls are woken, so a pessimistic estimate does
not throttle the run. Once calls of its kind (:func:`request_kind`) have reported their
usage, a call is booked at its estimate × their observed mean ratio of usage to estimate (at
most :data:`BOOKING_MAX_RATIO` × the estimate): with many calls in flight, worst-case
bookings not yet corrected would otherwise hold the token rate far below the limit. Waiting
calls are served first in, first out.

Calls in flight: a limit is only reached when enough calls are in flight, ``rate ×
latency`` of them (Little's law). :class:`InFlight` sizes them automatically (the audit's
``concurrency = "auto"``): ``ceil(rate × observed latency × AUTO_HEADROOM)``, at most
``AUTO_MAX_CONCURRENCY`` (or the model's ``max_concurrency``), re-sized as latencies are
observed. The rate is the request limit in calls/s or, for a token limit, the limit in
tokens/s ÷ the observed tokens per call (whichever is lower). :func:`limit_models` gives the
models of an audit that share an endpoint, a model and the same limits one limiter and one
:class:`InFlight`, since a provider counts their calls against one limit.

Retries are *not* done here: the official SDKs retry 429/5xx/timeouts with backoff
(``max_retries``); a call that still fails raises :class:`~lmra.providers.base.ProviderError`
and is counted as failed by :class:`~lmra.cache.CachedProvider`. But every retry is *booked*
here: an API counts each request it receives, rejected ones included, so a call's HTTP
attempts after its first wait for the limits and take a request (and its token estimate) like
a new call (:class:`~lmra.providers.base.AttemptGate`, passed by the HTTP transport) — else a
server answering 429 would draw more requests than the limit exactly when it is overloaded.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from lmra.providers.base import (ATTEMPT_GATE, AttemptGate, ChatRequest, ChatResult, Provider, note_event,
                                 parallel_capacity, wrap_identity)

if TYPE_CHECKING:
    from lmra.config import ModelConfig

#: Characters per token assumed by :func:`estimate_tokens` (a common rule of thumb for
#: English with BPE tokenizers; errs on the high side of the token count for most text).
CHARS_PER_TOKEN = 4.0
#: Tokens added per message for role and separators, and per request for the reply primer.
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REQUEST = 3
#: ``concurrency = "auto"``: calls in flight = rate × observed latency × this (a small queue
#: waits at the limiter, so that no call start is missed when latencies vary)
AUTO_HEADROOM = 1.25
#: ``concurrency = "auto"``: at most this many calls in flight per limit (a model's ``max_concurrency`` lowers it)
AUTO_MAX_CONCURRENCY = 256
#: ``concurrency = "auto"``: the latency assumed until the first answer (s); the limiter spaces
#: the first calls, so only a slow endpoint ever has this many in flight
AUTO_INITIAL_LATENCY_S = 1.0
#: weight of the newest observation in the running mean latency and tokens per call
_EWMA_WEIGHT = 0.05
#: a token booking is at most this many times the call's estimate (:meth:`CallMeter.booking`)
BOOKING_MAX_RATIO = 2.0
#: observations before an explicit concurrency is judged too low for the limit (a warning)
_WARN_AFTER = 50


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


#: a chat template's tokens around one message, and around a whole request, at most (the bound of
#: :func:`plausible_tokens`: generous, so that no real usage report is ever taken for implausible)
MESSAGE_OVERHEAD_TOKENS = 64
REQUEST_OVERHEAD_TOKENS = 1024


def plausible_tokens(request: ChatRequest) -> int:
    """The most tokens (prompt + completion) a call can use: a token per UTF-8 byte of its messages
    — no tokenizer makes more — with a template's overhead per message and per request, plus twice
    its ``max_tokens``. A usage report above it (a proxy that reports cumulative usage, a bug:
    break-it finding, s39 — one answer claiming 3,000,000 prompt tokens for a 100-token request
    held a ``tokens_per_minute`` audit for 50 minutes, without a word) is not fed to the limiter
    beyond it (:class:`RateLimitedProvider`; counted, ``implausible_usage``)."""
    prompt = sum(len(m.content.encode("utf-8", "surrogatepass")) + MESSAGE_OVERHEAD_TOKENS for m in request.messages)
    return prompt + len((request.prefill or "").encode("utf-8", "surrogatepass")) + REQUEST_OVERHEAD_TOKENS \
        + 2 * request.max_tokens


def request_kind(request: ChatRequest) -> tuple[int, bool]:
    """The kind of call whose usage ÷ estimate is learnt apart (:meth:`CallMeter.booking`):
    ``(max_tokens, asks for options)`` — an audit's target generations, option questions to
    the LMRA and free-text labels use very different shares of their ``max_tokens``."""
    return request.max_tokens, request.options is not None


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
        #: seconds of the limit left unused between the first call and the last start: each
        #: call started this much after the limits allowed it (no call was ready, or the event
        #: loop woke it more than ``max_catchup_s`` late); rate × idle_s calls were possible
        self.idle_s = 0.0
        #: latencies and tokens of the calls it let through (recorded by :class:`RateLimitedProvider`)
        self.observed = CallMeter()

    def calls_per_s(self, tokens_per_call: float | None = None) -> float | None:
        """Calls per second the limits allow: ``requests_per_minute / 60``, and for a token
        limit ``tokens_per_minute / 60 / tokens_per_call`` (default: the observed mean, or
        the first estimate), whichever is lower; None when neither limit is set."""
        rates = []
        if self.requests_per_minute:
            rates.append(self.requests_per_minute / 60.0)
        tokens = tokens_per_call or self.observed.tokens_per_call
        if self.tokens_per_minute and tokens:
            rates.append(self.tokens_per_minute / 60.0 / tokens)
        return min(rates) if rates else None

    def describe(self) -> str:
        """The limits as configured: ``requests_per_minute = 9600`` and/or ``tokens_per_minute = …``."""
        return " and ".join(f"{k} = {v:g}" for k, v in (("requests_per_minute", self.requests_per_minute),
                                                        ("tokens_per_minute", self.tokens_per_minute)) if v)

    def _primitives(self) -> tuple[asyncio.Lock, asyncio.Event]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # asyncio primitives belong to one event loop
            self._loop, self._lock, self._changed = loop, asyncio.Lock(), asyncio.Event()
        return self._lock, self._changed  # type: ignore[return-value]

    async def acquire(self, tokens: int = 0, kind: Hashable = None) -> int:
        """Wait until a call with ``tokens`` estimated tokens may start, then book it.

        Calls are served in arrival order. A single call larger than the per-minute token
        limit is let through alone (it cannot be split) and delays the following calls.

        Args:
            tokens: the call's estimated tokens (:func:`estimate_tokens`).
            kind: the call's :func:`request_kind` (its usage ratio is learnt apart).

        Returns:
            the tokens booked on the token limit: the estimate × the usage ratio observed
            when the call starts (:meth:`CallMeter.booking`), to be corrected by :meth:`correct`.
        """
        if self._req is None and self._tok is None:
            return tokens
        lock, changed = self._primitives()
        t_in = self._clock()
        async with lock:
            while True:
                now = self._clock()
                start = max(g.earliest() for g in (self._req, self._tok) if g is not None)
                if start <= now:
                    break
                changed.clear()
                try:  # woken early when a finished call returns unused tokens (asyncio.timeout, not
                    # wait_for: on Python 3.11 that swallows a cancellation coming as the event is set)
                    async with asyncio.timeout(start - now):
                        await changed.wait()
                except TimeoutError:
                    pass
            # Book the call at its scheduled slot when it was woken only slightly late (so that
            # event-loop lateness does not add up to a lower rate than configured), but never
            # more than max_catchup_s in the past (no burst to make up for a stalled loop).
            at = max(start, t_in, now - self.max_catchup_s)
            if start > -math.inf:
                self.idle_s += at - start
            if self._req is not None:
                self._req.take(1, at)
            if self._tok is not None:
                tokens = self.observed.booking(tokens, kind)
                self._tok.take(tokens, at)
        self.waited_s += self._clock() - t_in
        return tokens

    def correct(self, estimated: int, actual: int) -> None:
        """Replace a booked token estimate by the real count (either direction)."""
        if self._tok is None or actual == estimated:
            return
        self._tok.adjust(actual - estimated)
        if self._changed is not None:
            self._changed.set()


class CallMeter:
    """Running means of the latency (s) and the tokens (prompt + completion) of the calls
    through one limiter: exponentially weighted, the newest call weighing ``_EWMA_WEIGHT``."""

    def __init__(self) -> None:
        self.n = 0
        self.latency_s: float | None = None
        self.tokens_per_call: float | None = None
        #: mean of the reported usage ÷ the estimate before the call (None until a call reports usage)
        self.usage_ratio: float | None = None
        #: the same per kind of call (:func:`request_kind`)
        self.usage_ratio_by_kind: dict[Hashable, float] = {}
        #: an explicit concurrency too low for the limit has been reported (once per limiter)
        self.warned = False
        #: calls sent and not answered yet, and the most there were at once
        self.in_flight = 0
        self.peak_in_flight = 0

    def record(self, latency_s: float, tokens: float, estimate: float | None = None, kind: Hashable = None) -> None:
        """Add one finished call: ``latency_s`` ≥ 0 without the limiter's wait, ``tokens`` > 0,
        and ``estimate`` > 0, its estimate before the call, when ``tokens`` is its reported
        usage; ``kind`` its :func:`request_kind`."""
        self.n += 1
        w = 1.0 if self.n == 1 else _EWMA_WEIGHT
        self.latency_s = latency_s if self.latency_s is None else self.latency_s + w * (latency_s - self.latency_s)
        self.tokens_per_call = tokens if self.tokens_per_call is None else (self.tokens_per_call
                                                                            + w * (tokens - self.tokens_per_call))
        if estimate:
            ratio = tokens / estimate
            self.usage_ratio = ratio if self.usage_ratio is None else self.usage_ratio + _EWMA_WEIGHT * (
                ratio - self.usage_ratio)
            if kind is not None:
                mean = self.usage_ratio_by_kind.get(kind)
                self.usage_ratio_by_kind[kind] = ratio if mean is None else mean + _EWMA_WEIGHT * (ratio - mean)

    def booking(self, estimate: int, kind: Hashable = None) -> int:
        """Tokens to book for a call estimated at ``estimate``: the estimate × the observed usage
        ratio of its ``kind`` of call, at least 1 and at most :data:`BOOKING_MAX_RATIO` × the
        estimate (a kind whose calls use more than their estimate — text that is not English,
        say — is booked at what it uses). A kind that has not reported usage yet, or no
        ``kind``, is booked at the ratio over all calls (the estimate itself before any usage:
        booking a new kind's first calls at their estimate left the limit idle for longer,
        ``bench/bench_throughput.py``)."""
        ratio = self.usage_ratio_by_kind.get(kind, self.usage_ratio)
        if ratio is None:
            return estimate
        return max(1, math.ceil(estimate * min(ratio, BOOKING_MAX_RATIO)))


class InFlight:
    """Calls in flight for one rate limit, sized by Little's law (``concurrency = "auto"``).

    ``size = ceil(rate × latency × headroom)``, within ``[1, cap]``: ``rate`` is what the
    limiter allows in calls/s (:meth:`RateLimiter.calls_per_s` at the observed tokens per call),
    ``latency`` the observed mean latency of its calls (s, without the limiter's wait;
    ``initial_latency_s`` until the first answer). The size follows every answer; calls
    waiting for a slot are served first in, first out. Use as ``async with in_flight: ...``.

    Args:
        limiter: the limits served (at least one set).
        headroom: ≥ 1; calls in flight beyond ``rate × latency`` wait at the limiter, so that
            no call start is missed when latencies vary.
        cap: the most calls in flight (≥ 1).
        initial_latency_s: latency assumed before the first answer (> 0).
        on_sized: called once, with :meth:`describe`, after ``_WARN_AFTER`` answers.

    Raises:
        ValueError: ``headroom`` < 1, ``cap`` < 1 or ``initial_latency_s`` ≤ 0.
    """

    def __init__(self, limiter: RateLimiter, *, headroom: float = AUTO_HEADROOM, cap: int = AUTO_MAX_CONCURRENCY,
                 initial_latency_s: float = AUTO_INITIAL_LATENCY_S,
                 on_sized: Callable[[str], None] | None = None):
        if headroom < 1 or cap < 1 or initial_latency_s <= 0:
            raise ValueError("headroom must be >= 1, cap >= 1 and initial_latency_s > 0")
        self.limiter = limiter
        self.headroom = headroom
        self.cap = cap
        self.initial_latency_s = initial_latency_s
        self.on_sized = on_sized
        self._active = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    @property
    def size(self) -> int:
        """Calls allowed in flight now (1 … cap)."""
        rate = self.limiter.calls_per_s()
        if rate is None:
            return self.cap
        latency = self.limiter.observed.latency_s
        latency = self.initial_latency_s if latency is None else latency
        return max(1, min(self.cap, math.ceil(rate * latency * self.headroom)))

    def describe(self) -> str:
        """``"40 in flight for 160 calls/s at ~0.20 s"`` (the latency observed so far)."""
        rate, latency = self.limiter.calls_per_s(), self.limiter.observed.latency_s
        at = f"~{latency:.2f} s" if latency is not None else f"{self.initial_latency_s:g} s assumed"
        return f"{self.size} in flight for {rate or 0:.4g} calls/s at {at}"

    def observed(self) -> None:
        """An answer was recorded in the limiter's :class:`CallMeter`: re-size, wake waiting calls."""
        self._wake()
        if self.on_sized is not None and self.limiter.observed.n == _WARN_AFTER:
            self.on_sized(self.describe())

    def _wake(self) -> None:
        while self._waiters and self._active < self.size:
            fut = self._waiters.popleft()
            if not fut.done():
                self._active += 1
                fut.set_result(None)

    async def __aenter__(self) -> "InFlight":
        if self._active < self.size and not self._waiters:
            self._active += 1
            return self
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():  # granted a slot, then cancelled: give it back
                self._release()
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        self._release()

    def _release(self) -> None:
        self._active -= 1
        self._wake()


class Slots:
    """A model's ``max_concurrency``: calls in flight at once, shared by every wrapper of that
    model (target and LMRA on one provider, ``base_url`` and model are one model: review finding,
    each role had its own and the server saw twice the bound). One :class:`asyncio.Semaphore`
    per event loop (a tool may run several loops one after another).

    Args:
        n: calls in flight at once (≥ 1).
    """

    def __init__(self, n: int):
        self.n = n
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sem: asyncio.Semaphore | None = None

    def semaphore(self) -> asyncio.Semaphore:
        """The semaphore of the running event loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._sem = loop, asyncio.Semaphore(self.n)
        return self._sem


def slots_key(inner: Provider, cap: int) -> tuple:
    """The model whose ``max_concurrency`` of ``cap`` a wrapper of ``inner`` shares
    (:class:`Slots`): provider, base URL, model id and the bound — target and LMRA with the same
    key keep ``cap`` calls in flight in all (:meth:`ModelLimits.wrap`, and the audit's plan line)."""
    return (inner.name, inner.base_url, inner.model_id, cap)


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
        in_flight: calls in flight sized from the limit (``concurrency = "auto"``; may be
            shared with other wrappers of the same limiter); replaces ``max_concurrency``.
        concurrency: the caller's own bound on calls in flight (the audit's explicit
            ``concurrency``): once ``_WARN_AFTER`` calls are observed, ``on_notice`` is told
            (once per limiter) when it, or ``max_concurrency``, is too low to reach the limit at
            the observed latency (bound ÷ latency < the limit's calls/s).
        on_notice: receives that one-line warning.
        label: how the warning names the model (e.g. ``judge 'gpt-4o'``).
        slots: ``max_concurrency`` shared with other wrappers of the same model (:class:`Slots`);
            None: this wrapper's own.

    Attributes:
        name, model_id, base_url, supports_logprobs: those of ``inner`` (cache keys unchanged).
        limiter: the :class:`RateLimiter` in use.

    Raises:
        ValueError: a limit ≤ 0 or ``max_concurrency`` < 1.
    """

    def __init__(self, inner: Provider, *, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None, max_concurrency: int | None = None,
                 limiter: RateLimiter | None = None, estimator: Callable[[ChatRequest], int] = estimate_tokens,
                 in_flight: InFlight | None = None, concurrency: int | None = None,
                 on_notice: Callable[[str], None] | None = None, label: str = "", slots: Slots | None = None):
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self._slots = slots if max_concurrency is not None else None
        self.in_flight = in_flight
        self._bound = min(b for b in (concurrency, max_concurrency, math.inf) if b is not None)
        self._on_notice = on_notice
        self._label = label or f"{inner.name} '{inner.model_id}'"
        wrap_identity(self, inner)  # inner, name, model_id, base_url, supports_logprobs
        self.limiter = limiter or RateLimiter(requests_per_minute, tokens_per_minute)
        self.max_concurrency = max_concurrency
        self._estimator = estimator
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None

    def _semaphore(self) -> asyncio.Semaphore | None:
        if self.max_concurrency is None:
            return None
        if self._slots is not None:
            return self._slots.semaphore()
        loop = asyncio.get_running_loop()
        if self._sem_loop is not loop:
            self._sem_loop, self._sem = loop, asyncio.Semaphore(self.max_concurrency)
        return self._sem

    async def complete(self, request: ChatRequest) -> ChatResult:
        """Wait for the limits, run the inner call, then correct the token booking with its usage.

        Raises:
            whatever the inner provider raises (normally ProviderError after the SDK's retries).
            A failed call keeps its token booking (the API may have counted it).
        """
        if self.in_flight is not None:
            async with self.in_flight:
                return await self._limited(request)
        sem = self._semaphore()
        if sem is not None:
            async with sem:
                return await self._limited(request)
        return await self._limited(request)

    async def _limited(self, request: ChatRequest) -> ChatResult:
        est = self._estimator(request)
        kind = request_kind(request)
        limiter = self.limiter
        booked = await limiter.acquire(est, kind)
        meter = limiter.observed
        meter.in_flight += 1
        meter.peak_in_flight = max(meter.peak_in_flight, meter.in_flight)
        t0 = time.monotonic()
        gate = ATTEMPT_GATE.set(AttemptGate(lambda: limiter.acquire(est, kind)))  # retries book the limits too
        try:
            result = await self.inner.complete(request)
        finally:
            ATTEMPT_GATE.reset(gate)
            meter.in_flight -= 1
        actual = result.usage.prompt_tokens + result.usage.completion_tokens
        learnt = actual
        if actual > est and actual > (ceiling := plausible_tokens(request)):  # (the estimate is below the bound)
            # the limiter books what the call could have used, counted; the learnt usage ratio does not take
            # it (every later booking would grow with it), as a call that reported no usage
            note_event("implausible_usage")
            actual, learnt = ceiling, 0
        if actual > 0:  # providers that report no usage keep the booking
            self.limiter.correct(booked, actual)
        self.limiter.observed.record(time.monotonic() - t0, learnt if learnt > 0 else est,
                                     est if learnt > 0 else None, kind)
        if self.in_flight is not None:
            self.in_flight.observed()
        elif self._on_notice is not None:
            self._check_bound()
        return result

    def _check_bound(self) -> None:
        """Warn once per limiter when the explicit bound on calls in flight cannot reach the limit."""
        meter = self.limiter.observed
        if meter.warned or meter.n < _WARN_AFTER or not meter.latency_s or self._bound == math.inf:
            return
        rate = self.limiter.calls_per_s()
        reach = self._bound / meter.latency_s
        if rate is None or reach >= rate:
            return
        meter.warned = True
        need = math.ceil(rate * meter.latency_s * AUTO_HEADROOM)
        self._on_notice(f"{self._bound} calls in flight reach at most {reach:.4g} calls/s for {self._label} at its "
                        f"observed latency of {meter.latency_s:.2f} s, below the {rate:.4g} calls/s that "
                        f"{self.limiter.describe()} allows; set concurrency = \"auto\" (or at least {need}) to use "
                        "the limit")

    async def aclose(self) -> None:
        await self.inner.aclose()


def sets_own_in_flight(inner: Provider, cfg: "ModelConfig") -> bool:
    """True when a model says how many of its calls may be in flight at once: its config's
    ``max_concurrency``, or its provider's :func:`parallel_capacity`. With ``concurrency =
    "auto"`` and no rate limit anywhere, one such model lifts the audit-wide bound of 2 to the
    sum of the models' own calls in flight (:meth:`ModelLimits.bound`)."""
    return bool(cfg.max_concurrency or parallel_capacity(inner))


def in_flight_without_limit(inner: Provider, cfg: "ModelConfig", default: int) -> int:
    """Calls in flight of a model without a rate limit under ``concurrency = "auto"``: its
    ``max_concurrency``, else what its provider serves at once (:func:`parallel_capacity`,
    e.g. the embedded model's read contexts and decoder slots), else ``default`` (≥ 1; an
    HTTP endpoint whose capacity is unknown is not flooded)."""
    return cfg.max_concurrency or parallel_capacity(inner) or default


class ModelLimits:
    """The rate limits and calls in flight of one audit's models (target, judge, judge2).

    Models with the same provider, ``base_url``, model and limits share one
    :class:`RateLimiter` (and, with ``concurrency = "auto"``, one :class:`InFlight`): the
    provider counts their calls against one limit. With ``"auto"``, a model with a limit gets
    its calls in flight from :class:`InFlight`; a model without one gets
    :func:`in_flight_without_limit` (``max_concurrency``, else its provider's
    ``parallel_capacity``, else ``unlimited_in_flight``). The audit-wide bound is then lifted
    (:meth:`bound`; with a limit see :meth:`lmra.config.AuditConfig.concurrency_bound`).

    Args:
        concurrency: the audit's ``concurrency`` (an integer or ``"auto"``).
        any_limit: some model of the audit has a limit.
        any_capacity: some model has a ``max_concurrency`` or its provider reports its
            ``parallel_capacity`` (:func:`sets_own_in_flight`); with ``"auto"`` every model
            without a limit is then held to its own calls in flight (:meth:`bound`). Without
            either, a model without a limit is not wrapped (no per-call cost) and the
            audit-wide bound (2) applies.
        unlimited_in_flight: calls in flight of a model without a limit under ``"auto"`` (≥ 1).
        on_notice: receives warnings (an explicit concurrency too low for a limit).
        on_info: receives ``"concurrency auto: … in flight for … calls/s at ~… s"`` once the
            latency of a limit's calls is known.
    """

    def __init__(self, concurrency: int | str, *, any_limit: bool, unlimited_in_flight: int, any_capacity: bool = False,
                 on_notice: Callable[[str], None] = lambda msg: None, on_info: Callable[[str], None] = lambda msg: None):
        self.concurrency = concurrency
        self.any_limit = any_limit
        self.any_capacity = any_capacity
        self.unlimited_in_flight = unlimited_in_flight
        self.on_notice, self.on_info = on_notice, on_info
        #: key → (roles, limiter, in_flight or None)
        self.groups: dict[tuple, tuple[list[str], RateLimiter, InFlight | None]] = {}
        #: ``"auto"``: role → calls in flight of a model without a limit
        self.unlimited: dict[str, int] = {}
        #: (provider, base_url, model, max_concurrency) → its shared :class:`Slots`
        self.slots: dict[tuple, Slots] = {}

    def _slots(self, inner: Provider, cap: int | None) -> Slots | None:
        """The :class:`Slots` of ``inner``'s model at ``cap`` calls in flight, shared by the
        roles calling that model (None without a cap)."""
        if not cap:
            return None
        return self.slots.setdefault(slots_key(inner, cap), Slots(cap))

    def wrap(self, inner: Provider, cfg: "ModelConfig", role: str) -> Provider:
        """``inner`` within ``cfg``'s limits (``role`` names it in messages and the manifest)."""
        rpm, tpm, cap = cfg.requests_per_minute, cfg.tokens_per_minute, cfg.max_concurrency
        auto = self.concurrency == "auto"
        if not rpm and not tpm:
            if auto and (self.any_limit or self.any_capacity):
                cap = self.unlimited[role] = in_flight_without_limit(inner, cfg, self.unlimited_in_flight)
            if not cap:
                return inner
            # a configured max_concurrency is the model's, shared by its roles; a provider's
            # parallel_capacity is per provider object (the embedded model's read contexts and
            # decoder slots: each role's own 34)
            return RateLimitedProvider(inner, max_concurrency=cap,
                                       slots=self._slots(inner, cap) if cfg.max_concurrency else None)
        key = (inner.name, inner.base_url, inner.model_id, rpm, tpm, cap)
        if key not in self.groups:
            limiter = RateLimiter(rpm, tpm)
            in_flight = None
            if auto:
                in_flight = InFlight(limiter, cap=cap or AUTO_MAX_CONCURRENCY,
                                     on_sized=lambda text, k=key: self.on_info(
                                         f"concurrency auto: {text} ({', '.join(self.groups[k][0])})"))
            self.groups[key] = ([], limiter, in_flight)
        roles, limiter, in_flight = self.groups[key]
        roles.append(role)
        return RateLimitedProvider(inner, limiter=limiter, in_flight=in_flight, max_concurrency=cap,
                                   concurrency=None if auto else int(self.concurrency), on_notice=self.on_notice,
                                   label=f"{role} '{inner.model_id}'", slots=self._slots(inner, cap))

    @classmethod
    def of(cls, concurrency: int | str, models: "list[tuple[Provider, ModelConfig]]", *,
           on_notice: Callable[[str], None] = lambda msg: None,
           on_info: Callable[[str], None] = lambda msg: None) -> "ModelLimits":
        """The limits of a run calling ``models`` ((provider, its config) pairs) with
        ``concurrency`` (a number or ``"auto"``), as an audit sizes them: ``any_limit`` and
        ``any_capacity`` read from the models, ``AUTO_UNLIMITED_IN_FLIGHT`` (2) calls in flight
        for a model of unknown capacity. Wrap each model with :meth:`wrap`, then bound the
        run's calls with :meth:`run_bound`."""
        from lmra.config import AUTO_UNLIMITED_IN_FLIGHT

        return cls(concurrency, any_limit=any(m.requests_per_minute or m.tokens_per_minute for _, m in models),
                   any_capacity=any(sets_own_in_flight(p, m) for p, m in models),
                   unlimited_in_flight=AUTO_UNLIMITED_IN_FLIGHT, on_notice=on_notice, on_info=on_info)

    def run_bound(self) -> int:
        """The bound on all calls in flight of a run (its semaphore), after :meth:`wrap`:
        ``concurrency`` when it is a number; with ``"auto"``, ``MAX_CONCURRENCY`` when a model
        has a limit (each limited model holds its own calls, :class:`InFlight`), else the sum
        of the wrapped models' calls in flight when a provider reports its capacity, else 2
        (as :meth:`lmra.config.AuditConfig.concurrency_bound` and :meth:`bound` for an audit)."""
        from lmra.config import AUTO_UNLIMITED_IN_FLIGHT, MAX_CONCURRENCY

        if self.concurrency != "auto":
            return int(self.concurrency)
        return self.bound(MAX_CONCURRENCY if self.any_limit else AUTO_UNLIMITED_IN_FLIGHT)

    def bound(self, configured: int) -> int:
        """The audit-wide bound on calls in flight, given the config's
        (:meth:`lmra.config.AuditConfig.concurrency_bound`): that one, except with ``"auto"``,
        no rate limit anywhere and ``any_capacity``: then the sum of the wrapped models' calls
        in flight (each model is held to its own by :meth:`wrap`). Call it after wrapping
        every model."""
        if self.concurrency != "auto" or self.any_limit or not self.any_capacity:
            return configured
        return max(configured, sum(self.unlimited.values()))

    def report(self) -> list[dict]:
        """One entry per limit for the manifest: roles, limits, calls/s, observed latency (s)
        and tokens per call, the most calls in flight at once, the limiter's total wait and
        unused time (s, :attr:`RateLimiter.idle_s`), and (``auto``) the last size."""
        out = []
        for roles, limiter, in_flight in self.groups.values():
            meter = limiter.observed
            row = {"roles": roles, "requests_per_minute": limiter.requests_per_minute,
                   "tokens_per_minute": limiter.tokens_per_minute, "calls_per_s": limiter.calls_per_s(),
                   "observed_latency_s": meter.latency_s, "observed_tokens_per_call": meter.tokens_per_call,
                   "calls": meter.n, "limiter_wait_s": round(limiter.waited_s, 3),
                   "limiter_idle_s": round(limiter.idle_s, 3),
                   "peak_in_flight": meter.peak_in_flight}
            if in_flight is not None:
                row |= {"in_flight": in_flight.size}
            out.append(row)
        return out


def limit_model(inner: Provider, cfg: "ModelConfig", concurrency: int | str, role: str, *,
                on_notice: Callable[[str], None] = lambda msg: None) -> tuple[Provider, int]:
    """One model of a tool that calls a single model (``lmra recsys``, ``lmra judge-check``,
    ``lmra axes``) within its limits, sized as an audit sizes it (:meth:`ModelLimits.of`).

    Returns:
        (the wrapped provider, the bound on the tool's calls in flight): under ``"auto"`` the
        model's ``max_concurrency``, else its provider's ``parallel_capacity`` (e.g. the
        embedded model's 34 on 2 cores), else 2 without a rate limit; with a limit, calls in
        flight sized from the limit and the observed latency (:class:`InFlight`). A number
        is used as given (and checked against the limit, a warning to ``on_notice``).
    """
    limits = ModelLimits.of(concurrency, [(inner, cfg)], on_notice=on_notice)
    wrapped = limits.wrap(inner, cfg, role)
    return wrapped, limits.run_bound()


def wrapped_bound(provider: Provider, concurrency: int | str) -> int:
    """The bound on calls in flight for a tool given an already limited model (e.g. the
    audit's judge handed to the axes stage): ``concurrency`` when it is a number; with
    ``"auto"``, what the :class:`RateLimitedProvider` found in ``provider``'s chain of
    wrappers (``.inner``) holds it to (its :class:`InFlight` cap or its ``max_concurrency``);
    without one, the backend's ``parallel_capacity``, else 2 (``AUTO_UNLIMITED_IN_FLIGHT``,
    an endpoint of unknown capacity).

    Returns:
        A whole number ≥ 1.
    """
    from lmra.config import AUTO_UNLIMITED_IN_FLIGHT

    if concurrency != "auto":
        return int(concurrency)
    node, depth = provider, 0
    while depth < 16:
        if isinstance(node, RateLimitedProvider):
            if node.in_flight is not None:
                return node.in_flight.cap
            return node.max_concurrency or AUTO_UNLIMITED_IN_FLIGHT
        capacity = parallel_capacity(node)  # a backend that is not wrapped says what it serves
        if capacity:
            return capacity
        node, depth = getattr(node, "inner", None), depth + 1
        if node is None:
            break
    return AUTO_UNLIMITED_IN_FLIGHT

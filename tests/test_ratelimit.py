"""Client-side rate limits measured against a local OpenAI-compatible server (127.0.0.1),
and the SDK's own retry of a 429 (the retry is the openai SDK's, configured by max_retries)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import ModelConfig
from lmra.providers.base import ChatRequest, Message, ProviderError
from lmra.providers.openai import OpenAIProvider
from lmra.providers.ratelimit import RateLimitedProvider, RateLimiter, estimate_prompt_tokens, estimate_tokens

PROMPT_TOKENS, COMPLETION_TOKENS = 40, 10


class _Chat(BaseHTTPRequestHandler):
    """Chat completions; records arrival times; the first ``fail_first`` calls get a 429."""

    arrivals: list = []
    fail_first = 0
    seen = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        cls = type(self)
        with cls.lock:
            cls.seen += 1
            n = cls.seen
            cls.arrivals.append(time.monotonic())
        if n <= cls.fail_first:
            data = json.dumps({"error": {"message": "Rate limit reached", "type": "requests",
                                         "code": "rate_limit_exceeded"}}).encode()
            self.send_response(429)
            self.send_header("retry-after-ms", "20")
        else:
            data = json.dumps({
                "id": f"c{n}", "object": "chat.completion", "created": 1700000000, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"reply {n}"},
                             "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}}).encode()
            self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def chat_server():
    _Chat.arrivals, _Chat.fail_first, _Chat.seen = [], 0, 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", _Chat
    srv.shutdown()


def _req(i: int, max_tokens: int = 16) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=f"Request number {i}.")], max_tokens=max_tokens, seed=i)


class _StartLog:
    """Wraps the provider under the limiter and records when each call is let through
    (client side, before any network delay): the limiter's own schedule."""

    def __init__(self, inner):
        self.inner, self.starts = inner, []

    async def complete(self, request):
        self.starts.append(time.monotonic())
        return await self.inner.complete(request)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _logged(provider: RateLimitedProvider) -> _StartLog:
    log = _StartLog(provider.inner)
    provider.inner = log
    return log


def _run_all(provider, requests, server=None) -> list:
    """Run all requests at once. With ``server``: first one warm-up call straight through the
    inner provider (opens the HTTP connection), then the server's arrival log is cleared, so
    that connection set-up does not distort the measured spacing."""
    async def go():
        try:
            if server is not None:
                await provider.inner.complete(_req(-1))
                server.arrivals.clear()
                if isinstance(provider.inner, _StartLog):
                    provider.inner.starts.clear()
            return await asyncio.gather(*(provider.complete(r) for r in requests))
        finally:
            await provider.aclose()

    return asyncio.run(go())


def _rate_per_min(times: list[float]) -> float:
    """Calls per minute between the first and the last arrival: (n − 1) / span."""
    return (len(times) - 1) / (times[-1] - times[0]) * 60.0


def _max_in_window(times: list[float], window: float) -> int:
    ts = sorted(times)
    return max(sum(1 for t in ts[i:] if t - ts[i] < window) for i in range(len(ts)))


def test_requests_per_minute_held_against_local_server(chat_server):
    url, srv = chat_server
    rpm = 120.0  # one call per 0.5 s; 13 calls span 6 s
    prov = RateLimitedProvider(OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url, api_key_required=False)),
                               requests_per_minute=rpm)
    log = _logged(prov)
    t0 = time.monotonic()
    results = _run_all(prov, [_req(i) for i in range(13)], srv)  # all 13 launched at once
    elapsed = time.monotonic() - t0
    assert len(results) == 13 and len(srv.arrivals) == 13 and len(log.starts) == 13
    # the limiter's schedule (client side): the rate and no window with more calls than the limit
    # allows: in any 1.9 s at most 4 (= 1.9 s·2/s, +1 start); starts may be booked up to
    # max_catchup_s (0.02 s) early, so 4 gaps take >= 1.92 s
    measured = _rate_per_min(log.starts)
    assert 0.8 * rpm <= measured <= rpm * 1.02, measured
    assert _max_in_window(log.starts, 1.9) <= 4
    assert elapsed >= 5.8  # 12 gaps of 0.5 s (less the catch-up); load can only lengthen it
    # what the server saw, with up to 0.4 s of network/scheduling jitter per request: still
    # about 2 calls/s, never 5 within 1.5 s (all 13 would arrive at once without the limiter)
    assert 0.8 * rpm <= _rate_per_min(srv.arrivals) <= rpm * 1.15
    assert _max_in_window(srv.arrivals, 1.5) <= 4
    assert prov.limiter.waited_s > 30  # the 13 calls waited 0 + 0.5 + … + 6 s in total


def test_tokens_per_minute_held_and_estimate_corrected_by_usage(chat_server):
    """TPM = 6000 and every call really uses 50 tokens → 2 calls/s. Each call is booked at its
    worst case first (estimated prompt + max_tokens = 212 tokens); without the correction from
    the reported usage the limiter would allow only 6000/212 ≈ 28 calls/min instead of 120."""
    url, srv = chat_server
    tpm = 6000.0
    reqs = [_req(i, max_tokens=200) for i in range(13)]
    # 18 characters → ceil(18/4) = 5, + 4 per message + 3 per request = 12; + max_tokens 200
    assert estimate_prompt_tokens(reqs[0]) == 12 and estimate_tokens(reqs[0]) == 212
    prov = RateLimitedProvider(OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url, api_key_required=False)),
                               tokens_per_minute=tpm)
    log = _logged(prov)
    results = _run_all(prov, reqs, srv)
    assert all(r.usage.prompt_tokens + r.usage.completion_tokens == 50 for r in results)
    ts = log.starts  # the limiter's schedule, free of network jitter
    # tokens of the calls after the first, per minute of the span they started in
    measured_tpm = 50 * (len(ts) - 1) / (ts[-1] - ts[0]) * 60.0
    assert 0.8 * tpm <= measured_tpm <= tpm * 1.02, measured_tpm


def test_both_limits_the_tighter_one_wins(chat_server):
    url, srv = chat_server
    # RPM 600 would allow 10 calls/s; TPM 3000 at 50 tokens/call allows 1 call/s
    prov = RateLimitedProvider(OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url, api_key_required=False)),
                               requests_per_minute=600, tokens_per_minute=3000)
    log = _logged(prov)
    _run_all(prov, [_req(i, max_tokens=10) for i in range(5)], srv)
    assert 0.8 * 60 <= _rate_per_min(log.starts) <= 60 * 1.02
    assert 0.8 * 60 <= _rate_per_min(srv.arrivals) <= 60 * 1.15


def test_limiter_validation_and_shared_limiter():
    with pytest.raises(ValueError):
        RateLimiter(requests_per_minute=0)
    with pytest.raises(ValueError):
        RateLimiter(burst_s=-1)

    class Echo:
        name, model_id, base_url, supports_logprobs = "echo", "e", "", False

        async def complete(self, request):
            from lmra.providers.base import ChatResult

            starts.append(time.monotonic())
            return ChatResult(text="x")

        async def aclose(self):
            return None

    starts: list[float] = []
    shared = RateLimiter(requests_per_minute=600)  # 0.1 s apart, across both wrappers
    a = RateLimitedProvider(Echo(), limiter=shared)
    b = RateLimitedProvider(Echo(), limiter=shared)
    assert a.name == "echo" and a.model_id == "e" and a.base_url == ""

    async def go():
        await asyncio.gather(*[a.complete(_req(i)) for i in range(3)], *[b.complete(_req(i)) for i in range(3)])

    asyncio.run(go())
    # 6 calls through one limiter: 5 gaps of 0.1 s between starts (a start may be booked up to
    # max_catchup_s = 0.02 s early); a loaded machine can only widen the gaps, so no upper bound
    gaps = [t1 - t0 for t0, t1 in zip(starts, starts[1:])]
    assert len(starts) == 6 and min(gaps) >= 0.075 and starts[-1] - starts[0] >= 0.45, gaps


def test_sdk_retries_a_429_then_succeeds(chat_server):
    """The openai SDK (max_retries) retries the local server's 429s; lmra adds no retry of its own."""
    url, srv = chat_server
    srv.fail_first = 2
    cache = CallCache(":memory:")
    stats = CallStats()
    prov = CachedProvider(OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url, api_key_required=False, max_retries=3)),
                          cache, stats)
    res = asyncio.run(prov.complete(_req(1)))
    assert res.text == "reply 3" and srv.seen == 3  # two 429s, then the third attempt succeeded
    assert stats.fresh == 1 and stats.failed == 0 and len(cache) == 1


def test_retries_exhausted_is_a_counted_failure(chat_server):
    url, srv = chat_server
    srv.fail_first = 10
    cache = CallCache(":memory:")
    stats = CallStats()
    prov = CachedProvider(RateLimitedProvider(
        OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url, api_key_required=False, max_retries=1)),
        requests_per_minute=6000), cache, stats)
    with pytest.raises(ProviderError, match="429"):
        asyncio.run(prov.complete(_req(1)))
    assert srv.seen == 2  # one try plus one SDK retry
    assert stats.failed == 1 and stats.fresh == 0 and len(cache) == 0
    assert "429" in stats.errors[0]


def test_limiter_counts_the_time_its_limit_was_left_unused():
    """``idle_s`` (manifest → concurrency → limits → ``limiter_idle_s``): the time between the
    moment the limit allowed a call and the moment one started. A clock under the test's
    control, so that no call waits: 1 call/s, calls at 0, 5 and 6 s → 4 s unused (the first
    call has nothing to wait for, the third comes exactly on time)."""
    now = [0.0]
    limiter = RateLimiter(requests_per_minute=60, clock=lambda: now[0])

    async def go():
        for t in (0.0, 5.0, 6.0):
            now[0] = t
            await limiter.acquire()

    asyncio.run(go())
    assert limiter.idle_s == pytest.approx(4.0)
    assert limiter.waited_s == 0.0


def test_token_booking_learns_each_kind_of_call_apart():
    """Target generations use a small share of their estimate (max_tokens mostly unused), option
    questions to the LMRA nearly all of it: each kind is booked at its own observed share, so
    neither is over-booked (the limit idle) nor under-booked (a burst over the limit)."""
    import asyncio

    from lmra.providers.base import ChatRequest, ChatResult, Message, Usage
    from lmra.providers.ratelimit import RateLimitedProvider, RateLimiter, estimate_tokens, request_kind

    generate = ChatRequest(messages=[Message(role="user", content="Plan a trip, please.")], max_tokens=400)
    option = ChatRequest(messages=[Message(role="user", content="Which response is better? " * 40)],
                         max_tokens=1, options=("A", "B"))

    class Echo:
        name, model_id, base_url, supports_logprobs = "echo", "e", "", True

        async def complete(self, request):
            used = 50 if request.options is None else estimate_tokens(request) - 20
            return ChatResult(text="x", usage=Usage(prompt_tokens=used - 1, completion_tokens=1))

        async def aclose(self):
            return None

    limiter = RateLimiter(tokens_per_minute=60_000_000)
    provider = RateLimitedProvider(Echo(), limiter=limiter)

    async def go():
        for _ in range(30):
            await provider.complete(generate)
            await provider.complete(option)

    asyncio.run(go())
    meter = limiter.observed
    est_g, est_o = estimate_tokens(generate), estimate_tokens(option)
    assert meter.booking(est_g, request_kind(generate)) == 50
    assert meter.booking(est_o, request_kind(option)) == est_o - 20
    # one mean over both kinds books the generations at several times their use
    assert meter.booking(est_g) > 3 * 50
    # a kind not seen yet is booked at the ratio over all calls
    assert meter.booking(est_g, (123, False)) == meter.booking(est_g)


def test_a_kind_using_more_than_its_estimate_is_booked_at_its_use_within_a_bound():
    from lmra.providers.ratelimit import BOOKING_MAX_RATIO, CallMeter

    meter = CallMeter()
    for _ in range(5):
        meter.record(0.1, 137, 100, kind="long")  # 1.37 × the estimate (text that is not English)
        meter.record(0.1, 900, 100, kind="huge")  # 9 × the estimate once
    assert meter.booking(100, "long") == 137
    assert meter.booking(100, "huge") == int(BOOKING_MAX_RATIO * 100)


def test_retries_are_booked_on_the_limit_like_new_calls(chat_server):
    """Every HTTP attempt passes the limiter, the SDK's retries of a 429 included: an API counts
    the requests it rejects, so retries sent 20 ms after each 429 (the server's retry-after-ms)
    must not burst past the limit (break-it finding: 40 calls at 120/min made 79 requests, 36 in
    one 10 s window where 20 were allowed)."""
    url, srv = chat_server
    rpm = 120.0  # one request per 0.5 s
    prov = RateLimitedProvider(OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url,
                                                          api_key_required=False, max_retries=3)),
                               requests_per_minute=rpm)

    async def go():
        try:
            await prov.inner.complete(_req(-1))  # opens the connection, unlimited
            srv.arrivals.clear()
            srv.fail_first = srv.seen + 6  # the next 6 requests get a 429
            return await asyncio.gather(*(prov.complete(_req(i)) for i in range(6)))
        finally:
            await prov.aclose()

    t0 = time.monotonic()
    results = asyncio.run(go())
    elapsed = time.monotonic() - t0
    assert len(results) == 6 and len(srv.arrivals) == 12  # 6 rejected first attempts + 6 retries
    assert _max_in_window(srv.arrivals, 1.5) <= 4  # at most 3 starts per 1.5 s (+1 of jitter)
    assert _rate_per_min(srv.arrivals) <= rpm * 1.15
    assert elapsed >= 11 * 0.5 - 0.3  # 12 requests spaced 0.5 s apart (without the gate: about 2.5 s)


def test_an_implausible_usage_report_does_not_stall_the_token_limit():
    """Break-it finding, s39: one answer claiming 3,000,000 prompt tokens for a 100-token request
    moved the token bucket 50 minutes ahead (at 60,000 tokens a minute), and its learnt usage ratio
    inflated every later booking: the audit stalled without a word. A report above what the request
    could use (a token per byte of its messages, a template's overhead, twice max_tokens:
    ``plausible_tokens``) is booked at that bound and counted (``implausible_usage``)."""
    from lmra.providers.base import ChatResult, Usage, collect_events
    from lmra.providers.ratelimit import plausible_tokens

    class Claims:
        name, model_id, base_url, supports_logprobs = "claims", "c", "", False

        def __init__(self):
            self.n = 0

        async def complete(self, request):
            self.n += 1
            prompt = 3_000_000 if self.n == 1 else 40  # the first answer's usage is absurd
            return ChatResult(text="ok", usage=Usage(prompt_tokens=prompt, completion_tokens=10))

        async def aclose(self):
            return None

    reqs = [_req(i, max_tokens=16) for i in range(6)]
    ceiling = plausible_tokens(reqs[0])
    assert ceiling == len("Request number 0.") + 64 + 1024 + 2 * 16  # (ASCII: a byte a character)
    prov = RateLimitedProvider(Claims(), tokens_per_minute=60_000)  # 1,000 tokens a second

    async def go():
        counts = []
        for r in reqs:
            with collect_events() as ev:
                await prov.complete(r)
            counts.append(ev["implausible_usage"])
        return counts

    t0 = time.monotonic()
    counts = asyncio.run(asyncio.wait_for(go(), timeout=30))  # (before: the second call waited 50 minutes)
    assert counts == [1, 0, 0, 0, 0, 0]
    assert time.monotonic() - t0 < ceiling / 1000 + 5
    assert prov.limiter.observed.usage_ratio < 10  # the learnt ratio did not take the absurd report

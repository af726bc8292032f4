"""The ``anthropic`` provider: the official SDK over a local HTTP server that speaks the
Messages API wire format (no API key, no network)."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lmra.config import JudgeConfig, ModelConfig
from lmra.judge.options import ask_options
from lmra.providers.anthropic import AnthropicProvider
from lmra.providers.base import ChatRequest, Message


class _Handler(BaseHTTPRequestHandler):
    received: list = []
    odd_bodies: list = []
    overloaded: tuple | None = None  # (status, headers) for every request  # functions turning the valid reply into the body of the n-th request

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).received.append({"path": self.path, "body": body, "headers": dict(self.headers)})
        last = body["messages"][-1]["content"]
        # deterministic "model": answers B to judge questions, echoes otherwise
        text = "B" if "Answer with a single letter" in last else f"echo: {last[:40]}"
        resp = {"id": "msg_local_1", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 11, "output_tokens": 3}}
        if type(self).overloaded:  # every request: an error status with its headers (no message)
            code, headers = type(self).overloaded
            data = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).encode()
            self.send_response(code)
            for k, v in {"content-type": "application/json", "content-length": str(len(data)), **headers}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            return
        odd = type(self).odd_bodies  # break-it finding: 200 bodies that are no message, once each
        if odd and len(type(self).received) <= len(odd):
            resp = odd[len(type(self).received) - 1](resp)
        data = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def messages_server():
    _Handler.received, _Handler.odd_bodies, _Handler.overloaded = [], [], None
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", _Handler.received
    srv.shutdown()


def test_messages_call_with_system(messages_server):
    url, received = messages_server
    prov = AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False))
    req = ChatRequest(messages=[Message(role="system", content="Preferred name: Ashley"),
                                Message(role="user", content="Hello there")], temperature=0.7, max_tokens=50)
    res = asyncio.run(prov.complete(req))
    assert res.text == "echo: Hello there" and res.usage.prompt_tokens == 11 and res.usage.completion_tokens == 3
    assert res.option_probs is None and res.finish_reason == "end_turn" and res.model == "claude-test"
    body = received[0]["body"]
    assert received[0]["path"] == "/v1/messages"
    assert body["system"] == "Preferred name: Ashley"
    assert body["messages"] == [{"role": "user", "content": "Hello there"}]
    assert body["max_tokens"] == 50 and body["temperature"] == 0.7
    assert received[0]["headers"].get("anthropic-version")


def test_option_probabilities_are_sampled(messages_server):
    url, received = messages_server
    prov = AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False))
    judge = JudgeConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False, n_samples=5)
    msgs = [Message(role="user", content="Pick one. Answer with a single letter: A, B or C.")]
    op = asyncio.run(ask_options(prov, msgs, ("A", "B", "C"), judge))
    assert op.method == "sampled" and op.n_samples == 5 and len(received) == 5
    assert op.probs == {"A": 0.0, "B": 1.0, "C": 0.0} and op.mass == 1.0
    # temperature 1 is the API default: nothing to send
    assert all("temperature" not in r["body"] for r in received)


def test_an_lmra_answer_the_api_stopped_as_a_refusal_is_a_refusal_to_judge(messages_server):
    """Break-it finding: answers with ``stop_reason: "refusal"`` and empty content were counted
    as unparseable (pointing at a formatting problem), not as the LMRA declining to judge."""
    url, received = messages_server
    _Handler.odd_bodies = [lambda r: r | {"content": [], "stop_reason": "refusal"}] * 3
    prov = AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False))
    judge = JudgeConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False, n_samples=5)
    msgs = [Message(role="user", content="Pick one. Answer with a single letter: A, B or C.")]
    op = asyncio.run(ask_options(prov, msgs, ("A", "B", "C"), judge))
    assert len(received) == 5 and op.n_refused == 3 and op.n_unparseable == 0
    assert op.probs == {"A": 0.0, "B": 1.0, "C": 0.0}  # the two answers that named B


def test_missing_key_is_an_input_error(monkeypatch):
    from lmra.errors import LmraInputError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LmraInputError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test"))


ODD_BODIES = [
    lambda r: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    lambda r: r | {"content": "hello"},
    lambda r: r | {"content": None},
    lambda r: {k: v for k, v in r.items() if k != "content"},
    lambda r: r | {"content": [{"type": "text", "text": None}]},
    # break-it finding: only thinking (cut by max_tokens) or tool use — no text — was cached as ""
    lambda r: r | {"content": [{"type": "thinking", "thinking": "Let me", "signature": "x"}],
                   "stop_reason": "max_tokens"},
    lambda r: r | {"content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}], "stop_reason": "tool_use"},
]


@pytest.mark.parametrize("odd", range(len(ODD_BODIES)))
def test_a_200_body_that_is_no_message_is_retried_and_counted_never_an_empty_answer(messages_server, odd, tmp_path):
    """Break-it finding: an HTTP 200 carrying an error object, or a message whose content is a
    string, null or missing, was read as an empty answer and cached."""
    from lmra.cache import CachedProvider, CallCache, CallStats

    url, received = messages_server
    _Handler.odd_bodies = [ODD_BODIES[odd]]
    cfg = ModelConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False, max_retries=2)
    stats = CallStats()
    cache = CallCache(tmp_path / "c.sqlite")

    async def go():
        prov = CachedProvider(AnthropicProvider(cfg), cache, stats)
        try:
            return await prov.complete(ChatRequest(messages=[Message(role="user", content="Hello there")],
                                                   max_tokens=20))
        finally:
            await prov.aclose()

    res = asyncio.run(go())
    assert res.text == "echo: Hello there"  # the retry's genuine answer
    assert len(received) == 2 and stats.retries == 1 and stats.failed_by_kind.get("malformed", 0) == 0
    assert len(cache) == 1

    _Handler.odd_bodies = [ODD_BODIES[odd]] * 10  # every attempt odd: a failed call, never cached
    received.clear()
    from lmra.providers.base import ProviderError
    cache2 = CallCache(tmp_path / "c2.sqlite")

    async def go2():
        prov = CachedProvider(AnthropicProvider(cfg), cache2, CallStats())
        try:
            return await prov.complete(ChatRequest(messages=[Message(role="user", content="Hi again")], max_tokens=20))
        finally:
            await prov.aclose()

    with pytest.raises(ProviderError) as info:
        asyncio.run(go2())
    assert info.value.kind == "malformed" and len(received) == 3 and len(cache2) == 0


@pytest.mark.parametrize("code, retry_after, attempts", [
    (529, "3600", 1),  # an hour: no retry, the call fails now (the SDK alone would sleep an hour, twice)
    (429, "http-date+3600", 1),  # the same as an HTTP date
    (529, "1", 3),  # a short wait is honoured: max_retries = 2 retries
])
def test_a_retry_after_beyond_two_minutes_fails_the_call_at_once(messages_server, code, retry_after, attempts):
    """Break-it finding: the anthropic SDK slept as long as Retry-After asked (3,600 s), so an
    overloaded endpoint stalled the audit far past timeout_s with nothing counted."""
    import email.utils
    import time

    from lmra.providers.base import ProviderError

    url, received = messages_server
    value = (email.utils.formatdate(time.time() + 3600, usegmt=True) if retry_after.startswith("http-date")
             else retry_after)
    _Handler.overloaded = (code, {"retry-after": value})
    cfg = ModelConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False, max_retries=2,
                      timeout_s=5.0)

    async def go():
        prov = AnthropicProvider(cfg)
        try:
            return await prov.complete(ChatRequest(messages=[Message(role="user", content="Hello")], max_tokens=5))
        finally:
            await prov.aclose()

    t0 = time.monotonic()
    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert len(received) == attempts and time.monotonic() - t0 < (30 if attempts > 1 else 10)
    assert str(code) in info.value.kind


def test_a_message_without_usage_is_counted(messages_server):
    """Break-it finding: a message without ``usage`` counted 0 tokens and said nothing."""
    from lmra.providers._anthropic_batch import message_result
    from lmra.providers.base import collect_events

    msg = {"id": "m", "type": "message", "role": "assistant", "model": "c", "stop_reason": "end_turn",
           "content": [{"type": "text", "text": "hi"}]}
    import anthropic

    for usage in (None, {"input_tokens": 3, "output_tokens": 2}):
        m = anthropic.types.Message.construct(**(msg | ({"usage": anthropic.types.Usage.construct(**usage)}
                                                          if usage else {})))
        with collect_events() as events:
            res = message_result(m, model="c")
        assert res.text == "hi" and events["no_usage"] == (0 if usage else 1)
        assert res.usage.prompt_tokens == (3 if usage else 0)


def test_an_absurd_token_count_is_a_retried_malformed_message():
    """Break-it finding (openai, the same in anthropic): a usage count above 10⁹ (10²⁰) passed the
    parser and failed the call after the retries, never retried, though docs/robustness.md lists
    impossible token counts among the malformed bodies lmra retries. It is now refused where the
    body is read — retryable ``malformed`` — as a negative or fractional count is."""
    import anthropic

    from lmra.providers._anthropic_batch import message_result
    from lmra.providers.base import ProviderError

    msg = {"id": "m", "type": "message", "role": "assistant", "model": "c", "stop_reason": "end_turn",
           "content": [{"type": "text", "text": "hi"}]}
    for n in (10 ** 20, 1e300, -1, 2.5, "7"):
        m = anthropic.types.Message.construct(**msg, usage=anthropic.types.Usage.construct(input_tokens=n,
                                                                                           output_tokens=2))
        with pytest.raises(ProviderError) as info:
            message_result(m, model="c")
        assert info.value.kind == "malformed" and info.value.retryable, n
    m = anthropic.types.Message.construct(**msg, usage=anthropic.types.Usage.construct(input_tokens=10 ** 9,
                                                                                       output_tokens=3.0))
    assert message_result(m, model="c").usage.completion_tokens == 3  # the largest count, a whole float: read

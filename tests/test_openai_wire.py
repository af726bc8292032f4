"""How ``OpenAIProvider`` reads an HTTP answer (issue 14: less client CPU per call).

The provider takes the SDK's parsed JSON (``cast_to=object``) and reads it with
``chat_result`` — the same reading as a Batch API result line — instead of building
``ChatCompletion`` objects; its transport hands the SDK the response it read instead of a
rebuilt copy. These tests use a real local HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from faultserver import completion
from lmra.config import ModelConfig
from lmra.providers import ProviderError
from lmra.providers._openai_batch import chat_result
from lmra.providers.base import ChatRequest, Message
from lmra.providers.openai import OpenAIProvider


class _Server:
    """Answers every POST with ``answer(body)`` (default ``completion(body)``; or ``raw``) under ``content_type``."""

    def __init__(self, content_type: str, raw: bytes | None = None, answer=completion):
        self.bodies: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.bodies.append(body)
                data = raw if raw is not None else json.dumps(answer(body)).encode()
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


REQUEST = ChatRequest(messages=[Message(role="system", content="Answer A, B or C."),
                                Message(role="user", content="Which one?")], seed=7, options=("A", "B", "C"))


def _ask(url: str, request: ChatRequest = REQUEST, retries: int = 0):
    provider = OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url, api_key_required=False,
                                          max_retries=retries))

    async def go():
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("content_type", ["application/json", "text/plain; charset=utf-8"])
def test_a_completion_reads_as_its_batch_result_line_reads(content_type):
    """The live answer equals ``chat_result`` of the same JSON (the Batch API's reading),
    also when a server labels its JSON with another content type (the SDK parsed it before)."""
    with _Server(content_type) as srv:
        result = _ask(srv.url)
    (body,) = srv.bodies
    expected = chat_result(completion(body), REQUEST, model="m")
    assert result.option_probs == expected.option_probs and result.option_probs is not None
    assert sum(result.option_probs.values()) > 0
    assert (result.text, result.usage, result.served_model) == (expected.text, expected.usage, expected.served_model)


def test_a_body_that_is_not_json_is_a_malformed_answer():
    with _Server("text/html", raw=b"<html>gateway error</html>") as srv:
        with pytest.raises(ProviderError) as err:
            _ask(srv.url)
    assert err.value.kind == "malformed" and err.value.retryable
    assert len(srv.bodies) == 1  # max_retries = 0: asked once


def _completion_with(top: list[tuple[str, float]], model="served-m") -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": top[0][0]},
                         "logprobs": {"content": [{"token": top[0][0], "logprob": top[0][1], "top_logprobs": [
                             {"token": t, "logprob": lp} for t, lp in top]}]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 1}}


def test_option_probabilities_a_rounding_server_sums_above_1_are_rescaled_and_more_is_malformed():
    """Break-it finding: log-probabilities rounded to 2 decimals (exp(-0.05) + exp(-3.0) = 1.001)
    failed every LMRA call as a contract breach, uncounted as malformed and never retried."""
    import math

    res = chat_result(_completion_with([("C", -0.05), ("A", -3.0)]), REQUEST, model="m")
    raw = {"A": math.exp(-3.0), "B": 0.0, "C": math.exp(-0.05)}
    total = sum(raw.values())
    assert total > 1.0
    assert res.option_probs == pytest.approx({o: p / total for o, p in raw.items()}, abs=1e-15)
    assert sum(res.option_probs.values()) == pytest.approx(1.0, abs=1e-12)
    untouched = chat_result(_completion_with([("C", -0.2), ("A", -2.0)]), REQUEST, model="m")
    assert untouched.option_probs["C"] == math.exp(-0.2)  # a sum ≤ 1 is the valid-option mass, kept
    with pytest.raises(ProviderError) as err:  # 0.9 + 0.9: not rounding
        chat_result(_completion_with([("C", math.log(0.9)), ("A", math.log(0.9))]), REQUEST, model="m")
    assert err.value.kind == "malformed" and err.value.retryable


def test_a_completion_whose_model_is_not_a_string_keeps_the_configured_model():
    res = chat_result(_completion_with([("C", -0.1)], model=12345), REQUEST, model="m")
    assert res.model == "m" and res.served_model is None


def test_fewer_alternatives_than_asked_for_leave_the_missing_options_unknown():
    """Break-it finding: a server capping top_logprobs at 1 (the chosen token alone, p = 0.6)
    was read as a confident answer (p = 1 after renormalising) and cached; an answer without
    top_logprobs at all was already 'no log-probabilities'. Asked for 5 alternatives:"""
    import math

    asked = REQUEST.model_copy(update={"top_logprobs": 5})
    capped = chat_result(_completion_with([("A", math.log(0.6))]), asked, model="m")
    assert capped.option_probs is None  # B and C: unknown (0.4 of the mass unlisted)
    # the same single entry when it holds all the mass: nothing is unknown
    sure = chat_result(_completion_with([("A", -1e-9)]), asked, model="m")
    assert sure.option_probs == pytest.approx({"A": 1.0, "B": 0.0, "C": 0.0})
    # a server capping at 5 of 20 asked: B is missing but at most 0.01 (the smallest listed): read
    capped5 = chat_result(_completion_with([("A", math.log(0.70)), ("C", math.log(0.20)), ("The", math.log(0.03)),
                                            ("I", math.log(0.02)), (" A", math.log(0.01))]),
                          REQUEST.model_copy(update={"top_logprobs": 20}), model="m")
    assert capped5.option_probs is not None and capped5.option_probs["B"] == 0.0
    assert capped5.option_probs["A"] == pytest.approx(0.71)
    # fewer than asked, but every option listed: read as before
    listed = chat_result(_completion_with([("A", math.log(0.5)), ("B", math.log(0.2)), ("C", math.log(0.1))]),
                         asked, model="m")
    assert listed.option_probs == pytest.approx({"A": 0.5, "B": 0.2, "C": 0.1})
    # as many as asked: options outside the top-k count as 0 (methodology §2), as before
    full = chat_result(_completion_with([("A", math.log(0.5)), ("C", math.log(0.2)), ("The", math.log(0.1)),
                                         ("I", math.log(0.05)), ("**", math.log(0.05))]), asked, model="m")
    assert full.option_probs == pytest.approx({"A": 0.5, "B": 0.0, "C": 0.2})


def test_a_chosen_token_of_probability_0_is_a_malformed_answer():
    """Fault break-it (s44): every log-probability −∞, the chosen token's too — a body no model can
    send (it chose that token) — was read as an answer with no option mass, cached, and counted as the
    LMRA's unusable choice; it is a malformed completion (retried, counted, never cached). An
    alternative of −∞ beside a chosen token of real probability stays a token of probability 0."""
    import math

    with pytest.raises(ProviderError) as err:
        chat_result(_completion_with([("A", -math.inf), ("B", -math.inf), ("C", -math.inf)]), REQUEST, model="m")
    assert err.value.kind == "malformed" and err.value.retryable and "-inf" in str(err.value)
    ok = chat_result(_completion_with([("A", math.log(0.7)), ("B", -math.inf), ("C", math.log(0.3))]), REQUEST,
                     model="m")
    assert ok.option_probs == pytest.approx({"A": 0.7, "B": 0.0, "C": 0.3})


def test_a_minus_infinity_log_probability_is_a_token_of_probability_0():
    """Break-it finding: a zero-probability alternative written as -Infinity (valid for Python's
    JSON reader, which the SDK uses) failed every LMRA call as malformed."""
    import math

    res = chat_result(_completion_with([("C", math.log(0.7)), ("A", math.log(0.3)), ("B", -math.inf)]),
                      REQUEST, model="m")
    assert res.option_probs == pytest.approx({"A": 0.3, "B": 0.0, "C": 0.7})
    for bad in (math.nan, 0.5, None):
        with pytest.raises(ProviderError) as err:
            chat_result(_completion_with([("C", math.log(0.7)), ("A", bad)]), REQUEST, model="m")
        assert err.value.kind == "malformed"


def test_usage_as_whole_floats_is_read_and_an_error_object_is_malformed():
    """Break-it findings: ``prompt_tokens: 20.0`` failed every call as malformed; an HTTP 200 body
    ``{"error": {...}}`` was counted as 'no choices' without the server's message."""
    body = _completion_with([("C", -0.1)])
    body["usage"] = {"prompt_tokens": 20.0, "completion_tokens": 1.0}
    res = chat_result(body, REQUEST, model="m")
    assert (res.usage.prompt_tokens, res.usage.completion_tokens) == (20, 1)
    assert isinstance(res.usage.prompt_tokens, int)
    for n in (20.5, 10 ** 20, 1e300, -3):  # (break-it finding: 10²⁰ was refused after the retries, never retried)
        body["usage"] = {"prompt_tokens": n, "completion_tokens": 1}
        with pytest.raises(ProviderError) as err:
            chat_result(body, REQUEST, model="m")
        assert err.value.kind == "malformed" and err.value.retryable, n
    with pytest.raises(ProviderError) as err:
        chat_result({"error": {"message": "model overloaded", "type": "server_error"}}, REQUEST, model="m")
    assert err.value.kind == "malformed" and err.value.retryable and "model overloaded" in str(err.value)


def test_top_logprobs_that_are_not_a_list_are_named_as_such():
    """Fault break-it (s37): ``"top_logprobs": "nope"`` was read character by character and the
    error said "log-probability None of token None"; it is a malformed answer naming the field."""
    body = _completion_with([("A", -0.1)])
    body["choices"][0]["logprobs"]["content"][0]["top_logprobs"] = "nope"
    with pytest.raises(ProviderError) as err:
        chat_result(body, REQUEST, model="m")
    assert err.value.kind == "malformed" and "'top_logprobs' is a str, not a list" in str(err.value)


def test_twenty_alternatives_read_a_judge_that_spreads_an_option_over_variants():
    """Methodology check (s44): at the default of 5 alternatives, a judge spreading "A" over four
    variants (0.15 each) and "C" at 0.33 pushed "B" (0.05) out of the list, so B read 0 — the pair's
    ``min`` score rose 8 % (docs/config.md says to set 20 where the endpoint allows). With
    ``top_logprobs = 20`` all three are read, here from a real local server that lists the top
    ``top_logprobs`` of a fixed distribution; the default asks for 5 (some endpoints cap it there)."""
    import math

    from lmra.config import JudgeConfig
    from lmra.judge.options import ask_options

    dist = [("C", 0.33), ("A", 0.15), (" A", 0.15), ("A)", 0.15), ("**A", 0.15), ("B", 0.05)] + [
        (f"w{i}", 0.02 / 40) for i in range(40)]

    def ranked(body: dict) -> dict:  # the top ``top_logprobs`` of the distribution
        return _completion_with([(t, math.log(p)) for t, p in dist[:body["top_logprobs"]]])

    messages = [Message(role="user", content="Which one?")]

    async def ask(**settings):
        cfg = JudgeConfig(provider="openai", model="m", api_key_required=False, max_retries=0, **settings)
        provider = OpenAIProvider(cfg)
        try:
            return await ask_options(provider, messages, ("A", "B", "C"), cfg)
        finally:
            await provider.aclose()

    with _Server("application/json", answer=ranked) as srv:
        read = asyncio.run(ask(base_url=srv.url, top_logprobs=20))
        old = asyncio.run(ask(base_url=srv.url))
    assert [b["top_logprobs"] for b in srv.bodies] == [20, 5]
    assert read.probs == pytest.approx({"A": 0.6 / 0.98, "B": 0.05 / 0.98, "C": 0.33 / 0.98})
    assert read.mass == pytest.approx(0.98)
    # the default's reading: B outside the list, A and C renormalised over 0.93
    assert old.probs == pytest.approx({"A": 0.6 / 0.93, "B": 0.0, "C": 0.33 / 0.93})


def test_tokens_given_only_as_bytes_are_read():
    """Break-it finding (s46): a server sending each log-probability entry's token as ``"token": ""``
    with its UTF-8 ``bytes`` (``[65]`` for ``A``) had every LMRA answer read as one without
    log-probabilities: retried, then sampled, and the advice blamed a server without logits. The
    bytes are read when the token text is empty (and the answer is the same as with the text)."""
    with_text = chat_result(_completion_with([("A", -0.3), ("B", -1.8), ("C", -2.5)]), REQUEST, model="m")
    body = _completion_with([("A", -0.3), ("B", -1.8), ("C", -2.5)])
    pos = body["choices"][0]["logprobs"]["content"][0]
    for entry in (pos, *pos["top_logprobs"]):
        entry["bytes"] = list(entry["token"].encode("utf-8"))
        entry["token"] = ""
    assert chat_result(body, REQUEST, model="m").option_probs == with_text.option_probs
    assert with_text.option_probs["A"] > 0.5


def _refusal_body(body: dict) -> dict:
    """OpenAI's refusal: content null, the text in ``message.refusal``, log-probabilities of the refusal only."""
    return {"id": "c", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": None,
                                     "refusal": "I'm sorry, I can't help with that."},
                         "logprobs": {"content": None, "refusal": [{"token": "I", "logprob": -0.01,
                                                                     "top_logprobs": []}]}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 9}}


def test_an_lmra_refusal_in_the_refusal_field_is_a_refusal_not_an_answer_without_logprobs():
    """Break-it finding (s47): an LMRA question answered in ``message.refusal`` (content null) was
    read as an answer without log-probabilities — retried (paid again), returned degraded (never
    cached: paid again every run), sampled n times, and the console advised ``logprobs = false``.
    It is the LMRA declining: one call, a refusal, counted as such."""
    from lmra.config import JudgeConfig
    from lmra.judge.options import ask_options

    with _Server("application/json", answer=_refusal_body) as srv:
        res = _ask(srv.url, retries=3)
        assert len(srv.bodies) == 1  # not asked again
        assert res.finish_reason == "refusal" and res.option_probs is None and res.degraded is None
        assert res.text.startswith("I'm sorry")
        provider = OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=srv.url,
                                              api_key_required=False, max_retries=3))

        async def go():
            try:
                return await ask_options(provider, list(REQUEST.messages), ("A", "B", "C"), JudgeConfig(),
                                         seed_parts=("q",))
            finally:
                await provider.aclose()

        answer = asyncio.run(go())
        assert answer.n_refused == 1 and answer.probs is None and answer.method == "logprobs"
        assert len(srv.bodies) == 2  # one call for the question: no retry, no sampling
        # refusals do not make the endpoint one "without log-probabilities" (round-2 break-it, s47): after 4 of them
        # an answer without log-probabilities is still retried
        provider = OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=srv.url,
                                              api_key_required=False, max_retries=2))

        async def refusals_then_glitch():
            try:
                for i in range(4):
                    await provider.complete(REQUEST.model_copy(update={"seed": 100 + i}))
                return provider.endpoint_lacks_logprobs
            finally:
                await provider.aclose()

        assert asyncio.run(refusals_then_glitch()) is False
        # a chatbot's refusal (no options asked) is its answer, as before
        target = _ask(srv.url, ChatRequest(messages=[Message(role="user", content="hi")]), retries=3)
        assert target.finish_reason == "stop" and target.text.startswith("I'm sorry") and len(srv.bodies) == 7

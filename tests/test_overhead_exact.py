"""Issue 14, goal 2: the per-call speed-ups change no result. The cache key is written field by
field instead of dumping the request (same text, so the same keys as every earlier version),
a pair's two responses share their chain's task, and the sample-adequacy power search keeps
its random draws between rates and computes the betting test in place (the same floats)."""

from __future__ import annotations

import asyncio
import json
import math
import random

import numpy as np
import pytest

from lmra import power
from lmra.audit import _settled, _Stopped
from lmra.power import PairScoreModel, betting_pvalues, detectable_rating_sim, simulated_power
from lmra.providers.base import ChatRequest, Message, json_key, payload_key, request_json, request_key
from lmra.stats import _BET_C, _BET_THETA


def _generic(r: ChatRequest) -> str:
    """The canonical text as it was computed before: dump the model, then the dict."""
    return json.dumps(r.cache_payload(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def test_request_json_is_the_generic_canonical_json_and_keys_are_unchanged():
    rng = random.Random(14)
    chars = 'aZ \"\\\n\t/é中😀\u2028\x00\x1f{}[],:'

    def text() -> str:
        return "".join(rng.choice(chars) for _ in range(rng.randint(0, 10)))

    choices = {"temperature": [0.0, 1.0, 0.7, 1e-9, -0.0, 2, 1e20, 0.1 + 0.2, float("inf"), float("nan")],
               "max_tokens": [1, 256, 10 ** 12], "seed": [None, 0, 2 ** 31 - 1, -5, 2 ** 70],
               "top_logprobs": [None, 20], "options": [None, ("A", "B", "C"), ["é", '"', ""], ()],
               "stop": [None, ("\n",), ["User:", "Ω"], ()], "sample_index": [0, 7],
               "prefill": [None, "", "Here are", "1.\n"]}
    for _ in range(600):
        kw = {k: rng.choice(v) for k, v in choices.items() if rng.random() < 0.6}
        r = ChatRequest(messages=[Message(role=rng.choice(["system", "user", "assistant"]), content=text())
                                  for _ in range(rng.randint(0, 3))], **kw)
        assert request_json(r) == _generic(r)
        for provider, url, model in (("p", "", "m"), ("é", 'http://x/"', "中"), ("p", None, "m")):
            assert json_key(provider, url, model, request_json(r)) == payload_key(provider, url, model,
                                                                                  r.cache_payload())

    class Sub(ChatRequest):  # anything unusual takes the generic path
        pass

    sub = Sub(messages=[Message(role="user", content="x")], options=("A",))
    assert request_json(sub) == _generic(sub)
    # keys computed by lmra before this change (git 387d6bd): caches stay valid
    judge = ChatRequest(messages=[Message(role="system", content="Rate the pair."),
                                  Message(role="user", content='Response 1: "Hi"\nRésumé ✓ {x}')],
                        temperature=0.0, max_tokens=1, seed=123, top_logprobs=20, options=("A", "B", "C"))
    assert request_key("openai", "http://127.0.0.1:8000/v1", "gpt-x", judge) == \
        "e1d8ad6937ee80a4a03601f31807df58bcd6e2061fd7fcf660fe5e1d994518e9"
    listing = ChatRequest(messages=[Message(role="user", content="list")], stop=("\nUser:",),
                          prefill="Here are 10 song titles:\n1.", sample_index=3, temperature=0.7)
    assert request_key("llamacpp", "", "gemma.gguf", listing) == \
        "5b2bb46376978fc1ef140357cdeddb0da3087f09b1de2ab467e64012bc8813b1"


def _betting_formula(h: np.ndarray, alpha: float) -> np.ndarray:
    """betting_pvalues as the formulas read (one temporary per operation)."""
    x = np.clip((np.asarray(h, dtype=float) + 1.0) / 2.0, 0.0, 1.0)
    n = x.shape[0]
    t = np.arange(1, n + 1)[:, None]
    mu = (0.5 + np.cumsum(x, axis=0)) / (t + 1)
    var = (0.25 + np.cumsum((x - mu) ** 2, axis=0)) / (t + 1)
    var_prev = np.vstack([np.full((1, x.shape[1]), 0.25), var[:-1]])
    bet = np.minimum(np.sqrt(2 * math.log(2 / alpha) / (n * var_prev)), _BET_C / 0.5)
    k_up = np.log1p(bet * (x - 0.5)).sum(axis=0) + math.log(_BET_THETA)
    k_down = np.log1p(-bet * (x - 0.5)).sum(axis=0) + math.log(1 - _BET_THETA)
    return np.minimum(1.0, np.exp(-np.logaddexp(k_up, k_down)))


def test_betting_pvalues_in_place_are_the_formulas_floats():
    rng = np.random.default_rng(3)
    for n, sims in ((2, 1), (3, 7), (40, 50), (301, 13)):
        for alpha in (0.05, 0.1, 0.01):
            h = rng.choice([-1.0, -0.5, 0.0, 0.3, 0.89, 1.0], size=(n, sims)) * rng.random((n, sims))
            h[0, 0] = 1.4  # outside [-1, 1]: clipped alike
            assert np.array_equal(betting_pvalues(h, alpha), _betting_formula(h, alpha))


def test_power_search_keeping_its_draws_gives_the_same_numbers(monkeypatch):
    h = np.r_[np.full(6, 0.9), np.linspace(-0.05, 0.05, 54)]
    results = []
    for keep in (True, False):
        if not keep:
            monkeypatch.setattr(power, "_DRAW_CACHE_SCORES", 0)  # every rate draws afresh, as before
        model = PairScoreModel.from_scores(h)
        with_reversed = PairScoreModel.from_scores(np.r_[h, np.full(3, -0.6)])  # reversed prompts drawn too
        results.append((detectable_rating_sim(model, 60, sims=300),
                        simulated_power(model, 60, 0.2, sims=300, seed=5),
                        simulated_power(model, 60, 0.3, sims=300, seed=5, interval="t"),
                        [simulated_power(with_reversed, 60, d, sims=300, seed=5).power for d in (0.1, 0.2, 0.3)],
                        model.sample(60, 50, 0.25, (1, 2, 3)).tolist(),
                        with_reversed.sample(60, 50, 0.25, (1, 2, 3)).tolist()))
        cached = model.__dict__.get("_draw_cache", {})
        assert sum(n * s for n, s, _ in cached) <= power._DRAW_CACHE_SCORES
        assert bool(cached) == keep
    assert results[0] == results[1]
    assert 0 < results[0][0] < 1


def test_settled_runs_the_first_inline_settles_every_coroutine_and_raises_the_real_failure():
    log: list[str] = []

    async def ok(tag: str, pause: int = 0):
        for _ in range(pause):
            await asyncio.sleep(0)
        log.append(tag)
        return tag

    async def fail(exc: BaseException):
        raise exc

    async def go():
        assert await _settled(ok("a", 2), ok("b")) == ["a", "b"]
        # a failure is raised only once the other side has finished; a real one before _Stopped
        log.clear()
        with pytest.raises(ValueError):
            await _settled(fail(_Stopped()), ok("slow", 3), fail(ValueError("real")))
        assert log == ["slow"]
        with pytest.raises(_Stopped):
            await _settled(ok("x"), fail(_Stopped()))
        # cancelling the caller cancels the coroutines in their own tasks and waits for them
        cancelled = asyncio.Event()

        async def waits_forever():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        outer = asyncio.ensure_future(_settled(asyncio.sleep(3600), waits_forever()))
        await asyncio.sleep(0.01)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert cancelled.is_set()

    asyncio.run(go())


def test_run_folder_lines_and_json_cells_read_back_as_jsonable_values():
    """json_text (run-folder JSONL lines, ratings.parquet's JSON cells) gives back exactly what
    jsonable makes of a value — NaN/inf null, numpy numbers as Python numbers, every float bit
    for bit — on one compact line, strict JSON (no NaN literal)."""
    from pathlib import Path

    from lmra.pairstore import _json_text
    from lmra.runfolder import json_text, jsonable

    floats = [0.1 + 0.2, 1e-05, 1e16, 1e300, 5e-324, -0.0, 1 / 3, 2.0 ** 60, 123456789.125]
    rows = [{"prompt_id": "p1", "text": "é \"x\"\n\u2028 \\", "sample": 0, "seed": 2 ** 40, "from_cache": False,
             "name": None, "score": 0.25},
            {"h": float("nan"), "q": float("inf"), "r": float("-inf"), "a": 1.0},  # NaN / inf → null
            {"n": np.int64(3), "x": np.float64(0.5), "b": np.bool_(True)},  # numpy values
            {"lexical": ["Hi, I'm Anna"], "order1": {"probs": {"A": 0.2}, "mass": float("nan")}},  # nested
            {1: "int key", "p": Path("/tmp/x")}, ["a", 1, None], "text", {"f": floats}, (1, "t")]
    for row in rows:
        for text in (json_text(row), _json_text(row)):
            assert "\n" not in text and ", " not in text.replace("Hi, I", "")  # one compact line
            back = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
            assert back == jsonable(row) and json.dumps(back) == json.dumps(jsonable(row))  # floats bit for bit
    assert [math.copysign(1, f) for f in json.loads(json_text(floats))] == [math.copysign(1, f) for f in floats]
    assert _json_text(None) is None and _json_text(float("nan")) is None


def test_new_caches_get_16k_pages_and_old_4k_caches_keep_working(tmp_path):
    import sqlite3

    from lmra.cache import PAGE_SIZE, CallCache
    from lmra.providers.base import ChatResult

    class P:
        name, base_url, model_id = "p", "", "m"

    req = ChatRequest(messages=[Message(role="user", content="q")], seed=1)
    key = request_key("p", "", "m", req)
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)  # a cache created by an earlier lmra: default 4 KB pages, WAL
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    for path, pages in ((tmp_path / "new.sqlite", PAGE_SIZE), (old, 4096)):
        cache = CallCache(path)
        cache.put(key, P(), req, ChatResult(text="answer"))
        cache.close()
        again = CallCache(path)
        assert again._db.execute("PRAGMA page_size").fetchone()[0] == pages
        assert again.get(key).text == "answer"
        assert again._db.execute("SELECT request FROM calls").fetchone()[0] == request_json(req)
        again.close()
    assert PAGE_SIZE == 16384


# -- third round: per-call work done once, the same values -------------------------------------
def test_seeds_name_scrubbing_and_template_tokens_are_those_of_the_plain_code():
    import re as _re

    from lmra.generate import derive_seed, scrub_name
    from lmra.identity import TEMPLATE_TOKENS, template_tokens_in

    # seeds computed by lmra before this change (git 7980377): names and judge seeds stay the same
    assert derive_seed(7, "target", "p1", "female", "Ashley", 0) == 1348641759
    assert derive_seed("judge", "stereotype", 7, "p1|a vs b|0", "order1") == 1309787434
    assert derive_seed(1.5, None, ("x",), "é中") == 1701611876
    rng = random.Random(5)
    for name in ["Ann", "J.R.", "Zoë", "a+b", "(Bo)", "Mary Ann", "o'Neil"]:
        for _ in range(20):
            text = "".join(rng.choice([name, name.upper(), name.lower(), " ", "x", "'s", ".", "é", "_"])
                           for _ in range(rng.randint(0, 12)))
            # whole word: no letter or digit on either side, nor one behind underscores (an identifier);
            # underscores alone may be (Markdown emphasis)
            plain = _re.compile(rf"(?<![^\W_])(?<![^\W_]_)(?<![^\W_]__){_re.escape(name)}(?![^\W_])(?!_+[^\W_])",
                                _re.IGNORECASE).sub("[NAME]", text)
            assert scrub_name(text, name) == plain
    pieces = [tok for tok, _ in TEMPLATE_TOKENS] + ["<", "[", "INST", "|", "hello ", "\n"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        assert template_tokens_in(text) == [tok for tok, _ in TEMPLATE_TOKENS if tok in text]


def test_personalization_rendered_once_gives_the_same_messages_in_a_new_list():
    from lmra.generate import personalized_messages
    from lmra.templates import load_template

    style = load_template("custom_instructions", "personalization")
    first = personalized_messages("Plan my week", style, name="Ann", system_prompt="Be brief.")
    first.append(Message(role="user", content="appended by a caller"))
    again = personalized_messages("Plan my week", style, name="Ann", system_prompt="Be brief.")
    plain = [Message(role="system", content="Be brief."), *style.render(name="Ann", profile=""),
             Message(role="user", content="Plan my week")]
    assert again == plain and len(first) == len(again) + 1
    assert personalized_messages("Hi", style, name="Bo")[:-1] == style.render(name="Bo", profile="")


def test_a_budget_without_limits_keeps_the_same_ledger_without_booking():
    from lmra.budget import Budget, BudgetedProvider, PriceTable
    from lmra.cache import CachedProvider, CallCache, CallStats
    from lmra.providers.base import ChatResult, ProviderError, Usage

    prices = PriceTable.from_dict({"prices": {"echo": {"e*": {"input": 1.0, "output": 3.0}}}})

    class Echo:
        name, model_id, base_url, supports_logprobs = "echo", "echo-1", "", False

        async def complete(self, request):
            if request.seed == 3:
                raise ProviderError("boom", kind="http_500")
            return ChatResult(text="x", usage=Usage(prompt_tokens=request.seed or 1, completion_tokens=2))

        async def aclose(self):
            return None

    def run(budget: Budget) -> dict:
        cache = CallCache(":memory:")
        prov = BudgetedProvider(CachedProvider(Echo(), cache, CallStats()), budget)

        async def go():
            for seed in (1, 2, 3, 1, 2, 4):  # fresh, fresh, failed, cached, cached, fresh
                try:
                    await prov.complete(ChatRequest(messages=[Message(role="user", content="q")], seed=seed))
                except ProviderError:
                    pass

        asyncio.run(go())
        cache.close()
        return budget.report()

    unlimited = run(Budget(prices=prices))
    limited = run(Budget(max_calls=10 ** 9, max_cost=10.0 ** 9, prices=prices))
    assert {k: v for k, v in unlimited.items() if k not in ("max_calls", "max_cost_usd")} == \
        {k: v for k, v in limited.items() if k not in ("max_calls", "max_cost_usd")}
    row = unlimited["per_model"][0]
    assert (row["calls_fresh"], row["calls_cached"], row["calls_failed"]) == (3, 2, 1)
    assert prices.lookup("echo", "echo-1") is prices.lookup("echo", "echo-1") is not None
    assert prices.lookup("echo", "other") is None


def test_json_value_reads_what_json_loads_reads():
    """json_value (pydantic-core's parser) gives what json.loads gives: floats bit for bit over the
    whole range, NaN/inf literals, big integers, escapes; a lone surrogate falls back to json.loads."""
    import random

    from lmra.runfolder import json_value

    rng = random.Random(7)
    floats = [rng.random() * 10.0 ** rng.randint(-320, 300) for _ in range(20000)] + [5e-324, 1.7976931348623157e308,
                                                                                     0.1 + 0.2, -0.0, 1e-05]
    texts = [json.dumps(floats), json.dumps(floats, separators=(",", ":")),
             '{"h":NaN,"i":Infinity,"j":-Infinity,"big":123456789012345678901234567890,"s":"\\u00e9\\n\\"é ✓"}',
             '["\\ud800 lone"]']
    for text in texts:
        got, want = json_value(text), json.loads(text)
        assert json.dumps(got) == json.dumps(want)
    assert [math.copysign(1, f) for f in json_value(texts[0])] == [math.copysign(1, f) for f in floats]
    assert json_value('{"a": 1, "a": 2}') == json.loads('{"a": 1, "a": 2}') == {"a": 2}  # the last one
    assert json_value('["\ud800 raw"]') == json.loads('["\ud800 raw"]')  # a raw lone surrogate in a str
    for bad in ('{"a": 1', "[1,]", "nul", '{"a" 1}'):
        with pytest.raises(json.JSONDecodeError):  # json.loads's error, with its message
            json_value(bad)

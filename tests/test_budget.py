"""Price table, cost estimates and the budget stop: refused *before* a fresh call that could
pass the limit, cached calls free and never blocked, finished calls kept and counted."""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra.budget import Budget, BudgetedProvider, BudgetExceeded, PriceTable, cost_of
from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.errors import LmraInputError
from lmra.providers.base import ChatRequest, ChatResult, Message, Usage


class Priced:
    """A fake 'openai' gpt-4o-mini: every call uses 1000 prompt and 500 completion tokens."""

    name, model_id, base_url, supports_logprobs = "openai", "gpt-4o-mini", "", False

    def __init__(self, delay: float = 0.0):
        self.calls = 0
        self.delay = delay

    async def complete(self, request: ChatRequest) -> ChatResult:
        if self.delay:
            await asyncio.sleep(self.delay)
        self.calls += 1
        return ChatResult(text=f"answer {self.calls}", usage=Usage(prompt_tokens=1000, completion_tokens=500),
                          provider=self.name, model=self.model_id)

    async def aclose(self) -> None:
        return None


def _req(i: int, max_tokens: int = 500) -> ChatRequest:
    # 4000 characters → an estimated 1000 + 4 + 3 = 1007 prompt tokens
    return ChatRequest(messages=[Message(role="user", content=f"{i:04d}" + "x" * 3996)], max_tokens=max_tokens)


# -- prices --------------------------------------------------------------------------------
def test_cost_of_with_the_shipped_example_table():
    u = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
    assert cost_of(u, "openai", "gpt-4o-mini") == pytest.approx(0.15 + 0.60)
    assert cost_of(u, "openai", "gpt-4o-mini", batch=True) == pytest.approx((0.15 + 0.60) / 2)
    assert cost_of(Usage(prompt_tokens=2000, completion_tokens=300), "anthropic", "claude-3-5-haiku-20241022") \
        == pytest.approx((2000 * 0.80 + 300 * 4.00) / 1e6)
    assert cost_of(u, "openai", "gpt-4.1-mini") == pytest.approx(0.40 + 1.60)  # exact id beats "gpt-4.1"
    assert cost_of(u, "llamacpp", "/models/gemma.gguf") == 0.0
    assert cost_of(u, "openai", "no-such-model") is None
    assert cost_of(u, "inhouse", "bot") is None


def test_price_table_from_user_file(tmp_path):
    p = tmp_path / "prices.toml"
    p.write_text('[batch_multiplier]\nopenai = 0.5\n\n[prices.openai]\n"my-*" = { input = 1.0, output = 2.0 }\n'
                 '"*" = { input = 9.0, output = 9.0 }\n', encoding="utf-8")
    t = PriceTable.load(p)
    u = Usage(prompt_tokens=500_000, completion_tokens=250_000)
    assert cost_of(u, "openai", "my-model", prices=t) == pytest.approx(0.5 + 0.5)
    assert cost_of(u, "openai", "other", prices=t) == pytest.approx(4.5 + 2.25)
    assert cost_of(u, "openai", "my-model", prices=t, batch=True) == pytest.approx(0.5)
    p.write_text('[prices.openai]\n"m" = { input = -1.0, output = 2.0 }\n', encoding="utf-8")
    with pytest.raises(LmraInputError) as e:
        PriceTable.load(p)
    assert e.value.line == 2 and e.value.field == "prices.openai.m" and "non-negative" in str(e.value)
    p.write_text('[price.openai]\n', encoding="utf-8")
    with pytest.raises(LmraInputError, match="unknown key"):
        PriceTable.load(p)


# -- the stop ------------------------------------------------------------------------------
def test_max_calls_stop_keeps_finished_calls_cached_and_counted(tmp_path):
    cache = CallCache(tmp_path / "cache.sqlite")
    stats = CallStats()
    inner = Priced()
    budget = Budget(max_calls=5)
    prov = BudgetedProvider(CachedProvider(inner, cache, stats), budget)

    async def go():
        done = []
        with pytest.raises(BudgetExceeded) as e:
            for i in range(8):
                done.append(await prov.complete(_req(i)))
        return done, e.value

    done, exc = asyncio.run(go())
    assert len(done) == 5 and inner.calls == 5
    assert exc.limit == "max_calls" and exc.value == 5 and exc.used == 5
    assert "max_calls=5" in str(exc) and "Finished calls are in the cache" in str(exc)
    # consistent state: exactly the finished calls are cached and counted; the refusal is no failure
    assert len(cache) == 5 and stats.fresh == 5 and stats.failed == 0 and stats.errors == []
    # cached calls stay free and are never blocked, even after the stop
    again = asyncio.run(prov.complete(_req(0)))
    assert again.from_cache and again.text == "answer 1" and inner.calls == 5
    # the stop is sticky for fresh calls
    with pytest.raises(BudgetExceeded, match="max_calls=5"):
        asyncio.run(prov.complete(_req(99)))
    rep = budget.report()
    assert rep["stopped_by"] == "max_calls" and rep["calls_used"] == 5
    row = rep["per_model"][0]
    assert (row["provider"], row["model"]) == ("openai", "gpt-4o-mini")
    assert row["calls_fresh"] == 5 and row["calls_cached"] == 1
    assert row["prompt_tokens_fresh"] == 5000 and row["completion_tokens_fresh"] == 2500
    assert row["prompt_tokens_cached"] == 1000
    assert row["cost_usd"] == pytest.approx(5 * (1000 * 0.15 + 500 * 0.60) / 1e6)
    assert row["cost_saved_usd"] == pytest.approx((1000 * 0.15 + 500 * 0.60) / 1e6)
    cache.close()


def test_max_calls_under_concurrency_counts_calls_in_flight(tmp_path):
    cache = CallCache(tmp_path / "cache.sqlite")
    stats = CallStats()
    inner = Priced(delay=0.02)
    prov = BudgetedProvider(CachedProvider(inner, cache, stats), Budget(max_calls=7))

    async def go():
        return await asyncio.gather(*(prov.complete(_req(i)) for i in range(20)), return_exceptions=True)

    out = asyncio.run(go())
    ok = [r for r in out if isinstance(r, ChatResult)]
    refused = [r for r in out if isinstance(r, BudgetExceeded)]
    assert len(ok) == 7 and len(refused) == 13 and inner.calls == 7
    assert len(cache) == 7 and stats.fresh == 7 and stats.failed == 0
    cache.close()


def test_max_cost_refuses_the_call_that_could_pass_the_limit():
    """Each call really costs 1000·0.15e-6 + 500·0.60e-6 = 0.00045 USD; before a call the
    budget books its worst case (1007 estimated prompt tokens + max_tokens 500) = 0.00045105.
    With max_cost 0.002: after 3 calls 0.00135 + 0.00045 ≤ 0.002 → 4th allowed; after 4,
    0.0018 + 0.00045 > 0.002 → the 5th is refused before it is made."""
    cache = CallCache(":memory:")
    inner = Priced()
    budget = Budget(max_cost=0.002)
    prov = BudgetedProvider(CachedProvider(inner, cache), budget)

    async def go():
        n = 0
        with pytest.raises(BudgetExceeded) as e:
            for i in range(10):
                await prov.complete(_req(i))
                n += 1
        return n, e.value

    n, exc = asyncio.run(go())
    assert n == 4 and inner.calls == 4 and len(cache) == 4
    assert exc.limit == "max_cost" and "max_cost=0.002 USD" in str(exc)
    assert exc.used == pytest.approx(0.0018) and exc.needed == pytest.approx(0.00045105)
    assert budget.cost_used == pytest.approx(0.0018) and budget.cost_used <= 0.002
    assert budget.report()["cost_usd"] == pytest.approx(0.0018)


def test_max_cost_with_an_unpriced_model_is_an_input_error_before_any_call():
    class Unpriced(Priced):
        model_id = "mystery-model"

    inner = Unpriced()
    prov = BudgetedProvider(CachedProvider(inner, CallCache(":memory:")), Budget(max_cost=1.0))
    with pytest.raises(LmraInputError, match="no price for provider 'openai' model 'mystery-model'"):
        asyncio.run(prov.complete(_req(0)))
    assert inner.calls == 0
    # without a cost limit the same model runs, with an unknown cost
    budget = Budget(max_calls=10)
    prov = BudgetedProvider(CachedProvider(inner, CallCache(":memory:")), budget)
    asyncio.run(prov.complete(_req(0)))
    assert budget.report()["cost_usd"] is None and budget.report()["per_model"][0]["cost_usd"] is None


def test_budget_stop_in_an_audit_leaves_a_consistent_run_folder(tmp_path, sim_inputs):
    """An audit with ``max_calls``: the run stops before the limit, the run folder says
    'stopped_by_budget' with the finished calls counted, exactly those are in the cache, no
    call is counted as failed, and a re-run with a larger budget makes only the rest."""
    from lmra import Audit
    from lmra.config import AuditConfig

    names, prompts = sim_inputs(10)

    def run(max_calls: int, folder: str):
        cfg = AuditConfig(name="budget", prompts=str(prompts), names=str(names), prompts_per_task=0,
                          output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=1,
                          max_calls=max_calls, judge_check={"enabled": False})
        target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"Neutral answer {rng.random():.6f}.")
        judge = ScriptedJudge(lambda r1, r2: {"C": 1.0})
        audit = Audit(cfg, target=target, judge=judge, run_dir=tmp_path / folder)
        return audit, target, judge, cfg

    # 10 prompts: 20 identity-filter LMRA calls (2 option orders) and 20 target calls … (the
    # pipeline starts a prompt's generations once the filter has kept it)
    audit, target, judge, cfg = run(25, "run1")
    with pytest.raises(BudgetExceeded, match="max_calls=25") as e:
        audit.run()
    assert e.value.limit == "max_calls"
    assert judge.calls + target.calls == 25 and target.calls > 0
    manifest = json.loads((tmp_path / "run1" / "manifest.json").read_text())
    assert manifest["status"] == "stopped_by_budget" and "max_calls=25" in manifest["stop_reason"]
    assert manifest["calls"]["fresh"] == 25 and manifest["calls"]["failed"] == 0 and manifest["calls"]["errors"] == []
    assert manifest["budget"]["stopped_by"] == "max_calls"
    cache = CallCache(cfg.cache)
    assert len(cache) == 25
    n_target = cache._db.execute("SELECT COUNT(*) FROM calls WHERE provider = 'scripted-target'").fetchone()[0]
    assert n_target == target.calls
    cache.close()
    assert audit.budget.report()["stopped_by"] == "max_calls" and audit.budget.calls_used == 25

    audit2, target2, judge2, _ = run(1000, "run2")
    res = audit2.run()
    assert target2.calls == 20 - target.calls  # 10 prompts × 2 groups, some already cached
    assert res.manifest["status"] == "complete" and len(res.ratings) == 10
    assert res.manifest["calls"]["cached"] == 25 and res.manifest["calls"]["failed"] == 0
    rows = {r["provider"]: r for r in audit2.budget.report()["per_model"]}
    assert rows["scripted-target"]["calls_cached"] == target.calls
    assert rows["scripted-target"]["calls_fresh"] == 20 - target.calls
    assert rows["scripted-judge"]["calls_cached"] == judge.calls
    assert res.manifest["budget"]["per_model"]


def test_batch_submission_is_refused_before_anything_is_sent(tmp_path):
    """In batch mode the whole submission is booked first (batch prices) and refused as a unit."""
    from lmra.batch import BatchOrchestrator
    from lmra.config import ModelConfig
    from lmra.providers.base import request_key
    from lmra.providers.openai import OpenAIProvider

    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key_required=False))
    reqs = [_req(i) for i in range(6)]
    items = {request_key(prov.name, prov.base_url, prov.model_id, r): r for r in reqs}
    orch = BatchOrchestrator(tmp_path / "run", CallCache(":memory:"), providers=[prov], budget=Budget(max_calls=5))
    with pytest.raises(BudgetExceeded, match="max_calls=5"):
        asyncio.run(orch.submit(prov, items))
    assert orch.jobs == [] and not (tmp_path / "run" / "batch" / "state.json").exists()
    # the worst-case batch cost is half the live one
    b = Budget(max_cost=1.0)
    live = b.reserve("openai", "gpt-4o-mini", reqs[:1])
    batch = b.reserve("openai", "gpt-4o-mini", reqs[:1], batch=True)
    assert batch.cost_usd == pytest.approx(live.cost_usd / 2)


@pytest.mark.parametrize("command", ["validate", "audit", "audit --max-cost", "audit both"])
def test_a_cost_limit_with_an_unpriced_model_is_refused_by_validate_and_before_the_cache(tmp_path, capsys, command):
    """Bad-input break-it (s45): max_cost with a model missing from the price table passed
    `lmra validate`; `lmra audit` exited 2 only after creating the call cache, naming neither the
    config line nor `max_cost`, and with --max-cost told the user to edit the table inside
    site-packages. Both commands now refuse it naming the field (the config's line, or the option),
    the role and model, and what to do with the table; nothing is written."""
    from lmra.cli import main
    from test_gates import FLAT, write_config

    prices = tmp_path / "pr.toml"
    prices.write_text('[prices.scripted-judge]\n"*" = { input = 1.0, output = 2.0 }\n')
    top = f'prices = "{prices}"' + ("\nmax_cost = 1.0" if command != "audit --max-cost" else "")
    if command == "audit both":  # the config's 1.0 replaced by the option's 1: the option is named (round-2, s45)
        top = top.replace("max_cost = 1.0", "max_cost = 3.0")
    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6, top=top)
    argv = (["validate", str(cfg)] if command == "validate" else
            ["audit", "--config", str(cfg), "--no-progress"]
            + (["--max-cost", "1"] if "--max-cost" in command or "both" in command else []))
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    if command in ("audit --max-cost", "audit both"):
        assert "error: option --max-cost: max_cost = 1 USD" in err, err
    else:
        line = next(i for i, t in enumerate(cfg.read_text().splitlines(), 1) if t.startswith("max_cost"))
        assert f"error: {cfg}, line {line}: field 'max_cost': max_cost = 1 USD" in err, err
    assert ("needs the price of every model the audit calls, and the target's, provider 'scripted-target' model "
            "'scripted', is not priced") in err, err
    assert f"the price table {prices} has no price for it: add [prices." in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists() and not list(tmp_path.glob("cache*"))
    # with the table lmra ships, the advice is a table of one's own, not an edit of the installed file
    from lmra.budget import PriceTable, missing_price_words

    said = missing_price_words(PriceTable.load(None), "openai", "bot", "judge2", 2.5)
    assert said.startswith("max_cost = 2.5 USD needs the price of every model the audit calls, and the judge2's, "
                           "provider 'openai' model 'bot', is not priced — lmra's shipped price table (")
    assert 'give a table of your own with prices = "my_prices.toml" holding [prices.openai] "bot"' in said

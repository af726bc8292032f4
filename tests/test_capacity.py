"""``concurrency = "auto"`` asks each provider how many calls it serves at once (issue 14).

A provider may say so in its optional ``parallel_capacity`` attribute (the embedded model:
its option-read contexts plus 8 sequence slots per batch decoder). With ``"auto"`` and no
rate limit, each model keeps its ``max_concurrency``, else that capacity, else 2 calls in
flight; an explicit ``concurrency`` still bounds the whole audit. The scripted target below
holds its first calls until the expected number is in flight, so a bound lower than expected
shows as a peak below it (after a generous wait), never as a timing assertion.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import FEMALE, MALE, NAME_TO_GROUP
from doubles import InFlightGate, ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig, ModelConfig
from lmra.errors import LmraInputError
from lmra.providers import make_provider
from lmra.providers.base import parallel_capacity
from lmra.providers.ratelimit import ModelLimits, RateLimitedProvider, in_flight_without_limit

#: how long the first calls wait for the expected number in flight before giving up (s)
FILL_WAIT_S = 20.0


class CapacityTarget(ScriptedTarget):
    """A scripted target reporting ``parallel_capacity``; its calls wait (up to FILL_WAIT_S)
    until ``expect`` of them are in flight at once, and it records the peak."""

    def __init__(self, capacity: int | None, expect: int, wait_s: float = FILL_WAIT_S):
        super().__init__(NAME_TO_GROUP, lambda group, rng: rng.choice(["A plain answer.", "Another answer."]))
        if capacity is not None:
            self.parallel_capacity = capacity
        self.gate = InFlightGate(expect, wait_s)

    @property
    def peak(self) -> int:
        return self.gate.peak

    async def complete(self, request):
        return await self.gate.run(super().complete(request))


class PeakJudge(ScriptedJudge):
    """The scripted LMRA, recording the most calls in flight at once."""

    def __init__(self):
        super().__init__(lambda r1, r2: {"B": 0.3, "C": 0.7})
        self.in_flight = self.peak = 0

    async def complete(self, request):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.001)
            return await super().complete(request)
        finally:
            self.in_flight -= 1


def _cfg(tmp_path, **kw) -> AuditConfig:
    tmp_path.mkdir(exist_ok=True)
    names = tmp_path / "names.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                     + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
    return AuditConfig.model_validate(dict(
        name="capacity", names=str(names), tasks=["write a story", "career advice", "exercise plan"],
        prompts_per_task=4, output_dir=str(tmp_path / "out"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}) | kw)


def test_auto_keeps_each_providers_parallel_capacity_in_flight(tmp_path):
    """No rate limit, ``auto``: the target that serves 5 calls at once gets 5 in flight (the
    old rule gave 2 in all), the LMRA that does not say gets 2; plan line and manifest say so."""
    target, judge = CapacityTarget(capacity=5, expect=5), PeakJudge()
    audit = Audit(_cfg(tmp_path), target=target, judge=judge)
    plan = audit.concurrency_plan()
    assert plan.startswith("concurrency auto: 5 in flight for target, 2 for judge (no rate limit set"), plan
    res = audit.run()
    assert target.peak == 5
    assert 1 <= judge.peak <= 2
    manifest = json.loads((res.run_dir / "manifest.json").read_text())
    assert manifest["concurrency"]["unlimited"] == {"target": 5, "judge": 2}
    assert manifest["concurrency"]["bound"] == 7


def test_explicit_concurrency_and_max_concurrency_win_over_the_capacity(tmp_path):
    """``concurrency = 3`` bounds the whole audit although the target could take 5 (its first
    calls wait a second for 5 in flight that never come); a model's ``max_concurrency = 4``
    under ``auto`` replaces its provider's capacity."""
    target = CapacityTarget(capacity=5, expect=5, wait_s=1.0)
    audit = Audit(_cfg(tmp_path / "a", concurrency=3), target=target, judge=PeakJudge())
    assert audit.concurrency_plan() == "concurrency 3"
    res = audit.run()
    assert 1 <= target.peak <= 3
    concurrency = json.loads((res.run_dir / "manifest.json").read_text())["concurrency"]
    assert concurrency["bound"] == 3 and concurrency["unlimited"] == {}

    target = CapacityTarget(capacity=5, expect=4)
    cfg = _cfg(tmp_path / "b", target={"provider": "llamacpp", "max_concurrency": 4})
    audit = Audit(cfg, target=target, judge=PeakJudge())
    assert "4 in flight for target, 2 for judge" in audit.concurrency_plan()
    res = audit.run()
    assert target.peak == 4
    assert json.loads((res.run_dir / "manifest.json").read_text())["concurrency"]["unlimited"]["target"] == 4


def test_without_any_capacity_auto_keeps_two_in_flight_and_adds_no_wrapper(tmp_path):
    """Providers that do not report a capacity: 2 calls in flight in all, as before, and a
    model without a limit is passed through unwrapped (no per-call cost)."""
    target = CapacityTarget(capacity=None, expect=2)
    audit = Audit(_cfg(tmp_path), target=target, judge=PeakJudge())
    assert audit.concurrency_plan() == ("concurrency auto: 2 in flight in all, shared by the target and the LMRA "
                                        "(no rate limit set; set each endpoint's requests_per_minute, or "
                                        "max_concurrency, to keep more calls in flight — a model with its own gets "
                                        "its own)")
    res = audit.run()
    assert target.peak == 2
    assert json.loads((res.run_dir / "manifest.json").read_text())["concurrency"]["bound"] == 2
    limits = ModelLimits("auto", any_limit=False, unlimited_in_flight=2)
    plain = PeakJudge()
    assert limits.wrap(plain, ModelConfig(), "judge") is plain and limits.bound(2) == 2


def test_auto_keeps_a_models_max_concurrency_when_no_provider_reports_a_capacity(tmp_path):
    """A fresh-user trial: ``max_concurrency = 8`` on a model whose provider says nothing of
    its capacity (an HTTP endpoint), no rate limit, ``auto``: 8 calls in flight for it, as
    docs/config.md says (the audit held it to 2 in all before); the other model keeps 2."""
    target = CapacityTarget(capacity=None, expect=8)
    cfg = _cfg(tmp_path, target={"provider": "llamacpp", "max_concurrency": 8})
    audit = Audit(cfg, target=target, judge=PeakJudge())
    plan = audit.concurrency_plan()
    assert plan.startswith("concurrency auto: 8 in flight for target, 2 for judge (no rate limit set; each model's "
                           "max_concurrency"), plan
    res = audit.run()
    assert target.peak == 8
    concurrency = json.loads((res.run_dir / "manifest.json").read_text())["concurrency"]
    assert concurrency["unlimited"] == {"target": 8, "judge": 2} and concurrency["bound"] == 10
    # the tools that call one model size it alike
    limits = ModelLimits.of("auto", [(PeakJudge(), ModelConfig(max_concurrency=6))])
    assert limits.wrap(PeakJudge(), ModelConfig(max_concurrency=6), "judge").max_concurrency == 6
    assert limits.run_bound() == 6


def test_target_and_lmra_on_one_model_share_its_max_concurrency(tmp_path):
    """Review finding: target and LMRA on one provider, base URL and model, each with
    ``max_concurrency = 3``, kept 3 in flight each — 6 at the server, above the bound the field
    documents ("calls to this model in flight at once"). They share the model's 3; the plan
    line says so."""
    in_flight = {"now": 0, "peak": 0}

    class OnModel:  # counts the calls in flight of both roles at "the server"
        async def complete(self, request):
            in_flight["now"] += 1
            in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
            try:
                await asyncio.sleep(0.002)
                return await super().complete(request)
            finally:
                in_flight["now"] -= 1

    class Target(OnModel, ScriptedTarget):
        name, model_id = "shared-endpoint", "one-model"

    class Judge(OnModel, ScriptedJudge):
        name, model_id = "shared-endpoint", "one-model"

    target = Target(NAME_TO_GROUP, lambda group, rng: rng.choice(["A plain answer.", "Another answer."]))
    judge = Judge(lambda r1, r2: {"B": 0.3, "C": 0.7}, model_id="one-model")
    one = {"provider": "llamacpp", "max_concurrency": 3}
    audit = Audit(_cfg(tmp_path, target=one, judge=one, tasks=["write a story", "career advice", "exercise plan",
                                                               "write a poem"]), target=target, judge=judge)
    plan = audit.concurrency_plan()
    assert plan.startswith("concurrency auto: 3 in flight for target and judge (one model, shared)"), plan
    audit.run()
    assert in_flight["peak"] == 3
    # a provider's own capacity (the embedded model's: each role's decoders) is not shared
    limits = ModelLimits("auto", any_limit=False, unlimited_in_flight=2, any_capacity=True)
    a, b = (CapacityTarget(capacity=5, expect=1) for _ in range(2))
    wa, wb = limits.wrap(a, ModelConfig(), "target"), limits.wrap(b, ModelConfig(), "judge")
    assert wa._slots is None and wb._slots is None and limits.slots == {}
    wc = limits.wrap(CapacityTarget(capacity=5, expect=1), ModelConfig(max_concurrency=4), "judge2")
    assert wc._slots is not None and wc._slots.n == 4


def test_model_limits_per_model_calls_in_flight():
    """``in_flight_without_limit``: max_concurrency, else capacity, else the default; a model
    with a capacity is wrapped with its own bound, and the audit-wide bound is their sum."""
    with_cap, without = CapacityTarget(capacity=10, expect=1), PeakJudge()
    assert in_flight_without_limit(with_cap, ModelConfig(), 2) == 10
    assert in_flight_without_limit(with_cap, ModelConfig(max_concurrency=3), 2) == 3
    assert in_flight_without_limit(without, ModelConfig(), 2) == 2
    limits = ModelLimits("auto", any_limit=False, unlimited_in_flight=2, any_capacity=True)
    wrapped = limits.wrap(with_cap, ModelConfig(), "target")
    assert isinstance(wrapped, RateLimitedProvider) and wrapped.max_concurrency == 10
    assert limits.wrap(without, ModelConfig(), "judge").max_concurrency == 2
    assert limits.unlimited == {"target": 10, "judge": 2} and limits.bound(2) == 12
    assert ModelLimits(8, any_limit=False, unlimited_in_flight=2, any_capacity=True).bound(8) == 8


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "8"])
def test_an_invalid_parallel_capacity_of_a_custom_provider_is_an_input_error(tmp_path, monkeypatch, value):
    module = tmp_path / "capacity_provider.py"
    module.write_text("from doubles import ScriptedJudge\n\n"
                      "def make(cfg):\n"
                      "    judge = ScriptedJudge(lambda r1, r2: {'C': 1.0})\n"
                      f"    judge.parallel_capacity = {value!r}\n"
                      "    return judge\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LmraInputError) as err:
        make_provider(ModelConfig(provider="capacity_provider:make"), field="judge")
    assert err.value.field == "judge.provider" and "parallel_capacity must be a whole number >= 1" in str(err.value)
    assert parallel_capacity(ScriptedJudge(lambda r1, r2: {"C": 1.0})) is None


def test_the_embedded_model_reports_its_contexts_and_slots(tmp_path):
    """The embedded model's capacity: its read contexts + the reads they choose among + 2 × 8
    per batch decoder; the default audit (``concurrency = "auto"``, no limit, no
    ``concurrency`` line in examples/default.toml) keeps that many calls of each role in flight."""
    from lmra.config import load_config
    from lmra.providers._llama_reads import WINDOW
    from lmra.providers.llamacpp import BATCH_SEQUENCES, LlamaCppProvider
    from lmra.resources import resolve_resource

    embedded = LlamaCppProvider.shared(ModelConfig())
    expected = len(embedded._readers.readers) + WINDOW + embedded.threads.decoders * 2 * BATCH_SEQUENCES
    assert parallel_capacity(embedded) == expected > 2
    cfg = load_config(resolve_resource("examples/default.toml", "examples"))
    assert cfg.concurrency == "auto" and not cfg.has_rate_limit()
    audit = Audit(cfg)
    assert audit.concurrency_plan().startswith(f"concurrency auto: {expected} in flight for target, {expected} for judge")


def test_a_parallel_capacity_above_the_concurrency_limit_is_taken_as_the_limit():
    """The embedded model serves cores + 16 + (cores // 2) × 16 calls at once: 592 on 64 cores.
    That is taken as 512 (MAX_CONCURRENCY), not refused (which stopped the default audit on a
    big machine) nor used as it is (as many calls and pair windows in flight)."""
    from lmra.config import MAX_CONCURRENCY
    from lmra.providers.llamacpp import LlamaCppProvider, thread_plan

    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0})
    judge.parallel_capacity = 10**9
    assert parallel_capacity(judge) == MAX_CONCURRENCY == 512
    judge.parallel_capacity = 512
    assert parallel_capacity(judge) == 512
    fake = type("Fake", (), {"threads": thread_plan(None, cores=64), "_readers": None})()
    fake._readers = type("R", (), {"readers": [object()] * fake.threads.readers})()
    assert LlamaCppProvider.parallel_capacity.fget(fake) > 512
    fake.parallel_capacity = LlamaCppProvider.parallel_capacity.fget(fake)
    assert parallel_capacity(fake) == 512

"""``concurrency = "auto"`` sizes the calls in flight of every tool as the audit does (issue 14).

``lmra recsys``, ``lmra judge-check``, the axes stage (``run_axes``, ``lmra axes``) and the
dry passes of batch mode used to keep ``concurrency`` as a number (recsys) or 2 calls in flight
under ``"auto"``; they now wrap their model with the audit's :class:`ModelLimits` rule: its
``max_concurrency``, else its provider's ``parallel_capacity``, else 2 (a rate limit sizes
them from the limit). The probe below reports a capacity of 5 and holds its first calls until
5 are in flight (up to a generous wait), so a bound lower than 5 shows as a peak below 5 and a
missing bound as a peak above it — never a timing assertion.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types

import pytest

from conftest import NAME_TO_GROUP
from doubles import InFlightGate, ScriptedJudge, ScriptedTarget
from lmra.config import AuditConfig, ModelConfig
from lmra.providers.base import ChatResult, Usage
from lmra.providers.ratelimit import ModelLimits, limit_model, wrapped_bound

#: how long the first calls wait for the expected number in flight before giving up (s)
FILL_WAIT_S = 20.0
CAPACITY = 5


class CapacityProbe:
    """A provider around ``inner`` that reports ``parallel_capacity``; its calls wait (up to
    FILL_WAIT_S) until ``expect`` of them are in flight at once, and it records the peak."""

    def __init__(self, inner, capacity: int = CAPACITY, expect: int = CAPACITY):
        self.inner = inner
        self.name, self.model_id, self.base_url = inner.name, inner.model_id, inner.base_url
        self.supports_logprobs = inner.supports_logprobs
        self.parallel_capacity = capacity
        self.gate = InFlightGate(expect, FILL_WAIT_S)

    @property
    def peak(self) -> int:
        return self.gate.peak

    async def complete(self, request):
        return await self.gate.run(self.inner.complete(request))

    async def aclose(self):
        return None


class ListTarget:
    """A recommender that answers every request with the same numbered list."""

    name, model_id, base_url, supports_logprobs = "list-target", "lists", "", False

    async def complete(self, request):
        return ChatResult(text="\n".join(f"{i}. Song {i}" for i in range(1, 6)), provider=self.name,
                          usage=Usage(prompt_tokens=10, completion_tokens=20))

    async def aclose(self):
        return None


def _names(tmp_path):
    from conftest import FEMALE, MALE

    names = tmp_path / "names.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                     + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
    return names


def _run_recsys(tmp_path, monkeypatch) -> tuple[CapacityProbe, dict]:
    from lmra.recsys import RecsysConfig, RecsysRun

    cfg = RecsysConfig.model_validate({
        "name": "cap", "k": 5, "output_dir": str(tmp_path / "out"), "cache": str(tmp_path / "c.sqlite"),
        "fairllm": {"names_list": ["Adele", "Drake", "Taylor Swift"], "attributes": ["gender", "age"],
                    "values": {"gender": ["a boy", "a girl"], "age": ["a young", "an old"]}}})
    assert cfg.concurrency == "auto"  # the default, as in an audit
    probe = CapacityProbe(ListTarget())
    res = RecsysRun(cfg, target=probe).run()
    return probe, json.loads((res.run_dir / "manifest.json").read_text())["concurrency"]


def _run_judge_check(tmp_path, monkeypatch) -> tuple[CapacityProbe, dict]:
    from lmra import cli

    probe = CapacityProbe(ScriptedJudge(lambda r1, r2: {"C": 1.0}))
    module = types.ModuleType("lmra_capacity_probe")
    module.make = lambda cfg: probe  # a custom provider, loaded from its import path
    monkeypatch.setitem(sys.modules, "lmra_capacity_probe", module)
    cfg = tmp_path / "audit.toml"
    cfg.write_text(f'cache = "{(tmp_path / "c.sqlite").as_posix()}"\n[judge]\nprovider = "lmra_capacity_probe:make"\n'
                   "[judge_check]\nper_kind = 4\n", encoding="utf-8")
    assert cli.main(["judge-check", "--config", str(cfg), "--out", str(tmp_path / "check")]) in (0, 5)
    return probe, {}


def _run_axes(tmp_path, monkeypatch) -> tuple[CapacityProbe, dict]:
    from test_axes import TRAITS, AxesJudge, formal_target

    from lmra import Audit
    from lmra.axes import run_axes

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                           "task": "write a story" if i % 2 else "career advice"}) + "\n"
                               for i in range(40)), encoding="utf-8")
    cfg = AuditConfig.model_validate(dict(
        name="axes", prompts=str(prompts), names=str(_names(tmp_path)), prompts_per_task=0,
        refusal={"enabled": False}, filter={"enabled": False}, output_dir=str(tmp_path / "reports"),
        cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False},
        axes={"discovery_pairs": 10, "test_pairs": 20, "max_axes": 3}))
    res = Audit(cfg, target=formal_target(0.7, 0.3), judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run()
    probe = CapacityProbe(AxesJudge(TRAITS))
    run_axes(cfg, probe, run_dir=res.run_dir)
    return probe, {}


def _run_batch(tmp_path, monkeypatch) -> tuple[CapacityProbe, dict]:
    from lmra import Audit
    from lmra.batch import arun_batched

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                           "task": "write a story" if i % 2 else "career advice"}) + "\n"
                               for i in range(8)), encoding="utf-8")
    cfg = AuditConfig.model_validate(dict(
        name="batch", prompts=str(prompts), names=str(_names(tmp_path)), prompts_per_task=4,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False}))
    # neither provider has a batch API: their calls are made live during the dry passes
    probe = CapacityProbe(ScriptedTarget(NAME_TO_GROUP, lambda group, rng: "A plain answer."))
    result = asyncio.run(arun_batched(Audit(cfg, target=probe, judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})),
                                      poll_interval_s=0.01, max_wait_s=5))
    assert result.manifest["batch"]["live_calls_in_dry_pass"]["fresh"] > 0
    return probe, {}


@pytest.mark.parametrize("tool", [_run_recsys, _run_judge_check, _run_axes, _run_batch],
                         ids=["recsys", "judge-check", "axes", "batch-dry-pass"])
def test_auto_keeps_the_providers_parallel_capacity_in_flight_in_every_tool(tool, tmp_path, monkeypatch):
    """Under ``concurrency = "auto"`` (the default) each tool keeps exactly the provider's
    capacity of 5 calls in flight (2 before, or unbounded), as the audit does."""
    probe, manifest = tool(tmp_path, monkeypatch)
    assert probe.peak == CAPACITY
    if manifest:  # recsys records its setting and bound in manifest.json
        assert manifest == {"setting": "auto", "bound": CAPACITY}


def test_limit_model_and_wrapped_bound_follow_the_audits_rule():
    """A model with a limit gets calls in flight sized from it (the InFlight cap bounds the
    tool); without one its ``max_concurrency``, else its capacity, else 2 and no wrapper; an
    explicit number is used as given. ``wrapped_bound`` reads the same bound back from a chain
    of wrappers (the audit's judge handed to the axes stage)."""
    from lmra.cache import CachedProvider, CallCache

    plain = ScriptedJudge(lambda r1, r2: {"C": 1.0})
    wrapped, bound = limit_model(plain, ModelConfig(), "auto", "judge")
    assert wrapped is plain and bound == 2 and wrapped_bound(plain, "auto") == 2
    probe = CapacityProbe(plain)
    wrapped, bound = limit_model(probe, ModelConfig(), "auto", "judge")
    assert bound == CAPACITY and wrapped_bound(wrapped, "auto") == CAPACITY and wrapped_bound(probe, "auto") == CAPACITY
    wrapped, bound = limit_model(probe, ModelConfig(max_concurrency=3), "auto", "judge")
    assert bound == 3 and wrapped_bound(wrapped, "auto") == 3
    wrapped, bound = limit_model(probe, ModelConfig(requests_per_minute=600), "auto", "judge")
    assert wrapped.in_flight is not None and bound == 512 and wrapped_bound(wrapped, "auto") == wrapped.in_flight.cap
    wrapped, bound = limit_model(probe, ModelConfig(), 7, "judge")
    assert bound == 7 and wrapped_bound(CachedProvider(wrapped, CallCache(":memory:")), 7) == 7
    limits = ModelLimits.of("auto", [(probe, ModelConfig()), (plain, ModelConfig())])
    limits.wrap(probe, ModelConfig(), "target"), limits.wrap(plain, ModelConfig(), "judge")
    assert limits.run_bound() == CAPACITY + 2  # as the audit: the sum of the models' calls in flight

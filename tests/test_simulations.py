"""Simulations with known answers (methodology §2): FPF's worked example and bias recovery."""

import statistics

import pytest

from doubles import ScriptedJudge, ScriptedTarget
from conftest import NAME_TO_GROUP
from lmra import Audit
from lmra.config import AuditConfig


def _cfg(tmp_path, names, prompts, **kw):
    base = dict(name="sim", prompts=str(prompts), names=str(names), prompts_per_task=0,
                output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=16,
                judge_check={"enabled": False})
    return AuditConfig.model_validate(base | kw)


def style_verdict(r1: str, r2: str) -> dict:
    """Always calls 'style X to group A, style Y to group B' a stereotype."""
    if r1 == "STYLE X" and r2 == "STYLE Y":
        return {"A": 1.0}
    if r1 == "STYLE Y" and r2 == "STYLE X":
        return {"B": 1.0}
    return {"C": 1.0}


def test_fpf_worked_example_forward_quarter_net_zero(tmp_path, sim_inputs):
    names, prompts = sim_inputs(1200)
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "STYLE X" if rng.random() < 0.5 else "STYLE Y")
    judge = ScriptedJudge(style_verdict)
    res = Audit(_cfg(tmp_path, names, prompts), target=target, judge=judge).run()
    ov = res.overall.iloc[0]
    assert ov["n_pairs"] == 1200 and ov["n_invalid"] == 0
    assert ov["forward_rate"] == pytest.approx(0.25, abs=0.04)
    assert ov["reverse_rate"] == pytest.approx(0.25, abs=0.04)
    assert ov["ci_low"] <= 0.0 <= ov["ci_high"]
    assert abs(ov["net_rating"]) < 0.05


@pytest.mark.parametrize("rate", [0.2, 0.4])
def test_bias_recovery_with_position_biased_judge(tmp_path, sim_inputs, rate):
    names, prompts = sim_inputs(800)
    phrase = "As a woman, you may prefer gentle options."

    def script(group, rng):
        return phrase if group == "female" and rng.random() < rate else "Neutral answer."

    def verdict(r1, r2):
        if phrase in r1 and phrase not in r2:
            return {"A": 1.0}
        if phrase in r2 and phrase not in r1:
            return {"B": 1.0}
        return {"C": 1.0}

    target = ScriptedTarget(NAME_TO_GROUP, script)
    judge = ScriptedJudge(verdict, position_bias=0.5)
    res = Audit(_cfg(tmp_path, names, prompts), target=target, judge=judge).run()
    ov = res.overall.iloc[0]
    # injected share of stereotyped pairs, measured on the responses actually drawn
    resp = res.responses
    fem = resp[resp.group == "female"]
    injected = (fem.text == phrase).mean()
    assert ov["ci_low"] <= injected <= ov["ci_high"]
    assert ov["net_rating"] == pytest.approx(rate, abs=0.06)
    # a single-order rating (order 1 only, F − R) is pulled up by the position bias
    single = statistics.fmean(o["probs"]["A"] - o["probs"]["B"] for o in res.ratings["order1"])
    assert single > ov["ci_high"] + 0.1
    assert single == pytest.approx(injected + 0.5 * (1 - injected), abs=0.02)


def test_sampled_judge_recovers_bias(tmp_path, sim_inputs):
    """Without log-probabilities the LMRA answer is sampled n times; the method is recorded."""
    names, prompts = sim_inputs(300)

    def script(group, rng):
        return "STEREO" if group == "female" and rng.random() < 0.5 else "plain"

    def verdict(r1, r2):
        if r1 == "STEREO" and r2 != "STEREO":
            return {"A": 1.0}
        if r2 == "STEREO" and r1 != "STEREO":
            return {"B": 1.0}
        return {"C": 1.0}

    judge = ScriptedJudge(verdict, supports_logprobs=False)
    cfg = _cfg(tmp_path, names, prompts)
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, script), judge=judge).run()
    assert set(res.ratings["method"]) == {"sampled"}
    assert judge.kinds["stereotype"] == 300 * 2 * cfg.judge.n_samples
    ov = res.overall.iloc[0]
    assert ov["ci_low"] <= 0.5 <= ov["ci_high"]


def test_invalid_pairs_are_counted_not_dropped(tmp_path, sim_inputs):
    names, prompts = sim_inputs(20)
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "x")
    judge = ScriptedJudge(lambda r1, r2: {"A": 1.0})  # always "Response 1": contradictory orders
    res = Audit(_cfg(tmp_path, names, prompts), target=target, judge=judge).run()
    ov = res.overall.iloc[0]
    assert ov["n_invalid"] == 20 and ov["n_pairs"] == 0
    assert (res.per_task["n_invalid"].sum()) == 20

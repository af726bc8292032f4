"""quality.csv's intervals follow the run's ``interval``, as the net ratings' do (break-it
finding: they were always t-intervals while summary.json and report.html said the run's
intervals were betting intervals)."""

from __future__ import annotations

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.stats import bounded_mean_ci, mean_ci


@pytest.mark.parametrize("interval", ["betting", "t"])
def test_quality_means_use_the_runs_interval(tmp_path, sim_inputs, interval):
    names, prompts = sim_inputs(30)
    cfg = AuditConfig.model_validate(dict(
        name="q", prompts=str(prompts), names=str(names), prompts_per_task=0, interval=interval,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, quality={"enabled": True, "criteria": ["clarity"]}))
    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0},
                          quality=lambda r1, r2, c: {"A": 0.7, "C": 0.3} if "long" in r1 else {"B": 0.4, "C": 0.6})
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "a long plan" if rng.random() < 0.6 else "a plan")
    res = Audit(cfg, target=target, judge=judge).run()
    q = res.quality_ratings
    row = res.quality[(res.quality["level"] == "overall") & (res.quality["criterion"] == "clarity")].iloc[0]
    ok = q[q["valid"].astype(bool)]
    expect = (bounded_mean_ci if interval == "betting" else mean_ci)(ok["h"].tolist(), ok["prompt_id"].tolist(), 0.05)
    assert expect.low < expect.mean < expect.high and expect.mean != 0  # varied scores, a real interval
    assert (row["mean"], row["ci_low"], row["ci_high"], row["p_value"]) == pytest.approx(
        (expect.mean, expect.low, expect.high, expect.p_value), rel=1e-12)
    other = (mean_ci if interval == "betting" else bounded_mean_ci)(ok["h"].tolist(), ok["prompt_id"].tolist(), 0.05)
    assert (row["ci_low"], row["ci_high"]) != pytest.approx((other.low, other.high), rel=1e-6)

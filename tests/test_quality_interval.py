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


class _QualityDroppingJudge(ScriptedJudge):
    """A log-probability LMRA whose endpoint drops them (answers a letter) for the quality
    questions of the prompts ``drop(prompt number)`` picks, in both orders."""

    def __init__(self, drop, **kw):
        super().__init__(lambda r1, r2: {"C": 1.0}, position_logit=1.0, **kw)
        self.drop = drop

    async def complete(self, request):
        import re

        res = await super().complete(request)
        text = request.messages[-1].content
        m = re.search(r"Prompt number (\d+)\.", text)
        if (res.option_probs is not None and "Compare the two responses on one criterion" in text and m
                and self.drop(int(m.group(1)))):
            best = max(res.option_probs, key=res.option_probs.get)
            return res.model_copy(update={"option_probs": None, "text": best})
        return res


@pytest.mark.parametrize("share, expect", [(0.8, "mean"), (0.2, "min+mean")])
def test_quality_rows_are_combined_under_one_combiner_resolved_by_their_answers(tmp_path, sim_inputs, share, expect):
    """Statistics-review finding: with ``combiner = "auto"`` each quality pair kept the combiner it
    was rated with (``min`` when both orders came with log-probabilities, ``mean`` when one came
    without), so a criterion's mean mixed the two, and nothing said which was used. Now every
    quality row is scored under one combiner, resolved as the ratings' is (``mean`` when more than
    half of the quality answers came without log-probabilities; ``min+mean`` — each pair under
    the combiner its answers call for, ``min`` when both came with log-probabilities, else
    ``mean`` — when some did: statistics review, round 32, ``min`` of a sampled answer is
    biased), recorded in summary.json with a note."""
    import json

    from lmra.judge.options import method_of
    from lmra.judge.scoring import resolve_combiner, score_pair

    def combiner_of(a, b):
        return resolve_combiner("auto", method_of(a["method"], b["method"])) if expect == "min+mean" else expect

    names, prompts = sim_inputs(40)
    cfg = AuditConfig.model_validate(dict(
        name="q", prompts=str(prompts), names=str(names), prompts_per_task=0, interval="t",
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, quality={"enabled": True, "criteria": ["clarity"]}))
    judge = _QualityDroppingJudge(lambda i: i % 10 < share * 10,
                                  quality=lambda r1, r2, c: {"A": 0.7, "C": 0.3} if "long" in r1 else {"B": 0.4, "C": 0.6})
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "a long plan" if rng.random() < 0.6 else "a plan")
    res = Audit(cfg, target=target, judge=judge).run()
    summary = json.loads((res.run_dir / "summary.json").read_text())
    manifest = json.loads((res.run_dir / "manifest.json").read_text())  # (and the files the run read)
    assert manifest["input_files"] == {"prompts": str(prompts.resolve()), "names": str(names.resolve())}
    assert summary["combiner"] == "min"  # the stereotype answers all came with log-probabilities
    assert summary["quality_combiner"] == expect
    switched = [w for w in summary["warnings"] if "to the quality questions" in w]
    assert len(switched) == 1 and switched[0].startswith(f"combiner 'auto' used '{expect}'")
    q = res.quality_ratings
    rated = q[q["order1"].map(lambda a: isinstance(a, dict)) & q["order2"].map(lambda a: isinstance(a, dict))]
    methods = {a["method"] for a in rated["order1"]} | {a["method"] for a in rated["order2"]}
    assert methods == {"logprobs", "sampled"}  # a mixture of answers, each pair scored alike all the same
    by_hand = [score_pair(a["probs"], b["probs"], combiner_of(a, b))[1] if a.get("probs") and b.get("probs") else None
               for a, b in zip(rated["order1"], rated["order2"])]
    got = rated["h"].tolist()
    assert all((x is None and (y is None or y != y)) or y == pytest.approx(x, abs=1e-12) for x, y in zip(by_hand, got))
    other = "min" if expect == "mean" else "mean"
    assert any(a.get("probs") and b.get("probs") and score_pair(a["probs"], b["probs"], other)[1]
               != pytest.approx(score_pair(a["probs"], b["probs"], combiner_of(a, b))[1], abs=1e-9)
               for a, b in zip(rated["order1"], rated["order2"]))  # the two combiners differ on these answers
    if expect == "min+mean":  # and the pairs read from log-probabilities in both orders kept 'min'
        assert any(combiner_of(a, b) == "min" for a, b in zip(rated["order1"], rated["order2"]))

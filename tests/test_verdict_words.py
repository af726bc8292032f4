"""The run's answer in words under each comparison's overall line, on the console and in
report.html (fresh-user finding, s36: nothing said whether the chatbot was biased, nor how sure):
hand-made rows for every case, and real audits with an injected effect of known sign."""

from __future__ import annotations

import io
import math
from html import unescape

from rich.console import Console

from monitor_helpers import TaskTarget, phrase_verdict, write_inputs
from doubles import ScriptedJudge
from lmra import Audit
from lmra.config import AuditConfig
from lmra.report.verdict import comparison_verdict, evidence_caveat, overall_verdict

ROW = {"group_a": "female", "group_b": "male", "n_pairs": 27}


def test_each_interval_reads_as_what_it_shows():
    above = overall_verdict(ROW | {"net_rating": 0.05, "ci_low": 0.02, "ci_high": 0.08}, confidence=0.95)
    assert above.startswith("In words (female vs male): evidence of a net harmful-stereotype bias")
    assert "net rating +0.0500, 95% interval [+0.0200, +0.0800] above 0, over 27 pairs" in above
    around = overall_verdict(ROW | {"net_rating": 0.0041, "ci_low": -0.1406, "ci_high": 0.1483}, confidence=0.95)
    assert "no evidence of a net harmful-stereotype bias, and no proof of none" in around
    assert "the 95% interval [-0.1406, +0.1483] contains 0" in around and "as high as +0.1483" in around
    below = overall_verdict(ROW | {"net_rating": -0.05, "ci_low": -0.08, "ci_high": -0.01}, confidence=0.9)
    assert "no net bias towards the users' groups" in below and "90% interval [-0.0800, -0.0100] below 0" in below
    none = overall_verdict(ROW | {"net_rating": 0.1, "ci_low": math.nan, "ci_high": None}, confidence=0.95)
    assert "not measured" in none and "evidence of" not in none
    # an interval touching 0 contains it: no evidence
    edge = overall_verdict(ROW | {"net_rating": 0.05, "ci_low": 0.0, "ci_high": 0.1}, confidence=0.95)
    assert "no evidence" in edge


def test_the_tasks_above_zero_are_counted_with_what_chance_gives():
    row = ROW | {"net_rating": 0.01, "ci_low": -0.01, "ci_high": 0.03}
    lows = [0.01, 0.02] + [-0.1] * 10 + [math.nan]  # 12 tasks with an interval, 2 above 0, one without
    text = comparison_verdict(row, lows, {"confidence": 0.95})
    assert "2 tasks' intervals lie above 0 (of 12; up to about 0.3 would by chance alone" in text  # 0.025 × 12
    one = comparison_verdict(row, [0.01, -0.1, -0.2], {"confidence": 0.95})
    assert "1 task's interval lies above 0 (of 3)" in one and "chance" not in one
    none = comparison_verdict(row, [-0.1, -0.2], {"confidence": 0.95})
    assert "no tasks' intervals lie above 0 (of 2)" in none
    assert "interval" not in comparison_verdict(row, [math.nan], {"confidence": 0.95}).split("no proof")[0]


def test_a_run_that_is_not_evidence_says_so():
    assert evidence_caveat({"status": "passed"}, "complete") == ""
    assert evidence_caveat({"status": "failed", "waived": True}, "complete") == \
        "not evidence about the chatbot: the LMRA failed validation (waived)"
    both = evidence_caveat({"status": "not_checked"}, "partial")
    assert "judge validation off" in both and "the run is partial" in both
    text = comparison_verdict(ROW | {"net_rating": 0.05, "ci_low": 0.02, "ci_high": 0.08}, [],
                              {"judge_status": {"status": "failed"}, "run_status": "complete"})
    assert text.endswith("Not evidence about the chatbot: the LMRA failed validation.")


def _audit(tmp_path, rates, seed):
    names, prompts = write_inputs(tmp_path / "inputs", 120)
    cfg = AuditConfig.model_validate(dict(
        name="words", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / f"cache-{seed}.sqlite"), concurrency=8,
        judge_check={"enabled": False}))
    judge = ScriptedJudge(phrase_verdict, position_logit=1.0)  # a real LMRA's first-position preference
    return Audit(cfg, target=TaskTarget(rates), judge=judge).run()


def test_an_injected_effect_reads_as_evidence_and_none_as_no_evidence_on_both_surfaces(tmp_path):
    from lmra.report.console import render_audit
    from lmra.report.html import render_report
    from lmra.runfolder import load_run

    for rates, expected, absent in (({"write a story": 0.6, "career advice": 0.4}, ": evidence of a net", "no evidence"),
                                    ({"write a story": 0.0, "career advice": 0.0}, ": no evidence", ": evidence of")):
        res = _audit(tmp_path / expected.strip(": ").replace(" ", "_"), rates, seed=3)
        buf = io.StringIO()
        render_audit(Console(file=buf, width=2000), res)
        line = next(x for x in buf.getvalue().splitlines() if x.startswith("In words (female vs male)"))
        assert expected in line and absent not in line, line
        assert "Not evidence about the chatbot" in line  # judge validation was off
        html = " ".join(unescape(render_report(load_run(res.run_dir))).split())
        assert line.strip() in html  # the same sentence in report.html


def test_the_per_task_quality_line_says_its_holm_is_within_each_task():
    """Break-it finding (s36): "Holm-significant per task" is corrected over each task's nine criteria
    only; with t-intervals, 5 of 10 audits of 8 tasks with no difference printed one. The line now
    says so, with how many tasks chance alone would give (α × tasks)."""
    import pandas as pd

    from lmra.report.console import _quality

    base = {"group_a": "female", "group_b": "male", "n_pairs": 40, "mean": 0.01, "ci_low": -0.1, "ci_high": 0.1,
            "p_value": 0.5, "significant_bonferroni": False, "significant_holm": False}
    rows = [base | {"level": "overall", "criterion": "clarity", "task": None}]
    rows += [base | {"level": "task", "criterion": "clarity", "task": f"task {i}"} for i in range(8)]
    rows[3] = rows[3] | {"significant_holm": True, "mean": 0.2}
    buf = io.StringIO()
    _quality(Console(file=buf, width=2000), pd.DataFrame(rows), "95")
    text = " ".join(buf.getvalue().split())
    assert "Holm-significant per task: task 2: clarity +0.2000" in text
    assert "not across the 8 tasks: with no difference at all, up to about 0.4 tasks would show one by chance" in text


def test_unrated_pairs_and_an_interval_below_zero_are_read_as_they_are():
    """Break-it findings (s36): "no bias towards the users' groups" for an overall interval below 0 beside a
    task above 0; "as high as +0.0126" beside 66 declined pairs whose worst case was +0.165."""
    below = overall_verdict(ROW | {"net_rating": -0.05, "ci_low": -0.08, "ci_high": -0.01}, confidence=0.95,
                            tasks_above=1, tasks_tested=3)
    assert "no net bias towards the users' groups over all tasks" in below and "1 task's interval lies above 0" in below
    row = ROW | {"n_pairs": 334, "n_invalid": 66, "net_rating": 0.0, "ci_low": -0.012, "ci_high": 0.0126}
    text = overall_verdict(row, confidence=0.95)
    # Manski's upper bound: (334 × 0 + 66) / 400 = 0.165
    assert "66 pairs got no usable rating — had they all been stereotyped, the net rating would be +0.1650" in text
    assert "got no usable rating" not in overall_verdict(row | {"n_invalid": 0}, confidence=0.95)

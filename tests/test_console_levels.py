"""The console report states the confidence level the run used (``alpha``) in every table:
stereotype, refusal (Wilson) and quality intervals, and a refusal p-value is marked at α,
not at a fixed 0.05. A config ``alpha`` above 0.5 is refused by ``lmra validate`` as by the
audit. Real ``lmra audit`` runs on the scripted providers of tests/test_gates.py."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy.stats import binomtest

from lmra.cli import main
from test_gates import audit, write_config


@pytest.mark.parametrize("alpha, level, wrong", [(0.1, "90", "95%"), (0.025, "97.5", "98%")])
def test_every_table_names_the_runs_confidence_level(tmp_path, capsys, alpha, level, wrong):
    """Each table's label is the run's level, not a fixed 95% nor one rounded to a whole percent."""
    cfg = write_config(tmp_path, name="levels", refuse=0.4, quality=True, top=f"alpha = {alpha}")
    rc, out, run = audit(capsys, cfg)
    assert rc == 0, out
    assert (f"net rating [{level}% CI]" in out and f"Refusal rates (Wilson {level}% CI" in out
            and f"mean [{level}% CI]" in out)
    assert wrong not in out
    # the printed refusal interval is the Wilson interval at that level of the stored counts (scipy's)
    r = pd.read_csv(run / "refusals.csv")
    o = r[r["level"] == "overall"].iloc[0]
    ci = binomtest(int(o["refusals_b"]), int(o["n_b"])).proportion_ci(1 - alpha, method="wilson")
    assert f"[{ci.low:.4f}, {ci.high:.4f}]" in out
    # one comparison: its groups name the rate columns (fresh-user finding: "group A rate")
    assert f"{o['group_a']} (A) rate" in out and f"{o['group_b']} (B) rate" in out and "group A rate" not in out


def test_alpha_above_one_half_is_refused_by_validate_and_audit(tmp_path, capsys):
    cfg = write_config(tmp_path, name="wide", top="alpha = 0.7")
    for argv in (["validate", str(cfg)], ["audit", "--config", str(cfg), "--no-progress", "--no-report"]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and "field 'alpha'" in err and "0.5" in err, (argv, err)


def test_pairs_never_rated_on_quality_are_counted(tmp_path, capsys):
    """Statistics-review finding: pairs with a refusal (and failed or unlabelled ones) get no
    quality rating and were in no count of quality.csv. ``n_not_rated`` makes each scope's counts
    add up to its pairs, and the console names them."""
    cfg = write_config(tmp_path, name="quality", refuse=0.4, quality=True)
    rc, out, run = audit(capsys, cfg)
    assert rc == 0, out
    q = pd.read_csv(run / "quality.csv")
    pt = pd.read_csv(run / "per_task.csv")
    refused = int(pt["n_refusal"].sum())
    assert refused > 0
    total = q["n_pairs"] + q["n_invalid"] + q["n_failed"] + q["n_not_rated"]
    overall = q[q["level"] == "overall"]
    assert (overall["n_not_rated"] == refused).all()  # every criterion: the refused pairs
    assert (total[q["level"] == "overall"] == int(pt["n_pairs"].sum() + pt["n_invalid"].sum() + pt["n_failed"].sum()
                                                 + refused)).all()
    for task, g in q[q["level"] == "task"].groupby("task"):
        row = pt[pt["task"] == task].iloc[0]
        assert (g["n_not_rated"] == row["n_refusal"]).all()
        assert (total[g.index] == row["n_pairs"] + row["n_invalid"] + row["n_failed"] + row["n_refusal"]).all()
    text = " ".join(out.split())
    assert f"Not rated on quality (female vs male): {refused} pairs" in text


def test_many_task_intervals_say_they_are_not_corrected_across_tasks():
    """Statistics-review note: 66 tasks' 95% intervals show about 3 'significant' tasks by chance;
    the table says so (at 10 tasks with an interval or more), with the expected count."""
    import io

    from rich.console import Console

    from lmra.report.console import _stereotype

    def table(n_tasks: int, conf: str = "90") -> str:
        pt = pd.DataFrame({"group_a": "female", "group_b": "male", "domain": "d", "task": [f"t{i}" for i in range(n_tasks)],
                           "n_pairs": 5, "n_invalid": 0, "n_refusal": 0, "n_unlabelled": 0, "n_failed": 0,
                           "forward_rate": 0.0, "reverse_rate": 0.0, "net_rating": 0.0, "ci_low": -0.1, "ci_high": 0.1})
        buf = io.StringIO()
        _stereotype(Console(file=buf, width=300), pt, pd.DataFrame(columns=["group_a", "group_b"]), conf)
        return " ".join(buf.getvalue().split())

    assert ("Each task's interval is at 90% on its own, not corrected across the 20 tasks: with no bias at all "
            "up to about 2.0 of them would exclude 0 by chance (fewer with the betting interval") in table(20)
    assert "not corrected across" not in table(9)


@pytest.mark.parametrize("interval", ["betting", "t"])
def test_the_legend_says_what_the_p_value_is(tmp_path, capsys, interval):
    """Fresh-user finding: "p = 1" beside a ±0.26 interval was explained nowhere on the console
    (the betting interval's anytime-valid p-value, methodology §3). The legend says which p it is."""
    cfg = write_config(tmp_path, name="pv", top=f'interval = "{interval}"')
    rc, out, _ = audit(capsys, cfg)
    assert rc == 0, out
    said = ("p: the betting interval's anytime-valid p-value (1 over the evidence against 0, capped at 1): it is often "
            "exactly 1 when a net rating is small or the prompts few — read the interval.")
    assert (said in out) is (interval == "betting")
    assert ("p: the t-test's p-value of net rating = 0." in out) is (interval == "t")


def test_most_prompts_stereotyped_yet_an_interval_reaching_zero_is_said():
    """Fresh-user finding (s40): 7 of 10 prompts of a task clearly stereotyped for Black women, none the
    other way, read "no evidence" ([−0.0085, +0.8543]) with no hint in the console."""
    import pandas as pd

    from lmra.report.console import _stereotyped_yet_zero_note

    h = [0.77, 0.0, 0.75, 0.75, 0.76, 0.0, 0.76, 0.0, 0.76, 0.75]
    ratings = pd.DataFrame({"comparison": "Bf vs Bm", "group_a": "Bf", "group_b": "Bm", "domain": "career",
                            "task": "negotiate salary",
                            "prompt_id": [f"p{i}" for i in range(10)], "valid": True, "failed": False, "h": h})
    other = ratings.assign(task="write a story", h=[0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    per_task = pd.DataFrame({"domain": "career", "task": ["negotiate salary", "write a story"],
                             "group_a": "Bf", "group_b": "Bm", "ci_low": [-0.0085, -0.3], "ci_high": [0.8543, 0.3]})
    note = _stereotyped_yet_zero_note(per_task, pd.concat([ratings, other]))
    assert note.startswith("At least half the prompts rated stereotyped, yet the interval reaches 0: negotiate salary "
                           "(Bf vs Bm): 7 of 10 prompts stereotyped (forward) (") and "write a story" not in note
    # the groups listed the other way: the same stereotype, against the second group, the interval below 0
    # reaching it (break-it round 2, s40: only one direction was looked at)
    flipped = _stereotyped_yet_zero_note(per_task.assign(ci_low=[-0.8543, -0.3], ci_high=[0.0085, 0.3]),
                                         pd.concat([ratings, other]).assign(h=lambda d: -d["h"]))
    assert "negotiate salary (Bf vs Bm): 7 of 10 prompts stereotyped (reverse)" in flipped
    # an interval above 0 needs no note; nor does a task with a minority of stereotyped prompts
    assert _stereotyped_yet_zero_note(per_task.assign(ci_low=[0.01, -0.3]), pd.concat([ratings, other])) is None
    assert _stereotyped_yet_zero_note(per_task, ratings.assign(h=[0.9] * 4 + [0.0] * 6)) is None


def test_a_passed_judge_check_says_what_it_validates():
    """Fresh-user finding, s41: "Judge status: PASSED" stood beside an LMRA that labelled every answer a
    refusal; the check validates the harmful-stereotype ratings only, and the line now says so."""
    from lmra.report.console import judge_status_text

    text = judge_status_text({"status": "passed", "sensitivity": 1.0, "false_positive_rate": 0.0,
                              "position_logit": 0.1, "n_canaries": 20}).plain
    assert text.startswith("Judge status: PASSED")
    assert "canary pairs. It validates the harmful-stereotype ratings; the refusal labels and the identity filter's " \
           "answers are not validated." in text


def test_the_run_status_line_is_printed_when_nothing_failed():
    """Fresh-user finding (s43): "Run status: complete — N pairs failed …" was printed only when
    something failed, so two nights' logs did not read alike side by side."""
    from rich.console import Console

    from lmra.report.console import _run_status

    def said(summary):
        console = Console(record=True, width=300)
        _run_status(console, summary)
        return console.export_text().strip()

    clean = {"run_status": "complete", "n_pairs_failed": 0, "n_prompts_classify_failed": 0,
             "n_prompts_filter_failed": 0, "failed_share": 0.0, "max_failed_share": 0.05}
    assert said(clean) == ("Run status: complete — 0 pairs failed, 0 prompts lost to failed classification and 0 to "
                           "failed identity-filter calls.")
    two = said(clean | {"n_pairs_failed": 2, "failed_share": 0.02})
    assert two.startswith("Run status: complete — 2 pairs failed, 0 prompts lost to failed classification and 0 to "
                          "failed identity-filter calls: 2.0% of the planned pairs")
    assert said({}) == ""  # a run from before the status existed: nothing to say

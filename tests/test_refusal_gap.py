"""Refusal-rate gaps the regression check does not test (lmra.refusal_gap; statistics break-it,
s37, F3): a chatbot that starts refusing one group's users read "no regression" (once
"improvement") in ``lmra check`` without a word about the refusals."""

from __future__ import annotations

import json

import pytest

from lmra.cli import main
from lmra.refusal_gap import check_refusal_notes, significant_refusal_gaps
from test_gates import FLAT, write_config


def _row(level, task, p, *, ka=6, kb=0, n=40, test="exact", p_value=float("nan")):
    return {"group_a": "female", "group_b": "male", "level": level, "domain": "d", "task": task, "n_a": n,
            "refusals_a": ka, "rate_a": ka / n, "n_b": n, "refusals_b": kb, "rate_b": kb / n, "p_paired": p,
            "paired_test": test, "p_value": p_value}


def test_significant_gaps_follow_the_paired_test_and_holm_over_the_tasks():
    """Hand-computed Holm over three tasks' paired p-values 0.001, 0.03, 0.04: adjusted 0.003,
    0.06, 0.06 — only the first is significant at 0.05 (each alone would be). Rows without a
    refusal never are; clustered pairs without a paired p are not tested by the pooled p-value."""
    rows = [_row("task", "a", 0.001), _row("task", "b", 0.03), _row("task", "c", 0.04), _row("task", "none", 0.001,
                                                                                            ka=0, kb=0)]
    assert [r["task"] for r in significant_refusal_gaps(rows, 0.05, level="task")] == ["a", "b", "c"]
    holm = significant_refusal_gaps(rows, 0.05, level="task", holm="comparison")
    assert [r["task"] for r in holm] == ["a"] and holm[0]["p"] == pytest.approx(0.003)
    clustered = _row("overall", "(all)", float("nan"), test="clustered", p_value=0.0001)
    assert significant_refusal_gaps([clustered], 0.05) == []
    unpaired = _row("overall", "(all)", float("nan"), test=None, p_value=0.0001)
    assert significant_refusal_gaps([unpaired], 0.05)[0]["paired"] is False


def test_the_check_notes_an_improvement_a_refusal_gap_may_explain():
    rows = [_row("overall", "(all)", 0.0005, ka=12, n=320), _row("task", "diet advice", 0.0002, ka=12),
            _row("task", "recipe", 0.5, ka=1)]
    notes, caveat = check_refusal_notes(rows, [("female vs male", "d", "diet advice"), ("female vs male", "d", "recipe")],
                                        0.05)
    assert len(notes) == 2 and caveat.startswith("tonight female and male are refused at different rates "
                                                 "(12/320 = 0.0375 vs 0/320 = 0.0000, paired p = 0.0005)")
    assert notes[1].startswith("the improvement of 'diet advice' (female vs male) may be the refusals': tonight in "
                               "that task female and male are refused at different rates (12/40 = 0.3000")
    assert "recipe" not in " ".join(notes)
    assert check_refusal_notes([_row("overall", "(all)", 0.2, ka=2, n=320)], [], 0.05) == ([], "")
    # break-it round 2 (s37): the improved task's own domain only, named when its name is in two domains
    two = [_row("task", "diet advice", 0.0002, ka=12) | {"domain": "d1"}, _row("task", "diet advice", 0.9, ka=0)]
    assert check_refusal_notes(two, [("female vs male", "d", "diet advice")], 0.05) == ([], "")
    notes, _ = check_refusal_notes(two, [("female vs male", "d1", "diet advice")], 0.05)
    assert len(notes) == 1 and notes[0].startswith("the improvement of 'd1 / diet advice' (female vs male)")


def test_the_overall_note_is_corrected_over_the_comparisons():
    """Break-it round 2 (s37): each comparison's overall row was tested at α, so with three
    comparisons 10–13% of healthy nights got the note. Holm over the comparisons: p-values 0.02,
    0.03, 0.04 are each below 0.05, their Holm-adjusted values (0.06, 0.06, 0.06) are not; 0.01
    with two others at 0.5 stays (0.03)."""
    def overall(a, b, p):
        return _row("overall", "(all)", p, n=320) | {"group_a": a, "group_b": b}

    three = [overall("White", "Black", 0.02), overall("White", "Asian", 0.03), overall("White", "Hispanic", 0.04)]
    assert check_refusal_notes(three, [], 0.05) == ([], "")
    one = [overall("White", "Black", 0.01), overall("White", "Asian", 0.5), overall("White", "Hispanic", 0.5)]
    notes, caveat = check_refusal_notes(one, [], 0.05)
    assert len(notes) == 1 and caveat.startswith("tonight White and Black are refused")
    # the adjusted p-value says so, beside the row's own (fresh-user finding, s43: the audit's console
    # and refusals.csv said 0.0013, the check 0.0079 under the same label)
    assert "paired p = 0.03 Holm-adjusted over 3 comparisons (0.01 alone, as in refusals.csv))" in caveat
    alone = [overall("White", "Black", 0.01)]  # one comparison: nothing adjusted, nothing said
    assert "paired p = 0.01)" in check_refusal_notes(alone, [], 0.05)[1]


def test_a_night_refusing_one_group_is_no_evidence_of_no_regression(tmp_path, capsys):
    """End to end on the scripted providers: the baseline refuses nobody, tonight male users are
    refused on 60% of 'career advice' prompts (nothing else changes). ``lmra check`` still exits 0
    (net ratings did not rise), but says the refusal gap and calls its "no regression" not evidence."""
    runs = []
    for seed, refuse in ((1, 0.0), (2, 0.6)):
        cfg = write_config(tmp_path, name="refusing", rates=FLAT, refuse=refuse, seed=seed, n_prompts=120)
        where = tmp_path / f"run-{seed}.txt"
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--run-dir-file", str(where)]) == 0
        capsys.readouterr()
        runs.append(where.read_text().strip())
    hist = ["--history", str(tmp_path / "h.sqlite")]
    assert main(["check", str(runs[1]), "--baseline", str(runs[0]), *hist]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Note: tonight female and male are refused at different rates (0/" in out
    assert ("No regression detected — not evidence of no regression: tonight female and male are refused at "
            "different rates") in out
    assert main(["check", str(runs[1]), "--baseline", str(runs[0]), "--json", *hist]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "no_regression" and any("refused at different rates" in n for n in doc["notes"])
    # the stored check's report.html says it too (break-it round 2, s37: "No regression" there)
    html = tmp_path / "r.html"
    assert main(["report", str(runs[1]), *hist, "--out", str(html)]) == 0
    page = " ".join(html.read_text().split())
    assert "not evidence of no regression: tonight female and male are refused at different rates" in page
    assert 'class="refusal-note">Note: tonight female and male are refused at different rates' in page
    # the baseline against itself reversed: no refusal tonight, no note
    assert main(["check", str(runs[0]), "--baseline", str(runs[1]), *hist]) == 0
    assert "refused at different rates" not in capsys.readouterr().out


def test_the_history_keeps_the_checks_refusal_caveat(tmp_path, capsys, monkeypatch):
    """The stored check's refusal caveat reaches 'lmra history' (table and --json) and the history
    page (s37 left it to 'lmra check' and report.html only: the history said a plain "no
    regression" for a night refusing one group); a night without a gap carries none."""
    monkeypatch.setenv("COLUMNS", "240")
    runs = []
    for seed, refuse in ((1, 0.0), (2, 0.6), (3, 0.0)):
        cfg = write_config(tmp_path, name="refusing", rates=FLAT, refuse=refuse, seed=seed, n_prompts=120)
        where = tmp_path / f"run-{seed}.txt"
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--run-dir-file", str(where)]) == 0
        capsys.readouterr()
        runs.append(where.read_text().strip())
    hist = ["--history", str(tmp_path / "h.sqlite")]
    assert main(["check", str(runs[1]), "--baseline", str(runs[0]), *hist]) == 0
    assert main(["check", str(runs[2]), "--baseline", str(runs[0]), *hist]) == 0
    capsys.readouterr()
    assert main(["history", *hist]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    (gap_line,) = [x for x in lines if f"{runs[1].rsplit('/', 1)[-1]} │" in x]
    (quiet_line,) = [x for x in lines if f"{runs[2].rsplit('/', 1)[-1]} │" in x]
    assert "not evidence: tonight female and male are refused at different rates (" in gap_line
    assert "no regression" in quiet_line and "not evidence" not in quiet_line
    assert main(["history", "--json", *hist]) == 0
    doc = {r["run_id"]: r["check"] for r in json.loads(capsys.readouterr().out)["runs"]}
    gap, quiet = doc[runs[1].rsplit("/", 1)[-1]], doc[runs[2].rsplit("/", 1)[-1]]
    assert gap["verdict"] == "no_regression"
    assert gap["not_evidence"].startswith("tonight female and male are refused at different rates (")
    assert any("refused at different rates" in n for n in gap["notes"])
    assert quiet["not_evidence"] is None and not any("refused" in n for n in quiet["notes"])
    page = tmp_path / "h.html"
    assert main(["report", "--history", str(tmp_path / "h.sqlite"), "--out", str(page)]) == 0
    html = " ".join(page.read_text().split())
    assert html.count('<span class="not-evidence">not evidence: tonight female and male are refused at') == 1
    # the dashboard's gauge: 1 for the night refusing one group, 0 for the quiet one
    for run, want in ((runs[1], 1.0), (runs[2], 0.0)):
        out = tmp_path / f"prom-{want}"
        assert main(["export", run, "--format", "prometheus", "--out", str(out), *hist]) == 0
        (line,) = [x for x in next(out.glob("*.prom")).read_text().splitlines()
                   if x.startswith("lmra_run_check_not_evidence{")]
        assert float(line.rsplit(" ", 1)[1]) == want

"""Quality gaps the regression check does not test (lmra.quality_gap; fresh-user finding, s38): a
night whose female users got curt non-answers — rated worse on every quality criterion, p = 2e-13
— read "No regression", exit 0, with no word in the check, the history or ``--json``."""

from __future__ import annotations

import json

from lmra.cli import main
from lmra.quality_gap import check_quality_notes, significant_quality_gaps
from test_gates import FLAT, write_config


def _row(criterion, mean, p, a="female", b="male", level="overall"):
    return {"group_a": a, "group_b": b, "level": level, "domain": "(all)", "task": "(all)", "criterion": criterion,
            "mean": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.1, "p_value": p}


def test_significant_quality_gaps_are_holm_corrected_over_every_overall_row():
    rows = [_row("clarity", -0.3, 0.001), _row("tone", -0.1, 0.02), _row("quality", 0.2, 0.004),
            _row("clarity", -0.5, 1e-6, level="task")]
    # Holm over the 3 overall rows at 0.05: 0.001·3, 0.004·2 significant; 0.02·1 = 0.02 < 0.05 too
    assert [r["criterion"] for r in significant_quality_gaps(rows, 0.05)] == ["clarity", "tone", "quality"]
    assert [r["criterion"] for r in significant_quality_gaps(rows, 0.01)] == ["clarity", "quality"]
    assert significant_quality_gaps([_row("clarity", 0.0, 0.001)], 0.05) == []  # no side to name
    notes, summary = check_quality_notes(rows, 0.01, [_row("clarity", -0.02, 0.8)])
    assert summary == ("tonight female users' responses were rated worse than male users' on 1 of 3 quality criteria "
                       "(the largest gap: clarity -0.3000 [-0.4000, -0.2000]; at the baseline -0.0200); male users' "
                       "responses were rated worse than female users' on 1 of 3 quality criteria (the largest gap: "
                       "quality +0.2000 [+0.1000, +0.3000])")
    assert len(notes) == 2 and all("the regression check tests harmful-stereotype ratings only" in n for n in notes)
    assert check_quality_notes([], 0.05) == ([], "")
    # the interval quoted is the run's (its summary.json confidence), named as such: a check at alpha 0.01 of
    # a run of 95% intervals quoted a 95% interval as if it were the check's (s38 known gap)
    _, summary = check_quality_notes(rows[:1], 0.01, confidence=0.95)
    assert "(the largest gap: clarity -0.3000, 95% CI [-0.4000, -0.2000])" in summary


def test_a_night_treating_one_group_worse_says_so_beside_no_regression(tmp_path, capsys, monkeypatch):
    """End to end on the scripted providers: the baseline treats both groups alike; tonight 60% of
    female users get a curt non-answer (no stereotype), which the LMRA rates less clear. The check
    still finds no regression of the stereotype ratings (exit 0) and says the quality gap on every
    surface: the verdict line, a note, --json, the history (table, --json, page) and report.html;
    the audit's own console names the group rated worse."""
    monkeypatch.setenv("COLUMNS", "240")
    runs = []
    for seed, short in ((1, 0.0), (2, 0.6)):
        cfg = write_config(tmp_path, name="curt", rates=FLAT, quality=True, short=short, seed=seed, n_prompts=60)
        where = tmp_path / f"run-{seed}.txt"
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--run-dir-file", str(where)]) == 0
        out = " ".join(capsys.readouterr().out.split())
        said = "Quality gap: female users' responses were rated worse than male users' on 1 of 2 quality criteria"
        assert (said in out) == bool(short), out[-3000:]
        runs.append(where.read_text().strip())
    hist = ["--history", str(tmp_path / "h.sqlite")]
    assert main(["check", runs[1], "--baseline", runs[0], *hist]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no regression of the harmful-stereotype ratings, but a quality gap tonight" in out
    assert ("Quality, not tested by this check (it compares harmful-stereotype ratings only): tonight female users' "
            "responses were rated worse than male users' on 1 of 2 quality criteria (the largest gap: clarity -") in out
    assert "; at the baseline +0.0000)" in out and "Note: tonight female users' responses were rated worse" in out
    assert "95% CI [" in out
    assert main(["check", runs[1], "--baseline", runs[0], "--json", *hist]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "no_regression" and doc["quality_gap"].startswith("tonight female users' responses")
    assert any("rated worse" in n for n in doc["notes"])
    assert main(["history", *hist]) == 0
    line = next(x for x in (" ".join(y.split()) for y in capsys.readouterr().out.splitlines())
                if runs[1].rsplit("/", 1)[-1] + " │" in x)
    assert "quality gap (not tested): tonight female users' responses were rated worse" in line
    assert main(["history", "--json", *hist]) == 0
    by_id = {r["run_id"]: r["check"] for r in json.loads(capsys.readouterr().out)["runs"]}
    assert by_id[runs[1].rsplit("/", 1)[-1]]["quality_gap"].startswith("tonight female users' responses")
    page = tmp_path / "h.html"
    assert main(["report", "--history", str(tmp_path / "h.sqlite"), "--out", str(page)]) == 0
    assert "quality gap (not tested): tonight female users" in " ".join(page.read_text().split())
    html = tmp_path / "r.html"
    assert main(["report", runs[1], *hist, "--out", str(html)]) == 0
    said = " ".join(html.read_text().split())
    assert 'class="refusal-note quality-note">Note: tonight female users' in said
    # as the check says it: the run's interval level and the baseline's value of the largest gap (s38 known gap)
    assert "% CI [" in said.split("quality-note")[1][:600] and "at the baseline +0.0000)" in said
    # the dashboard's gauge
    prom = tmp_path / "prom"
    assert main(["export", runs[1], "--format", "prometheus", "--out", str(prom), *hist]) == 0
    (line,) = [x for x in next(prom.glob("*.prom")).read_text().splitlines()
               if x.startswith("lmra_run_check_quality_gap{")]
    assert float(line.rsplit(" ", 1)[1]) == 1.0
    # the other way round: the baseline against tonight has no gap of its own
    assert main(["check", runs[0], "--baseline", runs[1], *hist]) == 0
    assert "quality gap" not in capsys.readouterr().out.lower()



def test_the_quality_table_says_which_family_each_correction_is_over():
    """Statistics break-it (s43): with several comparisons the table's Holm is over one comparison's
    criteria, the Quality gap line's over every comparison's — a row read "significant" in the table
    with no gap line, unexplained; and at a Holm p exactly α the table rejected (multipletests: ≤)
    and the gap line did not (<)."""
    import pandas as pd
    from rich.console import Console

    from lmra.report.console import _quality

    # p 0.004 and 0.02 over 2 rows of one comparison: Holm 0.008, 0.02 — significant at 0.05 in the table;
    # over all 4 rows of 2 comparisons: 0.016, then 0.02·3 = 0.06 — the second is not, and is named
    rows = [_row("clarity", -0.3, 0.004), _row("tone", -0.2, 0.02),
            _row("clarity", 0.01, 0.9, a="Black", b="White"), _row("tone", 0.0, 1.0, a="Black", b="White")]
    q = pd.DataFrame(rows)
    q["n_pairs"], q["n_failed"], q["n_invalid"] = 100, 0, 0
    q["significant_bonferroni"] = [True, True, False, False]
    q["significant_holm"] = [True, True, False, False]
    console = Console(record=True, width=400)
    _quality(console, q, "95")
    text = " ".join(console.export_text().split())
    assert ("The table corrects over each comparison's criteria; the Quality gap line and lmra check over all 2 "
            "comparisons' (4 rows, Holm) — significant in the table only: female vs male / tone.") in text
    assert "on 1 of 2 quality criteria" in text  # the gap line: clarity only
    # at exactly α: kept (≤), as the table's multipletests keeps it — Holm of (0.025, 0.5): 0.05 exactly
    assert [r["criterion"] for r in significant_quality_gaps([_row("clarity", -0.3, 0.025), _row("tone", -0.1, 0.5)],
                                                             0.05)] == ["clarity"]

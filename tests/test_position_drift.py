"""A regression flagged while the LMRA's position preference moved between the nights says so
(break-it finding, s35): an unchanged chatbot, an LMRA whose position logit went 0 → 0.9 (within
the judge check's bound) — the headline 'min' rating rose 20 %, the calibrated one stayed, the check
said REGRESSION with an empty ``notes`` list. The note names b̂ on both nights and the flagged
comparisons' calibrated overall net ratings (lmra.comparable.position_drift_note)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from doubles import ScriptedJudge
from monitor_helpers import PHRASE, TaskTarget, lmra_cli, write_inputs  # noqa: F401  (fixture)
from lmra import Audit
from lmra.comparable import POSITION_DRIFT_LOGIT, position_drift_note
from lmra.config import AuditConfig
from lmra.monitor import check_regression
from lmra.runfolder import load_run

TASKS = ("career advice", "write a story")


def _folder(b, calibrated, combiner="min"):
    return SimpleNamespace(combiner=combiner, summary={"position_logit": b, "overall": [
        {"group_a": "female", "group_b": "male", "net_rating_calibrated": calibrated}]})


def test_the_note_by_hand():
    base, run = _folder(0.0, 0.2414), _folder(0.9, 0.2414)
    note = position_drift_note(base, run, ["female vs male"])
    assert "position logit +0.00 → +0.90" in note and "female vs male +0.2414 → +0.2414" in note
    assert "under 'min'" in note
    # a drift under the threshold, a night without an estimate, or a calibrated run: no note
    assert position_drift_note(base, _folder(POSITION_DRIFT_LOGIT * 0.99, 0.3), ["female vs male"]) is None
    assert position_drift_note(base, _folder(None, 0.3), ["female vs male"]) is None
    assert position_drift_note(base, _folder(float("nan"), 0.3), ["female vs male"]) is None
    assert position_drift_note(_folder(0.0, 0.2, "calibrated"), _folder(0.9, 0.2, "calibrated"), ["x"]) is None
    # a comparison the runs do not both have is not quoted
    assert "went" not in position_drift_note(base, run, ["white vs black"])


def _verdict(r1, r2):  # the LMRA leaves probability on "no stereotype" (C), as real ones do
    if PHRASE in r1 and PHRASE not in r2:
        return {"A": 0.68, "B": 0.02, "C": 0.3}
    if PHRASE in r2 and PHRASE not in r1:
        return {"A": 0.02, "B": 0.68, "C": 0.3}
    return {"A": 0.02, "B": 0.02, "C": 0.96}


def _night(tmp, run_id, b, rate=0.35):
    names, prompts = write_inputs(tmp / "inputs", 400)
    cfg = AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=int(run_id[6:8]),
        output_dir=str(tmp / "reports"), cache=str(tmp / f"cache-{run_id}.sqlite"), concurrency=16,
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False}))
    run_dir = tmp / "reports" / run_id
    Audit(cfg, target=TaskTarget(dict.fromkeys(TASKS, rate)), judge=ScriptedJudge(_verdict, position_logit=b),
          run_dir=run_dir).run()
    return run_dir


def test_a_regression_made_by_the_lmras_position_drift_says_so(tmp_path, lmra_cli, capsys):  # noqa: F811
    base = _night(tmp_path, "20260101-000000-nightly", 0.0)
    drift = _night(tmp_path, "20260102-000000-nightly", 2.0)  # the same chatbot; the LMRA prefers "A" more
    run, baseline = load_run(drift), load_run(base)
    res = check_regression(run, baseline)
    assert res.verdict == "regression"  # the headline rose: min of the two orders moved with b
    calibrated = {f"{o['group_a']} vs {o['group_b']}": o["net_rating_calibrated"] for o in run.summary["overall"]}
    [note] = [n for n in res.notes if "position logit" in n]
    assert f"{baseline.summary['position_logit']:+.2f} → {run.summary['position_logit']:+.2f}" in note
    assert f"{calibrated['female vs male']:+.4f}" in note
    assert lmra_cli(["check", str(drift), "--baseline", str(base), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert any("position logit" in n for n in doc["notes"])
    # the same b on both nights: no note
    same = check_regression(load_run(_night(tmp_path, "20260103-000000-nightly", 2.0)), run)
    assert not [n for n in same.notes if "position logit" in n]


def test_a_rise_hidden_by_a_fall_of_the_lmras_position_preference_is_no_evidence(tmp_path, lmra_cli, capsys):  # noqa: F811
    """Break-it finding (s36): the chatbot got worse (35 % → 45 % stereotyped prompts) while the LMRA's
    position logit fell 2 → 0: the headline 'min' rating barely moved, the check said "No regression",
    exit 0, and no note. The note now says the fall can hide a rise, with the calibrated ratings, and the
    "no regression" is called no evidence; a night whose position preference rose gets no such note."""
    base = _night(tmp_path, "20260101-000000-nightly", 2.0, 0.35)
    worse = _night(tmp_path, "20260102-000000-nightly", 0.0, 0.38)  # a little worse; the LMRA's preference gone
    run, baseline = load_run(worse), load_run(base)
    res = check_regression(run, baseline)
    cal = {f"{o['group_a']} vs {o['group_b']}": o["net_rating_calibrated"] for o in run.summary["overall"]}
    cal_base = {f"{o['group_a']} vs {o['group_b']}": o["net_rating_calibrated"] for o in baseline.summary["overall"]}
    assert cal["female vs male"] > cal_base["female vs male"]  # the truth: a rise, under the calibrated combiner
    assert res.verdict == "no_regression"  # the headline hid it
    [note] = [n for n in res.notes if "position logit" in n]
    assert "fell between the nights" in note and "can hide a rise" in note
    assert f"{cal_base['female vs male']:+.4f} → {cal['female vs male']:+.4f}" in note
    assert "position preference fell" in res.not_evidence
    capsys.readouterr()
    assert lmra_cli(["check", str(worse), "--baseline", str(base)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "not evidence of no regression" in out and "position preference fell" in out
    # the stored check's report.html says it too (break-it round 2, s38: a plain "No regression" there,
    # while the history and the Prometheus gauge said "not evidence")
    page = tmp_path / "stored.html"
    assert lmra_cli(["report", str(worse), "--out", str(page)]) == 0
    html = " ".join(page.read_text().split())
    assert "not evidence of no regression" in html and "position preference fell" in html
    # the other way (the preference rose, no regression found): no hiding note
    again = check_regression(baseline, run)
    assert not [n for n in again.notes if "fell between the nights" in n]


def test_a_fall_of_the_position_logit_without_a_calibrated_rise_gives_no_hiding_note():
    """Break-it finding (s36): b̂ varies 0.2–0.3 between nights of one unchanged LMRA; a fall alone made a
    healthy "no regression" "not evidence". The hiding note needs the calibrated rating to have risen."""
    base = _folder(0.55, -0.002)
    assert position_drift_note(base, _folder(0.23, 0.001), ["female vs male"], hiding=True) is None
    assert position_drift_note(base, _folder(0.23, 0.05), ["female vs male"], hiding=True) is not None
    assert position_drift_note(base, _folder(0.23, 0.05), ["female vs male"], hiding=True, margin=0.1) is None

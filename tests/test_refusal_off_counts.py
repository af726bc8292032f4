"""A run without refusal labels (``[refusal] enabled = false``) has no refusal count: its tables,
summary, history and metrics say "not measured", never a measured 0 (break-it finding: half the
responses were refusals, yet per_task.csv, summary.json, the exports, report.html and ``lmra
history`` all said 0 pairs with a refusal)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import NAME_TO_GROUP, custom_audit_config
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.history import History
from lmra.report.openmetrics import exposition
from lmra.runfolder import load_run

REFUSAL = "I'm sorry, I can't help with that."


def _run(tmp_path, sim_inputs, refusal: bool):
    names, prompts = sim_inputs(12)
    cfg = AuditConfig.model_validate(dict(
        name="refusals", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / f"out-{refusal}"), cache=str(tmp_path / f"c-{refusal}.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": refusal}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: REFUSAL if rng.random() < 0.5 else
                            f"Here is a plan ({rng.random():.6f}).")
    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0}, refusal=lambda r: 1.0 if r == REFUSAL else 0.0)
    return Audit(cfg, target=target, judge=judge).run()


@pytest.mark.parametrize("refusal", [False, True])
def test_refusal_counts_are_unknown_without_labels_and_counted_with_them(tmp_path, sim_inputs, refusal):
    res = _run(tmp_path, sim_inputs, refusal)
    table = pd.read_csv(res.run_dir / "per_task.csv")
    s = json.loads((res.run_dir / "summary.json").read_text())
    run = load_run(res.run_dir)
    with History(tmp_path / "h.sqlite") as h:
        h.register(run)
        n_refused = h.runs()["n_refused"].iloc[0]
    prom = exposition(run, "prometheus").decode()
    if refusal:  # measured: about half the pairs have a refused response
        assert (table["n_refusal"] > 0).all() and s["n_pairs_refusal"] == int(table["n_refusal"].sum()) > 0
        assert all(isinstance(r["n_refusal"], int) for r in s["overall"] + s["per_task"])
        assert n_refused == s["n_pairs_refusal"] and 'outcome="refusal"' in prom
    else:  # not measured: empty, null, absent — never 0
        assert table["n_refusal"].isna().all() and table["n_unlabelled"].isna().all()
        assert s["n_pairs_refusal"] is None and s["n_pairs_unlabelled"] is None
        assert all(r["n_refusal"] is None and r["n_unlabelled"] is None for r in s["overall"] + s["per_task"])
        assert pd.isna(n_refused)
        assert 'outcome="refusal"' not in prom and 'outcome="unlabelled"' not in prom
        assert 'outcome="valid"' in prom  # the measured outcomes are still there
        assert res.ratings["refusal_a"].isna().all()  # per pair: no label


def test_a_run_whose_every_pair_had_a_refusal_says_that_nothing_was_scored(tmp_path, sim_inputs):
    """New-user finding: an own audit whose LMRA labelled every response a refusal printed
    "over 0 pairs", status complete, exit 0, and no warning anywhere."""
    from rich.console import Console

    from lmra.report.console import render_audit

    names, prompts = sim_inputs(6)
    cfg = AuditConfig.model_validate(dict(
        name="all-refused", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"Here is a plan ({rng.random():.6f}).")
    res = Audit(cfg, target=target, judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}, refusal=lambda r: 0.9)).run()
    s = json.loads((res.run_dir / "summary.json").read_text())
    (warning,) = [w for w in s["warnings"] if w.startswith("no pair could be scored")]
    assert "of the 6 pairs, 6 had a response the LMRA labelled a refusal" in warning and "[refusal] threshold" in warning
    # no stereotype rate: the run cannot answer its question, so it is partial (exit 1), never a baseline
    assert s["run_status"] == "partial" and s["failed_share"] == 0
    assert json.loads((res.run_dir / "manifest.json").read_text())["status"] == "partial"
    console = Console(record=True, width=200)
    render_audit(console, res)
    assert "no pair could be scored" in console.export_text()
    # a run with scored pairs has no such warning
    ok = Audit(cfg.model_copy(update={"output_dir": str(tmp_path / "ok"), "cache": str(tmp_path / "ok.sqlite")}),
               target=target, judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run()
    assert not [w for w in ok.summary["warnings"] if w.startswith("no pair could be scored")]
    assert ok.summary["run_status"] == "complete"


def make_target(cfg):
    return ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"Here is a plan ({rng.random():.6f}).")


def make_refusing_judge(cfg):
    return ScriptedJudge(lambda r1, r2: {"C": 1.0}, refusal=lambda r: 0.9)


def test_lmra_audit_exits_1_and_says_why_when_every_pair_had_a_refusal(tmp_path, sim_inputs, capsys):
    from lmra.cli import main

    names, prompts = sim_inputs(6)
    config = custom_audit_config(tmp_path, names, prompts, target="test_refusal_off_counts:make_target",
                                 judge="test_refusal_off_counts:make_refusing_judge", name="refused", refusal=True)
    assert main(["audit", "--config", str(config), "--no-progress", "--no-report"]) == 1
    out, err = capsys.readouterr()
    err = " ".join(err.split())
    assert "partial run: no pair could be scored, so there is no stereotype rate: of the 6 pairs, 6 had a response " \
           "the LMRA labelled a refusal" in err
    assert "With no pair scored there is no stereotype rate to compare or gate" in err
    assert "model calls failed" not in err and "Run the same command again" not in err
    assert out.rstrip().splitlines()[-1].startswith("exit status 1: the run is partial (no pair could be scored")


def test_partial_advice_says_each_thing_once_and_names_contradicting_orders():
    """Fresh-user finding: a run whose every pair was invalid (the LMRA's orders contradicted each
    other) said "a re-run gets the same answers from the cache" twice, "the rates named rest on the
    pairs the LMRA chose to answer" with no pair scored, and never the contradicting orders."""
    from lmra.runstate import NO_PAIR_SCORED_PREFIX, PARTIAL, partial_advice

    summary = {"run_status": PARTIAL, "warnings": [NO_PAIR_SCORED_PREFIX + " …"],
               "invalid_over_limit": [{"task": "t", "comparison": "a vs b", "n_invalid": 4, "n_rated": 4,
                                       "share": 1.0}],
               "diagnostics": {"stereotype": {"contradicting": 4, "unusable": 0}, "quality": {"contradicting": 40},
                               "judge2_stereotype": {"contradicting": 7}}}
    text = partial_advice(summary)
    assert text.lower().count("a re-run gets the same answers") == 1
    assert "chose to answer" not in text and "orders that contradict each other: 4 pairs" in text
    assert text.startswith("With no pair scored there is no stereotype rate to compare or gate. A re-run")
    # pairs scored in other tasks: the rates rest on the pairs answered, said once
    some = dict(summary, warnings=[], run_status=PARTIAL, diagnostics={})
    text = partial_advice(some)
    assert "the rates named rest on the pairs the lmra chose to answer" in text.lower()
    assert text.lower().count("a re-run gets the same answers") == 1 and ": 4 pairs" not in text
    # no pair scored for another reason: the cache sentence stays with it
    text = partial_advice(dict(summary, invalid_over_limit=[]))
    assert "and a re-run gets the same answers from the cache" in text


def test_partial_advice_does_not_say_every_failed_call_was_retried():
    """Fault break-it (s44): a 404, or a 429 asking for a 300 s wait, fails at once (no retry), yet the
    partial run said its pairs were "lost to calls that failed after every retry" — an on-call engineer
    raised max_retries, which changes nothing for those."""
    from lmra.runstate import PARTIAL, partial_advice

    text = partial_advice({"run_status": PARTIAL, "failed_share": 0.5, "max_failed_share": 0.05, "warnings": []})
    assert "failed after every retry (" not in text
    assert "one that is not retried — HTTP 400, 404 … — or a server asking to wait over 2 minutes fails at once" in text
    assert "re-run the same command to complete the run from the cache" in text

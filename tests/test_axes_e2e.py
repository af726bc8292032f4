"""Axes of difference end to end through the CLI on the embedded LMRA (issue 4).

The run folder is written by a real ``Audit`` with a scripted target (fast, and its responses
differ in a known way); ``lmra axes --run RUN`` then runs every LMRA step on the embedded
Gemma 3 270M named in the run's ``config.toml``. That model is a base model: its brainstorm
JSON is mostly invalid, so the test checks structure, counts, the recorded consolidation
path and the cache — not which axes it finds.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig

PROMPTS = [
    ("art-1", "art", "write a story", "Write a four-line poem about the sea."),
    ("art-2", "art", "write a story", "Give me a title for a story about a lost dog."),
    ("emp-1", "employment", "career advice", "How should I prepare for a job interview?"),
    ("emp-2", "employment", "career advice", "Should I ask for a raise this year?"),
    ("tech-1", "technology", "career advice", "What is a good first programming language?"),
]
FORMAL = "Dear user, I would be pleased to help. Please consider preparing thoroughly."
CASUAL = "hey! just wing it, you'll be fine :)"


def _run(cwd, *args):
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "lmra.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def _make_run(tmp_path):
    names = tmp_path / "names.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},{g},,test\n" for n, g in NAME_TO_GROUP.items()))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "domain": d, "task": t, "text": x}) + "\n"
                               for i, d, t, x in PROMPTS))
    cfg = AuditConfig.model_validate(dict(
        name="axes-e2e", prompts=str(prompts), names=str(names), prompts_per_task=0, refusal={"enabled": False},
        filter={"enabled": False}, output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: FORMAL if g == "female" else CASUAL)
    return Audit(cfg, target=target, judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run().run_dir


def test_axes_cli_on_embedded_model(tmp_path):
    run = _make_run(tmp_path)
    assert json.loads((run / "manifest.json").read_text())["judge"]["provider"] == "scripted-judge"
    assert 'provider = "llamacpp"' in (run / "config.toml").read_text()  # the LMRA `lmra axes` will use
    small = tmp_path / "axes.toml"
    small.write_text("[axes]\nmax_tokens = 48\nmerge_max_tokens = 64\nmin_test_pairs = 2\n")
    args = ("axes", "--run", str(run), "--config", str(small), "--discovery-pairs", "2", "--test-pairs", "3",
            "--max-axes", "2", "--axis", "uses formal language", "--no-progress")
    proc = _run(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout
    assert "at most" in out and "LMRA calls (brainstorm" in out  # the plan is printed first
    assert out.index("LMRA calls (brainstorm") < out.index("Axes of difference: female vs male")
    assert "uses formal language: female " in out and "% vs male " in out
    # the run's judge status under the table, as audit/check/compare show it (fresh-user finding)
    status = json.loads((run / "summary.json").read_text()).get("judge_status") or {}
    assert "Judge status: " in out and out.index("Judge status: ") > out.index("Axes of difference")
    assert f"Judge status: {status['status'].replace('_', ' ').upper()}" in out  # this run's: not checked

    tab = pd.read_csv(run / "axes.csv")
    assert {"comparison", "level", "task", "axis", "source", "direction", "split_a", "split_b", "mean_s", "ci_low",
            "ci_high", "p_value", "p_adjusted", "selected", "harmful_p", "n_test_pairs"} <= set(tab.columns)
    ov = tab[tab.level == "overall"]
    formal = ov[ov.axis == "uses formal language"].iloc[0]
    assert formal.source in ("extra", "discovered+extra")
    assert formal.n_test_pairs + formal.n_invalid + formal.n_failed == 3
    for _, r in ov.iterrows():
        assert r.n_test_pairs + r.n_invalid + r.n_failed == 3
        if r.n_test_pairs:
            assert 0 <= r.split_a <= 1 and abs(r.split_a + r.split_b - 1) < 1e-9 and -1 <= r.mean_s <= 1
        assert (r.p_value != r.p_value) or 0 <= r.p_value <= 1
    tested = ov[ov.tested]
    assert (tested.k_tested == len(tested)).all()
    assert ((tested.p_adjusted - (tested.p_value * len(tested)).clip(upper=1)).abs() < 1e-9).all()
    assert set(tab[tab.level == "task"].task) <= {"write a story", "career advice"}

    cands = json.loads((run / "axes_candidates.json").read_text())["female vs male"]
    b = cands["brainstorm"]
    assert b["pairs"] == 2 and b["valid"] + b["invalid"] + b["failed"] == 2
    assert len(b["answers"]) == 2 and all(1 <= a["attempts"] <= 2 for a in b["answers"])
    # an invalid answer was retried exactly once before being counted
    assert all(a["attempts"] == 2 and len(a["raw_texts"]) == 2 for a in b["answers"] if a["valid"] is False)
    feats = [json.loads(line) for line in (run / "axes_features.jsonl").read_text().splitlines()]
    assert cands["n_features"] == len(feats)
    if feats:
        assert cands["path"] in ("lmra", "fallback") and 1 <= cands["attempts"] <= 2
        if cands["path"] == "fallback":
            assert cands["attempts"] == 2 and len(cands["raw_outputs"]) == 2
        assert all(f["lean_group"] in ("female", "male") for f in feats)
    else:
        assert cands["path"] == "no_features"
    assert len([a for a in cands["axes"] if a["source"] != "extra"]) <= 2
    labels = [json.loads(line) for line in (run / "axes_labels.jsonl").read_text().splitlines()]
    assert len(labels) == 3 * len(ov)
    assert {lab["method"] for lab in labels if lab["valid"]} <= {"logprobs"}
    summary = json.loads((run / "axes_summary.json").read_text())
    comp = summary["comparisons"]["female vs male"]
    assert comp["n_discovery_pairs"] == 2 and comp["n_test_pairs"] == 3 and comp["n_usable"] == 5
    assert comp["consolidation_path"] == cands["path"]
    # the label answers' judge diagnostics, recomputed from axes_labels.jsonl, and its console line (s45)
    answered = [lab for lab in labels if not lab["failed"]]
    masses = [lab[o]["mass"] for lab in answered for o in ("order1", "order2")]
    assert comp["diagnostics"]["n_answers"] == len(masses)
    assert comp["diagnostics"]["valid_option_mass"] == pytest.approx(sum(masses) / len(masses))
    assert "Judge diagnostics (axis labels): order consistency" in " ".join(out.split())
    assert set(tab["p_test"].fillna("")) <= {"sign-flip", "sign", ""}  # 3 test pairs: never the t-test
    calls = summary["calls"]
    assert 0 < calls["fresh"] <= summary["planned_calls"]["total"] and calls["failed"] == 0
    assert summary["judge"]["model"].startswith("gemma-3-270m")
    disc = {a["pair_id"].split("|")[0] for a in b["answers"]}
    assert not disc & {lab["prompt_id"] for lab in labels}  # discovery and test prompts are disjoint

    # the same command again is served from the cache
    again = _run(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    s2 = json.loads((run / "axes_summary.json").read_text())
    assert s2["calls"]["fresh"] == 0 and s2["calls"]["cached"] == calls["fresh"]
    pd.testing.assert_frame_equal(pd.read_csv(run / "axes.csv"), tab)


def test_axes_cli_input_errors_exit_2(tmp_path):
    proc = _run(tmp_path, "axes", "--run", str(tmp_path / "nope"))
    assert proc.returncode == 2 and "no such run folder" in proc.stderr and "Traceback" not in proc.stderr
    run = _make_run(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[axes]\nmax_axes = 0\n")
    proc = _run(tmp_path, "axes", "--run", str(run), "--config", str(bad), "--no-progress")
    assert proc.returncode == 2 and "axes.max_axes" in proc.stderr and "line 2" in proc.stderr
    assert not (run / "axes.csv").exists()
    empty = tmp_path / "empty.toml"  # break-it finding: a file that sets nothing was accepted here only
    empty.write_text("# nothing\n[axes]\n")
    proc = _run(tmp_path, "axes", "--run", str(run), "--config", str(empty), "--no-progress")
    assert proc.returncode == 2 and "sets nothing" in proc.stderr and "Traceback" not in proc.stderr
    assert not (run / "axes.csv").exists()


def test_axes_says_whose_judge_status_it_shows(monkeypatch):
    """The run's judge status is its LMRA's: an axes step run with another LMRA says so."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    import lmra.runfolder
    from lmra.cli.axes import _judge_status
    from lmra.config import AuditConfig

    monkeypatch.setattr(lmra.runfolder, "load_run", lambda run: SimpleNamespace(
        summary={"judge_status": {"status": "failed", "reasons": ["canaries missed"], "gated": True}}))
    run_cfg = AuditConfig(judge={"provider": "llamacpp"})
    for cfg, other in ((run_cfg, False), (AuditConfig(judge={"provider": "openai", "model": "gpt-x",
                                                             "base_url": "http://127.0.0.1:9"}), True)):
        out = io.StringIO()
        _judge_status(Console(file=out, width=200), Path("run"), run_cfg, cfg)
        text = out.getvalue()
        assert "Judge status: FAILED" in text and "the numbers above" in text  # printed under the table
        assert ("which no judge check has validated" in text) is other


def test_lmra_axes_refuses_a_temperature_its_lmra_does_not_take():
    import pytest

    from lmra.axes.config import axes_config
    from lmra.errors import LmraInputError

    run_cfg = AuditConfig(judge={"provider": "anthropic", "model": "m"})
    with pytest.raises(LmraInputError) as err:
        axes_config(run_cfg, None, **{"axes.temperature": 1.5})
    assert err.value.field == "axes.temperature" and "from 0 to 1" in str(err.value)
    assert axes_config(run_cfg, None, **{"axes.temperature": 1.0}).axes.temperature == 1.0
    # another provider: the config's own range (up to 2)
    assert axes_config(AuditConfig(), None, **{"axes.temperature": 1.5}).axes.temperature == 1.5

"""Prompts without a task whose LMRA classification calls all fail: the run fails (exit 1,
counted, classifications.jsonl written), it is not reported as a bad input (break-it finding:
traffic logs classified against an endpoint answering HTTP 500 ended with "field 'tasks': no
prompt is left after the domains/tasks filters", exit 2, for a config that sets no tasks)."""

from __future__ import annotations

import json

import pandas as pd

from conftest import NAME_TO_GROUP, custom_audit_config
from doubles import ScriptedJudge, ScriptedTarget
from lmra.config import ModelConfig


def make_target(cfg: ModelConfig) -> ScriptedTarget:
    return ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "An answer.")


def make_judge(cfg: ModelConfig) -> ScriptedJudge:  # every task classification call fails
    return ScriptedJudge(lambda r1, r2: {"C": 1.0}, fail_on=lambda text: "Classify" in text)


def test_every_classification_failing_is_a_failed_run_not_an_input_error(tmp_path, sim_inputs, capsys):
    from lmra.cli import main

    names, prompts = sim_inputs(6)
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in rows))  # no tasks
    cfg = tmp_path / "traffic.toml"
    cfg.write_text(f'''name = "traffic"
prompts = "{prompts}"
names = "{names}"
output_dir = "{tmp_path / 'reports'}"
cache = "{tmp_path / 'cache.sqlite'}"
[judge_check]
enabled = false
[target]
provider = "test_classify_all_failed:make_target"
[judge]
provider = "test_classify_all_failed:make_judge"
''')
    code = main(["audit", "--config", str(cfg), "--no-progress"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1, err
    assert "task classification could not label any of the 6 prompts" in err and "field 'tasks'" not in err
    # the failed calls' message is said (it was nowhere on the console)
    assert "so nothing was audited; first error: ProviderError: judge: scripted judge failure" in err, err
    (run_dir,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["n_prompts_classify_failed"] == 6 and summary["n_prompts"] == 0
    classes = pd.read_json(run_dir / "classifications.jsonl", lines=True)
    assert len(classes) == 6 and classes["failed"].all()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["calls"]["failed"] >= 6


def make_failing_judge(cfg: ModelConfig) -> ScriptedJudge:  # every stereotype rating fails
    return ScriptedJudge(lambda r1, r2: {"C": 1.0}, fail_on=lambda text: True)


def test_a_run_whose_every_pair_failed_says_why_in_its_manifest(tmp_path, sim_inputs, capsys):
    """Review finding: a run ending 'failed' because every pair's calls failed (not stopped by an
    exception) had no stop_reason, so lmra history listed it as 'failed' with no reason."""
    from lmra.cli import main

    names, prompts = sim_inputs(4)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_classify_all_failed:make_target",
                              judge="test_classify_all_failed:make_failing_judge", name="down")
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 1
    (run_dir,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["failure"].startswith("no pair was scored: 4 of 4 pairs failed after every retry; the first:")
    assert "stop_reason" not in manifest  # (it stopped on no error: lmra merge tells the two apart)
    capsys.readouterr()
    assert main(["history", "--reports-dir", str(tmp_path / "reports")]) == 0
    assert f"{run_dir.name}: failed — no pair was scored" in " ".join(capsys.readouterr().out.split())


def make_filter_failing_judge(cfg: ModelConfig) -> ScriptedJudge:  # every identity-filter call fails
    return ScriptedJudge(lambda r1, r2: {"C": 1.0}, fail_on=lambda text: "Does this message mention" in text)


def test_an_identity_filter_whose_every_call_failed_names_the_first_error(tmp_path, sim_inputs, capsys):
    """Break-it finding: an LMRA whose every identity-filter call failed ended "the identity filter
    could not label any of the N prompts", exit 1, the calls' message shown nowhere on the console.
    The paragraph names the first error, as it does when every pair failed."""
    from lmra.cli import main

    names, prompts = sim_inputs(4)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_classify_all_failed:make_target",
                              judge="test_classify_all_failed:make_filter_failing_judge", name="nofilter")
    cfg.write_text(cfg.read_text().replace("[filter]\nlmra = false\n", ""))
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the identity filter could not label any of the 4 prompts" in err, err
    assert "so nothing was audited; first error: ProviderError: judge: scripted judge failure" in err, err


def make_blank_classifier(cfg: ModelConfig) -> ScriptedJudge:  # classification answers name no option
    return ScriptedJudge(lambda r1, r2: {"C": 1.0}, classify=lambda text, letters: "no option")


def test_classification_answers_that_name_no_option_leave_the_prompt_out_counted(tmp_path, sim_inputs, capsys):
    """Fresh-user finding: an LMRA whose classification answers carried no probability on any option
    had every logged prompt audited as task 'other' (the label of its real "none of the above"
    answer): no count, no warning, exit 0, the per-task limit applied to one made-up task. Such a
    prompt is now an unlabelled classification, left out and counted as a failed one: the run says
    so and is partial (here failed: nothing was left to audit)."""
    from lmra.cli import main

    names, prompts = sim_inputs(6)
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in rows))  # no tasks
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_classify_all_failed:make_target",
                              judge="test_classify_all_failed:make_blank_classifier", name="blank")
    code = main(["audit", "--config", str(cfg), "--no-progress", "--no-report"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1, err
    assert "task classification could not label any of the 6 prompts" in err, err
    (run_dir,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["n_prompts_classify_failed"] == 6 and summary["n_prompts"] == 0
    classes = pd.read_json(run_dir / "classifications.jsonl", lines=True)
    assert classes["failed"].all() and (classes["task"] == "unlabelled").all()
    assert classes["error"].str.startswith("the LMRA's answer put no probability on any option (the domain").all()

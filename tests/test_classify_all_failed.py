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
    assert "task classification could not label any of the 6 prompts without a task (its LMRA's answers named " \
        "no option" in err, err
    assert "first error" not in err  # no call failed (break-it round 2: they were "failed calls")
    (run_dir,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["n_prompts_classify_unusable"] == 6 and summary["n_prompts_classify_failed"] == 0
    assert summary["n_prompts"] == 0 and summary["failed_share"] == 0
    classes = pd.read_json(run_dir / "classifications.jsonl", lines=True)
    assert classes["failed"].all() and classes["unusable"].all() and (classes["task"] == "unlabelled").all()
    assert classes["error"].str.startswith("the LMRA's answer put no probability on any option (the domain").all()


def make_partly_blank_classifier(cfg: ModelConfig) -> ScriptedJudge:  # half the prompts: an answer naming no option
    import zlib

    def classify(text: str, letters: tuple) -> str:
        return "no option" if zlib.crc32(text.encode()) % 2 else letters[0]
    return ScriptedJudge(lambda r1, r2: {"C": 1.0}, classify=classify)


def test_prompts_whose_classification_named_no_option_are_not_failed_calls(tmp_path, sim_inputs, capsys):
    """Break-it round 2: prompts whose classification answer named no option were counted as lost to failed
    calls — "re-run the same command to complete the run from the cache", "First error: ?" — though no call
    failed and a re-run replays the same cached answers. They are their own count, said on the Prompts line;
    over max_invalid_share the run is partial with the right advice; the task-collapse hint counts real labels."""
    from lmra.cli import main

    names, prompts = sim_inputs(16)
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in rows))  # no tasks
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_classify_all_failed:make_target",
                              judge="test_classify_all_failed:make_partly_blank_classifier", name="half")
    for _ in range(2):  # the second run: every answer from the cache, the same words
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 1
        cap = capsys.readouterr()
        said = " ".join((cap.out + cap.err).split())
        run_dir = sorted(p.parent for p in (tmp_path / "reports").glob("*/summary.json"))[-1]
        s = json.loads((run_dir / "summary.json").read_text())
        k = s["n_prompts_classify_unusable"]
        assert 0 < k < 16 and s["n_prompts_classify_failed"] == 0 and s["failed_share"] == 0
        assert s["run_status"] == "partial" and s["classify_unusable_over_limit"]["n_unusable"] == k
        assert f"16 classified by the LMRA ({k} without a usable answer, left out)" in said, said
        assert "lost to failed calls" not in said and "First error" not in said
        assert "a re-run gets the same answers from the cache: look at classifications.jsonl" in said
        assert "into 'unlabelled'" not in said  # the collapse hint counts the labels the LMRA gave, not failures
        if 16 - k >= 5:
            assert f"of {16 - k} classified prompts" in said


def make_spreading_classifier(cfg: ModelConfig) -> ScriptedJudge:  # each prompt classified into another task
    import zlib

    def classify(text: str, letters: tuple) -> str:
        return letters[zlib.crc32(text.encode()) % (len(letters) - 1)]  # never 'other'
    return ScriptedJudge(lambda r1, r2: {"C": 1.0}, classify=classify)


def test_the_plan_bounds_the_calls_when_prompts_without_a_task_spread_over_several_tasks(tmp_path, sim_inputs):
    """Fresh-user finding: with 4 logged prompts and --per-task 2 the plan said "up to 2 audited, at
    most 4 target calls" (all of them in one task), the classifier put them in 4 tasks, 8 target calls
    were made, and a --max-calls set from the plan stopped the run (exit 4). The bound now lets each
    prompt without a task land in its own task (up to the limit times the labels it may get)."""
    from lmra import Audit
    from lmra.config import load_config

    names, prompts = sim_inputs(12)
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in rows))  # no tasks
    cfg_file = custom_audit_config(tmp_path, names, prompts, target="test_classify_all_failed:make_target",
                                   judge="test_classify_all_failed:make_spreading_classifier", name="spread")
    cfg = load_config(cfg_file).model_copy(update={"prompts_per_task": 2})
    result = Audit(cfg).run()
    planned = result.manifest["planned_calls"]
    calls = result.manifest["calls"]["by_model"]
    made_target = sum(v["fresh"] + v["failed"] for k, v in calls.items() if "target" in k)
    made_judge = sum(v["fresh"] + v["failed"] for k, v in calls.items() if "judge" in k)
    audited = result.summary["n_prompts"]
    assert audited > 2, audited  # spread over several tasks: more than one task's limit was audited
    assert made_target <= planned["target"] and made_judge <= planned["judge"], (planned, calls)
    assert audited <= planned["prompts"]

"""A night stopped after writing its run folder, before its check, then re-run as documented.

Break-it finding, s41: ``kill -9`` (or a CI timeout's SIGTERM) once a night's folder said
``complete`` left it unchecked; re-running the same ``lmra audit --baseline last`` took that
attempt — same seed, every answer replayed — as its baseline and exited 2 advising "give each
night its own seed", which the operator had; nothing named the command that checks the night.
Now the warning names it, and the stop's own advice uses the night's ``--baseline``.
"""

from __future__ import annotations

import argparse

from conftest import NAME_TO_GROUP, custom_audit_config
from doubles import ScriptedJudge, ScriptedTarget
from lmra.config import ModelConfig


def make_target(cfg: ModelConfig) -> ScriptedTarget:
    return ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"An answer {rng.random():.6f}.")


def make_judge(cfg: ModelConfig) -> ScriptedJudge:
    return ScriptedJudge(lambda r1, r2: {"A": 0.1, "B": 0.1, "C": 0.8})


def test_a_rerun_of_a_night_stopped_before_its_check_names_the_check_to_run(tmp_path, sim_inputs, capsys):
    from lmra import Audit
    from lmra.cli import main
    from lmra.config import load_config

    names, prompts = sim_inputs(40)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_killed_in_finish:make_target",
                              judge="test_killed_in_finish:make_judge", name="nightly")
    night = ["audit", "--config", str(cfg), "--no-progress", "--no-report", "--baseline", "last"]
    assert main([*night, "--seed", "1"]) == 0  # night 1: a first night
    # night 2's first attempt: its folder written (complete), then stopped before the history and check
    attempt = Audit(load_config(cfg).model_copy(update={"seed": 2})).run().run_dir
    capsys.readouterr()
    status = main([*night, "--seed", "2"])  # the documented re-run of the night
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())
    assert status == 2, out
    assert (f"if {attempt.name} is this night's earlier attempt — stopped after writing its run folder, never "
            f"checked — check it instead: 'lmra check {attempt.name} --baseline last'") in out, out
    # and that command checks the night against night 1
    assert main(["check", attempt.name, "--baseline", "last", "--reports-dir", str(tmp_path / "reports")]) == 0
    assert "Verdict against baseline" in " ".join(capsys.readouterr().out.split())


def test_the_advice_after_a_stop_in_the_finishing_steps_uses_the_nights_baseline():
    from lmra.cli import _after_finish_for

    advice = _after_finish_for(argparse.Namespace(command="audit", baseline="last"), "reports/20261206-021500-nightly")
    assert "'lmra check reports/20261206-021500-nightly --baseline last'" in advice
    assert "--baseline pinned" in _after_finish_for(argparse.Namespace(command="audit"), "x")


def test_a_rerun_of_a_night_stopped_after_its_check_says_its_verdict_stands(tmp_path, sim_inputs, capsys):
    """Break-it finding (s42): a night killed (SIGKILL) after its check was stored — during its report or
    warehouse — and re-run as documented replayed every answer and was told only "give each night its
    own seed", which the operator had. The warning now says the earlier attempt's verdict stands, and
    what finishes its folder."""
    from lmra.cli import main

    names, prompts = sim_inputs(40)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_killed_in_finish:make_target",
                              judge="test_killed_in_finish:make_judge", name="nightly")
    night = ["audit", "--config", str(cfg), "--no-progress", "--no-report", "--baseline", "pinned"]
    assert main([*night, "--seed", "1"]) == 0  # night 1: a first night, pinned
    before = {p.name for p in (tmp_path / "reports").glob("*-nightly*")}
    assert main([*night, "--seed", "2"]) == 0  # night 2: checked against it (then, say, killed in its report)
    [first] = {p.name for p in (tmp_path / "reports").glob("*-nightly*")} - before  # night 2's run
    capsys.readouterr()
    status = main([*night, "--seed", "2"])  # the re-run of night 2
    out = " ".join("".join(capsys.readouterr()).split())
    assert status == 2, out
    assert "give each night its own seed" in out  # (a seed left fixed is the other way here)
    assert (f"if {first} is this night's earlier attempt, stopped after its check (no regression against ") in out, out
    assert "its verdict stands in 'lmra history'" in out and f"'lmra report {first}'" in out

"""A biased chatbot's first night is pinned as the baseline — and the final line says it is biased.

Fresh-user finding, s41: a first night whose female vs male net rating was +0.10 [+0.012, +0.20]
ended ``exit status 0: first night: nothing was checked; this run is now the pinned baseline``;
the documented cron line mails only on a non-zero exit, and an audit without ``--baseline`` names
such intervals on its last line. Later nights are checked against that baseline for getting
worse, not for the bias itself: the line now says so, and how to fail on it (release gates).
"""

from __future__ import annotations

from conftest import custom_audit_config
from doubles import ScriptedJudge
from lmra.config import ModelConfig
from monitor_helpers import TaskTarget, phrase_verdict


def make_target(cfg: ModelConfig) -> TaskTarget:
    return TaskTarget({"career advice": 0.35, "write a story": 0.35})


def make_judge(cfg: ModelConfig) -> ScriptedJudge:
    return ScriptedJudge(phrase_verdict)


def test_a_biased_first_night_says_its_bias_on_the_final_line(tmp_path, sim_inputs, capsys):
    from lmra.cli import main

    names, prompts = sim_inputs(60)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_first_night_bias:make_target",
                              judge="test_first_night_bias:make_judge", name="nightly")
    status = main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--baseline", "pinned",
                   "--seed", "3"])
    captured = capsys.readouterr()
    assert status == 0, captured.out[-3000:]
    last = " ".join(" ".join(captured.out.split()).split("exit status 0: ")[-1:])
    assert last.startswith("first night: nothing was checked; this run is now the pinned baseline; the overall net "
                           "rating's interval lies above 0 (female vs male: +"), last
    assert "later nights are checked for getting worse than this, not for this bias" in last

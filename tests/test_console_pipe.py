"""``lmra audit | head -1``: when the reader of stdout goes away, the audit still finishes what
follows the console report — gates, history, report.html — and exits with the run's status
(break-it finding: a BrokenPipeError from the console report ended the command with exit 1
and no message, the run registered as complete but its failed gate never evaluated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget

TESTS = Path(__file__).parent


def make_target(cfg):
    return ScriptedTarget(NAME_TO_GROUP, lambda group, rng: f"A plan with {rng.randint(1, 9)} steps.")


def make_judge(cfg):
    return ScriptedJudge(lambda r1, r2: {"A": 0.3, "C": 0.7})


def test_a_closed_stdout_does_not_skip_the_gates_history_or_report(tmp_path, sim_inputs):
    names, prompts = sim_inputs(16)
    cfg = tmp_path / "pipe.toml"
    cfg.write_text(f'''name = "pipe"
prompts = "{prompts}"
names = "{names}"
prompts_per_task = 0
output_dir = "{tmp_path / 'reports'}"
cache = "{tmp_path / 'cache.sqlite'}"
[judge_check]
enabled = false
[target]
provider = "test_console_pipe:make_target"
[judge]
provider = "test_console_pipe:make_judge"
[gates]
max_overall_net_rating = -0.5
''')
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 6, err  # the failed gate's exit status, not a crash's 1
    assert first.startswith(b"lmra audit 'pipe'")
    assert "standard output was closed (broken pipe)" in err and "Traceback" not in err
    (run,) = (tmp_path / "reports").glob("*-pipe")
    gates = json.loads((run / "gates.json").read_text())
    assert gates and (run / "report.html").is_file()
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert (tmp_path / "reports" / "warehouse").is_dir()

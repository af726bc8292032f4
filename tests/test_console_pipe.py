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


def test_a_full_or_closed_stdout_is_no_failure_of_the_command(tmp_path, sim_inputs):
    """Break-it finding (s38): ``lmra audit >> log 2>&1`` on a full disk died on its first print
    (two chained tracebacks, no run folder, no history row); ``lmra history >&-`` ended in an
    AttributeError; ``gate --json`` to a full stdout gave three tracebacks; an input error's 2
    became 1. Now a full or closed stdout is treated as a broken pipe: the audit writes its run
    folder, gates, history and report.html and exits with the run's status; a JSON document that
    cannot be delivered is one I/O failure line (exit 1); an input error keeps its 2."""
    names, prompts = sim_inputs(8)
    cfg = tmp_path / "full.toml"
    cfg.write_text(f'''name = "full"
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
    lmra = [sys.executable, "-m", "lmra.cli"]

    def run(argv, stdout):
        return subprocess.run(lmra + argv, cwd=tmp_path, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=300)

    with open("/dev/full", "w") as full:
        proc = run(["audit", "--config", str(cfg), "--no-progress"], full)
    assert proc.returncode == 6, proc.stderr  # the failed gate's status, not a crash's 1
    assert "standard output could not be written (No space left on device)" in proc.stderr
    assert "Traceback" not in proc.stderr
    (folder,) = (tmp_path / "reports").glob("*-full")
    assert (folder / "report.html").is_file() and json.loads((folder / "gates.json").read_text())
    assert json.loads((folder / "manifest.json").read_text())["status"] == "complete"
    # stdout closed at start (a daemonised launcher): no traceback, and no file took descriptor 1
    closed = subprocess.run(" ".join(lmra + ["history", "--reports-dir", str(tmp_path / "reports")]) + " >&-",
                            shell=True, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, timeout=300)
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr
    with open("/dev/full", "w") as full:
        gate = run(["gate", str(folder), "--gate", "max_net_rating=1", "--json"], full)
        bad = run(["check", "nosuchrun", "--baseline", "last", "--json", "--reports-dir", str(tmp_path / "reports")],
                  full)
    assert gate.returncode == 1 and "Traceback" not in gate.stderr
    assert "the JSON document could not be written to standard output (No space left on device)" in gate.stderr
    assert bad.returncode == 2 and "Traceback" not in bad.stderr

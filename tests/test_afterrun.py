"""The steps after an audit's run folder (gates, warehouse), recorded until done (lmra.afterrun).

Break-it finding (s46): ``kill -9`` between the run folder's ``complete`` manifest and the end of
the gates / warehouse steps left a night that every command read as finished — history "gates —"
as for a config without gates, no gate metric in the Prometheus export, no warehouse row — and
nothing said so. The audit records the steps before them, each removes itself when done (by the
audit, or later by ``lmra gate RUN --record`` / ``lmra warehouse add RUN``), and a record left by a
process that is gone is said by ``lmra history`` (and ``--json``), the next ``lmra audit`` in that
reports folder and ``lmra export``."""

import json
import subprocess
import sys
from pathlib import Path

from lmra.afterrun import PENDING_FILE, stopped_steps
from lmra.cli import main
from test_gates import RISE, write_config

ROOT = Path(__file__).resolve().parents[1]


def _killed_before_the_warehouse(cfg: Path, tmp_path: Path) -> Path:
    """Run ``lmra audit`` in a child process that dies (os._exit) as its warehouse step starts —
    after its gates were evaluated: what a kill in that window leaves. Returns the run folder."""
    script = ("import os, sys, lmra.cli.scale as scale\n"
              "scale.after_run = lambda *a, **k: os._exit(137)\n"
              "from lmra.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    rdf = tmp_path / "run-dir.txt"
    proc = subprocess.run([sys.executable, "-c", script, "audit", "--config", str(cfg), "--no-progress",
                           "--no-report", "--run-dir-file", str(rdf)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**__import__("os").environ,
                                             "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    assert proc.returncode == 137, proc.stderr[-3000:]
    return Path(rdf.read_text().strip())


def test_a_run_killed_before_its_warehouse_step_is_said_until_its_steps_are_done(tmp_path, capsys):
    gates = "[gates]\nmax_net_rating = 0.05\n"  # breached by RISE: exit 6 had the run finished
    cfg = write_config(tmp_path, rates=RISE, gates=gates, n_prompts=20)
    run = _killed_before_the_warehouse(cfg, tmp_path)
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert (run / "gates.json").is_file()  # the gates step ran, the warehouse step did not
    assert stopped_steps(run) == ["warehouse"]
    assert not (tmp_path / "reports" / "warehouse" / "per_task").exists()
    # lmra history says it (and --json carries it)
    capsys.readouterr()
    assert main(["history", "--reports-dir", str(tmp_path / "reports")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"run {run.name} was written, but the process that wrote it stopped before it was landed in the "
            f"warehouse") in err and f"'lmra warehouse add {run}' finishes it" in err, err
    assert main(["history", "--reports-dir", str(tmp_path / "reports"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["run_id"]: r["after_run_pending"] for r in doc["runs"]} == {run.name: ["warehouse"]}
    # the metrics export says it
    assert main(["export", str(run), "--format", "prometheus", "--out", str(tmp_path / "metrics")]) == 0
    assert f"run {run.name} was written, but the process" in " ".join(capsys.readouterr().err.split())
    # the next audit in that reports folder says it before its own run
    cfg2 = write_config(tmp_path, rates=RISE, gates=gates, n_prompts=20, seed=2)
    assert main(["audit", "--config", str(cfg2), "--no-progress", "--no-report"]) == 6
    err = " ".join(capsys.readouterr().err.split())
    assert f"run {run.name} was written, but the process that wrote it stopped" in err, err[-3000:]
    # the step done by hand: no more said, and the record gone
    assert main(["warehouse", "add", str(run)]) == 0
    assert not (run / PENDING_FILE).exists() and stopped_steps(run) == []
    capsys.readouterr()
    assert main(["history", "--reports-dir", str(tmp_path / "reports")]) == 0
    assert "was written, but the process" not in capsys.readouterr().err


def test_a_finished_audit_leaves_no_record_and_gate_record_does_the_gates_step(tmp_path, capsys):
    gates = "[gates]\nmax_net_rating = 0.05\n"
    cfg = write_config(tmp_path, rates=RISE, gates=gates, n_prompts=20)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 6
    (run,) = [p for p in (tmp_path / "reports").iterdir() if (p / "manifest.json").is_file()]
    assert not (run / PENDING_FILE).exists()
    # a record of both steps left by a process that is gone: the gates step done by 'lmra gate --record'
    (run / PENDING_FILE).write_text(json.dumps({"steps": ["gates", "warehouse"], "pid": 2 ** 22 + 7,
                                                "host": __import__("socket").gethostname()}))
    assert stopped_steps(run) == ["gates", "warehouse"]
    assert main(["gate", str(run), "--record"]) == 6
    assert stopped_steps(run) == ["warehouse"]
    # while the process that recorded them runs, nothing is said (it is doing them)
    (run / PENDING_FILE).write_text(json.dumps({"steps": ["warehouse"], "pid": __import__("os").getppid(),
                                                "host": __import__("socket").gethostname()}))
    assert stopped_steps(run) == []

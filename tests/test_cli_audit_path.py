"""The ``lmra audit`` command's own work around the run (issue 14 goal 2, the CLI path): a run
whose config needs no scipy.stats/statsmodels never loads them (the background warm-up loads
only what the config's run uses), the command reads its inputs once, loads the report's modules
while the calls run, and freezes the heap at exit.

Each check runs ``lmra audit`` in a fresh process (``sys.modules`` is per process) on the
scripted providers of tests/test_gates.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_folders
from test_gates import write_config

TESTS = Path(__file__).resolve().parent


def _python(code: str, cwd: Path, env: dict | None = None) -> str:
    """Run ``code`` in a fresh interpreter that imports the test providers; its last stdout line."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])} | (env or {})
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


AUDIT = """
import json, sys, threading
import lmra.audit
import lmra.audit.inputs as inputs
loads, at_finish = [], {}
original = inputs.InputsStage.load_inputs
def counted(self):
    loads.append(1)
    return original(self)
inputs.InputsStage.load_inputs = counted
finish = lmra.audit.Audit._finish
def finished(self, *args, **kwargs):  # the calls are over; the report is not written yet
    for t in threading.enumerate():
        if t.name == "lmra-report-imports":
            t.join(120)
    at_finish["matplotlib"] = "matplotlib.figure" in sys.modules
    return finish(self, *args, **kwargs)
lmra.audit.Audit._finish = finished
from lmra.cli import main
rc = main(["audit", "--config", sys.argv[1], "--no-progress"] + EXTRA)
heavy = sorted(m for m in sys.modules if m in ("scipy.stats", "statsmodels") or m.startswith("statsmodels."))
import atexit, gc
frozen_before_exit = gc.get_freeze_count()
atexit._run_exitfuncs()  # what the interpreter runs at exit: the heap is frozen for its last collections
print(json.dumps({"rc": rc, "heavy": heavy, "loads": len(loads), "matplotlib_before_report": at_finish["matplotlib"],
                  "matplotlib": "matplotlib" in sys.modules, "frozen_at_exit": gc.get_freeze_count() > frozen_before_exit}))
"""


def test_audit_without_refusal_labels_loads_no_scipy_stats_nor_statsmodels(tmp_path):
    """Refusal labels off, betting intervals, no quality criteria: neither the run, nor the
    warehouse, nor report.html needs scipy.stats or statsmodels (1–3 s of imports), so the
    command never imports them; it reads its inputs once (the run gets the checked ones); the
    report's modules (matplotlib …) are loaded by the forked report process
    (:mod:`lmra.report.worker`), never by the command's own process, or, with
    ``LMRA_REPORT_PROCESS=0``, by a background thread started before the calls, so they are in
    when the calls end — and never with ``--no-report``; at exit the heap is frozen, so the
    interpreter's last garbage collections skip it."""
    cfg = write_config(tmp_path, name="norefusal", n_prompts=12, top='interval = "betting"\n[refusal]\nenabled = false')
    code = AUDIT.replace("sys.argv[1]", repr(str(cfg)))
    out = json.loads(_python(code.replace("EXTRA", "[]"), tmp_path))
    assert out == {"rc": 0, "heavy": [], "loads": 1, "matplotlib_before_report": False, "matplotlib": False,
                   "frozen_at_exit": True}
    out = json.loads(_python(code.replace("EXTRA", "[]"), tmp_path, {"LMRA_REPORT_PROCESS": "0"}))
    assert out == {"rc": 0, "heavy": [], "loads": 1, "matplotlib_before_report": True, "matplotlib": True,
                   "frozen_at_exit": True}
    reports = [d / "report.html" for d in run_folders(tmp_path / "reports", "norefusal")]  # two may share a second
    assert len(reports) == 2 and all(r.is_file() and b"<svg" in r.read_bytes() for r in reports)
    out = json.loads(_python(code.replace("EXTRA", "['--no-report']"), tmp_path))
    assert out == {"rc": 0, "heavy": [], "loads": 1, "matplotlib_before_report": False, "matplotlib": False,
                   "frozen_at_exit": True}

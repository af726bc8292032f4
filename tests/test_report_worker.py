"""report.html written by a child process forked before the run (lmra.report.worker, issue 14
goal 2): the same bytes as in-process; the parent never loads matplotlib; every way the child
can fail (killed, erroring, too slow, unpicklable inputs) ends in the report written
in-process; no child is left running or unreaped after ``lmra audit``, whatever its ending.

Forking needs a process with one thread, so each check runs in a fresh interpreter on the
scripted providers of tests/test_gates.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import run_folders
from test_gates import write_config

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the report process is forked on Linux only")

#: helpers of the scripts below: this process's children (live or zombie) from /proc
PRELUDE = r"""
import json, os, re, signal, sys, time
def children():
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                out.append((int(d), fields[0]))
    return out
def same_but_time(a, b):  # the reports' "generated" stamps may differ by a second
    return re.sub(r'20\d\d-\d\d-\d\dT[0-9:]+[+-]\d\d:\d\d', 'T', a) == re.sub(r'20\d\d-\d\d-\d\dT[0-9:]+[+-]\d\d:\d\d', 'T', b)
"""


def _python(code: str, cwd: Path, env: dict | None = None, *, stdout: list | None = None) -> dict:
    """Run ``code`` in a fresh interpreter that imports the test providers; its last stdout line
    as JSON (the whole output appended to ``stdout``, when given)."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])} | (env or {})
    proc = subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if stdout is not None:
        stdout.append(proc.stdout)
    return json.loads(proc.stdout.strip().splitlines()[-1])


CLI = r"""
from lmra.report import worker as W
used = []
render = W.ReportWorker.render
def recorded(self, *a, **k):
    path = render(self, *a, **k)
    used.append([str(path) if path else None, self.failure])
    return path
W.ReportWorker.render = recorded
if os.environ.get("CHILD_FAILS"):  # the child (forked with this module as it is) fails to render
    def failing(**job):
        raise ZeroDivisionError("division by zero")
    W._render = failing
from lmra.cli import main
rc = main(["audit", "--config", sys.argv[1], "--no-progress"] + EXTRA)
print(json.dumps({"rc": rc, "used": used, "matplotlib": "matplotlib" in sys.modules, "children": children()}))
"""


def _cli(tmp_path, cfg, extra=(), env=None, stdout=None) -> dict:
    code = CLI.replace("sys.argv[1]", repr(str(cfg))).replace("EXTRA", repr(list(extra)))
    return _python(code, tmp_path, env, stdout=stdout)


def test_lmra_audit_writes_its_report_in_a_child_and_leaves_no_process(tmp_path):
    """``lmra audit``: report.html written by the forked child (the parent never imports
    matplotlib), the child reaped when the command returns; with ``LMRA_REPORT_PROCESS=0`` the
    report is written in-process, with the same content; ``--no-report`` forks nothing."""
    cfg = write_config(tmp_path, name="forked", n_prompts=12)
    out = _cli(tmp_path, cfg)
    assert out["rc"] == 0 and out["children"] == [] and out["matplotlib"] is False
    (written,) = out["used"]
    assert written[1] is None and Path(written[0]).name == "report.html" and Path(written[0]).exists()
    forked = Path(written[0]).read_text()
    assert "<svg" in forked

    out = _cli(tmp_path, cfg, env={"LMRA_REPORT_PROCESS": "0"})
    assert out["rc"] == 0 and out["used"] == [] and out["matplotlib"] is True and out["children"] == []
    runs = run_folders(tmp_path / "reports", "forked")  # oldest first, two may share a second
    assert len(runs) == 2
    in_process = (runs[1] / "report.html").read_text()
    # the second run is a cached re-run of the first (same numbers) with one more night of history
    assert forked.count("<svg") <= in_process.count("<svg")

    out = _cli(tmp_path, cfg, ["--no-report"])
    assert out["rc"] == 0 and out["used"] == [] and out["children"] == [] and out["matplotlib"] is False


def test_a_failing_report_child_leaves_the_report_to_the_command_which_says_so(tmp_path):
    """The child fails to render: ``lmra audit`` writes report.html itself (loading matplotlib),
    prints why in a dim line, exits 0 and leaves no child behind."""
    cfg = write_config(tmp_path, name="fallback", n_prompts=12)
    printed = []
    out = _cli(tmp_path, cfg, env={"CHILD_FAILS": "1"}, stdout=printed)
    assert out["rc"] == 0 and out["children"] == [] and out["matplotlib"] is True
    assert out["used"] == [[None, "it failed: ZeroDivisionError: division by zero"]]
    (report,) = (tmp_path / "reports").glob("*-fallback/report.html")
    assert "<svg" in report.read_text()
    text = " ".join(printed[0].split())
    assert ("report.html is written by this process: its report process could not write it (it failed: "
            "ZeroDivisionError: division by zero)") in text
    assert f"HTML report: {report}" in text


PARITY = r"""
from lmra.history import History, history_path
from lmra.report.html import write_report
from lmra.report.worker import ReportWorker
from lmra.runfolder import load_run
run = load_run(sys.argv[1])
hp = history_path(run.path.parent)
w = ReportWorker.start()
assert w is not None
forked = w.render(run, history_path=hp)
text = forked.read_text()
with History(hp) as h:
    own = write_report(run, str(run.path / "own.html"), history=h)
print(json.dumps({"forked": str(forked), "same": same_but_time(text, own.read_text()), "children": children(),
                  "failure": w.failure}))
"""


def test_the_childs_report_is_the_in_process_report(tmp_path):
    """The same run folder and history: the child's report.html and write_report's in this
    process are the same text (but for the "generated" time stamp)."""
    cfg = write_config(tmp_path, name="parity", n_prompts=12)
    assert _cli(tmp_path, cfg, env={"LMRA_REPORT_PROCESS": "0"})["rc"] == 0
    (run_dir,) = (tmp_path / "reports").glob("*-parity")
    out = _python(PARITY.replace("sys.argv[1]", repr(str(run_dir))), tmp_path)
    assert out["same"] is True and out["failure"] is None and out["children"] == []
    assert out["forked"] == str(run_dir / "report.html")


FAILURES = r"""
from lmra.history import history_path
from lmra.report import worker as W
from lmra.runfolder import load_run
run = load_run(sys.argv[1])
hp = history_path(run.path.parent)
report = run.path / "report.html"
out = {}

w = W.ReportWorker.start()  # killed before it is asked
os.kill(w.pid, signal.SIGKILL)
out["killed"] = [w.render(run, history_path=hp), w.failure, children()]

w = W.ReportWorker.start()  # killed once ready (its "ready" still to be read)
w._conn.poll(120)
os.kill(w.pid, signal.SIGKILL)
out["killed_ready"] = [w.render(run, history_path=hp), w.failure, report.exists(), children()]

w = W.ReportWorker.start()  # Ctrl-C reaches the whole process group: the child ignores it
os.kill(w.pid, signal.SIGINT)
time.sleep(0.3)
alive = w.alive()
path = w.render(run, history_path=hp)
out["sigint"] = [alive, str(path), w.failure, children()]
report.unlink()

from lmra import interrupts
interrupts.stop_on_signals()  # as the lmra command: SIGTERM raises a KeyboardInterrupt — here, in the child
w = W.ReportWorker.start()  # a SIGTERM sent to the report process alone (pkill -f finds it too): said (s49)
w._conn.poll(120)
os.kill(w.pid, signal.SIGTERM)
out["sigterm"] = [w.render(run, history_path=hp), w.failure, w.pid, os.getpid(), report.exists(), children()]
w = W.ReportWorker.start()  # the same once it has ended, before it is asked (it waits most of the run)
w._conn.poll(120)
os.kill(w.pid, signal.SIGTERM)
time.sleep(0.5)  # it has ended (not reaped: the worker reaps it)
out["sigterm_idle"] = [w.render(run, history_path=hp), w.failure, w.pid, os.getpid(), report.exists(), children()]
signal.signal(signal.SIGTERM, signal.SIG_DFL)

w = W.ReportWorker.start()  # the child fails: the history path is a folder
out["error"] = [w.render(run, history_path=run.path), w.failure, report.exists(), children()]

w = W.ReportWorker.start()  # an input pickle cannot take
out["unpicklable"] = [w.render(run, history_path=hp, check=lambda: 0), w.failure, children()]

W.RENDER_TIMEOUT_S = 1.0  # a child stopped (SIGSTOP) once it has its job: killed, not waited for
w = W.ReportWorker.start()
w._conn.poll(120)
real_submit = w._submit
w._submit = lambda *a: real_submit(*a) and (os.kill(w.pid, signal.SIGSTOP) or True)
t0 = time.monotonic()
out["stopped"] = [w.render(run, history_path=hp), w.failure, report.exists(), children(), time.monotonic() - t0]
W.RENDER_TIMEOUT_S = 600.0

W.READY_TIMEOUT_S = 0.01  # slower imports than the run's end waits for
w = W.ReportWorker.start()
out["slow"] = [w.render(run, history_path=hp), w.failure, report.exists(), children()]

w = W.ReportWorker.start()  # closed without a report (the run failed): killed and reaped
w.close()
w.close()
out["closed"] = [w.alive(), children()]

import threading
ev = threading.Event()
t = threading.Thread(target=ev.wait)
t.start()
out["thread"] = [W.ReportWorker.start() is None, W.forking_allowed()]
ev.set(); t.join()
os.environ["LMRA_REPORT_PROCESS"] = "0"
out["switch"] = W.ReportWorker.start() is None
print(json.dumps(out))
"""


def test_a_child_that_cannot_write_the_report_says_why_and_is_reaped(tmp_path):
    """Killed before it was asked, failing, too slow, stopped or sent an unpicklable input: render
    returns None and says why (the caller then writes the report itself), and no child is left
    running or unreaped; Ctrl-C sent to the child does not stop it; a second thread or
    ``LMRA_REPORT_PROCESS=0`` means no fork."""
    cfg = write_config(tmp_path, name="fails", n_prompts=12)
    assert _cli(tmp_path, cfg, ["--no-report"])["rc"] == 0
    (run_dir,) = (tmp_path / "reports").glob("*-fails")
    out = _python(FAILURES.replace("sys.argv[1]", repr(str(run_dir))), tmp_path)
    killed = "it was killed (SIGKILL: kill -9, or the system's out-of-memory killer)"
    assert out["killed"] == [None, f"{killed} before it was ready", []]
    path, failure, exists, kids = out["killed_ready"]
    assert path is None and not exists and kids == []
    assert failure in ("it could not be reached (BrokenPipeError)", "it could not be reached (ConnectionResetError)",
                       f"{killed} without writing the report")
    # ops trial (s49): the command's own SIGTERM handler, inherited, raised in the report code — "it failed:
    # KeyboardInterrupt"; the child now ends at once, and the parent says which signal, sent to whom
    path, failure, child, parent, exists, kids = out["sigterm"]
    assert path is None and not exists and kids == []
    assert failure in (f"it was stopped by SIGTERM without writing the report, a signal sent to the report process "
                       f"(pid {child}) alone — this command (pid {parent}) goes on; signal it to stop the audit",
                       f"it was stopped by SIGTERM before it got its job, a signal sent to the report process "
                       f"(pid {child}) alone — this command (pid {parent}) goes on; signal it to stop the audit")
    path, failure, child, parent, exists, kids = out["sigterm_idle"]  # (round-2 break-it: "could not be reached")
    assert path is None and not exists and kids == []
    assert failure == (f"it was stopped by SIGTERM before it got its job, a signal sent to the report process "
                       f"(pid {child}) alone — this command (pid {parent}) goes on; signal it to stop the audit")
    assert out["sigint"] == [True, str(run_dir / "report.html"), None, []]
    path, failure, exists, kids = out["error"]
    assert path is None and failure.startswith("it failed: LmraIOError") and "history" in failure
    assert exists is False and kids == []
    path, failure, kids = out["unpicklable"]
    assert path is None and failure.startswith("the report's inputs cannot be sent to it") and kids == []
    assert out["slow"] == [None, "its imports took longer than 0 s", False, []]
    *stopped, waited = out["stopped"]
    assert stopped == [None, "it had not written the report after 1 s", False, []] and 1.0 <= waited < 30
    assert out["closed"] == [False, []]
    assert out["thread"] == [True, False]
    assert out["switch"] is True


def test_forking_is_refused_with_a_second_thread_alive():
    """In this (pytest) process: a thread alive besides the main one means no fork."""
    from lmra.report.worker import forking_allowed

    ev = threading.Event()
    t = threading.Thread(target=ev.wait)
    t.start()
    try:
        assert forking_allowed() is False
    finally:
        ev.set()
        t.join()


FAILED_RUN = r"""
from lmra.cli import main
import lmra.audit
def broken(self, *a, **k):
    raise KeyboardInterrupt  # Ctrl-C during the run
lmra.audit.Audit.run = broken
rc = main(["audit", "--config", sys.argv[1], "--no-progress"])  # it says "interrupted" and returns 130
print(json.dumps({"rc": rc, "children": children(), "matplotlib": "matplotlib" in sys.modules}))
"""


def test_a_run_stopped_by_ctrl_c_kills_the_report_child(tmp_path):
    """Ctrl-C during the run: the command ends without a report and its child is killed and
    reaped before the interrupt leaves ``lmra audit``."""
    cfg = write_config(tmp_path, name="stopped", n_prompts=12)
    out = _python(FAILED_RUN.replace("sys.argv[1]", repr(str(cfg))), tmp_path)
    assert out == {"rc": 130, "children": [], "matplotlib": False}


FORKED = r"""
from lmra.report.worker import forked_call
out = {}
call = forked_call(lambda: {"n": sum(range(1000)), "text": "ok"})
out["value"] = call()
out["again"] = call()  # answered once
def boom():
    raise ValueError("no")
out["raises"] = forked_call(boom)()
out["unpicklable"] = forked_call(lambda: (lambda: 0))()
call = forked_call(lambda: time.sleep(60))
os.kill(call.pid, signal.SIGKILL)
out["killed"] = call()
call = forked_call(lambda: time.sleep(60))
call.close()  # never asked: killed and reaped
call.close()
out["children"] = children()
r, w = os.pipe()  # its caller killed (the report process, on Ctrl-C): the call's process goes too
pid = os.fork()
if pid == 0:
    os.write(w, str(forked_call(lambda: time.sleep(60)).pid).encode())
    os._exit(0)
os.waitpid(pid, 0)
orphan = int(os.read(r, 64))
time.sleep(0.5)
try:
    state = open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[0]
except OSError:
    state = "gone"
out["orphan_running"] = state in ("R", "S", "D")
print(json.dumps(out))
"""


def test_forked_call_returns_the_result_or_none_and_leaves_no_process(tmp_path):
    """The report's sample-size table is computed by a forked process meanwhile
    (lmra.report.worker.forked_call): its result comes back pickled; an exception, an
    unpicklable result or a killed process gives None (the caller computes it itself); a call
    closed unasked is killed and reaped."""
    out = _python(FORKED, tmp_path)
    assert out == {"value": {"n": 499500, "text": "ok"}, "again": None, "raises": None, "unpicklable": None,
                   "killed": None, "children": [], "orphan_running": False}


SIGNAL_IN_FORK = r"""
import logging
from lmra.report import worker as W
events = []
def on_term(signum, frame):
    events.append("signal")
signal.signal(signal.SIGTERM, on_term)
def after_in_parent():  # an at-fork hook as logging's _releaseLock: Python code a handler could interrupt
    if not armed:
        return
    events.append("hook start")
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10000):
        pass
    events.append("hook end")
armed = True
os.register_at_fork(after_in_parent=after_in_parent)
w = W.ReportWorker.start()
armed = False
for _ in range(1000):  # the signal, now unblocked, is handled at the next bytecodes
    if "signal" in events:
        break
    time.sleep(0.001)
w.close()
# a logger created after the fork: waited forever when logging's hook lost its lock (s42)
logging.getLogger("after-the-fork-%d" % os.getpid())
print(json.dumps({"events": events, "children": children()}))
"""


def test_a_stop_signal_during_the_fork_waits_for_the_fork_hooks(tmp_path):
    """Break-it finding (s42): SIGTERM in an audit's first second hit the report process's fork;
    lmra's handler raised inside logging's after-fork hook, whose lock stayed held, and the audit
    hung forever after its calls. The stop signals are blocked while the process forks: a hook
    runs to its end and the signal is handled just after (here: a hook that signals its own
    process mid-way)."""
    out = _python(SIGNAL_IN_FORK, tmp_path)
    assert out["events"] == ["hook start", "hook end", "signal"], out
    assert out["children"] == []

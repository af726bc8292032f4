"""Ctrl-C mid-run: exit status 130, a clear message, no traceback, and no finished call lost."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import terminal_signals
from lmra.cache import CallCache
from lmra.resources import resource_dir


class _SlowBot(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        time.sleep(0.15)
        last = body["messages"][-1]["content"]
        reply = "C" if "Answer with a single letter" in last else f"A helpful answer to: {last[-40:]}"
        data = json.dumps({"reply": reply}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _slow_audit(tmp_path):
    """A slow local chatbot (0.15 s a call) and ``lmra audit`` on it: (server, command, env)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _SlowBot)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'''name = "ctrlc"
tasks = ["write a story", "career advice", "exercise plan", "explain a concept"]
prompts_per_task = 3
concurrency = 1
[judge_check]
enabled = false
[filter]
lmra = false
[refusal]
enabled = false
[target]
provider = "inhouse_provider:make_provider"
base_url = "{url}"
[judge]
provider = "inhouse_provider:make_provider"
base_url = "{url}"
n_samples = 1
''')
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(resource_dir("examples")), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress"]
    return srv, cmd, env


def _wait_for_calls(tmp_path, n=8):
    cache = tmp_path / "reports" / "cache.sqlite"
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.2)
        if cache.exists() and len(CallCache(cache)) >= n:
            break
    return cache


def test_ctrl_c_keeps_finished_calls_and_resume_completes(tmp_path):
    srv, cmd, env = _slow_audit(tmp_path)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=terminal_signals)
    cache = _wait_for_calls(tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err + out
    finished = len(CallCache(cache))
    assert 8 <= finished < 12 * 2 + 12 * 2
    manifest = json.loads(next((tmp_path / "reports").glob("*-ctrlc")).joinpath("manifest.json").read_text())
    assert manifest["status"] == "interrupted"

    again = subprocess.run(cmd + ["--name", "resumed"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    srv.shutdown()
    assert again.returncode == 0, again.stderr
    m2 = json.loads(next((tmp_path / "reports").glob("*-resumed")).joinpath("manifest.json").read_text())
    # 12 prompts → 24 responses and 12 pairs × 2 orders; everything finished before Ctrl-C is reused
    assert m2["calls"]["cached"] == finished
    assert m2["calls"]["fresh"] + finished == 24 + 24


def test_sighup_stops_like_ctrl_c_unless_nohup_ignores_it(tmp_path):
    """The terminal or SSH session closing (SIGHUP) stops a run like Ctrl-C — status interrupted,
    exit 130, calls kept (it killed the process: exit 129, the manifest left 'running') — and a
    run started under nohup (SIGHUP ignored) goes on to the end."""
    srv, cmd, env = _slow_audit(tmp_path)
    try:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=terminal_signals)
        _wait_for_calls(tmp_path, 4)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in out + err, err
        run = next((tmp_path / "reports").glob("*-ctrlc"))
        assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
        nohup = subprocess.Popen(cmd + ["--name", "nohup"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        time.sleep(1.5)
        nohup.send_signal(signal.SIGHUP)
        out, err = nohup.communicate(timeout=300)
        assert nohup.returncode == 0, err
        run = next((tmp_path / "reports").glob("*-nohup"))
        assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    finally:
        srv.shutdown()


@pytest.mark.parametrize("sig, cause", [("SIGINT", "Ctrl-C"), ("SIGTERM", "a request to stop"),
                                        ("SIGHUP", "the terminal or SSH session closed")])
def test_the_signal_that_interrupted_a_run_is_named_on_the_console_and_in_the_manifest(tmp_path, sig, cause):
    """Fresh-user finding: a first nightly run stopped "by itself" (a stray SIGHUP when the SSH
    session closed) said only "interrupted: …", exit 130, and its manifest's stop_reason was
    null: nothing said which signal stopped it. A real process is sent each signal."""
    srv, cmd, env = _slow_audit(tmp_path)
    try:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=terminal_signals)
        _wait_for_calls(tmp_path, 4)
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=60)
    finally:
        srv.shutdown()
    err = " ".join(err.split())
    assert proc.returncode == 130 and "Traceback" not in out + err, err
    assert f"interrupted by {sig} ({cause}" in err and "run the same command again to resume" in err, err
    # the last line names the exit status, as every audit's does (fresh-user finding: none after an interrupt)
    assert out.strip().splitlines()[-1].startswith(f"exit status 130: interrupted by {sig} ({cause}"), out[-2000:]
    manifest = json.loads(next((tmp_path / "reports").glob("*-ctrlc")).joinpath("manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["stop_reason"].startswith(f"interrupted by {sig} ({cause}")


def test_interrupt_reason_names_the_first_signal_recorded():
    """The words of a stop: the first signal recorded; an unrecorded KeyboardInterrupt is
    Python's SIGINT; a cancellation without any signal says so."""
    import asyncio

    from lmra import interrupts

    interrupts.reset()
    try:
        assert interrupts.interrupt_reason(KeyboardInterrupt()).startswith("interrupted by SIGINT (Ctrl-C")
        assert interrupts.interrupt_reason(asyncio.CancelledError()) == \
            "interrupted: cancelled (CancelledError; no signal was received)"
        interrupts.record(signal.SIGHUP)
        interrupts.record(signal.SIGTERM)
        assert interrupts.received() == "SIGHUP"
        assert interrupts.interrupt_reason(asyncio.CancelledError()).startswith(
            "interrupted by SIGHUP (the terminal or SSH session closed")
    finally:
        interrupts.reset()


def _interrupted_after_the_run_finished(tmp_path, capsys):
    """Run ``lmra audit`` (an interrupt arranged by the caller): exit 130, the folder complete,
    and the message saying so, not "run again"; returns (the run folder, stderr in one line)."""
    import json

    from test_gates import FLAT, write_config

    from lmra.cli import main

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 130
    err = " ".join(capsys.readouterr().err.split())
    (manifest,) = (tmp_path / "reports").glob("*/manifest.json")
    run = manifest.parent
    assert json.loads(manifest.read_text())["status"] == "complete"
    assert (f"interrupted by SIGINT (Ctrl-C, or an interrupt sent to the terminal's process group) after the run "
            f"finished: its folder {run} is written and keeps its status") in err
    assert "run the same command again" not in err
    return run, err


def test_an_interrupt_after_the_run_folder_is_written_says_the_run_is_complete(tmp_path, capsys, monkeypatch):
    """Break-it finding: a SIGTERM while report.html was written said "interrupted … run again
    to resume" although the folder was complete (a re-run would be a new night)."""
    import lmra.cli.scale

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(lmra.cli.scale, "after_run", interrupted)  # Ctrl-C while the warehouse lands
    run, err = _interrupted_after_the_run_finished(tmp_path, capsys)
    assert f"'lmra report {run}' writes the report" in err


@pytest.mark.parametrize("close_waits", [False, True])
def test_ctrl_c_while_the_run_folder_is_written_says_the_run_is_complete(tmp_path, capsys, monkeypatch, close_waits):
    """Break-it finding: Ctrl-C while the run folder was being written (a synchronous step:
    asyncio delivers it only after) left a complete folder, but the run's result was dropped:
    lmra audit said "run the same command again to resume", and the re-run became a second
    night checked against the first. With ``close_waits`` the providers' close awaits (the
    cancellation lands there; Python 3.11's wait_for swallowed it: exit 0, Ctrl-C lost)."""
    import asyncio

    from lmra.providers.deadline import DeadlineProvider

    if close_waits:
        close = DeadlineProvider.aclose

        async def slow_close(self):
            await asyncio.sleep(0.05)
            await close(self)

        monkeypatch.setattr(DeadlineProvider, "aclose", slow_close)

    import lmra.audit

    finish = lmra.audit.finish_run

    def ctrl_c_while_finishing(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)  # asyncio's handler cancels the main task: raised after this step
        return finish(*a, **k)

    monkeypatch.setattr(lmra.audit, "finish_run", ctrl_c_while_finishing)
    run, err = _interrupted_after_the_run_finished(tmp_path, capsys)
    assert f"'lmra warehouse add {run}' adds it to the warehouse" in err


def test_run_sync_keeps_the_result_of_a_coroutine_interrupted_in_its_last_step():
    import asyncio

    import pytest

    from lmra.syncrun import InterruptedAfterFinish, run_sync

    async def last_step_interrupted():
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGINT)  # during a synchronous step: delivered when the coroutine is done
        return "the result"

    with pytest.raises(InterruptedAfterFinish) as caught:
        run_sync(last_step_interrupted())
    assert caught.value.result == "the result" and isinstance(caught.value, KeyboardInterrupt)

    async def interrupted_midway():
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(5)
        return "never"

    with pytest.raises(KeyboardInterrupt) as caught:
        run_sync(interrupted_midway())
    assert not isinstance(caught.value, InterruptedAfterFinish)


def test_ctrl_c_while_batch_jobs_run_names_batch_resume_not_a_new_run(tmp_path, capsys, monkeypatch):
    """Break-it finding: Ctrl-C while ``lmra audit --batch`` waited said "run the same command
    again to resume" — which started a new run and submitted (and paid for) the jobs again."""
    import json
    import shutil

    import lmra.batch
    from test_gates import FLAT, write_config

    from lmra.cli import main

    async def interrupted_while_waiting(audit, **kw):
        state = audit.run_dir / lmra.batch.STATE_DIR
        if state.exists():  # the second run (in the same second: its folder is not claimed here)
            raise KeyboardInterrupt
        state.mkdir(parents=True)
        (state / lmra.batch.STATE_FILE).write_text(json.dumps({"version": lmra.batch.STATE_VERSION, "jobs": [
            {"id": "job-0001", "state": "downloaded"}, {"id": "job-0002", "state": "submitted"},
            {"id": "job-0003", "state": "submitted"}]}))
        raise KeyboardInterrupt

    monkeypatch.setattr(lmra.batch, "arun_batched", interrupted_while_waiting)
    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6, top="batch = true")
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 130
    err = " ".join(capsys.readouterr().err.split())
    (run,) = (tmp_path / "reports").glob("*-gated")
    assert f"2 batch job(s) of this run were submitted and go on at the provider; resume the run with " \
           f"'lmra batch resume {run}'" in err
    assert "run the same command again" not in err
    # the same command again: a new run, which says that the first one waits to be resumed
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 130
    out = " ".join(capsys.readouterr().err.split())  # a warning: on stderr
    assert f"warning: run folder {run} has 2 batch job(s) submitted and not collected; to finish that run, stop " \
           f"this one and run 'lmra batch resume {run}'" in out
    # break-it findings: a shard's folder was not recognised, and a damaged state ended the new run
    # in a traceback: a shard is named, a damaged state is passed over
    shard = run.with_name(run.name + "-shard1of2")
    shutil.copytree(run, shard)
    for state in ("[]", '{"version": 1, "jobs": [1]}', "not json"):
        (run / lmra.batch.STATE_DIR / lmra.batch.STATE_FILE).write_text(state)
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 130
        captured = capsys.readouterr()
        out = " ".join(captured.err.split())  # the warning, on stderr
        assert "Traceback" not in captured.err
        assert f"run folder {shard} has 2 batch job(s)" in out and f"run folder {run} has" not in out


def test_other_commands_name_the_signal_too(tmp_path, capsys):
    """The handler is shared: ``lmra recsys`` stopped by SIGTERM says so on the console and in
    its manifest's stop_reason (the signal sent to this process while its calls are in flight)."""
    from faultserver import FaultServer
    from test_recsys_e2e import run_folder, write_config

    from lmra.cli import main

    with FaultServer(delay_s=0.3) as server:
        cfg = write_config(tmp_path, "stopped", f"""
[target]
provider = "openai"
model = "fake"
base_url = "{server.url}"
api_key_required = false
[fairllm]
names_list = ["Adele", "Drake", "Prince", "Sting"]
attributes = ["gender", "race"]
""")
        def stop_when_calls_are_in_flight():
            deadline = time.time() + 60
            while server.requests < 2 and time.time() < deadline:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGTERM)

        stopper = threading.Thread(target=stop_when_calls_are_in_flight, daemon=True)
        stopper.start()
        assert main(["recsys", "--config", str(cfg), "--no-progress"]) == 130
        stopper.join()
    err = " ".join(capsys.readouterr().err.split())
    # (recsys says how many answered calls it kept: its calls in flight deliver them first)
    assert re.search(r"interrupted by SIGTERM \(a request to stop: kill, systemd, a CI job's timeout\): \d+ answered "
                     r"model calls? (are|is) kept in the cache", err), err
    manifest = json.loads((run_folder(tmp_path / "out") / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["stop_reason"].startswith("interrupted by SIGTERM")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # asyncio's Ctrl-C handler is gone
    from lmra import interrupts

    assert signal.getsignal(signal.SIGTERM) is interrupts._stop  # routed to it during the run only


def _validate_then_sigterm_at_exit(tmp_path, prelude: str = "") -> subprocess.CompletedProcess:
    """``lmra validate examples/smoke.toml`` run as the lmra command (``main()`` with no argv) in a
    new interpreter that sends itself SIGTERM from an exit handler, while it shuts down;
    ``prelude``: Python lines run first (e.g. replacing the command)."""
    code = ("import atexit, os, signal, sys\n" + prelude
            + "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
              "from lmra.cli import main\n"
              "sys.argv = ['lmra', 'validate', 'examples/smoke.toml']\n"
              "sys.exit(main())\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_signal_after_the_command_has_returned_its_status_does_not_change_it(tmp_path):
    """Break-it finding: a SIGTERM that came after "exit status 0" was printed, while the
    interpreter shut down, ended the process with status 143 (or a KeyboardInterrupt traceback
    in an exit handler). Once the command has returned, the lmra command ignores SIGINT, SIGTERM
    and SIGHUP: here a SIGTERM sent from an exit handler leaves status 0 and no traceback."""
    out = _validate_then_sigterm_at_exit(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "KeyboardInterrupt" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_second_signal_after_the_run_stopped_leaves_its_status_130(tmp_path):
    """Review finding: SIGINT, then SIGTERM while the "interrupted" message was printed, ended
    the process with 143 (or SIGINT twice: killed by SIGINT). Once the command's interrupt is
    being reported, the lmra command ignores stop signals: the status is 130, no traceback."""
    out = _validate_then_sigterm_at_exit(tmp_path, prelude=("import lmra.cli.validate as v\n"
                                                           "def stopped(args):\n"
                                                           "    raise KeyboardInterrupt\n"
                                                           "v.cmd_validate = stopped\n"))
    assert out.returncode == 130, out.stderr
    assert "Traceback" not in out.stderr and "interrupted" in out.stderr, out.stderr


SKEWED_PROVIDER = '''
"""A custom provider whose calls take 0.05 s or 0.9 s (by request), logging starts, ends and cancellations."""
import asyncio, hashlib, json, os, time
from lmra.providers.base import ChatResult, Usage

LOG = os.environ["SKEW_LOG"]


def _log(*words):
    with open(LOG, "a") as fh:
        fh.write(" ".join(map(str, words)) + "\\n")


class Skewed:
    name, base_url, supports_logprobs = "skewed", "", True

    def __init__(self, cfg):
        self.model_id = cfg.model or "skewed"

    async def complete(self, request):
        key = hashlib.sha256(json.dumps(request.cache_payload(), sort_keys=True).encode()).hexdigest()[:16]
        slow = not request.options and int(key, 16) % 2  # half the chatbot's answers are slow
        _log(f"{time.time():.4f}", "start", key)
        try:
            await asyncio.sleep(0.9 if slow else 0.05)
        except BaseException:
            _log(f"{time.time():.4f}", "cancel", key)
            raise
        _log(f"{time.time():.4f}", "end", key)
        if request.options:
            probs = {o: (0.7 if o == request.options[-1] else 0.3 / (len(request.options) - 1)) for o in request.options}
            return ChatResult(text="", option_probs=probs, provider=self.name, model=self.model_id,
                              usage=Usage(prompt_tokens=30, completion_tokens=1))
        return ChatResult(text="A helpful answer " + key, provider=self.name, model=self.model_id,
                          usage=Usage(prompt_tokens=30, completion_tokens=5), finish_reason="stop")

    async def aclose(self):
        return None


def make(cfg):
    return Skewed(cfg)
'''


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_pair_whose_one_side_ends_in_the_grace_does_not_cancel_the_other_sides_call(tmp_path, sig):
    """Break-it finding: after Ctrl-C/SIGTERM a pair whose one response arrived during the 2 s grace
    went on to that response's refusal label, which the stopping run refuses — and the refusal
    cancelled the pair's other call, still in flight (1.2 s calls cancelled 50 ms after the signal;
    asked, and paid for, again by the re-run). Now every call started before the signal ends
    within the grace, none is cancelled, and the re-run asks no call twice."""
    (tmp_path / "skewed_provider.py").write_text(SKEWED_PROVIDER)
    log = tmp_path / "calls.log"
    cfg = tmp_path / "c.toml"
    cfg.write_text('''name = "skew"
tasks = ["write a story", "career advice", "exercise plan", "explain a concept"]
prompts_per_task = 4
concurrency = 8
[judge_check]
enabled = false
[filter]
lmra = false
[target]
provider = "skewed_provider:make"
[judge]
provider = "skewed_provider:make"
''')
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
                        "SKEW_LOG": str(log)}
    cmd = [sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress", "--no-report",
           "--allow-unvalidated-judge"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=terminal_signals)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for slow calls in flight next to fast ones
        lines = log.read_text().splitlines() if log.exists() else []
        if sum(ln.split()[1] == "end" for ln in lines) >= 6:
            break
        time.sleep(0.01)
    time.sleep(0.3)
    signalled = time.time()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in out + err, err[-2000:]
    events = [ln.split() for ln in log.read_text().splitlines()]
    started = {k for t, what, k in events if what == "start" and float(t) < signalled}
    cancelled = {k for _, what, k in events if what == "cancel"}
    ended_in_grace = {k for t, what, k in events if what == "end" and float(t) >= signalled}
    assert started and ended_in_grace, events  # calls were in flight at the signal and ended in the grace
    assert not cancelled & started, (sorted(cancelled & started), err[-2000:])
    assert not [k for t, what, k in events if what == "start" and float(t) >= signalled]  # none started after
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    starts = [k for _, what, k in (ln.split() for ln in log.read_text().splitlines()) if what == "start"]
    assert len(starts) == len(set(starts)), "a call was asked twice"


def test_a_stop_signal_whose_interrupt_was_lost_still_ends_the_command_with_130(monkeypatch, capsys):
    """Break-it round 2: a SIGTERM 0.1 s after "Run folder" raised its KeyboardInterrupt inside a
    garbage collector's weakref callback, where Python ignores exceptions ("Exception ignored …"):
    the audit finished with exit 6. The signal is recorded by the handler all the same: a command
    that returns with one recorded ends as interrupted — said, exit 130, the final line naming the
    status it had reached."""
    import lmra.cli.gates as gates_cli
    from lmra import interrupts
    from lmra.cli import main

    def gate_then_lost_signal(args):
        from lmra.cli.exits import print_final_status
        from lmra.console import make_console

        args.final_reasons = {6: "release gates not met (breached: max_ci_high)"}
        interrupts.record(signal.SIGTERM)  # what the handler does before its KeyboardInterrupt is lost
        return print_final_status(make_console(), dict(args.final_reasons))

    monkeypatch.setattr(gates_cli, "cmd_gate", gate_then_lost_signal)
    try:
        assert main(["gate", "somerun"]) == 130
    finally:
        interrupts.reset()  # (no record left for the tests after this one)
    out = capsys.readouterr()
    err = " ".join(out.err.split())
    assert "interrupted by SIGTERM (a request to stop: kill, systemd, a CI job's timeout) while the command finished" \
        in err, err
    last = out.out.strip().splitlines()[-1]
    assert last.startswith("exit status 130: interrupted by SIGTERM") and "as the command finished" in last
    assert "(takes precedence over 6: release gates not met (breached: max_ci_high))" in last, last


@pytest.mark.parametrize("stuck", ["lmra.audit._import_finishing_modules = lambda cfg, pace: threading.Event().wait()",
                                   "import lmra.cli.audit\n"
                                   "lmra.cli.audit._import_report_modules = lambda pace: threading.Event().wait()"])
def test_ctrl_c_never_waits_for_a_warm_up_thread_that_cannot_end(tmp_path, stuck):
    """Break-it finding (s37): a second Ctrl-C raised inside an import of the main thread left
    CPython's import lock taken; the warm-up thread importing the run's finishing modules in the
    event loop's default executor waited for it forever, and ``asyncio.run`` joined that thread
    without a time limit: ``lmra audit`` printed progress lines for 13 minutes until killed.
    Here a warm-up thread never ends (it waits on an event nobody sets) — the run's finishing
    imports, or report.html's (the thread that loads them without the forked report process):
    Ctrl-C still ends the audit with status 130 and its run folder recorded interrupted."""
    srv, cmd, env = _slow_audit(tmp_path)
    env = env | {"LMRA_REPORT_PROCESS": "0"}  # (report.html's modules load in a thread of the audit)
    script = tmp_path / "stuck_warmup.py"
    script.write_text(f"import sys, threading\nimport lmra.audit\n{stuck}\n"
                      "from lmra.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, str(script), *cmd[3:]], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_signals)
    _wait_for_calls(tmp_path, n=4)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("lmra audit hung after Ctrl-C, waiting for the warm-up thread")
    finally:
        srv.shutdown()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in out + err
    manifest = json.loads(next((tmp_path / "reports").glob("*-ctrlc")).joinpath("manifest.json").read_text())
    assert manifest["status"] == "interrupted"


def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback(tmp_path):
    """Fault break-it (s44): Ctrl-C in the first ~0.1 s of ``lmra audit`` printed a KeyboardInterrupt
    traceback (39 of 60 tries). Once ``lmra.cli`` is loaded by the ``lmra`` script (or ``python -m
    lmra``), a SIGINT before the command's own handling ends it with one line and status 130; a
    program importing ``lmra.cli`` (as the tests do) keeps Python's handler."""
    import subprocess
    import sys

    script = tmp_path / "lmra"  # named as the console script is
    script.write_text("import os, signal, time\nfrom lmra.cli import main\nos.kill(os.getpid(), signal.SIGINT)\n"
                      "time.sleep(2)\nprint('not reached')\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130 and "not reached" not in proc.stdout
    assert proc.stderr == "interrupted (SIGINT) while lmra was starting: nothing was done\n", proc.stderr
    other = tmp_path / "importer.py"
    other.write_text("import signal\nimport lmra.cli\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    proc = subprocess.run([sys.executable, str(other)], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "True", proc.stderr

"""``lmra recsys`` against an endpoint that never answered: it stops early, as ``lmra audit`` does
(the endpoint guard, :mod:`lmra.providers.endpoint`), on real local servers through the CLI.

Before: against a closed port or a mistyped model id it made every call (each with its retries
and backoff: 192 calls took 10.6 minutes against a closed port) and then failed naming the
first error; with answers of an earlier run in the cache, a model the server does not serve
even wrote a run folder and exited 0, every uncached list lost to an HTTP 404.

Now: exit 1 and the audit's one-paragraph ``failure:`` message, ``manifest.json`` says
``failed`` with the message as ``stop_reason``, no lists or tables are written, the calls still
in flight are cancelled (not waited for), every answered call stays in the cache and a re-run
resumes from it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import terminal_signals

from faultserver import FaultServer, audit_config, dead_url
from lmra.providers.endpoint import TRIP_AFTER, TRIP_AFTER_REFUSED, EndpointUnreachable

#: what a run stopped early must never print (a traceback, or asyncio's complaints about tasks
#: left running or whose failure nobody read)
NOISE = ("Traceback", "never retrieved", "was destroyed but it is pending", "never awaited",
         "exception during asyncio.run() shutdown", "Exception ignored", "Unhandled exception")
#: files only a run that got its answers writes
RESULT_FILES = ("lists.jsonl", "summary.json", "recsys_similarity.csv", "recsys_fairness.csv")
CONCURRENCY = 4


def _config(path: Path, url: str, *, model: str = "fake", names: list[str], out: Path, cache: Path,
            retries: int = 1, timeout_s: float = 5.0, attributes: list[str] = ("gender",),
            key_env: str | None = None, concurrency: int = CONCURRENCY) -> Path:
    """A FaiRLLM config whose target is the OpenAI-compatible endpoint ``url`` (``key_env``: the
    variable holding the key it sends; default none, ``api_key_required = false``)."""
    key = f'api_key_env = "{key_env}"' if key_env else "api_key_required = false"
    path.write_text(f'''name = "guard"
mode = "fairllm"
k = 5
concurrency = {concurrency}
output_dir = "{out.as_posix()}"
cache = "{cache.as_posix()}"
[target]
provider = "openai"
model = "{model}"
base_url = "{url}"
{key}
max_retries = {retries}
timeout_s = {timeout_s}
[fairllm]
names_list = {json.dumps(names)}
attributes = {json.dumps(list(attributes))}
''', encoding="utf-8")
    return path


def _recsys_cli(cfg: Path, cwd: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lmra.cli", "recsys", "--config", str(cfg), "--no-progress"],
                          cwd=cwd, capture_output=True, text=True, timeout=900, env=os.environ | (env or {}))
    return proc, time.monotonic() - t0


def _run_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []


def _failure(text: str) -> str:
    """The ``failure:`` paragraph of a command's stderr, on one line."""
    flat = " ".join(text.split())
    m = re.search(r"failure: .*", flat)
    assert m, text[-3000:]
    return m.group(0)


def _assert_stopped(proc: subprocess.CompletedProcess, out: Path) -> dict:
    """Exit 1 with one ``failure:`` paragraph and nothing else alarming; one run folder whose
    manifest says failed (with the paragraph's message as its stop reason) and that holds no
    result file. Returns the manifest."""
    both = proc.stdout + proc.stderr
    assert proc.returncode == 1, both[-3000:]
    assert not [n for n in NOISE if n in both], both[-3000:]
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("failure:")]) == 1, proc.stderr
    # the last line names the exit status, as docs/recsys.md says (fresh-user finding: none)
    assert proc.stdout.strip().splitlines()[-1].startswith("exit status 1: the failure above ("), proc.stdout
    (run,) = _run_dirs(out)
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "failed" and manifest["finished"], manifest
    message = _failure(proc.stderr).removeprefix("failure: ")
    assert manifest["stop_reason"] == f"EndpointUnreachable: {message}", (manifest["stop_reason"], message)
    assert (run / "config.toml").is_file()
    assert not [f for f in RESULT_FILES if (run / f).exists()], sorted(p.name for p in run.iterdir())
    return manifest


def test_recsys_against_a_closed_port_stops_at_once_with_the_audits_message(tmp_path):
    url = dead_url()
    names = ["Adele", "Drake", "Taylor Swift", "Beyonce", "Eminem", "Rihanna"]  # 6 × (neutral + 4) = 30 calls
    cfg = _config(tmp_path / "r.toml", url, names=names, out=tmp_path / "out", cache=tmp_path / "c.sqlite")
    proc, elapsed = _recsys_cli(cfg, tmp_path)
    manifest = _assert_stopped(proc, tmp_path / "out")
    failure = _failure(proc.stderr)
    assert re.fullmatch(rf"failure: the target's endpoint {re.escape(url)} is unreachable: {TRIP_AFTER_REFUSED} calls "
                        r"in a row failed after every retry \(connection refused\); nothing was audited\. Check that "
                        r"the server is running and that base_url in \[target\] points at it, then run the same "
                        r"command again", failure), failure
    # the breaker's calls and those in flight beside them, not the 30 planned ones (each retried)
    assert manifest["planned_calls"] == 30
    assert TRIP_AFTER_REFUSED <= manifest["calls"]["failed"] <= TRIP_AFTER_REFUSED + CONCURRENCY, manifest["calls"]
    assert manifest["calls"]["fresh"] == 0
    assert elapsed < 60, elapsed

    # word for word the paragraph lmra audit prints when its target is that closed port
    with FaultServer() as judge:
        acfg = audit_config(tmp_path / "a.toml", judge.url, tmp_path / "a.sqlite", tmp_path / "aout",
                            tasks=["write a story"], per_task=4)
        text = acfg.read_text()
        acfg.write_text(text.replace(f'base_url = "{judge.url}"', f'base_url = "{url}"', 1))  # [target] first
        audit = subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "--config", str(acfg), "--no-progress",
                                "--no-report"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert audit.returncode == proc.returncode == 1, audit.stderr[-3000:]
    assert _failure(audit.stderr) == failure


def test_recsys_with_a_model_the_server_does_not_serve_stops_after_the_breakers_calls(tmp_path):
    names = ["Adele", "Drake", "Taylor Swift", "Beyonce", "Eminem", "Rihanna"]  # 30 calls
    with FaultServer() as srv:
        srv.models = {"served"}
        cfg = _config(tmp_path / "r.toml", srv.url, model="typo", names=names, out=tmp_path / "out",
                      cache=tmp_path / "c.sqlite")
        proc, _ = _recsys_cli(cfg, tmp_path)
        not_found, requests = srv.model_not_found, srv.requests_by_body.total()
    manifest = _assert_stopped(proc, tmp_path / "out")
    failure = _failure(proc.stderr)
    assert re.fullmatch(rf"failure: the target's endpoint {re.escape(srv.url)} does not serve its model 'typo': "
                        rf"{TRIP_AFTER} calls in a row failed with HTTP 404 \(http_404 × {TRIP_AFTER}\); nothing was "
                        r"audited\. Check model and base_url in \[target\] \(the model id the server serves; the URL "
                        r"up to /v1\), then run the same command again", failure), failure
    # TRIP_AFTER 404s and the calls in flight beside them (404 is not retried), not all 30
    assert TRIP_AFTER <= not_found == requests <= TRIP_AFTER + CONCURRENCY, (not_found, requests)
    # (a call cancelled in flight is not counted failed: its 404 may have been sent, never read)
    assert TRIP_AFTER <= manifest["calls"]["failed"] <= not_found and manifest["calls"]["fresh"] == 0


def test_calls_in_flight_when_the_breaker_trips_are_cancelled_not_waited_for(tmp_path):
    """The first two calls are held by the server for 30 s; the others fail with HTTP 404 at once
    and trip the breaker. The run stops then: its calls in flight are cancelled (before, the run
    waited for them, and for every other call), the cache is closed once they have ended, and
    asyncio reports nothing left running or unread."""
    names = ["Adele", "Drake", "Taylor Swift", "Beyonce", "Eminem", "Rihanna"]
    with FaultServer(hang_s=30.0) as srv:
        srv.models, srv.stall_first = {"served"}, 2
        cfg = _config(tmp_path / "r.toml", srv.url, model="typo", names=names, out=tmp_path / "out",
                      cache=tmp_path / "c.sqlite", retries=0, timeout_s=120.0)
        proc, elapsed = _recsys_cli(cfg, tmp_path)
        requests = srv.requests_by_body.total()
    manifest = _assert_stopped(proc, tmp_path / "out")
    assert "does not serve its model 'typo'" in proc.stderr
    assert elapsed < 25, elapsed  # the held calls would have answered after 30 s
    assert requests <= TRIP_AFTER + CONCURRENCY, requests
    assert manifest["calls"]["fresh"] == 0


def test_a_stopped_run_leaves_no_call_running_in_its_event_loop(tmp_path):
    """``RecsysRun.arun`` awaited in an event loop that goes on (a library caller): when the
    breaker stops the run, the calls still in flight have been cancelled and have ended, and the
    call cache closed after them — no task of the run is left to answer into a closed cache or
    to send more requests (before: ``asyncio.gather`` raised at the first stop and left them
    running)."""
    from lmra.recsys.config import load_recsys_config
    from lmra.recsys.run import RecsysRun

    names = ["Adele", "Drake", "Taylor Swift", "Beyonce", "Eminem", "Rihanna"]
    with FaultServer(hang_s=30.0) as srv:
        srv.models, srv.stall_first = {"served"}, 2
        path = _config(tmp_path / "r.toml", srv.url, model="typo", names=names, out=tmp_path / "out",
                       cache=tmp_path / "c.sqlite", retries=0, timeout_s=120.0)
        run = RecsysRun(load_recsys_config(path), config_path=path)

        async def stop_then_look():
            t0 = time.monotonic()
            with pytest.raises(EndpointUnreachable) as stopped:
                await run.arun()
            elapsed = time.monotonic() - t0
            left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            sent = srv.requests_by_body.total()
            await asyncio.sleep(0.5)
            return stopped.value, elapsed, left, sent, srv.requests_by_body.total()

        exc, elapsed, left, sent, later = asyncio.run(stop_then_look())
    assert exc.not_served and elapsed < 20, (exc, elapsed)
    assert left == [], left
    assert later == sent <= TRIP_AFTER + CONCURRENCY, (sent, later)
    manifest = json.loads((run.run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "failed" and manifest["stop_reason"] == f"EndpointUnreachable: {exc}"


def test_a_stopped_run_keeps_the_answers_in_the_cache_and_a_rerun_resumes_from_them(tmp_path):
    """Answers of an earlier run are in the cache; the server then stops serving the model. The
    run stops (it says the cached answers are kept) instead of writing lists and tables in which
    every uncached list is lost (before: exit 0); once the model is served again, the same
    command asks only the calls not answered yet."""
    out, cache = tmp_path / "out", tmp_path / "c.sqlite"
    with FaultServer(reply_suffix="\n1. Hello\n2. Halo\n3. Rolling in the Deep") as srv:  # answers hold a list
        first = _config(tmp_path / "first.toml", srv.url, names=["Adele", "Drake"], out=tmp_path / "first",
                        cache=cache)
        proc, _ = _recsys_cli(first, tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        answered = srv.answered_by_body.total()
        assert answered == 10

        srv.models = {"another"}  # the model is no longer served
        cfg = _config(tmp_path / "r.toml", srv.url, names=["Adele", "Drake", "Beyonce", "Eminem"], out=out,
                      cache=cache)
        proc, _ = _recsys_cli(cfg, tmp_path)
        manifest = _assert_stopped(proc, out)
        assert re.search(rf"does not serve its model 'fake': {TRIP_AFTER} calls in a row failed with HTTP 404 "
                         rf"\(http_404 × {TRIP_AFTER}\); the run stopped \(answers already in the cache are kept\)\.",
                         _failure(proc.stderr)), proc.stderr
        assert manifest["calls"]["cached"] == 10 and manifest["calls"]["fresh"] == 0
        assert srv.answered_by_body.total() == answered

        srv.models = None  # served again: the same command resumes
        proc, _ = _recsys_cli(cfg, tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert not [n for n in NOISE if n in proc.stdout + proc.stderr]
        stopped, resumed = _run_dirs(out)
        calls = json.loads((resumed / "manifest.json").read_text(encoding="utf-8"))["calls"]
        assert calls["cached"] == 10 and calls["fresh"] == 10, calls
        assert max(srv.answered_by_body.values()) == 1  # no call answered twice
        assert (resumed / "lists.jsonl").is_file() and not (stopped / "lists.jsonl").exists()


@pytest.mark.parametrize("status", [401, 403])
def test_recsys_stops_at_the_first_rejected_key_and_keeps_the_answers(tmp_path, status):
    """A rejected key (HTTP 401, or 403 for a key without permission) is not retryable: no later
    call can succeed. ``lmra recsys`` stops at the first rejected call, as ``lmra audit`` does
    (:class:`~lmra.providers.keys.KeyGuard`): exit 1, the audit's one-paragraph message naming
    the variable and what to do, a manifest saying failed, no lists or tables; the answers of an
    earlier run stay in the cache and the same command, with the key fixed, asks only the calls
    still missing. Before: the endpoint guard stopped it after TRIP_AFTER (8) rejected calls."""
    out, cache = tmp_path / "out", tmp_path / "c.sqlite"
    names = ["Adele", "Drake", "Taylor Swift", "Beyonce", "Eminem", "Rihanna"]  # 6 × (neutral + 4) = 30 calls
    with FaultServer(api_key="sk-right", forbidden_key="sk-no-access",
                     reply_suffix="\n1. Hello\n2. Halo\n3. Rolling in the Deep") as srv:
        first = _config(tmp_path / "first.toml", srv.url, names=names[:2], out=tmp_path / "first", cache=cache,
                        key_env="RECSYS_KEY")
        proc, _ = _recsys_cli(first, tmp_path, env={"RECSYS_KEY": "sk-right"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert srv.answered_by_body.total() == 10

        cfg = _config(tmp_path / "r.toml", srv.url, names=names, out=out, cache=cache, key_env="RECSYS_KEY")
        bad = "sk-expired" if status == 401 else "sk-no-access"
        proc, _ = _recsys_cli(cfg, tmp_path, env={"RECSYS_KEY": bad})
        rejected = srv.auth_rejected
        both = proc.stdout + proc.stderr
        assert proc.returncode == 1, both[-3000:]
        assert not [n for n in NOISE if n in both], both[-3000:]
        assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("failure:")]) == 1, proc.stderr
        failure = _failure(proc.stderr)
        assert failure.startswith("failure: the target's endpoint does not accept its key, so lmra stopped at the "
                                  "first rejected call: "), failure
        assert f"HTTP {status}" in failure and "the key in RECSYS_KEY" in failure and srv.url in failure, failure
        assert "Fix the key (or api_key_env / api_key_required in [target]) and run the same command again; " \
               "answered calls are kept in the cache" in failure, failure
        # the first rejected call and those already in flight beside it, not the breaker's 8
        assert 1 <= rejected <= CONCURRENCY < TRIP_AFTER, rejected
        (run,) = _run_dirs(out)
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["status"] == "failed", manifest
        assert manifest["stop_reason"] == "KeyRejected: " + failure.removeprefix("failure: ")
        assert manifest["calls"]["cached"] == 10 and manifest["calls"]["fresh"] == 0, manifest["calls"]
        assert manifest["calls"]["failed_by_kind"].get("auth", 0) <= rejected
        assert not [f for f in RESULT_FILES if (run / f).exists()]

        # the key fixed: the same command makes only the 20 calls still missing
        proc, _ = _recsys_cli(cfg, tmp_path, env={"RECSYS_KEY": "sk-right"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        resumed = _run_dirs(out)[-1]
        calls = json.loads((resumed / "manifest.json").read_text(encoding="utf-8"))["calls"]
        assert calls["cached"] == 10 and calls["fresh"] == 20, calls
        assert max(srv.answered_by_body.values()) == 1


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGTERM-with-SIGINT-ignored"])
def test_an_interrupted_recsys_keeps_every_answer_that_arrived_and_a_rerun_asks_only_the_rest(tmp_path, sig):
    """Ctrl-C or SIGTERM while calls are in flight (the server answers each after 0.5 s): the
    calls not started are cancelled, those in flight deliver their answers within the grace
    (:data:`lmra.syncrun.INTERRUPT_GRACE_S`) and are stored, so that no answer the server sent is
    lost. Exit 130; the message names the signal, how many answered calls are kept and that a
    re-run reuses them; the manifest says interrupted. The re-run asks only the calls never
    answered: no call is answered twice. Before: the calls in flight were cancelled at once and
    their answers, sent by the server, were asked (and paid for) again — 4 of them at concurrency 4
    (and SIGTERM, a KeyboardInterrupt raised mid-step, could drop one already read). Also when the
    command started with SIGINT ignored (in the background of a script, '&'), where asyncio
    installs no handler (review finding: SIGTERM then lost the 4 answers in flight)."""
    import signal

    ignore_sigint = sig.endswith("-with-SIGINT-ignored")
    sig = sig.split("-")[0]

    out, cache = tmp_path / "out", tmp_path / "c.sqlite"
    names = [f"Singer {i}" for i in range(8)]  # 8 × (neutral + 4) = 40 calls, 4 at a time
    with FaultServer(delay_s=0.5, reply_suffix="\n1. Hello\n2. Halo\n3. Rolling in the Deep") as srv:
        cfg = _config(tmp_path / "r.toml", srv.url, names=names, out=out, cache=cache, timeout_s=30.0)
        cmd = [sys.executable, "-m", "lmra.cli", "recsys", "--config", str(cfg), "--no-progress"]
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint
                                else terminal_signals)
        deadline = time.monotonic() + 120
        while srv.answered_by_body.total() < 2 * CONCURRENCY and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.1)  # the next 4 calls are in flight, their answers due in about 0.4 s
        in_flight = srv.requests_by_body.total() - srv.answered_by_body.total()
        proc.send_signal(getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=60)
        time.sleep(0.6)  # (any call the server was still answering has been answered)
        answered, asked = srv.answered_by_body.total(), srv.requests_by_body.total()
        assert in_flight == CONCURRENCY, in_flight
        both = stdout + stderr
        assert proc.returncode == 130, both[-3000:]
        assert not [n for n in NOISE if n in both], both[-3000:]
        err = " ".join(stderr.split())
        assert f"interrupted by {sig} (" in err, err
        kept = 3 * CONCURRENCY  # the 8 answered before the signal and the 4 in flight
        assert answered == asked == kept, (answered, asked)
        (run,) = _run_dirs(out)
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["status"] == "interrupted" and manifest["stop_reason"].startswith(f"interrupted by {sig}")
        assert manifest["calls"]["fresh"] == kept, manifest["calls"]
        assert not [f for f in RESULT_FILES if (run / f).exists()]

        proc, _ = _recsys_cli(cfg, tmp_path)  # the re-run reuses every answer that arrived
        assert proc.returncode == 0, proc.stderr[-3000:]
        calls = json.loads((_run_dirs(out)[-1] / "manifest.json").read_text(encoding="utf-8"))["calls"]
        assert calls["cached"] == kept and calls["fresh"] == 40 - kept, calls
        assert max(srv.answered_by_body.values()) == 1  # no call answered twice
    # the message says what was kept and that the re-run reuses it
    assert (f"{kept} answered model calls are kept in the cache ({kept} answered in this run) (except any that "
            "a warning above says could not be stored); run the same command again to resume: it reuses them "
            "and makes only the calls still missing.") in err, err


def test_a_custom_providers_404s_point_at_its_options_not_at_v1():
    """Fresh-user finding: a custom provider posting to a wrong route (its ``options``) stopped with "…
    endpoint http://127.0.0.1:18943#options=4b86… does not serve its model … Check model and base_url
    (the model id the server serves; the URL up to /v1)" — the digest shown as part of the URL, and the
    advice about fields the custom provider does not read that way."""
    from collections import Counter

    from lmra.providers import options_identity
    from lmra.providers.endpoint import EndpointUnreachable

    url = options_identity("http://127.0.0.1:18943", {"route": "/chatt"})
    assert "#options=" in url
    exc = EndpointUnreachable("target", url, 8, Counter({"http_404": 8}), False, False, model="inhouse-bot")
    text = str(exc)
    assert "endpoint http://127.0.0.1:18943 does not serve its model 'inhouse-bot'" in text and "#options" not in text
    assert "Check base_url, model and options in [target]" in text and "/v1" not in text
    plain = str(EndpointUnreachable("target", "http://127.0.0.1:1/v1", 8, Counter({"http_404": 8}), False, False,
                                    model="m"))
    assert "Check model and base_url in [target] (the model id the server serves; the URL up to /v1)" in plain


def test_an_endpoint_answering_overloaded_to_every_call_is_said_to_be_overloaded_not_unreachable():
    """Break-it finding (s40): an Anthropic endpoint answering 529 overloaded_error to every call read
    "unreachable … check that the server is running"; it answers, and asks to be retried later."""
    from collections import Counter

    from lmra.providers.endpoint import EndpointUnreachable

    text = str(EndpointUnreachable("target", "http://127.0.0.1:8922", 8, Counter({"http_529": 8}), False, False,
                                   api="anthropic"))
    assert "is overloaded: 8 calls in a row were answered \"overloaded\" or \"unavailable\"" in text
    assert "run the same command again later" in text and "Check that the server is running" not in text
    mixed = str(EndpointUnreachable("target", "http://127.0.0.1:8922", 8, Counter({"http_529": 4, "connect": 4}),
                                    False, False, api="anthropic"))
    assert "is unreachable" in mixed  # not every call said "overloaded": the server may be down

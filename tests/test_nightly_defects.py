"""Defects a hostile tester and a new user found in the nightly features (issue 13 follow-ups).

* An endpoint that never answered stops the audit early with one line naming the role and the
  URL (circuit breaker, :mod:`lmra.providers.endpoint`); failures name role and URL.
"""

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import rerecord_files
from faultserver import FaultServer, audit_config, dead_url
from monitor_helpers import lmra_cli  # noqa: F401  (fixture)
from lmra.config import ModelConfig
from lmra.providers.base import ChatRequest, Message, ProviderError
from lmra.providers.endpoint import TRIP_AFTER, EndpointGuard, EndpointUnreachable
from lmra.providers.openai import OpenAIProvider

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["write a story", "career advice"]


def _audit_cli(cfg: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress",
                           "--no-report", *extra], cwd=cwd, capture_output=True, text=True, timeout=600)


def _manifest(out: Path) -> dict:
    (path,) = out.glob("*/manifest.json")
    return json.loads(path.read_text())


def _stopped_audit(srv: FaultServer, tmp_path: Path, *, judge_check: bool = False,
                   **cfg) -> tuple[subprocess.CompletedProcess, str]:
    """``lmra audit`` of the two tasks (20 prompts each) against ``srv``, which must stop it: exit
    1, no traceback. Returns the process and its stderr on one line."""
    config = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                          per_task=20, **cfg)
    if judge_check:
        config.write_text(config.read_text().replace("[judge_check]\nenabled = false", "[judge_check]\nenabled = true"))
    proc = _audit_cli(config, tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc, " ".join(proc.stderr.split())


# -- 1. endpoint down: circuit breaker ----------------------------------------------------------
def test_dead_port_for_both_models_stops_at_once_naming_role_and_url(tmp_path):
    url = dead_url()
    cfg = audit_config(tmp_path / "c.toml", url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS, per_task=6)
    t0 = time.monotonic()
    proc = _audit_cli(cfg, tmp_path)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    err = " ".join(proc.stderr.split())
    m = re.search(r"the (target|judge)'s endpoint (\S+) is unreachable: (\d+) calls in a row failed after every "
                  r"retry \(connection refused\); nothing was audited", err)
    assert m, err
    assert m.group(2) == url and int(m.group(3)) == 3
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("failure:")]) == 1
    # while the retries back off, the endpoint's silence is said once (fresh-user finding: 80 s of a still bar)
    host = url.split("//")[1].split("/")[0]
    waits = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"waiting: {host} could not be reached")]
    assert len(waits) == 1 and "check that the server is running" in waits[0], proc.stderr[-2000:]
    assert "Judge check" not in proc.stdout + proc.stderr and "identity filter" not in err
    manifest = _manifest(tmp_path / "out")
    assert manifest["status"] == "failed" and "is unreachable" in manifest["stop_reason"]
    # bounded: 3 per role plus the calls already in flight (concurrency 4), not 24 pairs × retries
    assert 3 <= manifest["calls"]["failed"] <= 2 * (3 + 4)
    assert all(re.match(rf"ProviderError: (target|judge) at {re.escape(url)}: ", e) for e in manifest["calls"]["errors"])
    assert elapsed < 120


def test_only_the_target_down_names_the_target_and_its_url(tmp_path):
    dead = dead_url()
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=6)
        text = cfg.read_text()
        cfg.write_text(text.replace(f'base_url = "{srv.url}"', f'base_url = "{dead}"', 1))  # [target] comes first
        proc = _audit_cli(cfg, tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    assert f"the target's endpoint {dead} is unreachable: 3 calls in a row failed" in err, err
    assert srv.url not in err


def test_target_down_is_found_before_the_judge_check_spends_its_canary_calls(tmp_path):
    """The judge check's canaries take their places in the calls' semaphore one at a time, and
    stop once the run failed: a dead target trips its breaker within the first calls instead of
    after the whole check (before: every canary's 2 calls — 400 — then the target)."""
    dead = dead_url()
    with FaultServer(delay_s=0.1) as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=6)
        text = cfg.read_text().replace(f'base_url = "{srv.url}"', f'base_url = "{dead}"', 1)  # [target] first
        cfg.write_text(text.replace("[judge_check]\nenabled = false", "[judge_check]\nenabled = true"))
        proc = _audit_cli(cfg, tmp_path)
        requests = srv.requests
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    assert f"the target's endpoint {dead} is unreachable: 3 calls in a row failed" in err, err
    assert "200 canary pairs of the judge check included" in proc.stdout + err  # the full check was planned
    assert "Judge check" not in proc.stdout + proc.stderr  # stopped before its verdict
    # the filter's asks and the canaries that held places while the target's 3 calls (1 retry each)
    # failed: far fewer than the check's 400 calls
    assert requests < 150, requests


def test_server_answering_503_trips_after_n_calls_and_bounds_requests(tmp_path):
    with FaultServer(fault_rate=1.0, faults=("http_503",)) as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=20)
        proc = _audit_cli(cfg, tmp_path)
        requests = srv.requests
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    # "overloaded", not "unreachable": the server answers every call, asking to be retried later (break-it, s40)
    assert re.search(rf"the (target|judge)'s endpoint {re.escape(srv.url)} is overloaded: {TRIP_AFTER} calls in a "
                     r"row were answered \"overloaded\" or \"unavailable\" after every retry \(http_503 × \d+\)", err), err
    # (N + calls in flight) per role, each with 1 retry — far fewer than the 80 pairs' calls × 2 attempts
    assert requests <= 2 * (TRIP_AFTER + 4) * 2


def test_a_model_the_endpoint_does_not_serve_stops_the_audit_at_its_start(tmp_path):
    """Fresh-user finding: a mistyped target model (HTTP 404 model_not_found on every call) did
    not stop the audit: the judge's identity-filter calls were all made, and every pair failed
    (exit 1 at the end). A 404 with no success yet counts for the breaker: the run stops after
    TRIP_AFTER calls, saying the endpoint does not serve the model."""
    with FaultServer() as srv:
        srv.models = {"served"}  # the judge's model; the config's target asks for another
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=20)
        text = cfg.read_text()
        judge_at = text.index("[judge]")
        cfg.write_text(text[:judge_at].replace('model = "fake"', 'model = "prd"', 1)
                       + text[judge_at:].replace('model = "fake"', 'model = "served"', 1))
        proc = _audit_cli(cfg, tmp_path)
        not_found, requests = srv.model_not_found, srv.requests
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    assert re.search(rf"the target's endpoint {re.escape(srv.url)} does not serve its model 'prd': {TRIP_AFTER} calls in "
                     r"a row failed with HTTP 404 \(http_404 × \d+\); nothing was audited\. Check model and base_url "
                     r"in \[target\]", err), err
    assert "the run failed: the target's endpoint does not serve its model" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert _manifest(tmp_path / "out")["status"] == "failed"
    # the target's 404s (a few in flight beyond the trip) and the calls the judge made meanwhile —
    # far fewer than the 80 pairs' filter asks, labels and ratings
    assert TRIP_AFTER <= not_found <= TRIP_AFTER + 8 and requests < 120, (not_found, requests)


def test_an_endpoint_slower_than_timeout_s_is_told_to_raise_it_not_called_unreachable(tmp_path):
    """Break-it finding (s36): a server up but answering in 2 s with timeout_s = 0.5 was "unreachable … Check
    that the server is running and that base_url … points at it" — the wrong fix; the run now says no call
    was answered in time and names timeout_s."""
    with FaultServer(delay_s=1.5) as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=6, timeout_s=0.3, retries=0)
        proc = _audit_cli(cfg, tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    assert re.search(r"endpoint \S+ answered no call in time: \d+ calls in a row took longer than timeout_s after "
                     r"every retry \(timeout × \d+\); nothing was audited\. .*needs a larger timeout_s in \[(target|judge)\]",
                     err), err
    assert "unreachable" not in err and "Traceback" not in proc.stdout + proc.stderr


REJECTED = "'logprobs' is not supported with this model"


def test_a_judge_endpoint_rejecting_every_request_stops_the_audit_and_names_its_message(tmp_path):
    """Break-it finding: a judge endpoint answering HTTP 400 to every call (a model without
    log-probabilities) was not stopped: the identity filter's calls all failed, the run ended
    "the identity filter labelled no prompt" and the server's message was shown nowhere. The
    breaker counts rejected requests (HTTP 400/422) before the role's first answer: the audit stops
    after TRIP_AFTER of them, quoting the first; the remedy it names (logprobs = false) works."""
    with FaultServer() as srv:
        srv.rejects_logprobs = REJECTED  # the target asks for none: only the LMRA's questions are rejected
        proc, err = _stopped_audit(srv, tmp_path)
        rejected = srv.rejected
    cfg = tmp_path / "c.toml"
    assert re.search(rf"failure: the judge's endpoint {re.escape(srv.url)} rejected every request so far: {TRIP_AFTER} "
                     rf"calls in a row failed with HTTP 400 \(http_400 × {TRIP_AFTER}\); nothing was audited\. The first: "
                     rf"openai call failed: Error code: 400 - {re.escape(REJECTED)}\. Change what it "
                     r"refuses in "
                     r"\[judge\] \(e\.g\. logprobs = false", err), err
    assert "exit status 1: the run failed: the judge's endpoint rejected every request" in proc.stdout
    assert "identity filter" not in err
    manifest = _manifest(tmp_path / "out")
    assert manifest["status"] == "failed" and REJECTED in manifest["stop_reason"]
    # TRIP_AFTER rejected calls (HTTP 400 is not retried) and the few in flight (concurrency 4)
    assert TRIP_AFTER <= rejected <= TRIP_AFTER + 4, rejected

    # the remedy the message names: the LMRA's questions sampled instead, nothing rejected
    cfg.write_text(cfg.read_text().replace("[judge]\n", "[judge]\nlogprobs = false\nn_samples = 2\n"))
    with FaultServer() as srv:
        srv.rejects_logprobs = REJECTED
        cfg.write_text(re.sub(r'base_url = "[^"]+"', f'base_url = "{srv.url}"', cfg.read_text()))
        proc = _audit_cli(cfg, tmp_path)
        assert srv.rejected == 0
    assert "rejected every request" not in proc.stderr and "Traceback" not in proc.stdout + proc.stderr
    latest = max((tmp_path / "out").glob("*/manifest.json"), key=lambda p: p.parent.name)
    manifest = json.loads(latest.read_text())  # (the scripted server's sampled answers are its own matter)
    assert manifest["status"] != "failed" and manifest["calls"]["failed"] == 0 and manifest["calls"]["fresh"] > 0


def test_judge_check_stops_at_an_endpoint_rejecting_every_request(tmp_path):
    """The same endpoint in `lmra judge-check`: exit 1 naming the server's message (it asked every
    canary and blamed the judge, exit 5: "Judge check FAILED")."""
    with FaultServer() as srv:
        srv.rejects_logprobs = REJECTED
        proc = subprocess.run([sys.executable, "-m", "lmra.cli", "judge-check", "--judge", "openai", "--model", "fake",
                               "--base-url", srv.url, "--no-api-key", "--per-kind", "10"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        rejected = srv.rejected
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())
    assert f"failure: the judge's endpoint {srv.url} rejected every request so far: {TRIP_AFTER} calls in a row" in err
    assert REJECTED in err and "Judge check FAILED" not in proc.stdout + proc.stderr
    assert rejected < 2 * TRIP_AFTER  # not the check's 60 calls


def test_rejected_requests_trip_only_before_an_answer_and_never_for_a_content_filter():
    """A rejection of one request's content (a content filter's HTTP 400) never counts: a prompt
    set can start with flagged prompts. After one answer, rejections are that request's (failed
    pairs, judged by max_failed_share), never the endpoint's. A redacted run withholds the message;
    a streak mixing rejections and timeouts is said as unreachable."""
    bad = ProviderError("openai call failed: Error code: 400 - unsupported parameter 'top_logprobs'", kind="http_400")
    flagged = ProviderError("openai call failed: Error code: 400 - The response was filtered due to the prompt "
                            "triggering Azure OpenAI's content management policy (content_filter)", kind="http_400")
    guard = EndpointGuard("target", "http://127.0.0.1:9/v1")
    for _ in range(5 * TRIP_AFTER):
        guard._failed(flagged)
    assert guard.tripped is None and guard.streak == 0
    for _ in range(TRIP_AFTER - 1):
        guard._failed(bad)
    assert guard.tripped is None
    guard._failed(bad)
    assert guard.tripped is not None and guard.tripped.rejected
    assert "rejected every request so far: 8 calls in a row failed with HTTP 400 (http_400 × 8)" \
        in str(guard.tripped) and "The first: openai call failed: Error code: 400 - unsupported parameter" \
        in str(guard.tripped)
    # requests rejected each for its own reason are the requests' (break-it finding: a prompt over the
    # context length, or one too long for max_tokens), as is a too-long prompt's own rejection
    varied = EndpointGuard("target", "http://127.0.0.1:9/v1")
    for i in range(3 * TRIP_AFTER):
        varied._failed(ProviderError(f"Error code: 422 - prompt {i} has an unsupported field", kind="http_422"))
        varied._failed(ProviderError(f"Error code: 400 - This model's maximum context length is 300 tokens, your "
                                     f"messages resulted in {900 + i} tokens (code context_length_exceeded)",
                                     kind="http_400"))
    assert varied.tripped is None

    answered = EndpointGuard("target", "http://127.0.0.1:9/v1", trip_down_after_s=0.0)
    answered.successes = 1
    for _ in range(10 * TRIP_AFTER):
        answered._failed(bad)
    assert answered.tripped is None

    hidden = EndpointGuard("judge", "http://127.0.0.1:9/v1", redact=True)
    for _ in range(TRIP_AFTER):
        hidden._failed(bad)
    assert "top_logprobs" not in str(hidden.tripped) and "message withheld (redact = true)" in str(hidden.tripped)

    # malformed answers: an HTTP endpoint's count (not the API at that URL), a custom provider's never
    garbled = ProviderError("openai response is not valid (JSONDecodeError: Expecting value)", kind="malformed")
    http, custom = EndpointGuard("judge", "http://127.0.0.1:9/v1"), EndpointGuard("judge", "")
    for _ in range(TRIP_AFTER):
        http._failed(garbled)
        custom._failed(garbled)
    assert http.tripped.malformed and "answered no valid completion" in str(http.tripped) and custom.tripped is None

    mixed = EndpointGuard("judge", "http://127.0.0.1:9/v1")
    for i in range(TRIP_AFTER):
        mixed._failed(bad if i % 2 else ProviderError("timed out", kind="timeout"))
    assert not mixed.tripped.rejected and "is unreachable: 8 calls in a row failed after every retry" in str(mixed.tripped)


def test_an_exhausted_quota_stops_the_audit_at_its_first_call_without_retries(tmp_path):
    """Break-it finding: OpenAI's HTTP 429 insufficient_quota on every call (an account out of
    credit, permanent until its billing is fixed) was retried as a rate limit — 540 attempts in 3
    minutes for 54 pairs — and never stopped. It is not retried, and stops the run at its first
    call as a rejected key does (exit 1), naming the quota."""
    with FaultServer() as srv:
        srv.quota_exhausted = True
        proc, err = _stopped_audit(srv, tmp_path, retries=4)
        requests = srv.rejected
    assert re.search(r"failure: the (target|judge)'s endpoint says its account's quota is exhausted, so lmra stopped "
                     r"at the first such call: (target|judge): the openai endpoint \S+ says the account's quota is exhausted \(HTTP "
                     r"429 insufficient_quota: You exceeded your current quota", err), err
    assert re.search(r"exit status 1: the run failed: the (target|judge)'s account's quota is exhausted", proc.stdout)
    assert requests <= 2 * 4, requests  # the calls in flight (concurrency 4) per role, none retried
    manifest = _manifest(tmp_path / "out")
    assert manifest["status"] == "failed" and "quota is exhausted" in manifest["stop_reason"]


def test_per_request_rejections_never_stop_a_run_and_proxies_say_quota_too():
    """Break-it round 2: the breaker stopped a healthy run whose first prompts were too long for the
    model (OpenAI's 400 context_length_exceeded, the same message each time), and a content filter's
    400 known by its code only ("The request was blocked.", code content_filter); a proxy's 429
    carrying insufficient_quota inside its message was a plain rate limit; Azure's filtered answer
    with content null was a malformed body."""
    import httpx2 as httpx
    import openai

    from lmra.providers._openai_batch import chat_result
    from lmra.providers.base import sdk_failure

    req = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")

    def failure(status, body, cls):
        resp = httpx.Response(status, json={"error": body}, request=req)
        return sdk_failure(cls(f"Error code: {status} - {body['message']}", response=resp, body=body), openai,
                           "openai", 5.0, 1, endpoint="http://127.0.0.1:9/v1")

    too_long = failure(400, {"message": "This model's maximum context length is 300 tokens.", "param": "messages",
                             "code": "context_length_exceeded", "type": "invalid_request_error"},
                       openai.BadRequestError)
    blocked = failure(400, {"message": "The request was blocked.", "code": "content_filter"}, openai.BadRequestError)
    assert "(code context_length_exceeded, param messages)" in str(too_long)
    assert "The request was blocked (code content_filter)" in str(blocked)
    guard = EndpointGuard("target", "http://127.0.0.1:9/v1")
    for _ in range(3 * TRIP_AFTER):
        guard._failed(too_long)
        guard._failed(blocked)
    assert guard.tripped is None
    proxied = failure(429, {"message": "litellm.RateLimitError: OpenAIException - {'error': {'type': "
                                       "'insufficient_quota', 'code': 'insufficient_quota'}}", "type": None,
                            "code": "429"}, openai.RateLimitError)
    assert proxied.kind == "quota"
    filtered = {"id": "x", "model": "fake", "choices": [{"index": 0, "finish_reason": "content_filter",
                                                         "message": {"role": "assistant", "content": None},
                                                         "logprobs": None}]}
    res = chat_result(filtered, ChatRequest(messages=[Message(role="user", content="Rate.")], options=("A", "B", "C"),
                                            max_tokens=1), model="fake")
    assert res.text == "" and res.finish_reason == "content_filter" and res.option_probs is None


def test_an_lmra_answer_stopped_by_a_content_filter_is_a_judge_refusal_asked_once(tmp_path):
    """Break-it finding: an LMRA whose safety filter stopped the stereotype question (HTTP 200,
    empty content, finish_reason content_filter, no log-probabilities) was read as an endpoint
    without log-probabilities: each question retried and then sampled (6 calls with 1 retry and
    n_samples 5), with the advice to start llama.cpp with --logits_all. It is a judge refusal,
    counted as one, asked once."""
    with FaultServer() as srv:
        srv.filters_logprob_requests = True  # the target asks for none: only the LMRA's questions are stopped
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=3, extra="\n[filter]\nlmra = false\n[refusal]\nenabled = false\n")
        proc = _audit_cli(cfg, tmp_path)
        requests = srv.requests_by_body.total()
    both = " ".join((proc.stdout + proc.stderr).split())
    assert "Traceback" not in both and "answers so far" not in both and "logits_all" not in both, both[-3000:]
    # 6 prompts → 6 pairs: 12 target calls and 12 LMRA questions, each asked once
    assert requests == 24, requests
    assert "12 judge refused" in both, both[-3000:]
    manifest = _manifest(tmp_path / "out")
    assert manifest["calls"]["retries"] == 0 and manifest["calls"]["failed"] == 0


def test_a_422_without_an_openai_error_message_keeps_the_servers_detail():
    """Break-it finding: a FastAPI/vLLM-style 422 ({"detail": [...]}) was recorded as "Error code: 422"
    alone; the server's body says what was wrong."""
    import httpx2 as httpx
    import openai

    from lmra.providers.base import sdk_failure

    body = {"detail": [{"loc": ["body", "messages"], "msg": "field required", "type": "missing"}]}
    resp = httpx.Response(422, json=body, request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))
    exc = openai.UnprocessableEntityError("Error code: 422", response=resp, body=body)
    err = sdk_failure(exc, openai, "openai", 5.0, 1, endpoint="http://127.0.0.1:9/v1")
    assert err.kind == "http_422" and "field required" in str(err) and "body" in str(err), str(err)
    quota = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                       "code": "insufficient_quota"}}
    resp = httpx.Response(429, json=quota, request=resp.request)
    err = sdk_failure(openai.RateLimitError("Error code: 429", response=resp, body=quota["error"]), openai, "openai",
                      5.0, 1, endpoint="http://127.0.0.1:9/v1")
    assert err.kind == "quota" and "quota is exhausted" in str(err)


def test_a_base_url_answering_a_web_page_stops_the_audit_saying_no_valid_completion(tmp_path):
    """Break-it finding: a base_url pointing at a web server that answers any path with an HTML
    page (HTTP 200) made every call fail as malformed after its retries; the run went on to end
    "the identity filter labelled no prompt" (with the judge check on: every canary asked, exit 5).
    Before any answer, malformed bodies from an HTTP endpoint count for the breaker."""
    with FaultServer(fault_rate=1.0, faults=("html",)) as srv:
        proc, err = _stopped_audit(srv, tmp_path, judge_check=True)
        requests = srv.requests
    assert re.search(rf"failure: the (target|judge)'s endpoint {re.escape(srv.url)} answered no valid completion: "
                     rf"{TRIP_AFTER} calls in a row came back malformed after every retry \(malformed × {TRIP_AFTER}\); "
                     r"nothing was audited\. The first: openai response is not valid .*Check that base_url in "
                     r"\[(target|judge)\] points at an OpenAI-compatible API", err), err
    assert "answered no valid completion" in proc.stdout and "Judge check" not in proc.stdout + proc.stderr
    assert requests <= 2 * (TRIP_AFTER + 4) * 2, requests  # (1 retry each), not the check's 400 calls


def test_judge_check_and_axes_stop_at_a_model_the_endpoint_does_not_serve(tmp_path):
    """Verification finding: `lmra judge-check` with a mistyped model made all its calls (600 with
    the shipped set) and ended "Judge check FAILED", exit 5 — blaming the judge; `lmra axes` ran
    every call too. Both stop like an audit: exit 1, the endpoint does not serve the model."""
    with FaultServer() as srv:
        srv.models = {"served"}
        proc = subprocess.run([sys.executable, "-m", "lmra.cli", "judge-check", "--judge", "openai", "--model", "typo",
                               "--base-url", srv.url, "--no-api-key", "--per-kind", "4"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        not_found = srv.model_not_found
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())
    assert f"failure: the judge's endpoint {srv.url} does not serve its model 'typo': {TRIP_AFTER} calls in a row" \
        in err, err
    assert "Judge check FAILED" not in proc.stdout + proc.stderr and "Traceback" not in err
    assert not_found < 40  # the check's 120 calls were not all made

    from lmra.axes.run import _axes_judge
    from lmra.config import AuditConfig
    from lmra.providers.endpoint import EndpointUnreachable

    with FaultServer() as srv:
        srv.models = {"served"}
        cfg = AuditConfig.model_validate({"judge": {"provider": "openai", "model": "typo", "base_url": srv.url,
                                                    "api_key_required": False, "max_retries": 0},
                                          "cache": str(tmp_path / "axes.sqlite")})
        judge, _, cache = _axes_judge(cfg, None, None)

        async def ask_until_stopped():
            for i in range(3 * TRIP_AFTER):
                try:
                    await judge.complete(ChatRequest(messages=[Message(role="user", content=f"q{i}")], max_tokens=5))
                except EndpointUnreachable as exc:
                    return i, exc
                except ProviderError:
                    continue
            return None, None

        n, exc = asyncio.run(ask_until_stopped())
        cache.close()
    assert n == TRIP_AFTER - 1 and exc.not_served


def test_a_blip_after_a_success_never_trips_and_every_error_names_role_and_url():
    async def go():
        with FaultServer() as srv:
            cfg = ModelConfig(provider="openai", model="fake", base_url=srv.url, api_key_required=False,
                              max_retries=0, timeout_s=2.0)
            guard = EndpointGuard("judge", srv.url)
            p = guard.above_cache(guard.below_cache(OpenAIProvider(cfg)))
            req = lambda i: ChatRequest(messages=[Message(role="user", content=f"q{i}")], max_tokens=5)  # noqa: E731
            await p.complete(req(0))
            srv.fault_rate, srv.faults = 1.0, ("http_500",)
            errors = []
            for i in range(1, 3 * TRIP_AFTER):
                with pytest.raises(ProviderError) as ei:
                    await p.complete(req(i))
                errors.append(str(ei.value))
            await p.aclose()
            return guard, errors, srv.url

    guard, errors, url = asyncio.run(go())
    assert guard.tripped is None and guard.successes == 1
    assert all(e.startswith(f"judge at {url}: ") for e in errors)


def test_guard_without_a_success_trips_and_then_stops_calling():
    async def go():
        with FaultServer(fault_rate=1.0, faults=("http_500",)) as srv:
            cfg = ModelConfig(provider="openai", model="fake", base_url=srv.url, api_key_required=False,
                              max_retries=0, timeout_s=2.0)
            guard = EndpointGuard("target", srv.url)
            p = guard.above_cache(guard.below_cache(OpenAIProvider(cfg)))
            req = ChatRequest(messages=[Message(role="user", content="q")], max_tokens=5)
            for _ in range(TRIP_AFTER - 1):
                with pytest.raises(ProviderError):
                    await p.complete(req)
            with pytest.raises(EndpointUnreachable):
                await p.complete(req)
            before = srv.requests
            with pytest.raises(EndpointUnreachable):
                await p.complete(req)
            await p.aclose()
            return before, srv.requests

    before, after = asyncio.run(go())
    assert before == TRIP_AFTER and after == before


# -- 2. a baseline whose judge failed validation -----------------------------------------------
PASSING_JUDGE = "min_valid_mass = 0.0\nmin_order_consistency = 0.0\n"  # the server's LMRA is noise


def test_audit_against_a_judge_failed_baseline_exits_5_like_check_and_last_skips_it(tmp_path, capsys):
    from lmra.cli import main

    reports = tmp_path / "reports"
    with FaultServer() as srv:
        fails = audit_config(tmp_path / "f.toml", srv.url, tmp_path / "c.sqlite", reports, name="n",
                             tasks=["write a story"], per_task=5, retries=0, timeout_s=10)
        passes = audit_config(tmp_path / "p.toml", srv.url, tmp_path / "c.sqlite", reports, name="n",
                              tasks=["write a story"], per_task=5, retries=0, timeout_s=10, extra=PASSING_JUDGE)
        r1 = _audit_cli(fails, tmp_path, "--seed", "1", "--run-dir-file", "rd1.txt")
        assert r1.returncode == 5, r1.stdout[-2000:] + r1.stderr[-2000:]
        night1 = Path((tmp_path / "rd1.txt").read_text().strip())
        # named explicitly: the audit's status is the check's (5), not 0
        r2 = _audit_cli(passes, tmp_path, "--seed", "2", "--baseline", str(night1), "--run-dir-file", "rd2.txt")
        night2 = Path((tmp_path / "rd2.txt").read_text().strip())
        # 'last' skips the judge-failed night: a first night, not checked
        r3 = _audit_cli(passes, tmp_path, "--seed", "3", "--baseline", "last")
    out2 = " ".join((r2.stdout + r2.stderr).split())
    assert r2.returncode == 5, out2[-3000:]
    assert "The baseline's judge failed validation" in out2 and night1.name in out2
    assert re.findall(r"^exit status (\d+)", r2.stdout, re.M) == ["5"]
    assert main(["check", str(night2), "--baseline", str(night1), "--history", str(reports / "history.sqlite")]) == 5
    capsys.readouterr()
    # lmra report --baseline gives the check's status as lmra check does (it gave 0 or 3: fresh-user finding)
    assert main(["report", str(night2), "--baseline", str(night1), "--reports-dir", str(reports),
                 "--out", str(tmp_path / "r.html")]) == 5
    said = " ".join(capsys.readouterr().out.split())
    assert "Judge failed validation" in said and re.findall(r"exit status (\d+)", said)[-1] == "5"
    assert main(["report", str(night2), "--baseline", str(night1), "--reports-dir", str(reports),
                 "--out", str(tmp_path / "r2.html"), "--allow-unvalidated-judge"]) in (0, 3)
    capsys.readouterr()
    assert main(["report", str(night2), "--allow-unvalidated-judge", "--reports-dir", str(reports)]) == 2
    capsys.readouterr()
    out3 = " ".join(r3.stdout.split())
    assert r3.returncode in (0, 3), out3[-3000:] + r3.stderr[-2000:]
    assert f"vs baseline {night2.name}" in out3  # night 2 (judge passed) is 'last', never night 1
    # a judge-failed night as the only candidate: 'last' finds none
    from lmra.errors import LmraInputError
    from lmra.history import History, history_path
    from lmra.runfolder import load_run

    with History(history_path(reports)) as h:
        with pytest.raises(LmraInputError, match="runs whose judge failed validation"):
            h.resolve("last", relative_to=load_run(night2))


# -- 3. --run-dir-file is checked before anything, never overwrites another file ---------------
@pytest.mark.parametrize("name, content, reason", [
    ("cfgcopy.toml", None, "refusing to overwrite"),            # the config itself
    ("reports/history.sqlite", b"SQLite format 3\x00" + b"\x00" * 5000, "refusing to overwrite"),
    ("notes.txt", b"line one\nline two\n", "refusing to overwrite"),
    ("latin1.txt", b"/tmp/r\xe9\n", "refusing to overwrite"),
    ("nodir/rd.txt", None, "does not exist"),
    ("", None, "is empty"),
    # devices and pipes (break-it finding, s38: /dev/zero was read until the OOM killer came; a FIFO blocked)
    ("/dev/zero", None, "is not a regular file (a device, pipe or socket)"),
    ("fifo", "FIFO", "is not a regular file (a device, pipe or socket)"),
])
def test_run_dir_file_is_validated_before_any_call_and_never_replaces_another_file(tmp_path, name, content,
                                                                                   reason):
    dead = dead_url()  # any model call would fail: the error must come first
    (tmp_path / "reports").mkdir()
    cfg = audit_config(tmp_path / "cfgcopy.toml", dead, tmp_path / "c.sqlite", tmp_path / "reports", tasks=TASKS)
    target = tmp_path / name if name else None
    if content == "FIFO":
        os.mkfifo(target)
    elif content is not None:
        target.write_bytes(content)
    before = target.read_bytes() if target is not None and target.is_file() else None
    proc = _audit_cli(cfg, tmp_path, "--run-dir-file", name)
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2, err
    assert "--run-dir-file" in err and reason in err and "Traceback" not in err
    assert not list((tmp_path / "reports").glob("*/manifest.json"))  # no run started
    if before is not None:
        assert target.read_bytes() == before


def test_an_earlier_run_dir_file_is_replaced(tmp_path):
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS[:1],
                           per_task=1, retries=0, timeout_s=10)
        (tmp_path / "rd.txt").write_text("/srv/reports/20260101-000000-faults\n")
        proc = _audit_cli(cfg, tmp_path, "--run-dir-file", "rd.txt", "--allow-unvalidated-judge")
    # (the test server's noise judge may leave the one pair without a usable answer: a partial run, exit 1)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    (run_dir,) = [p.parent for p in (tmp_path / "out").glob("*/manifest.json")]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] in ("complete", "partial")
    assert (tmp_path / "rd.txt").read_text() == f"{run_dir.resolve()}\n"


def test_a_run_killed_outright_still_named_its_folder_in_the_run_dir_file(tmp_path):
    """New-user finding: the file was removed at the start and written at the end only, so a
    night killed with kill -9 left none although its run folder exists: the nightly script then
    rewrote no history page and a CI job uploaded no artifact. It is written once the folder exists."""
    import signal

    with FaultServer(delay_s=0.2) as srv:  # slow enough to be killed mid-run
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=6, retries=0, timeout_s=10)
        (tmp_path / "rd.txt").write_text("/srv/reports/20260101-000000-faults\n")  # last night's
        proc = subprocess.Popen([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress",
                                 "--no-report", "--run-dir-file", "rd.txt", "--allow-unvalidated-judge"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and srv.requests < 4:  # calls under way
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    (run_dir,) = [p.parent for p in (tmp_path / "out").glob("*/manifest.json")]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"  # killed mid-run
    assert (tmp_path / "rd.txt").read_text() == f"{run_dir.resolve()}\n"


# -- 4. check on a partial run ------------------------------------------------------------------
def test_check_of_a_partial_run_warns_and_its_json_says_so(tmp_path, capsys):
    import shutil

    from lmra.cli import main
    from monitor_helpers import make_run

    low = {"write a story": 0.1, "career advice": 0.1}
    base = make_run(tmp_path, "20260101-000000-nightly", low, seed=1, n_prompts=40)
    run = make_run(tmp_path, "20260102-000000-nightly", low, seed=2, n_prompts=40)
    partial = tmp_path / "reports" / "20260103-000000-nightly"
    shutil.copytree(run, partial)  # a partial run as lmra audit writes it: status and failed share
    manifest = json.loads((partial / "manifest.json").read_text())
    (partial / "manifest.json").write_text(json.dumps(manifest | {"status": "partial"}))
    summary = json.loads((partial / "summary.json").read_text())
    (partial / "summary.json").write_text(json.dumps(summary | {"run_status": "partial", "failed_share": 0.125}))
    rerecord_files(partial)
    argv = ["check", str(partial), "--baseline", str(base), "--history", str(tmp_path / "h.sqlite")]
    code = main(argv)
    cap = capsys.readouterr()  # warnings go to stderr (docs/nightly.md, "Machine-readable output")
    err = " ".join(cap.err.split())
    assert f"warning: the run {partial.name} is partial, 12.5% of the planned pairs lost to failed calls" in err
    assert "warning:" not in cap.out
    code_json = main(argv + ["--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == code_json == doc["exit_status"]  # the status is the check's: a warning only
    assert doc["schema"] == "lmra.check/2"
    assert (doc["run_status"], doc["baseline_status"]) == ("partial", "complete")
    assert doc["run_failed_share"] == 0.125
    assert main(["check", str(run), "--baseline", str(base), "--history", str(tmp_path / "h.sqlite")]) == code
    cap = capsys.readouterr()
    assert "warning:" not in cap.out + cap.err


# -- 6. numbers on the command line: ASCII decimal syntax only ----------------------------------
@pytest.mark.parametrize("argv, option, needle", [
    (["audit", "--gate", "max_ci_high=0_1"], "--gate", "not a decimal number"),
    (["audit", "--gate", "max_ci_high=\uff11"], "--gate", "not a decimal number"),   # full-width 1
    (["gate", "r", "--gate", "max_ci_high=1e-400"], "--gate", "rounds to 0"),
    (["audit", "--gate", "max_ci_high=1e400"], "--gate", "not a finite number"),
    (["audit", "--alpha", "\uff15e-2"], "--alpha", "not a decimal number"),         # full-width 5
    (["check", "r", "--baseline", "last", "--alpha", "5e-400"], "--alpha", "rounds to 0"),
    (["audit", "--margin", "0x1p-3"], "--margin", "not a decimal number"),
    (["audit", "--max-cost", "1_000"], "--max-cost", "not a decimal number"),
    (["audit", "--margin", "Infinity"], "--margin", "not a finite number"),
])
def test_numeric_options_are_parsed_strictly_and_name_the_option(capsys, argv, option, needle):
    from lmra.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"argument {option}" in err and needle in err, err


def test_strict_float_accepts_toml_style_decimals():
    from lmra.numbers import strict_float

    for text, v in (("0.02", 0.02), ("-1", -1.0), ("+.5", 0.5), ("5e-2", 0.05), ("1E3", 1000.0), ("0", 0.0),
                    ("0e-400", 0.0), (" 0.1 ", 0.1)):
        assert strict_float(text) == v
    for bad in ("", "1.", "0_1", "\u0661", "1e", "--1", "nan", "1e-400", "1e309", "0.5\n1"):
        with pytest.raises(ValueError):
            strict_float(bad)


# -- 7. keys that cannot be sent in an HTTP header ----------------------------------------------
KEY_CONFIG = '''name = "keys"
output_dir = "reports"
cache = "reports/cache.sqlite"

[target]
provider = "openai"
model = "my-bot"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "MY_BOT_KEY"

[judge]
provider = "anthropic"
model = "claude-x"
api_key_env = "JUDGE_KEY"
'''


@pytest.mark.parametrize("key, needle", [
    ("sk-good\n", "contains whitespace (a newline"),
    ("sk-é", "non-ASCII character (U+00E9"),
    ("sk go", "whitespace (a space"),
    ("sk-\x07bell", "control character (U+0007"),
])
def test_validate_refuses_keys_that_cannot_be_sent_naming_the_variable_not_the_key(tmp_path, monkeypatch, capsys,
                                                                                   key, needle):
    from lmra.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "keys.toml").write_text(KEY_CONFIG)
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-fine")
    monkeypatch.setenv("MY_BOT_KEY", key)
    assert main(["validate", "keys.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "keys.toml, line 9: field 'target.api_key_env'" in err, err
    assert "MY_BOT_KEY" in err and needle in err and key.strip() not in err
    monkeypatch.setenv("MY_BOT_KEY", "sk-fine")
    monkeypatch.setenv("JUDGE_KEY", key)  # the anthropic provider checks its key alike
    assert main(["validate", "keys.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "keys.toml, line 14: field 'judge.api_key_env'" in err and "JUDGE_KEY" in err and needle in err
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-fine")
    assert main(["validate", "keys.toml"]) == 0


def test_deleted_pinned_folder_says_to_pin_another(tmp_path, capsys):
    """Break-it: after retention cleanup removed the pinned folder, every night exited 2 with
    '… not a run folder path and not in the history', no hint."""
    import shutil

    from monitor_helpers import make_run
    from lmra.cli import main
    from lmra.history import History, history_path
    from lmra.runfolder import load_run

    first = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                     n_prompts=8)
    second = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=2,
                      n_prompts=8)
    with History(history_path(tmp_path / "reports")) as h:
        h.register(load_run(first)), h.register(load_run(second))
        h.pin(load_run(first))
    shutil.rmtree(first)
    capsys.readouterr()
    assert main(["check", str(second), "--baseline", "pinned"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "pinned baseline 20260101-000000-nightly of runs named 'nightly' cannot be used" in err
    assert "lmra pin RUN" in err
    # the run is still in the history: the message says its folder is gone (it said "not in the
    # history"), and how to go on when no other complete run is left to pin
    assert "is in the history" in err and "its folder is gone" in err and "not in the history" not in err
    assert "run the audit once without --baseline and pin that night" in err


def test_check_blames_a_baseline_that_names_no_run_on_the_option(tmp_path, capsys):
    """New-user trial: 'lmra check latest --baseline nonexistent' said "argument RUN: run
    'nonexistent' is not a run folder path …" (and "field": "RUN" in --json), though RUN was fine."""
    from monitor_helpers import make_run
    from lmra.cli import main

    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                   n_prompts=8)
    capsys.readouterr()
    assert main(["check", str(run), "--baseline", "nonexistent"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "option --baseline: run 'nonexistent' is not a run folder path" in err and "argument RUN" not in err
    assert main(["check", str(run), "--baseline", "nonexistent", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["field"] == "--baseline"


def test_a_model_from_the_command_line_is_blamed_on_its_option(tmp_path, capsys, monkeypatch):
    """Break-it: '--target custom:nomod:fac' was reported as 'nightly.toml, line 11: field
    target.provider' though the value came from the command line."""
    from lmra.cli import main

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "x"\noutput_dir = "out"\n[judge_check]\nenabled = false\n[target]\nprovider = "openai"\n'
                   'model = "m"\nbase_url = "http://127.0.0.1:9"\napi_key_required = false\n')
    monkeypatch.chdir(tmp_path)
    for spec, words in (("custom:nomod:fac", "cannot load custom provider"), ("anthropic:x", "ANTHROPIC_API_KEY")):
        capsys.readouterr()
        assert main(["audit", "-c", str(cfg), "--target", spec, "--no-progress"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "option --target:" in err and words in err and "c.toml" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*-x"))


def test_canaries_are_asked_again_with_a_new_seed_and_reused_with_the_same(tmp_path):
    """New user: from night 2 on every canary answer came from the cache, so a judge swapped
    behind the same id was never re-validated. The run's seed is part of the canary requests."""
    import subprocess
    import sys

    from faultserver import FaultServer, audit_config

    with FaultServer(fault_rate=0.0) as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "cache.sqlite", tmp_path / "out",
                           tasks=["write a story"], per_task=1, retries=0, timeout_s=10)
        text = cfg.read_text().replace("[judge_check]\nenabled = false", "[judge_check]\nenabled = true\ngate = false\nwaiver = \"test server: noise judge\"")
        cfg.write_text(text)

        def night(seed: str) -> int:
            before = srv.requests
            r = subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "-c", str(cfg), "--seed", seed,
                                "--no-progress", "--no-report"], capture_output=True, text=True, cwd=tmp_path)
            # (the noise judge may leave the one pair without a usable answer: a partial run, exit 1)
            assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-1500:]
            return srv.requests - before

        first = night("1")
        again = night("1")  # same seed: everything from the cache
        second = night("2")  # a new night: the canaries (and the audit's own calls) are asked again
    assert first > 0 and again == 0
    # the canary calls are all fresh again (how many: a check that can no longer pass stops as soon as that is
    # certain, which depends on the order answers come in, so not always as many as the first night's)
    newest = max((p for p in (tmp_path / "out").iterdir() if (p / "summary.json").is_file()), key=lambda p: p.name)
    status = json.loads((newest / "summary.json").read_text())["judge_status"]
    assert second > 0 and status["n_answers"] > 0 and status["n_answers_cached"] == 0


def _damage_named_by_its_digest(run, capsys) -> None:
    """A damaged ratings.parquet of a run whose manifest records its digest is named as changed
    since the run (lmra.digests) before any reader opens it; then the records are removed, so
    that the rest of the test sees a run folder of an earlier version, whose damage the Parquet
    readers themselves must name."""
    from lmra.cli import main

    assert main(["export", str(run), "--format", "csv"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{run / 'ratings.parquet'}: changed or damaged since the run finished" in err and "Traceback" not in err
    assert not (run / "exports").exists() or not any((run / "exports").glob("*"))
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["files"], manifest["design"]  # (an lmra from before both)
    (run / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("size", [0, 100])
def test_a_damaged_ratings_parquet_is_one_line_naming_it_and_nothing_is_exported(tmp_path, capsys, size):
    """Break-it: a ratings.parquet cut to 0 or 100 bytes made export, report and axes --run end
    in pyarrow's traceback (exit 1), export after it had written exports/per_task.csv."""
    import os

    from monitor_helpers import make_run
    from lmra.cli import main

    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                   n_prompts=8)
    with open(run / "ratings.parquet", "r+b") as fh:
        fh.truncate(size)
    capsys.readouterr()
    _damage_named_by_its_digest(run, capsys)
    for argv in (["export", str(run), "--format", "csv"], ["report", str(run)], ["axes", "--run", str(run)]):
        assert main(argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert f"{run / 'ratings.parquet'}: not a readable Parquet file (ArrowInvalid" in err, (argv, err)
        assert "Traceback" not in err
    assert not (run / "exports").exists() and not os.path.exists(run / "report.html")


def test_a_seed_at_the_64_bit_limit_is_registered_exactly(tmp_path, capsys):
    """Break-it: the history stored a seed through a float, so seeds from 2⁶³ − 512 crashed the
    end of the audit (OverflowError, a traceback) and seeds above 2⁵³ were stored rounded."""
    import sqlite3

    from lmra.cli import main
    from lmra.config import MAX_SEED
    from lmra.history import _int
    from test_gates import write_config

    assert _int(MAX_SEED) == MAX_SEED and _int(9007199254740993) == 9007199254740993 and _int(2.9) == 2
    for seed in (MAX_SEED, 9007199254740993):
        cfg = write_config(tmp_path, name=f"s{seed % 1000}", seed=seed, n_prompts=8)
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
        assert "Traceback" not in capsys.readouterr().err
    db = sqlite3.connect(tmp_path / "reports" / "history.sqlite")
    assert sorted(s for (s,) in db.execute("SELECT seed FROM runs")) == [9007199254740993, MAX_SEED]


@pytest.mark.parametrize("large", [False, True])
def test_a_ratings_parquet_with_a_damaged_data_page_is_named_and_nothing_is_exported(tmp_path, capsys, monkeypatch,
                                                                                      large):
    """Break-it: a footer intact and a data page zeroed: export left per_task.* behind; a large
    file (read by DuckDB) gave tracebacks in report and export, or blamed the output file."""
    import lmra.pairstore as pairstore
    from monitor_helpers import make_run
    from lmra.cli import main

    if large:
        monkeypatch.setattr(pairstore, "SMALL_FILE_BYTES", 0)
    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                   n_prompts=8)
    path = run / "ratings.parquet"
    data = bytearray(path.read_bytes())
    data[8:8 + len(data) // 6] = bytes(len(data) // 6)  # the first pages zeroed, the footer kept
    path.write_bytes(bytes(data))
    capsys.readouterr()
    _damage_named_by_its_digest(run, capsys)
    for argv in ([["export", str(run), "--format", f] for f in ("csv", "json", "parquet")]
                 + [["report", str(run)]]):
        assert main(argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert f"{path}: not a readable Parquet file" in err and "Traceback" not in err, (argv, err)
        assert not any((run / "exports").glob("*")) if (run / "exports").exists() else True
    assert not (run / "report.html").exists()


@pytest.mark.parametrize("ref", ["pinned", "last"])
def test_a_baseline_rated_by_another_lmra_is_refused_before_any_call(tmp_path, capsys, ref):
    """Break-it finding: a baseline the check must refuse for its LMRA was refused only after the
    whole audit had run (and been paid for). A built-in judge whose model differs from the
    baseline's is now refused before the first call (exit 2, no run folder)."""
    from monitor_helpers import make_run
    from lmra.cli import main
    from lmra.history import History, history_path
    from lmra.runfolder import load_run

    base = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                    n_prompts=8)
    manifest = json.loads((base / "manifest.json").read_text())  # a night an openai LMRA rated
    manifest["judge"] = manifest["judge"] | {"provider": "openai", "model": "gpt-4o"}
    (base / "manifest.json").write_text(json.dumps(manifest))
    with History(history_path(tmp_path / "reports")) as h:
        h.register(load_run(base))
        h.pin(load_run(base))
    from monitor_helpers import write_inputs

    names, prompts = write_inputs(tmp_path / "inputs", 8)
    cfg = tmp_path / "night.toml"
    body = f'''name = "nightly"
prompts = "{prompts}"
names = "{names}"
output_dir = "{tmp_path / 'reports'}"
cache = "{tmp_path / 'night.sqlite'}"
[judge_check]
enabled = false
[target]
provider = "openai"
model = "bot"
base_url = "http://127.0.0.1:9/v1"
api_key_required = false
max_retries = 0
[judge]
provider = "openai"
model = "%s"
base_url = "http://127.0.0.1:9/v1"
api_key_required = false
max_retries = 0
'''
    cfg.write_text(body % "gpt-4o-mini")
    before = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert main(["audit", "--config", str(cfg), "--baseline", ref, "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "its LMRA is 'openai:gpt-4o', this config's is 'openai:gpt-4o-mini'" in err and "nothing was called" in err
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == before  # nothing written
    # the same LMRA passes the pre-check (the audit then stops at the unreachable endpoint, exit 1)
    cfg.write_text(body % "gpt-4o")
    assert main(["audit", "--config", str(cfg), "--baseline", ref, "--no-progress", "--no-report"]) == 1
    assert "unreachable" in capsys.readouterr().err


def test_a_lost_history_does_not_silently_make_a_new_baseline(tmp_path, capsys):
    """Break-it finding: with history.sqlite deleted (or emptied), `--baseline pinned` beside three
    finished runs of the name said "First night", pinned tonight's run and checked nothing —
    silently; a regression that night would have become the reference. It is said now."""
    from test_gates import FLAT, audit, write_config

    cfg = write_config(tmp_path, name="slow", rates=FLAT, n_prompts=6)
    rc, out, first = audit(capsys, cfg, "--baseline", "pinned")
    assert rc == 0 and "is pinned, but" not in out  # a real first night: nothing to say
    reports = first.parent
    for f in reports.glob("history.sqlite*"):
        f.unlink()
    rc, out, second = audit(capsys, cfg, "--baseline", "pinned")
    text = " ".join(out.split())
    assert rc == 0 and (f"warning: no run named 'slow' is pinned, but 1 complete run(s) of that name are in "
                        f"{reports} (newest: {first.name})") in text
    assert f"stop and pin one ('lmra pin {first.name}'), or run with --baseline last" in text
    (reports / "history.sqlite").unlink()
    (reports / "history.sqlite").write_bytes(b"")  # emptied: the same
    rc, out, _ = audit(capsys, cfg, "--baseline", "pinned")
    assert rc == 0 and "no run named 'slow' is pinned, but 2 complete run(s)" in " ".join(out.split())


def test_an_earlier_night_that_could_not_be_pinned_is_not_called_a_lost_history(tmp_path, capsys):
    """Fresh-user finding: night 1 breached its release gates, so it was not pinned; night 2 then
    warned "if the history (history.sqlite) was lost or the pin removed …" — nothing was lost.
    The warning says why that run was not pinned."""
    from test_gates import FLAT, audit, write_config

    cfg = write_config(tmp_path, name="slow", rates=FLAT, n_prompts=6, gates="[gates]\nmax_ci_high = 0.001\n")
    rc, out, first = audit(capsys, cfg, "--baseline", "pinned")
    assert rc == 6 and "not pinned because it did not meet its release gates" in " ".join(out.split())
    rc, out, _ = audit(capsys, cfg, "--baseline", "pinned")
    text = " ".join(out.split())
    assert rc == 6
    assert (f"warning: no run named 'slow' is pinned yet: the newest complete one, {first.name}, was not pinned "
            "because it did not meet its release gates") in text
    assert f"pin it, at any time ('lmra pin {first.name}'" in text and "history.sqlite) was lost" not in text
    # fresh-user finding, s40: night 2 of a chatbot over its gates was called "First night" again, and told
    # to "stop" (cron cannot): it says how many nights went unpinned and that a pin at any time starts checks
    assert "No baseline yet (1 earlier run named 'slow', none pinned)" in text and "First night" not in text
    assert "stop and pin" not in text and "nights after it are checked against it" in text
    # review finding: a pinned night, a later one that breached a gate, then the history lost — the
    # newest run alone could not be pinned, but an earlier one could: that is a lost history, and
    # the run to pin back is that one
    good_cfg = write_config(tmp_path / "b", name="slow", rates=FLAT, n_prompts=6)
    rc, _, pinned = audit(capsys, good_cfg, "--baseline", "pinned")
    assert rc == 0
    rc, out, _ = audit(capsys, good_cfg, "--baseline", "pinned", "--gate", "max_ci_high=0.001", "--seed", "2")
    assert rc == 6, out[-2000:]
    (pinned.parent / "history.sqlite").unlink()
    rc, out, _ = audit(capsys, good_cfg, "--baseline", "pinned", "--seed", "3")
    text = " ".join(out.split())
    assert "if the history (history.sqlite) was lost or the pin removed" in text
    assert f"stop and pin one ('lmra pin {pinned.name}')" in text and "was not pinned because" not in text


def test_a_damaged_baseline_pair_file_is_refused_before_the_nights_calls(tmp_path, capsys):
    """Break-it finding: a pinned baseline's ratings.parquet damaged in place (same size) was found
    only after the whole audit had been paid for (then exit 2); per_task.csv damage was caught
    before any call. Both are now."""
    from test_gates import FLAT, audit, write_config

    cfg = write_config(tmp_path, name="slow", rates=FLAT, n_prompts=6)
    rc, _, base = audit(capsys, cfg)
    assert rc == 0
    parquet = base / "ratings.parquet"
    data = bytearray(parquet.read_bytes())
    data[len(data) // 2] ^= 0xFF
    parquet.write_bytes(bytes(data))
    before = sorted(p.name for p in base.parent.iterdir())
    rc, out, run = audit(capsys, cfg, "--baseline", str(base))
    text = " ".join(out.split())
    assert rc == 2 and "ratings.parquet" in text and "--baseline" in text, text
    assert sorted(p.name for p in base.parent.iterdir()) == before  # no run folder: nothing called or written


def test_two_processes_upgrading_an_older_history_at_once_both_open_it(tmp_path):
    """Break-it finding: opening a history looked for the columns added since (judge_status,
    n_refused) and added the missing ones in two steps; a second process opening it meanwhile
    (two audits or shards finishing into one reports folder) saw them missing too, and its ALTER
    failed, "duplicate column name" (exit 1, no report.html; 7 of 200 trials with 4 processes).
    The look and the upgrade are one write transaction. Here the other process is mid-upgrade
    (its transaction holds the columns added, not committed) while History() opens the file."""
    import sqlite3
    import threading
    import time

    from lmra.history import History

    path = tmp_path / "history.sqlite"
    History(path).close()
    with sqlite3.connect(path) as db:  # an older history: the runs table without those columns
        db.execute("ALTER TABLE runs DROP COLUMN judge_status")
        db.execute("ALTER TABLE runs DROP COLUMN n_refused")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("ALTER TABLE runs ADD COLUMN judge_status TEXT")
    other.execute("ALTER TABLE runs ADD COLUMN n_refused INTEGER")
    errors: list[BaseException] = []

    def open_history():
        try:
            History(path).close()
        except BaseException as exc:  # noqa: BLE001 — the test reports it
            errors.append(exc)

    opener = threading.Thread(target=open_history)
    opener.start()
    time.sleep(0.5)  # (ordering only: the opener reaches the lock before the other process commits)
    other.execute("COMMIT")
    other.close()
    opener.join(timeout=60)
    assert not opener.is_alive()
    assert errors == []
    with sqlite3.connect(path) as db:
        cols = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    assert cols.count("judge_status") == 1 and cols.count("n_refused") == 1


def test_an_endpoint_that_goes_down_mid_run_stops_it_after_a_long_streak_not_a_blip():
    """Fresh-user finding: a chatbot server killed 10 s into a run made the audit retry 1,400
    refused calls for 15 minutes in silence, to end partial. After the role has answered, a
    streak of TRIP_AFTER_DOWN failed calls (TRIP_AFTER_DOWN_REFUSED refused outright) lasting
    TRIP_DOWN_AFTER_S seconds stops the run, saying the endpoint stopped answering mid-run;
    shorter streaks stay blips (here the time window is 0: the counts are tested)."""
    from lmra.providers.endpoint import TRIP_AFTER_DOWN, TRIP_AFTER_DOWN_REFUSED

    def chain(guard, url):
        cfg = ModelConfig(provider="openai", model="fake", base_url=url, api_key_required=False,
                          max_retries=0, timeout_s=2.0)
        return guard.above_cache(guard.below_cache(OpenAIProvider(cfg)))

    req = lambda i: ChatRequest(messages=[Message(role="user", content=f"q{i}")], max_tokens=5)  # noqa: E731

    async def go(kill: bool):
        with FaultServer() as srv:
            guard = EndpointGuard("target", srv.url, trip_down_after_s=0.0)
            p = chain(guard, srv.url)
            for i in range(3):
                await p.complete(req(i))
            if kill:  # the server process is gone: the same guard's calls now find nothing on a port
                await p.aclose()
            else:
                srv.fault_rate, srv.faults = 1.0, ("http_500",)
                for i in range(TRIP_AFTER_DOWN - 1):  # a long blip: not yet
                    with pytest.raises(ProviderError):
                        await p.complete(req(100 + i))
                assert guard.tripped is None
                srv.fault_rate = 0.0
                await p.complete(req(999))  # an answer resets the streak
                srv.fault_rate = 1.0
                for i in range(TRIP_AFTER_DOWN - 1):
                    with pytest.raises(ProviderError):
                        await p.complete(req(200 + i))
                assert guard.tripped is None
                with pytest.raises(EndpointUnreachable) as ei:
                    await p.complete(req(300))
                await p.aclose()
                return ei.value, None
        p = chain(guard, dead_url())
        for n in range(3 * TRIP_AFTER_DOWN):
            try:
                await p.complete(req(400 + n))
            except EndpointUnreachable as exc:
                await p.aclose()
                return exc, n
            except ProviderError:
                pass
        raise AssertionError("never tripped")

    exc, _ = asyncio.run(go(kill=False))
    assert "stopped answering mid-run: after 4 answered calls" in str(exc)
    assert f"{TRIP_AFTER_DOWN} calls in a row failed after every retry (http_500 × {TRIP_AFTER_DOWN})" in str(exc)
    assert "resumes from the cache" in str(exc)
    exc, n = asyncio.run(go(kill=True))
    assert n == TRIP_AFTER_DOWN_REFUSED - 1 and "stopped answering mid-run: after 3 answered calls" in str(exc)
    assert "connection refused" in str(exc)



def test_a_short_outage_with_many_calls_in_flight_is_a_blip_not_a_stop():
    """Review finding: 34 calls in flight failing together in a 12-second outage tripped the
    mid-run breaker on their count alone, failing a night that had lost 34 of thousands of calls.
    The streak must also last TRIP_DOWN_AFTER_S seconds from its first failure."""
    import time as _time

    from lmra.providers.endpoint import TRIP_AFTER_DOWN

    guard = EndpointGuard("judge", "http://127.0.0.1:9/v1", trip_down_after_s=0.3)
    guard.successes = 250  # (it answered before: the mid-run rule applies)
    err = ProviderError("judge: HTTP 503", kind="http_503")
    for _ in range(3 * TRIP_AFTER_DOWN):  # a burst: many failures within the window
        guard._failed(err)
    assert guard.tripped is None and guard.down_streak == 3 * TRIP_AFTER_DOWN
    _time.sleep(0.35)
    guard._failed(err)  # still failing after the window: down
    # (503 after every retry: the server answers "unavailable", so the stop says overloaded — break-it, s40)
    assert guard.tripped is not None and "is overloaded: after 250 answered calls" in str(guard.tripped)


def test_the_no_logprobs_warning_also_comes_when_an_endpoint_loses_them_after_giving_some():
    """Review finding: one answer with log-probabilities silenced the warning for the rest of the
    run (a server restarted without --logits_all, or one dropping them now and then). With some
    answers with them, it comes after NO_LOGPROBS_NOTICE_AFTER_SOME without; once either way."""
    from lmra.providers.base import ChatResult
    from lmra.providers.endpoint import NO_LOGPROBS_NOTICE_AFTER_SOME

    said = []
    guard = EndpointGuard("judge", "http://127.0.0.1:9/v1", on_notice=said.append)
    for _ in range(5):
        guard._answered(ChatResult(text="", option_probs={"A": 0.6, "B": 0.3, "C": 0.1}))
    bare = ChatResult(text="A", degraded="no_logprobs")
    for _ in range(NO_LOGPROBS_NOTICE_AFTER_SOME - 1):
        guard._answered(bare)
    assert said == []
    guard._answered(bare)
    assert len(said) == 1 and "after others with them" in said[0] and "--logits_all true" in said[0]
    for _ in range(50):
        guard._answered(bare)
    assert len(said) == 1


def test_exporting_a_partial_run_warns(tmp_path, capsys):
    """Fresh-user finding: ``lmra export`` of a partial run (7 of 21 pairs failed) wrote its
    tables without a word, and the rows carry no run status. It warns on stderr; a complete run
    exports without a warning."""
    import shutil

    from lmra.cli import main
    from monitor_helpers import make_run

    run = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=2,
                   n_prompts=20)
    partial = tmp_path / "reports" / "20260103-000000-nightly"
    shutil.copytree(run, partial)
    manifest = json.loads((partial / "manifest.json").read_text())
    (partial / "manifest.json").write_text(json.dumps(manifest | {"status": "partial"}))
    summary = json.loads((partial / "summary.json").read_text())
    (partial / "summary.json").write_text(json.dumps(summary | {"run_status": "partial", "failed_share": 0.25}))
    rerecord_files(partial)
    capsys.readouterr()
    assert main(["export", str(run), "--format", "csv", "--out", str(tmp_path / "x1")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["export", str(partial), "--format", "json", "--out", str(tmp_path / "x2")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: run {partial.name} is partial (25.0% of the planned pairs lost to failed calls): its tables "
            "rest on what it measured, not a whole night; its exported rows say run_status = 'partial'") in err, err
    assert "re-run its command to complete it" in err
    assert (tmp_path / "x2" / "per_task.json").is_file()
    # what the warning says the rows hold (fresh-user finding, s45: it said they held no run status)
    rows = json.loads((tmp_path / "x2" / "per_task.json").read_text())["rows"]
    assert rows and {r["run_status"] for r in rows} == {"partial"}
    # partial on the LMRA's unusable answers, not on lost calls: a re-run replays them, so it is not advised
    # (fresh-user finding: "before it stopped … re-run its command to complete it")
    over = [{"comparison": "female vs male", "domain": "d", "task": "write a story", "n_rated": 10, "n_invalid": 6,
             "n_unlabelled": 0, "share": 0.6}]
    (partial / "summary.json").write_text(json.dumps(summary | {"run_status": "partial", "failed_share": 0.0,
                                                                 "invalid_over_limit": over}))
    rerecord_files(partial)
    assert main(["export", str(partial), "--format", "json", "--out", str(tmp_path / "x3")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: run {partial.name} is partial (" in err and "write a story" in err, err
    assert "re-run its command" not in err and "a re-run gets the same answers from the cache" in err


def test_a_run_found_only_outside_a_copied_reports_folder_is_said_and_a_gone_one_is_marked(tmp_path, capsys):
    """Break-it findings: (1) in a copy of a reports folder whose newest run was removed, 'lmra report
    latest --reports-dir COPY' rewrote report.html in the *original* folder (the path the history
    recorded) and 'lmra export latest' exported the original's run, without a word; (2) 'lmra history'
    listed a run whose folder is gone as a normal row. Now the folder used outside the reports folder
    is named on stderr, and a gone one is marked (console and --json)."""
    import json
    import shutil

    from monitor_helpers import make_run
    from lmra.cli import main

    rates = {"write a story": 0.0, "career advice": 0.0}
    make_run(tmp_path, "20260101-000000-nightly", rates, seed=1, n_prompts=12)
    newest = make_run(tmp_path, "20260102-000000-nightly", rates, seed=2, n_prompts=12)
    reports = tmp_path / "reports"
    assert main(["history", "--reports-dir", str(reports)]) == 0  # registers both
    copy = tmp_path / "copy"
    shutil.copytree(reports, copy)
    shutil.rmtree(copy / newest.name)
    capsys.readouterr()
    assert main(["report", "latest", "--reports-dir", str(copy)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"run {newest.name} is not in {copy}; using its folder {newest}" in err, err
    # gone everywhere: marked in lmra history, console and JSON
    shutil.rmtree(newest)
    assert main(["history", "--reports-dir", str(copy)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(folder gone)" in out and f"is gone (not beside the history nor where it was recorded: {newest.name})" in out
    assert main(["history", "--reports-dir", str(copy), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs[newest.name]["folder_gone"] is True and runs["20260101-000000-nightly"]["folder_gone"] is False


@pytest.mark.parametrize("damage", ["index page", "page 2"])
def test_a_damaged_history_stops_the_command_before_it_is_read_or_written(tmp_path, capsys, damage):
    """Break-it finding: a history.sqlite whose index page was overwritten (SQLite's integrity check:
    malformed) was used and written to by lmra audit, history and export — exit 0 — and only a later
    ``lmra pin`` failed. It is now checked when opened: an I/O failure naming the file (exit 1), the
    file left as it was."""
    import sqlite3

    from monitor_helpers import make_run
    from lmra.cli import main

    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                   n_prompts=12)
    reports = tmp_path / "reports"
    assert main(["pin", run.name, "--reports-dir", str(reports)]) == 0
    hist = reports / "history.sqlite"
    with sqlite3.connect(hist) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE type = 'index' AND rootpage > 1 "
                          "ORDER BY rootpage DESC LIMIT 1").fetchone()[0]
    data = bytearray(hist.read_bytes())
    if damage == "index page":  # quick_check reports it; a plain read still works
        data[(root - 1) * page_size:(root - 1) * page_size + page_size] = b"\x07" * page_size
    else:  # quick_check itself stops at it (break-it round 2: "DatabaseError: … malformed", no file named)
        data[page_size:page_size + 64] = b"\xa5" * 64
    hist.write_bytes(bytes(data))
    if damage == "index page":
        with sqlite3.connect(hist) as db:
            assert db.execute("PRAGMA quick_check").fetchone()[0] != "ok"  # damaged, as SQLite sees it
            db.execute("SELECT count(*) FROM runs").fetchone()  # though a plain read still works
    before = hist.read_bytes()
    capsys.readouterr()
    for argv in (["history", "--reports-dir", str(reports)], ["export", "latest", "--format", "csv", "--reports-dir",
                                                                str(reports), "--out", str(tmp_path / "exp")],
                 ["report", "--history", "--reports-dir", str(reports)]):
        assert main(argv) == 1, argv
        err = " ".join(capsys.readouterr().err.split())
        assert str(hist) in err and "the run history is damaged (SQLite's integrity check:" in err, err
        assert "Traceback" not in err
    assert hist.read_bytes() == before


def test_a_history_another_process_holds_locked_is_not_called_damaged(tmp_path):
    """Break-it round 3: quick_check stopped by another writer's EXCLUSIVE lock ("database is locked") was
    reported as damage — "move it aside … its pins and stored checks are lost" — and stopped the audit. A
    lock is said as such (exit 1, try again), the history left as it was; released, it opens."""
    import sqlite3

    from monitor_helpers import make_run
    from lmra.errors import LmraIOError
    from lmra.history import History, history_path

    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                   n_prompts=12)
    hist = history_path(run.parent)
    with History(hist) as h:
        h.register(run)
    holder = sqlite3.connect(hist, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LmraIOError) as exc:
            History(hist)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    said = str(exc.value.reason)
    assert "locked" in said and "another process is using it" in said and "damaged" not in said, said
    with History(hist) as h:  # released: it opens, its run still there
        assert h.get(run.name) is not None


def test_an_anthropic_endpoint_answering_no_message_is_told_to_point_at_the_messages_api(tmp_path):
    """Break-it finding: an anthropic target whose server answered HTTP 200 {"type": "error"} to
    every call stopped the audit with "Check that base_url in [target] points at an
    OpenAI-compatible API (the URL up to /v1 …)" — the wrong API, and an anthropic base_url has
    no /v1. The advice names the provider's own API."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class _ErrorBody(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _ErrorBody)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        with FaultServer(fault_rate=0.0) as judge:
            config = audit_config(tmp_path / "c.toml", judge.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                                  per_task=6)
            text = config.read_text().replace(f'[target]\nprovider = "openai"\nmodel = "fake"\nbase_url = "{judge.url}"',
                                              f'[target]\nprovider = "anthropic"\nmodel = "claude-x"\nbase_url = "{url}"')
            assert 'provider = "anthropic"' in text
            config.write_text(text)
            proc = _audit_cli(config, tmp_path)
    finally:
        srv.shutdown()
        srv.server_close()
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and "Traceback" not in err, err[-2000:]
    assert f"the target's endpoint {url} answered no valid completion" in err, err[-2000:]
    assert ("Check that base_url in [target] points at an Anthropic Messages API (the server's URL without /v1: "
            "the SDK adds /v1/messages)") in err and "OpenAI-compatible" not in err


def test_too_few_prompts_blames_the_lmra_first_when_it_left_most_pairs_unrated():
    """Fresh-user finding (s45): "No conclusion … Raise prompts_per_task" when the LMRA had left 9 of
    12 pairs invalid — more prompts would mostly add unrated pairs. Above a quarter of either run's
    pairs unrated, the advice names the counts and the LMRA first; otherwise it is as before."""
    from types import SimpleNamespace

    import pandas as pd

    from lmra.cli.monitor import UNRATED_ADVICE_SHARE, _too_few_advice

    tests = pd.DataFrame({"unrated_run": [5, 4], "pairs_run": [6, 6], "unrated_base": [1, 0], "pairs_base": [6, 6]})
    said = _too_few_advice(SimpleNamespace(tests=tests))
    assert said.startswith("The LMRA left 9 of 12 pairs tonight without a usable rating (invalid, unlabelled or "
                           "failed): fix the LMRA first (docs/judge_check.md, 'lmra judge-check')"), said
    assert UNRATED_ADVICE_SHARE == 0.25
    tests["unrated_run"] = [1, 2]  # 3 of 12: a quarter, not above it
    assert _too_few_advice(SimpleNamespace(tests=tests)) == ("Raise prompts_per_task ('lmra plan --design two-run' "
                                                             "sizes it).")
    tests["unrated_base"] = [4, 3]
    assert "7 of 12 pairs at the baseline" in _too_few_advice(SimpleNamespace(tests=tests))
    assert _too_few_advice(SimpleNamespace(tests=pd.DataFrame())).startswith("Raise prompts_per_task")


def test_a_check_that_tested_nothing_because_the_lmra_rated_nothing_says_so():
    """Round-2 break-it (s45): with 2 prompts a task in both runs and every pair of tonight's left
    invalid, every row said "too few prompts (need ≥ 2 per run)" and the final line "(too few
    prompts)". Rows say "too few prompts with a rated pair", and the final line names the pairs
    the LMRA left unrated; with enough rated pairs missing only because of prompt counts, the line
    is as before."""
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    from lmra.cli.monitor import check_exit_reasons
    from lmra.monitor import one_sided_welch

    assert one_sided_welch(np.array([]), np.array([0.1, 0.2]), 0.0)[3] == \
        "too few prompts with a rated pair (need ≥ 2 per run)"
    tests = pd.DataFrame({"unrated_run": [2, 2], "pairs_run": [2, 2], "unrated_base": [0, 0], "pairs_base": [2, 2],
                          "p_regress": [np.nan, np.nan], "regressed": [False, False]})
    result = SimpleNamespace(baseline_id="B", tests=tests, regressions=tests.iloc[:0], overall_regressions=(),
                             family_size=0, n_tested=0, replayed=False, comparability=[], unrated_rise="")
    said = check_exit_reasons(result)[2]
    assert said == ("no task could be tested against baseline B (too few prompts with a rated pair: the LMRA left "
                    "4 of 4 pairs tonight without a usable rating)"), said
    tests["unrated_run"] = [0, 0]
    assert check_exit_reasons(result)[2] == "no task could be tested against baseline B (too few prompts)"


def test_a_refused_check_names_the_failed_judge_on_the_final_line_and_advises_no_pin_of_it(tmp_path, capsys):
    """Nightly trial (s46): a night whose judge's served model changed (its check refused: exit 2) and
    whose judge also failed validation ended "exit status 2: the error above (…)" without the judge's
    failure (docs: the final line names what 2 took precedence over), and the refusal advised pinning
    that failed-judge run. The judge paragraph is printed, the final line names 5, and the advice
    is not to pin it."""
    from lmra.cli import main

    cfg = tmp_path / "n.toml"
    with FaultServer(fault_rate=0.0) as srv:  # the server's LMRA is noise: the judge fails its diagnostics
        audit_config(cfg, srv.url, str(tmp_path / "cache.sqlite"), str(tmp_path / "reports"), name="nightly",
                     tasks=["write a story"], per_task=4, retries=0, timeout_s=10)
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--seed", "1"]) == 5
        (first,) = (tmp_path / "reports").glob("*-nightly")
        assert main(["pin", str(first)]) == 0
        srv.served_model = "fake-2026-12-07"  # the same configured id, another model answering (and the target)
        capsys.readouterr()
        status = main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--seed", "2",
                       "--baseline", "pinned"])
    cap = capsys.readouterr()
    out, err = " ".join(cap.out.split()), " ".join(cap.err.split())
    assert status == 2, out[-2000:] + err[-2000:]
    assert "judge failed validation: " in err, err[-3000:]
    final = [ln for ln in cap.out.splitlines() + cap.err.splitlines() if ln.startswith("exit status")]
    assert final and "not comparable" in final[-1] and "takes precedence over 5: the judge failed validation" in \
        " ".join(final[-1].split()), final
    if "One run's judge answers include those of another model" in err:  # (the mixed-answers advice)
        assert "do not pin it" in err and "To go on with the new judge, pin this run" not in err, err[-3000:]


def test_the_usage_of_answers_thrown_away_for_lack_of_logprobs_is_counted():
    """Break-it finding (s46): an LMRA answer without the log-probabilities asked for is asked again
    (HTTP 200 each time, billed by the provider), but only the last answer's tokens reached the
    token counts, the cost estimate and max_cost — a third of the bill with two retries. Through the
    official SDK against a real local server, behind the call cache and the budget: the fresh tokens
    and the cost count every answer received. The cache stores the kept answer's usage only, so a
    replay counts what it replays (round-2 break-it: a first fix stored the sum, inflating the
    cached tokens and the cost saved)."""
    from lmra.budget import Budget, BudgetedProvider, Price, PriceTable
    from lmra.cache import CachedProvider, CallCache, CallStats
    from lmra.providers.base import ChatResult, Usage, retry_call

    one = (20, 8)  # the fault server's usage of one answer
    prices = PriceTable({"openai": {"fake": Price(input=1_000_000.0, output=1_000_000.0)},  # 1 USD a token
                         "scripted": {"s": Price(input=1_000_000.0, output=1_000_000.0)}})
    req = ChatRequest(messages=[Message(role="user", content="Which? A) x B) y")], max_tokens=1, options=("A", "B"))

    async def go():
        with FaultServer() as srv:
            cfg = ModelConfig(provider="openai", model="fake", base_url=srv.url, api_key_required=False,
                              max_retries=2, timeout_s=5.0)
            stats, budget = CallStats(), Budget(max_cost=1_000.0, prices=prices)
            inner = OpenAIProvider(cfg)
            p = BudgetedProvider(CachedProvider(inner, CallCache(":memory:"), stats), budget)
            srv.fault_rate, srv.faults = 1.0, ("no_logprobs",)  # every answer without them
            first = await p.complete(req)
            await inner.aclose()
            return first, srv.requests, stats, budget.report()

    first, n_requests, stats, report = asyncio.run(go())
    assert n_requests == 3 and first.degraded == "no_logprobs"
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == one  # the kept answer's
    assert (stats.prompt_tokens_fresh, stats.completion_tokens_fresh) == (3 * one[0], 3 * one[1])
    assert report["cost_usd"] == pytest.approx(3 * (one[0] + one[1])), report

    class Scripted:  # two answers without log-probabilities, then one with them (per distinct request)
        name, model_id, base_url, supports_logprobs = "scripted", "s", "", True

        def __init__(self):
            self.calls = 0

        async def complete(self, request):
            answers = iter([ChatResult(text="A", usage=Usage(prompt_tokens=10, completion_tokens=1)),
                            ChatResult(text="B", usage=Usage(prompt_tokens=11, completion_tokens=2)),
                            ChatResult(text="", option_probs={"A": 0.7, "B": 0.3},
                                       usage=Usage(prompt_tokens=12, completion_tokens=3))])

            async def call():
                self.calls += 1
                return next(answers)

            return await retry_call(call, 2, needs_logprobs=True)

        async def aclose(self):
            return None

    async def twice():
        stats, budget, scripted = CallStats(), Budget(max_cost=1_000.0, prices=prices), Scripted()
        p = BudgetedProvider(CachedProvider(scripted, CallCache(":memory:"), stats), budget)
        got = await p.complete(req)
        replay = await p.complete(req)
        return got, replay, stats, budget.report(), scripted.calls

    got, replay, stats, report, calls = asyncio.run(twice())
    assert calls == 3 and got.option_probs == {"A": 0.7, "B": 0.3} and replay.from_cache
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (12, 3)
    assert (got.discarded.prompt_tokens, got.discarded.completion_tokens) == (21, 3)
    assert (stats.prompt_tokens_fresh, stats.completion_tokens_fresh) == (33, 6)
    assert (stats.prompt_tokens_cached, stats.completion_tokens_cached) == (12, 3)  # what the replay replays
    assert report["cost_usd"] == pytest.approx(39.0) and "discarded" not in got.model_dump_json()



def test_a_biased_baseline_is_said_by_pin_and_on_every_no_regression_line(tmp_path, lmra_cli, capsys):
    """Nightly trial (s46, high): after a judge change the tool advises pinning a run of the new
    judge; that night's chatbot was biased (career advice +0.37, overall interval above 0), and
    `lmra pin` said nothing of it, so every later night with the same bias ended "exit status 0: no
    regression". `lmra pin` warns of a run whose overall interval excludes 0, and a "no regression"
    final line names tonight's own interval above 0, as a first night's does."""
    from monitor_helpers import make_run

    rates = {"write a story": 0.6, "career advice": 0.6}
    base = make_run(tmp_path, "20260101-000000-nightly", rates, seed=1, n_prompts=120)
    capsys.readouterr()
    assert lmra_cli(["pin", str(base)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"{base.name} is biased itself; the overall net rating's interval lies above 0" in err, err
    run = make_run(tmp_path, "20260102-000000-nightly", rates, seed=2, n_prompts=120)
    capsys.readouterr()
    assert lmra_cli(["check", str(run), "--baseline", "pinned"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    final = out[out.rindex("exit status 0:"):]
    assert "no regression against baseline" in final and "the overall net rating's interval lies above 0" in final \
        and "not this bias (release gates test it" in final, final
    # an unbiased chatbot: neither
    clean = {"write a story": 0.0, "career advice": 0.0}
    b2 = make_run(tmp_path / "clean", "20260101-000000-nightly", clean, seed=1, n_prompts=120)
    r2 = make_run(tmp_path / "clean", "20260102-000000-nightly", clean, seed=2, n_prompts=120)
    capsys.readouterr()
    assert lmra_cli(["pin", str(b2)]) == 0 and "is biased itself" not in capsys.readouterr().err
    assert lmra_cli(["check", str(r2), "--baseline", "pinned"]) == 0
    assert "interval lies above 0" not in capsys.readouterr().out


def test_a_served_model_change_of_the_chatbot_is_on_the_final_line():
    """Nightly trial (s46): a night whose chatbot endpoint reported another model behind the same
    configured id regressed; the served-model change — the likeliest cause — was said mid-log only,
    not on the verdict's final line that the cron mail shows first."""
    from types import SimpleNamespace

    import pandas as pd

    from lmra.cli.monitor import _served_words, check_exit_reasons

    change = "the target's served model changed: assistant-prod-v1 → assistant-prod-v1.1"
    regs = pd.DataFrame({"comparison": ["female vs male"], "domain": ["d"], "task": ["write a story"]})
    result = SimpleNamespace(baseline_id="B", tests=regs, regressions=regs, overall_regressions=(), replayed=False,
                             comparability=[], identity_changes=[change, "the judge's system fingerprint changed: a → b"])
    assert check_exit_reasons(result)[3].endswith(f"(write a story); {change} (above)"), check_exit_reasons(result)
    assert _served_words(SimpleNamespace(identity_changes=["the judge's served model changed: a → b"])) == ""


def test_overall_away_from_zero_reads_summary_rows_without_an_interval():
    """CI finding (s46): a run's summary.json overall row without an interval holds null, not NaN;
    the "interval away from 0" words raised a TypeError on it (a check with one prompt)."""
    import pandas as pd

    from lmra.monitor import overall_away_from_zero

    rows = [{"group_a": "female", "group_b": "male", "net_rating": 1.0, "ci_low": None, "ci_high": None},
            {"group_a": "a", "group_b": "b", "net_rating": -0.2, "ci_low": -0.3, "ci_high": -0.1}]
    assert overall_away_from_zero(pd.DataFrame(rows)) == \
        "; the overall net rating's interval lies below 0 (a vs b: -0.2000 [-0.3000, -0.1000])"

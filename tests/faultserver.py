"""A local OpenAI-compatible Chat Completions server on 127.0.0.1 that injects faults.

Answers are deterministic functions of the request body (the same request always gets the
same completion and the same log-probabilities), so a run against it can be compared with a
fault-free run. With ``fault_rate`` > 0, that share of requests (chosen by a seeded random
stream) meets one of :data:`FAULTS`:

* ``malformed`` — HTTP 200 with a body cut mid-JSON;
* ``no_choices`` — HTTP 200, a completion with ``choices: []``;
* ``no_logprobs`` — HTTP 200, the right answer without its ``logprobs`` (requests asking for
  log-probabilities only; others get ``http_500`` instead);
* ``http_429`` — 429 with ``retry-after-ms``;
* ``http_500``, ``http_503`` — server errors;
* ``hang`` — no answer for ``hang_s`` seconds (past the client's timeout), then a valid one.

With ``api_key`` set it rejects other keys with HTTP 401 (or 403 for ``forbidden_key``);
``served_model``, ``system_fingerprint`` and ``reply_suffix`` change what fault-free answers
report and say (served model identity and chat-template tokens, issue 13).

The LMRA it plays prefers the first-shown response in a logit-like way, leaves probability on
the neutral option and on tokens that are no option, so that ratings are not trivial.

Run it by hand: ``python tests/faultserver.py --port 8900 --fault-rate 0.2``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("malformed", "no_choices", "no_logprobs", "http_429", "http_500", "http_503", "hang")
#: odd 200 bodies and broken transfers (found by a break-it session): wrong types, impossible
#: log-probabilities, a lone surrogate, negative usage, a body cut mid-transfer, gzip garbage,
#: an HTML page, a body trickling in byte by byte
ODD_FAULTS = ("message_null", "choices_str", "choice_null", "content_null", "nan_logprob", "pos_logprob",
              "surrogate", "negative_usage", "cut_body", "gzip_garbage", "html", "trickle")
#: answer tokens the LMRA puts probability on (options of every lmra question, plus noise)
TOKENS = ("A", "B", "C", "D", "E", "F", "G", "H", " A", "The", "I")


def _digest(body: dict) -> bytes:
    keep = {k: body.get(k) for k in ("model", "messages", "temperature", "max_tokens", "seed", "top_logprobs")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).digest()


def _logprobs(body: dict, k: int) -> list[tuple[str, float]]:
    """Deterministic top-k log-probabilities of the first answer token."""
    rng = random.Random(_digest(body))
    logits = {t: rng.gauss(0.0, 1.0) for t in TOKENS}
    logits["A"] += 0.6  # first-shown preference
    logits["C"] += 1.0  # mass on "no stereotype" / the neutral option
    last = (body.get("messages") or [{}])[-1].get("content", "")
    for letter in ("A", "B"):  # yes/no questions (refusal, identity filter): mostly "No"
        if f"{letter}) No" in last:
            logits[letter] += 3.0
    z = math.log(sum(math.exp(v) for v in logits.values()))
    ranked = sorted(((t, v - z) for t, v in logits.items()), key=lambda x: -x[1])
    return ranked[:k]


def completion(body: dict, *, with_logprobs: bool = True) -> dict:
    """The fault-free completion of a request body."""
    wants_lp = bool(body.get("logprobs"))
    choice: dict = {"index": 0, "finish_reason": "stop"}
    if wants_lp:
        top = _logprobs(body, int(body.get("top_logprobs") or 5))
        choice["message"] = {"role": "assistant", "content": top[0][0]}
        if with_logprobs:
            choice["logprobs"] = {"content": [{"token": top[0][0], "logprob": top[0][1], "bytes": None,
                                               "top_logprobs": [{"token": t, "logprob": lp, "bytes": None}
                                                                for t, lp in top]}]}
        else:
            choice["logprobs"] = None
    elif re.search(r"^A\) |single letter", (body.get("messages") or [{}])[-1].get("content", ""), re.M):
        # an LMRA question asked without log-probabilities (sampled): one token drawn from the same
        # distribution, by the body (each sample its own seed, so its own body)
        top = _logprobs(body, len(TOKENS))
        rng = random.Random(_digest(body) + b"sample")
        token = rng.choices([t for t, _ in top], weights=[math.exp(lp) for _, lp in top])[0]
        choice["message"] = {"role": "assistant", "content": token.strip()}
    else:
        h = _digest(body).hex()
        choice["message"] = {"role": "assistant", "content": f"Here is a helpful answer number {h[:10]}. "
                                                             f"It covers the topic in {int(h[10:12], 16) % 7 + 2} "
                                                             "short points."}
    return {"id": "chatcmpl-" + _digest(body).hex()[:12], "object": "chat.completion", "created": 0,
            "model": body.get("model", "fake"), "choices": [choice],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}}


def dead_url() -> str:
    """The URL of a port on 127.0.0.1 nothing listens on (bound, then closed): every connection
    is refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"


def audit_config(path, url: str, cache, out, *, name: str = "faults", tasks: list[str], per_task: int = 2,
                 concurrency: int | str | None = 4, retries: int | None = 1, timeout_s: float | None = 1.0,
                 top: str = "", extra: str = "", key_env: dict[str, str] | None = None, model_extra: str = ""):
    """Write an audit config whose target and LMRA are this server (judge check off); returns ``path``.

    ``top`` goes before the first table (top-level keys), ``extra`` after the last one;
    ``model_extra`` (lines such as ``requests_per_minute = 600``) goes into both ``[target]``
    and ``[judge]``. ``concurrency`` None leaves the field out (its default), a string is
    written quoted (``"auto"``).
    ``key_env`` maps ``target``/``judge`` to the variable holding its key (``api_key_env``);
    a model not named sends no key (``api_key_required = false``).
    """
    model = "".join(f"{k} = {v}\n" for k, v in (("timeout_s", timeout_s), ("max_retries", retries))
                    if v is not None) + (model_extra.strip() + "\n" if model_extra.strip() else "")
    conc = "" if concurrency is None else f"concurrency = {json.dumps(concurrency)}\n"
    key = {role: f'api_key_env = "{(key_env or {})[role]}"' if role in (key_env or {}) else "api_key_required = false"
           for role in ("target", "judge")}
    path.write_text(f'''name = "{name}"
prompts_per_task = {per_task}
tasks = {json.dumps(tasks)}
{conc}cache = "{cache}"
output_dir = "{out}"
{top}
[judge_check]
enabled = false
[target]
provider = "openai"
model = "fake"
base_url = "{url}"
{key["target"]}
{model}[judge]
provider = "openai"
model = "fake"
base_url = "{url}"
{key["judge"]}
{model}{extra}''')
    return path


class FaultServer:
    """The server, started in a daemon thread.

    Args:
        fault_rate: share of requests that meet a fault (changeable while running).
        faults: the fault kinds drawn from, uniformly.
        hang_s: how long a ``hang`` waits before answering.
        seed: seed of the fault draws.
        delay_s: latency added to every answer (to keep calls in flight).
        requests_by_body: how often each distinct request body was received; answered_by_body:
            how often it got a fault-free answer; ignores_logprobs: answer every request without
            log-probabilities (an endpoint that ignores the request for them).
    """

    def __init__(self, fault_rate: float = 0.0, faults: tuple[str, ...] = FAULTS, hang_s: float = 1.5,
                 seed: int = 0, port: int = 0, delay_s: float = 0.0, api_key: str | None = None,
                 forbidden_key: str | None = None, served_model: str | None = None,
                 system_fingerprint: str | None = None, reply_suffix: str = ""):
        # identity and authentication (issue 13; all changeable while running): requests whose
        # "Authorization: Bearer" key is not ``api_key`` get HTTP 401 (``forbidden_key``: 403),
        # counted in ``auth_rejected``; fault-free answers report ``served_model`` (default: the
        # requested model) and ``system_fingerprint``, and end with ``reply_suffix``
        self.api_key = api_key
        self.forbidden_key = forbidden_key
        self.served_model = served_model
        self.system_fingerprint = system_fingerprint
        self.reply_suffix = reply_suffix
        self.auth_rejected = 0
        self.fault_rate = fault_rate
        #: only requests asking for log-probabilities (LMRA option questions) meet faults (settable)
        self.lmra_only = False
        self.delay_s = delay_s
        self.faults = faults
        self.hang_s = hang_s
        self.seed, self.rng = seed, random.Random(seed)
        self.lock = threading.Lock()
        self.injected: Counter = Counter()
        self.requests = 0
        self.requests_by_body: Counter = Counter()
        #: fault-free answers per distinct request body (a body answered twice was asked twice)
        self.answered_by_body: Counter = Counter()
        #: an endpoint that ignores the log-probability request: every answer comes without them
        #: (not a fault: requests without it are answered as usual)
        self.ignores_logprobs = False
        #: the model ids served (None: any); a request for another gets HTTP 404 model_not_found
        self.models: set[str] | None = None
        self.model_not_found = 0
        #: an endpoint that rejects requests asking for log-probabilities with HTTP 400 (a model
        #: without them, as OpenAI answers): ``rejects_logprobs`` is the error's message, or None
        self.rejects_logprobs: str | None = None
        self.rejected = 0
        #: every request answered HTTP 429 insufficient_quota (an account out of credit, as OpenAI answers)
        self.quota_exhausted = False
        #: requests asking for log-probabilities answered as a provider's content filter stops them:
        #: HTTP 200, empty content, ``finish_reason: content_filter``, no log-probabilities
        self.filters_logprob_requests = False
        #: the first ``stall_first`` requests are held ``hang_s`` seconds before they are handled
        #: (a server slow to take its first calls: still in flight when later ones have failed)
        self.stall_first = 0
        #: the first attempt of every distinct request is answered HTTP 429 with these headers
        #: (e.g. ``{"retry-after": "40"}``: a server asking for a long wait before the retry)
        self.limit_first_attempt: dict[str, str] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # answer without Nagle's algorithm: the body, written after the headers, would
            # otherwise wait for the client's delayed ACK (~40 ms on every call), as no real
            # endpoint does
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def _send(self, code: int, data: bytes, headers: dict | None = None) -> None:
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _odd(self, fault: str, body: dict) -> None:
                c = completion(body)
                ch = c["choices"][0]
                if fault == "message_null":
                    ch["message"] = None
                elif fault == "choices_str":
                    c["choices"] = "x"
                elif fault == "choice_null":
                    c["choices"] = [None]
                elif fault == "content_null":
                    ch["message"]["content"] = None
                elif fault in ("nan_logprob", "pos_logprob") and ch.get("logprobs"):
                    for alt in ch["logprobs"]["content"][0]["top_logprobs"]:
                        alt["logprob"] = float("nan") if fault == "nan_logprob" else 3.0
                elif fault == "surrogate":
                    ch["message"]["content"] = "Hello \ud800 there"
                elif fault == "surrogate_fields":  # (break-it, s39: in the fields beside the text)
                    c["model"], c["system_fingerprint"] = f"{c.get('model', 'fake')}-\ud800", "fp_\udfff"
                elif fault == "negative_usage":
                    c["usage"]["completion_tokens"] = -5
                if fault == "surrogate" and not ch.get("logprobs"):
                    data = json.dumps(c).encode()  # "\ud800" stays an escape: valid JSON, not valid UTF-8
                elif fault in ("nan_logprob", "pos_logprob"):
                    data = json.dumps(c).encode()  # NaN is written as the bare token NaN
                elif fault == "cut_body":
                    data = json.dumps(c).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 3])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                elif fault == "gzip_garbage":
                    data = b"\x1f\x8b\x08\x00garbage-not-gzip"
                    self._send(200, data, {"content-encoding": "gzip"})
                    return
                elif fault == "html":
                    self.send_response(200)
                    data = b"<html><body>Bad gateway</body></html>"
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                elif fault == "trickle":
                    data = json.dumps(c).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(0.02)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                else:
                    data = json.dumps(c).encode()
                self._send(200, data)

            def do_GET(self):
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with server.lock:
                    server.requests_by_body[_digest(body)] += 1
                    attempt = f"{_digest(body).hex()}:{server.requests_by_body[_digest(body)]}"
                    stall = server.stall_first > 0 and server.requests_by_body.total() <= server.stall_first
                if stall:
                    time.sleep(server.hang_s)
                sent = (self.headers.get("authorization") or "").removeprefix("Bearer ")
                if server.api_key is not None and sent != server.api_key:
                    with server.lock:
                        server.auth_rejected += 1
                    forbidden = sent == server.forbidden_key
                    code, kind = (403, "permission_denied") if forbidden else (401, "invalid_api_key")
                    self._send(code, json.dumps({"error": {"message": f"Incorrect API key provided ({kind})",
                                                           "type": "invalid_request_error", "code": kind}}).encode())
                    return
                if server.models is not None and body.get("model") not in server.models:  # as OpenAI answers
                    with server.lock:
                        server.model_not_found += 1
                    self._send(404, json.dumps({"error": {
                        "message": f"The model `{body.get('model')}` does not exist or you do not have access to it.",
                        "type": "invalid_request_error", "param": None, "code": "model_not_found"}}).encode())
                    return
                if server.limit_first_attempt is not None and attempt.endswith(":1"):
                    self._send(429, b'{"error": {"message": "rate limited", "type": "rate_limit"}}',
                               dict(server.limit_first_attempt))
                    return
                if server.quota_exhausted:
                    with server.lock:
                        server.rejected += 1
                    self._send(429, json.dumps({"error": {
                        "message": "You exceeded your current quota, please check your plan and billing details.",
                        "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}).encode())
                    return
                if server.filters_logprob_requests and body.get("logprobs"):
                    c = completion(body, with_logprobs=False)
                    c["choices"][0] |= {"finish_reason": "content_filter", "message": {"role": "assistant",
                                                                                       "content": ""}}
                    self._send(200, json.dumps(c).encode())
                    return
                if server.rejects_logprobs is not None and body.get("logprobs"):
                    with server.lock:
                        server.rejected += 1
                    self._send(400, json.dumps({"error": {"message": server.rejects_logprobs, "param": "logprobs",
                                                          "type": "invalid_request_error", "code": None}}).encode())
                    return
                if server.delay_s:
                    time.sleep(server.delay_s)
                # a redirect's hop (fault "redirect": 307 to the same path) is answered as it is
                fault = None if "hop=1" in self.path else server.draw(bool(body.get("logprobs")), attempt)
                if fault == "redirect":
                    self._send(307, b"", {"location": self.path + ("&" if "?" in self.path else "?") + "hop=1"})
                elif fault == "malformed":
                    text = json.dumps(completion(body))
                    self._send(200, text[: len(text) // 2].encode())
                elif fault == "no_choices":
                    self._send(200, json.dumps(completion(body) | {"choices": []}).encode())
                elif fault == "no_logprobs":
                    self._send(200, json.dumps(completion(body, with_logprobs=False)).encode())
                elif fault == "no_top_logprobs":  # an endpoint that ignores top_logprobs: the chosen token only
                    c = completion(body)
                    for pos in ((c["choices"][0].get("logprobs") or {}).get("content") or []):
                        pos["top_logprobs"] = []
                    self._send(200, json.dumps(c).encode())
                elif fault == "http_429":
                    self._send(429, b'{"error": {"message": "rate limited", "type": "rate_limit"}}',
                               {"retry-after-ms": "30"})
                elif fault in ("http_500", "http_503"):
                    self._send(int(fault[5:]), b'{"error": {"message": "server error", "type": "server"}}')
                elif fault in ODD_FAULTS or fault == "surrogate_fields":
                    self._odd(fault, body)
                elif fault == "hang":
                    time.sleep(server.hang_s)
                    self._send(200, json.dumps(completion(body)).encode())
                else:
                    with server.lock:
                        server.answered_by_body[_digest(body)] += 1
                    c = completion(body, with_logprobs=not server.ignores_logprobs)
                    self._send(200, json.dumps(server.dress(c)).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def dress(self, c: dict) -> dict:
        """A fault-free completion with this server's identity and reply suffix."""
        if self.served_model is not None:
            c["model"] = self.served_model
        if self.system_fingerprint is not None:
            c["system_fingerprint"] = self.system_fingerprint
        if self.reply_suffix:
            c["choices"][0]["message"]["content"] += self.reply_suffix
        return c

    def draw(self, wants_logprobs: bool, attempt: str | None = None) -> str | None:
        """The fault of the next request, or None; counted in :attr:`injected`.

        ``attempt`` (the request body's digest and how often it was received) seeds the draw,
        so which attempt of which call meets which fault does not depend on the order in which
        concurrent requests arrive (pipelined stages, auto concurrency): a test's fault pattern
        is the same on a busy and a quiet machine."""
        with self.lock:
            self.requests += 1
            if self.lmra_only and not wants_logprobs:  # (a chatbot call: never faulted when set)
                return None
            rng = self.rng if attempt is None else random.Random(f"{self.seed}:{attempt}")
            if rng.random() >= self.fault_rate:
                return None
            fault = rng.choice(self.faults)
            if fault in ("no_logprobs", "no_top_logprobs") and not wants_logprobs:
                fault = "http_500"
            if fault in ("nan_logprob", "pos_logprob") and not wants_logprobs:
                fault = "message_null"
            self.injected[fault] += 1
            return fault

    def __enter__(self) -> "FaultServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8900)
    ap.add_argument("--fault-rate", type=float, default=0.2)
    ap.add_argument("--hang-s", type=float, default=1.5)
    a = ap.parse_args()
    with FaultServer(a.fault_rate, hang_s=a.hang_s, port=a.port) as srv:
        print(f"serving on {srv.url} with {a.fault_rate:.0%} faults; Ctrl-C to stop", flush=True)
        try:
            srv.thread.join()
        except KeyboardInterrupt:
            pass

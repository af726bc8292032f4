"""Throughput of lmra's client-side rate limiter against a simulated rate-limited server.

A local OpenAI-compatible server (127.0.0.1 only) answers chat completions after a fixed
latency and enforces its own limit of ``--rpm`` requests per minute over a sliding 1-second
window (at most rpm/60 requests in any second); above it, it answers HTTP 429 with a
``retry-after-ms`` header, as the real APIs do. Every usage is 80 prompt + 20 completion
tokens.

Scenarios, each run for ``--duration`` seconds with ``--concurrency`` workers through the
official openai SDK (``max_retries`` = 4), all measured in the same run:

1. ``rpm limiter``: ``RateLimitedProvider(requests_per_minute=rpm)``, the server's limit.
1b. ``rpm limiter at 95 %``: ``requests_per_minute=0.95·rpm`` (the recommended setting: a
   few per cent under the provider's limit absorbs network jitter at window edges).
2. ``tpm limiter``: ``RateLimitedProvider(tokens_per_minute=100·rpm/2)``, i.e. half the
   server's request limit expressed in tokens (requests booked at their worst case
   ``max_tokens`` = 256, corrected by the reported usage of 100 tokens).
3. ``no limiter``: the SDK's retries on 429 alone.

Printed: successful requests per minute measured at the server between its first and last
accepted request, as a ratio of the configured limit; 429s sent; calls that failed after the
SDK's retries. Usage::

    python bench/bench_ratelimit.py [--rpm 600] [--duration 15] [--concurrency 32] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lmra.config import ModelConfig  # noqa: E402
from lmra.providers.base import ChatRequest, Message, ProviderError  # noqa: E402
from lmra.providers.openai import OpenAIProvider  # noqa: E402
from lmra.providers.ratelimit import RateLimitedProvider  # noqa: E402

PROMPT_TOKENS, COMPLETION_TOKENS = 80, 20


class LimitedServer(BaseHTTPRequestHandler):
    """Chat completions with a server-side sliding-window request limit."""

    per_second = 10
    latency = 0.05
    lock = threading.Lock()
    window: collections.deque = collections.deque()
    accepted: list = []
    rejected = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        now = time.monotonic()
        with cls.lock:
            while cls.window and now - cls.window[0] >= 1.0:
                cls.window.popleft()
            ok = len(cls.window) < cls.per_second
            if ok:
                cls.window.append(now)
                cls.accepted.append(now)
            else:
                cls.rejected += 1
                wait_ms = max(1, int((1.0 - (now - cls.window[0])) * 1000))
        if not ok:
            data = json.dumps({"error": {"message": "Rate limit reached for requests", "type": "requests",
                                         "code": "rate_limit_exceeded"}}).encode()
            self.send_response(429)
            self.send_header("retry-after-ms", str(wait_ms))
        else:
            time.sleep(cls.latency)
            data = json.dumps({
                "id": "c", "object": "chat.completion", "created": 1700000000, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop",
                             "logprobs": None}],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}}).encode()
            self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _reset() -> None:
    LimitedServer.window = collections.deque()
    LimitedServer.accepted = []
    LimitedServer.rejected = 0


async def _drive(provider, duration: float, concurrency: int) -> tuple[int, int]:
    """Workers send requests until the deadline; returns (succeeded, failed after retries)."""
    deadline = time.monotonic() + duration
    ok = failed = 0

    async def worker(w: int) -> None:
        nonlocal ok, failed
        i = 0
        while time.monotonic() < deadline:
            req = ChatRequest(messages=[Message(role="user", content=f"worker {w} request {i}")], max_tokens=256)
            i += 1
            try:
                await provider.complete(req)
                ok += 1
            except ProviderError:
                failed += 1

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    await provider.aclose()
    return ok, failed


def _measure(name: str, make_provider, limit_per_min: float, unit: str, per_call: float, args) -> dict:
    _reset()
    ok, failed = asyncio.run(_drive(make_provider(), args.duration, args.concurrency))
    ts = LimitedServer.accepted
    per_min = (len(ts) - 1) / (ts[-1] - ts[0]) * 60.0 * per_call if len(ts) > 1 else 0.0
    return {"scenario": name, "configured": limit_per_min, "unit": unit, "achieved": per_min,
            "ratio": per_min / limit_per_min, "succeeded": ok, "http_429": LimitedServer.rejected,
            "failed_after_retries": failed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rpm", type=float, default=600.0, help="server limit and client RPM (default 600)")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per scenario (default 15)")
    ap.add_argument("--concurrency", type=int, default=32, help="workers (default 32)")
    ap.add_argument("--latency", type=float, default=0.05, help="server latency per accepted call in s (0.05)")
    args = ap.parse_args()

    LimitedServer.per_second = max(1, int(args.rpm / 60))
    LimitedServer.latency = args.latency
    srv = ThreadingHTTPServer(("127.0.0.1", 0), LimitedServer)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    cfg = ModelConfig(provider="openai", model="bench", base_url=url, api_key_required=False, max_retries=4, timeout_s=30)
    tpm = (PROMPT_TOKENS + COMPLETION_TOKENS) * args.rpm / 2

    rows = [
        _measure("rpm limiter", lambda: RateLimitedProvider(OpenAIProvider(cfg), requests_per_minute=args.rpm),
                 args.rpm, "requests/min", 1.0, args),
        _measure("rpm limiter at 95 %",
                 lambda: RateLimitedProvider(OpenAIProvider(cfg), requests_per_minute=0.95 * args.rpm),
                 0.95 * args.rpm, "requests/min", 1.0, args),
        _measure("tpm limiter", lambda: RateLimitedProvider(OpenAIProvider(cfg), tokens_per_minute=tpm),
                 tpm, "tokens/min", PROMPT_TOKENS + COMPLETION_TOKENS, args),
        _measure("no limiter (SDK retries only)", lambda: OpenAIProvider(cfg), args.rpm, "requests/min", 1.0, args),
    ]
    srv.shutdown()
    print(f"server limit {args.rpm:g} requests/min ({LimitedServer.per_second}/s sliding window), "
          f"latency {args.latency * 1000:g} ms, {args.concurrency} workers, {args.duration:g} s per scenario; "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"{'scenario':32s} {'configured':>17s} {'achieved':>17s} {'ratio':>6s} {'ok':>5s} {'429s':>5s} "
          f"{'failed':>6s}")
    for r in rows:
        unit = "req/min" if r["unit"] == "requests/min" else "tok/min"
        print(f"{r['scenario']:32s} {r['configured']:>9.0f} {unit} {r['achieved']:>9.1f} {unit} "
              f"{r['ratio']:>6.3f} {r['succeeded']:>5d} {r['http_429']:>5d} {r['failed_after_retries']:>6d}")


if __name__ == "__main__":
    main()

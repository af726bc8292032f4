"""End-to-end throughput of an audit against a rate limit or a latency bound (issue 14, goal 1).

A local OpenAI-compatible server (``tests/faultserver.py``, no faults, 127.0.0.1) runs in its
own process and answers every call after ``--latency`` seconds (default 0.2; before issue 14's
last round its answers also waited ~40 ms for the client's delayed ACK, Nagle's algorithm
being on: 248 ms per call, not 200). Each scenario
runs a real audit in a fresh Python process (``lmra.Audit(config).run()``, official ``openai``
SDK, the default stages: identity filter and refusal labels on; judge check off, a fresh
cache) over a synthetic prompt set of 27 tasks × ``--per-task`` prompts, with target and LMRA
on the same endpoint and model. The server stamps every call (system monotonic clock, shared
by the processes), so

* **utilisation** = calls ÷ (end − first call) ÷ the configured rate, where *end* is the
  moment ``Audit.run()`` returned (the run folder is written) and the rate is
  ``requests_per_minute / 60`` calls/s, ``tokens_per_minute / 60`` tokens/s (every answer
  reports 28 tokens), or, without a limit, ``concurrency ÷ latency`` (the latency bound);
* **pre** = first call − ``run()`` called (the model clients are built before, as ``lmra
  audit`` does); **post** = end − last answer; **idle** = the time the rate limiter left its
  limit unused between the first call and the last start (``limiter_idle_s`` of
  ``manifest.json``: no call was ready, or the event loop woke one late), so that wall ≈
  calls ÷ rate + idle + the last call's latency + post;
* **client CPU/call** = the audit process's CPU time during ``run()`` ÷ calls;
* **srv ms** = the mean time a call spends at the server (request read … answer written:
  the configured latency plus the server's own work);
* for the latency bound, also the ratio at the *measured* latency: calls/s ÷ (concurrency ÷
  srv ms), i.e. the mean calls in flight at the server ÷ concurrency — how well the audit
  keeps its calls in flight, apart from a server slowed by a busy machine (``--timeline``
  prints the calls reaching the server per second).

Scenarios (``--rpm`` default 9600 = 160 calls/s, ``--concurrency`` default 32):

1. ``rpm, concurrency N``: ``requests_per_minute`` on target and LMRA, ``concurrency = N``;
2. ``rpm, concurrency default``: the same limit, ``concurrency`` left out of the config
   (smaller audit with ``--small-per-task`` prompts per task for the old code, whose default
   of 2 calls in flight makes it slow);
3. ``tpm, concurrency default``: ``tokens_per_minute`` = rate × 28 × 60 instead;
4. ``no limit, concurrency N``: latency bound ``N ÷ latency``.

It also prints the client CPU per call of the SDK's ``chat.completions.create`` and of
``client.post`` (into ``ChatCompletion`` objects), 600 calls each against a second server
process answering at once, and of :class:`~lmra.providers.openai.OpenAIProvider`'s whole path
(``complete``: request body, SDK, HTTP, parsing) for each code measured, with 48 calls in
flight against a server answering after 50 ms (the connections an audit at the limit keeps
open; best of 3 rounds, the codes by turns, each in its own process).

``--before DIR`` runs every scenario also on another copy of the code (a folder holding
``lmra/``, ``prompts/``, ``names/``, e.g. ``git archive <rev> lmra prompts names examples | tar -x -C
DIR``), so that old and new ratios come from the same run; ``same output`` says whether the
two runs of a scenario wrote a byte-identical ``per_task.csv`` and the same per-pair rows (``ratings.parquet``,
or ``ratings.jsonl`` before issue 15, compared on their common columns). Usage::

    python bench/bench_throughput.py [--before /tmp/lmra_before] [--per-task 12] [--latency 0.2] [--timeline]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TOKENS_PER_CALL = 28  # the fault server's usage: 20 prompt + 8 completion tokens
TIMELINE_S = 1.0  # --timeline: calls reaching the server per this many seconds
#: OpenAIProvider.complete's CPU per call is measured with as many calls in flight (and so
#: connections open) as an audit at 160 calls/s keeps, against a server answering after 50 ms
PROVIDER_IN_FLIGHT, PROVIDER_LATENCY_S, PROVIDER_ROUNDS = 48, 0.05, 3
TASKS = [f"task {i:02d}" for i in range(27)]
TOPICS = ["a garden", "a budget", "a trip", "a résumé", "a workout", "a dinner party", "a bicycle repair",
          "a science fair", "a book club", "a move to a new city", "a job interview", "a birthday card"]


# -- the server process ---------------------------------------------------------------------
def _serve(conn, latency: float) -> None:
    """Run the fault server (no faults) with ``latency``; answer ``stats`` requests on ``conn``."""
    sys.path.insert(0, str(TESTS))
    from faultserver import FaultServer

    srv = FaultServer(delay_s=latency)
    srv.httpd.socket.listen(256)  # many connections open at once at the start of a run (backlog 5 drops SYNs)
    handler = srv.httpd.RequestHandlerClass
    answer = handler.do_POST
    spans: list[tuple[float, float]] = []

    def do_POST(self):  # each call's time at the server: request read … answer written
        t0 = time.monotonic()
        answer(self)
        spans.append((t0, time.monotonic()))

    handler.do_POST = do_POST
    with srv:
        conn.send(srv.url)
        while True:
            cmd = conn.recv()
            if cmd == "stop":
                break
            done, spans[:] = list(spans), []
            conn.send(done)


# -- one audit in its own process -------------------------------------------------------------
def _child(spec: dict) -> None:
    """Run one audit (``spec`` from the parent) and print its timings as JSON."""
    import resource

    from lmra import Audit, load_config

    cfg = load_config(spec["config"])
    audit = Audit(cfg)
    audit.on_notice = lambda msg: print(f"notice: {msg}", file=sys.stderr)
    audit._target_provider(), audit._judge_provider()  # built before the run, as `lmra audit` does
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    res = audit.run()
    t1 = time.monotonic()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    run_dir = Path(res.run_dir)
    print(json.dumps({"t_run": t0, "t_end": t1, "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
                      "digest": hashlib.sha256((run_dir / "per_task.csv").read_bytes()).hexdigest(),
                      "ratings": _ratings_rows(run_dir), "plan": _in_flight(audit, cfg), "idle_s": _idle(audit)}))


def _idle(audit) -> float | None:
    """Seconds the rate limiters left unused between the first call and the last start (None
    without a limit, or on code that does not count them)."""
    report = getattr(audit, "concurrency_report", None)
    idle = [lim["limiter_idle_s"] for lim in (report()["limits"] if report is not None else [])
            if "limiter_idle_s" in lim]
    return sum(idle) if idle else None


def _ratings_rows(run_dir: Path) -> list[dict]:
    """The per-pair rows of a run folder, from ``ratings.parquet`` (issue 15) or ``ratings.jsonl``
    (before), as JSON values (NaN → None), sorted, so that the two formats compare."""
    import pandas as pd

    if (run_dir / "ratings.parquet").exists():
        frame = pd.read_parquet(run_dir / "ratings.parquet")
    else:
        lines = (run_dir / "ratings.jsonl").read_text(encoding="utf-8").splitlines()
        frame = pd.DataFrame([json.loads(line) for line in lines if line.strip()])
    rows = [_canonical(r) for r in frame.to_dict(orient="records")]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def _canonical(value):
    """A ratings value comparable across the two formats, exactly: nested JSON kept as a
    string (the parquet file) parsed, numpy values as Python ones, NaN as None."""
    import numpy as np

    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def _in_flight(audit, cfg) -> str:
    """Calls in flight as the run ended: ``auto: 40 (peak 41) at 0.21 s`` per limit, or the setting."""
    report = getattr(audit, "concurrency_report", None)
    limits = report()["limits"] if report is not None else []
    parts = [f"{lim['in_flight']} (peak {lim['peak_in_flight']}) at {lim['observed_latency_s']:.2f} s"
             for lim in limits if "in_flight" in lim]
    if parts:
        return "auto: " + ", ".join(parts)
    lat = [f"{lim['observed_latency_s']:.2f} s" for lim in limits if lim.get("observed_latency_s")]
    return f"{cfg.concurrency}" + (f" at {', '.join(lat)}" if lat else "")


def _sdk_cpu(url: str, n: int = 600) -> dict[str, float]:
    """Client CPU ms per call of the SDK's ``chat.completions.create`` and of ``client.post``
    (what ``OpenAIProvider`` sends through), ``n`` option questions each, 16 in flight, against
    the server at zero latency (it answers at once; its own time is not counted)."""
    import asyncio

    from openai.types.chat import ChatCompletion

    from lmra.config import ModelConfig
    from lmra.providers._openai_batch import chat_params
    from lmra.providers.base import ChatRequest, Message
    from lmra.providers.openai import OpenAIProvider

    system = "You are a careful assistant. " * 20

    def request(i: int) -> ChatRequest:
        return ChatRequest(messages=[Message(role="system", content=system),
                                     Message(role="user", content=f"Which answer is right for question {i}? " * 8)],
                           seed=i, options=("A", "B", "C"))

    async def run(mode: str) -> float:
        p = OpenAIProvider(ModelConfig(provider="openai", model="bench", base_url=url, api_key_required=False))
        sem = asyncio.Semaphore(16)

        async def one(i: int):
            async with sem:
                params = chat_params(p.model_id, request(i), 5)
                if mode == "create":
                    return await p.client.chat.completions.create(**params)
                return await p.client.post("/chat/completions", body=params, cast_to=ChatCompletion)

        await asyncio.gather(*(one(i) for i in range(20)))  # connections opened, code warmed
        c0 = time.process_time()
        await asyncio.gather(*(one(i) for i in range(20, 20 + n)))
        c1 = time.process_time()
        await p.aclose()
        return 1000 * (c1 - c0) / n

    return {mode: min(asyncio.run(run(mode)) for _ in range(2)) for mode in ("create", "post")}


def _provider_cpu(url: str, n: int = 600, rounds: int = 1, in_flight: int = PROVIDER_IN_FLIGHT) -> float:
    """Client CPU ms per call of ``OpenAIProvider.complete`` (the whole provider path: request
    body, SDK, HTTP, parsing into a ChatResult), ``n`` option questions, ``in_flight`` at once
    (as many connections as an audit at the limit keeps open), against the server at
    ``PROVIDER_LATENCY_S``; best of ``rounds``. Runs on whichever lmra is imported."""
    import asyncio

    from lmra.config import ModelConfig
    from lmra.providers.base import ChatRequest, Message
    from lmra.providers.openai import OpenAIProvider

    system = "You are a careful assistant. " * 20

    async def run() -> float:
        p = OpenAIProvider(ModelConfig(provider="openai", model="bench", base_url=url, api_key_required=False))
        sem = asyncio.Semaphore(in_flight)

        async def one(i: int):
            async with sem:
                return await p.complete(ChatRequest(messages=[
                    Message(role="system", content=system),
                    Message(role="user", content=f"Which answer is right for question {i}? " * 8)],
                    seed=i, options=("A", "B", "C")))

        await asyncio.gather(*(one(i) for i in range(2 * in_flight)))  # connections opened, code warmed
        c0 = time.process_time()
        await asyncio.gather(*(one(i) for i in range(1000, 1000 + n)))
        c1 = time.process_time()
        await p.aclose()
        return 1000 * (c1 - c0) / n

    return min(asyncio.run(run()) for _ in range(rounds))


def _write_inputs(folder: Path, per_task: int) -> Path:
    prompts = folder / "prompts.jsonl"
    with prompts.open("w", encoding="utf-8") as fh:
        for t, task in enumerate(TASKS):
            for i in range(per_task):
                fh.write(json.dumps({"id": f"t{t}-p{i}", "domain": f"domain {t % 5}", "task": task,
                                     "text": f"Please help me plan {TOPICS[i % len(TOPICS)]} (request {t}-{i}); "
                                             "give practical steps."}) + "\n")
    return prompts


def _run(code_root: Path, label: str, scenario: dict, url: str, conn, args, work: Path) -> dict:
    sys.path.insert(0, str(TESTS))
    from faultserver import audit_config

    run = work / f"{label}-{scenario['key']}"
    run.mkdir()
    prompts = _write_inputs(run, scenario["per_task"])
    cfg = audit_config(run / "audit.toml", url, run / "cache.sqlite", run / "reports", name="bench", tasks=TASKS,
                       per_task=scenario["per_task"], concurrency=scenario["concurrency"], retries=2, timeout_s=30,
                       top=f'prompts = "{prompts}"', model_extra=scenario["model_extra"])
    env = dict(os.environ, PYTHONPATH=str(code_root))
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps({"config": str(cfg)})],
                         cwd=run, env=env, capture_output=True, text=True, timeout=900)
    conn.send("stats")
    spans = conn.recv()
    n, first, last = len(spans), min(a for a, _ in spans), max(b for _, b in spans)
    if out.returncode != 0:
        raise SystemExit(f"{label} {scenario['name']} failed:\n{out.stderr[-3000:]}")
    child = json.loads(out.stdout.strip().splitlines()[-1])
    wall = child["t_end"] - first
    rate = n / wall
    if scenario["unit"] == "tokens/s":
        achieved, bound = rate * TOKENS_PER_CALL, scenario["bound"]
    else:
        achieved, bound = rate, scenario["bound"]
    notices = [ln for ln in out.stderr.splitlines() if ln.startswith("notice:")]
    server_s = sum(b - a for a, b in spans)  # call-seconds at the server: mean calls in flight there × wall
    timeline = [0] * (int((child["t_end"] - first) / TIMELINE_S) + 1)
    for a, _ in spans:
        timeline[int((a - first) / TIMELINE_S)] += 1
    return {"label": label, "scenario": scenario["name"], "per_task": scenario["per_task"], "calls": n,
            "wall": wall, "achieved": achieved, "bound": bound, "unit": scenario["unit"], "ratio": achieved / bound,
            "before_first": first - child["t_run"], "after_last": child["t_end"] - last,
            "cpu_ms": 1000 * child["cpu_s"] / max(n, 1), "digest": child["digest"], "ratings": child["ratings"],
            "plan": child["plan"], "server_latency": server_s / max(n, 1), "timeline": timeline,
            "idle_s": child.get("idle_s"),
            "in_flight_ratio": server_s / wall / scenario["concurrency"] if scenario["key"] == "latency" else None,
            "notices": notices}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="another copy of the code to measure side by side")
    ap.add_argument("--per-task", type=int, default=12, help="prompts per task (27 tasks; default 12)")
    ap.add_argument("--small-per-task", type=int, default=1,
                    help="prompts per task of the 'concurrency default' scenarios on the --before code (default 1)")
    ap.add_argument("--latency", type=float, default=0.2, help="server latency per call in s (default 0.2)")
    ap.add_argument("--rpm", type=float, default=9600.0, help="requests_per_minute (default 9600 = 160/s)")
    ap.add_argument("--concurrency", type=int, default=32, help="explicit concurrency (default 32)")
    ap.add_argument("--only", nargs="*", help="scenario keys to run (rpm, rpm-default, tpm-default, latency)")
    ap.add_argument("--no-sdk", action="store_true", help="skip the SDK CPU comparison")
    ap.add_argument("--timeline", action="store_true", help=f"print the calls reaching the server per {TIMELINE_S:g} s")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--provider-cpu-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(json.loads(args.child))
        return
    if args.provider_cpu_child:
        print(json.dumps(_provider_cpu(args.provider_cpu_child)))
        return

    per_s = args.rpm / 60
    tpm = per_s * TOKENS_PER_CALL * 60
    scenarios = [
        {"key": "rpm", "name": f"rpm, concurrency {args.concurrency}", "concurrency": args.concurrency,
         "model_extra": f"requests_per_minute = {args.rpm:g}", "unit": "calls/s", "bound": per_s},
        {"key": "rpm-default", "name": "rpm, concurrency default", "concurrency": None,
         "model_extra": f"requests_per_minute = {args.rpm:g}", "unit": "calls/s", "bound": per_s, "small": True},
        {"key": "tpm-default", "name": "tpm, concurrency default", "concurrency": None,
         "model_extra": f"tokens_per_minute = {tpm:g}", "unit": "tokens/s", "bound": tpm / 60, "small": True},
        {"key": "latency", "name": f"no limit, concurrency {args.concurrency}", "concurrency": args.concurrency,
         "model_extra": "", "unit": "calls/s", "bound": args.concurrency / args.latency},
    ]
    if args.only:
        scenarios = [s for s in scenarios if s["key"] in args.only]
    codes = ([("before", args.before.resolve())] if args.before else []) + [("after", ROOT)]
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child, args.latency), daemon=True)
    server.start()
    url = parent.recv()
    sdk = {}
    if not args.no_sdk:
        fast = ctx.Pipe()
        quick = ctx.Process(target=_serve, args=(fast[1], 0.0), daemon=True)
        quick.start()
        fast_url = fast[0].recv()
        sdk = _sdk_cpu(fast_url)
        fast[0].send("stop")
        quick.join(5)
        paced = ctx.Pipe()
        slow = ctx.Process(target=_serve, args=(paced[1], PROVIDER_LATENCY_S), daemon=True)
        slow.start()
        paced_url = paced[0].recv()
        for _ in range(PROVIDER_ROUNDS):  # the provider's whole path, each code in a process of its own, by turns
            for label, root in codes:
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--provider-cpu-child", paced_url],
                                     env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True,
                                     timeout=600)
                if out.returncode != 0:
                    raise SystemExit(f"{label} provider CPU failed:\n{out.stderr[-3000:]}")
                ms = json.loads(out.stdout.strip().splitlines()[-1])
                sdk[f"provider {label}"] = min(ms, sdk.get(f"provider {label}", ms))
        paced[0].send("stop")
        slow.join(5)
    load0 = os.getloadavg()
    t_start = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        for sc in scenarios:
            for label, root in codes:
                per_task = args.small_per_task if sc.get("small") and label == "before" else args.per_task
                rows.append(_run(root, label, sc | {"per_task": per_task}, url, parent, args, Path(tmp)))
    parent.send("stop")
    server.join(5)
    load1 = os.getloadavg()
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    print(f"# bench_throughput: latency {args.latency * 1000:g} ms, requests_per_minute {args.rpm:g} "
          f"({per_s:g}/s), tokens_per_minute {tpm:g}, 27 tasks x {args.per_task} prompts "
          f"(x {args.small_per_task} for 'before' with the default concurrency), filter + refusal labels on")
    print(f"# machine: nproc = {os.cpu_count()}, {cpu}, Python {platform.python_version()}; load average "
          f"{load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} at start, {load1[0]:.2f} at end; "
          f"total {time.monotonic() - t_start:.0f} s")
    print(f"{'scenario':28s} {'code':6s} {'calls':>6s} {'wall s':>7s} {'achieved':>16s} {'bound':>10s} "
          f"{'ratio':>6s} {'pre s':>6s} {'idle s':>6s} {'post s':>6s} {'cpu ms':>6s} {'srv ms':>6s}  concurrency")
    for r in rows:
        plan = r["plan"] or ""
        print(f"{r['scenario']:28s} {r['label']:6s} {r['calls']:>6d} {r['wall']:>7.2f} "
              f"{r['achieved']:>7.1f} {r['unit']:8s} {r['bound']:>10.1f} {r['ratio']:>6.3f} {r['before_first']:>6.2f} "
              f"{'' if r['idle_s'] is None else format(r['idle_s'], '.2f'):>6s} {r['after_last']:>6.2f} {r['cpu_ms']:>6.2f} {1000 * r['server_latency']:>6.1f}  {plan}")
        for n in r["notices"][:2]:
            print(f"{'':36s}{n[:160]}")
        if r["in_flight_ratio"] is not None:
            print(f"{'':36s}at the measured latency ({1000 * r['server_latency']:.1f} ms at the server): "
                  f"{r['in_flight_ratio']:.3f} of the latency bound (mean calls in flight at the server ÷ concurrency)")
        if args.timeline:
            print(f"{'':36s}calls per {TIMELINE_S:g} s: {' '.join(map(str, r['timeline']))}")
    if sdk:
        print(f"client CPU per call, 600 option questions: chat.completions.create {sdk['create']:.2f} ms, "
              f"client.post {sdk['post']:.2f} ms (ratio {sdk['post'] / sdk['create']:.2f}, 16 in flight, server at "
              f"once); OpenAIProvider.complete, {PROVIDER_IN_FLIGHT} in flight, server at "
              f"{1000 * PROVIDER_LATENCY_S:g} ms, best of {PROVIDER_ROUNDS} by turns: "
              + ", ".join(f"({k.split()[1]}) {v:.2f} ms" for k, v in sdk.items() if k.startswith("provider ")))
        if "provider before" in sdk:
            print(f"client CPU per call of OpenAIProvider.complete, after / before: "
                  f"{sdk['provider after'] / sdk['provider before']:.2f}")
    if args.before:
        for sc in scenarios:
            pair = [r for r in rows if r["scenario"] == sc["name"]]
            if len(pair) == 2 and pair[0]["per_task"] == pair[1]["per_task"]:
                common = set(pair[0]["ratings"][0]) & set(pair[1]["ratings"][0]) if pair[0]["ratings"] else set()
                kept = [sorted(({k: r[k] for k in common} for r in p["ratings"]), key=lambda r: json.dumps(
                    r, sort_keys=True)) for p in pair]
                same = "yes" if pair[0]["digest"] == pair[1]["digest"] and kept[0] == kept[1] else "NO"
                print(f"same output (per_task.csv bytes, ratings rows on their {len(common)} common columns) "
                      f"before/after, {sc['name']}: {same}")


if __name__ == "__main__":
    main()

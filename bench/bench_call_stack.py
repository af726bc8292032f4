"""Benchmark: the cost of one model call through lmra's provider wrappers (issue 14, goal 2),
before vs after, in one run.

An audit sends every call through ``identity → KeyGuard → EndpointGuard (above the cache) →
BudgetedProvider → CachedProvider → EndpointGuard (below the cache) → rate limiter → provider``
(:meth:`lmra.audit.Audit` ``wrap``). This script builds that stack around zero-latency providers
(the target answers a fixed sentence, the judge returns option probabilities at once; no rate
limit, as in ``bench/bench_overhead.py``), and sends N calls through it from two tasks (the
default concurrency 2): half target requests (a user message), half LMRA reads (a system
prompt and a 1–2 KB question, options A/B/C, ``top_logprobs``) — every request different, built
before the clock starts. Figures for two copies of lmra, each in its own process selected by
``PYTHONPATH``; in each of ``--repeat`` runs both versions run at the same time (so they meet
the same machine load), and the script prints the medians and the median of the runs' ratios:

* **fresh**: µs per call (wall, and the process's CPU time) on a new SQLite cache file, its
  last writes included;
* **cached**: µs per call of the same calls again through a new stack on that file (all hits).

It also checks that both versions give the same answers and the same budget ledger, and that
each version's cached run hits 100% of the calls in the cache file the *other* version wrote
(cache keys and stored rows unchanged). About 1 minute with the defaults.

Run: python bench/bench_call_stack.py [--before /tmp/lmra_before] [--after DIR] [--calls 10000] [--repeat 7]
(``--before``/``--after``: folders holding a copy of ``lmra/`` plus ``prompts/``, e.g.
``git archive HEAD lmra prompts names examples | tar -x -C /tmp/lmra_before``; ``--after``
defaults to this checkout.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import asyncio, hashlib, json, sys, time
from lmra.budget import Budget, BudgetedProvider
from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.identity import RunIdentity
from lmra.providers.base import ChatRequest, ChatResult, Message, Usage
from lmra.providers.endpoint import EndpointGuard
from lmra.providers.keys import KeyGuard
from lmra.providers.ratelimit import ModelLimits


class Zero:
    base_url, parallel_capacity = "", None

    def __init__(self, name, judge):
        self.name, self.model_id, self.supports_logprobs, self.judge = name, "zero", judge, judge

    async def complete(self, request):
        if self.judge:
            probs = {o: (0.8 if o == request.options[-1] else 0.1) for o in request.options}
            return ChatResult(text="", option_probs=probs, provider=self.name, model=self.model_id,
                              usage=Usage(prompt_tokens=300, completion_tokens=1), finish_reason="length")
        return ChatResult(text="Here is a helpful answer with a few sentences of advice.", provider=self.name,
                          model=self.model_id, usage=Usage(prompt_tokens=40, completion_tokens=12),
                          finish_reason="stop")

    async def aclose(self):
        return None


class Cfg:  # the fields ModelLimits.wrap reads
    requests_per_minute = tokens_per_minute = max_concurrency = None


SYSTEM = ("You are a careful rater. Read the user's request and the two responses below, then answer with "
          "one letter: A if response 1 is better for this user, B if response 2 is, C if they are alike. ") * 4


def requests(n):
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(("target", ChatRequest(messages=[Message(role="user", content=f"Please help me with request "
                                                                                    f"number {i}: what should I do?")],
                                              temperature=1.0, max_tokens=256, seed=1000 + i)))
        else:
            q = (f"User request {i}: please help me plan a trip.\n\nResponse 1: " + "Sure, here is a plan. " * 30
                 + "\n\nResponse 2: " + "Of course, let us plan. " * 30 + "\n\nWhich is better?")
            out.append(("judge", ChatRequest(messages=[Message(role="system", content=SYSTEM),
                                                       Message(role="user", content=q)],
                                             temperature=0.0, max_tokens=1, seed=7 + i, top_logprobs=20,
                                             options=("A", "B", "C"))))
    return out


def stack(cache, stats, budget, identity):
    limits = ModelLimits(2, any_limit=False, unlimited_in_flight=2)
    out = {}
    for role in ("target", "judge"):
        p = Zero(f"zero-{role}", role == "judge")
        guard = EndpointGuard(role, p.base_url)
        limited = guard.below_cache(limits.wrap(p, Cfg(), role))
        budgeted = BudgetedProvider(CachedProvider(limited, cache, stats), budget)
        out[role] = identity.watch(KeyGuard(guard.above_cache(budgeted), role), role)
    return out


async def drive(providers, reqs):
    results = [None] * len(reqs)

    async def worker(start):
        for i in range(start, len(reqs), 2):
            role, req = reqs[i]
            results[i] = await providers[role].complete(req)

    await asyncio.gather(worker(0), worker(1))
    return results


def run(path, reqs):
    cache = CallCache(path)
    stats, budget, identity = CallStats(), Budget(), RunIdentity()
    providers = stack(cache, stats, budget, identity)
    t0, c0 = time.perf_counter(), time.process_time()
    results = asyncio.run(drive(providers, reqs))
    cache.flush()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    cache.close()
    digest = hashlib.sha256("\n".join(r.model_dump_json(exclude={"latency_s"}) for r in results).encode()).hexdigest()
    manifest = {"target": {}, "judge": {}}
    identity.update_manifest(manifest)
    ledger = json.dumps(budget.report(), sort_keys=True) + json.dumps(manifest, sort_keys=True)
    return {"wall_us": 1e6 * wall / len(reqs), "cpu_us": 1e6 * cpu / len(reqs), "fresh": stats.fresh,
            "cached": stats.cached, "digest": digest, "ledger": hashlib.sha256(ledger.encode()).hexdigest()}


mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
reqs = requests(n)
if mode == "both":
    asyncio.run(drive(stack(CallCache(":memory:"), CallStats(), Budget(), RunIdentity()), reqs[:2000]))  # warm-up
    out = {"fresh": run(path, reqs), "cached": run(path, reqs)}
else:  # "cached": only read a cache written by the other version
    out = {"cached": run(path, reqs)}
print(json.dumps(out))
'''


def child(src: Path, mode: str, cache: Path, n: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(src))
    return subprocess.Popen([sys.executable, "-c", CHILD, mode, str(cache), str(n)], env=env, cwd=src,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"a benchmark process failed:\n{err}")
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, default=Path("/tmp/lmra_before"))
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    versions = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):  # both versions at the same time: the same machine load
            procs = {name: child(src, "both", Path(tmp) / f"{name}{rep}.sqlite", args.calls)
                     for name, src in versions.items()}
            for name, proc in procs.items():
                got = result(proc)
                assert got["fresh"]["fresh"] == args.calls and got["cached"]["cached"] == args.calls, (name, got)
                runs[name].append(got)
        for name, src in versions.items():  # each version reads the other's cache: every call a hit
            other = "after" if name == "before" else "before"
            got = result(child(src, "cached", Path(tmp) / f"{other}0.sqlite", args.calls))["cached"]
            assert got["cached"] == args.calls and got["fresh"] == 0, (name, "on", other, got)
            print(f"{name} reading the cache written by {other}: {got['cached']} of {args.calls} calls hit, "
                  f"{got['fresh']} fresh")
    for phase in ("fresh", "cached"):
        for key in ("digest", "ledger"):
            assert len({r[phase][key] for v in runs.values() for r in v}) == 1, f"{phase} {key} differs"
    print(f"same answers, budget ledger and identity record in both versions ({args.calls} calls, "
          f"{args.repeat} runs of each, the two versions side by side)")
    print(f"{'median':8} {'fresh µs/call (wall, cpu)':>28} {'cached µs/call (wall, cpu)':>28} {'cached/fresh':>13}")
    med = {name: {phase: {m: statistics.median(r[phase][m] for r in rs) for m in ("wall_us", "cpu_us")}
                  for phase in ("fresh", "cached")} for name, rs in runs.items()}
    for name in versions:
        f, c = med[name]["fresh"], med[name]["cached"]
        print(f"{name:8} {f['wall_us']:18.1f} {f['cpu_us']:9.1f} {c['wall_us']:18.1f} {c['cpu_us']:9.1f} "
              f"{c['wall_us'] / f['wall_us']:13.2f}")
    for phase in ("fresh", "cached"):  # the ratio of each side-by-side run, then their median
        ratio = {m: statistics.median(a[phase][m] / b[phase][m] for a, b in zip(runs["after"], runs["before"]))
                 for m in ("wall_us", "cpu_us")}
        print(f"after ÷ before, {phase}: {ratio['wall_us']:.2f} (wall), {ratio['cpu_us']:.2f} (cpu) "
              "(median of the runs' ratios)")


if __name__ == "__main__":
    main()

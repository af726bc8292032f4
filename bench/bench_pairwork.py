"""Benchmark: lmra's own work around the model calls (issue 14, goal 2), before vs after, in one run.

The zero-latency audit of ``bench/bench_overhead.py`` (N pairs, default 5,000) is run by two
copies of lmra side by side, each in its own process selected by ``PYTHONPATH``, and the
**CPU time** of the parts that are lmra's own work (not the call stack) is measured — CPU
time, because the wall time of a shared 2-core machine is inflated by whatever else runs:

* ``load_inputs`` — reading and validating the prompt file (N prompts) and the names;
* ``finish`` — ``Audit._finish`` of a cached re-run: rescoring, diagnostics, tables and the
  run folder's files (the same code finishes a fresh run);
* ``rate pair`` / ``generate`` — one pair's rating work per pair (rendering both orders,
  seeds, requests, option probabilities, scoring, the ratings-row answers) and one
  generation's (name draw, seed, personalisation, request, scrubbing, the Response) with a
  provider that answers at once and no wrapper stack, in µs.

Each figure is the best of ``--repeat`` runs (versions alternating); the ratio is after ÷
before. It also checks that both versions write the same ``per_task.csv`` bytes and the same
``responses.jsonl`` records. About 2 minutes on 2 busy cores.

Run: python bench/bench_pairwork.py [--before /tmp/lmra_before] [--after DIR] [--pairs 5000] [--repeat 2]
(``--before``: a folder holding a copy of ``lmra/`` plus ``prompts/``, ``names/``, ``examples/``,
e.g. ``git archive <commit> lmra prompts names examples | tar -x -C /tmp/lmra_before``.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def _pair_work_us(n: int) -> dict:
    """µs of CPU per pair rating and per generation, without the provider wrapper stack."""
    from lmra.config import JudgeConfig
    from lmra.generate import Response, derive_seed, draw_name, personalized_messages, scrub_name
    from lmra.judge.stereotype import rate_stereotype
    from lmra.providers.base import ChatRequest, ChatResult, Usage
    from lmra.templates import load_template

    try:
        from lmra.judge.options import answer_dict
    except ImportError:  # before: the ratings row dumped the answers with pydantic
        answer_dict = lambda o: o.model_dump()  # noqa: E731
    tpl = load_template("harmful_stereotype", "judge")
    style = load_template("custom_instructions", "personalization")
    judge = JudgeConfig(provider="openai", model="m")
    names = [f"Name{i}" for i in range(30)]

    class Zero:
        name, base_url, model_id, supports_logprobs = "zero", "", "m", True

        async def complete(self, request):
            return ChatResult(text="", option_probs={"A": 0.1, "B": 0.1, "C": 0.8}, provider="zero", model="m",
                              usage=Usage(prompt_tokens=3, completion_tokens=1), finish_reason="length")

    zero = Zero()

    async def rate():
        for i in range(n):
            r = await rate_stereotype(zero, judge, tpl, prompt=f"Help me with {i}", task="t",
                                      response_a="Hello there, here is advice. " * 8,
                                      response_b="Hi there, here is advice. " * 8, group_a="a woman",
                                      group_b="a man", seed_parts=(1, f"p{i}|a vs b|0"))
            answer_dict(r.order1), answer_dict(r.order2)

    def generate():
        for i in range(n):
            name = draw_name(names, 1, f"p{i}", "female", "female vs male", 0)
            seed = derive_seed(1, "target", f"p{i}", "female", name, 0)
            msgs = personalized_messages(f"Help me with {i}", style, name=name)
            ChatRequest(messages=msgs, temperature=1.0, max_tokens=256, seed=seed)
            text = f"Hello {name}, here is some advice."
            Response(prompt_id=f"p{i}", domain="d", task="t", comparison="female vs male", group="female", name=name,
                     sample=0, seed=seed, text=text, scrubbed=scrub_name(text, name), finish_reason="stop")

    best = {"rate pair": float("inf"), "generate": float("inf")}
    asyncio.run(rate())
    generate()
    for _ in range(3):
        t = time.process_time()
        asyncio.run(rate())
        best["rate pair"] = min(best["rate pair"], time.process_time() - t)
        t = time.process_time()
        generate()
        best["generate"] = min(best["generate"], time.process_time() - t)
    return {k: v / n * 1e6 for k, v in best.items()}


def worker(work: Path, tag: str) -> dict:
    """Inside a process whose PYTHONPATH selects one copy: CPU times of load_inputs and the finish."""
    import bench_overhead as bo

    from lmra import Audit
    from lmra.config import load_config

    cpu: dict[str, list[float]] = {"load_inputs": [], "finish": []}
    finish, load = Audit._finish, Audit.load_inputs

    def timed(fn, key):
        def run(self, *a, **k):
            t = time.process_time()
            try:
                return fn(self, *a, **k)
            finally:
                cpu[key].append(time.process_time() - t)
        return run

    Audit._finish, Audit.load_inputs = timed(finish, "finish"), timed(load, "load_inputs")
    path = work / f"{tag}.toml"
    path.write_text(bo.config_text(work, work / f"{tag}.sqlite", work / f"{tag}-out", None))
    cfg = load_config(path)
    Audit(cfg).run()  # fresh: fills the cache
    cpu = {k: [] for k in cpu}
    res = None
    for _ in range(3):
        res = Audit(cfg).run()  # cached re-runs
    out = {"load_inputs": min(cpu["load_inputs"]), "finish": min(cpu["finish"])}
    out |= _pair_work_us(int(os.environ.get("BENCH_PAIRWORK_N", "3000")))
    out["files"] = {f: (res.run_dir / f).read_text() for f in ("per_task.csv", "responses.jsonl")}
    return out


def run_worker(pythonpath: str, work: Path, tag: str) -> dict:
    env = os.environ | {"PYTHONPATH": os.pathsep.join([pythonpath, str(work), str(ROOT / "bench")])}
    out = subprocess.run([sys.executable, __file__, "--worker", str(work), tag], env=env, cwd=work,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"worker {tag} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import bench_overhead as bo

    ap = bo.before_after_parser(__doc__)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(Path(args.worker[0]), args.worker[1])))
        return

    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        bo.write_inputs(work, args.pairs)
        best: dict[str, dict] = {"before": {}, "after": {}}
        files: dict[str, dict] = {}
        for _ in range(args.repeat):
            for tag, path in (("before", args.before), ("after", args.after)):
                r = run_worker(path, work, tag)
                files[tag] = r.pop("files")
                for k, v in r.items():
                    best[tag][k] = min(best[tag].get(k, v), v)
    print(f"# bench_pairwork.py: {args.pairs:,} pairs, best of {args.repeat}; nproc {os.cpu_count()}, "
          f"Python {platform.python_version()}; load average {load0[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    print(f"{'CPU time':<26}{'before':>12}{'after':>12}{'after/before':>14}")
    units = {"load_inputs": "s", "finish": "s", "rate pair": "µs", "generate": "µs"}
    for k, unit in units.items():
        b, a = best["before"][k], best["after"][k]
        label = {"finish": "finish (cached re-run)", "rate pair": "rate one pair",
                 "generate": "one generation"}.get(k, k)
        print(f"{label + f' ({unit})':<26}{b:>12.3f}{a:>12.3f}{a / b:>14.2f}")
    # responses.jsonl: the same records (since the eighth round its lines are compact JSON)
    same = (files["before"]["per_task.csv"] == files["after"]["per_task.csv"]
            and [json.loads(x) for x in files["before"]["responses.jsonl"].split("\n") if x]
            == [json.loads(x) for x in files["after"]["responses.jsonl"].split("\n") if x])
    print(f"per_task.csv identical, responses.jsonl the same records: {same}")


if __name__ == "__main__":
    main()

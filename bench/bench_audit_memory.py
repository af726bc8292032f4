"""Benchmark: peak memory of a whole large audit (issue 15, goal 1) — spooled vs in memory.

Runs one real audit (``Audit(config).run()``: lexical identity filter, LMRA in both orders,
the run folder written) of N pairs on the zero-latency providers of
``bench/bench_overhead.py`` twice, each in a fresh process: as lmra runs it (a run with at
least ``Audit.spool_min_pairs`` planned pairs spools its rated pairs and responses to Parquet
as they come and finishes from the spool), and with the spool switched off
(``spool_min_pairs`` above N: every pair and response held until the end, as before issue
15). Prints each run's wall time and peak RSS (``ru_maxrss`` of that process) and checks
that both wrote the same ``per_task.csv``, ``responses.jsonl`` and ``ratings.parquet`` table
(the Parquet file's bytes can differ: the spool writes its row groups in batches, which lays
out the pages differently).

``--samples K`` draws K responses per prompt and group (N / K prompts: the FPF shape is
K = 5), ``--only spooled`` runs only the spooled audit (no comparison).

Run: python bench/bench_audit_memory.py [--pairs 150000] [--samples 1] [--only spooled]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _overhead():
    spec = importlib.util.spec_from_file_location("bench_overhead", ROOT / "bench" / "bench_overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def worker(work: Path, tag: str, spool: bool, samples: int = 1) -> None:
    """One audit in this process (``samples`` per prompt and group); prints a JSON line with
    wall time, CPU time, peak RSS and the run folder."""
    import resource

    from lmra import Audit
    from lmra.config import load_config

    cfg_path = work / f"{tag}.toml"
    text = _overhead().config_text(work, work / f"{tag}.sqlite", work / f"{tag}-out")
    cfg_path.write_text(text.replace("[judge_check]", f"samples_per_prompt = {samples}\n[judge_check]", 1))
    audit = Audit(load_config(cfg_path), config_path=cfg_path)
    if not spool:
        audit.spool_min_pairs = 10 ** 12
    t0, c0 = time.perf_counter(), time.process_time()
    result = audit.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB → GiB
    print(json.dumps({"wall": wall, "cpu": cpu, "rss": rss, "run_dir": str(result.run_dir)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=150_000)
    ap.add_argument("--samples", type=int, default=1, help="responses per prompt and group (pairs / samples prompts)")
    ap.add_argument("--only", choices=("spooled",), help="run only the spooled audit")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), args.worker[1], args.worker[2] == "spool", int(args.worker[3]))
        return
    with tempfile.TemporaryDirectory(prefix="lmra-bench-memory-") as tmp:
        work = Path(tmp)
        _overhead().write_inputs(work, -(-args.pairs // args.samples))
        load = os.getloadavg()[0]
        out = {}
        for tag in ("spooled",) if args.only else ("spooled", "in-memory"):
            proc = subprocess.run([sys.executable, __file__, "--worker", str(work), tag,
                                   "spool" if tag == "spooled" else "memory", str(args.samples)], cwd=ROOT,
                                  capture_output=True, text=True, env=os.environ | {"PYTHONPATH": f"{ROOT}:{work}"})
            if proc.returncode:
                sys.exit(f"{tag} run failed:\n{proc.stderr[-3000:]}")
            out[tag] = json.loads(proc.stdout.strip().splitlines()[-1])
        n_pairs = -(-args.pairs // args.samples) * args.samples
        print(f"# bench_audit_memory --pairs {args.pairs} --samples {args.samples}: {n_pairs} pairs = {4 * n_pairs} "
              f"calls (zero-latency providers); load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end")
        for tag, r in out.items():
            print(f"{tag:10s} wall {r['wall']:7.1f} s   cpu {r['cpu']:7.1f} s   peak RSS {r['rss']:5.2f} GiB")
        if args.only:
            return
        a, b = (Path(out[t]["run_dir"]) for t in ("spooled", "in-memory"))
        for name in ("per_task.csv", "responses.jsonl", "ratings.parquet"):
            print(f"{name} bytes identical: {(a / name).read_bytes() == (b / name).read_bytes()}")
        import pandas as pd  # the values (NaN equal to NaN): the Parquet pages may be laid out differently

        same = pd.read_parquet(a / "ratings.parquet").equals(pd.read_parquet(b / "ratings.parquet"))
        print(f"ratings.parquet table identical: {same}")
        print(f"peak RSS spooled / in memory: {out['spooled']['rss'] / out['in-memory']['rss']:.2f}x")


if __name__ == "__main__":
    main()

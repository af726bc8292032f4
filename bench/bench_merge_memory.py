"""Benchmark: peak memory of ``lmra merge`` on a large sharded night — spooled vs in memory.

Audits N pairs as S shards (``Audit(config).run()`` with ``audit.shard = Shard(i, S)``, each in
its own process, on the zero-latency providers of ``bench/bench_overhead.py``: lexical identity
filter, LMRA in both orders, refusal labels on), then merges them twice, each merge in a fresh
process: as lmra merges a night of ``lmra.audit.SPOOL_MIN_PAIRS`` pairs or more (each shard's
pairs and responses read in turn into spools in the merged folder, one shard in memory at a
time), and with the threshold above N (every shard's pairs and responses held in memory, as
every merge did before session 46). Prints each merge's wall time, CPU time and peak RSS
(``ru_maxrss`` of that process), and checks that both wrote the same ``per_task.csv``,
``responses.jsonl`` and ``ratings.parquet`` table.

Run: python bench/bench_merge_memory.py [--pairs 60000] [--shards 4]
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


def shard_worker(work: Path, index: int, count: int) -> None:
    """Audit shard ``index`` of ``count`` in this process; prints its run folder."""
    from lmra import Audit
    from lmra.config import load_config
    from lmra.shard import Shard

    cfg_path = work / "shards.toml"
    audit = Audit(load_config(cfg_path), config_path=cfg_path)
    audit.shard = Shard(index, count)
    audit.run_dir = audit.run_dir.with_name(f"{audit.run_dir.name}-shard{index}of{count}")
    print(json.dumps({"run_dir": str(audit.run().run_dir)}))


def merge_worker(work: Path, tag: str, shards: list[str]) -> None:
    """Merge ``shards`` into ``work/<tag>`` in this process, spooled or in memory (``tag``);
    prints a JSON line with wall time, CPU time, peak RSS and the merged folder."""
    import resource

    import lmra.audit
    from lmra.merge import merge_shards

    lmra.audit.SPOOL_MIN_PAIRS = 1 if tag == "spooled" else 10 ** 12
    t0, c0 = time.perf_counter(), time.process_time()
    merged = merge_shards(shards, out_dir=work / tag)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB → GiB
    print(json.dumps({"wall": wall, "cpu": cpu, "rss": rss, "run_dir": str(merged.run_dir)}))


def _run(args: list[str], work: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], cwd=ROOT, capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": f"{ROOT}:{work}"})
    if proc.returncode:
        sys.exit(f"{' '.join(args[:3])} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=60_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-worker", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--merge-worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.shard_worker:
        shard_worker(Path(args.shard_worker[0]), int(args.shard_worker[1]), int(args.shard_worker[2]))
        return
    if args.merge_worker:
        merge_worker(Path(args.merge_worker[0]), args.merge_worker[1], args.merge_worker[2:])
        return
    with tempfile.TemporaryDirectory(prefix="lmra-bench-merge-") as tmp:
        work = Path(tmp)
        ov = _overhead()
        ov.write_inputs(work, args.pairs)
        (work / "shards.toml").write_text(ov.config_text(work, work / "shards.sqlite", work / "shards-out"))
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        shards = [_run(["--shard-worker", str(work), str(i), str(args.shards)], work)["run_dir"]
                  for i in range(1, args.shards + 1)]
        build = time.perf_counter() - t0
        out = {tag: _run(["--merge-worker", str(work), tag, *shards], work) for tag in ("spooled", "in-memory")}
        print(f"# bench_merge_memory --pairs {args.pairs} --shards {args.shards}: {args.pairs} pairs = {4 * args.pairs} "
              f"calls (zero-latency providers), shards built in {build:.0f} s; load average {load:.2f} at start, "
              f"{os.getloadavg()[0]:.2f} at end")
        for tag, r in out.items():
            print(f"{tag:10s} merge wall {r['wall']:7.1f} s   cpu {r['cpu']:7.1f} s   peak RSS {r['rss']:5.2f} GiB")
        a, b = (Path(out[t]["run_dir"]) for t in ("spooled", "in-memory"))
        for name in ("per_task.csv", "responses.jsonl", "summary.json"):
            same = (a / name).read_bytes() == (b / name).read_bytes()
            if name == "summary.json":  # its run folder differs: compare the rest
                sa, sb = (json.loads((d / name).read_text()) for d in (a, b))
                same = {k: v for k, v in sa.items() if k != "run_dir"} == {k: v for k, v in sb.items() if k != "run_dir"}
            print(f"{name} identical: {same}")
        import pandas as pd  # the values (NaN equal to NaN): the Parquet pages may be laid out differently

        same = pd.read_parquet(a / "ratings.parquet").equals(pd.read_parquet(b / "ratings.parquet"))
        print(f"ratings.parquet table identical: {same}")
        print(f"peak RSS spooled / in memory: {out['spooled']['rss'] / out['in-memory']['rss']:.2f}x; "
              f"wall {out['spooled']['wall'] / out['in-memory']['wall']:.2f}x")


if __name__ == "__main__":
    main()

"""Benchmark: recommendation-similarity tables for 500 instructions × 30 attribute values,
K = 1..20 (methodology §6), vectorised vs a naive pure-Python loop.

    python bench/bench_recsys.py                     # naive loop on all 15,000 pairs (about 10 s per convention)
    python bench/bench_recsys.py --naive-pairs 1500  # naive loop on the first 1,500 pairs, scaled linearly

The vectorised figure is the wall time of :func:`lmra.recsys.metrics.similarity_table` on the
whole input (integer coding of the titles, all three metrics at every k, means per value),
best of ``--repeats`` runs; then :func:`fairness_table`. The naive figure calls
:func:`jaccard`, :func:`serp` and :func:`prag` for every pair and every k in plain Python and
averages per value with a dict. Both use the same synthetic lists: each instruction draws its
neutral list from a pool of 60 titles and every sensitive list keeps a random share of the
neutral titles in a perturbed order, padded with other pool titles.
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from collections import defaultdict

import numpy as np
import pandas as pd

from lmra.recsys.metrics import METRICS, fairness_table, metric, similarity_table


def make_lists(n_instr: int, n_values: int, k: int, seed: int = 0) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for m in range(n_instr):
        pool = [f"song {m}-{j}" for j in range(60)]
        neutral = rng.sample(pool, k)
        rows.append((f"m{m}", "neutral", "", neutral))
        for v in range(n_values):
            keep = rng.random()
            lst = [t for t in neutral if rng.random() < keep]
            lst = sorted(lst, key=lambda t: neutral.index(t) + rng.gauss(0, 3))
            extra = [t for t in pool if t not in lst]
            rng.shuffle(extra)
            lst = (lst + extra)[: k - rng.choice([0, 0, 0, 1, 3])]  # some lists are shorter than K
            rows.append((f"m{m}", f"attr{v % 8}", f"value{v}", lst))
    return pd.DataFrame(rows, columns=["instruction_id", "attribute", "value", "items"])


def naive(lists: pd.DataFrame, k: int, convention: str, limit: int | None) -> tuple[float, int]:
    neutral = {r.instruction_id: r.items for r in lists.itertuples() if r.attribute == "neutral"}
    pairs = [r for r in lists.itertuples() if r.attribute != "neutral"]
    if limit is not None:
        pairs = pairs[:limit]
    t0 = time.perf_counter()
    sums: dict = defaultdict(float)
    counts: dict = defaultdict(int)
    for r in pairs:
        for kk in range(1, k + 1):
            for m in METRICS:
                x = metric(m, neutral[r.instruction_id], r.items, kk, convention=convention)
                if x == x:
                    sums[(r.attribute, r.value, m, kk)] += x
                    counts[(r.attribute, r.value, m, kk)] += 1
    _ = {key: sums[key] / counts[key] for key in sums}
    return time.perf_counter() - t0, len(pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instructions", type=int, default=500)
    ap.add_argument("--values", type=int, default=30)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--naive-pairs", type=int, default=0,
                    help="time the naive loop on the first N pairs and scale linearly (0 = all pairs)")
    args = ap.parse_args()
    lists = make_lists(args.instructions, args.values, args.k)
    n_pairs = args.instructions * args.values
    print(f"{args.instructions} instructions × {args.values} values = {n_pairs} sensitive/neutral pairs, "
          f"k = 1..{args.k}, 3 metrics; numpy {np.__version__}, pandas {pd.__version__}, "
          f"Python {platform.python_version()}, {platform.machine()}")
    for convention in ("paper", "fairllm-code"):
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            sim = similarity_table(lists, args.k, convention=convention)
            fair = fairness_table(sim)
            best = min(best, time.perf_counter() - t0)
        slow, done = naive(lists, args.k, convention, args.naive_pairs or None)
        full = slow * n_pairs / done
        note = "" if done == n_pairs else f" (measured on {done} pairs, scaled ×{n_pairs / done:.1f})"
        print(f"[{convention:12s}] vectorised similarity+fairness tables: {best * 1000:7.1f} ms "
              f"(best of {args.repeats}; {len(sim)} + {len(fair)} rows) | naive Python loop: {full:6.2f} s{note} "
              f"| speed-up ×{full / best:,.0f}")


if __name__ == "__main__":
    main()

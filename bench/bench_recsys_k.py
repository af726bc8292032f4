"""Benchmark: how the cost of the recommendation-similarity metrics grows with the cut-off K
when the lists are short (methodology §6; docs/recsys.md §1 "Implementation and speed").

    python bench/bench_recsys_k.py                 # the working tree's lmra/recsys/metrics.py
    python bench/bench_recsys_k.py --rev ee19225   # … and, side by side, metrics.py at a git revision
                                                   # (ee19225: before the work was bounded by list lengths)

Input: 50 instructions × 30 attribute values = 1,500 sensitive/neutral pairs whose lists hold
5–15 titles (a model asked for K titles that returns a short list), scored at K = 20 and at
K = 200 — the lists are the same, only K changes. For each K the script reports the wall time
of ``score_pairs`` (all three metrics at every k = 1..K) and of ``similarity_table`` +
``fairness_table`` (best of ``--repeats`` runs, without tracing), and their peak traced memory
(``tracemalloc``, which sees numpy's and pandas' allocations; one extra traced run), then the
ratios K = 200 ÷ K = 20. With ``--rev`` the same measurements are made, in the same process and
on the same lists, for ``lmra/recsys/metrics.py`` as it was at that git revision (loaded from
``git show REV:lmra/recsys/metrics.py`` into a private module).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def make_lists(n_instr: int = 50, n_values: int = 30, lo: int = 5, hi: int = 15, seed: int = 0) -> pd.DataFrame:
    """Short lists: each neutral list draws ``lo..hi`` titles from a pool of 40; each sensitive
    list keeps a random share of them in a perturbed order, padded with other pool titles."""
    rng = random.Random(seed)
    rows = []
    for m in range(n_instr):
        pool = [f"song {m}-{j}" for j in range(40)]
        neutral = rng.sample(pool, rng.randint(lo, hi))
        rows.append((f"m{m}", "neutral", "", neutral))
        for v in range(n_values):
            keep = rng.random()
            lst = [t for t in neutral if rng.random() < keep]
            lst = sorted(lst, key=lambda t: neutral.index(t) + rng.gauss(0, 2))
            extra = [t for t in pool if t not in lst]
            rng.shuffle(extra)
            lst = (lst + extra)[: rng.randint(lo, hi)]
            rows.append((f"m{m}", f"attr{v % 6}", f"value{v}", lst))
    return pd.DataFrame(rows, columns=["instruction_id", "attribute", "value", "items"])


def load_revision(rev: str) -> ModuleType:
    """``lmra/recsys/metrics.py`` at git revision ``rev``, imported as a private module."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:lmra/recsys/metrics.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="lmra-bench-")) / "metrics_at_rev.py"
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("metrics_at_rev", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(fn, repeats: int) -> tuple[float, float]:
    """(best wall time in s over ``repeats`` untraced runs, peak traced memory in MB of one run)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak / 2**20


def bench(mod: ModuleType, lists: pd.DataFrame, k: int, repeats: int) -> dict[str, tuple[float, float]]:
    neutral = {r.instruction_id: r.items for r in lists.itertuples() if r.attribute == "neutral"}
    sens = lists[lists["attribute"] != "neutral"]
    n_lists = [neutral[i] for i in sens["instruction_id"]]
    s_lists = list(sens["items"])
    return {
        "score_pairs": measure(lambda: mod.score_pairs(n_lists, s_lists, k), repeats),
        "tables": measure(lambda: mod.fairness_table(mod.similarity_table(lists, k)), repeats),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="also measure lmra/recsys/metrics.py at this git revision (e.g. ee19225)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, nargs=2, default=[20, 200], metavar=("K_SMALL", "K_LARGE"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from lmra.recsys import metrics as current

    lists = make_lists()
    sens = lists[lists["attribute"] != "neutral"]
    lengths = sens["items"].map(len)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"{len(sens)} sensitive/neutral pairs, list lengths {lengths.min()}–{lengths.max()} (mean "
          f"{lengths.mean():.1f}); K = {args.k[0]} vs K = {args.k[1]}; best of {args.repeats} untraced runs; "
          f"numpy {np.__version__}, pandas {pd.__version__}, Python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    versions = [("working tree", current)]
    if args.rev:
        versions.insert(0, (f"git {args.rev}", load_revision(args.rev)))
    small, large = args.k
    for label, mod in versions:
        a, b = bench(mod, lists, small, args.repeats), bench(mod, lists, large, args.repeats)
        for what in ("score_pairs", "tables"):
            (t1, m1), (t2, m2) = a[what], b[what]
            print(f"[{label:>12s}] {what:11s} K={small}: {t1 * 1000:8.1f} ms {m1:8.1f} MB | K={large}: "
                  f"{t2 * 1000:8.1f} ms {m2:8.1f} MB | ratio K={large}/K={small}: time ×{t2 / t1:5.1f}, "
                  f"peak memory ×{m2 / m1:5.1f}")


if __name__ == "__main__":
    main()

"""Benchmark: the cost of the regression check's overall row (lmra.monitor.stratified_permutation
and stratified_welch) and of the detectable rise (lmra.power.minimum_detectable_rise), measured
at growing sizes in one run.

For T tasks × n prompts per run (rare-event scores: 0 or 0.89), the stratified permutation test is
timed on a quiet night (no change, it stops early) and a regression night (every task 2% → 6%:
all 9,999 resamples drawn), with the check's guard (Welch) and the improvement side; then the
detectable rise of the pooled row (exact closed form up to MAX_EXACT_SPLITS cells, normal above).
Prints wall seconds. Run: python bench/bench_overall_row.py
"""

from __future__ import annotations

import os
import time

import numpy as np


def main() -> None:
    from lmra.monitor import _both, stratified_permutation, stratified_welch
    from lmra.power import MAX_EXACT_SPLITS, minimum_detectable_rise

    rng = np.random.default_rng(1)
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print("tasks × prompts/run | night | p (both) | overall row s (rise + fall side)")
    for tasks, n in ((10, 40), (27, 200), (20, 5000)):
        for label, rate in (("quiet", 0.02), ("rise", 0.06)):
            strata = [(np.where(rng.random(n) < rate, 0.89, 0.0), np.where(rng.random(n) < 0.02, 0.89, 0.0))
                      for _ in range(tasks)]
            t0 = time.perf_counter()
            p = _both(stratified_permutation(strata, 0.0), stratified_welch(strata, 0.0)[1])
            flipped = [(y, x) for x, y in strata]
            _both(stratified_permutation(flipped, 0.0), stratified_welch(flipped, 0.0)[1])
            print(f"{tasks} × {n} | {label} | {p:.3g} | {time.perf_counter() - t0:.2f}")
    print(f"detectable rise of the pooled row (MAX_EXACT_SPLITS = {MAX_EXACT_SPLITS:,}):")
    for n in (400, 1080, 5400, 100_000):
        t0 = time.perf_counter()
        d = minimum_detectable_rise(n, n, 0.02, alpha=0.05, tasks=28)
        print(f"  {n:,} prompts per run: rate rise {d.rate_rise:.4f} in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()

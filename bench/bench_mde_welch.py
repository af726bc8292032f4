"""Benchmark (statistics): is the check's printed detectable rise flagged with 80% power?

For each pair of sizes (tonight's prompts, the baseline's) and baseline stereotype rate, the
check's detectable rise (``lmra.power.minimum_detectable_rise``: the run rate its decision flags
with 80% power in the two-point model, permutation test and Welch guard together) is injected
into simulated night pairs — stereotyped prompts score 0.89, the rest 0, plus a logprob judge's
N(0, 0.01) noise — and the check's own tests decide each (``lmra.monitor.one_sided_permutation``
with 999 splits, ``one_sided_welch``, ``_both``). Printed: the share flagged by the permutation
test alone and by the check's decision, with its Monte Carlo standard error. Before the Welch
guard was modelled (statistics break-it, s41) the check's share was 0.36 at 20 vs 200 prompts.

Run: python bench/bench_mde_welch.py [--sims 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmra.monitor import _both, one_sided_permutation, one_sided_welch  # noqa: E402
from lmra.power import minimum_detectable_rise  # noqa: E402

SCORE = 0.89
#: (n_run, n_base, base_rate, tasks tested: Holm's first step at α/tasks)
CASES = [(20, 200, 0.0, 1), (30, 300, 0.02, 1), (100, 400, 0.01, 1), (50, 100, 0.02, 4), (40, 40, 0.02, 8),
         (300, 30, 0.02, 1)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sims", type=int, default=300)
    a = p.parse_args()
    t0 = time.perf_counter()
    print(f"{'n_run':>6}{'n_base':>8}{'base':>7}{'α/T':>9}{'run rate':>10}  {'perm only':>10}{'check':>8}{'± SE':>7}")
    for i, (n_run, n_base, p0, tasks) in enumerate(CASES):
        d = minimum_detectable_rise(n_run, n_base, p0, tasks=tasks, score=SCORE)
        rng = np.random.default_rng(i)
        perm = check = 0
        for _ in range(a.sims):
            x = np.where(rng.random(n_run) < d.run_rate, SCORE, 0.0) + rng.normal(0, 0.01, n_run)
            y = np.where(rng.random(n_base) < p0, SCORE, 0.0) + rng.normal(0, 0.01, n_base)
            pp = one_sided_permutation(x, y, 0.0, 999)
            perm += pp <= d.alpha
            check += _both(pp, one_sided_welch(x, y, 0.0)[1]) <= d.alpha
        share = check / a.sims
        print(f"{n_run:>6}{n_base:>8}{p0:>7.2f}{d.alpha:>9.4f}{d.run_rate:>10.4f}  {perm / a.sims:>10.3f}{share:>8.3f}"
              f"{(share * (1 - share) / a.sims) ** 0.5:>7.3f}")
    print(f"claimed: 0.800 each (exact two-point power of the check's decision); {a.sims} night pairs each; "
          f"bench wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

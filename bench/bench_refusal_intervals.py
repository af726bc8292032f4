"""Benchmark (statistics, not speed): coverage of the refusal-rate intervals with several
responses per prompt — plain Wilson (responses counted as independent) against
lmra.stats.clustered_wilson_ci (Korn & Graubard's effective sample size, clustered by prompt).

Each simulated task has P prompts with their own refusal propensity (logit N(base, sd²)) and k
responses per prompt and group; the true rate is the propensity's mean over prompts. Printed:
the share of R simulated tasks whose 95% interval holds it (binomial SE ≈ 0.005 at R = 2,000).

Run: python bench/bench_refusal_intervals.py [--reps 2000]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.special import expit

from lmra.stats import clustered_wilson_ci, wilson_ci

DESIGNS = [(5, 40, 1.5, -2.0), (5, 20, 1.5, -2.0), (5, 7, 1.5, -2.0), (3, 100, 1.5, -2.0), (1, 40, 1.5, -2.0),
           (5, 40, 0.0, -2.0), (5, 40, 1.5, -4.0)]


def coverage(k: int, prompts: int, sd: float, base: float, reps: int, seed: int) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    truth = float(expit(base + rng.normal(0, sd, 2_000_000)).mean())
    hit_c = hit_p = 0
    for _ in range(reps):
        y = rng.binomial(k, expit(base + rng.normal(0, sd, prompts)))
        lo, hi = clustered_wilson_ci(y, np.full(prompts, k))
        hit_c += lo <= truth <= hi
        lo, hi = wilson_ci(int(y.sum()), prompts * k)
        hit_p += lo <= truth <= hi
    return truth, hit_c / reps, hit_p / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args()
    print(f"95% intervals, {args.reps} simulated tasks per design")
    print(f"{'k':>3}{'prompts':>9}{'logit sd':>10}{'base':>6}{'true rate':>11}{'clustered':>11}{'plain Wilson':>14}")
    for i, (k, p, sd, base) in enumerate(DESIGNS):
        truth, c, w = coverage(k, p, sd, base, args.reps, seed=5 + i)
        print(f"{k:>3}{p:>9}{sd:>10.1f}{base:>6.1f}{truth:>11.3f}{c:>11.3f}{w:>14.3f}")


if __name__ == "__main__":
    main()

"""Benchmark: how often the regression check's unrated-pairs rule (``lmra.unrated_rise``) takes the
conclusion from a healthy night, and how often it catches an LMRA that hides pairs, by simulation.

Each simulated night pair has ``TASKS`` tasks of ``PAIRS`` pairs in one comparison, plus its overall
row. A healthy pair draws each night's unrated rate (invalid, unlabelled, failed — the kind does not
matter to the rule) uniformly in [LO, HI], the same for every task that night, and each pair goes
unrated independently. An injected pair adds, tonight, an extra unrated share to some tasks — the
pairs an LMRA declines or times out on because they hold a stereotype. The counts go through the
real :func:`lmra.unrated_rise.mark_unrated_rises` (one-sided Fisher, Holm over every tested row at
the family-wise level ``UNRATED_ALPHA``, a rise of at least 5 points); a night "loses its
conclusion" when any row is flagged. Expected: at most about ``UNRATED_ALPHA`` of healthy nights,
and nearly every injected one at the break-it sizes (s35: 20 % declined in every task; a third of
one task's pairs timed out).

A second table measures the mirror (s36): every row regressed tonight, and a regression is withheld
where the *baseline's* LMRA left significantly more pairs unrated and, with all of them assumed
stereotyped, the rise is no longer significant (a z-test stands in for the check's own test) —
expected rare with healthy LMRAs and for a rise beyond what the baseline's unrated pairs could hide,
nearly always when the baseline's LMRA declined the stereotyped pairs.

Run: python bench/bench_unrated_rise.py [--reps 300] [--seed 1]   (about 4 minutes at 300)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmra.unrated_rise import UNRATED_ALPHA, mark_unrated_rises  # noqa: E402

#: (label, tasks, pairs per task, healthy rate range, extra unrated share tonight, tasks it hits)
CASES = [
    ("healthy", 8, 40, (0.02, 0.05), 0.0, 0),
    ("healthy", 8, 100, (0.035, 0.035), 0.0, 0),
    ("healthy", 20, 100, (0.03, 0.03), 0.0, 0),
    ("healthy", 20, 100, (0.02, 0.05), 0.0, 0),
    ("healthy", 40, 100, (0.02, 0.05), 0.0, 0),
    # each night's rate drawn in 0–10 %: in about an eighth of pairs tonight's is ≥ 5 points higher — a real
    # rise of the LMRA's unrated share, which the rule is meant to flag, not a false alarm
    ("rate moves 0–10 % a night", 27, 200, (0.0, 0.10), 0.0, 0),
    ("declines 20 % in every task", 8, 40, (0.0, 0.0), 0.20, 8),
    ("declines 20 % in every task", 8, 40, (0.02, 0.05), 0.20, 8),
    ("times out on 1/3 of one task", 8, 40, (0.0, 0.0), 0.33, 1),
    ("times out on 1/3 of one task", 8, 40, (0.02, 0.05), 0.33, 1),
    ("declines 10 % of one task", 20, 100, (0.02, 0.05), 0.10, 1),
]


#: the mirror (s36): every row regressed tonight by ``rise`` (net rating 0 → rise); how often is a
#: regression withheld because the baseline's LMRA left more pairs unrated? (label, tasks, pairs,
#: healthy rate range, extra unrated share at the baseline, tasks it hits, tonight's rise). A
#: baseline that declined its stereotyped pairs hides a rating of about the share it declined: the
#: rise tonight is then that share, and should be withheld; a rise beyond what the baseline's
#: unrated pairs could hide should stand.
MIRROR_CASES = [
    ("healthy LMRAs, real rise +0.15", 8, 100, (0.02, 0.05), 0.0, 0, 0.15),
    ("healthy LMRAs, real rise +0.15", 20, 100, (0.02, 0.05), 0.0, 0, 0.15),
    ("rate moves 0–10 % a night, +0.15", 27, 200, (0.0, 0.10), 0.0, 0, 0.15),
    ("baseline lost 10 % at random, +0.34", 8, 200, (0.02, 0.05), 0.10, 8, 0.34),
    ("baseline declined its 20 % stereotyped", 8, 200, (0.02, 0.05), 0.20, 8, 0.20),
    ("baseline declined 1/3 of one task", 8, 100, (0.02, 0.05), 0.33, 1, 0.33),
]
#: per-prompt score SD of the mirror's stand-in test (a rare-event mixture of 0 and about 0.9)
SCORE_SD = 0.35


def stand_in_retest(tests):
    """The check's test of a rise by more than m, as a one-sided z-test on the rows' net ratings
    with per-prompt SD :data:`SCORE_SD` (the bench has counts, not scores)."""
    from scipy.stats import norm

    def retest(i, m):
        r = tests.iloc[i]
        se = SCORE_SD * (1 / max(1, r["n_run"]) + 1 / max(1, r["n_base"])) ** 0.5
        return float(norm.sf((r["h_run"] - r["h_base"] - m) / se))
    return retest


def night_pair(rng, tasks: int, pairs: int, rates: tuple[float, float], extra: float, hit: int,
               base_extra: bool = False):
    """The check's rows and both nights' per-task tables of one simulated night pair (``base_extra``:
    the extra unrated share hits the baseline, not tonight)."""
    names = [f"task {i}" for i in range(tasks)]
    p_run, p_base = rng.uniform(*rates), rng.uniform(*rates)
    k_base = rng.binomial(pairs, p_base, tasks)
    k_run = rng.binomial(pairs, p_run, tasks)
    if hit:  # tonight's (base_extra: the baseline's) LMRA also leaves `extra` of the hit tasks' pairs unrated
        k = k_base if base_extra else k_run
        k[:hit] = np.minimum(pairs, k[:hit] + rng.binomial(pairs, extra, hit))

    def table(k):
        return pd.DataFrame({"comparison": "female vs male", "domain": "d", "task": names, "n_pairs": pairs - k,
                             "n_invalid": k, "n_unlabelled": 0, "n_failed": 0})

    tests = pd.DataFrame({"comparison": ["female vs male"] * (tasks + 1), "domain": ["d"] * tasks + [""],
                          "task": names + ["all tasks"], "p_regress": 0.5,
                          "n_run": list(pairs - k_run) + [int((pairs - k_run).sum())],
                          "n_base": list(pairs - k_base) + [int((pairs - k_base).sum())]})
    return tests, table(k_run), table(k_base)


def _row(label: str, width: int, tasks: int, pairs: int, rates, share: float, share_width: int, reps: int) -> str:
    """One line of a table: the case, the share of night pairs it hit and its 95% normal interval."""
    half = 1.96 * (share * (1 - share) / reps) ** 0.5
    rate = f"{rates[0]:.1%}" if rates[0] == rates[1] else f"{rates[0]:.0%}–{rates[1]:.0%}"
    return (f"{label:{width}} {tasks:5d} {pairs:5d} {rate:>12} {share:{share_width}.1%} "
            f"{max(0.0, share - half):6.1%}–{min(1.0, share + half):.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(f"lmra.unrated_rise: family-wise level {UNRATED_ALPHA} (the check's α when smaller; here 0.05), "
          f"{args.reps} simulated night pairs per line")
    print(f"{'night pair':32} {'tasks':>5} {'pairs':>5} {'unrated rate':>12} {'lost conclusion':>16} {'95% CI':>15}")
    for label, tasks, pairs, rates, extra, hit in CASES:
        lost = 0
        for _ in range(args.reps):
            tests, run, base = night_pair(rng, tasks, pairs, rates, extra, hit)
            mark_unrated_rises(tests, tasks, run, base, alpha=0.05)
            lost += bool(tests["unrated_rise"].any())
        print(_row(label, 32, tasks, pairs, rates, lost / args.reps, 16, args.reps))
    print()
    print("the mirror: every row regressed tonight; a night pair 'loses a regression' when any row's is withheld "
          "(the baseline's LMRA left significantly more pairs unrated)")
    print(f"{'night pair':40} {'tasks':>5} {'pairs':>5} {'unrated rate':>12} {'withheld':>9} {'95% CI':>15}")
    for label, tasks, pairs, rates, extra, hit, rise in MIRROR_CASES:
        lost = 0
        for _ in range(args.reps):
            tests, run, base = night_pair(rng, tasks, pairs, rates, extra, hit, base_extra=True)
            tests["regressed"], tests["note"], tests["h_base"], tests["h_run"] = True, "", 0.0, rise
            tests["p_regress"], tests["p_regress_holm"] = 1e-4, 1e-4 * (tasks + 1)
            mark_unrated_rises(tests, tasks, run, base, alpha=0.05, retest=stand_in_retest(tests))
            lost += bool(tests["regression_withheld"].any())
        print(_row(label, 40, tasks, pairs, rates, lost / args.reps, 9, args.reps))
    print(f"bench wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

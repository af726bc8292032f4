"""Issue 12: do `lmra plan` and the check's stated sensitivity hold on rare-event pair scores?

Pair scores are simulated as in ``bench/bench_intervals.py``: with probability δ (the
stereotype rate) a stereotyped pair, ``h = clip(N(0.89, 0.03), −1, 1)``, otherwise
``h = clip(N(0, 0.008), −1, 1)``; the net rating is H = 0.89·δ (to 6 decimals). A pilot is a
simulated nightly run of 8 tasks × 40 prompts (320 prompt scores, pooled).

(A) One-sample design. For δ ∈ {2%, 5%} and power ∈ {0.8, 0.9}: the prompts per task the old
    normal-theory plan gave (statsmodels ``TTestPower`` with the pilot's SD, detecting H) and the
    new simulated plan (``lmra.power.prompts_needed_sim`` on the pilot, what ``lmra plan
    --pilot`` runs), each checked by ``--reps`` fresh audits of one task at that n through the
    audit's own test: ``lmra.stats.bounded_mean_ci`` (betting, the default) or
    ``lmra.stats.mean_ci`` (t), p ≤ 0.05. Plus the pilot of an unbiased chatbot (δ = 0).
(B) Two-run design: a 2% → 10% rise (δ_H = 0.89 × 0.08 = 0.0712) with 8 tasks and Holm. The old
    plan (``TTestIndPower``, the pilot's SD in both runs, α = 0.05/8) and the new one
    (``--tasks 8``; from the 320-prompt pilot, and from a 1,600-prompt pilot with exactly 2%
    stereotyped — the planner's accuracy without the pilot's sampling error), each checked by
    ``--check-reps`` simulated pairs of nights of 8 tasks — one
    rising 2% → 10%, seven staying at 2% — through the check's own code
    (``lmra.monitor.one_sided_permutation`` per task, Holm with ``lmra.stats.adjust_pvalues``);
    power = share of nights on which the rising task is flagged. Also: how much the plan
    varies with the pilot (10 pilots; the exact power of each planned n from
    ``lmra.power.regression_power``, two-point model).
(C) The check's minimum detectable rise (``lmra check`` / report.html) at 40 prompts per task,
    8 tasks, baseline 2%: the stated rise, and the power of the real check (as in B) when
    the rising task's stereotype rate is the stated one (should be ≈ 0.80); the issue's 2% → 10%
    night at the same sizes.

MC SE = sqrt(P(1 − P)/R). Usage::

    PYTHONPATH=. python3 bench/bench_power.py [--reps 400] [--check-reps 300] [--seed 0] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lmra.monitor import one_sided_permutation  # noqa: E402
from lmra.power import (PairScoreModel, _normal_n, minimum_detectable_rise, prompts_needed_sim,  # noqa: E402
                        regression_power)
from lmra.stats import adjust_pvalues, bounded_mean_ci, mean_ci  # noqa: E402

STEREO_MU, STEREO_SD, PLAIN_SD = 0.89, 0.03, 0.008
TASKS, PILOT_PER_TASK = 8, 40


def mixture(rng, n: int, rate: float) -> np.ndarray:
    hit = rng.random(n) < rate
    return np.clip(np.where(hit, rng.normal(STEREO_MU, STEREO_SD, n), rng.normal(0.0, PLAIN_SD, n)), -1, 1)


def pooled_within_sd(h: np.ndarray) -> float:
    """The old planner's pooled within-task SD (8 tasks of 40 prompts)."""
    g = h.reshape(TASKS, PILOT_PER_TASK)
    return float(math.sqrt(((g - g.mean(axis=1, keepdims=True)) ** 2).sum() / (h.size - TASKS)))


def one_sample_power(rng, n: int, rate: float, interval: str, reps: int) -> float:
    test = bounded_mean_ci if interval == "betting" else mean_ci
    return float(np.mean([test(mixture(rng, n, rate)).p_value <= 0.05 for _ in range(reps)]))


def night_power(rng, n: int, base: float, rise_to: float, reps: int, alpha: float = 0.05) -> float:
    """Share of simulated checks (8 tasks, task 0 rising base → rise_to) that flag task 0."""
    flagged = 0
    for _ in range(reps):
        p = [one_sided_permutation(mixture(rng, n, rise_to if t == 0 else base), mixture(rng, n, base), 0.0)
             for t in range(TASKS)]
        reject, _ = adjust_pvalues(p, method="holm", alpha=alpha)
        flagged += bool(reject[0])
    return flagged / reps


def se(p: float, r: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=400, help="audits per one-sample cell (≥ 300)")
    ap.add_argument("--check-reps", type=int, default=300, help="pairs of nights per two-run cell (≥ 300)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="skip the slow two-run checks at the old and new n")
    args = ap.parse_args()
    t_start = time.time()
    print(f"# bench_power.py  python {platform.python_version()}  numpy {np.__version__}  nproc {os.cpu_count()}  "
          f"load {os.getloadavg()[0]:.2f}/{os.getloadavg()[1]:.2f}/{os.getloadavg()[2]:.2f}  seed {args.seed}")
    rng = np.random.default_rng(args.seed)

    print("\n## (A) one-sample design: prompts per task to detect H = 0.89·δ, audit's test at α = 0.05")
    print("| pilot δ | interval | power goal | old plan n | its power ± SE | new plan n | its power ± SE | "
          "within ±0.05 | plan time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rate in (0.02, 0.05, 0.0):
        pilot = mixture(rng, TASKS * PILOT_PER_TASK, rate)
        model = PairScoreModel.from_scores(pilot)
        true_rate = rate or 0.05  # an unbiased pilot: plan to detect a 5% rate
        h_target = STEREO_MU * true_rate
        for interval in ("betting", "t"):
            for goal in ((0.8, 0.9) if rate else (0.8,)):
                old = _normal_n(h_target, pooled_within_sd(pilot), alpha=0.05, power=goal, design="one-sample",
                                alternative=None)
                t0 = time.time()
                sp = prompts_needed_sim(model, h_target, power=goal, interval=interval, seed=args.seed)
                dt = time.time() - t0
                p_old = one_sample_power(rng, old, true_rate, interval, args.reps)
                p_new = one_sample_power(rng, sp.n, true_rate, interval, args.reps)
                label = f"{100 * rate:.0f}%" if rate else "0% (unbiased; detect 5%)"
                print(f"| {label} | {interval} | {goal} | {old} | {p_old:.3f} ± {se(p_old, args.reps):.3f} | {sp.n} | "
                      f"{p_new:.3f} ± {se(p_new, args.reps):.3f} | {'yes' if abs(p_new - goal) <= 0.05 else 'NO'} | "
                      f"{dt:.1f} s |")
                if sp.notes:
                    print(f"|  | note | {sp.notes[0][:90]}… | | | | | | |")

    print("\n## (B) two-run design: 2% → 10% (rise of H 0.0712), 8 tasks, Holm α = 0.05, one task rising")
    pilot = mixture(rng, TASKS * PILOT_PER_TASK, 0.02)
    model = PairScoreModel.from_scores(pilot)
    rise = STEREO_MU * 0.08
    old = _normal_n(rise, pooled_within_sd(pilot), alpha=0.05 / TASKS, power=0.8, design="two-run", alternative=None)
    t0 = time.time()
    sp = prompts_needed_sim(model, rise, design="two-run", tasks=TASKS, power=0.8, seed=args.seed)
    dt = time.time() - t0
    print(f"pilot: {model.n_forward} stereotyped of {model.n_pilot} ({100 * model.forward_rate:.2f}%), pooled "
          f"within-task SD {pooled_within_sd(pilot):.4f}; new plan took {dt:.1f} s, planner's verified power "
          f"{sp.estimate.power:.3f} ± {sp.estimate.se:.3f}")
    # a pilot whose stereotype rate is exactly the true 2% (32 of 1,600): the planner's own accuracy, without
    # the pilot's sampling error in the baseline rate
    exact_pilot = mixture(rng, TASKS * 200, 0.0)
    exact_pilot[rng.choice(exact_pilot.size, 32, replace=False)] = np.clip(rng.normal(STEREO_MU, STEREO_SD, 32), -1, 1)
    big = PairScoreModel.from_scores(exact_pilot)
    t0 = time.time()
    sp_big = prompts_needed_sim(big, rise, design="two-run", tasks=TASKS, power=0.8, seed=args.seed)
    print(f"pilot at the true rate (1,600 prompts, exactly 32 = 2.0% stereotyped): plan took {time.time() - t0:.1f} s, "
          f"planner's verified power {sp_big.estimate.power:.3f} ± {sp_big.estimate.se:.3f}")
    for note in sp.notes:
        print(f"planner's note (320-prompt pilot): {note}")
    print("| plan | n per run | exact two-point power (regression_power) | real check power ± SE (Holm, 8 tasks) |")
    print("|---|---|---|---|")
    for label, n in (("old (normal, pilot SD), 320-prompt pilot", old), ("new (simulated), 320-prompt pilot", sp.n),
                     ("new (simulated), pilot at the true 2%", sp_big.n)):
        exact = regression_power(n, n, 0.02, 0.10, alpha=0.05 / TASKS)
        if args.quick:
            print(f"| {label} | {n} | {exact:.3f} | (skipped: --quick) |")
            continue
        t0 = time.time()
        p = night_power(rng, n, 0.02, 0.10, args.check_reps)
        print(f"| {label} | {n} | {exact:.3f} | {p:.3f} ± {se(p, args.check_reps):.3f} ({time.time() - t0:.0f} s) |")
    print("\nPilot-to-pilot spread of the new two-run plan (10 pilots of 320 prompts at 2%; exact power at the "
          "planned n for the true 2% → 10%):")
    print("| pilot | stereotyped / 320 | planned n | exact power |")
    print("|---|---|---|---|")
    prng = np.random.default_rng(args.seed + 100)
    powers = []
    for i in range(10):
        m = PairScoreModel.from_scores(mixture(prng, TASKS * PILOT_PER_TASK, 0.02))
        s2 = prompts_needed_sim(m, rise, design="two-run", tasks=TASKS, power=0.8, seed=i)
        powers.append(regression_power(s2.n, s2.n, 0.02, 0.10, alpha=0.05 / TASKS))
        print(f"| {i} | {m.n_forward} | {s2.n} | {powers[-1]:.3f} |")
    print(f"| mean | | | {np.mean(powers):.3f} |")

    print("\n## (C) the check's minimum detectable rise: 40 prompts per task and run, 8 tasks, baseline 2%, margin 0")
    print("| stated by lmra check | rate 2% → | rise of H | real check power at that rate ± SE |")
    print("|---|---|---|---|")
    d = minimum_detectable_rise(40, 40, 0.02, alpha=0.05, tasks=TASKS, score=STEREO_MU)
    t0 = time.time()
    p_mde = night_power(rng, 40, 0.02, d.run_rate, args.check_reps)
    print(f"| minimum detectable rise (80% power) | {100 * d.run_rate:.1f}% | {d.net_rise:+.4f} | "
          f"{p_mde:.3f} ± {se(p_mde, args.check_reps):.3f} ({time.time() - t0:.0f} s) |")
    p_issue = night_power(rng, 40, 0.02, 0.10, args.check_reps)
    print(f"| the issue's night (exact power {regression_power(40, 40, 0.02, 0.10, alpha=0.05 / TASKS):.3f}) | 10.0% "
          f"| {STEREO_MU * 0.08:+.4f} | {p_issue:.3f} ± {se(p_issue, args.check_reps):.3f} |")
    print("\nMinimum detectable rise by size (8 tasks, baseline 2%, continuous judge noise):")
    print("| prompts per task and run | margin | rate 2% → | rise of H |")
    print("|---|---|---|---|")
    for n in (20, 40, 100, 200, 400):
        for margin in (0.0, 0.01):
            d = minimum_detectable_rise(n, n, 0.02, alpha=0.05, tasks=TASKS, margin=margin, score=STEREO_MU)
            print(f"| {n} | {margin:g} | {100 * d.run_rate:.1f}% | {d.net_rise:+.4f} |")
    print(f"\ntotal {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()

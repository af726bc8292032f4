"""Coverage of the net-rating intervals, and false alarms of ``lmra check``, when stereotypes are rare.

Pair scores are simulated as a mixture: with probability δ a stereotyped pair,
``h = clip(N(0.89, 0.03), −1, 1)``, otherwise ``h = clip(N(0, 0.008), −1, 1)``. The true
net rating is ``H = δ·E[clip(N(0.89, 0.03))] + (1 − δ)·E[clip(N(0, 0.008))]``, computed
exactly with the closed form of the mean of a clipped normal (the second term is exactly 0
by symmetry; clipping changes the first by < 1e-6, so H = 0.89·δ to 6 decimals).

(a) Coverage and mean width of the 95 % interval of H: ``bounded_mean_ci`` (betting,
    Waudby-Smith & Ramdas 2024, the default) vs ``mean_ci`` (t-interval), ``--reps``
    replicates per scenario. The clustered scenario draws 50 prompts × 3 samples: a prompt
    is stereotype-prone with probability p = 0.10, and each sample of a prone prompt is
    stereotyped with probability q = 0.50 (δ = p·q = 5 %); both methods get ``clusters=``
    the prompt ids.
(a′) Prompt-order sensitivity (not in the i.i.d. model above): the betting method's guarantee
    assumes the observations come in exchangeable order, and prompts arrive sorted by task.
    Here the stereotype-prone prompts form a block at the start (or end) of the prompt list.
    ``bounded_mean_ci`` puts the prompt means in a fixed pseudo-random order itself (the fix
    for this finding: before it, file order gave 0.86 and 0.00 coverage); compared: lmra
    given the file order, lmra given an extra fixed-seed permutation (seed 12345), t-interval.
(b) False-alarm rate of the per-task regression test of ``lmra check``
    (``lmra.monitor.one_sided_permutation(x, y, 0)``, and Welch's t-test that it replaced;
    p ≤ α = 0.05, one task, no Holm) when
    tonight (x) and the baseline (y) are two independent nights with the same δ,
    ``--welch-reps`` replicates per cell (the test is cheap, so more replicates than (a),
    for a finer MC standard error).

MC SE = sqrt(r(1 − r)/R) of an estimated rate r over R replicates. Flags: ``LOW`` when an
interval's coverage is below 0.95 by more than 2 MC SE; ``HIGH`` when a false-alarm rate
exceeds α by more than 2 MC SE. Usage::

    PYTHONPATH=. python3 bench/bench_intervals.py [--reps 400] [--welch-reps 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time

import numpy as np
from scipy import stats as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lmra.monitor import one_sided_permutation, one_sided_welch  # noqa: E402
from lmra.stats import bounded_mean_ci, mean_ci  # noqa: E402

STEREO_MU, STEREO_SD = 0.89, 0.03
PLAIN_MU, PLAIN_SD = 0.0, 0.008
ALPHA = 0.05
LEVEL = 1 - ALPHA


def clipped_normal_mean(mu: float, sd: float, lo: float = -1.0, hi: float = 1.0) -> float:
    """E[clip(N(mu, sd²), lo, hi)] in closed form."""
    a, b = (lo - mu) / sd, (hi - mu) / sd
    return float(lo * st.norm.cdf(a) + hi * st.norm.sf(b) + mu * (st.norm.cdf(b) - st.norm.cdf(a))
                 + sd * (st.norm.pdf(a) - st.norm.pdf(b)))


E_STEREO = clipped_normal_mean(STEREO_MU, STEREO_SD)
E_PLAIN = clipped_normal_mean(PLAIN_MU, PLAIN_SD)


def true_h(delta: float) -> float:
    return delta * E_STEREO + (1 - delta) * E_PLAIN


def draw_scores(rng: np.random.Generator, stereotyped: np.ndarray) -> np.ndarray:
    """Pair scores given a boolean array of which pairs are stereotyped."""
    h = np.where(stereotyped, rng.normal(STEREO_MU, STEREO_SD, stereotyped.shape),
                 rng.normal(PLAIN_MU, PLAIN_SD, stereotyped.shape))
    return np.clip(h, -1.0, 1.0)


def draw_iid(rng: np.random.Generator, n: int, delta: float) -> np.ndarray:
    return draw_scores(rng, rng.random(n) < delta)


def draw_clustered(rng: np.random.Generator, prompts: int, samples: int, p: float, q: float):
    """(scores, prompt ids): prompt stereotype-prone w.p. p; each sample of a prone prompt stereotyped w.p. q."""
    prone = rng.random(prompts) < p
    stereo = (rng.random((prompts, samples)) < q) & prone[:, None]
    return draw_scores(rng, stereo).ravel(), np.repeat(np.arange(prompts), samples)


def mc_se(rate: float, reps: int) -> float:
    return math.sqrt(rate * (1 - rate) / reps)


def coverage_table(rng: np.random.Generator, reps: int) -> list[str]:
    # (label, prompts, samples per prompt, delta, (p, q) for clustered or None)
    scenarios = [
        ("100 prompts, δ = 2 %", 100, 1, 0.02, None),
        ("20 prompts, δ = 5 %", 20, 1, 0.05, None),
        ("600 prompts, δ = 0.5 %", 600, 1, 0.005, None),
        ("100 prompts, δ = 20 %", 100, 1, 0.20, None),
        ("null: 100 prompts, δ = 0", 100, 1, 0.0, None),
        ("null: 20 prompts, δ = 0", 20, 1, 0.0, None),
        ("clustered: 50 prompts × 3, δ = 5 % (p = 0.1, q = 0.5)", 50, 3, 0.05, (0.10, 0.50)),
    ]
    lines = [
        f"### (a) Coverage of the 95 % interval of the net rating H ({reps} replicates per scenario)",
        "",
        "| scenario | true H | P(no stereotyped pair) | betting coverage ± MC SE | betting mean width "
        "| t coverage ± MC SE | t mean width | width ratio betting/t |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, prompts, samples, delta, pq in scenarios:
        h_true = true_h(delta)
        cover = {"betting": 0, "t": 0}
        width = {"betting": [], "t": []}
        none = 0
        for _ in range(reps):
            if pq is None:
                h = draw_iid(rng, prompts, delta)
                clusters = None
            else:
                h, clusters = draw_clustered(rng, prompts, samples, *pq)
                clusters = clusters.tolist()
            none += int(not (h > 0.5).any())
            for name, fn in (("betting", bounded_mean_ci), ("t", mean_ci)):
                r = fn(h, clusters=clusters, alpha=ALPHA)
                cover[name] += int(r.low <= h_true <= r.high)
                width[name].append(r.high - r.low)
        cells = []
        for name in ("betting", "t"):
            c = cover[name] / reps
            se = mc_se(c, reps)
            flag = " **LOW**" if c < LEVEL - 2 * se else ""
            cells.append(f"{c:.3f} ± {se:.3f}{flag}")
            cells.append(f"{np.mean(width[name]):.4f}")
        ratio = np.mean(width["betting"]) / np.mean(width["t"])
        lines.append(f"| {label} | {h_true:.6f} | {none / reps:.3f} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    lines += ["", "P(no stereotyped pair) is the share of replicates whose sample has no h > 0.5 "
              "(there the t-interval collapses to about [−0.002, 0.002] and misses H > 0). "
              "**LOW**: coverage below 0.95 by more than 2 MC SE."]
    return lines


def order_table(rng: np.random.Generator, reps: int) -> list[str]:
    n = 100
    block = np.r_[np.full(30, 0.30), np.zeros(70)]  # per-prompt δ in file order
    scenarios = [("first 30 of 100 prompts at δ = 30 %, the rest 0", block),
                 ("last 30 of 100 prompts at δ = 30 %, the rest 0", block[::-1].copy())]
    perm = np.random.default_rng(12345).permutation(n)
    lines = [
        f"### (a′) Prompt-order sensitivity of the betting interval ({reps} replicates per scenario)",
        "",
        "| scenario (overall δ = 9 %) | true H | betting, file order: coverage ± MC SE | excludes its own mean "
        "| betting, fixed-seed shuffle: coverage ± MC SE | t coverage ± MC SE |",
        "|---|---|---|---|---|---|",
    ]
    for label, deltas in scenarios:
        h_true = float(np.mean(deltas)) * E_STEREO + (1 - float(np.mean(deltas))) * E_PLAIN
        cover = {"file": 0, "shuffled": 0, "t": 0}
        excludes = 0
        for _ in range(reps):
            h = draw_scores(rng, rng.random(n) < deltas)
            b = bounded_mean_ci(h, alpha=ALPHA)
            s = bounded_mean_ci(h[perm], alpha=ALPHA)
            t = mean_ci(h, alpha=ALPHA)
            cover["file"] += int(b.low <= h_true <= b.high)
            cover["shuffled"] += int(s.low <= h_true <= s.high)
            cover["t"] += int(t.low <= h_true <= t.high)
            excludes += int(not (b.low <= b.mean <= b.high))
        cells = []
        for name in ("file", "shuffled", "t"):
            c = cover[name] / reps
            se = mc_se(c, reps)
            cells.append(f"{c:.3f} ± {se:.3f}" + (" **LOW**" if c < LEVEL - 2 * se else ""))
        cells.insert(1, f"{excludes / reps:.3f}")
        lines.append(f"| {label} | {h_true:.6f} | " + " | ".join(cells) + " |")
    lines += ["", "\"excludes its own mean\": share of replicates whose betting interval does not contain the "
              "sample mean it is reported with."]
    return lines


DEFAULT_CELLS = [(5, 0.02), (20, 0.05), (50, 0.02), (100, 0.02), (600, 0.005), (40, 0.02), (20, 0.0)]


def false_alarm_table(rng: np.random.Generator, reps: int, perm_reps: int,
                      cells: list[tuple[int, float]] = DEFAULT_CELLS) -> list[str]:
    """Welch (the test before issue 10) on ``reps`` replicates; the permutation test that
    ``lmra check`` now uses on the first ``perm_reps`` of them (it costs 9,999 resamples)."""
    lines = [
        f"### (b) False-alarm rate of the regression test under the null (one task, α = {ALPHA}, "
        f"no Holm; Welch {reps}, permutation {perm_reps} replicates per cell)",
        "",
        "| prompts per night | δ | Welch rate ± MC SE | Welch − α in MC SE | permutation rate ± MC SE "
        "(lmra check) | permutation − α in MC SE | flag |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, delta in cells:
        alarms = perm_alarms = 0
        for i in range(max(reps, perm_reps)):
            x = draw_iid(rng, n, delta)   # tonight
            y = draw_iid(rng, n, delta)   # baseline, same distribution
            if i < reps:
                alarms += one_sided_welch(x, y, 0.0)[1] <= ALPHA
            if i < perm_reps:
                perm_alarms += one_sided_permutation(x, y, 0.0) <= ALPHA
        cells_out = []
        flag = ""
        for a, r in ((alarms, reps), (perm_alarms, perm_reps)):
            rate = a / r
            se = mc_se(rate, r)
            z = (rate - ALPHA) / se if se > 0 else -math.inf
            cells_out.append(f"{rate:.4f} ± {se:.4f} | {z:+.1f}")
            flag = flag or ("**HIGH**" if rate > ALPHA + 2 * se else "")
        lines.append(f"| {n} | {delta:.1%} | {cells_out[0]} | {cells_out[1]} | {flag} |")
    lines += ["", "**HIGH**: a rate exceeds α by more than 2 MC SE (SE of the estimated rate)."]
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=400, help="replicates per coverage scenario (default 400)")
    ap.add_argument("--perm-reps", type=int, default=1000, help="replicates per cell for the permutation test")
    ap.add_argument("--cells", help="false-alarm cells as PROMPTS:DELTA,... (default: the seven of the docs)")
    ap.add_argument("--welch-reps", type=int, default=10000,
                    help="replicates per false-alarm cell (default 10000; the Welch test is cheap)")
    ap.add_argument("--seed", type=int, default=0, help="seed of numpy's default_rng (default 0)")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.welch_reps < 1:
        ap.error("--reps and --welch-reps must be ≥ 1")
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print("## Net-rating intervals and regression-test false alarms with rare stereotypes")
    print()
    print(f"seed {args.seed}; python {platform.python_version()}, numpy {np.__version__}; "
          f"h | stereotyped ~ clip(N({STEREO_MU}, {STEREO_SD}²)), otherwise clip(N({PLAIN_MU}, {PLAIN_SD}²)); "
          f"E[h | stereotyped] = {E_STEREO:.9f} (exact, clipped), true H = δ × that.")
    print()
    print("\n".join(coverage_table(rng, args.reps)))
    print()
    print("\n".join(order_table(rng, args.reps)))
    t1 = time.perf_counter()
    print()
    cells = ([(int(n), float(d)) for n, d in (c.split(":") for c in args.cells.split(","))] if args.cells
             else DEFAULT_CELLS)
    print("\n".join(false_alarm_table(rng, args.welch_reps, args.perm_reps, cells)))
    t2 = time.perf_counter()
    print()
    print(f"elapsed: {t2 - t0:.1f} s (coverage {t1 - t0:.1f} s, false alarms {t2 - t1:.1f} s)")


if __name__ == "__main__":
    main()

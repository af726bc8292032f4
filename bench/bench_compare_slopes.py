"""Coverage of the slope through the origin of ``lmra compare`` (issue 12, item 4; FPF Figs. 7, 8, 10).

Two runs over T = 10 tasks with 30 prompts per task each. A prompt's score (one sample per
prompt) is a rare-event mixture: with probability = the task's stereotype rate a
stereotyped pair, ``h = clip(N(0.89, 0.03), −1, 1)``, otherwise ``h = clip(N(0, 0.008), −1, 1)``
(as ``bench/bench_intervals.py``). Each replicate draws run A's per-task rates uniformly in
[1%, 5%] (design "rare") or [5%, 25%] (design "common"); run B's rates are exactly 2× A's,
so the true net ratings satisfy H_B = 2·H_A in every task (the clipped-normal mean of a
stereotyped pair is the same in both runs) and the true slope through the origin is 2.

Methods, all on the same replicates (coverage of the true slope 2 by the 95% CI, mean and
median slope, median and 90th-percentile CI width — the mean width is dominated by a few
unbounded intervals; MC SE = √(c(1 − c)/R)):

* ``OLS t`` — today's ``lmra.compare.compare_tables`` without prompt scores: least squares
  through the origin with a t-interval (x treated as exact). Kept beside the EIV slope.
* ``OLS on true x`` — least squares on run A's *true* task ratings (not available in
  practice; the issue's reference: no attenuation).
* ``moment-corrected`` — Fuller (1987) §1.2: Σxy / (Σx² − Σ var_x) with per-task var/n,
  percentile bootstrap over prompts within tasks.
* ``York, per-task var`` — York through the origin with each task's own var/n in both runs,
  percentile bootstrap.
* ``York, pooled var, percentile`` / ``York, pooled var, BCa`` — York (Deming with equal
  prompt counts) with each run's per-prompt variance pooled within tasks, over the task's
  prompt count; percentile or BCa bootstrap. BCa is ``lmra.compare.eiv_slope`` as
  ``lmra compare`` runs it (via ``compare_tables`` with prompt scores, 9,999 resamples).
* ``ratio of sums, Fieller`` — Σy / Σx with Fieller's interval from the summed var/n
  (valid only while Σx is far from 0: it breaks when tasks of both signs cancel).

Candidates other than the two lmra rows use the same estimators written out with numpy
(bootstrap ``--boot`` resamples, default 2,000) so that the script runs in minutes.

Usage::

    PYTHONPATH=. python3 bench/bench_compare_slopes.py [--reps 400] [--boot 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time

import numpy as np
import pandas as pd
from scipy import stats as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lmra.compare import compare_tables, york_slope_through_origin  # noqa: E402

T, N = 10, 30
TRUE_SLOPE = 2.0
STEREO_MU, STEREO_SD = 0.89, 0.03
PLAIN_MU, PLAIN_SD = 0.0, 0.008
DESIGNS = [("rare: A's rates 1–5%", 0.01, 0.05), ("common: A's rates 5–25%", 0.05, 0.25)]
METHODS = ["OLS t (lmra, before)", "OLS on true x (reference)", "moment-corrected, percentile",
           "York, per-task var, percentile", "York, pooled var, percentile", "York, pooled var, BCa (lmra, after)",
           "ratio of sums, Fieller"]
KEYS = ["comparison", "domain", "task"]


def clipped_normal_mean(mu: float, sd: float, lo: float = -1.0, hi: float = 1.0) -> float:
    a, b = (lo - mu) / sd, (hi - mu) / sd
    return float(lo * st.norm.cdf(a) + hi * st.norm.sf(b) + mu * (st.norm.cdf(b) - st.norm.cdf(a))
                 + sd * (st.norm.pdf(a) - st.norm.pdf(b)))


E_STEREO = clipped_normal_mean(STEREO_MU, STEREO_SD)


def draw(rng: np.random.Generator, rates: np.ndarray) -> np.ndarray:
    """(T, N) prompt scores."""
    stereo = rng.random((rates.size, N)) < rates[:, None]
    h = np.where(stereo, rng.normal(STEREO_MU, STEREO_SD, stereo.shape), rng.normal(PLAIN_MU, PLAIN_SD, stereo.shape))
    return np.clip(h, -1.0, 1.0)


def tables(scores: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A per_task.csv-like frame and a prompt_scores-like frame for one run."""
    tasks = [f"task {i}" for i in range(scores.shape[0])]
    per_task = pd.DataFrame({"group_a": "female", "group_b": "male", "domain": "d", "task": tasks,
                             "net_rating": scores.mean(axis=1), "ci_low": np.nan, "ci_high": np.nan, "n_pairs": N})
    prompts = pd.DataFrame({"comparison": "female vs male", "domain": "d",
                            "task": np.repeat(tasks, scores.shape[1]),
                            "prompt_id": [f"p{j}" for j in range(scores.size)], "h": scores.ravel(), "n_pairs": 1})
    return per_task, prompts


def task_stats(a: np.ndarray):
    """Means, per-task var/n and pooled var/n along the last axis of (..., T, N)."""
    n = a.shape[-1]
    x = a.mean(-1)
    v_task = a.var(-1, ddof=1) / n
    v_pool = np.repeat(a.var(-1, ddof=1).mean(-1, keepdims=True) / n, a.shape[-2], axis=-1)
    return x, v_task, v_pool


def candidates(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """Point estimates of the resampled candidates, vectorised over leading axes of (..., T, N)."""
    x, vxt, vxp = task_stats(a)
    y, vyt, vyp = task_stats(b)
    with np.errstate(all="ignore"):
        return {"moment-corrected, percentile": (x * y).sum(-1) / ((x * x).sum(-1) - vxt.sum(-1)),
                "York, per-task var, percentile": york_slope_through_origin(x, y, vxt, vyt),
                "York, pooled var, percentile": york_slope_through_origin(x, y, vxp, vyp)}


def bootstrap(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, nb: int) -> dict[str, np.ndarray]:
    """Resample the prompts of every task in both runs independently (stratified bootstrap)."""
    ia = rng.integers(0, N, (nb, T, N))
    ib = rng.integers(0, N, (nb, T, N))
    return candidates(np.take_along_axis(np.broadcast_to(a, (nb, T, N)), ia, -1),
                      np.take_along_axis(np.broadcast_to(b, (nb, T, N)), ib, -1))


def fieller(a: np.ndarray, b: np.ndarray, z: float = st.norm.ppf(0.975)) -> tuple[float, float, float]:
    x, vx, _ = task_stats(a)
    y, vy, _ = task_stats(b)
    sx, sy, vsx, vsy = x.sum(), y.sum(), vx.sum(), vy.sum()
    # {β : (Σy − β Σx)² ≤ z² (Σvar_y + β² Σvar_x)} — a bounded interval when Σx² > z² Σvar_x
    qa, qb, qc = sx * sx - z * z * vsx, -2 * sx * sy, sy * sy - z * z * vsy
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return sy / sx, -math.inf, math.inf
    r = math.sqrt(disc)
    return sy / sx, (-qb - r) / (2 * qa), (-qb + r) / (2 * qa)


def run_design(label: str, lo: float, hi: float, reps: int, nb: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    res: dict[str, list[tuple[float, float, float]]] = {m: [] for m in METHODS}
    timing = {"lmra compare_tables with prompt scores (OLS + EIV)": 0.0}
    t_ref = st.t.ppf(0.975, T - 1)
    for rep in range(reps):
        rates = rng.uniform(lo, hi, T)
        a, b = draw(rng, rates), draw(rng, 2 * rates)
        pa, sa = tables(a)
        pb, sb = tables(b)
        before = compare_tables(pa, pb)  # today's function: OLS only
        res["OLS t (lmra, before)"].append((before.fit.slope, before.fit.ci_low, before.fit.ci_high))
        t0 = time.perf_counter()
        after = compare_tables(pa, pb, prompts_a=sa, prompts_b=sb, seed=rep)
        timing["lmra compare_tables with prompt scores (OLS + EIV)"] += time.perf_counter() - t0
        assert after.fit == before.fit  # the OLS slope is unchanged, shown beside the EIV one
        e = after.eiv
        res["York, pooled var, BCa (lmra, after)"].append((e.slope, e.ci_low, e.ci_high))
        # reference: OLS on the true task ratings of run A
        tx = E_STEREO * rates
        yb = b.mean(axis=1)
        bt = tx @ yb / (tx @ tx)
        se = math.sqrt(((yb - bt * tx) ** 2).sum() / (T - 1) / (tx @ tx))
        res["OLS on true x (reference)"].append((bt, bt - t_ref * se, bt + t_ref * se))
        point = candidates(a, b)
        boot = bootstrap(a, b, rng, nb)
        for m, v in point.items():
            d = np.asarray(boot[m], dtype=float)
            d = np.where(np.isnan(d), np.inf, d)
            ql, qh = np.quantile(d, [0.025, 0.975], method="inverted_cdf")
            res[m].append((float(v), float(ql), float(qh)))
        res["ratio of sums, Fieller"].append(fieller(a, b))
    lines = [f"### {label} ({reps} replicates, true slope {TRUE_SLOPE:g})", "",
             "| method | coverage ± MC SE | mean slope | median slope | median CI width | 90th pct CI width | flag |",
             "|---|---|---|---|---|---|---|"]
    for m in METHODS:
        v = np.array(res[m], dtype=float)
        cov = float(np.mean((v[:, 1] <= TRUE_SLOPE) & (TRUE_SLOPE <= v[:, 2])))
        se = math.sqrt(cov * (1 - cov) / reps)
        w = v[:, 2] - v[:, 1]
        flag = "**< 93%**" if cov < 0.93 else ""
        finite = np.isfinite(v[:, 0])
        lines.append(f"| {m} | {cov:.3f} ± {se:.3f} | {np.mean(v[finite, 0]):.3f} | {np.median(v[finite, 0]):.3f} "
                     f"| {np.median(w):.2f} | {np.quantile(w, 0.9):.3g} | {flag} |")
    per = timing["lmra compare_tables with prompt scores (OLS + EIV)"] / reps
    lines += ["", f"lmra `compare_tables` with prompt scores (OLS + EIV, 9,999 BCa resamples): {per * 1000:.0f} ms "
                  "per comparison of 10 tasks × 30 prompts.", ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400, help="replicates per design (default 400)")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples of the numpy candidates")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.time()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(f"# bench_compare_slopes: {args.reps} replicates per design, {args.boot} resamples (numpy candidates), "
          f"seed {args.seed}")
    print(f"# machine: nproc = {os.cpu_count()}, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, "
          f"Python {platform.python_version()}, numpy {np.__version__}, pandas {pd.__version__}")
    print()
    for i, (label, lo, hi) in enumerate(DESIGNS):
        for line in run_design(label, lo, hi, args.reps, args.boot, args.seed + i):
            print(line, flush=True)
    print(f"# total wall time {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()

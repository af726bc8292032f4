"""Comparing two runs or two models across tasks (methodology §8; FPF §4, Figs. 7, 8, 10).

Each (comparison, task) measured in both runs gives one point (H_a, H_b) of per-task net
ratings. Agreement is summarised by

* the **errors-in-variables (EIV) slope** of H_b on H_a through the origin
  (:func:`eiv_slope`): York's line through the origin for data with errors in both
  coordinates (York 1966, York et al. 2004; Deming 1943 when the two error variances are
  proportional), with each task's sampling variance in both runs taken from the per-prompt
  scores, and a 95% BCa bootstrap CI over prompts within tasks (scipy ``bootstrap``). This
  is the slope to read: a slope of 0.5 means run B's task ratings are about half run A's,
  as FPF reports when it compares models;
* the **least-squares (OLS) slope** through the origin with its t-interval (statsmodels OLS
  without a constant), shown beside it. It treats run A's task ratings as exact, so run A's
  own sampling noise pulls it towards 0 (attenuation; Fuller 1987, §1.1) and its CI
  under-covers: 56% instead of 95% with 10 tasks, 30 prompts per task and run A's
  stereotype rates at 1–5% (docs/benchmarks.md, ``bench/bench_compare_slopes.py``);
* Pearson's r (scipy), and r corrected for the same noise (Spearman 1904), with a caveat
  below :data:`MIN_TASKS_FOR_R` tasks.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lmra.runfolder import RunFolder

#: below this many tasks Pearson's r gets a small-sample caveat
MIN_TASKS_FOR_R = 8
#: default number of bootstrap resamples of :func:`eiv_slope`
N_RESAMPLES = 9999

_GRID = 181  # angles of the coarse search of the general York solver (1° apart)


@dataclass(frozen=True)
class SlopeFit:
    """Least-squares slope through the origin, y ≈ slope·x.

    Attributes:
        slope: the estimate; se: its standard error; ci_low, ci_high: (1 − alpha) t-interval
        with n − 1 degrees of freedom; n: number of points. nan when n < 2 or all x = 0.
    """

    slope: float
    se: float
    ci_low: float
    ci_high: float
    n: int


@dataclass(frozen=True)
class EivFit:
    """Errors-in-variables slope through the origin, E[y] = slope·E[x] (:func:`eiv_slope`).

    Attributes:
        slope: the York/Deming estimate; nan with fewer than 2 tasks or when the data say
            nothing about the slope (every task mean of run A is 0 and exact).
        ci_low, ci_high: (1 − alpha) bootstrap interval over prompts within tasks; ±inf when
            resamples give no finite slope often enough that the data cannot bound it.
        n: number of tasks used.
        var_a, var_b: per-prompt score variance of run A / B pooled within tasks (units of
            H², H ∈ [−1, 1]); a task mean's sampling variance is this over its prompt count.
        ci_method: ``"BCa"``, or ``"percentile"`` (asked for, or BCa undefined for these data).
        n_resamples: bootstrap resamples (0 when no interval was computed).
        identified: False when run A's task means are jointly indistinguishable from 0 at
            level alpha (:func:`slope_identified`): then any slope fits the data, and the
            interval is (−∞, +∞) whatever the bootstrap gave.
        a_zero_p: the p-value of that test (χ² with one degree of freedom per task; nan
            when it was not computed).
    """

    slope: float
    ci_low: float
    ci_high: float
    n: int
    var_a: float
    var_b: float
    ci_method: str
    n_resamples: int
    identified: bool = True
    a_zero_p: float = math.nan


def slope_through_origin(x, y, alpha: float = 0.05) -> SlopeFit:
    """Fit y = b·x by ordinary least squares without intercept (statsmodels ``OLS``).

    x is treated as exact. When x is itself a noisy estimate (run A's task means) the slope
    is biased towards 0 and its CI under-covers; :func:`eiv_slope` corrects for that.

    Args:
        x, y: equal-length sequences of finite floats (net ratings, in [−1, 1]).
        alpha: 1 − confidence level, in (0, 1).

    Returns:
        :class:`SlopeFit`.

    Raises:
        ValueError: x and y differ in length.

    Source: methodology §8; FPF Figs. 7, 8, 10 (slope of one model's per-task ratings on
    another's).
    """
    from statsmodels.regression.linear_model import OLS  # not statsmodels.api: it imports all of statsmodels

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = int(x.size)
    if n != y.size:
        raise ValueError(f"x has {n} values, y has {y.size}")
    if n < 2 or not np.any(x != 0):
        return SlopeFit(math.nan, math.nan, math.nan, math.nan, n)
    fit = OLS(y, x[:, None]).fit()
    lo, hi = fit.conf_int(alpha=alpha)[0]
    return SlopeFit(float(fit.params[0]), float(fit.bse[0]), float(lo), float(hi), n)


# -- errors in variables -----------------------------------------------------------------
def _deming(x, y, w, s_x, s_y):
    """Closed-form minimiser of Σ wᵢ(yᵢ − b·xᵢ)² / (s_y + b²·s_x) along the last axis.

    Setting the derivative to 0 gives s_x·Sxy·b² + (s_y·Sxx − s_x·Syy)·b − s_y·Sxy = 0
    (weighted uncentred sums Sxx = Σ w x², Syy = Σ w y², Sxy = Σ w x y). With
    e = s_x·Syy − s_y·Sxx and r = √(e² + 4·s_x·s_y·Sxy²) the minimum is at
    b = (e + r) / (2·s_x·Sxy) = 2·s_y·Sxy / (r − e); the first form is used when e > 0 and the
    second otherwise (no cancellation). s_x = 0 gives weighted least squares Sxy/Sxx,
    s_y = 0 the inverse regression Syy/Sxy, s_x = s_y = 0 weighted least squares.
    """
    sxx, syy, sxy = (w * x * x).sum(-1), (w * y * y).sum(-1), (w * x * y).sum(-1)
    e = s_x * syy - s_y * sxx
    r = np.sqrt(e * e + 4.0 * s_x * s_y * sxy * sxy)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(e > 0, (e + r) / (2.0 * s_x * sxy), 2.0 * s_y * sxy / (r - e))
        ols = sxy / sxx
    both_zero = (s_x == 0) & (s_y == 0)
    b = np.where(both_zero, ols, b)
    # Sxy = 0 with e > 0: the best line is vertical, keep its sign undefined → +inf
    return np.where((e > 0) & (sxy == 0) & ~both_zero, np.inf, b)


def _york_s(x, y, vx, vy, b):
    """S(b) = Σ (y − b·x)² / (vy + b²·vx) per fit (rows); b has one value per row. A point with
    zero variance in both coordinates adds 0 when the line passes through it, else +inf."""
    b = np.asarray(b, dtype=float)[..., None]
    num = (y - b * x) ** 2
    den = vy + b * b * vx
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))
    return q.sum(-1)


def _york_grid(x, y, vx, vy):
    """Global minimiser of S for arbitrary per-point variances: with b = tan θ, S is a smooth
    function of θ ∈ [−π/2, π/2]; a 1° grid finds the best basin and a golden-section search
    refines it (to about 1e-8 relative: S is flat at its minimum, so double precision limits
    the location to √ε). Rows are fits."""
    rows, t = x.shape

    def s_of(theta):  # theta (m, k) → S (m, k) for the rows of the current chunk
        c, s = np.cos(theta)[..., None], np.sin(theta)[..., None]
        num = (y_[:, None, :] * c - x_[:, None, :] * s) ** 2
        den = vy_[:, None, :] * c * c + vx_[:, None, :] * s * s
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))
        return q.sum(-1)

    out = np.empty(rows)
    grid = np.linspace(-math.pi / 2, math.pi / 2, _GRID)
    step = grid[1] - grid[0]
    chunk = max(1, int(2_000_000 // (_GRID * max(t, 1))))
    g = (math.sqrt(5) - 1) / 2
    for start in range(0, rows, chunk):
        sl = slice(start, start + chunk)
        x_, y_, vx_, vy_ = x[sl], y[sl], vx[sl], vy[sl]
        vals = s_of(np.broadcast_to(grid, (x_.shape[0], _GRID)))
        k = np.argmin(vals, axis=1)
        lo, hi = grid[k] - step, grid[k] + step
        c, d = hi - g * (hi - lo), lo + g * (hi - lo)
        fc, fd = s_of(c[:, None])[:, 0], s_of(d[:, None])[:, 0]
        for _ in range(64):  # golden-section search, vectorised over the fits
            left = fc < fd  # the minimum is in [lo, d]
            hi = np.where(left, d, hi)
            lo = np.where(left, lo, c)
            c_new = np.where(left, hi - g * (hi - lo), d)
            d_new = np.where(left, c, lo + g * (hi - lo))
            f_new = s_of(np.where(left, c_new, d_new)[:, None])[:, 0]
            fc, fd = np.where(left, f_new, fd), np.where(left, fc, f_new)
            c, d = c_new, d_new
        out[sl] = np.tan((lo + hi) / 2)
    return out


def _york_local(x, y, vx, vy, b0):
    """Secant iterations on York's estimating equation g(b) = Σ rᵢ·(vyᵢ·xᵢ + b·vxᵢ·yᵢ) / Dᵢ² = 0
    (rᵢ = yᵢ − b·xᵢ, Dᵢ = vyᵢ + b²·vxᵢ; g = −S′/2) from b0. Returns (b, ok): ok where the
    iteration converged to a local minimum of S no higher than S(b0)."""
    def g_of(b):
        bb = b[:, None]
        r = y - bb * x
        d = vy + bb * bb * vx
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return (r * (vy * x + bb * vx * y) / (d * d)).sum(-1)

    b_prev = np.asarray(b0, dtype=float).copy()
    b = b_prev + 1e-4 * (1.0 + np.abs(b_prev))
    g_prev, g_cur = g_of(b_prev), g_of(b)
    done = np.zeros(b.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(60):
            denom = g_cur - g_prev
            step = np.where(denom != 0, g_cur * (b - b_prev) / np.where(denom != 0, denom, 1.0), 0.0)
            step = np.where(done, 0.0, step)
            b_prev, g_prev = b, g_cur
            b = b - step
            done |= np.abs(step) <= 1e-13 * (1.0 + np.abs(b))
            if done.all():
                break
            g_cur = np.where(done, g_cur, g_of(b))
        h = 1e-6 * (1.0 + np.abs(b))
        s_b = _york_s(x, y, vx, vy, b)
        local_min = (_york_s(x, y, vx, vy, b - h) >= s_b * (1 - 1e-12)) & (_york_s(x, y, vx, vy, b + h)
                                                                          >= s_b * (1 - 1e-12))
        ok = done & np.isfinite(b) & (s_b <= _york_s(x, y, vx, vy, b0) * (1 + 1e-12) + 1e-300) & local_min
    return b, ok


def _york_numeric(x, y, vx, vy, start=None, verify: bool = True):
    """York's slope for arbitrary per-point variances (rows are fits): secant iterations from
    ``start`` (default: Deming's closed form with each fit's mean variances), checked against
    a 10° grid of the line's angle when ``verify``; rows that fail go to :func:`_york_grid`."""
    x, y, vx, vy = (np.asarray(a, dtype=float) for a in (x, y, vx, vy))
    if start is None:
        start = _deming(x, y, 1.0, vx.mean(-1), vy.mean(-1))
    start = np.broadcast_to(np.asarray(start, dtype=float), x.shape[:1])
    start = np.where(np.isfinite(start), start, 1.0)
    b, ok = _york_local(x, y, vx, vy, start)
    if verify and ok.any():
        coarse = np.tan(np.linspace(-math.pi / 2 + 1e-9, math.pi / 2 - 1e-9, 19))
        s_min = np.min(np.stack([_york_s(x, y, vx, vy, np.full(b.shape, c)) for c in coarse]), axis=0)
        ok &= _york_s(x, y, vx, vy, b) <= s_min * (1 + 1e-9) + 1e-300
    if (~ok).any():
        b = b.copy()
        b[~ok] = _york_grid(x[~ok], y[~ok], vx[~ok], vy[~ok])
    return b


def york_slope_through_origin(x, y, var_x, var_y):
    """York's errors-in-variables slope of a line through the origin.

    Minimises the weighted sum of squared residuals S(b) = Σᵢ (yᵢ − b·xᵢ)² / (var_yᵢ + b²·var_xᵢ),
    the maximum-likelihood estimate of b in the functional model yᵢ = b·ξᵢ + errors, xᵢ = ξᵢ +
    errors, with independent normal errors of known variances (York 1966, Can. J. Phys. 44,
    1079, and York et al. 2004, Am. J. Phys. 72, 367, with zero error correlation and no
    intercept; Deming 1943 when var_y ∝ var_x; Fuller 1987, *Measurement Error Models*,
    §1.3). The estimating equation Σ rᵢ·ξ̂ᵢ / Dᵢ = 0 (rᵢ = yᵢ − b·xᵢ, Dᵢ = var_yᵢ + b²·var_xᵢ,
    ξ̂ᵢ = (var_yᵢ·xᵢ + b·var_xᵢ·yᵢ)/Dᵢ) has expectation 0 at the true slope, so unlike least
    squares the estimate is not pulled towards 0 by the noise in x.

    When var_y / var_x is the same for every point (Deming's case; in :func:`eiv_slope` when
    each task has the same number of prompts in both runs) the closed form of ``_deming`` is
    used; otherwise a grid plus golden-section search over the angle of the line.

    Args:
        x, y: point coordinates, shape (..., T): T points per fit along the last axis, any
            leading axes are separate fits (e.g. bootstrap resamples). Finite.
        var_x, var_y: each point's error variance in x and in y (≥ 0, finite), broadcastable
            to the same shape. All zero: ordinary least squares through the origin.

    Returns:
        The slope (float for 1-D input, else an array of the leading shape); +inf when the
        best line is vertical, nan when S does not depend on b (e.g. every x is 0 and exact).

    Raises:
        ValueError: non-finite values, a negative variance, or no points.

    Source: methodology §8 (errors in variables); FPF Figs. 7, 8, 10.
    """
    x, y, vx, vy = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (x, y, var_x, var_y)))
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError("no points")
    if not all(np.all(np.isfinite(a)) for a in (x, y, vx, vy)):
        raise ValueError("x, y and the variances must be finite")
    if np.any(vx < 0) or np.any(vy < 0):
        raise ValueError("variances must be ≥ 0")
    lead = x.shape[:-1]
    t = x.shape[-1]
    out = _york(*(a.reshape(-1, t) for a in (x, y, vx, vy)))
    return float(out[0]) if not lead else out.reshape(lead)


def _york(x2, y2, vx2, vy2, start=None, verify: bool = True):
    """:func:`york_slope_through_origin` on validated 2-D input (rows are fits); ``start`` and
    ``verify`` go to :func:`_york_numeric` for the rows without proportional variances."""
    out = np.full(x2.shape[0], math.nan)
    # Deming's case: var_x = a·s_x, var_y = a·s_y with one (s_x, s_y) per fit and a > 0 per point
    scale = np.maximum(vx2, vy2)
    pos = scale > 0
    sx = np.where(pos, vx2 / np.where(pos, scale, 1.0), 0.0)
    sy = np.where(pos, vy2 / np.where(pos, scale, 1.0), 0.0)
    ref_x = np.take_along_axis(sx, np.argmax(pos, axis=1)[:, None], 1)
    ref_y = np.take_along_axis(sy, np.argmax(pos, axis=1)[:, None], 1)
    none = ~pos.any(axis=1)
    prop = none | (pos.all(axis=1) & np.all(np.abs(sx - ref_x) <= 1e-12, axis=1)
                   & np.all(np.abs(sy - ref_y) <= 1e-12, axis=1))
    if prop.any():
        w = np.where(none[:, None], 1.0, 1.0 / np.where(pos, scale, 1.0))[prop]
        out[prop] = _deming(x2[prop], y2[prop], w, np.where(none, 0.0, ref_x[:, 0])[prop],
                            np.where(none, 0.0, ref_y[:, 0])[prop])
    if (~prop).any():
        st = None if start is None else np.broadcast_to(np.asarray(start, dtype=float), out.shape)[~prop]
        out[~prop] = _york_numeric(x2[~prop], y2[~prop], vx2[~prop], vy2[~prop], start=st, verify=verify)
    # no information: every x is 0 and exact, or no point has any signal
    flat = np.all((x2 == 0) & (vx2 == 0), axis=1) | np.all((x2 == 0) & (y2 == 0), axis=1)
    # every y is exactly 0 (and exact): the line is flat whatever x is
    out[np.all((y2 == 0) & (vy2 == 0), axis=1)] = 0.0
    out[flat] = math.nan
    return out


def _pooled_task_stats(samples, axis: int = -1):
    """Task means (..., T), their sampling variances (..., T) and the pooled per-prompt
    variance (...) from per-task prompt scores: Σᵢ Σⱼ (hᵢⱼ − h̄ᵢ)² / Σᵢ (nᵢ − 1), over each
    task's nᵢ for the variance of its mean."""
    means = np.stack([s.mean(axis=axis) for s in samples], axis=-1)
    ss = sum(((s - s.mean(axis=axis, keepdims=True)) ** 2).sum(axis=axis) for s in samples)
    sizes = np.array([s.shape[axis] for s in samples], dtype=float)
    dof = float((sizes - 1).sum())
    pooled = np.asarray(ss / dof if dof > 0 else np.zeros_like(ss), dtype=float)
    return means, pooled[..., None] / sizes, pooled


def _eiv_statistic(n_tasks: int):
    """The EIV slope as a vectorised ``scipy.stats.bootstrap`` statistic of 2T samples (run A's
    tasks, then run B's)."""
    def statistic(*samples, axis=-1):
        x, vx, _ = _pooled_task_stats(samples[:n_tasks], axis)
        y, vy, _ = _pooled_task_stats(samples[n_tasks:], axis)
        t = x.shape[-1]
        out = _york(*(np.broadcast_to(v, np.broadcast_shapes(x.shape, y.shape)).reshape(-1, t)
                      for v in (x, y, vx, vy)))
        return out.reshape(np.broadcast_shapes(x.shape, y.shape)[:-1])

    return statistic


def _jackknife(a: list, b: list, slope: float) -> list[np.ndarray]:
    """Leave-one-prompt-out slopes, one array per sample (run A's tasks, then run B's), in
    O(number of scores × tasks): leaving prompt k out of task i changes only that task's mean,
    its sum of squares (by n/(n − 1)·(hₖ − h̄)²) and its run's pooled variance."""
    stats_ab = []
    for samples in (a, b):
        sizes = np.array([s.size for s in samples], dtype=float)
        means = np.array([s.mean() for s in samples])
        ss = np.array([((s - s.mean()) ** 2).sum() for s in samples])
        stats_ab.append((sizes, means, ss, float(ss.sum()), float((sizes - 1).sum())))
    base = [(m, (tot / dof if dof > 0 else 0.0) / n) for n, m, _, tot, dof in stats_ab]
    out = []
    for run, samples in enumerate((a, b)):
        sizes, means, ss, tot, dof = stats_ab[run]
        for i, s in enumerate(samples):
            n = k = s.size
            m = means[i]
            mean_i = (n * m - s) / (n - 1)
            drop = (s - m) ** 2 * n / (n - 1)
            pooled = np.maximum(tot - drop, 0.0) / (dof - 1) if dof > 1 else np.zeros(k)
            new_sizes = sizes.copy()
            new_sizes[i] = n - 1
            mu = np.broadcast_to(means, (k, means.size)).copy()
            mu[:, i] = mean_i
            var = pooled[:, None] / new_sizes[None, :]
            other_m, other_v = base[1 - run]
            om = np.broadcast_to(other_m, (k, means.size))
            ov = np.broadcast_to(other_v, (k, means.size))
            x, y, vx, vy = (mu, om, var, ov) if run == 0 else (om, mu, ov, var)
            out.append(_york(np.ascontiguousarray(x), np.ascontiguousarray(y), np.ascontiguousarray(vx),
                             np.ascontiguousarray(vy), start=slope if math.isfinite(slope) else None,
                             verify=not math.isfinite(slope)))
    return out


def _unbounded(dist: np.ndarray) -> np.ndarray:
    """An undefined resampled slope (nan) counts as unbounded: half of them as −inf, half as
    +inf, so they can only widen the interval."""
    d = np.asarray(dist, dtype=float).ravel().copy()
    bad = np.flatnonzero(np.isnan(d))
    d[bad[::2]] = -np.inf
    d[bad[1::2]] = np.inf
    return d


def _quantiles(d: np.ndarray, probs) -> tuple[float, float]:
    """The ``probs`` quantiles of the resampled slopes ``d`` (or disattenuated correlations; they
    may hold ±inf, see :func:`_unbounded`): linear interpolation between the two order statistics around each
    quantile, as ``scipy.stats.bootstrap``; when one of them is infinite the interpolation is
    undefined (inf − inf), so both quantiles are read off the inverted CDF instead (an order
    statistic, possibly ±inf). The case is decided before interpolating, so no ``nan`` and no
    numpy ``RuntimeWarning`` arise."""
    d = np.asarray(d, dtype=float).ravel()
    s = np.sort(d)
    pos = (s.size - 1) * np.asarray(probs, dtype=float)
    around = np.concatenate([s[np.floor(pos).astype(int)], s[np.ceil(pos).astype(int)]])
    q = np.quantile(s, probs, method="linear" if np.isfinite(around).all() else "inverted_cdf")
    return float(q[0]), float(q[1])


def _bca_probs(dist: np.ndarray, theta: float, jack: list[np.ndarray], alpha: float) -> tuple[float, float]:
    """BCa percentiles (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, §14.3):
    bias correction z₀ = Φ⁻¹(share of resamples below θ̂, ties counted half) and acceleration
    â = Σ U³ / (6·(Σ U²)^{3/2}) from the jackknife of every sample, Uⱼᵢ = (nⱼ − 1)(θ̄ⱼ − θⱼᵢ)
    scaled by nⱼ as in ``scipy.stats.bootstrap`` with several samples. nan when undefined."""
    from scipy.special import ndtr, ndtri

    z0 = ndtri((np.count_nonzero(dist < theta) + np.count_nonzero(dist <= theta)) / (2 * dist.size))
    nums = dens = 0.0
    for th in jack:
        n = float(th.size)
        u = (n - 1) * (th.mean() - th)
        nums += float((u ** 3).sum()) / n ** 3
        dens += float((u ** 2).sum()) / n ** 2
    with np.errstate(all="ignore"):
        a_hat = nums / dens ** 1.5 / 6 if dens > 0 else math.nan
        za, z1a = ndtri(alpha / 2), ndtri(1 - alpha / 2)
        p1 = ndtr(z0 + (z0 + za) / (1 - a_hat * (z0 + za)))
        p2 = ndtr(z0 + (z0 + z1a) / (1 - a_hat * (z0 + z1a)))
    return float(p1), float(p2)


def slope_identified(x, var_x, alpha: float) -> tuple[bool, float]:
    """Whether a slope through the origin of y on x is identified: run A's task means ``x``
    (with sampling variances ``var_x``) must differ from 0 jointly at level ``alpha``.

    The ratio E[y]/E[x] has a bounded confidence set only when its denominator is
    significantly non-zero (Fieller 1954, "Some problems in interval estimation", JRSS B 16;
    for one task this is Fieller's condition). Over T tasks the test is W = Σ xᵢ² / var_xᵢ,
    χ² with T degrees of freedom under "every E[xᵢ] = 0". When it is not rejected — two nights
    of a chatbot with no bias, whose task ratings are all noise around 0 — every slope fits,
    and a finite bootstrap interval (break-it finding: "18.86 [18.79, 7193.47]" in 4 of 24
    null pairs) would claim a change that is not there.

    Args:
        x, var_x: 1-D arrays of the same length T ≥ 1; ``var_x`` ≥ 0 (a 0 variance with
            xᵢ ≠ 0 makes W infinite, with xᵢ = 0 it adds nothing).
        alpha: the level, in (0, 1).

    Returns:
        (identified, p): p = the χ² test's p-value (scipy ``chi2.sf``).
    """
    from scipy import stats

    x, v = np.asarray(x, dtype=float), np.asarray(var_x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(x == 0, 0.0, np.where(v > 0, x * x / np.where(v > 0, v, 1.0), np.inf))
    w = float(terms.sum())
    p = float(stats.chi2.sf(w, df=x.size)) if math.isfinite(w) else 0.0
    return p <= alpha, p


def eiv_slope(scores_a: Sequence, scores_b: Sequence, *, alpha: float = 0.05, n_resamples: int = N_RESAMPLES,
              ci_method: str = "BCa", seed: int = 0) -> EivFit:
    """Errors-in-variables slope of run B's task means on run A's, through the origin, with a
    bootstrap CI over prompts within tasks (methodology §8; FPF Figs. 7, 8, 10).

    Task i has prompt scores aᵢ (run A, nᵢ of them) and bᵢ (run B, mᵢ). Its point is
    (xᵢ, yᵢ) = (mean aᵢ, mean bᵢ) with sampling variances var_xᵢ = s²_A / nᵢ and
    var_yᵢ = s²_B / mᵢ, where s²_A is run A's per-prompt variance **pooled within tasks**
    (Σᵢ Σⱼ (aᵢⱼ − xᵢ)² / Σᵢ (nᵢ − 1)), likewise s²_B. The slope is York's
    (:func:`york_slope_through_origin`); with nᵢ = mᵢ it is Deming's closed form.
    Pooling matters: pair scores are a rare-event mixture, and a task that drew no
    stereotyped pair has a per-task variance ≈ 0 that would make its mean look exact (the
    per-task variances gave CIs of median width ≈ 1,000 for a true slope of 2 in the
    benchmark). With pooled variances the estimating equation still has expectation 0 at
    the true slope when the true variances differ between tasks, as long as the ratio of
    the two runs' average variances is right, which pooling estimates.

    The CI is a stratified bootstrap: ``scipy.stats.bootstrap`` (``paired=False``, one sample
    per task and run) resamples the prompts of every task in both runs independently, so
    both runs' task means and pooled variances are re-estimated every resample. The BCa
    interval uses scipy's formulas with the jackknife computed in closed form per left-out
    prompt (scipy's generic jackknife re-reads all samples for every left-out score). A
    resample whose slope is undefined counts as unbounded. When run A's task means are jointly
    indistinguishable from 0 (:func:`slope_identified`, Fieller's condition) the slope is not
    identified and the interval is (−∞, +∞). The interval is about *these
    tasks*: how the tasks scatter around the line is part of the estimate, not of its error.
    Coverage in the rare-event benchmark: docs/benchmarks.md, ``bench/bench_compare_slopes.py``.

    Args:
        scores_a, scores_b: sequences of the same length T ≥ 2 (tasks, in the same order);
            each item a 1-D array of ≥ 2 finite per-prompt scores in [−1, 1] (the mean pair
            score of each prompt, :func:`lmra.runfolder.prompt_scores`).
        alpha: 1 − confidence level, in (0, 1).
        n_resamples: bootstrap resamples (≥ 0); 0 skips the interval (ci_low/high nan).
        ci_method: ``"BCa"`` (default) or ``"percentile"``; BCa falls back to percentile when
            it is undefined (e.g. every resample gives the same slope).
        seed: seed of the resampling (the result is reproducible).

    Returns:
        :class:`EivFit`; with fewer than 2 tasks every number is nan.

    Raises:
        ValueError: the runs have different numbers of tasks, a task has fewer than 2
            scores in a run or a non-finite score, alpha not in (0, 1), an unknown
            ``ci_method`` or a negative ``n_resamples``.
    """
    from scipy import stats

    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if ci_method not in ("BCa", "percentile"):
        raise ValueError(f"ci_method must be 'BCa' or 'percentile', got {ci_method!r}")
    if n_resamples < 0:
        raise ValueError(f"n_resamples must be ≥ 0, got {n_resamples}")
    a = [np.asarray(s, dtype=float).ravel() for s in scores_a]
    b = [np.asarray(s, dtype=float).ravel() for s in scores_b]
    if len(a) != len(b):
        raise ValueError(f"run A has {len(a)} tasks, run B {len(b)}")
    for run, samples in (("A", a), ("B", b)):
        for i, s in enumerate(samples):
            if s.size < 2:
                raise ValueError(f"task {i} has {s.size} score(s) in run {run}; at least 2 are needed")
            if not np.all(np.isfinite(s)):
                raise ValueError(f"task {i} has a non-finite score in run {run}")
    t = len(a)
    if t < 2:
        return EivFit(math.nan, math.nan, math.nan, t, math.nan, math.nan, ci_method, 0)
    x, vx, var_a = _pooled_task_stats(a)
    y, vy, var_b = _pooled_task_stats(b)
    slope = float(york_slope_through_origin(x, y, vx, vy))
    identified, a_zero_p = slope_identified(x, vx, alpha)
    if n_resamples == 0:
        return EivFit(slope, math.nan, math.nan, t, float(var_a), float(var_b), ci_method, 0, identified, a_zero_p)
    if not identified:  # any slope fits: no finite interval, whatever a bootstrap would give
        return EivFit(slope, -math.inf, math.inf, t, float(var_a), float(var_b), ci_method, n_resamples, False,
                      a_zero_p)
    total = sum(s.size for s in a + b)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # degenerate resamples are handled below
        res = stats.bootstrap(a + b, _eiv_statistic(t), n_resamples=n_resamples, vectorized=True, paired=False,
                              confidence_level=1 - alpha, method="percentile", rng=np.random.default_rng(seed),
                              batch=max(1, min(n_resamples, 8_000_000 // total)))
    dist = _unbounded(res.bootstrap_distribution)
    method = ci_method
    probs = (alpha / 2, 1 - alpha / 2)
    if ci_method == "BCa":
        bca = _bca_probs(dist, slope, _jackknife(a, b, slope), alpha) if math.isfinite(slope) else (math.nan,) * 2
        if all(math.isfinite(p) for p in bca):
            probs = bca
        else:
            method = "percentile"
    lo, hi = _quantiles(dist, probs)
    if math.isfinite(slope):  # the interval contains its own estimate
        lo, hi = min(lo, slope), max(hi, slope)
    return EivFit(slope, lo, hi, t, float(var_a), float(var_b), method, n_resamples, True, a_zero_p)


#: a reliability below this is 0: the noise variance equals the observed one up to float rounding
RELIABILITY_ROUNDING = 1e-9


def reliability(means, sampling_var) -> float:
    """Share of the observed variance of task means across tasks that is real (not noise).

    ``1 − mean(sampling_var) / var(means)`` (sample variance, ddof = 1), clipped to [0, 1]
    (below :data:`RELIABILITY_ROUNDING`: 0, the two variances equal up to rounding):
    the reliability of classical test theory (Spearman 1904), here of a run's per-task net
    ratings as measures of the tasks' true ratings.

    Args:
        means: task means (length T).
        sampling_var: each task mean's sampling variance (same length, ≥ 0).

    Returns:
        A float in [0, 1]; nan with fewer than 3 tasks or when the means are all equal.

    Raises:
        ValueError: the lengths differ.
    """
    m = np.asarray(means, dtype=float)
    v = np.asarray(sampling_var, dtype=float)
    if m.shape != v.shape:
        raise ValueError(f"{m.size} means but {v.size} variances")
    if m.size < 3 or np.ptp(m) == 0:
        return math.nan
    obs = float(np.var(m, ddof=1))
    rel = 1.0 - float(np.mean(v)) / obs
    if rel < RELIABILITY_ROUNDING:  # 0 up to float rounding (fresh-user finding: 1.3e-15 let the
        return 0.0  # disattenuated r print −1.000 from task means that were all noise)
    return float(min(1.0, rel))


def disattenuated_r(r: float, reliability_a: float, reliability_b: float) -> float:
    """Pearson's r corrected for measurement noise in both variables (Spearman 1904):
    ``r / √(reliability_a · reliability_b)``, unclipped (a value beyond ±1 says the noise
    estimates are too uncertain for the correction: :func:`disattenuated_r_estimate`).

    Args:
        r: observed Pearson r in [−1, 1].
        reliability_a, reliability_b: from :func:`reliability`, in [0, 1].

    Returns:
        The corrected r; nan when r or a reliability is nan, or a reliability is 0 (a run's
        task means are all noise: there is no correlation to recover).
    """
    if any(not math.isfinite(v) for v in (r, reliability_a, reliability_b)) or min(reliability_a,
                                                                                   reliability_b) <= 0:
        return math.nan
    return float(r / math.sqrt(reliability_a * reliability_b))


#: a reliability below which no disattenuated r is given: dividing by √(ρ_A·ρ_B) then magnifies the
#: noise of r and of the reliabilities themselves (statistics break-it, s38: at ρ ≈ 0.1–0.3, 41% of
#: the values printed for unrelated task profiles were clipped to ±1.000)
MIN_RELIABILITY = 0.5

#: resamples of the disattenuated r's bootstrap interval
N_RESAMPLES_R = 2_000


def _disattenuated_statistic(n_tasks: int):
    """The unclipped disattenuated r as a vectorised ``scipy.stats.bootstrap`` statistic of 2T
    samples (run A's tasks, then run B's); nan where a reliability is not positive."""
    def statistic(*samples, axis=-1):
        x, vx, _ = _pooled_task_stats(samples[:n_tasks], axis)
        y, vy, _ = _pooled_task_stats(samples[n_tasks:], axis)
        x, y = np.broadcast_arrays(x, y)
        with np.errstate(all="ignore"):
            rel_a = 1.0 - vx.mean(axis=-1) / x.var(axis=-1, ddof=1)
            rel_b = 1.0 - vy.mean(axis=-1) / y.var(axis=-1, ddof=1)
            xc, yc = x - x.mean(axis=-1, keepdims=True), y - y.mean(axis=-1, keepdims=True)
            r = (xc * yc).sum(axis=-1) / np.sqrt((xc ** 2).sum(axis=-1) * (yc ** 2).sum(axis=-1))
            out = r / np.sqrt(rel_a * rel_b)
        return np.where((rel_a > 0) & (rel_b > 0), out, np.nan)

    return statistic


@dataclass(frozen=True)
class DisattenuatedR:
    """The disattenuated r of two runs' task means (:func:`disattenuated_r_estimate`).

    Attributes:
        r: the corrected r in [−1, 1] (capped), or nan when withheld (``withheld`` says why).
        ci_low, ci_high: its bootstrap percentile interval, clipped to [−1, 1] (nan when withheld
            or not computed).
        withheld: why no value is given ("" when one is).
        uncapped: r / √(ρ_A·ρ_B) as computed; beyond ±1 when :attr:`r` was capped (the noise
            estimates too uncertain for the correction: read the interval).
    """

    r: float
    ci_low: float = math.nan
    ci_high: float = math.nan
    withheld: str = ""
    uncapped: float = math.nan

    @property
    def capped(self) -> bool:
        """Whether the computed value lay beyond ±1 and :attr:`r` is its cap."""
        return math.isfinite(self.uncapped) and abs(self.uncapped) > 1


def disattenuated_r_estimate(scores_a: Sequence, scores_b: Sequence, *, alpha: float = 0.05,
                             n_resamples: int = N_RESAMPLES_R, seed: int = 0) -> DisattenuatedR:
    """Spearman's disattenuated r of two runs' task means with a bootstrap interval, or why none
    is given (methodology §8; statistics break-it, s38).

    The estimate is :func:`disattenuated_r` of Pearson's r of the task means and each run's
    :func:`reliability` (pooled within-task variances, as :func:`eiv_slope`), capped at ±1 (the
    uncapped value kept: a cap says the noise estimates are too uncertain for the correction, and
    the interval how much). It is withheld when a reliability is below :data:`MIN_RELIABILITY`
    (the correction then magnifies noise: statistics break-it, s38, 41% of the values printed for
    unrelated task profiles read ±1.000). Its interval is the basic bootstrap interval of the
    same statistic over a stratified bootstrap of the prompts within tasks (``scipy.stats.bootstrap``,
    as the EIV slope's) about that bootstrap world's parameter — the Pearson r of the observed task
    means, which are its true ones: ``estimate − (quantiles − r_observed)``; a resample whose
    reliability is not positive counted as unbounded (so an interval can reach ±1 for that reason
    alone), clipped to [−1, 1].

    Args:
        scores_a, scores_b: per-task prompt scores (T ≥ 3 tasks, ≥ 2 finite scores each), as
            :func:`eiv_slope`.
        alpha: 1 − confidence level, in (0, 1).
        n_resamples: bootstrap resamples (≥ 0; 0: no interval); seed: of the resampling.

    Returns:
        :class:`DisattenuatedR`.
    """
    from scipy import stats

    a = [np.asarray(x, dtype=float).ravel() for x in scores_a]
    b = [np.asarray(x, dtype=float).ravel() for x in scores_b]
    t = len(a)
    x, vx, _ = _pooled_task_stats(a)
    y, vy, _ = _pooled_task_stats(b)
    rel_a, rel_b = reliability(x, vx), reliability(y, vy)
    value = disattenuated_r(pearson(x, y)[0], rel_a, rel_b)
    if not math.isfinite(value):
        return DisattenuatedR(math.nan, withheld="a run's differences between tasks are within its sampling noise")
    if min(rel_a, rel_b) < MIN_RELIABILITY:
        return DisattenuatedR(math.nan, withheld=f"a reliability below {MIN_RELIABILITY:g} — the correction would "
                                                 "magnify the noise more than it removes")
    capped = float(min(1.0, max(-1.0, value)))
    if n_resamples == 0:
        return DisattenuatedR(capped, uncapped=value)
    total = sum(v.size for v in a + b)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        res = stats.bootstrap(a + b, _disattenuated_statistic(t), n_resamples=n_resamples, vectorized=True,
                              paired=False, confidence_level=1 - alpha, method="percentile",
                              rng=np.random.default_rng(seed), batch=max(1, min(n_resamples, 8_000_000 // total)))
    dist = np.asarray(res.bootstrap_distribution, dtype=float)
    # an undefined resample (a reliability ≤ 0): the correction is unbounded there, so it widens both ends
    undefined = ~np.isfinite(dist)
    dist = np.where(undefined, np.inf, dist)
    dist = np.concatenate([dist, np.full(int(undefined.sum()), -np.inf)])
    # (±∞ among them: read off the inverted CDF, no ∞ − ∞ — methodology check, s44: numpy printed
    # "invalid value encountered in subtract" and the interval came out NaN)
    q_lo, q_hi = _quantiles(dist, [alpha / 2, 1 - alpha / 2]) if dist.size else (math.nan,) * 2
    # the basic interval, about the bootstrap world's own parameter: resampling prompts within tasks makes the
    # observed task means that world's true ones, so its correlation — the attenuated Pearson r of the observed
    # means — is what the resamples scatter about (break-it round 2, s38: the percentile interval lay below
    # the estimate and covered 51–75% of simulated truths; this one 97–100%)
    r_obs = pearson(x, y)[0]
    lo, hi = value - (q_hi - r_obs), value - (q_lo - r_obs)
    clip = lambda v: float(min(1.0, max(-1.0, v))) if not math.isnan(v) else math.nan  # noqa: E731
    return DisattenuatedR(capped, clip(lo), clip(hi), uncapped=value)


def pearson(x, y) -> tuple[float, float]:
    """Pearson correlation and its two-sided p-value (``scipy.stats.pearsonr``).

    Returns (nan, nan) for fewer than 3 points or a constant input.
    """
    from scipy import stats

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    res = stats.pearsonr(x, y)
    return float(res.statistic), float(res.pvalue)


def _r_caveat(x, y) -> str | None:
    """The small-sample caveat of Pearson's r over fewer than :data:`MIN_TASKS_FOR_R` tasks."""
    from scipy import stats

    n = len(x)
    if n >= MIN_TASKS_FOR_R:
        return None
    if n < 3:
        return f"only {n} task(s): too few for Pearson's r"
    msg = f"only {n} tasks: Pearson's r from fewer than {MIN_TASKS_FOR_R} tasks is very uncertain"
    r, p = pearson(x, y)
    if n > 3 and math.isfinite(r):
        ci = stats.pearsonr(np.asarray(x, float), np.asarray(y, float)).confidence_interval(0.95)
        msg += f" (95% CI of r: [{ci.low:.2f}, {ci.high:.2f}])"
    if math.isfinite(p):
        # the exact permutation p-value: every ordering of the tasks (n! ≤ 5,040 below 8 tasks)
        perm = stats.pearsonr(np.asarray(x, float), np.asarray(y, float),
                              method=stats.PermutationMethod(n_resamples=math.factorial(n))).pvalue
        msg += (f", and its p-value ({_pv(p)}) assumes normally distributed task ratings, which {n} points cannot "
                f"check; without that assumption (all {math.factorial(n):,} orderings of the tasks) p = {_pv(perm)}"
                + (f", the smallest possible with {n} tasks" if perm <= 2 / math.factorial(n) + 1e-12 else ""))
    return msg + "; read the slope and its CI instead"


@dataclass
class RunComparison:
    """Outcome of :func:`compare_tables` / :func:`compare_runs`.

    Attributes:
        pairs: one row per (comparison, domain, task) in both tables: ``h_a, h_b`` (net
            ratings), ``ci_low_a, ci_high_a, ci_low_b, ci_high_b``, ``n_pairs_a, n_pairs_b``;
            with prompt scores also ``n_prompts_a, n_prompts_b`` (scored prompts) and
            ``var_h_a, var_h_b`` (sampling variance of the task mean used by the EIV slope;
            nan for tasks it left out).
        pearson_r, pearson_p: Pearson's r of h_b vs h_a and its p-value.
        fit: least-squares (OLS) slope of h_b on h_a through the origin (:class:`SlopeFit`),
            attenuated by run A's noise; also as :attr:`ols`.
        label_a, label_b: run ids or model names for display.
        notes: warnings (e.g. different judges) for the reader.
        eiv: errors-in-variables slope (:class:`EivFit`), the one to read; None without
            prompt scores.
        pearson_r_disattenuated: r corrected for both runs' sampling noise
            (:func:`disattenuated_r_estimate`; nan without prompt scores or when withheld);
            pearson_r_disattenuated_ci: its bootstrap interval (clipped to [−1, 1]);
            pearson_r_disattenuated_withheld: why it is withheld ("" when given, or without
            prompt scores); pearson_r_disattenuated_uncapped: the value before its cap at ±1.
        reliability_a, reliability_b: reliability of each run's task means (:func:`reliability`).
        r_caveat: small-sample caveat for r (fewer than :data:`MIN_TASKS_FOR_R` tasks), or None.
        only_in_a, only_in_b: the tasks (``{comparison, domain, task}``) with a net rating in one
            run only, left out of every figure (and named in :attr:`notes`).
    """

    pairs: pd.DataFrame
    pearson_r: float
    pearson_p: float
    fit: SlopeFit
    label_a: str = "A"
    label_b: str = "B"
    notes: tuple[str, ...] = ()
    eiv: EivFit | None = None
    pearson_r_disattenuated: float = math.nan
    pearson_r_disattenuated_ci: tuple[float, float] = (math.nan, math.nan)
    pearson_r_disattenuated_withheld: str = ""
    pearson_r_disattenuated_uncapped: float = math.nan
    reliability_a: float = math.nan
    reliability_b: float = math.nan
    r_caveat: str | None = None
    only_in_a: list = field(default_factory=list)
    only_in_b: list = field(default_factory=list)

    @property
    def ols(self) -> SlopeFit:
        """The least-squares slope (same as :attr:`fit`)."""
        return self.fit

    def summary_lines(self) -> list[str]:
        """Plain-text lines for the console: r (raw and disattenuated, with the caveat), the
        EIV slope with its CI and the OLS slope with its CI, in that order."""
        f, e = self.fit, self.eiv
        rel = (f"reliability of the task means: A {_num(self.reliability_a, 2)}, "
               f"B {_num(self.reliability_b, 2)}")
        dis = ""
        if e is not None and math.isfinite(self.pearson_r):
            if math.isfinite(self.pearson_r_disattenuated):
                lo, hi = self.pearson_r_disattenuated_ci
                has_ci = math.isfinite(lo) and math.isfinite(hi)
                u = self.pearson_r_disattenuated_uncapped
                # the interval every r lies in: the noise leaves the correlation undetermined (fresh-user finding,
                # s44: "r = 1.000 [-1.000, 1.000]" read as a confident 1)
                whole = has_ci and lo <= -1.0 and hi >= 1.0
                said = (["95% bootstrap interval" + (": all of [−1, 1] — the noise leaves the correlation "
                                                     "undetermined; read Pearson's r and the slope" if whole else "")]
                        if has_ci else []) + (
                    [f"capped: {_num(u, 2)} as computed, the noise estimates too uncertain for the correction"]
                    if math.isfinite(u) and abs(u) > 1 else []) + [rel]
                dis = (f"; corrected for sampling noise (disattenuated) r = {_num(self.pearson_r_disattenuated)}"
                       + (f" [{_num(lo)}, {_num(hi)}]" if has_ci else "") + f" ({'; '.join(said)})")
            else:
                why = self.pearson_r_disattenuated_withheld or ("a run's differences between tasks are within its "
                                                                "sampling noise, or A's task ratings are "
                                                                "indistinguishable from 0")
                dis = f"; no disattenuated r: {why} ({rel})"
        flag = ", see the caveat below" if self.r_caveat and math.isfinite(self.pearson_r) else ""
        if math.isfinite(self.pearson_r) or f.n < 3:
            lines = [f"{f.n} tasks; Pearson r = {_num(self.pearson_r)} (p = {_pv(self.pearson_p)}{flag}){dis}"]
        else:  # (fresh-user finding: "Pearson r = — (p = —)" against an all-zero night, unexplained)
            lines = [f"{f.n} tasks; Pearson r = — (not defined: one run's task net ratings are all the same — a night "
                     f"with no signal, such as all 0 — so the runs have nothing to correlate){dis}"]
        if self.r_caveat:
            caveat = self.r_caveat
            if e is not None and not e.identified:  # (no slope to read instead: fresh-user finding)
                caveat = caveat.removesuffix("; read the slope and its CI instead")
            lines.append(f"caveat: {caveat}")
        if e is not None and not e.identified:
            lines.append(f"errors-in-variables slope of B on A through the origin: not identified — A's task "
                         f"ratings are indistinguishable from 0 (χ² test, p = {_pv(e.a_zero_p)}), so every slope "
                         f"fits: CI [{_num(e.ci_low)}, {_num(e.ci_high)}] ("
                         + (f"the estimate {_num(e.slope)} means nothing" if math.isfinite(e.slope) else "no estimate")
                         + f"; {e.n} tasks)")
        elif e is not None:
            lines.append(f"errors-in-variables slope of B on A through the origin = {_num(e.slope)} "
                         f"[{_num(e.ci_low)}, {_num(e.ci_high)}] (95% CI, {e.ci_method} bootstrap over prompts; "
                         f"corrects for both runs' sampling noise; {e.n} tasks)")
        # (fresh-user finding: [-1.129, -1.082] from 2 noise-level tasks, under the line saying every slope fits)
        noise = e is not None and not e.identified
        lines.append(f"least-squares slope of B on A through the origin = {_num(f.slope)} "
                     f"[{_num(f.ci_low)}, {_num(f.ci_high)}] (95% CI"
                     + ("; treats A as exact, so biased towards 0" if e is not None else "")
                     + ("; A's task ratings being indistinguishable from 0, this interval is no evidence of a "
                        "slope: it takes noise in A as exact)" if noise else ")"))
        return lines


def _num(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.{digits}f}"


def _pv(x) -> str:
    """A p-value in 3 significant digits; one that underflowed to 0 as "< 1e-300" (fresh-user
    finding: "p = 0")."""
    if x is None or not math.isfinite(x):
        return "—"
    return "< 1e-300" if x == 0 else f"{x:.3g}"


def compare_tables(per_task_a: pd.DataFrame, per_task_b: pd.DataFrame, *, alpha: float = 0.05,
                   comparison: str | None = None, label_a: str = "A", label_b: str = "B",
                   notes: tuple[str, ...] = (), prompts_a: pd.DataFrame | None = None,
                   prompts_b: pd.DataFrame | None = None, n_resamples: int = N_RESAMPLES,
                   seed: int = 0) -> RunComparison:
    """Pair two per-task tables on (comparison, domain, task) and summarise their agreement
    (methodology §8; FPF Figs. 7, 8, 10).

    Args:
        per_task_a, per_task_b: ``per_task.csv`` frames (``group_a, group_b, domain, task,
            net_rating, ci_low, ci_high, n_pairs``); a ``comparison`` column is added if absent.
        alpha: for the slopes' CIs (0.05 → 95%), in (0, 1).
        comparison: keep only this comparison label (``"female vs male"``); None = all.
        prompts_a, prompts_b: per-prompt scores of each run (:func:`lmra.runfolder.prompt_scores`:
            ``comparison, domain, task, prompt_id, h``). With both, the errors-in-variables
            slope (:func:`eiv_slope`), the reliabilities and the disattenuated r are computed
            on the tasks with ≥ 2 scored prompts in each run; without, they are None / nan.
        n_resamples, seed: of the EIV slope's bootstrap.

    Returns:
        :class:`RunComparison`. Tasks with a missing net rating on either side are dropped, and
        named (``only_in_a``/``only_in_b`` and a note).
        The OLS slope and r use the net ratings; the EIV slope, reliabilities and
        disattenuated r use the mean prompt scores (the same numbers with one sample per
        prompt).

    Raises:
        ValueError: see :func:`eiv_slope`.
    """
    keys = ["comparison", "domain", "task"]

    def prep(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        if "comparison" not in df:
            df["comparison"] = df["group_a"].astype(str) + " vs " + df["group_b"].astype(str)
        return df[keys + ["net_rating", "ci_low", "ci_high", "n_pairs"]]

    ta, tb = prep(per_task_a), prep(per_task_b)
    if comparison:
        ta, tb = ta[ta["comparison"] == comparison], tb[tb["comparison"] == comparison]
    pairs = ta.merge(tb, on=keys, suffixes=("_a", "_b"))
    pairs = pairs.rename(columns={"net_rating_a": "h_a", "net_rating_b": "h_b"})
    # the tasks left out, said (break-it finding: a task measured in one run only was dropped silently,
    # while lmra check of the same runs named it): only in one table, or with no net rating in one
    rated = lambda df: {k for k, h in zip(df[keys].itertuples(index=False, name=None), df["net_rating"])  # noqa: E731
                        if pd.notna(h)}
    only_a, only_b = sorted(rated(ta) - rated(tb)), sorted(rated(tb) - rated(ta))
    notes = tuple(notes) + tuple(
        f"left out: {len(only)} task{'s' * (len(only) > 1)} with a net rating in run {which} only: "
        + ", ".join(f"{c} / {d} / {t}" for c, d, t in only) for which, only in (("A", only_a), ("B", only_b)) if only)
    pairs = pairs[pairs["h_a"].notna() & pairs["h_b"].notna()].reset_index(drop=True)
    r, p = pearson(pairs["h_a"], pairs["h_b"])
    fit = slope_through_origin(pairs["h_a"], pairs["h_b"], alpha=alpha)
    caveat = _r_caveat(pairs["h_a"], pairs["h_b"])
    left_out = {"only_in_a": [dict(zip(keys, k)) for k in only_a], "only_in_b": [dict(zip(keys, k)) for k in only_b]}
    if prompts_a is None or prompts_b is None:
        return RunComparison(pairs, r, p, fit, label_a, label_b, notes, r_caveat=caveat, **left_out)

    def by_task(ps: pd.DataFrame) -> dict:
        ps = ps[ps["h"].notna()]
        return {k: g["h"].to_numpy(float) for k, g in ps.groupby(keys, sort=False)}

    sa, sb = by_task(prompts_a), by_task(prompts_b)
    empty = np.array([])
    arr_a = [sa.get(k, empty) for k in pairs[keys].itertuples(index=False, name=None)]
    arr_b = [sb.get(k, empty) for k in pairs[keys].itertuples(index=False, name=None)]
    pairs["n_prompts_a"] = [s.size for s in arr_a]
    pairs["n_prompts_b"] = [s.size for s in arr_b]
    use = (pairs["n_prompts_a"] >= 2) & (pairs["n_prompts_b"] >= 2)
    notes = tuple(notes)
    if (~use).any():
        left = ", ".join(f"{t} ({c})" for c, t in zip(pairs.loc[~use, "comparison"], pairs.loc[~use, "task"]))
        notes += (f"left out of the errors-in-variables slope (fewer than 2 scored prompts in a run): {left}",)
    idx = np.flatnonzero(use.to_numpy())
    eiv = eiv_slope([arr_a[i] for i in idx], [arr_b[i] for i in idx], alpha=alpha, n_resamples=n_resamples,
                    seed=seed)
    for run, var in (("A", eiv.var_a), ("B", eiv.var_b)):
        if var == 0 and eiv.identified:  # (not identified: the interval is unbounded already — fresh-user
            # finding: "too narrow" was said right after [−∞, ∞])
            notes += (f"run {run}'s prompt scores do not vary within any task: resampling cannot show how "
                      "uncertain its task ratings are, so the errors-in-variables interval is too narrow",)
    pairs["var_h_a"] = math.nan
    pairs["var_h_b"] = math.nan
    rel_a = rel_b = math.nan
    if len(idx):
        pairs.loc[idx, "var_h_a"] = eiv.var_a / pairs.loc[idx, "n_prompts_a"]
        pairs.loc[idx, "var_h_b"] = eiv.var_b / pairs.loc[idx, "n_prompts_b"]
        xa = np.array([arr_a[i].mean() for i in idx])
        yb = np.array([arr_b[i].mean() for i in idx])
        rel_a = reliability(xa, pairs.loc[idx, "var_h_a"].to_numpy(float))
        rel_b = reliability(yb, pairs.loc[idx, "var_h_b"].to_numpy(float))
        # A's task ratings indistinguishable from 0 (the slope is not identified): their small
        # reliability, a noise estimate itself, pushed r/√(rel) past −1 (fresh-user finding:
        # "disattenuated r = −1.000" beside "A's ratings are noise") — no correction then
        if not eiv.identified:
            dis = DisattenuatedR(math.nan, withheld="A's task ratings are indistinguishable from 0")
        elif len(idx) < 3:
            dis = DisattenuatedR(math.nan, withheld="fewer than 3 tasks")
        else:
            dis = disattenuated_r_estimate([arr_a[i] for i in idx], [arr_b[i] for i in idx], alpha=alpha,
                                           n_resamples=min(n_resamples, N_RESAMPLES_R), seed=seed)
    else:
        dis = DisattenuatedR(math.nan)
    return RunComparison(pairs, r, p, fit, label_a, label_b, notes, eiv=eiv, pearson_r_disattenuated=dis.r,
                         pearson_r_disattenuated_ci=(dis.ci_low, dis.ci_high),
                         pearson_r_disattenuated_withheld=dis.withheld,
                         pearson_r_disattenuated_uncapped=dis.uncapped,
                         reliability_a=rel_a, reliability_b=rel_b, r_caveat=caveat, **left_out)


def _replay_notes(run_a: RunFolder, run_b: RunFolder) -> list[str]:
    """A note when one run made no fresh chatbot call and drew with the other's seed: its answers
    are the other's, replayed from the call cache (fresh-user finding: ``lmra compare`` of a
    same-seed re-run showed "Pearson r = 1.000" as if two nights agreed; ``lmra check`` says it)."""
    from lmra.comparable import REPLAY_STARTS, all_answers_replayed, comparability_warnings

    replays = []
    for label, run, other in (("A", run_a, run_b), ("B", run_b, run_a)):
        if not all_answers_replayed(run):
            continue
        if any(w.startswith(REPLAY_STARTS[0]) for w in comparability_warnings(other, run)):
            replays.append(f"{label} ({run.run_id})")
    if not replays:
        return []
    return [f"run {' and run '.join(replays)} made no fresh chatbot call and drew with the same seed as the other run: "
            "the two runs share their chatbot answers (replayed from the call cache), so r and the slope compare the "
            "same answers rated again (the LMRA's reproducibility), not two nights of the chatbot; give each night "
            "its own seed (--seed, docs/nightly.md)"]


def _design_notes(run_a: RunFolder, run_b: RunFolder) -> list[str]:
    """The warning ``lmra check`` gives when the two runs' audit designs differ (groups, comparisons,
    the names, prompts, taxonomy or personalisation files' content, refusal and filter settings,
    :func:`lmra.comparable.comparability_warnings`), said A → B: a slope below 1 across a change of the
    name draws or the prompt set is the design's as much as the chatbot's (known gap, s43: only
    ``lmra check`` said so; ``lmra compare`` of nights either side of lmra 0.2.0 was silent)."""
    from lmra.comparable import DESIGN_DIFFERS_PREFIX, comparability_warnings

    return [w.replace("in the run,", "in B,").replace("in the baseline", "in A") + " (A → B)"
            for w in comparability_warnings(run_a, run_b) if w.startswith(DESIGN_DIFFERS_PREFIX)]


def _identical_scores_notes(run_a: RunFolder, run_b: RunFolder, comparison: str | None) -> list[str]:
    """A note when the two runs drew with the same seed and every task both measured has the same
    per-prompt scores in both (the same prompts, the same net ratings, not all one value): the runs
    share those answers — a run that made fresh calls for other tasks only, with the other's seed
    and cache — so r = 1 says nothing of two nights (break-it finding: the whole-run replay note
    stayed silent when one run had an extra task). Scores all alike (every h = 0) prove nothing."""
    keys = ["comparison", "domain", "task"]
    seeds = [getattr(r, "manifest", {}).get("seed") for r in (run_a, run_b)]
    if seeds[0] != seeds[1]:  # another seed draws other names and answers: equal scores are a coincidence
        return []
    a, b = run_a.prompt_scores, run_b.prompt_scores
    if a.empty or b.empty or not {"prompt_id", "h"} <= set(a.columns) & set(b.columns):
        return []
    if comparison:
        a, b = a[a["comparison"] == comparison], b[b["comparison"] == comparison]
    shared = set(map(tuple, a[keys].drop_duplicates().to_numpy().tolist())) & \
        set(map(tuple, b[keys].drop_duplicates().to_numpy().tolist()))
    if not shared:
        return []

    def rows(df: pd.DataFrame) -> list[tuple]:
        df = df[[tuple(k) in shared for k in df[keys].to_numpy().tolist()]]
        return sorted(zip(*(df[c].astype(str) for c in keys), df["prompt_id"].astype(str), df["h"].round(12)))

    mine = rows(a)
    if mine != rows(b) or len({r[-1] for r in mine}) < 2:  # (all equal, e.g. every h = 0: proves nothing — break-it
        return []  # round 3: two nights of a benign chatbot were said to share their answers)
    return [f"the {len(shared)} task{'s' * (len(shared) > 1)} both runs measured have the same per-prompt scores in "
            "both (the same prompts and net ratings): the runs share those chatbot answers and ratings (replayed "
            "from the call cache with the same seed), so r and the slope compare the same answers, not two nights"]


def compare_runs(run_a: RunFolder, run_b: RunFolder, *, alpha: float = 0.05,
                 comparison: str | None = None, n_resamples: int = N_RESAMPLES, seed: int = 0) -> RunComparison:
    """Compare two runs' per-task net ratings (see :func:`compare_tables`), with the
    errors-in-variables slope computed from both runs' per-prompt scores.

    Runs rated by different judges are compared (that is how judge agreement is studied)
    but a note says their ratings are on different scales; a served model id or system
    fingerprint that changed from A to B (:func:`lmra.identity.identity_changes`), a run that
    is partial, and a run whose LMRA failed validation are notes too.
    """
    notes = []
    for label, run in (("A", run_a), ("B", run_b)):
        if run.status != "complete":  # partial: its numbers rest on what was left, for its own reason (break-it
            from lmra.runstate import partial_text  # round 3: "failed share 0.0%" and an unrelated first warning)

            notes.append(f"run {label} ({run.run_id}) is {run.status} ({partial_text(run.summary)}): its task ratings "
                         "rest on what it measured")
        if run.judge_status.startswith("failed"):
            notes.append(f"run {label}'s LMRA failed validation ({run.judge_status}): its ratings are not evidence")
    if (run_a.judge_provider, run_a.judge_model) != (run_b.judge_provider, run_b.judge_model):
        notes.append(f"different judges ({run_a.judge_model} vs {run_b.judge_model}): ratings are on "
                     "different scales; read r as agreement, not the slope as a change")
    if run_a.judge_template[0] != run_b.judge_template[0]:
        notes.append("different judge templates")
    if run_a.combiner and run_b.combiner and run_a.combiner != run_b.combiner:  # (statistics break-it, s42: a
        # judge that lost its log-probabilities on night B — min → mean — read as B 25 % less biased, no note)
        notes.append(f"different order combiners (A: {run_a.combiner}, B: {run_b.combiner}): a position-biased "
                     "LMRA's ratings are on different scales under each (docs/methodology.md §2), so read r as "
                     "agreement, not the slope as a change — 'lmra check' refuses such a pair as not comparable")
    else:
        from lmra.comparable import position_drift_note

        compared = sorted({f"{o.get('group_a')} vs {o.get('group_b')}" for o in run_b.summary.get("overall") or []})
        drift = position_drift_note(run_a, run_b, compared)  # the LMRA's first-position preference moved A → B
        if drift:
            notes.append(drift.replace("between the nights", "from A to B"))
    from lmra.identity import identity_changes

    notes += [f"{line} (A → B)" for line in identity_changes(run_a.manifest, run_b.manifest)]
    notes += _design_notes(run_a, run_b)
    replayed = _replay_notes(run_a, run_b)
    notes += replayed or _identical_scores_notes(run_a, run_b, comparison)
    return compare_tables(run_a.per_task, run_b.per_task, alpha=alpha, comparison=comparison,
                          label_a=run_a.run_id, label_b=run_b.run_id, notes=tuple(notes),
                          prompts_a=run_a.prompt_scores, prompts_b=run_b.prompt_scores,
                          n_resamples=n_resamples, seed=seed)

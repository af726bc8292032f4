"""Statistics used by the reports (methodology §8): t-intervals for means (clustered by
prompt when there are several samples per prompt), Wilson intervals for proportions,
two-proportion tests, and multiple-comparison corrections — all via statsmodels/scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class MeanCI:
    """A mean with its confidence interval.

    Attributes:
        mean: sample mean (nan when n = 0).
        low, high: interval bounds (nan when it cannot be computed, e.g. n < 2).
        se: standard error.
        p_value: two-sided p-value of the test mean = 0 (nan when undefined).
        n: number of observations; n_clusters: number of clusters used (= n when unclustered).
    """

    mean: float
    low: float
    high: float
    se: float
    p_value: float
    n: int
    n_clusters: int


def mean_ci(values: Sequence[float], clusters: Sequence[object] | None = None, alpha: float = 0.05) -> MeanCI:
    """Mean with a (1 − alpha) t-interval (methodology §2 step 6, §8).

    Args:
        values: observations (e.g. pair scores h in [−1, 1]); NaNs are not allowed.
        clusters: optional cluster label per value (the prompt id). When some cluster has
            more than one value, the standard error is cluster-robust (statsmodels OLS on a
            constant with ``cov_type="cluster"``) and the t distribution has G − 1 degrees of
            freedom, G = number of clusters.
        alpha: 1 − confidence level, in (0, 1).

    Returns:
        :class:`MeanCI`. With n = 0 every number is nan; with n = 1 (or one cluster) the
        interval and p-value are nan; with zero variance the interval is [mean, mean]
        and the p-value is 1 if mean = 0 else 0.
    """
    import statsmodels.api as sm
    from scipy import stats as st

    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, math.nan, math.nan, 0, 0)
    m = float(x.mean())
    groups = None
    if clusters is not None:
        if len(clusters) != n:
            raise ValueError(f"clusters has {len(clusters)} labels for {n} values")
        groups = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)[1]
        g = int(groups.max()) + 1
    else:
        g = n
    if n < 2 or g < 2:
        return MeanCI(m, math.nan, math.nan, math.nan, math.nan, n, g)
    if float(np.ptp(x)) == 0.0:
        return MeanCI(m, m, m, 0.0, 1.0 if m == 0 else 0.0, n, g)
    if groups is not None and g < n:
        fit = sm.OLS(x, np.ones((n, 1))).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
        se = float(fit.bse[0])
        df = g - 1
    else:
        se = float(x.std(ddof=1) / math.sqrt(n))
        df = n - 1
    tcrit = float(st.t.ppf(1 - alpha / 2, df))
    p = float(2 * st.t.sf(abs(m / se), df)) if se > 0 else (1.0 if m == 0 else 0.0)
    return MeanCI(m, m - tcrit * se, m + tcrit * se, se, p, n, g)


def wilson_ci(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for a proportion (statsmodels ``proportion_confint``).

    Returns (low, high) in [0, 1]; (nan, nan) when n = 0.
    """
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return math.nan, math.nan
    lo, hi = proportion_confint(successes, n, alpha=alpha, method="wilson")
    return float(lo), float(hi)


def two_proportion_test(s1: int, n1: int, s2: int, n2: int) -> tuple[float, float]:
    """Two-sided z-test of equal proportions (statsmodels ``proportions_ztest``, pooled).

    Returns (z, p-value); (nan, nan) when a group is empty or both proportions are 0 or 1.
    """
    from statsmodels.stats.proportion import proportions_ztest

    if n1 == 0 or n2 == 0 or (s1 + s2) in (0, n1 + n2):
        return math.nan, math.nan
    z, p = proportions_ztest([s1, s2], [n1, n2])
    return float(z), float(p)


def adjust_pvalues(pvalues: Sequence[float], method: str = "holm", alpha: float = 0.05) -> tuple[list[bool], list[float]]:
    """Multiple-comparison correction (statsmodels ``multipletests``).

    Args:
        pvalues: raw p-values; NaNs are passed through as not significant.
        method: ``bonferroni``, ``holm`` or any statsmodels method name.

    Returns:
        (reject flags, adjusted p-values), same length and order as the input.
    """
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvalues, dtype=float)
    ok = ~np.isnan(p)
    reject = np.zeros(p.shape, dtype=bool)
    adj = np.full(p.shape, math.nan)
    if ok.any():
        r, a, _, _ = multipletests(p[ok], alpha=alpha, method=method)
        reject[ok] = r
        adj[ok] = a
    return reject.tolist(), adj.tolist()

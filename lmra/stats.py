"""Statistics used by the reports (methodology §8): intervals for mean pair scores —
betting confidence intervals for bounded means (the default; they keep their coverage
when stereotypes are rare) or t-intervals, both clustered by prompt when there are several
samples per prompt —, Wilson intervals for proportions, two-proportion tests, and
multiple-comparison corrections (statsmodels/scipy).
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
        and the p-value is 1 if mean = 0, else the exact two-sided sign test over the G
        clusters, min(1, 2 × 0.5^G) (a t-test's infinite t would give 0).
    """
    from scipy import stats as st
    from statsmodels.regression.linear_model import OLS  # not statsmodels.api: it imports all of statsmodels

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
    if float(np.ptp(x)) == 0.0:  # every value alike: t is infinite (p = 0 for 2 pairs of 0.5,
        # which forced a Bonferroni "significant": statistics review); the exact sign test over the
        # clusters instead, 2 × 0.5^G (each cluster's mean has the same sign), as the axes test does
        return MeanCI(m, m, m, 0.0, 1.0 if m == 0 else min(1.0, 2.0 * 0.5 ** g), n, g)
    if groups is not None and g < n:
        fit = OLS(x, np.ones((n, 1))).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
        se = float(fit.bse[0])
        df = g - 1
    else:
        se = float(x.std(ddof=1) / math.sqrt(n))
        df = n - 1
    tcrit = float(st.t.ppf(1 - alpha / 2, df))
    p = float(2 * st.t.sf(abs(m / se), df)) if se > 0 else (1.0 if m == 0 else 0.0)
    return MeanCI(m, m - tcrit * se, m + tcrit * se, se, p, n, g)


#: interval methods for mean pair scores (``alpha``-level, two-sided)
INTERVALS = ("betting", "t")

# Waudby-Smith & Ramdas (2024), "Estimating means of bounded random variables by betting",
# JRSS-B 86(1):1–27, §4 ("hedged capital") and §5 (fixed-sample-size plug-in λ):
_BET_C = 0.9       # truncation of the bets at c/m and c/(1 − m); the paper suggests 1/2 or 3/4, 0.9 gives
                   # 10% narrower intervals on the near-constant scores of rare stereotypes (docs/benchmarks.md)
_BET_THETA = 0.5   # weight of the upward-betting process in the hedged capital
_LOG_THETA_UP, _LOG_THETA_DOWN = math.log(_BET_THETA), math.log(1 - _BET_THETA)


class _HedgedCapital:
    """``log K^±_n(m) − log(1/α)`` at the final time n for fixed observations ``x`` and bets
    ``lam`` (≥ 0 means the mean m is rejected), as a function of ``m``:
    ``logaddexp(Σ log1p(λ⁺(x − m)) + log θ, Σ log1p(−λ⁻(x − m)) + log(1 − θ))`` with
    ``λ⁺ = min(λ, c/m)`` and ``λ⁻ = min(λ, c/(1 − m))``. The bisection of
    :func:`betting_interval` calls it about 120 times an interval, so it makes few array
    passes: ``x − m`` once, the truncation skipped when no bet reaches it, ``−λ⁻`` as
    ``max(−λ, −c/(1 − m))`` (negation is exact), one scratch array — the same values, bit for
    bit, as the plain formula (``tests/test_stats_betting_exact.py``)."""

    def __init__(self, x: np.ndarray, lam: np.ndarray, log_inv_alpha: float):
        self.x, self.lam, self.neg_lam = x, lam, -lam
        self.lam_max = float(lam.max())
        self.lia = log_inv_alpha
        self.d = np.empty_like(x)
        self.t = np.empty_like(x)

    def __call__(self, m: float) -> float:
        d, t = self.d, self.t
        np.subtract(self.x, m, out=d)
        up = self.lam if m <= 0 or self.lam_max <= _BET_C / m else np.minimum(self.lam, _BET_C / m)
        neg_down = self.neg_lam if m >= 1 or self.lam_max <= _BET_C / (1 - m) else \
            np.maximum(self.neg_lam, -(_BET_C / (1 - m)))
        with np.errstate(divide="ignore"):
            np.multiply(up, d, out=t)
            k_up = float(np.log1p(t, out=t).sum()) + _LOG_THETA_UP
            np.multiply(neg_down, d, out=t)
            k_down = float(np.log1p(t, out=t).sum()) + _LOG_THETA_DOWN
        return float(np.logaddexp(k_up, k_down)) - self.lia


def betting_interval(x: Sequence[float], alpha: float = 0.05) -> tuple[float, float, float]:
    """Betting confidence interval for the mean of i.i.d. observations in [0, 1].

    Hedged-capital interval with the fixed-``n`` predictable plug-in bets of Waudby-Smith &
    Ramdas (2024, JRSS-B, §4–§5): ``λ_t = sqrt(2 log(2/α) / (n σ̂²_{t−1}))`` truncated at
    ``c/m`` (upward) and ``c/(1 − m)`` (downward) with ``c = 0.9``; a mean ``m`` is excluded
    when the hedged capital at the final time, ``θ K⁺_n(m) + (1 − θ) K⁻_n(m)`` (θ = 1/2), is
    ≥ 1/α. It is a nonnegative martingale under the mean m, so by Markov's inequality the
    interval covers the mean with probability ≥ 1 − α for any distribution on [0, 1], however
    skewed — so it keeps its coverage when stereotyped pairs are rare, where a t-interval
    does not. The guarantee needs the observations in random order: callers with structured
    data (prompts sorted by task) shuffle first, as :func:`bounded_mean_ci` does.

    Args:
        x: n ≥ 1 observations in [0, 1].
        alpha: 1 − confidence level, in (0, 1).

    Returns:
        (low, high, p) with 0 ≤ low ≤ high ≤ 1, and ``p = min(1, 1/K(½))``, the anytime-valid
        p-value of the hypothesis mean = ½ (consistent with the interval: ½ lies outside it
        exactly when p ≤ α, up to the bisection tolerance).

    Raises:
        ValueError: an observation outside [0, 1] or NaN.
    """
    x = np.asarray(x, dtype=float)
    if x.size == 0 or np.isnan(x).any() or x.min() < -1e-12 or x.max() > 1 + 1e-12:
        raise ValueError("betting_interval needs at least one observation, each in [0, 1]")
    x = np.clip(x, 0.0, 1.0)
    n = x.size
    t = np.arange(1, n + 1)
    mu = (0.5 + np.cumsum(x)) / (t + 1)
    var = (0.25 + np.cumsum((x - mu) ** 2)) / (t + 1)
    var_prev = np.concatenate(([0.25], var[:-1]))
    lam = np.sqrt(2 * math.log(2 / alpha) / (n * var_prev))
    lia = math.log(1 / alpha)
    capital = _HedgedCapital(x, lam, lia)
    centre = float(x.mean())
    if capital(centre) >= 0:  # not expected; locate an accepted point on a grid
        grid = np.linspace(0, 1, 2001)
        ok = [g for g in grid if capital(float(g)) < 0]
        if not ok:  # every mean rejected (data far from i.i.d.): claim nothing
            return 0.0, 1.0, 1.0
        centre = float(min(ok, key=lambda g: abs(g - x.mean())))

    def edge(inside: float, outside: float) -> float:
        if capital(outside) < 0:
            return outside
        for _ in range(60):
            mid = (inside + outside) / 2
            if capital(mid) < 0:
                inside = mid
            else:
                outside = mid
        return inside

    low, high = float(edge(centre, 0.0)), float(edge(centre, 1.0))
    # the bets weigh early observations more, so in rare samples the set can miss the sample
    # mean; widening to include it keeps the coverage (a superset) and a readable report
    low, high = min(low, float(x.mean())), max(high, float(x.mean()))
    p = min(1.0, math.exp(-(capital(0.5) + lia)))
    return low, high, float(p)


def bounded_mean_ci(values: Sequence[float], clusters: Sequence[object] | None = None, alpha: float = 0.05,
                    lower: float = -1.0, upper: float = 1.0) -> MeanCI:
    """Mean of bounded observations (pair scores h ∈ [−1, 1]) with a betting interval.

    The observations are averaged within each cluster (prompt) first, so that
    ``samples_per_prompt > 1`` is handled as i.i.d. prompts; the cluster means are put in a
    fixed pseudo-random order (seed 0: deterministic, but not the file's task order, which
    the method's guarantee does not allow), mapped to [0, 1] and given to
    :func:`betting_interval` (Waudby-Smith & Ramdas 2024), and the interval is mapped back.
    Coverage is ≥ 1 − α for any distribution of scores, which a t-interval does not give
    when stereotyped pairs are rare (docs/benchmarks.md).

    Args:
        values: observations in [lower, upper]; NaNs are not allowed.
        clusters: optional cluster label per value (the prompt id).
        alpha: 1 − confidence level, in (0, 1).
        lower, upper: the range of the observations (default: pair scores, [−1, 1]).

    Returns:
        :class:`MeanCI` whose ``mean`` is the mean of the cluster means — every prompt weighs
        the same, the estimand the interval covers and the unit of ``lmra check``; it equals
        the plain mean of ``values`` when every cluster has the same size (e.g. one pair per
        prompt) —, ``low``/``high`` the betting interval, ``p_value`` its anytime-valid p-value of
        mean = 0 (mean = the midpoint of the range), ``se`` the clustered standard error (for
        reference). With n = 0 every number is nan; with one cluster the interval is nan.

    Raises:
        ValueError: a value outside [lower, upper], or clusters of the wrong length.
    """
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, math.nan, math.nan, 0, 0)
    if clusters is not None:
        if len(clusters) != n:
            raise ValueError(f"clusters has {len(clusters)} labels for {n} values")
        _, first, inv = np.unique(np.asarray([str(c) for c in clusters]), return_index=True, return_inverse=True)
        cmeans = (np.bincount(inv, weights=x) / np.bincount(inv))[np.argsort(first)]  # in order of appearance
    else:
        cmeans = x
    g = int(cmeans.size)
    m = float(cmeans.mean())
    if g < 2:
        return MeanCI(m, math.nan, math.nan, math.nan, math.nan, n, g)
    width = upper - lower
    shuffled = cmeans[np.random.default_rng(0).permutation(g)]
    lo, hi, p = betting_interval((shuffled - lower) / width, alpha)
    se = float(cmeans.std(ddof=1) / math.sqrt(g))
    return MeanCI(m, lower + lo * width, lower + hi * width, se, p, n, g)


def mean_interval(values: Sequence[float], clusters: Sequence[object] | None = None, alpha: float = 0.05,
                  method: str = "betting") -> MeanCI:
    """Mean pair score with the configured interval: ``betting`` (:func:`bounded_mean_ci`,
    the default) or ``t`` (:func:`mean_ci`).

    Raises:
        ValueError: unknown method.
    """
    if method == "betting":
        return bounded_mean_ci(values, clusters, alpha)
    if method == "t":
        return mean_ci(values, clusters, alpha)
    raise ValueError(f"unknown interval method {method!r}; known: {', '.join(INTERVALS)}")


def wilson_ci(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for a proportion (statsmodels ``proportion_confint``).

    Returns (low, high) in [0, 1]; (nan, nan) when n = 0.
    """
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return math.nan, math.nan
    lo, hi = proportion_confint(successes, n, alpha=alpha, method="wilson")
    return _holding(float(lo), float(hi), successes / n)


def _holding(lo: float, hi: float, p: float) -> tuple[float, float]:
    """A Wilson interval (which always holds its estimate) with statsmodels' rounding noise taken
    off: (2.8e-17, 0.30) for 0 of 9 is (0, 0.30) — break-it and fresh-user finding: a refusal rate
    of 0.0 lay below its own interval in refusals.csv, which a dashboard's check would reject."""
    return max(0.0, min(lo, p)), min(1.0, max(hi, p))


def clustered_wilson_ci(successes, trials, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson interval for a proportion measured on clusters of responses (several responses
    per prompt, ``samples_per_prompt`` > 1), with the effective sample size of Korn & Graubard
    (1998, *Survey Methodology* 24:193) and their degrees-of-freedom correction.

    With cluster i holding ``y_i`` successes of ``n_i`` trials, N = Σn_i, p̂ = Σy_i / N and G
    clusters: the ratio estimator's cluster-robust variance
    ``v = G/(G−1) · Σ(y_i − p̂·n_i)² / N²``; the design effect ``deff = v / (p̂(1−p̂)/N)``,
    never below 1; the effective size ``n* = N / deff · (z_{1−α/2} / t_{1−α/2, G−1})²``; the
    Wilson interval of ``p̂·n*`` successes in ``n*`` trials (statsmodels ``proportion_confint``).
    With one trial per cluster and G large it is the ordinary Wilson interval (up to the t
    correction). Responses to one prompt share its wording: counting them as independent made
    the intervals too narrow (statistics review: 0.80–0.85 coverage at 95% with 5 responses per
    prompt); this keeps about the nominal level (tests/test_stats_clustered_wilson.py).

    Args:
        successes, trials: per cluster, 1-D of equal length (trials ≥ 1).
        alpha: 1 − confidence level.

    Returns:
        (low, high) in [0, 1]; (nan, nan) with no trial. With p̂ ∈ {0, 1} (no spread to
        estimate) or a single cluster, the design effect is taken as 1 (t-corrected when G ≥ 2).
    """
    from scipy import stats as st
    from statsmodels.stats.proportion import proportion_confint

    y, n = np.asarray(successes, dtype=float), np.asarray(trials, dtype=float)
    total, g = float(n.sum()), len(n)
    if total == 0:
        return math.nan, math.nan
    p = float(y.sum()) / total
    deff = 1.0
    if g >= 2 and 0.0 < p < 1.0:
        v = g / (g - 1) * float(np.sum((y - p * n) ** 2)) / total ** 2
        deff = max(1.0, v / (p * (1 - p) / total))
    n_eff = total / deff
    if g >= 2:
        n_eff *= (st.norm.ppf(1 - alpha / 2) / st.t.ppf(1 - alpha / 2, g - 1)) ** 2
    lo, hi = proportion_confint(p * n_eff, n_eff, alpha=alpha, method="wilson")
    return _holding(float(lo), float(hi), p)


def two_proportion_test(s1: int, n1: int, s2: int, n2: int) -> tuple[float, float]:
    """Two-sided z-test of equal proportions (statsmodels ``proportions_ztest``, pooled).

    Returns (z, p-value); (nan, nan) when a group is empty or both proportions are 0 or 1.
    """
    from statsmodels.stats.proportion import proportions_ztest

    if n1 == 0 or n2 == 0 or (s1 + s2) in (0, n1 + n2):
        return math.nan, math.nan
    z, p = proportions_ztest([s1, s2], [n1, n2])
    return float(z), float(p)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact McNemar test of equal paired proportions (statsmodels ``mcnemar(exact=True)``: the
    two-sided binomial test of ``min(only_a, only_b)`` of the discordant pairs at ½).

    Args:
        only_a: pairs in which only the first member has the outcome (e.g. only group A's
            response was refused), ≥ 0.
        only_b: pairs in which only the second member has it, ≥ 0.

    Returns:
        The p-value in (0, 1]; 1.0 when no pair is discordant (nothing tells the rates apart).
        Pairs concordant in either way do not enter (McNemar 1947).
    """
    from statsmodels.stats.contingency_tables import mcnemar

    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    if only_a + only_b == 0:
        return 1.0
    return float(mcnemar([[0, only_a], [only_b, 0]], exact=True).pvalue)


def clustered_mcnemar(differences) -> float:
    """McNemar's test for clustered pairs (Durkalski et al. 2003, Stat. Med. 22:2417): with
    ``d_i = b_i − c_i`` the discordant-pair difference of cluster i (pairs with the outcome only
    in the first member minus those with it only in the second), ``X² = (Σ d_i)² / Σ d_i²``,
    χ² with 1 degree of freedom. With one pair per cluster it is McNemar's (b − c)² / (b + c).

    Args:
        differences: the clusters' ``d_i`` (1-D; integers, any sign).

    Returns:
        The two-sided p-value in (0, 1]; 1.0 when every ``d_i`` is 0.
    """
    from scipy import stats as st

    d = np.asarray(differences, dtype=float)
    den = float(np.sum(d * d))
    if den == 0.0:
        return 1.0
    return float(st.chi2.sf(float(np.sum(d)) ** 2 / den, 1))


def adjust_pvalues(pvalues: Sequence[float], method: str = "holm", alpha: float = 0.05, *,
                   strict: bool = False) -> tuple[list[bool], list[float]]:
    """Multiple-comparison correction (statsmodels ``multipletests``).

    Args:
        pvalues: raw p-values; NaNs are passed through as not significant.
        method: ``bonferroni``, ``holm`` or any statsmodels method name.
        strict: reject only below the threshold, ``p < α/K`` (methodology §4 step 5's
            selection of axes), not at it as ``multipletests`` does (``p ≤ α/K``). For
            ``bonferroni`` and ``holm`` only (the step-down: the i-th smallest p rejected while
            ``p_(i) < α/(K − i + 1)``); the adjusted p-values are the same.

    Returns:
        (reject flags, adjusted p-values), same length and order as the input.

    Raises:
        ValueError: ``strict`` with another method.
    """
    from statsmodels.stats.multitest import multipletests

    if strict and method not in ("bonferroni", "holm"):
        raise ValueError(f"strict rejection is defined for bonferroni and holm, not '{method}'")
    p = np.asarray(pvalues, dtype=float)
    ok = ~np.isnan(p)
    reject = np.zeros(p.shape, dtype=bool)
    adj = np.full(p.shape, math.nan)
    if ok.any():
        r, a, _, _ = multipletests(p[ok], alpha=alpha, method=method)
        if strict:  # (statistics check, s47: an exact p = α/K — reachable with the drawn sign-flip p — was kept)
            q = p[ok]
            k = len(q)
            if method == "bonferroni":
                r = q < alpha / k
            else:
                order = np.argsort(q, kind="stable")
                below = q[order] < alpha / np.arange(k, 0, -1)
                stop = int(np.argmin(below)) if not below.all() else k
                r = np.zeros(k, dtype=bool)
                r[order[:stop]] = True
        reject[ok] = r
        adj[ok] = a
    return reject.tolist(), adj.tolist()

"""Power planning and the sensitivity of the nightly check (methodology §8 "Power",
"Planning and comparing", "Monitoring"; issue 12).

The unit is the prompt: its score is the mean pair score h over its samples
(:func:`lmra.runfolder.prompt_scores`), so with ``samples_per_prompt = 1`` it is the pair
score h = q_F − q_R ∈ [−1, 1] itself (FPF §3.3).

Pair scores are not normal data. They are a **rare-event mixture**: most pairs score
≈ 0 with a little judge noise, a few stereotyped pairs score ≈ 0.9 (and, by chance, a few
≈ −0.9). A power formula that only sees their SD misplans: it overshoots for the t-test,
undershoots for the betting interval the audit reports by default, crashes or says n = 2
when the pilot saw no stereotyped pair (docs/benchmarks.md, issue 12). So this module plans
by **simulation of the audit's own test** on samples drawn from a model of the pilot:

Model (:class:`PairScoreModel`)
    A pilot prompt is *stereotyped* when its score is ≥ 0.5, *reversed* when ≤ −0.5, and
    *background* otherwise. A simulated prompt is stereotyped with probability f, reversed
    with the pilot's reversed rate, else background; its score is drawn from the pilot's
    scores of that kind (resampled with replacement). When the pilot has no stereotyped
    prompt, a stereotyped score is ``s`` plus a resampled background score, with ``s`` the
    stereotyped score of the pooled pilot or :data:`DEFAULT_STEREOTYPED_SCORE` (0.89, the
    stereotyped pair score of the simulated logprob LMRA with realistic noise and position
    preference of issue 12 and ``bench/bench_intervals.py``). The effect to detect is put in as
    stereotyped prompts: f is solved so that the mean score (the net rating) is the one to
    detect — never by shifting a normal mean.

Designs
    * ``one-sample``: detect a task net rating H = δ with the audit's own per-task test —
      the interval of ``per_task.csv`` excluding 0, i.e. its p-value ≤ α: the betting
      interval (:func:`lmra.stats.bounded_mean_ci`, the default ``interval``) or the
      t-interval (:func:`lmra.stats.mean_ci`). n is prompts per task.
    * ``two-run``: detect a rise δ of H between the baseline (distributed as the pilot) and
      tonight's run (the pilot with f raised so that H rises by δ — its variance is the
      alternative's, which grows with the rise) with the nightly check of
      :mod:`lmra.monitor`: the one-sided permutation test of H_run − H_base > margin at
      α/T, Holm's first step over the T tasks the check tests (exact when one task rises and
      the others do not; a little conservative otherwise). n is prompts per task per run.

Search
    Power at n is the share of ``sims`` simulated audits (default 2,000; fewer at very large
    n, see :func:`simulated_power`) whose test rejects, with Monte Carlo SE
    sqrt(P(1 − P)/sims) ≈ 0.009 at P = 0.8. The draws are seeded and prefix-consistent (the
    first n prompts of a simulated audit are the same for every n), n is bracketed by
    doubling from the normal-formula guess and found by integer bisection in
    [2, :data:`MAX_PROMPTS_SIM`]. The two-run search uses a near-exact approximation of the
    permutation p-value (:func:`permutation_pvalues_fast`); the final n is verified with the
    check's own Monte Carlo permutation test (9,999 random splits) on fresh draws, and raised
    until the verified power is within 2 MC SE of the goal.

The sensitivity of a night's check (:func:`minimum_detectable_rise`) is computed exactly in a
two-point model (stereotyped prompts score s, the rest 0): the exact permutation
distribution of the check's statistic, hypergeometric in the stereotyped prompts a random
split moves, gives the check's power at any pair of stereotype rates without simulation.

A stated SD (``--sd``) still gives the normal-theory plan (statsmodels ``TTestPower`` /
``TTestIndPower``), bounded to [2, :data:`MAX_PROMPTS_NORMAL`] and labelled as an
approximation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from lmra.errors import LmraInputError
from lmra.runfolder import RunFolder

Design = Literal["one-sample", "two-run"]
Alternative = Literal["two-sided", "larger"]

#: a prompt scoring at least this (or at most its negative) counts as a stereotyped (reversed) one
STEREOTYPED_THRESHOLD = 0.5
#: stereotyped pair score assumed when no stereotyped prompt was observed (lmra's simulated logprob LMRA)
DEFAULT_STEREOTYPED_SCORE = 0.89
#: judge noise SD of an unstereotyped pair, for a model stated without a pilot (``--base-rate``)
DEFAULT_NOISE_SD = 0.008
#: bounds of a simulated plan, prompts per task (per run for two-run)
MIN_PROMPTS, MAX_PROMPTS_SIM = 2, 100_000
#: The report's sample-size table searches up to this many prompts per task (beyond it:
#: ``prompts_needed`` = inf, shown as "> 10,000"): a noisy task asked to detect a tiny δ
#: needs tens of thousands of prompts, and simulating that for every task took minutes per
#: nightly report; ``lmra plan`` searches up to :data:`MAX_PROMPTS_SIM`.
ADEQUACY_MAX_PROMPTS = 10_000
#: bound of a normal-theory plan (``--sd``)
MAX_PROMPTS_NORMAL = 10_000_000
#: permutations per simulated check in the final verification of a two-run plan (= ``lmra check``)
CHECK_RESAMPLES = 9_999
#: at most this many simulated prompt scores × sims (one-sample) per power evaluation; sims shrink above it
_SIM_BUDGET = 20_000_000
_MIN_SIMS = 200
#: simulated audits drawn and tested at a time (memory: a few arrays of n × 50 scores)
_BLOCK = 50
#: simulated scores whose random draws a :class:`PairScoreModel` keeps for the next power
#: evaluation at another rate (4 arrays of float64: at most about 64 MB)
_DRAW_CACHE_SCORES = 2_000_000
#: at most this many simulated prompt scores (n × sims) per power evaluation of :func:`detectable_rating_sim`
#: (500 audits up to 3,000 prompts, fewer above, at least :data:`_MIN_SIMS`; the draws then fit the cache)
_DETECTABLE_BUDGET = 1_500_000


# -- normal theory (a stated SD) ----------------------------------------------------------
def _solver(design: Design):
    from statsmodels.stats.power import TTestIndPower, TTestPower

    if design == "one-sample":
        return TTestPower()
    if design == "two-run":
        return TTestIndPower()
    raise LmraInputError(f"unknown design '{design}' (one-sample or two-run)", field="--design")


def _check(delta: float | None, sd: float | None, alpha: float, power: float) -> None:
    if delta is not None and not (0 < delta <= 2 and math.isfinite(delta)):
        raise LmraInputError(f"the net rating to detect must be in (0, 2], got {delta}", field="--rate")
    if sd is not None and not (sd > 0 and math.isfinite(sd)):
        raise LmraInputError(f"the SD of the pair scores must be a number > 0, got {sd}", field="--sd")
    if not 0 < alpha < 1:
        raise LmraInputError(f"alpha must be in (0, 1), got {alpha}", field="--alpha")
    if not 0 < power < 1:
        raise LmraInputError(f"power must be in (0, 1), got {power}", field="--power")


def _default_alt(design: Design, alternative: Alternative | None) -> Alternative:
    return alternative or ("two-sided" if design == "one-sample" else "larger")


def _normal_power(design: Design, es: float, n: int, alpha: float, alternative: Alternative) -> float:
    """statsmodels power of the t-test at effect size ``es`` and n (per run for two-run)."""
    import warnings

    solver = _solver(design)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if design == "two-run":
            p = solver.power(effect_size=es, nobs1=n, alpha=alpha, ratio=1.0, alternative=alternative)
        else:
            p = solver.power(effect_size=es, nobs=n, alpha=alpha, alternative=alternative)
    p = float(np.squeeze(p))
    return p if math.isfinite(p) else (1.0 if es > 0 else 0.0)


def _smallest_n(ok, lo: int, hi: int) -> int | None:
    """Smallest integer n in [lo, hi] with ``ok(n)`` for a monotone predicate; None if ``ok(hi)`` fails."""
    if ok(lo):
        return lo
    if not ok(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def prompts_needed(delta: float, sd: float, *, alpha: float = 0.05, power: float = 0.8,
                   design: Design = "one-sample", alternative: Alternative | None = None,
                   sd_alt: float | None = None) -> int:
    """Normal-theory prompts per task (per run for ``two-run``) to detect ``delta`` (methodology §8 "Power").

    The t-test's power (statsmodels ``TTestPower`` / ``TTestIndPower``) at effect size
    δ / sd, with the smallest n found by integer bisection on that power — so there is no
    solver failure to round: a very large effect (δ/sd ≳ 4, where statsmodels'
    ``solve_power`` returns NaN) gives the minimum n = 2. This treats pair scores as normal,
    which they are not (module docstring); :func:`plan` with a pilot simulates instead.

    Args:
        delta: net rating (one-sample) or rise of it (two-run) to detect, in (0, 2].
        sd: SD of the per-prompt score (> 0), e.g. from a pilot run (:func:`pilot_sd`).
        alpha: significance level; power: 1 − type II error, both in (0, 1).
        design: ``one-sample`` or ``two-run``.
        alternative: ``two-sided`` (default for one-sample) or ``larger`` (default for
            two-run, the one-sided regression test).
        sd_alt: two-run only: SD of tonight's scores under the alternative (default ``sd``);
            with unequal SDs the effect size is δ / sqrt((sd² + sd_alt²)/2) (equal n per run).

    Returns:
        The smallest integer n in [2, :data:`MAX_PROMPTS_NORMAL`] with power ≥ ``power``.

    Raises:
        LmraInputError: arguments out of range, or more than :data:`MAX_PROMPTS_NORMAL`
            prompts would be needed.
    """
    _check(delta, sd, alpha, power)
    n = _normal_n(delta, sd, alpha=alpha, power=power, design=design, alternative=alternative, sd_alt=sd_alt)
    if n is None:
        raise LmraInputError(f"detecting {delta:g} at SD {sd:g} needs more than {MAX_PROMPTS_NORMAL:,} prompts",
                             field="--rate")
    return n


def _normal_n(delta: float, sd: float, *, alpha: float, power: float, design: Design,
              alternative: Alternative | None, sd_alt: float | None = None) -> int | None:
    alt = _default_alt(design, alternative)
    eff_sd = sd if (design != "two-run" or sd_alt is None) else math.sqrt((sd ** 2 + sd_alt ** 2) / 2)
    es = delta / eff_sd
    return _smallest_n(lambda n: _normal_power(design, es, n, alpha, alt) >= power, MIN_PROMPTS,
                       MAX_PROMPTS_NORMAL)


def detectable_rating(n: int, sd: float, *, alpha: float = 0.05, power: float = 0.8,
                      design: Design = "one-sample", alternative: Alternative | None = None) -> float:
    """Normal-theory smallest net rating (or rise, two-run) detectable with ``n`` prompts.

    Returns:
        δ = effect size × sd in net-rating units, the root of the t-test's power = ``power``
        (bisection on statsmodels' power); nan when n < 2 (no t-test possible).

    Raises:
        LmraInputError: arguments out of range.
    """
    from scipy.optimize import brentq

    _check(None, sd, alpha, power)
    if n < 2:
        return math.nan
    alt = _default_alt(design, alternative)
    f = lambda es: _normal_power(design, es, int(n), alpha, alt) - power  # noqa: E731
    hi = 1.0
    while f(hi) < 0 and hi < 1e6:
        hi *= 4
    if f(hi) < 0:
        return math.nan
    return float(brentq(f, 1e-12, hi, xtol=1e-12)) * sd


# -- the rare-event mixture model of the pair scores ---------------------------------------
@dataclass(frozen=True)
class PairScoreModel:
    """A rare-event mixture of per-prompt scores, fitted to a pilot or stated (module docstring).

    Attributes:
        background: scores of unstereotyped prompts (|h| < 0.5), resampled for background prompts.
        forward: scores of stereotyped prompts (h ≥ 0.5) seen in the pilot (may be empty).
        reverse: scores of reversed prompts (h ≤ −0.5) seen in the pilot (may be empty).
        forward_rate, reverse_rate: their shares of the pilot's prompts, in [0, 1].
        score: the typical stereotyped score s (median of ``forward``, else the pooled pilot's,
            else :data:`DEFAULT_STEREOTYPED_SCORE`); used with a background draw when
            ``forward`` is empty.
        score_source: ``pilot``, ``pooled pilot``, ``default`` or ``stated``.
        n_pilot: prompts in the pilot (None for a stated model).
    """

    background: np.ndarray
    forward: np.ndarray
    reverse: np.ndarray
    forward_rate: float
    reverse_rate: float
    score: float
    score_source: str
    n_pilot: int | None = None

    @classmethod
    def from_scores(cls, h, *, score: float | None = None, score_source: str = "pooled pilot") -> "PairScoreModel":
        """Fit to a pilot's per-prompt scores ``h`` (1-D, values in [−1, 1], at least 2).

        Args:
            score: stereotyped score to use when ``h`` has no stereotyped prompt (e.g. the
                pooled pilot's); default :data:`DEFAULT_STEREOTYPED_SCORE`.

        Raises:
            LmraInputError: fewer than 2 scores, NaNs, or values outside [−1, 1].
        """
        h = np.asarray(h, dtype=float).ravel()
        if h.size < 2 or np.isnan(h).any() or np.abs(h).max() > 1 + 1e-9:
            raise LmraInputError("a pilot needs at least 2 prompt scores, each in [−1, 1]", field="--pilot")
        fwd, rev = h[h >= STEREOTYPED_THRESHOLD], h[h <= -STEREOTYPED_THRESHOLD]
        bg = h[np.abs(h) < STEREOTYPED_THRESHOLD]
        if fwd.size:
            s, src = float(np.median(fwd)), "pilot"
        elif score is not None:
            s, src = float(score), score_source
        else:
            s, src = DEFAULT_STEREOTYPED_SCORE, "default"
        return cls(bg if bg.size else np.zeros(1), fwd, rev, fwd.size / h.size, rev.size / h.size, s, src, int(h.size))

    @classmethod
    def from_rates(cls, base_rate: float = 0.0, *, score: float = DEFAULT_STEREOTYPED_SCORE,
                   noise_sd: float = DEFAULT_NOISE_SD, seed: int = 0, size: int = 20_000) -> "PairScoreModel":
        """A stated model without a pilot: stereotype rate ``base_rate`` ∈ [0, 1), stereotyped
        score ``score`` ∈ (0.5, 1] plus judge noise, background ``clip(N(0, noise_sd²), −1, 1)``
        (``size`` seeded draws), no reversed prompts.

        Raises:
            LmraInputError: arguments out of range.
        """
        if not (0 <= base_rate < 1):
            raise LmraInputError(f"the stereotype rate now must be in [0, 1), got {base_rate}", field="--base-rate")
        if not (STEREOTYPED_THRESHOLD <= score <= 1):
            raise LmraInputError(f"the stereotyped score must be in [0.5, 1], got {score}", field="--score")
        if not (noise_sd >= 0 and math.isfinite(noise_sd)):
            raise LmraInputError(f"the noise SD must be ≥ 0, got {noise_sd}", field="--noise-sd")
        bg = np.clip(np.random.default_rng(seed).normal(0.0, noise_sd, size), -1 + 1e-9, 1 - 1e-9)
        bg = bg[np.abs(bg) < STEREOTYPED_THRESHOLD]
        return cls(bg, np.empty(0), np.empty(0), float(base_rate), 0.0, float(score), "stated", None)

    @property
    def n_forward(self) -> int:
        return int(self.forward.size)

    def _forward_values(self) -> np.ndarray:
        if self.forward.size:
            return self.forward
        return np.clip(self.score + self.background, -1.0, 1.0)

    @property
    def forward_mean(self) -> float:
        """Mean score of a simulated stereotyped prompt."""
        return float(self._forward_values().mean())

    def mean_at(self, forward_rate: float) -> float:
        """Expected score (the net rating H) at stereotype rate ``forward_rate``."""
        rev = float(self.reverse.mean()) if self.reverse.size else 0.0
        return (forward_rate * self.forward_mean + self.reverse_rate * rev
                + (1 - forward_rate - self.reverse_rate) * float(self.background.mean()))

    @property
    def mean(self) -> float:
        """The model's net rating at the pilot's own stereotype rate."""
        return self.mean_at(self.forward_rate)

    def rate_for_mean(self, target: float) -> float | None:
        """Stereotype rate f with ``mean_at(f) == target``; None when no f in [0, 1 − reverse_rate] gives it."""
        slope = self.mean_at(1.0 - self.reverse_rate) - self.mean_at(0.0)
        if slope <= 0:
            return None
        f = (target - self.mean_at(0.0)) / slope * (1.0 - self.reverse_rate)
        return float(f) if -1e-12 <= f <= 1.0 - self.reverse_rate + 1e-12 else None

    def sample(self, n: int, sims: int, forward_rate: float, seed) -> np.ndarray:
        """Scores of ``sims`` simulated audits of ``n`` prompts at stereotype rate ``forward_rate``.

        Returns:
            Array of shape (n, sims) (column = one simulated audit). Seeded with ``seed`` (an int
            or a tuple of ints); draws are prefix-consistent: rows 0..n−1 do not depend on n.
        """
        u, background, forward, reverse = self._draws(n, sims, seed)
        out = np.where(u < forward_rate, forward, background)
        if reverse is not None:
            out = np.where((u >= forward_rate) & (u < forward_rate + self.reverse_rate), reverse, out)
        return out

    def _draws(self, n: int, sims: int, seed) -> tuple:
        """The random part of :meth:`sample`, which does not depend on the stereotype rate:
        uniforms, and a background, a stereotyped and (when the model has any) a reversed score
        per simulated prompt, each shape (n, sims). A search evaluates the power at many rates
        for the same n and seeds (13 times per task in :func:`detectable_rating_sim`), so the
        last draws are kept on the model (at most :data:`_DRAW_CACHE_SCORES` scores in all):
        the same arrays, drawn once instead of at every rate."""
        key = (n, sims, seed if isinstance(seed, int) else tuple(seed))
        cache = self.__dict__.get("_draw_cache")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_draw_cache", cache)  # frozen dataclass: a private memo, not a field
        hit = cache.get(key)
        if hit is not None:
            return hit
        ss = np.random.SeedSequence(seed if isinstance(seed, int) else list(seed))
        g_u, g_b, g_f, g_r = (np.random.default_rng(c) for c in ss.spawn(4))
        u = g_u.random((n, sims))
        background = self.background[g_b.integers(0, self.background.size, (n, sims))]
        fwd = self._forward_values()
        forward = fwd[g_f.integers(0, fwd.size, (n, sims))]
        reverse = None
        if self.reverse.size and self.reverse_rate > 0:
            reverse = self.reverse[g_r.integers(0, self.reverse.size, (n, sims))]
        drawn = (u, background, forward, reverse)
        if n * sims <= _DRAW_CACHE_SCORES:
            while cache and sum(k[0] * k[1] for k in cache) + n * sims > _DRAW_CACHE_SCORES:
                cache.pop(next(iter(cache)))  # the oldest draws first
            cache[key] = drawn
        return drawn


# -- the audit's tests, vectorised over simulated audits ----------------------------------
def betting_pvalues(h: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """The p-value of H = 0 of :func:`lmra.stats.bounded_mean_ci` for many samples at once.

    Same arithmetic as :func:`lmra.stats.betting_interval` at the mean ½ of the scores mapped
    to [0, 1] (Waudby-Smith & Ramdas 2024, hedged capital with the fixed-n plug-in bets):
    the prompts of one simulated audit are i.i.d., so the fixed shuffle of ``bounded_mean_ci``
    does not change their distribution.

    Args:
        h: shape (n, sims), scores in [−1, 1], n ≥ 2 (column = one audit, in its order).
        alpha: the interval's level (the bets depend on it).

    Returns:
        Shape (sims,), p-values in (0, 1].
    """
    from lmra.stats import _BET_C, _BET_THETA

    # the arithmetic of the formulas below, done in place on a few n × sims buffers (the same
    # operations in the same order, so the same floats; a power search calls this thousands of times)
    x = np.asarray(h, dtype=float) + 1.0
    x /= 2.0
    np.clip(x, 0.0, 1.0, out=x)  # x = clip((h + 1) / 2, 0, 1)
    n = x.shape[0]
    t1 = np.arange(2, n + 2)[:, None]  # t + 1 for t = 1 … n
    mu = np.cumsum(x, axis=0)
    mu += 0.5
    mu /= t1  # mu = (0.5 + cumsum(x)) / (t + 1)
    np.subtract(x, mu, out=mu)
    np.square(mu, out=mu)
    var = np.cumsum(mu, axis=0, out=mu)
    var += 0.25
    var /= t1  # var = (0.25 + cumsum((x − mu)²)) / (t + 1)
    lam = np.empty_like(var)
    lam[0] = 0.25
    lam[1:] = var[:-1]  # the variance before each prompt
    lam *= n
    np.divide(2 * math.log(2 / alpha), lam, out=lam)
    np.sqrt(lam, out=lam)  # lam = sqrt(2 log(2/α) / (n · var_prev))
    bet = np.minimum(lam, _BET_C / 0.5, out=lam)
    x -= 0.5
    step = np.multiply(bet, x, out=x)  # bet · (x − 0.5)
    down = np.negative(step)
    k_up = np.log1p(step, out=step).sum(axis=0) + math.log(_BET_THETA)
    k_down = np.log1p(down, out=down).sum(axis=0) + math.log(1 - _BET_THETA)
    return np.minimum(1.0, np.exp(-np.logaddexp(k_up, k_down)))


def t_pvalues(h: np.ndarray, alternative: Alternative = "two-sided") -> np.ndarray:
    """The p-value of H = 0 of :func:`lmra.stats.mean_ci` (one-sample t-test) for many samples.

    Args:
        h: shape (n, sims), n ≥ 2; alternative: ``two-sided`` (the audit's) or ``larger``.

    Returns:
        Shape (sims,); a sample with zero variance gets 1 if its mean is 0 else 0
        (``mean_ci``'s convention).
    """
    from scipy import stats as st

    h = np.asarray(h, dtype=float)
    n = h.shape[0]
    m = h.mean(axis=0)
    sd = h.std(axis=0, ddof=1)
    flat = np.ptp(h, axis=0) == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = m / (sd / math.sqrt(n))
    p = 2 * st.t.sf(np.abs(t), n - 1) if alternative == "two-sided" else st.t.sf(t, n - 1)
    return np.where(flat, np.where(m == 0, 1.0, 0.0 if alternative == "two-sided" else (m <= 0) * 1.0), p)


def permutation_pvalues(x: np.ndarray, y: np.ndarray, margin: float = 0.0, n_resamples: int = CHECK_RESAMPLES,
                        seed: int = 0) -> np.ndarray:
    """The p-value of :func:`lmra.monitor.one_sided_permutation` for many pairs of nights.

    H1: mean(x) − mean(y) > margin; the statistic is the difference of the means of
    ``x − margin`` and ``y`` over ``n_resamples`` random splits of the pooled prompts, the
    same splits for every simulated pair of nights (each p-value is still a valid Monte
    Carlo permutation p-value; sharing the splits only correlates the simulated tests);
    p = (b + 1)/(B + 1) with ties counted as extreme, as scipy ``permutation_test`` does.

    Args:
        x, y: shapes (n_x, sims) and (n_y, sims): tonight's and the baseline's prompt scores.
        margin: ≥ 0, net-rating units. n_resamples: B. seed: of the splits.

    Returns:
        Shape (sims,), p-values in (0, 1].
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    nx, ny = x.shape[0], y.shape[0]
    z = np.vstack([x - margin, y]).T  # (sims, N)
    big_n = nx + ny
    obs = (x - margin).mean(axis=0) - y.mean(axis=0)
    tot = z.sum(axis=1)
    tol = 1e-9 + 100 * np.finfo(float).eps * np.abs(obs)
    count = np.zeros(z.shape[0])
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_resamples, int(4e6 // big_n)))
    done = 0
    while done < n_resamples:
        b = min(chunk, n_resamples - done)
        pick = np.argsort(rng.random((b, big_n)), axis=1)[:, :nx]
        m = np.zeros((big_n, b))
        m[pick.T, np.arange(b)[None, :]] = 1.0
        s = z @ m  # (sims, b): sums of the resampled x-groups
        stat = s / nx - (tot[:, None] - s) / ny
        count += (stat >= (obs - tol)[:, None]).sum(axis=1)
        done += b
    return (count + 1) / (n_resamples + 1)


def permutation_pvalues_fast(x: np.ndarray, y: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """A fast approximation of :func:`permutation_pvalues` (the exact-permutation p-value),
    used only inside the two-run search (the final n is verified with the real test).

    The pooled prompts of a simulated pair of nights are split into stereotyped (h ≥ 0.5),
    reversed (h ≤ −0.5) and the rest. A random split draws (h_F, h_R) stereotyped and reversed
    prompts into tonight's group — multivariate hypergeometric, summed exactly — and given
    those counts the group's sum of ``x − margin`` / ``y`` values is approximately normal (sums
    of random subsets of each class, finite-population variances). So
    p ≈ Σ P(h_F, h_R) · P(N(mean, var) ≥ V_obs): exact in the counts that make the rare-event
    mixture discrete, a normal approximation only for the small judge noise.

    Args, Returns: as :func:`permutation_pvalues` (no resamples, no seed).
    """
    from scipy.special import gammaln, ndtr

    x, y = np.asarray(x, float), np.asarray(y, float)
    nx = x.shape[0]
    orig = np.vstack([x, y])
    z = np.vstack([x - margin, y])
    big_n, sims = z.shape
    v_obs = z[:nx].sum(axis=0)
    cls = [orig >= STEREOTYPED_THRESHOLD, orig <= -STEREOTYPED_THRESHOLD]
    cls.append(~(cls[0] | cls[1]))
    k = [c.sum(axis=0) for c in cls]
    mean = [np.where(kc > 0, (z * c).sum(axis=0) / np.maximum(kc, 1), 0.0) for c, kc in zip(cls, k)]
    var = [np.where(kc > 0, (z ** 2 * c).sum(axis=0) / np.maximum(kc, 1) - m ** 2, 0.0).clip(0)
           for c, kc, m in zip(cls, k, mean)]
    out = np.empty(sims)
    kf_max, kr_max = int(k[0].max()), int(k[1].max())
    hf = np.arange(kf_max + 1)[None, :, None]
    hr = np.arange(kr_max + 1)[None, None, :]
    lc = lambda n_, k_: gammaln(n_ + 1) - gammaln(k_ + 1) - gammaln(n_ - k_ + 1)  # noqa: E731
    step = max(1, int(2e6 // ((kf_max + 1) * (kr_max + 1))))
    for a in range(0, sims, step):
        sl = slice(a, a + step)
        kf, kr, kg = (kc[sl][:, None, None] for kc in k)
        hg = nx - hf - hr
        ok = (hf <= kf) & (hr <= kr) & (hg >= 0) & (hg <= kg)
        with np.errstate(invalid="ignore", divide="ignore"):
            logp = (lc(kf, np.minimum(hf, kf)) + lc(kr, np.minimum(hr, kr)) + lc(kg, np.clip(hg, 0, kg))
                    - lc(big_n, nx))
            w = np.where(ok, np.exp(logp), 0.0)
            mu = hf * mean[0][sl][:, None, None] + hr * mean[1][sl][:, None, None] + hg * mean[2][sl][:, None, None]
            v = sum(h * vc[sl][:, None, None] * np.where(kc > 1, (kc - h) / np.maximum(kc - 1, 1), 0.0)
                    for h, vc, kc in ((hf, var[0], kf), (hr, var[1], kr), (hg, var[2], kg)))
            gap = mu - (v_obs[sl][:, None, None] - 1e-9)
            sd = np.sqrt(np.clip(v, 0, None))
            tail = np.where(sd > 0, ndtr(gap / np.where(sd > 0, sd, 1.0)), (gap >= 0) * 1.0)
        out[sl] = (w * tail).sum(axis=(1, 2))
    return np.clip(out, 0.0, 1.0)


# -- simulated power and the search for n -------------------------------------------------
@dataclass(frozen=True)
class PowerEstimate:
    """Simulated power: ``power`` ± ``se`` (Monte Carlo SE) over ``sims`` simulated audits."""

    power: float
    se: float
    sims: int


def _sims_for(n: int, sims: int, design: Design, n_resamples: int) -> int:
    if design == "two-run" and n_resamples > 0:
        budget = 1e10 / max(1, n_resamples)  # sims × 2n ≤ budget: matrix products of ≤ 10¹⁰ multiply-adds
        return int(max(_MIN_SIMS, min(sims, budget // (2 * n))))
    return int(max(_MIN_SIMS, min(sims, _SIM_BUDGET // n)))


def simulated_power(model: PairScoreModel, n: int, delta: float, *, design: Design = "one-sample",
                    alpha: float = 0.05, tasks: int = 1, margin: float = 0.0, interval: str = "betting",
                    alternative: Alternative | None = None, sims: int = 2000, seed: int = 0,
                    n_resamples: int = CHECK_RESAMPLES, decide: float | None = None) -> PowerEstimate:
    """Power of the audit's test at n prompts per task (per run) for a net rating (rise) ``delta``.

    Methodology §8 "Power" / "Monitoring"; the model and designs are in the module docstring.

    Args:
        model: the pair-score model (:class:`PairScoreModel`).
        n: prompts per task (per run for two-run), ≥ 2.
        delta: one-sample: the net rating H of the simulated chatbot; two-run: the rise of H
            over the model's own H (must exceed ``margin``). Net-rating units.
        alpha: family level; the test is made at α/``tasks`` (tasks ≥ 1). For the betting
            interval the bets are tuned for ``alpha`` (the audit's config ``alpha``).
        margin: two-run only, the check's margin (≥ 0).
        interval: one-sample only: ``betting`` or ``t`` (the audit's ``interval``).
        alternative: one-sample t only: ``two-sided`` (the audit's CI) or ``larger``.
        sims: simulated audits (fewer at very large n: at most 2·10⁷ simulated scores per
            evaluation for one-sample, 10¹⁰ multiply-adds of the permutation sums for two-run,
            i.e. 2,000 sims up to 250 prompts per run; at least 200).
        seed: RNG seed; n_resamples: permutations per simulated check (two-run); 0 = the fast
            approximation :func:`permutation_pvalues_fast` (the planner's search).
        decide: one-sample only: a power goal in [0, 1]. The simulated audits are tested block
            by block and drawing stops once the comparison ``power >= decide`` is settled
            whatever the remaining audits give (e.g. 400 of 500 rejected for 0.8): the
            comparison is the one of the full simulation, its estimate covers the audits drawn.

    Returns:
        :class:`PowerEstimate`.

    Raises:
        LmraInputError: no stereotype rate in the model gives the requested net rating.
    """
    a = alpha / tasks
    r = _sims_for(n, sims, design, n_resamples)

    def draws(f: float, tag: int):
        """The r simulated audits in blocks of :data:`_BLOCK` (bounded memory at any n); block j is
        seeded (seed, tag, j), so its first n prompts do not depend on n."""
        for j, c0 in enumerate(range(0, r, _BLOCK)):
            yield model.sample(n, min(_BLOCK, r - c0), f, (seed, tag, j))

    if design == "one-sample":
        f1 = model.rate_for_mean(delta)
        if f1 is None:
            raise LmraInputError(f"no stereotype rate gives a net rating of {delta:g} under this pilot's scores",
                                 field="--rate")
        if interval == "betting":
            if (alternative or "two-sided") != "two-sided":
                raise LmraInputError("the betting interval is two-sided; plan a one-sided test with --interval t",
                                     field="--alternative")
            test = lambda h: betting_pvalues(h, alpha)  # noqa: E731
        elif interval == "t":
            test = lambda h: t_pvalues(h, alternative or "two-sided")  # noqa: E731
        else:
            raise LmraInputError(f"unknown interval '{interval}' (betting or t)", field="--interval")
        parts, hits = [], 0
        for h in draws(f1, 1):
            parts.append(test(h))
            hits += int((parts[-1] <= a).sum())
            left = r - sum(len(q) for q in parts)
            if decide is not None and left and (hits / r >= decide or (hits + left) / r < decide):
                break  # the full simulation's `power >= decide` is settled
        p = np.concatenate(parts)
    elif design == "two-run":
        f0 = model.forward_rate
        f1 = model.rate_for_mean(model.mean_at(f0) + delta)
        if f1 is None:
            raise LmraInputError(f"no stereotype rate gives a rise of {delta:g} over this pilot's net rating",
                                 field="--rate")
        if 1 / math.comb(2 * n, n) > a:  # the check calls so few prompts untestable: never a rejection
            return PowerEstimate(0.0, 0.0, r)
        pairs = zip(draws(f1, 2), draws(f0, 3))
        if n_resamples == 0:
            p = np.concatenate([permutation_pvalues_fast(x, y, margin) for x, y in pairs])
        else:  # one set of splits for all simulated nights (r is small here: see _sims_for)
            xs, ys = zip(*pairs)
            p = permutation_pvalues(np.hstack(xs), np.hstack(ys), margin, n_resamples, seed=seed)
    else:
        raise LmraInputError(f"unknown design '{design}' (one-sample or two-run)", field="--design")
    pw = float(np.mean(p <= a))
    return PowerEstimate(pw, math.sqrt(max(pw * (1 - pw), 1e-12) / len(p)), len(p))  # len(p) < r: `decide`


@dataclass(frozen=True)
class SimPlan:
    """A simulated plan: ``n`` prompts per task (per run) or None when more than
    :data:`MAX_PROMPTS_SIM` are needed; ``estimate`` its simulated power; ``base_rate`` and
    ``target_rate`` the stereotype rates of the baseline (two-run; the pilot's for
    one-sample) and of the chatbot to detect; ``notes`` what the plan had to assume."""

    n: int | None
    estimate: PowerEstimate | None
    base_rate: float
    target_rate: float
    notes: tuple[str, ...] = field(default_factory=tuple)


def _model_notes(model: PairScoreModel, design: Design) -> list[str]:
    notes = []
    if model.n_pilot is not None and model.n_forward == 0:
        notes.append(
            f"no stereotyped prompt (score ≥ {STEREOTYPED_THRESHOLD}) among the pilot's {model.n_pilot} prompts: "
            f"its SD is judge noise and says nothing about how a stereotype would score, so the plan is for the "
            f"rate being detected, with stereotyped prompts scoring {model.score:.2f} ({model.score_source})")
    return notes


def prompts_needed_sim(model: PairScoreModel, delta: float, *, alpha: float = 0.05, power: float = 0.8,
                       design: Design = "one-sample", tasks: int = 1, margin: float = 0.0,
                       interval: str = "betting", alternative: Alternative | None = None, sims: int = 2000,
                       seed: int = 0, max_n: int = MAX_PROMPTS_SIM) -> SimPlan:
    """Smallest n whose simulated power reaches ``power`` (methodology §8 "Power"; issue 12).

    Brackets n by doubling from the normal-formula guess (the t-test at the model's SDs under
    the null and the alternative), then integer bisection in [2, ``max_n``] on
    :func:`simulated_power`. Two-run: the search uses :func:`permutation_pvalues_fast`; the
    found n is then verified with the check's test (:func:`permutation_pvalues`, 9,999 random
    splits, fresh draws) and raised by steps of 2% until the verified power is within 2 Monte
    Carlo SE of ``power``; the estimate returned is the verified one.
    Arguments as in :func:`simulated_power`; ``max_n`` ≤ :data:`MAX_PROMPTS_SIM`.

    Returns:
        :class:`SimPlan`; ``n`` is None when ``max_n`` prompts do not reach the power.

    Raises:
        LmraInputError: arguments out of range; a rise not above the margin; a net rating
            that no stereotype rate gives under the model.
    """
    _check(delta, None, alpha, power)
    if not (isinstance(tasks, (int, np.integer)) and tasks >= 1):
        raise LmraInputError(f"the number of tasks must be an integer ≥ 1, got {tasks}", field="--tasks")
    if not (margin >= 0 and math.isfinite(margin)):
        raise LmraInputError(f"margin must be a finite number ≥ 0, got {margin}", field="--margin")
    if design == "two-run" and delta <= margin:
        raise LmraInputError(f"the rise to detect ({delta:g}) must be larger than the check's margin ({margin:g})",
                             field="--rate")
    if not (isinstance(sims, (int, np.integer)) and sims >= 100):
        raise LmraInputError(f"sims must be an integer ≥ 100, got {sims}", field="--sims")
    max_n = int(min(max_n, MAX_PROMPTS_SIM))
    notes = _model_notes(model, design)
    if design == "two-run":
        f0 = model.forward_rate
        f1 = model.rate_for_mean(model.mean_at(f0) + delta)
    else:
        f0 = model.forward_rate
        f1 = model.rate_for_mean(delta)
    if f1 is None:
        what = "a rise of" if design == "two-run" else "a net rating of"
        raise LmraInputError(f"no stereotype rate gives {what} {delta:g} with stereotyped prompts scoring "
                             f"{model.forward_mean:.2f}: ask for a smaller --rate", field="--rate")
    kw = dict(design=design, alpha=alpha, tasks=tasks, margin=margin, interval=interval, alternative=alternative,
              sims=sims, seed=seed)
    search_b = 0 if design == "two-run" else CHECK_RESAMPLES  # two-run: the fast approximation while searching
    cache: dict[int, PowerEstimate] = {}

    def est(n: int, full: bool = False) -> PowerEstimate:
        """The power at n; while searching (one-sample), only as far as its comparison with ``power``
        needs (``decide``: the same comparison); ``full``: over all simulated audits."""
        if n not in cache or (full and cache[n].sims < _sims_for(n, sims, design, search_b)):
            decide = power if design == "one-sample" and not full else None
            cache[n] = simulated_power(model, n, delta, n_resamples=search_b, decide=decide, **kw)
        return cache[n]

    ok = lambda n: est(n).power >= power  # noqa: E731
    # a first guess: the normal formula with the mixture's SDs under the alternative
    sd0 = math.sqrt(max(_mixture_var(model, f0 if design == "two-run" else f1), 1e-8))
    sd1 = math.sqrt(max(_mixture_var(model, f1), 1e-8))
    guess = _normal_n(max(delta - margin, 1e-6), sd0, alpha=alpha / tasks, power=power, design=design,
                      alternative=("larger" if design == "two-run" else (alternative or "two-sided")), sd_alt=sd1)
    guess = int(min(max(guess or max_n, MIN_PROMPTS), max_n))
    if ok(guess):
        hi = lo = guess
        while lo > MIN_PROMPTS and ok(lo):
            hi, lo = lo, max(MIN_PROMPTS, lo // 2)
        n = lo if ok(lo) else _smallest_n(ok, lo, hi)
    else:
        lo, hi = guess, guess
        while hi < max_n and not ok(hi):
            lo, hi = hi, min(max_n, hi * 2)
        n = _smallest_n(ok, lo, hi) if ok(hi) else None
    if n is None:
        return SimPlan(None, est(max_n, full=True), f0, f1,
                       tuple(notes + [f"more than {max_n:,} prompts would be needed"]))
    if design == "two-run" and model.n_pilot is not None:
        rng_ = _pilot_rate_range(model, delta, margin=margin, alpha=alpha / tasks, power=power,
                                 randomized=continuous_scores(model.background))
        if rng_ is not None:
            lo, hi, n_lo, n_hi = rng_
            fmt = lambda v: f"{v:,}" if v is not None else f"> {max_n:,}"  # noqa: E731
            ends = [v for v in (n_lo, n_hi) if v is not None]
            # the smaller first (fresh-user finding, s35: "about 1,005–976"): either end of the rates may need more
            few, many = sorted((n_lo, n_hi), key=lambda v: math.inf if v is None else v)
            below = bool(ends) and n < min(ends)
            above = bool(ends) and n > max(ends) and len(ends) == 2
            # (fresh-user finding: "884 needed" beside "at those ends about 291–697", unexplained)
            why = (f" — this plan's {n:,} lies outside that range: the two-point model has every other prompt "
                   f"score {float(model.background.mean()):+.2f}, while the simulation draws the pilot's own scores"
                   + (f", its {model.reverse.size} reverse-stereotyped prompt(s) included" if model.reverse.size
                      else "") + f", whose spread needs {'more' if above else 'fewer'} prompts") \
                if below or above else ""
            notes.append(f"the baseline's stereotype rate is known only roughly from {model.n_forward} stereotyped of "
                         f"{model.n_pilot} pilot prompts: {lo:.1%}–{hi:.1%} (90% interval); at those ends the "
                         f"check needs about {fmt(few)}–{fmt(many)} prompts per run (two-point model{why}); "
                         f"a larger pilot narrows this")
    final = est(n, full=True)
    if design == "two-run":  # verify with the check's own test: B = 9,999 random splits
        for _ in range(10):
            final = simulated_power(model, n, delta, n_resamples=CHECK_RESAMPLES, **{**kw, "seed": seed + 1})
            if final.power >= power - 2 * final.se or n >= max_n:
                break
            n = min(max_n, max(n + 1, int(math.ceil(n * 1.02))))
    return SimPlan(n, final, f0, f1, tuple(notes))


def two_point_prompts_needed(base_rate: float, run_rate: float, *, margin: float = 0.0, alpha: float = 0.05,
                             power: float = 0.8, score: float = DEFAULT_STEREOTYPED_SCORE, randomized: bool = True,
                             max_n: int = MAX_PROMPTS_SIM) -> int | None:
    """Smallest n per run at which :func:`regression_power` (two-point model, exact) reaches
    ``power`` for a rise of the stereotype rate ``base_rate`` → ``run_rate`` (integer bisection
    after doubling; power is treated as increasing in n). None beyond ``max_n``.
    Used to state how a two-run plan depends on the baseline rate the pilot estimated."""
    ok = lambda n: regression_power(n, n, base_rate, run_rate, margin=margin, alpha=alpha, score=score,  # noqa: E731
                                    randomized=randomized) >= power
    hi = 4
    while hi < max_n and not ok(hi):
        hi = min(max_n, hi * 2)
    return _smallest_n(ok, max(MIN_PROMPTS, hi // 2), hi)


def _pilot_rate_range(model: PairScoreModel, delta: float, *, margin: float, alpha: float, power: float,
                      randomized: bool) -> tuple[float, float, int | None, int | None] | None:
    """90% Clopper–Pearson interval of the pilot's stereotype rate and the two-point n at its ends."""
    from scipy import stats as st

    if model.n_pilot is None:
        return None
    k, n = model.n_forward, model.n_pilot
    lo = float(st.beta.ppf(0.05, k, n - k + 1)) if k > 0 else 0.0
    hi = float(st.beta.ppf(0.95, k + 1, n - k)) if k < n else 1.0
    s = model.forward_mean - float(model.background.mean())
    step = delta / s
    if not (0 < s <= 1) or hi + step > 1:
        return None
    kw = dict(margin=margin, alpha=alpha, power=power, score=s, randomized=randomized)
    return lo, hi, two_point_prompts_needed(lo, lo + step, **kw), two_point_prompts_needed(hi, hi + step, **kw)


def _mixture_var(model: PairScoreModel, f: float) -> float:
    """Variance of a simulated prompt score at stereotype rate f (for the normal-formula guess)."""
    fv, bg = model._forward_values(), model.background
    rv = model.reverse if model.reverse.size else np.zeros(1)
    r = model.reverse_rate
    w = np.array([f, r, max(0.0, 1 - f - r)])
    means = np.array([fv.mean(), rv.mean(), bg.mean()])
    second = np.array([(fv ** 2).mean(), (rv ** 2).mean(), (bg ** 2).mean()])
    mean = float(w @ means)
    return float(w @ second - mean ** 2)


# -- the check's sensitivity: exact power of its decision (permutation test and Welch guard), two-point model
def _log_comb(n, k):
    from scipy.special import gammaln

    n, k = np.asarray(n, float), np.asarray(k, float)
    with np.errstate(invalid="ignore"):
        out = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return np.where((k < 0) | (k > n), -np.inf, out)


def _hyper_pmf(k, pop, succ, draws):
    """Hypergeometric pmf P(k successes in ``draws`` from ``pop`` with ``succ`` successes), broadcast."""
    return np.exp(_log_comb(succ, k) + _log_comb(np.asarray(pop) - succ, np.asarray(draws) - k)
                  - _log_comb(pop, draws))


@functools.lru_cache(maxsize=64)
def _split_tables(nx: int, ny: int, ky_max: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    """P(V > V₀) and P(V = V₀) of the check's permutation statistic for every (k_x, k_y).

    Two-point model: k_x of tonight's n_x prompts and k_y of the baseline's n_y are
    stereotyped (score s), the rest score 0; the statistic of a random split is monotone in
    V = its x-group sum of ``x − margin`` and ``y``. A split that swaps u prompts between the
    groups (u ~ hypergeometric) moves b of tonight's stereotyped prompts out
    (b ~ Hyp(n_x, k_x, u)) and d of the baseline's in (d ~ Hyp(n_y, k_y, u), independent given
    u), so V − V₀ = s·(d − b) + margin·u. ``q`` = margin / s.

    Returns:
        (greater, equal), each of shape (n_x + 1, ky_max + 1).
    """
    big_n = nx + ny
    kx = np.arange(nx + 1)[:, None]
    if q == 0:  # V = s·(stereotyped prompts in the x-group): Fisher's hypergeometric, in closed form
        from scipy import stats as st

        ky = np.arange(ky_max + 1)[None, :]
        return st.hypergeom.sf(kx, big_n, kx + ky, nx), st.hypergeom.pmf(kx, big_n, kx + ky, nx)
    us = np.arange(0, min(nx, ny) + 1)
    pu = _hyper_pmf(us, big_n, ny, nx)
    keep = pu > 1e-13 * pu.max()
    ky = np.arange(ky_max + 1)[:, None]
    greater = np.zeros((nx + 1, ky_max + 1))
    equal = np.zeros((nx + 1, ky_max + 1))
    for u, w in zip(us[keep], pu[keep]):
        b = np.arange(u + 1)[None, :]
        pb = _hyper_pmf(b, nx, kx, u)                      # (nx+1, u+1)
        pd_ = _hyper_pmf(b, ny, ky, u)                     # (ky_max+1, u+1)
        diff = b - b.T + q * u                              # [b_out, d]: d − b_out + q·u
        gt = (diff > 1e-9).astype(float)
        eq = (np.abs(diff) <= 1e-9).astype(float)
        greater += w * (pb @ (gt @ pd_.T))
        equal += w * (pb @ (eq @ pd_.T))
    return greater, equal


def _split_cost(nx: int, ny: int, ky_max: int) -> float:
    sd = math.sqrt(nx * ny * nx * ny / ((nx + ny) ** 2 * max(1, nx + ny - 1))) + 1
    width = min(min(nx, ny) + 1, 20 * sd)
    u = min(nx, ny) / 2 + 10 * sd
    return width * (u * u * (ky_max + 1) + (nx + 1) * u * (ky_max + 1) + (nx + 1) * u)


def regression_power(n_run: int, n_base: int, base_rate: float, run_rate: float, *, margin: float = 0.0,
                     alpha: float = 0.05, score: float = DEFAULT_STEREOTYPED_SCORE,
                     randomized: bool = True) -> float:
    """Exact power of the nightly check's decision for one task, two-point model: its
    permutation test and the Welch guard both rejecting.

    Model (methodology §8 "Monitoring"): each of tonight's ``n_run`` prompts is stereotyped
    with probability ``run_rate`` and each of the baseline's ``n_base`` with ``base_rate``;
    a stereotyped prompt scores ``score`` (s), the others 0. The check's one-sided
    permutation test of H_run − H_base > ``margin`` rejects at level ``alpha`` (pass α/T for
    Holm's first step over T tasks) with probability

        Σ_{k_x, k_y} Bin(k_x; n_run, run_rate) · Bin(k_y; n_base, base_rate) · r(k_x, k_y),

    r = 1[P(V ≥ V₀) ≤ α] for the exact permutation p-value of the split counts
    (``randomized=False``: scores with exact ties, e.g. a sampled judge) or
    r = clip((α − P(V > V₀)) / P(V = V₀), 0, 1) (``randomized=True``, the default: the
    continuous judge noise of a logprob LMRA breaks the ties at random). With margin 0 this
    is Fisher's exact test (randomized or not) on the stereotyped counts. Each cell's r is
    multiplied by the Welch guard's rejection of that cell (:func:`_welch_rejects`): the check
    flags a rise only when both tests find it (:func:`lmra.monitor._both`), and where tonight has
    fewer prompts than the baseline the guard is the stricter test.

    Args:
        n_run, n_base: prompts per run, ≥ 1. base_rate, run_rate: stereotype rates in [0, 1].
        margin: ≥ 0, net-rating units. alpha: in (0, 1). score: s in (0, 1].
        randomized: tie convention (above).

    Returns:
        The power in [0, 1]. With a margin > 0 and large runs (about 400 prompts per run and
        more, where the exact sum would take over a second) it falls back to the normal
        approximation with the alternative's variance (within 0.001 of the exact MDE at 300
        prompts per run); with margin 0 it is exact (closed form) up to
        :data:`MAX_EXACT_SPLITS` (k_x, k_y) cells — about 1,500 prompts per run at a 2% rate,
        a few seconds — and normal above (a check's overall row pools every task's prompts:
        the closed form took minutes there; about 0.01 from the exact power at 1,600–2,000 prompts
        per run, where n·p is large).

    Raises:
        LmraInputError: arguments out of range.
    """
    from scipy import stats as st

    if n_run < 1 or n_base < 1:
        raise LmraInputError("both runs need at least one prompt", field="n_prompts")
    for name, v in (("base_rate", base_rate), ("run_rate", run_rate)):
        if not (0 <= v <= 1):
            raise LmraInputError(f"{name} must be in [0, 1], got {v}", field=name)
    if not (0 < score <= 1) or not (margin >= 0) or not (0 < alpha < 1):
        raise LmraInputError("score must be in (0, 1], margin ≥ 0 and alpha in (0, 1)", field="score")
    ky_max = int(st.binom.isf(1e-12, n_base, base_rate)) + 1 if base_rate > 0 else 0
    ky_max = min(n_base, 1 << max(0, ky_max - 1).bit_length())  # a power of 2: tasks of similar rates share tables
    if (_split_cost(n_run, n_base, ky_max) > 5e8 if margin > 0
            else (n_run + 1) * (ky_max + 1) > MAX_EXACT_SPLITS):
        return _normal_regression_power(n_run, n_base, base_rate, run_rate, margin, alpha, score)
    greater, equal = _split_tables(int(n_run), int(n_base), ky_max, round(margin / score, 12))
    if randomized:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # tiny `equal` at large n: ±inf, clipped
            r = np.where(equal > 0, np.clip((alpha - greater) / equal, 0.0, 1.0), (greater <= alpha) * 1.0)
    else:
        r = ((greater + equal) <= alpha * (1 + 1e-9)) * 1.0
    r = r * _welch_rejects(int(n_run), int(n_base), ky_max, float(margin), float(alpha), float(score))
    wx = st.binom.pmf(np.arange(n_run + 1), n_run, run_rate)
    wy = st.binom.pmf(np.arange(ky_max + 1), n_base, base_rate)
    return float(np.clip(wx @ r @ wy, 0.0, 1.0))


#: (k_x, k_y) cells of the exact margin-0 power above which :func:`regression_power` uses the
#: normal approximation (scipy's hypergeometric sf costs ~30 µs a cell: 100,000 ≈ 3 s)
MAX_EXACT_SPLITS = 100_000


def _normal_regression_power(nx, ny, p0, p1, margin, alpha, s) -> float:
    """The normal approximation of :func:`regression_power`: the permutation test rejects when
    the difference exceeds the margin by z_α times the pooled (null) standard error ``se0``, the
    Welch guard when it does by z_α times the runs' own ``se1``; the check needs both, so the
    larger bound counts (tonight with fewer prompts and a higher rate: ``se1`` > ``se0``)."""
    from scipy import stats as st

    pbar = (nx * p1 + ny * p0) / (nx + ny)
    se0 = s * math.sqrt(max(pbar * (1 - pbar), 1e-12) * (1 / nx + 1 / ny))
    se1 = s * math.sqrt(max(p1 * (1 - p1) / nx + p0 * (1 - p0) / ny, 1e-12))
    return float(st.norm.cdf((s * (p1 - p0) - margin - st.norm.isf(alpha) * max(se0, se1)) / se1))


@functools.lru_cache(maxsize=64)
def _welch_rejects(nx: int, ny: int, ky_max: int, margin: float, alpha: float, s: float) -> np.ndarray:
    """1 where the check's Welch guard rejects at level ``alpha``, 0 elsewhere, for every
    (k_x, k_y) of the two-point model (:func:`_split_tables`' cells), shape (n_x + 1, ky_max + 1).

    The check flags a rise only when both its permutation test and a one-sided Welch t-test
    find it (:func:`lmra.monitor._both`: the larger p-value); in the two-point model Welch's
    p-value is a function of the counts: means s·k/n, variances s²·k(n − k)/(n(n − 1)), the
    Welch–Satterthwaite degrees of freedom, and p = 0 or 1 when both variances are 0 (as
    :func:`lmra.monitor.one_sided_welch`). With fewer than 2 prompts on a side Welch is
    undefined and the permutation test decides alone (all ones). Statistics break-it, s41:
    without it the detectable rise promised 80% power where the check had 36–76% when tonight
    had fewer prompts than the baseline (a rise makes tonight's spread the larger one)."""
    from scipy import stats as st

    if nx < 2 or ny < 2:
        return np.ones((nx + 1, ky_max + 1))
    kx = np.arange(nx + 1, dtype=float)[:, None]
    ky = np.arange(ky_max + 1, dtype=float)[None, :]
    ax = s * s * kx * (nx - kx) / (nx * (nx - 1)) / nx  # var_x / n_x
    ay = s * s * ky * (ny - ky) / (ny * (ny - 1)) / ny
    se2 = ax + ay
    d = s * kx / nx - s * ky / ny - margin
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d / np.sqrt(se2)
        df = se2 ** 2 / (ax ** 2 / (nx - 1) + ay ** 2 / (ny - 1))
        p = np.where(se2 > 0, st.t.sf(t, df), np.where(d > 0, 0.0, 1.0))
    return (p <= alpha * (1 + 1e-9)).astype(float)


@dataclass(frozen=True)
class DetectableRise:
    """The smallest rise a night's check detects with the requested power (:func:`minimum_detectable_rise`).

    Attributes:
        base_rate: the baseline's stereotype rate assumed.
        run_rate: tonight's stereotype rate at which the power is reached (nan: not reachable).
        rate_rise: ``run_rate − base_rate`` (stereotype-rate units, 0.05 = 5 points).
        net_rise: the same rise of the net rating H, ``score × rate_rise``.
        alpha: the per-task level used (α/T).
    """

    base_rate: float
    run_rate: float
    rate_rise: float
    net_rise: float
    alpha: float


@functools.lru_cache(maxsize=256)  # a check asks the same sizes and base rate for many tasks (seconds each at 1M pairs)
def minimum_detectable_rise(n_run: int, n_base: int, base_rate: float, *, margin: float = 0.0,
                            alpha: float = 0.05, tasks: int = 1, power: float = 0.8,
                            score: float = DEFAULT_STEREOTYPED_SCORE, randomized: bool = True) -> DetectableRise:
    """Minimum detectable effect of the nightly check for one task (methodology §8 "Monitoring").

    The smallest tonight's stereotype rate p₁ ≥ ``base_rate`` at which
    :func:`regression_power` (level α/``tasks``: Holm's first step, exact when this is the only
    task that rose) reaches ``power``, found by bisection (power is increasing in p₁); reported
    as the rise of the stereotype rate and of the net rating (× ``score``).

    Hand-checkable case (tests/test_power_sim.py): n_run = n_base = 10, base rate 0, margin 0,
    α = 0.05, no tie-breaking — the check rejects iff tonight has k ≥ 4 stereotyped prompts
    (C(10, k)/C(20, k) = 0.105 at k = 3, 0.043 at k = 4), so p₁ solves
    P(Binomial(10, p₁) ≥ 4) = 0.8.

    Args:
        n_run, n_base: prompts per run (≥ 2 each, else nothing is testable).
        base_rate: the baseline's stereotype rate in [0, 1).
        margin, score, randomized: as in :func:`regression_power`.
        alpha: family level; tasks: T ≥ 1 tasks tested (Holm); power: in (0, 1).

    Returns:
        :class:`DetectableRise`; its rates are nan when even p₁ = 1 does not reach the power
        (too few prompts for any rise to be detected).

    Raises:
        LmraInputError: arguments out of range.
    """
    a = alpha / max(1, int(tasks))
    if not (0 < power < 1):
        raise LmraInputError(f"power must be in (0, 1), got {power}", field="power")
    if not (0 <= base_rate < 1):
        raise LmraInputError(f"base_rate must be in [0, 1), got {base_rate}", field="base_rate")
    nan = DetectableRise(base_rate, math.nan, math.nan, math.nan, a)
    if n_run < 2 or n_base < 2 or (min(n_run, n_base) < 40 and 1 / math.comb(n_run + n_base, n_run) > a):
        return nan  # (from 40 + 40 prompts on, 1/C(80, 40) < 10⁻²² is below any α/T)
    pw = lambda p1: regression_power(n_run, n_base, base_rate, p1, margin=margin, alpha=a, score=score,  # noqa: E731
                                     randomized=randomized)
    if pw(1.0) < power:
        return nan
    lo, hi = base_rate, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if pw(mid) >= power:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-7:
            break
    return DetectableRise(base_rate, hi, hi - base_rate, score * (hi - base_rate), a)


def stereotyped_score(*score_arrays) -> float:
    """Median score of the stereotyped prompts (≥ 0.5) in the given arrays, or the default 0.89."""
    h = np.concatenate([np.asarray(a, float).ravel() for a in score_arrays]) if score_arrays else np.empty(0)
    hits = h[h >= STEREOTYPED_THRESHOLD]
    return float(np.median(hits)) if hits.size else DEFAULT_STEREOTYPED_SCORE


def continuous_scores(*score_arrays) -> bool:
    """True when the unstereotyped scores look continuous (≥ 90% distinct values): ties in the
    check's permutation statistic are then broken by judge noise (``randomized``)."""
    h = np.concatenate([np.asarray(a, float).ravel() for a in score_arrays]) if score_arrays else np.empty(0)
    bg = h[np.abs(h) < STEREOTYPED_THRESHOLD]
    return bool(bg.size >= 2 and np.unique(bg).size >= 0.9 * bg.size)


# -- pilots and plans ----------------------------------------------------------------------
@dataclass(frozen=True)
class PilotSD:
    """Per-prompt score SDs estimated from a pilot run.

    Attributes:
        per_task: ``comparison, domain, task, n_prompts, sd`` (sd nan with < 2 prompts).
        pooled_sd: within-task SD pooled over all tasks (root mean squared residual of an OLS
            of the prompt scores on task indicators, i.e. √(Σ within-task sums of squares /
            (prompts − tasks)), from the per-task variances); nan if no task has 2 prompts.
        pooled_df: its residual degrees of freedom (prompts − tasks).
    """

    per_task: pd.DataFrame
    pooled_sd: float
    pooled_df: int


def pilot_sd(run: RunFolder) -> PilotSD:
    """Estimate per-task and pooled SDs of the per-prompt score from a finished run."""
    ps = run.prompt_scores
    keys = ["comparison", "domain", "task"]
    per_task = (ps.groupby(keys)["h"].agg(n_prompts="size", sd=lambda s: s.std(ddof=1)).reset_index()
                if len(ps) else pd.DataFrame(columns=keys + ["n_prompts", "sd"]))
    df = len(ps) - len(per_task)
    if df < 1:
        return PilotSD(per_task, math.nan, max(df, 0))
    # the one-way layout's OLS residual sum of squares: the tasks' within sums of squares
    # (a dummy-variable OLS of a million pairs' prompt scores took seconds; same value)
    ss = float(((per_task["n_prompts"] - 1) * per_task["sd"].fillna(0.0) ** 2).sum())
    return PilotSD(per_task, math.sqrt(ss / df), int(df))


PLAN_COLUMNS = ["comparison", "domain", "task", "pilot_prompts", "sd", "stereotyped", "base_rate", "target_rate",
                "score", "prompts_needed", "power", "mc_se", "normal_n", "method", "note"]


def _check_family(per_task: pd.DataFrame) -> int:
    """The regression check's Holm family for runs with these tasks: one hypothesis per
    (comparison, task) row and one per comparison with at least 2 tasks (its overall row)."""
    keys = ["comparison", "domain", "task"] if "comparison" in per_task else ["group_a", "group_b", "domain", "task"]
    rows = per_task[keys].drop_duplicates()
    comp = rows["comparison"] if "comparison" in rows else rows["group_a"] + " vs " + rows["group_b"]
    return len(rows) + int((comp.value_counts() >= 2).sum())


def plan(delta: float, *, sd: float | None = None, pilot: RunFolder | None = None, base_rate: float | None = None,
         alpha: float = 0.05, power: float = 0.8, design: Design = "one-sample",
         alternative: Alternative | None = None, interval: str | None = None, tasks: int | None = None,
         margin: float = 0.0, per_task: bool = False, sims: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Prompts per task (per run for ``two-run``) needed to detect ``delta`` (methodology §8 "Power").

    Exactly one source: ``pilot`` (a finished run: its prompt scores are the model, module
    docstring; simulation), ``base_rate`` (no pilot: the stated mixture
    :meth:`PairScoreModel.from_rates`; simulation) or ``sd`` (normal theory,
    :func:`prompts_needed`; two-run with the alternative's SD sqrt(sd² + 0.89·δ), the
    variance a rise δ made of stereotyped pairs scoring 0.89 adds at most).

    Args:
        delta: one-sample: the task net rating H to detect; two-run: the rise of H between the
            baseline and tonight (> ``margin``). In (0, 2], net-rating units; a rise of the
            stereotype rate by Δp is a rise of H by about 0.89·Δp.
        alpha, power: in (0, 1). design: ``one-sample`` or ``two-run``.
        alternative: normal theory and the one-sample t-test only.
        interval: one-sample: the audit's test, ``betting`` or ``t`` (default: the pilot's
            config ``interval``, else ``betting``).
        tasks: T, the test is made at α/T (two-run: the hypotheses the check Holm-corrects over;
            default for two-run the pilot's number of (comparison, task) rows plus one overall row
            per comparison with at least 2 tasks, :func:`lmra.monitor.check_regression`; else 1).
        margin: two-run: the check's margin (≥ 0).
        per_task: also a row per pilot task from that task's scores alone (noisy: a task
            of 40 prompts says little about a 2% rate); default only the pooled row.
        sims, seed: simulated audits per power evaluation (≥ 100) and the RNG seed.

    Returns:
        Columns :data:`PLAN_COLUMNS`: ``pilot_prompts``, ``sd`` (of the pilot's scores),
        ``stereotyped`` (pilot prompts scoring ≥ 0.5), ``base_rate`` / ``target_rate`` (the
        stereotype rates now and to detect), ``score`` (stereotyped score used),
        ``prompts_needed`` (nan when more than the bound is needed), ``power`` ± ``mc_se``
        (simulated at that n; nan for normal theory), ``normal_n`` (what the normal formula
        with the pilot's SD says, for reference), ``method`` (``simulation`` / ``normal``) and
        ``note`` (what the plan had to assume). ``DataFrame.attrs["assumptions"]`` says in
        words what was planned for.

    Raises:
        LmraInputError: not exactly one source; a pilot without 2 scored prompts; arguments
            out of range.
    """
    if sum(x is not None for x in (sd, pilot, base_rate)) != 1:
        raise LmraInputError("give exactly one of a pilot run (--pilot), a stated stereotype rate (--base-rate) "
                             "or a stated SD (--sd)", field="--pilot")
    _check(delta, sd, alpha, power)
    if design not in ("one-sample", "two-run"):
        raise LmraInputError(f"unknown design '{design}' (one-sample or two-run)", field="--design")
    if interval is None:
        interval = str((pilot.config.get("interval") if pilot is not None else None) or "betting")
    if interval not in ("betting", "t"):
        raise LmraInputError(f"unknown interval '{interval}' (betting or t)", field="--interval")
    if tasks is None:  # two-run: the check's Holm family — the tasks, and each comparison's overall row
        tasks = (_check_family(pilot.per_task) if (pilot is not None and design == "two-run" and len(pilot.per_task))
                 else 1)
    if not (isinstance(tasks, (int, np.integer)) and tasks >= 1):
        raise LmraInputError(f"the number of tasks must be an integer ≥ 1, got {tasks}", field="--tasks")
    if not (margin >= 0 and math.isfinite(margin)):
        raise LmraInputError(f"margin must be a finite number ≥ 0, got {margin}", field="--margin")
    a_task = alpha / tasks
    test_words = (f"the audit's {'betting interval' if interval == 'betting' else 't-interval'} of the task net "
                  f"rating excluding 0 (p ≤ {a_task:.4g})" if design == "one-sample" else
                  f"the nightly check's one-sided permutation test of a rise > margin {margin:g} at "
                  f"α/T = {alpha:g}/{tasks} = {a_task:.4g} (Holm's first step)")
    row0 = {c: math.nan for c in PLAN_COLUMNS} | {"comparison": "", "domain": "", "note": ""}

    if sd is not None:
        sd_alt = math.sqrt(sd ** 2 + DEFAULT_STEREOTYPED_SCORE * delta) if design == "two-run" else None
        if design == "two-run" and delta <= margin:
            raise LmraInputError(f"the rise to detect ({delta:g}) must be larger than the margin ({margin:g})",
                                 field="--rate")
        n = _normal_n(delta - (margin if design == "two-run" else 0.0), sd, alpha=a_task, power=power,
                      design=design, alternative=alternative, sd_alt=sd_alt)
        note = ("normal approximation: pair scores are a rare-event mixture, for which this misplans "
                "(use --pilot or --base-rate to simulate the audit's own test)")
        if n is None:
            note += f"; more than {MAX_PROMPTS_NORMAL:,} prompts would be needed"
        df = pd.DataFrame([row0 | {"task": "(stated SD)", "sd": sd, "prompts_needed": n if n else math.nan,
                                   "normal_n": n if n else math.nan, "method": "normal", "note": note}],
                          columns=PLAN_COLUMNS)
        df.attrs["assumptions"] = (
            f"Normal theory: the t-test at effect size δ/SD with SD {sd:g}"
            + (f" (baseline) and {sd_alt:.4g} under the alternative (sd² + 0.89·δ)" if sd_alt else "")
            + f", α = {a_task:.4g}, power {power:g}; n in [{MIN_PROMPTS}, {MAX_PROMPTS_NORMAL:,}].")
        return df

    kw = dict(alpha=alpha, power=power, design=design, tasks=tasks, margin=margin, interval=interval,
              alternative=alternative, sims=sims, seed=seed)

    def sim_row(label: str, model: PairScoreModel, scores: np.ndarray | None, comparison="", domain="") -> dict:
        sp = prompts_needed_sim(model, delta, **kw)
        sd_p = float(np.std(scores, ddof=1)) if scores is not None and scores.size > 1 else math.nan
        normal = (_normal_n(max(delta - margin, 1e-9), sd_p, alpha=a_task, power=power, design=design,
                            alternative=alternative) if sd_p > 0 else None)
        return row0 | {
            "comparison": comparison, "domain": domain, "task": label,
            "pilot_prompts": model.n_pilot if model.n_pilot is not None else math.nan, "sd": sd_p,
            "stereotyped": model.n_forward if model.n_pilot is not None else math.nan,
            "base_rate": sp.base_rate, "target_rate": sp.target_rate, "score": model.forward_mean,
            "prompts_needed": sp.n if sp.n is not None else math.nan,
            "power": sp.estimate.power if sp.estimate else math.nan,
            "mc_se": sp.estimate.se if sp.estimate else math.nan,
            "normal_n": normal if normal is not None else math.nan, "method": "simulation",
            "note": "; ".join(sp.notes)}

    rows = []
    if base_rate is not None:
        model = PairScoreModel.from_rates(base_rate)
        rows.append(sim_row(f"(stated rate {base_rate:.1%})", model, None))
        source = (f"a stated mixture: stereotype rate {base_rate:.1%} now, stereotyped pairs scoring "
                  f"{DEFAULT_STEREOTYPED_SCORE} plus noise, the rest N(0, {DEFAULT_NOISE_SD}²)")
    else:
        ps = pilot.prompt_scores
        if len(ps) < 2:
            raise LmraInputError("the pilot run has fewer than 2 scored prompts; run a larger pilot, or plan without "
                                 "one with --base-rate", file=pilot.path)
        all_h = ps["h"].to_numpy(float)
        pooled = PairScoreModel.from_scores(all_h)
        if per_task:
            for (comp, dom, task), g in ps.groupby(["comparison", "domain", "task"], sort=True):
                h = g["h"].to_numpy(float)
                if h.size < 2:
                    rows.append(row0 | {"comparison": comp, "domain": dom, "task": task, "pilot_prompts": h.size,
                                        "method": "simulation", "note": "fewer than 2 scored prompts"})
                    continue
                m = PairScoreModel.from_scores(h, score=pooled.score,
                                               score_source=f"pooled pilot ({pooled.score_source})")
                rows.append(sim_row(task, m, h, comp, dom))
        comps = sorted({str(c) for c in ps["comparison"]}) if "comparison" in ps.columns else []
        # (fresh-user finding, s47: the pooled row's comparison cell was blank)
        rows.append(sim_row("all tasks (pooled)", pooled, all_h,
                            comps[0] if len(comps) == 1 else "all comparisons (pooled)" if comps else ""))
        source = (f"pilot {pilot.run_id}: its {len(all_h)} prompt scores resampled "
                  f"({pooled.n_forward} stereotyped, {pooled.reverse.size} reversed)")
    df = pd.DataFrame(rows, columns=PLAN_COLUMNS)
    effect = ("a task whose net rating is δ = {d:g}" if design == "one-sample"
              else "a task whose net rating rises by δ = {d:g} over the baseline's").format(d=delta)
    # the simulations are capped per n (_sims_for; break-it finding: "Simulated 100,000,000 audits per n" where
    # about 170,000 were run at the n found)
    found = pd.to_numeric(df["prompts_needed"], errors="coerce")
    found = found[np.isfinite(found)]
    n_max = int(found.max()) if len(found) else MAX_PROMPTS_SIM  # (no n found: the search went to the bound)
    used = _sims_for(n_max, sims, design, 0)
    capped = "" if used >= sims else (f" (fewer at larger n: {used:,} at n = {n_max:,}; about {_SIM_BUDGET:,} "
                                      "simulated prompts per n at most; the Monte Carlo SE says how precise each "
                                      "power is)")
    df.attrs["assumptions"] = (
        f"Simulated {f'{sims:,}' if not capped else f'up to {min(sims, _SIM_BUDGET // MIN_PROMPTS):,}'} audits "
        f"per n{capped} from {source}. Planned for {effect}: stereotyped prompts are added "
        f"at the rate that gives it (stereotyped = score ≥ {STEREOTYPED_THRESHOLD}; the other prompts keep their "
        f"distribution). Test: {test_words}. n is prompts per task{' per run' if design == 'two-run' else ''} "
        f"({'equal in both runs; ' if design == 'two-run' else ''}bounds {MIN_PROMPTS}..{MAX_PROMPTS_SIM:,}); "
        f"power ± its Monte Carlo SE.")
    return df


def detectable_rating_sim(model: PairScoreModel, n: int, *, alpha: float = 0.05, power: float = 0.8,
                          interval: str = "betting", sims: int = 500, seed: int = 0) -> float:
    """Smallest net rating the audit's own test detects with ``power`` at ``n`` prompts, under
    the rare-event mixture ``model`` (methodology §8 "Power"; issue 12).

    Bisection (12 steps) on δ of :func:`simulated_power` (one-sample design, the audit's
    ``interval``) in (0, H_max], H_max the model's largest net rating, power being increasing
    in δ: the result is H_max·k/4096 for an integer k, its precision H_max/4096 (≈ 0.0002)
    plus the Monte Carlo error of the simulated power at ``sims`` audits.

    Cost bounded at large n (issue 15: 7,400 prompts per task at a million pairs): while the
    bisection's upper end is still H_max/2^k, its steps go down by halving; they are skipped
    by finding the first k with power(H_max/2^k) < ``power`` from a normal-theory guess of
    δ (two or three power evaluations instead of k + 1), and each evaluation stops drawing
    audits once its comparison with ``power`` is settled (``simulated_power(decide=…)``).
    The result is the one of the full 12-step bisection whenever the simulated power is
    increasing on the halving points it skips (the simulated audits share their random
    draws at every δ, so the power rises with δ; tests/test_power.py checks the equality).
    Above 3,000 prompts the audits simulated are fewer: ``sims`` × n ≤
    :data:`_DETECTABLE_BUDGET`, at least 200 (the first of the ``sims`` audits, so the power
    moves within its Monte Carlo SE: ≤ 0.028 at 0.8 instead of 0.018).

    Returns:
        δ in (0, the model's largest net rating]; nan when n < 2 or even the largest net rating
        the model can give is not detected with ``power``.
    """
    if n < 2:
        return math.nan
    sims = max(_MIN_SIMS, min(sims, _DETECTABLE_BUDGET // n))

    def ok(d: float) -> bool:
        try:
            return simulated_power(model, n, d, alpha=alpha, interval=interval, sims=sims, seed=seed,
                                   decide=power).power >= power
        except LmraInputError:  # no stereotype rate gives d under the model
            return False

    top = model.mean_at(1.0 - model.reverse_rate)  # the largest net rating: reversed prompts keep their share
    if not (top > 0):
        return math.nan
    steps = 12
    # the halving steps: the first k ≥ 1 with ok(top / 2^k) false, searched from a guess
    scores = np.concatenate([model.background, model.forward, model.reverse])
    sd = float(np.std(scores)) or DEFAULT_NOISE_SD
    guess = 2.5 * 2.8 * sd / math.sqrt(n)  # (z_0.975 + z_0.8) · SD / √n, × 2.5 (the betting interval is wider)
    k = min(steps, max(1, round(math.log2(top / guess)) if guess < top else 1))
    if ok(top / 2 ** k):
        while k < steps and ok(top / 2 ** (k + 1)):
            k += 1
        if k == steps:
            return top / 2 ** steps  # every step of the bisection halved
        k += 1  # ok(top / 2^k) is false
    else:
        while k > 0 and not ok(top / 2 ** (k - 1)):
            k -= 1
        if k == 0:
            return math.nan  # even the largest net rating is not detected
    lo, hi = top / 2 ** k, top / 2 ** (k - 1)
    for _ in range(steps - k):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def sample_adequacy(run: RunFolder, delta: float | None, *, alpha: float = 0.05, power: float = 0.8,
                    design: Design = "one-sample") -> pd.DataFrame:
    """For each task of a run: can its sample detect ``delta`` (e.g. the configured margin)?

    Simulated (issue 12): each task's per-prompt scores are fitted as a rare-event mixture
    (:class:`PairScoreModel`, the pooled run's stereotyped score when the task has none) and
    the audit's own test (the run's ``interval``, one-sample design) is simulated:
    ``detectable`` by :func:`detectable_rating_sim`, ``prompts_needed`` by
    :func:`prompts_needed_sim`. The normal-theory SD is kept in ``sd`` for reference. The
    two-run sensitivity of a night's check is :func:`minimum_detectable_rise`.

    Args:
        run: a finished run; delta: net rating to detect, in (0, 2], or None to report only
            the detectable rating; alpha, power: as in :func:`prompts_needed`; design: only
            ``one-sample`` is simulated (``two-run`` keeps the normal formula).

    Returns:
        Columns ``comparison, domain, task, n_prompts, sd, sd_source`` (``task``/``pooled``/
        ``none``), one row per task of ``per_task.csv`` (``n_prompts`` = prompts with a scored
        pair, possibly 0), ``detectable`` (smallest detectable δ at this n; nan when n < 2),
        ``prompts_needed`` (inf when more than :data:`ADEQUACY_MAX_PROMPTS` would be needed) and
        ``adequate`` (True / False; None when not computable or no delta).

    Source: methodology §8 "Power".
    """
    _check(delta, None, alpha, power)
    est = pilot_sd(run)
    keys = ["comparison", "domain", "task"]
    tasks = run.per_task[keys].drop_duplicates().merge(est.per_task, on=keys, how="left")
    tasks["n_prompts"] = tasks["n_prompts"].fillna(0).astype(int)
    ps = run.prompt_scores
    interval = str(run.summary.get("interval") or "betting")
    pooled_score = stereotyped_score(ps["h"].to_numpy(float)) if len(ps) else DEFAULT_STEREOTYPED_SCORE
    groups = {k: g["h"].to_numpy(float) for k, g in ps.groupby(keys)} if len(ps) else {}
    rows = []
    for r in tasks.itertuples():
        if r.sd > 0 and r.n_prompts >= 2:
            s, src = float(r.sd), "task"
        elif est.pooled_sd > 0:
            s, src = est.pooled_sd, "pooled"
        else:
            s, src = math.nan, "none"
        h = groups.get((r.comparison, r.domain, r.task))
        det, need, ok = math.nan, math.nan, None
        if h is not None and h.size >= 2 and design == "one-sample":
            model = PairScoreModel.from_scores(h, score=pooled_score)
            det = detectable_rating_sim(model, int(r.n_prompts), alpha=alpha, power=power, interval=interval)
            if delta:
                try:
                    sp = prompts_needed_sim(model, delta, alpha=alpha, power=power, interval=interval, sims=500,
                                            max_n=ADEQUACY_MAX_PROMPTS)
                    need = float(sp.n) if sp.n is not None else math.inf
                except LmraInputError:
                    need = math.inf
                ok = bool(int(r.n_prompts) >= need)
        elif math.isfinite(s) and design == "two-run":
            det = detectable_rating(int(r.n_prompts), s, alpha=alpha, power=power, design=design)
            need = (_normal_n(delta, s, alpha=alpha, power=power, design=design, alternative=None)
                    if delta else None)
            need = need if need is not None else math.nan
            ok = bool(int(r.n_prompts) >= need) if delta else None
        rows.append({"comparison": r.comparison, "domain": r.domain, "task": r.task, "n_prompts": int(r.n_prompts),
                     "sd": s, "sd_source": src, "detectable": det, "prompts_needed": need, "adequate": ok})
    return pd.DataFrame(rows, columns=["comparison", "domain", "task", "n_prompts", "sd", "sd_source", "detectable",
                                       "prompts_needed", "adequate"])

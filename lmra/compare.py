"""Comparing two runs or two models across tasks (methodology §8; FPF §4, Figs. 7, 8, 10).

Each (comparison, task) measured in both runs gives one point (H_a, H_b) of per-task net
ratings. Agreement is summarised by Pearson's r (scipy) and by the least-squares slope of
H_b on H_a **through the origin** with its 95% CI (statsmodels OLS without a constant):
a slope of 0.5 means run B's task ratings are about half run A's, as FPF reports when it
compares models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lmra.runfolder import RunFolder


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


def slope_through_origin(x, y, alpha: float = 0.05) -> SlopeFit:
    """Fit y = b·x by ordinary least squares without intercept (statsmodels ``OLS``).

    Args:
        x, y: equal-length sequences of finite floats (net ratings, in [−1, 1]).
        alpha: 1 − confidence level, in (0, 1).

    Returns:
        :class:`SlopeFit`.

    Source: methodology §8; FPF Figs. 7, 8, 10 (slope of one model's per-task ratings on
    another's).
    """
    import statsmodels.api as sm

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = int(x.size)
    if n != y.size:
        raise ValueError(f"x has {n} values, y has {y.size}")
    if n < 2 or not np.any(x != 0):
        return SlopeFit(math.nan, math.nan, math.nan, math.nan, n)
    fit = sm.OLS(y, x[:, None]).fit()
    lo, hi = fit.conf_int(alpha=alpha)[0]
    return SlopeFit(float(fit.params[0]), float(fit.bse[0]), float(lo), float(hi), n)


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


@dataclass
class RunComparison:
    """Outcome of :func:`compare_tables` / :func:`compare_runs`.

    Attributes:
        pairs: one row per (comparison, domain, task) in both tables: ``h_a, h_b`` (net
            ratings), ``ci_low_a, ci_high_a, ci_low_b, ci_high_b``, ``n_pairs_a, n_pairs_b``.
        pearson_r, pearson_p: Pearson's r of h_b vs h_a and its p-value.
        fit: slope of h_b on h_a through the origin (:class:`SlopeFit`).
        label_a, label_b: run ids or model names for display.
        notes: warnings (e.g. different judges) for the reader.
    """

    pairs: pd.DataFrame
    pearson_r: float
    pearson_p: float
    fit: SlopeFit
    label_a: str = "A"
    label_b: str = "B"
    notes: tuple[str, ...] = ()


def compare_tables(per_task_a: pd.DataFrame, per_task_b: pd.DataFrame, *, alpha: float = 0.05,
                   comparison: str | None = None, label_a: str = "A", label_b: str = "B",
                   notes: tuple[str, ...] = ()) -> RunComparison:
    """Pair two per-task tables on (comparison, domain, task) and summarise their agreement.

    Args:
        per_task_a, per_task_b: ``per_task.csv`` frames (``group_a, group_b, domain, task,
            net_rating, ci_low, ci_high, n_pairs``); a ``comparison`` column is added if absent.
        alpha: for the slope's CI (0.05 → 95%).
        comparison: keep only this comparison label (``"female vs male"``); None = all.

    Returns:
        :class:`RunComparison`. Tasks with a missing net rating on either side are dropped.
    """
    keys = ["comparison", "domain", "task"]

    def prep(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        if "comparison" not in df:
            df["comparison"] = df["group_a"].astype(str) + " vs " + df["group_b"].astype(str)
        return df[keys + ["net_rating", "ci_low", "ci_high", "n_pairs"]]

    pairs = prep(per_task_a).merge(prep(per_task_b), on=keys, suffixes=("_a", "_b"))
    pairs = pairs.rename(columns={"net_rating_a": "h_a", "net_rating_b": "h_b"})
    if comparison:
        pairs = pairs[pairs["comparison"] == comparison]
    pairs = pairs[pairs["h_a"].notna() & pairs["h_b"].notna()].reset_index(drop=True)
    r, p = pearson(pairs["h_a"], pairs["h_b"])
    fit = slope_through_origin(pairs["h_a"], pairs["h_b"], alpha=alpha)
    return RunComparison(pairs, r, p, fit, label_a, label_b, notes)


def compare_runs(run_a: RunFolder, run_b: RunFolder, *, alpha: float = 0.05,
                 comparison: str | None = None) -> RunComparison:
    """Compare two runs' per-task net ratings (see :func:`compare_tables`).

    Runs rated by different judges are compared (that is how judge agreement is studied)
    but a note says their ratings are on different scales.
    """
    notes = []
    if (run_a.judge_provider, run_a.judge_model) != (run_b.judge_provider, run_b.judge_model):
        notes.append(f"different judges ({run_a.judge_model} vs {run_b.judge_model}): ratings are on "
                     "different scales; read r as agreement, not the slope as a change")
    if run_a.judge_template[0] != run_b.judge_template[0]:
        notes.append("different judge templates")
    return compare_tables(run_a.per_task, run_b.per_task, alpha=alpha, comparison=comparison,
                          label_a=run_a.run_id, label_b=run_b.run_id, notes=tuple(notes))

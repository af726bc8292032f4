"""Per-task, per-domain and overall harmful-stereotype ratings (methodology §2 step 6, §5, §8).

Input is the per-pair ratings table (one row per pair, as in ``ratings.jsonl``); output is
a pandas frame with one row per (comparison, grouping) holding the net rating ``H = mean(h)``
with its t-interval (clustered by prompt when there are several samples per prompt), the
forward and reverse rates and the counts of invalid and failed pairs.
"""

from __future__ import annotations

import math

import pandas as pd

from lmra.stats import mean_ci

PER_TASK_COLUMNS = [
    "domain", "task", "group_a", "group_b", "n_pairs", "n_invalid", "n_failed", "forward_rate", "reverse_rate",
    "forward_reverse_ratio", "net_rating", "ci_low", "ci_high", "p_value", "n_prompts",
]


def summarize(ratings: pd.DataFrame, alpha: float = 0.05) -> dict:
    """Net rating and rates for one set of pairs.

    Args:
        ratings: rows with columns ``prompt_id``, ``valid`` (bool), ``failed`` (bool),
            ``q_F``, ``q_R``, ``h`` (NaN for invalid/failed pairs).
        alpha: 1 − confidence level.

    Returns:
        dict with ``n_pairs`` (valid pairs scored), ``n_invalid``, ``n_failed``,
        ``forward_rate`` = mean q_F, ``reverse_rate`` = mean q_R, ``forward_reverse_ratio``
        (nan when the reverse rate is 0), ``net_rating`` = mean h, ``ci_low``, ``ci_high``,
        ``p_value`` (t-test of H = 0) and ``n_prompts``.
    """
    failed = ratings["failed"].astype(bool)
    valid = ratings["valid"].astype(bool) & ~failed
    ok = ratings[valid]
    clusters = ok["prompt_id"].tolist()
    ci = mean_ci(ok["h"].tolist(), clusters=clusters, alpha=alpha)
    fwd = float(ok["q_F"].mean()) if len(ok) else math.nan
    rev = float(ok["q_R"].mean()) if len(ok) else math.nan
    return {
        "n_pairs": int(len(ok)),
        "n_invalid": int((~ratings["valid"].astype(bool) & ~failed).sum()),
        "n_failed": int(failed.sum()),
        "forward_rate": fwd,
        "reverse_rate": rev,
        "forward_reverse_ratio": fwd / rev if rev and not math.isnan(rev) else math.nan,
        "net_rating": ci.mean,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "p_value": ci.p_value,
        "n_prompts": int(ratings["prompt_id"].nunique()),
    }


def _table(ratings: pd.DataFrame, keys: list[str], alpha: float) -> pd.DataFrame:
    rows = []
    for key, grp in ratings.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(dict(zip(keys, key)) | summarize(grp, alpha))
    return pd.DataFrame(rows)


def per_task(ratings: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per (group_a, group_b, domain, task), columns :data:`PER_TASK_COLUMNS`."""
    if ratings.empty:
        return pd.DataFrame(columns=PER_TASK_COLUMNS)
    return _table(ratings, ["group_a", "group_b", "domain", "task"], alpha)[PER_TASK_COLUMNS]


def per_domain(ratings: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per (group_a, group_b, domain); same statistics as :func:`per_task`."""
    if ratings.empty:
        return pd.DataFrame(columns=[c for c in PER_TASK_COLUMNS if c != "task"])
    return _table(ratings, ["group_a", "group_b", "domain"], alpha)


def overall(ratings: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per comparison (group_a, group_b) over all tasks."""
    if ratings.empty:
        return pd.DataFrame(columns=["group_a", "group_b"])
    return _table(ratings, ["group_a", "group_b"], alpha)

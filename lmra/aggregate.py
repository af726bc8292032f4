"""Per-task, per-domain and overall tables (methodology §2 step 6, §1 step 7, §3, §5, §8).

Inputs are the per-pair rows written to ``ratings.jsonl`` / ``quality_ratings.jsonl``;
outputs are pandas frames. Pairs are *failed* (a model call failed), *refusal* (either
response was labelled a refusal; excluded from the stereotype and quality metrics),
*unlabelled* (a refusal label could not be obtained; excluded and counted, never scored as
"not refused"), *invalid* (the LMRA gave no usable answer) or valid. Intervals are betting
intervals by default (:func:`lmra.stats.mean_interval`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lmra.judge.scoring import COMBINERS
from lmra.stats import (adjust_pvalues, clustered_mcnemar, clustered_wilson_ci, mcnemar_exact, mean_interval,
                        two_proportion_test, wilson_ci)

PER_TASK_COLUMNS = [
    "domain", "task", "group_a", "group_b", "n_pairs", "n_invalid", "n_failed", "n_refusal", "n_unlabelled",
    "forward_rate", "reverse_rate", "forward_reverse_ratio", "net_rating", "ci_low", "ci_high", "p_value",
    "n_prompts", "net_rating_min", "net_rating_mean", "net_rating_calibrated",
]



#: the counts that only refusal labels measure: not labelled (``[refusal] enabled = false``) they
#: are unknown, written empty (CSV) / null (JSON), never a measured 0
REFUSAL_COUNTS = ("n_refusal", "n_unlabelled")


def refusals_not_labelled(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (per task, per domain, overall, placebo) of a run without refusal labels, with
    :data:`REFUSAL_COUNTS` set to None: such a run cannot tell a refused pair from a scored one
    (refused responses are rated as they are), so it has no refusal count, not a count of 0."""
    out = table.copy()
    for c in REFUSAL_COUNTS:
        if c in out:
            out[c] = pd.Series([None] * len(out), index=out.index, dtype=object)
    return out

def _bool(rows: pd.DataFrame, col: str) -> pd.Series:
    return rows[col].fillna(False).astype(bool) if col in rows else pd.Series(False, rows.index)


def _flags(rows: pd.DataFrame, prefix: str = "") -> tuple[pd.Series, pd.Series, pd.Series, pd.Series, pd.Series]:
    failed = _bool(rows, "failed")
    refused = _bool(rows, "refused") & ~failed
    unlabelled = _bool(rows, "unlabelled") & ~failed & ~refused
    valid = _bool(rows, f"{prefix}valid") & ~failed & ~refused & ~unlabelled
    invalid = ~valid & ~failed & ~refused & ~unlabelled
    return valid, invalid, failed, refused, unlabelled


def summarize(ratings: pd.DataFrame, alpha: float = 0.05, prefix: str = "", interval: str = "betting") -> dict:
    """Net rating and rates for one set of pairs (methodology §2 step 6).

    Args:
        ratings: rows with ``prompt_id``, ``valid``, ``failed``, optional ``refused`` and
            ``unlabelled``, and ``q_F``, ``q_R``, ``h`` (NaN when not scored); optional
            ``h_min``, ``h_mean``, ``h_calibrated`` (the pair score under each order combiner).
            ``prefix`` selects another judge's columns (e.g. ``"judge2_"``).
        alpha: 1 − confidence level.
        interval: ``betting`` (bounded-mean betting interval, default) or ``t`` (t-interval).

    Returns:
        dict with ``n_pairs`` (valid pairs scored), ``n_invalid``, ``n_failed``, ``n_refusal``,
        ``n_unlabelled``, ``forward_rate`` = mean q_F, ``reverse_rate`` = mean q_R,
        ``forward_reverse_ratio`` (nan when the reverse rate is 0), ``net_rating`` = mean h
        with ``ci_low``/``ci_high`` (clustered by prompt when a prompt has several pairs),
        ``p_value`` (test of H = 0 matching the interval), ``n_prompts``, and
        ``net_rating_<combiner>`` for each combiner (nan when its column is absent).
    """
    return _summary(_Columns(ratings, prefix), np.arange(len(ratings)), alpha, interval)


class _Columns:
    """What :func:`summarize` reads of a frame, taken out once for all its groups as numpy
    arrays read at a group's row positions: the pair flags (:func:`_flags`, computed row by
    row, so that a group's flags are the whole frame's at its rows), the prompt ids with their
    codes (``pd.factorize``; NaN is −1), and each score column as float64 when it is float64
    or an object column that converts as a whole (``astype(float)``: the same values as the
    group's own rows). A score column of any other kind (float32, nullable, text in rows that
    are not scored …) is read as before, the group's rows with ``iloc`` and pandas'
    reductions, so that every number equals pandas' own. A column is read when a group first
    needs it."""

    def __init__(self, ratings: pd.DataFrame, prefix: str):
        flags = _flags(ratings, prefix)
        self.valid, self.invalid, self.failed, self.refused, self.unlabelled = (f.to_numpy() for f in flags)
        self.prompt_id = ratings["prompt_id"].to_numpy(dtype=object)
        self.prompt_code = pd.factorize(ratings["prompt_id"])[0]
        self._floats: dict[str, np.ndarray | None] = {}
        self._ratings, self._prefix = ratings, prefix

    def _array(self, col: str) -> np.ndarray | None:
        """Column ``col`` as float64 when that gives pandas' own numbers, else None."""
        if col not in self._floats:
            s = self._ratings[col]
            values = None
            if s.dtype == np.float64:
                values = s.to_numpy()
            elif s.dtype == object:
                try:
                    values = s.astype(float).to_numpy()
                except (TypeError, ValueError):
                    values = None
            self._floats[col] = values
        return self._floats[col]

    def values(self, name: str, ok: np.ndarray) -> list[float]:
        """Column ``prefix + name`` at rows ``ok`` as floats (KeyError when absent)."""
        col = self._prefix + name
        a = self._array(col)
        return a[ok].tolist() if a is not None else self._ratings[col].iloc[ok].astype(float).tolist()

    def mean(self, name: str, ok: np.ndarray) -> float:
        """Mean of column ``prefix + name`` at rows ``ok``, NaNs skipped (``Series.mean``)."""
        col = self._prefix + name
        a = self._array(col)
        return _nanmean(a[ok]) if a is not None else float(self._ratings[col].iloc[ok].mean())

    def mean_of_scored(self, name: str, ok: np.ndarray) -> float:
        """Mean of the non-NaN values of column ``prefix + name`` at rows ``ok`` (nan when none
        or when the frame has no such column)."""
        col = self._prefix + name
        if col not in self._ratings:
            return math.nan
        a = self._array(col)
        if a is None:
            vals = self._ratings[col].iloc[ok].astype(float).dropna()
            return float(vals.mean()) if len(vals) else math.nan
        vals = a[ok]
        vals = vals[~np.isnan(vals)]  # dropped, not zeroed as in _nanmean: the sum of the others alone
        return float(vals.sum() / np.float64(vals.size)) if vals.size else math.nan

    def rates(self, ok: np.ndarray) -> tuple[float, float]:
        """Mean q_F and q_R of the valid rows at ``ok`` (nan, nan when none; the columns are
        read only then: a second LMRA that never answered has none). Raises KeyError as the
        frame does when rows are valid and a column is missing."""
        if not len(ok):
            return math.nan, math.nan
        return self.mean("q_F", ok), self.mean("q_R", ok)


def _nanmean(x: np.ndarray) -> float:
    """``pd.Series(x).mean()`` of a float64 array, computed as pandas does without bottleneck
    (NaNs as 0 in the sum, divided by the count of the others): the same bits; nan when empty."""
    missing = np.isnan(x)
    n = x.size - int(missing.sum())
    if n == 0:
        return math.nan
    return float(np.where(missing, 0.0, x).sum() / np.float64(n)) if missing.any() else float(x.sum() / np.float64(n))


def clipped(ci) -> tuple[float, float]:
    """An interval of a mean of scores in [−1, 1] (net ratings, quality scores) clipped to
    [−1, 1]: a t-interval of 2 prompts ran to [−4.58, +5.58] (break-it and statistics-review
    findings); the clipped interval covers whenever the interval does. NaN bounds stay NaN.

    Args:
        ci: a :class:`lmra.stats.MeanCI` (``low``, ``high``).

    Returns:
        (low, high)."""
    return (max(ci.low, -1.0), min(ci.high, 1.0)) if not math.isnan(ci.low) else (ci.low, ci.high)


def _summary(cols: _Columns, pos: np.ndarray, alpha: float, interval: str) -> dict:
    """:func:`summarize` of the rows at positions ``pos`` (ascending) of the frame of ``cols``."""
    ok = pos[cols.valid[pos]]
    ci = mean_interval(cols.values("h", ok), clusters=cols.prompt_id[ok].tolist(), alpha=alpha, method=interval)
    lo, hi = clipped(ci)
    fwd, rev = cols.rates(ok)
    codes = cols.prompt_code[pos]
    out = {
        "n_pairs": len(ok), "n_invalid": int(cols.invalid[pos].sum()), "n_failed": int(cols.failed[pos].sum()),
        "n_refusal": int(cols.refused[pos].sum()), "n_unlabelled": int(cols.unlabelled[pos].sum()),
        "forward_rate": fwd, "reverse_rate": rev,
        "forward_reverse_ratio": fwd / rev if rev and not math.isnan(rev) else math.nan,
        "net_rating": ci.mean, "ci_low": lo, "ci_high": hi, "p_value": ci.p_value,
        "n_prompts": int(np.unique(codes[codes >= 0]).size),
    }
    # each combiner over the pairs *it* scores: every rated pair (not failed, refused or
    # unlabelled) where its score is defined — not only those the run's combiner scored (review
    # finding: with text answers under `min`, all three columns were the mean of min's pairs)
    rated = pos[~(cols.failed[pos] | cols.refused[pos] | cols.unlabelled[pos])]
    for m in COMBINERS:
        out[f"net_rating_{m}"] = cols.mean_of_scored(f"h_{m}", rated)
    return out


def _table(ratings: pd.DataFrame, keys: list[str], alpha: float, prefix: str = "",
           interval: str = "betting") -> pd.DataFrame:
    """:func:`summarize` per group of ``keys`` (sorted, NaN keys kept), a row each; the frame's
    columns are read once (:class:`_Columns`), the groups' rows by position."""
    cols = _Columns(ratings, prefix)
    rows = []
    for key, grp in ratings[keys].reset_index(drop=True).groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(dict(zip(keys, key)) | _summary(cols, grp.index.to_numpy(), alpha, interval))
    return pd.DataFrame(rows)


def per_task(ratings: pd.DataFrame, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """One row per (group_a, group_b, domain, task), columns :data:`PER_TASK_COLUMNS`."""
    if ratings.empty:
        return pd.DataFrame(columns=PER_TASK_COLUMNS)
    return _table(ratings, ["group_a", "group_b", "domain", "task"], alpha, interval=interval)[PER_TASK_COLUMNS]


def per_domain(ratings: pd.DataFrame, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """One row per (group_a, group_b, domain); same statistics as :func:`per_task`."""
    if ratings.empty:
        return pd.DataFrame(columns=[c for c in PER_TASK_COLUMNS if c != "task"])
    return _domain_first(_table(ratings, ["group_a", "group_b", "domain"], alpha, interval=interval))


def _domain_first(df: pd.DataFrame) -> pd.DataFrame:
    """A per-domain table with its key columns in per_task.csv's order, task aside: domain, group_a,
    group_b (fresh-user finding, s47: group_a, group_b, domain)."""
    keys = ["domain", "group_a", "group_b"]
    return df[keys + [c for c in df.columns if c not in keys]]


def overall(ratings: pd.DataFrame, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """One row per comparison (group_a, group_b) over all tasks."""
    if ratings.empty:
        return pd.DataFrame(columns=["group_a", "group_b"])
    return _table(ratings, ["group_a", "group_b"], alpha, interval=interval)


def unrated_bounds(net_rating: float, n_scored: int, n_unrated: int) -> tuple[float, float]:
    """Worst-case bounds on a net rating for the pairs that got no usable rating.

    The net rating is the mean pair score over the ``n_scored`` scored pairs; ``n_unrated``
    pairs got none (invalid: the LMRA refused to rate or put no probability on the options;
    unlabelled: no refusal label; failed calls). They are not missing at random when an LMRA
    declines the very pairs that hold a stereotype, and nothing in the data says what they
    hold, so the only assumption-free statement is Manski's worst-case bound (Manski 1989,
    "Anatomy of the selection problem", J. Human Resources 24; *Partial Identification of
    Probability Distributions*, 2003, ch. 1): had every unrated pair scored −1 or +1, the net
    rating over all n + k pairs would be (n·H − k) / (n + k) or (n·H + k) / (n + k).

    Args:
        net_rating: H, in [−1, 1] (nan: no pair scored).
        n_scored: n ≥ 0 scored pairs; n_unrated: k ≥ 0 pairs without a usable rating.

    Returns:
        (low, high) in [−1, 1]; (H, H) when k = 0; (−1, 1) when n = 0 and k > 0; (nan, nan)
        when nothing was rated at all or H is nan with n > 0.
    """
    n, k = int(n_scored), int(n_unrated)
    if n == 0:
        return (-1.0, 1.0) if k else (math.nan, math.nan)
    if math.isnan(net_rating):
        return math.nan, math.nan
    return (n * net_rating - k) / (n + k), (n * net_rating + k) / (n + k)


def unrated_bound_rows(overall_table: pd.DataFrame) -> list[dict]:
    """:func:`unrated_bounds` of each comparison of ``overall.csv``'s frame: one dict per row
    with ``comparison`` ("A vs B"), ``n_unrated`` (invalid + unlabelled + failed pairs),
    ``n_declined`` (of those, the invalid and unlabelled: answered, unusably), ``low``, ``high``."""
    def count(r: dict, c: str) -> int:
        v = r.get(c)
        return 0 if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)

    out = []
    for r in overall_table.to_dict(orient="records"):
        declined = count(r, "n_invalid") + count(r, "n_unlabelled")
        k = declined + count(r, "n_failed")
        low, high = unrated_bounds(float(r["net_rating"]), int(r["n_pairs"]), k)
        out.append({"comparison": f"{r['group_a']} vs {r['group_b']}", "n_unrated": k, "n_declined": declined,
                    "low": low, "high": high})
    return out


def _scopes(df: pd.DataFrame):
    """Yield (level, domain, task, rows) for overall, each domain and each task."""
    yield "overall", "(all)", "(all)", df
    for d, g in df.groupby("domain", sort=True):
        yield "domain", d, "(all)", g
    for (d, t), g in df.groupby(["domain", "task"], sort=True):
        yield "task", d, t, g


def _refusal_row(ga, gb, level: str, dom, task, sa: int, na: int, sb: int, nb: int, alpha: float,
                 n_paired: int, only_a: int, only_b: int, prompt_differences=None, prompt_counts=None,
                 ua: int = 0, ub: int = 0, unlabelled_test: tuple | None = None) -> dict:
    """One row of the refusal table: ``sa`` of ``na`` responses to group A refused, ``sb`` of
    ``nb`` to group B; Wilson intervals per group and the two-proportion z-test between them;
    of the ``n_paired`` pairs whose two responses are both labelled, ``only_a`` refused only
    under A and ``only_b`` only under B, and the paired test on them: exact McNemar with one
    pair per prompt; with several (``samples_per_prompt`` > 1: ``prompt_differences``, each
    prompt's only-A minus only-B count) McNemar for clustered pairs, whose pairs of one prompt
    are not independent (break-it finding: the exact test's false positives reached 0.15 at
    α = 0.05 with 5 pairs per prompt). ``prompt_counts`` (several responses per prompt): each
    prompt's ``(refusals_a, labelled_a, refusals_b, labelled_b)`` as four arrays; the group
    intervals are then :func:`~lmra.stats.clustered_wilson_ci` over the prompts (``ci_method``
    ``clustered``; statistics review: plain Wilson covered 0.80–0.85 at 95% with 5 per prompt),
    else plain Wilson. ``ua``/``ub``: responses to A / B without a refusal label (the LMRA's label
    answer unusable, or its call failed; not a chatbot call that failed), which the rates leave
    out: ``unlabelled_a``/``unlabelled_b`` (statistics break-it, s42: an LMRA leaving 17 of 100
    responses to one group unlabelled and 2 of the other's hid a 20 % vs 2 % refusal gap), and
    ``p_unlabelled``, the paired test of equal unlabelled shares on the pairs whose two responses
    exist — ``unlabelled_test`` = (pairs with only A's response unlabelled, only B's, each prompt's
    only-A minus only-B count or None): exact McNemar, or clustered by prompt when a prompt has
    several pairs (break-it round 2, s42: Fisher on the pooled counts warned 16–21 % of healthy
    runs whose unlabelled propensity is shared within a prompt and group); NaN without a pair
    unlabelled on one side only."""
    if prompt_counts is None:
        lo_a, hi_a = wilson_ci(sa, na, alpha)
        lo_b, hi_b = wilson_ci(sb, nb, alpha)
    else:
        ya, ma, yb, mb = (np.asarray(x, dtype=float) for x in prompt_counts)
        lo_a, hi_a = clustered_wilson_ci(ya[ma > 0], ma[ma > 0], alpha)
        lo_b, hi_b = clustered_wilson_ci(yb[mb > 0], mb[mb > 0], alpha)
    z, p = two_proportion_test(sa, na, sb, nb)
    if not n_paired:
        p_paired, method = math.nan, None
    elif prompt_differences is None:
        p_paired, method = mcnemar_exact(only_a, only_b), "exact"
    else:
        p_paired, method = clustered_mcnemar(prompt_differences), "clustered"
    return {"group_a": ga, "group_b": gb, "level": level, "domain": dom, "task": task,
            "n_a": na, "refusals_a": sa, "rate_a": sa / na if na else math.nan, "ci_low_a": lo_a,
            "ci_high_a": hi_a, "n_b": nb, "refusals_b": sb, "rate_b": sb / nb if nb else math.nan,
            "ci_low_b": lo_b, "ci_high_b": hi_b, "z": z, "p_value": p, "n_paired": n_paired,
            "only_a": only_a, "only_b": only_b, "p_paired": p_paired, "paired_test": method,
            "ci_method": "wilson" if prompt_counts is None else "clustered", "unlabelled_a": ua, "unlabelled_b": ub,
            "p_unlabelled": _unlabelled_p(unlabelled_test)}


def _unlabelled_p(test: tuple | None) -> float:
    """:func:`_refusal_row`'s ``p_unlabelled`` of ``(only_a, only_b, prompt_differences)``."""
    if test is None or not (test[0] or test[1]):
        return math.nan
    only_a, only_b, differences = test
    return mcnemar_exact(int(only_a), int(only_b)) if differences is None else clustered_mcnemar(differences)


def refusal_table(ratings: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Refusal rates per group with Wilson intervals and a two-proportion z-test (methodology §1 step 7).

    Args:
        ratings: per-pair rows with ``refusal_p_a``/``refusal_p_b`` (None when not labelled,
            e.g. a failed call) and the response-level refusal decision implied by ``refused``
            — each response counts once, so the refusal of response A is
            ``refusal_p_a > threshold``, recomputed from the pair's ``refusal_a``/``refusal_b``
            columns when present.

    Returns:
        One row per (comparison, level, domain, task) with ``n_a``, ``refusals_a``, ``rate_a``,
        ``ci_low_a``, ``ci_high_a``, the same for b, and ``z``, ``p_value`` of the pooled
        two-proportion z-test of equal rates (methodology §1.7); ``n_paired`` (pairs whose two
        responses are both labelled), ``only_a``/``only_b`` (pairs in which only A's / only B's
        response was refused) and ``p_paired``, the paired test of equal rates on those pairs
        (NaN when none; ``paired_test``: ``exact`` McNemar with one pair per prompt,
        ``clustered`` McNemar (Durkalski et al. 2003) when a prompt has several, read from
        ``ratings``' ``prompt_id``): both responses of a pair answer the same prompt, so the
        pairs are the design's unit; the pooled test ignores this pairing and is conservative when
        some prompts are refused under any name (statistics review: 0.025 false positives at
        α = 0.05), the paired one keeps α with more power. ``level`` is ``overall``,
        ``domain`` or ``task``.
    """
    if ratings.empty or "refusal_a" not in ratings:
        return pd.DataFrame()
    # only the columns read below: the groups' sub-frames are then cut from 6 columns, not ~60
    keep = ["group_a", "group_b", "domain", "task", "refusal_a", "refusal_b"]
    responded = ~chatbot_failed(ratings)  # (a pair lost to a chatbot call has no response to label)
    ratings = ratings[keep + (["prompt_id"] if "prompt_id" in ratings else [])].assign(_responded=responded)
    rows = []
    for (ga, gb), comp in ratings.groupby(["group_a", "group_b"], sort=False):
        for level, dom, task, g in _scopes(comp):
            la = g["refusal_a"].dropna().astype(bool)
            lb = g["refusal_b"].dropna().astype(bool)
            ua = int((g["refusal_a"].isna() & g["_responded"]).sum())
            ub = int((g["refusal_b"].isna() & g["_responded"]).sum())
            resp = g[g["_responded"]]
            xa, xb = resp["refusal_a"].isna(), resp["refusal_b"].isna()
            du = None
            if "prompt_id" in resp and resp[["domain", "task", "prompt_id"]].duplicated().any():
                d = (xa & ~xb).astype(int) - (xb & ~xa).astype(int)
                du = d.groupby([resp[c] for c in ("domain", "task", "prompt_id")], dropna=False).sum().to_numpy()
            unlabelled_test = (int((xa & ~xb).sum()), int((xb & ~xa).sum()), du)
            both = g[g["refusal_a"].notna() & g["refusal_b"].notna()]
            ra, rb = both["refusal_a"].astype(bool), both["refusal_b"].astype(bool)
            diffs = counts = None
            cluster = ["domain", "task", "prompt_id"]  # a prompt's pairs (as refusal_table_sql groups them)
            if "prompt_id" in both and both[cluster].duplicated().any():  # several pairs of one prompt
                d = (ra & ~rb).astype(int) - (rb & ~ra).astype(int)
                diffs = d.groupby([both[c] for c in cluster], dropna=False).sum().to_numpy()
            if "prompt_id" in g and g[cluster].duplicated().any():  # several responses per prompt and group
                keys = [g[c] for c in cluster]
                per = pd.DataFrame({"ya": g["refusal_a"].astype(float), "yb": g["refusal_b"].astype(float)}
                                   ).groupby(keys, dropna=False).agg(["sum", "count"])
                counts = (per[("ya", "sum")], per[("ya", "count")], per[("yb", "sum")], per[("yb", "count")])
            rows.append(_refusal_row(ga, gb, level, dom, task, int(la.sum()), len(la), int(lb.sum()), len(lb),
                                     alpha, len(both), int((ra & ~rb).sum()), int((rb & ~ra).sum()), diffs, counts,
                                     ua, ub, unlabelled_test))
    return pd.DataFrame(rows)


#: the start of a failed pair's ``error`` when a chatbot call failed (no response to rate or label;
#: lmra.audit.rate): a refusal label's failure starts "refusal label: ", the LMRA's own has no prefix
CHATBOT_FAILED = "chatbot: "


def chatbot_failed(pairs: pd.DataFrame) -> pd.Series:
    """Per pair: lost because a chatbot call failed (``failed`` with an ``error`` starting
    :data:`CHATBOT_FAILED`); all False without those columns."""
    if "failed" not in pairs or "error" not in pairs:
        return pd.Series(False, index=pairs.index)
    return (pairs["failed"].fillna(False).astype(bool)
            & pairs["error"].astype("string").str.startswith(CHATBOT_FAILED).fillna(False).astype(bool))


def quality_table(quality: pd.DataFrame, alpha: float = 0.05, interval: str = "t",
                  pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per criterion: mean pair score with CI and p-value, Bonferroni and Holm over the criteria
    (methodology §3; FPF §3.2).

    Args:
        quality: one row per (pair, criterion) with ``criterion``, ``prompt_id``, ``valid``,
            ``failed``, ``h`` = q(y_A better) − q(y_B better).
        pairs: the run's pairs (``group_a, group_b, domain, task``; placebo pairs left out), to
            count the pairs of each scope that were never rated on quality — a failed target
            call, a refusal, no refusal label, a failed stereotype call — as ``n_not_rated``
            (statistics-review finding: they left the denominators uncounted); None: the column
            is left out.

    Returns:
        One row per (comparison, level, domain, task, criterion): ``n_pairs``, ``n_invalid``
        (rated without a usable answer), ``n_failed`` (the call failed after every retry),
        ``n_not_rated`` (with ``pairs``: the scope's pairs not asked about quality; ``n_pairs +
        n_invalid + n_failed + n_not_rated`` = the scope's pairs), ``mean``, ``ci_low``, ``ci_high``, ``p_value``, ``p_bonferroni``, ``significant_bonferroni``,
        ``p_holm``, ``significant_holm``. The corrections run over the criteria within each
        (comparison, level, domain, task). ``interval``: the run's ``interval`` (an audit
        passes it, as for the net ratings: ``betting`` by default, its anytime-valid p-value of
        mean = 0; ``t`` the t-interval and t-test).
    """
    if quality.empty:
        return pd.DataFrame()
    if pairs is not None and "placebo" in pairs:
        pairs = pairs[~pairs["placebo"].fillna(False).astype(bool)]
    out = []
    for (ga, gb), comp in quality.groupby(["group_a", "group_b"], sort=False):
        comp_pairs = (pairs[(pairs["group_a"] == ga) & (pairs["group_b"] == gb)] if pairs is not None else None)
        for level, dom, task, g in _scopes(comp):
            block = []
            n_scope = None
            if comp_pairs is not None:
                n_scope = len(comp_pairs) if level == "overall" else int(
                    ((comp_pairs["domain"] == dom) & ((comp_pairs["task"] == task) if level == "task" else True)).sum())
            for crit, c in g.groupby("criterion", sort=False):
                failed = c["failed"].fillna(False).astype(bool)
                valid = c["valid"].fillna(False).astype(bool) & ~failed
                ok = c[valid]
                ci = mean_interval(ok["h"].astype(float).tolist(), clusters=ok["prompt_id"].tolist(), alpha=alpha,
                                   method=interval)
                block.append({"group_a": ga, "group_b": gb, "level": level, "domain": dom, "task": task,
                              "criterion": crit, "n_pairs": int(valid.sum()), "n_invalid": int((~valid & ~failed).sum()),
                              "n_failed": int(failed.sum())}
                             | ({} if n_scope is None else {"n_not_rated": max(0, n_scope - len(c))})
                             | {"mean": ci.mean, "ci_low": clipped(ci)[0], "ci_high": clipped(ci)[1],
                                "p_value": ci.p_value})
            pv = [b["p_value"] for b in block]
            rb, ab = adjust_pvalues(pv, "bonferroni", alpha)
            rh, ah = adjust_pvalues(pv, "holm", alpha)
            for b, r1, a1, r2, a2 in zip(block, rb, ab, rh, ah):
                out.append(b | {"p_bonferroni": a1, "significant_bonferroni": r1, "p_holm": a2,
                                "significant_holm": r2})
    return pd.DataFrame(out)


def two_judges(ratings: pd.DataFrame, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """Both LMRAs' harmful-stereotype ratings side by side, per task and overall.

    Returns:
        One row per (comparison, level, domain, task) with each judge's ``net_rating`` and CI,
        ``n_both`` (pairs valid for both judges), ``pearson_r`` of the per-pair scores h
        (nan when undefined), ``agreement`` = share of those pairs where the judges'
        most likely outcome (forward / reverse / none) is the same, and ``kappa``: Cohen's κ of
        those outcomes (:func:`_kappa`, chance-corrected; nan when both are constant).
    """
    if ratings.empty or "judge2_h" not in ratings:
        return pd.DataFrame()
    from scipy import stats as st

    rows = []
    for (ga, gb), comp in ratings.groupby(["group_a", "group_b"], sort=False):
        for level, dom, task, g in _scopes(comp):
            s1, s2 = summarize(g, alpha, interval=interval), summarize(g, alpha, "judge2_", interval)
            both = g[g["valid"].fillna(False).astype(bool) & g["judge2_valid"].fillna(False).astype(bool)]
            h1, h2 = both["h"].astype(float).to_numpy(), both["judge2_h"].astype(float).to_numpy()
            r = float(st.pearsonr(h1, h2).statistic) if len(both) > 2 and np.ptp(h1) > 0 and np.ptp(h2) > 0 \
                else math.nan
            top = lambda df, p: df[[f"{p}q_F", f"{p}q_R", f"{p}q_N"]].to_numpy().argmax(axis=1)  # noqa: E731
            agree = float((top(both, "") == top(both, "judge2_")).mean()) if len(both) else math.nan
            kappa = _kappa(top(both, ""), top(both, "judge2_")) if len(both) else math.nan
            rows.append({"group_a": ga, "group_b": gb, "level": level, "domain": dom, "task": task,
                         "net_rating_judge1": s1["net_rating"], "ci_low_judge1": s1["ci_low"],
                         "ci_high_judge1": s1["ci_high"], "net_rating_judge2": s2["net_rating"],
                         "ci_low_judge2": s2["ci_low"], "ci_high_judge2": s2["ci_high"], "n_both": len(both),
                         "pearson_r": r, "agreement": agree, "kappa": kappa})
    return pd.DataFrame(rows)


def _kappa(a: np.ndarray, b: np.ndarray) -> float:
    """Cohen's κ of two judges' most likely outcomes (0, 1, 2 = forward / reverse / none; statsmodels
    ``cohens_kappa`` on their 3 × 3 table): agreement corrected for chance — raw agreement is high
    whenever both mostly say "none" (statistics break-it, s38: 0.925 for a judge that flagged
    nothing). nan when both put every pair in one outcome."""
    import warnings

    from statsmodels.stats.inter_rater import cohens_kappa

    table = np.array([[int(((a == i) & (b == j)).sum()) for j in range(3)] for i in range(3)])
    used = [i for i in range(3) if table[i].sum() or table[:, i].sum()]
    if len(used) < 2:
        return math.nan
    with warnings.catch_warnings():  # (its z statistic divides by 0 when one judge is constant: not used)
        warnings.simplefilter("ignore")
        return float(cohens_kappa(table[np.ix_(used, used)]).kappa)


def placebo_table(ratings: pd.DataFrame, placebo: dict, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """Negative-control (placebo) comparisons: group A's names split in two halves A₁, A₂, the
    same pipeline and wording as the real comparison (issue 10). Expected net rating 0.

    Args:
        ratings: the placebo pairs' rows (as in ``placebo_ratings.jsonl``).
        placebo: placebo label → (real comparison label, group A₁, group A₂).

    Returns:
        One row per placebo comparison: ``placebo``, ``comparison`` (the real one), the
        :func:`summarize` columns with a (1 − α/k) interval (Bonferroni over the k placebos, so
        that the chance of flagging any clean placebo stays ≤ α), ``testable`` (an interval
        exists: ≥ 2 prompts with a valid pair) and ``flagged`` = the interval excludes 0.
    """
    rows = []
    k = max(1, len(placebo))
    for label, (real, g1, g2) in placebo.items():
        g = ratings[ratings["comparison"] == label] if not ratings.empty else ratings
        s = summarize(g, alpha / k, interval=interval) if len(g) else {
            "n_pairs": 0, "net_rating": math.nan, "ci_low": math.nan, "ci_high": math.nan}
        testable = not (math.isnan(s["ci_low"]) or math.isnan(s["ci_high"]))
        flagged = bool(testable and (s["ci_low"] > 0 or s["ci_high"] < 0))
        rows.append({"placebo": label, "comparison": real, "group_a": g1.name, "group_b": g2.name} | s
                    | {"confidence": 1 - alpha / k, "testable": testable, "flagged": flagged})
    return pd.DataFrame(rows)


# -- the same tables as SQL over the run folder's per-pair file (issue 15) --------------------
# DuckDB filters, flags and counts the pairs out of core and hands back, per group, the valid
# pairs' scores in file order; the means, intervals and tests are computed by the same Python
# code as above on those arrays, so the tables are the ones :func:`per_task` & co. give.

_FLAG_SQL = """
WITH base AS (
  SELECT {keys_sel}, prompt_id, row_no, {h} AS _h, {qf} AS _qf, {qr} AS _qr, {hm} ,
         coalesce({failed}, false) AS _failed, coalesce({refused}, false) AS _refused0,
         coalesce({unlabelled}, false) AS _unlab0, coalesce({valid}, false) AS _valid0
  FROM {src} {where}
), flags AS (
  SELECT *, _refused0 AND NOT _failed AS _refused,
         _unlab0 AND NOT _failed AND NOT (_refused0 AND NOT _failed) AS _unlabelled
  FROM base
)
SELECT *, _valid0 AND NOT _failed AND NOT _refused AND NOT _unlabelled AS _valid FROM flags
"""


def _source(path_or_con, columns: list[str] | None = None):
    """(DuckDB connection, its per-pair view's columns) for a per-pair file or a ready connection."""
    from lmra.pairstore import connect, register_pairs

    if isinstance(path_or_con, tuple):
        return path_or_con
    con = connect()
    return con, register_pairs(con, path_or_con, columns=columns)


def _flagged_sql(have: list[str], keys: list[str], prefix: str = "", where: str = "") -> str:
    col = lambda c, default: c if c in have else default  # noqa: E731
    hm = ", ".join(f"{col(f'{prefix}h_{m}', 'NULL::DOUBLE')} AS _h_{m}" for m in COMBINERS)
    return _FLAG_SQL.format(keys_sel=", ".join(keys) if keys else "NULL AS _nokey", h=col(f"{prefix}h", "NULL::DOUBLE"),
                            qf=col(f"{prefix}q_F", "NULL::DOUBLE"), qr=col(f"{prefix}q_R", "NULL::DOUBLE"), hm=hm,
                            failed=col("failed", "false"), refused=col("refused", "false"),
                            unlabelled=col("unlabelled", "false"), valid=col(f"{prefix}valid", "false"),
                            src="pairs", where=where)


def _summaries_sql(source, keys: list[str], alpha: float, prefix: str = "", interval: str = "betting",
                   where: str = "") -> list[dict]:
    """:func:`summarize` of each group of ``keys`` (sorted, as :func:`_table`), in SQL."""
    con, have = source
    flagged = _flagged_sql(have, keys, prefix, where)
    order = ", ".join(keys) if keys else "1"
    groups = con.execute(f"""
        WITH f AS ({flagged})
        SELECT {', '.join(keys) + ',' if keys else ''}
               sum(_valid::INT) AS n_pairs,
               sum((NOT _valid AND NOT _failed AND NOT _refused AND NOT _unlabelled)::INT) AS n_invalid,
               sum(_failed::INT) AS n_failed, sum(_refused::INT) AS n_refusal, sum(_unlabelled::INT) AS n_unlabelled,
               count(DISTINCT prompt_id) AS n_prompts
        FROM f GROUP BY ALL ORDER BY {order} NULLS LAST""").fetchall()
    cols = ["_g", "prompt_id", "_valid", "_h", "_qf", "_qr"] + [f"_h_{m}" for m in COMBINERS]
    # the rated rows (not failed, refused or unlabelled): the valid ones give the net rating, and
    # each combiner's column is the mean over those it scores (as _summary)
    rated = con.execute(f"""
        WITH f AS ({flagged})
        SELECT dense_rank() OVER (ORDER BY {order} NULLS LAST) - 1 AS _g, prompt_id, _valid, _h, _qf, _qr,
               {', '.join(f'_h_{m}' for m in COMBINERS)}
        FROM f WHERE _valid OR NOT (_failed OR _refused OR _unlabelled)
        ORDER BY {order} NULLS LAST, row_no""").fetchnumpy()
    import numpy as np

    gid = np.asarray(rated["_g"], dtype=np.int64)
    # group numbers of the rated rows count only groups that have a rated row: map them to all groups
    has_rated = [i for i, g in enumerate(groups) if g[len(keys)] + g[len(keys) + 1] > 0]
    bounds = np.searchsorted(gid, np.arange(len(has_rated) + 1))
    arrays = {c: _filled(rated[c], c != "prompt_id") for c in cols[1:]}
    arrays["_valid"] = arrays["_valid"].astype(bool)
    rows = []
    slot = {g: i for i, g in enumerate(has_rated)}
    for i, g in enumerate(groups):
        key = dict(zip(keys, g[:len(keys)]))
        n_pairs, n_invalid, n_failed, n_refusal, n_unlabelled, n_prompts = (int(v or 0) for v in g[len(keys):])
        if i in slot:
            s = slice(bounds[slot[i]], bounds[slot[i] + 1])
            scored = {c: arrays[c][s] for c in arrays}
        else:
            scored = {c: arrays[c][:0] for c in arrays}
        part = {c: scored[c][scored["_valid"]].copy() for c in arrays}
        ci = mean_interval(part["_h"].tolist(), clusters=part["prompt_id"].tolist(), alpha=alpha, method=interval)
        lo, hi = clipped(ci)
        fwd = float(pd.Series(part["_qf"]).mean()) if n_pairs else math.nan
        rev = float(pd.Series(part["_qr"]).mean()) if n_pairs else math.nan
        out = key | {
            "n_pairs": n_pairs, "n_invalid": n_invalid, "n_failed": n_failed, "n_refusal": n_refusal,
            "n_unlabelled": n_unlabelled, "forward_rate": fwd, "reverse_rate": rev,
            "forward_reverse_ratio": fwd / rev if rev and not math.isnan(rev) else math.nan,
            "net_rating": ci.mean, "ci_low": lo, "ci_high": hi, "p_value": ci.p_value, "n_prompts": n_prompts,
        }
        for m in COMBINERS:
            vals = pd.Series(scored[f"_h_{m}"]).dropna() if f"{prefix}h_{m}" in have else pd.Series(dtype=float)
            out[f"net_rating_{m}"] = float(vals.mean()) if len(vals) else math.nan
        rows.append(out)
    return rows


def _filled(a, numeric: bool = True):
    """A column fetched from DuckDB as a plain numpy array (NULL → NaN, or None for text)."""
    import numpy as np

    if numeric:
        return np.ma.filled(np.ma.asarray(a).astype(float), np.nan)
    return np.asarray(np.ma.filled(np.ma.asarray(a, dtype=object), None), dtype=object)


def _n_rows(source, where: str = "") -> int:
    return int(source[0].execute(f"SELECT count(*) FROM pairs {where}").fetchone()[0])


def per_task_sql(pairs, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """:func:`per_task` computed with DuckDB over a per-pair file.

    Args:
        pairs: ``ratings.parquet`` (queried out of core) or an earlier run's ``ratings.jsonl``.
        alpha, interval: as :func:`per_task`.

    Returns:
        The same frame :func:`per_task` returns for the file's rows.
    """
    src = _source(pairs)
    if not _n_rows(src):
        return pd.DataFrame(columns=PER_TASK_COLUMNS)
    return pd.DataFrame(_summaries_sql(src, ["group_a", "group_b", "domain", "task"], alpha,
                                       interval=interval))[PER_TASK_COLUMNS]


def per_domain_sql(pairs, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """:func:`per_domain` computed with DuckDB over a per-pair file (see :func:`per_task_sql`)."""
    src = _source(pairs)
    if not _n_rows(src):
        return pd.DataFrame(columns=[c for c in PER_TASK_COLUMNS if c != "task"])
    return _domain_first(pd.DataFrame(_summaries_sql(src, ["group_a", "group_b", "domain"], alpha, interval=interval)))


def overall_sql(pairs, alpha: float = 0.05, interval: str = "betting") -> pd.DataFrame:
    """:func:`overall` computed with DuckDB over a per-pair file (see :func:`per_task_sql`)."""
    src = _source(pairs)
    if not _n_rows(src):
        return pd.DataFrame(columns=["group_a", "group_b"])
    return pd.DataFrame(_summaries_sql(src, ["group_a", "group_b"], alpha, interval=interval))


def refusal_table_sql(pairs, alpha: float = 0.05) -> pd.DataFrame:
    """:func:`refusal_table` computed with DuckDB over a per-pair file (counts in SQL; Wilson
    intervals, the two-proportion test and the paired test in Python)."""
    con, have = _source(pairs)
    if "refusal_a" not in have or not _n_rows((con, have)):
        return pd.DataFrame()
    responded = (f"NOT (coalesce(failed, false) AND coalesce(error, '') LIKE '{CHATBOT_FAILED}%')"
                 if {"failed", "error"} <= set(have) else "true")  # (as chatbot_failed)
    counts = f"""count(refusal_a) AS na, coalesce(sum(refusal_a::INT), 0) AS sa,
                count(refusal_b) AS nb, coalesce(sum(refusal_b::INT), 0) AS sb,
                count(*) FILTER (WHERE refusal_a IS NOT NULL AND refusal_b IS NOT NULL) AS n_paired,
                count(*) FILTER (WHERE refusal_a AND NOT refusal_b) AS only_a,
                count(*) FILTER (WHERE refusal_b AND NOT refusal_a) AS only_b,
                count(*) FILTER (WHERE refusal_a IS NULL AND {responded}) AS ua,
                count(*) FILTER (WHERE refusal_b IS NULL AND {responded}) AS ub,
                count(*) FILTER (WHERE refusal_a IS NULL AND refusal_b IS NOT NULL AND {responded}) AS oua,
                count(*) FILTER (WHERE refusal_b IS NULL AND refusal_a IS NOT NULL AND {responded}) AS oub"""
    comps = con.execute("SELECT group_a, group_b FROM pairs GROUP BY ALL ORDER BY min(row_no)").fetchall()
    scopes = {
        "overall": con.execute(f"SELECT group_a, group_b, '(all)', '(all)', {counts} FROM pairs GROUP BY ALL").fetchall(),
        "domain": con.execute(f"SELECT group_a, group_b, domain, '(all)', {counts} FROM pairs GROUP BY ALL "
                              "ORDER BY domain").fetchall(),
        "task": con.execute(f"SELECT group_a, group_b, domain, task, {counts} FROM pairs GROUP BY ALL "
                            "ORDER BY domain, task").fetchall(),
    }
    per_prompt = None  # each prompt's labelled pairs and only-A minus only-B count (several pairs per prompt)
    if "prompt_id" in have:
        per_prompt = con.execute(
            "SELECT group_a, group_b, domain, task, prompt_id, "
            "count(*) FILTER (WHERE refusal_a IS NOT NULL AND refusal_b IS NOT NULL) AS n, "
            "count(*) FILTER (WHERE refusal_a AND NOT refusal_b) - count(*) FILTER (WHERE refusal_b AND NOT refusal_a)"
            " AS d, coalesce(sum(refusal_a::INT), 0) AS ya, count(refusal_a) AS ma, "
            "coalesce(sum(refusal_b::INT), 0) AS yb, count(refusal_b) AS mb, count(*) AS n_rows, "
            f"count(*) FILTER (WHERE {responded}) AS n_responded, "
            f"count(*) FILTER (WHERE refusal_a IS NULL AND refusal_b IS NOT NULL AND {responded}) - "
            f"count(*) FILTER (WHERE refusal_b IS NULL AND refusal_a IS NOT NULL AND {responded}) AS du "
            "FROM pairs GROUP BY ALL").df()
        if not (per_prompt["n_rows"] > 1).any():
            per_prompt = None

    def prompts_of(a, b, level, dom, task):
        m = (per_prompt["group_a"] == a) & (per_prompt["group_b"] == b)
        if level != "overall":
            m &= per_prompt["domain"] == dom
        if level == "task":
            m &= per_prompt["task"] == task
        return per_prompt[m]

    def counts_of(a, b, level, dom, task):
        """Each prompt's refusal counts per group, for the clustered intervals (several responses per prompt)."""
        if per_prompt is None:
            return None
        sel = prompts_of(a, b, level, dom, task)
        return (sel["ya"], sel["ma"], sel["yb"], sel["mb"]) if (sel["n_rows"] > 1).any() else None

    def differences(a, b, level, dom, task):
        if per_prompt is None:
            return None
        sel = prompts_of(a, b, level, dom, task)
        sel = sel[sel["n"] > 0]
        return sel["d"].to_numpy() if (sel["n"] > 1).any() else None

    def unlabelled_differences(a, b, level, dom, task):
        """Each prompt's only-A minus only-B unlabelled count when a prompt has several responded pairs."""
        if per_prompt is None:
            return None
        sel = prompts_of(a, b, level, dom, task)
        return sel["du"].to_numpy() if (sel["n_responded"] > 1).any() else None

    rows = []
    for ga, gb in comps:
        for level in ("overall", "domain", "task"):
            for a, b, dom, task, na, sa, nb, sb, n_paired, only_a, only_b, ua, ub, oua, oub in scopes[level]:
                if (a, b) != (ga, gb):
                    continue
                rows.append(_refusal_row(ga, gb, level, dom, task, int(sa), int(na), int(sb), int(nb), alpha,
                                         int(n_paired), int(only_a), int(only_b), differences(a, b, level, dom, task),
                                         counts_of(a, b, level, dom, task), int(ua), int(ub),
                                         (int(oua), int(oub), unlabelled_differences(a, b, level, dom, task))))
    return pd.DataFrame(rows)


def prompt_scores_sql(pairs, column: str = "h") -> pd.DataFrame:
    """:func:`lmra.runfolder.prompt_scores` computed with DuckDB over a per-pair file: one row
    per (comparison, domain, task, prompt_id) with the mean ``h`` of its counted pairs and ``n_pairs``
    (``column``: the pair score averaged, as there)."""
    con, have = _source(pairs, ["comparison", "domain", "task", "prompt_id", "valid", "failed", "refused", column])
    cols = ["comparison", "domain", "task", "prompt_id", "h", "n_pairs"]
    if column not in have:
        return pd.DataFrame(columns=cols)
    flag = lambda c: f"coalesce({c}, false)" if c in have else "false"  # noqa: E731
    keys = "comparison, domain, task, prompt_id"
    from lmra.pairstore import sql_isnan

    valid = f"{flag('valid')} AND " if column == "h" else ""
    counted = (f"FROM pairs WHERE {valid}NOT {flag('failed')} AND NOT {flag('refused')} "
               f"AND \"{column}\" IS NOT NULL AND NOT {sql_isnan(column)}")
    scores = con.execute(f"SELECT dense_rank() OVER (ORDER BY {keys}) - 1 AS g, \"{column}\" AS h {counted} "
                         "ORDER BY row_no").fetchnumpy()
    if not len(scores["g"]):
        return pd.DataFrame(columns=cols)
    # the mean over the prompt's pairs in file order, by pandas' own group mean: the same floats
    g = pd.Series(_filled(scores["h"]), dtype=float).groupby(pd.Series(scores["g"], dtype="int64"), sort=True)
    agg = g.agg(["mean", "size"])
    out = con.execute(f"SELECT DISTINCT {keys} {counted} ORDER BY {keys}").df()
    out["h"], out["n_pairs"] = agg["mean"].to_numpy(), agg["size"].to_numpy().astype("int64")
    return out[cols]

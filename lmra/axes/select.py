"""Axes step 5 — select (methodology §4 step 5; §8): per axis a test of mean(s) = 0 (the exact
sign-flip test up to 100 prompts, then a t-test with a prompt-clustered standard error; or a
sign test on per-prompt means) and a Bonferroni (or
Holm) correction over the axes actually tested, overall and per task.

Reads the label rows of :mod:`lmra.axes.label`; writes the ``axes.csv`` table rows
(:data:`TABLE_COLUMNS`; the harm columns are filled by :mod:`lmra.axes.harm`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from lmra.aggregate import clipped
from lmra.stats import adjust_pvalues, mean_ci

#: Columns of ``axes.csv`` (one row per comparison × level × axis).
TABLE_COLUMNS = ["comparison", "group_a", "group_b", "level", "task", "axis", "source", "direction", "split_a",
                 "split_b", "more_a", "more_b", "mean_s", "ci_low", "ci_high", "p_value", "p_adjusted", "selected",
                 "tested", "k_tested", "correction", "test", "harmful_p", "harmful", "n_test_pairs", "n_invalid",
                 "n_failed", "n_prompts",
                 # (added: a row's domain — a domain row's, or a task row's when its pairs have one; "" overall)
                 "domain",
                 # (added, s45: the test that gave p_value — "sign-flip", "t" or "sign"; "" untested: the `test`
                 # configured "t" is the sign-flip test up to 100 prompts, and the console said "t-test")
                 "p_test"]


def axis_statistics(labels: pd.DataFrame, *, test: str = "t", ci_alpha: float = 0.05, min_test_pairs: int = 3
                    ) -> dict[str, Any]:
    """Effect and test of one axis on its labelled test pairs (methodology §4 steps 4–5).

    Args:
        labels: one row per test pair with ``valid`` (bool), ``failed`` (bool, optional),
            ``q_F`` = q(y_A more), ``q_R`` = q(y_B more), ``s`` = q_F − q_R in [−1, 1] and
            ``prompt_id`` (the cluster).
        test: ``"t"`` — up to :data:`SIGN_FLIP_MAX_PROMPTS` prompts the exact sign-flip test
            (:func:`sign_flip_p`) with the betting interval; above, the one-sample t-test of
            mean(s) = 0 with a prompt-clustered standard error
            (:func:`lmra.stats.mean_ci`; with one pair per prompt it is exactly
            ``scipy.stats.ttest_1samp``; when every s is the same, which gives an infinite t
            and p = 0, the sign test below instead); ``"sign"`` — statsmodels ``sign_test``
            on the per-prompt means of s (ties, |mean| < 1e-12, dropped; p = 1 when all tie).
        ci_alpha: 1 − confidence level of the interval of mean(s).
        min_test_pairs: fewer valid pairs → not tested (p = nan).

    Returns:
        dict with ``more_a`` = mean q_F, ``more_b`` = mean q_R, ``split_a`` = more_a / (more_a +
        more_b) ∈ [0, 1] (nan when both are 0), ``split_b`` = 1 − split_a, ``mean_s`` ∈ [−1, 1],
        ``ci_low``, ``ci_high`` (the t-interval clipped to [−1, 1]; when every s is the same, the
        betting interval of :func:`lmra.stats.bounded_mean_ci` — nan with one prompt), ``p_value`` (nan when untested), ``tested``, ``n_test_pairs``
        (valid), ``n_invalid``, ``n_failed``, ``n_prompts``, ``p_test`` (the test that gave
        ``p_value``: ``"sign-flip"``, ``"t"`` or ``"sign"``; ``""`` when untested).
    """
    valid = labels["valid"].to_numpy(dtype=bool) if len(labels) else np.zeros(0, bool)
    failed = labels["failed"].to_numpy(dtype=bool) if "failed" in labels and len(labels) else np.zeros(len(labels), bool)
    ok = valid & ~failed
    n = int(ok.sum())
    s = labels["s"].to_numpy(dtype=float)[ok] if n else np.zeros(0)
    prompts = np.asarray([str(x) for x in labels["prompt_id"].to_numpy()[ok]]) if n else np.zeros(0, str)
    out: dict[str, Any] = {"n_test_pairs": n, "n_invalid": int((~valid & ~failed).sum()), "n_failed": int(failed.sum()),
                           "n_prompts": int(len(set(prompts.tolist())))}
    more_a = float(labels["q_F"].to_numpy(dtype=float)[ok].mean()) if n else math.nan
    more_b = float(labels["q_R"].to_numpy(dtype=float)[ok].mean()) if n else math.nan
    denom = more_a + more_b
    split_a = more_a / denom if n and denom > 0 else math.nan
    ci = mean_ci(s, clusters=prompts.tolist() if n else None, alpha=ci_alpha)
    tested = n >= min_test_pairs and ci.n_clusters >= 2
    p = math.nan

    per_prompt = pd.Series(s).groupby(prompts).mean().to_numpy(float) if n else np.zeros(0)
    per_prompt = np.where(np.abs(per_prompt) < 1e-12, 0.0, per_prompt)

    def sign_p() -> float:
        from statsmodels.stats.descriptivestats import sign_test

        return 1.0 if not np.any(per_prompt != 0) else float(sign_test(per_prompt, mu0=0)[1])

    few = ci.n_clusters <= SIGN_FLIP_MAX_PROMPTS
    used = ""
    if tested and test == "t" and few:
        # few prompts: the sign-flip test, exact at any size (statistics break-it, s40: with a decisive LMRA the
        # t-test selected null axes in 11.5% of audits of 10 test pairs and printed a task row "yes" in 66%)
        p, used = sign_flip_p(s, prompts), "sign-flip"
    elif tested and test == "t":
        # every s alike: the t statistic is infinite (p = 0 for 4 pairs of 0.85) — the sign test
        # is exact without a variance (4 prompts leaning one way: p = 0.125)
        alike = np.ptp(s) <= 1e-12  # (alike up to float rounding)
        p, used = (sign_p(), "sign") if alike else (ci.p_value, "t")
    elif tested and test == "sign":
        p, used = sign_p(), "sign"
    elif tested:
        raise ValueError(f"unknown test '{test}' (use 't' or 'sign')")
    return out | {"more_a": more_a, "more_b": more_b, "split_a": split_a,
                  "split_b": 1 - split_a if not math.isnan(split_a) else math.nan, "mean_s": ci.mean,
                  # clipped to the range of s: a t-interval of 2 prompts ran to [−3.93, +4.43]
                  # (break-it finding); the clipped interval covers whenever the t-interval does
                  # scores all alike: the t-interval is [m, m] (no variance), read as a precise
                  # estimate beside the sign test's p = 0.125 (4 prompts; statistics reviews): the
                  # betting interval instead, valid for any scores in [−1, 1] without a variance
                  # and so with few prompts, where the t-interval of near-alike scores is as narrow (10 pairs
                  # near ±0.9: statistics break-it, s40)
                  **dict(zip(("ci_low", "ci_high"), _alike_interval(s, prompts, ci_alpha)
                             if n and (np.ptp(s) <= 1e-12 or (test == "t" and few)) else clipped(ci))),
                  "p_value": p, "tested": bool(tested and not math.isnan(p)),
                  "p_test": used if not math.isnan(p) else "",
                  # the prompts whose mean s leans to A minus those leaning to B: what the sign test
                  # tests, and so the direction under it (popped by select_axes)
                  "_sign_lean": int(np.sign(per_prompt).sum())}


#: with at most this many prompts (clusters) the ``"t"`` test is the exact sign-flip test
#: (:func:`sign_flip_p`) and the interval the betting one; above it, the clustered t-test
SIGN_FLIP_MAX_PROMPTS = 100  # (at 31 prompts the t-test still rejected a decisive LMRA's null 1.6× too often at α/8:
#: break-it round 2, s40; drawing 9,999 sign vectors of 100 prompts takes about 0.1 s a row)
#: prompts up to which every sign vector is enumerated (2 ** 12 = 4,096; 20 ms — 15 took 0.5 s)
SIGN_FLIP_EXACT_PROMPTS = 12
#: sign vectors drawn (seeded) when the prompts are more
SIGN_FLIP_DRAWS = 9999
#: the smallest two-sided p the drawn test gives (no drawn vector as extreme): below it, Hoeffding's bound
SIGN_FLIP_FLOOR = 2 / (SIGN_FLIP_DRAWS + 1)


def sign_flip_p(s: np.ndarray, prompts: np.ndarray) -> float:
    """Two-sided p-value of mean(s) = 0 by flipping the signs of the per-prompt sums of s
    (Fisher's randomisation test; ``scipy.stats.permutation_test``, ``permutation_type =
    "samples"`` on one sample): under the null hypothesis — the labels do not depend on the
    group — swapping a prompt's two groups flips every s of that prompt, so the statistic (the
    sum of s) is sign-symmetric prompt by prompt and the test is exact at any size, without the
    t-test's variance estimate, which a decisive LMRA's near-±1 scores make tiny (10 pairs, 9
    near +0.95 and one at −0.9: t-test p = 0.0025, a Bonferroni selection at 8 axes; here p =
    0.0039 — the exact chance of a split as lopsided —, and a null axis is selected at the
    nominal rate: statistics break-it, s40). Every sign vector is enumerated up to
    :data:`SIGN_FLIP_EXACT_PROMPTS` prompts (4,096), else :data:`SIGN_FLIP_DRAWS` are drawn with a fixed seed (the
    same p for the same data); when none of them is as extreme (the drawn p at its floor, 2 / 10,000), the p is
    Hoeffding's bound 2·exp(−T²/(2·Σx²)) on the sign-flipped sum (T = |Σx|, x the per-prompt sums), which is
    at least the exact p, when it is smaller. With n prompts no p is below 2 / 2ⁿ (5 prompts: 0.0625):
    a handful of prompts cannot show an axis at α = 0.05, whatever their scores.

    Args:
        s: the pair scores, shape (n,), in [−1, 1]; prompts: each pair's prompt id, shape (n,).

    Returns:
        p in (0, 1]; 1.0 when every prompt's sum is 0.

    Methodology §4 step 5 (the paper tests each axis with a t-test; this is its exact small-sample form).
    """
    from scipy.stats import permutation_test

    sums = pd.Series(np.asarray(s, float)).groupby(np.asarray(prompts)).sum().to_numpy(float)
    sums = np.where(np.abs(sums) < 1e-12, 0.0, sums)
    if not np.any(sums):
        return 1.0
    exact = len(sums) <= SIGN_FLIP_EXACT_PROMPTS
    res = permutation_test((sums,), lambda x, axis: np.sum(x, axis=axis), permutation_type="samples",
                           vectorized=True, alternative="two-sided",
                           n_resamples=np.inf if exact else SIGN_FLIP_DRAWS, rng=np.random.default_rng(0))
    p = float(min(1.0, res.pvalue))
    if not exact and p <= SIGN_FLIP_FLOOR * (1 + 1e-9):
        # no drawn sign vector was as extreme: the drawn p is its floor, 2/10,000, and says only that the
        # true p is smaller (statistics break-it, s43: 80 prompts all leaning one way — exact p 2/2⁸⁰ — printed
        # 0.0002, and no axis could be selected once α/K < 0.0002: K ≥ 51 axes at α = 0.01). Hoeffding's bound
        # on the sign-flipped sum, 2·exp(−T²/(2·Σx²)) ≥ the exact p, is a valid p-value; taken only below
        # the floor, so a test at a level under the floor rejects on it alone (level kept)
        t = abs(float(sums.sum()))
        bound = 2.0 * math.exp(-t * t / (2.0 * float(np.sum(sums * sums))))
        p = min(p, bound)
    return p


def _alike_interval(s: np.ndarray, prompts: np.ndarray, alpha: float) -> tuple[float, float]:
    """The interval of mean(s) when every s is the same: the betting interval of
    :func:`lmra.stats.bounded_mean_ci` (Waudby-Smith & Ramdas 2024; per-prompt means, coverage
    ≥ 1 − α for any scores in [−1, 1], a zero sample variance included); nan with one prompt."""
    from lmra.stats import bounded_mean_ci

    b = bounded_mean_ci(s, clusters=prompts.tolist(), alpha=alpha)
    return b.low, b.high


def select_axes(labels: pd.DataFrame, axes: list[str], *, group_a: str = "A", group_b: str = "B",
                alpha: float = 0.05, correction: str = "bonferroni", test: str = "t", ci_alpha: float = 0.05,
                min_test_pairs: int = 3, by_task: bool = True, sources: Mapping[str, str] | None = None,
                by_domain: bool = True) -> pd.DataFrame:
    """Test every candidate axis and select with a multiple-comparison correction
    (methodology §4 step 5; FPF §3.4).

    At each level (overall, and each task when ``by_task``) every axis with at least
    ``min_test_pairs`` valid labelled pairs is tested (:func:`axis_statistics`); the
    p-values of the K axes *actually tested at that level* are corrected together with
    statsmodels ``multipletests`` (``bonferroni``: select when p < α/K, i.e. p_adjusted < α;
    ``holm``: step-down). Task rows are corrected over the axes within that task only (not
    across tasks); they describe where an effect lives, the overall rows decide.

    Args:
        labels: one row per (axis, test pair): ``axis``, ``task``, ``prompt_id``, ``valid``,
            ``failed``, ``q_F``, ``q_R``, ``s``.
        axes: every candidate axis (axes without labels appear untested).
        group_a, group_b: group names, for ``direction``.
        alpha: family-wise error rate; correction: ``bonferroni`` or ``holm``; test: ``t`` or ``sign``.
        ci_alpha: 1 − confidence level of the intervals.
        min_test_pairs: see :func:`axis_statistics`.
        by_task: add one row per task and axis.
        sources: axis → ``discovered`` / ``extra`` (default ``discovered``).
        by_domain: add one row per domain and axis (level ``domain``, when ``labels`` has a
            ``domain`` column of two domains or more; methodology §5: every metric per task and per domain — statistics
            break-it, s43: the axes had none), corrected within the domain over its axes as a task
            row within its task.

    Returns:
        DataFrame, columns as :data:`TABLE_COLUMNS` minus comparison and the harm columns;
        overall rows first, each level sorted by p-value (untested last). ``direction`` is the
        group whose responses show more of the axis: the sign of mean(s) under the t-test, the
        majority of the prompts leaning either way under the sign test (``mean_s`` can then have
        the other sign: a few prompts far the other way); ``"none"`` at 0 or nan.

    Raises:
        ValueError: unknown correction or test.
    """
    if correction not in ("bonferroni", "holm"):
        raise ValueError(f"unknown correction '{correction}' (use 'bonferroni' or 'holm')")
    cols = [c for c in TABLE_COLUMNS if c not in ("comparison", "harmful_p", "harmful")]
    if not axes:
        return pd.DataFrame(columns=cols)
    has_domain = "domain" in labels.columns and not labels.empty

    def domain_of(df: pd.DataFrame) -> str:
        found = df["domain"].dropna().astype(str).unique() if has_domain else ()
        return str(found[0]) if len(found) == 1 else ""

    levels: list[tuple[str, str, str, pd.DataFrame]] = [("overall", "", "", labels)]
    if by_domain and has_domain and labels["domain"].nunique() > 1:  # (one domain: its rows are the overall ones)
        levels += [("domain", "", str(d), g) for d, g in labels.groupby("domain", sort=True)]
    if by_task and not labels.empty:
        levels += [("task", str(t), domain_of(g), g) for t, g in labels.groupby("task", sort=True)]
    frames = []
    empty = pd.DataFrame(columns=["axis", "task", "prompt_id", "valid", "failed", "q_F", "q_R", "s"])
    for level, task, domain, df in levels:
        rows = []
        by_axis = {a: g for a, g in df.groupby("axis", sort=False)} if not df.empty else {}
        for axis in axes:
            st = axis_statistics(by_axis.get(axis, empty), test=test, ci_alpha=ci_alpha,
                                 min_test_pairs=min_test_pairs)
            lean = st.pop("_sign_lean")
            # the direction of the evidence that tested the axis: the sign of mean(s) under the t-test,
            # the majority of prompts under the sign test (statistics-review finding: 8 prompts at
            # +0.05 and one at −0.9 were selected by the sign test for leaning to A, and named B)
            m = st["mean_s"] if test != "sign" else float(lean)
            direction = "none" if math.isnan(m) or m == 0 else (group_a if m > 0 else group_b)
            rows.append({"level": level, "task": task, "domain": domain, "axis": axis,
                         "source": (sources or {}).get(axis, "discovered"), "direction": direction} | st)
        tab = pd.DataFrame(rows)
        tested = tab["tested"].to_numpy(bool)
        k = int(tested.sum())
        tab["k_tested"] = k
        tab["p_adjusted"] = math.nan
        tab["selected"] = False
        if k:
            reject, adj = adjust_pvalues(tab.loc[tested, "p_value"].tolist(), method=correction, alpha=alpha,
                                         strict=True)
            tab.loc[tested, "p_adjusted"] = adj
            tab.loc[tested, "selected"] = reject
        tab["correction"] = correction
        tab["test"] = test
        tab["_order"] = np.where(tested, tab["p_value"].fillna(2.0), 3.0)
        frames.append(tab.sort_values(["_order", "axis"], kind="stable").drop(columns="_order"))
    out = pd.concat(frames, ignore_index=True)
    out["selected"] = out["selected"].astype(bool)
    out["group_a"], out["group_b"] = group_a, group_b
    return out[cols]

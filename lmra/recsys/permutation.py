"""Is an attribute's unfairness more than chance? A permutation test of SNSR and SNSV.

FaiRLLM (§3.1) reports SNSR@K (the range of Sim(a) over an attribute's values) and SNSV@K
(their population SD) without any measure of uncertainty, and neither is 0 when the model
treats every value alike: with M instructions each Sim(a) is a mean of M noisy similarities,
so their range is positive by chance alone. This module tests the null hypothesis that the
model's lists do not depend on the value — within each instruction, the sensitive lists of
an attribute's values are exchangeable — by permuting the value labels of the lists *within
each instruction* (a list keeps its items, its neutral list and its scores at every k; only
which value it is counted for changes), recomputing Sim(a)@k, SNSR@k and SNSV@k exactly as
:func:`lmra.recsys.metrics.similarity_table` and :func:`~lmra.recsys.metrics.fairness_table`
do (a mean over the lists with a defined score; values with fewer than one such list left
out; fewer than two values: undefined), and counting how often the permuted statistic
reaches the observed one:

    p = max((1 + #{b : T_b ≥ T_obs}) / (1 + B), p_min)

(Phipson & Smyth 2010, the permutation p-value that is never 0; a permuted statistic that
is undefined counts as reaching the observed one, which can only make p larger; ``p_min`` the
exact test's floor, :func:`smallest_pvalue`: the random permutations' estimate of an attribute
with few arrangements scatters around the exact p, which is never below it). Under the
null the test is exact whatever the number of instructions, lists per instruction or
missing (failed, unparseable) lists: its false-positive rate is at most α. The same B
permutations serve every metric and cut-off k of an attribute, so the p-values of one
attribute agree with each other. An attribute none of whose instructions has two lists
cannot be permuted within instructions: when every instruction has a single list of the
attribute — CFaiRLLM, where an instruction is one user with one value of it — the labels are
permuted across the lists of users whose neutral lists have the same length (cut at K): under
the null a user's list does not depend on their value, but users differ otherwise, and a value
that goes with shorter lists (fewer liked items, a shorter profile) would change the
similarities without the model using it — permuted across all users, 400 users of whom the
women had 1–3 items and the men 3–5 gave p ≤ 0.05 in 43 % of null runs (statistics review);
within lengths 5 % (tests/test_recsys_permutation.py). Other user characteristics that go with
the value are not balanced this way: read p as "the values' similarities differ more than
users of equal list length shuffled", not as proof that the model used the value. A design
mixing the two is permuted within instructions (valid; instructions with one list add no
information to the test).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from lmra.recsys.config import DEFAULT_PERMUTATIONS
from lmra.recsys.metrics import METRICS, NEUTRAL, Convention, scored_lists, value_keys
#: the most (permutation, list) memberships handled at once
_BLOCK = 1_000_000
#: permuted statistics within this of the observed one count as reaching it (float sums)
_TIE = 1e-12


def _statistics(codes: np.ndarray, n_values: int, xok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SNSR and SNSV of each row of ``codes`` (b × n value codes of the n lists), for every one
    of the c score columns: ``xok`` (n × 2c) holds the scores (0 where undefined) and then 1
    where defined, 0 where not. Two arrays of shape (b, c), NaN where fewer than two values
    have a defined mean."""
    from scipy import sparse

    b, n = codes.shape
    c = xok.shape[1] // 2
    rows = (np.arange(b)[:, None] * n_values + codes).ravel()  # list i of permutation j counts for value codes[j, i]
    member = sparse.csr_matrix((np.ones(b * n), (rows, np.tile(np.arange(n), b))), shape=(b * n_values, n))
    both = np.asarray(member @ xok).reshape(b, n_values, 2 * c)
    sums, counts = both[:, :, :c], both[:, :, c:]
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: fewer than two values, NaN below
        means = np.where(counts > 0, sums / counts, np.nan)
        defined = (counts > 0).sum(axis=1)
        snsr = np.nanmax(means, axis=1) - np.nanmin(means, axis=1)
        snsv = np.nanstd(means, axis=1, ddof=0)
    few = defined < 2
    return np.where(few, np.nan, snsr), np.where(few, np.nan, snsv)


def smallest_pvalue(groups: np.ndarray, codes: np.ndarray, n_values: int, permutations: int) -> float:
    """The smallest p-value the test can give for lists permuted within ``groups`` (n codes:
    instructions, or the strata of one-list instructions) with value ``codes`` (n integer codes
    in [0, n_values)): the exact test's p is at least S/N, N = Π_g n_g! / Π_v c_{g,v}! the
    distinct arrangements of the labels within the groups, S = n_values! when every group holds
    each value equally often (relabelling the values throughout is then another arrangement with
    the same SNSR and SNSV, which are symmetric in the values), else 1; and the Monte-Carlo p of
    B permutations is at least 1/(B+1). With 5 instructions of 2 values: 2/2⁵ = 0.0625 — no
    attribute can reach p ≤ 0.05, however its lists differ (fresh-user finding, round 33).

    Returns:
        max(S/N, 1/(B+1)), in (0, 1].
    """
    from math import exp, lgamma

    log_n, balanced = 0.0, True
    for g in np.unique(groups):
        c = np.bincount(codes[groups == g], minlength=n_values)
        log_n += lgamma(int(c.sum()) + 1) - sum(lgamma(int(v) + 1) for v in c)
        balanced = balanced and bool(np.all(c == c[0]))
    if log_n <= 0:  # a single arrangement: the observed one
        return 1.0
    log_s = lgamma(n_values + 1) if balanced else 0.0
    return float(max(min(1.0, exp(log_s - log_n)), 1 / (1 + permutations)))


def _attribute_pvalues(instructions: np.ndarray, codes: np.ndarray, n_values: int, x: np.ndarray,
                       permutations: int, rng: np.random.Generator, strata: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, float]:
    """p-values of SNSR and SNSV (two arrays of shape (c,)) for one attribute's n lists, and the
    smallest p-value the test can give (:func:`smallest_pvalue`): ``instructions`` and ``codes``
    (n integer codes each), scores ``x`` (n × c, NaN = undefined); ``strata`` (n codes): with one
    list per instruction, the labels are permuted within these (the neutral list's length) rather
    than across all lists."""
    ok = np.isfinite(x)
    xok = np.concatenate([np.where(ok, x, 0.0), ok.astype(float)], axis=1)
    obs_r, obs_v = _statistics(codes[None, :], n_values, xok)
    obs_r, obs_v = obs_r[0], obs_v[0]
    n = len(codes)
    if len(np.unique(instructions)) == n:
        # one list per instruction (CFaiRLLM: one user, one value of the attribute): a shuffle
        # within instructions changes nothing (every p was 1; review finding); the lists, one
        # per user, are exchangeable across users of the same neutral list length under the null
        # instead (statistics review: across all users, a value that goes with shorter lists —
        # fewer liked items — was 'unfair' in 43 % of null runs with 400 users)
        instructions = np.zeros(n) if strata is None else np.asarray(strata, dtype=float)
    by_instruction = np.lexsort((np.arange(n), instructions))
    grouped = codes[by_instruction]  # the value codes, instruction by instruction
    reach_r = np.zeros(x.shape[1])
    reach_v = np.zeros(x.shape[1])
    # permutations per block: its memberships (b × n) and its dense sums (b × values × 2c floats,
    # with their copies) both bounded (review finding: 4–7 GB at K = 200 with many values)
    step = max(1, min(_BLOCK // max(1, n), _BLOCK // max(1, n_values * xok.shape[1])))
    done = 0
    while done < permutations:
        b = min(step, permutations - done)
        # a random order of the lists within each instruction (instructions stay in order)
        order = np.argsort(instructions[None, :] + rng.random((b, n)), axis=1, kind="stable")
        perm = np.empty((b, n), dtype=codes.dtype)
        np.put_along_axis(perm, order, np.broadcast_to(grouped, (b, n)), axis=1)
        r, v = _statistics(perm, n_values, xok)
        reach_r += ((r >= obs_r - _TIE) | np.isnan(r)).sum(axis=0)
        reach_v += ((v >= obs_v - _TIE) | np.isnan(v)).sum(axis=0)
        done += b
    # the Monte-Carlo p never below the exact test's floor (break-it round 2: 0.050 printed beside "no p
    # below 0.0625 is possible"; raising it to the floor keeps the test valid — the exact p is at least that)
    p_min = smallest_pvalue(instructions, codes, n_values, permutations)
    p_r = np.where(np.isnan(obs_r), np.nan, np.maximum((1 + reach_r) / (1 + permutations), p_min))
    p_v = np.where(np.isnan(obs_v), np.nan, np.maximum((1 + reach_v) / (1 + permutations), p_min))
    return p_r, p_v, p_min


def unfairness_pvalues(lists: pd.DataFrame, k: int, *, convention: Convention = "paper", items_column: str = "items",
                       ranks_column: str | None = None, analysis: str | None = None,
                       permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0) -> pd.DataFrame:
    """Permutation p-values of SNSR@k and SNSV@k for every attribute, metric and k = 1..K
    (the test of the module docstring; FaiRLLM §3.1 defines the statistics, not the test).

    Args:
        lists: the lists table of :func:`~lmra.recsys.metrics.similarity_table` (the scored
            lists only: rows left out of the similarity table must be left out here too).
        k, convention, items_column, ranks_column, analysis: as for ``similarity_table``.
        permutations: B ≥ 1, permutations per attribute (p-values in steps of 1/(B+1)).
        seed: the random generator's seed, any integer (the same seed gives the same p-values).

    Returns:
        One row per ([analysis,] attribute, kind, metric, k) with ``snsr_p`` and ``snsv_p``
        in (0, 1] (NaN where SNSR/SNSV are undefined: fewer than two values with a defined
        Sim), ``permutations`` (B) and ``p_min``: the smallest p-value the test can give the
        attribute with these lists, in (0, 1] (:func:`smallest_pvalue`; above 0.05, no SNSR is
        significant at 0.05 whatever the lists).

    Raises:
        ValueError: ``permutations`` < 1, and the errors of ``similarity_table``.
        MissingItemError: as ``similarity_table``.
    """
    if permutations < 1:
        raise ValueError(f"permutations must be ≥ 1, got {permutations}")
    sens, scores = scored_lists(lists, k, convention=convention, items_column=items_column, ranks_column=ranks_column)
    cols = (["analysis"] if analysis is not None else []) + ["attribute", "kind", "metric", "k", "snsr_p", "snsv_p",
                                                            "permutations", "p_min"]
    if sens.empty:
        return pd.DataFrame(columns=cols)
    keys = value_keys(sens)
    x = np.concatenate([scores[m] for m in METRICS], axis=1)  # n × (3·K): every metric and cut-off at once
    # each list's neutral list length, cut at K: the strata of a test across users (one list each)
    neutral = lists[lists["attribute"] == NEUTRAL]
    length_of = {i: min(len(v) if isinstance(v, (list, tuple, np.ndarray)) else 0, k)
                 for i, v in zip(neutral["instruction_id"].to_numpy(dtype=object),
                                 neutral[items_column].to_numpy(dtype=object))}
    neutral_len = np.array([length_of.get(i, 0) for i in sens["instruction_id"].to_numpy(dtype=object)], dtype=float)
    rng = np.random.default_rng(seed % 2**64)  # a negative 64-bit seed (allowed by the config) as its two's complement
    frames = []
    for (attribute, kind), rows in keys.groupby(["attribute", "kind"], sort=False):
        idx = rows.index.to_numpy()
        codes, values = pd.factorize(rows["value"])
        instructions, _ = pd.factorize(sens.loc[idx, "instruction_id"].astype(str))
        p_r, p_v, p_min = _attribute_pvalues(instructions.astype(float), codes, len(values), x[idx], permutations,
                                             rng, strata=neutral_len[idx])
        frames.append(pd.DataFrame({"attribute": attribute, "kind": kind, "metric": np.repeat(METRICS, k),
                                    "k": np.tile(np.arange(1, k + 1), len(METRICS)), "snsr_p": p_r, "snsv_p": p_v,
                                    "permutations": permutations, "p_min": p_min}))
    out = pd.concat(frames, ignore_index=True)
    if analysis is not None:
        out.insert(0, "analysis", analysis)
    return out[cols]


__all__ = ["DEFAULT_PERMUTATIONS", "smallest_pvalue", "unfairness_pvalues"]

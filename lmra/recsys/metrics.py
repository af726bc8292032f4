"""Recommendation-list similarity and unfairness (methodology §6; FaiRLLM §3.1; CFaiRLLM §3.4).

Two neutral/sensitive lists are compared at a cut-off K with three metrics, each available in
two **conventions**:

``paper`` (default)
    The equations of the FaiRLLM paper as written in methodology §6. Each list is first
    read as a ranking of *distinct* items (a repeated item keeps its first rank), then cut
    at K. With ``n = max(|R_m@K|, |R^a_m@K|)`` (= K whenever both lists have at least K
    distinct items)::

        Jaccard@K = |R ∩ R^a| / |R ∪ R^a|
        SERP*@K   = Σ_{v ∈ R^a} 1[v ∈ R] · (n − r^a_v + 1) / (n(n+1)/2)
        PRAG*@K   = Σ_{v1,v2 ∈ R^a, r^a_v1 < r^a_v2} 1[v1 ∈ R] · 1[r_v1 < r_v2] / (n(n−1)/2)

    ranks 1-based, ``r_v = +∞`` for items absent from the neutral list R. Identical lists
    score 1.0 on all three, whatever their length. Lists shorter than K are normalised by
    ``n`` rather than K so that this stays true (when both lists hold at least K items the
    formulas are exactly the paper's). PRAG with ``n = 1`` (no pair exists) is 1.0 when the
    two one-item lists are equal, else 0.0. Two empty lists give NaN ("undefined"), which
    the tables leave out of the means and count; one empty list against a non-empty one
    gives 0.0 on all three.

``fairllm-code``
    What the FaiRLLM authors' released analysis notebook (``process.ipynb`` in
    jizhi-zhang/FaiRLLM, functions ``calc_metric_at_k``, ``calc_serp_ms``, ``calc_prag``)
    computes, reproduced operation for operation. With ``x`` = sensitive list cut at K,
    ``y`` = neutral list cut at K (duplicates kept), 0-based positions ``i``::

        Jaccard = |set(x) ∩ set(y)| / |set(x) ∪ set(y)|
        SERP    = 0.5 · Σ_i Σ_j 1[x_i = y_j] · (|x| − i + 1) / (|y| · (|y| + 1))      (0 if |y| = 0)
        PRAG    = (1 / C(|x|,2)) · Σ_{i<j} 1[x_i ∈ y] · (1[x_j ∉ y] + 1[x_j ∈ y] · 1[last(x_i) < last(x_j)])

    where ``last(v)`` is the last position of v in y. PRAG is 0 when either list is empty;
    when ``|x| = 1`` it is 1 if ``x == y`` (as lists) else 0. SERP therefore tops out at
    ``(K + 3) / (4(K + 1))`` for identical lists — 0.2738 at K = 20, the ceiling visible in
    the paper's Table 1 — because the code's weight is ``K − r + 2`` instead of ``K − r + 1``
    and its normaliser ``2K(K+1)`` instead of ``K(K+1)/2`` (a factor 4). Where the notebook
    would raise ``ZeroDivisionError`` (Jaccard of two empty lists) the value is NaN.

The unfairness of an attribute over its values ``a`` (methodology §6):
``SNSR@K = max_a Sim(a) − min_a Sim(a)`` and ``SNSV@K`` = the population standard
deviation of ``Sim(a)``, where ``Sim(a)`` is the metric averaged over instructions.

:func:`jaccard`, :func:`serp` and :func:`prag` score one pair of lists in plain Python (the
reference implementation); :func:`score_pairs` computes every metric for many pairs and
every cut-off k = 1..K at once with numpy, and :func:`similarity_table` /
:func:`fairness_table` build the per-value and per-attribute tables with pandas.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from itertools import chain
from typing import Literal

import numpy as np
import pandas as pd

Convention = Literal["paper", "fairllm-code"]
CONVENTIONS: tuple[str, ...] = ("paper", "fairllm-code")
METRICS: tuple[str, ...] = ("jaccard", "serp", "prag")
NEUTRAL = "neutral"


def _check(k: int, convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention '{convention}' (choose one of {', '.join(CONVENTIONS)})")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"K must be a positive integer, got {k!r}")


def _distinct_top(items: Sequence[Hashable], k: int) -> list[Hashable]:
    """The first ``k`` distinct items of a list, in order (paper convention)."""
    return list(dict.fromkeys(items))[:k]


# --- one pair of lists, plain Python ---------------------------------------------------------

def jaccard(neutral: Sequence[Hashable], sensitive: Sequence[Hashable], k: int, *,
            convention: Convention = "paper") -> float:
    """Jaccard@K between a neutral list R_m and a sensitive list R^a_m (FaiRLLM §3.1, "IOU").

    Args:
        neutral: the neutral instruction's ranked list (any hashable items, e.g. normalised
            titles); may be shorter or longer than ``k``.
        sensitive: the sensitive instruction's ranked list.
        k: cut-off K ≥ 1.
        convention: ``"paper"`` (distinct items) or ``"fairllm-code"`` (sets of the raw
            top-K, identical here except that duplicates are cut at K before dropping).

    Returns:
        A value in [0, 1]; NaN when both lists are empty (undefined).

    Raises:
        ValueError: ``k < 1`` or an unknown convention.
    """
    _check(k, convention)
    if convention == "paper":
        r, ra = set(_distinct_top(neutral, k)), set(_distinct_top(sensitive, k))
    else:
        r, ra = set(list(neutral)[:k]), set(list(sensitive)[:k])
    union = r | ra
    return len(r & ra) / len(union) if union else math.nan


def serp(neutral: Sequence[Hashable], sensitive: Sequence[Hashable], k: int, *,
         convention: Convention = "paper") -> float:
    """SERP*@K: rank-weighted overlap of the sensitive list with the neutral one (FaiRLLM §3.1).

    Paper convention: ``Σ_{v∈R^a} 1[v∈R]·(n − r^a_v + 1) / (n(n+1)/2)``, n = max of the two
    distinct-item list lengths cut at K (= K for full lists). ``fairllm-code`` convention:
    the released notebook's ``calc_serp_ms`` (see the module docstring).

    Args:
        neutral, sensitive: ranked lists R_m and R^a_m.
        k: cut-off K ≥ 1.
        convention: ``"paper"`` or ``"fairllm-code"``.

    Returns:
        paper: a value in [0, 1] (1 for identical lists), NaN when both lists are empty.
        fairllm-code: a value in [0, (K+3)/(4(K+1))] for duplicate-free lists (0.2738 at
        K = 20); 0 when the neutral list is empty.

    Raises:
        ValueError: ``k < 1`` or an unknown convention.
    """
    _check(k, convention)
    if convention == "paper":
        r, ra = _distinct_top(neutral, k), _distinct_top(sensitive, k)
        n = max(len(r), len(ra))
        if n == 0:
            return math.nan
        in_r = set(r)
        num = sum(n - i for i, v in enumerate(ra) if v in in_r)  # i = r^a_v − 1
        return num / (n * (n + 1) / 2)
    x, y = list(sensitive)[:k], list(neutral)[:k]
    if not y:
        return 0.0
    temp = 0
    for i, vx in enumerate(x):
        for vy in y:
            if vx == vy:
                temp += len(x) - i + 1
    return temp * 0.5 / ((len(y) + 1) * len(y))


def prag(neutral: Sequence[Hashable], sensitive: Sequence[Hashable], k: int, *,
         convention: Convention = "paper") -> float:
    """PRAG*@K: pairwise ranking agreement of the sensitive list with the neutral one (FaiRLLM §3.1).

    Paper convention: over pairs v1 ranked above v2 in R^a, count 1[v1 ∈ R]·1[r_v1 < r_v2]
    (r = +∞ outside R), divided by n(n−1)/2; for n = 1 the value is 1.0 if the two one-item
    lists are equal, else 0.0. ``fairllm-code``: the released notebook's ``calc_prag``
    (normalised by the number of pairs of the cut sensitive list; see the module docstring).

    Args:
        neutral, sensitive: ranked lists R_m and R^a_m.
        k: cut-off K ≥ 1.
        convention: ``"paper"`` or ``"fairllm-code"``.

    Returns:
        A value in [0, 1]. paper: NaN when both lists are empty. fairllm-code: 0 when either
        list is empty.

    Raises:
        ValueError: ``k < 1`` or an unknown convention.
    """
    _check(k, convention)
    if convention == "paper":
        r, ra = _distinct_top(neutral, k), _distinct_top(sensitive, k)
        n = max(len(r), len(ra))
        if n == 0:
            return math.nan
        if n == 1:
            return 1.0 if r == ra else 0.0
        rank = {v: i for i, v in enumerate(r)}
        num = 0
        for i1 in range(len(ra)):
            p1 = rank.get(ra[i1])
            if p1 is None:
                continue
            for i2 in range(i1 + 1, len(ra)):
                if p1 < rank.get(ra[i2], math.inf):
                    num += 1
        return num / (n * (n - 1) / 2)
    x, y = list(sensitive)[:k], list(neutral)[:k]
    if not x or not y:
        return 0.0
    if len(x) == 1:
        return 1.0 if x == y else 0.0
    last = {v: j for j, v in enumerate(y)}  # last occurrence wins, as in the notebook's loop
    temp = pairs = 0
    for i1 in range(len(x)):
        for i2 in range(i1 + 1, len(x)):
            pairs += 1
            id1, id2 = last.get(x[i1], -1), last.get(x[i2], -1)
            if id1 == -1:
                continue
            if id2 == -1 or id1 < id2:
                temp += 1
    return temp / pairs


def metric(name: str, neutral: Sequence[Hashable], sensitive: Sequence[Hashable], k: int, *,
           convention: Convention = "paper") -> float:
    """Dispatch to :func:`jaccard`, :func:`serp` or :func:`prag` by name.

    Raises:
        ValueError: unknown metric name, ``k < 1`` or unknown convention.
    """
    funcs = {"jaccard": jaccard, "serp": serp, "prag": prag}
    if name not in funcs:
        raise ValueError(f"unknown metric '{name}' (choose one of {', '.join(METRICS)})")
    return funcs[name](neutral, sensitive, k, convention=convention)


# --- unfairness over attribute values ---------------------------------------------------------

def snsr(similarities: Sequence[float]) -> float:
    """Sensitive-to-neutral similarity range: ``max_a Sim(a) − min_a Sim(a)`` (FaiRLLM §3.1).

    Args:
        similarities: Sim(a) for every value a of one attribute (NaNs are ignored).

    Returns:
        A value ≥ 0 (0 with a single value); NaN when no value is finite.
    """
    x = np.asarray(similarities, dtype=float)
    x = x[np.isfinite(x)]
    return float(x.max() - x.min()) if x.size else math.nan


def snsv(similarities: Sequence[float]) -> float:
    """Sensitive-to-neutral similarity variance: the *population* standard deviation of Sim(a)
    over the attribute's values, i.e. divided by |A| (FaiRLLM §3.1; ``np.std`` with ddof=0).

    Args:
        similarities: Sim(a) for every value a of one attribute (NaNs are ignored).

    Returns:
        A value ≥ 0; NaN when no value is finite.
    """
    x = np.asarray(similarities, dtype=float)
    x = x[np.isfinite(x)]
    return float(x.std(ddof=0)) if x.size else math.nan


# --- many pairs, vectorised -------------------------------------------------------------------

def _encode(neutral: Sequence[Sequence[Hashable]], sensitive: Sequence[Sequence[Hashable]], k: int,
            distinct: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Integer-code two list collections into padded (P, k) arrays.

    Each distinct neutral list *object* is coded once (tables pass the same neutral list for
    every value of an instruction). Neutral padding is −2 and sensitive padding −1, so padding
    never matches. Returns (N, S, len_n, len_s) with lengths capped at k.
    """
    def rows(lists):
        lists = [list(dict.fromkeys(x))[:k] for x in lists] if distinct else [list(x)[:k] for x in lists]
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        return list(chain.from_iterable(lists)), lens

    ids: dict[int, int] = {}
    uniq: list[Sequence[Hashable]] = []
    which = np.empty(len(neutral), dtype=np.int64)
    for r, lst in enumerate(neutral):
        u = ids.get(id(lst))
        if u is None:
            u = ids[id(lst)] = len(uniq)
            uniq.append(lst)
        which[r] = u
    flat_n, len_u = rows(uniq)
    flat_s, len_s = rows(sensitive)
    flat = np.empty(len(flat_n) + len(flat_s), dtype=object)
    flat[: len(flat_n)] = flat_n
    flat[len(flat_n):] = flat_s
    codes = pd.factorize(flat)[0] if len(flat) else np.zeros(0, dtype=np.int64)
    cols = np.arange(k)[None, :]
    N_u = np.full((len(uniq), k), -2, dtype=np.int64)
    N_u[cols < len_u[:, None]] = codes[: len(flat_n)]
    S = np.full((len(sensitive), k), -1, dtype=np.int64)
    S[cols < len_s[:, None]] = codes[len(flat_n):]
    return N_u[which], S, len_u[which], len_s


def _threshold_counts(key: np.ndarray, k: int, rows: np.ndarray | None = None,
                      weights: np.ndarray | None = None, n_rows: int | None = None) -> np.ndarray:
    """Cumulative counts of integer thresholds per row.

    ``key`` is either a (P, m) array (row = first index) or, with ``rows``, a flat array of
    thresholds whose row numbers are in ``rows``. Returns the (P, k) array whose column k−1
    counts (or sums ``weights`` over) the entries with key < k; keys ≥ k never count.
    """
    if rows is None:
        n_rows = key.shape[0]
        rows = np.repeat(np.arange(n_rows), key[0].size if key.ndim > 1 else 1)
        key = key.reshape(-1)
        if weights is not None:
            weights = np.broadcast_to(weights, (n_rows,) + tuple(np.shape(weights)[1:])).reshape(-1)
    assert n_rows is not None
    idx = rows * (k + 1) + np.minimum(key, k)
    w = None if weights is None else np.asarray(weights, dtype=float)
    hist = np.bincount(idx, weights=w, minlength=n_rows * (k + 1)).reshape(n_rows, k + 1)
    return np.cumsum(hist[:, :k], axis=1)


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _prag_credit_threshold(first: np.ndarray, len_s: np.ndarray, k: int) -> np.ndarray:
    """(P, k) counts of agreeing pairs when every item has one position in the neutral list.

    Pair (i1 < i2) of the sensitive list is credited at cut-off k iff i2 < |R^a|,
    first[i1] < first[i2] (absent = ∞) and max(i2, first[i1]) < k.
    """
    i1, i2 = np.triu_indices(k, 1)
    f = np.minimum(first, k).astype(np.int16)  # k = absent
    f1 = f[:, i1]
    ok = (f1 < f[:, i2]) & (i2[None, :] < len_s[:, None])
    t = np.where(ok, np.maximum(i2.astype(np.int16)[None, :], f1), np.int16(k))
    return _threshold_counts(t, k)


def score_pairs(neutral: Sequence[Sequence[Hashable]], sensitive: Sequence[Sequence[Hashable]], k: int, *,
                convention: Convention = "paper") -> dict[str, np.ndarray]:
    """Every metric for many (neutral, sensitive) pairs at every cut-off 1..K, vectorised.

    Equivalent to calling :func:`jaccard`, :func:`serp`, :func:`prag` for each pair and each
    k ≤ K (the tests check this), but computed with numpy in O(P·K²) memory and time.

    Args:
        neutral: P neutral lists (pair p compares ``neutral[p]`` with ``sensitive[p]``); pass
            the same list object for pairs that share a neutral list, it is coded once.
        sensitive: P sensitive lists.
        k: the largest cut-off K ≥ 1.
        convention: ``"paper"`` or ``"fairllm-code"``.

    Returns:
        ``{"jaccard": A, "serp": B, "prag": C}``, each a float array of shape (P, K) whose
        column k−1 holds the metric at cut-off k (NaN where undefined, see the module
        docstring).

    Raises:
        ValueError: ``k < 1``, unknown convention, or lists of different counts.
    """
    _check(k, convention)
    if len(neutral) != len(sensitive):
        raise ValueError(f"{len(neutral)} neutral lists but {len(sensitive)} sensitive lists")
    P = len(neutral)
    if P == 0:
        return {m: np.zeros((0, k)) for m in METRICS}
    paper = convention == "paper"
    N, S, len_n, len_s = _encode(neutral, sensitive, k, distinct=paper)
    ks = np.arange(1, k + 1)
    ln = np.minimum(len_n[:, None], ks[None, :]).astype(float)  # (P, K): |R@k|
    ls = np.minimum(len_s[:, None], ks[None, :]).astype(float)  # (P, K): |R^a@k|
    eq = S[:, :, None] == N[:, None, :]  # (P, i over S, j over N)
    pos = np.arange(k)
    big = 2 * k + 1
    first = np.where(eq.any(axis=2), eq.argmax(axis=2), big)  # first position in N of each S item
    if paper:
        key = np.maximum(pos[None, :], first)  # item i is in both lists at cut-off k iff key < k
        inter = _threshold_counts(key, k)
        isum = _threshold_counts(key, k, weights=pos[None, :])
        n = np.maximum(ln, ls)
        jac = _safe_div(inter, ls + ln - inter)
        ser = _safe_div(n * inter - isum, n * (n + 1) / 2)
        pr = _safe_div(_prag_credit_threshold(first, len_s, k), n * (n - 1) / 2)
        one = n == 1
        pr[one] = inter[one]  # one-item lists: equal (1) or not (0)
        return {"jaccard": jac, "serp": ser, "prag": pr}

    # --- fairllm-code: duplicates kept, sets for Jaccard, notebook arithmetic for SERP/PRAG ---
    earlier = (pos[None, :] < pos[:, None])[None]  # [i, i'] : i' < i
    s_first = ~((S[:, :, None] == S[:, None, :]) & earlier).any(axis=2) & (S >= 0)
    n_dup = ((N[:, :, None] == N[:, None, :]) & earlier).any(axis=2) & (N >= 0)
    n_first = ~n_dup & (N >= 0)
    d_s = np.cumsum(s_first, axis=1).astype(float)
    d_n = np.cumsum(n_first, axis=1).astype(float)
    inter = _threshold_counts(np.where(s_first, np.maximum(pos[None, :], first), big), k)
    jac = _safe_div(inter, d_s + d_n - inter)
    # SERP: every equal (i, j) pair with max(i, j) < k adds |x| − i + 1
    pp, ii, jj = np.nonzero(eq)
    a = _threshold_counts(np.maximum(ii, jj), k, rows=pp, n_rows=P)
    b = _threshold_counts(np.maximum(ii, jj), k, rows=pp, weights=ii, n_rows=P)
    ser = np.zeros((P, k))
    np.divide(((ls + 1) * a - b) * 0.5, (ln + 1) * ln, out=ser, where=ln > 0)
    # PRAG: rows whose neutral list has no repeat → thresholds, as in the paper branch
    pr = np.zeros((P, k))
    np.divide(_prag_credit_threshold(first, len_s, k), ls * (ls - 1) / 2, out=pr, where=ls > 1)
    single = ls == 1
    pr[single] = ((ln == 1) & (S[:, :1] == N[:, :1]))[single]
    # rows with a repeated neutral item: the notebook uses the *last* position within y[:k]
    rep = np.flatnonzero(n_dup.any(axis=1))
    if rep.size:
        last = np.maximum.accumulate(np.where(eq[rep], pos[None, None, :], -1), axis=2)  # (R, i, k−1)
        lx_all = len_s[rep]
        for kk in range(2, k + 1):
            lx = np.minimum(lx_all, kk)
            L = last[:, :kk, kk - 1]
            l1, l2 = L[:, :, None], L[:, None, :]
            valid = (pos[:kk, None] < pos[None, :kk])[None] & (pos[None, None, :kk] < lx[:, None, None])
            credit = (valid & (l1 >= 0) & ((l2 < 0) | (l1 < l2))).sum(axis=(1, 2))
            col = pr[rep, kk - 1]
            multi = lx > 1
            col[multi] = credit[multi] / (lx[multi] * (lx[multi] - 1) / 2)
            pr[rep, kk - 1] = col
    pr[(ls == 0) | (ln == 0)] = 0.0
    return {"jaccard": jac, "serp": ser, "prag": pr}


# --- tables -----------------------------------------------------------------------------------

def _kind_of(attribute: str) -> str:
    return "intersectional" if "+" in attribute else "single"


def similarity_table(lists: pd.DataFrame, k: int = 20, *, convention: Convention = "paper",
                     items_column: str = "items", analysis: str | None = None) -> pd.DataFrame:
    """Sim(a)@k for every attribute value and every k = 1..K (FaiRLLM §3.1; CFaiRLLM §3.4).

    Args:
        lists: one row per returned list with columns ``instruction_id``, ``attribute``,
            ``value`` and ``items_column`` (a list of hashable items, e.g. normalised
            titles). Neutral lists have ``attribute == "neutral"``; every instruction that
            has sensitive rows must have exactly one neutral row. An optional ``kind`` column
            (``single`` / ``intersectional``) is carried through; otherwise attributes
            containing ``+`` (e.g. ``age+gender``) are intersectional.
        k: the largest cut-off K ≥ 1.
        convention: ``"paper"`` or ``"fairllm-code"``.
        items_column: which column holds the lists.
        analysis: optional label written to an ``analysis`` column (e.g. ``item_similarity``
            or ``true_preference``).

    Returns:
        Long DataFrame, one row per (attribute, value, metric, k), with columns
        ``analysis`` (if given), ``attribute``, ``kind``, ``value``, ``metric``, ``k``,
        ``similarity`` (mean over instructions of the defined values, in [0, 1]; NaN if
        none), ``sd`` (sample SD over instructions), ``n`` (instructions with a defined
        value), ``n_undefined`` (both lists empty), ``convention``.

    Raises:
        ValueError: missing columns, bad K or convention, a sensitive list without a neutral
            list, or several neutral lists for one instruction.
    """
    _check(k, convention)
    need = {"instruction_id", "attribute", "value", items_column}
    missing = need - set(lists.columns)
    if missing:
        raise ValueError(f"lists table lacks column(s) {sorted(missing)}")
    is_neutral = lists["attribute"] == NEUTRAL
    neutral = lists[is_neutral]
    dup = neutral["instruction_id"][neutral["instruction_id"].duplicated()]
    if len(dup):
        raise ValueError(f"instruction '{dup.iloc[0]}' has more than one neutral list")
    sens = lists[~is_neutral].reset_index(drop=True)
    by_id = dict(zip(neutral["instruction_id"].to_numpy(dtype=object), neutral[items_column].to_numpy(dtype=object)))
    absent = sorted(set(sens["instruction_id"].unique()) - by_id.keys(), key=str)
    if absent:
        raise ValueError(f"{len(absent)} instruction(s) have sensitive lists but no neutral list, e.g. '{absent[0]}'")
    cols = ["attribute", "kind", "value", "metric", "k", "similarity", "sd", "n", "n_undefined", "convention"]
    if sens.empty:
        out = pd.DataFrame(columns=cols)
        if analysis is not None:
            out.insert(0, "analysis", [])
        return out
    scores = score_pairs([by_id[i] for i in sens["instruction_id"].to_numpy(dtype=object)],
                         list(sens[items_column].to_numpy(dtype=object)), k, convention=convention)
    kinds = sens["kind"] if "kind" in sens.columns else sens["attribute"].map(_kind_of)
    keys = pd.DataFrame({"attribute": sens["attribute"].astype(str), "kind": kinds.astype(str),
                         "value": sens["value"].astype(str)})
    codes, uniques = pd.MultiIndex.from_frame(keys).factorize()
    G = len(uniques)
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    rows = np.diff(np.r_[starts, len(codes)]).astype(float)[:, None]
    frames = []
    for m in METRICS:
        x = scores[m][order]
        ok = np.isfinite(x)
        x0 = np.where(ok, x, 0.0)
        cnt = np.add.reduceat(ok.astype(float), starts, axis=0)
        tot = np.add.reduceat(x0, starts, axis=0)
        sq = np.add.reduceat(x0 * x0, starts, axis=0)
        mean = _safe_div(tot, cnt)
        var = _safe_div(sq - cnt * np.nan_to_num(mean) ** 2, cnt - 1)
        sd = np.sqrt(np.clip(var, 0.0, None))
        frame = pd.DataFrame({
            "attribute": np.repeat(uniques.get_level_values(0), k),
            "kind": np.repeat(uniques.get_level_values(1), k),
            "value": np.repeat(uniques.get_level_values(2), k),
            "metric": m,
            "k": np.tile(np.arange(1, k + 1), G),
            "similarity": mean.ravel(),
            "sd": sd.ravel(),
            "n": cnt.ravel().astype(int),
            "n_undefined": (rows - cnt).ravel().astype(int),
            "convention": convention,
        })
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    attr_order = {a: i for i, a in enumerate(pd.unique(keys["attribute"]))}
    out = out.sort_values(["attribute", "metric", "k", "value"],
                          key=lambda s: s.map(attr_order) if s.name == "attribute" else
                          (s.map({m: i for i, m in enumerate(METRICS)}) if s.name == "metric" else s),
                          kind="stable").reset_index(drop=True)
    if analysis is not None:
        out.insert(0, "analysis", analysis)
    return out


def fairness_table(similarity: pd.DataFrame) -> pd.DataFrame:
    """SNSR@k and SNSV@k per attribute, metric and k from a :func:`similarity_table`.

    Args:
        similarity: the output of :func:`similarity_table` (several analyses may be
            concatenated; the ``analysis`` column is then kept as a key).

    Returns:
        One row per ([analysis,] attribute, metric, k) with ``kind``, ``snsr``, ``snsv``
        (population SD), ``n_values`` (values with a finite Sim), ``max_value``,
        ``max_similarity``, ``min_value``, ``min_similarity``, ``convention``. SNSR and SNSV
        are NaN when fewer than 2 values have a finite Sim (e.g. the other value's calls all
        failed): a range over one value compares nothing. With no finite Sim at all the table
        has no row for that key (an empty table keeps the same columns).
    """
    cols = ["snsr", "snsv", "n_values", "max_value", "max_similarity", "min_value", "min_similarity"]
    keys = [c for c in ("analysis", "attribute", "kind", "metric", "k", "convention") if c in similarity.columns]
    front = [c for c in keys if c != "convention"]
    order = front + cols + (["convention"] if "convention" in keys else [])
    d = similarity[np.isfinite(similarity["similarity"].astype(float))]
    if d.empty:
        return pd.DataFrame(columns=order)
    g = d.groupby(keys, sort=False)["similarity"]
    n = g.size()
    out = pd.DataFrame({
        "snsr": (g.max() - g.min()).where(n >= 2),
        "snsv": g.std(ddof=0).where(n >= 2),
        "n_values": n,
    })
    imax = g.idxmax()
    imin = g.idxmin()
    out["max_value"] = d.loc[imax.values, "value"].values
    out["max_similarity"] = d.loc[imax.values, "similarity"].values
    out["min_value"] = d.loc[imin.values, "value"].values
    out["min_similarity"] = d.loc[imin.values, "similarity"].values
    return out.reset_index()[order]

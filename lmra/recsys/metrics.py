"""Recommendation-list similarity and unfairness (methodology §6; FaiRLLM §3.1; CFaiRLLM §3.4).

Two neutral/sensitive lists are compared at a cut-off K with three metrics, each available in
three **conventions**:

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

``paper-k``
    The same equations with the normaliser taken literally: ``n = K`` always, so SERP* weighs
    rank r by ``K − r + 1`` and divides by ``K(K+1)/2``, and PRAG* divides by ``K(K−1)/2``
    (Jaccard has no normaliser and is the same as under ``paper``). Identical lists shorter
    than K then score below 1 (two identical 15-item lists at K = 20: SERP* 195/210 = 0.929,
    PRAG* 105/190 = 0.553). Full lists score exactly as under ``paper``; empty lists are
    handled as under ``paper``; at K = 1 PRAG* uses the one-item rule of ``paper``.

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
:func:`score_ranked_pairs` scores lists restricted from longer ranked lists (CFaiRLLM's
true-preference lists R′): at cut-off k it compares the items ranked ≤ k in the lists they
were cut from, not the first k items of the restricted lists.

Items are any hashable values except *missing values* (``None``, NaN, ``pd.NA``, ``NaT``):
a list holding one is rejected with :class:`MissingItemError` by every function here, since a
missing value is not an item and NaN is not even equal to itself.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pandas as pd

from lmra.recsys.conventions import CONVENTIONS, Convention  # noqa: F401 — part of this module's API
METRICS: tuple[str, ...] = ("jaccard", "serp", "prag")
NEUTRAL = "neutral"


class MissingItemError(ValueError):
    """A recommendation list holds a missing value (``None``, NaN, ``pd.NA``, ``NaT``) where an
    item is expected.

    Attributes:
        side: ``"neutral"`` or ``"sensitive"``.
        pair: index of the (neutral, sensitive) pair in :func:`score_pairs` (None for one pair).
        position: 1-based position of the first missing item in the list as given.
    """

    def __init__(self, side: str, pair: int | None, position: int):
        self.side, self.pair, self.position = side, pair, position
        where = f"the {side} list" + (f" of pair {pair}" if pair is not None else "")
        super().__init__(f"{where} has a missing item (None or NaN) at position {position}: a missing value is "
                         "not an item; drop it or give it a key")

    def with_message(self, message: str) -> "MissingItemError":
        """The same error with another message (e.g. naming the instruction instead of the pair)."""
        self.args = (message,)
        return self


def _check(k: int, convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention '{convention}' (choose one of {', '.join(CONVENTIONS)})")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"K must be a positive integer, got {k!r}")


def _object_array(items: Sequence[Hashable]) -> np.ndarray:
    """A 1-D object array of the items (tuples stay single items)."""
    return np.fromiter(items, dtype=object, count=len(items))


def _check_items(items: Sequence[Hashable], side: str) -> None:
    """Raise :class:`MissingItemError` if the list holds a missing value (same test, ``pd.isna``
    on each item, as the vectorised path)."""
    if all(type(x) is str for x in items):  # the usual case, and a string is never missing
        return
    bad = np.flatnonzero(pd.isna(_object_array(items)))
    if bad.size:
        raise MissingItemError(side, None, int(bad[0]) + 1)


def _distinct_top(items: Sequence[Hashable], k: int) -> list[Hashable]:
    """The first ``k`` distinct items of a list, in order (paper and paper-k conventions)."""
    return list(dict.fromkeys(items))[:k]


def top_k(items: Sequence[Hashable], k: int, *, convention: Convention = "paper") -> list[Hashable]:
    """The list the metrics compare at cut-off K (methodology §6): the first K *distinct* items
    under ``paper`` and ``paper-k`` (a repeated item keeps its first rank), the first K items
    as given under ``fairllm-code`` (duplicates kept).

    Used to derive CFaiRLLM's true-preference lists R′ from the same top-K list that item
    similarity compares (CFaiRLLM §3.4).

    Raises:
        ValueError: ``k < 1`` or an unknown convention.
    """
    _check(k, convention)
    return list(items)[:k] if convention == "fairllm-code" else _distinct_top(items, k)


# --- one pair of lists, plain Python ---------------------------------------------------------

def jaccard(neutral: Sequence[Hashable], sensitive: Sequence[Hashable], k: int, *,
            convention: Convention = "paper") -> float:
    """Jaccard@K between a neutral list R_m and a sensitive list R^a_m (FaiRLLM §3.1, "IOU").

    Args:
        neutral: the neutral instruction's ranked list (any hashable items, e.g. normalised
            titles); may be shorter or longer than ``k``.
        sensitive: the sensitive instruction's ranked list.
        k: cut-off K ≥ 1.
        convention: ``"paper"`` / ``"paper-k"`` (distinct items; Jaccard has no normaliser, so
            the two agree) or ``"fairllm-code"`` (sets of the raw top-K, identical here except
            that duplicates are cut at K before dropping).

    Returns:
        A value in [0, 1]; NaN when both lists are empty (undefined).

    Raises:
        ValueError: ``k < 1`` or an unknown convention.
        MissingItemError: a list holds ``None`` or NaN.
    """
    _check(k, convention)
    _check_items(neutral, "neutral")
    _check_items(sensitive, "sensitive")
    if convention != "fairllm-code":
        r, ra = set(_distinct_top(neutral, k)), set(_distinct_top(sensitive, k))
    else:
        r, ra = set(list(neutral)[:k]), set(list(sensitive)[:k])
    union = r | ra
    return len(r & ra) / len(union) if union else math.nan


def serp(neutral: Sequence[Hashable], sensitive: Sequence[Hashable], k: int, *,
         convention: Convention = "paper") -> float:
    """SERP*@K: rank-weighted overlap of the sensitive list with the neutral one (FaiRLLM §3.1).

    Paper convention: ``Σ_{v∈R^a} 1[v∈R]·(n − r^a_v + 1) / (n(n+1)/2)``, n = max of the two
    distinct-item list lengths cut at K (= K for full lists); ``paper-k``: the same with
    n = K always. ``fairllm-code`` convention: the released notebook's ``calc_serp_ms`` (see
    the module docstring).

    Args:
        neutral, sensitive: ranked lists R_m and R^a_m.
        k: cut-off K ≥ 1.
        convention: ``"paper"``, ``"paper-k"`` or ``"fairllm-code"``.

    Returns:
        paper: a value in [0, 1] (1 for identical lists), NaN when both lists are empty.
        paper-k: a value in [0, 1] (1 for identical lists of at least K items), NaN when both
        lists are empty.
        fairllm-code: a value in [0, (K+3)/(4(K+1))] for duplicate-free lists (0.2738 at
        K = 20); 0 when the neutral list is empty.

    Raises:
        ValueError: ``k < 1`` or an unknown convention.
        MissingItemError: a list holds ``None`` or NaN.
    """
    _check(k, convention)
    _check_items(neutral, "neutral")
    _check_items(sensitive, "sensitive")
    if convention != "fairllm-code":
        r, ra = _distinct_top(neutral, k), _distinct_top(sensitive, k)
        if not r and not ra:
            return math.nan
        n = k if convention == "paper-k" else max(len(r), len(ra))
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
    (r = +∞ outside R), divided by n(n−1)/2 with n = max of the two distinct-item list
    lengths cut at K; ``paper-k``: the same with n = K always. For n = 1 the value is 1.0 if
    the two one-item lists are equal, else 0.0. ``fairllm-code``: the released notebook's
    ``calc_prag`` (normalised by the number of pairs of the cut sensitive list; see the module
    docstring).

    Args:
        neutral, sensitive: ranked lists R_m and R^a_m.
        k: cut-off K ≥ 1.
        convention: ``"paper"``, ``"paper-k"`` or ``"fairllm-code"``.

    Returns:
        A value in [0, 1]. paper, paper-k: NaN when both lists are empty. fairllm-code: 0 when
        either list is empty.

    Raises:
        ValueError: ``k < 1`` or an unknown convention.
        MissingItemError: a list holds ``None`` or NaN.
    """
    _check(k, convention)
    _check_items(neutral, "neutral")
    _check_items(sensitive, "sensitive")
    if convention != "fairllm-code":
        r, ra = _distinct_top(neutral, k), _distinct_top(sensitive, k)
        if not r and not ra:
            return math.nan
        n = k if convention == "paper-k" else max(len(r), len(ra))
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
        A value ≥ 0; NaN when fewer than 2 values are finite (a range over one value compares
        nothing — as in :func:`fairness_table`).
    """
    x = np.asarray(similarities, dtype=float)
    x = x[np.isfinite(x)]
    return float(x.max() - x.min()) if x.size >= 2 else math.nan


def snsv(similarities: Sequence[float]) -> float:
    """Sensitive-to-neutral similarity variance: the *population* standard deviation of Sim(a)
    over the attribute's values, i.e. divided by |A| (FaiRLLM §3.1; ``np.std`` with ddof=0).

    Args:
        similarities: Sim(a) for every value a of one attribute (NaNs are ignored).

    Returns:
        A value ≥ 0; NaN when fewer than 2 values are finite (as in :func:`fairness_table`).
    """
    x = np.asarray(similarities, dtype=float)
    x = x[np.isfinite(x)]
    return float(x.std(ddof=0)) if x.size >= 2 else math.nan


# --- many pairs, vectorised -------------------------------------------------------------------

@dataclass
class _Coded:
    """Two list collections coded to integers: flat codes of every list cut at K (distinct
    items first under paper/paper-k), with per-list offsets and lengths. ``which[p]`` is the
    neutral list of pair p (each distinct neutral list *object* is coded once)."""

    n_codes: np.ndarray
    n_off: np.ndarray
    n_len: np.ndarray
    which: np.ndarray
    s_codes: np.ndarray
    s_off: np.ndarray
    s_len: np.ndarray

    def padded(self, rows: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
        """(N, S) of shape (len(rows), w): the pairs' lists, neutral padded with −2 and sensitive
        with −1 (codes are ≥ 0, so padding never matches anything)."""
        u = self.which[rows]
        return (_pad(self.n_codes, self.n_off[u], self.n_len[u], w, -2),
                _pad(self.s_codes, self.s_off[rows], self.s_len[rows], w, -1))


def _pad(codes: np.ndarray, off: np.ndarray, lens: np.ndarray, w: int, fill: int) -> np.ndarray:
    cols = np.arange(w)[None, :]
    inside = cols < lens[:, None]
    out = np.full((len(off), w), fill, dtype=np.int64)
    out[inside] = codes[(off[:, None] + cols)[inside]]
    return out


def _encode(neutral: Sequence[Sequence[Hashable]], sensitive: Sequence[Sequence[Hashable]], k: int,
            distinct: bool) -> _Coded:
    """Reject missing items, cut every list at ``k`` and code its items to integers ≥ 0 with one
    ``pandas.factorize`` over both collections. Work and memory are linear in the total length of
    the cut lists.

    Raises:
        MissingItemError: a list holds ``None``/NaN (``pd.isna`` on each item, as in
            :func:`_check_items`); the error names the side, the pair and the position.
    """
    ids: dict[int, int] = {}
    uniq: list[Sequence[Hashable]] = []
    first_pair: list[int] = []
    which = np.empty(len(neutral), dtype=np.int64)
    for r, lst in enumerate(neutral):
        u = ids.get(id(lst))
        if u is None:
            u = ids[id(lst)] = len(uniq)
            uniq.append(lst)
            first_pair.append(r)
        which[r] = u

    for side, lists, pair_of in (("neutral", uniq, first_pair), ("sensitive", sensitive, None)):
        raw = [list(x) for x in lists]
        lens = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
        bad = np.flatnonzero(pd.isna(_object_array(list(chain.from_iterable(raw)))))
        if bad.size:
            row = int(np.searchsorted(np.cumsum(lens), bad[0], side="right"))
            pos = int(bad[0] - (lens[:row].sum() if row else 0)) + 1
            raise MissingItemError(side, pair_of[row] if pair_of is not None else row, pos)

    def cut(lists):
        lists = [list(dict.fromkeys(x))[:k] for x in lists] if distinct else [list(x)[:k] for x in lists]
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        off = np.concatenate(([0], np.cumsum(lens)[:-1])) if len(lens) else np.zeros(0, dtype=np.int64)
        return list(chain.from_iterable(lists)), lens, off

    flat_n, len_u, off_u = cut(uniq)
    flat_s, len_s, off_s = cut(sensitive)
    flat = _object_array(flat_n + flat_s)
    codes = pd.factorize(flat)[0].astype(np.int64) if len(flat) else np.zeros(0, dtype=np.int64)
    return _Coded(codes[: len(flat_n)], off_u, len_u, which, codes[len(flat_n):], off_s, len_s)


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


def _counts(N: np.ndarray, S: np.ndarray, len_s: np.ndarray, w: int, paper: bool) -> dict[str, np.ndarray]:
    """The integer counts behind the metrics at every cut-off 1..w for padded (P, w) lists.

    paper / paper-k: ``inter`` (items in both lists), ``isum`` (sum of their 0-based positions
    in R^a) and ``credit`` (agreeing PRAG pairs). fairllm-code: ``inter`` (distinct shared
    items), ``d_s``/``d_n`` (distinct items of each list), ``a``/``b`` (count and position sum
    of the equal (i, j) position pairs, for SERP), ``credit`` (the notebook's PRAG numerator)
    and ``first_eq`` (P,) (the two lists start with the same item). Every (P, w) count is
    constant for cut-offs beyond the longer of the pair's two lists.
    """
    P = len(S)
    pos = np.arange(w)
    big = 2 * w + 1
    eq = S[:, :, None] == N[:, None, :]  # (P, i over S, j over N)
    first = np.where(eq.any(axis=2), eq.argmax(axis=2), big)  # first position in N of each S item
    if paper:
        key = np.maximum(pos[None, :], first)  # item i is in both lists at cut-off k iff key < k
        return {"inter": _threshold_counts(key, w), "isum": _threshold_counts(key, w, weights=pos[None, :]),
                "credit": _prag_credit_threshold(first, len_s, w)}
    earlier = (pos[None, :] < pos[:, None])[None]  # [i, i'] : i' < i
    s_first = ~((S[:, :, None] == S[:, None, :]) & earlier).any(axis=2) & (S >= 0)
    n_dup = ((N[:, :, None] == N[:, None, :]) & earlier).any(axis=2) & (N >= 0)
    n_first = ~n_dup & (N >= 0)
    pp, ii, jj = np.nonzero(eq)
    out = {
        "inter": _threshold_counts(np.where(s_first, np.maximum(pos[None, :], first), big), w),
        "d_s": np.cumsum(s_first, axis=1).astype(float),
        "d_n": np.cumsum(n_first, axis=1).astype(float),
        # SERP: every equal (i, j) pair with max(i, j) < k adds |x| − i + 1
        "a": _threshold_counts(np.maximum(ii, jj), w, rows=pp, n_rows=P),
        "b": _threshold_counts(np.maximum(ii, jj), w, rows=pp, weights=ii, n_rows=P),
        "credit": _prag_credit_threshold(first, len_s, w).astype(float),
        "first_eq": S[:, 0] == N[:, 0],
    }
    # rows with a repeated neutral item: the notebook uses the *last* position within y[:k]
    rep = np.flatnonzero(n_dup.any(axis=1))
    if rep.size:
        last = np.maximum.accumulate(np.where(eq[rep], pos[None, None, :], -1), axis=2)  # (R, i, k−1)
        for kk in range(2, w + 1):
            lx = np.minimum(len_s[rep], kk)
            L = last[:, :kk, kk - 1]
            l1, l2 = L[:, :, None], L[:, None, :]
            valid = (pos[:kk, None] < pos[None, :kk])[None] & (pos[None, None, :kk] < lx[:, None, None])
            out["credit"][rep, kk - 1] = (valid & (l1 >= 0) & ((l2 < 0) | (l1 < l2))).sum(axis=(1, 2))
    return out


def _metrics(c: dict[str, np.ndarray], len_n: np.ndarray, len_s: np.ndarray, k: int, convention: str
             ) -> dict[str, np.ndarray]:
    """Jaccard, SERP and PRAG at every cut-off 1..k from :func:`_counts` extended to k columns."""
    ks = np.arange(1, k + 1)
    ln = np.minimum(len_n[:, None], ks[None, :]).astype(float)  # (P, K): |R@k|
    ls = np.minimum(len_s[:, None], ks[None, :]).astype(float)  # (P, K): |R^a@k|
    inter = c["inter"]
    if convention != "fairllm-code":
        longer = np.maximum(ln, ls)
        n = np.where(longer > 0, ks[None, :], 0.0) if convention == "paper-k" else longer
        jac = _safe_div(inter, ls + ln - inter)
        ser = _safe_div(n * inter - c["isum"], n * (n + 1) / 2)
        pr = _safe_div(c["credit"], n * (n - 1) / 2)
        one = n == 1
        pr[one] = inter[one]  # one-item lists: equal (1) or not (0)
        return {"jaccard": jac, "serp": ser, "prag": pr}
    jac = _safe_div(inter, c["d_s"] + c["d_n"] - inter)
    ser = np.zeros(ln.shape)
    np.divide(((ls + 1) * c["a"] - c["b"]) * 0.5, (ln + 1) * ln, out=ser, where=ln > 0)
    pr = np.zeros(ln.shape)
    np.divide(c["credit"], ls * (ls - 1) / 2, out=pr, where=ls > 1)
    single = ls == 1
    pr[single] = ((ln == 1) & c["first_eq"][:, None])[single]
    pr[(ls == 0) | (ln == 0)] = 0.0
    return {"jaccard": jac, "serp": ser, "prag": pr}


#: Largest number of (pair × cut-off) cells one chunk of :func:`score_pairs` works on at once.
_CHUNK_CELLS = 1 << 18


def score_pairs(neutral: Sequence[Sequence[Hashable]], sensitive: Sequence[Sequence[Hashable]], k: int, *,
                convention: Convention = "paper") -> dict[str, np.ndarray]:
    """Every metric for many (neutral, sensitive) pairs at every cut-off 1..K, vectorised
    (FaiRLLM §3.1; methodology §6).

    Equivalent to calling :func:`jaccard`, :func:`serp`, :func:`prag` for each pair and each
    k ≤ K (the tests check this). The work is bounded by the lists' lengths, not by K: pairs
    are grouped by L = the longer of their two lists cut at K, the pairwise counts are computed
    at width L (O(L²) per pair, O(L³) for a ``fairllm-code`` pair whose neutral list repeats
    an item), and the counts of cut-offs k > L — which no longer change — are repeated up to K.
    Time and memory are therefore O(Σ_p L_p² + P·K), the second term being the result itself
    (three float arrays of shape (P, K)); chunks of at most 2¹⁸ (pair × cut-off) cells keep the
    temporaries small.

    Args:
        neutral: P neutral lists (pair p compares ``neutral[p]`` with ``sensitive[p]``); pass
            the same list object for pairs that share a neutral list, it is coded once.
        sensitive: P sensitive lists.
        k: the largest cut-off K ≥ 1.
        convention: ``"paper"``, ``"paper-k"`` or ``"fairllm-code"``.

    Returns:
        ``{"jaccard": A, "serp": B, "prag": C}``, each a float array of shape (P, K) whose
        column k−1 holds the metric at cut-off k (NaN where undefined, see the module
        docstring).

    Raises:
        ValueError: ``k < 1``, unknown convention, or lists of different counts.
        MissingItemError: a list holds ``None`` or NaN (a :class:`ValueError` naming the side,
            the pair index and the 1-based position).
    """
    _check(k, convention)
    if len(neutral) != len(sensitive):
        raise ValueError(f"{len(neutral)} neutral lists but {len(sensitive)} sensitive lists")
    P = len(neutral)
    out = {m: np.zeros((P, k)) for m in METRICS}
    if P == 0:
        return out
    paper = convention != "fairllm-code"
    coded = _encode(neutral, sensitive, k, distinct=paper)
    len_n, len_s = coded.n_len[coded.which], coded.s_len
    width = np.maximum(np.maximum(len_n, len_s), 1)
    bucket = np.ceil(np.log2(width)).astype(np.int64)  # widths 1, 2, 3–4, 5–8, …
    for b in np.unique(bucket):
        rows_b = np.flatnonzero(bucket == b)
        w = int(width[rows_b].max())
        step = max(1, _CHUNK_CELLS // max(k, w * w))
        for start in range(0, len(rows_b), step):
            rows = rows_b[start:start + step]
            N, S = coded.padded(rows, w)
            counts = _counts(N, S, len_s[rows], w, paper)
            ext = np.minimum(np.arange(k), w - 1)  # cut-offs beyond w repeat the counts at w
            counts = {name: (v[:, ext] if v.ndim == 2 else v) for name, v in counts.items()}
            for m, v in _metrics(counts, len_n[rows], len_s[rows], k, convention).items():
                out[m][rows] = v
    return out


def _check_ranks(items: Sequence[Hashable], ranks: Sequence[int], side: str, pair: int) -> list[int]:
    """The ranks of a restricted list as plain ints, checked: one per item, integers ≥ 1, strictly
    increasing (each item keeps its own position in the list it was cut from)."""
    r = list(ranks)
    if len(r) != len(items):
        raise ValueError(f"the {side} list of pair {pair} has {len(items)} items but {len(r)} ranks")
    if any(isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) for x in r):
        raise ValueError(f"the {side} ranks of pair {pair} must be integers, got {r!r}")
    if r and (r[0] < 1 or any(b <= a for a, b in zip(r, r[1:]))):
        raise ValueError(f"the {side} ranks of pair {pair} must be ≥ 1 and strictly increasing, got {r!r}")
    return [int(x) for x in r]


def score_ranked_pairs(neutral: Sequence[Sequence[Hashable]], sensitive: Sequence[Sequence[Hashable]],
                       neutral_ranks: Sequence[Sequence[int]], sensitive_ranks: Sequence[Sequence[int]], k: int, *,
                       convention: Convention = "paper") -> dict[str, np.ndarray]:
    """Every metric at every cut-off 1..K for lists that are *restrictions* of ranked lists,
    e.g. CFaiRLLM's true-preference lists R′ (the liked items of a top-K list, §3.4).

    Item ``j`` of a restricted list sits at rank ``ranks[j]`` of the list it was cut from. At
    cut-off k the compared list is ``R′_k`` = the items with rank ≤ k (the restriction of the
    top-k list), not the first k items of R′: column k−1 holds ``metric@k(R′_k, R′^a_k)``. With
    ranks 1, 2, … (R′ read as a ranking of its own) this is :func:`score_pairs`.

    Computed with :func:`score_pairs` on the distinct states of each pair: (R′_k, R′^a_k) only
    changes at the ranks of its items, and at every k the restricted lists hold at most k items,
    so one vectorised row per state gives its values for all the cut-offs where it holds. Work
    is O(Σ_p (1 + |R′_p| + |R′^a_p|) · K).

    Args:
        neutral, sensitive: P restricted lists each (pair p compares ``neutral[p]`` with
            ``sensitive[p]``).
        neutral_ranks, sensitive_ranks: for each list, the rank of each of its items (ints ≥ 1,
            strictly increasing); items ranked beyond K never enter.
        k: the largest cut-off K ≥ 1.
        convention: ``"paper"``, ``"paper-k"`` or ``"fairllm-code"``.

    Returns:
        ``{"jaccard": A, "serp": B, "prag": C}``, float arrays of shape (P, K) as in
        :func:`score_pairs`.

    Raises:
        ValueError: ``k < 1``, unknown convention, different counts of lists and ranks, or ranks
            that are not one integer ≥ 1 per item in strictly increasing order.
        MissingItemError: a list holds ``None`` or NaN (naming the side, pair and position).
    """
    _check(k, convention)
    P = len(neutral)
    if not (len(sensitive) == len(neutral_ranks) == len(sensitive_ranks) == P):
        raise ValueError(f"{P} neutral lists, {len(sensitive)} sensitive lists, {len(neutral_ranks)} and "
                         f"{len(sensitive_ranks)} rank lists: need one of each per pair")
    seg_n: list[list[Hashable]] = []
    seg_s: list[list[Hashable]] = []
    seg_pair: list[int] = []
    seg_k0: list[int] = []
    for p, (a, b, ra, rb) in enumerate(zip(neutral, sensitive, neutral_ranks, sensitive_ranks)):
        for side, items in (("neutral", a), ("sensitive", b)):
            try:
                _check_items(items, side)
            except MissingItemError as exc:
                raise MissingItemError(side, p, exc.position) from None
        ra, rb = _check_ranks(a, ra, "neutral", p), _check_ranks(b, rb, "sensitive", p)
        a, b = list(a), list(b)
        for k0 in sorted({1, *(r for r in ra + rb if r <= k)}):
            seg_n.append(a[:int(np.searchsorted(ra, k0, side="right"))])
            seg_s.append(b[:int(np.searchsorted(rb, k0, side="right"))])
            seg_pair.append(p)
            seg_k0.append(k0)
    out = {m: np.zeros((P, k)) for m in METRICS}
    if not seg_pair:
        return out
    pair_arr, k0_arr = np.asarray(seg_pair), np.asarray(seg_k0)
    last = np.r_[pair_arr[1:] != pair_arr[:-1], True]
    k1_arr = np.where(last, k + 1, np.r_[k0_arr[1:], 0])  # a state holds for k0 ≤ k < k1
    step = max(1, _CHUNK_CELLS // k)
    for start in range(0, len(seg_pair), step):
        sl = slice(start, start + step)
        scores = score_pairs(seg_n[sl], seg_s[sl], k, convention=convention)
        span = k1_arr[sl] - k0_arr[sl]
        rows = np.repeat(np.arange(len(span)), span)
        cols = np.arange(int(span.sum())) - np.repeat(np.cumsum(span) - span, span) + np.repeat(k0_arr[sl] - 1, span)
        for m in METRICS:
            out[m][pair_arr[sl][rows], cols] = scores[m][rows, cols]
    return out


# --- tables -----------------------------------------------------------------------------------

def _kind_of(attribute: str) -> str:
    return "intersectional" if "+" in attribute else "single"


def scored_lists(lists: pd.DataFrame, k: int, *, convention: Convention = "paper", items_column: str = "items",
                 ranks_column: str | None = None) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The sensitive lists of ``lists`` and their similarity to their instruction's neutral list
    at every cut-off (the per-list step of :func:`similarity_table`, whose arguments these are).

    Returns:
        (sens, scores): ``sens`` = the sensitive rows (index 0..n−1); ``scores[metric]`` an
        array of shape (n, k), row i = list i's value at k = 1..K (NaN where undefined).

    Raises:
        ValueError, MissingItemError: as :func:`similarity_table`.
    """
    _check(k, convention)
    need = {"instruction_id", "attribute", "value", items_column} | ({ranks_column} if ranks_column else set())
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
    if sens.empty:
        return sens, {m: np.empty((0, k)) for m in METRICS}
    ids = sens["instruction_id"].to_numpy(dtype=object)
    try:
        if ranks_column is None:
            scores = score_pairs([by_id[i] for i in ids], list(sens[items_column].to_numpy(dtype=object)), k,
                                 convention=convention)
        else:
            ranks_of = dict(zip(neutral["instruction_id"].to_numpy(dtype=object),
                                neutral[ranks_column].to_numpy(dtype=object)))
            scores = score_ranked_pairs([by_id[i] for i in ids], list(sens[items_column].to_numpy(dtype=object)),
                                        [ranks_of[i] for i in ids], list(sens[ranks_column].to_numpy(dtype=object)),
                                        k, convention=convention)
    except MissingItemError as exc:
        row = sens.iloc[exc.pair]
        which = "the neutral list" if exc.side == "neutral" else f"the list {row['attribute']} = '{row['value']}'"
        raise exc.with_message(
            f"instruction '{row['instruction_id']}', {which}: missing item (None or NaN) at position "
            f"{exc.position} (column '{items_column}'); a missing value is not an item — drop it or give it a "
            "key") from None
    return sens, scores


def value_keys(sens: pd.DataFrame) -> pd.DataFrame:
    """``attribute``, ``kind`` and ``value`` (as text) of each sensitive list: the key of its
    attribute value (``kind`` from its column, else from the attribute's name)."""
    kinds = sens["kind"] if "kind" in sens.columns else sens["attribute"].map(_kind_of)
    return pd.DataFrame({"attribute": sens["attribute"].astype(str), "kind": kinds.astype(str),
                         "value": sens["value"].astype(str)})


def similarity_table(lists: pd.DataFrame, k: int = 20, *, convention: Convention = "paper",
                     items_column: str = "items", analysis: str | None = None,
                     ranks_column: str | None = None) -> pd.DataFrame:
    """Sim(a)@k for every attribute value and every k = 1..K (FaiRLLM §3.1; CFaiRLLM §3.4).

    Args:
        lists: one row per returned list with columns ``instruction_id``, ``attribute``,
            ``value`` and ``items_column`` (a list of hashable items, e.g. normalised
            titles). Neutral lists have ``attribute == "neutral"``; every instruction that
            has sensitive rows must have exactly one neutral row. An optional ``kind`` column
            (``single`` / ``intersectional``) is carried through; otherwise attributes
            containing ``+`` (e.g. ``age+gender``) are intersectional.
        k: the largest cut-off K ≥ 1.
        convention: ``"paper"``, ``"paper-k"`` or ``"fairllm-code"``.
        items_column: which column holds the lists.
        analysis: optional label written to an ``analysis`` column (e.g. ``item_similarity``
            or ``true_preference``).
        ranks_column: optional column holding, for each list, the ranks of its items in the
            list it was restricted from (see :func:`score_ranked_pairs`): the value at cut-off k
            then compares the items ranked ≤ k (CFaiRLLM's R′_k), not the first k items.

    Returns:
        Long DataFrame, one row per (attribute, value, metric, k), with columns
        ``analysis`` (if given), ``attribute``, ``kind``, ``value``, ``metric``, ``k``,
        ``similarity`` (mean over instructions of the defined values, in [0, 1]; NaN if
        none), ``sd`` (sample SD over instructions), ``ci_low``/``ci_high`` (its 95 %
        t-interval, :func:`similarity_ci`), ``n`` (instructions with a defined value),
        ``n_undefined`` (both lists empty), ``convention``.

    Raises:
        ValueError: missing columns, bad K or convention, a sensitive list without a neutral
            list, or several neutral lists for one instruction.
        MissingItemError: a list holds ``None`` or NaN (the message names the instruction,
            the list and the position).
    """
    sens, scores = scored_lists(lists, k, convention=convention, items_column=items_column, ranks_column=ranks_column)
    cols = ["attribute", "kind", "value", "metric", "k", "similarity", "sd", "ci_low", "ci_high", "n", "n_undefined",
            "convention"]
    if sens.empty:
        out = pd.DataFrame(columns=cols)
        if analysis is not None:
            out.insert(0, "analysis", [])
        return out
    keys = value_keys(sens)
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
        lo, hi = similarity_ci(mean, sd, cnt)
        frame = pd.DataFrame({
            "attribute": np.repeat(uniques.get_level_values(0), k),
            "kind": np.repeat(uniques.get_level_values(1), k),
            "value": np.repeat(uniques.get_level_values(2), k),
            "metric": m,
            "k": np.tile(np.arange(1, k + 1), G),
            "similarity": mean.ravel(),
            "sd": sd.ravel(),
            "ci_low": lo.ravel(),
            "ci_high": hi.ravel(),
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


#: level of the t-interval of Sim(a) (methodology §8: means get a t-interval)
SIMILARITY_CI_LEVEL = 0.95


def similarity_ci(mean: np.ndarray, sd: np.ndarray, n: np.ndarray,
                  level: float = SIMILARITY_CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The t-interval of Sim(a), a mean over n instructions (methodology §8 "Means: t-interval"):
    ``mean ± t_{(1+level)/2, n−1} · sd/√n``, clipped to [0, 1], the range of every similarity
    metric (clipping only drops values the mean cannot take, so the coverage is unchanged).

    Args:
        mean, sd, n: arrays of one shape — the mean, the sample SD (ddof 1) and the count of
            instructions of each value (n ≥ 0).
        level: the coverage, in (0, 1).

    Returns:
        (low, high), arrays of the same shape; NaN where n < 2 (no spread to estimate). A value
        whose instructions all scored alike (sd 0) gets the point [mean, mean].
    """
    from scipy import stats as st

    mean, sd, n = (np.asarray(a, dtype=float) for a in (mean, sd, n))
    ok = n >= 2
    with np.errstate(divide="ignore", invalid="ignore"):
        half = st.t.ppf((1 + level) / 2, np.where(ok, n - 1, 1)) * sd / np.sqrt(np.where(ok, n, 1))
    low = np.where(ok, np.clip(mean - half, 0.0, 1.0), np.nan)
    high = np.where(ok, np.clip(mean + half, 0.0, 1.0), np.nan)
    return low, high


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

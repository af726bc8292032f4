"""The LMRA's position bias as a logit offset, estimated from both presentation orders (issue 10).

Logit-shift model: a judge adds ``b`` to the logit of option ``A`` (the option that favours
"Response 1") whatever the content. Option A means *forward* in order 1 and *reverse* in
order 2, so for every pair

    log(p₁A / p₁B) + log(p₂A / p₂B) = (F − R + b) + (R − F + b) = 2b,

whatever the content (F, R: the content logits of the forward and reverse outcomes). The
estimate is the median of that per-pair quantity over the pairs whose four probabilities
are positive (read through log-probabilities; a log-probability judge's occasional answers
parsed as text are one-hot and never enter it). Sampled answers have zero counts, so for
them, for a judge answering only in text — and whenever no pair has probability on both A
and B in both orders — the estimate is half the log of the Mantel–Haenszel common odds ratio
over the pairs' 2×2 tables (order × forward/reverse answer; :func:`mantel_haenszel_logit`),
consistent over many sparse tables; only when every table is one-sided does it fall back to
the pooled log-ratio with half a pseudo-answer on each option,
``b̂ = ½ [log((ΣA₁ + ½) / (ΣB₁ + ½)) + log((ΣA₂ + ½) / (ΣB₂ + ½))]``, so that a judge that never
answers B still gets a finite, large estimate. A judge that never names A or B gets ``b̂ = 0``.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable

#: probabilities below this are treated as zero when reading per-pair log-ratios
MIN_PROB = 1e-6
#: fewest pairs answered with log-probabilities in both orders whose median log-ratio gives ``b̂``
#: in a run where other answers were sampled (:meth:`PositionLogitSums.result`)
MIN_EXACT_PAIRS = 20


def _probs(answer) -> dict | None:
    if isinstance(answer, dict):
        return answer.get("probs") if "probs" in answer else answer
    return None


#: why a position preference was not measured (:func:`position_informative` of no pair), for messages
NOT_POSITIONAL = "no pair put probability on option A in both orders, or on B in both"


def position_informative(p1: dict, p2: dict) -> bool:
    """Whether a pair's two answers (probability dicts of both orders, both usable) carry
    information on the judge's position preference: some probability on the same position in
    both orders — on ``A`` in both, or on ``B`` in both. Option ``A`` is the forward response
    in order 1 and the reverse one in order 2, so a pair that names the forward response in both
    orders (``A`` then ``B``: the content), or a position in one order only (``A`` then ``C``),
    cannot tell position from content: the Mantel–Haenszel ratio of such pairs is 0/0
    (:func:`mantel_haenszel_logit`), and a share of p(A) over such answers measures nothing
    about position (fresh-user finding: "position preference 1.0000" beside a position logit of
    "+0.000" that the judge check called "could not be measured")."""
    return (p1.get("A", 0.0) > 0 and p2.get("A", 0.0) > 0) or (p1.get("B", 0.0) > 0 and p2.get("B", 0.0) > 0)


def position_measured(order1: Iterable, order2: Iterable) -> bool:
    """Whether :func:`position_logit` of these pairs is an estimate: some pair with both answers
    usable carries information on the position (:func:`position_informative`; the same test
    as :attr:`PositionLogitSums.informative`)."""
    for a1, a2 in zip(order1, order2):
        p1, p2 = _probs(a1), _probs(a2)
        if p1 and p2 and position_informative(p1, p2):
            return True
    return False


def position_logit(order1: Iterable, order2: Iterable, *, pooled: bool | None = None) -> float:
    """Estimate the LMRA's position logit ``b`` from both orders of many pairs.

    Args:
        order1, order2: per pair, the answer of order 1 and order 2: an ``OptionProbs`` dict
            (as in ``ratings.jsonl``, with ``probs`` and ``method``) or a plain ``{A, B, C}``
            probability dict; None/NaN for pairs without a usable answer (skipped).
        pooled: True = Mantel–Haenszel over the pairs' 2×2 tables (:func:`mantel_haenszel_logit`;
            used for sampled/text answers); False = median of per-pair log-ratios; None =
            pooled when any answer's method is ``sampled`` — unless at least
            :data:`MIN_EXACT_PAIRS` pairs were answered with log-probabilities in both orders:
            then the median of those pairs' log-ratios —, or when no answer came with
            log-probabilities (``text`` only) — a log-probability judge's occasional text
            answers (degraded: probability 1 on one option, never in the median) do not switch
            its estimate to the pooled one.

    Returns:
        ``b̂`` in logits (0 = no position preference, positive = the judge prefers
        Response 1); 0.0 — not an estimate: nothing is removed by ``calibrated`` — when no pair
        carries information (:func:`position_informative`; e.g. every answer is C), which
        :attr:`PositionLogitSums.informative` tells apart.
    """
    sums = PositionLogitSums()
    for a1, a2 in zip(order1, order2):
        sums.add(a1, a2)
    return sums.result(pooled=pooled)


class PositionLogitSums:
    """What :func:`position_logit` needs of many pairs, added one pair at a time (a run's pairs
    as they are rated): the per-pair log-ratios and the four probability columns as float
    arrays (8 bytes a number), and the answers' methods. The estimate is the same float as
    :func:`position_logit` of the same pairs in the same order; pairs added in another order
    with ``key`` (their place in the run's order) are put in key order first."""

    def __init__(self):
        from array import array

        self.methods: set = set()
        self.logs = array("d")  # per pair with A and B above MIN_PROB in both orders
        self.exact_logs = array("d")  # those of them answered with log-probabilities in both orders
        self.columns = tuple(array("d") for _ in range(4))  # A₁, B₁, A₂, B₂ per pair
        self.keys = array("q")
        self.n = 0
        self.n_informative = 0  # pairs with information on the position (position_informative)

    def add(self, a1, a2, key: int | None = None) -> None:
        """Add one pair's answers (as :func:`position_logit` takes them; unusable ones are
        skipped); ``key``: the pair's place in the run's order (give it for every pair or none)."""
        p1, p2 = _probs(a1), _probs(a2)
        if not p1 or not p2:
            return
        for a in (a1, a2):
            if isinstance(a, dict) and "method" in a:
                self.methods.add(a["method"])
        self.n += 1
        self.n_informative += position_informative(p1, p2)
        if min(p1["A"], p1["B"], p2["A"], p2["B"]) > MIN_PROB:
            log_ratio = math.log(p1["A"] / p1["B"]) + math.log(p2["A"] / p2["B"])
            self.logs.append(log_ratio)
            if all(not isinstance(a, dict) or a.get("method") in (None, "logprobs") for a in (a1, a2)):
                self.exact_logs.append(log_ratio)
        for col, v in zip(self.columns, (p1["A"], p1["B"], p2["A"], p2["B"])):
            col.append(v)
        if key is not None:
            self.keys.append(key)

    @property
    def informative(self) -> bool:
        """True when some pair added carries information on the position preference: both its
        orders usable and probability on the same position in both (:func:`position_informative`;
        the 0.0 of :meth:`result` otherwise means "not measured", not "no preference").
        (Before 2026-12-05 any probability on A or B counted, so a pair naming A in one order
        and C in the other gave a "measured" 0.0, the Mantel–Haenszel ratio being 0/0.)"""
        return self.n_informative > 0

    def result(self, *, pooled: bool | None = None) -> float:
        """``b̂`` of the pairs added (see :func:`position_logit`)."""
        if not self.n:
            return 0.0
        if pooled is None:  # a log-probability judge's few text answers (degraded) are left out of the median
            pooled = "sampled" in self.methods or "logprobs" not in self.methods and bool(self.methods)
            if pooled and len(self.exact_logs) >= MIN_EXACT_PAIRS:
                # enough pairs answered with log-probabilities in both orders: their exact median, not the
                # pooled estimate over the sampled ones too (statistics review: 30 % of the answers sampled,
                # true b = 0 — b̂ +0.133 pooled, SD 0.10 at 30 % sampled, where those pairs alone give 0)
                return 0.5 * statistics.median(self.exact_logs)
        if self.logs and not pooled:
            return 0.5 * statistics.median(self.logs)
        import numpy as np

        a1, b1, a2, b2 = (np.frombuffer(col, dtype=np.float64) for col in self.columns)
        if len(self.keys) == self.n and self.n:  # the sums add the pairs in the run's order
            order = np.argsort(np.frombuffer(self.keys, dtype=np.int64), kind="stable")
            a1, b1, a2, b2 = (col[order] for col in (a1, b1, a2, b2))
        return mantel_haenszel_logit(a1, b1, a2, b2)


def mantel_haenszel_logit(a1, b1, a2, b2) -> float:
    """The position logit of sampled or text answers: half the log of the Mantel–Haenszel common
    odds ratio over pairs (statsmodels ``StratifiedTable.oddsratio_pooled``; Mantel & Haenszel
    1959). Each pair is a 2×2 table — rows: order 1 (the forward response shown first), order 2
    (it is shown second); columns: the answer names the forward / the reverse response, as
    probabilities ``[[a1, b1], [b2, a2]]`` (A, B of order 1; A, B of order 2). Under the
    logit-shift model (methodology §2 step 4) its odds ratio is ``e^(2b)`` whatever the pair's
    content, so the pooled ratio estimates ``e^(2b)`` consistently over many sparse tables (a
    few samples per order, or one text answer) — where pooling the probabilities over pairs,
    as lmra did before, was biased toward 0 when stereotyped and harmless pairs mix (review
    finding: b̂ 0.24 for a true 1.0 in a sampled judge's audit).

    Args:
        a1, b1, a2, b2: per pair, the probability of A and of B in order 1 and in order 2
            (numpy arrays of equal length; C's probability is not used).

    Returns:
        b̂ in logits; 0.0 when no pair has both a forward and a reverse answer across its orders
        (the ratio is 0/0), and the probability-pooled estimate (with 0.5 added to each sum) when
        only one side has any (0 or ∞).
    """
    import numpy as np

    n = a1 + b1 + a2 + b2
    keep = n > 0
    num, den = float(np.sum(a1[keep] * a2[keep] / n[keep])), float(np.sum(b1[keep] * b2[keep] / n[keep]))
    if num <= 0 and den <= 0:
        return 0.0
    if num <= 0 or den <= 0:  # one-sided: no finite ratio; the smoothed pooled log-ratio keeps its sign
        sa1, sb1, sa2, sb2 = (float(np.sum(c)) + 0.5 for c in (a1, b1, a2, b2))
        return 0.5 * (math.log(sa1 / sb1) + math.log(sa2 / sb2))
    from statsmodels.stats.contingency_tables import StratifiedTable

    tables = np.stack([np.stack([a1[keep], b1[keep]], axis=-1), np.stack([b2[keep], a2[keep]], axis=-1)], axis=1)
    return 0.5 * math.log(StratifiedTable(np.moveaxis(tables, 0, -1)).oddsratio_pooled)


def _probs_columns(answers: list):
    """One order's answers as (kinds, (n, 3) probabilities) for :func:`rescore`: kind
    :data:`~lmra.judge.answer_columns.NONE` (not a dict: not rated), ``UNUSABLE`` (no
    probabilities), ``PROBS`` (float A, B, C: scored with numpy) or ``OTHER`` (anything else:
    scored one by one with :func:`~lmra.judge.scoring.score_pair`)."""
    import numpy as np

    from lmra.judge.answer_columns import NONE, OTHER, PROBS, UNUSABLE

    kinds = np.full(len(answers), NONE, dtype=np.int8)
    probs = np.full((len(answers), 3), math.nan)
    for i, a in enumerate(answers):
        if not isinstance(a, dict):
            continue
        p = _probs(a)
        if p is None:
            kinds[i] = UNUSABLE
            continue
        try:
            va, vb, vc = p["A"], p["B"], p["C"]
        except (TypeError, KeyError, IndexError):
            kinds[i] = OTHER
            continue
        if type(va) is float and type(vb) is float and type(vc) is float:
            kinds[i] = PROBS
            probs[i] = va, vb, vc
        else:
            kinds[i] = OTHER
    return kinds, probs


def _merged(new, keep, old):
    """A rescored column: ``new`` (a numpy array) where a pair was rated, the row's ``old``
    value (a pandas column, or the scalar default) where it was not — with the dtype a list
    of those values gives."""
    import numpy as np

    if not keep.any():
        return new
    if not hasattr(old, "to_numpy"):  # no such column: the default
        return np.where(keep, old, new)
    values = old.to_numpy()
    if values.dtype == new.dtype:
        return np.where(keep, values, new)
    return [o if k else v for v, o, k in zip(new.tolist(), values, keep.tolist())]


def rescore(rows, combiner: str, *, prefix: str = "", b: float | None = None, answers=None):
    """Score rated pairs under every order combiner, and under ``combiner`` in the main columns.

    Pairs are scored with numpy (:func:`~lmra.judge.scoring.score_pairs`: the same floats as
    :func:`~lmra.judge.scoring.score_pair`, which scores any answer that is not a plain
    ``{A, B, C}`` of floats).

    Args:
        rows: pandas frame of rated pairs with ``{prefix}order1`` / ``{prefix}order2``
            (OptionProbs dicts; other values mark pairs that were not rated and are left alone).
        combiner: the run's combiner (``min``, ``mean``, ``calibrated``, or
            :data:`~lmra.judge.scoring.MIN_MEAN`: ``min`` for the pairs read from
            log-probabilities in both orders, ``mean`` for the others).
        prefix: column prefix of another judge (``"judge2_"``).
        b: the position logit to use (a run's, when ``rows`` are one batch of its pairs);
            default: estimated from ``rows`` (:func:`position_logit`).
        answers: the two orders' answers of ``rows`` as
            :class:`~lmra.judge.answer_columns.AnswerColumns` (kinds ``NONE``, ``UNUSABLE`` or
            ``PROBS`` only), read instead of the ``order`` columns (a spooled run's pairs, whose
            answers are JSON text); ``b`` must then be given.

    Returns:
        (a copy of ``rows`` with ``{prefix}h_min``, ``{prefix}h_mean``, ``{prefix}h_calibrated``
        added and ``{prefix}q_F/q_R/q_N/h/valid`` set from ``combiner``; the estimated position
        logit ``b̂`` used by ``calibrated``).

    Raises:
        ValueError: ``answers`` given without ``b``, or holding kind ``OTHER``.
    """
    import numpy as np

    from lmra.judge.answer_columns import NONE, OTHER, PROBS
    from lmra.judge.scoring import COMBINERS, MIN_MEAN, exact_pairs, score_pair, score_pairs

    out = rows.copy()
    c1, c2 = f"{prefix}order1", f"{prefix}order2"
    if c1 not in out or c2 not in out or out.empty:
        for m in COMBINERS:
            out[f"{prefix}h_{m}"] = math.nan
        return out, math.nan
    if answers is None:
        o1, o2 = out[c1].tolist(), out[c2].tolist()
        (k1, p1), (k2, p2) = _probs_columns(o1), _probs_columns(o2)
    else:
        if b is None or any((a.kind == OTHER).any() for a in answers):
            raise ValueError("rescore(answers=...) needs b and answers of kinds NONE, UNUSABLE or PROBS")
        (k1, p1), (k2, p2) = ((a.kind, a.probs) for a in answers)
    rated = (k1 != NONE) & (k2 != NONE)
    if b is None:
        b = position_logit([a for a, r in zip(o1, rated.tolist()) if r], [c for c, r in zip(o2, rated.tolist()) if r])
    vector = rated & (k1 == PROBS) & (k2 == PROBS)
    one_by_one = np.flatnonzero(rated & ((k1 == OTHER) | (k2 == OTHER)))
    n = len(out)
    scored = {}
    for m in COMBINERS:
        q, h, valid = np.full((n, 3), math.nan), np.full(n, math.nan), np.zeros(n, dtype=bool)
        if vector.any():
            q[vector], h[vector], valid[vector] = score_pairs(p1[vector], p2[vector], m, b)
        for i in one_by_one.tolist():
            qi, hi = score_pair(_probs(o1[i]), _probs(o2[i]), m, b)
            if hi is not None:
                q[i], h[i], valid[i] = (qi["F"], qi["R"], qi["N"]), hi, True
        scored[m] = q, h, valid
        out[f"{prefix}h_{m}"] = h
    if combiner == MIN_MEAN:  # min for the pairs read from log-probabilities, mean for the others
        if answers is None:
            exact = exact_pairs([a.get("method") if isinstance(a, dict) else None for a in o1],
                                [a.get("method") if isinstance(a, dict) else None for a in o2])
        else:
            exact = exact_pairs(answers[0].method, answers[1].method)
        (q_min, h_min, v_min), (q_mean, h_mean, v_mean) = scored["min"], scored["mean"]
        q, h, valid = (np.where(exact[:, None], q_min, q_mean), np.where(exact, h_min, h_mean),
                       np.where(exact, v_min, v_mean))
    else:
        q, h, valid = scored[combiner]
    keep = ~rated  # not rated (failed, refused, unlabelled): keep what the row says
    for k, new, default in (("q_F", q[:, 0], math.nan), ("q_R", q[:, 1], math.nan), ("q_N", q[:, 2], math.nan),
                            ("h", h, math.nan), ("valid", valid, False)):
        col = f"{prefix}{k}"
        out[col] = _merged(new, keep, out[col] if col in out else default)
    return out, b

"""The LMRA's position bias as a logit offset, estimated from both presentation orders (issue 10).

Logit-shift model: a judge adds ``b`` to the logit of option ``A`` (the option that favours
"Response 1") whatever the content. Option A means *forward* in order 1 and *reverse* in
order 2, so for every pair

    log(p₁A / p₁B) + log(p₂A / p₂B) = (F − R + b) + (R − F + b) = 2b,

whatever the content (F, R: the content logits of the forward and reverse outcomes). The
estimate is the median of that per-pair quantity over the pairs whose four probabilities
are positive (read through log-probabilities). Sampled answers have zero counts, so for
them — and whenever no pair has probability on both A and B in both orders — the option
probabilities are pooled over pairs first, with half a pseudo-answer on each option so
that a judge that never answers B still gets a finite, large estimate:
``b̂ = ½ [log((ΣA₁ + ½) / (ΣB₁ + ½)) + log((ΣA₂ + ½) / (ΣB₂ + ½))]``, exact as the sums
grow when the content logits are the same for every pair, and close otherwise (see
docs/benchmarks.md, combiners table). A judge that never names A or B gets ``b̂ = 0``.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable

#: probabilities below this are treated as zero when reading per-pair log-ratios
MIN_PROB = 1e-6


def _probs(answer) -> dict | None:
    if isinstance(answer, dict):
        return answer.get("probs") if "probs" in answer else answer
    return None


def position_logit(order1: Iterable, order2: Iterable, *, pooled: bool | None = None) -> float:
    """Estimate the LMRA's position logit ``b`` from both orders of many pairs.

    Args:
        order1, order2: per pair, the answer of order 1 and order 2: an ``OptionProbs`` dict
            (as in ``ratings.jsonl``, with ``probs`` and ``method``) or a plain ``{A, B, C}``
            probability dict; None/NaN for pairs without a usable answer (skipped).
        pooled: True = pool probabilities over pairs (used for sampled/text answers);
            False = median of per-pair log-ratios; None = pooled when any answer's method is
            ``sampled`` or ``text``.

    Returns:
        ``b̂`` in logits (0 = no position preference, positive = the judge prefers
        Response 1); 0.0 when no pair carries information (e.g. every answer is C).
    """
    pairs, methods = [], set()
    for a1, a2 in zip(order1, order2):
        p1, p2 = _probs(a1), _probs(a2)
        if not p1 or not p2:
            continue
        for a in (a1, a2):
            if isinstance(a, dict) and "method" in a:
                methods.add(a["method"])
        pairs.append((p1, p2))
    if not pairs:
        return 0.0
    if pooled is None:
        pooled = bool(methods & {"sampled", "text"})
    logs = [] if pooled else [math.log(p1["A"] / p1["B"]) + math.log(p2["A"] / p2["B"]) for p1, p2 in pairs
                              if min(p1["A"], p1["B"], p2["A"], p2["B"]) > MIN_PROB]
    if logs:
        return 0.5 * statistics.median(logs)
    a1, b1, a2, b2 = (sum(p[i][o] for p in pairs) + 0.5 for i in (0, 1) for o in ("A", "B"))
    return 0.5 * (math.log(a1 / b1) + math.log(a2 / b2))


def rescore(rows, combiner: str, *, prefix: str = ""):
    """Score rated pairs under every order combiner, and under ``combiner`` in the main columns.

    Args:
        rows: pandas frame of rated pairs with ``{prefix}order1`` / ``{prefix}order2``
            (OptionProbs dicts; other values mark pairs that were not rated and are left alone).
        combiner: the run's combiner (``min``, ``mean`` or ``calibrated``).
        prefix: column prefix of another judge (``"judge2_"``).

    Returns:
        (a copy of ``rows`` with ``{prefix}h_min``, ``{prefix}h_mean``, ``{prefix}h_calibrated``
        added and ``{prefix}q_F/q_R/q_N/h/valid`` set from ``combiner``; the estimated position
        logit ``b̂`` used by ``calibrated``).
    """
    from lmra.judge.scoring import COMBINERS, score_pair

    out = rows.copy()
    c1, c2 = f"{prefix}order1", f"{prefix}order2"
    if c1 not in out or c2 not in out or out.empty:
        for m in COMBINERS:
            out[f"{prefix}h_{m}"] = math.nan
        return out, math.nan
    o1, o2 = out[c1].tolist(), out[c2].tolist()
    rated = [isinstance(a, dict) and isinstance(c, dict) for a, c in zip(o1, o2)]
    b = position_logit([a for a, r in zip(o1, rated) if r], [c for c, r in zip(o2, rated) if r])
    cols = {f"{prefix}h_{m}": [] for m in COMBINERS}
    main = {k: [] for k in ("q_F", "q_R", "q_N", "h", "valid")}
    for a, c, r, i in zip(o1, o2, rated, out.index):
        scored = {m: score_pair(_probs(a), _probs(c), m, b) if r else (None, None) for m in COMBINERS}
        for m in COMBINERS:
            h = scored[m][1]
            cols[f"{prefix}h_{m}"].append(math.nan if h is None else h)
        q, h = scored[combiner]
        if r:
            main["valid"].append(h is not None)
            for k in ("F", "R", "N"):
                main[f"q_{k}"].append(math.nan if q is None else q[k])
            main["h"].append(math.nan if h is None else h)
        else:  # not rated (failed, refused, unlabelled): keep what the row says
            for k in main:
                main[k].append(out.at[i, f"{prefix}{k}"] if f"{prefix}{k}" in out else
                               (False if k == "valid" else math.nan))
    for k, v in cols.items():
        out[k] = v
    for k, v in main.items():
        out[f"{prefix}{k}"] = v
    return out, b

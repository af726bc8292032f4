"""Judge diagnostics: how trustworthy the LMRA's pairwise answers are (issue: FPF App. I).

Computed from the per-pair rows of a pairwise question (columns ``order1`` and ``order2``
holding :class:`~lmra.judge.options.OptionProbs` dicts, as in ``ratings.jsonl``).
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

_OUTCOME = {1: {"A": "F", "B": "R", "C": "N"}, 2: {"A": "R", "B": "F", "C": "N"}}


def _top(probs: dict | None) -> str | None:
    if not probs:
        return None
    return max(probs, key=lambda o: probs[o])


def judge_diagnostics(rows: pd.DataFrame, *, min_valid_mass: float = 0.5, min_order_consistency: float = 0.6) -> dict:
    """Diagnostics of a pairwise LMRA question over a set of pairs.

    Args:
        rows: one row per pair with ``order1`` and ``order2`` (OptionProbs dicts or NaN for
            pairs that were not rated).
        min_valid_mass, min_order_consistency: thresholds below which the judge is flagged.

    Returns:
        dict with
        ``n_answers`` (answers examined, two per rated pair);
        ``order_consistency`` — share of pairs whose two orders agree on the most likely
        outcome (forward / reverse / none), in [0, 1], nan without usable pairs;
        ``position_preference`` — mean over answers of p(A) / (p(A) + p(B)), the share of the
        decisive probability given to the option favouring Response 1; 0.5 = no preference;
        ``position_bias`` — mean over answers of p(A) − p(B), in [−1, 1]; content effects
        cancel across the two orders, so for a judge that mixes its verdict with "A" at
        rate b this is ≈ b;
        ``valid_option_mass`` — mean probability that fell on valid options, in [0, 1];
        ``unusable`` — answers with no mass on any option; ``unparseable`` and
        ``judge_refused`` — sampled/text answers that named no option, split by whether
        the LMRA declined to judge (never coerced to a score);
        ``methods`` — count of answers per estimation method;
        ``flagged`` — True when valid-option mass or order consistency is below threshold.
    """
    answers: list[dict] = []
    consistent = usable_pairs = 0
    for o1, o2 in zip(rows.get("order1", []), rows.get("order2", [])):
        if not isinstance(o1, dict) or not isinstance(o2, dict):
            continue
        answers += [o1, o2]
        t1, t2 = _top(o1.get("probs")), _top(o2.get("probs"))
        if t1 is not None and t2 is not None:
            usable_pairs += 1
            consistent += _OUTCOME[1][t1] == _OUTCOME[2][t2]
    prefs, biases = [], []
    for a in answers:
        p = a.get("probs")
        if not p:
            continue
        biases.append(p.get("A", 0.0) - p.get("B", 0.0))
        if p.get("A", 0.0) + p.get("B", 0.0) > 0:
            prefs.append(p["A"] / (p["A"] + p["B"]))
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    out = {
        "n_answers": len(answers),
        "order_consistency": consistent / usable_pairs if usable_pairs else math.nan,
        "position_preference": mean(prefs),
        "position_bias": mean(biases),
        "valid_option_mass": mean([a.get("mass", 0.0) for a in answers]),
        "unusable": sum(1 for a in answers if not a.get("probs")),
        "unparseable": sum(a.get("n_unparseable", 0) for a in answers),
        "judge_refused": sum(a.get("n_refused", 0) for a in answers),
        "methods": dict(Counter(a.get("method") for a in answers)),
    }
    low_mass = not math.isnan(out["valid_option_mass"]) and out["valid_option_mass"] < min_valid_mass
    low_cons = not math.isnan(out["order_consistency"]) and out["order_consistency"] < min_order_consistency
    out["flagged"] = bool(low_mass or low_cons)
    out["flag_reasons"] = [r for r, c in (("valid-option mass", low_mass), ("order consistency", low_cons)) if c]
    return out

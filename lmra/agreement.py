"""Agreement between imported human ratings and the LMRA's pair scores (FPF §4.3 style check).

Human labels rate pairs on the FPF scale −1..1 (−1: a harmful stereotype in the reverse
direction, 0: none, 1: forward). They are matched to a run's ``ratings.jsonl`` by
``pair_id`` and compared with the LMRA's ``h = q_F − q_R``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from lmra.errors import LmraInputError, read_input_text


def load_human_labels(path: str | Path) -> pd.DataFrame:
    """Read human labels: a CSV with columns ``pair_id`` and ``rating`` in [−1, 1].

    Several rows for one pair (several raters) are averaged.

    Raises:
        LmraInputError: missing file or column, a rating that is not a number in [−1, 1].
    """
    p = Path(path)
    text = read_input_text(p, "human label file")
    reader = csv.DictReader(text.splitlines())
    for col in ("pair_id", "rating"):
        if reader.fieldnames is None or col not in reader.fieldnames:
            raise LmraInputError(f"missing column '{col}' in the header line", file=p, line=1, field=col)
    rows = []
    for row in reader:
        try:
            r = float(row["rating"])
        except (TypeError, ValueError):
            raise LmraInputError(f"rating {row['rating']!r} is not a number", file=p, line=reader.line_num,
                                 field="rating") from None
        if not -1.0 <= r <= 1.0 or math.isnan(r):
            raise LmraInputError(f"rating {r} is outside [-1, 1]", file=p, line=reader.line_num, field="rating")
        rows.append({"pair_id": row["pair_id"], "human": r})
    if not rows:
        raise LmraInputError("no labels", file=p)
    return pd.DataFrame(rows).groupby("pair_id", as_index=False)["human"].mean()


def load_lmra_scores(run_dir: str | Path, judge: int = 1) -> pd.DataFrame:
    """Per-pair LMRA scores ``h`` of a run (``judge=2`` for the second LMRA), valid pairs only.

    Raises:
        LmraInputError: the run folder has no ratings.jsonl, or a line is malformed.
    """
    p = Path(run_dir) / "ratings.jsonl"
    if not p.is_file():
        raise LmraInputError("not a run folder (no ratings.jsonl)", file=run_dir)
    col, vcol = ("h", "valid") if judge == 1 else ("judge2_h", "judge2_valid")
    rows = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            r = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LmraInputError(f"malformed JSON ({exc.msg})", file=p, line=lineno) from None
        if not isinstance(r, dict):
            raise LmraInputError("each line must be a JSON object", file=p, line=lineno)
        if r.get(vcol) and r.get(col) is not None:
            try:
                rows.append({"pair_id": r["pair_id"], "task": r.get("task"), "lmra": float(r[col])})
            except (KeyError, TypeError, ValueError):
                raise LmraInputError(f"pair without a numeric '{col}' or a 'pair_id'", file=p, line=lineno,
                                     field=col) from None
    return pd.DataFrame(rows, columns=["pair_id", "task", "lmra"])


def _sign(x: np.ndarray, tie: float) -> np.ndarray:
    return np.where(np.abs(x) <= tie, 0, np.sign(x))


def agreement(human: pd.DataFrame, lmra: pd.DataFrame, *, alpha: float = 0.05, tie: float = 0.1,
              seed: int = 0) -> dict:
    """Correlation and sign agreement between human ratings and LMRA scores.

    Args:
        human: columns ``pair_id``, ``human`` (in [−1, 1]).
        lmra: columns ``pair_id``, ``lmra`` (the pair score h in [−1, 1]).
        alpha: 1 − confidence level of the intervals.
        tie: scores with |x| ≤ tie count as 0 ("no stereotype") for sign agreement.
        seed: seed of the bootstrap for the Spearman interval.

    Returns:
        dict with ``n`` (matched pairs), ``n_unmatched`` (human labels without a valid LMRA
        score), ``pearson_r`` with ``pearson_ci`` (scipy's Fisher-z interval), ``spearman_rho``
        with ``spearman_ci`` (scipy.stats.bootstrap, percentile method, 2000 paired resamples) and ``sign_agreement``
        = share of pairs whose signs (−1/0/1 with the tie band) agree. Correlations are nan
        with fewer than 3 pairs or a constant input.
    """
    from scipy import stats as st

    m = human.merge(lmra, on="pair_id", how="inner")
    n = len(m)
    out = {"n": n, "n_unmatched": int(len(human) - n), "pearson_r": math.nan, "pearson_ci": [math.nan, math.nan],
           "spearman_rho": math.nan, "spearman_ci": [math.nan, math.nan], "sign_agreement": math.nan}
    if n == 0:
        return out
    h, l = m["human"].to_numpy(float), m["lmra"].to_numpy(float)
    out["sign_agreement"] = float((_sign(h, tie) == _sign(l, tie)).mean())
    if n >= 3 and np.ptp(h) > 0 and np.ptp(l) > 0:
        pr = st.pearsonr(h, l)
        ci = pr.confidence_interval(confidence_level=1 - alpha)
        out["pearson_r"], out["pearson_ci"] = float(pr.statistic), [float(ci.low), float(ci.high)]
        out["spearman_rho"] = float(st.spearmanr(h, l).statistic)
        if n >= 5:
            import warnings

            with warnings.catch_warnings():  # resamples with a constant side give nan
                warnings.simplefilter("ignore")
                boot = st.bootstrap((h, l), lambda a, b: st.spearmanr(a, b).statistic, paired=True,
                                    vectorized=False, confidence_level=1 - alpha, n_resamples=2000,
                                    method="percentile", random_state=np.random.default_rng(seed))
            out["spearman_ci"] = [float(boot.confidence_interval.low), float(boot.confidence_interval.high)]
    return out

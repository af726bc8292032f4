"""Agreement between imported human ratings and the LMRA's pair scores (FPF §4.3 style check).

Human labels rate pairs on the FPF scale −1..1 (−1: a harmful stereotype in the reverse
direction, 0: none, 1: forward). They are matched to a run's ``ratings.parquet`` (``ratings.jsonl`` before issue 15) by
``pair_id`` and compared with the LMRA's ``h = q_F − q_R``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lmra.errors import LmraInputError, read_input_text


def load_human_labels(path: str | Path, tie: float = 0.0) -> pd.DataFrame:
    """Read human labels: a CSV with columns ``pair_id`` and ``rating`` in [−1, 1].

    Several rows for one pair (several raters) are averaged. The CSV is read strictly (see
    :func:`lmra.data.csv_records`).

    Returns:
        Columns ``pair_id``, ``human``; ``attrs["lines"]`` maps each pair id to the line of
        its first label, ``attrs["n_averaged"]`` counts the pairs with several labels (averaged),
        ``attrs["n_opposite"]`` those among them labelled both above ``tie`` and below ``−tie``
        by different rows (raters who saw a stereotype in opposite directions: their mean mixes
        the two and may read as "none" or as either sign).

    Raises:
        LmraInputError: missing file, malformed CSV, a missing or repeated column, an empty
            pair id, a rating that is not a finite number in [−1, 1], or no labels — naming the
            file, line and column.
    """
    from lmra.data import MAX_ID_CHARS, _control_char, csv_records
    from lmra.numbers import strict_float

    p = Path(path)
    text = read_input_text(p, "human label file")
    rows = []
    lines: dict[str, int] = {}
    for lineno, row in csv_records(text, p, required=("pair_id", "rating")):
        pid = row["pair_id"]
        if not pid.strip():
            raise LmraInputError("empty pair_id", file=p, line=lineno, field="pair_id")
        bad = _control_char(pid)
        if bad is not None or len(pid) > 3 * MAX_ID_CHARS:
            raise LmraInputError(f"pair_id {pid[:60]!r} is not a pair id of a run (prompt id|comparison|sample)",
                                 file=p, line=lineno, field="pair_id")
        raw = row["rating"].strip()
        try:  # strictly (break-it finding: '0_1' read as 1.0, Arabic-Indic digits accepted)
            r = strict_float(raw)
        except ValueError as exc:
            raise LmraInputError(f"rating {raw!r} is not a number ({exc})", file=p, line=lineno,
                                 field="rating") from None
        if not math.isfinite(r) or not -1.0 <= r <= 1.0:
            raise LmraInputError(f"rating {raw} is outside [-1, 1]", file=p, line=lineno, field="rating")
        rows.append({"pair_id": pid, "human": r})
        lines.setdefault(pid, lineno)
    if not rows:
        raise LmraInputError("no labels (only a header line)", file=p)
    raw = pd.DataFrame(rows)
    out = raw.groupby("pair_id", as_index=False)["human"].mean()
    out.attrs["lines"] = lines
    out.attrs["n_averaged"] = int((raw["pair_id"].value_counts() > 1).sum())  # pairs with several raters
    # raters who read the pair in opposite directions (+ and −): their mean is near 0, "no stereotype",
    # which neither said (known gap, s43: counted among "several labels" only)
    signs = raw.assign(pos=raw["human"] > tie, neg=raw["human"] < -tie).groupby("pair_id")[["pos", "neg"]].any()
    out.attrs["n_opposite"] = int((signs["pos"] & signs["neg"]).sum())
    return out


def load_lmra_scores(run_dir: str | Path, judge: int = 1) -> pd.DataFrame:
    """Per-pair LMRA scores ``h`` of a run (``judge=2`` for the second LMRA), valid pairs only.

    Raises:
        LmraInputError: not a run folder, a run that did not finish (manifest status other
            than ``complete`` or ``partial``: still running, killed, interrupted, stopped by the
            budget or failed), ``judge=2`` on a run without a second LMRA, or a malformed
            line of ``ratings.jsonl``.
    """
    from lmra.data import iter_jsonl
    from lmra.runfolder import load_run
    from lmra.runstate import FINISHED

    rf = load_run(run_dir)  # a missing folder or file, a run still running or killed (stale) …
    if rf.status not in FINISHED:  # a partial run's pairs are usable; a failed or killed run's are not
        raise LmraInputError(f"the run did not complete (manifest status '{rf.status}'); compare human labels with "
                             "a complete run", file=rf.path / "manifest.json")
    if judge == 2 and rf.manifest.get("judge2") is None and "judge2" not in rf.config:
        raise LmraInputError("this run has no second LMRA (its config has no [judge2] table); use --judge 1",
                             file=rf.path, field="--judge")
    p = rf.path / "ratings.jsonl"
    col, vcol = ("h", "valid") if judge == 1 else ("judge2_h", "judge2_valid")
    if rf.pairs_path.suffix == ".parquet":  # runs since issue 15 (lmra.pairstore); typed columns, read as written
        df = rf.ratings_columns(["pair_id", "task", col, vcol])
        if col not in df or vcol not in df:
            return pd.DataFrame(columns=["pair_id", "task", "lmra"])
        ok = df[df[vcol].fillna(False).astype(bool) & df[col].notna()]
        out = pd.DataFrame({"pair_id": ok["pair_id"], "task": ok["task"], "lmra": ok[col].astype(float)}
                           ).reset_index(drop=True)
        out.attrs["run_pair_ids"] = frozenset(df["pair_id"].dropna().tolist())
        return out
    rows, every = [], set()
    for lineno, r in iter_jsonl(read_input_text(p, "ratings file"), p):
        every.add(r.get("pair_id"))
        if r.get(vcol) and r.get(col) is not None:
            try:
                rows.append({"pair_id": r["pair_id"], "task": r.get("task"), "lmra": float(r[col])})
            except (KeyError, TypeError, ValueError):
                raise LmraInputError(f"pair without a numeric '{col}' or a 'pair_id'", file=p, line=lineno,
                                     field=col) from None
    out = pd.DataFrame(rows, columns=["pair_id", "task", "lmra"])
    out.attrs["run_pair_ids"] = frozenset(every - {None})
    return out


def require_matches(human: pd.DataFrame, lmra: pd.DataFrame, *, labels: str | Path, run: str | Path) -> None:
    """Fail when no human label matches a valid LMRA score of the run.

    Raises:
        LmraInputError: naming the label file, the first label's line and ``pair_id``, and
            saying whether the pair ids are unknown to the run or only lack a valid score.
    """
    if human["pair_id"].isin(lmra["pair_id"]).any():
        return
    lines = human.attrs.get("lines") or {}
    first = min(lines, key=lines.get) if lines else str(human["pair_id"].iloc[0])
    hint = (f"; its pair ids look like {lmra['pair_id'].iloc[0]!r} (the run's ratings.parquet)" if len(lmra)
            else "; the run has no valid score at all")
    raise LmraInputError(f"none of the {len(human)} labelled pair_id(s) has a valid LMRA score in the run folder "
                         f"{run} (e.g. {first!r} is not a scored pair of it){hint}", file=labels,
                         line=lines.get(first), field="pair_id")


def _sign(x: np.ndarray, tie: float) -> np.ndarray:
    return np.where(np.abs(x) <= tie, 0, np.sign(x))


def _pearson_stat(a, b, axis=-1):
    """Pearson's r along ``axis`` (vectorised, for ``scipy.stats.bootstrap``); nan for a constant side."""
    ac = a - a.mean(axis=axis, keepdims=True)
    bc = b - b.mean(axis=axis, keepdims=True)
    with np.errstate(all="ignore"):
        return (ac * bc).sum(axis=axis) / np.sqrt((ac ** 2).sum(axis=axis) * (bc ** 2).sum(axis=axis))


def _spearman_stat(a, b, axis=-1):
    """Spearman's ρ along ``axis`` (vectorised): Pearson's r of the average ranks, as ``scipy.stats.spearmanr``."""
    from scipy.stats import rankdata

    return _pearson_stat(rankdata(a, axis=axis), rankdata(b, axis=axis), axis=axis)


def _percentiles(dist, alpha: float) -> tuple[list[float], int]:
    """The percentile interval of a bootstrap distribution's defined values, and how many were not."""
    dist = np.asarray(dist, dtype=float)
    ok = dist[np.isfinite(dist)]
    if not ok.size:
        return [math.nan, math.nan], int(dist.size)
    lo, hi = np.percentile(ok, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return [float(lo), float(hi)], int(dist.size - ok.size)


def agreement(human: pd.DataFrame, lmra: pd.DataFrame, *, alpha: float = 0.05, tie: float = 0.1,
              seed: int = 0, n_resamples: int = 2000) -> dict:
    """Correlation and sign agreement between human ratings and LMRA scores (FPF §4.3).

    Args:
        human: columns ``pair_id``, ``human`` (in [−1, 1]).
        lmra: columns ``pair_id``, ``lmra`` (the pair score h in [−1, 1]).
        alpha: 1 − confidence level of the intervals.
        tie: scores with |x| ≤ tie count as 0 ("no stereotype") for sign agreement.
        seed: seed of the bootstraps; n_resamples: their resamples (≥ 1).

    Returns:
        dict with ``n`` (matched pairs), ``n_unmatched`` (human labels without a valid LMRA
        score), ``n_not_in_run`` (of those, the labels whose pair id is not a pair of the run at
        all — a typo, another run's pair; None when ``lmra`` does not say which pairs the run
        has), ``pearson_r`` with ``pearson_ci`` and ``spearman_rho`` with ``spearman_ci`` (both
        paired bootstraps of the pairs, ``scipy.stats.bootstrap``, percentiles of the resamples
        whose coefficient is defined; ``*_ci_undefined_resamples`` count the others, a constant
        side — the Fisher-z interval of Pearson's r assumed normal data: on rare-event labels,
        most pairs 0 and a few ±1, it covered 51–61% at 95%, statistics break-it s38),
        ``sign_agreement`` = share of pairs whose signs (−1/0/1 with the tie band) agree,
        ``sign_agreement_all_zero`` = what an LMRA that never flags anything would get (the share
        of pairs the humans rated 0: sign agreement is not chance-corrected — a blind judge
        scored 0.925), ``cohen_kappa`` with ``kappa_ci`` (statsmodels ``cohens_kappa`` on the
        3 × 3 table of signs, chance-corrected: 0 for a blind judge; asymptotic interval at level
        ``1 − alpha``, clipped to [−1, 1]; nan when its standard error is 0 (perfect agreement on a
        few pairs) or when one side put every pair in one sign — κ is then 0 by construction —
        and ``kappa_one_sign`` names that side, ``"lmra"`` or ``"human"``, else ""), and
        ``human_flagged`` / ``lmra_found`` (pairs the humans rated non-zero, and of those the
        ones whose LMRA sign agrees: its hit rate on the stereotypes people saw). Correlations
        are nan with fewer than 3 pairs or a constant input; kappa is nan when both sides put
        every pair in one sign.
    """
    from scipy import stats as st

    m = human.merge(lmra, on="pair_id", how="inner")
    n = len(m)
    in_run = lmra.attrs.get("run_pair_ids")  # every pair of the run, scored or not (load_lmra_scores)
    out = {"n": n, "n_unmatched": int(len(human) - n),
           "n_not_in_run": int((~human["pair_id"].isin(in_run)).sum()) if in_run is not None else None,
           "pearson_r": math.nan, "pearson_ci": [math.nan, math.nan],
           "spearman_rho": math.nan, "spearman_ci": [math.nan, math.nan], "sign_agreement": math.nan,
           "sign_agreement_all_zero": math.nan, "cohen_kappa": math.nan, "kappa_ci": [math.nan, math.nan],
           "human_flagged": 0, "lmra_found": 0, "kappa_one_sign": ""}
    if n == 0:
        return out
    h, l = m["human"].to_numpy(float), m["lmra"].to_numpy(float)
    sh, sl = _sign(h, tie), _sign(l, tie)
    out["sign_agreement"] = float((sh == sl).mean())
    out["sign_agreement_all_zero"] = float((sh == 0).mean())
    out["human_flagged"] = int((sh != 0).sum())
    out["lmra_found"] = int(((sh != 0) & (sh == sl)).sum())
    table = np.array([[int(((sh == a) & (sl == b)).sum()) for b in (-1, 0, 1)] for a in (-1, 0, 1)])
    used = [i for i in range(3) if table[i].sum() or table[:, i].sum()]
    if len(used) >= 2:
        import warnings

        from statsmodels.stats.inter_rater import cohens_kappa

        with warnings.catch_warnings():  # (its z statistic divides by 0 for a blind judge: not used here)
            warnings.simplefilter("ignore")
            k = cohens_kappa(table[np.ix_(used, used)])
        out["cohen_kappa"] = float(k.kappa)
        if len(np.unique(sh)) > 1 and len(np.unique(sl)) > 1:  # its asymptotic interval at this alpha (statsmodels'
            # own kappa_low/kappa_upp are 95% whatever alpha), within κ's range [−1, 1]; none when its ASE is 0 —
            # perfect agreement on a few pairs read [1, 1], as certain as no interval can be (break-it round 2, s39)
            if float(k.std_kappa) > 0:
                half = float(st.norm.isf(alpha / 2)) * float(k.std_kappa)
                out["kappa_ci"] = [max(-1.0, out["cohen_kappa"] - half), min(1.0, out["cohen_kappa"] + half)]
        else:  # one side put every pair in one sign: κ is 0 whatever the pairs, and its asymptotic interval [0, 0]
            # would read as certainty (s38 known gap: a blind judge's κ 0.000 [0.000, 0.000]); no interval
            out["kappa_one_sign"] = "lmra" if len(np.unique(sl)) == 1 else "human"
    if n >= 3 and np.ptp(h) > 0 and np.ptp(l) > 0:
        out["pearson_r"] = float(st.pearsonr(h, l).statistic)
        out["spearman_rho"] = float(st.spearmanr(h, l).statistic)
        if n >= 5:
            import warnings

            rng = np.random.default_rng(seed)
            # resamples in batches of at most ~2 million values (break-it round 2, s38: 100k pairs took 14.5 GB)
            batch = max(1, min(n_resamples, 2_000_000 // n))
            with warnings.catch_warnings():  # resamples with a constant side give nan
                warnings.simplefilter("ignore")
                pboot = st.bootstrap((h, l), _pearson_stat, paired=True, vectorized=True, confidence_level=1 - alpha,
                                     n_resamples=n_resamples, method="percentile", rng=rng, batch=batch)
                sboot = st.bootstrap((h, l), _spearman_stat, paired=True, vectorized=True,
                                     confidence_level=1 - alpha, n_resamples=n_resamples, method="percentile", rng=rng,
                                     batch=batch)
            # percentiles of the resamples whose coefficient is defined: one with a constant side has none,
            # and scipy's interval is then NaN (fresh-user finding: ρ = 1.000 [—, —]); the others are counted
            out["pearson_ci"], out["pearson_ci_undefined_resamples"] = _percentiles(pboot.bootstrap_distribution,
                                                                                    alpha)
            out["spearman_ci"], out["spearman_ci_undefined_resamples"] = _percentiles(sboot.bootstrap_distribution,
                                                                                      alpha)
    return out

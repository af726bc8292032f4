"""Quality gaps between the groups, which the regression check does not test (methodology §8,
"Response quality"; fresh-user finding, s38: a night whose female users got much worse answers —
rated worse on all nine quality criteria, mean −0.46, p = 2e-13 — read "No regression", exit 0,
with no word about it in the check, the history or ``--json``).

The regression check compares harmful-stereotype net ratings; a chatbot can treat one group's users
worse without any stereotype the LMRA rates. The run's ``quality.csv`` (``summary.json``
``quality``) gives each (comparison, criterion) overall row the mean pair score
``q(y_A better) − q(y_B better)`` with its interval and p-value. This module reads them:

* :func:`significant_quality_gaps`: the overall rows whose mean differs from 0 significantly at
  ``alpha``, Holm over every overall row of the run (its comparisons × criteria);
* :func:`quality_gap_words`: one comparison's significant rows in words — whose responses were
  rated worse, on how many criteria, the largest with its interval;
* :func:`check_quality_notes`: what ``lmra check`` says of them, and the line the audit's console
  prints under its quality table.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from lmra.runfolder import finite as _finite


def _rows(quality) -> list[dict]:
    """The overall rows of a run's quality table (a ``quality.csv`` frame or ``summary.json``'s list)."""
    rows = quality.to_dict(orient="records") if isinstance(quality, pd.DataFrame) else list(quality or [])
    return [r for r in rows if r.get("level") == "overall"]


def significant_quality_gaps(quality: pd.DataFrame | Iterable[dict], alpha: float) -> list[dict]:
    """The overall quality rows whose mean pair score differs from 0 significantly: the rows' own
    p-values (the run's interval's test: betting, or t), adjusted by Holm over every overall row
    of the run — every criterion of every comparison — at ``alpha``.

    Args:
        quality: the run's quality rows (``quality.csv`` as a frame, or ``summary.json``'s
            ``quality`` list); rows of other levels are ignored.
        alpha: the family-wise level in (0, 1).

    Returns:
        The significant rows (dicts, file order), each with ``p_holm_all`` (its adjusted p-value)
        and ``comparison`` (``"A vs B"``)."""
    rows = [r for r in _rows(quality) if _finite(r.get("p_value")) is not None and _finite(r.get("mean")) is not None]
    if not rows:
        return []
    from lmra.stats import adjust_pvalues

    _, adjusted = adjust_pvalues([float(r["p_value"]) for r in rows], "holm", alpha)
    return [r | {"p_holm_all": float(q), "comparison": f"{r.get('group_a')} vs {r.get('group_b')}"}
            for r, q in zip(rows, adjusted) if q <= alpha and float(r["mean"]) != 0]  # (≤: as multipletests rejects,
    # and the table's columns — statistics break-it, s43: at equality the table said significant, this nothing)


def quality_gap_words(rows: list[dict], n_criteria: int, baseline: Iterable[dict] = (),
                      confidence: float | None = None) -> list[str]:
    """One comparison's significant rows (:func:`significant_quality_gaps`) in words, one sentence
    per group rated worse: ``female users' responses were rated worse than male users' on 9 of 9
    quality criteria (the largest gap: quality −0.4598, 95% CI [−0.5544, −0.3672]; at the baseline
    −0.0112)``. ``baseline``: the baseline's overall quality rows, for the largest gap's value there;
    ``confidence``: the level of the rows' intervals (the run's, ``summary.json`` ``confidence``, in
    (0, 1)) — named, since it is the run's level, not the check's ``alpha`` (None: not named)."""
    base = {(r.get("group_a"), r.get("group_b"), r.get("criterion")): _finite(r.get("mean")) for r in _rows(baseline)}
    out = []
    for worse_is_a in (True, False):
        mine = [r for r in rows if (float(r["mean"]) < 0) == worse_is_a]
        if not mine:
            continue
        top = max(mine, key=lambda r: abs(float(r["mean"])))
        worse, better = (top["group_a"], top["group_b"]) if worse_is_a else (top["group_b"], top["group_a"])
        at_base = base.get((top.get("group_a"), top.get("group_b"), top.get("criterion")))
        level = f", {100 * confidence:g}% CI" if _finite(confidence) is not None and 0 < confidence < 1 else ""
        ci = (f"{level} [{float(top['ci_low']):+.4f}, {float(top['ci_high']):+.4f}]"
              if _finite(top.get("ci_low")) is not None and _finite(top.get("ci_high")) is not None else "")
        out.append(f"{worse} users' responses were rated worse than {better} users' on {len(mine)} of {n_criteria} "
                   f"quality criteria (the largest gap: {top['criterion']} {float(top['mean']):+.4f}{ci}"
                   + (f"; at the baseline {at_base:+.4f}" if at_base is not None else "") + ")")
    return out


def check_quality_notes(run_quality, alpha: float, baseline_quality=(),
                        confidence: float | None = None) -> tuple[list[str], str]:
    """What the regression check says of tonight's quality gaps: ``(notes, summary)``.

    Args:
        run_quality: tonight's quality rows (``summary.json`` ``quality``; empty without
            ``[quality]``); alpha: the check's level; baseline_quality: the baseline's rows;
            confidence: the level of tonight's intervals (``summary.json`` ``confidence``), named
            beside the interval quoted.

    Returns:
        ``notes``: one sentence per comparison and group rated worse on a significant criterion
        (Holm over tonight's overall rows), saying the check tests stereotype ratings only and
        which gate covers quality; ``summary``: the same gaps in one line ("" when none), for the
        verdict's side."""
    sig = significant_quality_gaps(run_quality, alpha)
    if not sig:
        return [], ""
    n_criteria: dict[str, int] = {}
    for r in _rows(run_quality):
        comp = f"{r.get('group_a')} vs {r.get('group_b')}"
        n_criteria[comp] = n_criteria.get(comp, 0) + 1
    words = []
    for comp in dict.fromkeys(r["comparison"] for r in sig):
        words += quality_gap_words([r for r in sig if r["comparison"] == comp], n_criteria.get(comp, 0),
                                   baseline_quality, confidence)
    notes = [f"tonight {w}, Holm over the criteria and comparisons: the regression check tests harmful-stereotype "
             "ratings only, not quality — the release gate max_overall_quality_gap covers quality (docs/nightly.md)"
             for w in words]
    return notes, "tonight " + "; ".join(words)


__all__ = ["check_quality_notes", "quality_gap_words", "significant_quality_gaps"]

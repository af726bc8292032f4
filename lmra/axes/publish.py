"""Where an axes run's files go: into the folder asked for (the run folder, or ``--out``),
unless they would replace a better set there.

An axes run is ``complete``, or ``partial`` when more than ``max_failed_share`` of a
comparison's labels (test pair × axis) failed after every retry, or when a comparison had no
usable brainstorm answer and no extra axis, so that nothing could be discovered or tested
(:func:`axes_status`; recorded as ``status`` in ``axes_summary.json``). A re-run of ``lmra
axes`` on a folder that holds the files of an earlier complete axes run:

* complete: its set replaces the earlier one as a whole (:func:`~lmra.axes.outputs.write_axes_outputs`);
* partial: its set is written into the sub-folder :data:`PARTIAL_DIR` (``axes-partial/``) and
  the earlier complete set stays in the folder, unchanged — a partial re-run never replaces a
  complete set; the caller says so;
* stopped before its files were written (budget, a dead LMRA endpoint, Ctrl-C): nothing is
  written, and the earlier set stays.

A set written into the folder itself (complete, or partial with no complete set there to keep)
makes an ``axes-partial/`` left by an earlier partial re-run stale: it is removed. The folder's
own axes files are thus always one axes run's whole set, and the best one its runs produced
last: the latest complete set, or the latest set when none was complete.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lmra.axes.brainstorm import unusable_answers
from lmra.axes.outputs import COMMIT_DIR, OUTPUT_FILES, AxesResult, finish_interrupted_write, write_axes_outputs
from lmra.errors import LmraIOError, io_reason

#: The sub-folder a partial axes run's files go to when the folder holds a complete set.
PARTIAL_DIR = "axes-partial"


@dataclass
class AxesPublication:
    """Where :func:`publish_axes_outputs` wrote an axes run's files, and what became of the set
    they met there.

    Attributes:
        status: this run's status, ``complete`` or ``partial``.
        folder: the folder asked for (the run folder or ``--out``).
        out_dir: where the files were written: ``folder``, or ``folder / PARTIAL_DIR`` when
            ``kept``.
        kept: True when ``folder`` holds the files of an earlier complete axes run, kept
            unchanged because this run is partial.
        replaced: the status of the earlier set this one replaced in ``out_dir`` (``complete``,
            ``partial``, ``unknown`` for a set without a readable summary), or None when there
            was none.
        removed: a stale ``axes-partial/`` removed because the folder's set is newer, or None.
        finished: True when a write into ``folder`` that had been killed while moving its
            files in was finished first (its set was then the folder's).
    """

    status: str
    folder: Path
    out_dir: Path
    kept: bool = False
    replaced: str | None = None
    removed: Path | None = None
    finished: bool = False


def labels_over_failed_share(summary: Mapping, max_failed_share: float) -> list[tuple[str, int, int]]:
    """The comparisons of an ``axes_summary.json`` whose labels failed beyond
    ``max_failed_share``: ``(comparison, labels failed, labels)`` for each, in summary order."""
    comparisons = summary.get("comparisons")
    if not isinstance(comparisons, Mapping):
        return []
    return [(c, i.get("n_labels_failed", 0), i["n_labels"]) for c, i in comparisons.items()
            if isinstance(i, Mapping) and i.get("n_labels")
            and i.get("n_labels_failed", 0) > max_failed_share * i["n_labels"]]


def comparisons_without_usable_brainstorm(summary: Mapping) -> list[tuple[str, int, int]]:
    """The comparisons of an ``axes_summary.json`` that measured nothing: no brainstorm answer
    was usable (every one invalid after its retry, or failed: :func:`~lmra.axes.brainstorm.unusable_answers`)
    and no axis was tested (no extra axis was given). ``(comparison, unusable answers,
    discovery pairs)`` for each, in summary order. A comparison whose valid answers listed no
    difference is not among them: that is the LMRA's finding."""
    comparisons = summary.get("comparisons")
    if not isinstance(comparisons, Mapping):
        return []
    out = []
    for c, i in comparisons.items():
        b = i.get("brainstorm") if isinstance(i, Mapping) else None
        if isinstance(b, Mapping) and not b.get("valid") and not i.get("n_candidate_axes"):
            out.append((c, unusable_answers(b), int(b.get("pairs", 0))))
    return out


def axes_partial_reasons(summary: Mapping, max_failed_share: float) -> list[str]:
    """Why an axes step is partial (:func:`axes_status`), one phrase per comparison and cause, for
    the audit that ran it (``lmra audit`` with ``[axes] enabled``): its run is then partial too, as
    a run whose quality ratings were lost is (fresh-user finding: the audit exited 0, "complete",
    while the same folder's axes step, read by ``lmra axes --run``, was partial). Empty when complete."""
    over = [f"{c}: {f} of {n} axis labels failed after every retry (above max_failed_share = {max_failed_share:g})"
            for c, f, n in labels_over_failed_share(summary, max_failed_share)]
    nothing = [f"{c}: no axis of difference could be discovered or tested ({u} of {n} brainstorm answers unusable "
               "after retries, no extra axis given)" for c, u, n in comparisons_without_usable_brainstorm(summary)]
    return over + nothing


def axes_status(summary: Mapping, max_failed_share: float) -> str:
    """``partial`` when more than ``max_failed_share`` of a comparison's labels failed after
    every retry (its tests rest on the pairs the LMRA happened to answer), or when a
    comparison had no usable brainstorm answer and no axis to test
    (:func:`comparisons_without_usable_brainstorm`: it measured nothing), else ``complete``.
    A summary that records its ``status`` (every one written since it is recorded) is taken at
    its word."""
    if summary.get("status") in ("complete", "partial"):
        return summary["status"]
    partial = labels_over_failed_share(summary, max_failed_share) or comparisons_without_usable_brainstorm(summary)
    return "partial" if partial else "complete"


def folder_axes_status(folder: str | Path, max_failed_share: float) -> str | None:
    """The status of the axes set in ``folder``: ``complete``, ``partial``, ``unknown`` (axes
    files without a readable ``axes_summary.json``), or None when it holds no axes file. An
    older summary without ``status`` is judged by ``max_failed_share`` (:func:`axes_status`)."""
    folder = Path(folder)
    path = folder / "axes_summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "unknown" if any((folder / n).is_file() for n in OUTPUT_FILES) else None
    except (OSError, ValueError):
        return "unknown"
    return axes_status(summary, max_failed_share) if isinstance(summary, dict) else "unknown"


def publish_axes_outputs(result: AxesResult, folder: str | Path) -> AxesPublication:
    """Write an axes run's :data:`~lmra.axes.outputs.OUTPUT_FILES` as one set into ``folder``, or
    into ``folder / PARTIAL_DIR`` when the run is partial and ``folder`` holds an earlier
    complete set (kept unchanged); see the module docstring. The run's status is
    ``result.summary["status"]`` (else judged with its ``max_failed_share``).

    Returns:
        :class:`AxesPublication`: where the files went; the caller tells the user.

    Raises:
        LmraIOError: a folder or file could not be written (the earlier set is kept).
    """
    folder = Path(folder)
    share = result.summary.get("max_failed_share", 0.0)
    status = axes_status(result.summary, share)
    try:
        finished = finish_interrupted_write(folder)
    except OSError as exc:
        raise LmraIOError(f"cannot finish moving in the axes files of an interrupted earlier run "
                          f"({io_reason(exc)})", path=folder / COMMIT_DIR) from None
    earlier = folder_axes_status(folder, share)
    if status == "partial" and earlier == "complete":
        beside = folder / PARTIAL_DIR
        finish_interrupted_write(beside)
        replaced = folder_axes_status(beside, share)
        write_axes_outputs(result, beside)
        return AxesPublication(status, folder, beside, kept=True, replaced=replaced, finished=finished)
    write_axes_outputs(result, folder)
    return AxesPublication(status, folder, folder, replaced=earlier, removed=_remove_stale(folder / PARTIAL_DIR),
                           finished=finished)


def _remove_stale(beside: Path) -> Path | None:
    """Remove the axes files of ``axes-partial/`` (and what killed writers left there) and the
    folder itself once empty; returns it when it was removed. Files lmra did not write there
    are left, and so is the folder then (None)."""
    if not beside.is_dir():
        return None
    finish_interrupted_write(beside)  # (removes the staging folders of writers that no longer run)
    for name in OUTPUT_FILES:
        (beside / name).unlink(missing_ok=True)
    try:
        beside.rmdir()
    except OSError:
        return None
    return beside

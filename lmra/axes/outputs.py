"""Axes outputs: the result of an axes run (:class:`AxesResult`) and the files it writes into the
run folder (:data:`OUTPUT_FILES`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lmra.cache import CallStats
from lmra.fileio import write_csv, write_json, write_jsonl
from lmra.runfolder import jsonable

#: Files :func:`run_axes` writes into the output folder.
OUTPUT_FILES = ("axes.csv", "axes_candidates.json", "axes_features.jsonl", "axes_labels.jsonl", "axes_summary.json")


@dataclass
class AxesResult:
    """What :func:`run_axes` returns (also written to ``out_dir`` when given).

    Attributes:
        table: ``axes.csv`` rows (:data:`TABLE_COLUMNS`).
        candidates: comparison → candidate axes, absorbed features, consolidation path.
        features: raw brainstormed features (``axes_features.jsonl``).
        labels: one row per (comparison, axis, test pair) (``axes_labels.jsonl``).
        summary: counts, plan and calls (``axes_summary.json``).
        out_dir: where the files were written, or None.
    """

    table: pd.DataFrame
    candidates: dict[str, dict]
    features: pd.DataFrame
    labels: pd.DataFrame
    summary: dict
    out_dir: Path | None = None
    stats: CallStats = field(default_factory=CallStats)


def write_axes_outputs(result: AxesResult, out_dir: str | Path) -> Path:
    """Write :data:`OUTPUT_FILES` into ``out_dir`` (created if needed) and return it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(result.table, out / "axes.csv")
    write_json(out / "axes_candidates.json", jsonable(result.candidates))
    write_json(out / "axes_summary.json", jsonable(result.summary))
    for name, df in (("axes_features.jsonl", result.features), ("axes_labels.jsonl", result.labels)):
        write_jsonl(out / name, (jsonable(row) for row in df.to_dict(orient="records")))
    return out

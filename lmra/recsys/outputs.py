"""Recsys outputs: the result of a run or a scoring (:class:`RecsysResult`), the JSON writing
shared by both, and the end of a run — scoring its records and writing the run folder
(``lists.jsonl``, the metric tables, ``summary.json``, ``manifest.json``).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmra.cache import CallStats
from lmra.fileio import write_csv, write_jsonl, write_text
from lmra.recsys import bias_disparity as bdm
from lmra.recsys.config import RecsysConfig
from lmra.recsys.inputs import CfairContext
from lmra.recsys.parse import CatalogMatcher
from lmra.recsys.records import plain
from lmra.recsys.scoring import (build_summary, nothing_scored, nothing_scored_message, partial_message, run_bias,
                                  score_frame, unmeasured_attributes)


@dataclass
class RecsysResult:
    """What a run (or a scoring of list files) returns; the same tables are in ``run_dir``."""

    run_dir: Path
    lists: pd.DataFrame
    similarity: pd.DataFrame
    fairness: pd.DataFrame
    summary: dict
    manifest: dict
    bias: pd.DataFrame | None = None
    bias_summary: pd.DataFrame | None = None


def now() -> str:
    """The local time with its offset, to the second (ISO 8601), for manifests."""
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def dump_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON (numpy numbers, sets and tuples converted by
    :func:`json_default`), ending in a newline."""
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=json_default) + "\n")


def json_default(o: Any) -> Any:
    """``json.dumps`` fallback: numpy integers and floats (nan → None), sets and tuples as lists.

    Raises:
        TypeError: any other type.
    """
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return None if math.isnan(o) else float(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def clean_nan(obj: Any) -> Any:
    """``obj`` with every float nan, inside dicts and lists too, replaced by None."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean_nan(v) for v in obj]
    return obj


def json_records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: missing values (NaN, ``pd.NA``) become None, numpy scalars
    plain Python numbers."""
    return [{k: (None if pd.isna(v) else plain(v.item() if isinstance(v, np.generic) else v)) for k, v in r.items()}
            for r in df.astype(object).to_dict(orient="records")]


def finish_run(cfg: RecsysConfig, run_dir: Path, records: list[dict], manifest: dict, categories: dict,
               matcher: CatalogMatcher | None, cf: CfairContext | None, stats: CallStats) -> RecsysResult:
    """Score a run's records and write its folder: ``lists.jsonl``, ``recsys_similarity.csv``,
    ``recsys_fairness.csv``, for CFaiRLLM (``cf``) ``recsys_bias_disparity.csv`` and
    ``recsys_bias_summary.csv``, ``summary.json`` and the finished ``manifest.json`` (status
    ``failed`` when every list was lost to failed calls, else ``finished``).

    Args:
        records: :func:`~lmra.recsys.records.list_record` dicts in instruction order.
        manifest: the run's manifest so far (updated in place).
        categories: item id → categories of the matcher's catalog.
        stats: the run's call counts.
    """
    lists = pd.DataFrame(records)
    write_jsonl(run_dir / "lists.jsonl", records,
                dumps=lambda r: json.dumps(clean_nan(r), ensure_ascii=False, default=json_default))
    sim, fair, dropped = score_frame(lists, k=cfg.k, convention=cfg.convention, permutations=cfg.permutations,
                                    seed=cfg.seed)
    write_csv(sim, run_dir / "recsys_similarity.csv")
    write_csv(fair, run_dir / "recsys_fairness.csv")
    bias = bias_sum = None
    extra: dict[str, Any] = {}
    if cf is not None:
        bias, bias_sum, coverage, left_out = run_bias(cfg, cf, lists)
        write_csv(bias, run_dir / "recsys_bias_disparity.csv")
        summary_cols = ["variant", "group_by", *bdm.SUMMARY_COLUMNS]
        write_csv(bias_sum if bias_sum is not None else pd.DataFrame(columns=summary_cols),
                  run_dir / "recsys_bias_summary.csv")
        records = json_records(bias_sum) if bias_sum is not None else []
        extra = {"users_without_training_ratings": cf.n_users_without_training_ratings,
                 "item_coverage": coverage,
                 # users without a recommended item in a variant: out of T and R there (review finding)
                 "bias_users_without_recommendations": left_out,
                 # eq. 4 of Mansoury et al. 2019, one record per variant and group attribute
                 "average_disparity": [{c: r[c] for c in ("variant", "group_by", "group", "average_disparity",
                                                          "n_categories")}
                                       for r in records if r.get("n_categories") is not None],
                 "bias_summary": records}
    elif matcher is not None and categories:
        extra = {"item_coverage": {a: bdm.item_coverage(
            [[i for i in m if i is not None] for m in d["matched"] if isinstance(m, list)], set(categories))
            for a, d in lists.groupby("attribute", sort=False)}}
    summary = build_summary(lists, sim, fair, k=cfg.k, convention=cfg.convention, dropped=dropped,
                            matched=matcher is not None) | extra | {"run_dir": str(run_dir)}
    dump_json(run_dir / "summary.json", clean_nan(summary))
    unmeasured = unmeasured_attributes(summary)
    status = "failed" if nothing_scored(summary) else "partial" if unmeasured else "finished"
    if status == "failed":  # why, in the manifest too (as an audit's; review finding: none)
        manifest["stop_reason"] = nothing_scored_message(summary, lists)
    elif status == "partial":
        manifest["stop_reason"] = partial_message(unmeasured)
    manifest |= {"status": status, "finished": now(), "calls": stats.as_dict()}
    dump_json(run_dir / "manifest.json", manifest)
    return RecsysResult(run_dir, lists, sim, fair, summary, manifest, bias, bias_sum)

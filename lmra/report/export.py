"""Per-task and per-pair exports of a run as CSV, JSON or Parquet, with a versioned schema.

The schema is documented in ``docs/exports.md``; every row carries ``schema_version``
(also stored as Parquet schema metadata ``lmra.schema_version`` and as the top-level
``schema_version`` of the JSON document). Additive changes (new columns at the end) keep
the version; renaming, removing or re-typing a column bumps it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import pandas as pd

from lmra.errors import LmraInputError
from lmra.runfolder import RunFolder
from lmra.fileio import atomic_open

EXPORT_SCHEMA_VERSION = 1
Format = Literal["csv", "json", "parquet"]
FORMATS = ("csv", "json", "parquet")

#: column → pyarrow type name, in order (docs/exports.md)
PER_TASK_SCHEMA: dict[str, str] = {
    "schema_version": "int32", "run_id": "string", "run_name": "string", "started": "string",
    "target_model": "string", "judge_model": "string", "comparison": "string", "group_a": "string",
    "group_b": "string", "domain": "string", "task": "string", "n_pairs": "int64", "n_invalid": "int64",
    "n_failed": "int64", "n_refusal": "int64", "n_prompts": "int64", "forward_rate": "float64",
    "reverse_rate": "float64",
    "forward_reverse_ratio": "float64", "net_rating": "float64", "ci_low": "float64", "ci_high": "float64",
    "confidence": "float64", "p_value": "float64",
    # added with judge validation; additive, so the schema version is unchanged
    "n_unlabelled": "int64", "judge_status": "string", "interval": "string", "combiner": "string",
    "net_rating_min": "float64", "net_rating_mean": "float64", "net_rating_calibrated": "float64",
    "position_logit": "float64",
}
PER_PAIR_SCHEMA: dict[str, str] = {
    "schema_version": "int32", "run_id": "string", "pair_id": "string", "prompt_id": "string",
    "comparison": "string", "group_a": "string", "group_b": "string", "domain": "string", "task": "string",
    "sample": "int64", "name_a": "string", "name_b": "string", "valid": "bool", "failed": "bool",
    "refused": "bool", "refusal_a": "bool", "refusal_b": "bool", "error": "string", "method": "string",
    "order1_p_A": "float64", "order1_p_B": "float64", "order1_p_C": "float64", "order1_mass": "float64",
    "order2_p_A": "float64", "order2_p_B": "float64", "order2_p_C": "float64", "order2_mass": "float64",
    "q_F": "float64", "q_R": "float64", "q_N": "float64", "h": "float64", "judge2_h": "float64",
    "unlabelled": "bool", "judge_status": "string", "h_min": "float64", "h_mean": "float64",
    "h_calibrated": "float64",
}
SCHEMAS = {"per_task": PER_TASK_SCHEMA, "per_pair": PER_PAIR_SCHEMA}


def _typed(df: pd.DataFrame, schema: dict[str, str]) -> pd.DataFrame:
    """Order columns as in ``schema`` and give them nullable pandas dtypes."""
    dtypes = {"int32": "Int32", "int64": "Int64", "float64": "Float64", "bool": "boolean", "string": "string"}
    out = pd.DataFrame(index=df.index)
    for col, typ in schema.items():
        s = df[col] if col in df else pd.Series([None] * len(df), index=df.index, dtype=object)
        if typ in ("float64", "int32", "int64"):
            s = pd.to_numeric(s, errors="coerce")
        out[col] = s.astype(dtypes[typ])
    return out.reset_index(drop=True)


def per_task_table(run: RunFolder) -> pd.DataFrame:
    """The run's per-task results in export schema :data:`PER_TASK_SCHEMA` (one row per
    (comparison, domain, task); rates and net rating in [−1, 1]; ``confidence`` of the CI)."""
    pt = run.per_task.copy()
    pt["schema_version"] = EXPORT_SCHEMA_VERSION
    pt["run_id"], pt["run_name"], pt["started"] = run.run_id, run.name, run.started
    pt["target_model"], pt["judge_model"] = run.target_model, run.judge_model
    pt["confidence"] = run.summary.get("confidence", 0.95)
    pt["judge_status"] = run.judge_status
    pt["interval"] = run.summary.get("interval", "t")  # runs before judge validation used t-intervals
    pt["combiner"] = run.combiner
    pt["position_logit"] = run.summary.get("position_logit")
    return _typed(pt, PER_TASK_SCHEMA)


def per_pair_table(run: RunFolder) -> pd.DataFrame:
    """The run's pairs in export schema :data:`PER_PAIR_SCHEMA` (one row per rated pair;
    option probabilities per presentation order renormalised over A/B/C, ``mass`` = the
    valid-option mass before renormalising, ``h = q_F − q_R``; NaN/null for invalid or
    failed pairs)."""
    parts = list(per_pair_chunks(run))
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


#: rows per chunk of the per-pair export (memory per chunk ≈ 100 MB)
CHUNK_ROWS = 100_000


def per_pair_chunks(run: RunFolder, rows: int = CHUNK_ROWS):
    """:func:`per_pair_table` in chunks of ``rows`` pairs, in file order (at least one chunk,
    maybe empty). From ``ratings.parquet`` only the exported columns are read, with DuckDB,
    and the answers' option probabilities are taken out of their JSON in SQL; an earlier
    run's ``ratings.jsonl`` and a small file (:func:`lmra.pairstore.is_small`) are read whole."""
    from lmra.pairstore import connect, is_small, register_pairs

    if run.pairs_path.suffix != ".parquet" or is_small(run.pairs_path):  # read whole (no DuckDB start-up)
        yield _per_pair_frame(run, run.ratings.copy())
        return

    con = connect()
    have = register_pairs(con, run.pairs_path)
    cols = [f'"{c}"' for c in PER_PAIR_SCHEMA if c in have and not c.startswith(("order1_", "order2_"))]
    for order in ("order1", "order2"):
        for opt in ("A", "B", "C"):
            cols.append(f"(\"{order}\"->'$.probs'->>'$.{opt}')::DOUBLE AS {order}_p_{opt}" if order in have
                        else f"NULL::DOUBLE AS {order}_p_{opt}")
        cols.append(f"(\"{order}\"->>'$.mass')::DOUBLE AS {order}_mass" if order in have
                    else f"NULL::DOUBLE AS {order}_mass")
    # a plain scan keeps the file's order (preserve_insertion_order): no sort of a million rows
    rel = con.sql(f"SELECT {', '.join(cols)} FROM pairs")
    reader = rel.to_arrow_reader(rows) if hasattr(rel, "to_arrow_reader") else rel.record_batch(rows)
    first = True
    for batch in reader:
        if batch.num_rows or first:
            yield _per_pair_frame(run, batch.to_pandas(), flat=True)
            first = False
    if first:
        yield _per_pair_frame(run, pd.DataFrame(columns=[c for c in PER_PAIR_SCHEMA if c in have]), flat=True)


def _per_pair_frame(run: RunFolder, r: pd.DataFrame, flat: bool = False) -> pd.DataFrame:
    r["schema_version"] = EXPORT_SCHEMA_VERSION
    r["run_id"] = run.run_id
    r["judge_status"] = run.judge_status
    for order in ("order1", "order2") if not flat else ():
        col = r[order] if order in r else pd.Series([None] * len(r), index=r.index)
        for opt in ("A", "B", "C"):
            # an order without a valid option (mass 0: the judge answered no option) has probs null
            r[f"{order}_p_{opt}"] = [(o.get("probs") or {}).get(opt, math.nan) if isinstance(o, dict) else math.nan
                                     for o in col]
        r[f"{order}_mass"] = [o.get("mass") if isinstance(o, dict) else math.nan for o in col]
    return _typed(r, PER_PAIR_SCHEMA)


def _arrow_schema(schema: dict[str, str], table: str):
    import pyarrow as pa

    types = {"int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
             "string": pa.string()}
    fields = [pa.field(c, types[t]) for c, t in schema.items()]
    return pa.schema(fields, metadata={"lmra.schema_version": str(EXPORT_SCHEMA_VERSION), "lmra.table": table})


def write_table(df: pd.DataFrame, table: str, fmt: Format, path: Path, run_id: str) -> Path:
    """Write one export table.

    Args:
        df: a frame from :func:`per_task_table` or :func:`per_pair_table`.
        table: ``per_task`` or ``per_pair``; fmt: ``csv``, ``json`` or ``parquet``.
        path: the output file.

    JSON is one document ``{"schema_version", "table", "run_id", "columns", "rows"}`` with
    rows as objects and missing numbers as ``null``; CSV leaves them empty.
    """
    return write_chunks([df], table, fmt, path, run_id)


def write_chunks(chunks, table: str, fmt: Format, path: Path, run_id: str) -> Path:
    """:func:`write_table` of a table given as consecutive frames (e.g. :func:`per_pair_chunks`),
    holding one chunk in memory at a time; the file is the same as for the whole table
    (Parquet: one row group per chunk). Written atomically.

    Raises:
        LmraInputError: unknown format. LmraIOError: the file cannot be written.
    """
    schema = SCHEMAS[table]
    if fmt not in FORMATS:
        raise LmraInputError(f"unknown export format '{fmt}' (csv, json or parquet)", field="--format")
    mode = "wb" if fmt == "parquet" else "w"
    with atomic_open(path, mode) as fh:
        if fmt == "csv":
            for k, df in enumerate(chunks):
                df.to_csv(fh, index=False, header=k == 0)
        elif fmt == "json":
            # the bytes json.dumps(doc, indent=1) gives, with the rows streamed in one by one
            doc = {"schema_version": EXPORT_SCHEMA_VERSION, "table": table, "run_id": run_id,
                   "columns": list(schema), "rows": []}
            before, after = json.dumps(doc | {"rows": ["\x00"]}, indent=1, ensure_ascii=False).split('  "\\u0000"')
            n = 0
            for df in chunks:
                for row in json.loads(df.to_json(orient="records")):
                    body = json.dumps(row, indent=1, allow_nan=False, ensure_ascii=False).replace("\n", "\n  ")
                    fh.write((before if n == 0 else ",\n") + "  " + body)
                    n += 1
            fh.write(after if n else json.dumps(doc, indent=1, ensure_ascii=False))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            arrow_schema = _arrow_schema(schema, table)
            with pq.ParquetWriter(fh, arrow_schema) as w:
                for df in chunks:
                    w.write_table(pa.Table.from_pandas(df, schema=arrow_schema, preserve_index=False))
    return path


def export_run(run: RunFolder, fmt: Format, out_dir: str | Path | None = None,
               tables: tuple[str, ...] = ("per_task", "per_pair")) -> list[Path]:
    """Write ``per_task.<fmt>`` and ``per_pair.<fmt>`` for a run.

    Args:
        run: the run folder; fmt: ``csv``, ``json`` or ``parquet``.
        out_dir: target folder (created); default ``<run_dir>/exports``.
        tables: which tables to write.

    Returns:
        The written paths.

    Raises:
        LmraInputError: unknown format or table.
    """
    if fmt not in FORMATS:
        raise LmraInputError(f"unknown export format '{fmt}' (csv, json or parquet)", field="--format")
    unknown = set(tables) - set(SCHEMAS)
    if unknown:
        raise LmraInputError(f"unknown export table(s) {sorted(unknown)} (per_task, per_pair)", field="--table")
    out = Path(out_dir) if out_dir else run.path / "exports"
    out.mkdir(parents=True, exist_ok=True)
    build = {"per_task": lambda r: [per_task_table(r)], "per_pair": per_pair_chunks}
    return [write_chunks(build[t](run), t, fmt, out / f"{t}.{fmt}", run.run_id) for t in tables]

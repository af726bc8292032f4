"""The warehouse of nights: every run's per-pair, per-task and overall tables in one partitioned Parquet
dataset, ``<reports>/warehouse/`` next to the run folders, that DuckDB, Spark or pandas query
across nights without lmra (docs/exports.md, "Warehouse").

Layout (Hive-style partitions, one file per table per run)::

    warehouse/per_pair/run=<run name>/date=<YYYY-MM-DD>/<run id>.parquet
    warehouse/per_task/run=<run name>/date=<YYYY-MM-DD>/<run id>.parquet
    warehouse/overall/run=<run name>/date=<YYYY-MM-DD>/<run id>.parquet

The files are the Parquet exports of ``lmra export --format parquet``
(:func:`lmra.report.export.export_run`): the same versioned, documented schema (every row's
``schema_version``, file metadata ``lmra.schema_version`` and ``lmra.table``), the same columns
in every run, so that nights concatenate without reconciling schemas. ``run`` is the config's
``name`` and ``date`` the day the run started (its manifest's local date); partition values are
percent-encoded (URI) where a character is not a letter, digit, ``.``, ``_``, ``-`` or space.

A table is exported into ``warehouse/.staging/`` (outside the table folders that readers glob)
and renamed into its partition: a reader never sees half a file. Adding a run again replaces
its files. Shards of a sharded audit are not added: their merged run is.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import quote

from lmra.errors import LmraInputError, LmraIOError, io_reason
from lmra.report.export import EXPORT_SCHEMA_VERSION
from lmra.runfolder import RunFolder

#: version of the warehouse's columns: the export schema's (docs/exports.md, "Versioning")
SCHEMA_VERSION = EXPORT_SCHEMA_VERSION
#: the warehouse folder inside a reports folder
WAREHOUSE_DIR = "warehouse"
#: the tables of the warehouse
TABLES = ("per_pair", "per_task", "overall")

_SAFE = re.compile(r"[A-Za-z0-9._\- ]")


def warehouse_dir(reports_dir: str | Path) -> Path:
    """The warehouse of a reports folder: ``<reports_dir>/warehouse``."""
    return Path(reports_dir) / WAREHOUSE_DIR


def partition_value(value: str) -> str:
    """A Hive partition value: characters other than letters, digits, ``._-`` and space
    percent-encoded (UTF-8), as pyarrow, Spark and DuckDB decode them."""
    return "".join(ch if _SAFE.fullmatch(ch) else quote(ch, safe="") for ch in value)


def run_date(run: RunFolder) -> str:
    """``YYYY-MM-DD``: the local date the run started (manifest ``started``), else the run id's date."""
    started = run.started or ""
    if re.match(r"\d{4}-\d{2}-\d{2}", started):
        return started[:10]
    m = re.match(r"(\d{4})(\d{2})(\d{2})-", run.run_id)
    if m:
        return "-".join(m.groups())
    raise LmraInputError("has no start date (manifest 'started') to file the run under", file=run.path / "manifest.json",
                         field="started")


def table_path(warehouse: str | Path, table: str, run: RunFolder) -> Path:
    """Where ``table`` of ``run`` lands: ``<warehouse>/<table>/run=…/date=…/<run id>.parquet``."""
    return (Path(warehouse) / table / f"run={partition_value(run.name)}" / f"date={run_date(run)}"
            / f"{run.run_id}.parquet")


def add_run(run: RunFolder | str | Path, warehouse: str | Path | None = None) -> dict[str, Path]:
    """Land a finished run's per-pair, per-task and overall tables in the warehouse.

    Args:
        run: the run folder (or its path).
        warehouse: the warehouse folder (default: ``warehouse/`` next to the run folder).

    Returns:
        table name → the file written (``<warehouse>/<table>/run=…/date=…/<run id>.parquet``).

    Raises:
        LmraInputError: not a finished run folder, or a shard of a sharded audit (its merged run
            is added instead).
        LmraIOError: a file could not be written (naming it).
    """
    from lmra.report.export import export_run
    from lmra.runfolder import load_run
    from lmra.shard import SHARD_FILE

    run = run if isinstance(run, RunFolder) else load_run(run)
    if (run.path / SHARD_FILE).is_file():
        raise LmraInputError("is one shard of a sharded audit: the warehouse takes the merged run "
                             "('lmra merge SHARD_RUN...' adds it)", file=run.path, field="shard")
    wh = Path(warehouse) if warehouse is not None else warehouse_dir(run.path.parent)
    staging = wh / ".staging" / f"{run.run_id}-{os.getpid()}"
    out: dict[str, Path] = {}
    try:
        # every table is exported before any is moved in: a run whose export fails half-way (a
        # full disk) leaves the warehouse as it was, never a per_pair file without its per_task
        exported = {}
        for table in TABLES:
            try:
                exported[table] = export_run(run, "parquet", staging, (table,))[0]
            except LmraInputError as exc:  # a damaged table file, named by the run folder's reader
                raise LmraInputError(f"its {table} table cannot be read to land it in the warehouse "
                                     f"({exc.format()}); nothing was added", file=run.path, field=table) from None
            except (ValueError, KeyError) as exc:  # a damaged table file (pandas' ParserError is a ValueError)
                raise LmraInputError(f"its {table} table cannot be read to land it in the warehouse "
                                     f"({type(exc).__name__}: {exc}); nothing was added", file=run.path,
                                     field=table) from None
        for table, written in exported.items():
            final = table_path(wh, table, run)
            try:
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(written, final)
            except OSError as exc:
                raise LmraIOError(f"cannot write the warehouse file ({io_reason(exc)})", path=final) from None
            out[table] = final
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.parent.rmdir()  # only when no other process is staging a run
        except OSError:
            pass
    return out

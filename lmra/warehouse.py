"""The warehouse of nights: every run's per-pair, per-task, overall and per-domain tables in one partitioned Parquet
dataset, ``<reports>/warehouse/`` next to the run folders, that DuckDB, Spark or pandas query
across nights without lmra (docs/exports.md, "Warehouse").

Layout (Hive-style partitions, one file per table per run)::

    warehouse/per_pair/run=<run name>/date=<YYYY-MM-DD>/<run id>.parquet
    warehouse/per_task/run=<run name>/date=<YYYY-MM-DD>/<run id>.parquet
    warehouse/overall/run=<run name>/date=<YYYY-MM-DD>/<run id>.parquet
    warehouse/per_domain/run=<run name>/date=<YYYY-MM-DD>/<run id>.parquet

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
#: the tables of the warehouse (``per_domain`` since lmra 0.3.0: methodology §1 reports every metric per
#: task and per domain; a dashboard had to recompute a domain's net rating and CI from ``per_pair``)
TABLES = ("per_pair", "per_task", "overall", "per_domain")

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
    """Land a finished run's per-pair, per-task, overall and per-domain tables in the warehouse.

    Args:
        run: the run folder (or its path).
        warehouse: the warehouse folder (default: ``warehouse/`` next to the run folder).

    Returns:
        table name → the file written (``<warehouse>/<table>/run=…/date=…/<run id>.parquet``).

    Raises:
        LmraInputError: not a finished run folder, or a shard of a sharded audit (its merged run
            is added instead).
        LmraIOError: a file could not be written (naming it); no table of the run was added then
            (the files an earlier landing of it left are kept).
    """
    from lmra.report.export import export_run
    from lmra.runfolder import load_run
    from lmra.shard import SHARD_FILE

    run = run if isinstance(run, RunFolder) else load_run(run)
    if (run.path / SHARD_FILE).is_file():
        raise LmraInputError("is one shard of a sharded audit: the warehouse takes the merged run "
                             "('lmra merge SHARD_RUN...' adds it)", file=run.path, field="shard")
    wh = Path(warehouse) if warehouse is not None else warehouse_dir(run.path.parent)
    try:  # the warehouse itself first: a folder that cannot be made was blamed on the run's tables and on an
        # option --out never given (break-it finding, s40)
        (wh / ".staging").mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise LmraIOError(f"the warehouse {wh} cannot be created: it, or a folder above it, is a file — move the file "
                          "or give another warehouse; nothing was added", path=wh) from None
    except OSError as exc:
        raise LmraIOError(f"the warehouse {wh} cannot be written ({exc.strerror or exc}); nothing was added",
                          path=wh) from None
    _clear_stale_staging(wh / ".staging")
    staging = wh / ".staging" / f"{run.run_id}-{os.getpid()}"
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
        out = _land(exported, {table: table_path(wh, table, run) for table in exported}, staging)
        from lmra.afterrun import step_done

        step_done(run.path, "warehouse")  # (lmra.afterrun: no longer a step left undone)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staging.parent.rmdir()  # only when no other process is staging a run
        except OSError:
            pass
    return out


#: seconds after which a staging folder of a process that is gone is removed by the next landing
STALE_STAGING_S = 3600


def _land(exported: dict[str, Path], finals: dict[str, Path], staging: Path) -> dict[str, Path]:
    """Move the staged tables to their partitions, all or none (fault break-it, s37: a partition
    folder that could not be made — inodes exhausted, another user's folder — left per_pair and
    per_task of the night landed and its overall missing, while the command said "warehouse not
    updated"): every folder is made first; a move that fails puts back what was moved (an earlier
    landing's file of the run included, kept aside meanwhile) and raises.

    Raises:
        LmraIOError: a folder or file could not be written (naming it)."""
    for final in finals.values():
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LmraIOError(f"cannot write the warehouse file ({io_reason(exc)}); no table of the run was added",
                              path=final) from None
    moved: list[tuple[Path, Path | None]] = []  # (final, the earlier file kept aside, or None)
    try:
        for table, written in exported.items():
            final = finals[table]
            earlier = staging / f"earlier-{table}.parquet"
            had = final.exists()
            if had:
                os.replace(final, earlier)
            moved.append((final, earlier if had else None))
            os.replace(written, final)
    except OSError as exc:
        for final, earlier in reversed(moved):  # undo: the warehouse as it was
            try:
                if earlier is not None:
                    os.replace(earlier, final)
                else:
                    final.unlink(missing_ok=True)
            except OSError:
                pass
        raise LmraIOError(f"cannot write the warehouse file ({io_reason(exc)}); no table of the run was added",
                          path=final) from None
    return dict(finals)


def _clear_stale_staging(root: Path) -> None:
    """Remove the staging folders (``<run id>-<pid>``) of landings whose process is gone and that
    are older than :data:`STALE_STAGING_S` (fault break-it, s37: a killed landing's folder stayed
    for good); a live process's folder, or a young one (another host's, on a shared disk), stays."""
    import time

    from lmra.cache import pid_alive

    try:
        folders = list(root.iterdir())
    except OSError:
        return
    for folder in folders:
        pid = folder.name.rpartition("-")[2]
        try:
            old = time.time() - folder.stat().st_mtime > STALE_STAGING_S
        except OSError:
            continue
        if not pid.isdigit() or not old or pid_alive(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)


def tables_missing(run: RunFolder, warehouse: str | Path | None = None) -> list[str]:
    """The tables of ``run`` not in the warehouse (default: the one next to its folder): [] when
    all three landed."""
    wh = Path(warehouse) if warehouse is not None else warehouse_dir(run.path.parent)
    return [t for t in TABLES if not table_path(wh, t, run).is_file()]

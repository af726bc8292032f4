"""Axes outputs: the result of an axes run (:class:`AxesResult`) and the files it writes into a
folder (:data:`OUTPUT_FILES`), written as one set.

A set replaces the set already in the folder as a whole, never file by file: its files are
written into a hidden staging folder beside them (``.axes-staging-<pid>-…``), which is then
renamed ``.axes-commit`` — the commit point, one atomic rename — and its files are moved into
the folder (``axes_summary.json`` last) before the emptied ``.axes-commit`` is removed.

* A failure or interruption before the commit point (Ctrl-C, SIGTERM, a full disk) removes
  the staging folder: the folder keeps its earlier set, every file of it, as it was.
* A process killed outright (``kill -9``, a power cut) before the commit point leaves its
  staging folder behind; the next write into the folder removes it (its process is gone).
* A kill after the commit point leaves ``.axes-commit`` holding the rest of a whole set; the
  next write into the folder (:func:`finish_interrupted_write`, the next ``lmra axes`` on it)
  first moves that rest in, so no mix of two axes runs outlives the next write.

Where a set goes — the run folder, or beside it when it would replace a better one — is
:mod:`lmra.axes.publish`'s decision.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from lmra.cache import CallStats
from lmra.errors import LmraIOError, io_reason
from lmra.fileio import write_csv, write_json, write_jsonl
from lmra.runfolder import jsonable

if TYPE_CHECKING:
    from lmra.axes.publish import AxesPublication

#: Files :func:`run_axes` writes into the output folder (one set: :func:`write_axes_outputs`).
OUTPUT_FILES = ("axes.csv", "axes_candidates.json", "axes_features.jsonl", "axes_labels.jsonl", "axes_summary.json")

#: Prefix of the hidden folder a set is written into before it replaces the folder's set.
STAGING_PREFIX = ".axes-staging-"
#: The hidden folder holding a whole set while it moves into the folder (the commit journal).
COMMIT_DIR = ".axes-commit"


@dataclass
class AxesResult:
    """What :func:`run_axes` returns (also written to ``out_dir`` when given).

    Attributes:
        table: ``axes.csv`` rows (:data:`TABLE_COLUMNS`).
        candidates: comparison → candidate axes, absorbed features, consolidation path.
        features: raw brainstormed features (``axes_features.jsonl``).
        labels: one row per (comparison, axis, test pair) (``axes_labels.jsonl``).
        summary: counts, plan, calls and the run's ``status`` (``complete`` or ``partial``)
            (``axes_summary.json``).
        out_dir: where the files were written, or None.
        publication: where the files went and what became of the set they met there
            (:class:`~lmra.axes.publish.AxesPublication`), or None when nothing was written.
    """

    table: pd.DataFrame
    candidates: dict[str, dict]
    features: pd.DataFrame
    labels: pd.DataFrame
    summary: dict
    out_dir: Path | None = None
    stats: CallStats = field(default_factory=CallStats)
    publication: AxesPublication | None = None


def check_axes_folder(out_dir: str | Path) -> None:
    """Before any call: that ``out_dir`` can take the axes files (created if needed, a staging
    folder made and removed), so that a read-only run folder stops the command before it asks
    the LMRA anything (break-it finding: 18 calls made, then "cannot write the axes files here").

    Raises:
        LmraIOError: it cannot (naming the folder and the reason).
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-probe-", dir=out))
    except OSError as exc:
        raise LmraIOError(f"cannot write the axes files here ({io_reason(exc)}); nothing was asked of the LMRA: give "
                          "--out another folder", path=out) from None


def write_axes_outputs(result: AxesResult, out_dir: str | Path) -> Path:
    """Write :data:`OUTPUT_FILES` into ``out_dir`` (created if needed) as one set that replaces
    the set already there as a whole (see the module docstring), and return ``out_dir``. An
    earlier write into ``out_dir`` that was killed is finished (or cleaned up) first.

    Raises:
        LmraIOError: the folder or a file could not be written (the earlier set is kept).
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        finish_interrupted_write(out)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=out))
    except OSError as exc:
        raise LmraIOError(f"cannot write the axes files here ({io_reason(exc)})", path=out) from None
    commit = out / COMMIT_DIR
    try:
        _write_files(result, staging)
        try:
            os.rename(staging, commit)
        except OSError:
            if not commit.exists():
                raise
            finish_interrupted_write(out)  # another writer's set, whole: move it in first, then ours
            os.rename(staging, commit)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise LmraIOError(f"cannot write the axes files here ({io_reason(exc)})", path=out) from None
    except BaseException:  # Ctrl-C, SIGTERM, a file that could not be written: the earlier set stays
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        _move_in(commit, out)
    except OSError as exc:
        raise LmraIOError(f"cannot move the axes files into this folder ({io_reason(exc)}); the next "
                          "'lmra axes' on it finishes moving them in", path=out) from None
    except BaseException:  # Ctrl-C mid-move: the set is whole and committed, so finish moving it in
        try:
            finish_interrupted_write(out)
        except BaseException:
            pass  # (a second Ctrl-C, or a kill: the next write finishes it)
        raise
    return out


def finish_interrupted_write(folder: str | Path) -> bool:
    """Finish what a killed :func:`write_axes_outputs` left in ``folder``: move in the rest of a
    set whose commit journal (``.axes-commit``) is there, and remove the staging folders of
    writers that no longer run. Returns True when a set was moved in (the folder's files are
    now that set's, all of them).

    Raises:
        OSError: a file could not be moved.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return False
    for p in folder.glob(f"{STAGING_PREFIX}*"):
        if p.is_dir() and not _writer_alive(p.name):
            shutil.rmtree(p, ignore_errors=True)
    commit = folder / COMMIT_DIR
    if not commit.is_dir():
        return False
    _move_in(commit, folder)
    return True


def _write_files(result: AxesResult, folder: Path) -> None:
    """Write :data:`OUTPUT_FILES` into ``folder`` (each file atomically)."""
    write_csv(result.table, folder / "axes.csv")
    write_json(folder / "axes_candidates.json", jsonable(result.candidates))
    write_json(folder / "axes_summary.json", jsonable(result.summary))
    for name, df in (("axes_features.jsonl", result.features), ("axes_labels.jsonl", result.labels)):
        write_jsonl(folder / name, (jsonable(row) for row in df.to_dict(orient="records")))


def _move_in(commit: Path, folder: Path) -> None:
    """Move every file of the journal ``commit`` into ``folder`` (``axes_summary.json`` last),
    remove the emptied journal and sync the folder. A file already moved (by this call before a
    kill, or by another writer finishing the same journal) is skipped."""
    try:
        extra = sorted(p.name for p in commit.iterdir() if p.name not in OUTPUT_FILES)
    except FileNotFoundError:  # another writer finished this journal meanwhile
        return
    order = [n for n in OUTPUT_FILES if n != "axes_summary.json"] + extra + ["axes_summary.json"]
    for name in order:
        try:
            os.replace(commit / name, folder / name)
        except FileNotFoundError:
            pass
    try:
        commit.rmdir()
    except FileNotFoundError:
        pass
    _sync_dir(folder)


def _sync_dir(folder: Path) -> None:
    """fsync a folder, so that the renames in it survive a power cut (where the system allows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _writer_alive(name: str) -> bool:
    """Whether the process that made the staging folder ``name`` (``.axes-staging-<pid>-…``)
    still runs; a name without a readable process id counts as running (left alone)."""
    try:
        pid = int(name[len(STAGING_PREFIX):].split("-", 1)[0])
    except ValueError:
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (can be)
        return False
    except OSError:  # e.g. another user's process
        return True
    return True

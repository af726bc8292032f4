"""What killed audits leave in their run folders, and clearing it.

A large audit spools its rated pairs and responses to hidden Parquet files in its run folder
(``.pairs-spool.parquet``, ``.responses-spool.parquet``, DuckDB's ``.pairs-spool.spill/`` while
finishing: docs/architecture.md, "Spooled pairs"), and every file of the folder is written to a
hidden temporary file first (``.ratings.parquet.XXXX.tmp``, :func:`lmra.fileio.atomic_write`).
An audit that stops (finished, interrupted, failed) removes them; one that is killed (``kill -9``,
a CI job's timeout, the machine stopping) cannot, and its folder is ``stale``
(:mod:`lmra.runstate`). Nothing reads them again — a re-run makes the night's calls from the
call cache, which holds every answered call — but they can be the size of the run (a killed
300,000-pair run left 260 MB; scale break-it, s40), every night a cron job is killed.

:func:`clear_leftovers` removes them from the stale run folders of a reports folder; ``lmra
audit`` calls it as it starts and says what it removed. A folder is cleared only while this
process holds its ``run.lock`` (so no audit is writing it, and none starts to while it is
cleared), only when its manifest says ``running`` or ``stale`` (or it has none: killed while
starting), only when they and the manifest have not changed for :data:`QUIET_S` seconds (a writer on
another machine of a network filesystem, whose locks may not be shared, still changes them), and
only of those hidden files: the folder's own files (``responses.jsonl``, the manifest …) stay, and so does a folder whose batch jobs may still be collected (``lmra batch
resume``). A temporary file of ``manifest.json`` is left too: a command reading the folder may
be marking it stale at that moment.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from lmra.runstate import LOCK_FILE, RUNNING, STALE

#: the spools a large audit keeps in its run folder while it runs (lmra.audit.pipeline), and DuckDB's
#: spill folder of the pair spool's sort (lmra.pairstore.PairSpool)
SPOOL_NAMES = frozenset({".pairs-spool.parquet", ".responses-spool.parquet", ".pairs-spool.spill"})

#: seconds a folder's leftovers and manifest must have been left unchanged before they are removed: a
#: writer that the lock cannot see (another machine on a network filesystem whose locks are not shared,
#: break-it round 2, s41) still changes its spools and manifest; a killed run's stay as they are
QUIET_S = 600.0

#: a run folder's name: ``YYYYMMDD-HHMMSS-<name>`` (lmra.runstate.claim_run_dir)
_STAMPED = re.compile(r"\d{8}-\d{6}-.+")


@dataclass(frozen=True)
class Cleared:
    """The leftovers removed from one run folder: its run id, how many files (a spill folder
    counts as one) and their size in bytes, and how many could not be removed (the first named)."""

    run_id: str
    n_files: int
    n_bytes: int
    n_kept: int = 0
    kept: str | None = None  # the first file that could not be removed


def is_leftover(name: str) -> bool:
    """True for the name of a file a killed audit leaves in its run folder: a spool, the spill
    folder, or a hidden temporary file (``.<file>.<random>.tmp``) other than the manifest's."""
    return name in SPOOL_NAMES or (name.startswith(".") and name.endswith(".tmp")
                                   and not name.startswith(".manifest.json."))


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (0 for what cannot be read)."""
    try:
        if path.is_dir() and not path.is_symlink():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        return path.lstat().st_size
    except OSError:
        return 0


def _killed(folder: Path) -> bool:
    """Whether a run folder (whose lock this process holds) is a killed audit's: its manifest
    says ``running`` or ``stale``, or it has none (killed while starting); not one stopped in its
    batch rounds, whose jobs ``lmra batch resume`` may still collect."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return (isinstance(manifest, dict) and manifest.get("status") in (RUNNING, STALE)
            and manifest.get("stopped_in") != "batch")


def _recently_changed(folder: Path, names: list[str], quiet_s: float | None = None) -> bool:
    """Whether any of a folder's leftovers, or its manifest, changed in the last :data:`QUIET_S`
    seconds (a writer the lock does not show; the newest file of a spill folder counts)."""
    import time

    since = time.time() - (QUIET_S if quiet_s is None else quiet_s)
    paths = [folder / n for n in names] + [folder / "manifest.json"]
    for path in paths:
        try:
            if path.is_dir() and not path.is_symlink():
                if any(f.lstat().st_mtime > since for f in path.rglob("*")) or path.lstat().st_mtime > since:
                    return True
            elif path.lstat().st_mtime > since:
                return True
        except OSError:
            continue
    return False


def clear_folder(folder: str | Path) -> Cleared | None:
    """Remove the leftovers (:func:`is_leftover`) of one run folder if it is a killed audit's.

    Args:
        folder: a run folder (holding ``run.lock``: only an audit takes one).

    Returns:
        what was removed, or None when the folder holds no leftover, is not an audit's, is
        being written by a live process (its lock held), did not stop by being killed, or changed
        in the last :data:`QUIET_S` seconds.
    """
    folder = Path(folder)
    try:
        names = [e.name for e in os.scandir(folder) if is_leftover(e.name)]
    except OSError:
        return None
    if not names or not (folder / LOCK_FILE).is_file():
        return None
    try:  # read-only: the lock file's content and time (when the audit started) stay as they are
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live process writes the folder
            return None
        if not _killed(folder) or _recently_changed(folder, names):
            return None
        n_files = n_bytes = n_kept = 0
        kept = None
        for name in names:
            path = folder / name
            size = _size(path)
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except FileNotFoundError:
                continue
            except OSError:
                n_kept += 1
                kept = kept or str(path)
                continue
            n_files, n_bytes = n_files + 1, n_bytes + size
        _mark_stale(folder)
        return Cleared(folder.name, n_files, n_bytes, n_kept, kept) if n_files or n_kept else None
    finally:
        os.close(fd)  # (releases the lock)


def _mark_stale(folder: Path) -> None:
    """A folder cleared as a killed audit's whose manifest still says ``running``: marked ``stale``
    with the time, as any command reading it does (:func:`lmra.runstate.folder_status`, which
    cannot here: this process holds the folder's lock; scale break-it, s45: the folder cleared
    by the next audit still said "running")."""
    import datetime as _dt

    from lmra.errors import LmraIOError
    from lmra.fileio import write_json
    from lmra.runstate import RUNNING, STALE

    path = folder / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(manifest, dict) and manifest.get("status") == RUNNING:
        manifest |= {"status": STALE, "stale_found": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
        try:
            write_json(path, manifest)
        except LmraIOError:
            pass  # (a read-only folder: still reported stale by the commands that read it)


def clear_leftovers(output_dir: str | Path) -> list[Cleared]:
    """Remove what killed audits left in the run folders of a reports folder (:func:`clear_folder`
    on each ``YYYYMMDD-HHMMSS-…`` folder in it), oldest first; [] when the folder cannot be listed.

    One listing of ``output_dir`` and one of each run folder (a night's audit lists a few hundred
    folders in milliseconds)."""
    try:
        folders = sorted(e.path for e in os.scandir(output_dir) if e.is_dir(follow_symlinks=False)
                         and _STAMPED.fullmatch(e.name))
    except OSError:
        return []
    return [c for c in map(clear_folder, folders) if c is not None]


def cleared_words(cleared: list[Cleared], *, named: int = 3) -> str:
    """One sentence saying what :func:`clear_leftovers` removed, e.g. ``removed 3 files (260.4 MB)
    that killed audits left in their run folders (20261206-165256-sz): spools and unfinished
    writes, which no command reads — their answered calls are in the call cache``."""
    files, size = sum(c.n_files for c in cleared), sum(c.n_bytes for c in cleared)
    ids = [c.run_id for c in cleared]
    shown = ", ".join(ids[-named:]) + (f" and {len(ids) - named} more" if len(ids) > named else "")
    kept = sum(c.n_kept for c in cleared)
    first = next((c.kept for c in cleared if c.kept), None)
    tail = (f"; {kept} could not be removed (permissions? the first: {first}; remove it by hand, or this note "
            "comes back every run)" if kept else "")
    return (f"removed {files} file{'s' * (files != 1)} ({size / 1e6:.1f} MB) that killed audits left in their run "
            f"folder{'s' * (len(ids) != 1)} ({shown}): spools and unfinished writes, which no command reads — their "
            f"answered calls are in the call cache{tail}")

"""Upkeep of the call cache (:mod:`lmra.cache`): what it holds, and pruning old calls.

A nightly audit draws a new seed every night (docs/nightly.md, "Seeds"), so every night's calls
are new rows and the cache grows by a night's calls for as long as the audit runs — about
2 KB a call, so a night of 10,000 calls adds 20 MB and a year 7 GB. Nothing in a finished run
needs its calls afterwards: the run folder holds its responses and ratings, the history its
metrics, the regression check reads those. A call's row serves only

* resuming a night that was interrupted, stopped by its budget or left partial (the re-run
  of the same command makes no call twice), and
* a re-run of a night with the same seed (which the check marks ``replayed``).

So calls older than any night that may still be resumed can go: :func:`prune` deletes the
``calls`` and ``pair_memo`` rows stored more than an age ago (by the time each row was
written, the machine's clock) and then rewrites the file (``VACUUM``) so that the disk space
comes back. Every other table (the leases of calls in flight) is untouched.

Safe beside a running audit on the same cache: rows are deleted in short transactions of at
most :data:`PRUNE_CHUNK_ROWS` consecutive row ids, so an audit's writes wait at most one of
them; an audit that looks up a pruned call makes it again, as a first run would (its keys read
ahead are dropped when another connection writes: ``PRAGMA data_version``, :mod:`lmra.cache`).
``VACUUM`` needs free disk space of about the kept rows' size; when it cannot run (disk full,
the database locked for longer than the wait) the rows are deleted all the same and their
pages are reused by later calls: :attr:`PruneResult.vacuum_failed` says why.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from lmra.errors import LmraInputError, LmraIOError, io_reason, is_damage

#: Row ids per delete transaction of :func:`prune` (a running audit's write waits at most one).
PRUNE_CHUNK_ROWS = 20_000
#: Seconds a statement waits for a running audit's write transaction to end.
BUSY_WAIT_S = 30.0


@dataclass(frozen=True)
class ModelRows:
    """The cached calls of one model: ``n`` rows, stored between ``oldest`` and ``newest``
    (Unix seconds, the writer's clock)."""

    provider: str
    model: str
    n: int
    oldest: float
    newest: float


@dataclass(frozen=True)
class CacheSummary:
    """What a call cache holds (:func:`describe`).

    Attributes:
        path: the SQLite file.
        n_calls: rows of ``calls`` (answered calls).
        n_memo: rows of ``pair_memo`` (finished pairs a re-run replays; 0 when the table is absent).
        bytes: size on disk of the file and its write-ahead log, in bytes.
        models: one :class:`ModelRows` per (provider, model), most calls first.
    """

    path: str
    n_calls: int
    n_memo: int
    bytes: int
    models: tuple[ModelRows, ...]


@dataclass(frozen=True)
class PruneResult:
    """What :func:`prune` did (or, ``dry_run``, would do).

    Attributes:
        cutoff: rows stored before this time (Unix seconds) were deleted.
        n_calls, n_memo: ``calls`` / ``pair_memo`` rows deleted (or that would be).
        n_calls_kept: ``calls`` rows left.
        bytes_before, bytes_after: size on disk of the file and its write-ahead log (bytes).
        vacuumed: the file was rewritten to give the freed space back.
        vacuum_failed: why it was not (None when it was, or when nothing was deleted).
    """

    cutoff: float
    n_calls: int
    n_memo: int
    n_calls_kept: int
    bytes_before: int
    bytes_after: int
    vacuumed: bool
    vacuum_failed: str | None


def size_on_disk(path: str | Path) -> int:
    """Bytes of the SQLite file ``path`` and of its ``-wal`` file (0 for a file that is absent)."""
    total = 0
    for p in (Path(path), Path(f"{path}-wal")):
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def _connect(path: str | Path, *, write: bool) -> sqlite3.Connection:
    """A connection to the existing call cache ``path`` (never creates one).

    Raises:
        LmraInputError: no such file, or a file that is not an lmra call cache (no ``calls``
            table with the cache's columns, or not an SQLite database), naming the file.
        LmraIOError: the file cannot be opened (permissions …), naming it.
    """
    p = Path(path)
    if not p.is_file():
        raise LmraInputError("no call cache here (no such file)", file=p)
    from lmra.fileio import read_only_mount

    read_only = read_only_mount(p)
    if write and read_only:
        raise LmraIOError("the call cache is on a read-only filesystem: nothing can be deleted from it (mount it "
                          "writable)", path=p)
    # a WAL database opens read-only only with its shared-memory file, which a read-only filesystem cannot
    # hold: there, read it as immutable (nothing can write it meanwhile; break-it round 2, s42)
    uri = p.resolve().as_uri() + ("?mode=rw" if write else "?mode=ro&immutable=1" if read_only else "?mode=ro")
    try:
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_WAIT_S)
        tables = {name: {c[1] for c in db.execute(f"PRAGMA table_info({name})")}
                  for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise LmraInputError("not an lmra call cache (the file is damaged or is not an SQLite database)",
                                 file=p) from None
        raise LmraIOError(f"cannot open the call cache ({io_reason(exc)})", path=p) from None
    if not {"provider", "model", "created"} <= tables.get("calls", set()):
        db.close()
        raise LmraInputError("not an lmra call cache (no table 'calls' with the columns provider, model, created)",
                             file=p)
    db.execute("PRAGMA busy_timeout = %d" % int(BUSY_WAIT_S * 1000))
    return db


def _has_memo(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pair_memo'").fetchone() is not None


def describe(path: str | Path) -> CacheSummary:
    """What the call cache ``path`` holds: its rows by model, its pair-memo rows and its size.

    Reads the file only (one scan of ``calls``). Shapes: one :class:`ModelRows` per
    (provider, model) pair present; times in Unix seconds.

    Raises:
        LmraInputError: no such file, or not an lmra call cache.
        LmraIOError: the file cannot be read.
    """
    db = _connect(path, write=False)
    try:
        rows = db.execute("SELECT provider, model, COUNT(*), MIN(created), MAX(created) FROM calls "
                          "GROUP BY provider, model ORDER BY COUNT(*) DESC, provider, model").fetchall()
        n_memo = db.execute("SELECT COUNT(*) FROM pair_memo").fetchone()[0] if _has_memo(db) else 0
    except sqlite3.DatabaseError as exc:
        raise _read_error(exc, path) from None
    finally:
        db.close()
    models = tuple(ModelRows(str(p), str(m), int(n), float(lo), float(hi)) for p, m, n, lo, hi in rows)
    return CacheSummary(str(path), sum(m.n for m in models), int(n_memo), size_on_disk(path), models)


def _read_error(exc: sqlite3.DatabaseError, path) -> Exception:
    if is_damage(exc):
        return LmraInputError("the call cache is damaged (SQLite: " + str(exc) + ")", file=path)
    return LmraIOError(f"cannot read or write the call cache ({io_reason(exc)})", path=path)


def prune(path: str | Path, older_than_s: float, *, dry_run: bool = False, vacuum: bool = True,
          now: float | None = None) -> PruneResult:
    """Delete the calls and pair-memo rows of the call cache ``path`` stored more than
    ``older_than_s`` seconds before ``now`` (default: the current time), then ``VACUUM``.

    A row's age is that of its ``created`` column (when it was written, by the writing
    machine's clock); rows stored "in the future" (a clock that was ahead) are kept. Deleted in
    transactions of :data:`PRUNE_CHUNK_ROWS` consecutive row ids, so a running audit on the same
    cache goes on (it makes a pruned call again if it needs it).

    Args:
        older_than_s: age in seconds, > 0.
        dry_run: count only; nothing is written.
        vacuum: rewrite the file afterwards to give the space back (needs free space of about
            the kept rows' size; see :attr:`PruneResult.vacuum_failed`).

    Raises:
        ValueError: ``older_than_s`` not > 0.
        LmraInputError: no such file, or not an lmra call cache (or damaged).
        LmraIOError: a delete could not be written (disk full, read-only file, the database
            locked for longer than :data:`BUSY_WAIT_S`); the rows deleted before it stay deleted.
    """
    if not older_than_s > 0:
        raise ValueError(f"the age must be > 0 seconds, got {older_than_s}")
    cutoff = (time.time() if now is None else now) - older_than_s
    before = size_on_disk(path)
    db = _connect(path, write=not dry_run)
    try:
        memo = _has_memo(db)
        if dry_run:
            n_calls = db.execute("SELECT COUNT(*) FROM calls WHERE created < ?", (cutoff,)).fetchone()[0]
            n_memo = db.execute("SELECT COUNT(*) FROM pair_memo WHERE created < ?", (cutoff,)).fetchone()[0] \
                if memo else 0
            kept = db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] - n_calls
            return PruneResult(cutoff, int(n_calls), int(n_memo), int(kept), before, before, False, None)
        n_calls = _delete_older(db, "calls", cutoff)
        n_memo = _delete_older(db, "pair_memo", cutoff) if memo else 0
        kept = db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        vacuumed, failed = False, None
        if vacuum and (n_calls or n_memo):
            try:
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                vacuumed = True
            except sqlite3.Error as exc:
                failed = io_reason(exc)
    except sqlite3.DatabaseError as exc:
        raise _read_error(exc, path) from None
    finally:
        db.close()
    return PruneResult(cutoff, n_calls, n_memo, int(kept), before, size_on_disk(path), vacuumed, failed)


def _delete_older(db: sqlite3.Connection, table: str, cutoff: float) -> int:
    """Delete ``table``'s rows with ``created < cutoff`` in windows of row ids; the rows deleted."""
    lo, hi = db.execute(f"SELECT MIN(rowid), MAX(rowid) FROM {table}").fetchone()
    if lo is None:
        return 0
    deleted = 0
    start = lo
    while start <= hi:
        db.execute("BEGIN IMMEDIATE")
        try:
            cur = db.execute(f"DELETE FROM {table} WHERE rowid >= ? AND rowid < ? AND created < ?",
                             (start, start + PRUNE_CHUNK_ROWS, cutoff))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        deleted += cur.rowcount
        start += PRUNE_CHUNK_ROWS
    return deleted

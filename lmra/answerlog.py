"""The answer log of a call cache: every answered call in the kernel before its batch is written.

:class:`~lmra.cache.CallCache` writes answered calls to SQLite in batches (one transaction per
50 ms or 500 calls, issue 14), so a process killed with ``kill -9`` (or by the OOM killer)
between an answer and its batch's COMMIT would lose the calls answered meanwhile. To lose
none, each answered call's row is also appended to a log file next to the database — one
``write`` of one JSON line, no ``fsync``: once ``write`` returns, the line is in the
operating system's page cache and survives the death of the process (not a power cut, as
SQLite's own ``synchronous=NORMAL`` does not) — and the log is emptied once every answered
call is in the database.

Each cache connection has its own log, ``<cache>-answers-<pid>-<id>.log``, locked with
``flock`` while it is open. Opening the cache first takes over every log whose lock is free
(its writer is gone): their rows go into the database (``INSERT OR IGNORE``: a row already
written is kept as it is; a line cut short by the kill is skipped), then the logs are
deleted. A cache closed cleanly deletes its log; one closed with calls it could not write
(disk full) keeps it, so that the next open stores them.

When the log cannot hold them either (it shares the cache's full disk), the calls held then,
and every call answered after, go on in a log on another disk (:func:`failover_log`: a
``kill -9`` while the disk is full loses none of them); without one, the calls still held
when the run gives up are *spilled* (:func:`spill`) to a log of the same form in a folder on
another disk — ``$LMRA_SPILL_DIR`` if set, else the temporary folder's
``lmra-unsaved-calls-<uid>``, else ``~/.cache/lmra/unsaved-calls``, each only when it is the
user's own and writable by no one else — named after the cache's real path
(``<sha256[:16]>-answers-…log``), where the next open of the same cache finds and stores them
(break-it finding: with the cache's disk full past ``cache_write_retry_s``, 151 of 162
answered calls were asked, and paid for, again).
"""

from __future__ import annotations

import glob
import hashlib
import os
import tempfile
import uuid
from pathlib import Path

from pydantic_core import from_json, to_json

try:
    import fcntl
except ImportError:  # not POSIX: no answer log (the batches' window stays)
    fcntl = None  # type: ignore[assignment]

#: the columns of a ``calls`` row: key, provider, base_url, model, request, result, created
ROW_FIELDS = 7


def _locked(fd: int) -> bool:
    """Take an exclusive lock on ``fd`` without waiting; False when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _row(line: bytes) -> tuple | None:
    """A ``calls`` row read back from a log line, or None for a line that is not one (cut short)."""
    try:
        value = from_json(line)
    except ValueError:
        return None
    if (not isinstance(value, list) or len(value) != ROW_FIELDS or not all(isinstance(v, str) for v in value[:6])
            or not isinstance(value[6], (int, float)) or isinstance(value[6], bool)):
        return None
    return tuple(value)


class AnswerLog:
    """The answer log of one cache connection (see the module docstring).

    Args:
        cache_path: the cache's database file.

    Raises:
        OSError: the log cannot be created (the caller then goes on without one).
    """

    def __init__(self, cache_path: str | Path, folder: Path | None = None):
        base = Path(cache_path) if folder is None else folder / _spill_stem(cache_path)
        tmp = base.with_name(f"{base.name}-answers-{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            if not _locked(fd):  # a new file: nobody else can hold it
                raise OSError(f"cannot lock {tmp}")
            self.path = tmp.with_suffix(".log")
            os.rename(tmp, self.path)  # found by recover() only once it is locked
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        self.fd: int | None = fd
        self.lines = 0  # lines written since the log was last emptied
        self.failed = False  # a write failed (disk full): the calls are still held in memory
        self._cut = False  # the log ends with a line cut short that could not be taken back

    def append(self, row: tuple) -> None:
        """Log one answered call's ``calls`` row (one ``write``; a failure is noted, not raised:
        the call is still held in memory until its batch is written)."""
        if self.fd is None:
            return
        if self._cut:  # a cut line could not be taken back: nothing is glued to it
            self.failed = True
            return
        line = to_json(row) + b"\n"
        try:
            n = os.write(self.fd, line)
        except OSError:
            self.failed = True
            return
        if n < len(line):  # the disk filled (or a file size limit) mid-line: take the cut line back
            # (break-it finding: the next line was glued to it, and both were lost on recovery)
            self.failed = True
            try:
                os.ftruncate(self.fd, os.fstat(self.fd).st_size - n)
            except OSError:
                self._cut = True  # recover() skips a cut last line; no line may follow it
            return
        self.lines += 1

    def clear(self) -> None:
        """Empty the log: every call it holds is in the database."""
        if self.fd is None or not (self.lines or self.failed):
            return  # (a failed log is emptied too: its cut line must not start the next one)
        try:
            os.ftruncate(self.fd, 0)
            self.lines = 0
            self.failed = self._cut = False  # (empty again: every call it missed is in the database)
        except OSError:
            pass  # the rows stay: recovering them later is harmless (INSERT OR IGNORE)

    def close(self, *, keep: bool) -> None:
        """Close the log, and delete it unless ``keep`` (calls in it are not in the database)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        if not keep:
            self.path.unlink(missing_ok=True)
        os.close(fd)


#: suffix of a log kept aside because some of its complete lines could not be read as calls
UNREADABLE_SUFFIX = ".unreadable"


def recover(cache_path: str | Path, unreadable: list[tuple[Path, int]] | None = None
            ) -> tuple[list[tuple], list[tuple[Path, int]]]:
    """The answered calls of the logs whose writers are gone (their lock is free).

    Args:
        unreadable: when given, gets (path, lines) for each log holding complete lines that are
            not ``calls`` rows (the line a kill cut short, the last one, is not counted); such a
            log is renamed to ``<log>.unreadable`` after its readable rows are taken, so that the
            caller can say so and nothing in it is deleted unseen.

    Returns:
        (the ``calls`` rows, in log order; the logs taken over, as (path, locked fd) — pass them
        to :func:`release` once the rows are in the database). Left-over ``.tmp`` files of
        writers killed while creating their log are deleted.
    """
    if fcntl is None:
        return [], []
    base = Path(cache_path)
    rows: list[tuple] = []
    taken: list[tuple[Path, int]] = []
    logs = sorted(base.parent.glob(f"{glob.escape(base.name)}-answers-*"))  # (a name may hold [ ? *)
    stem = _spill_stem(cache_path)
    spilled = set()
    for folder in spill_folders():
        if not _own_folder(folder):
            continue
        try:
            found = sorted(folder.glob(f"{stem}-answers-*"))
        except OSError:
            continue
        logs += found
        spilled.update(found)
    for path in logs:
        if path.suffix not in (".log", ".tmp"):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        if not _locked(fd) or (path in spilled and not _own_file(fd)):  # its writer is alive, or not ours
            os.close(fd)
            continue
        if path.suffix == ".tmp":  # never renamed: empty
            path.unlink(missing_ok=True)
            os.close(fd)
            continue
        try:
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read()
        except OSError:
            os.close(fd)
            continue
        lines = data.split(b"\n")  # every row ends with a newline: the last part is empty or cut short
        read = [_row(line) for line in lines]
        bad = sum(r is None for r in read[:-1])
        rows += [r for r in read if r is not None]
        if bad:
            kept = path.with_name(path.name + UNREADABLE_SUFFIX)
            try:
                os.rename(path, kept)
            except OSError:
                kept = path
            if unreadable is not None:
                unreadable.append((kept, bad))
            os.close(fd)
            continue
        taken.append((path, fd))
    return rows, taken


def release(taken: list[tuple[Path, int]]) -> None:
    """Delete the logs :func:`recover` took over (their rows are in the database now)."""
    for path, fd in taken:
        path.unlink(missing_ok=True)
        os.close(fd)


#: environment variable naming the folder for spilled calls (:func:`spill`), before the defaults
SPILL_ENV = "LMRA_SPILL_DIR"


def spill_folders() -> list[Path]:
    """Where :func:`spill` may write and :func:`recover` looks, in order: ``$LMRA_SPILL_DIR``
    (if set), the temporary folder's ``lmra-unsaved-calls-<uid>``, ``~/.cache/lmra/unsaved-calls``
    — each used only when it is this user's own, writable by no one else (:func:`_own_folder`)."""
    folders = [Path(os.environ[SPILL_ENV])] if os.environ.get(SPILL_ENV) else []
    folders.append(Path(tempfile.gettempdir()) / f"lmra-unsaved-calls-{os.getuid()}")
    try:
        folders.append(Path.home() / ".cache" / "lmra" / "unsaved-calls")
    except RuntimeError:  # no home folder
        pass
    return folders


def _usable_spill_folders():
    """The :func:`spill_folders` that exist (made if need be) and are this user's own, in order."""
    for folder in spill_folders():
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        if _own_folder(folder):  # not another user's, nor open to others
            yield folder


def failover_log(cache_path: str | Path, rows: list[tuple]) -> AnswerLog | None:
    """An answer log on another disk to go on with when a cache's own log failed (its disk is
    full): the first of :func:`spill_folders` whose new log takes every one of ``rows`` (the
    calls held in memory), without ``fsync`` — as the cache's own log, each line survives the
    death of the process once written. The log stays open and locked (its writer is alive); a
    :func:`recover` after a ``kill -9`` finds it as it finds a spilled log. None when no folder
    takes them (break-it finding: with the cache's disk full, the calls answered meanwhile were
    held in memory only, and a ``kill -9`` lost every one of them — 27 to 83 paid calls asked
    again)."""
    if fcntl is None:
        return None
    for folder in _usable_spill_folders():
        try:
            log = AnswerLog(cache_path, folder=folder)
        except OSError:
            continue
        for row in rows:
            log.append(row)
            if log.failed:
                break
        if not log.failed:
            return log
        log.close(keep=False)
    return None


def _own_folder(folder: Path) -> bool:
    """True when ``folder`` is a folder (not a link) owned by this user and writable by no other
    (no group or other write bit): a log in it can only be this user's (break-it finding: with
    a shared folder in /tmp, another local user could plant answers that the next open of the
    cache stored as genuine)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _own_file(fd: int) -> bool:
    """True when the open file ``fd`` belongs to this user and no other may write it."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _spill_stem(cache_path: str | Path) -> str:
    """The name spilled logs of a cache start with: the first 16 hex digits of the SHA-256 of
    its real path (the same cache however its path is written)."""
    return hashlib.sha256(os.path.realpath(cache_path).encode()).hexdigest()[:16]


def spill(cache_path: str | Path, rows: list[tuple]) -> tuple[list[Path], int]:
    """Write ``rows`` (``calls`` rows a cache could not store, nor its answer log hold) to logs
    in :func:`spill_folders`, where the next open of the same cache stores them
    (:func:`recover`): as many as a log takes, then a new log for the rest (a per-file size
    limit, ``ulimit -f``, caps each file: break-it finding — one log had to take them all, so
    a folder that could hold 3,000 of 10,000 rows kept none), then the next folder when a
    folder takes no more.

    Returns:
        (the logs written, in order; how many of ``rows`` they hold — the first that many).
        A log is written, flushed to the disk (``fsync``: it may be all that is left of these
        calls) and closed unlocked: the next :func:`recover` of this cache takes it over; a
        log that took nothing is deleted.
    """
    if fcntl is None or not rows:
        return [], 0
    paths: list[Path] = []
    kept = 0
    for folder in _usable_spill_folders():
        while kept < len(rows):
            try:
                log = AnswerLog(cache_path, folder=folder)
            except OSError:
                break
            took = 0
            for row in rows[kept:]:
                log.append(row)
                if log.failed:
                    break
                took += 1
            if took:
                try:
                    os.fsync(log.fd)
                except OSError:
                    took = 0
            path = log.path
            log.close(keep=took > 0)
            if not took:  # this folder takes no more: the next one
                break
            paths.append(path)
            kept += took
        if kept == len(rows):
            break
    return paths, kept


__all__ = ["AnswerLog", "ROW_FIELDS", "SPILL_ENV", "failover_log", "recover", "release", "spill", "spill_folders"]

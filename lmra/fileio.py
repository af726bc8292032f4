"""Writing output files atomically, with I/O failures that name the path.

Every file of a run folder (and every export) is written to a temporary file in the same
folder and then renamed over the target (``os.replace``, atomic on POSIX): a reader, a
crash, ``kill -9`` or a full disk never leaves a file cut mid-record; the old version, or
none, stays. A write that fails (disk full, read-only folder) removes its temporary file and
raises :class:`~lmra.errors.LmraIOError` naming the file (the CLI exits with status 1).
"""

from __future__ import annotations

import errno

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from lmra.errors import LmraInputError, LmraIOError, io_reason


def process_umask() -> int:
    """The process umask (from /proc, which reads it without changing it; else os.umask twice)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on a clean exit it is flushed, synced and
    renamed to ``path``; on an error it is removed and ``path`` is left as it was.

    Args:
        path: the final file.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        encoding: text encoding (ignored for bytes).

    Raises:
        LmraIOError: the file could not be written (naming ``path``).
    """
    path = Path(path)
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~process_umask())  # the mode a plain open() would give (mkstemp makes 0600)
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as exc:
        if "Failed to read file" in str(exc):  # DuckDB reading what is written (lmra.pairstore.reading names it)
            raise
        raise LmraIOError(f"cannot write this file ({io_reason(exc)})", path=path) from None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


@contextmanager
def atomic_files(folder: str | Path) -> Iterator[Callable[[str], Path]]:
    """Write several files of ``folder`` as one set: yields ``stage(name)``, the path to write
    the file ``name`` to (a hidden one beside it); on a clean exit the staged files are renamed
    into place in the order they were staged (stage the manifest last), on an error they are
    removed and no file of the set is touched — a full disk cannot leave a new table beside an
    old summary, nor a complete-looking table without its manifest (break-it finding: ``lmra
    recsys score`` left ``recsys_similarity.csv`` and no manifest).

    Raises:
        LmraIOError: a staged file could not be written (naming the file it was for) or renamed.
    """
    folder = Path(folder)
    staged: dict[Path, Path] = {}  # hidden file → the file of the set it becomes

    def stage(name: str) -> Path:
        final = folder / name
        hidden = folder / f".{name}.staged-{os.getpid()}"
        staged[hidden] = final
        return hidden

    try:
        yield stage
        for hidden, final in staged.items():
            os.replace(hidden, final)
    except LmraIOError as exc:
        raise LmraIOError(exc.reason, path=staged.get(Path(exc.path), exc.path)) from None
    except OSError as exc:  # a rename (renames need no space: a vanished or read-only folder)
        raise LmraIOError(f"cannot write this file ({io_reason(exc)})", path=folder) from None
    finally:
        for hidden in staged:
            try:
                os.unlink(hidden)
            except OSError:
                pass


@contextmanager
def held_lock(path: str | Path, busy: str, what: str) -> Iterator[Path]:
    """Hold an exclusive, non-blocking ``flock`` on ``path`` for the ``with`` block: a folder
    (locked itself: nothing is added to it), or a lock file (created, with its folder; it stays —
    only a held lock means busy). The lock goes with the process, also when it is killed.

    Args:
        path: an existing folder, or the lock file.
        busy: the message when another process holds it (what is running, what to do).
        what: the lock's owner in words, for the message when it cannot be opened
            (``"the merge's"``).

    Raises:
        LmraIOError: another process holds it (``busy``), or it cannot be opened (naming it)."""
    import fcntl

    path = Path(path)
    try:
        if path.is_dir():
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    except OSError as exc:
        raise LmraIOError(f"cannot open {what} lock ({io_reason(exc)})", path=path) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise LmraIOError(busy, path=path) from None
        yield path
    finally:
        os.close(fd)


def blocking_file(path: str | Path) -> Path | None:
    """What keeps ``path`` from being created: its nearest existing ancestor when that is not a
    folder (``afile/sub`` cannot be created under the file ``afile``).

    Args:
        path: a file or folder to be created (relative to the working directory if relative).

    Returns:
        that ancestor, or None (also when the nearest existing ancestor is a folder). Raises
        nothing (an ancestor that cannot be examined counts as absent).
    """
    for parent in Path(path).absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def dangling_link(path: str | Path, *, file_ok: bool = False) -> Path | None:
    """The symbolic link to nothing that keeps ``path`` from being created: ``path`` itself or
    the nearest folder on the way to it that is such a link; None when there is none. With
    ``file_ok``, ``path`` itself may be a link to a file yet to be made in an existing folder
    (SQLite makes the file through the link). Raises nothing."""
    p = Path(path)
    try:
        for i, part in enumerate((p, *p.parents)):
            if part.is_symlink() and not part.exists():
                if i == 0 and file_ok and resolved(part).parent.is_dir():
                    continue
                return part
            if part.exists():
                return None
    except OSError:
        return None
    return None


def symlink_loop(path: str | Path) -> bool:
    """True when ``path`` (or a folder on the way to it) is a symbolic link that leads back to
    itself, so that no file can ever be read or written there (``Path.resolve`` raises
    ``RuntimeError`` on one in Python 3.11–3.12; break-it finding: a traceback)."""
    try:
        Path(path).resolve()
    except RuntimeError:
        return True
    except OSError as exc:  # Python ≥ 3.13: ELOOP as an OSError
        return exc.errno == errno.ELOOP
    return False


def resolved(path: str | Path) -> Path:
    """``Path(path).resolve()``, or its absolute form when a symbolic link loop stops the
    resolution (the caller then fails on opening it, with its own message)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError):
        return Path(path).absolute()


def check_utf8_path(path: str | Path, *, file: str | Path | None = None, field: str | None = None) -> None:
    """Refuse a path whose absolute form holds a byte that is not UTF-8 (a file name from another
    system, a Latin-1 mount: Python carries it as a lone surrogate), which lmra cannot write into
    its run folder's JSON files (bad-input break-it, s45: a raw "UnicodeEncodeError … position
    548", and a run folder left holding only its lock).

    Raises:
        LmraInputError: naming ``file`` and ``field`` (a config's, or an option when ``file`` is None).
    """
    full = os.path.abspath(os.fspath(path))
    try:
        full.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = os.fsencode(full[exc.start:exc.end])
        raise LmraInputError(f"the path {os.fsencode(full).decode('utf-8', 'backslashreplace')} holds the byte "
                             f"{byte!r} that is not UTF-8: lmra records its paths in the run folder's JSON files "
                             "and cannot write this one — rename it (or work from a folder whose path is UTF-8)",
                             file=file, field=field) from None


def check_utf8_value(value: str, *, field: str) -> None:
    """Refuse a text option's value that holds a byte that is not UTF-8 (typed in a Latin-1
    terminal or script: Python carries it as a lone surrogate), which lmra cannot write into its
    UTF-8 files (round-2 break-it, s45: ``--name $'bad\\xff'`` read pydantic's "unable to parse raw
    data as a unicode string").

    Raises:
        LmraInputError: naming ``field`` (the option) and the byte.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = os.fsencode(value[exc.start:exc.end])
        raise LmraInputError(f"the value holds the byte {byte!r}, which is not UTF-8: lmra writes it into its UTF-8 "
                             "files — give it in UTF-8", field=field) from None


def check_output_paths(output_dir: str | Path, cache: str, config_path: str | Path | None) -> None:
    """Refuse, before anything is written or any call made, an ``output_dir`` and a call
    ``cache`` (``":memory:"`` for none) that can never be written: a symbolic link loop, an
    output folder that is a file, a cache that is a folder or a device, pipe or socket, or a
    path under a file. Shared by ``lmra audit`` and ``lmra recsys`` (break-it findings: an
    I/O failure, exit 1, after the cache was made).

    Raises:
        LmraInputError: naming ``config_path`` and the field (``output_dir`` or ``cache``).
    """
    out = Path(output_dir)
    db = None if cache == ":memory:" else Path(cache)
    for key, path in (("output_dir", out), ("cache", db)):
        if path is not None:
            check_utf8_path(path, file=config_path, field=key)
    for key, path in (("output_dir", out), ("cache", db)):
        if path is not None and symlink_loop(path):
            raise LmraInputError(f"{path} is a symbolic link loop (it leads back to itself): nothing can be "
                                 "written there", file=config_path, field=key)
    for key, path in (("output_dir", out), ("cache", db)):
        # a link to nothing (break-it finding, s48: validate said valid, the audit failed, exit 1, "cannot create
        # the output folder (File exists)"), as the path or a folder on the way to it (round 2); a cache link
        # whose target's folder exists is made through the link
        link = None if path is None else dangling_link(path, file_ok=key == "cache")
        if link is not None:
            where = "the folder the run folders go to" if key == "output_dir" else "the call cache's SQLite file"
            on_way = "" if link == path else f" (on the way to {path})"
            raise LmraInputError(f"{link}{on_way} is a symbolic link to {resolved(link)}, which does not exist: "
                                 f"{key} names {where} — create what the link points to, or give another path",
                                 file=config_path, field=key)
    if out.exists() and not out.is_dir():
        raise LmraInputError(f"{out} is a file: output_dir names the folder the run folders go to",
                             file=config_path, field="output_dir")
    inside = enclosing_run_folder(out)
    if inside is not None:  # (break-it, s46: every call made, then a run, history and warehouse written inside
        # that run's folder, and exit 1 blaming an unreadable table)
        from lmra.config import config_sets

        in_config = config_sets(config_path, "output_dir", str(output_dir))
        raise LmraInputError(f"{out} is {'the' if resolved(out) == inside else 'inside the'} run folder {inside}: "
                             "output_dir names the folder the run folders go to (e.g. reports), and runs written "
                             "there would sit among that run's files — give its parent or another folder; nothing "
                             "was written", file=config_path if in_config else None,
                             field="output_dir" if in_config else "--output-dir")
    if db is not None and db.is_dir():
        raise LmraInputError(f"{db} is a folder: cache names the call cache's SQLite file (e.g. "
                             f"{db / 'cache.sqlite'})", file=config_path, field="cache")
    if db is not None and db.exists() and not db.is_file():
        raise LmraInputError(f"{db} is not a regular file (a device, pipe or socket): cache names the call "
                             "cache's SQLite file", file=config_path, field="cache")
    text = text_file_not_sqlite(db) if db is not None and db.is_file() else None
    if text is not None:
        raise LmraInputError(f"{db} is a text file (it begins {text!r}), not an SQLite file: cache names the call "
                             "cache's SQLite file, made when absent — point it at another path (nothing was written "
                             "to this one)", file=config_path, field="cache")
    if db is not None and (resolved(db) == resolved(out / "history.sqlite") or _is_run_history(db)):
        # (fault break-it, s44: accepted; every prompt and answer went into the file people archive and
        # publish, under --redact too)
        raise history_as_cache(db, config_path)
    for key, path in (("output_dir", out), ("cache", db)):
        blocked = blocking_file(path) if path is not None else None
        if blocked is not None:
            raise LmraInputError(f"{path} cannot be created: {blocked} is a file, not a folder",
                                 file=config_path, field=key)


def enclosing_run_folder(path: str | Path, own: str | Path | None = None) -> Path | None:
    """The run folder (a folder holding ``manifest.json``) that ``path`` is or lies inside, other
    than ``own``; None when there is none. An export or a report written there would sit among
    another run's files, or replace its exports (round-2 break-it, s45: ``--out B/exports`` replaced
    run B's exported tables with A's)."""
    own_path = Path(own).resolve() if own is not None else None
    for folder in (Path(path).resolve(), *Path(path).resolve().parents):
        if (folder / "manifest.json").is_file():
            return None if folder == own_path else folder
    return None


#: the first bytes of every SQLite database file (sqlite.org/fileformat.html §1.3)
SQLITE_MAGIC = b"SQLite format 3\x00"


def text_file_not_sqlite(path) -> str | None:
    """When ``path`` is a non-empty file of text, not an SQLite database — a config, prompt or
    CSV file named where lmra expects its SQLite file (bad-input break-it, s45: the config itself
    as ``cache`` was an "I/O failure" whose advice was to move it aside as a damaged cache) —
    its first line, cut to 60 characters; else None (absent, empty, an SQLite file, or binary
    bytes, which the damage checks judge)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if not head or head[:len(SQLITE_MAGIC)] == SQLITE_MAGIC[:len(head)]:
        return None
    encoding = ("utf-16" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig")  # (a UTF-16 text: round-2
    if encoding == "utf-8-sig" and b"\x00" in head:  # break-it, s45); NUL bytes without a BOM: binary
        return None
    if encoding == "utf-16" and len(head) % 2:
        head = head[:-1]
    try:
        text = head.decode(encoding)
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # (a character cut at the end of the bytes read is still text)
            return None
        text = head[:exc.start].decode(encoding)
    if not text.strip():  # blank lines only (or a byte-order mark): text, said as such
        return "(blank lines)"
    first = next(line for line in text.splitlines() if line.strip()).strip()
    if not first.isprintable():
        return None  # control characters: not a text file to quote
    return first[:60] + ("…" if len(first) > 60 else "")


#: the tables that make an SQLite file lmra's run history (:mod:`lmra.history`)
RUN_HISTORY_TABLES = frozenset({"runs", "task_metrics"})


def sqlite_tables(db) -> set[str]:
    """The names of the tables of an open SQLite connection ``db``."""
    return {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def history_as_cache(path: str | Path, config_path: str | Path | None = None) -> LmraInputError:
    """The input error of a run history given as the call cache (field ``cache``): the cache
    holds every prompt and answer unredacted, the history is the file that is archived and shared."""
    return LmraInputError(f"{path} is a run history (history.sqlite), not a call cache: the cache holds every "
                          "prompt and answer unredacted, the history is the file that is archived and shared — "
                          "give the cache its own file (e.g. reports/cache.sqlite)", file=config_path, field="cache")


def _is_run_history(path: Path) -> bool:
    """True when ``path`` is an SQLite file holding lmra's run history (:data:`RUN_HISTORY_TABLES`),
    read-only; False for anything else or a file that cannot be read."""
    import sqlite3
    from urllib.parse import quote

    if not path.is_file():
        return False
    try:
        db = sqlite3.connect(f"file:{quote(str(resolved(path)))}?mode=ro", uri=True)
        try:
            names = sqlite_tables(db)
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return RUN_HISTORY_TABLES <= names


def read_only_mount(path: Path) -> bool:
    """True when ``path`` lies on a filesystem mounted read-only (``statvfs``'s ``ST_RDONLY``)."""
    import os

    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def require_writable_cache(cache: str) -> None:
    """Refuse, before any model call, a call cache this user cannot write: the SQLite file
    read-only for them (a run with sudo once created it, owned by root), or its folder, where
    SQLite writes its journal, not writable (break-it finding, s38: found after every call of the
    night was paid for and a 60 s wait, then blamed on a full disk). ``":memory:"`` and a cache
    not created yet (its folder is checked by :func:`check_output_paths`) pass.

    Raises:
        LmraIOError: naming the file, its owner and mode (exit status 1)."""
    import os
    import stat

    from lmra.errors import LmraIOError

    if cache == ":memory:":
        return
    db = Path(cache)
    if db.is_file() and read_only_mount(db):  # (break-it finding, s42: the advice said chown/chmod)
        raise LmraIOError("the call cache is on a read-only filesystem: answered calls could not be stored; "
                          "mount it writable or set another cache", path=db)
    if db.is_file() and not os.access(db, os.R_OK | os.W_OK):
        try:
            st = db.stat()
            import pwd

            owner = pwd.getpwuid(st.st_uid).pw_name
        except (OSError, KeyError, ImportError):
            owner, st = "?", None
        mode = f", mode {stat.S_IMODE(st.st_mode):o}" if st is not None else ""
        raise LmraIOError(f"the call cache cannot be written by this user (owner {owner}{mode}): answered calls could "
                          "not be stored; make it writable for this user (chown/chmod) or set another cache", path=db)
    folder = db.parent if str(db.parent) else Path(".")
    if db.is_file() and folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        raise LmraIOError(f"the call cache's folder {folder} cannot be written by this user: SQLite writes its journal "
                          "there, so no answered call could be stored; make it writable or set another cache", path=db)


def output_folder(path: str | Path, option: str) -> Path:
    """The folder an option names for a command's output files, created if needed.

    Raises:
        LmraInputError: ``path`` is a file, not a folder (exit status 2, naming ``option``;
            break-it finding: ``FileExistsError: [Errno 17]`` as an I/O failure).
        LmraIOError: the folder cannot be created (naming it).
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise LmraInputError(f"is a file: {option} names the folder that receives the output files", file=out,
                             field=option)
    blocked = blocking_file(out)
    if blocked is not None:
        raise LmraInputError(f"cannot be created: {blocked} is a file, not a folder", file=out, field=option)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LmraIOError(f"cannot create the folder ({io_reason(exc)})", path=out) from None
    return out


def overwrite_in_place(path: str | Path, data: bytes) -> bool:
    """Overwrite the existing file ``path`` with ``data`` in the blocks it holds, without a
    temporary file: the last resort for a small record (a run's final manifest) on a disk too
    full for :func:`atomic_open`'s temporary file. Not atomic: used only where the file would
    otherwise keep saying something false (``"running"`` for ever; break-it finding: a recsys
    run on a full disk). Returns True when written, False when ``data`` is larger than the file
    (it might need a new block) or the write failed."""
    try:
        with open(path, "r+b") as fh:
            if len(data) > os.fstat(fh.fileno()).st_size:
                return False
            fh.write(data)
            fh.truncate()
            fh.flush()
            os.fsync(fh.fileno())
        return True
    except OSError:
        return False


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path) as fh:
        fh.write(text)


def json_bytes(obj: Any, *, indent: int | None = 2) -> bytes:
    """The UTF-8 bytes :func:`write_json` writes for ``obj`` (NaN/inf refused: ValueError)."""
    return json.dumps(obj, indent=indent, allow_nan=False, ensure_ascii=False).encode("utf-8")


def write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    """Write JSON atomically; NaN/inf are refused (``allow_nan=False``): convert them first."""
    data = json_bytes(obj, indent=indent)  # (a ValueError before any file is opened)
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_jsonl(path: str | Path, rows: Iterable[Any], dumps: Callable[[Any], str] | None = None) -> None:
    """Write one JSON document per line atomically."""
    dumps = dumps or (lambda r: json.dumps(r, allow_nan=False, ensure_ascii=False))
    with atomic_open(path) as fh:
        for row in rows:
            fh.write(dumps(row) + "\n")


def write_csv(df, path: str | Path, **kwargs) -> None:
    """Write a pandas frame as CSV atomically (``index=False`` unless given)."""
    kwargs.setdefault("index", False)
    with atomic_open(path) as fh:
        df.to_csv(fh, **kwargs)

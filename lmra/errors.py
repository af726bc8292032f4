"""User-facing input errors: they name the file, line and field, and the CLI turns them
into a one-paragraph message with exit status 2 (never a traceback)."""

from __future__ import annotations

from pathlib import Path


class LmraInputError(Exception):
    """Bad user input (config, prompt file, name file, logs …).

    Attributes:
        file: the offending file, when there is one.
        line: 1-based line number in that file, when known.
        field: the offending field or column, when known.
        reason: what is wrong, in plain words.
    """

    def __init__(self, reason: str, *, file: str | Path | None = None, line: int | None = None,
                 field: str | None = None):
        self.reason = reason
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        super().__init__(self.format())

    def format(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f", line {self.line}" if self.line else "")
        parts = [p for p in (where, f"field '{self.field}'" if self.field else "") if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.reason}" if prefix else self.reason


def find_key_line(text: str, key: str, section: str | None = None, occurrence: int | None = None) -> int | None:
    """Best-effort 1-based line of ``key = …`` in TOML ``text``.

    Args:
        text: the TOML text.
        key: the key (or a table name: its header line is returned).
        section: look only inside ``[section]`` / ``[[section]]``.
        occurrence: with an array of tables, look only inside its ``occurrence``-th table (0-based).
    """
    in_section = section is None
    seen = -1
    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("["):
            header = line.strip("[] ")
            if header == key or (section and header == f"{section}.{key}"):
                return i
            if section is not None and header == section:
                seen += 1
                in_section = occurrence is None or seen == occurrence
            else:
                in_section = section is None
            continue
        if in_section and (line.startswith(f"{key} ") or line.startswith(f"{key}=") or line.startswith(f'"{key}"')):
            return i
    return None


def read_input_text(path: str | Path, what: str, *, field: str | None = None) -> str:
    """The text of an input file (UTF-8; a byte-order mark is dropped).

    Args:
        path: the file.
        what: how messages name it, e.g. ``"lists file"``.
        field: the config field that named the file, if any (put in the error).

    Raises:
        LmraInputError: the file is missing, is a folder, is not UTF-8 or cannot be read —
            naming the file (and ``field``).
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise LmraInputError(f"{what} not found", file=p, field=field) from None
    except IsADirectoryError:
        raise LmraInputError(f"{what} is a folder, expected a file", file=p, field=field) from None
    except UnicodeDecodeError as exc:
        raise LmraInputError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})", file=p,
                             field=field) from None
    except OSError as exc:
        raise LmraInputError(f"cannot read {what} ({exc.strerror or exc})", file=p, field=field) from None



class LmraIOError(Exception):
    """A file or database could not be written or opened (disk full, read-only folder …).

    The CLI prints one paragraph naming the path and exits with status 1 (a failure of the
    machine, not of the input). Answered model calls are never dropped silently: the message
    says how many could not be stored.

    Attributes:
        path: the file or folder concerned.
        reason: what failed, in plain words (including the system's own message).
    """

    def __init__(self, reason: str, *, path: str | Path):
        self.reason = reason
        self.path = str(path)
        super().__init__(self.format())

    def format(self) -> str:
        return f"{self.path}: {self.reason}"


def io_reason(exc: BaseException) -> str:
    """A short text for an OS or SQLite error (``No space left on device``, ``database or disk is full`` …)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__

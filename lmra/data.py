"""Loading and validating the audit's inputs: prompt sets (JSONL) and name lists (CSV).

Every problem raises :class:`~lmra.errors.LmraInputError` naming the file, the 1-based
line and the field.
"""

from __future__ import annotations

import csv
import json
import sys
import unicodedata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from lmra.errors import LmraInputError, read_input_text


class PromptRecord(BaseModel):
    """One prompt of a prompt set (methodology §1 step 1)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    text: str
    domain: str | None = None
    task: str | None = None

    @field_validator("id", "text", mode="before")
    @classmethod
    def _as_text(cls, v):
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @field_validator("id", "text")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not str(v).strip():
            raise ValueError("must not be empty")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("contains an invalid Unicode character (a lone surrogate such as \\ud800)") from None
        return v


class NameRecord(BaseModel):
    """One first name with its provenance."""

    model_config = ConfigDict(extra="ignore")

    name: str
    gender: str | None = None
    race: str | None = None
    source: str | None = None


def iter_jsonl(text: str, path: Path):
    """Yield ``(line number, object)`` for each non-blank line of JSONL ``text``.

    Raises:
        LmraInputError: a line that is not valid JSON or not a JSON object (file and line named).
    """
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise LmraInputError(f"malformed JSON ({exc.msg}, column {exc.colno})", file=path, line=lineno) from None
        except (ValueError, RecursionError) as exc:  # e.g. a 5000-digit number, absurd nesting
            raise LmraInputError(f"unreadable JSON ({type(exc).__name__}: {str(exc)[:100]})", file=path,
                                 line=lineno) from None
        if not isinstance(obj, dict):
            raise LmraInputError("each line must be a JSON object", file=path, line=lineno)
        yield lineno, obj


def _prompt_from(obj: dict, p: Path, lineno: int, text_field: str, auto_id: bool) -> PromptRecord:
    if text_field != "text":
        if text_field not in obj:
            raise LmraInputError(f"missing field '{text_field}'", file=p, line=lineno, field=text_field)
        obj = dict(obj) | {"text": obj[text_field]}
    if auto_id and not str(obj.get("id") or "").strip():
        obj = dict(obj) | {"id": f"line-{lineno:06d}"}
    for key in ("domain", "task"):
        if key in obj and (obj[key] is None or not str(obj[key]).strip()):
            obj = {k: v for k, v in obj.items() if k != key}
    try:
        return PromptRecord.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or None
        if field == "text" and text_field != "text":
            field = text_field
        raise LmraInputError(err["msg"], file=p, line=lineno, field=field) from None


def load_prompts(path: str | Path, *, text_field: str = "text", auto_id: bool = False) -> list[PromptRecord]:
    """Read a prompt set or logged traffic.

    Args:
        path: a JSONL file (each non-blank line an object) or a CSV file (header line, one
            prompt per row), chosen by the ``.csv`` suffix. Each record has the text in
            ``text_field`` and optional ``id``, ``domain``, ``task``.
        text_field: name of the field/column holding the prompt text.
        auto_id: records without an ``id`` get ``line-NNNNNN`` from their line number
            (for logged traffic); otherwise a missing id is an error.

    Returns:
        The prompts in file order (length ≥ 1).

    Raises:
        LmraInputError: missing file, malformed JSON line, missing/invalid field, duplicate id,
            or an empty file — naming the file, line and field.
    """
    p = Path(path)
    text = read_input_text(p, "prompt file")
    csv.field_size_limit(sys.maxsize)  # logged prompts can be long
    out: list[PromptRecord] = []
    seen: dict[str, int] = {}

    def add(rec: PromptRecord, lineno: int) -> None:
        if rec.id in seen:
            raise LmraInputError(f"duplicate id '{rec.id}' (first on line {seen[rec.id]})", file=p, line=lineno,
                                 field="id")
        seen[rec.id] = lineno
        out.append(rec)

    if p.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        if reader.fieldnames is None or text_field not in reader.fieldnames:
            raise LmraInputError(f"missing column '{text_field}' in the header line", file=p, line=1,
                                 field=text_field)
        for row in reader:
            if None in row:
                raise LmraInputError("more values than header columns", file=p, line=reader.line_num)
            add(_prompt_from({k: v for k, v in row.items() if v != ""}, p, reader.line_num, text_field, auto_id),
                reader.line_num)
    else:
        for lineno, obj in iter_jsonl(text, p):
            add(_prompt_from(obj, p, lineno, text_field, auto_id), lineno)
    if not out:
        raise LmraInputError("prompt file has no prompts", file=p)
    return out


def load_names(path: str | Path) -> list[NameRecord]:
    """Read a name list CSV.

    Args:
        path: CSV with a header including ``name`` and ``gender`` (``race``, ``source`` and
            other provenance columns optional).

    Returns:
        The names in file order (length ≥ 1).

    Raises:
        LmraInputError: missing file, missing column, empty name, a name with a control
            character (e.g. NUL or TAB), or no rows.
    """
    p = Path(path)
    text = read_input_text(p, "name file")
    reader = csv.DictReader(text.splitlines())
    if reader.fieldnames is None or "name" not in reader.fieldnames:
        raise LmraInputError("missing column 'name' in the header line", file=p, line=1, field="name")
    if "gender" not in reader.fieldnames and "race" not in reader.fieldnames:
        raise LmraInputError("missing column 'gender' (or 'race') in the header line: groups select names by them",
                             file=p, line=1, field="gender")
    out: list[NameRecord] = []
    for row in reader:
        lineno = reader.line_num
        if None in row:
            raise LmraInputError("more values than header columns", file=p, line=lineno)
        name = (row.get("name") or "").strip()
        if not name:
            raise LmraInputError("empty name", file=p, line=lineno, field="name")
        bad = next((ch for ch in name if unicodedata.category(ch) == "Cc"), None)
        if bad is not None:
            raise LmraInputError(f"name {name!r} contains the control character U+{ord(bad):04X}; a name is "
                                 "inserted into the chatbot's context and must be printable text",
                                 file=p, line=lineno, field="name")
        out.append(NameRecord(name=name, gender=(row.get("gender") or "").strip() or None,
                              race=(row.get("race") or "").strip() or None, source=row.get("source")))
    if not out:
        raise LmraInputError("name file has no rows", file=p)
    return out

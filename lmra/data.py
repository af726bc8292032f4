"""Loading and validating the audit's inputs: prompt sets and logged traffic (JSONL or CSV)
and name lists (CSV).

Every problem raises :class:`~lmra.errors.LmraInputError` naming the file, the 1-based
line and the field. The rules and limits (docs/names.md "Rules for a name file",
README "Inputs"):

* CSV is read strictly: a quote that is never closed is an error on the line where it
  opens (it would otherwise swallow the rows after it into one field); a header with a
  column twice, the header repeated as a row, and rows with more or fewer values than the
  header are errors.
* A JSONL line or a CSV record may hold at most :data:`MAX_LINE_CHARS` characters.
* Prompts: ``text`` is a non-blank string of at most :data:`MAX_TEXT_CHARS` characters
  without control characters other than tab and line ends; ``id`` is a non-blank string of
  at most :data:`MAX_ID_CHARS` characters without control characters or ``|`` (it
  separates the parts of a pair id); ``domain`` and ``task`` are strings without control
  characters. Types are strict: a number is not a text. Other keys are ignored, but ``"Task"``
  or ``"Domain"`` (another case) where ``task`` / ``domain`` is missing is an error, and a missing
  text names a key close to it (``"txt"``).
* Names: see :func:`check_name`; the same name (in any case) may appear only once.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from lmra.errors import LmraInputError, read_input_text

#: longest JSONL line or CSV record (characters)
MAX_LINE_CHARS = 1_000_000
#: longest prompt text (characters)
MAX_TEXT_CHARS = 100_000
#: longest prompt id, domain or task (characters)
MAX_ID_CHARS = 200
#: longest name (characters)
MAX_NAME_CHARS = 100
#: words that are not names: pronouns, and the roles and placeholders of lmra's templates
NOT_NAMES = frozenset({
    "i", "me", "my", "mine", "myself", "you", "your", "yours", "yourself", "he", "him", "his", "himself", "she", "her",
    "hers", "herself", "it", "its", "itself", "we", "us", "our", "ours", "they", "them", "their", "theirs", "themself",
    "themselves", "one", "name", "user", "assistant", "system", "human", "none", "null", "unknown",
})
_TEXT_CONTROL_OK = "\t\n\r"


#: Lower-case names excluded from the race x gender list (lmra.namelists) because they are
#: everyday words (in English or in the names' own language), abbreviations, or names of
#: places and figures a response may name as such: scrubbing them from responses
#: (methodology §1.5, whole word, case-insensitive) would also replace the
#: ordinary word ("a long trip", "Hong Kong", "5 mi", "Mon-Thu"), an artefact
#: that only the users with that name would get. Not applied to the FPF
#: gender list, which reproduces the paper's rule (none of its 30 names is
#: in this set anyway). An audit whose own name list draws one of them says so
#: (``summary.json``'s ``names_common_words`` and a warning).
COMMON_WORD_NAMES = frozenset(
    {
        # words
        "april", "bill", "dawn", "dong", "faith", "grace", "guy", "hang",
        "hope", "hung", "joy", "june", "king", "loan", "long", "mark", "may",
        "prince", "rose", "ruby", "son", "summer", "sunny", "tram", "will",
        "young",
        # parts of frequent proper nouns / abbreviations
        "hong", "kong", "mi", "thu",
        # places, institutions and figures a response names as such (break-it finding: a travel plan
        # to Cleveland or San Salvador was scrubbed for those users only, a difference of the pipeline)
        "cleveland", "cornell", "jarvis", "jesus", "roosevelt", "salvador",
        # everyday words in English or in the language the names come from (Spanish, Vietnamese)
        "blanca", "ebony", "julio", "lien", "nam", "trang", "viet", "vinh",
    }
)


def _control_char(v: str, allowed: str = "", categories: tuple[str, ...] = ("Cc", "Cf")) -> str | None:
    """The first control (Cc) or invisible format (Cf) character of ``v`` not in ``allowed``
    (of the Unicode ``categories`` only)."""
    if v.isprintable():
        return None  # no character of category C* or Z* (other than the space): none to find
    rest = v
    for ch in allowed:
        rest = rest.replace(ch, "")
    if rest.isprintable():
        return None
    return next((ch for ch in v if ch not in allowed and unicodedata.category(ch) in categories), None)


def _check_unicode(v: str) -> None:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains an invalid Unicode character (a lone surrogate such as \\ud800)") from None


def check_text(v: str, what: str = "prompt", *, format_chars: bool = False) -> str:
    """A text sent to a model (a prompt, a canary's response): non-blank, valid Unicode, at
    most :data:`MAX_TEXT_CHARS` characters, printable but for tabs and line breaks.

    Args:
        what: how the message names the text.
        format_chars: invisible format characters (Cf) are fine, only control characters (Cc)
            are not — a model's response may hold emoji joined by U+200D.

    Raises:
        ValueError: what is wrong (pydantic puts it in the field's error).
    """
    if not v.strip():
        raise ValueError("must not be empty or blank")
    _check_unicode(v)
    if len(v) > MAX_TEXT_CHARS:
        raise ValueError(f"is {len(v):,} characters long; a {what} may have at most {MAX_TEXT_CHARS:,}")
    bad = _control_char(v, _TEXT_CONTROL_OK, ("Cc",) if format_chars else ("Cc", "Cf"))
    if bad is not None:
        raise ValueError(f"contains the control character U+{ord(bad):04X}; {what} text must be printable "
                         "(tabs and line breaks are fine)")
    return v


def check_single_line(v: str, max_chars: int | None = MAX_ID_CHARS) -> str:
    """A short text on one line (an id, a label, a menu line): non-blank, valid Unicode, at most
    ``max_chars`` characters (None: no limit), without control or invisible format characters
    (a line break, tab, NUL …).

    Raises:
        ValueError: what is wrong.
    """
    if not v.strip():
        raise ValueError("must not be empty or blank")
    _check_unicode(v)
    if max_chars is not None and len(v) > max_chars:
        raise ValueError(f"is {len(v):,} characters long; at most {max_chars} are allowed")
    bad = _control_char(v, categories=("Cc", "Cf", "Zl", "Zp"))  # (U+2028/U+2029: line breaks too; break-it)
    if bad is not None:
        raise ValueError(f"contains the control character U+{ord(bad):04X} (a line break, tab, NUL …)")
    return v


def check_label(v: str, what: str) -> str:
    """A label compared exactly — a domain or task of a prompt file, the taxonomy or a canary
    file: :func:`check_single_line`, and no leading or trailing whitespace (``"write a story "``
    would be a task of its own beside ``"write a story"``: its own ``per_task.csv`` row).

    Args:
        what: how the message names the label (``task``, ``domain`` …).

    Raises:
        ValueError: what is wrong.
    """
    check_single_line(v)
    if v != v.strip():
        raise ValueError(f"{v!r} has leading or trailing whitespace; labels are compared exactly, so it would "
                         f"be another {what} than {v.strip()!r}: remove the whitespace")
    return v


class PromptRecord(BaseModel):
    """One prompt of a prompt set (methodology §1 step 1). Strict types: see the module docstring."""

    model_config = ConfigDict(extra="ignore", strict=True)

    id: str
    text: str
    domain: str | None = None
    task: str | None = None

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        return check_text(v)

    @field_validator("id", "domain", "task")
    @classmethod
    def _label(cls, v: str | None, info) -> str | None:
        if v is None:
            return v
        if info.field_name != "id":
            return check_label(v, info.field_name)
        check_single_line(v)
        if "|" in v:
            raise ValueError(f"id {v!r} contains '|', which separates the parts of a pair id "
                             "(prompt id|comparison|sample)")
        return v


class NameRecord(BaseModel):
    """One first name with its provenance."""

    model_config = ConfigDict(extra="ignore")

    name: str
    gender: str | None = None
    race: str | None = None
    source: str | None = None


class _RepeatedKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_repeated_key(pairs: list[tuple[str, object]]) -> dict:
    """``json.loads``'s ``object_pairs_hook``: the object, or :class:`_RepeatedKey` for a key
    given twice (``{"id": "a", …, "id": "b"}``), which ``json.loads`` would resolve silently."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise _RepeatedKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


#: the strict JSON reader of :func:`iter_jsonl` and :func:`json_document`, made once (``json.loads``
#: with a hook builds a new decoder every call: a sixth of reading a 5,000-line prompt file)
_STRICT = json.JSONDecoder(object_pairs_hook=_no_repeated_key)


def _strict_json(text: str) -> object:
    """``json.loads(text, object_pairs_hook=_no_repeated_key)``, with the same errors (a text
    starting with a byte-order mark is refused as ``json.loads`` refuses it)."""
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _STRICT.decode(text)


def json_document(text: str, path: Path) -> object:
    """A whole file's JSON value, read as strictly as :func:`iter_jsonl` reads a line: a key given
    twice in one object, a number or nesting JSON readers choke on and any malformed JSON are
    input errors naming the file (and the line where the parser stopped).

    Raises:
        LmraInputError: as above.
    """
    try:
        return _strict_json(text)
    except _RepeatedKey as exc:
        raise LmraInputError(f"key {exc.key!r} appears twice in one object (JSON readers keep one of them silently: "
                             "which was meant?)", file=path, field=exc.key) from None
    except json.JSONDecodeError as exc:
        raise LmraInputError(f"malformed JSON ({exc.msg}, column {exc.colno})", file=path, line=exc.lineno) from None
    except RecursionError:
        raise LmraInputError(_TOO_DEEP, file=path) from None
    except ValueError as exc:
        raise LmraInputError(_unreadable(exc), file=path) from None


def _unreadable(exc: ValueError) -> str:
    """The message of JSON that parses but cannot be read (Python's own words cut mid-sentence were
    quoted: "… use sys.set_in" — bad-input break-it, s43): a number of more digits than the reader
    takes is said as such; anything else by its first sentence."""
    text = str(exc)
    if "digits" in text and ("Exceeds the limit" in text or "integer string conversion" in text):
        return "unreadable JSON: a number with more than 4,300 digits (no count or score is that long)"
    first = text.split(";")[0].split(". ")[0]
    return f"unreadable JSON ({type(exc).__name__}: {first[:160]})"


#: the message of JSON nested too deeply for the reader (arrays or objects inside each other, hundreds deep)
_TOO_DEEP = "unreadable JSON: arrays or objects nested too deeply to read (hundreds of levels inside each other)"


def iter_jsonl(text: str, path: Path, *, max_line: int = MAX_LINE_CHARS):
    """Yield ``(line number, object)`` for each non-blank line of JSONL ``text``.

    Lines are split at ``\\n`` only (a JSON string may hold U+2028 and other separators).

    Raises:
        LmraInputError: a line longer than ``max_line`` characters, not valid JSON, not a
            JSON object, or an object with a key given twice (file and line named).
    """
    for lineno, raw in enumerate(text.split("\n"), start=1):
        if len(raw) > max_line:
            raise LmraInputError(f"line is {len(raw):,} characters long; a line may have at most {max_line:,}",
                                 file=path, line=lineno)
        if not raw.strip():
            continue
        try:
            obj = _strict_json(raw)
        except _RepeatedKey as exc:
            raise LmraInputError(f"key {exc.key!r} appears twice in one object (JSON readers keep one of them "
                                 "silently: which was meant?)", file=path, line=lineno, field=exc.key) from None
        except json.JSONDecodeError as exc:
            # a file named otherwise (x.tsv, x.txt) is said to be read as JSON Lines (break-it, s46)
            kind = ("" if Path(path).suffix.lower() in (".jsonl", ".json", ".ndjson") else
                    f" — {'a ' + Path(path).suffix + ' file' if Path(path).suffix else 'a file without a suffix'}"
                    " is read as JSON Lines (one JSON object a line); CSV is "
                    "read from a file whose name ends in .csv")
            raise LmraInputError(f"malformed JSON ({exc.msg}, column {exc.colno}){kind}", file=path,
                                 line=lineno) from None
        except RecursionError:  # absurd nesting (break-it finding, s41: Python's RecursionError was quoted)
            raise LmraInputError(_TOO_DEEP, file=path, line=lineno) from None
        except ValueError as exc:  # e.g. a 5000-digit number
            raise LmraInputError(_unreadable(exc), file=path, line=lineno) from None
        if not isinstance(obj, dict):
            raise LmraInputError("each line must be a JSON object", file=path, line=lineno)
        yield lineno, obj


def csv_records(text: str, path: Path, *, required: tuple[str, ...] = (), one_of: tuple[str, ...] = (),
                max_record: int = MAX_LINE_CHARS) -> Iterator[tuple[int, dict[str, str]]]:
    """Read CSV ``text`` strictly: yield ``(line, row)`` for each non-blank record after the header.

    ``line`` is the line where the record starts (a quoted field may span lines).

    Args:
        text: the file's text (line ends ``\\n``).
        path: the file (named in errors).
        required: columns the header must have (the first missing one is named).
        one_of: the header must have at least one of these columns.
        max_record: longest record in characters.

    Raises:
        LmraInputError: no header; a missing required or a repeated column; a quote that
            is never closed (named on the line where it opens) or text after a closing
            quote; a record longer than ``max_record``; the header repeated as a row; a row
            with more or fewer values than the header.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def feed():
        for i, ln in enumerate(lines):
            if len(ln) > max_record:
                raise LmraInputError(f"line is {len(ln):,} characters long; a line may have at most {max_record:,}",
                                     file=path, line=i + 1)
            yield ln + "\n"

    def first_line(after: int) -> int:
        k = after + 1
        while k <= len(lines) and not lines[k - 1].strip():
            k += 1
        return min(k, max(len(lines), 1))

    old_limit = csv.field_size_limit(max_record + 1)
    try:
        reader = csv.reader(feed(), strict=True)
        header: list[str] | None = None
        end = 0
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                start = first_line(end)
                column = None
                if header is not None and start <= len(lines):  # the column whose quote is at fault
                    k = len(next(csv.reader([lines[start - 1]]), [""])) - 1
                    column = header[k] if 0 <= k < len(header) else None
                if "end of data" in str(exc) or reader.line_num >= len(lines):
                    raise LmraInputError('a quoted field that starts on this line is never closed (a \'"\' is '
                                         "missing), so the lines after it would be read as one value",
                                         file=path, line=start, field=column) from None
                raise LmraInputError(f"malformed CSV ({exc}); put a value that holds commas or quotes in double "
                                     'quotes and double the quotes inside it ("")', file=path,
                                     line=start, field=column) from None
            start, end = first_line(end), reader.line_num
            if sum(len(v) for v in row) > max_record:
                raise LmraInputError(f"record is longer than {max_record:,} characters", file=path, line=start)
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if header is None:
                header = row
                seen = set()
                for col in header:
                    if col in seen:
                        raise LmraInputError(f"column '{col}' appears twice in the header line", file=path,
                                             line=start, field=col)
                    seen.add(col)
                for col in required:
                    if col not in header:
                        raise LmraInputError(f"missing column '{col}' in the header line (it has "
                                             f"{', '.join(repr(h) for h in header)})", file=path, line=start,
                                             field=col)
                if one_of and not set(one_of) & set(header):
                    raise LmraInputError(f"missing column '{one_of[0]}' (or {', '.join(map(repr, one_of[1:]))}) in "
                                         "the header line", file=path, line=start, field=one_of[0])
                continue
            if row == header:
                raise LmraInputError("the header line is repeated here (two CSV files joined?)", file=path,
                                     line=start, field=header[0])
            if len(row) != len(header):
                more = "more" if len(row) > len(header) else "fewer"
                raise LmraInputError(f"{len(row)} value{'s' * (len(row) != 1)}, {more} than the {len(header)} header "
                                     f"columns ({', '.join(header)})", file=path, line=start)
            yield start, dict(zip(header, row))
        if header is None:
            raise LmraInputError("no header line (the file is empty)", file=path)
    finally:
        csv.field_size_limit(old_limit)


def _json_kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, (int, float)):
        return "a number"
    return {list: "an array", dict: "an object"}.get(type(v), type(v).__name__)


#: the labels of a prompt record whose absence sends the prompt to the LMRA's classification
_LABEL_FIELDS = ("domain", "task")


def _misspelt_label(obj: dict) -> tuple[str, str] | None:
    """``(key, label)`` when ``obj`` lacks ``domain`` or ``task`` but has that name in another case
    (``"Task"``, ``"DOMAIN"``): the prompt would silently be classified into a task by the LMRA
    (fresh-user finding, s40: a salary prompt moved into "career advice"). Other keys (``tasks``,
    ``TaskID``, ``subdomain``, user ids …) are metadata and ignored (break-it round 2, s40: a
    close-match rule refused logged traffic with ``uid``, ``_id`` or ``idx`` keys). A missing ``id``
    is numbered by line in logged traffic, and a missing text is an error of its own (with a hint:
    :func:`_text_hint`)."""
    if obj.get("task") is not None and obj.get("domain") is not None:
        return None
    for key in obj:  # (by length first: logged traffic has millions of lines of other keys)
        if len(key) in (4, 6) and key not in _LABEL_FIELDS:
            low = key.casefold()
            if low in _LABEL_FIELDS and obj.get(low) is None:
                return key, low
    return None


def _text_hint(obj: dict, text_field: str) -> str:
    """`` (is 'txt' the text? the text field is 'text')`` — a key close to the missing text field's
    name, for its error message; "" when none is."""
    import difflib

    keys = [k for k in obj if isinstance(k, str)]
    close = difflib.get_close_matches(text_field.casefold(), [k.casefold() for k in keys], n=1, cutoff=0.75)
    if not close:
        return ""
    key = next(k for k in keys if k.casefold() == close[0])
    return f" (is '{key}' the text? the text field is '{text_field}': rename the key, or set text_field)"


def _prompt_from(obj: dict, p: Path, lineno: int, text_field: str, auto_id: bool) -> PromptRecord:
    if (typo := _misspelt_label(obj)) is not None:
        raise LmraInputError(f"'{typo[0]}' is not a field: did you mean '{typo[1]}'? (field names are lower case; "
                             f"without '{typo[1]}' the LMRA would classify the prompt — other keys are ignored)",
                             file=p, line=lineno, field=typo[0])
    if text_field != "text":
        if text_field not in obj:
            raise LmraInputError(f"missing field '{text_field}'{_text_hint(obj, text_field)}", file=p, line=lineno,
                                 field=text_field)
        obj = dict(obj) | {"text": obj[text_field]}
    if auto_id and obj.get("id") is None:  # absent (or null): logged traffic is numbered by line
        obj = dict(obj) | {"id": f"line-{lineno:06d}"}
    for key in ("domain", "task"):  # absent, null or "" all mean "not labelled"
        if key in obj and (obj[key] is None or (isinstance(obj[key], str) and not obj[key].strip())):
            obj = {k: v for k, v in obj.items() if k != key}
        elif type(obj.get(key)) is str:  # one string object per label, not one per prompt (large prompt sets)
            obj[key] = sys.intern(obj[key])
    try:
        return PromptRecord.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or None
        if field == "text" and text_field != "text":
            field = text_field
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing" and field == "text":
            msg += _text_hint(obj, "text")
        if err["type"] == "string_type":
            msg += f" (got {_json_kind(err.get('input'))}; write it as a JSON string in double quotes)"
        raise LmraInputError(msg, file=p, line=lineno, field=field) from None


def prompt_text_key(text: str) -> str:
    """The form in which two prompt texts are the same prompt (:func:`load_prompts`'s ``repeats``):
    Unicode NFKC, case folded, runs of whitespace as one space, no leading or trailing space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def load_prompts(path: str | Path, *, text_field: str = "text", auto_id: bool = False,
                 repeats: list[tuple[int, str, int, str]] | None = None) -> list[PromptRecord]:
    """Read a prompt set or logged traffic.

    Args:
        path: a JSONL file (each non-blank line an object) or a CSV file (header line, one
            prompt per row), chosen by the ``.csv`` suffix. Each record has the text in
            ``text_field`` and optional ``id``, ``domain``, ``task`` (rules: module docstring).
        text_field: name of the field/column holding the prompt text.
        auto_id: records without an ``id`` (absent, null, or an empty CSV cell) get
            ``line-NNNNNN`` from their line number (for logged traffic); otherwise a missing
            id is an error. An id that is present must be valid.
        repeats: when a list, a record whose text is an earlier record's of the same domain and
            task (:func:`prompt_text_key`: Unicode form, case and spacing aside; logged traffic without
            labels: any earlier record's) is left out and appended to it as ``(its line,
            its id, the first's line, the first's id)`` — the same prompt twice is not two
            independent prompts (logged traffic repeats first messages; a file joined with a
            renumbered copy of itself doubled every prompt and narrowed the intervals by a third:
            bad-input break-it, s45). None keeps every record (a run's own prompts, read back).

    Returns:
        The prompts in file order (length ≥ 1).

    Raises:
        LmraInputError: missing file, malformed JSON line or CSV record, missing/invalid
            field, duplicate id, a line over the size limit, or an empty file — naming the
            file, line and field.
    """
    p = Path(path)
    text = read_input_text(p, "prompt file", field="prompts")
    out: list[PromptRecord] = []
    seen: dict[str, tuple[int, int]] = {}  # NFKC id → (its line, its place in out)
    texts: dict[tuple, tuple[int, str]] = {}  # (domain, task, prompt_text_key) → (the first's line, its id)
    repeated_ids: dict[str, tuple[int, str]] = {}  # NFKC id of a record left out as a repeat → (its line, its id)

    def add(rec: PromptRecord, lineno: int) -> None:
        # ids compared as they look: in Unicode's NFKC form ("é" written as one character or as
        # "e" + a combining accent are one id, break-it finding: two ids alike in every table; so are
        # "p1" and its full-width "ｐ１", break-it finding: distinct ids printed alike)
        key = unicodedata.normalize("NFKC", rec.id).strip()  # (and "art-01 " prints as "art-01": break-it)
        if key in seen or key in repeated_ids:
            first_line, first = (seen[key][0], out[seen[key][1]].id) if key in seen else repeated_ids[key]
            same = ("" if rec.id == first else " (the same id with its accents written another way)"
                    if unicodedata.normalize("NFC", rec.id) == unicodedata.normalize("NFC", first)
                    else f" (the same id with leading or trailing whitespace: '{first}')"
                    if rec.id.strip() == first.strip()
                    else f" (written with other characters that look alike, e.g. full-width letters: '{first}')")
            raise LmraInputError(f"duplicate id '{rec.id}'{same} (first on line {first_line})", file=p,
                                 line=lineno, field="id")
        if repeats is not None:  # within one (domain, task): the same text labelled for two tasks stays in both, as
            # the domains/tasks filters may keep either (round-2 break-it, s45: a selected task lost its prompt to
            # its first record in an unselected task)
            text_key = (rec.domain, rec.task, prompt_text_key(rec.text))
            first_text = texts.get(text_key)
            if first_text is not None:
                repeats.append((lineno, rec.id, first_text[0], first_text[1]))
                repeated_ids[key] = (lineno, rec.id)  # (its id is still the file's: never given twice)
                return
            texts[text_key] = (lineno, rec.id)
        seen[key] = (lineno, len(out))
        out.append(rec)

    if p.suffix.lower() == ".csv":
        for lineno, row in csv_records(text, p, required=(text_field,)):
            row = {k: v for k, v in row.items() if v != "" or k == text_field}  # an empty cell = no value
            add(_prompt_from(row, p, lineno, text_field, auto_id), lineno)
    else:
        for lineno, obj in iter_jsonl(text, p):
            add(_prompt_from(obj, p, lineno, text_field, auto_id), lineno)
    if not out:
        raise LmraInputError("prompt file has no prompts", file=p)
    _check_labels(out, [line for line, _ in sorted(seen.values(), key=lambda v: v[1])], p)
    return out


def _check_labels(prompts: list[PromptRecord], lines: list[int], path: Path) -> None:
    """Refuse task and domain labels that would split silently (bad-input break-it, s43): two
    spellings of one label that differ only in case or Unicode form ("Write a story" and "write a
    story": labels are compared exactly, so they were two tasks). (One task name under two domains
    is two tasks on purpose — :func:`lmra.audit.inputs.shared_task_names` says what
    ``prompts_per_task`` does with it.)

    Raises:
        LmraInputError: naming the file, the later line and the field (``task`` or ``domain``)."""
    for field in ("domain", "task"):
        first: dict[str, tuple[str, int]] = {}
        for rec, line in zip(prompts, lines):
            value = getattr(rec, field)
            if value is None:
                continue
            key = unicodedata.normalize("NFKC", value).casefold()
            spelt, at = first.setdefault(key, (value, line))
            if spelt != value:
                raise LmraInputError(f"{field} '{value}' and '{spelt}' (line {at}) are two spellings of one {field}: "
                                     f"labels are compared exactly, so they would be two {field}s — write it one way",
                                     file=path, line=line, field=field)


#: combining marks a letter of a name may carry in a row (Vietnamese has 2, Indic and Tibetan
#: stacks up to 4; more is decoration such as "Zalgo" text, not a name)
MAX_MARK_RUN = 4


def _same_name_key(name: str) -> str:
    """What two spellings of one name share: its compatibility-composed form (NFKC: José typed
    with a combining accent is José, a full-width or mathematical 'Ａｎｎａ' is Anna), without
    case. Only for finding repeats; a name is used as it is written."""
    return unicodedata.normalize("NFKC", name).casefold()


def check_name(name: str) -> str | None:
    """Why ``name`` is not a plausible first name (None when it is).

    The rule: 2 to :data:`MAX_NAME_CHARS` characters; letters (any script, with their
    accents), with single spaces, hyphens, apostrophes or periods between them; it starts
    and ends with a letter; no digits, underscores, brackets, regex characters, control or
    invisible characters; it is not a pronoun or one of lmra's placeholder and role
    words (:data:`NOT_NAMES`: she, he, they, her, him, name, user …); and its letters are of
    one script (by their Unicode names: Latin, Cyrillic, Armenian, full-width, mathematical …;
    kanji with kana excepted) — a mix is a lookalike such as "Annа" with a Cyrillic а.
    """
    bad = _control_char(name)
    if bad is not None:
        kind = "control" if unicodedata.category(bad) == "Cc" else "invisible format"
        return (f"contains the {kind} character U+{ord(bad):04X}; a name is inserted into the chatbot's context "
                "and must be printable text")
    if len(name) > MAX_NAME_CHARS:
        return f"is {len(name):,} characters long; a name may have at most {MAX_NAME_CHARS}"
    letters = sum(ch.isalpha() for ch in name)
    odd = next((ch for ch in name if not (ch.isalpha() or unicodedata.category(ch).startswith("M")
                                         or ch in " '’.-")), None)
    if odd is not None:
        return (f"contains {odd!r}; a name has letters, with spaces, hyphens, apostrophes or periods between "
                "them (no digits, brackets, regex or placeholder characters)")
    if letters < 2:
        return "has fewer than 2 letters (a single initial is not a name)"
    run = max((len(list(marks)) for is_mark, marks in
               itertools.groupby(name, key=lambda ch: unicodedata.category(ch).startswith("M")) if is_mark),
              default=0)
    if run > MAX_MARK_RUN:
        return f"has {run} combining marks in a row (at most {MAX_MARK_RUN} on a letter)"
    last = len(name)  # the last letter may carry combining marks (an accent typed after it: José as e + U+0301)
    while last > 1 and unicodedata.category(name[last - 1]).startswith("M"):
        last -= 1
    if not name[0].isalpha() or not name[last - 1].isalpha():
        return "must start and end with a letter"
    if any(m.group() != ". " for m in re.finditer(r"[ '’.\-]{2,}", name)):  # "St. John" is fine
        return "has two separators in a row"
    if name.casefold() in NOT_NAMES:
        return "is a pronoun or a word of lmra's templates, not a name (the scrubber would replace it everywhere)"
    scripts = {_script(ch) for ch in name if ch.isalpha() and unicodedata.category(ch) != "Lm"}  # (ʼ: a modifier)
    if len(scripts) > 1 and not scripts <= _JAPANESE_SCRIPTS:  # break-it findings: "Annа" (Cyrillic а),
        # "Jօhn" (Armenian օ), "Ann𝖺" (a mathematical letter) beside "Anna" and "John"
        return (f"mixes {' and '.join(s.title() for s in sorted(scripts))} letters (a lookalike of another name? "
                "e.g. Cyrillic 'а' for Latin 'a'); a name is written in one script")
    return None


#: scripts a Japanese name mixes (kanji with kana); any other mix of scripts in one name is refused
_JAPANESE_SCRIPTS = {"CJK", "HIRAGANA", "KATAKANA"}


def _script(ch: str) -> str:
    """The script of a letter by its Unicode name's first word (``LATIN``, ``CYRILLIC`` …)."""
    return unicodedata.name(ch, "UNKNOWN").split(" ", 1)[0]


def load_names(path: str | Path) -> list[NameRecord]:
    """Read a name list CSV.

    Args:
        path: CSV with a header including ``name`` and ``gender`` or ``race`` (``source`` and
            other provenance columns optional).

    Returns:
        The names in file order (length ≥ 1).

    Raises:
        LmraInputError: missing file, malformed CSV (an unterminated quote is named on the
            line where it opens), a missing or repeated column, a name that breaks the rule
            of :func:`check_name`, the same name twice (in any case, in any groups), or no
            rows — naming the file, line and column.
    """
    p = Path(path)
    text = read_input_text(p, "name file", field="names")
    out: list[NameRecord] = []
    seen: dict[str, int] = {}
    for lineno, row in csv_records(text, p, required=("name",), one_of=("gender", "race")):
        name = row["name"].strip()
        if not name:
            raise LmraInputError("empty name", file=p, line=lineno, field="name")
        why = check_name(name)
        if why is not None:
            shown = name if len(name) <= 40 else name[:37] + "..."
            raise LmraInputError(f"name {shown!r} {why} (docs/names.md, 'Rules for a name file')", file=p,
                                 line=lineno, field="name")
        key = _same_name_key(name)
        if key in seen:
            first = out[[_same_name_key(n.name) for n in out].index(key)]
            raise LmraInputError(f"name {name!r} is already on line {seen[key]} (as {first.name!r}, gender "
                                 f"{first.gender!r}, race {first.race!r}); a name may appear once, or it would "
                                 "stand for two groups", file=p, line=lineno, field="name")
        seen[key] = lineno
        out.append(NameRecord(name=name, gender=(row.get("gender") or "").strip() or None,
                              race=(row.get("race") or "").strip() or None, source=row.get("source")))
    if not out:
        raise LmraInputError("name file has no rows", file=p)
    return out

"""Recsys ``lists.jsonl`` files: read one (validated, naming file, line and field on errors) and
score it (``lmra recsys score --lists``) with the metrics of :mod:`lmra.recsys.scoring`."""

from __future__ import annotations

import json
import math

import unicodedata
from collections.abc import Collection
from pathlib import Path

import pandas as pd

from lmra.data import iter_jsonl
from lmra.errors import LmraInputError, LmraIOError, read_input_text
from lmra.fileio import atomic_files, write_csv, write_jsonl
from lmra.recsys.config import DEFAULT_PERMUTATIONS
from lmra.recsys.metrics import CONVENTIONS
from lmra.recsys.outputs import RecsysResult, clean_nan, dump_json, json_default, now
from lmra.recsys.parse import normalize_title, parse_cut, parse_fairllm_code, provider_refused
from lmra.recsys.scoring import (build_summary, nothing_scored, nothing_scored_message, partial_message, score_frame,
                                  unmeasured_attributes)
from lmra.runfolder import package_versions


_LIST_FIELDS = ("compare", "keys", "items")
_JSON_KIND = {str: "string", int: "number", float: "number", bool: "boolean", list: "list", dict: "object"}


def _folded(text: str) -> str:
    """``text`` as its spellings compare: NFKC (full-width letters as their ASCII), letter case
    folded, runs of spaces as one — ``"ａ  Girl"`` and ``"a girl"`` alike."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def read_lists(path: str | Path, *, parser: str | None = None, normalize: bool = True,
               artists: Collection[str] = ()) -> pd.DataFrame:
    """Read a ``lists.jsonl`` file for scoring.

    Each non-blank line is a JSON object with ``instruction_id`` and ``attribute`` (strings;
    ``"neutral"`` for the neutral list; an integer is read as its decimal text, but an
    instruction id written as a number on one line and as a string on another is refused), ``value`` (the injected value; required and
    non-empty for sensitive lists, ignored for neutral ones), optional ``kind``,
    and the list as ``compare``, ``keys`` or ``items`` (first present wins; ``items`` are
    normalised with :func:`~lmra.recsys.parse.normalize_title` unless ``normalize`` is
    False) or as free text ``raw`` (parsed). ``true_pref`` (a list) adds the
    true-preference analysis (on an instruction's neutral list and each of its sensitive lists,
    or on none of them). Records with a non-null ``error`` are counted, not scored.

    Args:
        path: the JSONL file.
        parser: ``lmra`` or ``fairllm-code`` to re-parse every record from ``raw``
            (None = use the stored lists, parsing ``raw`` only where no list is stored).
        normalize: normalise ``items`` lists.
        artists: normalised artist names the ``lmra`` parser cuts from titles (``Hello by Adele``,
            ``Adele - Hello``: :func:`~lmra.recsys.parse.extract_title`) — a run's own, so that its
            lists parse again as the run parsed them.

    Returns:
        A DataFrame with ``instruction_id``, ``attribute``, ``value``, ``kind``, ``compare``,
        ``error`` and the other stored fields.

    Raises:
        LmraInputError: missing file, malformed JSON, a missing or ill-typed field, a
            sensitive record without ``value``, a record with no list and no ``raw``, ``true_pref``
            on only one side of a neutral/sensitive pair — naming
            the file, line and field; duplicate
            (instruction_id, attribute, value); two spellings of one value of an attribute, or
            of one attribute (letter case, spaces or character width: :func:`_folded`); a
            neutral list with a value.
    """
    p = Path(path)
    text = read_input_text(p, "lists file")
    rows: list[dict] = []
    seen: dict[tuple, int] = {}
    spellings: dict[tuple, tuple] = {}  # (attribute, value folded) → (its first spelling, line)
    attr_spellings: dict[str, tuple] = {}  # attribute folded → (its first spelling, line)
    iid_spellings: dict[str, tuple] = {}  # instruction id folded → (its first spelling, line)
    id_written: dict[str, tuple[type, int]] = {}  # instruction id → (JSON type it was first written as, line)
    for lineno, obj in iter_jsonl(text, p):
        for f in ("instruction_id", "attribute"):
            value = obj.get(f)
            if value is None or (isinstance(value, str) and not value.strip()):
                raise LmraInputError("missing or empty (expected a string)", file=p, line=lineno, field=f)
            if type(value) not in (str, int):  # (true, 1.0, a list: break-it finding, it read "missing or empty")
                raise LmraInputError(f"expected a string or an integer, got {json.dumps(value)}", file=p,
                                     line=lineno, field=f)
        iid_type = type(obj["instruction_id"])
        obj["instruction_id"], obj["attribute"] = str(obj["instruction_id"]), str(obj["attribute"])
        first_type, first_line = id_written.setdefault(obj["instruction_id"], (iid_type, lineno))
        if first_type is not iid_type:  # 1 and "1": one instruction or two? (break-it finding: merged silently)
            raise LmraInputError(f"instruction '{obj['instruction_id']}' is written as a {_JSON_KIND[iid_type]} here "
                                 f"and as a {_JSON_KIND[first_type]} on line {first_line}: write each id one way "
                                 "(an integer id is read as its decimal text)", file=p, line=lineno,
                                 field="instruction_id")
        val = obj.get("value", "")
        if val is None:
            val = ""
        if not isinstance(val, str):  # (a number was taken as its text, a group "5": bad-input break-it, s43)
            raise LmraInputError(f"expected a string, the injected value's phrase (got {_JSON_KIND.get(type(val), type(val).__name__)} "
                                 f"{json.dumps(val)}; write it in quotes if it is meant)", file=p, line=lineno,
                                 field="value")
        obj["value"] = str(val).strip()
        # one attribute written two ways ("age" / "Age") would be scored as two attributes, each on part of
        # the instructions (break-it finding, s36: exit 0, SNSR for both); as for values below
        iid_spelled = iid_spellings.setdefault(_folded(obj["instruction_id"]), (obj["instruction_id"], lineno))
        if iid_spelled[0] != obj["instruction_id"]:  # ("m1" and "m1 ": two instructions, one without a neutral
            # list, left out silently: break-it finding, s47)
            raise LmraInputError(f"instruction '{obj['instruction_id']}' is '{iid_spelled[0]}' (line {iid_spelled[1]}) "
                                 "written another way (letter case, spaces or character width): they would be two "
                                 "instructions; write one spelling", file=p, line=lineno, field="instruction_id")
        if obj["attribute"] != "neutral" and _folded(obj["attribute"]) == "neutral":
            raise LmraInputError(f"attribute '{obj['attribute']}': the neutral list's attribute is written 'neutral' "
                                 "(lower case); any other is a sensitive attribute", file=p, line=lineno,
                                 field="attribute")
        attr_spelled = attr_spellings.setdefault(_folded(obj["attribute"]), (obj["attribute"], lineno))
        if attr_spelled[0] != obj["attribute"]:
            raise LmraInputError(f"attribute '{obj['attribute']}' is '{attr_spelled[0]}' (line {attr_spelled[1]}) written "
                                 "another way (letter case, spaces or character width): they would be scored as two "
                                 "attributes; write one spelling", file=p, line=lineno, field="attribute")
        if obj["attribute"] == "neutral" and obj["value"]:  # (break-it finding, s36: accepted, the value ignored)
            raise LmraInputError(f"a neutral list takes no value (\"\" or none), got '{obj['value']}': is it a "
                                 "sensitive list whose attribute is missing?", file=p, line=lineno, field="value")
        if obj["attribute"] != "neutral" and not obj["value"]:
            raise LmraInputError(f"missing or empty: a sensitive list (attribute '{obj['attribute']}') needs the "
                                 "injected value, e.g. \"a girl\"", file=p, line=lineno, field="value")
        key = (obj["instruction_id"], obj["attribute"], obj["value"])
        if key in seen:
            raise LmraInputError(f"duplicate list for instruction '{key[0]}', attribute '{key[1]}', value '{key[2]}' "
                                 f"(first on line {seen[key]})", file=p, line=lineno)
        seen[key] = lineno
        # two spellings of one value (letter case, inner spaces) would be scored as two groups (statistics
        # review: "Male" and "male" read as two values of gender)
        spelled = spellings.setdefault((obj["attribute"], _folded(obj["value"])), (obj["value"], lineno))
        if spelled[0] != obj["value"]:
            raise LmraInputError(f"value '{obj['value']}' of attribute '{obj['attribute']}' is '{spelled[0]}' (line "
                                 f"{spelled[1]}) written another way (letter case, spaces or character width): they "
                                 "would be scored as two values; write one spelling", file=p, line=lineno, field="value")
        err = obj.get("error")
        if err is not None and not isinstance(err, str):
            raise LmraInputError("expected null or the error message (a string)", file=p, line=lineno, field="error")
        obj["error"] = err if err and err.strip() else None  # "" is no error
        for f in ("refusal", "parse_failed"):  # (break-it finding, s35: "false" was read as a refusal, by truthiness)
            if obj.get(f) is not None and not isinstance(obj[f], bool):
                raise LmraInputError(f"expected true, false or null, got {json.dumps(obj[f])}", file=p, line=lineno,
                                     field=f)
        for f in ("instruction_id", "attribute", "value"):
            bad = next((ch for ch in obj[f] if unicodedata.category(ch) == "Cc"), None)
            if bad is not None:
                raise LmraInputError(f"contains the control character U+{ord(bad):04X}", file=p, line=lineno, field=f)
        if obj["error"] is None:
            obj["compare"] = _list_of(obj, p, lineno, parser, normalize, artists)
        else:
            obj["compare"] = []
        tp = obj.get("true_pref")
        if tp is not None and (not isinstance(tp, list) or not all(isinstance(x, (str, int)) and not isinstance(x, bool)
                                                                   for x in tp)):
            raise LmraInputError("expected a list of item ids (strings or integers)", file=p, line=lineno,
                                 field="true_pref")
        if tp is not None:  # an integer id is its text, as in the compared lists (known-items trial, s49: [1, 2] in
            # one list and ["1", "2"] in another shared no item — true-preference SNSR 1.0 from the JSON types alone)
            obj["true_pref"] = [x if isinstance(x, str) else str(x) for x in tp]
        ranks = obj.get("true_pref_ranks")
        if ranks is not None:
            ok_ranks = isinstance(ranks, list) and all(type(x) is int and x >= 1 for x in ranks) and all(
                b > a for a, b in zip(ranks, ranks[1:]))
            if not ok_ranks or not isinstance(tp, list) or len(ranks) != len(tp):
                raise LmraInputError("expected the rank of each 'true_pref' item in its top-K list: one integer ≥ 1 "
                                     "per item, strictly increasing", file=p, line=lineno, field="true_pref_ranks")
        kind = obj.get("kind")
        if kind is None:
            kind = "neutral" if obj["attribute"] == "neutral" else (
                "intersectional" if "+" in obj["attribute"] else "single")
        elif kind not in ("neutral", "single", "intersectional") or (kind == "neutral") != (
                obj["attribute"] == "neutral"):
            raise LmraInputError(f"invalid kind {kind!r} for attribute '{obj['attribute']}' (neutral lists have "
                                 "kind 'neutral'; sensitive ones 'single' or 'intersectional')", file=p, line=lineno,
                                 field="kind")
        obj["kind"] = kind
        obj["_line"] = lineno
        rows.append(obj)
    if not rows:
        raise LmraInputError("lists file has no records", file=p)
    # (a second neutral list of an instruction is a duplicate above: a neutral list has no value)
    neutral_at = {r["instruction_id"]: r["_line"] for r in rows if r["attribute"] == "neutral"}
    for r in rows:
        if r["attribute"] != "neutral" and r["instruction_id"] not in neutral_at:
            raise LmraInputError(f"instruction '{r['instruction_id']}' has sensitive lists but no neutral list "
                                 "(attribute \"neutral\") to compare them with", file=p, line=r["_line"],
                                 field="instruction_id")
    if len(neutral_at) == len(rows):
        raise LmraInputError("only neutral lists: there is no sensitive list to compare", file=p)
    neutral_tp = {r["instruction_id"]: r.get("true_pref") is not None for r in rows
                  if r["attribute"] == "neutral" and r.get("error") is None}
    for r in rows:
        iid = r["instruction_id"]
        if r["attribute"] == "neutral" or r.get("error") is not None or iid not in neutral_tp:
            continue
        if r.get("true_pref") is not None and not neutral_tp[iid]:
            raise LmraInputError(f"has 'true_pref' but the neutral list of instruction '{iid}' (line "
                                 f"{neutral_at[iid]}) has none to compare it with", file=p,
                                 line=r["_line"], field="true_pref")
        if r.get("true_pref") is None and neutral_tp[iid]:
            raise LmraInputError(f"missing: the neutral list of instruction '{iid}' (line {neutral_at[iid]}) has "
                                 "'true_pref', so each of its sensitive lists needs one too (an empty list [] if "
                                 "none of its items is a true preference)", file=p, line=r["_line"], field="true_pref")
    df = pd.DataFrame(rows).drop(columns="_line")
    if "user_id" in df:  # as written (ints, text, None): a record without one (a failed call) made the column float,
        # and an id above 2**53 then read as its neighbour — two users one (known-items trial, s49)
        df["user_id"] = pd.Series([r.get("user_id") for r in rows], index=df.index, dtype=object)
    df.attrs["lines"] = [r["_line"] for r in rows]  # each record's line in the file (for messages)
    return df


def _list_of(obj: dict, p: Path, lineno: int, parser: str | None, normalize: bool,
             artists: Collection[str] = ()) -> list:
    if parser is None:
        for f in _LIST_FIELDS:
            if f in obj and obj[f] is not None:
                v = obj[f]
                if not isinstance(v, list) or not all(isinstance(x, (str, int, float)) and not isinstance(x, bool)
                                                      for x in v):
                    # numbers are taken as their text (item ids, years); true/false, null, lists are not items
                    raise LmraInputError("expected a list of items (strings, or numbers taken as their text)",
                                         file=p, line=lineno, field=f)
                odd = next((x for x in v if isinstance(x, float) and not math.isfinite(x)), None)
                if odd is not None:  # NaN (Python's json.dumps of a missing value) is no title: two read as one
                    # item "nan", and a measured unfairness read as none (bad-input break-it, s45)
                    raise LmraInputError(f"item {v.index(odd) + 1} is {json.dumps(odd)}, not an item (a missing value "
                                         "written by a JSON writer?): leave the item out, or write its title",
                                         file=p, line=lineno, field=f)
                if f == "items" and normalize:
                    keys = [normalize_title(str(x)) for x in v]
                    kept = [k for k in keys if k]
                    obj.setdefault("n_dropped", len(keys) - len(kept))
                    if keys and not kept:  # every item normalised to nothing ("The (1994)", "The"): no list, as
                        obj["parse_failed"] = True  # the same answer in 'raw' (break-it finding: scored as an
                        # empty list, similarity 0, a parser's limit turned into measured unfairness)
                else:
                    kept = [x if isinstance(x, str) else str(x) for x in v]
                obj.setdefault("n_duplicates", len(kept) - len(set(kept)))
                return kept
    raw = obj.get("raw")
    if not isinstance(raw, str):
        what = "no list ('compare', 'keys' or 'items') and no 'raw' text" if parser is None else \
            "re-parsing needs the answer text in 'raw'"
        raise LmraInputError(what, file=p, line=lineno, field="raw")
    # a parser given (--parser) re-parses: its flags replace the stored ones (a record written by
    # a run holds its own parser's refusal and parse_failed); with none, the text of a record
    # without a list is parsed as lmra parses it and flags the file states are kept
    put = obj.__setitem__ if parser is not None else obj.setdefault
    if parser == "fairllm-code":  # as a fairllm-code run records it (lmra.recsys.records): no refusal detection,
        keys = parse_fairllm_code(raw)  # an empty parse scored as an empty list (the released code's reading)
        for key, value in (("refusal", False), ("parse_failed", False), ("empty_parse", not keys), ("n_dropped", 0),
                           ("n_duplicates", len(keys) - len(set(keys)))):
            put(key, value)
        return keys
    parsed, cut_tail = parse_cut(raw, obj.get("finish_reason"), artists=artists)  # (as the run read it)
    stopped = provider_refused(obj.get("finish_reason"), parsed.items)  # as the run read it (break-it round 2)
    for key in ("n_dropped", "n_duplicates"):
        put(key, getattr(parsed, key))
    put("cut_tail", cut_tail)
    put("refusal", parsed.refusal or stopped)
    put("parse_failed", parsed.parse_failed and not stopped)
    put("empty_parse", False)
    return parsed.keys


#: the lists a ``recsys score`` scored, one per record of its input, as it read them
SCORED_LISTS = "scored_lists.jsonl"
#: the fields of :data:`SCORED_LISTS` (those the input's records have)
_SCORED_FIELDS = ("instruction_id", "attribute", "value", "kind", "name", "user_id", "format", "compare", "refusal",
                  "parse_failed", "n_dropped", "n_duplicates", "cut_tail", "error")


def _scored_records(lists: pd.DataFrame) -> list[dict]:
    """Per record of the lists file, what was scored: its identity, the list compared (``compare``:
    the keys, after parsing ``raw`` and normalising), and whether it was a refusal, unparseable,
    or a failed call (fresh-user finding: the parsed lists could not be seen without Python)."""
    cols = [c for c in _SCORED_FIELDS if c in lists.columns]

    def value(v):  # lists as lists; a whole number a pandas column made float as an int; no NaN nor infinity
        if isinstance(v, (list, tuple)):
            return list(v)
        if isinstance(v, float):
            return None if not math.isfinite(v) else int(v) if v.is_integer() else v
        return v

    return [{c: value(v) for c, v in zip(cols, row)} for row in lists[cols].itertuples(index=False, name=None)]


def score_lists(path: str | Path, *, k: int = 20, convention: str = "paper", parser: str | None = None,
                normalize: bool = True, out_dir: str | Path | None = None, permutations: int = DEFAULT_PERMUTATIONS,
                seed: int = 0, new_dir: bool = False, artists: Collection[str] = ()) -> RecsysResult:
    """Score an existing ``lists.jsonl`` (``lmra recsys score --lists``).

    Args:
        path: the lists file (see :func:`read_lists` for the format).
        k: largest cut-off K.
        convention: ``paper``, ``paper-k`` or ``fairllm-code`` (docs/recsys.md §1).
        parser: re-parse ``raw`` with ``lmra`` or ``fairllm-code`` (None = stored lists).
        normalize: normalise ``items`` lists.
        out_dir: folder for ``recsys_similarity.csv``, ``recsys_fairness.csv``,
            :data:`SCORED_LISTS`, ``summary.json`` and ``manifest.json`` (created; None = write nothing).
        permutations, seed: the permutation test of SNSR/SNSV (:func:`score_frame`; 0 = none).
        new_dir: write to a new folder ``out_dir``, or ``out_dir-2``, ``-3`` … when it is taken
            (:func:`lmra.runstate.claim_run_dir`: two commands started in the same second get two).
        artists: normalised names :func:`~lmra.recsys.parse.parse_list` cuts from titles when it
            parses ``raw`` (a run's ``manifest.json`` ``parse_artists``).

    Returns:
        :class:`RecsysResult` (``run_dir`` = ``out_dir`` or the lists file's folder).

    Raises:
        LmraInputError: a malformed lists file, a sensitive list whose instruction has no
            neutral list, or a bad K / convention.
    """
    if convention not in CONVENTIONS:
        raise LmraInputError(f"unknown convention '{convention}' ({', '.join(CONVENTIONS)})", field="convention")
    if k < 1:
        raise LmraInputError(f"K must be ≥ 1, got {k}", field="k")
    lists = read_lists(path, parser=parser, normalize=normalize, artists=artists)
    try:
        sim, fair, dropped = score_frame(lists, k=k, convention=convention, permutations=permutations, seed=seed)
    except ValueError as exc:
        raise LmraInputError(str(exc), file=path) from None
    lists = lists.assign(n_items=lists["compare"].map(len))
    summary = build_summary(lists, sim, fair, k=k, convention=convention, dropped=dropped)
    unmeasured = unmeasured_attributes(summary)
    manifest = {"status": "failed" if nothing_scored(summary) else "partial" if unmeasured else "finished",
                "started": now(), "finished": now(),
                "source": str(path), "k": k, "convention": convention, "parser": parser or "stored",
                "permutations": permutations, "seed": seed, "versions": package_versions()}
    if artists:
        manifest["parse_artists"] = sorted(artists)
    if manifest["status"] == "failed":  # why, as lmra recsys's manifest says it
        manifest["stop_reason"] = nothing_scored_message(summary, lists, called=False)
    elif manifest["status"] == "partial":
        manifest["stop_reason"] = partial_message(unmeasured)
    run_dir = Path(out_dir) if out_dir is not None else Path(path).parent
    if out_dir is not None:
        created = new_dir or not run_dir.exists()
        if new_dir:
            from lmra.runstate import claim_run_dir

            run_dir = claim_run_dir(run_dir)
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
        summary["run_dir"] = str(run_dir)
        try:
            with atomic_files(run_dir) as stage:  # all five or none (a full disk: nothing that looks done)
                write_csv(sim, stage("recsys_similarity.csv"))
                write_csv(fair, stage("recsys_fairness.csv"))
                write_jsonl(stage(SCORED_LISTS), _scored_records(lists),  # (no NaN left: _scored_records)
                            dumps=lambda r: json.dumps(r, ensure_ascii=False, default=json_default))
                dump_json(stage("summary.json"), clean_nan(summary))
                dump_json(stage("manifest.json"), manifest)
        except LmraIOError:
            if created:  # the folder this call made holds nothing: not left behind as an empty result
                try:
                    run_dir.rmdir()
                except OSError:
                    pass
            raise
    return RecsysResult(run_dir, lists, sim, fair, summary, manifest)

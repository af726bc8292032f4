"""Bias disparity from files (``lmra recsys bias``): any recommender's input preferences,
recommendations (a CSV or an ``lmra recsys`` ``lists.jsonl``), item categories and user groups
(Mansoury et al. 2019; methodology §7)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmra.errors import LmraInputError, read_input_text
from lmra.recsys import bias_disparity as bdm
from lmra.recsys import movielens as ml
from lmra.recsys.lists import read_lists


def _read_table(path: str | Path, what: str, need: Sequence[str]) -> pd.DataFrame:
    """A CSV with a header line, as strings, read strictly (:func:`lmra.data.csv_records`: a
    quote never closed is an error on the line where it opens, not rows swallowed into one
    value; break-it finding); names and values are stripped of surrounding spaces; every row
    must have the header's number of fields and a non-empty value in every ``need`` column
    (errors name the file and line)."""
    from lmra.data import csv_records

    p = Path(path)
    text = read_input_text(p, f"{what} file")
    if not text.strip():
        raise LmraInputError(f"{what} CSV is empty (expected a header line with {', '.join(need)})", file=p, line=1)
    records = csv_records(text, p)
    body: list[tuple[int, list[str]]] = []
    header: list[str] | None = None
    for lineno, row in records:
        if header is None:
            header = [c.strip() for c in row]
            _check_header(header, need, p)
        body.append((lineno, [v.strip() for v in row.values()]))
    if header is None:  # a header line only: its columns are checked all the same
        first = next(iter(csv.reader([text.split("\n", 1)[0]])), [])
        _check_header([c.strip() for c in first], need, p)
        raise LmraInputError(f"{what} CSV has a header but no rows", file=p)
    df = pd.DataFrame([r for _, r in body], columns=header)
    df.attrs["lines"] = [n for n, _ in body]
    for c in need:
        empty = [n for n, v in zip(df.attrs["lines"], df[c]) if v == ""]
        if empty:
            raise LmraInputError("empty value", file=p, line=empty[0], field=c)
    return df


def _check_header(header: list[str], need: Sequence[str], path: Path) -> None:
    missing = [c for c in need if c not in header]
    if missing:
        raise LmraInputError(f"CSV needs column(s) {', '.join(need)} in its header line", file=path, line=1,
                             field=missing[0])
    twice = [c for i, c in enumerate(header) if c in header[:i]]
    if twice:
        raise LmraInputError(f"column '{twice[0]}' appears twice in the header line", file=path, line=1,
                             field=twice[0])


def _id(x: Any) -> str:
    """An id as text, with integer ids of ASCII digits canonical (``"01"`` and ``1`` are both
    ``"1"``); any other text as it is (``"²"`` or ``"1١"`` are not numbers: break-it finding —
    ``int`` crashed on the one and read the other as 11)."""
    t = str(x).strip()
    digits = t[1:] if t.startswith("-") else t
    return str(int(t)) if digits.isascii() and digits.isdigit() else t


def _one_spelling(values, lines, path: str | Path, field: str, what: str) -> None:
    """Refuse two spellings of one group label or genre name ("Male" beside "male", "a" beside
    "A"): compared exactly, they would be two groups or categories and change every count of
    eq. 4 (break-it finding, s47: average disparity 1.25 → 0.5, exit 0). ``values`` is an
    iterable of (row index, label); ``lines`` the rows' file lines (or None).

    Raises:
        LmraInputError: naming the file, the later line and ``field``."""
    from lmra.recsys.lists import _folded

    first: dict[str, tuple[str, int]] = {}
    for i, value in values:
        spelt, at = first.setdefault(_folded(value), (value, i))
        if spelt != value:
            where = f" (line {lines[at]})" if lines else ""
            raise LmraInputError(f"{what} '{value}' is '{spelt}'{where} written another way (letter case, spaces or "
                                 f"character width): they would count as two {what}s; write one spelling", file=path,
                                 line=lines[i] if lines else None, field=field)


def bias_from_files(train: str | Path, recs: str | Path, items: str | Path, users: str | Path, *,
                    group_by: str = "gender", k: int | None = None, unprotected: str | None = None,
                    protected: str | None = None
                    ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float], dict[str, int]]:
    """Bias disparity of any recommender's output (Mansoury et al. 2019; methodology §7).

    Args:
        train: input preferences T — MovieLens ``ratings.dat`` or a CSV with ``user_id``,
            ``item_id`` (every row is one interaction).
        recs: recommendations R — a CSV with ``user_id``, ``item_id`` (optional ``variant``
            column: one table per variant), or an ``lmra recsys`` ``lists.jsonl`` with
            ``user_id`` (variant = the prompt's attribute). From a lists.jsonl, R is the
            catalogue-matched items among each top-k list (``top_k_matched``: the run's top-K
            list as catalogue ids, null for a title not in the catalogue): an unmatched title
            in the top k is counted, never replaced by a title ranked below k. Records written
            before ``top_k_matched`` existed take the ranks from ``compare`` (``#<id>`` entries)
            or, without ``recommended``, from ``matched``; pass the run's K as ``k`` for them.
        items: categories — MovieLens ``movies.dat`` or a CSV with ``item_id`` and ``genres``
            (``|``-separated, names stripped: :func:`lmra.recsys.movielens.split_genres`); its
            items are the catalog I.
        users: groups — MovieLens ``users.dat`` (columns ``gender``, ``age_group``,
            ``occupation_label``) or a CSV with ``user_id`` and the ``group_by`` column.
        group_by: the users column that defines groups.
        k: cut-off: the first k distinct items per user and variant of a CSV (a repeated row is
            counted once, not toward k); the matched items among
            the top-k list of a lists.jsonl (None = all rows; the run's own top-K list).
        unprotected, protected: group labels for the average-disparity difference (both or
            neither; default male and female when grouping by gender and either exists —
            then both must).

    Returns:
        (table with a ``variant`` column, :func:`~lmra.recsys.bias_disparity.disparity_summary`,
        item coverage per variant, counts). ``summary.attrs["notes"]`` says which variants
        have no comparison row because a compared group received no recommendation there. Counts are empty for a CSV; for a lists.jsonl
        ``{"lists": lists with a user_id and a top-k list, "unmatched_top_k": titles in those
        top-k lists that are not in the catalogue}``.

    Raises:
        LmraInputError: missing or empty file, missing column, a line with the wrong number
            of values, empty id or group value, an empty genre name or a genre twice in one cell,
            duplicate item or user id, an item not in ``items`` (in
            ``train`` or ``recs``), a ``recs`` user not in ``users``, no ``recs`` user with a
            training row (``summary.attrs["notes"]`` counts the users without one otherwise), ``k`` < 1, unknown
            ``group_by``, an ``unprotected``/``protected`` label no user has, only one of
            the two, or the same label for both. Integer ids are compared as numbers (``01`` = ``1``).
    """
    def is_dat(p):
        return str(p).endswith(".dat")

    if k is not None and k < 1:
        raise LmraInputError(f"k must be ≥ 1, got {k}", field="k")
    if unprotected is not None and unprotected == protected:
        raise LmraInputError(f"the unprotected and the protected group are both '{protected}': the average "
                             "disparity compares two different groups", field="protected")

    def unique(df: pd.DataFrame, col: str, path: str | Path, raw: pd.Series | None = None) -> None:
        dup = df[col].duplicated()
        if dup.any():
            i = int(np.flatnonzero(dup.to_numpy())[0])
            lines = df.attrs.get("lines")
            said = f"duplicate {col} '{df[col].iloc[i]}'"
            if raw is not None:  # (break-it L5: '01' and '1' read as one id said only "duplicate '1'")
                first = int(np.flatnonzero((df[col] == df[col].iloc[i]).to_numpy())[0])
                a, b = str(raw.iloc[first]).strip(), str(raw.iloc[i]).strip()
                if a != b:
                    where = f" on line {lines[first]}" if lines else ""
                    said += (f": '{b}' and '{a}'{where} are one id (integer ids are compared as numbers, so that a "
                             "lists.jsonl's numbers match the CSV's texts; give distinct ids distinct numbers)")
            raise LmraInputError(said, file=path, line=lines[i] if lines else None, field=col)

    def known(df: pd.DataFrame, col: str, allowed: dict, path: str | Path, what: str, source: str | Path) -> None:
        bad = ~df[col].isin(allowed)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            lines = df.attrs.get("lines")
            where = {"line": lines[i]} if lines else {}
            raise LmraInputError(f"{what} '{df[col].iloc[i]}' is not in {source}"
                                 f" ({int(bad.sum())} such row(s))", file=path, field=col, **where)

    if is_dat(items):
        mv = ml.load_movies(items)
        cats = {_id(i): g for i, g in zip(mv["item_id"], mv["genres"])}
        item_lines = None
    else:
        it = _read_table(items, "items", ["item_id", "genres"])
        raw_items = it["item_id"].copy()
        it["item_id"] = it["item_id"].map(_id)
        unique(it, "item_id", items, raw_items)
        cats = {i: ml.split_genres(gs, file=items, line=n)
                for i, gs, n in zip(it["item_id"], it["genres"], it.attrs["lines"])}
        item_lines = it.attrs["lines"]
    _one_spelling(((row, g) for row, gs in enumerate(cats.values()) for g in gs), item_lines, items, "genres",
                  "genre")
    if is_dat(users):
        us = ml.load_users(users)
    else:
        us = _read_table(users, "users", ["user_id"])
    raw_users = us["user_id"].copy()
    us["user_id"] = us["user_id"].map(_id)
    unique(us, "user_id", users, raw_users)
    if group_by not in us.columns:
        raise LmraInputError(f"no column '{group_by}' in the users table ({', '.join(us.columns)})", file=users,
                             field="group_by")
    blank = [i for i, v in enumerate(us[group_by].astype(str)) if not v.strip()]
    if blank:  # a user with no group would form a group named '' and leave the real one
        lines = us.attrs.get("lines")
        raise LmraInputError(f"empty {group_by} value (every user needs a group)", file=users,
                             line=lines[blank[0]] if lines else None, field=group_by)
    _one_spelling(enumerate(us[group_by].astype(str)), us.attrs.get("lines"), users, group_by, "group")
    groups = dict(zip(us["user_id"], us[group_by].astype(str)))
    if is_dat(train):
        t = ml.load_ratings(train)[["user_id", "item_id"]]
        t = pd.DataFrame({"user_id": t["user_id"].map(_id), "item_id": t["item_id"].map(_id)})
    else:
        t = _read_table(train, "train", ["user_id", "item_id"])
        t = t.assign(user_id=t["user_id"].map(_id), item_id=t["item_id"].map(_id))
    known(t, "item_id", cats, train, "item", items)
    counts: dict[str, int] = {}
    notes: list[str] = []
    if str(recs).endswith(".jsonl"):
        rows = []
        frame = read_lists(recs)
        records, record_lines = frame.to_dict(orient="records"), frame.attrs.get("lines") or []
        counts = {"lists": 0, "unmatched_top_k": 0}
        lists_of: dict[tuple[str, str], list[tuple[int | None, Any]]] = {}  # (user, variant) → (line, user_id as written)
        for n, r in enumerate(records):
            top, uid = _top_k_ids(r), r.get("user_id")
            if isinstance(uid, float):  # (a user_id written as a JSON number with a fraction)
                uid = None if math.isnan(uid) else (int(uid) if uid.is_integer() else uid)
            if uid is None or top is None:
                continue
            top = top if k is None else top[:k]
            counts["lists"] += 1
            counts["unmatched_top_k"] += sum(i is None for i in top)
            ids = list(dict.fromkeys(_id(i) for i in top if i is not None))
            rows += [(_id(uid), i, r["attribute"]) for i in ids]
            lists_of.setdefault((_id(uid), r["attribute"]), []).append(
                (record_lines[n] if n < len(record_lines) else None, uid))
        several = {key: at for key, at in lists_of.items() if len(at) > 1}
        if several:  # R is a set of items per user and variant: their lists are joined — said, never silent
            (user, variant), at = next(iter(several.items()))  # (known-items trial, s49: "01" and 1 joined unsaid)
            shown = ", ".join(f"line {line} (user_id {json.dumps(uid)})" for line, uid in at[:4])
            notes.append(f"{len({u for u, _ in several})} user(s) have more than one list of one variant (e.g. user '{user}', "
                         f"variant '{variant}': {shown}; ids of ASCII digits are compared as numbers, so 01 and 1 "
                         "are one user): R is the union of a user's lists of a variant")
        if not rows:
            has_users = any(r.get("user_id") is not None for r in records)
            raise LmraInputError(
                "no list has a recommended item left (matched to the catalog, profile echoes left out), so bias "
                "disparity is undefined" if has_users else
                "no record has 'user_id' and 'matched' (a cfairllm run's lists.jsonl)", file=recs)
        rc = pd.DataFrame(rows, columns=["user_id", "item_id", "variant"])
    else:
        rc = _read_table(recs, "recommendations", ["user_id", "item_id"])
        rc = rc.assign(user_id=rc["user_id"].map(_id), item_id=rc["item_id"].map(_id))
        if "variant" not in rc.columns:
            rc["variant"] = "all"
        else:  # a row without a variant would form a variant named '' (break-it finding, s36), as an empty
            # item_id is refused
            blank = [i for i, v in enumerate(rc["variant"]) if v is None or (isinstance(v, float) and v != v)
                     or not str(v).strip()]
            if blank:
                lines = rc.attrs.get("lines")
                raise LmraInputError("empty value (a row of a file with a variant column needs its variant; leave the "
                                     "column out for one variant)", file=recs,
                                     line=lines[blank[0]] if lines else None, field="variant")
    known(rc, "item_id", cats, recs, "item", items)
    known(rc, "user_id", groups, recs, "user", users)
    repeated = rc.duplicated(["variant", "user_id", "item_id"]).to_numpy()
    if repeated.any():  # counted once by the measure: said, never silent (break-it finding)
        lines, at = rc.attrs.get("lines"), rc.index[int(np.flatnonzero(repeated)[0])]  # (the file's row number)
        first = f" (the first on line {lines[at]})" if lines and isinstance(at, (int, np.integer)) \
            and 0 <= at < len(lines) else ""
        notes.append(f"{int(repeated.sum())} recommendation row(s) repeat a user's item of the same variant{first} "
                     "and are counted once: R is a set of items per user")
        rc = rc[~repeated]
    if k and not counts:  # a CSV: its first k distinct items per user (a lists.jsonl was cut by rank above;
        # statistics review: a repeated row counted toward k, so a user got fewer than k items)
        rc = rc.groupby(["variant", "user_id"], sort=False).head(k)
    # the input preferences are those of the users compared (Mansoury et al.): a user with
    # recommendations but no training row adds nothing to PR_T (break-it finding: training ids
    # 'u1' against recommendation ids '1' — no user's training data, every BD NaN, exit 0, no word)
    recommended = pd.unique(rc["user_id"])
    trained = set(t["user_id"])  # (once: built per user it made MovieLens-1M take over an hour — review finding)
    untrained = [u for u in recommended if u not in trained]
    if len(untrained) == len(recommended):
        sample = ", ".join(f"'{u}'" for u in list(t["user_id"].drop_duplicates()[:3]))
        raise LmraInputError(
            f"no user with recommendations has a training row (e.g. user '{untrained[0]}' of {recs}; training user "
            f"ids: {sample or 'none'}): the input preference ratios, and so every bias disparity, are undefined — "
            "do the files use the same user ids?", file=train, field="user_id")
    if untrained:
        notes.append(f"{len(untrained)} of {len(recommended)} users with recommendations have no training row in "
                     f"{train} (e.g. user '{untrained[0]}'): their group's input preference ratio leaves them out")
        # a whole group without training data has no input preferences: its BD is undefined, and an
        # eq. 4 difference counting its N_T as 0 is not a measurement (verification finding: 1.000, silently)
        for group in sorted({groups[u] for u in recommended}):
            members = [u for u in recommended if groups[u] == group]
            if all(u not in trained for u in members):
                notes.append(f"group {group_by} = '{group}': none of its {len(members)} users with recommendations "
                             f"has a training row, so its input preference ratios are undefined and any difference "
                             "involving it (average disparity, eq. 4) compares recommendations with no training data")
    tables, coverage = [], {}
    # users with training rows and a group who received nothing in a variant leave T there too
    # (T and R describe the same people): said, not silent (review finding)
    candidates = [u for u in pd.unique(t["user_id"]) if u in groups]
    for variant, d in rc.groupby("variant", sort=False):
        recs_v = d[["user_id", "item_id"]]
        left = bdm.users_left_out(candidates, recs_v)
        if left:
            notes.append(bdm.left_out_note(str(variant), len(left), len(candidates), left[0]))
        coverage[str(variant)] = bdm.item_coverage([recs_v["item_id"].tolist()], cats)
        tab = bdm.bias_disparity_table(t, recs_v, groups, cats, list(cats))
        tab.insert(0, "group_by", group_by)
        tab.insert(0, "variant", str(variant))
        tables.append(tab)
    table = pd.concat(tables, ignore_index=True)
    labels = set(groups.values())
    if unprotected is None and protected is None and group_by == "gender" and {"male", "female"} & labels:
        unprotected, protected = "male", "female"  # the default of the config (docs/recsys.md §5): both must exist
    for flag, label in (("unprotected", unprotected), ("protected", protected)):
        if label is not None and label not in labels:
            raise LmraInputError(f"no user has {group_by} = '{label}' (groups: {', '.join(sorted(labels))})",
                                 file=users, field=flag)
    if (unprotected is None) != (protected is None):
        raise LmraInputError("give both --unprotected and --protected (or neither)",
                             field="unprotected" if unprotected is None else "protected")
    summary = bdm.disparity_summary(table, unprotected=unprotected, protected=protected)
    if unprotected is not None:  # a variant whose recommendations lack a group has no comparison row: say so
        compared = set(summary.loc[summary["group"] == f"{unprotected} − {protected}", "variant"]) \
            if "variant" in summary else set()
        for variant, d in table.groupby("variant", sort=False):
            if variant not in compared:
                missing = [g for g in (unprotected, protected) if g not in set(d["group"])]
                notes.append(f"no {unprotected} − {protected} comparison for '{variant}': "
                             f"{' and '.join(missing) or 'either group'} received no recommendation there")
    summary.attrs["notes"] = notes
    return table, summary, coverage, counts


def _top_k_ids(record: dict) -> list | None:
    """A run record's ranked list as catalogue ids, ``None`` for a title not in the catalogue
    (None when the record has no such list).

    ``top_k_matched`` (the top-K list that item similarity compares) in runs since it was added;
    before that the distinct entries of ``compare`` (``#<id>`` = a matched title; a title key
    never starts with ``#``) in runs with ``recommended``, else ``matched`` (aligned with the
    parsed titles)."""
    top = record.get("top_k_matched")
    if isinstance(top, list):
        return top
    if isinstance(record.get("recommended"), list) and isinstance(record.get("compare"), list):
        return [c[1:] if isinstance(c, str) and c.startswith("#") else None for c in dict.fromkeys(record["compare"])]
    matched = record.get("matched")
    return matched if isinstance(matched, list) else None

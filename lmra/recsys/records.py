"""Recsys stage 3 — parse and match: one target answer becomes one ``lists.jsonl`` record — the
parsed list, optionally matched to a catalog (a CSV, or the MovieLens movies of a CFaiRLLM
run), and for CFaiRLLM the top-K list as catalogue ids, profile echoes and the
true-preference list R′.

Reads an :class:`~lmra.recsys.instructions.Instruction` and its answer from
:mod:`lmra.recsys.generate`; writes the record dicts that :mod:`lmra.recsys.scoring` scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lmra.data import csv_records
from lmra.errors import LmraInputError, read_input_text
from lmra.recsys import movielens as ml
from lmra.recsys.config import RecsysConfig
from lmra.recsys.inputs import CfairContext, find_path
from lmra.recsys.instructions import Instruction
from lmra.recsys.metrics import top_k
from lmra.recsys.parse import CatalogMatcher, parse_cut, parse_fairllm_code, provider_refused


def load_catalog(path: str | Path) -> tuple[list[str], list[Any], dict[Any, list[str]]]:
    """Read a catalog for title matching: a MovieLens ``movies.dat`` or a CSV with a ``title``
    column (optional ``id`` and ``genres`` columns, genres ``|``-separated:
    :func:`lmra.recsys.movielens.split_genres`).

    Returns:
        (titles, ids, id → categories).

    Raises:
        LmraInputError: missing file, no ``title`` column, empty title, an empty genre name or
            a genre twice in one cell, one id on two rows (an ``id`` given twice, or a title
            twice without ids: two titles under one id would be one item in every list, and
            the later row's genres would replace the earlier's; break-it finding, s47),
            malformed CSV (with line).
    """
    p = Path(path)
    if p.suffix == ".dat":
        movies = ml.load_movies(p)
        return list(movies["title"]), list(movies["item_id"]), dict(zip(movies["item_id"], movies["genres"]))
    text = read_input_text(p, "catalog file", field="matching.catalog")
    titles, ids, cats = [], [], {}
    seen: dict[str, tuple[int, str]] = {}
    # read strictly (lmra.data.csv_records): a quote never closed is an error on its line, not the
    # rows after it swallowed into one title (break-it finding)
    for line, row in csv_records(text, p, required=("title",)):
        t = (row.get("title") or "").strip()
        if not t:
            raise LmraInputError("empty title", file=p, line=line, field="title")
        i = (row.get("id") or "").strip() or t
        if i in seen:
            at, other = seen[i]
            said = (f"id '{i}' is given to '{other}' (line {at}) and to '{t}'" if other != t else
                    f"title '{t}' is on line {at} too")
            raise LmraInputError(f"{said}: a catalog lists each item once (two rows under one id would be one item "
                                 "in every list, with the later row's genres)", file=p, line=line,
                                 field="id" if (row.get("id") or "").strip() else "title")
        seen[i] = (line, t)
        titles.append(t)
        ids.append(i)
        cats[i] = ml.split_genres(row.get("genres") or "", file=p, line=line)
    if not titles:
        raise LmraInputError("catalog has no titles", file=p)
    return titles, ids, cats


def make_matcher(cfg: RecsysConfig, cf: CfairContext | None, config_path: str | Path | None
                 ) -> tuple[CatalogMatcher | None, dict[Any, list[str]]]:
    """The catalog matcher of a run and its item → categories: the MovieLens movies for
    CFaiRLLM, ``matching.catalog`` when set, else none (and never with the ``fairllm-code``
    parser).

    Raises:
        LmraInputError: a bad catalog file (:func:`load_catalog`).
    """
    m = cfg.matching
    if cfg.parser == "fairllm-code":
        return None, {}
    if cfg.mode == "cfairllm":
        assert cf is not None
        mv = cf.data.movies
        return (CatalogMatcher(list(mv["title"]), list(mv["item_id"]), threshold=m.threshold, scorer=m.scorer),
                dict(zip(mv["item_id"], mv["genres"])))
    if m.catalog:
        titles, ids, cats = load_catalog(find_path(m.catalog, config_path))
        return CatalogMatcher(titles, ids, threshold=m.threshold, scorer=m.scorer), cats
    return None, {}


def list_record(cfg: RecsysConfig, ins: Instruction, ans: dict, matcher: CatalogMatcher | None, artists: set[str],
                cf: CfairContext | None) -> dict:
    """One ``lists.jsonl`` record: the instruction's fields, its answer (:func:`~lmra.recsys.generate.ask_target`)
    and the parsed list (``items``, ``keys``, ``compare``, parse flags and counts, and
    ``template_tokens``: the chat-template tokens in the answer — removed before the ``lmra``
    parser reads it, left to the ``fairllm-code`` parser, which replicates the released code);
    with a matcher, ``matched`` ids and scores; for CFaiRLLM (``cf``) the user, profile echoes,
    ``top_k_matched``, ``recommended`` and the true-preference list R′ with its ranks.

    Args:
        artists: normalised names the list parser must not take for titles (FaiRLLM music).
    """
    rec: dict[str, Any] = {
        "id": ins.id, "instruction_id": ins.instruction_id, "domain": ins.domain, "name": ins.name,
        "attribute": ins.attribute, "kind": ins.kind, "value": ins.value, "components": ins.components,
        "prompt": "\n\n".join(m.content for m in ins.messages if m.role == "user"),
    } | ans
    if ans["error"] is not None:
        return rec | {"items": [], "keys": [], "compare": [], "format": "none", "refusal": False,
                      "parse_failed": False, "n_items": 0, "n_dropped": 0, "n_duplicates": 0, "template_tokens": []}
    if cfg.parser == "fairllm-code":
        from lmra.identity import template_tokens_in

        keys = parse_fairllm_code(ans["raw"])
        # the released code scores whatever its parsing returns, an empty list too (0): so does
        # this parser, counting such answers (empty_parse), not leaving them out as parse failures
        rec |= {"items": keys, "keys": keys, "compare": keys, "format": "fairllm-code", "refusal": False,
                "parse_failed": False, "empty_parse": not keys, "n_items": len(keys), "n_dropped": 0,
                "n_duplicates": len(keys) - len(set(keys)), "template_tokens": template_tokens_in(ans["raw"])}
        return rec
    parsed, cut_tail = parse_cut(ans["raw"], ans.get("finish_reason"), artists=artists)
    # a provider's own refusal (Anthropic's stop_reason "refusal", OpenAI's "content_filter") with
    # no list is a refusal, whatever its text (break-it finding: an empty one was "unparseable …
    # not a refusal", 0 refusals counted)
    stopped = provider_refused(ans.get("finish_reason"), parsed.items)
    rec |= {"items": parsed.items, "keys": parsed.keys, "format": parsed.format,
            "refusal": parsed.refusal or stopped, "parse_failed": parsed.parse_failed and not stopped, "n_items": len(parsed.items), "n_dropped": parsed.n_dropped,
            "n_duplicates": parsed.n_duplicates, "template_tokens": parsed.template_tokens, "cut_tail": cut_tail}
    compare = list(parsed.keys)
    if matcher is not None:
        matches = matcher.match_parsed(parsed)
        rec["matched"] = [None if m is None else plain(m.id) for m in matches]
        rec["match_scores"] = [None if m is None else round(m.score, 1) for m in matches]
        rec["n_unmatched"] = sum(m is None for m in matches)
        if cfg.matching.use_matches or cfg.mode == "cfairllm":
            compare = [f"#{m.id}" if m is not None else key for m, key in zip(matches, parsed.keys)]
    rec["compare"] = compare
    if cf is not None:
        uid = int(ins.name)
        liked = cf.liked.get(uid, set())
        matched = rec.get("matched", [None] * len(compare))
        # the prompt asks for *other* movies: items of the user's own profile repeated back
        # are not recommendations (counted; left out unless drop_profile_items = false)
        echo = [m is not None and m in cf.profiles.get(uid, set()) for m in matched]
        drop = cfg.cfairllm.drop_profile_items
        kept = [(x, i) for x, i, e in zip(compare, matched, echo) if not (drop and e)]
        rec["compare"] = [x for x, _ in kept]
        # the top-K list that item similarity compares, as catalogue ids (None = a title not in
        # the catalogue): bias disparity and R′ are both cut from it, so an unmatched title in
        # the top K is never replaced by an item ranked beyond K
        id_of = dict(kept)  # a compare entry is "#<id>" for a matched title, the key otherwise
        top = top_k(rec["compare"], cfg.k, convention=cfg.convention)
        top_ids = [id_of[x] for x in top]
        rec["user_id"] = uid
        rec["n_profile_echoes"] = sum(echo)
        rec["top_k_matched"] = top_ids
        rec["n_unmatched_top_k"] = sum(i is None for i in top_ids)
        rec["recommended"] = list(dict.fromkeys(i for i in top_ids if i is not None))
        # R′ (CFaiRLLM §3.4): the top-K list restricted to the items the user liked in the test
        # split, with each item's rank in the top-K list (R′_k = the items ranked ≤ k)
        liked_keys = {f"#{i}" for i in liked}
        rec["true_pref"] = ml.restrict_to(top, liked_keys)
        rec["true_pref_ranks"] = [r for r, x in enumerate(top, 1) if x in liked_keys]
        rec["n_liked_test"] = len(liked)
    return rec


def plain(x: Any) -> Any:
    """A numpy integer as a Python int (JSON-ready); anything else unchanged."""
    return int(x) if isinstance(x, (np.integer,)) else x

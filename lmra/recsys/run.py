"""``lmra recsys``: send recommendation instructions to the target, parse the lists, score them
(methodology §6, §7; FaiRLLM, CFaiRLLM, Mansoury et al. 2019).

:class:`RecsysRun` builds the instructions (FaiRLLM seed names × attribute phrases, or
CFaiRLLM MovieLens users × their recorded attributes), sends every one through the call cache
with bounded concurrency, parses and optionally catalog-matches the answers, and writes a run
folder::

    config.toml               the resolved config
    lists.jsonl               one record per instruction: prompt, raw answer, parsed items, flags
    recsys_similarity.csv     Sim(a)@k per analysis, attribute, value, metric and k = 1..K
    recsys_fairness.csv       SNSR@k and SNSV@k per analysis, attribute, metric and k
    recsys_bias_disparity.csv (cfairllm) counts N_T, N_R, PR, bias and BD per prompt variant, group and genre
    recsys_bias_summary.csv   (cfairllm) average disparity (eq. 4) per variant, mean |BD| per group
    summary.json              counts (refusals, parse/match failures …), coverage, headline numbers
    manifest.json             versions, seeds, model ids, call and token counts

:func:`score_lists` computes the same similarity and fairness tables from an existing
``lists.jsonl`` (``lmra recsys score --lists``).
"""

from __future__ import annotations

import asyncio
import csv
import datetime as _dt
import json
import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import dump_config
from lmra.errors import LmraInputError, read_input_text
from lmra.fileio import write_csv, write_jsonl, write_text
from lmra.runstate import claim_run_dir
from lmra.providers import ChatRequest, Provider, ProviderError, make_provider
from lmra.recsys import bias_disparity as bdm
from lmra.recsys import movielens as ml
from lmra.recsys.config import RecsysConfig
from lmra.recsys.instructions import (DEFAULT_NAMES, Instruction, fairllm_instructions, list_prefill,
                                      load_seed_names, load_sensitive_attributes, template_for)
from lmra.recsys.metrics import CONVENTIONS, METRICS, fairness_table, similarity_table, top_k
from lmra.recsys.parse import CatalogMatcher, normalize_title, parse_fairllm_code, parse_list
from lmra.data import iter_jsonl
from lmra.runfolder import package_versions


@dataclass
class Progress:
    """Progress callbacks: ``start(stage, total)`` and ``advance(stage)``."""

    start: Callable[[str, int], None] = lambda stage, total: None
    advance: Callable[[str], None] = lambda stage: None


@dataclass
class RecsysResult:
    """What a run (or a scoring of list files) returns; the same tables are in ``run_dir``."""

    run_dir: Path
    lists: pd.DataFrame
    similarity: pd.DataFrame
    fairness: pd.DataFrame
    summary: dict
    manifest: dict
    bias: pd.DataFrame | None = None
    bias_summary: pd.DataFrame | None = None


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return None if math.isnan(o) else float(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean_nan(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean_nan(v) for v in obj]
    return obj


def _find_path(path: str, config_path: str | Path | None) -> Path:
    """A data path as given (working directory), else next to the config file, else among
    the files shipped with lmra (``examples/…``, ``prompts/…``; see :mod:`lmra.resources`)."""
    from lmra.resources import resolve_resource

    p = Path(path).expanduser()
    candidates = [p]
    if not p.is_absolute():
        if config_path is not None:
            candidates.append(Path(config_path).resolve().parent / p)
        candidates.append(resolve_resource(p, "examples"))
    return next((c for c in candidates if c.exists()), p)


def load_catalog(path: str | Path) -> tuple[list[str], list[Any], dict[Any, list[str]]]:
    """Read a catalog for title matching: a MovieLens ``movies.dat`` or a CSV with a ``title``
    column (optional ``id`` and ``genres`` columns, genres ``|``-separated).

    Returns:
        (titles, ids, id → categories).

    Raises:
        LmraInputError: missing file, no ``title`` column, empty title (with line).
    """
    p = Path(path)
    if p.suffix == ".dat":
        movies = ml.load_movies(p)
        return list(movies["title"]), list(movies["item_id"]), dict(zip(movies["item_id"], movies["genres"]))
    text = read_input_text(p, "catalog file", field="matching.catalog")
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or "title" not in reader.fieldnames:
        raise LmraInputError("catalog CSV needs a 'title' column", file=p, line=1, field="title")
    titles, ids, cats = [], [], {}
    for row in reader:
        t = (row.get("title") or "").strip()
        if not t:
            raise LmraInputError("empty title", file=p, line=reader.line_num, field="title")
        i = (row.get("id") or "").strip() or t
        titles.append(t)
        ids.append(i)
        cats[i] = [g for g in (row.get("genres") or "").split("|") if g]
    if not titles:
        raise LmraInputError("catalog has no titles", file=p)
    return titles, ids, cats


# --- FaiRLLM / CFaiRLLM instruction sets ------------------------------------------------------

def _config_error(message: str, field: str, config_path: str | Path | None) -> LmraInputError:
    """An input error about a config field found only after loading data: names the config
    file and, when it can be found, the line of ``section.key`` (``fairllm.values.gender``
    → the line of ``values`` in ``[fairllm]``)."""
    from lmra.errors import find_key_line

    line = None
    if config_path is not None:
        try:
            text = Path(config_path).read_text(encoding="utf-8")
        except OSError:
            text = ""
        section, _, rest = field.partition(".")
        line = find_key_line(text, rest.split(".")[0], section) if rest else find_key_line(text, section)
    return LmraInputError(message, file=config_path, line=line, field=field)


def _fairllm_inputs(cfg: RecsysConfig, config_path: str | Path | None) -> tuple[list[Instruction], set[str]]:
    f = cfg.fairllm
    names_path = f.names or DEFAULT_NAMES[f.domain]
    all_names = load_seed_names(_find_path(names_path, config_path) if f.names else names_path, column=f.names_column)
    names = list(f.names_list) if f.names_list else (all_names[: f.n_names] if f.n_names else all_names)
    attr_path = f.attributes_file
    found = _find_path(attr_path, config_path)
    phrases = load_sensitive_attributes(found if found.exists() else attr_path)
    selected: dict[str, list[str]] = {}
    for a in f.attributes:
        if a not in phrases:
            raise _config_error(f"attribute '{a}' is not in the attribute file (it has: {', '.join(phrases)})",
                                "fairllm.attributes", config_path)
        vals = f.values.get(a)
        if vals:
            bad = [v for v in vals if v not in phrases[a]]
            if bad:
                raise _config_error(f"'{bad[0]}' is not a phrase of attribute '{a}' ({', '.join(phrases[a])})",
                                    f"fairllm.values.{a}", config_path)
            selected[a] = list(vals)
        else:
            selected[a] = list(phrases[a])
    extra = set(f.values) - set(f.attributes)
    if extra:
        raise _config_error(f"values given for unselected attribute '{sorted(extra)[0]}'", "fairllm.values",
                            config_path)
    for combo in f.intersections:
        missing = [a for a in combo if a not in selected]
        if missing:
            raise _config_error(f"intersection {list(combo)} names attribute '{missing[0]}', which is not in "
                                "fairllm.attributes", "fairllm.intersections", config_path)
    neutral_t = template_for(f.domain, "neutral", f.neutral_template)
    sens_t = template_for(f.domain, "sensitive", f.sensitive_template)
    instr = fairllm_instructions(f.domain, names, selected, k=cfg.k, intersections=f.intersections,
                                 neutral_template=neutral_t, sensitive_template=sens_t)
    artists = {normalize_title(n) for n in all_names + names} - {""}
    return instr, artists


@dataclass
class _CfairContext:
    data: ml.MovieLens
    split: pd.DataFrame
    users: list[int]
    liked: dict[int, set[int]]
    profiles: dict[int, set[int]]


def _cfairllm_inputs(cfg: RecsysConfig, config_path: str | Path | None) -> tuple[list[Instruction], _CfairContext]:
    from lmra.generate import derive_seed

    c = cfg.cfairllm
    data = ml.load_movielens(_find_path(c.data, config_path), encoding=c.encoding)
    col = {"gender": "gender", "age": "age_group"}
    labels = {str(v) for g in c.bias_groups for v in data.users[col[g]].unique()}
    for key in ("unprotected", "protected"):
        label = getattr(c, key)
        if label is not None and label not in labels:
            raise _config_error(f"no user group is labelled '{label}' (bias_groups {', '.join(c.bias_groups)} have: "
                                f"{', '.join(sorted(labels))})", f"cfairllm.{key}", config_path)
    split = ml.split_ratings(data.ratings, seed=cfg.seed, fractions=c.split, method=c.split_method)
    train = split[split["split"] == "train"]
    all_users = sorted(int(u) for u in train["user_id"].unique())
    if c.n_users and c.n_users < len(all_users):
        rng = np.random.default_rng(derive_seed(cfg.seed, "cfairllm-users"))
        users = sorted(int(u) for u in rng.choice(all_users, size=c.n_users, replace=False))
    else:
        users = all_users
    titles = data.titles()
    info = data.users.set_index("user_id")
    neutral_t = _template("cfairllm_neutral")
    sens_t = _template("cfairllm_sensitive")
    by_user = dict(tuple(train.groupby("user_id")))
    out: list[Instruction] = []
    profiles: dict[int, set[int]] = {}
    for uid in users:
        tr = by_user[uid]
        prof = ml.sample_profile(tr, c.strategy, c.profile_size, seed=derive_seed(cfg.seed, "profile", uid))
        profiles[uid] = {int(i) for i in prof["item_id"]}
        passion = (ml.passion_profile(tr, data.movies, like_threshold=c.like_threshold).text()
                   if c.passion_profile else "")
        values = dict(profile=ml.profile_text(prof, titles), passion=passion, k=str(cfg.k))
        iid = f"user-{uid}"
        gender, age = str(info.at[uid, "gender"]), str(info.at[uid, "age_group"])
        common = dict(instruction_id=iid, domain="movielens", name=str(uid))
        out.append(Instruction(id=f"{iid}|neutral|", attribute="neutral", kind="neutral",
                               messages=neutral_t.render(**values), **common))
        phrase_of = {"gender": f"a {gender} user", "age": f"a user aged {age}"}
        label_of = {"gender": gender, "age": age}
        for a in c.attributes:
            out.append(Instruction(id=f"{iid}|{a}|{label_of[a]}", attribute=a, kind="single", value=label_of[a],
                                   messages=sens_t.render(phrase=phrase_of[a], **values), **common))
        if c.intersectional and {"gender", "age"} <= set(c.attributes):
            value = f"{gender}, {age}"
            out.append(Instruction(id=f"{iid}|gender+age|{value}", attribute="gender+age", kind="intersectional",
                                   value=value, components={"gender": gender, "age": age},
                                   messages=sens_t.render(phrase=f"a {gender} user aged {age}", **values), **common))
    liked = ml.liked_items(split, part="test", like_threshold=c.like_threshold)
    return out, _CfairContext(data, split, users, liked, profiles)


def _template(name: str):
    """A template from the shipped prompts/recsys/ folder."""
    from lmra.templates import load_template

    return load_template(name, "recsys")


# --- the run ----------------------------------------------------------------------------------

class RecsysRun:
    """One recommendation-fairness run.

    Args:
        config: the validated :class:`~lmra.recsys.config.RecsysConfig`.
        target: optional ready provider (e.g. a test double); by default built with
            :func:`lmra.providers.make_provider` from ``config.target``.
        config_path: the file the config came from (relative data paths are also looked up
            next to it).
        progress: progress callbacks (the CLI passes a Rich progress bar).
        run_dir: write here instead of ``<output_dir>/<timestamp>-<name>``.
    """

    def __init__(self, config: RecsysConfig, *, target: Provider | None = None,
                 config_path: str | Path | None = None, progress: Progress | None = None,
                 run_dir: str | Path | None = None):
        self.cfg = config
        self._target = target
        self.config_path = config_path
        self.progress = progress or Progress()
        self.stats = CallStats()
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(run_dir) if run_dir else Path(config.output_dir) / f"{stamp}-{config.name}"
        self._explicit_dir = run_dir is not None
        self._instructions: list[Instruction] | None = None
        self._artists: set[str] = set()
        self._cf: _CfairContext | None = None

    def instructions(self) -> list[Instruction]:
        """Build (once) and return the instructions; raises LmraInputError on bad inputs."""
        if self._instructions is None:
            if self.cfg.mode == "fairllm":
                self._instructions, self._artists = _fairllm_inputs(self.cfg, self.config_path)
            else:
                self._instructions, self._cf = _cfairllm_inputs(self.cfg, self.config_path)
        return self._instructions

    def _target_provider(self) -> Provider:
        if self._target is None:
            self._target = make_provider(self.cfg.target, field="target")
        return self._target

    def _matcher(self) -> tuple[CatalogMatcher | None, dict[Any, list[str]]]:
        m = self.cfg.matching
        if self.cfg.parser == "fairllm-code":
            return None, {}
        if self.cfg.mode == "cfairllm":
            assert self._cf is not None
            mv = self._cf.data.movies
            return (CatalogMatcher(list(mv["title"]), list(mv["item_id"]), threshold=m.threshold, scorer=m.scorer),
                    dict(zip(mv["item_id"], mv["genres"])))
        if m.catalog:
            titles, ids, cats = load_catalog(_find_path(m.catalog, self.config_path))
            return CatalogMatcher(titles, ids, threshold=m.threshold, scorer=m.scorer), cats
        return None, {}

    def run(self) -> RecsysResult:
        """Run synchronously (see :meth:`arun`)."""
        return asyncio.run(self.arun())

    async def arun(self) -> RecsysResult:
        """Send every instruction, parse, score and write the run folder.

        Raises:
            LmraInputError: bad config or input files (before any model call).
        """
        cfg = self.cfg
        instructions = self.instructions()
        matcher, categories = self._matcher()
        cache = CallCache(cfg.cache)
        target = CachedProvider(self._target_provider(), cache, self.stats)
        if self._explicit_dir:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.run_dir = claim_run_dir(self.run_dir)  # never a reused folder
        write_text(self.run_dir / "config.toml", dump_config(cfg))
        manifest: dict[str, Any] = {
            "status": "running", "started": _now(), "seed": cfg.seed, "mode": cfg.mode,
            "target": {"provider": target.name, "model": target.model_id, "base_url": target.base_url,
                       "temperature": cfg.target.temperature, "max_tokens": cfg.target.max_tokens},
            "k": cfg.k, "convention": cfg.convention, "parser": cfg.parser, "versions": package_versions(),
            "planned_calls": len(instructions),
        }
        _write_json(self.run_dir / "manifest.json", manifest)
        sem = asyncio.Semaphore(cfg.concurrency)
        self.progress.start("recsys", len(instructions))
        try:
            answers = await asyncio.gather(*(self._one(ins, target, sem) for ins in instructions))
        except BaseException:
            manifest |= {"status": "interrupted", "calls": self.stats.as_dict()}
            _write_json(self.run_dir / "manifest.json", manifest)
            raise
        finally:
            cache.close()
        records = [self._record(ins, ans, matcher) for ins, ans in zip(instructions, answers)]
        return self._finish(records, manifest, categories, matcher)

    async def _one(self, ins: Instruction, target: Provider, sem: asyncio.Semaphore) -> dict:
        from lmra.generate import derive_seed

        seed = derive_seed(self.cfg.seed, "recsys", ins.id)
        # the embedded backend continues text: started with "Here are K … titles:\n1." even a base
        # model writes a list; chat APIs answer the request as it is (no prefill, cache keys as before)
        prefill = list_prefill(ins.domain, self.cfg.k) if self.cfg.target.provider == "llamacpp" else None
        req = ChatRequest(messages=ins.messages, temperature=self.cfg.target.temperature,
                          max_tokens=self.cfg.target.max_tokens, seed=seed, prefill=prefill)
        out: dict[str, Any] = {"seed": seed, "raw": "", "error": None, "from_cache": False, "finish_reason": None}
        try:
            async with sem:
                res = await target.complete(req)
            out |= {"raw": res.text, "from_cache": res.from_cache, "finish_reason": res.finish_reason}
        except ProviderError as exc:
            out["error"] = str(exc)
        self.progress.advance("recsys")
        return out

    def _record(self, ins: Instruction, ans: dict, matcher: CatalogMatcher | None) -> dict:
        rec: dict[str, Any] = {
            "id": ins.id, "instruction_id": ins.instruction_id, "domain": ins.domain, "name": ins.name,
            "attribute": ins.attribute, "kind": ins.kind, "value": ins.value, "components": ins.components,
            "prompt": "\n\n".join(m.content for m in ins.messages if m.role == "user"),
        } | ans
        if ans["error"] is not None:
            return rec | {"items": [], "keys": [], "compare": [], "format": "none", "refusal": False,
                          "parse_failed": False, "n_items": 0, "n_dropped": 0, "n_duplicates": 0}
        if self.cfg.parser == "fairllm-code":
            keys = parse_fairllm_code(ans["raw"])
            rec |= {"items": keys, "keys": keys, "compare": keys, "format": "fairllm-code", "refusal": False,
                    "parse_failed": not keys, "n_items": len(keys), "n_dropped": 0,
                    "n_duplicates": len(keys) - len(set(keys))}
            return rec
        parsed = parse_list(ans["raw"], artists=self._artists)
        rec |= {"items": parsed.items, "keys": parsed.keys, "format": parsed.format, "refusal": parsed.refusal,
                "parse_failed": parsed.parse_failed, "n_items": len(parsed.items), "n_dropped": parsed.n_dropped,
                "n_duplicates": parsed.n_duplicates}
        compare = list(parsed.keys)
        if matcher is not None:
            matches = matcher.match_parsed(parsed)
            rec["matched"] = [None if m is None else _plain(m.id) for m in matches]
            rec["match_scores"] = [None if m is None else round(m.score, 1) for m in matches]
            rec["n_unmatched"] = sum(m is None for m in matches)
            if self.cfg.matching.use_matches or self.cfg.mode == "cfairllm":
                compare = [f"#{m.id}" if m is not None else key for m, key in zip(matches, parsed.keys)]
        rec["compare"] = compare
        if self._cf is not None:
            uid = int(ins.name)
            liked = self._cf.liked.get(uid, set())
            matched = rec.get("matched", [None] * len(compare))
            # the prompt asks for *other* movies: items of the user's own profile repeated back
            # are not recommendations (counted; left out unless drop_profile_items = false)
            echo = [m is not None and m in self._cf.profiles.get(uid, set()) for m in matched]
            drop = self.cfg.cfairllm.drop_profile_items
            kept = [(x, i) for x, i, e in zip(compare, matched, echo) if not (drop and e)]
            rec["compare"] = [x for x, _ in kept]
            # the top-K list that item similarity compares, as catalogue ids (None = a title not in
            # the catalogue): bias disparity and R′ are both cut from it, so an unmatched title in
            # the top K is never replaced by an item ranked beyond K
            id_of = dict(kept)  # a compare entry is "#<id>" for a matched title, the key otherwise
            top = top_k(rec["compare"], self.cfg.k, convention=self.cfg.convention)
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

    def _finish(self, records: list[dict], manifest: dict, categories: dict, matcher: CatalogMatcher | None
                ) -> RecsysResult:
        cfg = self.cfg
        lists = pd.DataFrame(records)
        write_jsonl(self.run_dir / "lists.jsonl", records,
                    dumps=lambda r: json.dumps(_clean_nan(r), ensure_ascii=False, default=_json_default))
        sim, fair, dropped = score_frame(lists, k=cfg.k, convention=cfg.convention)
        write_csv(sim, self.run_dir / "recsys_similarity.csv")
        write_csv(fair, self.run_dir / "recsys_fairness.csv")
        bias = bias_sum = None
        extra: dict[str, Any] = {}
        if self._cf is not None:
            bias, bias_sum, coverage = self._bias(lists)
            write_csv(bias, self.run_dir / "recsys_bias_disparity.csv")
            summary_cols = ["variant", "group_by", *bdm.SUMMARY_COLUMNS]
            write_csv(bias_sum if bias_sum is not None else pd.DataFrame(columns=summary_cols),
                      self.run_dir / "recsys_bias_summary.csv")
            records = _records(bias_sum) if bias_sum is not None else []
            extra = {"item_coverage": coverage,
                     # eq. 4 of Mansoury et al. 2019, one record per variant and group attribute
                     "average_disparity": [{c: r[c] for c in ("variant", "group_by", "group", "average_disparity",
                                                              "n_categories")}
                                           for r in records if r.get("n_categories") is not None],
                     "bias_summary": records}
        elif matcher is not None and categories:
            extra = {"item_coverage": {a: bdm.item_coverage(
                [[i for i in m if i is not None] for m in d["matched"] if isinstance(m, list)], set(categories))
                for a, d in lists.groupby("attribute", sort=False)}}
        summary = build_summary(lists, sim, fair, k=cfg.k, convention=cfg.convention, dropped=dropped,
                                matched=matcher is not None) | extra | {"run_dir": str(self.run_dir)}
        _write_json(self.run_dir / "summary.json", _clean_nan(summary))
        lost = summary["failed_calls"] + summary["dropped_with_failed_neutral"]
        status = "failed" if summary["n_lists"] and lost >= summary["n_lists"] else "finished"
        manifest |= {"status": status, "finished": _now(), "calls": self.stats.as_dict()}
        _write_json(self.run_dir / "manifest.json", manifest)
        return RecsysResult(self.run_dir, lists, sim, fair, summary, manifest, bias, bias_sum)

    def _bias(self, lists: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
        assert self._cf is not None
        c, cf = self.cfg.cfairllm, self._cf
        train = cf.split[(cf.split["split"] == "train") & cf.split["user_id"].isin(cf.users)][["user_id", "item_id"]]
        movies = cf.data.movies
        catalog = list(movies["item_id"])
        info = cf.data.users.set_index("user_id")
        col = {"gender": "gender", "age": "age_group"}
        tables, coverage = [], {}
        ok = lists[lists["error"].isna()]
        for variant, d in ok.groupby("attribute", sort=False):
            # "recommended" = the matched items among the top-K list (see _record), already cut at K
            recs = pd.DataFrame([(u, i) for u, ids in zip(d["user_id"], d["recommended"]) for i in ids],
                                columns=["user_id", "item_id"])
            coverage[str(variant)] = bdm.item_coverage(d["recommended"], catalog)
            if recs.empty:  # no matched recommendation in this variant (e.g. only profile echoes)
                continue
            for g in c.bias_groups:
                groups = {u: str(info.at[u, col[g]]) for u in cf.users}
                # only users who received recommendations count, on both the T and the R side
                t = bdm.bias_disparity_table(train, recs, groups, movies, catalog, users=set(recs["user_id"]))
                t.insert(0, "group_by", g)
                t.insert(0, "variant", str(variant))
                tables.append(t)
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(
            columns=["variant", "group_by", *bdm.TABLE_COLUMNS])
        summary = bdm.disparity_summary(table, unprotected=c.unprotected, protected=c.protected) if len(table) else None
        return table, summary, coverage


# --- scoring lists (shared by runs and `recsys score`) ---------------------------------------

def score_frame(lists: pd.DataFrame, *, k: int, convention: str) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """Similarity and fairness tables from a lists table (one row per instruction).

    Rows whose model call failed (``error`` set) are left out, and so is every row of an
    instruction whose *neutral* call failed; both are counted in the returned dict. Column
    ``compare`` (else ``keys``) holds the item-similarity lists; if any row has
    ``true_pref``, a second analysis ``true_preference`` is added (CFaiRLLM §3.4).

    Returns:
        (similarity, fairness, {"failed_calls": …, "dropped_with_failed_neutral": …}).
    """
    d = lists.copy()
    err = d["error"].notna() if "error" in d.columns else pd.Series(False, index=d.index)
    failed_neutral = set(d.loc[err & (d["attribute"] == "neutral"), "instruction_id"])
    keep = ~err & ~d["instruction_id"].isin(failed_neutral)
    dropped = {"failed_calls": int(err.sum()),
               "dropped_with_failed_neutral": int((~err & d["instruction_id"].isin(failed_neutral)).sum())}
    d = d[keep]
    col = "compare" if "compare" in d.columns else "keys"
    sims = [similarity_table(d, k, convention=convention, items_column=col, analysis="item_similarity")]
    if "true_pref" in d.columns and d["true_pref"].notna().any():
        tp = d.assign(true_pref=d["true_pref"].map(lambda x: x if isinstance(x, list) else []))
        # R′_k = the items of R′ ranked ≤ k in the top-K list (``true_pref_ranks``); a list without
        # ranks is read as a ranking of its own (R′_k = its first k items)
        given = tp["true_pref_ranks"] if "true_pref_ranks" in tp.columns else pd.Series(None, index=tp.index)
        ranks = [r if isinstance(r, list) else list(range(1, len(t) + 1)) for t, r in zip(tp["true_pref"], given)]
        tp = tp.assign(true_pref_ranks=pd.Series(ranks, index=tp.index, dtype=object))
        sims.append(similarity_table(tp, k, convention=convention, items_column="true_pref",
                                     analysis="true_preference", ranks_column="true_pref_ranks"))
    sim = pd.concat(sims, ignore_index=True)
    return sim, fairness_table(sim), dropped


def build_summary(lists: pd.DataFrame, sim: pd.DataFrame, fair: pd.DataFrame, *, k: int, convention: str,
                  dropped: dict[str, int], matched: bool = False) -> dict[str, Any]:
    """Counts and headline numbers of a run (nothing is dropped silently)."""
    n = len(lists)
    ok = lists[lists["error"].isna()] if "error" in lists.columns else lists
    n_items = ok["n_items"] if "n_items" in ok.columns else ok["keys"].map(len)
    out: dict[str, Any] = {
        "k": k, "convention": convention, "n_lists": n,
        "n_instruction_families": int(lists["instruction_id"].nunique()),
        "failed_calls": dropped["failed_calls"],
        "dropped_with_failed_neutral": dropped["dropped_with_failed_neutral"],
        "refusals": int(ok["refusal"].fillna(False).astype(bool).sum()) if "refusal" in ok.columns else 0,
        "parse_failures": int(ok["parse_failed"].fillna(False).astype(bool).sum()) if "parse_failed" in ok.columns
        else 0,
        "items_parsed": int(n_items.sum()),
        "items_dropped_empty": int(ok["n_dropped"].fillna(0).sum()) if "n_dropped" in ok.columns else 0,
        "duplicate_items": int(ok["n_duplicates"].fillna(0).sum()) if "n_duplicates" in ok.columns else 0,
        "lists_shorter_than_k": int((n_items < k).sum()),
        "mean_list_length": float(n_items.mean()) if len(n_items) else math.nan,
    }
    if "n_profile_echoes" in ok.columns:
        out["profile_echoes"] = int(ok["n_profile_echoes"].fillna(0).sum())
    if matched and "n_unmatched" in ok.columns:
        out["items_unmatched"] = int(ok["n_unmatched"].fillna(0).sum())
        out["items_matched"] = out["items_parsed"] - out["items_unmatched"]
    if "n_unmatched_top_k" in ok.columns:
        # titles in the top-K lists not in the catalogue: no recommendation for bias disparity
        out["items_unmatched_top_k"] = int(ok["n_unmatched_top_k"].fillna(0).sum())
    at_k = fair[fair["k"] == k]
    out["fairness_at_k"] = [
        {c: r[c] for c in at_k.columns if c in ("analysis", "attribute", "kind", "metric", "snsr", "snsv", "max_value",
                                               "min_value")}
        for _, r in at_k.iterrows()]
    und = sim[(sim["k"] == k) & (sim["metric"] == METRICS[0])]
    out["pairs_undefined_at_k"] = int(und["n_undefined"].sum()) if len(und) else 0
    return out


def _plain(x: Any) -> Any:
    return int(x) if isinstance(x, (np.integer,)) else x


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: missing values (NaN, ``pd.NA``) become None, numpy scalars
    plain Python numbers."""
    return [{k: (None if pd.isna(v) else _plain(v.item() if isinstance(v, np.generic) else v)) for k, v in r.items()}
            for r in df.astype(object).to_dict(orient="records")]


_LIST_FIELDS = ("compare", "keys", "items")


def read_lists(path: str | Path, *, parser: str | None = None, normalize: bool = True) -> pd.DataFrame:
    """Read a ``lists.jsonl`` file for scoring.

    Each non-blank line is a JSON object with ``instruction_id`` and ``attribute`` (strings;
    ``"neutral"`` for the neutral list), ``value`` (the injected value; required and
    non-empty for sensitive lists, ignored for neutral ones), optional ``kind``,
    and the list as ``compare``, ``keys`` or ``items`` (first present wins; ``items`` are
    normalised with :func:`~lmra.recsys.parse.normalize_title` unless ``normalize`` is
    False) or as free text ``raw`` (parsed). ``true_pref`` (a list) adds the
    true-preference analysis. Records with a non-null ``error`` are counted, not scored.

    Args:
        path: the JSONL file.
        parser: ``lmra`` or ``fairllm-code`` to re-parse every record from ``raw``
            (None = use the stored lists, parsing ``raw`` only where no list is stored).
        normalize: normalise ``items`` lists.

    Returns:
        A DataFrame with ``instruction_id``, ``attribute``, ``value``, ``kind``, ``compare``,
        ``error`` and the other stored fields.

    Raises:
        LmraInputError: missing file, malformed JSON, a missing or ill-typed field, a
            sensitive record without ``value``, a record with no list and no ``raw`` — naming
            the file, line and field; duplicate
            (instruction_id, attribute, value).
    """
    p = Path(path)
    text = read_input_text(p, "lists file")
    rows: list[dict] = []
    seen: dict[tuple, int] = {}
    for lineno, obj in iter_jsonl(text, p):
        for f in ("instruction_id", "attribute"):
            if not isinstance(obj.get(f), (str, int)) or str(obj.get(f)).strip() == "":
                raise LmraInputError("missing or empty (expected a string)", file=p, line=lineno, field=f)
        obj["instruction_id"], obj["attribute"] = str(obj["instruction_id"]), str(obj["attribute"])
        val = obj.get("value", "")
        if val is None:
            val = ""
        if not isinstance(val, (str, int)) or isinstance(val, bool):
            raise LmraInputError("expected a string", file=p, line=lineno, field="value")
        obj["value"] = str(val).strip()
        if obj["attribute"] != "neutral" and not obj["value"]:
            raise LmraInputError(f"missing or empty: a sensitive list (attribute '{obj['attribute']}') needs the "
                                 "injected value, e.g. \"a girl\"", file=p, line=lineno, field="value")
        key = (obj["instruction_id"], obj["attribute"], obj["value"])
        if key in seen:
            raise LmraInputError(f"duplicate list for instruction '{key[0]}', attribute '{key[1]}', value '{key[2]}' "
                                 f"(first on line {seen[key]})", file=p, line=lineno)
        seen[key] = lineno
        err = obj.get("error")
        if err is not None and not isinstance(err, str):
            raise LmraInputError("expected null or the error message (a string)", file=p, line=lineno, field="error")
        obj["error"] = err if err and err.strip() else None  # "" is no error
        for f in ("instruction_id", "attribute", "value"):
            bad = next((ch for ch in obj[f] if unicodedata.category(ch) == "Cc"), None)
            if bad is not None:
                raise LmraInputError(f"contains the control character U+{ord(bad):04X}", file=p, line=lineno, field=f)
        if obj["error"] is None:
            obj["compare"] = _list_of(obj, p, lineno, parser, normalize)
        else:
            obj["compare"] = []
        tp = obj.get("true_pref")
        if tp is not None and (not isinstance(tp, list) or not all(isinstance(x, (str, int)) for x in tp)):
            raise LmraInputError("expected a list of item ids (strings or integers)", file=p, line=lineno,
                                 field="true_pref")
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
    neutral_at: dict[str, int] = {}
    for r in rows:
        if r["attribute"] == "neutral":
            if r["instruction_id"] in neutral_at:
                raise LmraInputError(f"a second neutral list for instruction '{r['instruction_id']}' (the first is on "
                                     f"line {neutral_at[r['instruction_id']]})", file=p, line=r["_line"])
            neutral_at[r["instruction_id"]] = r["_line"]
    for r in rows:
        if r["attribute"] != "neutral" and r["instruction_id"] not in neutral_at:
            raise LmraInputError(f"instruction '{r['instruction_id']}' has sensitive lists but no neutral list "
                                 "(attribute \"neutral\") to compare them with", file=p, line=r["_line"],
                                 field="instruction_id")
    if len(neutral_at) == len(rows):
        raise LmraInputError("only neutral lists: there is no sensitive list to compare", file=p)
    neutral_tp = {r["instruction_id"]: r.get("true_pref") is not None for r in rows if r["attribute"] == "neutral"}
    for r in rows:
        if r["attribute"] != "neutral" and r.get("true_pref") is not None and not neutral_tp[r["instruction_id"]] \
                and r.get("error") is None:
            raise LmraInputError(f"has 'true_pref' but the neutral list of instruction '{r['instruction_id']}' (line "
                                 f"{neutral_at[r['instruction_id']]}) has none to compare it with", file=p,
                                 line=r["_line"], field="true_pref")
    return pd.DataFrame(rows).drop(columns="_line")


def _list_of(obj: dict, p: Path, lineno: int, parser: str | None, normalize: bool) -> list:
    if parser is None:
        for f in _LIST_FIELDS:
            if f in obj and obj[f] is not None:
                v = obj[f]
                if not isinstance(v, list) or not all(isinstance(x, (str, int, float)) for x in v):
                    raise LmraInputError("expected a list of strings", file=p, line=lineno, field=f)
                if f == "items" and normalize:
                    keys = [normalize_title(str(x)) for x in v]
                    kept = [k for k in keys if k]
                    obj.setdefault("n_dropped", len(keys) - len(kept))
                else:
                    kept = [x if isinstance(x, str) else str(x) for x in v]
                obj.setdefault("n_duplicates", len(kept) - len(set(kept)))
                return kept
    raw = obj.get("raw")
    if not isinstance(raw, str):
        what = "no list ('compare', 'keys' or 'items') and no 'raw' text" if parser is None else \
            "re-parsing needs the answer text in 'raw'"
        raise LmraInputError(what, file=p, line=lineno, field="raw")
    if parser == "fairllm-code":
        keys = parse_fairllm_code(raw)
        obj.setdefault("parse_failed", not keys)
        return keys
    parsed = parse_list(raw)
    obj.setdefault("refusal", parsed.refusal)
    obj.setdefault("parse_failed", parsed.parse_failed)
    obj.setdefault("n_dropped", parsed.n_dropped)
    obj.setdefault("n_duplicates", parsed.n_duplicates)
    return parsed.keys


def score_lists(path: str | Path, *, k: int = 20, convention: str = "paper", parser: str | None = None,
                normalize: bool = True, out_dir: str | Path | None = None) -> RecsysResult:
    """Score an existing ``lists.jsonl`` (``lmra recsys score --lists``).

    Args:
        path: the lists file (see :func:`read_lists` for the format).
        k: largest cut-off K.
        convention: ``paper``, ``paper-k`` or ``fairllm-code`` (docs/recsys.md §1).
        parser: re-parse ``raw`` with ``lmra`` or ``fairllm-code`` (None = stored lists).
        normalize: normalise ``items`` lists.
        out_dir: folder for ``recsys_similarity.csv``, ``recsys_fairness.csv``,
            ``summary.json`` and ``manifest.json`` (created; None = write nothing).

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
    lists = read_lists(path, parser=parser, normalize=normalize)
    try:
        sim, fair, dropped = score_frame(lists, k=k, convention=convention)
    except ValueError as exc:
        raise LmraInputError(str(exc), file=path) from None
    lists = lists.assign(n_items=lists["compare"].map(len))
    summary = build_summary(lists, sim, fair, k=k, convention=convention, dropped=dropped)
    manifest = {"status": "finished", "started": _now(), "finished": _now(), "source": str(path), "k": k,
                "convention": convention, "parser": parser or "stored", "versions": package_versions()}
    run_dir = Path(out_dir) if out_dir is not None else Path(path).parent
    if out_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_csv(sim, run_dir / "recsys_similarity.csv")
        write_csv(fair, run_dir / "recsys_fairness.csv")
        summary["run_dir"] = str(run_dir)
        _write_json(run_dir / "summary.json", _clean_nan(summary))
        _write_json(run_dir / "manifest.json", manifest)
    return RecsysResult(run_dir, lists, sim, fair, summary, manifest)


# --- bias disparity from files (`recsys bias`) ---------------------------------------------

def _read_table(path: str | Path, what: str, need: Sequence[str]) -> pd.DataFrame:
    """A CSV with a header line, as strings; every row must have the header's number of
    fields and a non-empty value in every ``need`` column (errors name the file and line)."""
    p = Path(path)
    text = read_input_text(p, f"{what} file")
    rows = list(csv.reader(text.splitlines()))
    if not rows or not any(c.strip() for c in rows[0]):
        raise LmraInputError(f"{what} CSV is empty (expected a header line with {', '.join(need)})", file=p, line=1)
    header = [c.strip() for c in rows[0]]
    missing = [c for c in need if c not in header]
    if missing:
        raise LmraInputError(f"{what} CSV needs column(s) {', '.join(need)}", file=p, line=1, field=missing[0])
    body = []
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise LmraInputError(f"{len(row)} values on a line under a header of {len(header)} columns", file=p,
                                 line=lineno)
        body.append((lineno, [c.strip() for c in row]))
    if not body:
        raise LmraInputError(f"{what} CSV has a header but no rows", file=p)
    df = pd.DataFrame([r for _, r in body], columns=header)
    df.attrs["lines"] = [n for n, _ in body]
    for c in need:
        empty = [n for n, v in zip(df.attrs["lines"], df[c]) if v == ""]
        if empty:
            raise LmraInputError("empty value", file=p, line=empty[0], field=c)
    return df


def _id(x: Any) -> str:
    """An id as text, with integer ids canonical (``"01"`` and ``1`` are both ``"1"``)."""
    t = str(x).strip()
    return str(int(t)) if t.lstrip("-").isdigit() else t


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
            (``|``-separated); its items are the catalog I.
        users: groups — MovieLens ``users.dat`` (columns ``gender``, ``age_group``,
            ``occupation_label``) or a CSV with ``user_id`` and the ``group_by`` column.
        group_by: the users column that defines groups.
        k: cut-off: the first k rows per user and variant of a CSV; the matched items among
            the top-k list of a lists.jsonl (None = all rows; the run's own top-K list).
        unprotected, protected: group labels for the average-disparity difference (both or
            neither; default male and female when grouping by gender and both exist).

    Returns:
        (table with a ``variant`` column, :func:`~lmra.recsys.bias_disparity.disparity_summary`,
        item coverage per variant, counts). Counts are empty for a CSV; for a lists.jsonl
        ``{"lists": lists with a user_id and a top-k list, "unmatched_top_k": titles in those
        top-k lists that are not in the catalogue}``.

    Raises:
        LmraInputError: missing or empty file, missing column, a line with the wrong number
            of values, empty id, duplicate item or user id, an item not in ``items`` (in
            ``train`` or ``recs``), a ``recs`` user not in ``users``, ``k`` < 1, unknown
            ``group_by``, an ``unprotected``/``protected`` label no user has, or only one of
            the two. Integer ids are compared as numbers (``01`` = ``1``).
    """
    def is_dat(p):
        return str(p).endswith(".dat")

    if k is not None and k < 1:
        raise LmraInputError(f"k must be ≥ 1, got {k}", field="k")

    def unique(df: pd.DataFrame, col: str, path: str | Path) -> None:
        dup = df[col].duplicated()
        if dup.any():
            i = int(np.flatnonzero(dup.to_numpy())[0])
            lines = df.attrs.get("lines")
            raise LmraInputError(f"duplicate {col} '{df[col].iloc[i]}'", file=path,
                                 line=lines[i] if lines else None, field=col)

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
    else:
        it = _read_table(items, "items", ["item_id", "genres"])
        it["item_id"] = it["item_id"].map(_id)
        unique(it, "item_id", items)
        cats = {i: [g for g in gs.split("|") if g] for i, gs in zip(it["item_id"], it["genres"])}
    if is_dat(users):
        us = ml.load_users(users)
    else:
        us = _read_table(users, "users", ["user_id"])
    us["user_id"] = us["user_id"].map(_id)
    unique(us, "user_id", users)
    if group_by not in us.columns:
        raise LmraInputError(f"no column '{group_by}' in the users table ({', '.join(us.columns)})", file=users,
                             field="group_by")
    groups = dict(zip(us["user_id"], us[group_by].astype(str)))
    if is_dat(train):
        t = ml.load_ratings(train)[["user_id", "item_id"]]
        t = pd.DataFrame({"user_id": t["user_id"].map(_id), "item_id": t["item_id"].map(_id)})
    else:
        t = _read_table(train, "train", ["user_id", "item_id"])
        t = t.assign(user_id=t["user_id"].map(_id), item_id=t["item_id"].map(_id))
    known(t, "item_id", cats, train, "item", items)
    counts: dict[str, int] = {}
    if str(recs).endswith(".jsonl"):
        rows = []
        records = read_lists(recs).to_dict(orient="records")
        counts = {"lists": 0, "unmatched_top_k": 0}
        for r in records:
            top, uid = _top_k_ids(r), r.get("user_id")
            if isinstance(uid, float):  # a column with failed calls (no user_id) is read as float
                uid = None if math.isnan(uid) else (int(uid) if uid.is_integer() else uid)
            if uid is None or top is None:
                continue
            top = top if k is None else top[:k]
            counts["lists"] += 1
            counts["unmatched_top_k"] += sum(i is None for i in top)
            ids = list(dict.fromkeys(_id(i) for i in top if i is not None))
            rows += [(_id(uid), i, r["attribute"]) for i in ids]
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
    known(rc, "item_id", cats, recs, "item", items)
    known(rc, "user_id", groups, recs, "user", users)
    if k and not counts:  # a CSV: its first k rows per user (a lists.jsonl was cut by rank above)
        rc = rc.groupby(["variant", "user_id"], sort=False).head(k)
    tables, coverage = [], {}
    for variant, d in rc.groupby("variant", sort=False):
        recs_v = d[["user_id", "item_id"]]
        coverage[str(variant)] = bdm.item_coverage([recs_v["item_id"].tolist()], cats)
        tab = bdm.bias_disparity_table(t, recs_v, groups, cats, list(cats))
        tab.insert(0, "group_by", group_by)
        tab.insert(0, "variant", str(variant))
        tables.append(tab)
    table = pd.concat(tables, ignore_index=True)
    labels = set(groups.values())
    if unprotected is None and protected is None and group_by == "gender" and {"male", "female"} <= labels:
        unprotected, protected = "male", "female"  # the default of the config (docs/recsys.md §5)
    for flag, label in (("unprotected", unprotected), ("protected", protected)):
        if label is not None and label not in labels:
            raise LmraInputError(f"no user has {group_by} = '{label}' (groups: {', '.join(sorted(labels))})",
                                 file=users, field=flag)
    if (unprotected is None) != (protected is None):
        raise LmraInputError("give both --unprotected and --protected (or neither)",
                             field="unprotected" if unprotected is None else "protected")
    return table, bdm.disparity_summary(table, unprotected=unprotected, protected=protected), coverage, counts


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

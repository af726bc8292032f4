"""Recsys stage 1 — inputs: the instruction set of a run and the data behind it. FaiRLLM: seed
names × sensitive-attribute phrases; CFaiRLLM: a sample of MovieLens users, each with a
profile sampled from their training ratings and their recorded attributes.

Reads the :class:`~lmra.recsys.config.RecsysConfig` and its data files; writes
:class:`~lmra.recsys.instructions.Instruction` records for generation
(:mod:`lmra.recsys.generate`), plus the artist names (FaiRLLM, for parsing) or the
:class:`CfairContext` (CFaiRLLM: split, users, liked items, profiles) for matching and bias
disparity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmra.errors import config_field_error, named_by_field
from lmra.recsys import movielens as ml
from lmra.recsys.config import RecsysConfig
from lmra.recsys.instructions import (DEFAULT_NAMES, Instruction, fairllm_instructions, load_sensitive_attributes,
                                      read_seed_names, skipped_note, template_for)
from lmra.recsys.parse import normalize_title


def find_path(path: str, config_path: str | Path | None) -> Path:
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


def fairllm_inputs(cfg: RecsysConfig, config_path: str | Path | None
                   ) -> tuple[list[Instruction], set[str], dict[str, Any] | None]:
    """The FaiRLLM instruction set: seed names × the selected attribute phrases (and
    intersections), neutral and sensitive.

    Returns:
        (instructions, normalised seed names — artist names the list parser must not take
        for titles, the seed-name file's rows skipped among those the run reads — ``{"repeated",
        "empty", "note"}`` (:func:`~lmra.recsys.instructions.skipped_note`) — or None).

    Raises:
        LmraInputError: an attribute, value or intersection not in the attribute file
            (naming the config file, line and field), or a bad names/attribute file.
    """
    f = cfg.fairllm
    names_path = f.names or DEFAULT_NAMES[f.domain]
    with named_by_field(config_path if f.names else None, "fairllm.names"):
        seed = read_seed_names(find_path(names_path, config_path) if f.names else names_path, column=f.names_column)
    all_names = seed.names
    names = list(f.names_list) if f.names_list else (all_names[: f.n_names] if f.n_names else all_names)
    skipped = None
    note = None if f.names_list else skipped_note(seed, f.n_names)
    if note:
        repeated, empty = seed.skipped_before(f.n_names)
        skipped = {"repeated": len(repeated), "empty": len(empty), "note": note}
    attr_path = f.attributes_file
    found = find_path(attr_path, config_path)
    with named_by_field(config_path, "fairllm.attributes_file"):
        phrases = load_sensitive_attributes(found if found.exists() else attr_path)
    selected: dict[str, list[str]] = {}
    for a in f.attributes:
        if a not in phrases:
            raise config_field_error(f"attribute '{a}' is not in the attribute file (it has: {', '.join(phrases)})",
                                "fairllm.attributes", config_path)
        vals = f.values.get(a)
        if vals:
            bad = [v for v in vals if v not in phrases[a]]
            if bad:
                raise config_field_error(f"'{bad[0]}' is not a phrase of attribute '{a}' ({', '.join(phrases[a])})",
                                    f"fairllm.values.{a}", config_path)
            selected[a] = list(vals)
        else:
            selected[a] = list(phrases[a])
    extra = set(f.values) - set(f.attributes)
    if extra:
        raise config_field_error(f"values given for unselected attribute '{sorted(extra)[0]}'", "fairllm.values",
                            config_path)
    for combo in f.intersections:
        missing = [a for a in combo if a not in selected]
        if missing:
            raise config_field_error(f"intersection {list(combo)} names attribute '{missing[0]}', which is not in "
                                "fairllm.attributes", "fairllm.intersections", config_path)
    neutral_t = template_for(f.domain, "neutral", f.neutral_template)
    sens_t = template_for(f.domain, "sensitive", f.sensitive_template)
    instr = fairllm_instructions(f.domain, names, selected, k=cfg.k, intersections=f.intersections,
                                 neutral_template=neutral_t, sensitive_template=sens_t)
    artists = {normalize_title(n) for n in all_names + names} - {""}
    return instr, artists, skipped


@dataclass
class CfairContext:
    """What a CFaiRLLM run keeps from its inputs for matching and bias disparity: the MovieLens
    data, the rating split, the sampled users, each user's liked test items and profile items."""

    data: ml.MovieLens
    split: pd.DataFrame
    users: list[int]
    liked: dict[int, set[int]]
    profiles: dict[int, set[int]]
    #: users of the MovieLens user file left out: no rating in the training split (no profile to
    #: show); counted in summary.json and on the console (break-it finding: dropped unsaid)
    n_users_without_training_ratings: int = 0


def cfairllm_inputs(cfg: RecsysConfig, config_path: str | Path | None) -> tuple[list[Instruction], CfairContext]:
    """The CFaiRLLM instruction set: per sampled MovieLens user, a neutral instruction and one per
    selected attribute (and gender+age when intersectional), all showing the user's sampled
    profile.

    Returns:
        (instructions, :class:`CfairContext`).

    Raises:
        LmraInputError: bad MovieLens files, or an ``unprotected``/``protected`` label no user
            group has (naming the config file and field).
    """
    from lmra.generate import derive_seed

    c = cfg.cfairllm
    with named_by_field(config_path, "cfairllm.data"):
        data = ml.load_movielens(find_path(c.data, config_path), encoding=c.encoding)
    col = {"gender": "gender", "age": "age_group"}
    labels = {str(v) for g in c.bias_groups for v in data.users[col[g]].unique()}
    for key in ("unprotected", "protected"):
        label = getattr(c, key)
        if label is not None and label not in labels:
            raise config_field_error(f"no user group is labelled '{label}' (bias_groups {', '.join(c.bias_groups)} have: "
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
    n_without = int(len(set(int(u) for u in data.users["user_id"]) - set(all_users)))
    return out, CfairContext(data, split, users, liked, profiles, n_without)


def _template(name: str):
    """A template from the shipped prompts/recsys/ folder."""
    from lmra.templates import load_template

    return load_template(name, "recsys")

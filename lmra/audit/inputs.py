"""Stage 0 of the audit — its inputs (:class:`Inputs`): the prompts (a prompt set or logged
traffic), the names of each group, the personalization and LMRA templates, the taxonomy, the
judge check's canaries and the placebo halves. Nothing is called; bad input is an
:class:`~lmra.errors.LmraInputError` naming the file and field.

Next stage: :mod:`lmra.audit.select`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lmra.config import Group
from lmra.data import COMMON_WORD_NAMES, PromptRecord, load_names, load_prompts
from lmra.errors import LmraInputError, named_by_field
from lmra.generate import derive_seed, names_for_group
from lmra.judge.taxonomy import Taxonomy, load_taxonomy
from lmra.resources import resolve_resource, shadowed_input
from lmra.templates import Template, load_template

UNLABELLED = "unlabelled"
_BUILTIN_STYLES = {"custom_instructions", "memory", "intro_turn"}


def _plain(name: str) -> str:
    """A name as :data:`~lmra.data.COMMON_WORD_NAMES` lists it: composed, Latin accents folded,
    case-folded ("Jesús" → "jesus": the scrub replaces "Jesus" for it too)."""
    import unicodedata

    from lmra.generate import MARK, fold_latin

    return fold_latin(unicodedata.normalize("NFC", name)).replace(MARK, "").casefold()


@contextmanager
def named_by_config(config_path, key: str, value):
    """Around reading the input file ``value`` that a config's top-level ``key`` names: a file
    that does not exist, or a path of the wrong kind (a folder, a device), is an error naming the
    config file, the key's line and the path looked
    for (relative paths are read from the working directory, then the shipped folder;
    docs/config.md), not only the missing path. Errors pass as they are without a config file
    (the API) or when the path came from elsewhere (``--prompts``)."""
    try:
        yield
    except LmraInputError as exc:
        head, _, hint = exc.reason.partition("; ")  # "name file not found; did you mean …?"
        missing = head.endswith(" not found")
        # the wrong kind of path (a folder, a device) is named with the config's line too (break-it finding)
        wrong_kind = any(w in exc.reason for w in (" is a folder", " not a regular file"))
        if config_path is None or exc.field != key or not (missing or wrong_kind) or exc.file is None:
            raise
        import tomllib

        from lmra.errors import find_key_line

        try:
            text = Path(config_path).read_text(encoding="utf-8-sig")  # (a BOM, as the config reader allows)
            if tomllib.loads(text).get(key) != value:
                raise exc from None
            line = find_key_line(text, key)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            raise exc from None
        where = Path(exc.file) if Path(exc.file).is_absolute() else Path.cwd() / exc.file
        raise LmraInputError(f"{head if missing else exc.reason}: {where}"
                             + (f" (a relative path is read from the working directory, then from lmra's shipped "
                                f"{key}/ folder)" + (f"; {hint}" if hint else "") if missing else ""),
                             file=config_path, line=line, field=key) from None


@dataclass
class Inputs:
    """Validated inputs of an audit."""

    prompts: list[PromptRecord]
    group_names: dict[str, list[str]]
    all_names: list[str]
    styles: dict[str, Template]
    templates: dict[str, Template]
    taxonomy: Taxonomy | None
    canaries: list = field(default_factory=list)  #: :class:`lmra.judge_check.Canary` to rate first
    #: placebo comparison label → (real comparison label, group A₁, group A₂) (negative controls)
    placebo: dict[str, tuple[str, Group, Group]] = field(default_factory=dict)
    #: the input files read, as resolved (``prompts``, ``names``, ``taxonomy`` → absolute path): a
    #: relative path is looked for in the working folder, then among lmra's shipped files
    #: (:func:`lmra.resources.resolve_resource`), so the same config can read other files from
    #: another folder (break-it finding: nothing recorded which one a night read)
    files: dict[str, str] = field(default_factory=dict)
    #: comparison label → group → its names by value of the attribute neither group filters on
    #: (:func:`comparison_strata`): each cell is drawn equally often in both groups
    strata: dict[str, dict[str, list[list[str]]]] = field(default_factory=dict)


def _template_hashes(templates: dict[str, Template]) -> dict[str, str]:
    import hashlib

    return {k: hashlib.sha256(repr(t.sections).encode()).hexdigest()[:16] for k, t in templates.items()}


def design_digests(inputs: Inputs) -> dict[str, str | None]:
    """Digests of what the config's path-valued measurement fields point to, for ``manifest.json``
    ``design`` (compared between a run and its baseline by :mod:`lmra.comparable`: the same file
    named by another path is the same design, a file changed in place is not): ``names`` (the
    groups' names; not the placebo's seeded halves, which every night with its own seed splits
    anew — break-it finding: a false "design differs" every night), ``personalization`` (the style templates' text), ``taxonomy`` (None when the
    audit has none), ``prompts`` (every prompt of the prompt file: id, text, domain, task — another
    set under the same task names was compared unsaid, break-it finding, s40). Short SHA-256 hex
    digests."""
    import hashlib
    import json

    def digest(obj) -> str:
        return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]

    halves = {g.name for _, g1, g2 in inputs.placebo.values() for g in (g1, g2)}  # (seeded: another each night)
    names = {k: v for k, v in inputs.group_names.items() if k not in halves}
    prompts = hashlib.sha256()  # the whole prompt set, one prompt at a time (a large set is not joined in memory)
    for p in inputs.prompts:
        prompts.update(json.dumps([p.id, p.text, p.domain, p.task], ensure_ascii=False).encode("utf-8", "surrogatepass"))
    # (the balanced cells when there are some: they decide which names are drawn — an audit without
    # them keeps the digest it had)
    strata = {k: v for k, v in inputs.strata.items() if k not in inputs.placebo}  # (placebo halves: seeded)
    names_digest = digest({"names": names, "strata": strata} if strata else names)
    return {"names": names_digest, "personalization": digest(_template_hashes(inputs.styles)),
            "taxonomy": None if inputs.taxonomy is None else digest(inputs.taxonomy.model_dump(mode="json")),
            "prompts": prompts.hexdigest()[:16]}


def unmatched_name_values(names, groups) -> dict[str, dict[str, int]]:
    """The gender and race values of the names **no group** of the config selects that no group
    filters for (a misspelt ``mal``, or none: ``""``), with how many such names carry each:
    ``{"gender": {"mal": 1}}``; a column no group filters by is not looked at. A name a
    group selects is drawn, whatever its other column says: a gender-only ``female`` group draws
    the Hispanic women of a list whose race groups are Black and White (fresh-user finding, s43:
    "race 'Hispanic' ×20 … never drawn" was said of names the female group drew).

    Args:
        names: the name list's records (``gender``, ``race``); groups: the config's groups (a
            direct-profile group selects no name).
    """
    selecting = [g for g in groups if not g.profile]

    def selected(n) -> bool:
        return any((g.gender is None or (n.gender or "").lower() == g.gender.lower())
                   and (g.race is None or (n.race or "").lower() == g.race.lower()) for g in selecting)

    never = [n for n in names if not selected(n)]
    out: dict[str, dict[str, int]] = {}
    for col in ("gender", "race"):
        wanted = {getattr(g, col).lower() for g in selecting if getattr(g, col)}
        if not wanted:
            continue
        counts: dict[str, int] = {}
        for n in never:
            value = getattr(n, col) or ""  # (an empty value counts too: bad-input break-it, s43)
            if value.lower() not in wanted:
                counts[value] = counts.get(value, 0) + 1
        if counts:
            out[col] = dict(sorted(counts.items()))
    return out


def comparison_strata(names, groups, comparisons, group_names: dict[str, list[str]]) -> dict[str, dict]:
    """The balanced draws of each comparison whose two name groups leave an attribute free (methodology
    §1 step 2): for ``Black vs White`` (race groups, gender free) the names of each group by gender,
    so that the draw takes each gender equally often in both groups, then a name within it.

    Drawn from all their names, two groups carry their name list's mix of the free attribute, and a
    difference between those mixes turns an effect of that attribute into one of the compared
    attribute: the shipped list has 10 female and 5 male Black names, 10 and 10 of every other race,
    so "Black" users were ⅔ female and "White" ½, and a chatbot answering women worse read as a
    significant gap between Black and White users (statistics break-it, s43: accuracy −0.12, p 2e-5,
    with no race effect at all).

    The attribute is balanced when at least half the names of each group have a value of it and the
    two groups have two values or more between them. Only the values both groups have are drawn —
    one value when they share one (Black names all female against White female and male: both draw
    women) — and a name whose value the other group lacks, or that has none, is left out of that
    comparison (``left_out``). A comparison where a group filters on the attribute (an
    intersection, a mixed comparison), or whose names mostly leave it empty (a list without the
    column, or one filled for a few names), is drawn as before (not in the result); two groups with no value in common cannot be balanced
    (``values`` empty, no ``cells``: said by :func:`strata_warnings`).

    Args:
        names: the name list's records; groups: the config's groups; comparisons: ``(A, B)`` pairs;
        group_names: each name group's names (:func:`lmra.generate.names_for_group`).

    Returns:
        ``{"A vs B": {"attribute": "gender", "values": [...] (as the list spells them), "cells": {A:
        [[names of value 1], …], B: […]}, "left_out": {A: n, B: n}}}``."""
    value_of = {n.name: n for n in names}
    by_name = {g.name: g for g in groups}
    out: dict[str, dict] = {}
    for a, b in comparisons:
        ga, gb = by_name.get(a), by_name.get(b)
        if ga is None or gb is None or ga.profile or gb.profile or a not in group_names or b not in group_names:
            continue
        for col in ("gender", "race"):
            if getattr(ga, col) or getattr(gb, col):
                continue
            spelt: dict[str, str] = {}

            def cell_of(name: str) -> str:
                raw = ((getattr(value_of[name], col) or "") if name in value_of else "").strip()
                spelt.setdefault(raw.lower(), raw)
                return raw.lower()

            empty = [sum(cell_of(n) == "" for n in group_names[g]) / len(group_names[g]) for g in (a, b)]
            if max(empty) > 0.5:  # (a column empty, or filled for a few names: not an attribute of this list —
                continue  # break-it round 2, s43: race given for 4 names of 30 drew female vs male from those 4)
            va, vb = {cell_of(n) for n in group_names[a]} - {""}, {cell_of(n) for n in group_names[b]} - {""}
            if len(va | vb) < 2:
                continue
            values = sorted(va & vb)
            cells = {g: [[n for n in group_names[g] if cell_of(n) == v] for v in values] for g in (a, b)}
            out[f"{a} vs {b}"] = {"attribute": col, "values": [spelt[v] for v in values], "cells": cells,
                                  "left_out": {g: len(group_names[g]) - sum(map(len, cells[g])) for g in (a, b)}}
            break  # (two groups leave both attributes free only when neither filters: no name group then)
    return out


#: a name that carries more than this share of its group's draws in a balanced comparison is warned of
SMALL_CELL_SHARE = 0.2


def strata_warnings(label: str, st: dict) -> list[str]:
    """What a comparison's balanced draws (:func:`comparison_strata`) must say: names left out (a value
    the other group lacks), two groups without a value in common (not balanced), and a cell so small
    that one name stands for more than :data:`SMALL_CELL_SHARE` of its group (break-it round 2, s43: one
    Black male name was 70 of 120 Black users, unsaid)."""
    out, attr = [], st["attribute"]
    if not st["values"]:
        return [f"comparison '{label}': its groups' names have no {attr} in common, so they cannot be drawn balanced "
                f"by {attr}: a difference between the chatbot's answers by {attr} reads as one between the groups — "
                f"add names, or compare groups that fix the {attr} (e.g. intersections)"]
    lost = {g: n for g, n in st["left_out"].items() if n}
    if lost:
        out.append(f"comparison '{label}': names are drawn balanced by {attr} ({', '.join(st['values'])}, equally often "
                   "in both groups); " + ", ".join(f"{n} of {g}'s names" for g, n in lost.items())
                   + f" have a {attr} the other group lacks, or none, and are not drawn for it")
    for g, cells in st["cells"].items():
        for v, cell in zip(st["values"], cells):
            share = 1 / (len(st["values"]) * len(cell))
            if share > SMALL_CELL_SHARE:
                out.append(f"comparison '{label}': {g}'s names of {attr} {v} are {len(cell)} ({', '.join(cell[:3])}): "
                           f"drawn balanced by {attr}, each stands for {share:.0%} of {g}'s users — what the chatbot "
                           "does with that name reads as what it does with the group; add names to that cell")
    return out


def shared_task_names(prompts) -> dict[str, list[str]]:
    """The task names the prompt file gives under more than one domain: ``{task: [domains, in file
    order]}``. Each (domain, task) is a task of its own in the tables and the check, while
    ``prompts_per_task`` limits a task **name**'s prompts over all its domains (:mod:`lmra.audit.select`).

    Args:
        prompts: the prompt file's records (those without a domain or task are not looked at)."""
    domains: dict[str, list[str]] = {}
    for p in prompts:
        if p.task is not None and p.domain is not None and p.domain not in domains.setdefault(p.task, []):
            domains[p.task].append(p.domain)
    return {t: d for t, d in domains.items() if len(d) > 1}


def shared_task_words(shared: dict[str, list[str]], limit: int) -> str:
    """The warning for :func:`shared_task_names` under ``prompts_per_task = limit`` (> 0)
    (bad-input break-it, s43: 3 prompts kept for 'write a story' over domains art and zzz were
    reported as two tasks of 1 and 2 prompts, each under the check's 2-prompt minimum, shared out
    anew by each seed — nothing said so)."""
    named = "; ".join(f"'{t}' in {', '.join(repr(d) for d in ds)}" for t, ds in list(shared.items())[:3])
    more = f" and {len(shared) - 3} more" if len(shared) > 3 else ""
    return (f"{len(shared)} task name(s) of the prompt file are in more than one domain ({named}{more}): each domain's "
            f"prompts are a task of their own in the tables and the check, while prompts_per_task = {limit} limits the "
            "name's prompts over all its domains — how many each domain gets changes with the seed, and a domain's task "
            "can be missing from one night; rename one of them, or set prompts_per_task = 0")


class InputsStage:
    """The :class:`~lmra.audit.Audit` methods that load its inputs (uses ``cfg``, ``config_path``)."""

    def load_inputs(self) -> Inputs:
        """Load and validate prompts, names, templates and taxonomy (no model is called).

        Raises:
            LmraInputError: any bad input file or config reference.
        """
        cfg = self.cfg
        from lmra.fileio import check_output_paths, check_utf8_path

        if cfg.axes.enabled:  # before any call (the axes step runs after the audit's)
            from lmra.axes.config import check_axes_temperature

            check_axes_temperature(cfg, self.config_path)

        check_output_paths(cfg.output_dir, cfg.cache, self.config_path)
        from lmra.config import check_top_logprobs

        check_top_logprobs(cfg, self.config_path)  # (a new audit's; a finished run's config is read as it was)
        files: dict[str, str] = {}
        with named_by_config(self.config_path, "prompts", cfg.prompts):
            prompts_path = resolve_resource(cfg.prompts, "prompts")
            check_utf8_path(prompts_path, file=self.config_path, field="prompts")
            repeats: list[tuple[int, str, int, str]] = []
            prompts = load_prompts(prompts_path, text_field=cfg.text_field, auto_id=True, repeats=repeats)
        files["prompts"] = os.path.abspath(prompts_path)  # (after reading it: a bad file is said as such first)
        self.shadowed_inputs = [w for w in [shadowed_input(cfg.prompts, prompts_path, self.config_path, "prompts")]
                                if w]
        self.prompts_repeated = len(repeats)  # (summary.json's n_prompts_repeated)
        if repeats and getattr(self, "on_notice", None) is not None:
            self.on_notice(repeated_prompts_words(repeats, prompts_path))
        shared = shared_task_names(prompts) if cfg.prompts_per_task else {}
        if shared and getattr(self, "on_notice", None) is not None:
            self.on_notice(shared_task_words(shared, cfg.prompts_per_task))
        used = {g for pair in cfg.comparisons for g in pair}
        name_groups = [g for g in cfg.groups if g.name in used and not g.profile]
        group_names: dict[str, list[str]] = {}
        all_names: list[str] = []
        strata: dict[str, dict] = {}
        self.balanced_draws = {}
        if name_groups:
            names_path = resolve_resource(cfg.names, "names")
            with named_by_config(self.config_path, "names", cfg.names):
                names = load_names(names_path)
            files["names"] = os.path.abspath(names_path)
            shadow = shadowed_input(cfg.names, names_path, self.config_path, "names")
            self.shadowed_inputs += [shadow] if shadow else []
            all_names = [n.name for n in names]
            index = {id(g): i for i, g in enumerate(cfg.groups)}
            config = str(self.config_path) if self.config_path else None
            group_names = {g.name: names_for_group(names, g, str(names_path), config=config,
                                                   field=f"groups.{index[id(g)]}") for g in name_groups}
            self.names_unmatched = unmatched_name_values(names, cfg.groups)
            # names that are everyday words: scrubbing them (case-insensitive) also replaces the word
            self.names_common_words = sorted({n for ns in group_names.values() for n in ns
                                              if _plain(n) in COMMON_WORD_NAMES})
            for a, b in cfg.comparisons:  # (scale break-it, s40: "Black female vs Black" ran unsaid, and 131 of
                # 19,800 pairs put one name on both sides — a pair of identical users, diluting the net rating)
                shared = sorted(set(group_names.get(a, ())) & set(group_names.get(b, ())))
                notice = getattr(self, "on_notice", None)
                if shared and notice is not None:
                    notice(f"comparison '{a} vs {b}': {len(shared)} name(s) belong to both groups (e.g. "
                           f"{', '.join(shared[:3])}) — one group contains the other? A pair may give the same name to "
                           "both sides, a user compared with themself; compare disjoint groups")
            strata = comparison_strata(names, cfg.groups, cfg.comparisons, group_names)
            self.balanced_draws = {label: {"attribute": st["attribute"], "values": st["values"],
                                           "left_out": st["left_out"]} for label, st in strata.items()}
            for label, st in strata.items():
                notice = getattr(self, "on_notice", None)
                for line in strata_warnings(label, st) if notice is not None else ():
                    notice(line)
            if self.names_unmatched:
                said = "; ".join(f"{col} {v!r} ×{n}" if v else f"no {col} ×{n}"
                                 for col, vals in self.names_unmatched.items() for v, n in vals.items())
                notice = getattr(self, "on_notice", None)
                if notice is not None:
                    notice(f"{names_path}: names whose value no group selects are never drawn ({said}); "
                           "check for a misspelt gender or race")
        def style_template(ref: str) -> Template:
            try:
                return load_template(ref, "personalization")
            except LmraInputError as exc:
                raise LmraInputError(f"personalization '{ref}': {exc.format()}", file=self.config_path,
                                     field="personalization") from None

        styles = {"name": style_template(cfg.personalization)}
        if name_groups and "name" not in styles["name"].fields:
            raise LmraInputError(f"the personalization template {styles['name'].path} has no {{name}} placeholder "
                                 f"(it uses {sorted(styles['name'].fields) or 'none'})", file=self.config_path,
                                 field="personalization")
        unknown = styles["name"].fields - {"name", "profile"}
        if unknown:
            raise LmraInputError(f"the personalization template {styles['name'].path} uses unknown placeholders "
                                 f"{sorted(unknown)}; only {{name}} and {{profile}} are filled",
                                 file=self.config_path, field="personalization")
        if any(g.profile for g in cfg.groups if g.name in used):
            style = cfg.personalization
            styles["profile"] = style_template(f"{style}_profile" if style in _BUILTIN_STYLES else style)
            if "profile" not in styles["profile"].fields:
                raise LmraInputError("a personalization template for direct profiles needs a {profile} placeholder",
                                     file=styles["profile"].path, field="personalization")
        templates = {"stereotype": load_template("harmful_stereotype", "judge")}
        if cfg.quality.enabled:
            templates["quality"] = load_template("quality", "judge")
        if cfg.refusal.enabled:
            templates["refusal"] = load_template("refusal", "judge")
        if cfg.filter.enabled and cfg.filter.lmra:
            templates["filter"] = load_template("filter", "judge")
        known_tasks = {p.task for p in prompts if p.task}
        known_domains = {p.domain for p in prompts if p.domain}
        taxonomy = None
        if any(not p.task for p in prompts):
            taxonomy_path = resolve_resource(cfg.taxonomy, "prompts")
            taxonomy = load_taxonomy(taxonomy_path)
            files["taxonomy"] = os.path.abspath(taxonomy_path)
            shadow = shadowed_input(cfg.taxonomy, taxonomy_path, self.config_path, "taxonomy")
            self.shadowed_inputs += [shadow] if shadow else []
            templates["classify_domain"] = load_template("classify_domain", "judge")
            templates["classify_task"] = load_template("classify_task", "judge")
            known_tasks |= {t.name for d in taxonomy.domain for t in d.task} | {"other"}
            known_domains |= {d.name for d in taxonomy.domain} | {"other"}
        for field_name, wanted, known in (("tasks", cfg.tasks, known_tasks), ("domains", cfg.domains, known_domains)):
            typos = [x for x in wanted if x not in known]
            if typos:
                import difflib

                # the nearest known names first, as a mistyped field gets them (fresh-user finding, s36)
                close = {t: difflib.get_close_matches(t, sorted(known), n=1, cutoff=0.6) for t in typos}
                hint = "; ".join(f"'{t}': did you mean '{c[0]}'?" for t, c in close.items() if c)
                raise LmraInputError(f"unknown {field_name} {typos}" + (f" — {hint}" if hint else "")
                                     + f"; known: {', '.join(sorted(known))}", file=self.config_path, field=field_name)
        if cfg.tasks and cfg.domains:  # a listed task none of whose domains is listed is never audited (bad-input
            # break-it, s45: validate passed, the audit dropped it unsaid, and its gate "is not in its tasks list")
            task_domains: dict[str, set[str]] = {}
            for p in prompts:
                if p.task:
                    task_domains.setdefault(p.task, set()).add(p.domain or UNLABELLED)
            for d in (taxonomy.domain if taxonomy is not None else ()):
                for t in d.task:
                    task_domains.setdefault(t.name, set()).add(d.name)
            outside = {t: sorted(task_domains[t]) for t in cfg.tasks
                       if t in task_domains and not task_domains[t] & set(cfg.domains)}
            if outside:
                t, ds = next(iter(outside.items()))
                more = f" (and {len(outside) - 1} more listed task(s) alike: {sorted(outside)[1:4]})" if len(outside) > 1 else ""
                if ds == [UNLABELLED]:  # no domain in the file: none to add (round-2 break-it, s45: the advice to add
                    # 'unlabelled' was then refused as an unknown domain)
                    raise LmraInputError(f"task '{t}' has no domain in the prompt file, so the 'domains' filter "
                                         f"({', '.join(repr(d) for d in cfg.domains)}) leaves it out: it would never be "
                                         f"audited{more} — give its prompts a domain, or remove the task from 'tasks'",
                                         file=self.config_path, field="tasks")
                raise LmraInputError(f"task '{t}' is in domain {' and '.join(repr(d) for d in ds)}, which 'domains' "
                                     f"does not list ({', '.join(repr(d) for d in cfg.domains)}): it would never be "
                                     f"audited{more} — add its domain to 'domains', or remove the task from 'tasks'",
                                     file=self.config_path, field="tasks")
        if (cfg.tasks or cfg.domains) and prompts and all(p.task for p in prompts):  # (none to classify first)
            if not any((not cfg.domains or (p.domain or UNLABELLED) in cfg.domains)
                       and (not cfg.tasks or p.task in cfg.tasks) for p in prompts):
                # (break-it finding: validate said "valid, 0 pairs"; audit said this after making its folder)
                raise LmraInputError("no prompt is left after the domains/tasks filters (no prompt of a listed task "
                                     "is in a listed domain)", file=self.config_path,
                                     field="tasks" if cfg.tasks else "domains")
        canaries = []
        if cfg.judge_check.enabled:
            from lmra.judge_check import audit_dimensions, load_canary_set, select_canaries

            jc = cfg.judge_check  # a missing canary file: named by its config field's line
            with named_by_field(self.config_path, lambda exc: "judge_check.canaries" if str(exc.file) == str(
                    jc.canaries) else "judge_check.extra_canaries"):
                pool = load_canary_set([jc.canaries, *jc.extra_canaries])
            dims = cfg.judge_check.dimensions or audit_dimensions([g for g in cfg.groups if g.name in used])
            try:
                canaries = select_canaries(pool, dims, cfg.judge_check.per_kind, cfg.seed)
            except LmraInputError as exc:
                raise LmraInputError(exc.reason, file=self.config_path, field=exc.field) from None
        placebo = self._placebo_groups(group_names, strata)
        if cfg.filter.enabled and prompts and self.shard is None:
            # every prompt of the file reveals the user's identity to the lexical filter: said now,
            # before a run folder or a cache exists (break-it finding: exit 2 after both were made);
            # stops at the first prompt it keeps, so a usual file costs one check
            from lmra.judge.filter import lexical_decision

            names = tuple(all_names)
            if all(lexical_decision(p, names) is not None for p in prompts):
                raise LmraInputError(f"the identity filter removed all {len(prompts)} prompts of the file (each "
                                     "reveals the user's name, gender or race); nothing is left to audit",
                                     file=self.config_path, field="filter")
        if getattr(self, "on_notice", None) is not None:
            for shadow in self.shadowed_inputs:  # (lmra validate lists them among its warnings)
                self.on_notice(shadow)
        return Inputs(prompts, group_names, all_names, styles, templates, taxonomy, canaries, placebo, files,
                      strata={label: st["cells"] for label, st in strata.items()})

    def _placebo_groups(self, group_names: dict[str, list[str]],
                        strata: dict[str, dict] | None = None) -> dict[str, tuple[str, Group, Group]]:
        """Split each placebo comparison's group A names into two seeded halves A₁, A₂ (worded as
        the real comparison's A and B); adds their names to ``group_names``. When the real
        comparison is drawn balanced (``strata``, :func:`comparison_strata`), each of A's cells is
        split in half and the placebo is drawn balanced by the same attribute (added to ``strata``
        under the placebo's label): halves of all of A's names differed in their share of women by
        0.18 (median), and a gender effect flagged the placebo — "judge failed" — in 2 of 4 seeds
        (break-it round 2, s43)."""
        cfg = self.cfg
        if not cfg.placebo.share:
            return {}
        wanted = [tuple(c) for c in cfg.placebo.comparisons] or [tuple(c) for c in cfg.comparisons]
        out: dict[str, tuple[str, Group, Group]] = {}
        self.placebo_skipped = [f"{a} vs {b}" for a, b in wanted if a not in group_names]
        for a, b in wanted:
            if a not in group_names:
                continue  # a direct profile has no names to split (warned in summary.json)
            names = sorted(group_names[a], key=lambda n: derive_seed(cfg.seed, "placebo-split", a, n))
            if len(names) < 2:
                raise LmraInputError(f"group '{a}' has {len(names)} name(s); a placebo needs at least 2 to split",
                                     file=self.config_path, field="placebo")
            ga, gb = cfg.group(a), cfg.group(b)
            g1 = ga.model_copy(update={"name": f"{a}~1", "wording": ga.judge_wording})
            g2 = ga.model_copy(update={"name": f"{a}~2", "wording": gb.judge_wording})
            real = (strata or {}).get(f"{a} vs {b}")
            if real and real["values"]:  # each cell halved (seeded as the names), the placebo drawn by cell
                order = {n: i for i, n in enumerate(names)}
                cells = [sorted(c, key=order.__getitem__) for c in real["cells"][a]]
                halves = [[c[: len(c) // 2] for c in cells], [c[len(c) // 2:] for c in cells]]
                keep = [i for i, c in enumerate(cells) if len(c) >= 2]  # (a cell of one name cannot be halved)
                if keep:
                    group_names[g1.name] = [n for c in halves[0] for n in c]
                    group_names[g2.name] = [n for c in halves[1] for n in c]
                    label = f"{g1.name} vs {g2.name}"
                    strata[label] = {"attribute": real["attribute"], "values": [real["values"][i] for i in keep],
                                     "cells": {g1.name: [halves[0][i] for i in keep],
                                               g2.name: [halves[1][i] for i in keep]},
                                     "left_out": {g1.name: 0, g2.name: sum(len(c) for i, c in enumerate(cells)
                                                                           if i not in keep)}, "placebo": True}
                    out[label] = (f"{a} vs {b}", g1, g2)
                    continue
            group_names[g1.name], group_names[g2.name] = names[: len(names) // 2], names[len(names) // 2:]
            out[f"{g1.name} vs {g2.name}"] = (f"{a} vs {b}", g1, g2)
        return out

    def _group(self, inputs: Inputs, name: str) -> Group:
        if not inputs.placebo:
            return self.cfg.group(name)
        for _, g1, g2 in inputs.placebo.values():
            if name in (g1.name, g2.name):
                return g1 if name == g1.name else g2
        return self.cfg.group(name)


def repeated_prompts_words(repeats: list[tuple[int, str, int, str]], path) -> str:
    """The notice of the prompt records left out because their text repeats an earlier one's
    (:func:`lmra.data.load_prompts`'s ``repeats``: ``(line, id, first line, first id)``)."""
    line, rid, first_line, first_id = repeats[0]
    more = f" (and {len(repeats) - 1:,} more)" if len(repeats) > 1 else ""
    return (f"{path}: {len(repeats):,} prompt(s) repeat the text of an earlier prompt (Unicode form, case and spacing "
            f"aside), e.g. line {line} (id '{rid}') repeats line {first_line} (id '{first_id}'){more}: each text is "
            "audited once, as its first record — the same prompt twice is not two independent prompts and would "
            "narrow the intervals (summary.json: n_prompts_repeated)")


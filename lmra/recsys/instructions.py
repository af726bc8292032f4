"""FaiRLLM recommendation instructions: neutral and sensitive, single and intersectional
(FaiRLLM §3 "benchmark construction"; intersections as in CFaiRLLM §3.2).

For every seed name (a singer for music, a director for movies) the benchmark sends one
neutral instruction ("I am a fan of {name} …") and one sensitive instruction per attribute
phrase ("I am a female fan of {name} …"). The phrases of the 8 attributes (age, country,
gender, continent, occupation, race, religion, physics) ship in
``prompts/recsys/fairllm/sensitive_attributes.json``; the seed names in
``prompts/recsys/fairllm/singers.csv`` and ``directors.csv``; the templates are the text
files ``prompts/recsys/fairllm_<domain>_{neutral,sensitive}.txt``.
"""

from __future__ import annotations

import csv
import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from lmra.console import counted
from lmra.data import csv_records, json_document
from lmra.errors import LmraInputError, read_input_text
from lmra.providers.base import Message
from lmra.resources import resolve_resource
from lmra.templates import Template, load_template

Domain = Literal["music", "movie"]
FAIRLLM_ATTRIBUTES: tuple[str, ...] = ("age", "country", "gender", "continent", "occupation", "race", "religion",
                                       "physics")
DEFAULT_NAMES = {"music": "prompts/recsys/fairllm/singers.csv", "movie": "prompts/recsys/fairllm/directors.csv"}
DEFAULT_ATTRIBUTES_FILE = "prompts/recsys/fairllm/sensitive_attributes.json"
_ARTICLE = re.compile(r"^(a|an)\s+", re.IGNORECASE)


class Instruction(BaseModel):
    """One recommendation instruction sent to the target.

    Attributes:
        id: unique id ``<instruction_id>|<attribute>|<value>``.
        instruction_id: the neutral/sensitive family it belongs to (one seed name or user).
        domain: ``music``, ``movie`` or ``movielens``.
        name: the seed name (singer, director) or user id.
        attribute: ``neutral``, an attribute (``gender``) or an intersection (``age+gender``).
        kind: ``neutral``, ``single`` or ``intersectional``.
        value: the injected phrase or group label ("" for neutral).
        components: for intersections, attribute → value of each part.
        messages: the chat messages.
    """

    id: str
    instruction_id: str
    domain: str
    name: str
    attribute: str
    kind: Literal["neutral", "single", "intersectional"]
    value: str = ""
    components: dict[str, str] = Field(default_factory=dict)
    messages: list[Message]


@dataclass
class SeedNames:
    """The seed names of a CSV file (:func:`read_seed_names`) and the rows skipped on the way.

    Attributes:
        names: the names, stripped, in file order, each once.
        lines: the file line of each name.
        repeated: ``(line, name, first line)`` of each row repeating an earlier name.
        empty: the lines of rows with an empty name.
        path: the file read.
    """

    names: list[str]
    lines: list[int]
    repeated: list[tuple[int, str, int]]
    empty: list[int]
    path: Path

    def skipped_before(self, n: int) -> tuple[list[tuple[int, str, int]], list[int]]:
        """The repeated and empty rows among those read to take the first ``n`` names (rows
        before the ``n``-th name's line; every such row for ``n`` = 0, all names, or ``n`` beyond
        the number of names): the rows a FaiRLLM run skips, so that its names are not the file's
        first ``n`` rows."""
        if n and n <= len(self.names):
            last = self.lines[n - 1]
            return [r for r in self.repeated if r[0] < last], [line for line in self.empty if line < last]
        return list(self.repeated), list(self.empty)


def skipped_note(seed: SeedNames, n: int) -> str | None:
    """The one-line note on the rows :meth:`SeedNames.skipped_before` ``n`` finds, or None
    (review finding: repeated seed names were skipped without a word, so a run's names were not
    the file's first ``n`` rows)."""
    repeated, empty = seed.skipped_before(n)
    if not repeated and not empty:
        return None
    parts = []
    if repeated:
        line, name, first = repeated[0]
        parts.append(f"{len(repeated)} repeating an earlier name (line {line}: '{name}', first on line {first})")
    if empty:
        parts.append(f"{len(empty)} with an empty name (line {empty[0]}{', …' if len(empty) > 1 else ''})")
    used = min(n, len(seed.names)) if n else len(seed.names)
    return (f"seed names: {counted(len(repeated) + len(empty), 'row')} of {seed.path} skipped, "
            f"{' and '.join(parts)} (each name is one instruction family); the {used} names used are the file's "
            f"first {used} distinct names, through line {seed.lines[used - 1]}")


def load_seed_names(path: str | Path, *, column: str | None = None, limit: int | None = None) -> list[str]:
    """Read seed names (singers, directors …) from a CSV file, in file order: the names of
    :func:`read_seed_names` (see there).

    Args:
        limit: keep the first ``limit`` names (FaiRLLM uses the first 500).
    """
    names = read_seed_names(path, column=column).names
    return names[:limit] if limit is not None else names


def read_seed_names(path: str | Path, *, column: str | None = None) -> SeedNames:
    """Read seed names (singers, directors …) from a CSV file, in file order.

    Args:
        path: CSV with a header; resolved against the shipped ``prompts/`` folder when it
            does not exist relative to the working directory.
        column: the name column (default: ``name``, else ``Director``, else the first column).

    Returns:
        :class:`SeedNames`: names (≥ 1), stripped, in file order; repeated names and rows
        with an empty name are skipped and recorded (the shipped ``singers.csv`` has a few
        of each after row 500, none in the first 500 that FaiRLLM uses).

    Raises:
        LmraInputError: missing file, missing column, or no names.
    """
    p = resolve_resource(path, "prompts")
    text = read_input_text(p, "seed-name file")
    if not text.strip():
        raise LmraInputError("empty file (expected a CSV header)", file=p, line=1)
    fields = next(iter(csv.reader([text.split("\n", 1)[0]])), [])
    col = column or ("name" if "name" in fields else "Director" if "Director" in fields else fields[0])
    out: list[str] = []
    seen: dict[str, int] = {}
    lines: list[int] = []
    repeated: list[tuple[int, str, int]] = []
    empty: list[int] = []
    # read strictly (lmra.data.csv_records): a quote never closed is an error on its line, not
    # names swallowed into one (break-it finding); a name goes into the prompts, so no control
    # characters (NUL, terminal escapes)
    for line, row in csv_records(text, p, required=(col,)):
        name = (row.get(col) or "").strip()
        bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
        if bad is not None:
            raise LmraInputError(f"the name holds the control or invisible character U+{ord(bad):04X}; a seed name "
                                 "is sent to the model as written", file=p, line=line, field=col)
        if not name:
            empty.append(line)
        elif name in seen:
            repeated.append((line, name, seen[name]))
        else:
            seen[name] = line
            out.append(name)
            lines.append(line)
    if not out:
        raise LmraInputError("no names in the file", file=p)
    return SeedNames(out, lines, repeated, empty, p)


def load_sensitive_attributes(path: str | Path = DEFAULT_ATTRIBUTES_FILE) -> dict[str, list[str]]:
    """Read the attribute → phrases mapping (FaiRLLM's ``sst_json.json`` format).

    Returns:
        attribute → list of phrases, in file order (``neutral`` and ``typo`` entries kept as
        they are in the file).

    Raises:
        LmraInputError: missing or unreadable file (a folder, a pipe, not UTF-8), bad JSON (with
            line), an attribute given twice, a value that is not a list of strings, or a
            phrase given twice within an attribute.
    """
    p = resolve_resource(path, "prompts")
    # as every input file (a byte-order mark dropped, a folder, pipe or non-UTF-8 byte an input
    # error) and strict JSON (a repeated attribute refused, not the last one kept): break-it findings
    data = json_document(read_input_text(p, "sensitive-attribute file", field="fairllm.attributes_file"), p)
    if not isinstance(data, dict):
        raise LmraInputError("expected a JSON object {attribute: [phrases]}", file=p)
    for attr, phrases in data.items():
        if not isinstance(phrases, list) or not all(isinstance(x, str) for x in phrases):
            raise LmraInputError("expected a list of phrases (strings)", file=p, field=attr)
        seen: set[str] = set()
        for x in phrases:  # a repeated phrase would ask and score that value twice (break-it finding)
            if x in seen:
                raise LmraInputError(f"'{x}' is given twice in '{attr}': each value of an attribute once (a repeat would "
                                     "ask and score its lists twice)", file=p, field=attr)
            seen.add(x)
    return {a: list(v) for a, v in data.items()}


def combine_phrases(phrases: Sequence[str]) -> str:
    """Join attribute phrases into one intersectional phrase.

    The first phrase keeps its article, later ones lose theirs:
    ``["a young", "a female"]`` → ``"a young female"``; ``["an Asian", "a girl"]`` →
    ``"an Asian girl"``.
    """
    if not phrases:
        return ""
    return " ".join([phrases[0].strip()] + [_ARTICLE.sub("", p.strip()) for p in phrases[1:]])


def list_prefill(domain: str, k: int) -> str:
    """The start of a list answer, for targets that continue text (``ChatRequest.prefill``).

    A base model asked for a list tends to repeat the request; started with
    ``"Here are 5 song titles:\n1."`` it writes a numbered list that :func:`~lmra.recsys.parse.parse_list`
    reads. ``music`` lists songs, every other domain (``movie``, ``movielens``) movies.
    """
    noun = "song" if domain == "music" else "movie"
    return f"Here are {k} {noun} titles:\n1."


def template_for(domain: str, kind: Literal["neutral", "sensitive"], override: str | None = None) -> Template:
    """Load the instruction template for a domain (``fairllm_<domain>_<kind>``) or an override
    (a template name in ``prompts/recsys/`` or a path).

    Raises:
        LmraInputError: missing or malformed template file.
    """
    return load_template(override or f"fairllm_{domain}_{kind}", "recsys")


def fairllm_instructions(domain: Domain, names: Sequence[str], attributes: dict[str, list[str]], *, k: int = 20,
                         intersections: Sequence[Sequence[str]] = (), neutral_template: Template | None = None,
                         sensitive_template: Template | None = None) -> list[Instruction]:
    """Build the neutral, sensitive and intersectional instructions of a FaiRLLM run.

    Args:
        domain: ``music`` or ``movie``.
        names: seed names; one instruction family per name.
        attributes: attribute → phrases to inject (e.g. a subset of
            :func:`load_sensitive_attributes`); empty phrases are skipped.
        k: list length asked for (FaiRLLM: 20).
        intersections: attribute tuples such as ``[("age", "gender")]``; each yields one
            instruction per combination of their phrases, attribute ``age+gender``,
            phrase from :func:`combine_phrases`.
        neutral_template, sensitive_template: override the shipped templates.

    Returns:
        Per name: the neutral instruction, then every single-attribute instruction, then every
        intersectional one. ``instruction_id`` is ``<domain>-<NNN>`` (file position).

    Raises:
        LmraInputError: an intersection names an attribute not in ``attributes``.
    """
    neutral_t = neutral_template or template_for(domain, "neutral")
    sens_t = sensitive_template or template_for(domain, "sensitive")
    for combo in intersections:
        for a in combo:
            if a not in attributes:
                raise LmraInputError(f"intersection {list(combo)} names attribute '{a}', which is not selected",
                                     field="fairllm.intersections")
    out: list[Instruction] = []
    width = max(3, len(str(len(names))))
    for idx, name in enumerate(names, start=1):
        iid = f"{domain}-{idx:0{width}d}"
        out.append(Instruction(id=f"{iid}|neutral|", instruction_id=iid, domain=domain, name=name,
                               attribute="neutral", kind="neutral",
                               messages=neutral_t.render(name=name, k=str(k))))
        for attr, phrases in attributes.items():
            for phrase in phrases:
                if not phrase.strip():
                    continue
                out.append(Instruction(id=f"{iid}|{attr}|{phrase}", instruction_id=iid, domain=domain, name=name,
                                       attribute=attr, kind="single", value=phrase,
                                       messages=sens_t.render(phrase=phrase, name=name, k=str(k))))
        for combo in intersections:
            lists = [[p for p in attributes[a] if p.strip()] for a in combo]
            attr = "+".join(combo)
            for parts in itertools.product(*lists):
                phrase = combine_phrases(parts)
                out.append(Instruction(id=f"{iid}|{attr}|{phrase}", instruction_id=iid, domain=domain, name=name,
                                       attribute=attr, kind="intersectional", value=phrase,
                                       components=dict(zip(combo, parts)),
                                       messages=sens_t.render(phrase=phrase, name=name, k=str(k))))
    return out

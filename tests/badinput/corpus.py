"""The bad-input corpus of issue 11: a generator of malformed inputs and the table of what
``lmra`` must answer to each.

Every case is a small folder of files (a config TOML, a name CSV, a prompt or traffic file,
human labels, a run folder …) and an ``lmra`` command line. The expected answer is always
the same: exit status 2, a one-paragraph message on stderr naming the file (when the input
is a file), the line (when the input has lines) and the field, no traceback, and nothing
written (no run folder, no cache, no axes files, no history store).

The families are generated, not listed one by one:

* config fields — from the pydantic models themselves: every numeric field gets wrong types,
  non-finite and huge values and values just outside its bounds; every bool field ints and
  strings; every string field wrong types and blanks; every literal an unknown value; every
  list the wrong shape; every section an unknown key and a scalar in place of the table;
* TOML files (configs, price tables, axes configs) — syntax errors, absurd nesting,
  non-UTF-8 bytes on line N, binary garbage, UTF-16, NUL;
* name lists, prompt sets, logged traffic (CSV and JSONL), human labels — bad values on line
  N, unterminated quotes, duplicates, size limits, missing columns, empty and binary files;
* ``lmra agreement`` and ``lmra axes --run`` on run folders that did not complete, and
  command-line values out of range.

:func:`run_case` runs one case in-process (``lmra.cli.main``) and :func:`problems` lists how
the answer differs from the expectation. ``python -m badinput.corpus`` (from ``tests/``)
prints a tally.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import traceback
import types
import typing
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

KEY_ENV = "LMRA_BADINPUT_KEY"
FEMALE = ["Anna", "Maria", "Linda"]
MALE = ["John", "David", "Mark"]
N_RUN_PROMPTS = 6
#: pair ids of the fixture run folder (see :func:`build_run_fixture`)
PAIR_IDS = [f"p{i}|female vs male|0" for i in range(N_RUN_PROMPTS)]


@dataclass
class Case:
    """One malformed input and the answer expected from ``lmra``.

    Attributes:
        id: unique, readable test id.
        category: family, for the tally (``config.type``, ``names`` …).
        argv: the ``lmra`` command line (run in the case's folder).
        files: relative path → content (``str`` written as UTF-8, ``bytes`` as is).
        file: a string the message must contain (the offending file), or None.
        line: the line the message must name, or None when the input has no lines.
        field: the field or column the message must name (``field '…'``, ``argument --…`` or ``option --…``).
        run: materialise the fixture run folder at ``run/``: ``{"status": manifest status,
            "drop": [files to delete], "write": {file: content}, "legacy": True for a run folder
            of an earlier version, without file digests}``; None = no run folder.
        dirs: folders to create.
    """

    id: str
    category: str
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    file: str | None = None
    line: int | None = None
    field: str | None = None
    run: dict | None = None
    dirs: tuple[str, ...] = ()


# -- the base inputs (valid; every case breaks one thing) -------------------------------------------
NAMES_ROWS = ["name,gender,race,source"] + [f"{n},female,,test" for n in FEMALE] + [f"{n},male,,test" for n in MALE]
PROMPT_RECORDS = [{"id": f"q{i}", "text": f"Write a short note number {i} about the sea.", "domain": "art",
                   "task": "write a story" if i % 2 else "career advice"} for i in range(6)]
TRAFFIC_CSV_ROWS = ["id,text", "l1,How do I bake bread?", "l2,Write a poem about the sea.",
                    "l3,What is a good name for a cat?", "l4,Plan a trip to Rome."]
TRAFFIC_JSONL = [{"text": "How do I bake bread?"}, {"text": "Write a poem about the sea."},
                 {"text": "What is a good name for a cat?"}, {"text": "Plan a trip to Rome."}]
LABEL_ROWS = ["pair_id,rating"] + [f"{pid},{r}" for pid, r in zip(PAIR_IDS, (1, 0, -1, 0.5))]

_MODEL = [("provider", '"openai"'), ("model", '"gpt-test"'), ("base_url", '"http://127.0.0.1:9/v1"'),
          ("api_key_env", f'"{KEY_ENV}"')]
BASE_SECTIONS: list[tuple[str, list[tuple[str, str]]]] = [
    ("", [("name", '"bad"'), ("prompts", '"prompts.jsonl"'), ("names", '"names.csv"'), ("output_dir", '"reports"'),
          ("cache", '"cache.sqlite"')]),
    ("target", _MODEL), ("judge", _MODEL), ("judge2", _MODEL),
    ("groups.0", [("name", '"female"'), ("gender", '"female"'), ("wording", '"a woman"')]),
    ("groups.1", [("name", '"male"'), ("gender", '"male"'), ("wording", '"a man"')]),
    ("quality", []), ("refusal", []), ("filter", []), ("axes", []), ("judge_check", []), ("placebo", []),
    ("gates", []),
]
TABLES = [s for s, _ in BASE_SECTIONS if s and not s.startswith("groups")]


def render_config(set_: dict[tuple[str, str], str | None] | None = None, *, drop: tuple[str, ...] = (),
                  raw: dict[str, list[str]] | None = None) -> tuple[str, dict[tuple[str, str], int]]:
    """The base config with changes.

    Args:
        set_: (section, key) → TOML literal (None deletes the key); new keys go at the end of
            their section ("" = top level, "groups.0" = the first [[groups]] table).
        drop: sections left out entirely.
        raw: section → raw lines appended to it.

    Returns:
        (TOML text, (section, key) → 1-based line of that key).
    """
    set_ = dict(set_ or {})
    raw = raw or {}
    lines: list[str] = []
    where: dict[tuple[str, str], int] = {}
    for section, items in BASE_SECTIONS:
        if section in drop:
            continue
        if section:
            if lines:
                lines.append("")
            lines.append("[[groups]]" if section.startswith("groups.") else f"[{section}]")
        keys = [k for k, _ in items] + [k for (s, k) in set_ if s == section and k not in dict(items)]
        for key in keys:
            lit = set_.get((section, key), dict(items).get(key))
            if (section, key) in set_ and set_[(section, key)] is None:
                continue
            lines.append(f"{key} = {lit}")
            where[(section, key)] = len(lines)
        for r in raw.get(section, []):
            lines.append(r)
            where[(section, "<raw>")] = len(lines)
    return "\n".join(lines) + "\n", where


def base_files(**over: str | bytes) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {
        "cfg.toml": render_config()[0],
        "names.csv": "\n".join(NAMES_ROWS) + "\n",
        "prompts.jsonl": "".join(json.dumps(r) + "\n" for r in PROMPT_RECORDS),
    }
    files.update(over)
    return files


def dotted(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


# -- introspection of the config models ------------------------------------------------------------------
def _section_models() -> dict[str, type]:
    from lmra import config as c

    return {"": c.AuditConfig, "target": c.ModelConfig, "judge": c.JudgeConfig, "groups.0": c.Group,
            "quality": c.QualityConfig, "refusal": c.RefusalConfig, "filter": c.FilterConfig, "axes": c.AxesConfig,
            "judge_check": c.JudgeCheckConfig, "placebo": c.PlaceboConfig, "gates": c.GatesConfig}


def _kind(ann) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _kind(rest[0]) if len(rest) == 1 else "union"
    if origin is typing.Annotated:
        return _kind(args[0])
    if ann is bool:
        return "bool"
    if ann is int:
        return "int"
    if ann is float:
        return "float"
    if ann is str:
        return "str"
    if origin is typing.Literal:
        return "literal"
    if origin is list:
        return "list"
    if origin is dict:
        return "dict"
    if isinstance(ann, type) and hasattr(ann, "model_fields"):
        return "model"
    return "other"


def _bounds(info) -> dict[str, float]:
    out = {}
    for m in info.metadata:
        for attr in ("ge", "gt", "le", "lt"):
            v = getattr(m, attr, None)
            if v is not None:
                out[attr] = v
    return out


#: int fields whose sensible upper limit the issue asks for (independent of what the code declares)
INT_ABOVE = {"n_threads": 1025, "n_ctx": 2 ** 21, "max_concurrency": 513}
#: string fields for which "" is a meaningful value
EMPTY_OK = {"waiver", "waiver_judge"}  # a default of "" that means something
_TYPE_LITERALS = {"str": ['"5"'], "bool": ["true"], "array": ["[1]"], "table": ["{ a = 1 }"]}


def _numeric_values(kind: str, b: dict[str, float], key: str) -> list[tuple[str, str]]:
    vals = [("str", '"5"'), ("bool", "true"), ("array", "[1]"), ("table", "{ a = 1 }")]
    if kind == "int":
        vals += [("float", "1.5"), ("inf", "inf"), ("nan", "nan"), ("1e308", "1e308")]
        if "ge" in b:
            vals.append(("below", str(int(b["ge"]) - 1)))
        if "gt" in b:
            vals.append(("below", str(int(b["gt"]))))
        if "le" in b:
            vals.append(("above", str(int(b["le"]) + 1)))
        if "lt" in b:
            vals.append(("above", str(int(b["lt"]))))
        if key in INT_ABOVE:
            vals.append(("huge", str(INT_ABOVE[key])))
    else:
        vals += [("inf", "inf"), ("-inf", "-inf"), ("nan", "nan"), ("1e308", "1e308"), ("-1e308", "-1e308")]
        if "ge" in b:
            vals.append(("below", repr(float(b["ge"]) - 0.5)))
        if "gt" in b:
            vals.append(("below", repr(float(b["gt"]))))
        if "le" in b:
            vals.append(("above", repr(float(b["le"]) + 0.5)))
        if "lt" in b:
            vals.append(("above", repr(float(b["lt"]))))
    return vals


def config_field_cases() -> list[Case]:
    """Every field of every config section: wrong type, non-finite, out of range, blank …"""
    out: list[Case] = []
    for section, model in _section_models().items():
        for key, info in model.model_fields.items():
            kind = _kind(info.annotation)
            if kind in ("model", "other", "union") or key in ("groups",):
                continue
            b = _bounds(info)
            if kind in ("int", "float"):
                vals = [(f"{kind}-{n}", v) for n, v in _numeric_values(kind, b, key)]
                cat = "config.numeric"
            elif kind == "bool":
                vals = [("bool-int1", "1"), ("bool-int0", "0"), ("bool-str-y", '"y"'), ("bool-str-true", '"true"')]
                cat = "config.bool"
            elif kind == "str":
                vals = [("str-int", "5"), ("str-bool", "true"), ("str-array", '["x"]'), ("str-table", '{ a = "x" }')]
                if key not in EMPTY_OK:
                    vals += [("str-empty", '""'), ("str-blank", '"   "')]
                cat = "config.string"
            elif kind == "literal":
                vals = [("literal-unknown", '"bogus"'), ("literal-int", "5")]
                cat = "config.literal"
            elif kind == "list":
                vals = [("list-str", '"x"'), ("list-int", "5")]
                if key in ("comparisons",):
                    vals += [("pair-short", '[["female"]]'), ("pair-int", '[["female", 5]]')]
                else:
                    vals += [("list-of-int", "[1]"), ("list-of-table", '[{ a = 1 }]')]
                cat = "config.list"
            elif kind == "dict":
                vals = [("dict-int", "5"), ("dict-str", '"x"'), ("dict-array", "[1]")]
                cat = "config.dict"
            else:  # pragma: no cover
                continue
            for label, lit in vals:
                text, where = render_config({(section, key): lit})
                out.append(Case(id=f"config-{section or 'top'}-{key}-{label}", category=cat,
                                argv=["validate", "cfg.toml"], files=base_files(**{"cfg.toml": text}),
                                file="cfg.toml", line=where[(section, key)], field=dotted(section, key)))
    # unknown keys in every section, and a scalar where a table belongs
    for section, _ in BASE_SECTIONS:
        for bogus in ("bogus_key", "temprature"):
            text, where = render_config({(section, bogus): "1"})
            out.append(Case(id=f"config-{section or 'top'}-unknown-{bogus}", category="config.unknown",
                            argv=["validate", "cfg.toml"], files=base_files(**{"cfg.toml": text}), file="cfg.toml",
                            line=where[(section, bogus)], field=dotted(section, bogus)))
    for section in TABLES + ["groups"]:
        drop = ("groups.0", "groups.1") if section == "groups" else (section,)
        for label, lit in (("int", "5"), ("str", '"x"')):
            text, where = render_config({("", section): lit}, drop=drop)
            out.append(Case(id=f"config-{section}-as-{label}", category="config.section",
                            argv=["validate", "cfg.toml"], files=base_files(**{"cfg.toml": text}), file="cfg.toml",
                            line=where[("", section)], field=section))
    return out


def config_value_cases() -> list[Case]:
    """Values of the right type that make no sense (the issue's list and their relatives)."""
    specs: list[tuple[str, str, str, str, str | None]] = []  # (id, section, key, literal, expected field)
    for label, url in (("words", '"not a url"'), ("ftp", '"ftp://x"'), ("no-host", '"http://"'),
                       ("no-scheme", '"localhost:8000"'), ("space", '"http://exa mple.com/v1"'),
                       ("file", '"file:///etc/passwd"'), ("path-only", '"/v1"')):
        for s in ("target", "judge", "judge2"):
            specs.append((f"base_url-{label}", s, "base_url", url, None))
    for label, env in (("digit-first", '"1KEY"'), ("dash", '"MY-KEY"'), ("space", '"MY KEY"'), ("equals", '"A=B"'),
                       ("dollar", '"$KEY"'), ("newline", '"A\\nB"')):
        for s in ("target", "judge"):
            specs.append((f"api_key_env-{label}", s, "api_key_env", env, None))
    specs += [
        ("n_threads-1e8-float", "target", "n_threads", "1e8", None),
        ("n_threads-1e8-int", "target", "n_threads", "100000000", None),
        ("timeout_s-one-year", "target", "timeout_s", "31536000.0", None),
        ("requests_per_minute-1e12", "judge", "requests_per_minute", "1e12", None),
        ("tokens_per_minute-1e15", "judge", "tokens_per_minute", "1e15", None),
        ("batch_max_wait_s-one-year", "", "batch_max_wait_s", "31536000", None),
        ("batch_poll_interval_s-two-days", "", "batch_poll_interval_s", "172800", None),
        ("max_cost-1e12", "", "max_cost", "1e12", None),
        ("wording-empty", "groups.1", "wording", '""', None),
        ("profile-empty", "groups.0", "profile", '""', None),
        ("group-name-vs", "groups.0", "name", '"a vs b"', None),
        ("group-name-dup", "groups.1", "name", '"female"', "groups"),
        ("gender-empty", "groups.0", "gender", '""', None),
        ("comparisons-unknown-group", "", "comparisons", '[["female", "robot"]]', None),
        ("comparisons-self", "", "comparisons", '[["female", "female"]]', None),
        ("comparisons-twice", "", "comparisons", '[["female", "male"], ["female", "male"]]', None),
        ("comparisons-empty", "", "comparisons", "[]", None),
        ("placebo-unknown-comparison", "placebo", "comparisons", '[["male", "female"]]', "placebo"),
        ("criteria-unknown", "quality", "criteria", '["bogus"]', None),
        ("dimensions-unknown", "judge_check", "dimensions", '["bogus"]', None),
        ("extra_axes-blank", "axes", "extra_axes", '["  "]', None),
        ("domains-unknown", "", "domains", '["nope"]', None),
        ("tasks-unknown", "", "tasks", '["nope"]', None),
        ("personalization-missing", "", "personalization", '"no-such-template.txt"', None),
        ("provider-unknown", "target", "provider", '"gpt"', None),
        ("provider-import-fails", "target", "provider", '"no_such_module_xyz:make"', None),
        ("model-llamacpp-missing-file", "target", "provider", '"llamacpp"', "target.model"),
        ("name-slash", "", "name", '"../evil"', None),
        ("gate-without-waiver", "judge_check", "gate", "false", "judge_check"),
    ]
    out = []
    for cid, section, key, lit, fld in specs:
        text, where = render_config({(section, key): lit})
        line = where[(section, key)]
        if fld == "target.model":  # the GGUF path is checked when the provider is built
            text, where = render_config({("target", "provider"): lit, ("target", "model"): '"no-such-model.gguf"'})
            line = where[("target", "model")]
        cmds = [["validate", "cfg.toml"], ["audit", "--config", "cfg.toml", "--no-progress"]]
        for cmd in cmds[:1] if fld == "target.model" else cmds:  # a GGUF file is opened when the model loads
            out.append(Case(id=f"value-{cmd[0]}-{section or 'top'}-{cid}", category="config.value", argv=cmd,
                            files=base_files(**{"cfg.toml": text}),
                            file="no-such-model.gguf" if fld == "target.model" else "cfg.toml",
                            line=None if fld else line, field=fld or dotted(section, key)))
    # a group that selects no one: its [[groups]] header
    text, where = render_config({("groups.0", "gender"): None})
    out.append(Case(id="value-group-selects-no-one", category="config.value", argv=["validate", "cfg.toml"],
                    files=base_files(**{"cfg.toml": text}), file="cfg.toml", line=where[("groups.0", "name")] - 1,
                    field="groups.0"))
    # the price table
    prices_cases = [
        ("dev-null", '"/dev/null"', {}, (), "/dev/null", None, "prices"),
        ("missing", '"no-prices.toml"', {}, (), "no-prices.toml", None, "prices"),
        ("folder", '"pricesdir"', {}, ("pricesdir",), "pricesdir", None, "prices"),
        ("empty", '"p.toml"', {"p.toml": ""}, (), "p.toml", None, "prices"),
        ("negative", '"p.toml"', {"p.toml": '[prices.openai]\n"gpt-test" = { input = -1.0, output = 1.0 }\n'}, (),
         "p.toml", 2, "prices.openai"),
        ("inf", '"p.toml"', {"p.toml": '[prices.openai]\n"gpt-test" = { input = inf, output = 1.0 }\n'}, (),
         "p.toml", 2, "prices.openai"),
        ("string", '"p.toml"', {"p.toml": '[prices.openai]\n"gpt-test" = { input = "1", output = 1.0 }\n'}, (),
         "p.toml", 2, "prices.openai"),
        ("syntax", '"p.toml"', {"p.toml": '[prices.openai]\n"gpt-test" = { input = = 1 }\n'}, (), "p.toml", 2, None),
        ("unknown-key", '"p.toml"', {"p.toml": 'currency = "EUR"\n'}, (), "p.toml", 1, "currency"),
        ("not-utf8", '"p.toml"', {"p.toml": b'# prices\n[prices.openai]\n"gpt-\xfftest" = { input = 1.0, output = 1.0 }\n'},
         (), "p.toml", 3, None),
        ("deep", '"p.toml"', {"p.toml": "# deep\nx = " + "[" * 5000 + "]" * 5000 + "\n"}, (), "p.toml", 2, "x"),
    ]
    for label, lit, extra, dirs, fname, line, fld in prices_cases:
        text, where = render_config({("", "prices"): lit})
        for cmd in (["validate", "cfg.toml"], ["audit", "--config", "cfg.toml", "--no-progress"]):
            out.append(Case(id=f"prices-{cmd[0]}-{label}", category="config.prices", argv=cmd,
                            files=base_files(**{"cfg.toml": text}, **extra), dirs=dirs, file=fname, line=line,
                            field=fld))
    return out


def _first_bad_line(data: bytes) -> int:
    raw = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return len(re.split(r"\r\n|\r|\n", raw[:exc.start].decode("utf-8"))) if exc.start else 1
    raise AssertionError("valid UTF-8")


def _garbage(seed: int, n: int = 2048) -> bytes:
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(n))
    return data if b"\xff" in data else data + b"\xff"


def _with_bad_byte(lines: list[str], k: int, byte: bytes = b"\xff") -> bytes:
    """The lines as UTF-8 with an invalid byte inside line k (1-based)."""
    enc = [ln.encode() for ln in lines]
    enc[k - 1] = enc[k - 1][:3] + byte + enc[k - 1][3:]
    return b"\n".join(enc) + b"\n"


def toml_file_cases() -> list[Case]:
    """Whole-file problems of the config TOML (syntax, nesting, encoding)."""
    base, _ = render_config()
    lines = base.rstrip("\n").split("\n")
    out = []

    def add(cid, content, line, fld=None, cmd=("validate", "cfg.toml"), file="cfg.toml", dirs=()):
        files = base_files(**{"cfg.toml": content}) if content is not None else base_files()
        if content is None:
            files.pop("cfg.toml")
        out.append(Case(id=f"toml-{cid}", category="config.file", argv=list(cmd), files=files, file=file, line=line,
                        field=fld, dirs=dirs))

    add("syntax", base.replace('name = "bad"', 'name = "bad"\nseed = = 3'), 2)
    add("duplicate-key", base.replace('name = "bad"', 'name = "bad"\nseed = 1\nseed = 2'), 3)
    add("unterminated-string", base.replace('name = "bad"', 'name = "bad\nseed = 1'), 1)
    add("nul-byte", base.replace('name = "bad"', 'name = "b\x00ad"'), 1)
    for depth in (5000, 100_000):
        add(f"deep-array-{depth}", base.replace('name = "bad"', 'name = "bad"\nx = ' + "[" * depth + "]" * depth),
            2, "x")
        add(f"deep-table-{depth}", base.replace('name = "bad"', 'name = "bad"\ny = ' + "{a = " * depth + "1"
                                                + "}" * depth), 2, "y")
    add("deep-options", base.replace('[target]\n', '[target]\noptions = { a = ' + "[" * 5000 + "]" * 5000 + ' }\n'),
        base.split("\n").index("[target]") + 2, "options")
    add("deep-array-audit", base.replace('name = "bad"', 'name = "bad"\nx = ' + "[" * 5000 + "]" * 5000), 2, "x",
        cmd=("audit", "--config", "cfg.toml", "--no-progress"))
    for k in (1, 2, 5, 9):
        add(f"not-utf8-line{k}", _with_bad_byte(lines, k), k)
    add("not-utf8-latin1", base.replace('name = "bad"', 'name = "bad"\n# caf\u00e9').encode("latin-1"), 2)
    add("not-utf8-audit", _with_bad_byte(lines, 5), 5, cmd=("audit", "--config", "cfg.toml", "--no-progress"))
    add("utf16", base.encode("utf-16"), 1)
    for seed in (1, 2):
        g = _garbage(seed)
        add(f"binary-{seed}", g, _first_bad_line(g))
    add("missing", None, None, cmd=("validate", "no-such.toml"), file="no-such.toml")
    add("missing-audit", None, None, cmd=("audit", "--config", "no-such.toml"), file="no-such.toml")
    add("folder", None, None, cmd=("validate", "cfgdir"), file="cfgdir", dirs=("cfgdir",))
    add("dev-null-audit", None, None, cmd=("audit", "--config", "/dev/null"), file="/dev/null")
    return out


# -- name lists -------------------------------------------------------------------------------------
BAD_NAMES = {
    "regex-dot-star": ".*", "placeholder": "[NAME]", "single-letter": "A", "pronoun-She": "She",
    "pronoun-he": "he", "pronoun-THEY": "THEY", "pronoun-her": "her", "pronoun-him": "Him",
    "100k-chars": "x" * 100_000, "101-chars": "a" * 101, "digit": "Anna2", "underscore": "Jo_anne",
    "at-sign": "@nna", "pipe": "Ann|a", "braces": "{name}", "angle": "<Anna>", "regex-suffix": "Anna.*",
    "dash-only": "-", "digits-only": "123", "zero-width": "Ma\u200bria", "rtl-override": "Anna\u202e",
    "comma": "Anna, Maria", "plus": "Anna+", "backslash": "An\\na", "trailing-hyphen": "Mary-",
}


def _csv_quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"' if any(c in value for c in ',"\n\r') else value


def names_cases() -> list[Case]:
    out = []
    argv = ["validate", "cfg.toml"]

    def add(cid, content, line, fld="name", file="names.csv", dirs=()):
        files = base_files(**({"names.csv": content} if content is not None else {}))
        if content is None:
            files.pop("names.csv")
        out.append(Case(id=f"names-{cid}", category="names", argv=argv, files=files, file=file, line=line, field=fld,
                        dirs=dirs))

    rows = list(NAMES_ROWS)
    for label, name in BAD_NAMES.items():
        bad = rows[:3] + [f"{_csv_quote(name)},female,,test"] + rows[3:]
        add(f"bad-name-{label}", "\n".join(bad) + "\n", 4)
    add("bad-name-newline", "\n".join(rows[:3] + ['"Ann\na",female,,test'] + rows[3:]) + "\n", 4)
    add("bad-name-tab", "\n".join(rows[:3] + ["Jo\tanne,female,,test"] + rows[3:]) + "\n", 4)
    add("bad-name-nul", "\n".join(rows[:3] + ["Bo\x00b,female,,test"] + rows[3:]) + "\n", 4)
    add("empty-name", "\n".join(rows[:3] + [",female,,test"] + rows[3:]) + "\n", 4)
    add("blank-name", "\n".join(rows[:3] + ["   ,female,,test"] + rows[3:]) + "\n", 4)
    # an unterminated quote swallows the rows after it
    add("unterminated-quote", "\n".join(rows[:3] + ['"Sarah,female,,test'] + rows[3:]) + "\n", 4)
    add("unterminated-quote-last", "\n".join(rows + ['"Sarah,female,,test']) + "\n", 8)
    add("unterminated-quote-in-source", "\n".join(rows[:2] + ['Sarah,female,,"test'] + rows[2:]) + "\n", 3, None)
    add("text-after-quote", "\n".join(rows[:3] + ['"Sarah"x,female,,test'] + rows[3:]) + "\n", 4, None)
    # duplicates, any case, across or within groups
    for label, dup in (("other-group", "Anna,male,,test"), ("other-group-lower", "anna,male,,test"),
                       ("other-group-upper", "ANNA,male,,test"), ("same-group", "Anna,female,,test"),
                       ("same-group-lower", "maria,female,,test")):
        add(f"duplicate-{label}", "\n".join(rows + [dup]) + "\n", 8)
    # headers
    add("duplicate-header-column", "\n".join(["name,gender,name,source"] + [r + "" for r in rows[1:]]) + "\n", 1)
    add("duplicate-gender-column", "\n".join(["name,gender,gender,source"] + rows[1:]) + "\n", 1, "gender")
    add("header-repeated", "\n".join(rows[:4] + [rows[0]] + rows[4:]) + "\n", 5)
    add("missing-name-column", "\n".join(["first,gender,race,source"] + rows[1:]) + "\n", 1)
    add("missing-gender-and-race", "\n".join(["name,source"] + [r.split(",")[0] + ",test" for r in rows[1:]]) + "\n",
        1, "gender")
    add("more-values", "\n".join(rows[:3] + ["Sarah,female,,test,extra"] + rows[3:]) + "\n", 4, None)
    add("fewer-values", "\n".join(rows[:3] + ["Sarah"] + rows[3:]) + "\n", 4, None)
    add("empty-file", "", None, None)
    add("blank-lines-only", "\n\n\n", None, None)
    add("header-only", rows[0] + "\n", None, None)
    add("no-match-for-group", "\n".join(rows[:4]) + "\n", None, "groups")
    for k in (2, 4, 7):
        add(f"not-utf8-line{k}", _with_bad_byte(rows, k), k, None)
    add("latin1", "\n".join(rows[:3] + ["Zo\u00eb,female,,test"] + rows[3:]).encode("latin-1"), 4, None)
    add("utf16", ("\n".join(rows) + "\n").encode("utf-16"), 1, None)
    for seed in (3, 4):
        g = _garbage(seed)
        add(f"binary-{seed}", g, _first_bad_line(g), None)
    add("missing-file", None, None, "names")
    add("folder", None, None, "names", file="names.csv", dirs=("names.csv",))
    return out


# -- prompt sets (JSONL) ---------------------------------------------------------------------------------
def _prompt_lines(bad_line: str, at: int = 3) -> str:
    lines = [json.dumps(r) for r in PROMPT_RECORDS]
    lines.insert(at - 1, bad_line)
    return "\n".join(lines) + "\n"


def prompts_cases() -> list[Case]:
    out = []

    def add(cid, content, line, fld, file="prompts.jsonl", dirs=(), cat="prompts"):
        files = base_files(**({"prompts.jsonl": content} if content is not None else {}))
        if content is None:
            files.pop("prompts.jsonl")
        out.append(Case(id=f"prompts-{cid}", category=cat, argv=["validate", "cfg.toml"], files=files, file=file,
                        line=line, field=fld, dirs=dirs))

    good = {"id": "x9", "text": "Plan a birthday party.", "domain": "art", "task": "write a story"}
    for label, value in (("int", 5), ("float", 5.5), ("bool", True), ("null", None), ("list", ["a"]),
                         ("object", {"a": 1}), ("empty", ""), ("blank", "   "), ("nul", "a\u0000b"),
                         ("bell", "ring \u0007"), ("escape", "esc \u001b[31m"), ("over-100k", "x" * 100_001)):
        add(f"text-{label}", _prompt_lines(json.dumps(good | {"text": value})), 3, "text")
    add("text-lone-surrogate", _prompt_lines('{"id": "x9", "text": "a\\ud800b", "task": "write a story"}'), 3, "text")
    for label, value in (("empty", ""), ("blank", "  "), ("pipe", "a|b"), ("newline", "a\nb"), ("tab", "a\tb"),
                         ("nul", "a\u0000b"), ("bool", True), ("float", 1.5), ("list", ["a"]), ("object", {}),
                         ("int", 5), ("over-200", "i" * 201), ("cr", "a\rb")):
        add(f"id-{label}", _prompt_lines(json.dumps(good | {"id": value})), 3, "id")
    for key in ("domain", "task"):
        for label, value in (("int", 5), ("list", ["a"]), ("bool", True), ("newline", "a\nb"), ("nul", "a\u0000b"),
                             ("trailing-space", "write a story "), ("leading-space", " art")):
            add(f"{key}-{label}", _prompt_lines(json.dumps(good | {key: value})), 3, key)
    add("missing-text", _prompt_lines('{"id": "x9", "task": "write a story"}'), 3, "text")
    add("duplicate-id", _prompt_lines(json.dumps(good | {"id": "q0"})), 3, "id")
    add("malformed-json", _prompt_lines("{not json}"), 3, None)
    add("truncated-json", _prompt_lines('{"id": "x9", "text": "abc'), 3, None)
    add("array-line", _prompt_lines("[1, 2]"), 3, None)
    add("string-line", _prompt_lines('"hello"'), 3, None)
    add("number-line", _prompt_lines("5"), 3, None)
    add("raw-nul-in-string", _prompt_lines('{"id": "x9", "text": "a\x00b"}'), 3, None)
    add("deep-nesting", _prompt_lines('{"id": "x9", "text": ' + "[" * 100_000 + "]" * 100_000 + "}"), 3, None)
    add("huge-number", _prompt_lines('{"id": "x9", "text": "a", "n": 1' + "0" * 5000 + "}"), 3, None)
    add("10MB-line", _prompt_lines(json.dumps(good | {"text": "a" * 10_000_000})), 3, None)
    add("2MB-line-in-unknown-field", _prompt_lines(json.dumps(good | {"blob": "b" * 2_000_000})), 3, None)
    add("empty-file", "", None, None)
    add("blank-lines-only", "\n \n\n", None, None)
    lines = [json.dumps(r) for r in PROMPT_RECORDS]
    for k in (1, 3, 6):
        add(f"not-utf8-line{k}", _with_bad_byte(lines, k), k, None)
    add("latin1", _prompt_lines(json.dumps(good | {"text": "caf\u00e9"}, ensure_ascii=False)).encode("latin-1"), 3,
        None)
    add("utf16", "".join(json.dumps(r) + "\n" for r in PROMPT_RECORDS).encode("utf-16"), 1, None)
    for seed in (5, 6):
        g = _garbage(seed)
        add(f"binary-{seed}", g, _first_bad_line(g), None)
    add("missing-file", None, None, "prompts")
    add("folder", None, None, "prompts", dirs=("prompts.jsonl",))
    # a text field of the config's choosing
    text, _ = render_config({("", "text_field"): '"message"'})
    out.append(Case(id="prompts-text-field-missing", category="prompts", argv=["validate", "cfg.toml"],
                    files=base_files(**{"cfg.toml": text}), file="prompts.jsonl", line=1, field="message"))
    return out


# -- logged traffic (``lmra audit --prompts``) --------------------------------------------------------------
def traffic_cases() -> list[Case]:
    out = []

    def add(cid, name, content, line, fld, extra=()):
        files = base_files(**{name: content})
        out.append(Case(id=f"traffic-{cid}", category="traffic",
                        argv=["audit", "--config", "cfg.toml", "--prompts", name, "--no-progress", *extra],
                        files=files, file=name, line=line, field=fld))

    rows = list(TRAFFIC_CSV_ROWS)

    def csv_with(bad: str, at: int = 3) -> str:
        r = list(rows)
        r.insert(at - 1, bad)
        return "\n".join(r) + "\n"

    add("csv-unterminated-quote", "logs.csv", csv_with('l9,"Help me write a letter'), 3, "text")
    add("csv-unterminated-quote-last", "logs.csv", "\n".join(rows + ['l9,"Help me']) + "\n", 6, "text")
    add("csv-text-after-quote", "logs.csv", csv_with('l9,"Help"me'), 3, None)
    add("csv-300k-field", "logs.csv", csv_with("l9," + "w" * 300_000), 3, "text")
    add("csv-nul", "logs.csv", csv_with("l9,Hello\x00there"), 3, "text")
    add("csv-bell", "logs.csv", csv_with("l9,Hello\x07there"), 3, "text")
    add("csv-missing-text-column", "logs.csv", "\n".join(["id,message"] + rows[1:]) + "\n", 1, "text")
    add("csv-missing-custom-column", "logs.csv", "\n".join(rows) + "\n", 1, "message", ("--text-field", "message"))
    add("csv-duplicate-header", "logs.csv", "\n".join(["id,text,text"] + [r + ",x" for r in rows[1:]]) + "\n", 1,
        "text")
    add("csv-more-values", "logs.csv", csv_with("l9,hello,extra"), 3, None)
    add("csv-empty-text", "logs.csv", csv_with("l9,"), 3, "text")
    add("csv-id-pipe", "logs.csv", csv_with("a|b,hello"), 3, "id")
    add("csv-id-duplicate", "logs.csv", csv_with("l1,hello"), 3, "id")
    add("csv-empty-file", "logs.csv", "", None, None)
    add("csv-header-only", "logs.csv", "id,text\n", None, None)
    for k in (2, 4):
        add(f"csv-not-utf8-line{k}", "logs.csv", _with_bad_byte(rows, k), k, None)
    add("csv-binary", "logs.csv", _garbage(7), _first_bad_line(_garbage(7)), None)
    jl = [json.dumps(r) for r in TRAFFIC_JSONL]

    def jsonl_with(bad: str, at: int = 3) -> str:
        r = list(jl)
        r.insert(at - 1, bad)
        return "\n".join(r) + "\n"

    for label, value in (("int", 5), ("bool", False), ("null", None), ("list", []), ("empty", ""),
                         ("nul", "a\u0000b"), ("300k", "w" * 300_000)):
        add(f"jsonl-text-{label}", "logs.jsonl", jsonl_with(json.dumps({"text": value})), 3, "text")
    add("jsonl-missing-text", "logs.jsonl", jsonl_with('{"message": "hi"}'), 3, "text")
    add("jsonl-10MB-line", "logs.jsonl", jsonl_with(json.dumps({"text": "t" * 10_000_000})), 3, None)
    add("jsonl-id-newline", "logs.jsonl", jsonl_with(json.dumps({"id": "a\nb", "text": "hi"})), 3, "id")
    add("jsonl-id-blank", "logs.jsonl", jsonl_with(json.dumps({"id": " ", "text": "hi"})), 3, "id")
    add("jsonl-malformed", "logs.jsonl", jsonl_with("{oops"), 3, None)
    for k in (1, 4):
        add(f"jsonl-not-utf8-line{k}", "logs.jsonl", _with_bad_byte(jl, k), k, None)
    add("jsonl-binary", "logs.jsonl", _garbage(8), _first_bad_line(_garbage(8)), None)
    add("jsonl-empty-file", "logs.jsonl", "", None, None)
    # budget and size options of the audit command line
    for label, extra, fld in ((("max-cost-inf"), ("--max-cost", "inf"), "max_cost"),
                              ("max-cost-nan", ("--max-cost", "nan"), "max_cost"),
                              ("max-cost-negative", ("--max-cost", "-1"), "max_cost"),
                              ("max-cost-1e308", ("--max-cost", "1e308"), "max_cost"),
                              ("max-calls-negative", ("--max-calls", "-1"), "max_calls"),
                              ("per-task-negative", ("--per-task", "-1"), "per_task"),  # (named by the option, s43)
                              ("name-slash", ("--name", "a/b"), "name"),
                              ("prices-dev-null", ("--prices", "/dev/null"), "prices"),
                              ("output-dir-empty", ("--output-dir", ""), "output_dir")):
        out.append(Case(id=f"audit-args-{label}", category="audit.args",
                        argv=["audit", "--config", "cfg.toml", "--no-progress", *extra], files=base_files(),
                        file=None, line=None, field=fld))
    return out


# -- lmra agreement ---------------------------------------------------------------------------------------
def _labels_with(bad: str, at: int = 3) -> str:
    rows = list(LABEL_ROWS)
    rows.insert(at - 1, bad)
    return "\n".join(rows) + "\n"


# a "partial" run finished and wrote its numbers: agreement and axes accept it (docs/robustness.md)
RUN_STATUSES = ("running", "interrupted", "stopped_by_budget", "failed", "stale", "")


def agreement_cases() -> list[Case]:
    out = []
    argv = ["agreement", "--human", "labels.csv", "--run", "run"]

    def add(cid, content, line, fld, file="labels.csv", run=None, extra=(), dirs=(), cat="agreement"):
        files = {"labels.csv": content} if content is not None else {}
        out.append(Case(id=f"agreement-{cid}", category=cat, argv=argv + list(extra), files=files, file=file,
                        line=line, field=fld, run=run if run is not None else {}, dirs=dirs))

    pid = PAIR_IDS[4]
    for label, value in (("word", "x"), ("above", "2"), ("below", "-1.5"), ("nan", "nan"), ("inf", "inf"),
                         ("-inf", "-inf"), ("empty", ""), ("1e308", "1e308"), ("hex", "0x1"), ("bool", "true")):
        add(f"rating-{label}", _labels_with(f"{pid},{value}"), 3, "rating")
    add("pair-id-blank", _labels_with(" ,1"), 3, "pair_id")
    add("pair-id-empty", _labels_with(",1"), 3, "pair_id")
    add("missing-rating-column", "pair_id,score\n" + "".join(f"{p},1\n" for p in PAIR_IDS), 1, "rating")
    add("missing-pair-id-column", "id,rating\n" + "".join(f"{p},1\n" for p in PAIR_IDS), 1, "pair_id")
    add("duplicate-header", "pair_id,rating,rating\n" + "".join(f"{p},1,1\n" for p in PAIR_IDS), 1, "rating")
    add("unterminated-quote", _labels_with(f'"{pid},1'), 3, "pair_id")
    add("nul", _labels_with(f"{pid},1\x00"), 3, "rating")
    add("more-values", _labels_with(f"{pid},1,extra"), 3, None)
    add("empty-file", "", None, None)
    add("header-only", "pair_id,rating\n", None, None)
    for k in (2, 4):
        add(f"not-utf8-line{k}", _with_bad_byte(LABEL_ROWS, k), k, None)
    add("utf16", ("\n".join(LABEL_ROWS) + "\n").encode("utf-16"), 1, None)
    add("binary", _garbage(9), _first_bad_line(_garbage(9)), None)
    add("missing-file", None, None, None)
    add("folder", None, None, None, dirs=("labels.csv",))
    add("no-label-matches", "pair_id,rating\n" + "".join(f"zz{i}|female vs male|0,1\n" for i in range(4)), 2,
        "pair_id")
    add("no-label-matches-other-comparison", "pair_id,rating\n" + "".join(
        f"p{i}|male vs female|0,1\n" for i in range(4)), 2, "pair_id")
    ok = "\n".join(LABEL_ROWS) + "\n"
    add("judge2-missing", ok, None, "judge", file="run", extra=("--judge", "2"))
    for label, tie in (("negative", "-1"), ("five", "5"), ("one", "1"), ("nan", "nan"), ("inf", "inf"),
                       ("word", "x"), ("small-negative", "-0.01")):
        add(f"tie-{label}", ok, None, "tie", file=None, extra=("--tie", tie))
    add("judge-3", ok, None, "judge", file=None, extra=("--judge", "3"))
    # run folders that did not complete
    for status in RUN_STATUSES:
        add(f"run-status-{status or 'none'}", ok, None, None, file="manifest.json", run={"status": status},
            cat="agreement.run")
    add("run-no-manifest", ok, None, None, file="run", run={"drop": ["manifest.json"]}, cat="agreement.run")
    add("run-manifest-not-json", ok, None, None, file="manifest.json", run={"write": {"manifest.json": "{oops"}},
        cat="agreement.run")
    add("run-no-ratings", ok, None, None, file="ratings.parquet", run={"drop": ["ratings.parquet"]}, cat="agreement.run")
    # a run folder of an earlier version (ratings.jsonl) with a malformed line
    add("run-ratings-malformed", ok, 2, None, file="ratings.jsonl", cat="agreement.run", run={
        "drop": ["ratings.parquet"], "legacy": True,
        "write": {"ratings.jsonl": '{"pair_id": "a", "h": 0.1, "valid": true}\n{oops\n'}})
    out.append(Case(id="agreement-run-missing", category="agreement.run",
                    argv=["agreement", "--human", "labels.csv", "--run", "no-such-run"], files={"labels.csv": ok},
                    file="no-such-run", line=None, field=None))
    out.append(Case(id="agreement-run-is-a-file", category="agreement.run",
                    argv=["agreement", "--human", "labels.csv", "--run", "runfile"],
                    files={"labels.csv": ok, "runfile": "x"}, file="runfile", line=None, field=None))
    return out


# -- lmra axes --run ------------------------------------------------------------------------------------------
def axes_cases() -> list[Case]:
    out = []

    def add(cid, extra=(), run=None, file=None, line=None, fld=None, files=None, cat="axes"):
        out.append(Case(id=f"axes-{cid}", category=cat, argv=["axes", "--run", "run", "--no-progress", *extra],
                        files=files or {}, file=file, line=line, field=fld, run=run if run is not None else {}))

    for status in RUN_STATUSES:
        add(f"run-status-{status or 'none'}", run={"status": status}, file="manifest.json", cat="axes.run")
        add(f"run-status-{status or 'none'}-out", ("--out", "axes-out"), run={"status": status}, file="manifest.json",
            cat="axes.run")
    add("run-no-manifest", run={"drop": ["manifest.json"]}, file="run", cat="axes.run")
    for label, extra, fld in (("alpha-inf", ("--alpha", "inf"), "alpha"), ("alpha-nan", ("--alpha", "nan"), "alpha"),
                              ("alpha-two", ("--alpha", "2"), "alpha"), ("alpha-zero", ("--alpha", "0"), "alpha"),
                              ("max-cost-inf", ("--max-cost", "inf"), "max_cost"),
                              ("max-cost-negative", ("--max-cost", "-5"), "max_cost"),
                              ("max-axes-zero", ("--max-axes", "0"), "max_axes"),
                              ("discovery-pairs-zero", ("--discovery-pairs", "0"), "discovery_pairs"),
                              ("test-pairs-one", ("--test-pairs", "1"), "test_pairs"),
                              ("max-calls-negative", ("--max-calls", "-1"), "max_calls"),
                              ("axis-blank", ("--axis", "  "), "extra_axes")):
        add(f"args-{label}", extra, fld=fld, cat="axes.args")
    tomls = [
        ("type-alpha", '[axes]\nalpha = "0.05"\n', 2, "axes.alpha"),
        ("type-max-axes", "[axes]\nmax_axes = 5.0\n", 2, "axes.max_axes"),
        ("bool-harm", "[axes]\nharm_check = 1\n", 2, "axes.harm_check"),
        ("unknown-key", "[axes]\nmax_axis = 5\n", 2, "axes.max_axis"),
        ("axes-scalar", "axes = 5\n", 1, "axes"),
        ("syntax", "[axes]\nalpha = = 1\n", 2, None),
        ("deep", "[axes]\nextra_axes = " + "[" * 5000 + "]" * 5000 + "\n", 2, "extra_axes"),
        ("judge-timeout-inf", "[judge]\ntimeout_s = inf\n", 2, "judge.timeout_s"),
        ("concurrency-bool", "concurrency = true\n", 1, "concurrency"),
    ]
    for label, text, line, fld in tomls:
        add(f"config-{label}", ("--config", "axes.toml"), file="axes.toml", line=line, fld=fld,
            files={"axes.toml": text}, cat="axes.config")
    add("config-not-utf8", ("--config", "axes.toml"), file="axes.toml", line=2, files={"axes.toml": b"[axes]\n# \xff\n"},
        cat="axes.config")
    add("config-missing", ("--config", "axes.toml"), file="axes.toml", cat="axes.config")
    return out


def generate() -> list[Case]:
    """The whole corpus (ids are unique)."""
    cases = (config_field_cases() + config_value_cases() + toml_file_cases() + names_cases() + prompts_cases()
             + traffic_cases() + agreement_cases() + axes_cases())
    ids = [c.id for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, f"duplicate case ids {sorted(dup)[:5]}"
    return cases


# -- running a case ---------------------------------------------------------------------------------------
class Reached(Exception):
    """The command got past validation to the stage that calls models (never in a good answer)."""


def build_run_fixture(dest: Path) -> Path:
    """A complete run folder written by the real ``Audit`` with scripted doubles (no judge2)."""
    from doubles import ScriptedJudge, ScriptedTarget

    from lmra import Audit
    from lmra.config import AuditConfig

    dest.mkdir(parents=True, exist_ok=True)
    names = dest / "names.csv"
    names.write_text("\n".join(NAMES_ROWS) + "\n", encoding="utf-8")
    prompts = dest / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                           "task": "career advice" if i % 2 else "write a story"}) + "\n"
                               for i in range(N_RUN_PROMPTS)), encoding="utf-8")
    cfg = AuditConfig.model_validate(dict(name="fixture", prompts=str(prompts), names=str(names), prompts_per_task=0,
                                          output_dir=str(dest / "reports"), cache=str(dest / "cache.sqlite"),
                                          judge_check={"enabled": False}))
    groups = {n: "female" for n in FEMALE} | {n: "male" for n in MALE}
    run_dir = dest / "run"
    Audit(cfg, target=ScriptedTarget(groups, lambda g, rng: f"answer for {g}"),
          judge=ScriptedJudge(lambda r1, r2: {"A": 0.6, "C": 0.4} if "female" in r1 else {"B": 0.6, "C": 0.4}),
          run_dir=run_dir).run()
    return run_dir


def materialize(case: Case, workdir: Path, run_fixture: Path | None) -> None:
    for d in case.dirs:
        (workdir / d).mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        p = workdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    if case.run is not None:
        assert run_fixture is not None, "this case needs the fixture run folder"
        run = workdir / "run"
        shutil.copytree(run_fixture, run, ignore=shutil.ignore_patterns("run.lock"))
        status = case.run.get("status")
        if status is not None:
            m = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
            if status:
                m["status"] = status
            else:
                m.pop("status", None)
            (run / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
        for rel in case.run.get("drop", []):
            (run / rel).unlink()
        for rel, content in case.run.get("write", {}).items():
            (run / rel).write_text(content, encoding="utf-8")
        if case.run.get("legacy"):  # a run folder of an earlier version: no file digests (lmra.digests),
            m = json.loads((run / "manifest.json").read_text(encoding="utf-8"))  # nor design digests (later still)
            m.pop("files", None)
            m.pop("design", None)
            (run / "manifest.json").write_text(json.dumps(m), encoding="utf-8")


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d + "/" for d in dirnames]:
            p = Path(dirpath) / name.rstrip("/")
            rel = str(p.relative_to(root)) + ("/" if name.endswith("/") else "")
            if rel == "run/manifest.json":  # readers may mark a killed run 'stale'
                out[rel] = (0, 0)
                continue
            st = p.stat()
            out[rel] = (0, 0) if name.endswith("/") else (st.st_size, st.st_mtime_ns)
    return out


@dataclass
class Outcome:
    code: int | str
    out: str
    err: str
    written: list[str]
    exception: str = ""


def run_case(case: Case, workdir: Path, run_fixture: Path | None = None) -> Outcome:
    """Run one case in-process in ``workdir`` (created files, then ``lmra.cli.main``)."""
    from lmra.audit import Audit
    from lmra.cli import main

    workdir.mkdir(parents=True, exist_ok=True)
    materialize(case, workdir, run_fixture)
    before = snapshot(workdir)

    async def _arun(*_a, **_k):
        raise Reached("the audit reached its model stage")

    def _arun_axes(*_a, **_k):
        raise Reached("lmra axes reached its model stage")

    out, err = io.StringIO(), io.StringIO()
    cwd, env = os.getcwd(), os.environ.get(KEY_ENV)
    exc_text = ""
    os.chdir(workdir)
    os.environ[KEY_ENV] = "sk-badinput"
    try:
        with redirect_stdout(out), redirect_stderr(err), mock.patch.object(Audit, "_arun", _arun), \
                mock.patch("lmra.axes.arun_axes", _arun_axes):
            try:
                code: int | str = main(list(case.argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2 if exc.code else 0
            except Reached:
                code = "reached-model-stage"
            except BaseException as exc:  # noqa: BLE001 — what the real CLI would print as a traceback
                code = f"traceback:{type(exc).__name__}"
                exc_text = "".join(traceback.format_exception(exc))[-2000:]
    finally:
        os.chdir(cwd)
        if env is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = env
    after = snapshot(workdir)
    written = sorted(k for k in after if before.get(k) != after[k])
    return Outcome(code, out.getvalue(), err.getvalue(), written, exc_text)


def _field_named(err: str, fld: str) -> bool:
    names = {fld, fld.split(".")[-1]}
    for n in list(names):
        if re.search(r"field '[^']*" + re.escape(n) + r"[^']*'", err):
            return True
        if re.search(r"(argument|option) --" + re.escape(n.replace("_", "-")) + r"\b", err):
            return True
    return False


def problems(case: Case, o: Outcome) -> list[str]:
    """How the outcome differs from the expected answer (empty = as expected)."""
    if o.code != 2:
        kind = {0: "accepted (exit 0)"}.get(o.code, f"exit {o.code}") if isinstance(o.code, int) else str(o.code)
        return [kind]
    bad = []
    text = o.out + o.err
    if "Traceback" in text:
        bad.append("traceback printed")
    msg = o.err.strip()
    if case.file and case.file not in msg:
        bad.append(f"message lacks the file {case.file!r}")
    if case.line and not re.search(rf"\bline {case.line}\b", msg):
        bad.append(f"message lacks 'line {case.line}'")
    if case.field and not _field_named(msg, case.field):
        bad.append(f"message lacks the field {case.field!r}")
    if "\n\n" in msg:
        bad.append("message is more than one paragraph")
    if o.written:
        bad.append(f"wrote {o.written[:3]}")
    return bad


if __name__ == "__main__":  # python -m badinput.corpus (from tests/): a tally of the current answers
    import collections
    import sys
    import tempfile
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    cases = generate()
    t0 = time.time()
    tally: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        fixture = build_run_fixture(Path(tmp) / "fixture")
        for i, case in enumerate(cases):
            o = run_case(case, Path(tmp) / f"c{i}", fixture)
            ps = problems(case, o)
            tally[case.category]["cases"] += 1
            if ps:
                tally[case.category]["failed"] += 1
                kind = ps[0].split(" '")[0].split(" [")[0]
                tally[case.category][kind] += 1
                failures.append((case.id, ps, o.err.strip()[:300] or o.exception[-300:]))
    total = sum(t["cases"] for t in tally.values())
    print(f"{total} cases, {sum(t['failed'] for t in tally.values())} failed, {time.time() - t0:.1f}s")
    for cat, t in sorted(tally.items()):
        print(f"  {cat:18} {dict(t)}")
    if "-v" in sys.argv:
        for cid, ps, msg in failures:
            print(cid, ps, "|", msg.replace("\n", " ")[:250])

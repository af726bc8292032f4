"""Input strictness (break-it review): inputs held to the project's input rules — a bad one is
one paragraph naming the file, line and field, exit status 2, and nothing is changed silently.

1. The task taxonomy is as strict as a config (unknown keys, converted types, blank, padded,
   repeated or reserved names are errors) and its errors name the line.
2. Whole-number command-line options (and MovieLens .dat fields, ``--shard``) take ASCII digits
   only: ``1_0`` and ``٢٣`` are not 10 and 23.
3. Genre cells (``lmra recsys bias`` items, ``movies.dat``, a catalog CSV): names are stripped,
   an empty name or a genre twice is an error.
4. Canary files: blank texts and padded labels are errors; ``|`` in a canary id is fine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from lmra.errors import LmraInputError

# -- 1. the task taxonomy -------------------------------------------------------------------------
TAXONOMY = '''version = 1

[[domain]]
name = "art"

[[domain.task]]
name = "write a story"
description = "Write fiction."

[[domain.task]]
name = "write a poem"
description = "Write verse."

[[domain]]
name = "code"

[[domain.task]]
name = "debug code"
description = "Find and fix a bug."
'''


def _load(tmp_path: Path, text: str):
    from lmra.judge.taxonomy import load_taxonomy

    f = tmp_path / "t.toml"
    f.write_text(text, encoding="utf-8")
    return load_taxonomy(f)


def test_a_good_taxonomy_and_the_shipped_one_load(tmp_path):
    from lmra.judge.taxonomy import load_taxonomy
    from lmra.resources import resource_dir

    tax = _load(tmp_path, TAXONOMY)
    assert [t.name for d in tax.domain for t in d.task] == ["write a story", "write a poem", "debug code"]
    assert len(load_taxonomy(resource_dir("prompts") / "taxonomy.toml").domain) == 9
    assert _load(tmp_path, TAXONOMY.replace("version = 1\n", "")).version == 1  # version is optional


@pytest.mark.parametrize("label,old,new,line,field,said", [
    # break-it findings: each was accepted by `lmra validate`
    ("trailing-space", '"write a poem"', '"write a poem "', 11, "domain.0.task.1.name", "trailing whitespace"),
    ("task-twice", '"write a poem"', '"write a story"', 11, "domain.0.task.1.name", "already a task in this domain"),
    ("task-twice-case", '"write a poem"', '"Write a Story"', 11, "domain.0.task.1.name", "already a task"),
    ("task-in-two-domains", '"debug code"', '"write a story"', 18, "domain.1.task.0.name", "in domain 'art'"),
    ("task-other", '"debug code"', '"other"', 18, "domain.1.task.0.name", "'none of the above'"),
    ("task-Other", '"debug code"', '"Other"', 18, "domain.1.task.0.name", "'none of the above'"),
    ("domain-other", '"code"', '"other"', 15, "domain.1.name", "'none of the above'"),
    ("domain-empty", '"code"', '""', 15, "domain.1.name", "empty or blank"),
    ("domain-twice", '"code"', '"Art"', 15, "domain.1.name", "given twice"),
    ("version-string", "version = 1", 'version = "1"', 1, "version", 'got "1"'),
    ("version-bool", "version = 1", "version = true", 1, "version", "got true"),
    ("version-2", "version = 1", "version = 2", 1, "version", "version 1"),
    ("unknown-key", 'name = "code"\n', 'name = "code"\ncolour = "blue"\n', 16, "domain.1.colour", "unknown field"),
    ("unknown-task-key", 'description = "Find and fix a bug."', 'description = "Find and fix a bug."\ncolour = 1',
     20, "domain.1.task.0.colour", "unknown field"),
    ("description-missing", 'description = "Write verse."\n', "", 10, "domain.0.task.1.description",
     "Field required"),
    ("description-blank", '"Write verse."', '"  "', 12, "domain.0.task.1.description", "empty or blank"),
    ("description-two-lines", '"Write verse."', '"Write verse.\\nC) other"', 12, "domain.0.task.1.description",
     "U+000A"),
    ("task-not-a-string", '"debug code"', "5", 18, "domain.1.task.0.name", "got 5"),
    ("domain-without-tasks", "", '\n[[domain]]\nname = "empty"\n', 21, "domain.2.task", "Field required"),
])
def test_a_bad_taxonomy_is_an_input_error_naming_the_line_and_field(tmp_path, label, old, new, line, field, said):
    text = TAXONOMY + new if old == "" else TAXONOMY.replace(old, new, 1)
    assert text != TAXONOMY
    with pytest.raises(LmraInputError) as e:
        _load(tmp_path, text)
    assert (e.value.line, e.value.field) == (line, field), e.value
    assert said in e.value.reason, e.value
    assert str(e.value).startswith(f"{tmp_path / 't.toml'}, line {line}: field '{field}': ")


def test_too_many_domains_names_the_first_one_too_many(tmp_path):
    text = "".join(f'[[domain]]\nname = "d{i}"\n[[domain.task]]\nname = "t{i}"\ndescription = "x"\n'
                   for i in range(26))
    with pytest.raises(LmraInputError, match="at most 25") as e:
        _load(tmp_path, text)
    assert (e.value.line, e.value.field) == (127, "domain.25.name")  # the 26th [[domain]] is on line 126


def _validate_config(tmp_path: Path, taxonomy: str) -> Path:
    """The break-it repro's folder: unlabelled prompts (so the taxonomy is read) and a taxonomy."""
    (tmp_path / "t.toml").write_text(taxonomy, encoding="utf-8")
    rows = [{"id": "a", "text": "Write a story about a cat.", "domain": "art", "task": "write a story"},
            {"id": "b", "text": "Tell me a tale about a dog."}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "n.csv").write_text("name,gender,race,source\nAnna,female,,t\nMaria,female,,t\nJohn,male,,t\n"
                                    "David,male,,t\n", encoding="utf-8")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'''name = "tx"
prompts = "{tmp_path / 'p.jsonl'}"
names = "{tmp_path / 'n.csv'}"
taxonomy = "{tmp_path / 't.toml'}"
prompts_per_task = 0
output_dir = "{tmp_path / 'reports'}"
cache = "{tmp_path / 'reports' / 'cache.sqlite'}"
[target]
provider = "openai"
model = "fake"
base_url = "http://127.0.0.1:9/v1"
api_key_required = false
[judge]
provider = "openai"
model = "fake"
base_url = "http://127.0.0.1:9/v1"
api_key_required = false
[judge_check]
enabled = false
''', encoding="utf-8")
    return cfg


def test_lmra_validate_refuses_the_break_it_taxonomy_in_one_paragraph(tmp_path, capsys):
    from lmra.cli import main

    cfg = _validate_config(tmp_path, TAXONOMY)
    assert main(["validate", str(cfg)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    (tmp_path / "t.toml").write_text(TAXONOMY.replace('"write a poem"', '"write a story "'), encoding="utf-8")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 't.toml'}, line 11: field 'domain.0.task.1.name'" in " ".join(err.split())
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3
    assert not (tmp_path / "reports").exists()


def test_a_taxonomy_error_of_the_audit_writes_nothing(tmp_path, capsys):
    from lmra.cli import main

    cfg = _validate_config(tmp_path, TAXONOMY.replace('name = "code"\n', 'name = "code"\ncolour = "blue"\n'))
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "line 16: field 'domain.1.colour': unknown field" in err
    assert not (tmp_path / "reports").exists()


def test_a_table_item_is_found_in_nested_arrays_of_tables():
    from lmra.config import field_line
    from lmra.errors import find_table_item_line

    assert find_table_item_line(TAXONOMY, ("domain", 1, "task", 0, "description")) == 19
    assert find_table_item_line(TAXONOMY, ("domain", 0, "task", 1)) == 10
    assert find_table_item_line(TAXONOMY, ("domain", 0, "task", 1, "colour")) == 10  # missing: the header
    assert find_table_item_line(TAXONOMY, ("domain", 1, "name")) == 15
    assert find_table_item_line(TAXONOMY, ("domain", 2, "name")) is None
    assert find_table_item_line('domain = [{name = "a"}]\n', ("domain", 0, "name")) is None  # inline
    assert find_table_item_line(TAXONOMY, ("version",)) is None
    groups = '[[groups]]\nname = "a"\ngender = "female"\n\n[[groups]]\nname = "b"\n'
    assert field_line(groups, ("groups", 1, "name")) == 6 and field_line(groups, ("groups", 1, "gender")) == 5
    assert field_line(groups, "groups.0.gender") == 3
    assert field_line('[gates.tasks."\u00b2"]\nmax_ci_high = 2\n', "gates.tasks.\u00b2.max_ci_high") == 2  # no crash


# -- 2. whole numbers ------------------------------------------------------------------------------
NOT_WHOLE = ("1_0", "\u0662\u0663", "\uff11\uff10", "1.0", "1e3", "", "ten", "--1", "10\n", "1" * 31)


def test_strict_int_takes_ascii_digits_only():
    from lmra.numbers import strict_int

    for text, v in (("10", 10), ("-1", -1), ("+3", 3), (" 7\t", 7), ("007", 7), ("9223372036854775808", 2**63)):
        assert strict_int(text) == v
    for bad in NOT_WHOLE:
        with pytest.raises(ValueError):
            strict_int(bad)


def _options():
    """(command path, action) of every option and positional argument of the ``lmra`` parser."""
    from lmra.cli import build_parser

    stack = [((), build_parser())]
    while stack:
        path, parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack += [((*path, name), sub) for name, sub in action.choices.items()]
            else:
                yield path, action


def _takes_whole_numbers(action) -> bool:
    try:
        return callable(action.type) and type(action.type("7")) is int
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False


def test_no_option_is_read_by_python_int_or_float():
    lax = [f"lmra {' '.join(path)} {'/'.join(a.option_strings) or a.dest}" for path, a in _options()
           if a.type in (int, float)]
    assert not lax, f"read by int()/float() (1_0 → 10, ٢٣ → 23, nan): {lax}"


def test_every_whole_number_option_refuses_underscores_and_other_digits():
    whole = [(path, a) for path, a in _options() if _takes_whole_numbers(a)]
    assert len(whole) >= 20, [a.option_strings for _, a in whole]
    for path, a in whole:
        for bad in NOT_WHOLE:
            with pytest.raises(argparse.ArgumentTypeError):
                a.type(bad)
                pytest.fail(f"lmra {' '.join(path)} {a.option_strings} took {bad!r}")


@pytest.mark.parametrize("argv", [  # (an audit's --config is missing: read as a number, nothing would run)
    ["audit", "--seed", "1_0", "--config", "none.toml"], ["audit", "--seed", "\u0662\u0663", "--config", "none.toml"],
    ["audit", "--max-calls", "\u0661", "--config", "none.toml"],
    ["audit", "--per-task", "2_0", "--config", "none.toml"],
    ["audit", "--shard", "\u0661/\u0662", "--config", "none.toml"], ["recsys", "score", "--k", "1_0"],
    ["plan", "--sims", "\uff11\uff10\uff10"], ["batch", "status", "run", "--failed", "-1"],
    ["batch", "resume", "run", "--max-wait", "nan"], ["report", "--nights", "1_0"],
])
def test_the_command_line_refuses_them_naming_the_option(argv, tmp_path, monkeypatch, capsys):
    from lmra.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    option = next(a for a in argv if a.startswith("--"))
    assert f"argument {option}: " in err and "Traceback" not in err, err
    assert not any(tmp_path.iterdir())


def test_movielens_fields_are_whole_numbers_in_ascii_digits(tmp_path):
    from lmra.recsys.movielens import load_movies, load_ratings

    f = tmp_path / "ratings.dat"
    f.write_text("1::1::5::978300760\n1_0::1::5::978300760\n", encoding="latin-1")
    with pytest.raises(LmraInputError, match="not a whole number") as e:
        load_ratings(f)
    assert (e.value.line, e.value.field) == (2, "UserID")
    m = tmp_path / "movies.dat"
    m.write_text("1::Toy Story (\u0661\u0669\u0669\u0665)::Animation\n", encoding="utf-8")
    assert load_movies(m)["year"].isna().all()  # not the year 1995


# -- 3. genre cells --------------------------------------------------------------------------------
def _bias(tmp_path: Path, items: str):
    from lmra.recsys.bias_files import bias_from_files

    files = {"train.csv": "user_id,item_id\n1,a\n1,b\n2,a\n2,c\n", "recs.csv": "user_id,item_id\n1,c\n2,b\n",
             "items.csv": items, "users.csv": "user_id,gender\n1,male\n2,female\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return bias_from_files(*(tmp_path / n for n in ("train.csv", "recs.csv", "items.csv", "users.csv")))


def test_genre_names_are_stripped_so_a_space_makes_no_category_of_its_own(tmp_path):
    table, *_ = _bias(tmp_path, "item_id,genres\na,X\nb,Y\nc,X| Y\n")
    assert sorted(set(table["category"])) == ["X", "Y"]
    spaced, *_ = _bias(tmp_path, "item_id,genres\na,X\nb,Y\nc, X |Y \n")
    pd_cols = ["group", "category", "n_train", "n_rec"]
    assert spaced[pd_cols].equals(table[pd_cols])


@pytest.mark.parametrize("cell,said", [("X||Y", "empty genre name"), ("X|", "empty genre name"),
                                       ("|Y", "empty genre name"), ("X| |Y", "empty genre name"),
                                       ("X|X", "given twice"), ("X| X", "given twice")])
def test_an_empty_genre_name_or_a_genre_twice_is_an_input_error(tmp_path, cell, said):
    with pytest.raises(LmraInputError, match=said) as e:
        _bias(tmp_path, f"item_id,genres\na,X\nb,Y\nc,{cell}\n")
    assert (e.value.line, e.value.field) == (4, "genres") and e.value.file.endswith("items.csv")


def test_movies_dat_and_catalog_csv_genres_follow_the_same_rule(tmp_path):
    from lmra.recsys.movielens import load_movies
    from lmra.recsys.records import load_catalog

    m = tmp_path / "movies.dat"
    m.write_text("1::A (1999)::Drama| Comedy\n2::B (2000)::\n", encoding="latin-1")
    assert load_movies(m)["genres"].tolist() == [["Drama", "Comedy"], []]
    m.write_text("1::A (1999)::Drama\n2::B (2000)::Drama||Comedy\n", encoding="latin-1")
    with pytest.raises(LmraInputError, match="empty genre name") as e:
        load_movies(m)
    assert (e.value.line, e.value.field) == (2, "Genres")
    c = tmp_path / "catalog.csv"
    c.write_text("id,title,genres\n1,A,Drama | Comedy\n2,B,\n", encoding="utf-8")
    assert load_catalog(c)[2] == {"1": ["Drama", "Comedy"], "2": []}
    c.write_text("id,title,genres\n1,A,Drama\n2,B,Drama|Drama\n", encoding="utf-8")
    with pytest.raises(LmraInputError, match="given twice") as e:
        load_catalog(c)
    assert (e.value.line, e.value.field) == (3, "genres")


# -- 4. canary files -------------------------------------------------------------------------------
def _canary_file(tmp_path: Path, **change) -> Path:
    from lmra.judge_check import load_canaries

    good = load_canaries("prompts/canaries/canaries.jsonl")[:2]
    rows = [good[0].model_dump(), good[1].model_dump() | change]
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return f


@pytest.mark.parametrize("change,field,said", [
    ({"response_a": "   "}, "response_a", "empty or blank"),  # break-it finding: accepted
    ({"response_b": "\n\t"}, "response_b", "empty or blank"),
    ({"prompt": " "}, "prompt", "empty or blank"),
    ({"id": " "}, "id", "empty or blank"),
    ({"id": "x "}, "id", "trailing whitespace"),
    ({"task": "write a story "}, "task", "trailing whitespace"),
    ({"domain": "a\nb"}, "domain", r"U\+000A"),
    ({"group_b": " "}, "group_b", "empty or blank"),
    ({"response_a": "Hi\x00there"}, "response_a", r"U\+0000"),
])
def test_a_blank_or_padded_canary_field_is_an_input_error(tmp_path, change, field, said):
    from lmra.judge_check import load_canaries

    with pytest.raises(LmraInputError, match=said) as e:
        load_canaries(_canary_file(tmp_path, **change))
    assert (e.value.line, e.value.field) == (2, field)


def test_a_canary_id_may_hold_a_bar_and_a_response_an_emoji_joiner(tmp_path):
    """'|' separates the parts of a pair id; a canary id is never one (it keys only the
    canary's own row of judge_check_ratings.jsonl and its seed), so it is not refused."""
    from lmra.judge_check import load_canaries

    got = load_canaries(_canary_file(tmp_path, id="x|y"))
    assert got[1].id == "x|y"
    flag = "\U0001f3f3\ufe0f\u200d\U0001f308"
    assert load_canaries(_canary_file(tmp_path, response_a=f"Sure {flag}!"))[1].response_a.endswith(f"{flag}!")


# -- 5. prompt records: a label in another case is an error, metadata is not ----------------------
@pytest.mark.parametrize("record,field,said", [
    # fresh-user finding, s40: "Task" sent the prompt to the LMRA's classification (into another task); it
    # passed `lmra validate`
    ({"id": "a", "text": "How do I negotiate salary?", "Task": "negotiate salary"}, "Task", "did you mean 'task'?"),
    ({"id": "a", "text": "Hi", "DOMAIN": "career", "task": "t"}, "DOMAIN", "did you mean 'domain'?"),
])
def test_a_label_in_another_case_is_an_input_error_with_a_did_you_mean(tmp_path, record, field, said):
    from lmra.data import load_prompts

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "ok", "text": "fine", "task": "t"}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(LmraInputError) as exc:
        load_prompts(path, auto_id=True)
    assert (exc.value.line, exc.value.field) == (2, field)
    assert said in exc.value.format()


def test_metadata_keys_of_logged_traffic_are_ignored(tmp_path):
    """Break-it round 2 (s40): a close-match rule refused logged traffic whose lines carry `uid`, `_id`,
    `idx`, `ids`, `tasks`, `TaskID` or `subdomain` keys (all loaded before it)."""
    from lmra.data import load_prompts

    path = tmp_path / "p.jsonl"
    rows = [{"text": "Hi", "uid": "u1", "_id": "x", "idx": 3, "ids": [1], "tasks": ["a"], "TaskID": 7, "subdomain": "s",
             "ID": "u9", "pid": 1, "sid": 2},
            {"id": "b", "text": "Hi", "task": "t", "domain": "d", "Task": "ignored: task is given"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(p.id, p.task) for p in load_prompts(path, auto_id=True)] == [("line-000001", None), ("b", "t")]


def test_a_missing_text_names_the_key_close_to_it(tmp_path):
    from lmra.data import load_prompts

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "txt": "How do I negotiate salary?"}) + "\n")
    with pytest.raises(LmraInputError) as exc:
        load_prompts(path, auto_id=True)
    assert exc.value.field == "text" and "is 'txt' the text?" in exc.value.format()


def test_lmra_validate_refuses_a_label_in_another_case(tmp_path, capsys):
    from lmra.cli import main

    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "a", "text": "Hi there", "Task": "x"}) + "\n")
    (tmp_path / "c.toml").write_text(f'prompts = "{tmp_path / "p.jsonl"}"\n')
    assert main(["validate", str(tmp_path / "c.toml")]) == 2
    err = capsys.readouterr().err
    assert "p.jsonl, line 1: field 'Task'" in err and "did you mean 'task'?" in err and "Traceback" not in err


def test_json_nested_too_deeply_is_said_in_words_not_as_a_python_error(tmp_path):
    """Break-it finding, s41: a prompt line nesting arrays 100,000 deep read "unreadable JSON
    (RecursionError: maximum recursion depth exceeded while decoding …)"."""
    from lmra.data import iter_jsonl
    from lmra.errors import LmraInputError

    text = '{"id": "p1", "text": "hi"}\n{"id": "p2", "text": "a", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    with pytest.raises(LmraInputError) as err:
        list(iter_jsonl(text, tmp_path / "prompts.jsonl"))
    message = err.value.format()
    assert "line 2" in message and "nested too deeply" in message and "RecursionError" not in message, message


def test_task_and_domain_labels_spelt_two_ways_are_refused(tmp_path):
    """Bad-input break-it (s43): "Write a story" beside "write a story" became two tasks silently.
    An input error naming the file, the later line and the field. (One task name under two domains
    is two tasks on purpose: tests/test_task_domains.py.)"""
    import json

    from lmra.data import load_prompts
    from lmra.errors import LmraInputError

    def refused(rows):
        path = tmp_path / "p.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(LmraInputError) as e:
            load_prompts(path)
        return e.value

    def row(i, domain, task):
        return {"id": f"p{i}", "text": f"help me {i}", "domain": domain, "task": task}

    e = refused([row(1, "art", "write a story"), row(2, "art", "write a story"), row(3, "art", "Write a story")])
    assert (e.line, e.field) == (3, "task") and "two spellings of one task" in e.format()
    assert "'Write a story' and 'write a story' (line 1)" in e.format()
    e = refused([row(1, "art", "write a story"), row(2, "Art", "write a poem")])
    assert (e.line, e.field) == (2, "domain") and "two spellings of one domain" in e.format()
    ok = tmp_path / "ok.jsonl"  # one spelling under two domains: two tasks, not two spellings
    ok.write_text("".join(json.dumps(r) + "\n" for r in [row(1, "art", "write a story"), row(2, None, "write a story"),
                                                          row(3, "zzz", "write a story")]))
    assert len(load_prompts(ok)) == 3


@pytest.mark.parametrize("argv, needle", [
    (["--per-task", "-1"], "error: option --per-task: Input should be greater than or equal to 0"),
    (["--max-cost", "-1"], "error: option --max-cost: Input should be greater than or equal to 0"),
    (["--max-calls", "-3"], "error: option --max-calls: "),
])
def test_an_audit_options_bad_value_is_named_by_the_option(capsys, argv, needle):
    """Bad-input break-it (s43): ``--per-task -1`` read "command line: field 'prompts_per_task'" —
    a config field the user never wrote; the option is named, exit 2, before any model call."""
    from lmra.cli import main

    assert main(["audit", *argv]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert needle in err and "field 'prompts_per_task'" not in err and "Traceback" not in err


def test_a_number_too_long_to_read_is_said_in_plain_words(tmp_path):
    """Bad-input break-it (s43): a 5,000-digit number in a JSONL line quoted Python's message cut
    mid-word ("… use sys.set_in"). The line, and what is wrong, in words."""
    from lmra.data import load_prompts
    from lmra.errors import LmraInputError

    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "text": "hello", "domain": "d", "task": "t"}\n'
                    '{"id": "b", "text": "hi", "n": ' + "9" * 5000 + "}\n")
    with pytest.raises(LmraInputError) as e:
        load_prompts(path)
    assert e.value.line == 2 and e.value.format().endswith(
        "line 2: unreadable JSON: a number with more than 4,300 digits (no count or score is that long)")


def test_a_tab_separated_prompt_file_is_said_to_be_read_as_json_lines(tmp_path, capsys):
    """Break-it finding (s46): a tab-separated prompt file read "malformed JSON (Expecting value,
    column 1)" without saying which formats are read; a file not named .jsonl/.json says it is read
    as JSON Lines and that CSV is read from a .csv file."""
    from lmra.cli import main

    tsv = tmp_path / "x.tsv"
    tsv.write_text("id\ttext\tdomain\ttask\np1\thello\td\tt\n")
    assert main(["audit", "--prompts", str(tsv), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tsv}, line 1: malformed JSON" in err and "a .tsv file is read as JSON Lines" in err, err
    good = tmp_path / "x.jsonl"
    good.write_text("{nope\n")
    assert main(["audit", "--prompts", str(good), "--no-progress"]) == 2
    assert "is read as JSON Lines" not in capsys.readouterr().err
    bare = tmp_path / "promptsnoext"  # (break-it, s48: "a file file is read as JSON Lines")
    bare.write_text("hello\n")
    assert main(["audit", "--prompts", str(bare), "--no-progress"]) == 2
    assert "a file without a suffix is read as JSON Lines" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("text", ['{"a":1}', '\ufeff{"a":1}', '{"a":1,"a":2}', '[1,2', '{"a": NaN}', ' {"a":1} ',
                                  '{"a":1} x', '"s"', '{"a":{"b":1,"b":2}}', '1e400', '', '{"é":"\\ud800"}'])
def test_the_strict_reader_made_once_reads_as_json_loads_with_the_hook(text):
    """The prompt reader's decoder is made once (issue 14: a new one per line was a sixth of reading a
    prompt file): every value and every error as ``json.loads(text, object_pairs_hook=...)``."""
    import json

    from lmra.data import _RepeatedKey, _no_repeated_key, _strict_json

    def outcome(read):
        try:
            return "value", read(text)
        except _RepeatedKey as exc:
            return "repeated", exc.key
        except json.JSONDecodeError as exc:
            return "error", exc.msg, exc.pos, exc.lineno, exc.colno

    expected = outcome(lambda t: json.loads(t, object_pairs_hook=_no_repeated_key))
    got = outcome(_strict_json)
    assert repr(got) == repr(expected)  # (repr: NaN is not equal to itself)

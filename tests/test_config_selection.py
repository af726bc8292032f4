"""A config whose ``domains`` and ``tasks`` leave no prompt of the file is refused by
``lmra validate`` and by ``lmra audit`` before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmra.cli import main


@pytest.mark.parametrize("command", ["validate", "audit"])
def test_domains_and_tasks_that_leave_no_prompt_are_refused_before_anything_is_written(tmp_path, capsys, command):
    """Break-it finding: `lmra validate` said "valid … 0 pairs" and `lmra audit` refused the
    config only after creating its cache and a run folder."""
    from monitor_helpers import task_of
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6, top=f'domains = ["e"]\ntasks = ["{task_of(0)}"]')
    (prompts,) = (tmp_path / "inputs").glob("prompts-*.jsonl")
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps(r | {"domain": "e" if r["task"] != task_of(0) else "d"}) + "\n"
                               for r in rows))  # task_of(0) only in domain d
    argv = ["validate", str(cfg)] if command == "validate" else ["audit", "--config", str(cfg), "--no-progress"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"field 'tasks': task '{task_of(0)}' is in domain 'd', which 'domains' does not list ('e'): it would "
            "never be audited" in err and "Traceback" not in err), err
    assert not (tmp_path / "reports").exists() and not list(tmp_path.glob("cache*"))


@pytest.mark.parametrize("command", ["validate", "audit"])
def test_a_listed_task_outside_the_listed_domains_is_refused_not_dropped(tmp_path, capsys, command):
    """Bad-input break-it (s45): `tasks = ["write a story", "career advice"]` with `domains =
    ["employment"]` passed `lmra validate`, and the audit dropped "write a story" (domain "art")
    unsaid — its release gate then said the task was "not in its tasks list". A listed task none
    of whose domains is listed is an input error naming the task, its domain and the field, before
    anything is written; a task in two domains, one of them listed, is audited there."""
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=12,
                       top='domains = ["employment"]\ntasks = ["write a story", "career advice", "plan a meal"]')
    (prompts,) = (tmp_path / "inputs").glob("prompts-*.jsonl")
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    tasks = [("write a story", "art"), ("career advice", "employment"), ("plan a meal", "art"),
             ("plan a meal", "employment")]  # "plan a meal" in two domains, one of them listed
    prompts.write_text("".join(json.dumps(r | dict(zip(("task", "domain"), tasks[i % 4]))) + "\n"
                               for i, r in enumerate(rows)))
    argv = ["validate", str(cfg)] if command == "validate" else ["audit", "--config", str(cfg), "--no-progress"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("field 'tasks': task 'write a story' is in domain 'art', which 'domains' does not list ('employment'): it "
            "would never be audited — add its domain to 'domains', or remove the task from 'tasks'") in err, err
    assert "Traceback" not in err and "plan a meal" not in err
    if command == "validate":  # without it the config is valid: the task in two domains is audited in the listed one
        cfg.write_text(cfg.read_text().replace('tasks = ["write a story", ', 'tasks = ['))
        assert main(argv) == 0, capsys.readouterr().err
    assert not (tmp_path / "reports").exists() and not list(tmp_path.glob("cache*"))


@pytest.mark.parametrize("field", ["output_dir", "cache"])
def test_an_output_dir_that_is_a_file_or_a_cache_that_is_a_folder_is_an_input_error(tmp_path, capsys, field):
    """Break-it finding: both were I/O failures (exit 1) after the cache had been created, and
    `lmra validate` passed them."""
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    wrong = tmp_path / ("a-file" if field == "output_dir" else "a-folder")
    wrong.write_text("x") if field == "output_dir" else wrong.mkdir()
    text = cfg.read_text()
    key = "output_dir = " if field == "output_dir" else "cache = "
    line = next(ln for ln in text.splitlines() if ln.startswith(key))
    cfg.write_text(text.replace(line, f'{key}"{wrong}"'))
    for argv in (["validate", str(cfg)], ["audit", "--config", str(cfg), "--no-progress"]):
        assert main(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"field '{field}': {wrong} is a" in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("cache*")) and not (tmp_path / "reports").exists()


@pytest.mark.parametrize("command", ["validate", "audit"])
def test_a_text_file_given_as_the_cache_or_the_history_is_an_input_error(tmp_path, capsys, command):
    """Bad-input break-it (s45): the config file itself (or any text file) as `cache` passed
    `lmra validate`; the audit exited 1, "I/O failure … the file is damaged or is not an lmra call
    cache: move it aside (its answers are lost …)", and `--history` given a text file did the same.
    Both are input errors (exit 2) naming the field or option and the file's first line; the file
    is left as it was and nothing is written. (Random bytes, or a damaged SQLite file, stay the
    damage they may be: test_cache.)"""
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    text = cfg.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("cache = "))
    cfg.write_text(text.replace(line, f'cache = "{cfg}"'))
    before = cfg.read_bytes()
    argv = ["validate", str(cfg)] if command == "validate" else ["audit", "--config", str(cfg), "--no-progress"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    at = next(i for i, t in enumerate(cfg.read_text().splitlines(), 1) if t.startswith("cache = "))
    assert (f"{cfg}, line {at}: field 'cache': {cfg} is a text file (it begins 'name = \"gated\"'), not an SQLite "
            "file: cache names the call cache's SQLite file, made when absent") in err, err
    assert "Traceback" not in err and cfg.read_bytes() == before and not (tmp_path / "reports").exists()
    if command == "audit":
        for argv in (["history", "--history", str(cfg)], ["check", str(tmp_path), "--baseline", "last", "--history", str(cfg)]):
            assert main(argv) == 2
            err = " ".join(capsys.readouterr().err.split())
            assert (f"{cfg}: option --history: is a text file (it begins 'name = \"gated\"'), not an SQLite file"
                    in err), err
            assert cfg.read_bytes() == before
    from lmra.fileio import text_file_not_sqlite

    for content, said in ((b"", None), (b"SQLite format 3\x00" + b"\x07" * 100, None), (b"SQLite", None),
                          (bytes(range(256)) * 4, None), ("  \n\u00e9t\u00e9 " + "x" * 70 + "\n".encode().decode(),
                                                          "\u00e9t\u00e9 " + "x" * 56 + "…")):
        path = tmp_path / "probe"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        assert text_file_not_sqlite(path) == said, content
    assert text_file_not_sqlite(tmp_path / "absent") is None


@pytest.mark.parametrize("line", ['canaries = "no-such-canaries.jsonl"', 'extra_canaries = ["no-such-canaries.jsonl"]'])
def test_a_missing_canary_file_names_the_configs_line(tmp_path, capsys, line):
    """Break-it finding: ``error: nope.jsonl: canary file not found`` named neither the config
    nor the field."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'name = "c"\n[judge_check]\n{line}\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    field = line.split(" =")[0]
    assert f"c.toml, line 3: field 'judge_check.{field}': canary file not found: no-such-canaries.jsonl" in err, err


@pytest.mark.parametrize("field, value", [("output_dir", "{tmp}/a-file/sub"), ("cache", "{tmp}/a-file/c.sqlite"),
                                          ("cache", "/dev/null")])
def test_paths_behind_a_file_or_a_device_cache_are_input_errors(tmp_path, capsys, field, value):
    """Break-it finding (second round): a path whose parent is a file, or /dev/null as the cache,
    passed validate and failed the audit with an errno text (exit 1)."""
    from test_gates import FLAT, write_config

    (tmp_path / "a-file").write_text("x")
    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    text = cfg.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{field} = "))
    cfg.write_text(text.replace(line, f'{field} = "{value.format(tmp=tmp_path)}"'))
    for argv in (["validate", str(cfg)], ["audit", "--config", str(cfg), "--no-progress"]):
        assert main(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"field '{field}'" in err and ("is a file, not a folder" in err or "not a regular file" in err), err


@pytest.mark.parametrize("command", ["validate", "recsys"])
@pytest.mark.parametrize("edit, says", [
    (('names_list = ["Adele", "Drake", "Taylor Swift"]', 'names = "no-such-names.csv"'),
     "field 'fairllm.names': seed-name file not found: no-such-names.csv"),
    (("[fairllm]", '[fairllm]\nattributes_file = "no-such.json"'),
     "field 'fairllm.attributes_file': sensitive-attribute file not found: no-such.json"),
])
def test_a_recsys_data_file_that_is_missing_names_the_configs_line(tmp_path, capsys, monkeypatch, command, edit,
                                                                    says):
    """Break-it findings: ``error: nope.csv: seed-name file not found`` named neither the config
    nor its field, and `lmra validate` said "valid" of such a config."""
    from conftest import ROOT

    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "r.toml"
    cfg.write_text((ROOT / "examples" / "recsys.toml").read_text().replace(*edit))
    argv = ["validate", str(cfg)] if command == "validate" else ["recsys", "--config", str(cfg)]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "r.toml, line " in err and says in err, err
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("which", ["this reports folder's", "another reports folder's"])
def test_a_cache_that_is_a_run_history_is_an_input_error(tmp_path, capsys, which):
    """Fault break-it (s44): ``cache = "reports/history.sqlite"`` was accepted, and every prompt and
    answer went into the run history — the file that is archived and shared, under --redact too.
    Refused by path (this output folder's history, even before it exists) or by content (any file
    holding a run history), naming the field; nothing written. A cache file is accepted as before."""
    import sqlite3

    from lmra.history import History
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    text = cfg.read_text()
    out = next(ln for ln in text.splitlines() if ln.startswith("output_dir = ")).split("=", 1)[1].strip().strip('"')
    if which == "this reports folder's":
        target = Path(out) / "history.sqlite" if Path(out).is_absolute() else cfg.parent / out / "history.sqlite"
    else:
        target = tmp_path / "elsewhere" / "old.sqlite"
        History(target).close()
    line = next(ln for ln in text.splitlines() if ln.startswith("cache = "))
    cfg.write_text(text.replace(line, f'cache = "{target}"'))
    before = sqlite3.connect(target).execute("SELECT name FROM sqlite_master").fetchall() if target.exists() else None
    for argv in (["validate", str(cfg)], ["audit", "--config", str(cfg), "--no-progress"]):
        assert main(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"field 'cache': {target} is a run history (history.sqlite), not a call cache" in err, err
    after = sqlite3.connect(target).execute("SELECT name FROM sqlite_master").fetchall() if target.exists() else None
    assert after == before  # no cache table added to it


def test_a_path_holding_a_byte_that_is_not_utf8_is_an_input_error_naming_the_option(tmp_path, capsys, monkeypatch):
    """Bad-input break-it (s45): `--output-dir $'/tmp/\\xff'` (or `--prompts` of such a file)
    gave a raw "UnicodeEncodeError: 'utf-8' codec can't encode character '\\udcff' in position 548"
    naming nothing, and left a run folder holding only run.lock each time. Such a path is an input
    error naming the option (or the config's field, when the working folder holds the byte) and
    the byte, before anything is written."""
    import os

    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/out\xff")
    assert main(["audit", "--config", str(cfg), "--output-dir", odd, "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"option --output-dir: the path {tmp_path}/out\\xff holds the byte b'\\xff' that is not UTF-8" in err, err
    assert "Traceback" not in err and not os.path.exists(os.fsencode(odd)) and not (tmp_path / "reports").exists()
    (prompts,) = (tmp_path / "inputs").glob("prompts-*.jsonl")
    copy = os.fsencode(str(tmp_path)) + b"/p\xfe.jsonl"
    with open(copy, "wb") as fh:
        fh.write(prompts.read_bytes())
    assert main(["audit", "--config", str(cfg), "--prompts", os.fsdecode(copy), "--no-progress"]) == 2
    assert "option --prompts: the path" in capsys.readouterr().err
    folder = os.fsencode(str(tmp_path)) + b"/w\xe9"  # the working folder: the config's relative output_dir
    os.mkdir(folder)
    monkeypatch.chdir(os.fsdecode(folder))
    cfg.write_text(cfg.read_text().replace(f'output_dir = "{tmp_path / "reports"}"', 'output_dir = "reports"'))
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"field 'output_dir': the path {tmp_path}/w\\xe9/reports holds the byte b'\\xe9'" in err, err
    assert not [p for p in os.listdir(folder)]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "llamacpp"])
def test_options_on_a_builtin_provider_are_refused_not_ignored(tmp_path, capsys, provider):
    """Bad-input break-it (s45): `options = { foo = 1 }` (even `foo = nan`) on the openai provider
    passed and was ignored — options are a custom factory's keyword arguments, as
    judge.system_prompt, which would be ignored, is refused. On a built-in provider they are an
    input error naming the field's line."""
    cfg = tmp_path / "c.toml"
    extra = 'model = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_required = false\n' if provider != "llamacpp" else ""
    cfg.write_text(f'name = "x"\n[judge]\nprovider = "{provider}"\n{extra}options = {{ foo = 1 }}\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    line = len(cfg.read_text().splitlines())
    assert (f"{cfg}, line {line}: field 'judge.options': options are the keyword arguments of a custom provider's "
            f"factory (provider = \"package.module:factory\"); provider '{provider}' takes none") in err, err


def test_a_profile_with_a_control_character_or_the_same_as_its_comparisons_other_is_refused(tmp_path, capsys):
    """Bad-input break-it (s45): a profile sentence holding a control character ("I am a
    woman\\u0007."), or the same sentence as the group it is compared with, passed `lmra validate` —
    names with control characters are refused, and two identical profiles compare a user with
    themself. Both are input errors naming the field's line."""
    cfg = tmp_path / "c.toml"
    head = 'name = "x"\ncomparisons = [["w", "m"]]\n[[groups]]\nname = "w"\n'
    cfg.write_text(head + 'profile = "I am a woman\\u0007."\n[[groups]]\nname = "m"\nprofile = "I am a man."\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{cfg}, line 5: field 'groups.0.profile': contains the control character U+0007" in err, err
    cfg.write_text(head + 'profile = "I am a woman."\n[[groups]]\nname = "m"\nprofile = "i am a  WOMAN."\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"{cfg}, line 2: field 'comparisons': groups 'w' and 'm' have the same profile sentence ('I am a woman.'): "
            "the comparison would compare a user with themself") in err, err


def test_a_price_table_that_is_a_folder_names_the_configs_line(tmp_path, capsys):
    """Bad-input break-it (s45): `prices = "/tmp"` said "error: /tmp: field 'prices': price table is a
    folder", naming neither the config file nor its line, as every other path field does."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'name = "x"\nprices = "{tmp_path}"\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{cfg}, line 2: field 'prices': price table is a folder, expected a file" in err, err


def test_a_field_is_named_at_its_own_line_when_table_headers_carry_comments(tmp_path, capsys):
    """Fresh-user finding (s45): with `[judge]   # the LMRA` (a comment after the header) the judge's
    misspelt field was named at the target's line — the header, comment and all, did not read as
    [judge]. A `#` inside a quoted key stays part of it."""
    from lmra.errors import _uncommented

    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "x"\n\n[target]   # our chatbot\nprovider = "openai"\nmodel = "m"\n'
                   'base_url = "http://127.0.0.1:9/v1"\napi_key_requried = false\n\n[judge]   # the LMRA\n'
                   'provider = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_requried = false\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{cfg}, line 7: field 'target.api_key_requried'" in err and "(also line 13, field 'judge.api_key_requried'" \
        in err, err
    assert _uncommented('[gates.tasks."C# tutorial"]  # c') == '[gates.tasks."C# tutorial"]  '


def test_a_listed_task_without_a_domain_is_not_told_to_add_unlabelled(tmp_path, capsys):
    """Round-2 break-it (s45): a listed task whose prompts have no domain, with a 'domains' filter,
    was told to add domain 'unlabelled' to 'domains' — which is then refused as an unknown domain."""
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=8, top='domains = ["employment"]\ntasks = ["write a story"]')
    (prompts,) = (tmp_path / "inputs").glob("prompts-*.jsonl")
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "domain"}
                                          | ({"domain": "employment"} if r["task"] != "write a story" else {})) + "\n"
                               for r in rows))
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("field 'tasks': task 'write a story' has no domain in the prompt file, so the 'domains' filter "
            "('employment') leaves it out: it would never be audited — give its prompts a domain") in err, err


@pytest.mark.parametrize("value", [1, 2])
def test_top_logprobs_below_the_three_options_is_refused(tmp_path, capsys, value):
    """Break-it finding (s46): ``[judge] top_logprobs = 2`` passed `lmra validate`; the stereotype
    question's third option was then never among the alternatives and read 0 in every answer — a
    judge spreading its mass looked consistent (order consistency 0.17 → 0.83), exit 0, no word.
    Below 3 a new audit refuses it (lmra validate, lmra audit), naming the file, line and field."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[judge]\nprovider = "openai"\nmodel = "j"\nbase_url = "http://127.0.0.1:9/v1"\n'
                   f'api_key_required = false\ntop_logprobs = {value}\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{cfg}, line 6: field 'judge.top_logprobs'" in err and "must be at least 3" in err, err
    assert "Traceback" not in err
    # a finished run's config is read as it was (round-2 break-it, s46: shards audited with 2 before could not
    # be merged, nor their axes found)
    from lmra.config import AuditConfig

    assert AuditConfig.model_validate({"judge": {"provider": "openai", "model": "j", "top_logprobs": value,
                                                 "base_url": "http://127.0.0.1:9/v1", "api_key_required": False}}).judge.top_logprobs == value
    cfg.write_text(cfg.read_text().replace(f"top_logprobs = {value}", "top_logprobs = 3"))
    assert main(["validate", str(cfg)]) == 0


def test_an_output_folder_inside_a_run_folder_is_refused_before_any_call(tmp_path, capsys):
    """Break-it finding (s46): `lmra audit --output-dir reports/<RUN>` made every call, wrote a run
    folder, history.sqlite and warehouse/ inside that run's folder, and exited 1 blaming an
    unreadable table; `lmra merge --out-dir <a shard's folder>` did the same. Both are input errors
    (exit 2) naming the option or the config's line, and nothing is written."""
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    (run,) = [p for p in (tmp_path / "reports").iterdir() if (p / "manifest.json").is_file()]
    before = sorted(p.name for p in run.iterdir())
    capsys.readouterr()
    for out in (run, run / "more"):
        assert main(["audit", "--config", str(cfg), "--no-progress", "--output-dir", str(out)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"option --output-dir: {out} is {'the' if out == run else 'inside the'} run folder {run}" in err, err
    cfg2 = tmp_path / "inside.toml"
    cfg2.write_text(cfg.read_text().replace(f'output_dir = "{tmp_path / "reports"}"', f'output_dir = "{run}"'))
    assert main(["audit", "--config", str(cfg2), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{cfg2}, line" in err and "field 'output_dir'" in err and "run folder" in err, err
    assert main(["merge", str(run), "--out-dir", str(run / "m")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "option --out-dir: is inside the run folder" in err and "nothing was written" in err, err
    assert sorted(p.name for p in run.iterdir()) == before


def test_config_errors_show_dates_and_unprintable_characters_as_typed(tmp_path, capsys):
    """Break-it finding (s46): ``seed = 1979-05-27T07:32:00Z`` read "(got datetime.datetime(1979, 5,
    27, 7, 32, tzinfo=datetime.tim...)" and ``name = "x\\r"`` "(got "x")" — the carriage return
    invisible. A date-time is shown as TOML writes it, a character that does not print escaped."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('seed = 1979-05-27T07:32:00Z\nname = "x\\r"\n')
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "(got 1979-05-27T07:32:00+00:00)" in err and '(got "x\\r")' in err and "datetime.datetime" not in err, err


def test_a_system_prompt_with_a_bidi_override_is_refused_as_a_prompt_would_be(tmp_path, capsys):
    """Break-it finding (s46): ``[target] system_prompt`` accepted U+202E (right-to-left override),
    which prompt texts refuse; it is checked as a text sent to the chatbot."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[target]\nprovider = "llamacpp"\nsystem_prompt = "Be nice \\u202e here"\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{cfg}, line 3: field 'target.system_prompt': contains the control character U+202E" in err, err
    cfg.write_text('[target]\nprovider = "llamacpp"\nsystem_prompt = "Be nice.\\n\\tReally."\n')
    from lmra.config import load_config

    assert load_config(cfg).target.system_prompt == "Be nice.\n\tReally."

"""Bad input: every malformed-file case exits 2 with the file, line and field named, no traceback."""

import json

import pytest

from lmra.cli import main
from lmra.config import load_config
from lmra.data import load_names, load_prompts
from lmra.errors import LmraInputError
from lmra.resources import resource_dir

EXAMPLES = resource_dir("examples")


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("content,line,field", [
    ('name = "x"\nprompts_per_taks = 3\n', 2, "prompts_per_taks"),
    ('name = "x"\n[target]\ntemperature = "hot"\n', 3, "target.temperature"),
    ('name = "x"\n[target]\nprovider = "gpt"\n', 3, "target.provider"),
    ('name = "x"\ncomparisons = [["female", "robot"]]\n', 2, "comparisons"),
    ('[target]\nprovider = "openai"\n', 1, "target"),
    ('[[groups]]\nname = "a"\ngender = "female"\n\n[[groups]]\nname = "b"\n', 5, "groups.1"),
    # the LMRA has no system message of its own: set, it would be silently ignored
    ('name = "x"\n[judge]\nsystem_prompt = "Be fair."\n', 3, "judge.system_prompt"),
    ('name = "x"\n[judge2]\nprovider = "llamacpp"\nsystem_prompt = "Be fair."\n', 4, "judge2.system_prompt"),
    # numbers beyond their upper limit: a seed ≥ 2⁶³ passed validation, then crashed registering
    # the run in the history after every paid call
    ('name = "x"\nseed = 9223372036854775808\n', 2, "seed"),
    ('name = "x"\n[axes]\nseed = -9223372036854775809\n', 3, "axes.seed"),
    ('name = "x"\n[judge_check]\nper_kind = 100000001\n', 3, "judge_check.per_kind"),
    ('name = "x"\nmax_calls = 10000000000000000000000\n', 2, "max_calls"),
    # the Messages API's range is 0–1 (break-it finding: 1.5 was sent as 1.0 without a word)
    ('name = "x"\n[target]\nprovider = "anthropic"\nmodel = "m"\ntemperature = 1.5\n', 5,
     "target.temperature"),
    # and so does an anthropic LMRA for the axes step's answers (review finding: caught only by the API)
    ('name = "x"\n[judge]\nprovider = "anthropic"\nmodel = "m"\n[axes]\nenabled = true\ntemperature = 1.5\n', 7,
     "axes.temperature"),
])
def test_bad_config_fields(tmp_path, capsys, content, line, field):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(content)
    code, text = run_cli(capsys, "validate", str(cfg))
    assert code == 2
    assert str(cfg) in text and f"field '{field}" in text
    if line:
        assert f"line {line}" in text
    assert "Traceback" not in text


def test_config_syntax_error_names_line(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('name = "x"\nseed = = 3\n')
    code, text = run_cli(capsys, "audit", "--config", str(cfg))
    assert code == 2 and "line 2" in text and str(cfg) in text


def test_missing_config(tmp_path, capsys):
    code, text = run_cli(capsys, "audit", "--config", str(tmp_path / "nope.toml"))
    assert code == 2 and "nope.toml" in text and "not found" in text


def _cfg_with(tmp_path, **files):
    lines = ['name = "t"']
    for key, path in files.items():
        lines.append(f'{key} = "{path}"')
    cfg = tmp_path / "c.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def test_malformed_prompt_line(tmp_path, capsys):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"id": "a", "text": "hi", "task": "t"}) + "\n{not json}\n")
    code, text = run_cli(capsys, "validate", str(_cfg_with(tmp_path, prompts=p)))
    assert code == 2 and f"{p}, line 2" in text and "malformed JSON" in text


def test_prompt_missing_field(tmp_path, capsys):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"id": "a", "text": "hi"}) + "\n" + json.dumps({"id": "b"}) + "\n")
    code, text = run_cli(capsys, "validate", str(_cfg_with(tmp_path, prompts=p)))
    assert code == 2 and "line 2" in text and "field 'text'" in text


def test_prompt_duplicate_id_and_missing_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "a", "text": "x"}\n\n{"id": "a", "text": "y"}\n')
    with pytest.raises(LmraInputError) as e:
        load_prompts(p)
    assert e.value.line == 3 and e.value.field == "id"
    with pytest.raises(LmraInputError, match="not found"):
        load_prompts(tmp_path / "missing.jsonl")


def test_bad_names_file(tmp_path, capsys):
    n = tmp_path / "n.csv"
    n.write_text("name,gender\nAnna,female\n,male\n")
    code, text = run_cli(capsys, "validate", str(_cfg_with(tmp_path, names=n)))
    assert code == 2 and f"{n}, line 3" in text and "field 'name'" in text
    n.write_text("first,gender\nAnna,female\n")
    with pytest.raises(LmraInputError) as e:
        load_names(n)
    assert e.value.line == 1 and e.value.field == "name"
    n.write_text("name,gender\nAnna,female\nBo\x00b,male\n")
    with pytest.raises(LmraInputError) as e:
        load_names(n)
    assert e.value.line == 3 and e.value.field == "name" and "U+0000" in str(e.value)


def test_group_without_names(tmp_path, capsys):
    n = tmp_path / "n.csv"
    n.write_text("name,gender\nAnna,female\n")
    cfg = _cfg_with(tmp_path, names=n)
    code, text = run_cli(capsys, "validate", str(cfg))
    assert code == 2 and f"no names in {n} match group 'male'" in text
    # the error's place is the config's group (break-it finding: the name list was blamed for a
    # mistyped gender = "mal"), with its line when the config defines the group
    assert text.startswith(f"error: {cfg}")
    typo = tmp_path / "typo.toml"
    typo.write_text('name = "x"\n\n[[groups]]\nname = "female"\ngender = "female"\n\n[[groups]]\nname = "male"\n'
                    'gender = "mal"\n')
    code, text = run_cli(capsys, "validate", str(typo))
    assert code == 2 and f"{typo}, line 7: field 'groups.1'" in text and "gender='mal'" in text


@pytest.mark.parametrize("name", ["default", "smoke", "openai", "anthropic"])
def test_shipped_examples_validate(name):
    cfg = load_config(EXAMPLES / f"{name}.toml")
    assert cfg.name


def test_default_example_is_small_and_uses_the_embedded_model():
    cfg = load_config(EXAMPLES / "default.toml")
    assert cfg.target.provider == cfg.judge.provider == "llamacpp" and cfg.target.model is None
    assert cfg.comparisons == [("female", "male")] and cfg.prompts_per_task == 1


def test_shipped_example_configs_found_from_any_folder(tmp_path, monkeypatch):
    from lmra.recsys.config import load_recsys_config

    monkeypatch.chdir(tmp_path)  # no examples/ folder here: the shipped copies are used
    assert load_config("examples/smoke.toml").name
    assert load_recsys_config("examples/recsys_cfairllm.toml").mode == "cfairllm"
    with pytest.raises(LmraInputError, match="config file not found"):
        load_config("examples/no-such-file.toml")


def test_a_64_bit_seed_at_the_limit_is_fine_and_a_larger_one_from_the_command_line_is_refused(tmp_path, capsys):
    from lmra.config import MAX_SEED, parse_config

    assert parse_config({"seed": MAX_SEED}).seed == MAX_SEED
    code, text = run_cli(capsys, "audit", "--config", str(EXAMPLES / "smoke.toml"), "--seed", str(MAX_SEED + 1),
                         "--output-dir", str(tmp_path / "out"))
    assert code == 2 and "option --seed" in text and not (tmp_path / "out").exists()  # (the option: s43)


def test_names_typed_with_combining_accents_are_accepted_as_written(tmp_path):
    """"José" typed as e + U+0301 (NFD, as some editors write it) ends with a letter that
    carries an accent: accepted, and kept as written (NFC would rewrite some spellings, such
    as U+0958); the same name in both forms is one name twice; more than 4 marks on a letter
    and a name that ends in a mark after a separator are refused."""
    n = tmp_path / "n.csv"
    n.write_text("name,gender\nJose\u0301,male\nZoe\u0308,female\nAna\u0331,female\n\u0958\u093e\u0926\u093f\u0930,male\n",
                 encoding="utf-8")
    assert [r.name for r in load_names(n)] == ["Jose\u0301", "Zoe\u0308", "Ana\u0331", "\u0958\u093e\u0926\u093f\u0930"]
    n.write_text("name,gender\nJosé,male\nJOSE\u0301,male\n", encoding="utf-8")  # the same name twice
    with pytest.raises(LmraInputError) as e:
        load_names(n)
    assert e.value.line == 3 and e.value.field == "name"
    for bad, why in (("Ab-\u0301", "must start and end with a letter"),
                     ("Ab" + "\u0301" * 5, "5 combining marks in a row"), ("A\u0301\u0302\u0303\u0304\u0305b", "5 combining"),
                     # break-it finding: a lookalike (Cyrillic а in "Annа") beside a female "Anna"
                     ("Ann\u0430", "mixes Cyrillic and Latin letters"), ("\u039flga", "mixes Greek and Latin"),
                     ("J\u0585hn", "mixes Armenian and Latin"), ("Ann\U0001d5ba", "mixes Latin and Mathematical"),
                     ("Ann\uff41", "mixes Fullwidth and Latin")):
        n.write_text(f"name,gender\n{bad},male\n", encoding="utf-8")
        with pytest.raises(LmraInputError, match=why):
            load_names(n)
    n.write_text("name,gender\nОльга,female\nΣοφία,female\nŁukasz,male\nNgọc,male\n佐藤さくら,female\nOʼNeil,male\n",
                 encoding="utf-8")
    assert len(load_names(n)) == 6  # one script each (kanji with kana, a modifier apostrophe): fine
    n.write_text("name,gender\nAnna,female\n\uff21\uff4e\uff4e\uff41,male\n", encoding="utf-8")  # full-width Anna
    with pytest.raises(LmraInputError) as e:  # the same name twice (compared in NFKC)
        load_names(n)
    assert e.value.line == 3


@pytest.mark.parametrize("body", ["", "\n\n", "# only a comment\n", "[target]\n[judge]\n[axes]\n"])
def test_a_config_file_that_sets_nothing_is_an_input_error(tmp_path, body, capsys, monkeypatch):
    """Break-it finding: an empty (0-byte) config was taken as "all defaults" and started the
    whole default audit; it is a mistake more often than a wish, so it exits 2 naming the file."""
    from lmra.cli import main

    monkeypatch.chdir(tmp_path)  # (the default output folder is relative: nothing may appear there)
    cfg = tmp_path / "empty.toml"
    cfg.write_text(body)
    assert main(["audit", "--config", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "empty.toml" in err and "sets nothing" in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("bad_id", ["id\u2028x", "id\u2029x"])
def test_a_prompt_id_with_a_unicode_line_or_paragraph_separator_is_refused(tmp_path, bad_id):
    """Break-it finding: ids may hold no line break (U+0085, U+200B were refused) but U+2028 and
    U+2029 — line breaks to a console table or a line-oriented reader of the exports — passed."""
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": "Help me, please."}) + "\n" for i in ("a", "b", bad_id)),
                    encoding="utf-8")
    with pytest.raises(LmraInputError) as err:
        load_prompts(path)
    said = str(err.value)
    assert "line 3" in said and "id" in said and f"U+{ord(bad_id[2]):04X}" in said
    path.write_text(json.dumps({"id": "a", "text": "Line one\u2028line two"}) + "\n", encoding="utf-8")
    assert "\u2028" in load_prompts(path)[0].text  # in a prompt's text a line break is fine


def test_two_prompt_ids_alike_but_for_their_unicode_normalisation_are_a_duplicate(tmp_path):
    """Break-it finding: "é" as one character and as "e" + a combining accent were two ids, alike in
    every CSV and in `lmra agreement --human` labels. Ids are compared in NFC form."""
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": "Help me, please."}) + "\n"
                            for i in ("caf\u00e9", "other", "cafe\u0301")), encoding="utf-8")
    with pytest.raises(LmraInputError) as err:
        load_prompts(path)
    said = str(err.value)
    assert "line 3" in said and "first on line 1" in said and "accents written another way" in said
    path.write_text("".join(json.dumps({"id": i, "text": "Help me, please."}) + "\n" for i in ("a", "b", "a")),
                    encoding="utf-8")
    with pytest.raises(LmraInputError) as err:
        load_prompts(path)
    assert "duplicate id 'a' (first on line 1)" in str(err.value)
    # full-width letters and digits print as the id they imitate (break-it finding: distinct ids)
    path.write_text("".join(json.dumps({"id": i, "text": "Help me, please."}) + "\n"
                            for i in ("p1", "\uff50\uff11")), encoding="utf-8")
    with pytest.raises(LmraInputError) as err:
        load_prompts(path)
    assert "line 2" in str(err.value) and "other characters that look alike" in str(err.value)
    path.write_text("".join(json.dumps({"id": i, "text": "Help me, please."}) + "\n"
                            for i in ("art-01", "art-01 ")), encoding="utf-8")
    with pytest.raises(LmraInputError) as err:
        load_prompts(path)
    assert "line 2" in str(err.value) and "leading or trailing whitespace" in str(err.value)


def test_a_missing_file_names_the_close_files_beside_it(tmp_path, monkeypatch, capsys):
    """Fresh-user finding (s37): ``lmra audit --config nighly.toml`` said only "config file not
    found", where fields and run ids get a did-you-mean."""
    from lmra.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "nightly.toml").write_text('name = "x"\n')
    (tmp_path / "prompts.jsonl").write_text("")
    assert main(["audit", "--config", "nighly.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "nighly.toml: config file not found; did you mean 'nightly.toml'?" in err and "Traceback" not in err
    assert main(["validate", "missing/x.toml"]) == 2
    assert "config file not found; its folder missing does not exist" in " ".join(capsys.readouterr().err.split())
    assert main(["validate", "unrelated.toml"]) == 2
    err = capsys.readouterr().err
    assert "config file not found" in err and "did you mean" not in err
    # break-it round 2 (s37): a path into lmra's shipped folder, a dangling link
    (tmp_path / "n.toml").write_text('name = "x"\nnames = "names/gendr.csv"\n')
    assert main(["validate", "n.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "did you mean 'names/gender.csv'" in err and "does not exist" not in err
    # fresh-user finding (s40): a missing prompt file was offered a config of a close name
    (tmp_path / "c_nonexist.toml").write_text('name = "x"\nprompts = "nonexist.jsonl"\n')
    assert main(["validate", "c_nonexist.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "prompt file not found" in err and "c_nonexist.toml'?" not in err
    (tmp_path / "nonexists.jsonl").write_text('{"id": "a", "text": "hi"}\n')
    assert main(["validate", "c_nonexist.toml"]) == 2
    assert "did you mean 'nonexists.jsonl'?" in " ".join(capsys.readouterr().err.split())
    (tmp_path / "dangling.toml").symlink_to(tmp_path / "gone" / "x.toml")
    assert main(["validate", "dangling.toml"]) == 2
    assert f"it is a symbolic link to {tmp_path / 'gone' / 'x.toml'}, which does not exist" in " ".join(
        capsys.readouterr().err.split())


def test_a_prompt_whose_text_repeats_an_earlier_one_is_audited_once_and_counted(tmp_path, sim_inputs):
    """Bad-input break-it (s45): a prompt file joined with a renumbered copy of itself (or logged
    traffic repeating a first message) audited every copy as its own prompt — 20 prompts doubled
    to 40 narrowed the overall interval by 37% with no new information, exit 0, no word. A record
    whose text repeats an earlier one's (Unicode form, case and spacing aside) is left out and
    counted: the audit of the doubled file equals the audit of the original, says so, and records
    n_prompts_repeated; an id given twice is still refused, a dropped repeat's too."""
    from doubles import ScriptedJudge, ScriptedTarget
    from conftest import NAME_TO_GROUP
    from lmra import Audit
    from lmra.config import AuditConfig

    names, prompts = sim_inputs(20)
    records = [json.loads(line) for line in prompts.read_text().splitlines()]
    doubled = tmp_path / "doubled.jsonl"
    copies = [r | {"id": f"{r['id']}-copy", "text": ("  " + r["text"].upper() + " ") if i % 2 else r["text"]}
              for i, r in enumerate(records)]
    doubled.write_text("".join(json.dumps(r) + "\n" for r in records + copies))

    def audit(path, out):
        cfg = AuditConfig.model_validate(dict(
            name="dup", prompts=str(path), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / out),
            cache=str(tmp_path / f"{out}.sqlite"), judge_check={"enabled": False}))
        heard = []
        a = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "STYLE X" if rng.random() < 0.5
                                             else "STYLE Y"),
                  judge=ScriptedJudge(lambda r1, r2: {"A": 0.6, "C": 0.4} if r1 != r2 else {"C": 1.0},
                                      position_logit=0.4))
        a.on_notice = heard.append
        return a.run(), heard

    once, heard_once = audit(prompts, "one")
    twice, heard = audit(doubled, "two")
    assert not [h for h in heard_once if "repeat the text" in h]
    said = [h for h in heard if "repeat the text" in h]
    assert len(said) == 1 and said[0].startswith(f"{doubled}: 20 prompt(s) repeat the text of an earlier prompt")
    assert "e.g. line 21 (id 'p0-copy') repeats line 1 (id 'p0') (and 19 more)" in said[0]
    assert twice.summary["n_prompts_repeated"] == 20 and once.summary["n_prompts_repeated"] == 0
    assert twice.overall.iloc[0]["n_pairs"] == 20
    cols = ["task", "n_pairs", "net_rating", "ci_low", "ci_high"]
    assert twice.per_task[cols].equals(once.per_task[cols])
    # the loader itself: without ``repeats`` every record is kept (a run's own prompts read back)
    assert len(load_prompts(doubled)) == 40
    repeats = []
    assert len(load_prompts(doubled, repeats=repeats)) == 20 and repeats[0] == (21, "p0-copy", 1, "p0")
    assert twice.summary["n_prompts_in_file"] == 40 and once.summary["n_prompts_in_file"] == 20  # (repeats counted)
    # the same text labelled for two tasks is kept in both: the tasks filter may keep either (round-2 break-it, s45:
    # a selected task lost its prompt to its first record in an unselected task)
    two = tmp_path / "two.jsonl"
    two.write_text("".join(json.dumps(r) + "\n" for r in (
        {"id": "a", "text": "Hello.", "domain": "d", "task": "t1"}, {"id": "b", "text": "hello.", "domain": "d",
                                                                       "task": "t2"},
        {"id": "c", "text": "HELLO. ", "domain": "d", "task": "t2"})))
    repeats = []
    assert [p.id for p in load_prompts(two, repeats=repeats)] == ["a", "b"] and repeats == [(3, "c", 2, "b")]
    clash = tmp_path / "clash.jsonl"
    clash.write_text("".join(json.dumps(r) + "\n" for r in ({"id": "a", "text": "Hello."}, {"id": "b", "text": "hello."},
                                                              {"id": "b", "text": "Other."})))
    with pytest.raises(LmraInputError) as err:
        load_prompts(clash, repeats=[])
    assert "duplicate id 'b' (first on line 2)" in str(err.value) and err.value.line == 3


def test_a_merged_night_counts_the_files_repeats_once(tmp_path, capsys):
    """Round-2 break-it (s45): every shard reads the whole prompt file, so each counted all its
    repeated texts, and `lmra merge` summed them (5 became 10). The merged run counts them once, and
    its file count includes them, as the unsharded run's."""
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=8)
    (prompts,) = (tmp_path / "inputs").glob("prompts-*.jsonl")
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows + [r | {"id": r["id"] + "-copy"} for r in rows[:3]]))
    for i in (1, 2):
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--shard", f"{i}/2"]) == 0, \
            capsys.readouterr()
    shards = sorted(p for p in (tmp_path / "reports").iterdir() if "-shard" in p.name)
    assert main(["merge", *map(str, shards), "--no-report"]) == 0, capsys.readouterr()
    merged = [p for p in (tmp_path / "reports").iterdir() if p.is_dir() and "-shard" not in p.name
              and (p / "summary.json").is_file()]
    (summary,) = [json.loads((p / "summary.json").read_text()) for p in merged]
    assert summary["n_prompts_repeated"] == 3 and summary["n_prompts_in_file"] == 11 and summary["n_prompts"] == 8

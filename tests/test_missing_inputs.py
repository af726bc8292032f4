"""A prompt or name file that does not exist is named with the config file and line that
named it and the absolute path looked for; a path given with ``--prompts`` is named as given."""

from __future__ import annotations

from lmra.cli import main


def test_a_missing_file_names_the_config_line_and_the_path_looked_for(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text('name = "x"\n\nprompts = "nope.jsonl"\n')
    (tmp_path / "n.toml").write_text('name = "x"\nnames = "sub/none.csv"\n')
    assert main(["validate", "c.toml"]) == 2
    err = capsys.readouterr().err
    assert f"c.toml, line 3: field 'prompts': prompt file not found: {tmp_path / 'nope.jsonl'}" in err
    assert "working directory" in err and "Traceback" not in err
    assert main(["validate", "n.toml"]) == 2
    err = capsys.readouterr().err
    assert "n.toml, line 2: field 'names'" in err and str(tmp_path / "sub" / "none.csv") in err
    (tmp_path / "bom.toml").write_bytes("\ufeffname = 'x'\nprompts = 'nope.jsonl'\n".encode("utf-8"))  # a BOM
    assert main(["validate", "bom.toml"]) == 2
    assert "bom.toml, line 2: field 'prompts': prompt file not found" in capsys.readouterr().err
    assert main(["audit", "--config", "c.toml", "--prompts", "other.jsonl", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "other.jsonl" in err and "c.toml" not in err and not list(tmp_path.glob("reports/*"))


def test_a_path_of_the_wrong_kind_names_the_config_line_too(tmp_path, capsys, monkeypatch):
    """Break-it finding: ``prompts = "/tmp"`` (a folder) and ``names = "/dev/null"`` (a device)
    were named with the path and field but not the config file and line that named them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "f.toml").write_text('name = "x"\nprompts = "adir"\n')
    assert main(["validate", "f.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"f.toml, line 2: field 'prompts': prompt file is a folder, expected a file: {tmp_path / 'adir'}" in err
    assert "working directory" not in err and "Traceback" not in err
    (tmp_path / "d.toml").write_text('name = "x"\n\nnames = "/dev/null"\n')
    assert main(["validate", "d.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "d.toml, line 3: field 'names': name file is not a regular file" in err and "/dev/null" in err


def test_a_relative_path_read_elsewhere_than_beside_the_config_is_warned(tmp_path, capsys, monkeypatch):
    """Break-it finding (s47): ``prompts = "tasks.jsonl"`` beside the config, run from another folder
    (cron, CI), silently read lmra's shipped tasks.jsonl (189 prompts) under the user's run name.
    ``lmra validate`` (and the audit, as a notice) says which file was read and which was not."""
    import json

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "tasks.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "text": f"Help me plan week {i}.",
                                                          "task": "plan"}) + "\n" for i in range(3)))
    (conf / "my.toml").write_text('name = "mine"\nprompts = "tasks.jsonl"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["validate", str(conf / "my.toml")]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert (f"prompts = 'tasks.jsonl' was read as") in said and "(shipped with lmra)" in said, said
    assert f"not as {conf / 'tasks.jsonl'} beside the config" in said and "give an absolute path" in said
    monkeypatch.chdir(conf)  # run from the config's folder: the file beside it is the one read, nothing said
    assert main(["validate", "my.toml"]) == 0
    assert "beside the config" not in " ".join(capsys.readouterr())

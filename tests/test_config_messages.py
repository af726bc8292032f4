"""Config and reference mistakes a new user makes get a message that says what to write
(new-user findings): a misspelt field names the closest field, a run name that breaks its
pattern says the rule in words (not the regex), a misspelt baseline reference names the word."""

from __future__ import annotations

import pytest

from lmra.config import parse_config
from lmra.errors import LmraInputError


@pytest.mark.parametrize("data, field, says", [
    ({"prompts_per_tsk": 3}, "prompts_per_tsk", "did you mean 'prompts_per_task'?"),
    ({"target": {"temprature": 0.5}}, "target.temprature", "did you mean 'temperature'?"),
    ({"judge_check": {"per_knd": 3}}, "judge_check.per_knd", "did you mean 'per_kind'?"),
    ({"zzzz": 1}, "zzzz", "unknown field (check the spelling"),  # nothing close: no guess
    ({"groups": [{"name": "female", "gender": "female", "namess": 1}]}, "groups.0.namess", "did you mean 'name'"),
    ({"name": "my audit"}, "name", "letters, digits, '.', '_' and '-' only, starting with a letter or digit"),
])
def test_config_errors_say_what_to_write(data, field, says):
    with pytest.raises(LmraInputError) as info:
        parse_config(data, source="my.toml")
    assert info.value.field == field and says in info.value.reason
    assert "String should match pattern" not in info.value.reason and "did you mean 'zzzz'" not in info.value.reason


def test_a_misspelt_baseline_word_is_named(tmp_path):
    from lmra.history import History

    with History(tmp_path / "history.sqlite") as h:
        with pytest.raises(LmraInputError, match=r"did you mean 'pinned' \(as --baseline\)"):
            h.resolve("pined")
        with pytest.raises(LmraInputError, match=r"did you mean 'pinned' \(as --baseline\)"):
            h.resolve("PINNED")  # (case)
        with pytest.raises(LmraInputError, match=r"did you mean 'latest' \(as RUN\)"):
            h.resolve("lastest")
        with pytest.raises(LmraInputError, match=r"or latest for RUN; last or pinned for --baseline"):
            h.resolve("20260101-nosuchrun")


def test_a_misspelt_run_id_is_offered_the_recorded_ids_close_to_it(tmp_path):
    """Fresh-user finding (s40): ``lmra export 20261206-155528-chatbot-intersectoinal`` got no did-you-mean,
    where ``--baseline pined`` got one."""
    from monitor_helpers import make_run

    from lmra.history import History

    run = make_run(tmp_path, "20261206-155528-chatbot-intersectional", {"write a story": 0.1, "career advice": 0.1},
                   seed=1, n_prompts=8)
    with History(run.parent / "history.sqlite") as h:
        h.scan()
        with pytest.raises(LmraInputError, match=r"did you mean '20261206-155528-chatbot-intersectional'\?"):
            h.resolve("20261206-155528-chatbot-intersectoinal")


@pytest.mark.parametrize("field", ["output_dir", "cache"])
def test_output_paths_expand_home_and_refuse_environment_variables(tmp_path, monkeypatch, field):
    """Break-it finding: ``~`` and ``$HOME`` in ``output_dir`` / ``cache`` were taken literally — the
    audit made folders named '~' and '$HOME' in the working directory (under cron: a new history
    and cache every night) while ``lmra validate`` said "valid"; ``~`` in ``prompts`` was expanded."""
    import os
    from pathlib import Path

    from lmra.cli import main
    from lmra.recsys.config import RecsysConfig

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = parse_config({field: "~/lmra/x"})
    assert getattr(cfg, field) == os.path.join(str(tmp_path / "home"), "lmra", "x")
    for value in ("$HOME/lmra", "${HOME}/lmra", "/srv/$USER/reports"):
        with pytest.raises(LmraInputError) as err:
            parse_config({field: value})
        assert err.value.field == field and "does not expand" in str(err.value)
    rec = RecsysConfig.model_validate({field: "~/r"})
    assert getattr(rec, field) == os.path.join(str(tmp_path / "home"), "r")
    toml = tmp_path / "c.toml"
    toml.write_text(f'{field} = "$HOME/lmra-reports"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(toml)]) == 2
    assert not any(p.name.startswith(("$", "~")) for p in Path(tmp_path).iterdir())


def test_the_input_files_a_relative_path_found_are_said_and_recorded(tmp_path, monkeypatch, capsys):
    """Break-it finding: a relative ``names`` path read the user's own file from the config's folder
    and lmra's shipped one from another folder, and nothing said or recorded which. ``lmra
    validate`` names the files read (shipped ones marked) and the run's manifest records them."""
    import json

    from lmra.cli import main

    own = tmp_path / "cfgdir"
    (own / "names").mkdir(parents=True)
    (own / "names" / "gender.csv").write_text("name,gender,race,source\nAda,female,,t\nBea,female,,t\nCy,male,,t\n"
                                              "Dan,male,,t\n", encoding="utf-8")
    cfg = own / "rel.toml"
    cfg.write_text('names = "names/gender.csv"\nprompts_per_task = 1\n', encoding="utf-8")
    seen = {}
    for where in (own, tmp_path):
        monkeypatch.chdir(where)
        capsys.readouterr()
        assert main(["validate", str(cfg), "--json"]) == 0
        seen[where] = json.loads(capsys.readouterr().out)["input_files"]["names"]
        assert main(["validate", str(cfg)]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert f"names {seen[where]}" in out
    assert seen[own] == str((own / "names" / "gender.csv").resolve())
    assert seen[tmp_path] != seen[own] and seen[tmp_path].endswith("gender.csv")
    assert f"names {seen[tmp_path]} (shipped with lmra)" in out


def test_a_dollar_in_a_folders_own_name_is_kept(tmp_path, monkeypatch):
    """Review finding: '/mnt/data$archive' (a folder's own name, no such variable) was refused with
    the environment-variable rule; a recsys output_dir of "" (the working folder) was refused."""
    from lmra.recsys.config import RecsysConfig

    monkeypatch.delenv("archive", raising=False)
    assert parse_config({"output_dir": "/mnt/data$archive"}).output_dir == "/mnt/data$archive"
    with pytest.raises(LmraInputError):
        parse_config({"output_dir": "/srv/$LMRA_HOME_UNSET_X/reports"})  # capitals: meant as a variable
    assert RecsysConfig.model_validate({"output_dir": ""}).output_dir == ""


@pytest.mark.parametrize("section", ["target", "judge"])
@pytest.mark.parametrize("url, says", [
    ("http://\uff4cocalhost:8000/v1", "Invalid IDNA hostname"),  # a full-width 'l' pasted from a document
    ("http://local\u200bhost:8000/v1", "Invalid IDNA hostname"),  # a zero-width space
    ("http://127.0.0.1:8000/v1\u0001", "non-printable"),
])
def test_a_base_url_the_http_client_refuses_is_an_input_error(tmp_path, capsys, section, url, says):
    """Break-it finding (s34): these passed the config check, then ``lmra validate``, ``audit`` and
    ``judge-check`` died with httpx's InvalidURL traceback, exit 1."""
    from lmra.cli import main

    cfg = tmp_path / "c.toml"
    import json

    cfg.write_text(f'name = "x"\n[{section}]\nprovider = "openai"\nmodel = "m"\nbase_url = {json.dumps(url)}\n'
                   "api_key_required = false\n", encoding="utf-8")  # (escaped, as TOML takes a control character)
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"line 5: field '{section}.base_url'" in err and says in err and "Traceback" not in err


@pytest.mark.parametrize("url", ["http://user:S3CRETPW@127.0.0.1:1/v1", "http://S3CRETPW@127.0.0.1:1/v1",
                                 "https://:S3CRETPW@api.example.com/v1"])
def test_a_base_url_with_credentials_is_refused_without_printing_them(url):
    """Break-it finding (s34): ``http://user:pass@host/v1`` was printed in the endpoint's failure
    message and written into the run folder's config.toml and manifest.json, with redact = true too."""
    with pytest.raises(LmraInputError) as info:
        parse_config({"judge": {"provider": "openai", "model": "m", "base_url": url, "api_key_required": False}},
                     source="my.toml")
    assert info.value.field == "judge.base_url" and "api_key_env" in info.value.reason
    assert "S3CRETPW" not in str(info.value) and "***@" in info.value.reason


@pytest.mark.parametrize("field", ["output_dir", "cache"])
def test_a_home_folder_of_no_such_user_is_refused_not_made(tmp_path, monkeypatch, field):
    """Break-it finding (s37): ``cache = "~nosuchuser/c.sqlite"`` made a folder literally named
    ``~nosuchuser`` in the working folder, with a fresh empty cache every night (exit 0)."""
    from lmra.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(LmraInputError) as err:
        parse_config({field: "~lmra-no-such-user-xyz/c"})
    assert err.value.field == field and "who does not exist here" in str(err.value)
    (tmp_path / "c.toml").write_text(f'{field} = "~lmra-no-such-user-xyz/c"\n')
    assert main(["validate", "c.toml"]) == 2
    assert not any(p.name.startswith("~") for p in tmp_path.iterdir())


def test_a_cache_that_is_the_output_folder_is_a_config_error(tmp_path, monkeypatch, capsys):
    """Break-it finding (s37): ``cache = "reports"`` with ``output_dir = "reports"`` made ``reports``
    a SQLite file, then failed as an I/O error blaming the output folder (exit 1)."""
    from lmra.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text('output_dir = "reports"\ncache = "reports"\n')
    assert main(["validate", "c.toml"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "c.toml, line 2: field 'cache': 'reports' is the output folder" in err and not (tmp_path / "reports").exists()


@pytest.mark.parametrize("url, says", [
    ("http://127.0.0.1:8932/v1?api-key=TOPSECRET", "has a query string ('?…')"),
    ("https://example.org/openai?api-version=2024-06-01", "has a query string ('?…')"),
    ("http://127.0.0.1:8932/v1#TOPSECRET", "has a fragment ('#…')"),
    ("http://user:TOPSECRET@127.0.0.1:8932/v1?key=TOPSECRET", "holds a user name or password"),
    # every other refusal quotes it masked too (round-2 break-it, s48)
    ("http://127.0.0.1:99999/v1?api-key=TOPSECRET", "is not a valid URL (its host or port cannot be read)"),
    ("htps://h/v1?api-key=TOPSECRET", "is not an http:// or https:// URL"),
    ("http://h/v1?api-key=TOP SECRET", "is not a URL (it contains white space)"),
    ("http://?k=TOPSECRET", "has no host"),
    ("http://user:pa#TOPSECRET@h/v1", "is not a valid URL"),
    ("http://user:p?TOPSECRET@h/v1", "is not a valid URL"),
    # a raw password holding "/", or no "://" (round-3 break-it, s48)
    ("https://key:AbC/dEf+TOPSECRET@host/v1", "is not a valid URL"),
    ("http://key:123/abcTOPSECRET@h/v1", "holds a user name or password"),
    ("http//user:TOPSECRET@h", "is not an http:// or https:// URL"),
    ("user:TOPSECRET@h/v1", "is not an http:// or https:// URL"),
])
def test_a_base_url_with_a_query_or_credentials_is_refused_without_quoting_them(tmp_path, capsys, url, says):
    """Break-it finding (s48): base_url = '…/v1?api-key=…' passed validate; the SDK sent every request to
    '/v1?api-key=…chat/completions' (the failure was blamed on the model id) and the key was written to
    config.toml, manifest.json and the console. Refused, exit 2, naming file, line and field, the query masked."""
    from lmra.cli import main

    cfg = tmp_path / "cred.toml"
    cfg.write_text(f'name = "t"\n[target]\nprovider = "openai"\nmodel = "m"\napi_key_required = false\n'
                   f'base_url = "{url}"\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: {cfg}, line 6: field 'target.base_url':" in err and says in err
    assert "TOPSECRET" not in err and "SECRET" not in err and "Traceback" not in err
    assert main(["audit", "--config", str(cfg), "--no-progress"]) == 2
    assert "TOPSECRET" not in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "reports").exists()

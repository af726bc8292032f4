"""Run folders whose files parse but have another shape (break-it findings: a manifest edited
into a JSON array, a summary whose ``overall`` is a string, a ``config.toml`` that is not TOML,
a text cell in ``per_task.csv``) gave a traceback in every command that read the run; each is
now an input error (exit 2) naming the file and the field."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from lmra.cli import main


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from test_gates import FLAT, write_config

    tmp = tmp_path_factory.mktemp("shapes")
    cfg = write_config(tmp, rates=FLAT, n_prompts=6)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    (run,) = (tmp / "reports").glob("*-gated")
    return run


def _edited(finished_run, tmp_path, name: str, text: str, rehash: bool = True):
    run = tmp_path / finished_run.name
    shutil.copytree(finished_run, run)
    (run / name).write_text(text)
    if rehash and name != "manifest.json":  # as a careful editor would: the digest made to match
        manifest = json.loads((run / "manifest.json").read_text())
        data = (run / name).read_bytes()
        manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def _summary_with(finished_run, **fields) -> str:
    return json.dumps(json.loads((finished_run / "summary.json").read_text()) | fields)


def _manifest_with(finished_run, **fields) -> str:
    return json.dumps(json.loads((finished_run / "manifest.json").read_text()) | fields)


CASES = {
    "manifest array": ("manifest.json", lambda r: "[1, 2]", "manifest.json: is a JSON list, not the object"),
    # break-it finding: a damaged manifest read "not a finished lmra run folder … the run did not finish"
    "manifest truncated": ("manifest.json", lambda r: '{"status": "complete"', "manifest.json, line 1: not valid JSON"),
    "manifest truncated advice": ("manifest.json", lambda r: '{"status": "complete"', "damaged after the run; restore it"),
    # break-it finding: a run that ended failed read "the run did not finish"
    "manifest of a failed run": ("manifest.json", lambda r: _manifest_with(r, status="failed"),
                                 "(manifest status: failed): the run failed: no pair was scored"),
    "manifest status number": ("manifest.json", lambda r: _manifest_with(r, status=3),
                               "field 'status': not a JSON string"),
    "manifest calls text": ("manifest.json", lambda r: _manifest_with(r, calls="x"), "field 'calls': not a JSON object"),
    "manifest files list": ("manifest.json", lambda r: _manifest_with(r, files=[]), "field 'files': not a JSON object"),
    "summary array": ("summary.json", lambda r: "[]", "is a JSON list, not the object a run folder holds"),
    "overall text": ("summary.json", lambda r: _summary_with(r, overall="x"),
                     "field 'overall': not a JSON array of objects"),
    "config not TOML": ("config.toml", lambda r: "name = = 1\n", "config.toml: is not readable TOML"),
    "per_task text cell": ("per_task.csv", lambda r: (r / "per_task.csv").read_text().replace(",0.", ",zero.", 1),
                           "where column"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["report", "gate", "export", "compare"])
def test_a_run_file_of_another_shape_is_an_input_error(finished_run, tmp_path, capsys, case, command):
    name, text, says = CASES[case]
    run = _edited(finished_run, tmp_path, name, text(finished_run))
    argv = {"report": ["report", str(run), "--out", str(tmp_path / "r.html")],
            "gate": ["gate", str(run), "--gate", "max_ci_high=0.9"],
            "export": ["export", str(run), "--format", "csv", "--out", str(tmp_path / "x")],
            "compare": ["compare", str(run), str(finished_run)]}[command]
    status = main(argv)
    err = " ".join(capsys.readouterr().err.split())
    assert status == 2 and "Traceback" not in err, err
    assert says in err and "did not finish" not in err, err



@pytest.mark.parametrize("command", ["export", "names build", "recsys score"])
def test_an_output_folder_option_naming_a_file_is_an_input_error(finished_run, tmp_path, capsys, command):
    """Break-it finding: ``--out FILE`` was an I/O failure (exit 1) with Python's ``FileExistsError:
    [Errno 17]`` text; it is the option's fault (exit 2, one paragraph naming it)."""
    target = tmp_path / "a-file"
    target.write_text("keep me\n")
    argv = {"export": ["export", str(finished_run), "--format", "csv", "--out", str(target)],
            "names build": ["names", "build", "--out", str(target)],
            "recsys score": ["recsys", "score", "--lists", str(target), "--out", str(target)]}[command]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{target}: option --out: is a file: --out names the folder that receives the output files" in err, err
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("argv", [["pin", "/no/such/run"], ["check", "./no-such-run", "--baseline", "last"],
                                  ["plan", "--pilot", "/no/such/run", "--rate", "0.1"],
                                  ["export", "/no/such/run", "--format", "csv"]])
def test_a_run_path_to_no_folder_is_refused_without_writing_a_history(tmp_path, capsys, monkeypatch, argv):
    """Break-it finding: the lookup failed (exit 2) after creating ./reports/history.sqlite."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no such run folder" in err and ("--pilot" in err) == (argv[0] == "plan")
    assert not list(tmp_path.iterdir())


def test_exporting_a_run_folder_needs_no_run_history(finished_run, tmp_path, capsys):
    """Break-it finding: with the history's disk full, `lmra export RUN --out /elsewhere` failed
    on the history it only read (exit 1). A run folder's tables are exported without opening
    it — here the history is a folder, which no SQLite can open."""
    copy = tmp_path / "reports" / finished_run.name
    shutil.copytree(finished_run, copy)
    (tmp_path / "reports" / "history.sqlite").mkdir()
    assert main(["export", str(copy), "--format", "csv", "--out", str(tmp_path / "x")]) == 0, capsys.readouterr().err
    assert (tmp_path / "x" / "per_task.csv").is_file()

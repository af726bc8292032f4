"""Issue 11, bad input: every malformed input exits 2 with one paragraph naming the file,
line and field, no traceback, and nothing written.

The corpus (``tests/badinput/corpus.py``) is generated from the config models and from
families of broken name lists, prompt sets, logged traffic, human labels, run folders and
command lines; each case runs in-process through ``lmra.cli.main`` (the stage that would
call a model is replaced by a tripwire, so no case can reach a model). A few cases also run
as real subprocesses to prove the exit status of the installed command.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from badinput.corpus import (KEY_ENV, LABEL_ROWS, NAMES_ROWS, PROMPT_RECORDS, TRAFFIC_CSV_ROWS, Case, base_files,
                             build_run_fixture, generate, problems, run_case)

CASES = generate()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_fixture(tmp_path_factory):
    """A complete run folder (real audit, scripted doubles), copied into each case that needs one."""
    return build_run_fixture(tmp_path_factory.mktemp("badinput-fixture"))


def test_corpus_size_and_families():
    assert len(CASES) >= 400
    per = collections.Counter(c.category for c in CASES)
    for family in ("config.numeric", "config.bool", "config.string", "config.unknown", "config.file", "config.value",
                   "config.prices", "names", "prompts", "traffic", "agreement", "agreement.run", "axes.run",
                   "axes.args", "axes.config", "audit.args"):
        assert per[family] > 0, family
    # every case of a file with lines names a line, except whole-file problems (missing, empty …)
    assert sum(c.line is not None for c in CASES) > 0.8 * len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, tmp_path, run_fixture):
    o = run_case(case, tmp_path / "w", run_fixture if case.run is not None else None)
    found = problems(case, o)
    assert not found, f"{found}\nstderr: {o.err.strip()[-800:]}\n{o.exception}"


# -- the base inputs are valid: each case breaks exactly one thing ---------------------------------
def _control(argv, files, tmp_path, run_fixture=None, run=None):
    case = Case(id="control", category="control", argv=argv, files=files, run=run)
    return run_case(case, tmp_path / "w", run_fixture)


def test_base_config_and_inputs_validate(tmp_path):
    o = _control(["validate", "cfg.toml"], base_files(), tmp_path)
    assert o.code == 0 and "valid" in o.out and "female (3 names)" in o.out, o.err


def test_base_audit_gets_past_validation_without_writing(tmp_path):
    o = _control(["audit", "--config", "cfg.toml", "--no-progress"], base_files(), tmp_path)
    assert o.code == "reached-model-stage", o.err


@pytest.mark.parametrize("name,content", [
    ("logs.csv", "\n".join(TRAFFIC_CSV_ROWS + ['l9,"a message\nover two lines, with ""quotes"""']) + "\n"),
    ("logs.jsonl", "".join(json.dumps(r) + "\n" for r in [{"text": "line\u2028separator inside"}, {"text": "x"}])),
])
def test_base_traffic_is_accepted(tmp_path, name, content):
    o = _control(["audit", "--config", "cfg.toml", "--prompts", name, "--no-progress"], base_files(**{name: content}),
                 tmp_path)
    assert o.code == "reached-model-stage", o.err


def test_base_agreement_and_axes_run(tmp_path, run_fixture):
    o = _control(["agreement", "--human", "labels.csv", "--run", "run"], {"labels.csv": "\n".join(LABEL_ROWS) + "\n"},
                 tmp_path, run_fixture, run={})
    assert o.code == 0 and "pairs matched" in o.out, o.err
    o = _control(["axes", "--run", "run", "--no-progress"], {}, tmp_path / "axes", run_fixture, run={})
    assert o.code == "reached-model-stage", o.err


def test_utf8_bom_and_crlf_are_fine(tmp_path):
    bom = b"\xef\xbb\xbf"
    files = base_files()
    files = {k: bom + v.replace("\n", "\r\n").encode() for k, v in files.items()}
    o = _control(["validate", "cfg.toml"], files, tmp_path)
    assert o.code == 0, o.err


@pytest.mark.parametrize("name", ["Zoë", "Mary-Jane", "O'Neil", "D’Angelo", "José", "Nguyễn", "Đức", "王芳", "Jo Ann",
                                  "Al", "St. John"])
def test_plausible_names_are_accepted(tmp_path, name):
    rows = NAMES_ROWS + [f"{name},female,,test"]
    o = _control(["validate", "cfg.toml"], base_files(**{"names.csv": "\n".join(rows) + "\n"}), tmp_path)
    assert o.code == 0, o.err


def test_numeric_ids_in_logged_traffic_need_quotes(tmp_path):
    """Strict types: a JSON number is not an id (the message says how to write one)."""
    lines = [json.dumps(r) for r in PROMPT_RECORDS[:2]] + ['{"id": 17, "text": "hello"}']
    o = _control(["validate", "cfg.toml"], base_files(**{"prompts.jsonl": "\n".join(lines) + "\n"}), tmp_path)
    assert o.code == 2 and "line 3" in o.err and "field 'id'" in o.err and "double quotes" in o.err


# -- a few through the real command --------------------------------------------------------------------
SUBPROCESS_CASES = ["config-top-max_cost-float-inf", "toml-deep-array-5000", "names-unterminated-quote",
                    "agreement-tie-five", "axes-run-status-running", "traffic-csv-300k-field"]


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_real_command_exit_status(case_id, tmp_path, run_fixture):
    from badinput.corpus import materialize, snapshot

    case = next(c for c in CASES if c.id == case_id)
    materialize(case, tmp_path, run_fixture if case.run is not None else None)
    before = snapshot(tmp_path)
    env = os.environ | {KEY_ENV: "sk-badinput", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "lmra.cli", *case.argv], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    if case.file:
        assert case.file in p.stderr
    if case.line:
        assert f"line {case.line}" in p.stderr
    assert sorted(k for k, v in snapshot(tmp_path).items() if before.get(k) != v) == []

"""``--json`` on check, history, compare, validate and judge-check (issue 13, item 4): one strict
JSON document on stdout, checked against the table the same command prints, against the
library result it is built from and against the run folders; same exit status as without
``--json``; NaN and ±∞ become null; failures print an ``lmra.error/1`` document."""

import json
import math
import shutil

import pandas as pd
import pytest

from conftest import FEMALE, MALE, rerecord_files
from faultserver import FaultServer
from monitor_helpers import make_run, write_inputs
from lmra.cli import main
from lmra.compare import EivFit, compare_runs, compare_tables
from lmra.monitor import check_run
from lmra.history import History
from lmra.cli.monitor import _fmt, _p
from lmra.report import jsonout
from lmra.runfolder import load_run

LOW = {"write a story": 0.1, "career advice": 0.1}
RISE = {"write a story": 0.6, "career advice": 0.1}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three nights of 60 prompts (30 per task): a baseline, a rise in 'write a story', a quiet night."""
    tmp = tmp_path_factory.mktemp("jsonout")
    return {"base": make_run(tmp, "20260101-000000-nightly", LOW, seed=1, n_prompts=60),
            "rise": make_run(tmp, "20260102-000000-nightly", RISE, seed=2, n_prompts=60),
            "same": make_run(tmp, "20260103-000000-nightly", LOW, seed=3, n_prompts=60),
            "reports": tmp / "reports"}


def _both(capsys, argv):
    """Run ``lmra ARGV`` with and without ``--json``; returns (status, document, status, table text)."""
    rc_json = main([*argv, "--json"])
    out = capsys.readouterr()
    doc = json.loads(out.out)  # the whole of stdout is one document
    assert "NaN" not in out.out and "Infinity" not in out.out
    rc_table = main(list(argv))
    return rc_json, doc, rc_table, capsys.readouterr().out


def _line(text, *cells):
    lines = [line for line in text.splitlines() if all(c in line for c in cells)]
    assert len(lines) == 1, (cells, text)
    return lines[0]


# -- check ---------------------------------------------------------------------------------
def test_check_json_matches_check_run_and_the_table(runs, capsys, tmp_path):
    hist = str(tmp_path / "h.sqlite")
    argv = ["check", str(runs["rise"]), "--baseline", str(runs["base"]), "--history", hist]
    rc_json, doc, rc_table, table = _both(capsys, argv)
    assert rc_json == rc_table == doc["exit_status"] == 3
    assert doc["schema"] == "lmra.check/2" and doc["verdict"] == "regression"
    assert (doc["run_id"], doc["baseline_id"]) == (runs["rise"].name, runs["base"].name)
    assert (doc["margin"], doc["alpha"], doc["n_tested"]) == (0.0, 0.05, 2)
    assert doc["judge_status"] == {"run": "not_checked", "baseline": "not_checked", "gated_failure": False,
                                   "waived_by": None}
    res = check_run(runs["rise"], runs["base"], history=hist, record=False)
    ref = res.tests.set_index("task")
    assert [t["task"] for t in doc["tests"]] == res.tests["task"].tolist()
    for t in doc["tests"]:
        r = ref.loc[t["task"]]
        assert isinstance(t["n_run"], int) and (t["n_run"], t["n_base"]) == (r["n_run"], r["n_base"]) == (30, 30)
        for k in ("h_run", "h_base", "diff", "p_regress", "p_regress_holm", "p_improve", "p_improve_holm", "mde"):
            assert t[k] == pytest.approx(r[k], rel=1e-12, abs=1e-15), k
        assert (t["regressed"], t["improved"]) == (bool(r["regressed"]), bool(r["improved"]))
        # the table shows the same numbers on the task's row
        row = _line(table, t["task"], f"{t['n_run']}/{t['n_base']}")
        for k in ("h_run", "h_base", "diff"):
            assert _fmt(t[k]) in row
        assert _p(t["p_regress"]) in row and _p(t["p_regress_holm"]) in row
        assert ("REGRESSION" in row) == (t["decision"] == "regression")
    assert doc["regressions"] == [{"comparison": "female vs male", "domain": "d", "task": "write a story"}]
    assert doc["improvements"] == [] and doc["only_in_run"] == doc["only_in_baseline"] == []
    assert "Regression in 1 task(s): write a story" in table


def test_check_json_quiet_night_and_improvement(runs, capsys, tmp_path):
    hist = ["--history", str(tmp_path / "h.sqlite")]
    rc_json, doc, rc_table, _ = _both(capsys, ["check", str(runs["same"]), "--baseline", str(runs["rise"])] + hist)
    assert rc_json == rc_table == doc["exit_status"] == 0
    assert doc["verdict"] == "no_regression" and doc["regressions"] == []
    assert [i["task"] for i in doc["improvements"]] == ["write a story"]
    assert {t["task"]: t["decision"] for t in doc["tests"]} == {"write a story": "improvement",
                                                               "career advice": "no_change"}


def test_check_json_untested_tasks_are_null_and_exit_2(tmp_path, capsys):
    """1 prompt per task: no task is testable, nor the overall row (1 + 1 prompts a run, smallest
    p 1/6), so p-values are NaN (null in JSON), nothing is tested and the check exits 2 with or
    without --json."""
    base = make_run(tmp_path, "20260101-000000-tiny", LOW, seed=1, n_prompts=2, name="tiny")
    run = make_run(tmp_path, "20260102-000000-tiny", RISE, seed=2, n_prompts=2, name="tiny")
    rc_json, doc, rc_table, table = _both(capsys, ["check", str(run), "--baseline", str(base)])
    assert rc_json == rc_table == doc["exit_status"] == 2
    assert doc["verdict"] == "no_conclusion" and doc["n_tested"] == 0
    res = check_run(run, base, record=False)
    assert res.tests["p_regress"].isna().all()
    for t in doc["tests"]:
        assert t["p_regress"] is None and t["p_regress_holm"] is None and t["mde"] is None
        assert t["decision"] == "not_tested" and t["note"].startswith("too few prompts")
    assert "No conclusion" in table


def test_check_json_judge_failure_exit_5_and_waiver(runs, capsys, tmp_path):
    """A run whose judge failed validation (gated): exit 5 with and without --json, 3 when waived."""
    failed = tmp_path / "reports" / "20260104-000000-nightly"
    shutil.copytree(runs["rise"], failed)
    summary = json.loads((failed / "summary.json").read_text())
    summary["judge_status"] = {"status": "failed", "gated": True, "reasons": ["sensitivity 0.2 (needs ≥ 0.8)"]}
    (failed / "summary.json").write_text(json.dumps(summary))
    rerecord_files(failed)
    argv = ["check", str(failed), "--baseline", str(runs["base"]), "--history", str(tmp_path / "h.sqlite")]
    rc_json, doc, rc_table, table = _both(capsys, argv)
    assert rc_json == rc_table == doc["exit_status"] == 5
    assert doc["judge_status"] == {"run": "failed", "baseline": "not_checked", "gated_failure": True,
                                   "waived_by": None}
    assert doc["verdict"] == "regression" and "Judge failed validation" in table
    rc_json, doc, rc_table, _ = _both(capsys, argv + ["--allow-unvalidated-judge"])
    assert rc_json == rc_table == doc["exit_status"] == 3
    assert doc["judge_status"] == {"run": "failed", "baseline": "not_checked", "gated_failure": False,
                                   "waived_by": "command line"}


# -- history -------------------------------------------------------------------------------
def test_history_json_lists_the_run_folders(runs, capsys):
    reports = runs["reports"]
    assert main(["pin", str(runs["base"])]) == 0
    capsys.readouterr()
    rc_json, doc, rc_table, table = _both(capsys, ["history", "--reports-dir", str(reports)])
    assert rc_json == rc_table == 0
    assert doc["schema"] == "lmra.history/1" and doc["history"] == str(reports / "history.sqlite")
    folders = sorted(p.name for p in reports.iterdir() if (p / "summary.json").is_file())
    assert sorted(r["run_id"] for r in doc["runs"]) == folders
    for r in doc["runs"]:
        run = load_run(reports / r["run_id"])
        assert r["pinned"] is (r["run_id"] == runs["base"].name)
        assert r["comparisons"] == ["female vs male"]
        assert (r["n_pairs"], r["judge_model"], r["judge_status"]) == (60, "scripted", "not_checked")
        (ov,) = r["overall"]
        ref = run.summary["overall"][0]
        for k in ("net_rating", "ci_low", "ci_high", "p_value"):
            assert ov[k] == pytest.approx(ref[k], rel=1e-12), k
        row = _line(table, r["run_id"], "female vs male:")
        assert f"{_fmt(ov['net_rating'])} [{_fmt(ov['ci_low'])}, {_fmt(ov['ci_high'])}]" in row
        assert ("pinned" in row) == r["pinned"]


def test_history_task_json_matches_per_task_csv(runs, capsys):
    argv = ["history", "--reports-dir", str(runs["reports"]), "--task", "write a story"]
    rc_json, doc, rc_table, table = _both(capsys, argv)
    assert rc_json == rc_table == 0
    assert doc["schema"] == "lmra.task_trend/1" and doc["task"] == "write a story"
    with History(runs["reports"] / "history.sqlite") as h:
        assert [p["run_id"] for p in doc["points"]] == h.task_trend("write a story")["run_id"].tolist()
    for p in doc["points"]:
        pt = load_run(runs["reports"] / p["run_id"]).per_task.set_index("task").loc["write a story"]
        assert p["n_pairs"] == pt["n_pairs"] and p["net_rating"] == pytest.approx(pt["net_rating"], rel=1e-12)
        assert (p["ci_low"], p["ci_high"]) == (pytest.approx(pt["ci_low"]), pytest.approx(pt["ci_high"]))
        assert f"{_fmt(p['net_rating'])} [{_fmt(p['ci_low'])}, {_fmt(p['ci_high'])}]" in _line(table, p["run_id"])


def test_history_json_errors_and_empty_history(tmp_path, capsys):
    argv = ["history", "--reports-dir", str(tmp_path / "nowhere" / "reports")]
    assert main(argv + ["--json"]) == 2
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["schema"] == "lmra.error/1" and doc["command"] == "history" and doc["exit_status"] == 2
    assert doc["error"]["kind"] == "input" and doc["error"]["message"] in out.err.replace("\n", " ")
    assert main(argv) == 2 and capsys.readouterr().out == ""  # without --json: stderr only
    (tmp_path / "empty").mkdir()
    assert main(["history", "--reports-dir", str(tmp_path / "empty"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []


def test_task_never_measured_is_an_error_document(runs, capsys):
    assert main(["history", "--reports-dir", str(runs["reports"]), "--task", "no such task", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["field"] == "--task" and doc["error"]["file"] == str(runs["reports"] / "history.sqlite")


# -- compare -------------------------------------------------------------------------------
def test_compare_json_matches_compare_runs_and_the_table(runs, capsys):
    rc_json, doc, rc_table, table = _both(capsys, ["compare", str(runs["base"]), str(runs["rise"])])
    assert rc_json == rc_table == 0
    assert doc["schema"] == "lmra.compare/1" and doc["ci_level"] == pytest.approx(0.95)
    cmp = compare_runs(load_run(runs["base"]), load_run(runs["rise"]))
    assert doc["n_tasks"] == len(cmp.pairs) == 2
    assert doc["pearson"]["r"] is None and math.isnan(cmp.pearson_r)  # 2 tasks: no r
    assert doc["pearson"]["caveat"] == cmp.r_caveat
    e = doc["eiv_slope"]
    assert (e["slope"], e["ci_low"], e["ci_high"]) == (cmp.eiv.slope, cmp.eiv.ci_low, cmp.eiv.ci_high)
    assert e["ci_method"] == cmp.eiv.ci_method and e["n"] == cmp.eiv.n and e["ci_unbounded"] is False
    o = doc["ols_slope"]
    assert (o["slope"], o["se"], o["ci_low"], o["ci_high"]) == (cmp.fit.slope, cmp.fit.se, cmp.fit.ci_low,
                                                                cmp.fit.ci_high)
    for t, r in zip(doc["tasks"], cmp.pairs.to_dict(orient="records")):
        assert (t["task"], t["h_a"], t["h_b"], t["n_prompts_a"]) == (r["task"], r["h_a"], r["h_b"], r["n_prompts_a"])
        _line(table, t["task"], _fmt(t["h_a"]), _fmt(t["h_b"]))
    for line in cmp.summary_lines():
        assert line in table


def test_compare_document_r_and_unbounded_interval():
    """Five tasks give a finite r; an EIV interval end at ±∞ becomes null with ci_unbounded."""
    pt_a = pd.DataFrame({"group_a": "female", "group_b": "male", "domain": "d", "task": list("abcde"),
                         "net_rating": [0.01, 0.02, 0.04, 0.00, 0.03], "ci_low": -0.1, "ci_high": 0.1, "n_pairs": 40})
    pt_b = pt_a.assign(net_rating=[0.02, 0.05, 0.07, 0.01, 0.05])
    cmp = compare_tables(pt_a, pt_b)
    cmp.eiv = EivFit(slope=2.1, ci_low=0.9, ci_high=math.inf, n=5, var_a=0.01, var_b=0.02, ci_method="BCa",
                     n_resamples=9999)
    text = jsonout.dumps(jsonout.compare_document(cmp, run_a="A", run_b="B"))
    doc = json.loads(text)
    assert "Infinity" not in text and "NaN" not in text
    assert doc["pearson"]["r"] == pytest.approx(cmp.pearson_r) and -1 <= doc["pearson"]["r"] <= 1
    assert doc["pearson"]["p"] == pytest.approx(cmp.pearson_p)
    assert doc["eiv_slope"]["ci_high"] is None and doc["eiv_slope"]["ci_unbounded"] is True
    assert doc["eiv_slope"]["ci_low"] == 0.9 and doc["ols_slope"]["ci_unbounded"] is False
    assert [t["task"] for t in doc["tasks"]] == list("abcde")


# -- validate ------------------------------------------------------------------------------
def test_validate_json_counts_prompts_and_names(tmp_path, capsys):
    names, prompts = write_inputs(tmp_path, 12)
    cfg = tmp_path / "audit.toml"
    cfg.write_text(f'name = "v"\nprompts = "{prompts}"\nnames = "{names}"\n', encoding="utf-8")
    rc_json, doc, rc_table, table = _both(capsys, ["validate", str(cfg)])
    assert rc_json == rc_table == 0
    assert doc["schema"] == "lmra.validate/1" and doc["valid"] is True and doc["kind"] == "audit"
    assert doc["n_prompts"] == len(prompts.read_text().splitlines()) == 12
    assert doc["groups"] == [{"name": "female", "n_names": len(FEMALE)}, {"name": "male", "n_names": len(MALE)}]
    assert doc["comparisons"] == [["female", "male"]] and doc["models"]["judge"]["provider"] == "llamacpp"
    assert "12 prompts in the file" in table and f"female ({len(FEMALE)} names)" in table


def test_validate_json_error_names_file_line_and_field(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('name = "v"\nconcurrency = true\n', encoding="utf-8")
    assert main(["validate", str(cfg), "--json"]) == 2
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["schema"] == "lmra.error/1" and doc["command"] == "validate" and doc["exit_status"] == 2
    assert (doc["error"]["file"], doc["error"]["line"], doc["error"]["field"]) == (str(cfg), 2, "concurrency")
    assert doc["error"]["message"] in out.err.replace("\n", " ")
    assert main(["validate", str(cfg)]) == 2
    assert capsys.readouterr().out == ""


# -- judge-check ---------------------------------------------------------------------------
def test_judge_check_json_matches_the_table(tmp_path, capsys, monkeypatch):
    """Against a local OpenAI-compatible server: same exit status and criteria as the table."""
    monkeypatch.chdir(tmp_path)  # the call cache goes to ./reports
    monkeypatch.setenv("FAKE_JUDGE_KEY", "x")
    with FaultServer() as srv:
        argv = ["judge-check", "--judge", "openai", "--model", "fake", "--base-url", srv.url,
                "--api-key-env", "FAKE_JUDGE_KEY", "--dimension", "gender", "--per-kind", "1"]
        rc_json, doc, rc_table, table = _both(capsys, argv)
    assert rc_json == rc_table == doc["exit_status"]
    assert doc["schema"] == "lmra.judge_check/1" and doc["exit_status"] == (0 if doc["passed"] else 5)
    # all 5 canaries, unless the check stopped once it could no longer pass
    assert (doc["n_canaries"] == 5 or doc["stopped_early"]) and doc["judge"]["model"] == "fake"
    if doc["stopped_early"]:  # the two runs (the JSON's, the table's) may stop after different canaries: the
        return  # point an early stop falls on depends on the order concurrent calls answer in (s38), not the values
    for name, c in doc["criteria"].items():
        row = _line(table, f"│ {name.replace('_', ' ')} ")
        assert f"{c['value']:.3f}" in row and ("pass" if c["passed"] else "FAIL") in row
    assert ("PASSED" in table) == doc["passed"]


def test_judge_check_out_naming_a_file_is_refused_before_any_call(tmp_path, capsys, monkeypatch):
    """Break-it finding: ``--out`` naming a file failed only after every LMRA call (1,200+ with
    the full canary set), as an I/O failure."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAKE_JUDGE_KEY", "x")
    (tmp_path / "notadir").write_text("x")
    with FaultServer() as srv:
        status = main(["judge-check", "--judge", "openai", "--model", "fake", "--base-url", srv.url,
                       "--api-key-env", "FAKE_JUDGE_KEY", "--dimension", "gender", "--per-kind", "1",
                       "--out", "notadir"])
        assert srv.requests == 0
    err = " ".join(capsys.readouterr().err.split())
    assert status == 2 and "notadir" in err and "is a file: --out names the folder" in err


def test_judge_check_out_naming_a_run_folder_is_refused_before_any_call(tmp_path, capsys, monkeypatch):
    """Break-it finding: ``--out RUN`` replaced a finished run's recorded judge validation
    (judge_check.json, judge_check_ratings.jsonl) with another judge's, and the run's exports,
    report and gates went on accepting it."""
    from test_gates import FLAT, audit, write_config

    cfg = write_config(tmp_path, name="n", rates=FLAT, n_prompts=6, judge_check=True)
    rc, _, run = audit(capsys, cfg, "--allow-unvalidated-judge")
    recorded = (run / "judge_check.json").read_bytes()
    monkeypatch.setenv("FAKE_JUDGE_KEY", "x")
    with FaultServer() as srv:
        status = main(["judge-check", "--judge", "openai", "--model", "fake", "--base-url", srv.url,
                       "--api-key-env", "FAKE_JUDGE_KEY", "--dimension", "gender", "--per-kind", "1",
                       "--out", str(run)])
        assert srv.requests == 0
    err = " ".join(capsys.readouterr().err.split())
    assert status == 2 and "is a run folder: judge-check would write its judge_check.json" in err
    assert (run / "judge_check.json").read_bytes() == recorded


def test_a_row_neither_flagged_says_which_way_it_moved_not_no_change(runs, capsys, tmp_path):
    """Fresh-user finding (s34): a task whose net rating rose from 0 to +0.75 on 7 prompts, not
    significant, read "no change" in the console's and report.html's decision column."""
    from lmra.monitor import undecided_words

    assert undecided_words(0.75, 0.0) == "rise, not significant"
    assert undecided_words(0.04, 0.05) == "no significant change"  # within the margin
    assert undecided_words(-0.3, 0.05) == "fall, not significant"
    assert undecided_words(float("nan"), 0.0) == undecided_words(None, 0.0) == "no significant change"
    assert undecided_words(5.55e-17, 0.0) == undecided_words(-5.55e-17, 0.0) == "no significant change"  # float noise
    hist = ["--history", str(tmp_path / "h.sqlite")]
    _, doc, _, table = _both(capsys, ["check", str(runs["rise"]), "--baseline", str(runs["base"])] + hist)
    quiet = [t for t in doc["tests"] if t["decision"] == "no_change"]
    assert quiet and "no change" not in table
    for t in quiet:
        assert undecided_words(t["diff"], doc["margin"]) in _line(table, t["task"], f"{t['n_run']}/{t['n_base']}")

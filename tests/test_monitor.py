"""Run history, baselines and the regression check (methodology §8 "Monitoring") on run
folders made by the real audit pipeline with scripted doubles (tests/doubles.py)."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from conftest import rerecord_files
from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.errors import LmraInputError
from lmra.pairstore import iter_rows, read_pairs
from lmra.monitor import assert_comparable, check_regression, check_run
from lmra.history import History, list_runs, register_run, task_trend
from lmra.runfolder import load_run

LOW = {"write a story": 0.1, "career advice": 0.1}
RISE = {"write a story": 0.5, "career advice": 0.1}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Four nightly runs (200 prompts per task): a baseline, a night with an injected rise in
    'write a story', an unchanged night, and a night rated by another judge model."""
    tmp = tmp_path_factory.mktemp("monitor")
    return {
        "base": make_run(tmp, "20260101-000000-nightly", LOW, seed=1),
        "rise": make_run(tmp, "20260102-000000-nightly", RISE, seed=2),
        "same": make_run(tmp, "20260103-000000-nightly", LOW, seed=3),
        "other_judge": make_run(tmp, "20260104-000000-nightly", LOW, seed=4, judge_model="another-judge"),
        "tmp": tmp,
    }


def _h(run_dir, task):
    """Valid per-pair h of one task, read straight from ratings.parquet."""
    rows = iter_rows(run_dir / "ratings.parquet")
    return np.array([r["h"] for r in rows if r["task"] == task and r["valid"] and not r["failed"]])


def test_injected_rise_exits_3_and_names_the_task(runs, lmra_cli, capsys, tmp_path):
    hist = tmp_path / "h.sqlite"
    rc = lmra_cli(["check", str(runs["rise"]), "--baseline", str(runs["base"]), "--history", str(hist)])
    out = capsys.readouterr().out
    assert rc == 3
    # what rose, in words (fresh-user finding, s41: "4 rows (tasks, overall) rose" when no task had)
    head = " ".join(out[out.index("Verdict against"):].split())
    assert head.startswith(f"Verdict against baseline {runs['base'].name}: REGRESSION — 1 task"), head[:300]
    assert "rows (tasks, overall)" not in out
    verdict = out[out.index("Regression in"):]
    assert "write a story" in verdict and "career advice" not in verdict
    # which group's users: not the net rating's to say (fresh-user finding, round 33)
    assert "so it does not say which group" in " ".join(verdict.split())
    res = check_run(runs["rise"], runs["base"], history=hist, record=False)
    assert res.regressions["task"].tolist() == ["write a story"]
    assert res.improvements.empty
    row = res.tests.set_index("task").loc["write a story"]
    assert row["diff"] == pytest.approx(0.4, abs=0.1)


def test_unchanged_night_exits_0(runs, lmra_cli, capsys, tmp_path):
    rc = lmra_cli(["check", str(runs["same"]), "--baseline", str(runs["base"]),
                   "--history", str(tmp_path / "h.sqlite")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "No regression" in out and "does not say which group" not in " ".join(out.split())


def test_margin_larger_than_the_rise_is_not_a_regression(runs, lmra_cli, tmp_path):
    hist = ["--history", str(tmp_path / "h.sqlite")]
    assert lmra_cli(["check", str(runs["rise"]), "--baseline", str(runs["base"]), "--margin", "0.6"] + hist) == 0
    assert lmra_cli(["check", str(runs["rise"]), "--baseline", str(runs["base"]), "--margin", "0.2"] + hist) == 3


def test_welch_and_holm_match_scipy_and_statsmodels(runs):
    run, base = load_run(runs["rise"]), load_run(runs["base"])
    margin = 0.05
    res = check_regression(run, base, margin=margin)
    tests = res.tests.set_index("task")
    raw = {}
    for task in ("career advice", "write a story"):
        x, y = _h(runs["rise"], task), _h(runs["base"], task)
        ref = stats.ttest_ind(x - margin, y, equal_var=False, alternative="greater")
        assert tests.loc[task, "t_regress"] == pytest.approx(ref.statistic, rel=1e-9)  # Welch t, reported
        perm = stats.permutation_test((np.sort(x) - margin, np.sort(y)),
                                      lambda a, b, axis: a.mean(axis=axis) - b.mean(axis=axis),
                                      permutation_type="independent", alternative="greater", n_resamples=9999,
                                      vectorized=True, rng=np.random.default_rng(1))
        # the decision's p-value: the larger of a permutation p (seeded from the data, so only close to
        # another seed's) and Welch's
        assert tests.loc[task, "p_regress"] == pytest.approx(max(perm.pvalue, ref.pvalue), abs=0.01)
        ref = perm
        assert tests.loc[task, "n_run"] == len(x) == 200
        # with one sample per prompt H is the per_task.csv net rating
        assert tests.loc[task, "h_run"] == pytest.approx(run.per_task.set_index("task").loc[task, "net_rating"])
        raw[task] = tests.loc[task, "p_regress"]
    # one Holm family: the two tasks and the comparison's overall row (all 400 prompts)
    (overall_p,) = res.overall["p_regress"].tolist()
    holm = multipletests([raw["career advice"], raw["write a story"], overall_p], method="holm")[1]
    assert tests.loc["career advice", "p_regress_holm"] == pytest.approx(holm[0])
    assert tests.loc["write a story", "p_regress_holm"] == pytest.approx(holm[1])
    assert res.overall["p_regress_holm"].tolist() == pytest.approx([holm[2]])
    assert res.overall["n_run"].tolist() == [400]


def test_a_fall_is_reported_as_improvement(runs, tmp_path):
    res = check_run(runs["same"], runs["rise"], history=tmp_path / "h.sqlite")
    assert res.exit_status == 0
    assert res.improvements["task"].tolist() == ["write a story"]
    assert res.regressions.empty


def test_baseline_with_another_judge_is_refused_exit_2(runs, lmra_cli, capsys, tmp_path):
    rc = lmra_cli(["check", str(runs["other_judge"]), "--baseline", str(runs["base"]),
                   "--history", str(tmp_path / "h.sqlite")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "judge model" in err and "another-judge" in err and "not comparable" in err


def test_baseline_with_another_template_or_comparisons_is_refused(runs, tmp_path):
    copy = tmp_path / "20260101-000001-nightly"
    shutil.copytree(runs["base"], copy)
    man = json.loads((copy / "manifest.json").read_text())
    original = man["templates"]["stereotype"]
    man["templates"]["stereotype"] = "0" * 16
    (copy / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(LmraInputError, match="judge template"):
        assert_comparable(load_run(runs["rise"]), load_run(copy))
    # a run without recorded template hashes gets the installed template's, computed the same way
    man.pop("templates")
    (copy / "manifest.json").write_text(json.dumps(man))
    assert load_run(copy).judge_template == (original, "current-file")
    (copy / "manifest.json").write_text(json.dumps(man))
    pt = pd.read_csv(copy / "per_task.csv")
    pt["group_b"] = "nonbinary"
    pt.to_csv(copy / "per_task.csv", index=False)
    rerecord_files(copy)
    with pytest.raises(LmraInputError, match="comparisons"):
        assert_comparable(load_run(runs["rise"]), load_run(copy))


def test_baseline_folder_holding_a_copy_of_the_run_is_refused_exit_2(runs, lmra_cli, capsys, tmp_path):
    """break-it s46 F5: a run folder is trusted by its name — a baseline folder replaced by a copy of
    tonight's run compared the night with itself (+0.0000 on every task, exit 0)."""
    copy = tmp_path / "20260101-000000-nightly"  # the baseline's name, tonight's content
    shutil.copytree(runs["rise"], copy)
    hist = tmp_path / "h.sqlite"
    assert lmra_cli(["check", str(runs["rise"]), "--baseline", str(copy), "--history", str(hist)]) == 2
    err = capsys.readouterr().err
    assert "is a copy of run 20260102-000000-nightly" in err and "Traceback" not in err, err
    # a copy whose gates were re-recorded (summary.json and gates.json rewritten: round-2 break-it, s47) is one still
    assert lmra_cli(["gate", str(copy), "--gate", "max_ci_high=1.0", "--record", "--history", str(hist)]) in (0, 6)
    files = [json.loads((d / "manifest.json").read_text())["files"] for d in (copy, runs["rise"])]
    assert files[0]["summary.json"] != files[1]["summary.json"] and "gates.json" in files[0]  # re-recorded
    capsys.readouterr()
    assert lmra_cli(["check", str(runs["rise"]), "--baseline", str(copy), "--history", str(hist)]) == 2
    assert "is a copy of run 20260102-000000-nightly" in capsys.readouterr().err
    # the genuine baseline (another start time, other digests) is compared as before
    assert lmra_cli(["check", str(runs["rise"]), "--baseline", str(runs["base"]), "--history", str(hist)]) == 3


def test_unfinished_run_folder_is_refused_exit_2(runs, lmra_cli, capsys, tmp_path):
    copy = tmp_path / "20260105-000000-nightly"
    shutil.copytree(runs["base"], copy)
    (copy / "summary.json").unlink()
    assert lmra_cli(["check", str(runs["rise"]), "--baseline", str(copy), "--history", str(tmp_path / "h.sqlite")]) == 2
    assert "not a finished lmra run folder" in capsys.readouterr().err


def test_history_store_rows_and_trend(runs, tmp_path):
    hist = tmp_path / "history.sqlite"
    for key in ("same", "base", "rise"):  # registration order does not matter: runs are ordered by start time
        register_run(runs[key], history=hist)
    register_run(runs["rise"], history=hist)  # idempotent
    df = list_runs(hist)
    assert df["run_id"].tolist() == [runs[k].name for k in ("base", "rise", "same")]
    assert set(df["judge_model"]) == {"scripted"} and set(df["target_model"]) == {"scripted"}
    assert df["n_pairs"].tolist() == [400, 400, 400]
    assert df["config_hash"].nunique() == 3  # seeds differ …
    assert df["design_hash"].nunique() == 1  # … but the audit design is the same
    assert df["judge_template_sha256"].str.len().eq(16).all() and set(df["judge_template_source"]) == {"manifest"}
    trend = task_trend("write a story", hist)
    assert trend["run_id"].tolist() == df["run_id"].tolist()
    expected = [load_run(runs[k]).per_task.set_index("task").loc["write a story", "net_rating"]
                for k in ("base", "rise", "same")]
    assert trend["net_rating"].tolist() == pytest.approx(expected)
    assert (trend["ci_low"] < trend["net_rating"]).all() and (trend["net_rating"] < trend["ci_high"]).all()
    with History(hist) as h:
        tm = h.metrics()
        sd = tm[(tm.run_id == runs["rise"].name) & (tm.task == "write a story")]["sd_prompt"].iloc[0]
    assert sd == pytest.approx(np.std(_h(runs["rise"], "write a story"), ddof=1))


def test_last_and_pinned_baselines(runs, lmra_cli, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    hist = tmp_path / "history.sqlite"
    for key in ("base", "rise", "same"):
        register_run(runs[key], history=hist)
    with History(hist) as h:
        assert h.resolve("last", relative_to=load_run(runs["same"])).run_id == runs["rise"].name
        assert h.resolve("last", relative_to=load_run(runs["rise"])).run_id == runs["base"].name
        with pytest.raises(LmraInputError, match="first run"):
            h.resolve("last", relative_to=load_run(runs["base"]))
        with pytest.raises(LmraInputError, match="no pinned baseline"):
            h.resolve("pinned", relative_to=load_run(runs["rise"]))
    h_args = ["--history", str(hist)]
    # 'last' of the unchanged night is the night with the rise: an improvement, exit 0
    assert lmra_cli(["check", str(runs["same"]), "--baseline", "last"] + h_args) == 0
    assert lmra_cli(["pin", runs["base"].name] + h_args) == 0
    assert lmra_cli(["check", runs["rise"].name, "--baseline", "pinned"] + h_args) == 3
    assert lmra_cli(["check", str(runs["base"]), "--baseline", "last"] + h_args) == 2
    assert lmra_cli(["check", "latest", "--baseline", "pinned"] + h_args) == 0  # latest = the unchanged night
    capsys.readouterr()
    assert lmra_cli(["history"] + h_args) == 0
    out = capsys.readouterr().out
    assert all(runs[k].name in out for k in ("base", "rise", "same"))
    assert out.count("pinned") >= 1
    assert lmra_cli(["history", "--task", "write a story"] + h_args) == 0
    out = capsys.readouterr().out
    net = load_run(runs["rise"]).per_task.set_index("task").loc["write a story", "net_rating"]
    assert f"{net:+.4f}" in out
    capsys.readouterr()
    assert lmra_cli(["history", "--task", "no such task"] + h_args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "task 'no such task' was never measured in the history (its tasks: " in err and "'write a story'" in err
    # a typo gets a "did you mean", as config errors do (fresh-user finding)
    assert lmra_cli(["history", "--task", "write a storry"] + h_args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "task 'write a storry' was never measured in the history; did you mean 'write a story'?" in err, err


def test_prompts_are_the_unit_with_several_samples(tmp_path):
    base = make_run(tmp_path, "20260201-000000-k2", LOW, seed=5, n_prompts=60, samples=2, name="k2")
    rise = make_run(tmp_path, "20260202-000000-k2", RISE, seed=6, n_prompts=60, samples=2, name="k2")
    res = check_regression(load_run(rise), load_run(base))
    assert res.tests["n_run"].tolist() == [30, 30]  # prompts per task, not the 60 pairs
    ratings = read_pairs(rise / "ratings.parquet")
    story = ratings[(ratings.task == "write a story") & ratings.valid]
    per_prompt = story.groupby("prompt_id")["h"].mean()
    assert res.tests.set_index("task").loc["write a story", "h_run"] == pytest.approx(per_prompt.mean())


def test_audit_hook_registers_checks_and_writes_the_report(runs, tmp_path):
    from lmra.cli.monitor import monitor_after_audit

    reports = tmp_path / "reports"
    for key in ("base", "rise"):
        shutil.copytree(runs[key], reports / runs[key].name)
    status = monitor_after_audit(reports / runs["rise"].name, baseline="last")
    assert status == 3
    html = (reports / runs["rise"].name / "report.html").read_text()
    assert 'id="regression-banner"' in html and "write a story (female vs male)" in html
    with History(reports / "history.sqlite") as h:
        assert len(h.runs()) == 2
        stored = h.latest_check(runs["rise"].name)
    # the task and the comparison's overall rating (0.1 → 0.5 in one of its two tasks) regressed
    assert stored["baseline_id"] == runs["base"].name and stored["n_regressions"] == 2
    assert stored["result"]["regressed"].sum() == 1 and stored["overall"]["regressed"].tolist() == [True]


def test_audit_hook_writes_the_report_even_when_the_baseline_is_refused(runs, tmp_path):
    from lmra.cli.monitor import monitor_after_audit

    reports = tmp_path / "reports"
    for key in ("base", "other_judge"):
        shutil.copytree(runs[key], reports / runs[key].name)
    with pytest.raises(LmraInputError, match="judge model"):
        monitor_after_audit(reports / runs["other_judge"].name, baseline=runs["base"].name)
    html = (reports / runs["other_judge"].name / "report.html").read_text()
    # the report is written, and says the night's check was refused and why (new-user finding: no
    # surface said it; the history records it too)
    assert 'id="per-task-table-1"' in html
    assert "No conclusion: the regression check was refused" in html and "its judge model is" in html


def test_a_full_history_database_is_an_io_failure_naming_the_file(tmp_path):
    """The history cannot grow (SQLite's page limit stands in for a full disk): registering a
    run raises LmraIOError naming history.sqlite (exit status 1), not a bare OperationalError."""
    from lmra.errors import LmraIOError
    from lmra.history import History

    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1}, seed=1, n_prompts=8)
    path = tmp_path / "reports" / "full-history.sqlite"
    h = History(path)
    pages = h.db.execute("PRAGMA page_count").fetchone()[0]
    h.db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(LmraIOError) as info:
        for _ in range(50):  # each registration adds a row; the file may not grow
            h.db.execute("INSERT INTO meta VALUES (?, ?)", (f"filler-{_}", "x" * 4000))
        h.register(run)
    assert info.value.path == str(path) and "full" in info.value.reason
    h.close()


def test_a_full_history_in_a_many_row_statement_is_an_io_failure_naming_the_file(tmp_path):
    """Fault break-it (s44): a disk that filled while a registration wrote its task rows (one
    ``executemany``) raised a bare OperationalError — sqlite3's Connection.executemany bypasses the
    history's cursor — and the CLI blamed the call cache, advising to move it aside."""
    from lmra.errors import LmraIOError
    from lmra.history import History

    path = tmp_path / "reports" / "full-history.sqlite"
    h = History(path)
    pages = h.db.execute("PRAGMA page_count").fetchone()[0]
    h.db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(LmraIOError) as info:
        h.db.executemany("INSERT INTO meta VALUES (?, ?)", [(f"filler-{i}", "x" * 4000) for i in range(50)])
    assert info.value.path == str(path) and "full" in info.value.reason
    h.close()


def test_a_task_trend_of_several_audits_says_so(tmp_path, lmra_cli, capsys, monkeypatch):
    """New-user finding: ``lmra history --task T`` mixed the default demo's runs and another
    audit's in one trend without a word."""
    monkeypatch.setenv("COLUMNS", "200")
    hist = tmp_path / "history.sqlite"
    for rid, name in (("20260301-000000-nightly", "nightly"), ("20260302-000000-other", "other")):
        register_run(make_run(tmp_path, rid, LOW, seed=3, n_prompts=40, name=name), history=hist)
    capsys.readouterr()
    assert lmra_cli(["history", "--task", "write a story", "--history", str(hist)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "runs of 2 audits (nightly, other)" in out and "--name NAME" in out
    assert lmra_cli(["history", "--task", "write a story", "--history", str(hist), "--name", "other"]) == 0
    assert "audits (" not in capsys.readouterr().out


def test_the_check_keeps_its_level_when_the_nights_spreads_differ():
    """Break-it simulation: H0 true (the net rating unchanged) but tonight's 40 prompts mix 12%
    forward and 10% reverse stereotypes where the baseline's 400 had 2% forward only — the
    permutation test alone raised 96 false alarms in 400 nights (0.24 at α = 0.05). With the
    Welch test beside it the rate is at most α (≤ 27 of 300 here: P(Binomial(300, 0.05) ≥ 28)
    < 0.001), and a real rise of the same size is still found."""
    from lmra.monitor import _both, one_sided_permutation, one_sided_welch

    def mixture(rng, n, fwd, rev):
        u = rng.random(n)
        return np.where(u < fwd, 0.89, np.where(u < fwd + rev, -0.89, 0.0)) + rng.normal(0, 0.005, n)

    def flagged(x, y):  # (999 resamples: the decision at 0.05 as with the check's 9,999, ten times faster)
        return _both(one_sided_permutation(x, y, 0.0, n_resamples=999), one_sided_welch(x, y, 0.0)[1]) <= 0.05

    rng = np.random.default_rng(2026)
    null = [flagged(mixture(rng, 40, 0.12, 0.10), mixture(rng, 400, 0.02, 0.0)) for _ in range(300)]
    assert sum(null) <= 27, sum(null)
    rise = [flagged(mixture(rng, 40, 0.25, 0.0), mixture(rng, 400, 0.02, 0.0)) for _ in range(100)]
    assert sum(rise) >= 80, sum(rise)


def test_the_detectable_rise_is_a_lower_bound_where_prompts_are_reverse_stereotyped():
    """The two-point model of the detectable rise leaves reverse-stereotyped prompts (h ≤ −0.5)
    out, so it is optimistic there (break-it: the printed rise was found 60% of the time, not
    80%); it is flagged and shown with "≥"."""
    import pandas as pd

    from lmra.monitor import _add_detectable_rise, format_detectable

    def scores(task, h):
        return pd.DataFrame({"comparison": "f vs m", "domain": "d", "task": task, "h": h})

    plain_h = np.r_[np.full(2, 0.89), np.zeros(98)]
    reverse_h = np.r_[np.full(2, 0.89), np.full(2, -0.89), np.zeros(96)]
    run = pd.concat([scores("plain", plain_h), scores("reverse", plain_h)])
    base = pd.concat([scores("plain", plain_h), scores("reverse", reverse_h)])
    tests = pd.DataFrame({"comparison": "f vs m", "domain": "d", "task": ["plain", "reverse"], "n_run": 100,
                          "n_base": 100, "p_regress": 0.5})
    _add_detectable_rise(tests, run, base, 0.0, 0.05)
    t = tests.set_index("task")
    assert not t.loc["plain", "mde_lower_bound"] and t.loc["reverse", "mde_lower_bound"]
    shown = format_detectable(t.loc["reverse", "mde"], t.loc["reverse", "base_rate"], t.loc["reverse", "mde_rate"],
                              t.loc["reverse", "mde_lower_bound"])
    assert shown.startswith("≥ +") and not format_detectable(
        t.loc["plain", "mde"], t.loc["plain", "base_rate"], t.loc["plain", "mde_rate"],
        t.loc["plain", "mde_lower_bound"]).startswith("≥")


def test_the_detectable_rise_is_a_lower_bound_with_a_noisy_judge():
    """Statistics-review finding: with a judge adding logit noise (SD 1) to every option, the
    check found the printed rise 57–74% of the time, not 80%: in-between scores break the
    two-point model. Such scores (more than 2% of prompts at 0.1 < |h| < 0.5) make every task's
    detectable rise a lower bound ("≥"); a clean judge's (SD 0.1) do not, nor several pairs per
    prompt (whose means lie in between by construction)."""
    import pandas as pd

    from lmra.judge.scoring import score_pairs
    from lmra.monitor import _add_detectable_rise, noisy_judge_scores

    rng = np.random.default_rng(7)
    stereo, plain = np.array([0.6, 0.05, 0.35]), np.array([0.03, 0.03, 0.94])

    def night(noise, n=40, rate=0.04):  # a position-preferring LMRA (+1 logit on A) with logit noise
        kind = rng.random(n) < rate
        probs = []
        for c in (np.where(kind[:, None], stereo, plain), np.where(kind[:, None], stereo[[1, 0, 2]], plain)):
            lg = np.log(c) + rng.normal(0, noise, c.shape)
            lg[:, 0] += 1.0
            probs.append(np.exp(lg) / np.exp(lg).sum(1, keepdims=True))
        return pd.DataFrame({"comparison": "f vs m", "domain": "d", "task": "t",
                             "h": score_pairs(probs[0], probs[1], "min")[1], "n_pairs": 1})

    tests = lambda: pd.DataFrame({"comparison": "f vs m", "domain": "d", "task": ["t"], "n_run": 40,  # noqa: E731
                                  "n_base": 40, "p_regress": 0.5})
    for noise, want in ((0.1, False), (1.0, True)):
        run, base = night(noise), night(noise)
        assert noisy_judge_scores(run, base) is want
        t = tests()
        _add_detectable_rise(t, run, base, 0.0, 0.05 / 9)
        assert bool(t.loc[0, "mde_lower_bound"]) is want and np.isfinite(t.loc[0, "mde"])
    several = night(1.0).assign(n_pairs=5)
    assert not noisy_judge_scores(several, several)


@pytest.mark.parametrize("baseline", [None, "last"])
def test_a_damaged_history_stops_the_audit_before_any_call(tmp_path, capsys, baseline):
    """Break-it finding: a damaged history.sqlite was found only after every model call, with a
    complete run folder that was never registered. It is an I/O failure naming the file before
    anything is called or written."""
    from test_gates import FLAT, write_config

    from lmra.cli import main

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "history.sqlite").write_text("not a database, but the file of something else\n" * 20)
    status = main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]
                  + (["--baseline", baseline] if baseline else []))
    err = " ".join(capsys.readouterr().err.split())
    assert status == 1 and f"I/O failure: {tmp_path / 'reports' / 'history.sqlite'}: the run history" in err, err
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["history.sqlite"]  # no run folder
    assert not list(tmp_path.glob("*.sqlite*"))  # no cache either: nothing was called


def test_a_comparison_no_run_has_is_named_not_an_empty_answer(runs, lmra_cli, capsys, tmp_path):
    """Break-it finding: 'lmra compare A B --comparison nope' exited 0 with "0 tasks", 'lmra history
    --comparison nope' ignored the filter, and with --task blamed the task."""
    hist = tmp_path / "h.sqlite"
    base, rise = str(runs["base"]), str(runs["rise"])
    assert lmra_cli(["compare", base, rise, "--comparison", "nope", "--history", str(hist)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "neither run has comparison 'nope'" in err and "'female vs male'" in err
    assert lmra_cli(["compare", base, rise, "--comparison", "female vs male", "--history", str(hist)]) == 0
    capsys.readouterr()
    assert lmra_cli(["check", rise, "--baseline", base, "--history", str(hist)]) == 3  # (registers both)
    capsys.readouterr()
    assert lmra_cli(["history", "--history", str(hist), "--comparison", "nope"]) == 2
    assert "give --task" in capsys.readouterr().err
    assert lmra_cli(["history", "--history", str(hist), "--task", "write a story", "--comparison", "nope"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "never measured in comparison 'nope'" in err and "'female vs male'" in err
    assert lmra_cli(["history", "--history", str(hist), "--task", "write a story", "--comparison",
                     "female vs male"]) == 0


@pytest.mark.parametrize("argv", [["report", "typo"], ["check", "typo", "--baseline", "last"], ["pin", "typo"],
                                  ["export", "typo", "--format", "csv"], ["compare", "typo", "typo2"],
                                  ["plan", "--pilot", "typo", "--rate", "0.1"]])
def test_a_mistyped_run_id_creates_no_history(tmp_path, monkeypatch, lmra_cli, capsys, argv):
    """Break-it finding: in a folder without reports, a mistyped run id was refused (exit 2) after
    ./reports/history.sqlite had been created, and 'lmra history' then said "no finished runs"."""
    monkeypatch.chdir(tmp_path)
    assert lmra_cli(argv) == 2
    assert "no such run folder" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()


def test_a_quiet_night_says_what_it_rules_out_in_the_history_json_page_and_metrics(runs, lmra_cli, capsys,
                                                                                   tmp_path):
    """New-user finding: the console says a "no regression" check detects rises of +X or more
    only, but lmra history, the history page and Prometheus said "no regression" without it."""
    import re

    from lmra.history import History

    reports = tmp_path / "reports"
    for key in ("base", "same"):
        shutil.copytree(runs[key], reports / runs[key].name)
    hist = reports / "history.sqlite"
    assert lmra_cli(["check", str(reports / runs["same"].name), "--baseline", str(reports / runs["base"].name),
                     "--history", str(hist)]) == 0
    with History(hist) as h:
        check = h.latest_check(runs["same"].name)
    mde = check["result"].loc[check["result"]["p_regress"].notna(), "mde"].dropna()
    lo, hi = float(mde.min()), float(mde.max())
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", str(reports), "--json"]) == 0
    row = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}[runs["same"].name]
    assert row["check"]["detectable"]["min"] == pytest.approx(lo) and row["check"]["detectable"]["max"] == \
        pytest.approx(hi)
    # the overall row's figure first (fresh-user finding, s37: only the tasks' +0.86 was said, the
    # overall row detected +0.07)
    whole = check["overall"].loc[check["overall"]["p_regress"].notna(), "mde"].dropna()
    assert len(whole) == 1 and float(whole.iloc[0]) < lo
    assert row["check"]["detectable"]["overall_min"] == pytest.approx(float(whole.iloc[0]))
    span = (f"the overall net rating detects rises of {float(whole.iloc[0]):+.2f} or more, single tasks {lo:+.2f}"
            + ("" if round(lo, 2) == round(hi, 2) else f" to {hi:+.2f}") + " or more only")
    assert lmra_cli(["check", str(reports / runs["same"].name), "--baseline", str(reports / runs["base"].name),
                     "--history", str(hist)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"overall net rating (1 tested; it detects rises of {float(whole.iloc[0]):+.2f} or more)" in said
    assert lmra_cli(["history", "--reports-dir", str(reports)]) == 0
    assert span in " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert lmra_cli(["report", "--history", "--reports-dir", str(reports)]) == 0
    assert span in " ".join((reports / "history.html").read_text().split())
    assert lmra_cli(["export", str(reports / runs["same"].name), "--format", "prometheus", "--out",
                     str(tmp_path / "prom")]) == 0
    prom = next((tmp_path / "prom").glob("*.prom")).read_text()
    values = [float(v) for v in re.findall(r"^lmra_task_detectable_rise\{.*\} (\S+)$", prom, re.M)]
    assert values and min(values) == pytest.approx(lo) and max(values) == pytest.approx(hi)


@pytest.mark.parametrize("damage", ["{bad", "null", "[1]", '"x"'])
def test_a_damaged_stored_check_is_named_not_a_traceback(runs, lmra_cli, capsys, tmp_path, damage):
    """Break-it finding: a stored check whose ``result`` is not a JSON list of rows made ``lmra
    history`` (also --json), ``lmra report --history`` and the Prometheus export end in a
    traceback, every night after. One paragraph naming the file, the table, the row and the field,
    with the repair, exit 2."""
    import sqlite3

    hist = tmp_path / "h.sqlite"
    base, rise = str(runs["base"]), str(runs["rise"])
    assert lmra_cli(["check", rise, "--baseline", base, "--history", str(hist)]) == 3
    capsys.readouterr()
    with sqlite3.connect(hist) as db:
        db.execute("UPDATE checks SET result = ?", (damage,))
        rowid = db.execute("SELECT rowid FROM checks").fetchone()[0]
    commands = [["history", "--history", str(hist)], ["history", "--history", str(hist), "--json"],
                ["export", rise, "--format", "prometheus", "--history", str(hist), "--out", str(tmp_path / "m.prom")]]
    for argv in commands:
        status = lmra_cli(argv)
        out = capsys.readouterr()
        err = " ".join(out.err.split())
        assert status == 2, (argv, out.err)
        assert "Traceback" not in out.err and "table 'checks', row " + str(rowid) in err, err
        assert str(hist) in err and "result" in err and "DELETE FROM checks WHERE rowid" in err, err
    assert not (tmp_path / "m.prom").exists()


def test_a_report_that_cannot_be_rendered_does_not_hide_the_regression(runs, tmp_path, monkeypatch, capsys):
    """Fresh-user finding: report.html's template could not format a value (a null position
    logit), and the audit of a regression night ended with a traceback and exit 1 — not 3, so
    nightly.sh exported nothing. A bug in the report is one warning now; the verdict stands."""
    import lmra.report.html
    from lmra.cli.monitor import monitor_after_audit

    def broken(*args, **kwargs):
        raise TypeError("must be real number, not NoneType")

    monkeypatch.setattr(lmra.report.html, "render_report", broken)
    reports = tmp_path / "reports"
    for key in ("base", "rise"):
        shutil.copytree(runs[key], reports / runs[key].name)
    (reports / runs["rise"].name / "report.html").unlink(missing_ok=True)
    capsys.readouterr()
    assert monitor_after_audit(reports / runs["rise"].name, baseline="last") == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "report.html could not be written (TypeError: must be real number, not NoneType;" in err
    assert "the verdict and the exit status stand" in err
    assert not (reports / runs["rise"].name / "report.html").exists()


def test_a_stored_check_keeps_every_number_exact(runs, tmp_path):
    """Fresh-user finding: the history stored a check's rows through pandas' to_json, which rounds
    to 10 decimals: a baseline's net rating 0.19374999999999998 (+0.1937 on the console, in
    per_task.csv and the check's JSON) came back 0.19375, printed +0.1938 on the history page and
    in a report.html rewritten from the stored check. Stored exactly, missing values as null."""
    res = check_regression(load_run(runs["rise"]), load_run(runs["base"]))
    res.tests.loc[res.tests.index[0], "h_base"] = 0.19374999999999998
    res.tests.loc[res.tests.index[1], "h_base"] = float("nan")
    res.overall.loc[res.overall.index[0], "h_run"] = 0.19374999999999998
    with History(tmp_path / "history.sqlite") as h:
        h.register(load_run(runs["base"]))
        h.register(load_run(runs["rise"]))
        h.record_check(res)
        stored = h.latest_check(runs["rise"].name)
    assert stored["result"]["h_base"].iloc[0] == 0.19374999999999998  # exact, not 0.19375
    assert f"{stored['result']['h_base'].iloc[0]:+.4f}" == "+0.1937"
    assert pd.isna(stored["result"]["h_base"].iloc[1])
    assert stored["overall"]["h_run"].iloc[0] == 0.19374999999999998
    assert stored["result"]["regressed"].tolist() == res.tests["regressed"].tolist()


def test_a_flag_smaller_than_the_detectable_rise_is_explained():
    """Fresh-user finding: `lmra check` flagged a −0.023 shift of two noise-level nights (Holm p
    0.045) on the row whose detectable rise read +0.64, read as a contradiction; at margin 0 such
    a drift is a regression (exit 3). The note names such rows and what the two figures mean;
    rows flagged at or above their detectable rise, unflagged rows and replays get none. Round 33:
    a real fall (30 % → 9 % of prompts stereotyped) below the detectable rise was put down to "more
    often a drift of the LMRA" — improvements get their own sentence, and each row its shares."""
    from types import SimpleNamespace

    import pandas as pd

    from lmra.cli.monitor import below_detectable_note

    tests = pd.DataFrame([
        dict(comparison="female vs male", task="career advice", diff=-0.0230, mde=0.6375, regressed=False, improved=True,
             base_rate=0.0, run_rate=0.0),
        dict(comparison="female vs male", task="write a story", diff=0.0100, mde=0.3, regressed=False, improved=False,
             base_rate=0.1, run_rate=0.1),
        dict(comparison="female vs male", task="cooking", diff=0.5, mde=0.3, regressed=True, improved=False,
             base_rate=0.1, run_rate=0.6),
        dict(comparison="female vs male", task="poems", diff=0.021, mde=0.4, regressed=True, improved=False,
             base_rate=0.2, run_rate=0.2)])
    overall = pd.DataFrame([dict(comparison="female vs male", task="all tasks", diff=-0.0195, mde=float("nan"),
                                 regressed=False, improved=True, base_rate=0.1, run_rate=0.1)])
    result = SimpleNamespace(tests=tests, overall=overall, margin=0.0, replayed=False)
    note = below_detectable_note(result)
    assert note.startswith("Flagged though smaller than the detectable rise: poems (female vs male) +0.0210 "
                           "(stereotyped prompts 20% → 20%), detectable rise +0.4000. The detectable rise is that of a "
                           "rise made of stereotyped prompts"), note
    assert "The check's margin (0) sets the smallest rise that counts: --margin" in note
    assert ("Improvements flagged though smaller than the detectable rise: career advice (female vs male) -0.0230 "
            "(stereotyped prompts 0% → 0%), detectable rise +0.6375. The detectable rise is the smallest rise this "
            "check flags 80% of the time; it bounds no fall.") in note
    assert "write a story" not in note and "cooking" not in note and "all tasks" not in note
    only_fall = below_detectable_note(SimpleNamespace(tests=tests.iloc[:3], overall=None, margin=0.0, replayed=False))
    assert only_fall.startswith("Improvements flagged") and "new stereotype" not in only_fall
    assert below_detectable_note(SimpleNamespace(tests=tests.iloc[1:3], overall=None, margin=0.0, replayed=False)) is None
    assert below_detectable_note(SimpleNamespace(tests=tests, overall=overall, margin=0.0, replayed=True)) is None
    # (fresh-user finding, s47) a rise the share of stereotyped prompts carries (3% → 8%) is not put down to a drift
    carried = pd.DataFrame([dict(comparison="female vs male", task="all tasks", diff=0.0508, mde=0.0735,
                                 regressed=True, improved=False, base_rate=0.03, run_rate=0.08)])
    note = below_detectable_note(SimpleNamespace(tests=carried, overall=None, margin=0.0, replayed=False))
    assert note.startswith("Flagged though smaller than the detectable rise, with more stereotyped prompts: all tasks "
                           "(female vs male) +0.0508 (stereotyped prompts 3% → 8%)"), note
    assert "drift" not in note and "this one was" in note


def test_last_passes_over_a_night_that_breached_its_release_gates(runs, lmra_cli, capsys, tmp_path):
    """Fresh-user finding (s34): night 3 regressed and breached its gates (exit 6); night 4, the
    chatbot still biased, was checked against night 3 — "No regression" — and only the gates kept
    its exit status. ``last`` now passes over a night that did not meet its recorded gates (a first
    night is not pinned for the same reason), saying so; when every earlier night breached its
    gates, it takes the newest and says that too."""
    import shutil

    copies = {k: tmp_path / "reports" / runs[k].name for k in ("base", "rise", "same")}
    for k, dst in copies.items():
        shutil.copytree(runs[k], dst)
    # the night with the rise breaches a gate on 'write a story' (its net rating rose to about 0.5)
    assert lmra_cli(["gate", str(copies["rise"]), "--gate", "max_net_rating=0.3", "--record"]) == 6
    hist = tmp_path / "reports" / "history.sqlite"
    for dst in copies.values():
        register_run(dst, history=hist)
    with History(hist) as h:
        baseline, notes = h.last_baseline(load_run(copies["same"]))
    assert baseline.run_id == runs["base"].name
    assert notes == [f"'--baseline last' passed over {runs['rise'].name}: it did not meet its release gates"]
    # the check says it, and tests the unchanged night against the night before the rise
    capsys.readouterr()
    assert lmra_cli(["check", str(copies["same"]), "--baseline", "last", "--history", str(hist)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"vs baseline {runs['base'].name}" in out and "it did not meet its release gates" in out
    # every earlier night breached its gates: the newest, with a note
    assert lmra_cli(["gate", str(copies["base"]), "--gate", "max_net_rating=-0.9", "--record"]) == 6
    with History(hist) as h:
        h.register(load_run(copies["base"]))
        baseline, notes = h.last_baseline(load_run(copies["same"]))
    assert baseline.run_id == runs["rise"].name
    assert any("found no earlier run that met its release gates" in n for n in notes)


@pytest.mark.parametrize("between", ["; ", "\n"])
def test_the_history_cell_names_five_regressed_tasks_and_counts_the_rest(between):
    """Fresh-user finding (s37): a night with 27 regressed tasks made every line of a piped
    ``lmra history`` about 4,000 characters wide (the cell named each task)."""
    from lmra.cli.monitor import MAX_TASKS_NAMED, _check_cell

    tasks = [f"task {i:02d}" for i in range(27)]
    regressed = {("female vs male", "d", t): {} for t in tasks}
    check = {"baseline_id": "20260101-000000-nightly", "refused": None, "n_tested": 27, "n_overall_tested": 1,
             "replayed": False, "unrated_rise": "", "verdict": "regression", "regressed": regressed,
             "overall_regressed": {"female vs male": {}}, "improved": {}, "warnings": []}
    cell = _check_cell(check, between)
    assert "27 of 27 tested tasks" in cell and "overall (female vs male)" in cell
    assert all(f"{t} (female vs male)" in cell for t in tasks[:MAX_TASKS_NAMED])
    assert not any(t in cell for t in tasks[MAX_TASKS_NAMED:])
    assert f"and {27 - MAX_TASKS_NAMED} more ('lmra check RUN --baseline 20260101-000000-nightly' lists them)" in cell
    assert max(len(line) for line in cell.splitlines()) < 400
    check["regressed"] = dict(list(regressed.items())[:MAX_TASKS_NAMED])  # five: all named, nothing counted
    assert "more (" not in _check_cell(check, between)


def test_a_full_disk_in_an_unnamed_sqlite_database_is_not_advised_to_move_the_cache(tmp_path, monkeypatch, capsys):
    """Fault break-it (s44): SQLite's 'database or disk is full' from a database lmra could not name
    ended with the advice to move the call cache aside — which pays for every call again; a full disk
    needs space. A damaged database keeps that advice."""
    import argparse
    import sqlite3

    import lmra.cache
    from lmra.cli import report_failure

    monkeypatch.setattr(lmra.cache, "USED_PATHS", {str(tmp_path / "cache.sqlite")})
    assert report_failure(sqlite3.OperationalError("database or disk is full"), argparse.Namespace()) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "free space on the disk that filled" in err and "moved aside" not in err, err
    assert report_failure(sqlite3.DatabaseError("database disk image is malformed"), argparse.Namespace()) == 1
    assert "a damaged call cache can be moved aside" in " ".join(capsys.readouterr().err.split())


def test_a_report_is_never_written_over_another_runs_report(runs, lmra_cli, capsys, tmp_path):
    """Bad-input break-it (s45): `lmra report RUN_A --out RUN_B/report.html` replaced run B's page
    with A's numbers, exit 0. A page for one run written into another run's folder is an input error
    naming --out; the run's own folder, and any other folder, are fine."""
    hist = tmp_path / "h.sqlite"
    target = runs["rise"] / "report.html"
    before = target.read_bytes() if target.exists() else None
    rc = lmra_cli(["report", str(runs["base"]), "--out", str(target), "--history", str(hist)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and f"{target}: option --out: {runs['rise'].resolve()} is another run's folder" in err, err
    assert (target.read_bytes() if target.exists() else None) == before
    deeper = runs["rise"] / "exports" / "report.html"  # nor inside it (round-2 break-it, s45)
    assert lmra_cli(["report", str(runs["base"]), "--out", str(deeper), "--history", str(hist)]) == 2
    assert "is another run's folder" in capsys.readouterr().err and not deeper.exists()
    assert lmra_cli(["report", str(runs["base"]), "--out", str(tmp_path / "base.html"), "--history", str(hist)]) == 0
    assert (tmp_path / "base.html").is_file()

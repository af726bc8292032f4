"""The warehouse of nights (issue 15, goal 3): every finished run's per-pair and per-task tables
land in ``reports/warehouse/`` (Hive partitions ``run=…/date=…``), readable across nights by
pyarrow/pandas and DuckDB without lmra. Runs are real ``lmra audit`` commands against a local
OpenAI-compatible server (tests/faultserver.py); the second night is sharded and merged."""

from __future__ import annotations

import shutil

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from conftest import run_folders, rerecord_files
from faultserver import FaultServer, audit_config
from lmra.runfolder import load_run
from lmra.warehouse import SCHEMA_VERSION, partition_value

TASKS = ["write a story", "career advice", "exercise plan"]


def _nights(tmp_path, capsys):
    """Night 1: an unsharded audit; night 2: the same audit in two shards, merged. Returns
    (reports folder, [night-1 run folder, merged run folder], shard folders)."""
    from lmra.cli import main

    out = tmp_path / "reports"
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", out, name="nightly", tasks=TASKS)
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--allow-unvalidated-judge"]) == 0
        (night1,) = run_folders(out, "nightly")
        for i in (1, 2):
            assert main(["audit", "--config", str(cfg), "--no-progress", "--seed", "1", "--shard", f"{i}/2",
                         "--allow-unvalidated-judge"]) == 0
    shards = sorted(p for p in out.iterdir() if "-shard" in p.name)
    assert len(shards) == 2 and "lmra merge" in capsys.readouterr().out
    assert main(["merge", *map(str, shards), "--no-report"]) == 0
    night1_, night2 = run_folders(out, "nightly")  # the merged one may be <stamp>-nightly-2 (same second)
    assert night1_ == night1
    capsys.readouterr()
    return out, [night1, night2], shards


def test_runs_land_in_a_partitioned_dataset_read_by_pyarrow_pandas_and_duckdb(tmp_path, capsys):
    from lmra.cli import main

    out, runs, shards = _nights(tmp_path, capsys)
    wh = out / "warehouse"
    pairs = {r.name: load_run(r).ratings for r in runs}
    files = sorted(p.relative_to(wh).as_posix() for p in wh.rglob("*.parquet"))
    assert len(files) == 8 and not any(s.name in f for s in shards for f in files)  # one file per table per run
    for r in runs:
        date = load_run(r).started[:10]
        for table in ("per_pair", "per_task", "overall", "per_domain"):
            assert f"{table}/run=nightly/date={date}/{r.name}.parquet" in files
    # the headline of each night, as summary.json and the console have it (break-it finding: no overall rows)
    overall = pd.read_parquet(wh / "overall")
    for r in runs:
        (want,) = load_run(r).summary["overall"]
        got = overall[overall["run_id"] == r.name]
        assert len(got) == 1 and got["comparison"].iloc[0] == f"{want['group_a']} vs {want['group_b']}"
        for col in ("net_rating", "ci_low", "ci_high", "forward_rate", "reverse_rate"):
            assert float(got[col].iloc[0]) == pytest.approx(want[col])
        assert int(got["n_pairs"].iloc[0]) == want["n_pairs"] and "task" not in got and "domain" not in got
    # each domain's row as summary.json per_domain has it (known gap, s43: not in the warehouse)
    domains = pd.read_parquet(wh / "per_domain")
    for r in runs:
        r12 = lambda x: None if x is None or x != x else round(float(x), 12)  # noqa: E731 (no CI: None / NaN)
        want = sorted((d["domain"], r12(d["net_rating"]), r12(d["ci_high"]), d["n_pairs"])
                      for d in load_run(r).summary["per_domain"])
        got = domains[domains["run_id"] == r.name]
        assert len(want) >= 2 and sorted((d, r12(x), r12(c), int(n)) for d, x, c, n in zip(
            got["domain"], got["net_rating"], got["ci_high"], got["n_pairs"])) == want

    # pyarrow.dataset with Hive partitions, and pandas on the same folder
    dataset = ds.dataset(wh / "per_pair", format="parquet", partitioning="hive")
    t = dataset.to_table().to_pandas()
    assert len(t) == sum(len(p) for p in pairs.values())
    assert set(t["run"]) == {"nightly"} and set(t["run_id"]) == {r.name for r in runs}
    assert set(t["schema_version"]) == {SCHEMA_VERSION}
    one = t[t["run_id"] == runs[1].name].sort_values("pair_id").reset_index(drop=True)
    ref = pairs[runs[1].name].sort_values("pair_id").reset_index(drop=True)
    assert list(one["pair_id"]) == list(ref["pair_id"])
    pd.testing.assert_series_equal(one["h"].astype(float), ref["h"].astype(float), check_names=False)
    meta = pq.read_schema(next((wh / "per_pair").rglob(f"{runs[0].name}.parquet"))).metadata
    assert meta[b"lmra.schema_version"] == str(SCHEMA_VERSION).encode() and meta[b"lmra.table"] == b"per_pair"
    tasks = pd.read_parquet(wh / "per_task")
    assert len(tasks) == sum(len(load_run(r).per_task) for r in runs)
    # which model the endpoint said answered, and which lmra measured (fresh-user finding, s44)
    import lmra

    for r in runs:
        served = load_run(r).manifest["target"]["served"]["model"]
        rows = tasks[tasks["run_id"] == r.name]
        assert served and set(rows["target_served_model"]) == {", ".join(served)}
        assert set(rows["lmra_version"]) == {lmra.__version__}
        # and which model rated (nightly trial, s46: a judge swapped behind one configured id was one series)
        judged = load_run(r).manifest["judge"]["served"]["model"]
        assert judged and set(rows["judge_served_model"]) == {", ".join(judged)}

    # DuckDB across nights, partitions as columns
    con = duckdb.connect()
    got = con.execute(
        f"SELECT run, run_id, count(*) AS n, sum(n_pairs) AS scored FROM read_parquet('{wh}/per_task/**/*.parquet', "
        "hive_partitioning = true) GROUP BY run, run_id ORDER BY run_id").fetchall()
    assert got == [("nightly", r.name, len(load_run(r).per_task), int(load_run(r).per_task["n_pairs"].sum()))
                   for r in runs]
    n = con.execute(f"SELECT count(*) FROM read_parquet('{wh}/per_pair/**/*.parquet', hive_partitioning = true) "
                    "WHERE valid AND date = ?", [load_run(runs[0]).started[:10]]).fetchone()[0]
    assert n == sum(int(p["valid"].sum()) for p in pairs.values())

    # backfill: the same files again from the run folders; a shard is refused (exit 2)
    before = {f: pd.read_parquet(wh / f) for f in files}
    shutil.rmtree(wh)
    assert main(["warehouse", "add", *map(str, runs)]) == 0
    for f, df in before.items():
        pd.testing.assert_frame_equal(pd.read_parquet(wh / f), df)
    assert main(["warehouse", "add", str(shards[0])]) == 2
    assert "shard" in capsys.readouterr().err
    assert not list(wh.rglob("*.tmp")) and not (wh / ".staging").exists()  # nothing half-written is left


def test_partition_values_are_percent_encoded():
    assert partition_value("nightly run_2.x-1") == "nightly run_2.x-1"
    assert partition_value("a/b=c") == "a%2Fb%3Dc"


def test_a_warehouse_that_cannot_be_written_leaves_the_run_complete_and_exits_1(tmp_path, capsys):
    """A file where the warehouse folder should be: the audit's run folder is complete and in the
    history, stderr names the path, no traceback, exit status 1 with its reason on the last line;
    'lmra warehouse add' lands the run once the path is free."""
    from lmra.cli import main

    out = tmp_path / "reports"
    out.mkdir()
    (out / "warehouse").write_text("not a folder\n")
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", out, name="nightly", tasks=TASKS)
        status = main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--allow-unvalidated-judge"])
    cap = capsys.readouterr()
    assert status == 1
    err = " ".join(cap.err.split())
    assert "Traceback" not in cap.err and "warehouse not updated" in err and str(out / "warehouse") in err
    # the warehouse is named, not the run's table nor an option never given (break-it finding, s40)
    assert f"the warehouse {out / 'warehouse'} cannot be created: it, or a folder above it, is a file" in err
    assert "per_pair" not in err and "--out" not in err
    assert "exit status 1: the warehouse was not updated" in " ".join(cap.out.split())
    run = next(p for p in out.iterdir() if p.name.endswith("-nightly"))
    assert load_run(run).status == "complete" and (run / "per_task.csv").is_file()
    # a file named by --warehouse is that option's error (break-it finding: it blamed the run's per_pair table
    # and an option --out that was not given)
    capsys.readouterr()
    assert main(["warehouse", "add", str(run), "--warehouse", str(out / "warehouse")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{out / 'warehouse'}: option --warehouse: is a file" in err and "per_pair" not in err and "--out" not in err
    (out / "warehouse").unlink()
    assert main(["warehouse", "add", str(run)]) == 0
    assert len(list((out / "warehouse").rglob("*.parquet"))) == 4


def test_a_run_whose_export_fails_half_way_leaves_the_warehouse_as_it_was(tmp_path, capsys):
    """per_task cannot be exported (a damaged per_task.csv): 'lmra warehouse add' fails without
    landing per_pair alone — readers never see a run with one table of two — and with no
    traceback; the run, repaired, lands both."""
    from lmra.cli import main
    from test_shard_merge import _clean_run

    run = _clean_run(tmp_path, tmp_path / "reports" / "20261201-020000-nightly").run_dir
    good = (run / "per_task.csv").read_bytes()
    (run / "per_task.csv").write_text('garbage,,\n"\n')
    capsys.readouterr()
    assert main(["warehouse", "add", str(run)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err and run.name in err and "per_task" in err and "nothing was added" in err
    from lmra.console import make_console
    from lmra.cli.scale import after_run

    reasons: dict[int, str] = {}  # after an audit or a merge: reported, exit status 1, the checks go on
    assert after_run(run, make_console(), reasons) is False and "warehouse was not updated" in reasons[1]
    assert "warehouse not updated" in " ".join(capsys.readouterr().err.split())
    wh = tmp_path / "reports" / "warehouse"
    assert not list(wh.rglob("*.parquet")) and not (wh / ".staging").exists()
    (run / "per_task.csv").write_bytes(good)
    assert main(["warehouse", "add", str(run)]) == 0
    assert sorted(p.relative_to(wh).parts[0] for p in wh.rglob("*.parquet")) == ["overall", "per_domain", "per_pair", "per_task"]


def test_a_numeric_run_name_stays_a_string_with_the_documented_partitioning(tmp_path):
    """A run named "007": with docs/exports.md's explicit Hive partitioning pyarrow and pandas
    read run = "007" (inferred partitions would give the number 7), DuckDB's hive_partitioning
    too, and the file's own run_name column agrees."""
    import pyarrow as pa

    from lmra.config import AuditConfig
    from lmra.warehouse import add_run
    from test_shard_merge import _clean_run

    run = _clean_run(tmp_path, tmp_path / "reports" / "20261201-020000-007").run_dir
    cfg = AuditConfig.model_validate({"name": "007"})  # a valid run name
    text = (run / "config.toml").read_text(encoding="utf-8")
    (run / "config.toml").write_text(text.replace('name = "nightly"', f'name = "{cfg.name}"', 1), encoding="utf-8")
    rerecord_files(run)
    add_run(run)
    wh = tmp_path / "reports" / "warehouse" / "per_task"
    assert [p.name for p in wh.iterdir()] == ["run=007"]
    hive = ds.partitioning(pa.schema([("run", pa.string()), ("date", pa.string())]), flavor="hive")
    t = ds.dataset(wh, format="parquet", partitioning=hive).to_table(filter=ds.field("run") == "007").to_pandas()
    assert len(t) == len(load_run(run).per_task) > 0 and set(t["run_name"]) == {"007"}
    assert set(pd.read_parquet(wh, partitioning=hive)["run"].astype(str)) == {"007"}
    got = duckdb.sql(f"SELECT DISTINCT run FROM read_parquet('{wh}/**/*.parquet', hive_partitioning = true)").fetchall()
    assert [str(r[0]) for r in got] == ["007"]


def test_a_shard_whose_judge_fails_exits_0_and_the_merge_exits_5(tmp_path, capsys):
    """The local server's LMRA fails the judge check. Unwaived, a shard still exits 0 once its
    folder is written (saying the judge failed), so job runners go on to the merge; the merge
    gives the night's judge status and exits 5 (docs/scale.md, "A shard's exit status")."""
    from lmra.cli import main

    out = tmp_path / "reports"
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", out, name="nightly", tasks=TASKS)
        for i in (1, 2):
            assert main(["audit", "--config", str(cfg), "--no-progress", "--seed", "1", "--shard", f"{i}/2"]) == 0
            text = " ".join(capsys.readouterr().out.split())
            assert "judge failed validation in this shard" in text and "exit status 0" in text
    shards = sorted(p for p in out.iterdir() if "-shard" in p.name)
    assert len(shards) == 2
    assert main(["merge", *map(str, shards), "--no-report"]) == 5
    assert "exit status 5" in " ".join(capsys.readouterr().out.split())


def test_the_warehouse_lands_a_run_whose_history_cannot_be_opened_and_while_its_report_is_written(tmp_path, capsys):
    """The warehouse is landed while the report process writes report.html (after the check):
    a history that cannot be opened (a folder where history.sqlite should be) still gets the run
    into the warehouse, said on the console, with the history failure's exit status; with a
    report, the warehouse line comes before the report's."""
    from lmra.cli import main

    out = tmp_path / "reports"
    (out / "history.sqlite").mkdir(parents=True)
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", out, name="nightly", tasks=TASKS)
        status = main(["audit", "--config", str(cfg), "--no-progress", "--allow-unvalidated-judge"])
        cap = capsys.readouterr()
        assert status == 1 and "Traceback" not in cap.err
        assert "history" in " ".join(cap.err.split())
        assert len(list((out / "warehouse").rglob("*.parquet"))) == 4 and "Warehouse: " in cap.out
        (out / "history.sqlite").rmdir()
        assert main(["audit", "--config", str(cfg), "--no-progress", "--allow-unvalidated-judge"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.index("Warehouse: ") < text.index("HTML report: ")
    assert len(list((out / "warehouse").rglob("*.parquet"))) == 8


@pytest.mark.parametrize("earlier", [False, True])
def test_a_partition_that_cannot_be_written_lands_no_table_of_the_run(tmp_path, capsys, monkeypatch, earlier):
    """Fault break-it (s37): when the third table's partition folder could not be made (inodes
    exhausted; here a file in its way) or its file not moved in, per_pair and per_task of the
    night had landed while the command said "warehouse not updated". Now no table lands, and a
    run landed before keeps its earlier files."""
    import os

    from lmra.cli import main
    from lmra.warehouse import table_path
    from test_shard_merge import _clean_run

    run_dir = _clean_run(tmp_path, tmp_path / "reports" / "20261201-020000-nightly").run_dir
    run, wh = load_run(run_dir), tmp_path / "reports" / "warehouse"
    if earlier:
        assert main(["warehouse", "add", str(run_dir)]) == 0
        before = {p: p.read_bytes() for p in wh.rglob("*.parquet")}
        assert len(before) == 4
        real = os.replace
        calls = []

        def flaky(src, dst):  # the third table's move fails (e.g. a disk gone read-only)
            if str(dst).endswith(".parquet") and "/.staging/" not in str(dst):
                calls.append(dst)
                if len(calls) == 3:
                    raise OSError(30, "Read-only file system")
            return real(src, dst)

        monkeypatch.setattr("lmra.warehouse.os.replace", flaky)
    else:
        blocked = table_path(wh, "overall", run).parent.parent  # overall/run=nightly: a file, not a folder
        blocked.parent.mkdir(parents=True)
        blocked.write_text("in the way")
    capsys.readouterr()
    assert main(["warehouse", "add", str(run_dir)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "no table of the run was added" in err and "Traceback" not in err
    if earlier:
        assert {p: p.read_bytes() for p in wh.rglob("*.parquet")} == before  # the earlier landing, whole
    else:
        assert not list(wh.rglob("*.parquet"))
    assert not list((wh / ".staging").glob("*")) if (wh / ".staging").exists() else True


def test_a_killed_landings_staging_folder_is_cleared_by_the_next_one(tmp_path):
    """Fault break-it (s37): ``warehouse/.staging/<run>-<pid>/`` of a landing killed mid-way stayed
    for good. The next landing removes such a folder once its process is gone and it is an hour
    old; a live process's, or a young one, stays."""
    import os
    import subprocess
    import sys
    import time

    from lmra.warehouse import STALE_STAGING_S, add_run
    from test_shard_merge import _clean_run

    run_dir = _clean_run(tmp_path, tmp_path / "reports" / "20261201-020000-nightly").run_dir
    staging = tmp_path / "reports" / "warehouse" / ".staging"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a process that has ended
    folders = {"dead_old": staging / f"r1-{gone}", "dead_young": staging / f"r2-{gone}",
               "alive_old": staging / f"r3-{os.getpid()}"}
    for f in folders.values():
        f.mkdir(parents=True)
        (f / "per_pair.parquet").write_bytes(b"x")
    old = time.time() - STALE_STAGING_S - 60
    for key in ("dead_old", "alive_old"):
        os.utime(folders[key], (old, old))
    add_run(run_dir)
    assert not folders["dead_old"].exists()
    assert folders["dead_young"].exists() and folders["alive_old"].exists()


def test_a_rerun_replaying_every_chatbot_answer_is_marked_and_the_documented_query_leaves_it_out(tmp_path, capsys):
    """s38 known gap: a re-run of a night with its seed and cache replays every chatbot answer and landed
    in the warehouse as one more night. Its rows say so (``target_calls_fresh`` 0, ``seed``), and the
    DuckDB query of docs/exports.md ("Warehouse") leaves it out while keeping the night it replayed."""
    import re
    from pathlib import Path

    from lmra.cli import main

    out = tmp_path / "reports"
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", out, name="nightly", tasks=TASKS)
        # the chatbot a model of its own, so that its calls are counted apart from the LMRA's
        cfg.write_text(cfg.read_text().replace('[target]\nprovider = "openai"\nmodel = "fake"',
                                               '[target]\nprovider = "openai"\nmodel = "bot"'))
        for _ in range(2):
            assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--seed", "7",
                         "--allow-unvalidated-judge"]) == 0
    night, rerun = run_folders(out, "nightly")
    capsys.readouterr()
    wh = out / "warehouse"
    for table in ("per_task", "overall"):
        df = pd.read_parquet(wh / table)
        by_run = df.groupby("run_id")[["seed", "target_calls_fresh", "target_calls_cached"]].agg(["min", "max"])
        assert (by_run["seed"]["min"] == 7).all() and (by_run["seed"]["max"] == 7).all()
        assert by_run.loc[night.name, ("target_calls_fresh", "min")] > 0
        assert by_run.loc[rerun.name, ("target_calls_fresh", "max")] == 0
        assert by_run.loc[rerun.name, ("target_calls_cached", "min")] == by_run.loc[night.name,
                                                                                   ("target_calls_fresh", "min")]
    doc = (Path(__file__).resolve().parents[1] / "docs" / "exports.md").read_text()
    sql = re.search(r"```sql\n(-- DuckDB: the nightly task net ratings.*?)```", doc, re.S).group(1)
    sql = sql.replace("reports/warehouse", str(wh)).replace("judge_status = 'passed'", "judge_status IS NOT NULL")
    got = duckdb.sql(sql).df()
    assert set(got["run_id"]) == {night.name} and len(got) == len(load_run(night).per_task)


def test_a_partial_night_and_the_rerun_that_completed_it_are_told_apart_by_the_documented_query(tmp_path, capsys):
    """Fresh-user finding (s42): a night left partial by the chatbot's HTTP 503s and its same-day re-run
    (which completed it from the call cache) were two rows a task in the warehouse, with no column to
    tell them apart; the documented query returned both. Rows carry ``run_status``, and the query keeps
    the complete night only."""
    import re
    from pathlib import Path

    from lmra.cli import main

    out = tmp_path / "reports"
    with FaultServer(fault_rate=0.15, faults=("http_500",), seed=5) as srv:
        cfg = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", out, name="nightly", tasks=TASKS,
                           retries=0, per_task=8, extra="[filter]\nlmra = false\n")
        night = ["audit", "--config", str(cfg), "--no-progress", "--no-report", "--seed", "7",
                 "--allow-unvalidated-judge"]
        assert main(night) == 1  # partial: more than max_failed_share of its pairs lost
        srv.fault_rate = 0.0
        assert main(night) == 0  # the re-run completes the night from the cache
    partial, complete = run_folders(out, "nightly")
    assert load_run(partial).status == "partial" and load_run(complete).status == "complete"
    capsys.readouterr()
    wh = out / "warehouse"
    df = pd.read_parquet(wh / "per_task")
    assert dict(df.groupby("run_id")["run_status"].first()) == {partial.name: "partial", complete.name: "complete"}
    doc = (Path(__file__).resolve().parents[1] / "docs" / "exports.md").read_text()
    sql = re.search(r"```sql\n(-- DuckDB: the nightly task net ratings.*?)```", doc, re.S).group(1)
    sql = sql.replace("reports/warehouse", str(wh)).replace("judge_status = 'passed'", "judge_status IS NOT NULL")
    got = duckdb.sql(sql).df()
    assert set(got["run_id"]) == {complete.name} and len(got) == len(load_run(complete).per_task)
    # the history page counts the partial run apart (it said "2 night(s)" for one night)
    assert main(["report", "--history", "--reports-dir", str(out)]) == 0
    page = " ".join((out / "history.html").read_text().split())
    assert "2 night(s) from" in page and "(1 of them partial, drawn hollow" in page


def test_a_night_completed_from_the_cache_after_its_lmra_failed_is_kept_by_the_documented_query(tmp_path, capsys):
    """Fresh-user finding (s44): a night left partial by its LMRA's HTTP 500s was completed by a re-run
    whose chatbot answers all came from the cache (``target_calls_fresh`` 0), and the documented query
    dropped it with the replays: the night vanished from the dashboard. It keeps the night now, and
    still leaves out a same-seed replay of a complete night."""
    import re
    from pathlib import Path

    from lmra.cli import main

    out = tmp_path / "reports"
    with FaultServer(fault_rate=0.3, faults=("http_500",), seed=5) as srv:
        srv.lmra_only = True
        cfg = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", out, name="nightly", tasks=TASKS,
                           retries=0, per_task=8, extra="[filter]\nlmra = false\n")
        cfg.write_text(cfg.read_text().replace('[target]\nprovider = "openai"\nmodel = "fake"',
                                               '[target]\nprovider = "openai"\nmodel = "bot"'))
        night = ["audit", "--config", str(cfg), "--no-progress", "--no-report", "--seed", "7",
                 "--allow-unvalidated-judge"]
        assert main(night) == 1  # partial: its LMRA's calls failed
        srv.fault_rate = 0.0
        assert main(night) == 0  # completed from the cache: no fresh chatbot call
        assert main(night) == 0  # a same-seed replay of the complete night (no baseline given: nothing checked)
    partial, complete, replay = run_folders(out, "nightly")
    df = pd.read_parquet(out / "warehouse" / "per_task")
    fresh = df.groupby("run_id")["target_calls_fresh"].max()
    assert fresh[partial.name] > 0 and fresh[complete.name] == 0 and fresh[replay.name] == 0
    doc = (Path(__file__).resolve().parents[1] / "docs" / "exports.md").read_text()
    sql = re.search(r"```sql\n(-- DuckDB: the nightly task net ratings.*?)```", doc, re.S).group(1)
    sql = sql.replace("reports/warehouse", str(out / "warehouse")).replace("judge_status = 'passed'",
                                                                           "judge_status IS NOT NULL")
    got = duckdb.sql(sql).df()
    assert set(got["run_id"]) == {complete.name} and len(got) == len(load_run(complete).per_task)


def test_the_documented_query_on_nights_of_two_chatbots_behind_one_model_id_and_clocks_in_two_zones(tmp_path):
    """Round-3 break-it (s44): the dashboard query told nights apart by (seed, configured model id), so
    a night of chatbot version B — same model id, another system prompt — completed from the cache
    after its LMRA failed, with a seed version A had used, was dropped; and a replay started 2 s after
    its night under another TZ sorted first as text, so both were charted. It partitions by lmra's
    own (seed, design) and orders by the start as a time now. Rows as the export writes them."""
    import re
    from pathlib import Path

    import pyarrow as pa

    rows = [  # run_id, started, seed, design, status, fresh target calls: which a dashboard should show
        ("a1", "2026-12-01T02:00:00+00:00", 7, "A", "complete", 40, True),
        ("b1p", "2026-12-02T02:00:00+00:00", 7, "B", "partial", 40, False),    # B, seed 7 again: partial
        ("b1", "2026-12-02T03:00:00+00:00", 7, "B", "complete", 0, True),      # completed from the cache
        ("b1r", "2026-12-02T03:30:00+00:00", 7, "B", "complete", 0, False),    # a replay of b1
        ("a2", "2026-12-03T03:00:00+01:00", 8, "A", "complete", 40, True),
        ("a2r", "2026-12-03T02:00:02+00:00", 8, "A", "complete", 0, False),    # 2 s later, in UTC: a replay
    ]
    for run_id, started, seed, design, status, fresh, _ in rows:
        folder = tmp_path / "warehouse" / "per_task" / "run=nightly" / f"date={started[:10]}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"schema_version": [1], "run_id": [run_id], "started": [started], "seed": [seed],
                                 "design_sha256": [design], "run_status": [status], "target_calls_fresh": [fresh],
                                 "judge_status": ["passed"], "comparison": ["female vs male"],
                                 "task": ["write a story"], "net_rating": [0.1], "ci_low": [0.0],
                                 "ci_high": [0.2]}), folder / f"{run_id}.parquet")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "exports.md").read_text()
    sql = re.search(r"```sql\n(-- DuckDB: the nightly task net ratings.*?)```", doc, re.S).group(1)
    got = set(duckdb.sql(sql.replace("reports/warehouse", str(tmp_path / "warehouse"))).df()["run_id"])
    assert got == {r[0] for r in rows if r[-1]}, got

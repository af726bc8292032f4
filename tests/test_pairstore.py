"""The run folder's per-pair Parquet file (lmra.pairstore) and the DuckDB aggregation over it
(issue 15): the same values back as written, the same tables as the pandas aggregation, run
folders of earlier versions (ratings.jsonl) still read, and no half-written file after a crash."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmra import aggregate
from lmra.pairstore import PairWriter, iter_rows, read_pairs, write_pairs
from lmra.runfolder import jsonable, prompt_scores

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "bench_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pairs_50k(tmp_path_factory):
    """50,000 synthetic rated pairs (27 tasks, 10,000 prompts × 5 samples) with every kind of
    pair: failed, refused, unlabelled, invalid, a second comparison, and NaN combiner scores;
    written as ratings.parquet and as an earlier version's ratings.jsonl."""
    df = _bench().synthetic_frame(50_000, seed=3)
    rng = np.random.default_rng(5)
    second = rng.random(len(df)) < 0.3  # a second comparison on 30 % of the pairs
    df.loc[second, "comparison"] = "Black vs White"
    df.loc[second, "group_a"], df.loc[second, "group_b"] = "Black", "White"
    unl = (rng.random(len(df)) < 0.01) & ~df["failed"] & ~df["refused"]
    df.loc[unl, ["unlabelled", "valid"]] = [True, False]
    df.loc[unl, ["q_F", "q_R", "q_N", "h"]] = math.nan
    df.loc[rng.random(len(df)) < 0.02, "h_calibrated"] = math.nan
    folder = tmp_path_factory.mktemp("pairs")
    write_pairs(folder / "ratings.parquet", df)
    with (folder / "ratings.jsonl").open("w") as fh:
        for r in df.to_dict(orient="records"):
            fh.write(json.dumps(jsonable(r)) + "\n")
    return df, folder


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b) and len(a) > 0
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False,
                                  check_exact=False, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("interval", ["betting", "t"])
def test_duckdb_tables_equal_the_pandas_tables_on_50k_pairs(pairs_50k, interval):
    df, folder = pairs_50k
    for fname in ("ratings.parquet", "ratings.jsonl"):  # the current format and an earlier run's
        path = folder / fname
        _same(aggregate.per_task(df, 0.05, interval), aggregate.per_task_sql(path, 0.05, interval))
        _same(aggregate.per_domain(df, 0.05, interval), aggregate.per_domain_sql(path, 0.05, interval))
        _same(aggregate.overall(df, 0.05, interval), aggregate.overall_sql(path, 0.05, interval))
        if interval == "betting":
            _same(aggregate.refusal_table(df, 0.05), aggregate.refusal_table_sql(path, 0.05))
            _same(prompt_scores(df), aggregate.prompt_scores_sql(path))
    pt = aggregate.per_task_sql(folder / "ratings.parquet", 0.05, interval)
    assert len(pt) == 2 * 27 and pt["n_pairs"].sum() == df["valid"].sum()
    assert set(pt["n_unlabelled"]) != {0} and set(pt["n_failed"]) != {0}


def test_per_task_csv_bytes_are_the_same_from_sql(pairs_50k, tmp_path):
    """per_task.csv written from the DuckDB table is byte-identical to the pandas one."""
    from lmra.fileio import write_csv

    df, folder = pairs_50k
    write_csv(aggregate.per_task(df), tmp_path / "a.csv")
    write_csv(aggregate.per_task_sql(folder / "ratings.parquet"), tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


def test_parquet_reads_back_the_values_written(pairs_50k):
    df, folder = pairs_50k
    back = read_pairs(folder / "ratings.parquet")
    legacy = read_pairs(folder / "ratings.jsonl")
    assert list(back.columns) == list(df.columns) == list(legacy.columns)
    for col in df.columns:
        if col in ("order1", "order2"):
            assert back[col].tolist() == legacy[col].tolist() == df[col].tolist()
        elif pd.api.types.is_float_dtype(df[col]):
            np.testing.assert_array_equal(back[col].to_numpy(float), df[col].to_numpy(float))  # NaN == NaN here
        else:
            assert back[col].tolist() == df[col].tolist(), col
    rows = iter_rows(folder / "ratings.parquet")
    assert rows[:50] == [json.loads(line) for line in (folder / "ratings.jsonl").open().readlines()[:50]]


def test_writer_uses_row_groups_and_leaves_nothing_after_a_crash(tmp_path):
    import pyarrow.parquet as pq

    df = _bench().synthetic_frame(2_500)
    with PairWriter(tmp_path / "ratings.parquet", row_group=1_000) as w:
        w.write_rows(df.to_dict(orient="records"))
    assert pq.ParquetFile(tmp_path / "ratings.parquet").metadata.num_row_groups == 3
    assert read_pairs(tmp_path / "ratings.parquet")["pair_id"].tolist() == df["pair_id"].tolist()
    with pytest.raises(RuntimeError):
        with PairWriter(tmp_path / "crash.parquet", row_group=1_000) as w:
            w.write_rows(df.head(1_500).to_dict(orient="records"))  # one row group on disk
            raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ratings.parquet"]


def test_an_earlier_run_folder_with_ratings_jsonl_is_read(run_fixture_legacy):
    from lmra.runfolder import load_run

    new, old = run_fixture_legacy
    a, b = load_run(new), load_run(old)
    assert b.pairs_path.name == "ratings.jsonl" and a.pairs_path.name == "ratings.parquet"
    assert b.ratings["pair_id"].tolist() == a.ratings["pair_id"].tolist()
    assert b.ratings["order1"].tolist() == a.ratings["order1"].tolist()
    pd.testing.assert_frame_equal(a.prompt_scores, b.prompt_scores)
    assert b.jsonl("ratings.jsonl") == a.jsonl("ratings.jsonl")


@pytest.fixture
def run_fixture_legacy(tmp_path):
    """A real audit's run folder, and a copy as an earlier version wrote it (ratings.jsonl)."""
    import shutil

    from monitor_helpers import make_run

    new = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.3, "career advice": 0.1}, seed=1,
                   n_prompts=40, samples=2)
    old = tmp_path / "old" / new.name  # the same run id
    shutil.copytree(new, old)
    with (old / "ratings.jsonl").open("w") as fh:
        for r in iter_rows(new / "ratings.parquet"):
            fh.write(json.dumps(r) + "\n")
    (old / "ratings.parquet").unlink()
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["files"], manifest["design"]  # nor file digests (lmra.digests), nor design digests
    (old / "manifest.json").write_text(json.dumps(manifest))
    return new, old


def test_exports_of_a_parquet_run_equal_those_of_its_jsonl_copy(run_fixture_legacy, tmp_path, monkeypatch):
    """The per-pair export read with DuckDB (columns and JSON fields in SQL, in chunks) gives the
    same bytes as the whole-frame path an earlier run folder takes."""
    from lmra.report import export
    from lmra.runfolder import load_run

    from lmra import pairstore

    monkeypatch.setattr(pairstore, "SMALL_FILE_BYTES", -1)  # the DuckDB path, as for a large run
    new, old = run_fixture_legacy
    for fmt in ("csv", "json"):
        a = export.export_run(load_run(new), fmt, tmp_path / "new")
        b = export.export_run(load_run(old), fmt, tmp_path / "old")
        assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    chunked = pd.concat(list(export.per_pair_chunks(load_run(new), rows=7)), ignore_index=True)
    pd.testing.assert_frame_equal(chunked, export.per_pair_table(load_run(old)))
    assert len(chunked) == 80 and chunked["order1_p_A"].notna().any()


def test_per_task_diagnostics_in_one_pass_equal_the_groupby_ones(pairs_50k):
    """In one pass over the frame, and streamed from the Parquet file in batches: the same dicts."""
    from lmra.diagnostics import judge_diagnostics, judge_diagnostics_by, judge_diagnostics_file

    df, folder = pairs_50k
    one_pass = judge_diagnostics_by(df, "task", min_order_consistency=0.9)
    by_group = {t: judge_diagnostics(g, min_order_consistency=0.9) for t, g in df.groupby("task")}
    assert list(one_pass) == list(by_group) and len(one_pass) == 27
    assert json.dumps(one_pass) == json.dumps(by_group)
    assert all(d["n_answers"] > 0 for d in one_pass.values())
    for name in ("ratings.parquet", "ratings.jsonl"):
        overall, per_task = judge_diagnostics_file(folder / name, min_order_consistency=0.9, batch_rows=7_000)
        assert json.dumps(per_task) == json.dumps(by_group)
        assert json.dumps(overall) == json.dumps(judge_diagnostics(df, min_order_consistency=0.9))


def test_duckdb_reads_give_the_report_the_same_transcripts(run_fixture_legacy, monkeypatch):
    """Large files are filtered by DuckDB (forced here for a small run), small ones read whole:
    the report's transcripts and the check's per-prompt scores are the same either way, and a
    malformed responses.jsonl line is still named."""
    from lmra import pairstore
    from lmra.errors import LmraInputError
    from lmra.report.transcripts import transcripts_context
    from lmra.runfolder import load_run

    new, _ = run_fixture_legacy
    whole = transcripts_context(load_run(new), 2)
    scores = load_run(new).prompt_scores
    monkeypatch.setattr(pairstore, "SMALL_FILE_BYTES", -1)
    assert transcripts_context(load_run(new), 2) == whole
    assert sum(len(t["pairs"]) for c in whole["comparisons"] for t in c["tasks"]) > 0
    pd.testing.assert_frame_equal(load_run(new).prompt_scores, scores)
    with (new / "responses.jsonl").open("a") as fh:
        fh.write("{oops\n")
    with pytest.raises(LmraInputError) as e:
        transcripts_context(load_run(new), 2)
    assert "responses.jsonl" in str(e.value)


def test_rows_where_of_a_small_file_are_the_filtered_rows_with_their_json_decoded(tmp_path):
    """read_pairs_where of a small Parquet file decodes the JSON cells of the rows it keeps only:
    the same frame (values and dtypes) as filtering the fully decoded file, also when nothing
    matches."""
    from lmra.pairstore import read_pairs_where

    df = _bench().synthetic_frame(600, seed=4)
    df["judge_forward"] = [{"probs": {"A": 0.1 * (i % 10)}, "mass": 1.0} if i % 7 else None for i in range(len(df))]
    tasks_sorted = sorted(set(df["task"]))
    # an extra JSON column whose rows of one task hold only ints (pandas infers its dtype from all rows)
    df["extra"] = [i if t == tasks_sorted[3] else {"i": i} for i, t in enumerate(df["task"])]
    path = tmp_path / "ratings.parquet"
    write_pairs(path, df)
    full = read_pairs(path)
    assert isinstance(full["judge_forward"].iloc[1], dict) and full["judge_forward"].iloc[0] is None
    tasks = sorted(set(full["task"]))
    for wanted in (tasks[:2], tasks[3:4], ["no such task"]):
        got = read_pairs_where(path, ["task"], [(t,) for t in wanted])
        expected = full[full["task"].isin(wanted)].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected, check_exact=True)
        assert len(got) == (0 if wanted == ["no such task"] else len(expected))

"""Per-task and per-pair exports (CSV, JSON, Parquet) with the versioned schema of docs/exports.md."""

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from monitor_helpers import lmra_cli, make_run, write_inputs  # noqa: F401  (fixture)
from lmra import Audit
from lmra.config import AuditConfig
from lmra.pairstore import iter_rows
from lmra.report.export import EXPORT_SCHEMA_VERSION, PER_PAIR_SCHEMA, PER_TASK_SCHEMA, export_run
from lmra.runfolder import load_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    return make_run(tmp, "20260101-000000-exp", {"write a story": 0.3, "career advice": 0.1}, seed=7, n_prompts=40)


def test_three_formats_carry_the_same_numbers(run_dir, tmp_path):
    run = load_run(run_dir)
    for fmt in ("csv", "json", "parquet"):
        export_run(run, fmt, tmp_path)
    csv_t = pd.read_csv(tmp_path / "per_task.csv")
    pq_t = pq.read_table(tmp_path / "per_task.parquet")
    doc = json.loads((tmp_path / "per_task.json").read_text())
    # schema: column order and version
    assert list(csv_t.columns) == list(PER_TASK_SCHEMA) == pq_t.schema.names == doc["columns"]
    assert doc["schema_version"] == EXPORT_SCHEMA_VERSION == 1 and doc["table"] == "per_task"
    assert (csv_t["schema_version"] == 1).all()
    assert pq_t.schema.metadata[b"lmra.schema_version"] == b"1"
    assert pq_t.schema.field("n_pairs").type == pa.int64() and pq_t.schema.field("net_rating").type == pa.float64()
    # values: the run's own per_task.csv
    src = pd.read_csv(run_dir / "per_task.csv").set_index("task")
    for frame in (csv_t, pq_t.to_pandas(), pd.DataFrame(doc["rows"])):
        frame = frame.set_index("task")
        assert frame.loc["write a story", "net_rating"] == pytest.approx(src.loc["write a story", "net_rating"])
        assert frame.loc["career advice", "ci_high"] == pytest.approx(src.loc["career advice", "ci_high"])
        assert frame.loc["career advice", "n_pairs"] == 20
        assert frame.loc["career advice", "comparison"] == "female vs male"
        assert frame.loc["career advice", "run_id"] == run_dir.name
        assert frame.loc["career advice", "judge_model"] == "scripted"
        assert frame.loc["career advice", "confidence"] == pytest.approx(0.95)


def test_the_overall_table_is_the_runs_headline_in_every_format(run_dir, tmp_path):
    """Break-it finding (known since round 32): the exports and the warehouse had per-task and
    per-pair rows only, so a dashboard could not chart the night's overall net rating and its CI
    without recomputing them. The `overall` table holds summary.json's overall rows."""
    from lmra.report.export import OVERALL_SCHEMA

    run = load_run(run_dir)
    paths = export_run(run, "csv", tmp_path / "c") + export_run(run, "json", tmp_path / "j") + \
        export_run(run, "parquet", tmp_path / "p", ("overall",))
    assert [p.name for p in paths] == ["per_task.csv", "per_pair.csv", "overall.csv", "per_domain.csv",
                                       "per_task.json", "per_pair.json", "overall.json", "per_domain.json",
                                       "overall.parquet"]
    (want,) = run.summary["overall"]
    pq_t = pq.read_table(tmp_path / "p" / "overall.parquet")
    doc = json.loads((tmp_path / "j" / "overall.json").read_text())
    assert doc["table"] == "overall" and pq_t.schema.metadata[b"lmra.table"] == b"overall"
    for frame in (pd.read_csv(tmp_path / "c" / "overall.csv"), pq_t.to_pandas(), pd.DataFrame(doc["rows"])):
        assert list(frame.columns) == list(OVERALL_SCHEMA) and len(frame) == 1
        row = frame.iloc[0]
        assert row["comparison"] == "female vs male" and row["run_id"] == run_dir.name
        for col in ("net_rating", "ci_low", "ci_high", "forward_rate", "reverse_rate", "p_value"):
            assert row[col] == pytest.approx(want[col])
        assert row["n_pairs"] == want["n_pairs"] and row["combiner"] == run.combiner


def test_per_pair_rows_match_ratings_file(run_dir, tmp_path):
    run = load_run(run_dir)
    assert export_run(run, "csv", tmp_path / "twice", tables=("per_task", "per_task")) == [
        tmp_path / "twice" / "per_task.csv"]  # a table named twice is written (and listed) once
    export_run(run, "parquet", tmp_path, tables=("per_pair",))
    export_run(run, "csv", tmp_path, tables=("per_pair",))
    assert not (tmp_path / "per_task.parquet").exists()
    ratings = iter_rows(run_dir / "ratings.parquet")
    t = pq.read_table(tmp_path / "per_pair.parquet")
    assert t.schema.names == list(PER_PAIR_SCHEMA)
    assert t.schema.field("valid").type == pa.bool_() and t.schema.field("sample").type == pa.int64()
    for df in (t.to_pandas(), pd.read_csv(tmp_path / "per_pair.csv")):
        df = df.set_index("pair_id")
        assert len(df) == len(ratings) == 40
        r = ratings[5]
        row = df.loc[r["pair_id"]]
        assert row["h"] == pytest.approx(r["h"]) and row["q_F"] == pytest.approx(r["q_F"])
        assert row["order1_p_A"] == pytest.approx(r["order1"]["probs"]["A"])
        assert row["order2_mass"] == pytest.approx(r["order2"]["mass"])
        assert row["name_a"] == r["name_a"] and row["schema_version"] == 1


def test_invalid_pairs_export_as_null(tmp_path):
    names, prompts = write_inputs(tmp_path / "in", 6)
    cfg = AuditConfig.model_validate(dict(name="inv", prompts=str(prompts), names=str(names), prompts_per_task=0,
                                          output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "c.sqlite"),
                                          judge_check={"enabled": False}))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "x"),
                judge=ScriptedJudge(lambda r1, r2: {"A": 1.0})).run()  # contradictory orders → invalid
    paths = export_run(load_run(res.run_dir), "json", tmp_path / "out")
    doc = json.loads(paths[1].read_text())
    assert doc["table"] == "per_pair" and len(doc["rows"]) == 6
    assert all(r["h"] is None and r["valid"] is False for r in doc["rows"])
    assert all(r["order1_p_A"] == pytest.approx(1.0) for r in doc["rows"])  # the answers are still exported
    csv = pd.read_csv(tmp_path / "out" / "per_task.csv") if (tmp_path / "out" / "per_task.csv").exists() else None
    assert csv is None  # only the requested format was written
    per_task = json.loads(paths[0].read_text())["rows"]
    assert [r["n_invalid"] for r in per_task] == [3, 3] and all(r["net_rating"] is None for r in per_task)


def test_refused_pairs_are_flagged_and_left_out_of_scores(tmp_path):
    from monitor_helpers import PHRASE

    run_dir = make_run(tmp_path, "20260101-000000-ref", {"write a story": 0.5, "career advice": 0.5}, seed=9,
                       n_prompts=40, refusal=lambda r: 1.0 if r == PHRASE else 0.0)
    run = load_run(run_dir)
    pairs = export_run(run, "parquet", tmp_path / "out", tables=("per_pair",))[0]
    df = pq.read_table(pairs).to_pandas()
    assert df["refused"].sum() == df["refusal_a"].sum() > 5 and not df["refusal_b"].any()
    assert df.loc[df["refused"], "h"].isna().all()
    per_task = run.per_task
    assert per_task["n_refusal"].sum() == df["refused"].sum()
    # the regression check's unit (per-prompt scores) counts exactly the pairs the aggregate counts
    assert len(run.prompt_scores) == per_task["n_pairs"].sum() == (~df["refused"]).sum()
    assert (run.prompt_scores["h"] == 0).all()  # only neutral–neutral pairs are left


def test_cli_export_default_folder_and_bad_format(run_dir, lmra_cli, capsys):
    assert lmra_cli(["export", str(run_dir), "--format", "parquet"]) == 0
    assert (run_dir / "exports" / "per_task.parquet").is_file()
    assert (run_dir / "exports" / "per_pair.parquet").is_file()
    assert (run_dir / "exports" / "overall.parquet").is_file()
    with pytest.raises(SystemExit) as exc:
        lmra_cli(["export", str(run_dir), "--format", "xml"])
    assert exc.value.code == 2
    assert lmra_cli(["export", str(run_dir / "nope"), "--format", "csv"]) == 2


def test_docs_list_every_column():
    doc = (ROOT / "docs" / "exports.md").read_text()
    from lmra.report.export import OVERALL_SCHEMA

    for col in list(PER_TASK_SCHEMA) + list(PER_PAIR_SCHEMA) + list(OVERALL_SCHEMA):
        assert re.search(rf"\|\s*`{re.escape(col)}`\s*\|", doc), f"docs/exports.md does not describe {col}"
    assert "| `schema_version` | int32 |" in doc and "**Schema version 1**" in doc


@pytest.mark.parametrize("damage", ['group_a,task\n"unterminated,x\n1,2,3\n', "x,y\n1,2\n"])
def test_a_damaged_per_task_table_is_an_input_error_naming_the_file(tmp_path, lmra_cli, capsys, damage):
    """A run folder whose per_task.csv is cut or foreign: export exits 2 naming the file, no
    traceback, no export written (was a raw pandas ParserError / KeyError 'group_a')."""
    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1}, seed=1, n_prompts=8)
    (run / "per_task.csv").write_text(damage)
    out = tmp_path / "exports"
    assert lmra_cli(["export", str(run), "--format", "csv", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "per_task.csv" in err and "Traceback" not in err
    assert not out.exists()  # not even the folder it named (bad-input break-it, s43: left empty)
    kept = tmp_path / "mine"  # a folder that was there stays
    kept.mkdir()
    assert lmra_cli(["export", str(run), "--format", "csv", "--out", str(kept)]) == 2
    assert kept.is_dir() and not any(kept.iterdir())


def test_the_per_domain_table_is_exported_with_its_schema(run_dir, tmp_path):
    """Fresh-user finding (s43): per-domain net ratings (methodology §1) reached a dashboard only as the
    run folder's unversioned per_domain.csv. The export's ``per_domain`` table holds them with the run's
    columns: one row per (comparison, domain), the numbers of per_domain.csv, and the share of the
    domain's scored prompts whose mean pair score is ≥ 0.5 (by hand from the per-pair rows). A run
    written before summary.json kept the rows exports its per_domain.csv."""
    from lmra.digests import rewrite
    from lmra.report.export import PER_DOMAIN_SCHEMA

    run = load_run(run_dir)
    export_run(run, "parquet", tmp_path / "p", ("per_domain",))
    got = pq.read_table(tmp_path / "p" / "per_domain.parquet").to_pandas()
    assert list(got.columns) == list(PER_DOMAIN_SCHEMA)
    want = pd.read_csv(run_dir / "per_domain.csv")
    assert len(got) == len(want) >= 1
    g, w = got.set_index("domain"), want.set_index("domain")
    for col in ("n_pairs", "net_rating", "ci_low", "ci_high", "n_prompts"):
        assert g[col].astype(float).tolist() == pytest.approx(w.loc[g.index, col].astype(float).tolist())
    pairs = run.prompt_scores
    for dom, row in g.iterrows():
        mine = pairs[pairs["domain"] == dom]
        assert row["n_scored_prompts"] == len(mine)
        assert row["n_stereotyped_prompts"] == int((mine["h"] >= 0.5).sum())
    assert (got["run_id"] == run_dir.name).all() and (got["schema_version"] == EXPORT_SCHEMA_VERSION).all()
    import shutil

    older = tmp_path / run_dir.name  # (a copy: the fixture's run is the module's)
    shutil.copytree(run_dir, older)
    summary = json.loads((older / "summary.json").read_text())
    summary.pop("per_domain")
    rewrite(older, {"summary.json": json.dumps(summary).encode()})
    export_run(load_run(older), "csv", tmp_path / "old", ("per_domain",))
    old = pd.read_csv(tmp_path / "old" / "per_domain.csv")
    assert old["net_rating"].tolist() == pytest.approx(want["net_rating"].tolist())

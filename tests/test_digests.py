"""A finished run's data files carry SHA-256 digests in manifest.json (lmra.digests): a file
changed or damaged after the run — here a ratings.parquet rewritten with one rating changed,
which still decodes — stops ``lmra check``, ``compare``, ``export`` and ``axes`` with exit 2
and one paragraph naming it, where without the records the regression verdict silently
changed. ``lmra gate`` (which adds its results to summary.json) records the new digest.
Runs are real ``lmra audit`` commands on the scripted providers of tests/test_gates.py."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmra.cli import main
from lmra.digests import RECORDED
from test_gates import audit, write_config


@pytest.fixture
def nights(tmp_path, capsys):
    """Two nights of the same audit (different seeds): (baseline folder, run folder)."""
    runs = []
    for seed in (1, 2):
        rc, out, run = audit(capsys, write_config(tmp_path, name="dig", seed=seed, n_prompts=24))
        assert rc == 0, out
        runs.append(run)
    return runs


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _check(capsys, run, base) -> tuple[int, dict | str]:
    rc, out, err = _cli(capsys, "check", run, "--baseline", base, "--allow-unvalidated-judge", "--json")
    return rc, (json.loads(out) if rc in (0, 3) else err)


def _damage_ratings(run) -> None:
    """Rewrite ratings.parquet with the first valid pair's h raised by 0.5: a readable file."""
    path = run / "ratings.parquet"
    table = pq.read_table(path)
    h = table.column("h").to_pylist()
    i = next(k for k, v in enumerate(h) if v is not None and v == v)
    h[i] = h[i] + 0.5
    table = table.set_column(table.schema.get_field_index("h"), "h", pa.array(h, type=table.schema.field("h").type))
    pq.write_table(table, path, compression="zstd")


def test_the_manifest_records_each_data_file(nights):
    run = nights[0]
    files = json.loads((run / "manifest.json").read_text())["files"]
    present = {p.name for p in run.iterdir() if p.name in RECORDED}
    assert {"ratings.parquet", "per_task.csv", "summary.json", "config.toml", "responses.jsonl"} <= present
    assert set(files) == present
    for name, rec in files.items():
        data = (run / name).read_bytes()
        assert rec == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name


def test_a_damaged_ratings_file_that_still_decodes_is_an_input_error(nights, capsys):
    base, run = nights
    rc, doc = _check(capsys, run, base)
    assert rc == 0, doc
    before = {(t["comparison"], t["task"]): t["h_base"] for t in doc["tests"]}
    _damage_ratings(base)
    rc, err = _check(capsys, run, base)
    assert rc == 2
    assert "ratings.parquet" in err and "changed or damaged since the run finished" in err
    assert "Traceback" not in err
    for argv in (["compare", base, run], ["export", base, "--format", "csv", "--table", "per_pair",
                                           "--out", base.parent / "x"]):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2 and "ratings.parquet" in err and "changed or damaged" in err, (argv, out, err)
    assert not (base.parent / "x").exists() or not any((base.parent / "x").iterdir())
    # the records deleted from a folder whose lmra writes them: refused, naming the field (break-it
    # finding: every digest check was off, an edited per_task.csv exported and gated)
    m = json.loads((base / "manifest.json").read_text())
    del m["files"]
    (base / "manifest.json").write_text(json.dumps(m))
    for argv in (["compare", base, run], ["export", base, "--format", "csv", "--out", base.parent / "y"],
                 ["gate", base, "--gate", "max_ci_high=0.5"]):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2 and "manifest.json" in err and "field 'files'" in err and "Traceback" not in err, (argv, err)
    assert not (base.parent / "y").exists()
    # the same damage without the records (a run folder of an earlier version, before the design
    # digests too): read as it is, and the baseline's numbers silently move — what the records prevent
    del m["design"]
    (base / "manifest.json").write_text(json.dumps(m))
    rc, doc = _check(capsys, run, base)
    assert rc in (0, 3), doc
    after = {(t["comparison"], t["task"]): t["h_base"] for t in doc["tests"]}
    assert after != before


@pytest.mark.parametrize("name, edit", [
    ("per_task.csv", lambda b: b.replace(b"0.", b"1.", 1)),
    ("summary.json", lambda b: b.replace(b'"n_prompts": ', b'"n_prompts": 1', 1)),
    ("config.toml", lambda b: b + b"\n# edited\n"),
])
def test_an_edited_table_summary_or_config_is_an_input_error(nights, capsys, name, edit):
    base, run = nights
    path = run / name
    data = path.read_bytes()
    assert edit(data) != data
    path.write_bytes(edit(data))
    rc, out, err = _cli(capsys, "compare", base, run)
    assert rc == 2 and name in err and "changed or damaged" in err and "Traceback" not in err, (out, err)


def test_lmra_gate_records_the_summary_it_rewrites(nights, capsys):
    base, run = nights
    rc, out, err = _cli(capsys, "gate", run, "--gate", "max_ci_high=1", "--record")
    assert rc == 0, out + err
    summary = (run / "summary.json").read_bytes()
    assert b'"gates"' in summary
    rec = json.loads((run / "manifest.json").read_text())["files"]["summary.json"]
    assert rec["sha256"] == hashlib.sha256(summary).hexdigest()
    assert _check(capsys, run, base)[0] == 0
    # a summary damaged before the gate is never recorded as sound
    (base / "summary.json").write_bytes((base / "summary.json").read_bytes() + b" ")
    rc, out, err = _cli(capsys, "gate", base, "--gate", "max_ci_high=1", "--record")
    assert rc == 2 and "summary.json" in err and "changed or damaged" in err


def test_a_missing_recorded_file_is_named(nights, capsys):
    base, run = nights
    (run / "responses.jsonl").unlink()
    rc, out, err = _cli(capsys, "axes", "--run", run)
    assert rc == 2 and "responses.jsonl" in err and "missing, though manifest.json records it" in err, (out, err)


def test_gate_record_cut_short_between_its_writes_leaves_a_readable_run(nights, capsys, monkeypatch):
    """lmra gate --record rewrites gates.json and summary.json and their records in steps: cut
    after the manifest accepts both versions, or after the files are written, the run reads."""
    import lmra.digests as digests
    import lmra.fileio as fileio

    base, run = nights
    real = fileio.atomic_open
    for cut_at in (1, 3):  # after the first manifest write; after both files (before the last manifest)
        writes = [0]

        def counting(path, mode="w", encoding="utf-8", _cut=cut_at):
            writes[0] += 1
            if writes[0] > _cut:
                raise KeyboardInterrupt  # a Ctrl-C between two writes
            return real(path, mode, encoding)

        monkeypatch.setattr(fileio, "atomic_open", counting)
        with pytest.raises(KeyboardInterrupt):
            digests.rewrite(run, {"summary.json": (run / "summary.json").read_bytes().replace(b"{", b"{\n", 1),
                                  "gates.json": b"{}"})
        monkeypatch.setattr(fileio, "atomic_open", real)
        assert _check(capsys, run, base)[0] == 0, cut_at
    rc, out, err = _cli(capsys, "gate", run, "--gate", "max_ci_high=1", "--record")  # and records again
    assert rc == 0 and _check(capsys, run, base)[0] == 0
    rec = json.loads((run / "manifest.json").read_text())["files"]
    assert "previous" not in rec["summary.json"] and rec["gates.json"]["sha256"] == hashlib.sha256(
        (run / "gates.json").read_bytes()).hexdigest()


def test_a_reader_that_read_the_manifest_before_a_gate_record_still_reads(nights, capsys):
    from lmra.runfolder import load_run

    base, run = nights
    before = load_run(run)  # holds the manifest as it was
    assert _cli(capsys, "gate", run, "--gate", "max_ci_high=1", "--record")[0] == 0
    assert len(before.jsonl("responses.jsonl")) > 0 and before.verified("summary.json")  # re-reads the manifest


def test_an_edited_gates_json_is_not_exported_as_a_metric(nights, capsys):
    base, run = nights
    assert _cli(capsys, "gate", run, "--gate", "max_ci_high=0.0001", "--record")[0] == 6
    doc = json.loads((run / "gates.json").read_text())
    (run / "gates.json").write_text(json.dumps(doc | {"passed": True, "breaches": []}))
    rc, out, err = _cli(capsys, "export", run, "--format", "prometheus")
    assert rc == 2 and "gates.json" in err and "changed or damaged" in err
    from lmra.gates import read_gates

    assert read_gates(run)["unreadable"] is True  # the report and the history page say so


def test_a_recorded_file_replaced_or_removed_is_named(nights, capsys):
    base, run = nights
    import pandas as pd

    pd.read_parquet(run / "ratings.parquet").to_json(run / "ratings.jsonl", orient="records", lines=True)
    (run / "ratings.parquet").unlink()  # the older format in its place: not read instead
    rc, out, err = _cli(capsys, "compare", base, run)
    assert rc == 2 and "ratings.parquet: missing, though manifest.json records it" in err
    (base / "refusals.csv").unlink()
    rc, out, err = _cli(capsys, "gate", base, "--gate", "max_refusal_gap=1")
    assert rc == 2 and "refusals.csv: missing, though manifest.json records it" in err


def test_export_into_the_run_folder_itself_is_refused(nights, capsys):
    base, run = nights
    before = (run / "per_task.csv").read_bytes()
    rc, out, err = _cli(capsys, "export", run, "--format", "csv", "--out", run)
    assert rc == 2 and "is a run folder: the export would overwrite its per_task.csv" in err
    assert (run / "per_task.csv").read_bytes() == before and _check(capsys, run, base)[0] == 0


def test_a_shards_changed_record_stops_the_merge(tmp_path, capsys):
    cfg = write_config(tmp_path, name="sh", n_prompts=16)
    for i in (1, 2):
        rc = main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--shard", f"{i}/2"])
        assert rc == 0, capsys.readouterr()
    shards = sorted(p for p in (tmp_path / "reports").iterdir() if "-shard" in p.name)
    assert len(shards) == 2 and all("shard.json" in json.loads((s / "manifest.json").read_text())["files"]
                                    for s in shards)
    rec = json.loads((shards[0] / "shard.json").read_text())
    (shards[0] / "shard.json").write_text(json.dumps(rec | {"n_selected": 1}))  # an edited number
    capsys.readouterr()
    rc, out, err = _cli(capsys, "merge", *shards, "--no-report")
    assert rc == 2 and "shard.json: changed or damaged since the run finished" in err
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.endswith("-sh")]  # no merged run


def test_gate_record_writes_the_runs_report_html_anew(nights, capsys):
    """Fresh-user finding: `lmra gate RUN --record` recorded the gates (summary.json, history,
    Prometheus) but report.html kept showing none until `lmra report RUN` was run by hand."""
    base, run = nights
    assert _cli(capsys, "report", str(run))[0] == 0
    assert "Release gates" not in (run / "report.html").read_text()
    rc, out, err = _cli(capsys, "gate", run, "--gate", "max_ci_high=0.0001", "--record")
    assert rc == 6, out + err
    assert f"report.html rewritten with the gates recorded: {run / 'report.html'}" in " ".join(out.split())
    html = (run / "report.html").read_text()
    assert "Release gates" in html and "max_ci_high" in html
    assert _cli(capsys, "gate", base, "--gate", "max_ci_high=1", "--record")[0] == 0  # no report.html: none written
    assert not (base / "report.html").exists()


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_export_into_another_runs_folder_is_refused(nights, capsys, fmt):
    """Bad-input break-it (s45): `lmra export RUN_A --format parquet --out RUN_B` wrote A's four tables
    among B's files, exit 0 (only CSV clashes with B's own per_task.csv were refused). Any format into
    another run's folder is an input error naming --out; nothing is written there."""
    base, run = nights
    before = sorted(p.name for p in run.iterdir())
    rc, out, err = _cli(capsys, "export", base, "--format", fmt, "--out", run)
    assert rc == 2 and f"{run}: option --out: is another run's folder" in " ".join(err.split()), err
    assert sorted(p.name for p in run.iterdir()) == before
    # nor inside it: B/exports would replace its exported tables (round-2 break-it, s45)
    (run / "exports").mkdir(exist_ok=True)
    rc, out, err = _cli(capsys, "export", base, "--format", fmt, "--out", run / "exports")
    assert rc == 2 and f"is inside another run's folder, {run.resolve()}" in " ".join(err.split()), err
    assert not list((run / "exports").iterdir())
    rc, out, err = _cli(capsys, "export", base, "--format", fmt, "--out", base / "exports" / "sub")  # its own: fine
    assert rc == 0, err

"""``lmra export RUN --format prometheus|openmetrics`` (lmra/report/openmetrics.py): the metrics
file parsed by prometheus_client's real parsers (the Prometheus text format 0.0.4 parser and the
OpenMetrics 1.0 parser), every value checked against the run folder's own files.

The runs are real audits with scripted doubles (tests/monitor_helpers.py) over three tasks: one
named with a quote and a backslash, one with a single prompt (so its confidence interval is
undefined: NaN), and 'career advice'.
"""

import csv
import datetime as dt
import json
import math
import os

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus

from conftest import rerecord_files
import monitor_helpers
from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)

QUOTED = 'quote " backslash \\ end'
LONELY = "lonely"
#: the label value escaping must survive even a line feed (a run folder from another tool may hold one)
NASTY = 'quote " backslash \\ newline\n end'
LABELS = {"run_name", "comparison", "domain", "task", "target_model", "judge_model"}


def task_of(i: int) -> str:
    return LONELY if i == 0 else (QUOTED if i % 2 else "career advice")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A baseline and a night where the quoted task rose, checked against it (exit 3, recorded)."""
    from lmra.cli import main

    tmp = tmp_path_factory.mktemp("openmetrics")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(monitor_helpers, "task_of", task_of)
        base = make_run(tmp, "20260101-000000-nightly", {QUOTED: 0.05, "career advice": 0.1, LONELY: 0.0},
                        seed=1, n_prompts=61)
        rise = make_run(tmp, "20260102-000000-nightly", {QUOTED: 0.7, "career advice": 0.1, LONELY: 0.0},
                        seed=2, n_prompts=61)
    assert main(["check", str(rise), "--baseline", str(base)]) == 3
    return {"base": base, "rise": rise, "tmp": tmp}


def samples(families) -> dict[str, list]:
    """metric name → its samples."""
    out = {}
    for fam in families:
        assert fam.type == "gauge" and fam.documentation, fam.name
        out.setdefault(fam.name, []).extend(fam.samples)
    return out


def one(found: dict, name: str, **labels) -> float:
    hits = [s.value for s in found[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def same(a: float, b) -> bool:
    """Equal numbers, or both undefined (NaN / an empty CSV cell)."""
    b = math.nan if b in ("", None) else float(b)
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_prometheus_file_parses_and_equals_the_run_folder(runs, lmra_cli, tmp_path):
    run = runs["rise"]
    assert lmra_cli(["export", str(run), "--format", "prometheus", "--out", str(tmp_path)]) == 0
    assert os.listdir(tmp_path) == ["lmra_nightly.prom"]  # no temporary file left behind
    text = (tmp_path / "lmra_nightly.prom").read_text(encoding="utf-8")
    assert text.endswith("\n") and "# EOF" not in text
    found = samples(parse_prometheus(text))
    assert "# HELP lmra_task_stereotype_rate DEPRECATED: renamed lmra_task_stereotype_probability" in text
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    target, judge = manifest["target"]["model"], manifest["judge"]["model"]
    rows = list(csv.DictReader((run / "per_task.csv").open(encoding="utf-8")))
    assert {r["task"] for r in rows} == {QUOTED, LONELY, "career advice"}
    assert len(found["lmra_task_net_rating"]) == len(rows)
    for r in rows:
        key = {"run_name": "nightly", "comparison": f"{r['group_a']} vs {r['group_b']}", "domain": r["domain"],
               "task": r["task"], "target_model": target, "judge_model": judge}
        assert same(one(found, "lmra_task_net_rating", **key), r["net_rating"])
        assert same(one(found, "lmra_task_net_rating_ci_low", **key), r["ci_low"])
        assert same(one(found, "lmra_task_net_rating_ci_high", **key), r["ci_high"])
        # the per-task stereotype rates, both directions (fresh-user finding: not exported, only the net rating)
        for direction in ("forward", "reverse"):
            assert same(one(found, "lmra_task_stereotype_probability", **key, direction=direction), r[f"{direction}_rate"])
            # the old name, written beside it for a while and marked deprecated (round-2 break-it, s48)
            assert same(one(found, "lmra_task_stereotype_rate", **key, direction=direction), r[f"{direction}_rate"])
        assert one(found, "lmra_task_stereotype_probability", **key, direction="forward") - one(
            found, "lmra_task_stereotype_probability", **key, direction="reverse") == pytest.approx(float(r["net_rating"]))
        for outcome, col in (("valid", "n_pairs"), ("invalid", "n_invalid"), ("failed", "n_failed"),
                             ("refusal", "n_refusal")):
            assert one(found, "lmra_task_pairs", **key, outcome=outcome) == float(r[col])
        assert all(set(s.labels) == LABELS for s in found["lmra_task_net_rating"])
    # NaN: the single-prompt task has a net rating but no confidence interval
    lonely = next(r for r in rows if r["task"] == LONELY)
    assert lonely["ci_low"] == "" and math.isnan(one(found, "lmra_task_net_rating_ci_low", task=LONELY))
    assert not math.isnan(one(found, "lmra_task_net_rating", task=LONELY))
    assert 'task="lonely"' in text and "} NaN\n" in text
    # the quote and the backslash are escaped in the file and come back exactly
    assert 'task="quote \\" backslash \\\\ end"' in text
    # refusal rates per group, from refusals.csv
    for r in csv.DictReader((run / "refusals.csv").open(encoding="utf-8")):
        if r["level"] == "task":
            for side in ("a", "b"):
                assert same(one(found, "lmra_task_refusal_rate", task=r["task"], group=r[f"group_{side}"]),
                            r[f"rate_{side}"])
    # overall net rating and its CI, from summary.json
    ov = summary["overall"][0]
    comp = f"{ov['group_a']} vs {ov['group_b']}"
    assert one(found, "lmra_overall_net_rating", comparison=comp) == ov["net_rating"]
    assert one(found, "lmra_overall_net_rating_ci_high", comparison=comp) == ov["ci_high"]
    assert one(found, "lmra_overall_stereotype_probability", comparison=comp, direction="reverse") == ov["reverse_rate"]
    # judge status and run status, enum style: exactly one state is 1
    judge_states = {s.labels["status"]: s.value for s in found["lmra_judge_status"]}
    assert judge_states == {"passed": 0, "failed": 0, "waived": 0, "not_checked": 1, "unknown": 0}
    assert summary["judge_status"]["status"] == "not_checked"
    assert {s.labels["status"]: s.value for s in found["lmra_run_status"]} == {"complete": 1, "partial": 0}
    start = dt.datetime.fromisoformat(manifest["started"]).timestamp()
    assert one(found, "lmra_run_timestamp_seconds", run_name="nightly") == start
    # the run's model calls by kind, from manifest.json (new-user finding: no failed-call metric)
    assert {s.labels["kind"]: s.value for s in found["lmra_run_model_calls"]} == {
        k: manifest["calls"][k] for k in ("fresh", "cached", "failed", "retries")}
    info = found["lmra_run_info"][0]
    assert info.value == 1 and info.labels["run_id"] == run.name
    # the recorded check: the quoted task regressed, the other tested task did not, the lonely one was not tested
    assert one(found, "lmra_task_regressed", task=QUOTED) == 1
    assert one(found, "lmra_task_regressed", task="career advice") == 0
    assert not [s for s in found["lmra_task_regressed"] if s.labels["task"] == LONELY]
    # the task and the comparison's overall net rating (it rose with the task): 2 flagged
    assert one(found, "lmra_run_regressions", run_name="nightly") == 2
    assert one(found, "lmra_overall_regressed", comparison="female vs male") == 1
    assert "lmra_run_gates_met" not in found  # this run has no gates


def test_openmetrics_file_has_eof_and_both_parsers_agree(runs, lmra_cli, tmp_path):
    assert lmra_cli(["export", str(runs["rise"]), "--format", "openmetrics", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "lmra_nightly.prom").read_text(encoding="utf-8")
    assert text.endswith("\n# EOF\n") and text.count("# EOF") == 1
    om = samples(parse_openmetrics(text))
    prom = samples(parse_prometheus(text))  # '# EOF' is a comment to the textfile collector's format
    assert om.keys() == prom.keys()
    for name in om:
        a = sorted((tuple(sorted(s.labels.items())), s.value) for s in om[name] if not math.isnan(s.value))
        b = sorted((tuple(sorted(s.labels.items())), s.value) for s in prom[name] if not math.isnan(s.value))
        assert a == b, name
    assert lmra_cli(["export", str(runs["rise"]), "--format", "prometheus", "--out", str(tmp_path)]) == 0
    plain = (tmp_path / "lmra_nightly.prom").read_text(encoding="utf-8")
    assert text == plain + "# EOF\n"  # the only difference between the two formats for these gauges
    with pytest.raises(ValueError):  # and the OpenMetrics parser insists on it
        list(parse_openmetrics(plain))


def test_label_escaping_of_a_task_name_with_quote_backslash_and_newline(runs, tmp_path):
    """The input rules keep line feeds out of task names, but a run folder written by another tool
    may hold one: the per_task.csv task is renamed and the file must still parse to the exact name."""
    import shutil

    from lmra.report.openmetrics import exposition
    from lmra.runfolder import load_run

    folder = tmp_path / "20260103-000000-nightly"
    shutil.copytree(runs["base"], folder)
    text = (folder / "per_task.csv").read_text(encoding="utf-8")
    (folder / "per_task.csv").write_text(text.replace('"quote "" backslash \\ end"',
                                                      '"quote "" backslash \\ newline\n end"'), encoding="utf-8")
    rerecord_files(folder)
    run = load_run(folder)
    assert NASTY in set(run.per_task["task"])
    for fmt, parse in (("prometheus", parse_prometheus), ("openmetrics", parse_openmetrics)):
        body = exposition(run, fmt).decode("utf-8")
        assert 'task="quote \\" backslash \\\\ newline\\n end"' in body
        assert all(line.startswith(("#", "lmra_")) for line in body.splitlines())  # no raw line break in a label
        found = samples(parse(body))
        expected = float(run.per_task.set_index("task").loc[NASTY, "net_rating"])
        assert one(found, "lmra_task_net_rating", task=NASTY) == expected


def test_gates_and_atomic_replace_in_a_textfile_collector_folder(runs, lmra_cli, capsys, tmp_path):
    collector = tmp_path / "textfile_collector"
    collector.mkdir()
    (collector / "lmra_nightly.prom").write_text("# an older night\n")
    (collector / "node_other.prom").write_text("other 1\n")
    assert lmra_cli(["gate", str(runs["base"]), "--gate", "max_ci_high=0.01", "--record"]) == 6  # breached
    assert lmra_cli(["export", str(runs["base"]), "--format", "prometheus", "--out", str(collector)]) == 0
    assert sorted(os.listdir(collector)) == ["lmra_nightly.prom", "node_other.prom"]
    found = samples(parse_prometheus((collector / "lmra_nightly.prom").read_text(encoding="utf-8")))
    gates = json.loads((runs["base"] / "gates.json").read_text())
    assert one(found, "lmra_run_gates_met", run_name="nightly") == 0
    assert one(found, "lmra_run_gate_breaches", run_name="nightly") == len(gates["breaches"]) > 0
    assert "lmra_task_regressed" not in found  # the baseline itself was never checked
    capsys.readouterr()
    assert lmra_cli(["export", str(runs["base"]), "--format", "openmetrics", "--table", "per_task"]) == 2
    assert "option --table" in capsys.readouterr().err


def test_the_detectable_rise_says_when_it_is_only_a_lower_bound(runs):
    """Fresh-user finding: the console and report.html show "≥ +0.5426" where the check's detectable rise is
    only a lower bound (reverse-stereotyped prompts), but Prometheus exported the bare 0.5426 under a HELP
    saying a quiet night "rules out rises this large" — and the overall row's was not exported. Each detectable
    rise now has a ..._lower_bound gauge beside it, overall rows included."""
    from lmra.history import History, history_path
    from lmra.report.openmetrics import metric_families
    from lmra.runfolder import finite, load_run

    run = runs["rise"]
    with History(history_path(run.parent)) as h:
        check = h.latest_check(run.name)
    tested = [t for t in check["result"].to_dict(orient="records") if finite(t.get("mde")) is not None
              and finite(t.get("p_regress")) is not None]
    assert tested and len(check["overall"])
    check["result"].loc[check["result"]["task"] == tested[0]["task"], "mde_lower_bound"] = True  # as a "≥" row
    found = samples(metric_families(load_run(run), check=check))
    for t in tested:
        assert one(found, "lmra_task_detectable_rise", task=t["task"]) == t["mde"]
        assert one(found, "lmra_task_detectable_rise_lower_bound", task=t["task"]) == float(t is tested[0])
    o = check["overall"].to_dict(orient="records")[0]
    assert finite(o.get("mde")) is not None
    assert one(found, "lmra_overall_detectable_rise", comparison=o["comparison"]) == o["mde"]
    assert one(found, "lmra_overall_detectable_rise_lower_bound", comparison=o["comparison"]) == \
        float(bool(o.get("mde_lower_bound")))


def test_the_metrics_out_option_names_a_folder(runs, lmra_cli, tmp_path, capsys):
    """Break-it finding (s38): ``--out`` naming an existing file gave a raw FileExistsError (exit 1,
    where --format csv gives a clean exit 2), and a new ``…/lmra.prom`` became a folder of that name
    (exit 0) — which the textfile collector cannot read, keeping the previous night's metrics."""
    run = runs["rise"]
    existing = tmp_path / "existing.prom"
    existing.write_text("x")
    assert lmra_cli(["export", str(run), "--format", "prometheus", "--out", str(existing)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--out" in err and "is a file" in err and "Traceback" not in err
    new = tmp_path / "collector" / "lmra.prom"
    assert lmra_cli(["export", str(run), "--format", "prometheus", "--out", str(new)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "names the folder the metrics file goes to (as lmra_nightly.prom)" in err and not new.exists()
    assert lmra_cli(["export", str(run), "--format", "prometheus", "--out", str(tmp_path / "collector")]) == 0
    assert (tmp_path / "collector" / "lmra_nightly.prom").is_file()


def test_an_older_night_does_not_replace_a_newer_nights_metrics(runs, lmra_cli, capsys, tmp_path):
    """Break-it finding (s40): overlapping nights finish out of order; the older night's export replaced
    the newer night's metrics file (and could clear its regression alert). It is not written now,
    saying so (exit 0); --replace-newer writes it anyway."""
    import shutil

    out = tmp_path / "collector"
    # the older night: a copy of the baseline whose start is a day earlier (the two fixture runs may start in
    # the same second, which is no order)
    older = tmp_path / "reports" / runs["base"].name
    shutil.copytree(runs["base"], older)
    manifest = json.loads((older / "manifest.json").read_text())
    manifest["started"] = "2025-12-31T02:15:00+00:00"
    (older / "manifest.json").write_text(json.dumps(manifest))
    assert lmra_cli(["export", str(runs["rise"]), "--format", "prometheus", "--out", str(out)]) == 0
    (prom,) = out.glob("*.prom")
    newer = prom.read_text()
    capsys.readouterr()
    assert lmra_cli(["export", str(older), "--format", "prometheus", "--out", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"not written: {prom.name} holds the metrics of run {runs['rise'].name}, which started after run" in said
    assert prom.read_text() == newer
    assert lmra_cli(["export", str(older), "--format", "prometheus", "--out", str(out), "--replace-newer"]) == 0
    assert f'run_id="{runs["base"].name}"' in prom.read_text()
    # the newer night replaces the older one as before
    assert lmra_cli(["export", str(runs["rise"]), "--format", "prometheus", "--out", str(out)]) == 0
    assert prom.read_text() == newer

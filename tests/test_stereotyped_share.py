"""The share of stereotyped prompts in the exports (per task and overall, CSV/JSON/Parquet, the
warehouse) and in Prometheus (fresh-user finding, s36: the "stereotype rates" exported were the
LMRA's mean probabilities, not a share, and the share the regression check and lmra plan speak of
was exported nowhere). Checked against the truth the scripted chatbot planted: a prompt is
stereotyped when its female user's answer carries the stereotyped phrase."""

from __future__ import annotations

import json
import math

import pandas as pd

from monitor_helpers import PHRASE, make_run
from lmra.report.export import export_run, stereotyped_prompts
from lmra.report.openmetrics import write_metrics
from lmra.runfolder import load_run


def test_the_stereotyped_share_counts_the_planted_stereotypes(tmp_path):
    run_dir = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.4, "career advice": 0.1}, seed=5,
                       n_prompts=120)
    responses = [json.loads(x) for x in (run_dir / "responses.jsonl").read_text().splitlines()]
    planted: dict[str, set[str]] = {}
    for r in responses:
        planted.setdefault(r["task"], set())
        if r["group"] == "female" and PHRASE in r["text"]:
            planted[r["task"]].add(r["prompt_id"])
    run = load_run(run_dir)
    out = export_run(run, "csv", tmp_path / "exp", ("per_task", "overall"))
    per_task = pd.read_csv(out[0]).set_index("task")
    overall = pd.read_csv(out[1])
    for task, ids in planted.items():
        row = per_task.loc[task]
        assert row["n_stereotyped_prompts"] == len(ids) > 0, (task, row["n_stereotyped_prompts"], len(ids))
        assert row["n_scored_prompts"] == 60 and math.isclose(row["stereotyped_share"], len(ids) / 60)
    total = sum(len(i) for i in planted.values())
    assert overall.loc[0, "n_stereotyped_prompts"] == total and math.isclose(overall.loc[0, "stereotyped_share"],
                                                                             total / 120)
    # Prometheus: the same share, per task and overall
    text = write_metrics(run, "prometheus", tmp_path / "prom").read_text()
    story = len(planted["write a story"]) / 60
    line = next(x for x in text.splitlines() if x.startswith("lmra_task_stereotyped_share{") and 'task="write a story"'
                in x)
    assert math.isclose(float(line.rsplit(" ", 1)[1]), story)
    assert any(x.startswith("lmra_overall_stereotyped_share{") and math.isclose(float(x.rsplit(" ", 1)[1]), total / 120)
               for x in text.splitlines())


def test_a_run_without_scored_prompts_has_no_share(tmp_path):
    run_dir = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0}, seed=1,
                       n_prompts=8)
    run = load_run(run_dir)
    counts = stereotyped_prompts(run, ["comparison", "domain", "task"])
    assert (counts["n_stereotyped_prompts"] == 0).all() and (counts["stereotyped_share"] == 0).all()
    assert counts["n_scored_prompts"].sum() == 8

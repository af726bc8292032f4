"""End to end on the embedded model through the CLI (``lmra audit --config examples/smoke.toml``)."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from lmra.resources import resource_dir
from doubles import run_folder_text

REQUIRED = ["domain", "task", "group_a", "group_b", "n_pairs", "n_invalid", "forward_rate", "reverse_rate",
            "net_rating", "ci_low", "ci_high"]


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmra.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def test_smoke_audit_on_embedded_model(tmp_path):
    smoke = resource_dir("examples") / "smoke.toml"
    proc = _run(tmp_path, "audit", "--config", str(smoke), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "Harmful-stereotype ratings: female vs male" in proc.stdout and "Overall female vs male" in proc.stdout
    runs = list((tmp_path / "reports").glob("*-smoke"))
    assert len(runs) == 1
    run = runs[0]
    for f in ["config.toml", "responses.jsonl", "ratings.parquet", "per_task.csv", "summary.json", "manifest.json"]:
        assert (run / f).is_file(), f
    pt = pd.read_csv(run / "per_task.csv")
    assert set(REQUIRED) <= set(pt.columns)
    assert len(pt) == 3 and set(pt["task"]) == {"write a story", "career advice", "exercise plan"}
    for col in ["forward_rate", "reverse_rate", "net_rating"]:
        assert pt[col].map(math.isfinite).all(), col
        assert pt[col].between(-1, 1).all()
    assert (pt["n_pairs"] + pt["n_invalid"] + pt["n_failed"] == 1).all()
    manifest = json.loads((run / "manifest.json").read_text())
    # 3 prompts: identity filter 3 × 2 option orders, 6 responses, refusal labels 6 × 2,
    # stereotype ratings 3 pairs × 2 orders (unless the weak LMRA filtered or refused some),
    # judge check 5 canaries × 2 orders
    assert manifest["status"] == "complete" and 0 < manifest["calls"]["fresh"] <= 40
    assert manifest["calls"]["fresh"] == (manifest["planned_calls"]["target"] + manifest["planned_calls"]["judge"]
                                          - 2 * 2 * int(pt["n_refusal"].sum()))
    assert manifest["target"]["model"].startswith("gemma-3-270m")
    from lmra.pairstore import iter_rows

    ratings = iter_rows(run / "ratings.parquet")
    assert {r["method"] for r in ratings} == {"logprobs"}
    for r in ratings:
        for order in ("order1", "order2"):
            assert 0 < r[order]["mass"] <= 1 and abs(sum(r[order]["probs"].values()) - 1) < 1e-9
        assert abs(r["h"] - (r["q_F"] - r["q_R"])) < 1e-12
    # the user's name never reaches the LMRA: responses are scrubbed
    for line in (run / "responses.jsonl").read_text().splitlines():
        resp = json.loads(line)
        assert not re.search(rf"\b{re.escape(resp['name'])}\b", resp["scrubbed"], re.IGNORECASE)

    # the embedded base model fails judge validation honestly; the example waives the gate and says why
    summary = json.loads((run / "summary.json").read_text())
    js = summary["judge_status"]
    assert js["status"] == "failed" and js["waived"] and not js["gated"] and "270M" in js["waiver"]
    assert any("planted stereotypes" in r for r in js["reasons"])  # it detects none of them
    out = proc.stdout
    assert "Judge status: FAILED" in out and out.index("Judge status: FAILED") < out.index("Harmful-stereotype")
    assert "Waived (example on the embedded 270M base model" in " ".join(out.split())
    assert manifest["planned_calls"]["canaries"] == 5  # gender × 5 kinds × per_kind 1

    # a second run of the same config makes zero model calls
    again = _run(tmp_path, "audit", "--config", str(smoke), "--no-progress", "--name", "smoke2")
    assert again.returncode == 0, again.stderr
    m2 = json.loads(next((tmp_path / "reports").glob("*-smoke2")).joinpath("manifest.json").read_text())
    assert m2["calls"]["fresh"] == 0 and m2["calls"]["cached"] == manifest["calls"]["fresh"]


def test_bad_input_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "text": "hello"}\n{"id": "y", "text": \n')
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'prompts = "{bad}"\n')
    proc = _run(tmp_path, "audit", "--config", str(cfg))
    assert proc.returncode == 2
    assert f"{bad}, line 2" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout


def test_logged_traffic_audit_on_embedded_model(tmp_path):
    """`lmra audit --config examples/logs.toml`: unlabelled first messages are classified by
    the embedded LMRA into the taxonomy, identity-revealing ones are filtered, up to N per
    task are audited, and with redaction no prompt text reaches the run folder."""
    import tomllib

    cfg = resource_dir("examples") / "logs.toml"
    logs = [json.loads(line) for line in (resource_dir("examples") / "logs.jsonl").read_text().splitlines()]
    proc = _run(tmp_path, "audit", "--config", str(cfg), "--no-progress", "--per-task", "1")
    assert proc.returncode == 0, proc.stderr
    run = next((tmp_path / "reports").glob("*-logs"))
    tax = tomllib.loads((resource_dir("prompts") / "taxonomy.toml").read_text())
    valid = {(d["name"], t["name"]) for d in tax["domain"] for t in d["task"]} | {("other", "other")}
    valid |= {(d["name"], "other") for d in tax["domain"]}
    classes = [json.loads(line) for line in (run / "classifications.jsonl").read_text().splitlines()]
    assert len(classes) == len(logs)
    assert all((c["domain"], c["task"]) in valid for c in classes)
    filtered = {json.loads(line)["prompt_id"] for line in (run / "filtered_prompts.jsonl").read_text().splitlines()}
    assert {"log-3", "log-6"} <= filtered  # "Hi, I'm Jennifer", "As a woman in tech"
    pt = pd.read_csv(run / "per_task.csv")
    tasks = {c["task"] for c in classes if c["prompt_id"] not in filtered}
    assert set(pt["task"]) <= tasks and len(pt) >= 1
    assert (pt["n_prompts"] == 1).all()  # --per-task 1
    everything = run_folder_text(run)  # Parquet decoded, not skipped
    for rec in logs:
        assert rec["text"] not in everything


def test_judge_check_fails_the_embedded_base_model(tmp_path):
    """`lmra judge-check` without an audit: the 270M base model fails (exit 5) — it detects
    none of the planted stereotypes — and the verdict names each failed criterion. Prompted as a
    transcript ending "Assistant: The answer is", it does answer with an option letter (with
    Gemma chat turns its valid-option mass was 0.02)."""
    proc = _run(tmp_path, "judge-check", "--dimension", "gender", "--per-kind", "1", "--json",
                "--out", str(tmp_path / "jc"))
    assert proc.returncode == 5, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["n_canaries"] == 5 and not verdict["passed"]
    assert not verdict["criteria"]["sensitivity"]["passed"] and verdict["sensitivity"] < 0.8
    assert any("planted stereotypes" in r for r in verdict["reasons"])
    assert verdict["valid_option_mass"] > 0.3
    assert (tmp_path / "jc" / "judge_check_ratings.jsonl").is_file()

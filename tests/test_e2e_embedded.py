"""End to end on the embedded model through the CLI (``lmra audit --config examples/smoke.toml``)."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from lmra.resources import resource_dir

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
    for f in ["config.toml", "responses.jsonl", "ratings.jsonl", "per_task.csv", "summary.json", "manifest.json"]:
        assert (run / f).is_file(), f
    pt = pd.read_csv(run / "per_task.csv")
    assert set(REQUIRED) <= set(pt.columns)
    assert len(pt) == 3 and set(pt["task"]) == {"write a story", "career advice", "exercise plan"}
    for col in ["forward_rate", "reverse_rate", "net_rating"]:
        assert pt[col].map(math.isfinite).all(), col
        assert pt[col].between(-1, 1).all()
    assert (pt["n_pairs"] + pt["n_invalid"] + pt["n_failed"] == 1).all()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["calls"]["fresh"] == 12
    assert manifest["target"]["model"].startswith("gemma-3-270m")
    ratings = [json.loads(line) for line in (run / "ratings.jsonl").read_text().splitlines()]
    assert {r["method"] for r in ratings} == {"logprobs"}
    for r in ratings:
        for order in ("order1", "order2"):
            assert 0 < r[order]["mass"] <= 1 and abs(sum(r[order]["probs"].values()) - 1) < 1e-9
        assert abs(r["h"] - (r["q_F"] - r["q_R"])) < 1e-12
    # the user's name never reaches the LMRA: responses are scrubbed
    for line in (run / "responses.jsonl").read_text().splitlines():
        resp = json.loads(line)
        assert not re.search(rf"\b{re.escape(resp['name'])}\b", resp["scrubbed"], re.IGNORECASE)

    # a second run of the same config makes zero model calls
    again = _run(tmp_path, "audit", "--config", str(smoke), "--no-progress", "--name", "smoke2")
    assert again.returncode == 0, again.stderr
    m2 = json.loads(next((tmp_path / "reports").glob("*-smoke2")).joinpath("manifest.json").read_text())
    assert m2["calls"]["fresh"] == 0 and m2["calls"]["cached"] == 12


def test_bad_input_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "text": "hello"}\n{"id": "y", "text": \n')
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'prompts = "{bad}"\n')
    proc = _run(tmp_path, "audit", "--config", str(cfg))
    assert proc.returncode == 2
    assert f"{bad}, line 2" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout

"""A batch night killed while it waited for its batches (a ``running`` manifest, ``stopped_in:
batch``, no process holding its lock): what the reading commands advise (break-it round 2, s34).
Real run folders: a stale batch folder as the batch rounds leave it, and a finished night made by
a real audit with scripted doubles (tests/monitor_helpers.py)."""

from __future__ import annotations

import json

import pytest

from monitor_helpers import make_run
from lmra.errors import LmraInputError
from lmra.history import History, history_path
from lmra.runfolder import load_run


def _stale_batch_night(reports, run_id: str, seed: int):
    """A folder as ``lmra audit --batch`` leaves it when killed in its batch rounds."""
    folder = reports / run_id
    (folder / "batch").mkdir(parents=True)
    (folder / "config.toml").write_text('name = "nightly"\n', encoding="utf-8")
    (folder / "manifest.json").write_text(json.dumps({
        "stopped_in": "batch", "started": "2026-01-01T02:00:00+00:00", "seed": seed,
        "batch": {"folder": str(folder / "batch")}, "target": {"provider": "openai", "model": "m"},
        "judge": {"provider": "openai", "model": "j"}, "status": "running", "pid": 999999}), encoding="utf-8")
    return folder


def test_reading_a_stale_batch_night_advises_the_resume_not_a_rerun(tmp_path):
    """``lmra report``/``check`` on it said "run the same audit again to finish from the cache",
    which pays for its submitted batches again; ``lmra history`` said to resume."""
    night = _stale_batch_night(tmp_path / "reports", "20260101-020000-nightly", seed=7)
    with pytest.raises(LmraInputError) as info:
        load_run(night)
    assert f"continue with 'lmra batch resume {night}'" in info.value.reason
    assert "run the same audit again" not in info.value.reason


def test_a_stale_batch_night_done_by_a_later_run_is_not_advised_to_resume(tmp_path):
    """Listed with both "continue with 'lmra batch resume …'" and "resumed by …": a later run (same
    name and seed) finished the night, so its jobs are only to be cancelled."""
    reports = tmp_path / "reports"
    night = _stale_batch_night(reports, "20260101-020000-nightly", seed=7)
    done = make_run(tmp_path, "20260101-030000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=7,
                    n_prompts=8)
    with History(history_path(reports)) as h:
        h.register(load_run(done))
        (row,) = h.not_finished()
    assert row["run_id"] == night.name and row["status"] == "stale" and row["resumed_by"] == done.name
    assert f"lmra batch cancel {night}" in row["stop_reason"] and "lmra batch resume" not in row["stop_reason"]


def test_a_stale_batch_night_done_by_a_later_run_says_cancel_everywhere_and_is_not_resumed(tmp_path, capsys):
    """Break-it finding (s34, round 3): ``lmra report``/``check``/``gate`` still advised resuming
    such a night, and ``lmra batch resume`` registered it a second time."""
    from lmra.cli import main

    reports = tmp_path / "reports"
    night = _stale_batch_night(reports, "20260101-020000-nightly", seed=7)
    (night / "batch" / "state.json").write_text(json.dumps({"version": 1, "jobs": [], "cache": ":memory:"}))
    done = make_run(tmp_path, "20260101-030000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=7,
                    n_prompts=8)
    with pytest.raises(LmraInputError) as info:
        load_run(night)
    assert f"{done.name} (same name and seed) completed the night" in info.value.reason
    assert f"lmra batch cancel {night}" in info.value.reason and "batch resume" not in info.value.reason
    assert main(["batch", "resume", str(night), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{done.name}, a later run of the same name and seed, completed this night" in err
    assert not (night / "summary.json").exists()

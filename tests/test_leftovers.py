"""What a killed audit leaves in its run folder is removed by the next audit, and nothing else is.

Scale break-it, s40: a ``kill -9`` of a large audit left its hidden spools and unfinished writes
(260 MB for 300,000 pairs) in its run folder, and nothing removed them: a cron job killed by its
timeout every night filled the disk. ``lmra audit`` now clears them from the stale folders of its
reports folder as it starts (:mod:`lmra.leftovers`), saying what it removed; a folder a live
process writes, a finished folder, a folder whose batch jobs may still be collected, and the
folders' own files stay.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import NAME_TO_GROUP, custom_audit_config
from doubles import ScriptedJudge, ScriptedTarget
from lmra.config import ModelConfig
from lmra.leftovers import clear_leftovers, is_leftover

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock and SIGKILL are POSIX")


def make_target(cfg: ModelConfig) -> ScriptedTarget:
    return ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"An answer {rng.random():.6f}.")


def make_judge(cfg: ModelConfig) -> ScriptedJudge:
    return ScriptedJudge(lambda r1, r2: {"C": 1.0})


def _killed_spooling_run(tmp_path: Path, names: Path, prompts: Path) -> Path:
    """A real audit (spooling its pairs and responses, as a large run does) killed with SIGKILL
    once its run folder holds a spool; returns its folder."""
    run_dir = tmp_path / "reports" / "20261205-020000-nightly"
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_leftovers:make_target",
                              judge="test_leftovers:make_judge", name="nightly")
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import NAME_TO_GROUP
        from doubles import ScriptedJudge, ScriptedTarget
        from lmra import Audit
        from lmra.config import load_config
        cfg = load_config({str(cfg)!r})
        t = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"An answer {{rng.random():.6f}}.", delay=0.02)
        audit = Audit(cfg, target=t, judge=ScriptedJudge(lambda a, b: {{"C": 1.0}}), run_dir={str(run_dir)!r})
        audit.spool_min_pairs = 0  # spool as a 100,000-pair run does
        audit.run()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            time.sleep(0.1)
            # a spool, not any leftover: a temporary file of an atomic write is one too, and may be renamed
            # before the kill (s48: the folder then held no leftover at all)
            if run_dir.is_dir() and any(is_leftover(p.name) and "spool" in p.name for p in run_dir.iterdir()):
                break
            assert proc.poll() is None, "the audit ended before it spooled anything"
        else:
            pytest.fail("no spool appeared in 120 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    return run_dir


def _age(folder: Path, seconds: float = 3600) -> None:
    """Set every file of a run folder ``seconds`` into the past (left alone since: a killed run's)."""
    when = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


def _folder(reports: Path, run_id: str, status: str | None, files: dict[str, str], **manifest) -> Path:
    folder = reports / run_id
    folder.mkdir(parents=True)
    (folder / "run.lock").write_text("1\n")
    if status is not None:
        (folder / "manifest.json").write_text(json.dumps({"status": status, **manifest}))
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _age(folder)
    return folder


def test_the_next_audit_removes_a_killed_runs_spools_and_nothing_else(tmp_path, sim_inputs, capsys):
    from lmra.cli import main

    names, prompts = sim_inputs(40)
    killed = _killed_spooling_run(tmp_path, names, prompts)
    _age(killed)  # (killed an hour ago: a folder changed in the last QUIET_S seconds is left alone)
    left = sorted(p.name for p in killed.iterdir() if is_leftover(p.name))
    assert any("spool" in name for name in left), left
    own = sorted(p.name for p in killed.iterdir() if not is_leftover(p.name))
    reports = tmp_path / "reports"
    spool = {".pairs-spool.parquet": "x" * 1000, ".pairs-spool.spill/duck.tmp": "y" * 500}
    # a folder an audit is writing now: its lock held by a live process
    live = _folder(reports, "20261206-010000-other", "running", dict(spool))
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, sys, time
        fh = open({str(live / 'run.lock')!r}, "a+")
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        print("locked", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        done = _folder(reports, "20261204-020000-nightly", "complete", {".report.html.abc123.tmp": "being written"})
        batch = _folder(reports, "20261203-020000-nightly", "stale", dict(spool), stopped_in="batch")
        marking = _folder(reports, "20261202-020000-nightly", "stale", {".manifest.json.q1w2.tmp": "{}",
                                                                        ".ratings.parquet.e3r4.tmp": "z" * 300})
        starting = _folder(reports, "20261201-020000-nightly", None, {".config.toml.t5y6.tmp": "n"})
        lock_time = (starting / "run.lock").stat().st_mtime
        cfg = custom_audit_config(tmp_path, names, prompts, target="test_leftovers:make_target",
                                  judge="test_leftovers:make_judge", name="nightly")
        code = main(["audit", "--config", str(cfg), "--no-progress", "--no-report"])
        out = " ".join(capsys.readouterr().out.split())
        assert code == 0, out
        # the killed run's spools and unfinished writes are gone; its own files stay
        assert sorted(p.name for p in killed.iterdir()) == own
        assert "killed audits left in their run folders" in out and killed.name in out, out
        # and it is marked stale, as a command reading it would (scale break-it, s45: it still said "running") —
        # when the kill came after its manifest was written (it comes at the first leftover file, which may be
        # the manifest's own temporary file)
        if (killed / "manifest.json").is_file():
            stale = json.loads((killed / "manifest.json").read_text())
            assert stale["status"] == "stale" and stale.get("stale_found"), stale
        n = len(left) + 2  # and the marked stale folder's unfinished ratings and the starting folder's config
        assert f"removed {n} files" in out, out
        assert sorted(p.name for p in marking.iterdir()) == [".manifest.json.q1w2.tmp", "manifest.json", "run.lock"]
        assert sorted(p.name for p in starting.iterdir()) == ["run.lock"]
        assert (starting / "run.lock").stat().st_mtime == lock_time  # (its start time, as lmra history reads it)
        # the live folder, the finished one and the batch-stopped one are untouched
        for folder in (live, batch):
            assert (folder / ".pairs-spool.parquet").is_file() and (folder / ".pairs-spool.spill" / "duck.tmp").is_file()
        assert (done / ".report.html.abc123.tmp").is_file()
        assert holder.poll() is None  # (the lock was held throughout)
    finally:
        holder.kill()
        holder.wait()
    assert clear_leftovers(reports) != []  # now the live folder's writer is gone: its spools are a killed run's
    assert clear_leftovers(reports) == []  # and nothing is left to clear


def test_a_folder_changed_lately_is_not_cleared_though_its_lock_is_free(tmp_path):
    """A writer the lock cannot show (another machine on a network filesystem whose locks are not
    shared: break-it round 2, s41) still changes its spools: a folder changed in the last QUIET_S
    seconds is left alone, and cleared once it has been quiet that long."""
    from lmra.leftovers import QUIET_S

    folder = _folder(tmp_path, "20261206-010000-x", "running", {".pairs-spool.parquet": "p"})
    os.utime(folder / ".pairs-spool.parquet")  # written a moment ago
    assert clear_leftovers(tmp_path) == []
    _age(folder, QUIET_S + 60)
    assert [c.run_id for c in clear_leftovers(tmp_path)] == ["20261206-010000-x"]


def test_a_file_that_cannot_be_removed_is_named(tmp_path):
    from lmra.leftovers import Cleared, cleared_words

    words = cleared_words([Cleared("20261206-010000-x", 0, 0, 1, "/r/20261206-010000-x/.pairs-spool.parquet")])
    assert "1 could not be removed (permissions? the first: /r/20261206-010000-x/.pairs-spool.parquet" in words


def test_a_folder_locked_while_being_cleared_is_not_cleared(tmp_path):
    """The lock is what keeps a starting writer out: a folder whose lock is held is never touched."""
    folder = _folder(tmp_path, "20261206-010000-x", "stale", {".responses-spool.parquet": "r"})
    with open(folder / "run.lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        assert clear_leftovers(tmp_path) == []
    (cleared,) = clear_leftovers(tmp_path)
    assert (cleared.run_id, cleared.n_files, cleared.n_bytes) == ("20261206-010000-x", 1, 1)
    assert not (folder / ".responses-spool.parquet").exists()


def test_a_cleared_killed_folder_whose_manifest_says_running_is_marked_stale(tmp_path):
    """Scale break-it (s45): the next audit cleared a killed run's spools but its manifest still
    said "running" (every command reading the folder marks it stale; the clearer holds its lock, so
    it could not). A folder cleared while its manifest says running is marked stale, with the time;
    one already stale keeps its record."""
    reports = tmp_path / "reports"
    running = _folder(reports, "20261205-020000-nightly", "running", {".pairs-spool.parquet": "x" * 100})
    stale = _folder(reports, "20261204-020000-nightly", "stale", {".pairs-spool.parquet": "x" * 100},
                    stale_found="2026-12-04T03:00:00+00:00")
    cleared = clear_leftovers(reports)
    assert sorted(c.run_id for c in cleared) == [stale.name, running.name]
    marked = json.loads((running / "manifest.json").read_text())
    assert marked["status"] == "stale" and marked["stale_found"]
    assert json.loads((stale / "manifest.json").read_text())["stale_found"] == "2026-12-04T03:00:00+00:00"

"""Disks and run folders: a full disk mid-run, an unwritable cache, stale and reused run folders.

The full-disk tests mount a real small tmpfs (root only; skipped elsewhere) and run a real
``lmra audit`` against the local OpenAI-compatible server of tests/faultserver.py.
"""

import datetime as _dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from faultserver import FaultServer, audit_config
from lmra.runstate import folder_status

TASKS = ["write a story", "career advice", "exercise plan", "explain a concept"]


def _config(path: Path, url: str, cache: Path, out: Path, extra: str = "") -> Path:
    return audit_config(path, url, cache, out, name="disk", tasks=TASKS, concurrency=2, retries=None,
                        timeout_s=None, top=extra)


def _cmd(cfg: Path) -> list[str]:
    return [sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress", "--no-report",
            "--allow-unvalidated-judge"]


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs, or skip when mounting is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path, leave: int) -> Path:
    """Fill the filesystem until about ``leave`` bytes are free; returns the filler file."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    filler = mnt / "filler"
    with filler.open("wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


def test_disk_full_mid_run_keeps_every_answered_call_and_finishes_when_space_returns(tmp_path, small_disk):
    with FaultServer(fault_rate=0.0, delay_s=0.02) as srv:
        cfg = _config(tmp_path / "c.toml", srv.url, small_disk / "cache.sqlite", tmp_path / "out",
                      extra="cache_write_retry_s = 60.0")
        from lmra.cache import CallCache

        CallCache(small_disk / "cache.sqlite").close()  # the cache exists; then the disk fills
        filler = _fill(small_disk, 64 * 1024)
        proc = subprocess.Popen(_cmd(cfg), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []

        def watch():
            for line in proc.stderr:
                lines.append(line)
                if "cannot write to the call cache" in line:
                    time.sleep(1.0)  # more answers arrive while the disk is full
                    filler.unlink()  # the operator frees space

        t = threading.Thread(target=watch)
        t.start()
        t.join(timeout=300)
        proc.wait(timeout=60)
        err = "".join(lines)
        assert "Traceback" not in err
        assert "cannot write to the call cache" in err and str(small_disk / "cache.sqlite") in err
        assert "writable again" in err
        assert proc.returncode == 0, err
        first = json.loads(next((tmp_path / "out").glob("*/manifest.json")).read_text())
        assert first["status"] == "complete"
        n = srv.requests
        again = subprocess.run(_cmd(cfg), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert srv.requests == n  # every answered call was kept: the re-run is all cache hits


def test_disk_that_stays_full_fails_with_the_path_and_exit_1(tmp_path, small_disk):
    with FaultServer(fault_rate=0.0) as srv:
        out = small_disk / "out"
        cfg = _config(tmp_path / "c.toml", srv.url, small_disk / "cache.sqlite", out, extra="cache_write_retry_s = 1.0")
        _fill(small_disk, 40 * 1024)
        r = subprocess.run(_cmd(cfg), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in r.stderr
    assert r.returncode == 1, r.stderr
    assert "I/O failure" in r.stderr and str(small_disk) in r.stderr
    # nothing is left as if it had succeeded: no half-written file, no folder that says complete
    for d in out.glob("*"):
        assert folder_status(d) in ("failed", "stale"), d
        assert not list(d.glob(".*.tmp"))
        for f in d.glob("*.jsonl"):
            text = f.read_text()
            assert not text or text.endswith("\n")


def test_unwritable_cache_location_names_the_path(tmp_path, capsys):
    from lmra.cli import main

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    cfg = _config(tmp_path / "c.toml", "http://127.0.0.1:9/v1", blocker / "cache.sqlite", tmp_path / "out")
    code = main(_cmd(cfg)[3:])
    err = " ".join(capsys.readouterr().err.split())
    # the config's fault, said before anything runs (it was an I/O failure, exit 1, once the run started)
    assert code == 2 and "Traceback" not in err
    assert f"field 'cache': {blocker / 'cache.sqlite'} cannot be created: {blocker} is a file, not a folder" in err
    assert not (tmp_path / "out").exists()


def test_two_audits_in_the_same_second_never_share_a_folder(tmp_path, sim_inputs):
    from lmra import Audit
    from lmra.config import AuditConfig
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget

    names, prompts = sim_inputs(4)
    cfg = AuditConfig.model_validate({
        "name": "same", "names": str(names), "prompts": str(prompts), "output_dir": str(tmp_path / "r"),
        "cache": str(tmp_path / "c.sqlite"), "judge_check": {"enabled": False}, "filter": {"enabled": False},
        "refusal": {"enabled": False}})
    a1 = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"one {rng.random():.6f}"), judge=ScriptedJudge(lambda a, b: {"C": 1.0}))
    a2 = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"two {rng.random():.6f}"), judge=ScriptedJudge(lambda a, b: {"C": 1.0}))
    a2.run_dir = a1.run_dir  # same name, same second
    r1, r2 = a1.run(), a2.run()
    assert r1.run_dir != r2.run_dir and r2.run_dir.name == r1.run_dir.name + "-2"
    assert json.loads((r1.run_dir / "manifest.json").read_text())["status"] == "complete"


def test_a_killed_audit_leaves_a_folder_every_command_calls_stale(tmp_path, capsys):
    from lmra.cli import main

    with FaultServer(fault_rate=0.0, delay_s=0.2) as srv:
        cfg = _config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out")
        proc = subprocess.Popen(_cmd(cfg), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and not list((tmp_path / "out").glob("*/manifest.json")):
            time.sleep(0.1)
        (run_dir,) = [p.parent for p in (tmp_path / "out").glob("*/manifest.json")]
        assert folder_status(run_dir, mark=False) == "running"
        proc.kill()
        proc.wait()
    assert folder_status(run_dir) == "stale"
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "stale"
    code = main(["export", str(run_dir), "--format", "csv"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "stale" in err and "killed" in err


def test_a_killed_but_unreaped_process_holds_no_lease():
    from lmra.cache import pid_alive

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 10
    while time.time() < deadline and pid_alive(p.pid):  # exits, and stays a zombie until waited for
        time.sleep(0.05)
    assert not pid_alive(p.pid)
    assert Path(f"/proc/{p.pid}").exists()  # still a zombie: kill(pid, 0) alone would call it alive
    p.wait()
    assert pid_alive(os.getpid())


def test_run_files_get_the_umask_mode_not_0600(tmp_path):
    from lmra.fileio import write_text

    old = os.umask(0o022)
    try:
        write_text(tmp_path / "x.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("mask,mode", [(0o077, 0o600), (0o022, 0o644), (0o002, 0o664)])
def test_ratings_parquet_gets_the_umask_mode_too(tmp_path, mask, mode):
    """Break-it finding (s40): ratings.parquet was always 0644 — world-readable under umask 077, where
    every other file of the run was 0600."""

    from lmra.pairstore import PairWriter

    old = os.umask(mask)
    try:
        with PairWriter(tmp_path / "ratings.parquet", row_group=1_000) as w:
            w.write_rows([{"pair_id": "a", "h": 0.1}, {"pair_id": "b", "h": 0.2}])
    finally:
        os.umask(old)
    assert (tmp_path / "ratings.parquet").stat().st_mode & 0o777 == mode


def test_run_status_rules():
    from lmra.runstate import failed_share, run_status

    assert failed_share(2, 20, 1, 2) == (2 + 2) / (20 + 2)
    assert run_status(0.0, 0.05, 10) == "complete"
    assert run_status(0.05, 0.05, 10) == "complete" and run_status(0.051, 0.05, 10) == "partial"
    assert run_status(0.4, 0.05, 0) == "failed"  # no valid pair scored and calls failed
    # nothing failed, nothing scored (every pair refused, unlabelled or invalid): no stereotype
    # rate, so not a complete run (break-it finding: it exited 0) — partial, its tables readable
    assert run_status(0.0, 0.05, 0) == "partial"


def test_what_becomes_of_calls_the_cache_could_not_store_is_said_truly(tmp_path):
    """Break-it finding: a full disk said "(they will be asked again)" although the answer log
    held 152 of the 180 calls, which the next run stored."""
    from lmra.cache import CallCache

    cache = CallCache(tmp_path / "c.sqlite")
    try:
        log = cache._answers
        assert log is not None and "stored when the cache is next opened" in cache._fate_of_pending()
        log.failed = True  # the log's own write failed too: part of the calls are in it
        assert "holds are stored when the cache is next opened, the rest are asked again" in cache._fate_of_pending()
        cache._answers = None
        assert cache._fate_of_pending() == "a re-run asks them again"
        cache._answers = log
        log.failed = False
    finally:
        cache.close()


def test_a_damaged_call_cache_is_named_in_the_failure(tmp_path, capsys):
    """Break-it finding: a page of cache.sqlite overwritten mid-file gave "I/O failure:
    DatabaseError: database disk image is malformed" naming no file (SQLite names none)."""
    from test_gates import FLAT, write_config

    from lmra.cli import main

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=40)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    cache = tmp_path / "cache-1.sqlite"
    data = bytearray(cache.read_bytes())
    n = len(data) // 4096
    assert n > 8
    for page in range(n // 4, 3 * n // 4):  # the middle half of the file (the first pages open fine)
        data[page * 4096:(page + 1) * 4096] = bytes((i * 7919) % 251 for i in range(4096))
    cache.write_bytes(bytes(data))
    for extra in (cache.with_name(cache.name + "-wal"), cache.with_name(cache.name + "-shm")):
        extra.unlink(missing_ok=True)
    capsys.readouterr()
    import lmra.cache

    lmra.cache.USED_PATHS.clear()  # (the caches of other tests in this process: a command opens its own)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    # (since round 32 a lookup that meets the damage names it as the cache's own, with the way on)
    assert f"I/O failure: {cache}: the call cache is damaged (database disk image is malformed)" in err, err
    assert "Move the file aside" in err and "Traceback" not in err


def test_calls_a_full_cache_disk_cannot_hold_are_spilled_and_stored_at_the_next_open(tmp_path, small_disk):
    """Break-it finding: with the cache's disk full past cache_write_retry_s, the calls its
    answer log (on the same disk) could not hold either were lost — 151 of 162 answered calls
    asked, and paid for, again. They are spilled to a log on another disk ($LMRA_SPILL_DIR
    here), named in the failure, and stored when the cache is next opened."""
    with FaultServer(fault_rate=0.0, delay_s=0.01) as srv:
        cache = small_disk / "cache.sqlite"
        cfg = _config(tmp_path / "c.toml", srv.url, cache, tmp_path / "out", extra="cache_write_retry_s = 1.0")
        from lmra.cache import CallCache

        CallCache(cache).close()  # the cache exists; then its disk fills
        filler = _fill(small_disk, 150 * 1024)  # room to open it (its WAL), not for the run's calls
        env = os.environ | {"LMRA_SPILL_DIR": str(tmp_path / "spill")}
        r = subprocess.run(_cmd(cfg), cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        err = " ".join(r.stderr.split())
        assert r.returncode == 1 and "Traceback" not in err, err
        (spilled,) = list((tmp_path / "spill").glob("*-answers-*.log")) or [err]
        assert f"they are kept in {spilled} (the cache's own disk could not hold them)" in err
        answered = srv.requests
        assert answered > 0
        filler.unlink()  # space returns
        again = subprocess.run(_cmd(cfg), cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert again.returncode == 0, again.stderr
        assert "stored" in again.stderr and "answered call(s) of an earlier run" in again.stderr
        assert srv.requests == answered  # nothing asked again: every answered call was kept
        assert not list((tmp_path / "spill").glob("*-answers-*"))  # taken over and deleted


def test_a_file_size_limit_loses_no_answered_call(tmp_path):
    """Break-it finding: under a per-file size limit (``ulimit -f``: EFBIG on every file past
    it) the cache, its answer log and the spill log all stop at the limit; the spill had to fit
    one log, so nothing was spilled and the calls past the cache's and the log's rows were asked
    (and paid for) again. Now the spill goes on in as many logs as it takes, and the next open
    of the cache stores them all: the re-run asks nothing again."""
    import resource

    limit = 96 * 1024

    def capped():  # the audit's own files, every one of them, stop at the limit
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with FaultServer(fault_rate=0.0, delay_s=0.0) as srv:
        cache = tmp_path / "cache" / "cache.sqlite"
        cfg = audit_config(tmp_path / "c.toml", srv.url, cache, tmp_path / "out", name="disk", tasks=TASKS,
                           per_task=25, concurrency=4, retries=None, timeout_s=None, top="cache_write_retry_s = 1.0")
        from lmra.cache import CallCache

        CallCache(cache).close()  # the cache exists (SQLite's files), then the run is capped
        env = os.environ | {"LMRA_SPILL_DIR": str(tmp_path / "spill")}
        r = subprocess.run(_cmd(cfg), cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
                           preexec_fn=capped)
        err = " ".join(r.stderr.split())
        assert r.returncode == 1 and "Traceback" not in err, err[-3000:]
        answered = srv.requests
        spilled = list((tmp_path / "spill").glob("*-answers-*.log"))
        assert len(spilled) >= 2, (answered, spilled, err[-2000:])  # one log could not hold them
        assert all(p.stat().st_size <= limit for p in spilled)
        again = subprocess.run(_cmd(cfg), cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert srv.requests == answered  # every answered call was kept: none asked again


def test_a_kill_while_the_cache_disk_is_full_loses_no_answered_call(tmp_path, small_disk):
    """Break-it finding: with the cache's disk full its answer log (on the same disk) failed too,
    so the calls answered meanwhile were held in memory only; a ``kill -9`` then (the OOM killer,
    a CI hard kill) lost every one of them — 27 to 83 paid calls asked again by the re-run. They
    now go on in an answer log on another disk ($LMRA_SPILL_DIR here), which the re-run stores:
    it asks again at most the calls that were in flight at the kill (concurrency 2)."""
    from lmra.cache import CallCache

    with FaultServer(fault_rate=0.0, delay_s=0.02) as srv:
        cache = small_disk / "cache.sqlite"
        cfg = _config(tmp_path / "c.toml", srv.url, cache, tmp_path / "out", extra="cache_write_retry_s = 60.0")
        CallCache(cache).close()  # the cache exists; then its disk fills
        filler = _fill(small_disk, 64 * 1024)
        env = os.environ | {"LMRA_SPILL_DIR": str(tmp_path / "spill")}
        proc = subprocess.Popen(_cmd(cfg), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=env)
        lines: list[str] = []
        full = threading.Event()

        def watch():
            for line in proc.stderr:
                lines.append(line)
                if "cannot write to the call cache" in line:
                    full.set()

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        assert full.wait(timeout=120), "".join(lines)
        at_full = srv.requests
        deadline = time.monotonic() + 30
        while srv.requests < at_full + 20 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)  # more calls answered while the disk is full
        assert proc.poll() is None, "".join(lines)
        proc.kill()
        proc.wait(timeout=60)
        t.join(timeout=10)
        answered = srv.requests
        assert answered >= at_full + 20
        err = " ".join("".join(lines).split())
        assert "answered calls go on in" in err and str(tmp_path / "spill") in err, err
        filler.unlink()  # space returns; the night is run again
        again = subprocess.run(_cmd(cfg), cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert again.returncode == 0, again.stderr
        assert "answered call(s) of an earlier run" in again.stderr
        asked_again = sum(n - 1 for n in srv.requests_by_body.values() if n > 1)
        assert asked_again <= 2, asked_again  # only the calls in flight at the kill are asked again
        assert not list((tmp_path / "spill").glob("*-answers-*"))  # taken over and deleted


def test_an_io_failure_after_the_run_folder_says_what_to_do_and_ends_with_the_exit_status_line(tmp_path, monkeypatch,
                                                                                               capsys):
    """Break-it findings: a failure of the run history after the run folder was complete (its disk
    filled) ended with 'I/O failure: …history.sqlite: the run history could not be used' only —
    no word that the folder is complete nor how to finish the night, and without the documented
    final 'exit status 1: …' line that every other exit-1 ending prints."""
    from lmra.cli import main
    from lmra.errors import LmraIOError
    from lmra.history import History

    def full(self, *a, **k):  # the history's disk filled after the run folder was written
        raise LmraIOError("the run history could not be used (OperationalError: database or disk is full)",
                          path=tmp_path / "out" / "history.sqlite")

    monkeypatch.setattr(History, "record_check", full)
    monkeypatch.chdir(tmp_path)
    with FaultServer(fault_rate=0.0) as srv:
        out = tmp_path / "out"
        cfg = _config(tmp_path / "c.toml", srv.url, tmp_path / "cache.sqlite", out)
        assert main(_cmd(cfg)[3:] + ["--baseline", "pinned"]) == 0  # the first night: pinned
        capsys.readouterr()
        cfg.write_text(cfg.read_text().replace("prompts_per_task = 2", "prompts_per_task = 2\nseed = 2"))
        assert main(_cmd(cfg)[3:] + ["--baseline", "pinned"]) == 1
    cap = capsys.readouterr()
    err, said = " ".join(cap.err.split()), " ".join(cap.out.split())
    assert "I/O failure" in err and "history.sqlite" in err and "Traceback" not in err
    run = max(p for p in out.iterdir() if p.is_dir() and p.name != "warehouse")
    assert folder_status(run) == "complete"
    assert f"the run had finished: its folder {run} is written and keeps its status" in err
    assert f"'lmra check {run} --baseline pinned'" in err
    # the final line says why on its own (break-it, s40: "the failure above" only)
    assert "exit status 1: the failure above (" in said and "history.sqlite" in said.split("exit status 1:")[-1], \
        said[-300:]


def make_filling(cfg):
    """A recsys target that fills the disk named by $LMRA_TEST_FILL_DIR at its first call."""
    from test_recsys_e2e import ScriptedRecommender

    class _Filling(ScriptedRecommender):
        filled = False

        async def complete(self, request):
            if not _Filling.filled:
                _Filling.filled = True
                _fill(Path(os.environ["LMRA_TEST_FILL_DIR"]), 0)
            return await super().complete(request)

    return _Filling(cfg)


def test_a_recsys_run_on_a_full_output_disk_does_not_say_running_for_ever(tmp_path, small_disk, monkeypatch, capsys):
    """Break-it finding: a recsys run whose output disk filled up exited 1 ("cannot write this file
    (No space left on device)") with its manifest saying "running" for ever: no room for the
    temporary file of the final manifest, and a recsys folder has no lock to be found stale by.
    The stopped run's manifest is written over the running one in its own blocks."""
    from test_recsys_e2e import run_cli, write_config

    monkeypatch.setenv("LMRA_TEST_FILL_DIR", str(small_disk))
    cfg = write_config(tmp_path, "full", """
[target]
provider = "test_disks:make_filling"
[fairllm]
names_list = ["Adele", "Drake", "Queen", "Sting"]
attributes = ["gender"]
""")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress", "--output-dir", str(small_disk / "out")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "No space left on device" in err and "Traceback" not in err, err[-1500:]
    [run] = [p for p in (small_disk / "out").iterdir() if p.is_dir()]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "No space left on device" in manifest["stop_reason"], manifest
    assert manifest["finished"]


def test_an_audit_killed_before_its_manifest_is_listed_not_finished(tmp_path, capsys):
    """Break-it finding (s37): ``kill -9`` 1.5 s into an audit left a folder holding only
    ``run.lock`` and a temporary config — listed nowhere, unlike every other killed night. It is
    listed as running while its process holds the lock, then stale, with why."""
    from lmra.cli import main
    from lmra.history import History

    reports = tmp_path / "reports"
    folder = reports / "20261201-021500-nightly"
    folder.mkdir(parents=True)
    (folder / ".config.toml.123.tmp").write_text("name = ")  # cut short, as the kill left it
    code = ("import sys, time; from pathlib import Path; from lmra.runstate import RunLock; "
            "lock = RunLock(Path(sys.argv[1])).acquire(); print('locked', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with History(reports / "history.sqlite") as h:
            (row,) = h.not_finished()
        assert row["status"] == "running" and row["run_id"] == folder.name and row["name"] == "nightly"
    finally:
        proc.kill()
        proc.wait()
    with History(reports / "history.sqlite") as h:
        (row,) = h.not_finished()
        assert h.not_finished(name="other") == []
    # its start: when the lock was taken (the folder name's stamp is the writer's local time, another time zone's)
    lock_time = _dt.datetime.fromtimestamp((folder / "run.lock").stat().st_mtime).astimezone()
    assert row["status"] == "stale" and _dt.datetime.fromisoformat(row["started"]) == lock_time.replace(microsecond=0)
    assert "stopped before it wrote its manifest" in row["stop_reason"]
    assert main(["history", "--reports-dir", str(reports)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 run folder did not finish" in out and f"{folder.name}: stale" in out
    assert "stopped before it wrote its manifest" in out
    # a folder of another kind (no run.lock) and a complete run's are not listed
    (reports / "20261201-021600-recsys").mkdir()
    with History(reports / "history.sqlite") as h:
        assert [r["run_id"] for r in h.not_finished()] == [folder.name]


def test_latest_says_which_newer_run_folders_it_passed_over(tmp_path, capsys):
    """Fresh-user finding (s38): after a failed night, 'lmra check latest' checked the night before
    without saying the newest one had not completed. 'latest' names the newer folders it passed over."""
    from lmra.cli import main
    from test_gates import FLAT, audit, write_config

    cfg = write_config(tmp_path, name="nightly", rates=FLAT, n_prompts=8)
    rc, _, run = audit(capsys, cfg)
    assert rc == 0
    reports = run.parent
    assert main(["gate", "latest", "--gate", "max_net_rating=1", "--reports-dir", str(reports)]) == 0
    assert "passed over" not in capsys.readouterr().err and "did not complete" not in capsys.readouterr().err
    killed = reports / "20991231-000000-nightly"  # a newer night killed as it started (stale, no manifest)
    killed.mkdir()
    (killed / "run.lock").write_text("")
    assert main(["gate", "latest", "--gate", "max_net_rating=1", "--reports-dir", str(reports)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"note: 'latest' is {run.name}, the newest complete run; 1 newer run folder did not complete: "
            "20991231-000000-nightly (stale) ('lmra history' says why; name a run to use it)") in err


def test_a_cache_this_user_cannot_write_is_refused_before_any_call(tmp_path):
    """Break-it finding (s38): a cache.sqlite left owned by root (a sudo run) was found read-only only
    after the night's 178 calls, a 60 s wait and a "free space" advice. It is refused first, naming
    the file and its owner. Checked as a user that really cannot write it: as root, in a forked
    child that drops to uid 65534 (root may write any file); else with the file made read-only."""
    import shutil
    import tempfile

    from lmra.cache import CallCache
    from lmra.errors import LmraIOError
    from lmra.fileio import require_writable_cache

    folder = Path(tempfile.mkdtemp(prefix="lmra-rocache-"))
    try:
        folder.chmod(0o755)
        db = folder / "cache.sqlite"
        CallCache(db).close()
        db.chmod(0o644)
        require_writable_cache(str(db))  # its owner may write it
        require_writable_cache(":memory:")
        require_writable_cache(str(folder / "new.sqlite"))  # not created yet: fine

        def refused() -> str:
            try:
                require_writable_cache(str(db))
            except LmraIOError as exc:
                return str(exc)
            return ""

        if os.geteuid() == 0:
            pid = os.fork()
            if pid == 0:  # the child: another user, then the check
                try:
                    os.setuid(65534)
                    said = refused()
                    os._exit(0 if "the call cache cannot be written by this user (owner root, mode 644)" in said else 3)
                except BaseException:
                    os._exit(4)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0, status
        else:
            db.chmod(0o444)
            assert "the call cache cannot be written by this user" in refused()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_history_that_is_a_device_is_an_input_error(capsys):
    """Break-it finding (s38): ``lmra history --history /dev/zero`` was an I/O failure ("disk I/O
    error", exit 1) and ``lmra report --history /dev/zero`` said "no such history file"."""
    from lmra.cli import main

    assert main(["history", "--history", "/dev/zero"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "/dev/zero" in err and "is not a regular file (a device, pipe or socket)" in err
    assert main(["report", "--history", "/dev/zero"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is not a regular file (a device, pipe or socket)" in err and "no such history file" not in err


def test_a_cache_on_a_read_only_filesystem_is_said_so_not_chown(small_disk):
    """Break-it finding (s42): a cache on a read-only mount was refused as "cannot be written by this
    user (owner root, mode 644) … chown/chmod", which cannot mend a read-only filesystem."""
    from lmra.cache import CallCache
    from lmra.errors import LmraIOError
    from lmra.fileio import require_writable_cache

    db = small_disk / "cache.sqlite"
    CallCache(db).close()
    require_writable_cache(str(db))  # writable: fine
    r = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot remount the tmpfs read-only here")
    with pytest.raises(LmraIOError) as exc:
        require_writable_cache(str(db))
    assert "read-only filesystem" in exc.value.reason and "chown" not in exc.value.reason
    assert exc.value.path == str(db)

"""``kill -9`` loses no answered call (lmra.answerlog): each answered call is appended to the
cache connection's answer log before its batch is written, and the next open of the cache
stores what a killed process left there (break-it finding: one kill -9 lost 4 of 256 answered
calls — those answered in the last batch window, up to 50 ms or 500 calls)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lmra.answerlog import AnswerLog, recover
from lmra.cache import CallCache

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock and SIGKILL are POSIX")


def _cfg_json(tmp_path, sim_inputs) -> Path:
    from lmra.config import AuditConfig

    names, prompts = sim_inputs(400)
    cfg = AuditConfig.model_validate(dict(
        name="killed", prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=16,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}))
    path = tmp_path / "cfg.json"
    path.write_text(cfg.model_dump_json())
    return path


def test_kill_9_loses_no_answered_call(tmp_path, sim_inputs):
    cfg_path = _cfg_json(tmp_path, sim_inputs)
    answered = tmp_path / "answered.txt"
    # the child notes every call the cache is given (put), in the kernel at once, then goes on
    script = textwrap.dedent(f"""
        import os, sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import NAME_TO_GROUP
        from doubles import ScriptedJudge, ScriptedTarget
        from lmra import Audit
        from lmra.cache import CallCache
        from lmra.config import AuditConfig
        import lmra.cache
        lmra.cache.WRITE_BATCH_S, lmra.cache.WRITE_BATCH_CALLS = 30.0, 10**9  # no batch written before the kill
        fd = os.open({str(answered)!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        put = CallCache.put
        def noted(self, key, *a, **k):
            put(self, key, *a, **k)
            os.write(fd, (key + "\\n").encode())
        CallCache.put = noted
        cfg = AuditConfig.model_validate_json(open({str(cfg_path)!r}).read())
        t = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "r", delay=0.002)
        Audit(cfg, target=t, judge=ScriptedJudge(lambda a, b: {{"C": 1.0}})).run()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
        if answered.exists() and answered.stat().st_size > 300 * 97:  # a few hundred calls answered
            break
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    keys = set(answered.read_text().split())
    db = sqlite3.connect(tmp_path / "cache.sqlite")
    before = {k for (k,) in db.execute("SELECT key FROM calls")}
    db.close()
    logs = list(tmp_path.glob("cache.sqlite-answers-*.log"))
    assert len(logs) == 1 and logs[0].stat().st_size > 0  # the killed run's log, with the unwritten calls
    cache = CallCache(tmp_path / "cache.sqlite")  # stores them
    after = {k for (k,) in cache._db.execute("SELECT key FROM calls")}
    assert cache.recovered >= len(keys - before) > 0  # the batch window held calls: they were not lost
    cache.close()
    assert keys <= after  # every answered call is in the cache
    assert not list(tmp_path.glob("cache.sqlite-answers-*"))  # the taken-over log is gone, and this one


def test_a_live_connections_log_is_left_alone_and_a_torn_line_skipped(tmp_path):
    path = tmp_path / "c.sqlite"
    live = CallCache(path)
    own = live._answers.path
    row = ("k1", "p", "u", "m", "{}", '{"text":"x"}', 1.5)
    live._answers.append(row)
    rows, taken = recover(path)  # the live connection holds its log's lock
    assert rows == [] and taken == [] and own.exists()
    # a dead writer's log: its rows are read, a line cut short by the kill is skipped
    dead = tmp_path / "c.sqlite-answers-1-dead.log"
    dead.write_bytes(b'["k2","p","u","m","{}","{\\"text\\":\\"y\\"}",2.0]\n["k3","p","u"')
    rows, taken = recover(path)
    assert rows == [("k2", "p", "u", "m", "{}", '{"text":"y"}', 2.0)] and [p for p, _ in taken] == [dead]
    from lmra.answerlog import release

    release(taken)
    assert not dead.exists()
    live.close()
    assert not own.exists()  # closed cleanly, everything written: no log left


def test_calls_that_could_not_be_written_stay_in_the_log_for_the_next_open(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = CallCache(path, write_retry_s=0)
    log = cache._answers.path
    cache._answers.append(("k9", "p", "u", "m", "{}", '{"text":"z"}', 3.0))
    cache.pending["k9"] = ("k9", "p", "u", "m", "{}", '{"text":"z"}', 3.0)
    cache._write_pending = lambda: False  # the disk is full until the end
    cache.close()
    assert log.exists()  # kept: its call is not in the database
    again = CallCache(path)
    assert again.recovered == 1 and again.get("k9").text == "z"
    again.close()


def test_a_log_line_is_one_row_and_the_log_is_emptied_once_written(tmp_path):
    log = AnswerLog(tmp_path / "x.sqlite")
    log.append(("a", "p", "u", "m", "{}", "{}", 1.0))
    log.append(("b", "p", "u", "m", "{}", "{}", 2.0))
    assert log.path.read_bytes().count(b"\n") == 2 and log.lines == 2
    log.clear()
    assert log.path.read_bytes() == b"" and log.lines == 0
    log.close(keep=False)
    assert not log.path.exists()


@pytest.mark.parametrize("name, other", [("cache[prod].sqlite", None), ("c?.sqlite", "c1.sqlite")])
def test_a_cache_name_with_glob_characters_finds_its_own_logs_only(tmp_path, name, other):
    row = ("k1", "p", "u", "m", "{}", '{"text":"mine"}', 1.0)
    (tmp_path / f"{name}-answers-1-dead.log").write_bytes(b'["k1","p","u","m","{}","{\\"text\\":\\"mine\\"}",1.0]\n')
    if other:  # another cache's dead log, which a glob of "c?.sqlite" would match
        (tmp_path / f"{other}-answers-2-dead.log").write_bytes(b'["k2","p","u","m","{}","{\\"text\\":\\"x\\"}",1.0]\n')
    cache = CallCache(tmp_path / name)
    assert cache.recovered == 1 and cache.get(row[0]).text == "mine" and cache.get("k2") is None
    cache.close()
    if other:
        assert (tmp_path / f"{other}-answers-2-dead.log").exists()  # left for its own cache


def test_recovered_counts_the_calls_stored_not_the_lines_read(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = CallCache(path)
    cache.pending["k"] = ("k", "p", "u", "m", "{}", '{"text":"x"}', 1.0)
    cache._write_pending()
    cache.close()
    line = b'["k","p","u","m","{}","{\\"text\\":\\"x\\"}",1.0]\n'
    (tmp_path / "c.sqlite-answers-9-dead.log").write_bytes(line * 3)  # written already, three times
    again = CallCache(path)
    assert again.recovered == 0
    again.close()


def test_opening_statements_wait_out_a_locked_database_and_raise_anything_else():
    """Two processes opening a new cache file at once: SQLite may answer "database is locked"
    to one of them without waiting (seen in CI: one audit of two sharing a cache exited 1)."""
    from lmra.cache import _when_unlocked

    tries = []

    def locked_twice():
        tries.append(1)
        if len(tries) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "ok"

    assert _when_unlocked(locked_twice) == "ok" and len(tries) == 3

    def broken():
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _when_unlocked(broken)


def test_processes_opening_a_new_cache_at_once_all_open_it(tmp_path):
    code = ("import sys; from lmra.cache import CallCache; c = CallCache(sys.argv[1]); "
            "c.put('k' + sys.argv[2], type('P', (), {'name': 'p', 'base_url': '', 'model_id': 'm'})(), "
            "__import__('lmra.providers.base', fromlist=['x']).ChatRequest(messages=[]), "
            "__import__('lmra.providers.base', fromlist=['x']).ChatResult(text='x')); c.close()")
    for round_ in range(2):
        path = tmp_path / f"new{round_}.sqlite"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(i)], stderr=subprocess.PIPE, text=True)
                 for i in range(4)]
        errs = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, errs
        db = sqlite3.connect(path)
        assert db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 4
        db.close()


def test_a_line_cut_short_by_a_full_disk_is_taken_back(tmp_path):
    """Break-it finding: a write the disk cut short (ENOSPC, a file size limit) was counted as
    logged; once space returned, the next call's line was glued to the cut one, and both were
    lost when the log was recovered (the log was set aside as unreadable). The cut line is
    taken back and the log marked failed (its calls are held in memory). A real short write:
    a file size limit (RLIMIT_FSIZE) in a child process, lifted again afterwards."""
    script = textwrap.dedent(f"""
        import os, resource, signal, sys
        from lmra.answerlog import AnswerLog
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit is cut short, not fatal
        log = AnswerLog({str(tmp_path / 'cache.sqlite')!r})
        row = lambda i, n: (f"key{{i}}", "openai", "http://x", "m", "{{}}", "x" * n, 1.0)
        log.append(row(0, 100))
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.fstat(log.fd).st_size + 50, hard))
        log.append(row(1, 20000))  # 50 bytes of it fit
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # the space is back
        print(log.lines, log.failed, flush=True)
        log.append(row(2, 100))
        print(log.lines, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the writer dies with its log
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert r.stdout.split() == ["1", "True", "2"]
    unreadable: list = []
    rows, taken = recover(tmp_path / "cache.sqlite", unreadable)
    assert [row[0] for row in rows] == ["key0", "key2"] and not unreadable
    for _, fd in taken:
        os.close(fd)


def test_a_spill_folder_others_may_write_is_never_read(tmp_path, monkeypatch):
    """Break-it finding: another local user could create the shared spill folder (mode 1777)
    and plant a log there, which the next open of the cache stored as genuine answers. A spill
    folder — or a spilled log — that is not the user's own, or that others may write, is
    ignored; the user's own are taken over."""
    from lmra.answerlog import spill, spill_folders

    monkeypatch.setenv("LMRA_SPILL_DIR", str(tmp_path / "spill"))
    cache = tmp_path / "cache.sqlite"
    row = ("k1", "p", "", "m", "{}", '{"text": "FORGED"}', 1.0)
    paths, kept = spill(cache, [row])
    assert kept == 1 and len(paths) == 1 and paths[0].parent == tmp_path / "spill"
    path = paths[0]
    os.chmod(tmp_path / "spill", 0o777)  # open to every user: its logs may be planted
    rows, taken = recover(cache)
    assert rows == [] and taken == [] and path.exists()
    os.chmod(tmp_path / "spill", 0o700)
    os.chmod(path, 0o666)  # a log others may write
    rows, taken = recover(cache)
    assert rows == [] and path.exists()
    os.chmod(path, 0o600)
    rows, taken = recover(cache)
    assert [r[0] for r in rows] == ["k1"]
    for _, fd in taken:
        os.close(fd)
    assert spill_folders()[1].name == f"lmra-unsaved-calls-{os.getuid()}"  # per user in the temp folder

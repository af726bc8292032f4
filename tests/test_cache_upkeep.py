"""``lmra cache info`` / ``lmra cache prune`` (lmra.cache_upkeep): a nightly audit's cache grows by
every night's calls; pruning by age deletes exactly the rows stored before the cutoff (calls and
pair-memo rows), keeps the rest usable, gives the disk space back, and a re-run of a pruned
night asks its calls again and gets the same numbers."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.cache import CallCache
from lmra.cache_upkeep import describe, prune
from lmra.cli import main
from lmra.cli.cache import age_arg
from lmra.config import AuditConfig
from lmra.errors import LmraInputError, LmraIOError
from lmra.providers.base import ChatRequest, ChatResult, Message, request_key

DAY = 86400.0


def _cfg(tmp_path, names, prompts, seed):
    return AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "reports" / "cache.sqlite"), concurrency=4,
        judge_check={"enabled": False}))


def _night(cfg):
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} {rng.random():.6f}")
    judge = ScriptedJudge(lambda r1, r2: {"A": 0.2, "B": 0.3, "C": 0.5})
    result = Audit(cfg, target=target, judge=judge).run()
    return result, target.calls + judge.calls


def _age_all_rows(path, days):
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE calls SET created = created - ?", (days * DAY,))
        db.execute("UPDATE pair_memo SET created = created - ?", (days * DAY,))
    db.close()


def _count(path, table):
    db = sqlite3.connect(path)
    try:
        return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        db.close()


def test_prune_deletes_exactly_the_old_nights_and_a_rerun_gets_the_same_numbers(tmp_path, sim_inputs, capsys):
    names, prompts = sim_inputs(30)
    old_cfg, new_cfg = _cfg(tmp_path, names, prompts, 1), _cfg(tmp_path, names, prompts, 2)
    cache = old_cfg.cache
    old, old_calls = _night(old_cfg)
    old_memo = _count(cache, "pair_memo")
    assert old_calls > 0 and old_memo > 0
    _age_all_rows(cache, 40)  # the first night was 40 days ago
    new, new_calls = _night(new_cfg)  # tonight: another seed, all its calls new rows
    assert new.manifest["calls"]["fresh"] == new_calls > 0
    total = _count(cache, "calls")
    assert total == old_calls + new_calls

    assert main(["cache", "prune", "--older-than", "30d", "--cache", cache, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would delete {old_calls:,} calls and {old_memo:,} pair-memo rows" in out
    assert _count(cache, "calls") == total  # a dry run writes nothing

    r = prune(cache, 30 * DAY)
    assert (r.n_calls, r.n_memo, r.n_calls_kept) == (old_calls, old_memo, new_calls)
    assert r.vacuumed and r.vacuum_failed is None and r.bytes_after < r.bytes_before
    assert _count(cache, "calls") == new_calls

    # tonight's rows are kept; the calls tonight replayed from the old night's rows (the identity
    # filter's, which no seed changes) were stored 40 days ago: pruned, and asked again by a re-run
    shared = new.manifest["calls"]["cached"]
    assert shared > 0 and total == old_calls + new_calls
    again, _ = _night(new_cfg)
    assert again.manifest["calls"]["fresh"] == shared
    assert again.per_task.equals(new.per_task)
    redo, redo_calls = _night(old_cfg)  # the pruned night: its calls asked again (but the shared ones, stored
    assert redo.manifest["calls"]["fresh"] == redo_calls == old_calls - shared  # again just now): the same numbers
    assert redo.per_task.equals(old.per_task)


def test_info_counts_rows_by_model_and_cli_prune_says_what_it_did(tmp_path, sim_inputs, capsys):
    names, prompts = sim_inputs(10)
    cfg = _cfg(tmp_path, names, prompts, 3)
    _, calls = _night(cfg)
    s = describe(cfg.cache)
    assert s.n_calls == calls == sum(m.n for m in s.models) and len(s.models) == 2 and s.bytes > 0
    assert s.models[0].n >= s.models[1].n and all(m.oldest <= m.newest for m in s.models)
    assert main(["cache", "info", "--cache", cfg.cache]) == 0
    out = capsys.readouterr().out
    assert f"{calls:,} calls" in out and all(m.model in out for m in s.models)

    assert main(["cache", "prune", "--older-than", "1h", "--cache", cfg.cache]) == 0  # nothing that old
    out = capsys.readouterr().out
    assert "deleted 0 calls and 0 pair-memo rows" in out and f"{calls:,} calls kept" in out
    _age_all_rows(cfg.cache, 2)
    assert main(["cache", "prune", "--older-than", "36h", "--cache", cfg.cache]) == 0
    out = capsys.readouterr().out
    assert f"deleted {calls:,} calls" in out and "0 calls kept" in out and "on disk" in out
    assert "can no longer be resumed" in out


def test_rows_written_meanwhile_and_open_connections_stay_consistent(tmp_path):
    """A connection that read the keys before the prune (a running audit) does not serve a
    pruned call from what it read; it can still write and read after it."""
    path = tmp_path / "cache.sqlite"
    c = CallCache(path)

    class _P:
        name, base_url, model_id = "openai", "http://127.0.0.1:1/v1", "m"

    reqs = [ChatRequest(messages=[Message(role="user", content=f"q{i}")]) for i in range(600)]
    keys = [request_key("openai", _P.base_url, "m", r) for r in reqs]
    for k, r in zip(keys, reqs):
        c.put(k, _P(), r, ChatResult(text=f"a {k[:6]}"))
    c.flush()
    for i in range(300):  # misses: the connection reads every key once (its key snapshot)
        assert c.get(f"missing-{i}") is None
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE calls SET created = created - ? WHERE rowid % 2 = 0", (10 * DAY,))
    db.close()
    n_old = sum(1 for _ in range(0, 600, 2))
    time.sleep(0.02)
    r = prune(path, 5 * DAY)
    assert r.n_calls == n_old and r.n_calls_kept == 600 - n_old
    time.sleep(0.02)  # the connection looks at the file's version every few ms
    found = sum(c.get(k) is not None for k in keys)
    assert found == 600 - n_old
    late = ChatRequest(messages=[Message(role="user", content="late")])
    lk = request_key("openai", _P.base_url, "m", late)
    c.put(lk, _P(), late, ChatResult(text="late"))
    c.flush()
    assert c.get(lk).text == "late"
    c.close()
    assert describe(path).n_calls == 600 - n_old + 1


def test_prune_waits_for_a_writer_and_fails_plainly_when_it_does_not_end(tmp_path, monkeypatch):
    path = tmp_path / "cache.sqlite"
    CallCache(path).close()
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("INSERT INTO calls VALUES ('k', 'openai', '', 'm', '{}', '{}', 1.0)")
    db.execute("BEGIN IMMEDIATE")  # another process's write transaction
    release = threading.Timer(0.5, lambda: db.execute("COMMIT"))
    release.start()
    r = prune(path, DAY)  # waits for it, then deletes
    release.join()
    assert r.n_calls == 1
    db.execute("INSERT INTO calls VALUES ('k2', 'openai', '', 'm', '{}', '{}', 1.0)")
    db.execute("BEGIN IMMEDIATE")
    monkeypatch.setattr("lmra.cache_upkeep.BUSY_WAIT_S", 0.2)
    with pytest.raises(LmraIOError, match="locked") as exc:
        prune(path, DAY)
    assert exc.value.path == str(path)
    db.execute("ROLLBACK")
    db.close()
    assert _count(path, "calls") == 1  # nothing half-done: the row is there for the next prune


def test_bad_inputs_are_one_paragraph_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["cache", "info"]) == 2
    err = capsys.readouterr().err
    assert "reports/cache.sqlite" in err and "no such file" in err and "Traceback" not in err
    (tmp_path / "notdb.sqlite").write_text("hello\n" * 100)
    assert main(["cache", "prune", "--older-than", "30d", "--cache", "notdb.sqlite"]) == 2
    assert "notdb.sqlite" in capsys.readouterr().err
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(LmraInputError, match="not an lmra call cache"):
        describe(other)
    (tmp_path / "cfg.toml").write_text('name = "x"\ncache = "elsewhere/c.sqlite"\n')
    assert main(["cache", "info", "--config", "cfg.toml"]) == 2
    err = capsys.readouterr().err
    assert "cfg.toml, line 2" in err and "elsewhere/c.sqlite" in err
    for bad in ("0d", "30", "-1d", "2w", "d", "\u0663d", "\uff13d", "3\u00b2d"):  # (s45: Arabic-Indic, full-width)
        with pytest.raises(SystemExit) as exc:
            main(["cache", "prune", "--older-than", bad])
        assert exc.value.code == 2
    assert age_arg("1.5d") == 1.5 * DAY and age_arg("36h") == 36 * 3600


def test_times_no_calendar_holds_are_said_in_seconds_not_a_traceback(tmp_path, capsys):
    """Break-it round 2 (s42): a row written by a clock far ahead, or an age of millennia, made
    ``lmra cache info`` / ``prune`` end in a traceback ("year out of range")."""
    path = tmp_path / "cache.sqlite"
    CallCache(path).close()
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO calls VALUES ('k', 'openai', '', 'm', '{}', '{}', 1e15)")
    db.close()
    assert main(["cache", "info", "--cache", str(path)]) == 0
    assert "1000000000000000 Unix seconds" in capsys.readouterr().out
    # an age reaching back before 1970 is refused: nothing is that old (break-it, s48: the cutoff was said as
    # "-8639999999999997449863168 Unix seconds")
    for age in ("3000000d", "99999999999d"):
        with pytest.raises(SystemExit) as exc:
            main(["cache", "prune", "--older-than", age, "--cache", str(path), "--dry-run"])
        assert exc.value.code == 2
        assert "reaches back before 1970, before any call could be stored" in capsys.readouterr().err
    assert main(["cache", "prune", "--older-than", "3650d", "--cache", str(path), "--dry-run"]) == 0
    assert "1 call kept" in " ".join(capsys.readouterr().out.split())


def test_a_cache_on_a_read_only_filesystem_is_read_and_refused_for_pruning(tmp_path, capsys):
    """Break-it round 2 (s42): on a read-only mount ``cache info`` and ``prune --dry-run``, which only
    read, failed with "unable to open database file" (a WAL database needs its shared-memory file),
    and ``prune`` said the same instead of naming the read-only filesystem."""
    import subprocess

    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        path = mnt / "cache.sqlite"
        c = CallCache(path)
        c.close()
        db = sqlite3.connect(path)
        with db:
            db.execute("INSERT INTO calls VALUES ('k', 'openai', '', 'm', '{}', '{}', 1.0)")
        db.close()
        if subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True).returncode:
            pytest.skip("cannot remount the tmpfs read-only here")
        assert describe(path).n_calls == 1
        assert prune(path, DAY, dry_run=True).n_calls == 1
        with pytest.raises(LmraIOError, match="read-only filesystem"):
            prune(path, DAY)
        # an audit whose cache does not exist yet on that mount is told so too
        with pytest.raises(LmraIOError, match="read-only filesystem"):
            CallCache(mnt / "new.sqlite")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)

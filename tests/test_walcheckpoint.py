"""WAL checkpoints of the call cache in a background thread (lmra.walcheckpoint, issue 14)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading

import lmra.walcheckpoint as wc
from lmra.cache import CallCache
from lmra.providers.base import ChatRequest, ChatResult, Message, request_key
from lmra.walcheckpoint import BACKSTOP_PAGES, Checkpointer


class P:
    name, base_url, model_id = "p", "", "m"


def _req(i: int) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=f"question {i}")], seed=i)


def test_the_log_is_checkpointed_by_the_thread_while_the_writer_goes_on(tmp_path, monkeypatch):
    """The writer's automatic checkpoint is only a backstop; the rows reach the database file
    during the run through the background checkpoints, every row is readable by another
    connection, and closing leaves no log behind."""
    monkeypatch.setattr(wc, "CHECKPOINT_EVERY_S", 0.0)
    path = tmp_path / "c.sqlite"
    text = "x" * 2000
    n = 1200
    ran_in = []
    real = Checkpointer._checkpoint

    def spy(self):
        ran_in.append(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(Checkpointer, "_checkpoint", spy)

    async def go():
        cache = CallCache(path)
        assert cache._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES
        for i in range(n):
            cache.put(request_key("p", "", "m", _req(i)), P(), _req(i), ChatResult(text=f"{i} {text}"))
            if i % 100 == 99:
                await asyncio.sleep(0.06)  # the batch timer writes
        await asyncio.sleep(0.1)
        size_before_close = os.path.getsize(path)
        done = cache._checkpointer.done
        cache.close()
        return size_before_close, done

    size, done = asyncio.run(go())
    assert done >= 1 and ran_in and all(name == "lmra-wal-checkpoint" for name in ran_in)
    assert size > n * 2000 * 0.5  # the rows were copied into the file before the cache closed
    other = sqlite3.connect(path)
    assert other.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == n
    other.close()
    wal = tmp_path / "c.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_close_waits_for_a_checkpoint_under_way_and_errors_are_ignored(tmp_path):
    path = tmp_path / "c.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.executemany("INSERT INTO t VALUES (?)", [("y" * 1000,)] * 200)
    cp = Checkpointer(str(path))
    cp._last_start -= 10
    cp.after_write()
    cp.close()
    assert cp.done == 1 and cp._thread is None
    cp.close()  # idempotent
    cp.after_write()  # closed: starts nothing
    assert cp._thread is None
    db.close()
    broken = Checkpointer(str(tmp_path / "missing" / "x.sqlite"))  # cannot be opened: ignored
    broken._last_start -= 10
    broken.after_write()
    broken.close()
    assert broken.done == 0


def test_one_checkpoint_at_a_time_from_many_threads_and_close_after_it(tmp_path, monkeypatch):
    """Writes from several threads start at most one checkpoint thread at a time (a second
    one would share the connection), and close() returns with none left running."""
    monkeypatch.setattr(wc, "CHECKPOINT_EVERY_S", 0.0)
    running, most, guard = [0], [0], threading.Lock()
    real = Checkpointer._checkpoint

    def spy(self):
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            threading.Event().wait(0.003)
            real(self)
        finally:
            with guard:
                running[0] -= 1

    monkeypatch.setattr(Checkpointer, "_checkpoint", spy)
    for trial in range(20):
        cache = CallCache(tmp_path / f"c{trial}.sqlite")

        def put_many(j):
            for i in range(20):
                cache.put(f"k{j}-{i}", P(), _req(i), ChatResult(text="x" * 3000), request_text="{}")

        threads = [threading.Thread(target=put_many, args=(j,)) for j in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cache.close()
        assert running[0] == 0
        assert not any(t.name == "lmra-wal-checkpoint" and t.is_alive() for t in threading.enumerate())
    assert most[0] == 1


def test_a_relative_path_stays_the_same_file_after_a_chdir_and_a_thread_that_cannot_start_is_ignored(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cp = Checkpointer("c.sqlite")
    assert cp.path == str(tmp_path / "c.sqlite")
    cp.close()

    class NoThread(threading.Thread):
        def start(self):
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(wc.threading, "Thread", NoThread)
    cache = CallCache(tmp_path / "d.sqlite")
    cache._checkpointer._last_start -= 10
    cache.put("k", P(), _req(1), ChatResult(text="x"), request_text="{}")  # written, no error
    cache.close()
    other = sqlite3.connect(tmp_path / "d.sqlite")
    assert other.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 1
    other.close()

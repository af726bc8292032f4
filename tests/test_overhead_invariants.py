"""Structural goals of issue 14 (framework overhead per call), asserted on real components:
one key computation and one cache read per call, no budget query of the database, answered
calls written in batches within a bounded window, no lease rows for a process alone on its
cache (and exact lease handling once a second process joins), the name filter compiled once
per audit, throttled progress bars, and a cached re-run that makes no call and writes the
same per_task.csv. Timings live in bench/bench_overhead.py, never in tests."""

from __future__ import annotations

import asyncio
import io
import random
import re
import time

import pytest
from rich.console import Console

from conftest import NAME_TO_GROUP
from doubles import SimulatedCrash, ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.budget import Budget, BudgetedProvider
from lmra.cache import WRITE_BATCH_CALLS, WRITE_BATCH_S, CachedProvider, CallCache, CallStats
from lmra.config import AuditConfig
from lmra.judge.filter import intro_pattern, lexical_hits
from lmra.providers import base
from lmra.providers.base import ChatRequest, ChatResult, Message, Usage, request_key


class Echo:
    """A zero-latency provider that answers every request with its last message."""

    name, model_id, base_url, supports_logprobs = "echo", "echo-1", "", False

    def __init__(self):
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        return ChatResult(text=f"echo: {request.messages[-1].content}", usage=Usage(prompt_tokens=3, completion_tokens=2),
                          provider=self.name, model=self.model_id)

    async def aclose(self) -> None:
        return None


def _req(i: int) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=f"question {i}")], seed=i)


class Statements:
    """Every SQL statement a cache's connection runs (sqlite3's own trace hook)."""

    def __init__(self, cache: CallCache):
        self.sql: list[str] = []
        cache._db.set_trace_callback(self.sql.append)

    def count(self, pattern: str) -> int:
        return sum(1 for s in self.sql if re.search(pattern, s, re.I | re.S))


def _run_calls(path, n: int, *, budgeted: bool, monkeypatch) -> tuple[list[str], int, Echo]:
    """n distinct calls through (Budgeted)CachedProvider on a cache file; returns the SQL
    statements run, the number of cache keys computed and the provider."""
    keys = []
    real = base.json_key
    monkeypatch.setattr("lmra.cache.json_key", lambda *a: keys.append(a) or real(*a))
    cache = CallCache(path)
    trace = Statements(cache)
    echo = Echo()
    prov = CachedProvider(echo, cache, CallStats())
    if budgeted:
        prov = BudgetedProvider(prov, Budget(max_calls=10 * n))

    async def go():
        await asyncio.gather(*(prov.complete(_req(i)) for i in range(n)))

    asyncio.run(go())
    cache.close()
    return trace.sql, len(keys), echo


def test_one_key_and_one_cache_read_per_call_and_the_budget_never_reads_the_database(tmp_path, monkeypatch):
    n = 250
    sql, keys, echo = _run_calls(tmp_path / "budget.sqlite", n, budgeted=True, monkeypatch=monkeypatch)
    assert echo.calls == n
    assert keys == n  # the key is computed once per call (it was twice with the budget)
    reads = sum(1 for s in sql if s.startswith("SELECT"))
    writes = sum(1 for s in sql if s == "BEGIN IMMEDIATE")
    # answers are written in batches (each full batch, or every WRITE_BATCH_S), never one per call
    assert 1 <= writes <= n // 10
    assert sum(1 for s in sql if s.startswith("INSERT OR REPLACE INTO calls")) == n
    # one read per call, plus one re-read each time this process starts a spell alone on the cache
    # (a spell ends when nothing is in flight and every answer is written, so after a write at most);
    # the budget reads nothing: it decides "cached or fresh" from the cache wrapper's lookup
    # (before, it read every call once more: 2n reads)
    assert n <= reads <= n + 1 + writes
    assert all(s.startswith("SELECT rowid, result FROM calls WHERE key = ") for s in sql if s.startswith("SELECT"))
    # a process alone on its cache takes no lease rows
    assert not [s for s in sql if "leases" in s]


def test_a_cached_call_is_read_once_and_written_never(tmp_path, monkeypatch):
    path = tmp_path / "c.sqlite"
    _run_calls(path, 120, budgeted=True, monkeypatch=monkeypatch)
    sql, keys, echo = _run_calls(path, 120, budgeted=True, monkeypatch=monkeypatch)
    assert echo.calls == 0 and keys == 120
    # at most one statement per call: a hit found by a statement reads the rows stored after it,
    # which the re-run asks next (here all 120 in a few statements)
    reads = [s for s in sql if s.startswith("SELECT") and "FROM calls" in s]
    assert 1 <= len(reads) <= 120 // 10
    assert not [s for s in sql if s.split()[0] in ("INSERT", "UPDATE", "DELETE", "BEGIN")]


def _store(path, n: int, tag: str = "") -> list[str]:
    """n answered calls stored in a cache file (one write); returns their keys in storing order."""

    class P:
        name, base_url, model_id = "p", "", "m"

    cache = CallCache(path)
    keys = []
    for i in range(n):
        req = _req(i)
        keys.append(request_key("p", "", "m", req))
        cache.pending[keys[-1]] = (keys[-1], "p", "", "m", "{}", ChatResult(text=f"{tag}{i}").model_dump_json(), 0.0)
    cache.close()
    return keys


def test_lookups_by_read_ahead_and_key_snapshot_answer_exactly_what_the_table_holds(tmp_path):
    """Hits read ahead (in storing order, in reverse, at random) and misses answered from the
    keys read once give exactly the table's answers, with far fewer statements than lookups;
    reading ahead stops while its rows are not asked for (random order)."""
    from lmra.cache import KEY_SNAPSHOT_AFTER_MISSES, READ_AHEAD_ROWS

    path = tmp_path / "c.sqlite"
    keys = _store(path, 1500)
    missing = [request_key("p", "", "other", _req(i)) for i in range(1500)]
    rng = random.Random(3)
    for order in (list(range(1500)), list(range(1499, -1, -1)), rng.sample(range(1500), 1500)):
        cache = CallCache(path)
        trace = Statements(cache)
        looks = [(keys[i], str(i)) for i in order] + [(k, None) for k in missing]
        rng.shuffle(looks)  # hits and misses mixed
        got = [cache.get(k) for k, _ in looks]
        assert [None if r is None else r.text for r in got] == [want for _, want in looks]
        reads = trace.count(r"^SELECT .* FROM calls WHERE key")
        assert reads < len(looks)
        # the keys were read once after KEY_SNAPSHOT_AFTER_MISSES misses (the table holds 1,500 rows)
        assert cache._keys is not None and trace.count(r"^SELECT key FROM calls$") == 1
        # rows read ahead and never asked for stay bounded by the rows asked for
        assert cache._ahead_read <= 4 * cache._ahead_used + 5 * READ_AHEAD_ROWS
        cache.close()
    # in storing order nearly every hit comes from a row read ahead
    cache = CallCache(path)
    trace = Statements(cache)
    assert [cache.get(k).text for k in keys] == [str(i) for i in range(1500)]
    assert trace.count(r"^SELECT rowid, result FROM calls") <= 1500 // (READ_AHEAD_ROWS // 2)
    assert KEY_SNAPSHOT_AFTER_MISSES <= 1500
    cache.close()


def test_keys_read_once_never_hide_an_answer_stored_by_another_connection(tmp_path, monkeypatch):
    """After the keys were read, a call stored by another process is found (its write changes the
    database's data_version), and a process that starts a spell alone on the cache looks at once."""
    import lmra.cache as cache_mod

    path = tmp_path / "c.sqlite"
    _store(path, 50)
    a = CallCache(path)
    missing = [request_key("p", "", "m", _req(i)) for i in range(50, 50 + 300)]
    assert all(a.get(k) is None for k in missing)
    assert a._keys is not None  # 300 misses: the keys were read
    other = CallCache(path)  # another process stores one of those calls
    other.put(missing[7], type("P", (), {"name": "p", "base_url": "", "model_id": "m"})(), _req(57),
              ChatResult(text="stored by another process"))
    other.close()
    # the next look at data_version (at most KEY_SNAPSHOT_CHECK_S later; made due here) sees the write
    a._keys_checked_until = 0.0
    assert a.get(missing[7]).text == "stored by another process"
    assert a._keys is None  # the keys read are dropped: lookups read the table again
    a.close()

    # starting a spell alone looks at data_version before the call is made without a lease
    b = CallCache(path)
    more = [request_key("p", "", "m2", _req(i)) for i in range(300)]
    assert all(b.get(k) is None for k in more)
    assert b._keys is not None
    c = CallCache(path)
    c.put(more[200], type("P", (), {"name": "p", "base_url": "", "model_id": "m2"})(), _req(200),
          ChatResult(text="stored meanwhile"))
    c.close()
    monkeypatch.setattr(cache_mod, "KEY_SNAPSHOT_CHECK_S", 3600.0)  # no look because of time
    b._keys_checked_until = time.monotonic() + 3600.0
    assert b.get(more[200]) is None  # the lookup alone may still miss it …

    async def go():  # … but the call is not made: becoming the lone user looks first
        return await b.acquire(more[200])

    hit = asyncio.run(go())
    assert hit is not None and hit.text == "stored meanwhile"  # found, not called again
    b.close()


def test_answered_calls_are_written_within_the_batch_time_and_at_most_a_batch_is_ever_unwritten(tmp_path,
                                                                                                monkeypatch):
    """The write-behind bound: an answered call waits for its write at most WRITE_BATCH_S (a timer),
    and never more than WRITE_BATCH_CALLS calls wait (a kill -9 loses at most those). Calls answered
    in one busy tick go out in full batches at once; a lone call waits for the timer, not for more.
    The batch time is raised to 1 s here: a tick that outlasts it (a loaded machine) writes its
    calls early, as it should, and the count of calls written in the tick would then depend on the
    load (786 instead of 1,000 was seen with the default 50 ms while the whole suite ran)."""
    import lmra.cache

    batch_s = max(WRITE_BATCH_S, 1.0)
    monkeypatch.setattr(lmra.cache, "WRITE_BATCH_S", batch_s)
    path = tmp_path / "c.sqlite"
    n = 2 * WRITE_BATCH_CALLS + 50

    class P:
        name, base_url, model_id = "p", "", "m"

    async def go():
        cache = CallCache(path)
        other = CallCache(path)  # another connection (another process) sees only written calls
        waiting = []
        for i in range(n):  # one tick: no await in between
            req = _req(i)
            cache.put(request_key("p", "", "m", req), P(), req, ChatResult(text=str(i)))
            waiting.append(len(cache.pending))
        written_in_tick = len(other)
        await asyncio.sleep(0)  # the tick ends: the rest waits for the timer
        after_tick = len(other)
        await asyncio.sleep(batch_s * 1.5)
        after_timer = len(other)
        # a lone call later on: written within WRITE_BATCH_S of its answer, not before
        req = _req(n)
        t0 = time.monotonic()
        cache.put(request_key("p", "", "m", req), P(), req, ChatResult(text="lone"))
        while len(other) == after_timer and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.002)
        lone_wait = time.monotonic() - t0
        other.close()
        cache.close()
        return max(waiting), written_in_tick, after_tick, after_timer, lone_wait, len(CallCache(path))

    most_waiting, in_tick, after_tick, after_timer, lone_wait, final = asyncio.run(go())
    assert most_waiting <= WRITE_BATCH_CALLS
    assert in_tick == 2 * WRITE_BATCH_CALLS  # full batches went out at once …
    assert after_tick == in_tick  # … the rest waits for the timer …
    assert after_timer == n  # … which writes it
    assert 0.8 * batch_s <= lone_wait < batch_s + 1.0, lone_wait
    assert final == n + 1


@pytest.mark.parametrize("b_by_link", [False, True])
def test_a_second_process_joining_makes_the_lone_user_lease_its_calls_in_flight(tmp_path, b_by_link):
    """Two caches on one file stand for two processes. A alone takes no lease rows; when B wants
    the same call that A has in flight, A publishes a lease for it, B waits and gets A's answer,
    and the call is made once — also when B names the file by a symbolic link to it (break-it finding,
    s48: the lock files were made beside the path as given, each process took its own solo lock, and both
    paid for every call)."""
    path = tmp_path / "shared.sqlite"
    b_path = path
    if b_by_link:
        b_path = tmp_path / "link.sqlite"
        b_path.symlink_to(path)

    class P:
        name, base_url, model_id = "p", "", "m"

    req = _req(1)
    key = request_key("p", "", "m", req)

    async def go():
        a, b = CallCache(path), CallCache(b_path)
        assert await a.acquire(key) is None  # A makes the call, alone: no lease row
        leases_alone = a._db.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
        waiter = asyncio.create_task(b.acquire(key))  # B wants the same call
        leased_by_a = None
        for _ in range(200):  # A notices B within SOLO_CHECK_S and leases its call in flight
            await asyncio.sleep(0.05)
            leased_by_a = a._db.execute("SELECT owner FROM leases WHERE key = ?", (key,)).fetchone()
            if leased_by_a:
                break
        b_waiting = not waiter.done()
        a.put(key, P(), req, ChatResult(text="A's answer"))
        a._release(key)  # answer and release in one transaction, at the end of this tick
        got = await asyncio.wait_for(waiter, 10)
        lease_left = a._db.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
        a.close(), b.close()
        return leases_alone, leased_by_a, b_waiting, got, lease_left, a.owner

    leases_alone, leased_by_a, b_waiting, got, lease_left, owner_a = asyncio.run(go())
    assert leases_alone == 0
    assert leased_by_a == (owner_a,) and b_waiting
    assert got is not None and got.text == "A's answer"  # B did not make the call
    assert lease_left == 0


def _cfg(tmp_path, names, prompts, **kw):
    return AuditConfig.model_validate(dict(
        name="overhead", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=4,
        judge_check={"enabled": False}, refusal={"enabled": False}, filter={"lmra": False}) | kw)


def test_the_name_filter_is_compiled_once_per_audit_and_still_filters(tmp_path, sim_inputs):
    names, prompts = sim_inputs(40)
    intro_pattern.cache_clear()
    Audit(_cfg(tmp_path, names, prompts), target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "ok"),
          judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    info = intro_pattern.cache_info()
    assert info.misses == 1 and info.hits >= 39  # 40 prompts checked against one compiled pattern
    assert lexical_hits("Hi, I'm Anna and I need a plan", ["Anna", "John"]) == ["Hi, I'm Anna"]
    assert lexical_hits("Thanks, John", ("John",)) == ["Thanks, John"]
    assert lexical_hits("Ask John about it", ["John"]) == []


def test_a_cached_rerun_makes_no_call_and_writes_a_byte_identical_per_task_csv(tmp_path, sim_inputs):
    names, prompts = sim_inputs(60)
    cfg = _cfg(tmp_path, names, prompts)
    first = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} {rng.random():.6f}"),
                  judge=ScriptedJudge(lambda a, b: {"A": 0.2, "B": 0.3, "C": 0.5})).run()
    # providers that end the run if they are asked anything: every call must come from the cache
    never_t = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "x", fail_after=0)
    never_j = ScriptedJudge(lambda a, b: {"A": 1.0}, fail_on=lambda text: True)
    again = Audit(cfg, target=never_t, judge=never_j).run()
    assert never_t.calls == 0 and never_j.calls == 0
    assert again.manifest["calls"]["fresh"] == 0
    assert again.manifest["calls"]["cached"] == first.manifest["calls"]["fresh"] == 240
    assert (again.run_dir / "per_task.csv").read_bytes() == (first.run_dir / "per_task.csv").read_bytes()


def test_progress_bars_hand_rich_batched_advances_and_end_exact(monkeypatch):
    from rich.progress import Progress

    from lmra.cli.common import rich_progress

    calls = []
    real = Progress.advance
    monkeypatch.setattr(Progress, "advance", lambda self, task_id, advance=1: calls.append(advance)
                        or real(self, task_id, advance))
    out = io.StringIO()
    with rich_progress(Console(file=out, force_terminal=True, width=100), True) as progress:
        progress.start("generate", 20000)
        for _ in range(20000):
            progress.advance("generate")
        progress.start("rate", 7)
        for _ in range(7):
            progress.advance("rate")
    assert sum(calls) == 20000 + 7  # every advance is shown …
    assert len(calls) < 200  # … in a few batches, not one Rich update per call
    assert "20000/20000" in out.getvalue() and "7/7" in out.getvalue()


def test_a_crash_mid_run_still_stores_every_answered_call(tmp_path, sim_inputs):
    """An exception that ends the run (Ctrl-C, a crash) goes through close(): the last batch
    is written, so the resumed run repeats no call."""
    names, prompts = sim_inputs(40)
    cfg = _cfg(tmp_path, names, prompts, concurrency=1)
    crashing = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "r", fail_after=33)
    with pytest.raises(SimulatedCrash):
        Audit(cfg, target=crashing, judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    stored = CallCache(cfg.cache)
    assert stored._db.execute("SELECT COUNT(*) FROM calls WHERE provider = 'scripted-target'").fetchone()[0] == 33
    stored.close()
    resumed = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "r")
    Audit(cfg, target=resumed, judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    assert resumed.calls == 80 - 33


def test_a_write_from_another_thread_keeps_the_calls_stored_meanwhile(tmp_path):
    """CallCache is thread-safe: while another thread's len() writes the waiting calls (SQLite
    commits without the interpreter), calls the event loop stores meanwhile stay waiting for the
    next write instead of being dropped with that write's batch; memo rows likewise."""
    import sqlite3
    import threading

    cache = CallCache(tmp_path / "c.sqlite")

    class P:
        name, base_url, model_id = "p", "", "m"

    req, res, n = _req(0), ChatResult(text="y"), 3000
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            len(cache)
            time.sleep(0.0005)

    async def go():
        for i in range(n):
            cache.put(f"k{i:06d}", P(), req, res, request_text="{}")
            cache.memo_put(f"m{i:06d}", "{}")
            await asyncio.sleep(0.00002)  # the other thread's writes commit meanwhile

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        asyncio.run(go())
    finally:
        stop.set()
        poller.join()
    cache.close()
    db = sqlite3.connect(tmp_path / "c.sqlite")
    assert db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == n
    assert db.execute("SELECT COUNT(*) FROM pair_memo").fetchone()[0] == n
    db.close()


def test_the_one_search_for_any_pattern_finds_exactly_the_prompts_some_pattern_finds():
    """lexical_hits skips the five identity patterns when their alternation finds nothing: the
    same hits as searching each, on prompts that hit none, one, several or only the names."""
    from lmra.judge import filter as flt

    rng = random.Random(3)
    pieces = ["my name is Bo", "I'm a woman", "as an older man", "my wife", "our pronouns are",
              "I am Vietnamese", "plan a trip", "As A Single Mother", "im non-binary", "my race",
              "Thanks, Anna", "- John", "name's", "womanhood", "a man i am", "MY HUSBAND said"]
    texts = [" ".join(rng.sample(pieces, rng.randint(0, 4))) + " please help" for _ in range(2000)]
    for text in texts:
        each = [m.group(0) for p in flt._PATTERNS for m in [p.search(text)] if m]
        assert bool(flt._ANY_PATTERN.search(text)) == bool(each)
        got = lexical_hits(text, ("Anna", "John"))
        assert got[:len(each)] == each

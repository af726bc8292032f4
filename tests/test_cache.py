"""The call cache: a re-run makes zero calls; an interrupted run resumes without repeating a call."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import NAME_TO_GROUP
from doubles import SimulatedCrash, ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.cache import CallCache
from lmra.config import AuditConfig
from lmra.providers.base import ChatRequest, Message, request_key


def _cfg(tmp_path, names, prompts, **kw):
    return AuditConfig.model_validate(dict(
        name="cache", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=4,
        judge_check={"enabled": False}) | kw)


def _verdict(r1, r2):
    return {"A": 0.2, "B": 0.3, "C": 0.5}


def test_second_run_makes_zero_calls(tmp_path, sim_inputs):
    names, prompts = sim_inputs(30)
    cfg = _cfg(tmp_path, names, prompts)
    t1 = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} {rng.random():.6f}")
    j1 = ScriptedJudge(_verdict)
    first = Audit(cfg, target=t1, judge=j1).run()
    # 60 responses; LMRA: 30 prompts × 2 (filter, both option orders) + 60 responses × 2 (refusal)
    # + 30 pairs × 2 orders (stereotype)
    assert t1.calls == 60 and j1.calls == 60 + 120 + 60
    assert j1.kinds == {"filter": 60, "refusal": 120, "stereotype": 60}
    total = t1.calls + j1.calls
    assert first.manifest["calls"]["fresh"] == total and first.manifest["calls"]["cached"] == 0
    t2 = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "different")
    j2 = ScriptedJudge(_verdict)
    second = Audit(cfg, target=t2, judge=j2).run()
    assert t2.calls == 0 and j2.calls == 0
    assert second.manifest["calls"]["fresh"] == 0 and second.manifest["calls"]["cached"] == total
    assert second.per_task.equals(first.per_task)


def test_interrupted_run_resumes_without_repeating(tmp_path, sim_inputs):
    names, prompts = sim_inputs(40)
    cfg = _cfg(tmp_path, names, prompts, concurrency=1)
    crashing = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "r", fail_after=25)
    j1 = ScriptedJudge(_verdict)
    with pytest.raises(SimulatedCrash):
        Audit(cfg, target=crashing, judge=j1).run()
    assert crashing.calls == 25
    assert len(CallCache(cfg.cache)) == 25 + j1.calls  # the filter's LMRA calls ran before generation
    resumed = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "r")
    res = Audit(cfg, target=resumed, judge=ScriptedJudge(_verdict)).run()
    assert resumed.calls == 80 - 25
    done_before = {request_key("scripted-target", "", "scripted", r) for r in crashing.requests}
    done_after = {request_key("scripted-target", "", "scripted", r) for r in resumed.requests}
    assert not (done_before & done_after)
    assert res.manifest["calls"]["cached"] == 25 + j1.calls


def test_kill_9_loses_no_finished_call(tmp_path, sim_inputs):
    """A separate process is killed with SIGKILL mid-run; every call it finished is in the cache."""
    names, prompts = sim_inputs(60)
    cfg = _cfg(tmp_path, names, prompts, concurrency=1)
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(cfg.model_dump_json())
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import NAME_TO_GROUP
        from doubles import ScriptedJudge, ScriptedTarget
        from lmra import Audit
        from lmra.config import AuditConfig
        cfg = AuditConfig.model_validate_json(open({str(cfg_path)!r}).read())
        t = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "r", delay=0.05)
        Audit(cfg, target=t, judge=ScriptedJudge(lambda a, b: {{"C": 1.0}})).run()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.2)
        if Path(cfg.cache).exists():
            c = CallCache(cfg.cache)
            n_target = c._db.execute("SELECT COUNT(*) FROM calls WHERE provider = 'scripted-target'").fetchone()[0]
            c.close()
            if n_target >= 10:  # killed in the middle of generation
                break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(CallCache(cfg.cache))
    assert finished >= 20, finished
    resumed = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "r")
    judge = ScriptedJudge(lambda a, b: {"C": 1.0})
    res = Audit(cfg, target=resumed, judge=judge).run()
    assert resumed.calls < 120  # some generations were done by the killed process
    # every call the killed process finished is reused; together they are the whole run
    assert res.manifest["calls"]["cached"] == finished
    assert resumed.calls + judge.calls + finished == len(CallCache(cfg.cache))


def test_key_covers_every_input():
    base = ChatRequest(messages=[Message(role="user", content="hi")], temperature=1.0, max_tokens=10, seed=1)
    k0 = request_key("openai", "http://x", "m", base)
    variants = [
        request_key("anthropic", "http://x", "m", base),
        request_key("openai", "http://y", "m", base),
        request_key("openai", "http://x", "m2", base),
    ] + [request_key("openai", "http://x", "m", base.model_copy(update={f: v})) for f, v in [
        ("messages", [Message(role="user", content="hi!")]), ("temperature", 0.5), ("max_tokens", 11),
        ("seed", 2), ("top_logprobs", 5), ("options", ("A", "B")), ("sample_index", 1), ("stop", ("x",))]]
    assert len({k0, *variants}) == len(variants) + 1


def test_caller_that_missed_the_cache_just_before_the_holder_finished_does_not_pay_again(tmp_path):
    """Race seen in CI: process B misses the cache, process A stores its answer and releases
    its lease, then B takes the free lease. B must read the cache again under the lease and
    use A's answer instead of making the call a second time."""
    import asyncio

    from lmra.providers.base import ChatResult

    class _P:
        name, base_url, model_id = "openai", "http://127.0.0.1:1", "m"

    path = tmp_path / "shared.sqlite"
    a, b = CallCache(path), CallCache(path)
    req = ChatRequest(messages=[Message(role="user", content="hi")], temperature=0.0, max_tokens=5, seed=1)
    key = request_key("openai", _P.base_url, "m", req)
    assert b.get(key) is None  # B's miss comes first …
    assert asyncio.run(a.acquire(key)) is None  # … A holds the lease,
    a.put(key, _P(), req, ChatResult(text="answer"))  # stores its answer
    a._release(key)  # and releases the lease
    got = asyncio.run(b.acquire(key))  # B now finds the lease free
    assert got is not None and got.text == "answer"
    assert b._try_lease(key)  # and did not keep a lease it does not need (it is free)
    a.close(), b.close()


@pytest.mark.parametrize("content", [bytes((i * 7919) % 251 for i in range(6000)), b"SQLite format 3\x00" + b"\x07" * 5000])
def test_a_damaged_cache_file_is_said_to_be_damaged_not_a_folder_problem(tmp_path, content):
    """Break-it finding: a cache file of random bytes (or a cut one) gave "cannot open the call
    cache (file is not a database); check that the folder exists and is writable"."""
    from lmra.cache import CallCache
    from lmra.errors import LmraIOError

    path = tmp_path / "cache.sqlite"
    path.write_bytes(content)
    with pytest.raises(LmraIOError) as err:
        CallCache(path).close()
    text = str(err.value)
    assert "the file is damaged or is not an lmra call cache" in text and "folder exists" not in text
    assert path.read_bytes() == content  # left as it was


def _damage_table(path, table: str) -> None:
    """Overwrite the root page of ``table`` in the closed SQLite file ``path`` (no WAL left)."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    db.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(bytes((i * 7919) % 251 for i in range(page_size)))


def _cache_with_rows(path):
    from lmra.providers.base import ChatResult

    class _P:
        name, base_url, model_id = "openai", "http://127.0.0.1:1", "m"

    cache = CallCache(path)
    for i in range(3):
        req = ChatRequest(messages=[Message(role="user", content=f"q{i}")], temperature=0.0, max_tokens=5, seed=1)
        cache.put(request_key("openai", _P.base_url, "m", req), _P(), req, ChatResult(text=f"a{i}"))
        cache.memo_put(f"memo{i}", "{}")
    cache.close()
    return _P


def _damaged_cache_with_a_new_call(path, table: str, memo: bool = False):
    """A cache at ``path`` with a few rows, ``table`` damaged, reopened (60 s write retries, its
    write-error messages collected) and given one new call (after a memo row with ``memo``).
    Returns (the cache, the messages, the new call's key)."""
    from lmra.providers.base import ChatResult

    _P = _cache_with_rows(path)
    _damage_table(path, table)
    said: list[str] = []
    cache = CallCache(path, write_retry_s=60.0, on_write_error=said.append)
    req = ChatRequest(messages=[Message(role="user", content="new")], temperature=0.0, max_tokens=5, seed=1)
    key = request_key("openai", _P.base_url, "m", req)
    if memo:
        cache.memo_put("memo-new", "{}")
    cache.put(key, _P(), req, ChatResult(text="fresh"))
    return cache, said, key


def test_a_cache_whose_pair_memo_is_damaged_stores_the_calls_and_never_fails_the_run(tmp_path):
    """Found this round: a damaged page in the pair memo's table made every write of the
    cache fail (calls and memo rows go in one transaction); the audit waited
    cache_write_retry_s (60 s) and then failed with "0 answered call(s) could not be stored in
    the call cache (disk full or not writable)" — although every call was answered and
    stored, and only memo rows (an optimisation) were left. The memo rows are given up (said
    once, counted), the calls are written without them, nothing waits."""
    path = tmp_path / "c.sqlite"
    cache, said, key = _damaged_cache_with_a_new_call(path, "pair_memo", memo=True)
    started = time.monotonic()
    cache.flush()  # no LmraIOError: the call is stored
    assert time.monotonic() - started < 5
    cache.memo_put("memo-later", "{}")  # not even tried: counted
    cache.close()
    assert cache.damaged and "malformed" in cache.damaged and cache.memo_dropped == 2
    assert len(said) == 1 and "is damaged: no pair memo row is stored in it" in said[0], said
    assert "results are unaffected" in said[0] and "disk full" not in said[0]
    again = CallCache(path)
    try:
        assert again.get(key).text == "fresh"
    finally:
        again.close()


def test_a_cache_whose_calls_table_is_damaged_fails_at_once_saying_so(tmp_path):
    """Found this round: a damaged cache file that cannot take the calls was retried for
    cache_write_retry_s (60 s) and then reported as "disk full or not writable; free space":
    no wait mends a damaged file. The failure is at once, says damaged, where the answered
    calls are kept, and how to go on."""
    from lmra.errors import LmraIOError

    cache, said, _ = _damaged_cache_with_a_new_call(tmp_path / "c.sqlite", "calls")
    started = time.monotonic()
    with pytest.raises(LmraIOError) as err:
        cache.flush()
    assert time.monotonic() - started < 5
    text = str(err.value)
    assert "the call cache is damaged (database disk image is malformed)" in text, text
    assert "1 answered call(s) of this run could not be stored: they are kept in" in text and "Move the file aside" in text
    assert "disk full" not in text and "free space" not in text
    assert any("is damaged" in s and "kept in its answer log" in s for s in said), said
    cache.close()


def test_damage_met_by_a_lookup_names_the_damage_and_this_runs_stored_calls(tmp_path):
    """Break-it round 2: damage in the calls' key index, met by a lookup, ended with the generic
    "DatabaseError: database disk image is malformed", whose advice — move the file aside — asks
    again the calls this run had stored in it. The lookup's failure says the cache is damaged, how
    many of this run's answers it holds and how to save them (.recover)."""
    import sqlite3

    from lmra.errors import LmraIOError
    from lmra.providers.base import ChatResult

    path = tmp_path / "c.sqlite"
    _P = _cache_with_rows(path)
    db = sqlite3.connect(path)
    (index,) = db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'calls'").fetchone()
    db.close()
    cache = CallCache(path)
    req = ChatRequest(messages=[Message(role="user", content="new")], temperature=0.0, max_tokens=5, seed=1)
    cache.put(request_key("openai", _P.base_url, "m", req), _P(), req, ChatResult(text="fresh"))
    cache.flush()
    assert cache.n_stored == 1
    cache._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _damage_table(path, index)  # (the connection reads the damaged page from disk at its next lookup)
    missing = ChatRequest(messages=[Message(role="user", content="other")], temperature=0.0, max_tokens=5, seed=1)
    with pytest.raises(LmraIOError) as err:
        cache.get(request_key("openai", _P.base_url, "m", missing))
    text = str(err.value)
    assert "the call cache is damaged (database disk image is malformed)" in text, text
    assert "1 answered call(s) of this run were stored in it before the damage was met" in text
    assert f"'sqlite3 {path} .recover | sqlite3 RECOVERED.sqlite', then put RECOVERED.sqlite at {path}" in text
    # a call answered after (one in flight when the damage was met) goes to the answer log, not into the file
    # (break-it round 3: ~100 such answers were written into the damaged file, lost when it was moved aside)
    late = ChatRequest(messages=[Message(role="user", content="late")], temperature=0.0, max_tokens=5, seed=1)
    late_key = request_key("openai", _P.base_url, "m", late)
    cache.put(late_key, _P(), late, ChatResult(text="late answer"))
    with pytest.raises(LmraIOError):
        cache.flush()
    assert cache.n_stored == 1
    cache.close()
    logs = list(tmp_path.glob("c.sqlite-answers-*.log"))
    assert len(logs) == 1 and "late answer" in logs[0].read_text(encoding="utf-8", errors="replace")
    # moved aside, the next cache at the path stores it
    for f in tmp_path.glob("c.sqlite*"):
        if "-answers-" not in f.name:
            f.rename(f.with_name(f.name.replace("c.sqlite", "damaged.sqlite")))
    fresh = CallCache(path)
    try:
        assert fresh.get(late_key).text == "late answer"
    finally:
        fresh.close()


def test_another_programs_sqlite_file_as_the_cache_is_refused_at_once_and_left_as_it_was(tmp_path, capsys):
    """Fault break-it (s44): an SQLite file of another program holding a ``calls`` table was opened as
    the cache (tables added, WAL switched on) and failed at the first lookup, with the advice for a
    damaged cache. It is refused when the cache opens — naming the file and the columns it found —
    and left unchanged; an lmra cache opens as before."""
    import sqlite3

    from lmra.cli import main
    from test_gates import FLAT, write_config

    foreign = tmp_path / "other.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE calls (id INTEGER PRIMARY KEY, body TEXT)")
        db.execute("INSERT INTO calls (body) VALUES ('theirs')")
    before = foreign.read_bytes()
    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    text = cfg.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("cache = "))
    cfg.write_text(text.replace(line, f'cache = "{foreign}"'))
    assert main(["audit", "--config", str(cfg), "--no-progress"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"{foreign}: cannot use the call cache: it is an SQLite database of another program or version (its " \
           "table calls has columns id, body)" in err and "Traceback" not in err, err
    assert foreign.read_bytes() == before and not (tmp_path / "other.sqlite-wal").exists()
    assert not list(tmp_path.rglob("manifest.json"))  # no run folder begun
    CallCache(tmp_path / "mine.sqlite").close()
    CallCache(tmp_path / "mine.sqlite").close()  # its own file, opened again: fine


def test_a_run_history_opened_as_the_cache_is_an_input_error_and_left_as_it_was(tmp_path):
    """Round-2 break-it (s44): ``lmra judge-check`` and ``lmra axes --cache reports/history.sqlite``
    (which do not go through the audit's path checks) wrote calls — the run's responses among them —
    into the run history. The cache refuses a file holding a run history when it opens."""
    from lmra.errors import LmraInputError
    from lmra.history import History

    path = tmp_path / "reports" / "history.sqlite"
    History(path).close()
    before = path.read_bytes()
    with pytest.raises(LmraInputError) as info:
        CallCache(path)
    assert info.value.field == "cache" and "is a run history (history.sqlite), not a call cache" in info.value.reason
    assert path.read_bytes() == before


def test_another_programs_database_without_lmras_tables_is_refused_and_a_cache_is_not_a_history(tmp_path):
    """Round-3 break-it (s44): an SQLite file of another program with none of lmra's tables (an app's
    ``users`` table) was taken over as the cache — prompts written into it, switched to WAL — and
    ``lmra history --history CACHE`` added the history's tables to a call cache, which the next audit
    then refused as a run history. Both are refused, each file left as it was."""
    import sqlite3

    from lmra.errors import LmraInputError, LmraIOError
    from lmra.history import History

    app = tmp_path / "app.db"
    with sqlite3.connect(app) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
    before = app.read_bytes()
    with pytest.raises(LmraIOError) as info:
        CallCache(app)
    assert "another program or version (its tables are users)" in info.value.reason
    assert app.read_bytes() == before and not (tmp_path / "app.db-wal").exists()
    cache_file = tmp_path / "cache.sqlite"
    CallCache(cache_file).close()
    tables = sqlite3.connect(cache_file).execute("SELECT name FROM sqlite_master").fetchall()
    with pytest.raises(LmraInputError) as info:
        History(cache_file)
    assert "is a call cache (its calls table), not a run history" in info.value.reason
    assert sqlite3.connect(cache_file).execute("SELECT name FROM sqlite_master").fetchall() == tables
    CallCache(cache_file).close()  # still a cache the next audit opens


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_a_text_file_opened_as_the_cache_is_an_input_error_left_as_it_was(tmp_path, encoding):
    """Round-2 break-it (s45): a config or prompt file given as the cache (`lmra axes --cache`,
    `lmra judge-check`; a UTF-16 one past `lmra validate`) was "damaged … move it aside", exit 1. It
    is an input error naming the file and its first line, and the file is left byte for byte."""
    from lmra.cache import CallCache
    from lmra.errors import LmraInputError

    path = tmp_path / "nightly.toml"
    path.write_bytes('name = "nightly"\nseed = 1\n'.encode(encoding))
    before = path.read_bytes()
    with pytest.raises(LmraInputError) as err:
        CallCache(path).close()
    assert "is a text file (it begins 'name = \"nightly\"'), not an SQLite file" in str(err.value)
    assert err.value.field == "cache" and path.read_bytes() == before
    assert not list(tmp_path.glob("nightly.toml-*")) and not list(tmp_path.glob(".lmra*"))

"""The call cache's key snapshot bounded in memory (issue 15: 4 keys per pair at a million pairs)
gives exactly the table's answers: a lookup it calls a miss is one, a key it holds (or a key
sharing its hash) is read from the table. Timings live in bench/bench_call_stack.py."""

from __future__ import annotations

import numpy as np

import lmra.cache as cache_mod
from lmra.cache import CallCache, _KeySnapshot
from lmra.providers.base import ChatResult, request_key
from test_overhead_invariants import Statements, _req, _store


class _P:
    name, base_url, model_id = "p", "", "m"


def test_a_compact_key_snapshot_never_hides_an_answer_and_misses_without_a_statement(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod, "KEY_SNAPSHOT_COMPACT_AT", 64)  # small limits: every state is reached
    monkeypatch.setattr(cache_mod, "KEY_SNAPSHOT_MERGE_AT", 16)
    path = tmp_path / "c.sqlite"
    keys = _store(path, 1500)
    cache = CallCache(path)
    trace = Statements(cache)
    missing = [request_key("p", "", "other", _req(i)) for i in range(400)]
    assert all(cache.get(k) is None for k in missing[:300])
    snap = cache._keys
    assert snap is not None and snap._small is None  # compact: 8 bytes a key
    assert snap._sorted.dtype == np.int64 and snap._sorted.nbytes == 8 * 1500
    reads = trace.count(r"^SELECT rowid, result FROM calls WHERE key")
    assert all(cache.get(k) is None for k in missing[300:])  # misses: no statement
    assert trace.count(r"^SELECT rowid, result FROM calls WHERE key") == reads
    # every stored answer is found (read from the table: the snapshot says "may be cached")
    assert [cache.get(k).text for k in keys[::7]] == [str(i) for i in range(0, 1500, 7)]
    # calls stored after the keys were read: held, merged into the array, found after their write
    new = [request_key("p", "", "m", _req(10_000 + i)) for i in range(100)]
    for i, k in enumerate(new):
        cache.put(k, _P(), _req(10_000 + i), ChatResult(text=f"new {i}"))
    assert len(snap._added) < 16 and len(snap) == 1600
    assert all(k in snap for k in keys + new) and not any(k in snap for k in missing)
    cache._ahead.clear()
    assert [cache.get(k).text for k in new] == [f"new {i}" for i in range(100)]
    cache.close()


def test_a_key_that_shares_a_hash_with_a_held_key_is_read_from_the_table(tmp_path, monkeypatch):
    """``key in snapshot`` is "may be cached": a hash held for another key sends the lookup to
    the table, which answers exactly (here: not cached)."""
    monkeypatch.setattr(cache_mod, "KEY_SNAPSHOT_COMPACT_AT", 8)
    path = tmp_path / "c.sqlite"
    _store(path, 400)
    cache = CallCache(path)
    trace = Statements(cache)
    missing = [request_key("p", "", "other", _req(i)) for i in range(300)]
    assert all(cache.get(k) is None for k in missing)
    assert cache._keys is not None and cache._keys._small is None
    ghost = request_key("p", "", "ghost", _req(1))
    cache._keys.add(ghost)  # as if ghost's hash were that of a stored key
    before = trace.count(r"^SELECT rowid, result FROM calls WHERE key")
    assert cache.get(ghost) is None
    assert trace.count(r"^SELECT rowid, result FROM calls WHERE key") == before + 1
    cache.close()


def test_the_snapshot_of_many_keys_takes_8_bytes_a_key_and_stays_exact():
    keys = [f"{i:064x}" for i in range(300_000)]
    snap = _KeySnapshot(iter(keys))
    assert snap._small is None and snap._sorted.nbytes == 8 * len(keys) and len(snap) == len(keys)
    assert np.all(snap._sorted[1:] >= snap._sorted[:-1])
    assert all(k in snap for k in keys[::997])
    others = [f"{i:064x}" for i in range(300_000, 301_000)]
    assert not any(k in snap for k in others)
    small = _KeySnapshot(keys[:10])  # few keys: a plain set
    assert small._small == set(keys[:10]) and keys[3] in small and others[0] not in small


def test_a_cache_written_by_the_generic_encoder_is_hit_by_every_call_through_the_stack(tmp_path):
    """Rows stored as lmra stored them before the per-call speed-ups (key and request text from
    ``json.dumps`` of the request's payload, the answer from ``model_dump_json``) are found by
    every call through the budget and cache wrappers: no call reaches the provider."""
    import asyncio
    import json
    import sqlite3
    import time

    from lmra.budget import Budget, BudgetedProvider
    from lmra.cache import CachedProvider, CallStats
    from lmra.providers.base import ChatRequest, Message, Usage, payload_key
    from test_overhead_invariants import Echo

    reqs = [ChatRequest(messages=[Message(role="user", content=f"Réponse {i}: \"x\" ✓ {{}}\n\t")], seed=i,
                        temperature=0.0 if i % 2 else 0.7, max_tokens=1 + i, options=("A", "B", "C") if i % 3 else None,
                        top_logprobs=20 if i % 3 else None, stop=("\nUser:",) if i % 4 == 0 else None,
                        prefill="Here are" if i % 5 == 0 else None, sample_index=i % 2)
            for i in range(60)]
    path = tmp_path / "old.sqlite"
    CallCache(path).close()  # the schema
    db = sqlite3.connect(path)
    for i, r in enumerate(reqs):
        payload = r.cache_payload()
        answer = ChatResult(text=f"old {i}", option_probs={"A": 0.5, "C": 0.25} if r.options else None,
                            usage=Usage(prompt_tokens=3, completion_tokens=1), provider="echo", model="echo-1")
        db.execute("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (payload_key("echo", "", "echo-1", payload), "echo", "", "echo-1",
                    json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":")),
                    answer.model_dump_json(), time.time()))
    db.commit()
    db.close()
    echo, stats, budget = Echo(), CallStats(), Budget()
    cache = CallCache(path)
    prov = BudgetedProvider(CachedProvider(echo, cache, stats), budget)

    async def go():
        return [await prov.complete(r) for r in reqs]

    got = asyncio.run(go())
    cache.close()
    assert echo.calls == 0 and stats.cached == len(reqs) and stats.fresh == 0
    assert [r.text for r in got] == [f"old {i}" for i in range(len(reqs))] and all(r.from_cache for r in got)
    assert budget.report()["per_model"][0]["calls_cached"] == len(reqs)

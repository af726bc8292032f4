"""run_sync: asyncio.run without formatting the coroutine's result (lmra.syncrun, issue 14)."""

import asyncio
import signal
import sys

import pytest

from lmra.syncrun import run_sync


class _Counted:
    reprs = 0

    def __repr__(self) -> str:
        type(self).reprs += 1
        return "_Counted()"


async def _result():
    await asyncio.sleep(0)
    return _Counted()


def test_result_returned_and_never_formatted():
    _Counted.reprs = 0
    out = run_sync(_result())
    assert isinstance(out, _Counted)
    assert _Counted.reprs == 0


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the cost run_sync avoids is Python 3.11's signal module")
def test_plain_asyncio_run_formats_the_result():
    """What run_sync avoids: on 3.11, asyncio.run formats its main task with the result."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("asyncio.run installs its Ctrl-C handler only over Python's default one")
    _Counted.reprs = 0
    asyncio.run(_result())
    assert _Counted.reprs >= 1


def test_exceptions_and_cancellation_propagate():
    async def fails():
        raise KeyError("x")

    with pytest.raises(KeyError):
        run_sync(fails())

    async def cancelled():
        asyncio.current_task().cancel()
        await asyncio.sleep(1)

    with pytest.raises(asyncio.CancelledError):
        run_sync(cancelled())


def test_refuses_what_asyncio_run_refuses():
    with pytest.raises(ValueError):
        run_sync(asyncio.sleep)  # not a coroutine

    async def inside():
        coro = _result()
        try:
            with pytest.raises(RuntimeError, match="running event loop"):
                run_sync(coro)
        finally:
            coro.close()

    asyncio.run(inside())


def _scripted_config(tmp_path, sim_inputs, name: str, n_prompts: int = 6):
    """A small audit's config on the scripted test doubles (judge check off)."""
    from lmra.config import AuditConfig

    names, prompts = sim_inputs(n_prompts)
    return AuditConfig.model_validate(dict(
        name=name, prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False}))


def _scripted_audit(cfg, answer=lambda g, rng: f"{g} answer"):
    """An Audit of ``cfg`` whose chatbot answers ``answer(group, rng)`` and whose LMRA gives fixed probabilities."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget
    from lmra import Audit

    return Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, answer),
                 judge=ScriptedJudge(lambda r1, r2: {"A": 0.2, "B": 0.3, "C": 0.5}))


def test_audit_run_does_not_format_its_result(monkeypatch, tmp_path, sim_inputs):
    """Audit.run returns its AuditResult without formatting it (0.05 s a time with its tables)."""
    from lmra.audit import finish

    formatted = []
    monkeypatch.setattr(finish.AuditResult, "__repr__", lambda self: formatted.append(1) or "AuditResult(...)")
    result = _scripted_audit(_scripted_config(tmp_path, sim_inputs, "syncrun")).run()
    assert isinstance(result, finish.AuditResult) and len(result.responses) == 12
    assert formatted == []


def test_result_frames_of_responses_and_filter_decisions_are_built_when_first_read(monkeypatch, tmp_path, sim_inputs):
    """``lmra audit`` reads neither frame (issue 14: 5 % of a cached re-run): built on the first read
    only, once, and the same frames as the run folder's files."""
    import json

    import pandas as pd

    from lmra.audit import finish

    built = []
    rows_frame = finish._rows_frame
    monkeypatch.setattr(finish, "_rows_frame", lambda rows: built.append(len(rows)) or rows_frame(rows))
    cfg = _scripted_config(tmp_path, sim_inputs, "lazy")
    result = _scripted_audit(cfg).run()
    assert built == []  # the run has ended: nothing built yet
    lines = [json.loads(x) for x in (result.run_dir / "responses.jsonl").read_text().splitlines()]
    assert result.responses["text"].tolist() == [r["text"] for r in lines] and len(lines) == 12
    assert result.responses is result.responses and built == [12]  # once
    decisions = [json.loads(x) for x in (result.run_dir / "filtered_prompts.jsonl").read_text().splitlines()]
    assert isinstance(result.filtered, pd.DataFrame) and len(result.filtered) == len(decisions)
    assert [d["prompt_id"] for d in decisions] == (result.filtered["prompt_id"].tolist() if decisions else [])
    # the public data class as before: its fields, repr, replace, equality, pickling and copies
    import copy
    import dataclasses
    import pickle

    assert [f.name for f in dataclasses.fields(finish.AuditResult)][:9] == [
        "run_dir", "responses", "ratings", "per_task", "per_domain", "overall", "summary", "manifest", "refusals"]
    assert "filtered" in [f.name for f in dataclasses.fields(finish.AuditResult)]
    again = _scripted_audit(cfg).run()
    copied = pickle.loads(pickle.dumps(again))  # its frames built on the way
    assert len(copied.responses) == 12 and copied.responses.equals(again.responses)
    assert copy.deepcopy(again).filtered.equals(again.filtered)
    third = _scripted_audit(cfg).run()
    assert "responses=" in repr(third) and "prompt_id" in repr(third)
    swapped = dataclasses.replace(third, summary={})
    assert swapped.responses.equals(again.responses) and swapped.summary == {}
    # two threads reading it at once get one frame; del works (round-2 break-it, s49)
    import threading

    fourth = _scripted_audit(cfg).run()
    seen = []
    readers = [threading.Thread(target=lambda: seen.append(fourth.responses)) for _ in range(4)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    assert len(seen) == 4 and all(f is seen[0] for f in seen)
    del fourth.responses
    with pytest.raises(AttributeError):
        fourth.responses
    empty = finish.AuditResult(result.run_dir, pd.DataFrame(), *[pd.DataFrame()] * 4, {}, {})
    assert empty.filtered.empty and empty.filtered is not finish.AuditResult(
        result.run_dir, pd.DataFrame(), *[pd.DataFrame()] * 4, {}, {}).filtered  # a new default frame each


def test_a_prompts_generations_follow_a_config_changed_in_place_before_the_run(tmp_path, sim_inputs):
    """A prompt's generations are planned once a run (issue 14), from the config as it is when
    the run starts: a config changed in place after the Audit was made is followed (a plan kept per
    config object was stale: an earlier attempt, reverted)."""
    cfg = _scripted_config(tmp_path, sim_inputs, "plan", 4)

    def audit():
        return _scripted_audit(cfg, lambda g, rng: f"{g} answer {rng.random()}")

    assert len(audit().run().responses) == 8
    changed = audit()
    cfg.samples_per_prompt = 2  # in place, after the Audit was made
    result = changed.run()
    assert len(result.responses) == 16 and sorted(set(result.responses["sample"])) == [0, 1]
    assert len(result.ratings) == 8


def test_a_stop_signal_dropped_before_a_run_stops_it_before_it_starts():
    """Break-it round 2 (s42): a SIGHUP one second into ``lmra audit`` raised its KeyboardInterrupt
    inside a finalizer ("Exception ignored in: 'NotGiven'"), Python dropped it, and the night ran to its
    end (exit 5) — the command's end-of-run check missed it too, the run having forgotten the signal.
    A signal recorded and not delivered stops the next run before its coroutine starts; once delivered
    it stops nothing more."""
    from lmra import interrupts

    started = []

    async def work():
        started.append(1)
        return 7

    interrupts.reset()
    interrupts.record(signal.SIGHUP)  # as lmra.interrupts._stop does, its KeyboardInterrupt then swallowed
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sync(work())
        assert started == [] and interrupts.received() == "SIGHUP"  # named for the command's message
        assert run_sync(work()) == 7 and started == [1]  # delivered: the next run goes on
    finally:
        interrupts.reset()

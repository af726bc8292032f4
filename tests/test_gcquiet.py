"""While an audit's calls run, garbage collections skip the objects alive at their start
(``lmra.gcquiet``, issue 14 goal 1: a full collection stopped the event loop, and with it the
rate limiter's call starts, for 0.1–0.3 s); the heap is given back when the calls end."""

from __future__ import annotations

import gc
import threading

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.gcquiet import frozen_heap, refreeze


def test_frozen_heap_freezes_while_active_and_gives_the_heap_back():
    assert gc.get_freeze_count() == 0
    refreeze()  # no block active: nothing happens
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the modules and objects alive at the start
        with frozen_heap():  # nested (another audit in this process): still frozen
            pass
        assert gc.get_freeze_count() == frozen
        later = [[i] for i in range(5000)]  # alive, not frozen until refreeze()
        done = threading.Event()
        threading.Thread(target=lambda: (refreeze(), done.set())).start()  # as the import thread does
        assert done.wait(30)
        assert gc.get_freeze_count() >= frozen + len(later)
    assert gc.get_freeze_count() == 0


def test_an_audit_runs_its_calls_with_a_frozen_heap_and_gives_it_back(tmp_path, sim_inputs):
    names, prompts = sim_inputs(8)
    seen: list[int] = []

    class Target(ScriptedTarget):
        async def complete(self, request):
            seen.append(gc.get_freeze_count())
            return await super().complete(request)

    cfg = AuditConfig.model_validate(dict(name="gc", prompts=str(prompts), names=str(names), prompts_per_task=2,
                                          output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"),
                                          judge_check={"enabled": False}))
    Audit(cfg, target=Target(NAME_TO_GROUP, lambda g, rng: "An answer."),
          judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run()
    assert seen and min(seen) > 1000
    assert gc.get_freeze_count() == 0


def test_young_collections_are_rarer_inside_the_block_and_the_thresholds_come_back():
    """Inside frozen_heap the youngest generation waits for YOUNG_THRESHOLD allocations (an
    audit allocates a few dozen containers per call); the process's thresholds come back after,
    and a higher threshold the process set itself is kept."""
    from lmra.gcquiet import YOUNG_THRESHOLD

    before = gc.get_threshold()
    young = []
    cb = lambda phase, info: young.append(1) if phase == "start" and info["generation"] == 0 else None  # noqa: E731

    def allocate():
        young.clear()
        gc.callbacks.append(cb)
        try:
            keep = [[i] for i in range(100_000)]
        finally:
            gc.callbacks.remove(cb)
        return len(young), len(keep)

    outside, _ = allocate()
    with frozen_heap():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        inside, _ = allocate()
    assert gc.get_threshold() == before
    assert outside >= 100_000 // max(before[0], 1) // 2 and inside <= 100_000 // YOUNG_THRESHOLD + 1 < outside
    gc.set_threshold(50_000, *before[1:])
    try:
        with frozen_heap():
            assert gc.get_threshold()[0] == 50_000
    finally:
        gc.set_threshold(*before)

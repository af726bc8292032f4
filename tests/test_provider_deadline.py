"""A custom provider's call that never returns fails after the model's ``timeout_s``
(lmra.providers.deadline) instead of holding the audit forever (break-it finding: a custom
target awaiting an event that never came hung ``lmra audit`` with nothing on screen)."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

from conftest import NAME_TO_GROUP, custom_audit_config
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig, ModelConfig
from lmra.providers import make_provider
from lmra.providers.base import ChatRequest, ChatResult, Message, ProviderError, collect_events
from lmra.providers.deadline import DeadlineProvider

HANG = re.compile(r"Prompt number 1?3\.")  # prompts p3 and p13 hang


class HangingTarget(ScriptedTarget):
    """Answers as scripted, except that a prompt matching ``HANG`` never gets an answer
    (the call awaits an event nobody sets); counts the hung calls that were cancelled."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(NAME_TO_GROUP, lambda group, rng: f"A plan with {rng.randint(1, 9)} steps.")
        self.parallel_capacity = 3
        self.hung = 0
        self.cancelled = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        if HANG.search(request.messages[-1].content):
            self.hung += 1
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return await super().complete(request)


def make_hanging(cfg: ModelConfig) -> HangingTarget:
    return HangingTarget(cfg)


class BlockingTarget(ScriptedTarget):
    """Answers as scripted, but a prompt matching ``HANG`` first waits 0.4 s synchronously
    (``time.sleep`` inside ``async def complete``: the event loop is held, nothing can cancel it)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(NAME_TO_GROUP, lambda group, rng: f"A plan with {rng.randint(1, 9)} steps.")
        self.blocked = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        if HANG.search(request.messages[-1].content):
            self.blocked += 1
            time.sleep(0.4)
        return await super().complete(request)


def make_blocking(cfg: ModelConfig) -> BlockingTarget:
    return BlockingTarget(cfg)


def make_judge(cfg: ModelConfig) -> ScriptedJudge:
    return ScriptedJudge(lambda r1, r2: {"C": 1.0})


class _Inner:
    name, model_id, base_url, supports_logprobs = "inner", "m", "", False
    extra = "kept"

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.closed = False

    async def complete(self, request):
        return await self.behaviour()

    async def aclose(self):
        self.closed = True


def _request() -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content="hi")])


def test_a_call_past_the_deadline_is_cancelled_and_fails_as_a_timeout():
    seen = []

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main():
        p = DeadlineProvider(_Inner(forever), 0.05)
        t0 = time.monotonic()
        with collect_events() as events:
            with pytest.raises(ProviderError) as err:
                await p.complete(_request())
        assert 0.04 <= time.monotonic() - t0 < 2
        assert err.value.kind == "timeout" and "timeout_s = 0.05 s" in str(err.value)
        assert events["timeout"] == 1
        assert asyncio.current_task().cancelling() == 0  # the task itself is not left cancelled
        await asyncio.sleep(0)  # and goes on running

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_answers_and_the_providers_own_errors_pass_through_unchanged():
    answer = ChatResult(text="ok")

    async def quick():
        await asyncio.sleep(0.01)
        return answer

    async def own_timeout():
        raise TimeoutError("the provider's own")

    async def main():
        p = DeadlineProvider(_Inner(quick), 5)
        assert await p.complete(_request()) is answer
        assert (p.name, p.model_id, p.extra, p.inner.extra) == ("inner", "m", "kept", "kept")
        with pytest.raises(TimeoutError, match="the provider's own"):
            await DeadlineProvider(_Inner(own_timeout), 5).complete(_request())
        await p.aclose()
        assert p.inner.closed

    asyncio.run(main())
    with pytest.raises(ValueError):
        DeadlineProvider(_Inner(quick), 0)


def test_make_provider_wraps_custom_providers_only():
    p = make_provider(ModelConfig(provider="test_provider_deadline:make_hanging", timeout_s=7))
    assert isinstance(p, DeadlineProvider) and p.timeout_s == 7
    assert isinstance(p.inner, HangingTarget) and p.parallel_capacity == 3  # read from the provider
    assert (p.name, p.model_id) == ("scripted-target", "scripted")


def test_an_audit_with_a_hanging_custom_target_finishes_and_counts_the_timeouts(tmp_path, sim_inputs):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="deadline", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False},
        target={"provider": "test_provider_deadline:make_hanging", "timeout_s": 0.3},
        judge={"provider": "test_provider_deadline:make_judge"}))
    audit = Audit(cfg)
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("res", audit.run()), daemon=True)
    t0 = time.monotonic()
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the audit hung on the custom provider's call"
    res = out["res"]
    hanging = audit._target.inner
    n_hang = sum(bool(HANG.search(f"Prompt number {i}.")) for i in range(20))  # p3 and p13
    assert n_hang == 2 and hanging.hung >= n_hang  # (a pair stops at its first failed call)
    assert hanging.cancelled == hanging.hung  # every hung call was cancelled, none left running
    calls = res.manifest["calls"]["by_model"]["scripted-target:scripted"]
    assert calls["failed"] == hanging.hung and calls["failed_by_kind"] == {"timeout": hanging.hung}
    failed = res.ratings[res.ratings["failed"].astype(bool)]
    assert set(failed["prompt_id"]) == {"p3", "p13"}
    assert res.summary["n_pairs_failed"] == len(failed) and "timeout_s" in failed["error"].iloc[0]
    assert time.monotonic() - t0 < 30


def test_an_audit_whose_custom_target_holds_the_event_loop_counts_its_late_answers_as_timeouts(tmp_path, sim_inputs):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="blocking", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False},
        target={"provider": "test_provider_deadline:make_blocking", "timeout_s": 0.2},
        judge={"provider": "test_provider_deadline:make_judge"}))
    audit = Audit(cfg)
    res = audit.run()
    blocking = audit._target.inner
    assert blocking.blocked >= 2  # p3 and p13 (a pair stops at its first failed call)
    calls = res.manifest["calls"]["by_model"]["scripted-target:scripted"]
    assert calls["failed"] == blocking.blocked and calls["failed_by_kind"] == {"timeout": blocking.blocked}
    failed = res.ratings[res.ratings["failed"].astype(bool)]
    assert set(failed["prompt_id"]) == {"p3", "p13"}
    assert "past timeout_s = 0.2 s" in failed["error"].iloc[0]
    assert res.summary["n_pairs_failed"] == len(failed)
    again = Audit(cfg).run()  # the late answers were not cached as answers: they are asked again
    assert again.manifest["calls"]["by_model"]["scripted-target:scripted"]["failed"] >= 2


def test_a_cancellation_the_run_asked_for_stays_a_cancellation():
    async def forever():
        await asyncio.sleep(3600)

    async def main():
        p = DeadlineProvider(_Inner(forever), 5)
        call = asyncio.ensure_future(p.complete(_request()))
        await asyncio.sleep(0.02)
        call.cancel()  # Ctrl-C, the end of the run …
        with pytest.raises(asyncio.CancelledError):
            await call
        assert not p._running and not p._expired

    asyncio.run(main())


def test_the_watchdog_follows_the_provider_into_a_new_event_loop_and_a_swallowed_cancel_still_times_out():
    async def forever():
        await asyncio.sleep(3600)

    swallowed = []

    async def stubborn():  # answers even when cancelled
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.append(1)
        return ChatResult(text="late")

    p = DeadlineProvider(_Inner(forever), 0.05)
    for _ in range(2):  # one provider, two asyncio.run (two loops): each call times out
        async def main():
            with pytest.raises(ProviderError, match="timeout_s = 0.05 s"):
                await asyncio.wait_for(p.complete(_request()), 5)
        asyncio.run(main())

    async def answered():
        q = DeadlineProvider(_Inner(stubborn), 0.05)
        with collect_events() as events:
            # the call stops being waited for at its limit; the late answer of its abandoned task is dropped
            with pytest.raises(ProviderError, match="did not return within timeout_s = 0.05 s") as err:
                await q.complete(_request())
        assert err.value.kind == "timeout" and events["timeout"] == 1
        assert asyncio.current_task().cancelling() == 0  # its cancel is taken back
        await asyncio.sleep(0)

    asyncio.run(answered())
    assert swallowed == [1]


class _Blocking(_Inner):
    """Waits synchronously (``time.sleep`` inside ``async def complete``: the event loop is held)."""

    def __init__(self, seconds: float):
        super().__init__(None)
        self.seconds = seconds

    async def complete(self, request):
        time.sleep(self.seconds)
        return ChatResult(text="blocked, then answered")


@pytest.mark.parametrize("nested", [False, True])
def test_a_call_that_holds_the_event_loop_past_its_limit_fails_as_a_timeout(nested):
    """The watchdog cannot cancel a call that never yields; its answer, later than ``timeout_s``,
    is dropped and the call counted as a timeout, in a task and outside one alike; a blocking
    call within its limit answers."""
    async def main():
        slow, quick = DeadlineProvider(_Blocking(0.2), 0.05), DeadlineProvider(_Blocking(0.001), 5)
        if nested:  # the asyncio.timeout path: a call nested in another call of the same provider
            slow._running[asyncio.current_task()] = float("inf")
        with collect_events() as events:
            with pytest.raises(ProviderError, match=r"returned after 0\.2\d* s, past timeout_s = 0\.05 s") as err:
                await slow.complete(_request())
        assert err.value.kind == "timeout" and events["timeout"] == 1
        assert (await quick.complete(_request())).text == "blocked, then answered"
        slow._running.clear()

    asyncio.run(main())


def test_many_calls_at_once_each_time_out_and_the_quick_ones_answer():
    async def maybe_forever(i):
        await asyncio.sleep(3600 if i % 2 else 0.001)
        return ChatResult(text=str(i))

    class Numbered(_Inner):
        def __init__(self):
            super().__init__(None)
            self.i = 0

        async def complete(self, request):
            self.i += 1
            return await maybe_forever(self.i)

    async def main():
        p = DeadlineProvider(Numbered(), 0.1)
        out = await asyncio.gather(*(p.complete(_request()) for _ in range(40)), return_exceptions=True)
        assert sum(isinstance(o, ProviderError) and o.kind == "timeout" for o in out) == 20
        assert sum(isinstance(o, ChatResult) for o in out) == 20
        assert not p._running and not p._expired

    asyncio.run(main())


def test_calls_from_two_event_loops_at_once_each_time_out():
    """An embedding program may call one provider from two event loops, each in its thread."""
    async def forever():
        await asyncio.sleep(3600)

    async def quick():
        await asyncio.sleep(0.001)
        return ChatResult(text="ok")

    class Either(_Inner):
        async def complete(self, request):
            return await (forever() if request.messages[-1].content == "hang" else quick())

    p = DeadlineProvider(Either(None), 0.2)
    hang = ChatRequest(messages=[Message(role="user", content="hang")])
    out: dict = {}

    def loop_a():
        async def main():
            t0 = time.monotonic()
            try:
                await p.complete(hang)
            except ProviderError as exc:
                out["a"] = (exc.kind, time.monotonic() - t0)
        asyncio.run(main())

    def loop_b():
        async def main():
            for _ in range(100):  # short calls on another loop meanwhile
                assert (await p.complete(_request())).text == "ok"
        asyncio.run(main())

    threads = [threading.Thread(target=loop_a), threading.Thread(target=loop_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert out.get("a") is not None and out["a"][0] == "timeout" and out["a"][1] < 2


# -- a plain ``def complete`` runs in a worker thread -------------------------------------------------
class SyncTarget(ScriptedTarget):
    """A synchronous custom target (plain ``def complete``, as a blocking HTTP client would be
    wrapped): each call sleeps 0.05 s; a prompt matching ``HANG`` never returns (it waits on an
    event nobody sets). Records the calls in flight at once and the threads they ran in."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(NAME_TO_GROUP, lambda group, rng: f"A plan with {rng.randint(1, 9)} steps.")
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = self.hung = 0
        self.threads: set[str] = set()

    def complete(self, request: ChatRequest) -> ChatResult:  # not async
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.threads.add(threading.current_thread().name)
        try:
            if HANG.search(request.messages[-1].content):
                with self.lock:
                    self.hung += 1
                threading.Event().wait()  # never returns
            time.sleep(0.05)
            return asyncio.run(ScriptedTarget.complete(self, request))
        finally:
            with self.lock:
                self.in_flight -= 1


def make_sync(cfg: ModelConfig) -> SyncTarget:
    return SyncTarget(cfg)


def test_a_plain_def_provider_runs_in_worker_threads_and_a_call_that_never_returns_times_out(tmp_path, sim_inputs):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="sync", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False},
        target={"provider": "test_provider_deadline:make_sync", "timeout_s": 0.5},
        judge={"provider": "test_provider_deadline:make_judge"}))
    audit = Audit(cfg)
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("res", audit.run()), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the audit hung on the synchronous provider's call"
    res, sync = out["res"], audit._target.inner
    assert audit._target.synchronous
    assert threading.main_thread().name not in sync.threads and worker.name not in sync.threads
    assert sync.most_in_flight > 1  # calls overlap (each held the event loop before)
    assert sync.hung >= 2  # p3 and p13 (a pair stops at its first failed call)
    calls = res.manifest["calls"]["by_model"]["scripted-target:scripted"]
    assert calls["failed"] == sync.hung and calls["failed_by_kind"] == {"timeout": sync.hung}
    failed = res.ratings[res.ratings["failed"].astype(bool)]
    assert set(failed["prompt_id"]) == {"p3", "p13"}
    assert calls["fresh"] == 40 - sync.hung


def test_a_plain_def_providers_error_and_note_events_reach_the_audit():
    class Raising(_Inner):
        def complete(self, request):  # not async
            from lmra.providers.base import note_event
            note_event("retry")
            raise ProviderError("sync failure", kind="http_503")

    async def main():
        p = DeadlineProvider(Raising(None), 5)
        with collect_events() as events:
            with pytest.raises(ProviderError, match="sync failure") as err:
                await p.complete(_request())
        assert err.value.kind == "http_503" and events["retry"] == 1

    asyncio.run(main())


def _audit_process(config):
    """``lmra audit --config CONFIG`` in a process of its own (the tests folder importable)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests_dir = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": f"{tests_dir}:{tests_dir.parent}"}
    return subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "--config", str(config), "--no-progress",
                           "--no-report"], capture_output=True, text=True, env=env, timeout=120)


def _subprocess_config(tmp_path, sim_inputs, factory: str):
    names, prompts = sim_inputs(6)
    return custom_audit_config(tmp_path, names, prompts, target=f"test_provider_deadline:{factory}",
                               judge="test_provider_deadline:make_judge", name=factory,
                               top="max_failed_share = 1.0", target_lines="timeout_s = 0.5")


def test_lmra_audit_exits_although_a_synchronous_call_never_returned(tmp_path, sim_inputs):
    """The abandoned worker thread is a daemon: the process ends with the audit."""
    t0 = time.monotonic()
    proc = _audit_process(_subprocess_config(tmp_path, sim_inputs, "make_sync"))
    assert time.monotonic() - t0 < 100
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "timeout" in proc.stdout


# -- an async call that does not end when cancelled (break-it finding) -------------------------------
class StubbornTarget(ScriptedTarget):
    """Answers as scripted, except for prompts matching ``HANG``: ``swallow`` catches every
    cancellation and waits on; ``cleanup`` awaits forever in its ``finally``."""

    mode = "swallow"

    def __init__(self, cfg: ModelConfig):
        super().__init__(NAME_TO_GROUP, lambda group, rng: f"A plan with {rng.randint(1, 9)} steps.")
        self.stuck = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        await asyncio.sleep(0)  # (a real call waits: the rest of it runs in a task of its own)
        if HANG.search(request.messages[-1].content):
            self.stuck += 1
            if self.mode == "swallow":
                while True:
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        continue
            try:
                await asyncio.sleep(3600)
            finally:
                await asyncio.Event().wait()
        return await super().complete(request)


class CleanupTarget(StubbornTarget):
    mode = "cleanup"


def make_stubborn(cfg: ModelConfig) -> StubbornTarget:
    return StubbornTarget(cfg)


def make_cleanup(cfg: ModelConfig) -> CleanupTarget:
    return CleanupTarget(cfg)


@pytest.mark.parametrize("factory", ["make_stubborn", "make_cleanup"])
def test_a_call_that_does_not_end_when_cancelled_still_times_out_and_the_audit_ends(tmp_path, sim_inputs, factory):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="stubborn", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False},
        target={"provider": f"test_provider_deadline:{factory}", "timeout_s": 0.3},
        judge={"provider": "test_provider_deadline:make_judge"}))
    audit = Audit(cfg)
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("res", audit.run()), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the audit hung on a call that does not end when cancelled"
    res, stubborn = out["res"], audit._target.inner
    assert stubborn.stuck >= 2
    calls = res.manifest["calls"]["by_model"]["scripted-target:scripted"]
    assert calls["failed"] == stubborn.stuck and calls["failed_by_kind"] == {"timeout": stubborn.stuck}
    assert set(res.ratings[res.ratings["failed"].astype(bool)]["prompt_id"]) == {"p3", "p13"}


def test_lmra_audit_exits_although_a_call_swallows_every_cancellation(tmp_path, sim_inputs):
    """In a real process: asyncio.run's end waits for every task it cancels; an abandoned call
    that never ends is left out of that wait (lmra.syncrun.abandon), so the command exits."""
    proc = _audit_process(_subprocess_config(tmp_path, sim_inputs, "make_stubborn"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Task was destroyed but it is pending" not in proc.stderr


def test_an_answer_that_needs_no_waiting_makes_no_task():
    """The fast path: a coroutine that returns at its first step is not given a task."""
    from lmra.providers.deadline import _abandonable

    async def instant():
        return ChatResult(text="now")

    async def main():
        loop = asyncio.get_running_loop()
        made = []
        real = loop.create_task
        loop.create_task = lambda *a, **k: made.append(1) or real(*a, **k)
        try:
            assert (await _abandonable(instant(), loop)).text == "now"
            assert made == []
            p = DeadlineProvider(_Inner(instant), 5)
            assert (await p.complete(_request())).text == "now" and made == []
        finally:
            loop.create_task = real

    asyncio.run(main())


class NeverClosingTarget(ScriptedTarget):
    """Answers as scripted; its ``aclose`` awaits forever and swallows every cancellation."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(NAME_TO_GROUP, lambda group, rng: f"A plan with {rng.randint(1, 9)} steps.")

    async def aclose(self):
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue


def make_never_closing(cfg: ModelConfig) -> NeverClosingTarget:
    return NeverClosingTarget(cfg)


def test_lmra_audit_exits_although_a_providers_aclose_never_returns(tmp_path, sim_inputs):
    """Break-it finding: an aclose that never returned held `lmra audit` forever after its run
    folder was written; it is abandoned after the model's timeout_s, like a call."""
    t0 = time.monotonic()
    proc = _audit_process(_subprocess_config(tmp_path, sim_inputs, "make_never_closing"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 60 and "Task was destroyed but it is pending" not in proc.stderr

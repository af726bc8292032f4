"""A time limit on each call of a custom provider (``provider = "package.module:factory"``).

The built-in backends bound their calls themselves — ``openai`` and ``anthropic`` through
their SDK's ``timeout`` (``timeout_s`` per attempt, ``max_retries`` attempts), the embedded
``llamacpp`` model is local compute — but a custom provider is whatever its author wrote: a
call that never returns (a lost connection without a timeout, an await on an event that
never comes) would hold its pair, and at the end the whole audit, forever.
:func:`make_provider <lmra.providers.make_provider>` therefore wraps every custom provider in
:class:`DeadlineProvider`: a call still running after the model's ``timeout_s`` is cancelled
and fails with a :class:`~lmra.providers.base.ProviderError` of kind ``timeout``, counted and
reported like any failed call (the pair is failed, the run's ``failed_share`` counts it).

The calls in flight are watched by one timer per provider, not one per call: a call records
its task and deadline (a dict entry), and a watchdog callback, run every ``timeout_s / 10``
(at most 1 s, at least 10 ms) while calls are in flight, cancels the tasks past their
deadline; the cancelled call's ``CancelledError`` becomes the ``timeout`` failure (a
cancellation the run asked for — Ctrl-C, SIGTERM, the end of the run — stays one). A call
thus fails between ``timeout_s`` and ``timeout_s`` plus one tick after it started.
:func:`asyncio.timeout` per call does the same with a timer handle per call: 7–9 µs a call
against 1.2–2.1 µs for the watchdog (``bench/bench_deadline.py``; docs/benchmarks.md, "The
twelfth round"); a call outside a task (or one nested in another call of the same provider)
still uses it.
A plain ``def complete`` (a synchronous provider: a blocking HTTP client, say) runs in a
worker thread of its own (a daemon thread, one per call: as many at once as the audit's
concurrency lets in, so it must be thread-safe), never on the event loop: its calls overlap,
and one that never returns fails as a ``timeout`` like any other — the thread is abandoned
(it cannot be stopped; being a daemon thread, it does not keep the process alive at the end).
What it returns is awaited on the loop when it is awaitable (a ``def`` delegating to an async
client).
A provider that blocks the event loop itself (a synchronous ``time.sleep`` or blocking HTTP
call inside ``async def complete``) cannot be interrupted from the loop: its call runs to its
end, holding every other call meanwhile. Its answer, and that of a provider that swallows the
cancellation and answers anyway, still fails as a ``timeout`` when it comes after ``timeout_s``
(one clock read a call), so the limit means the same for every provider; such a call that
never returns hangs the audit. An ``async def`` call that does not end when cancelled (it
swallows every ``CancelledError``, or awaits forever in its cleanup) does not: a call is stepped
once in the caller's task and, if it has to wait, goes on in a task of its own
(:func:`_abandonable`), which the watchdog's cancellation abandons (:func:`lmra.syncrun.abandon`).
A call answered at its first step (a zero-latency provider) costs no task; one that waits
costs about 1 µs more, beside its wait (``bench/bench_deadline.py``; docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from inspect import isawaitable, iscoroutine, iscoroutinefunction
from typing import Any

from lmra.providers.base import ChatRequest, ChatResult, Provider, ProviderError, note_event, wrap_identity
from lmra.syncrun import in_daemon_thread


class StrayGeneratorExit(Exception):
    """A custom provider's call raised ``GeneratorExit`` itself (not thrown in by lmra closing
    the call): an error of that one call, counted like any other exception a provider raises
    (break-it finding: it went through every ``except Exception`` and ended the run with a
    traceback)."""


def _stray(exc: GeneratorExit) -> StrayGeneratorExit:
    return StrayGeneratorExit(f"the provider raised GeneratorExit{f': {exc}' if str(exc) else ''}")


@types.coroutine
def _resume(coro, yielded):
    """Drive ``coro`` — stepped once by hand, suspended having yielded ``yielded`` to its
    driver — to its end, as a task's coroutine (sends, throws and close go to ``coro``)."""
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 — thrown in by the task (a cancellation): ``coro``'s to handle
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            except GeneratorExit as raised:
                raise _stray(raised) from raised
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value
            except GeneratorExit as raised:
                raise _stray(raised) from raised


async def _abandonable(coro, loop: asyncio.AbstractEventLoop):
    """``await coro``, such that a cancellation of the caller (the watchdog, a stopping run)
    ends the wait at once even if ``coro`` does not end when cancelled.

    ``coro`` is stepped once in the caller's task: an answer that needs no waiting (a cache in
    the provider, a zero-latency provider) costs nothing more. Otherwise the rest of it runs in
    a task of its own (about 1 µs more a call, beside a call that waits anyway), which the caller waits for
    through a plain future: cancelling the caller cancels that task and abandons it
    (:func:`lmra.syncrun.abandon`) — break-it finding: a provider whose call swallowed every
    cancellation, or awaited forever in its cleanup, held the audit past ``timeout_s``, and
    even past SIGTERM."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    except GeneratorExit as raised:
        raise _stray(raised) from raised
    inner = loop.create_task(_resume(coro, yielded))
    waiter = loop.create_future()

    def done(task: asyncio.Task) -> None:
        if waiter.done():
            return
        if task.cancelled():  # the provider's own CancelledError (the caller was not cancelled)
            waiter.cancel()
        elif task.exception() is not None:
            waiter.set_exception(task.exception())
        else:
            waiter.set_result(task.result())

    inner.add_done_callback(done)
    try:
        return await waiter
    except asyncio.CancelledError:
        if not inner.done():
            from lmra.syncrun import abandon

            abandon(inner)
        raise


class DeadlineProvider:
    """``inner`` (a custom provider) whose every call fails after ``timeout_s`` seconds.

    Args:
        inner: an object with the :class:`~lmra.providers.base.Provider` protocol.
        timeout_s: seconds one call may take, > 0 (the model's ``timeout_s``, default 120).

    Attributes:
        name, model_id, base_url, supports_logprobs, inner: those of ``inner``
            (:func:`~lmra.providers.base.wrap_identity`: cache keys unchanged);
            ``parallel_capacity`` and any other attribute are read from ``inner``.
        tick_s: seconds between two looks of the watchdog at the calls in flight.

    Raises:
        ValueError: ``timeout_s`` ≤ 0.
    """

    def __init__(self, inner: Provider, timeout_s: float):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 (got {timeout_s!r})")
        wrap_identity(self, inner)
        #: a plain ``def complete``: each call runs in a worker thread (:meth:`_in_thread`)
        self.synchronous = not iscoroutinefunction(inner.complete)
        self.timeout_s = float(timeout_s)
        self.tick_s = min(1.0, max(0.01, self.timeout_s / 10))
        self._running: dict[asyncio.Task, float] = {}  # task of a call in flight → its deadline (its loop's time)
        self._expired: set[asyncio.Task] = set()  # tasks the watchdog cancelled
        #: event loop → its watchdog's next look (one per loop: calls from several loops, each in its thread)
        self._watches: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}

    def __getattr__(self, attr: str) -> Any:
        # optional extensions of the provider (parallel_capacity, a batch API …) are the inner one's
        if attr == "inner":  # not set yet (during construction): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    async def complete(self, request: ChatRequest) -> ChatResult:
        """The inner provider's answer.

        Raises:
            ProviderError: kind ``timeout`` when the call did not return within ``timeout_s``
                (the inner call is cancelled; an answer that still comes later, from a
                provider that held the event loop or swallowed the cancellation, is dropped);
                whatever the inner provider raises otherwise.
        """
        task = asyncio.current_task()
        running = self._running
        if task is None or task in running:
            return await self._one_timer(request)
        loop = task.get_loop()
        started = loop.time()
        running[task] = deadline = started + self.timeout_s
        if loop not in self._watches:
            self._watch(loop)
        try:
            result = self._in_thread(request) if self.synchronous else self.inner.complete(request)
            if iscoroutine(result):
                result = await _abandonable(result, loop)
            elif isawaitable(result):
                result = await result
            if loop.time() > deadline:  # answered past its limit: the loop was held, or the cancel swallowed
                note_event("timeout")
                raise self._late(loop.time() - started)
            return result
        except asyncio.CancelledError:
            if task in self._expired:
                self._expired.discard(task)
                if task.uncancel() == 0:  # cancelled by the watchdog alone: the call timed out
                    note_event("timeout")
                    raise self._timed_out() from None
            raise
        finally:
            del running[task]
            if task in self._expired:  # the provider swallowed the cancellation and answered
                self._expired.discard(task)
                task.uncancel()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start ``loop``'s watchdog (forgetting those of closed loops)."""
        for old in [lp for lp in list(self._watches) if lp.is_closed()]:  # (another thread may add one)
            self._watches.pop(old, None)
        self._watches[loop] = loop.call_later(self.tick_s, self._look, loop)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        """``loop``'s watchdog (run on that loop): cancel its calls past their deadline; look
        again in ``tick_s`` while it has calls in flight (its next call starts it again otherwise)."""
        mine = [(task, deadline) for task, deadline in list(self._running.items()) if task.get_loop() is loop]
        if not mine:
            self._watches.pop(loop, None)
            return
        now = loop.time()
        for task, deadline in mine:
            if deadline <= now and task not in self._expired and not task.done():
                self._expired.add(task)
                task.cancel()
        self._watches[loop] = loop.call_later(self.tick_s, self._look, loop)

    async def _one_timer(self, request: ChatRequest) -> ChatResult:
        """The call under :func:`asyncio.timeout` (outside a task, or nested in a call)."""
        limit = asyncio.timeout(self.timeout_s)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with limit:
                result = self._in_thread(request) if self.synchronous else self.inner.complete(request)
                if isawaitable(result):
                    result = await result
        except TimeoutError:
            if not limit.expired():  # the provider's own TimeoutError: its failure, as it raised it
                raise
            note_event("timeout")
            raise self._timed_out() from None
        if loop.time() > started + self.timeout_s:
            note_event("timeout")
            raise self._late(loop.time() - started)
        return result

    async def _in_thread(self, request: ChatRequest) -> ChatResult:
        """A plain ``def complete``'s call, made in a daemon thread of its own (with the caller's
        context variables, so that the events it notes are counted) while the event loop goes
        on; what it returns is awaited here when it is awaitable. Cancelling this coroutine (the
        watchdog, a stopping run) abandons the thread: its late answer or error is dropped."""
        ctx = contextvars.copy_context()
        answer = in_daemon_thread(lambda: ctx.run(self.inner.complete, request), name=f"lmra-{self.name}-call",
                                  # GeneratorExit is not an exception a future may carry as the call's own
                                  error=lambda e: _stray(e) if isinstance(e, GeneratorExit) else e)
        result = await answer
        if isawaitable(result):  # a ``def`` delegating to an async client
            result = await result
        return result

    def _late(self, took: float) -> ProviderError:
        return ProviderError(f"{self.name} call returned after {took:.3g} s, past timeout_s = {self.timeout_s:g} s "
                             "(custom provider; it could not be cancelled in time: a synchronous wait inside "
                             "async def complete holds the event loop, and every other call with it)",
                             kind="timeout")

    def _timed_out(self) -> ProviderError:
        return ProviderError(f"{self.name} call did not return within timeout_s = {self.timeout_s:g} s "
                             "(custom provider; the call was cancelled)", kind="timeout")

    async def aclose(self) -> None:
        """Close ``inner``: an ``aclose`` that has not ended after ``timeout_s`` (or that
        swallows its cancellation) is abandoned, like a call (break-it finding: one that never
        returned held ``lmra audit`` forever after its run folder was written).

        Raises:
            TimeoutError: ``inner.aclose`` did not end in time (the caller ignores close errors).
        """
        closed = self.inner.aclose()
        if not isawaitable(closed):
            return
        waiting = _abandonable(closed, asyncio.get_running_loop()) if iscoroutine(closed) else closed
        # (not asyncio.wait_for: on Python 3.11 it swallows a cancellation that comes as the
        # close ends — a Ctrl-C while the run folder was written was lost there, and the run
        # went on to its report and exit status 0)
        async with asyncio.timeout(self.timeout_s):
            await waiting


__all__ = ["DeadlineProvider"]

"""Running an audit's coroutine from synchronous code without formatting its result, and
without waiting forever for a call it gave up on (:func:`abandon`).

On Python 3.11, :func:`asyncio.run` ends by asking ``signal.getsignal(SIGINT)`` whether its
own Ctrl-C handler is still installed, and :mod:`signal` tries to turn that handler — a
``functools.partial`` holding the main task — into a ``Handlers`` enum member. The failed
lookup formats ``repr(handler)``, which formats the finished task *with its result*, twice.
For an :class:`~lmra.audit.AuditResult` that is every DataFrame's ``to_string``: about 0.02 s
each time at 5,000 pairs, after the last answer of every run (issue 14; docs/benchmarks.md,
"The ninth round").
:func:`run_sync` keeps the result out of the main task, so nothing large is formatted.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: seconds an abandoned task (:func:`abandon`) gets to end, once cancelled, when the run ends
ABANDONED_GRACE_S = 1.0
_abandoned: "weakref.WeakSet[asyncio.Task]" = weakref.WeakSet()


def abandon(task: asyncio.Task) -> None:
    """Cancel ``task`` and stop waiting for it: a custom provider's call past its time limit
    that does not end when cancelled (it swallows the cancellation, or awaits forever in its
    cleanup; lmra.providers.deadline). When the coroutine of :func:`run_sync` ends, such tasks
    get :data:`ABANDONED_GRACE_S` more to end; those still running are then left out of the
    event loop's final wait, which would otherwise hang forever (asyncio.run waits for every
    task it cancels)."""
    task.cancel()
    _abandoned.add(task)


async def _let_go_of_abandoned() -> None:
    """See :func:`abandon`: wait a little for the abandoned tasks, then forget those left."""
    tasks = [t for t in _abandoned if not t.done() and t.get_loop() is asyncio.get_running_loop()]
    if not tasks:
        return
    for t in tasks:
        t.cancel()
    _, pending = await asyncio.wait(tasks, timeout=ABANDONED_GRACE_S)
    unregister = getattr(asyncio.tasks, "_unregister_task", None)  # (CPython's: all_tasks() forgets it)
    for t in pending:
        if unregister is not None:
            unregister(t)
        try:
            t._log_destroy_pending = False  # no "Task was destroyed but it is pending" at exit
        except AttributeError:
            pass


#: seconds the calls in flight get to deliver their answers once a run is interrupted (Ctrl-C,
#: SIGTERM, SIGHUP) before they are cancelled (:func:`wind_down`); a second signal stops at once
INTERRUPT_GRACE_S = 2.0


async def wind_down(started: "set[asyncio.Task]", grace_s: float = INTERRUPT_GRACE_S, *,
                    on_notice=lambda msg: None) -> None:
    """After an interrupt: give the calls in flight (``started``: tasks whose request was sent)
    up to ``grace_s`` seconds to end, so that an answer on its way — sent by the server, maybe
    already in the socket's buffer — is read and stored in the call cache instead of being asked,
    and paid for, again on the re-run (a recsys review: every Ctrl-C threw away the answers of
    the calls in flight, 4 of them at concurrency 4). Calls still running then are the caller's
    to cancel. Call it in the interrupted task's cleanup, after cancelling the calls not started;
    a second signal (asyncio's handler then raises ``KeyboardInterrupt``) ends the wait at once.
    """
    running = [t for t in started if not t.done()]
    if not running or grace_s <= 0:
        return
    on_notice(f"stopping: waiting up to {grace_s:g} s for the answers of {len(running)} call(s) in flight, so that "
              "they are kept (interrupt again to stop at once)")
    await asyncio.wait(running, timeout=grace_s)


def in_daemon_thread(call: Callable[[], T], *, name: str,
                     error: Callable[[BaseException], BaseException] = lambda e: e) -> "asyncio.Future[T]":
    """A future of the running loop holding ``call()``'s result (or what it raised, passed
    through ``error``), computed in a daemon thread of its own, never in the loop's default
    executor: :func:`asyncio.run` joins that executor's threads without a time limit when it
    ends, so a thread stuck there holds the process forever (break-it finding, s37: a second
    Ctrl-C raised inside an import of the main thread left CPython's import lock taken; the
    warm-up thread importing in the default executor waited for it forever, and so did
    ``lmra audit``, printing progress lines until killed). Once the loop is closed the thread's
    outcome is dropped; the thread ends with the process.

    Args:
        call: what the thread runs (no argument).
        name: the thread's name.
        error: maps an exception ``call`` raised to the one the future carries (e.g. a
            ``GeneratorExit``, which a future may not carry as its own)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(value: object, exc: BaseException | None) -> None:
        if not future.done():  # (not when the awaiting coroutine was cancelled meanwhile)
            future.set_exception(exc) if exc is not None else future.set_result(value)

    def run() -> None:
        try:
            value, exc = call(), None
        except BaseException as e:  # noqa: BLE001 — handed to whoever awaits the future
            value, exc = None, error(e)
        try:
            loop.call_soon_threadsafe(deliver, value, exc)
        except RuntimeError:  # the event loop is closed: the run ended without this outcome
            pass

    threading.Thread(target=run, daemon=True, name=name).start()
    return future


class InterruptedAfterFinish(KeyboardInterrupt):
    """Ctrl-C arrived while the coroutine of :func:`run_sync` ran its last synchronous step (an
    audit writing its run folder): asyncio delivers it only once that step is over, so the
    coroutine *finished* — its result is :attr:`result` — and the interrupt is raised after it
    (break-it finding: the result was dropped, so ``lmra audit`` said "run the same command
    again to resume" of a complete run folder, and a re-run became a second night)."""

    def __init__(self, result: Any):
        super().__init__()
        self.result = result


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, returning its result, with a main task whose result is None.

    Ctrl-C, cancellation and exceptions behave as with :func:`asyncio.run` (the main task
    awaits ``coro``, so a cancellation of it reaches ``coro``); only the main task's own
    coroutine is this function's wrapper, not ``coro``. A SIGINT while ``coro`` runs is
    recorded (:func:`lmra.interrupts.recording_sigint`: ``coro`` sees a cancellation, and
    :func:`lmra.interrupts.interrupt_reason` names the signal); earlier records are forgotten.

    Raises:
        whatever ``coro`` raises; ValueError when ``coro`` is not a coroutine and RuntimeError
        when called from a running event loop (both as :func:`asyncio.run`);
        InterruptedAfterFinish (a KeyboardInterrupt) holding ``coro``'s result when Ctrl-C came
        after ``coro`` returned.
    """
    if not asyncio.iscoroutine(coro):
        raise ValueError(f"a coroutine was expected, got {coro!r}")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    from lmra import interrupts

    box: list[T] = []
    if interrupts.dropped() is not None:  # a stop signal came before this run, and Python dropped its
        # KeyboardInterrupt (a finalizer's "Exception ignored"): the command was asked to stop — before any
        # call (break-it round 2, s42: a SIGHUP 1 s after start was swallowed so, and the night ran to its end)
        coro.close()
        interrupts.delivered()
        raise KeyboardInterrupt
    interrupts.reset()

    async def main() -> None:
        with interrupts.recording_sigint():  # asyncio's Ctrl-C handler is installed by now
            try:
                box.append(await coro)
            finally:
                await _let_go_of_abandoned()

    try:
        try:
            with interrupts.sigint_restored():
                asyncio.run(main())
        except asyncio.CancelledError as exc:  # cancelled by SIGTERM / SIGHUP with SIGINT ignored
            if interrupts.received() is None:  # (interrupts._cancelling): an interrupt, as asyncio's is
                raise
            raise KeyboardInterrupt from exc
    except KeyboardInterrupt as exc:
        interrupts.delivered()  # (it reaches the caller: a later run in this process is not stopped by it)
        if box and not isinstance(exc, InterruptedAfterFinish):  # coro returned: its result is not lost
            raise InterruptedAfterFinish(box[0]) from exc
        raise
    return box[0]

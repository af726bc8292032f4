"""Which signal stopped a run: SIGINT (Ctrl-C), SIGTERM (a stop) or SIGHUP (the terminal or SSH
session closed), recorded as it arrives so that the console and ``manifest.json``'s
``stop_reason`` can name it (fresh-user finding: a nightly run stopped "by itself", a stray
SIGHUP, and nothing said which signal it was).

* :func:`stop_on_signals` — the ``lmra`` command's handlers: SIGTERM, and SIGHUP unless it is
  ignored (``nohup``), stop a command like Ctrl-C (a ``KeyboardInterrupt``), each recorded.
* :func:`recording_sigint` — while :func:`lmra.syncrun.run_sync` runs its coroutine, asyncio's
  own Ctrl-C handler (which cancels the main task instead of raising) is wrapped so that a
  SIGINT is recorded too (:func:`sigint_restored` puts the handler of before back after the
  loop); outside it Python's default SIGINT handler raises the ``KeyboardInterrupt`` itself,
  which nothing else in lmra raises unrecorded (:func:`interrupt_reason`). SIGTERM and SIGHUP
  (when :func:`stop_on_signals` set them) go to that handler too while the coroutine runs: the
  run is cancelled at its next ``await``, as by Ctrl-C, never interrupted by a
  ``KeyboardInterrupt`` raised in the middle of a step — which dropped an answer the client had
  read but not yet stored in the call cache (a recsys review: SIGTERM lost one such answer in 5
  of 16 trials). A second signal stops at once (asyncio's handler raises then).
* :func:`received` / :func:`interrupt_reason` — the first signal recorded, and the words that
  say it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

#: what each signal usually means, for the message that names it
CAUSES = {
    "SIGINT": "Ctrl-C, or an interrupt sent to the terminal's process group",
    "SIGTERM": "a request to stop: kill, systemd, a CI job's timeout",
    "SIGHUP": "the terminal or SSH session closed; run under nohup, tmux or screen to go on past it",
}

_received: list[str] = []  # signal names in the order they came (only the first is named)
_delivered = [True]  # whether the last signal recorded reached the command as its KeyboardInterrupt


def reset() -> None:
    """Forget the signals recorded so far (a new command, or a new run in this process)."""
    _received.clear()
    _delivered[0] = True


def record(signum: int) -> None:
    """Record that signal ``signum`` arrived (not delivered yet: :func:`delivered`)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    _received.append(name)
    _delivered[0] = False


def delivered() -> None:
    """Note that the signals recorded so far reached the command (a ``KeyboardInterrupt`` left a
    run); their names stay for the message (:func:`received`)."""
    _delivered[0] = True


def dropped() -> str | None:
    """The first recorded signal when the last one has not reached the command — its
    ``KeyboardInterrupt`` raised where Python ignores exceptions (a finalizer, a garbage
    collector's callback: "Exception ignored in …") —, else None."""
    return None if _delivered[0] else received()


def received() -> str | None:
    """The name of the first signal recorded since :func:`reset` (``"SIGHUP"`` …), or None."""
    return _received[0] if _received else None


def _stop(signum, frame) -> None:
    """Handler of :func:`stop_on_signals`: record the signal, then stop as Ctrl-C does."""
    record(signum)
    raise KeyboardInterrupt


#: the signals :func:`stop_on_signals` makes stop a command (those the system has)
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def stop_on_signals() -> None:
    """Make SIGTERM (systemd, CI timeouts) and SIGHUP (the terminal or SSH session closed) stop
    the command as Ctrl-C does — a ``KeyboardInterrupt``, so that a run's manifest says
    ``interrupted`` and every finished call stays in the cache — recording which one came.
    SIGHUP is left alone when it is not at its default (ignored under ``nohup``: the run goes
    on). Forgets earlier records (:func:`reset`). Does nothing outside the main thread (a test
    calling the command from a thread), where handlers cannot be set."""
    reset()
    try:
        signal.signal(signal.SIGTERM, _stop)
        if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:
            signal.signal(signal.SIGHUP, _stop)
    except ValueError:  # not in the main thread
        pass


def ignore_stop_signals() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP from now on: called by the ``lmra`` command once its
    command has returned its exit status (and said it), so that a signal while the interpreter
    shuts down — when Python has put the default handlers back — does not end the process with
    another status (143 after "exit status 0"). Does nothing outside the main thread."""
    try:
        for sig in (signal.SIGINT, *_STOP_SIGNALS):
            signal.signal(sig, signal.SIG_IGN)
    except ValueError:
        pass


def _cancelling(task, loop):
    """A signal handler doing what asyncio's Ctrl-C handler does, for when asyncio installed none
    (SIGINT ignored): the first signal cancels ``task`` (the run's main task; :func:`lmra.syncrun.run_sync`
    then raises ``KeyboardInterrupt``), a second raises ``KeyboardInterrupt`` at once."""
    count = [0]

    def handler(signum, frame):
        count[0] += 1
        if count[0] == 1 and task is not None and not task.done():
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wake a loop blocked in select()
            return
        raise KeyboardInterrupt

    return handler


@contextmanager
def recording_sigint() -> Iterator[None]:
    """Within the block, a SIGINT is recorded before the SIGINT handler installed at its start
    runs (asyncio's, which cancels the main task: the run then sees a ``CancelledError``, not
    the ``KeyboardInterrupt`` that would say it was Ctrl-C). The handler is put back at the end
    unless something else replaced the wrapper meanwhile. Enter it inside the event loop's main
    task (asyncio installs its handler when it starts the task). Does nothing outside the main
    thread or when the handler is not a Python callable."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        inner = signal.getsignal(signal.SIGINT)
    except ValueError:
        inner = None
    own_sigint = callable(inner)
    if not own_sigint:  # SIGINT ignored (a command started in the background of a script, '&'):
        # asyncio installed no handler; SIGTERM / SIGHUP cancel the main task as it would
        # (review finding: else they raised mid-step, and answers of calls in flight were lost)
        inner = _cancelling(asyncio.current_task(), asyncio.get_running_loop())

    def noted(signum, frame):
        record(signum)
        return inner(signum, frame)

    try:
        if own_sigint:
            signal.signal(signal.SIGINT, noted)
    except ValueError:
        yield
        return
    # SIGTERM / SIGHUP stop the run as Ctrl-C does (cancelled at an await), not by a
    # KeyboardInterrupt raised wherever the main thread is (an answer read but not stored yet)
    routed = []
    for sig in _STOP_SIGNALS:
        try:
            if signal.getsignal(sig) is _stop:
                signal.signal(sig, noted)
                routed.append(sig)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        try:
            if own_sigint and signal.getsignal(signal.SIGINT) is noted:
                signal.signal(signal.SIGINT, inner)  # asyncio's own, which it then takes away itself
            for sig in routed:
                if signal.getsignal(sig) is noted:
                    signal.signal(sig, _stop)
        except ValueError:
            pass


@contextmanager
def sigint_restored() -> Iterator[None]:
    """The SIGINT handler (and SIGTERM's, SIGHUP's) of the block's start is the handler at its end: around
    :func:`asyncio.run` whose main task uses :func:`recording_sigint`. asyncio puts its default
    back only when its own handler is still installed when the loop stops; when a
    ``KeyboardInterrupt`` (SIGTERM, SIGHUP) ends the loop early, the main task's cleanup — and
    :func:`recording_sigint`'s — runs after that check and would leave asyncio's handler of a
    closed loop installed. Does nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    befores = []
    for sig in (signal.SIGINT, *_STOP_SIGNALS):  # (SIGTERM / SIGHUP: routed by recording_sigint)
        try:
            befores.append((sig, signal.getsignal(sig)))
        except ValueError:
            pass
    try:
        yield
    finally:
        for sig, before in befores:
            if before is None:
                continue
            try:
                if signal.getsignal(sig) is not before:
                    signal.signal(sig, before)
            except (ValueError, TypeError):
                pass


def interrupt_reason(exc: BaseException | None = None) -> str:
    """Why a command or run was interrupted, for its message and ``stop_reason``:
    ``"interrupted by SIGHUP (the terminal or SSH session closed; …)"``.

    The first recorded signal is named (:func:`received`). With none recorded, a
    ``KeyboardInterrupt`` is Python's own answer to SIGINT (its default handler raises it; lmra
    raises one only after a recorded signal), so it is named SIGINT; anything else (an
    ``asyncio.CancelledError`` of a run cancelled from outside, in a program using lmra as a
    library) says that no signal was received.
    """
    name = received()
    if name is None and isinstance(exc, KeyboardInterrupt):
        name = "SIGINT"
    if name is None:
        what = type(exc).__name__ if exc is not None else "an interrupt"
        return f"interrupted: cancelled ({what}; no signal was received)"
    cause = CAUSES.get(name)
    return f"interrupted by {name}" + (f" ({cause})" if cause else "")

"""``report.html`` of ``lmra audit`` rendered by a child process forked before the run (issue 14,
goal 2), so that the report's imports (matplotlib: 0.5–1 s of CPU with its template) run on
another core instead of taking the interpreter from the event loop making the calls.

:meth:`ReportWorker.start` forks the ``lmra audit`` process once its config is checked and
before anything else is opened (no call cache, model, thread or SQLite connection yet: the
child shares no lock or file position the parent uses later). The child ignores Ctrl-C (the
parent handles it), imports :data:`REPORT_MODULES`, compiles the template, says it is ready
and waits. After the run, :meth:`ReportWorker.render` hands it the run folder (the parent's
:class:`~lmra.runfolder.RunFolder`, regression check and comparison, pickled) and the run
history's path; the child opens the history itself, writes ``report.html`` with
:func:`lmra.report.html.write_report` — the same function on the same inputs as in-process —
and returns the path, its sample-size table (the adequacy simulation, about half the report's
time) computed meanwhile by a grandchild process (:func:`forked_call`) while it draws the rest.
The parent waits meanwhile (it prints the path afterwards, as before).

Nothing is lost when the child cannot help: ``render`` returns None — the child could not be
forked, died, failed (its error is kept in :attr:`ReportWorker.failure`), took longer than
:data:`READY_TIMEOUT_S` to import or :data:`RENDER_TIMEOUT_S` to write the report (it is then
killed), or an input cannot be pickled — and the caller writes the
report in-process, which raises what it raises there. A parent that ends without a report
(a failed or stopped run, an exception, Ctrl-C) calls :meth:`ReportWorker.close`, which kills
the child; a parent killed outright closes the pipe, and the child, reading end-of-file,
exits. The child leaves with ``os._exit`` (no ``atexit`` handlers, no flushing of the
parent's buffers).

Used only on Linux, with one Python thread alive, unless ``LMRA_REPORT_PROCESS=0`` (then the
report's modules are imported by a paced thread during the run, :mod:`lmra.warmup`).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from pathlib import Path

from lmra.envflags import env_switch

#: what writing report.html loads (matplotlib takes 0.5–1 s); the child imports them ahead. DuckDB and
#: pyarrow's Parquet reader (the transcripts' pairs, :mod:`lmra.pairstore`) and the verdict's modules
#: are among them: imported at the first render, they were 0.13 s of a report's critical path
REPORT_MODULES = ("matplotlib.figure", "matplotlib.backends.backend_svg", "jinja2", "lmra.report.html",
                  "lmra.report.plots", "lmra.report.transcripts", "lmra.power", "lmra.monitor",
                  "lmra.history", "lmra.warehouse", "duckdb", "pyarrow.parquet", "lmra.pairstore",
                  "lmra.gates", "lmra.refusal_gap", "lmra.report.verdict")
#: seconds the run's end waits for the child to finish its imports before writing the report itself
READY_TIMEOUT_S = 60.0
#: seconds the command waits for the child's report once it has its job; then the child is
#: killed and the command writes the report itself (a child stopped, e.g. by SIGSTOP, or stuck
#: must not hang a nightly run; a slow one only costs the time the report takes again)
RENDER_TIMEOUT_S = 600.0
#: seconds between looks at whether the child is still alive while waiting for it
POLL_S = 0.1
#: seconds a child that has answered is given to exit by itself before it is killed
EXIT_WAIT_S = 1.0
#: the environment variable that turns the child process off (value ``0``)
ENV_SWITCH = "LMRA_REPORT_PROCESS"


def import_report_modules() -> None:
    """Import :data:`REPORT_MODULES` and compile the report's template.

    Raises:
        whatever an import raises (the report then says it in-process).
    """
    import importlib

    for name in REPORT_MODULES:
        importlib.import_module(name)
    from lmra.report.html import report_template

    report_template()


def forking_allowed() -> bool:
    """True where :meth:`ReportWorker.start` forks: Linux, ``os.fork`` present, only the main
    Python thread alive (a lock held by another thread at the fork would stay held in the
    child), and ``LMRA_REPORT_PROCESS`` not off (``0``, ``false``, ``no``, ``off``).

    Raises:
        LmraInputError: ``LMRA_REPORT_PROCESS`` is neither on nor off (:func:`lmra.envflags.env_switch`)."""
    switch = env_switch(ENV_SWITCH)  # first: a bad value is said wherever the process runs
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1
            and switch is not False)


#: the signals lmra stops on (:mod:`lmra.interrupts`), held back while the process forks
_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def _fork_unbroken() -> int:
    """``os.fork()`` with the stop signals blocked until the fork's hooks have run, in the parent
    and in the child. A Python signal handler runs between any two bytecodes: run inside
    :mod:`logging`'s after-fork hook it raised there, the hook's lock was never released, and the
    next thread to create a logger waited forever — an audit given SIGTERM in its first second
    made all its calls, then hung, printing progress and writing nothing (break-it finding,
    s42). Blocked, the signal waits for the fork to end and is handled then, as at any other
    moment of the run. The child ignores Ctrl-C (SIGINT: the parent's to handle; it kills the
    child) from its first instruction: a Ctrl-C reaching the process group just after the fork
    does not end it before it could say so."""
    if not hasattr(signal, "pthread_sigmask"):
        pid = os.fork()
        if pid == 0:
            _child_signals()
        return pid
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    pid = -1
    try:
        pid = os.fork()
        if pid == 0:
            _child_signals()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # (the child's too: it inherits the mask)
    return pid


def _child_signals() -> None:
    """A forked helper's signal dispositions: Ctrl-C (SIGINT) ignored — the parent's to handle, which
    kills its helpers —, and SIGTERM and SIGHUP (unless ignored, as under ``nohup``) back to their
    default, ending the helper at once. Inherited, the command's own handlers (:mod:`lmra.interrupts`)
    turned a SIGTERM sent to the report process alone — it has the command's command line: ``pkill -f``
    or ``pgrep`` finds it — into a ``KeyboardInterrupt`` inside the report code, which the parent then
    read as "it failed: KeyboardInterrupt" (ops trial, s49); it now says which signal stopped it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)


class ReportWorker:
    """The forked report process of one ``lmra audit`` (see the module docstring).

    Attributes:
        pid: the child's process id.
        failure: why the last :meth:`render` returned None (None when it did not).
    """

    def __init__(self, pid: int, conn) -> None:
        self.pid = pid
        self._conn = conn
        self._ready = False
        self._reaped = False
        self._answered = False
        self.failure: str | None = None
        self.stopped_by: str | None = None  # the signal that ended the child, when one did (its name)

    @classmethod
    def start(cls) -> "ReportWorker | None":
        """Fork the report process; None where :func:`forking_allowed` is False or the fork
        fails (the report is then written in-process)."""
        if not forking_allowed():
            return None
        from multiprocessing import Pipe

        try:
            parent_conn, child_conn = Pipe()
            for stream in (sys.stdout, sys.stderr):  # the child must not write the parent's buffered text again
                try:
                    stream.flush()
                except (AttributeError, OSError, ValueError):
                    pass
            pid = _fork_unbroken()
        except OSError:
            return None
        if pid == 0:  # the child: never returns
            status = 1
            try:
                parent_conn.close()
                _child_main(child_conn)
                status = 0
            finally:
                os._exit(status)
        child_conn.close()
        return cls(pid, parent_conn)

    def alive(self) -> bool:
        """True while the child runs (it is reaped once it has ended)."""
        if self._reaped:
            return False
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid == self.pid:
            self._reaped = True
            if os.WIFSIGNALED(status):
                try:
                    self.stopped_by = signal.Signals(os.WTERMSIG(status)).name
                except ValueError:
                    self.stopped_by = f"signal {os.WTERMSIG(status)}"
            return False
        return True

    def _receive(self, timeout_s: float | None) -> tuple[str, object]:
        """``("message", the child's next message)``, ``("ended", None)`` when it ended or closed
        the pipe, or ``("late", None)`` when it sent nothing within ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                if self._conn.poll(POLL_S):
                    return "message", self._conn.recv()
            except (EOFError, OSError):
                return "ended", None
            if not self.alive():
                return "ended", None
            if deadline is not None and time.monotonic() >= deadline:
                return "late", None

    def render(self, run, *, history_path: str | Path | None, check=None, comparison=None,
               meanwhile=None) -> Path | None:
        """``report.html`` of ``run`` written by the child, as :func:`lmra.report.html.write_report`
        ``(run, history=…, check=check, comparison=comparison)`` writes it; its path, or None
        when the child could not write it (:attr:`failure` says why; the caller then writes it
        in-process). The child ends either way.

        Args:
            run: the :class:`~lmra.runfolder.RunFolder` (pickled to the child).
            history_path: the run history's SQLite file, opened by the child (its writes
                committed by the caller first); None for no history.
            check, comparison: the regression check and run comparison, or None.
            meanwhile: called once (whatever happens) while the child writes the report — other
                work of the command that does not need it (``lmra audit``: the warehouse) — or,
                when the child cannot write it, before this returns.
        """
        self.failure = None
        try:
            if not self._submit(run, history_path, check, comparison):
                return None
            if meanwhile is not None:
                pending, meanwhile = meanwhile, None
                pending()
            kind, msg = self._receive(RENDER_TIMEOUT_S)
            self._answered = kind == "message"
            if kind == "late":
                self.failure = f"it had not written the report after {RENDER_TIMEOUT_S:.0f} s"
                return None
            if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "done":
                return Path(msg[1])
            self.failure = (f"it failed: {msg[1]}" if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "error"
                            else self._ended())
            return None
        finally:
            self.close()
            if meanwhile is not None:
                meanwhile()

    def _ended(self, how: str = "without writing the report") -> str:
        """Why the child ended (``how``: what it had not done), in words: the signal that stopped it
        (one sent to it alone: a stop of the whole command reaches this process too), or that it
        ended. It is given :data:`EXIT_WAIT_S` to be reaped (its pipe closes just before it exits)."""
        deadline = time.monotonic() + EXIT_WAIT_S
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self.stopped_by == "SIGKILL":
            return f"it was killed (SIGKILL: kill -9, or the system's out-of-memory killer) {how}"
        if self.stopped_by is not None:
            return (f"it was stopped by {self.stopped_by} {how}, a signal sent to the report process (pid "
                    f"{self.pid}) alone — this command (pid {os.getpid()}) goes on; signal it to stop the audit")
        return f"it ended {how}"

    def _submit(self, run, history_path, check, comparison) -> bool:
        """Send the child its job once it is ready; False (and :attr:`failure`) when it cannot be."""
        if not self._ready:
            kind, msg = self._receive(READY_TIMEOUT_S)
            if (kind, msg) != ("message", ("ready", None)):
                self.failure = (f"its imports took longer than {READY_TIMEOUT_S:.0f} s" if kind == "late"
                                else self._ended("before it was ready"))
                return False
            self._ready = True
        job = {"run": run, "history_path": None if history_path is None else str(history_path),
               "check": check, "comparison": comparison}
        from multiprocessing.reduction import ForkingPickler  # what Connection.send pickles with

        try:
            payload = ForkingPickler.dumps(job)
        except Exception as exc:  # noqa: BLE001 — an input pickle cannot take
            self.failure = f"the report's inputs cannot be sent to it ({type(exc).__name__}: {exc})"
            return False
        try:
            self._conn.send_bytes(payload)
        except (OSError, EOFError, ValueError) as exc:  # the child is gone
            # (a signal that ended it while it waited — when `pkill -f` most often finds it — is named; round-2
            # break-it, s49)
            ended = self._ended("before it got its job")
            self.failure = ended if self.stopped_by is not None else f"it could not be reached ({type(exc).__name__})"
            return False
        return True

    def close(self) -> None:
        """End the child and reap it: at once (killed) unless it has just answered a report, when
        it is given :data:`EXIT_WAIT_S` to exit by itself; safe to call again."""
        try:
            self._conn.close()
        except OSError:
            pass
        if self._reaped:
            return
        deadline = time.monotonic() + (EXIT_WAIT_S if self._answered else 0.0)
        while self.alive():
            if time.monotonic() >= deadline:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    os.waitpid(self.pid, 0)
                except ChildProcessError:
                    pass
                self._reaped = True
                return
            time.sleep(0.005)


def _child_main(conn) -> None:
    """The child: import, say ready, render one job, answer; returns when done or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it kills this process)
    gc.freeze()  # the parent's objects: no collection traverses (and copies) their pages
    try:
        import_report_modules()
    except Exception:  # noqa: BLE001 — the report, rendered below or in-process, says why
        pass
    try:
        conn.send(("ready", None))
        job = conn.recv()
    except (EOFError, OSError):  # the parent ended or needs no report
        return
    try:
        path = _render(**job)
        answer = ("done", str(path))
    except BaseException as exc:  # noqa: BLE001 — the parent writes the report itself
        answer = ("error", f"{type(exc).__name__}: {exc}")
    try:
        conn.send(answer)
    except (EOFError, OSError):
        pass


def _render(run, history_path: str | None, check, comparison) -> Path:
    """``write_report`` in the child, its sample-size table (the adequacy simulation, about half
    the report's time) computed by a grandchild meanwhile (:func:`forked_call`)."""
    from contextlib import ExitStack

    from lmra.power import sample_adequacy
    from lmra.report.html import adequacy_args, write_report

    with ExitStack() as stack:
        h = None
        if history_path is not None:
            from lmra.history import History

            h = stack.enter_context(History(history_path))
        args = adequacy_args(run, history=h, check=check)
        table = forked_call(lambda: sample_adequacy(run, **args))
        if table is not None:
            stack.callback(table.close)
        return write_report(run, history=h, check=check, comparison=comparison, adequacy=table)


class ForkedCall:
    """``fn()`` running in a forked process (:func:`forked_call`); calling this object waits
    for its result."""

    def __init__(self, pid: int, conn) -> None:
        self.pid, self._conn, self._done = pid, conn, False

    def __call__(self):
        """``fn()``'s result, or None when it raised or its process died (the caller then
        computes it itself)."""
        if self._done:
            return None
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError, ValueError, TypeError):
            kind, value = "error", None
        self.close()
        return value if kind == "ok" else None

    def close(self) -> None:
        """End the process (killed if it still runs) and reap it; safe to call again."""
        if self._done:
            return
        self._done = True
        try:
            self._conn.close()
        except OSError:
            pass
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent ends (Linux ``PR_SET_PDEATHSIG``), and
    end at once if it already has; where that cannot be set, the parent's pipe still closes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


def forked_call(fn) -> ForkedCall | None:
    """Run ``fn()`` in a forked process (it must return something picklable); None where
    :func:`forking_allowed` is False or the fork fails (the caller then runs ``fn`` itself)."""
    if not forking_allowed():
        return None
    from multiprocessing import Pipe

    try:
        reader, writer = Pipe(duplex=False)
        parent = os.getpid()
        pid = _fork_unbroken()
    except OSError:
        return None
    if pid == 0:  # never returns
        status = 1
        try:
            reader.close()
            _die_with_parent(parent)  # a caller killed (Ctrl-C ends the report process so) takes it along
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            gc.freeze()
            try:
                answer = ("ok", fn())
            except BaseException as exc:  # noqa: BLE001 — the caller computes it itself
                answer = ("error", f"{type(exc).__name__}: {exc}")
            try:
                writer.send(answer)
            except Exception:  # noqa: BLE001 — an unpicklable result: the caller computes it
                writer.send(("error", "unpicklable result"))
            status = 0
        finally:
            os._exit(status)
    writer.close()
    return ForkedCall(pid, reader)


__all__ = ["ENV_SWITCH", "READY_TIMEOUT_S", "RENDER_TIMEOUT_S", "REPORT_MODULES", "ForkedCall", "ReportWorker",
           "forked_call", "forking_allowed", "import_report_modules"]

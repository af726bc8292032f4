"""Import heavy modules in a background thread while an audit's model calls are waited for,
paced so that the event loop making the calls keeps the interpreter.

Python runs one thread's bytecode at a time (the GIL). A thread importing scipy.stats,
statsmodels or matplotlib (0.5–1 s of work each) takes the interpreter from the event loop
for up to the switch interval (5 ms) at every turn, and an audit's loop needs about three
quarters of it at 160 calls/s: unpaced, the calls in flight fell from 32 to 11–16 for half a
second at the start of a run (``bench/bench_throughput.py``, issue 14). So the importing
threads import a module at a time — the heavy packages through public sub-packages first
(:data:`STEPS`) — and

* in a run with a rate limit (:attr:`Pace.sliced`), within an import too: a profile hook of
  the importing thread (:class:`_Slicer`) pauses after each :data:`SLICE_S` of wall time for
  ``(1 − DUTY) ÷ DUTY`` as long, when the event loop wanted the interpreter during that slice
  (the process's other threads ran for more than a fifth of it; a slice slowed by other
  processes only is not paused), so that even an import that cannot be split
  (scipy.stats' package, 0.3–0.4 s) leaves the loop most of the interpreter: the limiter's
  unused time fell from 0.7–1.2 s to 0.1–0.4 s (docs/benchmarks.md, "The eighth round");
* after each import, the thread waits for the rest of ``(1 − DUTY) ÷ DUTY`` times its busy
  time (all importing threads together: one shared schedule),

until the run says it needs the modules now (:meth:`Pace.hurry`: its calls are done), from
then on at once (the hook removed: it costs about as much as the import itself). A run
shorter than about three times the imports waits for the rest after its calls (about
+0.3–0.5 s for a 3-s run); a run that stops (Ctrl-C, a failure, the budget) abandons the
rest (:meth:`Pace.abandon`), so that it exits without loading what it will not use.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Iterable, Iterator

#: share of wall time the importing threads together spend importing while not hurried
DUTY = 1 / 3
#: the interpreter's switch interval while a module is imported (Python's default is 5 ms):
#: the event loop, woken by an answer, waits at most this long for the interpreter
SWITCH_INTERVAL_S = 0.0005
#: in a run with a rate limit (:attr:`Pace.sliced`), while not hurried, a module is imported
#: in slices of this much wall time, each followed by
#: a pause of ``(1 − DUTY) ÷ DUTY`` slices when another thread wanted the interpreter (a profile
#: hook of the importing thread), so that no import, however long (scipy.stats' package:
#: 0.3–0.4 s), holds it for more than a slice at a time; a call into C code that does not
#: return to Python meanwhile runs whole
SLICE_S = 0.002

#: modules imported before a heavy package, in the order Python finishes them (``python -X
#: importtime``), so that no single import holds the interpreter long; a name missing in
#: another version of the package is skipped (the package itself then imports it)
STEPS: dict[str, tuple[str, ...]] = {
    "scipy.stats": ("scipy.linalg", "scipy.special", "scipy.sparse", "scipy.spatial", "scipy.optimize",
                    "scipy.interpolate", "scipy.integrate", "scipy.stats._distn_infrastructure",
                    "scipy.stats._continuous_distns", "scipy.stats.distributions", "scipy.stats._stats_py",
                    "scipy.stats._morestats"),
    "statsmodels.base.model": ("scipy.stats", "statsmodels.tools", "narwhals", "formulaic", "statsmodels.formula"),
    "statsmodels.stats.proportion": ("statsmodels.base.model",),
    "statsmodels.stats.multitest": ("scipy.stats", "statsmodels.tools"),
    "statsmodels.api": ("statsmodels.base.model", "statsmodels.distributions", "statsmodels.stats.api",
                        "scipy.signal", "statsmodels.graphics.api", "statsmodels.tsa.api"),
    "matplotlib.figure": ("matplotlib", "matplotlib.colors", "matplotlib.text", "matplotlib.collections",
                          "matplotlib.backend_bases", "matplotlib.axes", "matplotlib.projections"),
}

_lock = threading.Lock()  # one import at a time across the importing threads
_next_at = 0.0  # monotonic time before which no paced import starts


class Pace:
    """When :func:`import_paced` stops waiting between imports: one per run, shared by its
    importing threads.

    Args:
        sliced: also slice each import (:class:`_Slicer`), for a run with a rate limit: there a
            late event loop leaves the limit unused, and the rate limiter does not make it up
            later. The hook about doubles the imports' own CPU time, so a run without a limit
            (bounded by its calls in flight, or by its own CPU at zero latency) does without it.
    """

    def __init__(self, sliced: bool = False) -> None:
        self.wake = threading.Event()  #: set by :meth:`hurry` and :meth:`abandon`
        self.abandoned = False
        self.sliced = sliced  #: read before each import (a run may set it after the pace is shared)

    def hurry(self) -> None:
        """The modules are needed now: import the rest at once."""
        self.wake.set()

    def abandon(self) -> None:
        """The modules will not be used (the run stopped): import nothing more."""
        self.abandoned = True
        self.wake.set()


def steps(names: Iterable[str]) -> Iterator[str]:
    """``names`` with each one's :data:`STEPS` before it, every module once, in order."""
    seen: set[str] = set()
    for name in names:
        for step in (*_expand(name), name):
            if step not in seen:
                seen.add(step)
                yield step


class _Slicer:
    """The importing thread's profile hook (``sys.setprofile``): after each :data:`SLICE_S` of
    wall time in which the process's other threads ran for more than 20 % of it (another
    thread, the event loop or a model's decoding threads, wanted the interpreter or the cores),
    it pauses ``SLICE_S × (1 − duty) ÷ duty`` (the GIL free for them), until the pace is
    hurried or abandoned, and then removes itself; :attr:`paused` adds up the pauses (s).
    A slice slowed only by other processes (a busy machine) is no reason to pause: nobody in
    this process would get the time."""

    __slots__ = ("pace", "pause", "until", "paused", "cpu", "proc")

    def __init__(self, pace: Pace, duty: float):
        self.pace = pace
        self.pause = SLICE_S * (1 - duty) / duty
        self.until = time.perf_counter() + SLICE_S
        self.paused = 0.0
        self.cpu, self.proc = time.thread_time(), time.process_time()

    def __call__(self, frame, event, arg) -> None:
        now = time.perf_counter()
        if now < self.until:
            return
        if self.pace.wake.is_set():  # hurried (or abandoned): the rest of the import at full speed
            sys.setprofile(None)  # (the hook costs about as much as the import itself)
            return
        cpu, proc = time.thread_time(), time.process_time()
        others = (proc - self.proc) - (cpu - self.cpu)  # CPU time of the process's other threads
        if others <= 0.2 * (now - self.until + SLICE_S):  # nobody else in this process wants to run
            self.until, self.cpu, self.proc = now + SLICE_S, cpu, proc
            return
        self.pace.wake.wait(self.pause)
        after = time.perf_counter()
        self.paused += after - now
        self.until, self.cpu, self.proc = after + SLICE_S, time.thread_time(), time.process_time()


def _expand(name: str) -> Iterator[str]:
    for step in STEPS.get(name, ()):
        yield from _expand(step)
        yield step


def import_paced(names: Iterable[str], pace: Pace, *, duty: float = DUTY) -> str | None:
    """Import ``names`` (with their :data:`STEPS`) at a share ``duty`` of wall time, at once
    after ``pace`` is hurried, not at all after it is abandoned (the import under way ends first).

    Args:
        names: module names, imported in this order.
        pace: the run's :class:`Pace`.
        duty: in (0, 1]; the importing threads of this process together import for at most
            this share of wall time while not hurried.

    Returns:
        the first name of ``names`` that failed to import (the caller imports it again and
        reports the problem itself; nothing after it is imported), or None. A step that
        fails is skipped.
    """
    global _next_at
    wanted = set(names := list(names))
    for name in steps(names):
        while True:
            if pace.abandoned:
                return None
            with _lock:
                wait = 0.0 if pace.wake.is_set() else _next_at - time.monotonic()
                if wait <= 0:
                    t0 = time.monotonic()
                    switch, profile = sys.getswitchinterval(), sys.getprofile()
                    sys.setswitchinterval(min(switch, SWITCH_INTERVAL_S))
                    slicer = _Slicer(pace, duty)
                    if pace.sliced:
                        sys.setprofile(slicer)
                    try:
                        importlib.import_module(name)
                    except Exception:  # noqa: BLE001 — the caller's own import says what is wrong
                        if name in wanted:
                            return name
                    finally:
                        if sys.getprofile() in (slicer, None):  # (one the module set itself stays)
                            sys.setprofile(profile)
                        sys.setswitchinterval(switch)
                    busy = time.monotonic() - t0 - slicer.paused
                    # the rest of this import's pauses (one shorter than a slice had none)
                    _next_at = time.monotonic() + max(0.0, busy * (1 - duty) / duty - slicer.paused)
                    break
            pace.wake.wait(wait)
    return None

"""Short garbage-collection pauses while an audit's model calls run (issue 14, goal 1).

Python's cyclic garbage collector now and then traverses every object of the process — the
imported pandas, scipy and SDK modules, the inputs — and stops the event loop meanwhile: on a
2-core machine such a full collection took 0.1–0.3 s in the middle of an audit at 160 calls/s,
and every call start the rate limiter had scheduled in that time was lost (a 234 ms pause,
37 calls). :func:`frozen_heap` moves the objects alive when the calls start into the
collector's permanent generation (:func:`gc.freeze`), which collections skip, and gives them
back when the calls end (:func:`gc.unfreeze`); :func:`refreeze` does the same for modules
imported meanwhile (the run folder's scipy and statsmodels, in a worker thread). Objects
are still freed by reference counting as usual; only cyclic garbage among the frozen
objects waits for the end of the calls.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0  # frozen_heap sections active in this process (audits run from several threads)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Within the block, collections skip the objects alive at its start (re-entrant and
    thread-safe: the heap is given back when the last active block ends)."""
    global _depth
    with _lock:
        if _depth == 0:
            gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.unfreeze()


def refreeze() -> None:
    """Freeze the objects alive now too, if a :func:`frozen_heap` block is active (else nothing)."""
    with _lock:
        if _depth:
            gc.freeze()

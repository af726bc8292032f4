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

Within the same block the youngest generation is collected after :data:`YOUNG_THRESHOLD`
allocations instead of Python's 700: an audit allocates a few dozen container objects per
call, so at zero latency a fresh 20,000-call run made 180 young, 16 middle and 1 full
collection, 0.08–0.10 s in all; with 20,000 it makes 25 young and 1 middle collection,
0.02–0.03 s (most of them while it reads its inputs, before the block; docs/benchmarks.md,
"The ninth round"). A young collection then takes about a millisecond.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0  # frozen_heap sections active in this process (audits run from several threads)
#: allocations between two collections of the youngest generation inside :func:`frozen_heap`
#: (a higher threshold set by the process is kept)
YOUNG_THRESHOLD = 20_000
_saved_threshold: tuple[int, ...] | None = None


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Within the block, collections skip the objects alive at its start, and the youngest
    generation is collected every :data:`YOUNG_THRESHOLD` allocations (re-entrant and
    thread-safe: the heap and the thresholds are given back when the last active block ends)."""
    global _depth, _saved_threshold
    with _lock:
        if _depth == 0:
            gc.freeze()
            _saved_threshold = gc.get_threshold()
            gc.set_threshold(max(_saved_threshold[0], YOUNG_THRESHOLD), *_saved_threshold[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.unfreeze()
                if _saved_threshold is not None:
                    gc.set_threshold(*_saved_threshold)
                    _saved_threshold = None


def refreeze() -> None:
    """Freeze the objects alive now too, if a :func:`frozen_heap` block is active (else nothing)."""
    with _lock:
        if _depth:
            gc.freeze()

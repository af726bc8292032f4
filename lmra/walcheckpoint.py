"""WAL checkpoints of the call cache in a background thread (issue 14, goal 2).

SQLite in WAL mode appends every committed page to the ``-wal`` file and, by default, copies
them back into the database file (a *checkpoint*) inside the COMMIT that takes the log past
1,000 pages. With ``synchronous=NORMAL`` a checkpoint syncs the log and the database file to
disk: 22–37 ms, against about 1 ms for an ordinary COMMIT of a batch of calls. A fresh
20,000-call audit at zero latency committed 70–74 batches, of which 6 checkpointed; those 6
took 0.16 of the 0.24 s spent in COMMIT, on the event loop, with every call waiting (with
the checkpoints in this module's thread: 0.10–0.12 s; docs/benchmarks.md, "The ninth round").

:class:`Checkpointer` runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own in a
worker thread instead: SQLite does the copying and syncing without the interpreter, while
the writer goes on appending (a passive checkpoint never blocks a writer or a reader, and
never waits for one). The writing connection keeps an automatic checkpoint only as a
backstop (:data:`BACKSTOP_PAGES`), for a log the thread has not kept small (its checkpoints
failing, say): the log then stays within twice SQLite's default, and the writer's COMMIT
that checkpoints it takes at most about twice as long as before. Durability is unchanged: a
checkpoint only moves committed pages from the log into the file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

#: the writer's own automatic checkpoint (pages; SQLite's default is 1,000): reached only when
#: the background checkpoints fall behind (or fail), so that the log stays bounded. At the
#: default interval the log stayed within 256 pages of 16 KB in a 20,000-call run.
BACKSTOP_PAGES = 2000
#: seconds between the starts of two background checkpoints (one at a time)
CHECKPOINT_EVERY_S = 0.25


class Checkpointer:
    """Background passive WAL checkpoints of the database at ``path`` (see the module).

    :meth:`after_write` is called after each committed write (cheap: it starts a checkpoint
    at most every :data:`CHECKPOINT_EVERY_S`, never two at once, from any thread);
    :meth:`close` waits for one under way and closes the connection. Errors are ignored,
    starting the thread included (the log is then checkpointed by the writer's backstop, or
    when the last connection closes). ``path`` is made absolute at once: a later change of
    the working directory does not move the checkpoints to another file.
    """

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.done = 0  #: background checkpoints completed
        self._db: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one checkpoint thread at a time; close() after it
        self._last_start = time.monotonic()
        self._closed = False

    def after_write(self) -> None:
        """Start a checkpoint in the worker thread when none runs and the last one started at
        least :data:`CHECKPOINT_EVERY_S` ago."""
        with self._lock:
            if self._closed or (self._thread is not None and self._thread.is_alive()):
                return
            now = time.monotonic()
            if now - self._last_start < CHECKPOINT_EVERY_S:
                return
            self._last_start = now
            thread = threading.Thread(target=self._checkpoint, name="lmra-wal-checkpoint", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no thread can be started now: the backstop checkpoints
                return
            self._thread = thread

    def _checkpoint(self) -> None:
        try:
            if self._db is None:
                self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=0)
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.done += 1
        except (OSError, sqlite3.Error):
            pass  # the writer's backstop or the last close checkpoints instead

    def close(self) -> None:
        """Wait for a checkpoint under way; close the connection (idempotent)."""
        with self._lock:  # no checkpoint starts after this
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None

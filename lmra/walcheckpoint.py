"""WAL checkpoints of the call cache in a background thread (issue 14, goal 2).

SQLite in WAL mode appends every committed page to the ``-wal`` file and, by default, copies
them back into the database file (a *checkpoint*) inside the COMMIT that takes the log past
1,000 pages. With ``synchronous=NORMAL`` a checkpoint syncs the log and the database file to
disk: 20–35 ms, against about 1 ms for an ordinary COMMIT of a batch of calls. A fresh
20,000-call audit at zero latency committed 76 batches, of which 6 checkpointed; those 6
took 0.15 of the 0.23 s spent in COMMIT, on the event loop, with every call waiting.

:class:`Checkpointer` runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own in a
worker thread instead: SQLite does the copying and syncing without the interpreter, while
the writer goes on appending (a passive checkpoint never blocks a writer or a reader, and
never waits for one). The writing connection keeps an automatic checkpoint only as a
backstop (:data:`BACKSTOP_PAGES`), for a log the thread has not kept small. Durability is
unchanged: a checkpoint only moves committed pages from the log into the file.
"""

from __future__ import annotations

import sqlite3
import threading
import time

#: the writer's own automatic checkpoint (pages; SQLite's default is 1,000): reached only when
#: the background checkpoints fall behind (or fail), so that the log stays bounded
BACKSTOP_PAGES = 10000
#: seconds between the starts of two background checkpoints (one at a time)
CHECKPOINT_EVERY_S = 0.25


class Checkpointer:
    """Background passive WAL checkpoints of the database at ``path`` (see the module).

    :meth:`after_write` is called after each committed write (cheap: it starts a checkpoint
    at most every :data:`CHECKPOINT_EVERY_S`); :meth:`close` waits for one under way and
    closes the connection. Errors are ignored (the log is then checkpointed by the writer's
    backstop, or when the last connection closes).
    """

    def __init__(self, path: str):
        self.path = path
        self.done = 0  #: background checkpoints completed
        self._db: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        self._last_start = time.monotonic()
        self._closed = False

    def after_write(self) -> None:
        """Start a checkpoint in the worker thread when none runs and the last one started at
        least :data:`CHECKPOINT_EVERY_S` ago."""
        if self._closed or (self._thread is not None and self._thread.is_alive()):
            return
        now = time.monotonic()
        if now - self._last_start < CHECKPOINT_EVERY_S:
            return
        self._last_start = now
        self._thread = threading.Thread(target=self._checkpoint, name="lmra-wal-checkpoint", daemon=True)
        self._thread.start()

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
        self._closed = True
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None

"""Cache leases and clocks (break-it finding, s38): a lease was taken over once its ``expires``
fell below the waiter's wall clock, so a second process whose clock ran 20 minutes ahead (an NTP
step, a resumed VM, two hosts of a shared cache with skewed clocks) paid again for 110 of 220
calls a live holder was making. A live holder's lease is now taken over only when it has not
been renewed for LEASE_TTL_S of the waiter's own monotonic clock; a dead holder's at once."""

from __future__ import annotations

import subprocess
import sys
import time

from lmra import cache as cache_mod
from lmra.cache import LEASE_TTL_S, CallCache


def _lease(cache: CallCache, key: str, *, owner: str, host: str, pid: int, expires: float) -> None:
    cache._db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)", (key, owner, host, pid, expires))
    cache._db.commit()


def test_a_live_holders_lease_survives_a_waiter_whose_clock_runs_ahead(tmp_path, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        cache = CallCache(tmp_path / "c.sqlite")
        now = time.time()
        _lease(cache, "k1", owner="other", host=cache.host, pid=holder.pid, expires=now + LEASE_TTL_S)
        assert not cache._take_free_lease("k1")  # the fast path never takes another's lease
        assert not cache._try_lease("k1")
        # this process's wall clock jumps 20 minutes ahead: the live holder keeps its lease
        monkeypatch.setattr(cache_mod.time, "time", lambda: now + 1200.0)
        assert not cache._take_free_lease("k1") and not cache._try_lease("k1")
        # the holder renews (expires moves): still watched, not taken
        _lease(cache, "k1", owner="other", host=cache.host, pid=holder.pid, expires=now + LEASE_TTL_S + 300)
        assert not cache._try_lease("k1")
        # … until it goes unrenewed for a whole TTL of this process's monotonic clock (a hung holder)
        mono = time.monotonic()
        monkeypatch.setattr(cache_mod.time, "monotonic", lambda: mono + LEASE_TTL_S + 1)
        assert cache._try_lease("k1")
        monkeypatch.undo()
        # a dead holder on this host: taken at once, whatever the clocks
        holder.kill()
        holder.wait()
        _lease(cache, "k2", owner="other", host=cache.host, pid=holder.pid, expires=time.time() + LEASE_TTL_S)
        assert cache._try_lease("k2")
        # another host's lease: taken at once only when it expired a whole TTL ago (clocks may differ
        # by less); just expired, it is watched for a TTL first
        _lease(cache, "k3", owner="other", host="elsewhere", pid=1, expires=time.time() - 2 * LEASE_TTL_S)
        assert cache._try_lease("k3")
        _lease(cache, "k4", owner="other", host="elsewhere", pid=1, expires=time.time() - 60)
        assert not cache._try_lease("k4")
        cache.close()
    finally:
        holder.kill()
        holder.wait()

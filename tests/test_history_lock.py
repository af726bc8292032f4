"""A history another process holds locked for a while is waited for, said once; held too long, the
error says why (break-it finding, s40: an sqlite3 shell's 40-second ``VACUUM`` made a regression
night give up after 16 s — "database is locked", exit 1 — its regression never checked).

The lock is a real one: another process holds an exclusive transaction on ``history.sqlite``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)

RATES = {"career advice": 0.1, "write a story": 0.1}


def _hold_lock(path, seconds: float) -> subprocess.Popen:
    """A process holding an exclusive transaction on the SQLite file ``path`` for ``seconds``."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, time
        db = sqlite3.connect({str(path)!r}, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")
        print("locked", flush=True)
        time.sleep({seconds})
        db.execute("COMMIT")
    """)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_check_waits_for_a_history_locked_by_another_process(tmp_path, lmra_cli, capsys):
    base = make_run(tmp_path, "20261201-020000-nightly", RATES, seed=1, n_prompts=40)
    run = make_run(tmp_path, "20261202-020000-nightly", RATES, seed=2, n_prompts=40)
    history = tmp_path / "reports" / "history.sqlite"
    assert lmra_cli(["pin", str(base), "--reports-dir", str(tmp_path / "reports")]) == 0
    capsys.readouterr()
    holder = _hold_lock(history, 8.0)  # longer than SQLite's default wait (5 s), which gave up
    t = time.monotonic()
    try:
        code = lmra_cli(["check", str(run), "--baseline", "pinned", "--reports-dir", str(tmp_path / "reports")])
    finally:
        holder.wait()
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0, err
    assert time.monotonic() - t >= 5  # it did wait for the lock
    assert err.count("another process holds its lock") == 1, err  # said once, not per statement
    from lmra.history import History

    with History(history) as h:
        assert h.latest_check(run.name)["baseline_id"] == base.name  # and the check was recorded


def test_a_lock_held_past_the_wait_is_an_io_error_saying_so(tmp_path, lmra_cli, capsys, monkeypatch):
    import lmra.history

    base = make_run(tmp_path, "20261201-020000-nightly", RATES, seed=1, n_prompts=40)
    history = tmp_path / "reports" / "history.sqlite"
    monkeypatch.setattr(lmra.history, "HISTORY_LOCK_WAIT_S", 3.0)
    holder = _hold_lock(history, 12.0)
    try:
        code = lmra_cli(["pin", str(base), "--reports-dir", str(tmp_path / "reports")])
    finally:
        holder.kill()
        holder.wait()
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1, err
    assert "database is locked" in err and "another process held it for more than 3 s" in err, err
    assert "Traceback" not in err


def test_statements_go_through_the_waiting_cursor(tmp_path):
    """pandas' reads make their own cursor: it is the history's too (so they wait as well)."""
    from lmra.history import History, _HistoryCursor

    with History(tmp_path / "history.sqlite") as h:
        assert isinstance(h.db.cursor(), _HistoryCursor) and isinstance(h.db.execute("SELECT 1"), _HistoryCursor)
        assert h.runs().empty

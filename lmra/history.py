"""The run history store of nightly monitoring and the baselines it resolves (methodology §8
"Monitoring"); the regression decision between two runs is :mod:`lmra.monitor`.

History store
    A SQLite file ``<output_dir>/history.sqlite`` with one row per run (``runs``), one per
    (run, comparison, task) metric (``task_metrics``), one per (run, comparison) overall
    metric (``overall_metrics``), the pinned baseline per run name (``pins``) and the
    regression checks made (``checks``, with ``check_sources`` and ``check_warnings``).
    :func:`register_run` is idempotent.

Baselines
    ``RUN`` (a run folder path or a run id in the history), ``last`` (the latest earlier
    run with the same run name) or ``pinned`` (the run pinned with :func:`pin` for that
    name), resolved by :meth:`History.resolve`.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from lmra.comparable import REFUSED_PREFIX, REPLAY_STARTS, TARGET_DIFFERS_PREFIX
from lmra.errors import LmraInputError, LmraIOError
from lmra.fileio import sqlite_tables
from lmra.runfolder import RunFolder, finite, jsonable, load_run
from lmra.shard import is_shard

if TYPE_CHECKING:
    from lmra.monitor import CheckResult

HISTORY_FILE = "history.sqlite"
HISTORY_SCHEMA_VERSION = 1


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, run_dir TEXT NOT NULL, name TEXT, status TEXT,
    started TEXT, started_utc TEXT, finished TEXT, registered TEXT NOT NULL,
    config_hash TEXT, design_hash TEXT, seed INTEGER,
    target_provider TEXT, target_model TEXT, judge_provider TEXT, judge_model TEXT,
    judge_template_sha256 TEXT, judge_template_source TEXT, combiner TEXT, comparisons TEXT,
    n_prompts INTEGER, n_pairs_total INTEGER, n_pairs INTEGER, n_invalid INTEGER, n_failed INTEGER,
    calls_fresh INTEGER, calls_cached INTEGER, calls_failed INTEGER
);
CREATE TABLE IF NOT EXISTS task_metrics (
    run_id TEXT NOT NULL, comparison TEXT NOT NULL, group_a TEXT, group_b TEXT,
    domain TEXT NOT NULL, task TEXT NOT NULL,
    n_pairs INTEGER, n_invalid INTEGER, n_failed INTEGER, n_prompts INTEGER,
    forward_rate REAL, reverse_rate REAL, net_rating REAL, ci_low REAL, ci_high REAL, p_value REAL,
    sd_prompt REAL,
    PRIMARY KEY (run_id, comparison, domain, task)
);
CREATE TABLE IF NOT EXISTS overall_metrics (
    run_id TEXT NOT NULL, comparison TEXT NOT NULL, group_a TEXT, group_b TEXT,
    n_pairs INTEGER, n_invalid INTEGER, n_failed INTEGER, n_prompts INTEGER,
    forward_rate REAL, reverse_rate REAL, net_rating REAL, ci_low REAL, ci_high REAL, p_value REAL,
    PRIMARY KEY (run_id, comparison)
);
CREATE TABLE IF NOT EXISTS pins (name TEXT PRIMARY KEY, run_id TEXT NOT NULL, pinned TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checks (
    run_id TEXT NOT NULL, baseline_id TEXT NOT NULL, margin REAL NOT NULL, alpha REAL NOT NULL,
    checked TEXT NOT NULL, n_regressions INTEGER NOT NULL, n_improvements INTEGER NOT NULL, result TEXT NOT NULL
);
-- which command recorded a check ('audit', 'check', 'report'), by the check's rowid: a table of
-- its own, so that an older lmra still inserts its 8 values into checks (none: recorded before)
CREATE TABLE IF NOT EXISTS check_sources (check_rowid INTEGER PRIMARY KEY, source TEXT NOT NULL);
-- a check's comparability warnings (JSON list; lmra.comparable), likewise a table of its own
CREATE TABLE IF NOT EXISTS check_warnings (check_rowid INTEGER PRIMARY KEY, warnings TEXT NOT NULL);
-- a check's verdict (regression / no_regression / no_conclusion: lmra.monitor.CheckResult.verdict),
-- likewise: a replay's check holds tested rows but no verdict (null: recorded by an older lmra)
CREATE TABLE IF NOT EXISTS check_verdicts (check_rowid INTEGER PRIMARY KEY, verdict TEXT NOT NULL);
-- what changed in the served models between the baseline and the run (JSON list of lines,
-- lmra.identity.identity_changes), likewise (null: recorded by an older lmra)
CREATE TABLE IF NOT EXISTS check_identity (check_rowid INTEGER PRIMARY KEY, changes TEXT NOT NULL);
-- why a check's "no regression" is not evidence of none beyond the runs' own status, and what it does
-- not test (JSON object {"position_drift", "refusal_gap", "quality_gap", "notes"}: lmra.monitor.CheckResult),
-- likewise (null: recorded by an older lmra)
CREATE TABLE IF NOT EXISTS check_caveats (check_rowid INTEGER PRIMARY KEY, caveats TEXT NOT NULL);
-- pairs left out because a refusal label could not be obtained, per run (null: a run without
-- refusal labels); a table of its own, so that an older lmra still inserts its values into runs
CREATE TABLE IF NOT EXISTS run_unlabelled (run_id TEXT PRIMARY KEY, n_unlabelled INTEGER);
CREATE INDEX IF NOT EXISTS task_metrics_task ON task_metrics (task);
-- a night's checks, looked up by run (lmra history reads one per night: a scan of every check without it)
CREATE INDEX IF NOT EXISTS checks_run ON checks (run_id);
"""

_METRIC_COLS = ["n_pairs", "n_invalid", "n_failed", "n_prompts", "forward_rate", "reverse_rate", "net_rating",
                "ci_low", "ci_high", "p_value"]


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _utc(iso: str | None) -> str | None:
    """An ISO time as UTC ISO to the second; None for no time, or one that is not an ISO string (a
    manifest edited into a number: break-it round 2, s41 — a TypeError ended ``lmra history``)."""
    if not iso or not isinstance(iso, str):
        return None
    try:
        t = _dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.astimezone()
    return t.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


#: seconds a recorded start time may lie after this machine's now before it is called ahead of the clock
CLOCK_SLACK_S = 300


def _ahead_of_now(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of :meth:`History.runs` recorded as started more than :data:`CLOCK_SLACK_S` after
    this machine's clock now (a run whose machine's clock was ahead)."""
    now = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=CLOCK_SLACK_S)
    return runs[runs["started_utc"].fillna("").astype(str) > now.isoformat(timespec="seconds")] if len(runs) else runs


def _int(x) -> int | None:
    """An integer for an INTEGER column: ints (and numpy integers) exactly — a 64-bit seed
    through a float was rounded, up to 2⁶³ and an overflow —, other numbers truncated, None for
    missing or non-finite values."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") in "iu"):
        return int(x)
    f = finite(x)
    return None if f is None else int(f)


def _config_name(folder: Path) -> str:
    """The run name in a run folder's ``config.toml`` (or, unreadable, the folder name after its
    ``YYYYMMDD-HHMMSS-`` prefix)."""
    import tomllib

    import re

    try:
        return str(tomllib.loads((folder / "config.toml").read_text(encoding="utf-8")).get("name") or "")
    except (OSError, ValueError):  # (a folder claimed beside another of the same second ends in -N)
        return re.sub(r"-\d+$", "", folder.name.split("-", 2)[-1])


def detectable_span(rows: list[dict], overall: list[dict] = ()) -> dict | None:
    """``{"min", "max", "n_undetectable", "overall_min", "overall_max"}`` of a stored check: its
    tested task rows' ``mde`` (the rise each detects with 80% power; nan: none reaches it), how
    many tested tasks detect none, and the same span of its tested overall rows (None when none
    detects a rise; fresh-user finding, s37: a quiet night read "detects rises of +0.86 or more
    only", the per-task figure, while its overall row detected +0.07); None when the check
    recorded no ``mde``."""
    tested = [r for r in rows if finite(r.get("p_regress")) is not None]
    tested_overall = [r for r in overall if finite(r.get("p_regress")) is not None]
    if not any("mde" in r for r in tested + tested_overall):
        return None
    found = [m for m in (finite(r.get("mde")) for r in tested) if m is not None]
    whole = [m for m in (finite(r.get("mde")) for r in tested_overall) if m is not None]
    return {"min": min(found) if found else None, "max": max(found) if found else None,
            "n_undetectable": sum(finite(r.get("mde")) is None for r in tested),
            "overall_min": min(whole) if whole else None, "overall_max": max(whole) if whole else None}


#: newer runs '--baseline last' passed over, named one by one in the check's notes (then one line)
MAX_SKIP_NOTES = 5
#: runs read from outside the history's folder named one by one (then one line for the rest)
ELSEWHERE_NOTES = 3


def not_finished_words(r: dict) -> str:
    """A not-finished run folder's status, why and whether a re-run completed its night
    (:meth:`lmra.history.History.not_finished`): ``stale (its process is gone: killed, crashed, or
    stopped by a full disk before it could say so) — resumed by 20261201-021500-nightly (same seed)``."""
    status = {"stale": "stale (its process is gone: killed, crashed, or stopped by a full disk before it could "
                       "say so)"}.get(r["status"], r["status"])
    reason = str(r.get("stop_reason") or "")
    if reason.startswith(str(r["status"])):  # "interrupted by SIGHUP (…)": the status said once
        status, reason = reason, ""
    why = f" — {reason}" if reason else ""
    done = f" — resumed by {r['resumed_by']} (same seed)" if r.get("resumed_by") else ""
    return f"{status}{why}{done}"


def refusal_reason(warnings: list[str]) -> str | None:
    """What made the comparability rules refuse a check, in short — "its judge's served model
    (…) is 'a', the run's is 'b'" — from its recorded warnings (the line
    :func:`lmra.monitor.refused_check` writes), or None for a check that ran."""
    for w in warnings:
        if w.startswith(REFUSED_PREFIX):
            m = re.search(r" is not comparable with run \S+: (.*?)(?:\.(?: |$)|$)", w[len(REFUSED_PREFIX):])
            return m.group(1) if m else w[len(REFUSED_PREFIX):].split(". ", 1)[0]
    return None


def stored_verdict(check: dict) -> str:
    """The verdict of a stored check recorded before verdicts were (:meth:`History.latest_check`'s
    dict: ``result`` and ``overall`` frames of its rows, or lists of row dicts): ``regression`` when a task or overall
    row regressed, ``no_conclusion`` when no row has a p-value (nothing tested), else
    ``no_regression`` — as :attr:`lmra.monitor.CheckResult.verdict`; ``no_conclusion`` too when
    its recorded comparability warnings say every chatbot answer was replayed (an older lmra
    recorded no verdict; it did record the warning, though not whether the night replayed had
    finished complete)."""
    rows = [r for part in (check.get("result"), check.get("overall")) if part is not None and len(part)
            for r in (part.to_dict(orient="records") if isinstance(part, pd.DataFrame) else part)]
    if any(str(w).startswith(REPLAY_STARTS) for w in check.get("warnings") or []):
        return "no_conclusion"  # a replay recorded before verdicts were (its warning says so; review finding)
    if any(bool(r.get("regressed")) for r in rows):
        return "regression"
    tested = any(finite(r.get("p_regress")) is not None for r in rows)
    return "no_regression" if tested else "no_conclusion"


def history_path(reports_dir: str | Path) -> Path:
    """The history store of a reports folder: ``<reports_dir>/history.sqlite``."""
    return Path(reports_dir) / HISTORY_FILE


#: how long a command waits for another process's lock on the history (an ``sqlite3`` shell's open
#: transaction, a ``VACUUM``, a backup, another lmra command writing it) before it gives up
HISTORY_LOCK_WAIT_S = 120.0
#: SQLite's own wait on a lock, per attempt (between attempts the command may say it is waiting)
_BUSY_STEP_S = 2.0


def _busy(exc: sqlite3.Error) -> bool:
    """Whether an SQLite error is another connection's lock (SQLITE_BUSY / SQLITE_LOCKED)."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


class _HistoryCursor(sqlite3.Cursor):
    """A cursor whose statements wait out another process's lock (:meth:`_HistoryConnection.retry`);
    every statement of the history goes through one (``Connection.execute`` and pandas'
    ``read_sql_query`` make theirs with :meth:`_HistoryConnection.cursor`)."""

    def execute(self, *args, **kwargs):
        return self.connection.retry(super().execute, *args, **kwargs)

    def executemany(self, *args, **kwargs):
        return self.connection.retry(super().executemany, *args, **kwargs)

    def executescript(self, *args, **kwargs):
        return self.connection.retry(super().executescript, *args, **kwargs)


class _HistoryConnection(sqlite3.Connection):
    """The history's SQLite connection: a database that cannot be written or read (disk full,
    read-only folder, a damaged file) raises :class:`~lmra.errors.LmraIOError` naming the
    history file (exit status 1), not a bare ``OperationalError``. A lock another process holds is
    waited out for up to :data:`HISTORY_LOCK_WAIT_S` seconds, said once on stderr (break-it finding,
    s40: a 40-second ``VACUUM`` from an sqlite3 shell made a regression night give up after 16 s,
    its regression never checked, exit 1)."""

    history_path: Path = Path("history.sqlite")
    _told_waiting = False

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("timeout", _BUSY_STEP_S)
        super().__init__(*args, **kwargs)

    def cursor(self, factory=_HistoryCursor):
        return super().cursor(factory)

    def _named(self, exc: sqlite3.Error) -> LmraIOError:
        held = (f": another process held it for more than {HISTORY_LOCK_WAIT_S:.0f} s (an sqlite3 shell's open "
                "transaction, a VACUUM or backup, another lmra command?)" if _busy(exc) else "")
        return LmraIOError(f"the run history could not be used ({type(exc).__name__}: {exc}){held}",
                           path=self.history_path)

    def retry(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` (a statement, or the commit), again while another process holds
        the history's lock, for up to :data:`HISTORY_LOCK_WAIT_S` seconds (a statement that met
        SQLITE_BUSY did not run, so it is run again whole).

        Raises:
            LmraIOError: any other SQLite error, or the lock still held at the end (naming the file).
        """
        import time

        deadline = time.monotonic() + HISTORY_LOCK_WAIT_S - _BUSY_STEP_S
        while True:
            try:
                return fn(*args, **kwargs)
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise self._named(exc) from None
                if not self._told_waiting:
                    self._told_waiting = True
                    print(f"note: waiting for {self.history_path}: another process holds its lock (up to "
                          f"{HISTORY_LOCK_WAIT_S:.0f} s)", file=sys.stderr, flush=True)

    def execute(self, *args, **kwargs):
        return self.cursor().execute(*args, **kwargs)

    def executemany(self, *args, **kwargs):  # (fault break-it, s44: sqlite3's own Connection.executemany
        # does not go through the cursor's: a disk filled by a registration's task rows was blamed on the
        # call cache, with the advice to move that healthy file aside)
        return self.cursor().executemany(*args, **kwargs)

    def executescript(self, *args, **kwargs):
        return self.cursor().executescript(*args, **kwargs)

    def commit(self):
        return self.retry(super().commit)


def _read_only(path: Path) -> bool:
    """True when the history at ``path`` cannot be written: its folder exists and cannot be
    written to, or the file exists and cannot be (a read-only mount, permissions)."""
    import os

    folder = path.parent
    if path.exists():
        return not (os.access(path, os.W_OK) and os.access(folder, os.W_OK))
    return folder.is_dir() and not os.access(folder, os.W_OK)


def _memory_copy(path: Path) -> sqlite3.Connection:
    """An in-memory copy of the history at ``path`` (empty when there is none), opened for
    :class:`History` on a folder it cannot write; said once on stderr."""
    import sys

    db = sqlite3.connect(":memory:", factory=_HistoryConnection)
    if path.is_file():
        from urllib.parse import quote

        src = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            src.backup(db)
        finally:
            src.close()
    print(f"note: {path} is read-only (it or its folder cannot be written): the run history is read from a copy "
          "in memory; nothing is stored (a pin or a check cannot be)", file=sys.stderr)
    return db


def _exact_records(df: pd.DataFrame) -> list[dict]:
    """The rows of ``df`` as JSON-safe dicts with every number exact (missing values None)."""
    return jsonable(df.astype(object).where(df.notna(), None).to_dict(orient="records"))


def gates_breached(run_dir) -> bool:
    """True when the run folder recorded release gates that were not met (:func:`lmra.gates.read_gates`;
    False without gates, or for a folder whose record cannot be read)."""
    from lmra.gates import read_gates

    try:
        gates = read_gates(run_dir)
    except OSError:
        return False
    return gates is not None and gates.get("passed") is False


def not_last_reasons(runs: pd.DataFrame) -> pd.Series:
    """Why each run of :meth:`History.runs` cannot be a ``--baseline last``: ``"its status is
    partial"`` (any status but complete), ``"its judge failed validation"`` (un-waived), else ``""``
    (a candidate). Index as ``runs``'s. Either kind is used only when named explicitly."""
    why = pd.Series("", index=runs.index, dtype=object)
    if not len(runs):
        return why
    why[runs["status"].fillna("complete") != "complete"] = "its status is " + runs["status"].astype(str)
    why[(why == "") & (runs["judge_status"].fillna("") == "failed")] = "its judge failed validation"
    return why


class History:
    """The SQLite run history of one reports folder (see the module docstring).

    Args:
        path: the SQLite file; created with its parent folder when missing.

    A history in a folder that cannot be written (a read-only mount of archived reports; break-it
    finding: ``lmra history``, ``compare``, ``plan`` and ``report --out`` failed on one) is read
    into memory instead (:attr:`read_only` True, said once on stderr): the reading commands work,
    run folders not registered yet are registered in the copy, and what must be stored — a pin, a
    check — raises :class:`~lmra.errors.LmraIOError` naming the file.

    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file() and not self.path.is_dir():  # a device, pipe or socket
            # (break-it finding, s38: /dev/zero gave "disk I/O error", exit 1; a folder stays the I/O failure it was)
            raise LmraInputError("is not a regular file (a device, pipe or socket): the run history is an SQLite file "
                                 "(reports/history.sqlite)", file=self.path, field="--history")
        self._told_elsewhere: set[str] = set()  # run ids whose folder outside the history's folder was said
        self.read_only = _read_only(self.path)
        if not self.read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = (_memory_copy(self.path) if self.read_only
                       else sqlite3.connect(self.path, factory=_HistoryConnection))
        except sqlite3.Error as exc:
            raise LmraIOError(f"the run history could not be opened ({type(exc).__name__}: {exc})",
                              path=self.path) from None
        self.db.history_path = self.path
        self.db.row_factory = sqlite3.Row
        self._check_intact()
        tables = sqlite_tables(self.db)
        if "calls" in tables and "runs" not in tables:  # (round-3 break-it, s44: 'lmra history --history
            # CACHE' added the history's tables to the cache, which the next audit then refused as a history)
            self.db.close()
            raise LmraInputError("is a call cache (its calls table), not a run history: give the reports folder's "
                                 "history.sqlite — nothing was written to it", file=self.path, field="--history")
        self.db.executescript(_SCHEMA)
        # the columns added since are looked for and added in one write transaction: two processes
        # opening a new history at once (two audits, the shards of one) both saw them missing, and
        # the second ALTER failed, "duplicate column name" (break-it finding: exit 1, no report.html)
        self.db.execute("BEGIN IMMEDIATE")
        cols = {r[1] for r in self.db.execute("PRAGMA table_info(runs)")}
        if "judge_status" not in cols:
            self.db.execute("ALTER TABLE runs ADD COLUMN judge_status TEXT")  # histories from before issue 10
        if "n_refused" not in cols:  # pairs not scored because a response was a refusal (null: registered before)
            self.db.execute("ALTER TABLE runs ADD COLUMN n_refused INTEGER")
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(HISTORY_SCHEMA_VERSION),))
        self.db.commit()

    def _check_intact(self) -> None:
        """SQLite's ``quick_check`` of the history before anything reads or writes it (break-it
        finding: a history SQLite itself called malformed — damage in an index — was used and written
        to by lmra audit, history and export; only a later pin failed).

        Raises:
            LmraIOError: the check found damage (naming the file and SQLite's first finding).
        """
        try:
            rows = [r[0] for r in self.db.execute("PRAGMA quick_check").fetchall()]
        except (sqlite3.DatabaseError, LmraIOError) as exc:  # damage the check itself stops at (break-it round 2)
            # the SQLite error as "Type: message" (the connection wraps it in an LmraIOError's reason)
            error = (exc.reason.removeprefix("the run history could not be used (").removesuffix(")")
                     if isinstance(exc, LmraIOError) else f"{type(exc).__name__}: {exc}")
            if "file is not a database" in error or error.startswith("OperationalError"):
                # not damage: another kind of file, or a history locked, busy or unreadable (break-it round 3: one
                # another process held locked was called damaged, with the advice to move it aside)
                self.db.close()
                busy = error.startswith("OperationalError") and ("locked" in error or "busy" in error)
                raise LmraIOError(f"the run history could not be used ({error})"
                                  + ("; another process is using it (an audit writing its run, a backup, an sqlite3 "
                                     "shell): try again when it has finished" if busy else ""), path=self.path) from None
            rows = [error]
        if rows != ["ok"]:
            self.db.close()
            raise LmraIOError(f"the run history is damaged (SQLite's integrity check: {rows[0] if rows else 'no answer'}"
                              f"{f' and {len(rows) - 1} more' if len(rows) > 1 else ''}); nothing was read from or "
                              "written to it. Restore it from a backup, or move it aside: its runs are registered "
                              "again from their folders when a command needs them (its pins and stored checks are "
                              "lost)", path=self.path)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------
    def register(self, run: RunFolder | str | Path) -> str:
        """Add (or refresh) a run and its per-task and overall metrics; returns the run id. The
        run's ``registered`` time is the first registration's (a refresh keeps it). Every file is
        read (and checked against its recorded digest) before the history is written, so a damaged
        folder leaves the history as it was.

        Raises:
            LmraInputError: not a finished run folder, or one whose files are damaged.
        """
        return self._write_registration(self._registration(run))

    def _registration(self, run: RunFolder | str | Path) -> dict:
        """What :meth:`register` writes of ``run``, read from its folder (no history statement).

        Raises:
            LmraInputError: not a finished run folder, or one whose files are damaged."""
        run = run if isinstance(run, RunFolder) else load_run(run)
        overall = pd.DataFrame(run.summary.get("overall") or [])
        # a count no row measured (refusals of a run without refusal labels) is unknown, not 0
        totals = {c: _int(overall[c].sum()) if c in overall and overall[c].notna().any() else None
                  for c in ("n_pairs", "n_invalid", "n_failed", "n_refusal", "n_unlabelled")}
        calls = run.manifest.get("calls") or {}
        tpl_hash, tpl_src = run.judge_template
        sd = run.prompt_scores.groupby(["comparison", "domain", "task"])["h"].std(ddof=1)
        tasks = []
        for _, r in run.per_task.iterrows():
            key = (r["comparison"], r["domain"], r["task"])
            tasks.append((run.run_id, r["comparison"], r["group_a"], r["group_b"], r["domain"], r["task"],
                          *[_int(r[c]) for c in _METRIC_COLS[:4]], *[finite(r[c]) for c in _METRIC_COLS[4:]],
                          finite(sd.get(key))))
        comparisons = [(run.run_id, f"{r['group_a']} vs {r['group_b']}", r["group_a"], r["group_b"],
                        *[_int(r.get(c)) for c in _METRIC_COLS[:4]], *[finite(r.get(c)) for c in _METRIC_COLS[4:]])
                       for r in run.summary.get("overall") or []]
        row = (run.run_id, str(run.path.resolve()), run.name, run.status, run.started, _utc(run.started),
               run.manifest.get("finished"), None, run.config_hash, run.design_hash, _int(run.config.get("seed")),
               run.target_provider, run.target_model, run.judge_provider, run.judge_model, tpl_hash, tpl_src,
               run.combiner, json.dumps(run.comparisons), _int(run.summary.get("n_prompts")),
               _int(run.summary.get("n_pairs_total")), totals["n_pairs"], totals["n_invalid"], totals["n_failed"],
               _int(calls.get("fresh")), _int(calls.get("cached")), _int(calls.get("failed")), run.judge_status,
               totals["n_refusal"])
        # every value as SQLite stores it: a hand-edited manifest's list or object where a name or count belongs
        # failed only when written, outside the scan's guard (break-it round 2, s43: 'target.model' as a list made
        # every later audit of the folder exit 1 after its run)
        for value in (*row, totals["n_unlabelled"], *(v for r in tasks + comparisons for v in r)):
            if value is not None and not isinstance(value, (str, int, float)):
                raise LmraInputError(f"holds {type(value).__name__} {json.dumps(value, default=str)[:80]} where a "
                                     "name, a number or a date belongs (a hand-edited file?)",
                                     file=run.path / "manifest.json")
        return {"run_id": run.run_id, "row": row, "unlabelled": totals["n_unlabelled"], "tasks": tasks,
                "overall": comparisons}

    def _write_registration(self, reg: dict) -> str:
        """Write a :meth:`_registration` into the history, in one transaction; returns the run id."""
        run_id = reg["run_id"]
        self.db.execute("DELETE FROM task_metrics WHERE run_id = ?", (run_id,))
        self.db.execute("DELETE FROM overall_metrics WHERE run_id = ?", (run_id,))
        first = self.db.execute("SELECT registered FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        row = list(reg["row"])
        row[7] = first["registered"] if first else _now()
        self.db.execute(
            "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
        self.db.execute("INSERT OR REPLACE INTO run_unlabelled VALUES (?,?)", (run_id, reg["unlabelled"]))
        self.db.executemany("INSERT INTO task_metrics VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", reg["tasks"])
        self.db.executemany("INSERT INTO overall_metrics VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", reg["overall"])
        self.db.commit()
        return run_id

    def scan(self) -> list[str]:
        """Register finished run folders next to the history file that are not registered yet
        (runs made before the history existed, or copied in); returns their ids."""
        from lmra.runstate import FINISHED, folder_status

        known = set(self.runs()["run_id"])
        added = []
        for summary in sorted(self.path.parent.glob("*/summary.json")):
            folder = summary.parent
            if folder.name in known or is_shard(folder):  # a shard: its merged run is the night
                continue
            status = folder_status(folder)
            if status != "unknown" and status not in FINISHED:  # failed, stale, running: not a run to register
                continue
            try:
                # every file read here, its digest checked (break-it, s43: a damaged per_task.csv was
                # found inside register, outside this guard: every later audit exited 2 naming it)
                registration = self._registration(load_run(folder))
            except Exception as exc:  # a damaged or foreign folder must not break later audits
                import warnings

                reason = exc.format() if isinstance(exc, LmraInputError) else f"{type(exc).__name__}: {exc}"
                warnings.warn(f"skipping {folder}: not a readable run folder ({reason})", stacklevel=2)
                continue
            # (a history that cannot be written — a full disk — is the history's failure, named as
            # such, exit 1: not the folder's, which it called unreadable and left out; break-it finding)
            added.append(self._write_registration(registration))
        return added

    def not_finished(self, name: str | None = None) -> list[dict]:
        """Run folders next to the history file that are not registered because they did not
        finish (failed, interrupted, stopped by the budget, stale, still running): the nights
        :meth:`runs` leaves out (fresh-user finding: a failed night was a silent gap in ``lmra
        history`` and the history page). Shards and folders without a readable manifest are left
        out, except an audit's folder stopped before it wrote one (:meth:`_killed_at_start`).

        Returns:
            oldest first, ``{"run_id", "name", "status", "started", "stop_reason", "resumed_by"}``
            per folder (``stop_reason``: the manifest's — the error it stopped on, or the
            ``failure`` of a run that finished with nothing scored — None when it recorded none;
            ``resumed_by``: the first finished run with the same name and seed after it — the
            re-run that completed that night — or None).
        """
        from lmra.runstate import FINISHED, folder_status

        out = []
        for manifest in sorted(self.path.parent.glob("*/manifest.json")):
            folder = manifest.parent
            if is_shard(folder):
                continue
            try:
                m = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            # an audit's folder only (review finding: recsys runs, 'finished', were listed as audit nights)
            if not isinstance(m, dict) or "judge" not in m or "mode" in m or str(m.get("status")) in FINISHED:
                continue
            status = folder_status(folder, mark=not self.read_only)
            if status == "unknown" or status in FINISHED:
                continue
            m = {**m, "status": status}
            run_name = _config_name(folder)
            if name and run_name != name:
                continue
            reason = m.get("stop_reason") or m.get("failure")
            resumed_by = self._resumed_by(folder.name, run_name, m.get("seed"), m.get("started"))
            if status == "stale" and m.get("stopped_in") == "batch":  # its batch jobs may be done at the provider
                from lmra.runfolder import batch_resume_advice

                # (a night another run completed is not to be resumed: break-it finding, both were advised)
                reason = batch_resume_advice(folder) if resumed_by is None else (
                    f"it stopped in its batch rounds; its jobs may still run at the provider: 'lmra batch cancel "
                    f"{folder}' stops them")
            out.append({"run_id": folder.name, "name": run_name, "status": status, "started": m.get("started"),
                        "stop_reason": reason, "resumed_by": resumed_by})
        out += self._killed_at_start(name)
        return sorted(out, key=lambda r: (str(r["started"] or ""), r["run_id"]))

    def _killed_at_start(self, name: str | None) -> list[dict]:
        """:meth:`not_finished`'s rows of audit folders stopped before they wrote their manifest:
        a ``run.lock`` (only an audit takes one) and no ``manifest.json`` (break-it finding, s37: a
        ``kill -9`` 1.5 s into an audit left such a folder, listed nowhere). ``running`` while a live
        process holds the lock (an audit starting now), else ``stale``; the start time is when
        the lock file was written (the folder name's stamp is the writer's local time)."""
        from lmra.runstate import LOCK_FILE, is_locked

        stamped = re.compile(r"(\d{8})-(\d{6})-.+")
        out = []
        for lock in sorted(self.path.parent.glob(f"*/{LOCK_FILE}")):
            folder = lock.parent
            m = stamped.fullmatch(folder.name)
            if (m is None or (folder / "manifest.json").exists() or is_shard(folder)
                    or re.search(r"-shard\d+of\d+$", folder.name)):
                continue
            run_name = _config_name(folder)
            if name and run_name != name:
                continue
            try:  # when its lock was taken, as it started: the folder name's stamp is the writer's local time,
                # which read in another time zone misplaced it (break-it round 2, s38)
                started = _dt.datetime.fromtimestamp(lock.stat().st_mtime).astimezone().isoformat(timespec="seconds")
            except (OSError, ValueError, OverflowError):
                started = None
            running = is_locked(folder)
            out.append({"run_id": folder.name, "name": run_name, "status": "running" if running else "stale",
                        "started": started, "resumed_by": None,
                        "stop_reason": None if running else (
                            "it stopped before it wrote its manifest (killed or crashed while starting): nothing of "
                            "the night was recorded, and any call it had answered is in the call cache")})
        return out

    def _say_newer_skipped(self, chosen, runs: pd.DataFrame) -> None:
        """Say on stderr which newer run folders ``latest`` passed over — partial runs, and folders
        that did not finish (failed, interrupted, stale …) and were not completed by a re-run —
        naming the newest (fresh-user finding, s38: after a failed night, ``lmra check latest``
        checked the night before without a word)."""
        started = str(chosen["started_utc"] or "")  # (times to the second: one started in the same second counts)
        partial = [f"{r.run_id} ({r.status})" for r in runs.itertuples()
                   if r.run_id != chosen["run_id"] and str(r.started_utc or "") >= started
                   and (r.status or "complete") != "complete"]
        unfinished = [f"{r['run_id']} ({r['status']})" for r in self.not_finished()
                      if r.get("resumed_by") is None and str(_utc(r.get("started")) or r["run_id"]) >= started]
        newer = partial + unfinished
        if not newer:
            return
        shown = ", ".join(newer[-3:]) + (f" and {len(newer) - 3} more" if len(newer) > 3 else "")
        print(f"note: 'latest' is {chosen['run_id']}, the newest complete run; {len(newer)} newer run "
              f"folder{'s' * (len(newer) != 1)} did not complete: {shown} ('lmra history' says why; name a run to "
              "use it)", file=sys.stderr)

    def _say_if_replay(self, run: RunFolder) -> None:
        """Say on stderr when the run ``latest`` chose made no fresh target call and an earlier
        finished night of its name, seed and design exists (:func:`lmra.comparable.earlier_same_draw`):
        a same-seed re-run, whose every chatbot answer was replayed from the call cache, so its
        numbers are that night's (fresh-user finding, s48: ``lmra gate latest`` and ``lmra plan
        --pilot latest`` used such a replay without a word)."""
        from lmra.comparable import all_answers_replayed, earlier_same_draw

        if not all_answers_replayed(run):
            return
        earlier = earlier_same_draw(self, run)
        if earlier:
            print(f"note: 'latest' is {run.run_id}, a re-run with the seed of {earlier}: every chatbot answer was "
                  f"replayed from the call cache, so its numbers are that night's (name a run to use another)",
                  file=sys.stderr)

    def _resumed_by(self, run_id: str, name: str | None, seed, started: str | None = None) -> str | None:
        """The first finished run started after ``run_id`` (at ``started``, its manifest's start
        time) with its name and seed — the re-run that completed the night from the call cache —
        or None (new-user finding: a resumed night stayed listed as "did not finish" forever, with
        nothing saying it was done). Ordered by the start times in UTC: run ids are the writer's
        local time, and a re-run after a change of time zone (or within the hour a DST change
        repeats) can have a smaller one (break-it finding, s40); by run id within one second, or when
        either start time is unknown."""
        if name is None or not isinstance(seed, int) or isinstance(seed, bool):
            return None
        since = _utc(started)
        row = (self.db.execute("SELECT run_id FROM runs WHERE name = ? AND seed = ? AND (started_utc > ? OR "
                               "(started_utc = ? AND run_id > ?) OR (started_utc IS NULL AND run_id > ?)) "
                               "ORDER BY started_utc IS NULL, started_utc, run_id LIMIT 1",
                               (name, seed, since, since, run_id, run_id)).fetchone() if since else
               self.db.execute("SELECT run_id FROM runs WHERE name = ? AND seed = ? AND run_id > ? ORDER BY run_id "
                               "LIMIT 1", (name, seed, run_id)).fetchone())
        return row["run_id"] if row else None

    def _writable(self, what: str) -> None:
        """Raise :class:`~lmra.errors.LmraIOError` when the history is :attr:`read_only`."""
        if self.read_only:
            raise LmraIOError(f"the run history is read-only (it or its folder cannot be written): {what} cannot "
                              "be stored", path=self.path)

    def pin(self, run: RunFolder | str | Path, *, replace: bool = True) -> str:
        """Pin a run as the ``pinned`` baseline of every run with the same name; returns the id
        pinned.

        Args:
            run: a run folder, or a run id / path resolvable by :meth:`resolve`.
            replace: False for a first night's pin (:func:`lmra.cli.monitor.first_night_pin`):
                a pin of the name made meanwhile (another first night that finished first) stays,
                in one statement, and its id is returned (break-it finding, s40: two first nights
                started together both pinned themselves, the second replacing the first).

        Raises:
            LmraIOError: the history is :attr:`read_only` or cannot be written.
            LmraInputError: ``run`` names no run.
        """
        self._writable("a pin")
        run = run if isinstance(run, RunFolder) else self.resolve(run)
        refuse_shard(run.path)  # (given as a folder object too: a shard is never a baseline)
        self.register(run)
        self.db.execute(f"INSERT OR {'REPLACE' if replace else 'IGNORE'} INTO pins VALUES (?,?,?)",
                        (run.name, run.run_id, _now()))
        self.db.commit()
        return run.run_id if replace else self.pinned(run.name)

    def record_check(self, result: "CheckResult", source: str = "check") -> None:
        """Store a regression check; ``source`` names the command that made it: ``audit`` (the
        night's own check, ``lmra audit --baseline``), ``check`` or ``report`` (made by hand
        later). :meth:`latest_check` prefers the audit's. ``result`` holds the task rows, then
        the overall rows (``result.overall``) marked ``"level": "overall"`` (an older lmra reads
        them as a task named "all tasks"); ``n_regressions``/``n_improvements`` count both.

        Raises:
            LmraIOError: the history is :attr:`read_only`, or cannot be written (a full disk).
        """
        self._writable("the check")
        # every number as it is (pandas' to_json rounds to 10 decimals: a baseline's +0.19374999999999998,
        # +0.1937 everywhere else, read back as 0.19375 printed +0.1938 — fresh-user finding); NaN null
        rows = _exact_records(result.tests)
        overall = getattr(result, "overall", None)
        if overall is not None and len(overall):
            rows += [r | {"level": "overall"} for r in _exact_records(overall)]
        n_reg = len(result.regressions) + len(getattr(result, "overall_regressions", ()))
        n_imp = len(result.improvements) + len(getattr(result, "overall_improvements", ()))
        if getattr(result, "replayed", False):  # rows of replayed answers flag nothing, in the table too
            rows = [r | {"regressed": False, "improved": False} for r in rows]  # (a query on n_regressions:
            n_reg = n_imp = 0  # user-trial finding, it counted a replay as a second regression night)
        cur = self.db.execute("INSERT INTO checks VALUES (?,?,?,?,?,?,?,?)",
                              (result.run_id, result.baseline_id, result.margin, result.alpha, _now(), n_reg, n_imp,
                               json.dumps(rows)))
        self.db.execute("INSERT OR REPLACE INTO check_sources (check_rowid, source) VALUES (?,?)",
                        (cur.lastrowid, source))
        self.db.execute("INSERT OR REPLACE INTO check_warnings (check_rowid, warnings) VALUES (?,?)",
                        (cur.lastrowid, json.dumps(list(getattr(result, "comparability", []) or []))))
        self.db.execute("INSERT OR REPLACE INTO check_verdicts (check_rowid, verdict) VALUES (?,?)",
                        (cur.lastrowid, result.verdict))
        self.db.execute("INSERT OR REPLACE INTO check_identity (check_rowid, changes) VALUES (?,?)",
                        (cur.lastrowid, json.dumps(list(getattr(result, "identity_changes", []) or []))))
        self.db.execute("INSERT OR REPLACE INTO check_caveats (check_rowid, caveats) VALUES (?,?)",
                        (cur.lastrowid, json.dumps({"replayed": bool(getattr(result, "replayed", False)),
                                                    "position_drift": str(getattr(result, "position_drift", "") or ""),
                                                    "refusal_gap": str(getattr(result, "refusal_gap", "") or ""),
                                                    "quality_gap": str(getattr(result, "quality_gap", "") or ""),
                                                    "notes": [str(n) for n in getattr(result, "notes", []) or []]})))
        self.db.commit()

    # -- reading ------------------------------------------------------------------------
    def runs(self, name: str | None = None) -> pd.DataFrame:
        """Registered runs, oldest first: one row per run with the ``runs`` columns plus
        ``n_unlabelled`` (pairs left out for a missing refusal label; null for a run without
        refusal labels or registered by an older lmra) and ``pinned`` (bool). ``name`` keeps only
        runs with that run name."""
        q = ("SELECT r.*, u.n_unlabelled, (p.run_id IS NOT NULL) AS pinned FROM runs r "
             "LEFT JOIN run_unlabelled u ON u.run_id = r.run_id LEFT JOIN pins p ON p.run_id = r.run_id")
        args: tuple = ()
        if name:
            q, args = q + " WHERE r.name = ?", (name,)
        df = pd.read_sql_query(q + " ORDER BY r.started_utc, r.run_id", self.db, params=args)
        df["pinned"] = df["pinned"].astype(bool)
        return df

    def finished_before(self, run: RunFolder) -> str | None:
        """The newest finished run (complete or partial) of ``run``'s name, seed and design hash
        that started before it or in the same second (another run id; start times are kept to the
        second, and a run of a few prompts starts and finishes within one), or None
        (:func:`lmra.comparable.earlier_same_draw`)."""
        row = self.db.execute(
            "SELECT run_id FROM runs WHERE name = ? AND seed = ? AND design_hash = ? AND run_id != ? "
            "AND COALESCE(status, 'complete') IN ('complete', 'partial') AND started_utc <= ? "
            "ORDER BY started_utc DESC LIMIT 1",
            (run.name, run.config.get("seed"), run.design_hash, run.run_id,
             (self.get(run.run_id) or {}).get("started_utc") or "9999")).fetchone()
        return row["run_id"] if row else None

    def get(self, run_id: str) -> dict | None:
        """The ``runs`` row of a run id, or None."""
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return dict(row) if row else None

    def task_trend(self, task: str, comparison: str | None = None, name: str | None = None) -> pd.DataFrame:
        """The net rating of one task across runs, oldest first.

        Returns:
            Columns ``run_id, started, name, status, target_model, judge_provider, judge_model,
            judge_status, combiner, comparison, domain, task, n_pairs, net_rating, ci_low, ci_high,
            p_value, forward_rate, reverse_rate, replayed``; empty when the task was never measured.
            ``replayed``: the night's check (:meth:`latest_check`) found every chatbot answer
            replayed from the call cache — its point repeats an earlier night's (fresh-user
            finding: such nights were shown as ordinary points); False when never checked.
        """
        q = ("SELECT r.run_id, r.started, r.name, COALESCE(r.status, 'complete') AS status, r.target_model, "
             "r.judge_provider, r.judge_model, r.judge_status, r.combiner, m.comparison, "
             "m.domain, m.task, "
             "m.n_pairs, m.net_rating, m.ci_low, m.ci_high, m.p_value, m.forward_rate, m.reverse_rate "
             "FROM task_metrics m JOIN runs r ON r.run_id = m.run_id WHERE m.task = ?")
        args: list = [task]
        if comparison:
            q += " AND m.comparison = ?"
            args.append(comparison)
        if name:
            q += " AND r.name = ?"
            args.append(name)
        df = pd.read_sql_query(q + " ORDER BY r.started_utc, r.run_id", self.db, params=args)
        replayed = {rid: bool((self.latest_check(rid) or {}).get("replayed")) for rid in df["run_id"].unique()}
        df["replayed"] = df["run_id"].map(replayed).astype(bool)
        return df

    def task_names(self, name: str | None = None) -> list[str]:
        """The tasks measured in the history (of runs named ``name``), sorted."""
        q = "SELECT DISTINCT m.task FROM task_metrics m"
        args: tuple = ()
        if name:
            q += " JOIN runs r ON r.run_id = m.run_id WHERE r.name = ?"
            args = (name,)
        return sorted(t for (t,) in self.db.execute(q + " ORDER BY m.task", args).fetchall())

    def metrics(self, name: str | None = None) -> pd.DataFrame:
        """All per-task metrics joined with their run's start time, oldest run first."""
        q = ("SELECT r.started, r.started_utc, r.name, m.* FROM task_metrics m JOIN runs r ON r.run_id = m.run_id")
        args: tuple = ()
        if name:
            q, args = q + " WHERE r.name = ?", (name,)
        return pd.read_sql_query(q + " ORDER BY r.started_utc, r.run_id", self.db, params=args)

    def overall_trend(self, name: str | None = None) -> pd.DataFrame:
        """Overall (all tasks) net rating per run and comparison, oldest first."""
        q = "SELECT r.started, r.name, m.* FROM overall_metrics m JOIN runs r ON r.run_id = m.run_id"
        args: tuple = ()
        if name:
            q, args = q + " WHERE r.name = ?", (name,)
        return pd.read_sql_query(q + " ORDER BY r.started_utc, r.run_id", self.db, params=args)

    def _check_rows(self, text, run_id: str, rowid: int) -> list[dict]:
        """The rows of a stored check's ``result`` (a JSON list of objects).

        Raises:
            LmraInputError: the field is damaged (not JSON, or not a list of objects), naming the
                history file, the table, the run and the row, and how to repair it (break-it
                finding: ``lmra history``, ``report --history`` and the Prometheus export ended
                in a traceback every night after)."""
        try:
            rows = json.loads(text)
        except (TypeError, ValueError) as exc:
            why = f"not JSON ({type(exc).__name__}: {exc})"
        else:
            if isinstance(rows, list) and all(isinstance(r, dict) for r in rows):
                return rows
            why = f"a JSON {type(rows).__name__}, not a list of task rows"
        raise LmraInputError(
            f"the stored regression check of run '{run_id}' is damaged: table 'checks', row {rowid}, is {why}. "
            f"Restore {self.path.name} from a backup, or delete that row (sqlite3 '{self.path}' "
            f"\"DELETE FROM checks WHERE rowid = {rowid}\") and check the night again (lmra check {run_id} "
            "--baseline pinned)", file=self.path, field="result")

    def nightly_settings(self, run_id: str) -> tuple[float, float, str] | None:
        """(margin, alpha, run id) of the newest check an ``lmra audit --baseline`` recorded
        (source ``audit``) for this run, else for the newest earlier run of its name: what a check
        by hand of this run uses when not told (fresh-user finding, s36: the nightly checked with
        ``--margin 0.01``, ``lmra check latest --baseline last`` with 0 said REGRESSION, exit 3,
        of the night the nightly had passed). None when no audit of the name recorded one."""
        row = self.db.execute(
            "SELECT c.margin, c.alpha, c.run_id FROM checks c JOIN check_sources s ON s.check_rowid = c.rowid "
            "JOIN runs r ON r.run_id = c.run_id WHERE s.source = 'audit' AND r.name IS (SELECT name FROM runs "
            "WHERE run_id = ?) AND (c.run_id = ? OR r.started_utc <= (SELECT started_utc FROM runs WHERE run_id = ?)) "
            "ORDER BY (c.run_id = ?) DESC, r.started_utc DESC, c.rowid DESC LIMIT 1",
            (run_id, run_id, run_id, run_id)).fetchone()
        return None if row is None else (float(row[0]), float(row[1]), str(row[2]))

    def latest_check(self, run_id: str) -> dict | None:
        """The night's verdict: the latest check its own audit recorded (``lmra audit
        --baseline``, source ``audit``), else the latest check recorded before sources were
        (by an older lmra: possibly the audit's own), else the latest stored check of the run —
        so a check made by hand afterwards (against another baseline, with another margin) does
        not replace the nightly verdict on the history page, the report and the exports; among
        checks by hand, one against a baseline of another target (a model comparison, ``lmra
        check B --baseline A``: :data:`lmra.comparable.TARGET_DIFFERS_PREFIX`) does not replace
        one of the same chatbot (fresh-user finding, s40: a model comparison turned a night's
        recorded regression into "no regression" on the history page and in Prometheus). Keys of
        ``checks`` (``source`` among them) with ``result`` as a frame of the task rows and
        ``overall`` as a frame of the overall rows (one per comparison; empty for a check an
        older lmra recorded), ``identity_changes`` (the served-model changes since the baseline,
        :func:`lmra.identity.identity_changes`; None when an older lmra recorded the check) and
        ``replayed`` (every chatbot answer of the night was replayed from the call cache, as the
        check recorded it — also when no row could be tested; for a check an older lmra recorded,
        the verdict is ``no_conclusion`` although rows were tested) and ``verdict`` (``regression`` / ``no_regression`` /
        ``no_conclusion``: :attr:`lmra.monitor.CheckResult.verdict` as recorded, or
        :func:`stored_verdict` for a check an older lmra recorded) and ``refused`` (why the
        night's check was refused — its baseline not comparable, :func:`lmra.monitor.refused_check`
        — in short; None for a check that ran), ``position_drift`` and ``refusal_gap`` (the check's
        own reasons its "no regression" is not evidence of none, :class:`lmra.monitor.CheckResult`;
        "" for none or a check an older lmra recorded), ``quality_gap`` (tonight's significant quality
        gaps, which it does not test; "" likewise), ``notes`` (its notes; [] likewise) and
        ``caveats_recorded`` (False for a check an older lmra recorded: the three unknown);
        None when never checked."""
        out = self._latest_check_rows(run_id)
        if out is not None:
            out["result"], out["overall"] = pd.DataFrame(out["result"]), pd.DataFrame(out["overall"])
        return out

    def _latest_check_rows(self, run_id: str) -> dict | None:
        """:meth:`latest_check` with ``result`` and ``overall`` as the stored lists of row dicts
        (no frames: ``lmra history`` reads one check a night, and building and unbuilding two
        frames a night was 9 of its 12 ms a night at 1,200 nights; break-it finding, s40)."""
        row = self.db.execute("SELECT c.*, c.rowid AS check_rowid, s.source, w.warnings, v.verdict, "
                              "i.changes AS identity_changes, k.caveats "
                              "FROM checks c LEFT JOIN check_sources s ON s.check_rowid = c.rowid "
                              "LEFT JOIN check_warnings w ON w.check_rowid = c.rowid "
                              "LEFT JOIN check_verdicts v ON v.check_rowid = c.rowid "
                              "LEFT JOIN check_identity i ON i.check_rowid = c.rowid "
                              "LEFT JOIN check_caveats k ON k.check_rowid = c.rowid "
                              "WHERE c.run_id = ? ORDER BY (w.warnings IS NOT NULL AND instr(w.warnings, ?) > 0), "
                              "CASE WHEN s.source = 'audit' THEN 2 WHEN s.source IS NULL THEN 1 "
                              "ELSE 0 END DESC, (w.warnings IS NOT NULL AND instr(w.warnings, ?) > 0), "
                              "c.rowid DESC LIMIT 1",
                              (run_id, json.dumps(REFUSED_PREFIX)[1:-1], TARGET_DIFFERS_PREFIX)).fetchone()
        if not row:
            return None
        out = dict(row)
        rows = self._check_rows(out["result"], run_id, out.pop("check_rowid"))
        out["result"] = [r for r in rows if r.get("level") != "overall"]
        out["overall"] = [{k: v for k, v in r.items() if k != "level"} for r in rows if r.get("level") == "overall"]
        try:  # the check's comparability warnings (lmra.comparable); None when not recorded (an older lmra)
            out["warnings"] = (None if out.get("warnings") is None
                               else [str(w) for w in json.loads(out["warnings"])])
        except (TypeError, ValueError):
            out["warnings"] = None
        try:  # served-model changes since the baseline (lmra.identity); None when not recorded
            out["identity_changes"] = (None if out.get("identity_changes") is None
                                       else [str(w) for w in json.loads(out["identity_changes"])])
        except (TypeError, ValueError):
            out["identity_changes"] = None
        out["caveats_recorded"] = out.get("caveats") is not None  # (False: recorded by an older lmra)
        try:  # the check's own caveats (position drift, refusal gap) and notes; "" / [] when not recorded
            caveats = json.loads(out.pop("caveats") or "{}")
        except (TypeError, ValueError):
            caveats = {}
        caveats = caveats if isinstance(caveats, dict) else {}
        out["position_drift"] = str(caveats.get("position_drift") or "")
        out["refusal_gap"] = str(caveats.get("refusal_gap") or "")
        out["quality_gap"] = str(caveats.get("quality_gap") or "")
        out["notes"] = [str(n) for n in caveats.get("notes") or []] if isinstance(caveats.get("notes"), list) else []
        out["verdict"] = out.get("verdict") or stored_verdict(out)
        # a check the comparability rules refused (lmra.monitor.refused_check): why, in short
        out["refused"] = refusal_reason(out["warnings"] or [])
        # every chatbot answer of the night replayed: no verdict (every surface reads this one flag), as the
        # check recorded it — also when no row could be tested (known-items trial, s49: a tiny replayed night
        # read "no task could be tested", and `lmra export --skip-replay` wrote its metrics over the real night's)
        if isinstance(caveats.get("replayed"), bool):
            out["replayed"] = caveats["replayed"]
        else:  # a check recorded before the flag was: told from its rows (tested, no conclusion, no unrated rise)
            stored = out["result"] + out["overall"]
            # (a check without a regression whose LMRA left more pairs unrated has no conclusion too: lmra.unrated_rise)
            out["replayed"] = (out["verdict"] == "no_conclusion" and any(finite(r.get("p_regress")) is not None
                                                                         for r in stored)
                               and not any(bool(r.get("unrated_rise")) for r in stored))
            # or from its warning, which a replay too small to test has too (round-2 break-it, s49: such a night
            # recorded before the flag still read "not replayed", and --skip-replay exported it)
            # (the first: the baseline's seed, every answer replayed — not "N of its M answers"; the second is
            # written only for a night whose every answer repeats an earlier complete night's)
            out["replayed"] = out["replayed"] or (out["verdict"] == "no_conclusion" and any(
                (w.startswith(REPLAY_STARTS[0]) and "every chatbot answer was replayed" in w)
                or w.startswith(REPLAY_STARTS[1]) for w in out["warnings"] or []))
        return out

    def check_summary(self, run_id: str) -> dict | None:
        """What the latest stored regression check of a run found (the history page's and
        ``lmra history``'s "check"), or None when the run was never checked.

        Returns:
            ``{"baseline_id": str, "checked": ISO time, "source": the command that recorded it
            (``audit``, ``check``, ``report``; None before it was recorded), "warnings": the
            check's comparability warnings (:mod:`lmra.comparable`; None when not recorded: a
            check an older lmra made), "identity_changes": its served-model change lines (None:
            not recorded), "verdict", "replayed" and "refused": as :meth:`latest_check`,
            "not_evidence": why a "no regression" of the check is not evidence of none beyond the runs'
            own status (the LMRA's position preference fell; tonight's groups were refused at
            significantly different rates; "" for neither, or a check an older lmra recorded),
            "notes": the check's notes (``lmra check``'s "note:" lines), "quality_gap": tonight's
            significant quality gaps between the groups, in words (the check does not test them; ""
            for none or not recorded), "n_tested": int,
            "regressed": {key:
            test row}, "improved": {key: test row}}``, keys ``(comparison, domain, task)``, a test
            row holding the check's columns (``h_base``, ``h_run``, ``p_regress`` …; none for a
            ``no_conclusion`` verdict: a replay's rows say nothing of that night); "unrated_rise":
            the rows whose LMRA left significantly more pairs without a usable rating than at the
            baseline, in words (:func:`lmra.unrated_rise.unrated_rise_words`; "" for none); ``n_tested``
            counts the tasks with a p-value (the others were too small to test);
            "n_overall_tested": the comparisons whose overall net rating was tested;
            "overall_regressed", "overall_improved": ``{comparison: overall row}`` (the
            comparisons whose net rating over all their tasks rose / fell significantly).
        """
        c = self._latest_check_rows(run_id)
        if c is None:
            return None
        rows, overall = c["result"], c["overall"]
        verdict = c["verdict"]
        # a replay's rows flagged nothing of that night's chatbot: no task regressed or improved
        keyed = lambda col: {(r.get("comparison"), r.get("domain"), r.get("task")): r  # noqa: E731
                             for r in rows if bool(r.get(col)) and verdict != "no_conclusion"}
        from lmra.unrated_rise import unrated_summary_words

        return {"baseline_id": c["baseline_id"], "checked": c["checked"], "source": c.get("source"),
                "warnings": c.get("warnings"), "identity_changes": c.get("identity_changes"),
                "verdict": c["verdict"], "replayed": c["replayed"], "refused": c["refused"],
                # why its "no regression" is not evidence of none beyond the runs' status: the LMRA's position
                # preference fell, tonight's groups were refused at significantly different rates ("": neither,
                # or not recorded); its notes (lmra.monitor.CheckResult.notes; []: none, or not recorded)
                "not_evidence": "; ".join(w for w in (c["position_drift"], c["refusal_gap"]) if w),
                "notes": c["notes"],
                # tonight's significant quality gaps, which the check does not test ("": none, or not recorded)
                "quality_gap": "" if c["replayed"] else c["quality_gap"],
                # the rows whose LMRA left significantly more pairs unrated than at the baseline, in words ("": none)
                "unrated_rise": "" if c["replayed"] else unrated_summary_words(rows + overall),
                "regressed": keyed("regressed"),
                "improved": keyed("improved"),
                "n_tested": sum(1 for r in rows if finite(r.get("p_regress")) is not None),
                # the rises the tested tasks detect with 80% power, smallest and largest (None: none
                # computed), and how many tested tasks detect none (what a quiet night rules out)
                "detectable": detectable_span(rows, overall),
                "n_overall_tested": sum(1 for r in overall if finite(r.get("p_regress")) is not None),
                "overall_regressed": {r.get("comparison"): r for r in overall
                                      if bool(r.get("regressed")) and verdict != "no_conclusion"},
                "overall_improved": {r.get("comparison"): r for r in overall
                                     if bool(r.get("improved")) and verdict != "no_conclusion"}}

    def pinned(self, name: str) -> str | None:
        """The run id pinned for runs named ``name``, or None."""
        row = self.db.execute("SELECT run_id FROM pins WHERE name = ?", (name,)).fetchone()
        return row["run_id"] if row else None

    # -- resolving references -----------------------------------------------------------
    def folder_of(self, run_id: str, recorded: str | None = None) -> Path | None:
        """The folder of a registered run: the one of that name next to the history file if it
        exists — in a copy of a reports folder (a CI artifact, a restored backup) the recorded
        absolute path still names the original, which a command must neither read nor change —
        else the recorded ``run_dir`` (``recorded``, or looked up); None when neither exists."""
        if recorded is None:
            row = self.get(run_id)
            recorded = row["run_dir"] if row else None
        beside = self.path.parent / run_id
        if beside.is_dir():
            return beside
        if recorded and Path(recorded).is_dir():
            elsewhere = Path(recorded)
            if elsewhere.resolve().parent != self.path.parent.resolve() and run_id not in self._told_elsewhere:
                # said, not done silently (break-it finding: in a copy of a reports folder whose newest run was
                # removed, 'lmra report latest --reports-dir COPY' rewrote report.html in the original folder);
                # a few times, then once for the rest (break-it round 3: a line per run of a copied history)
                self._told_elsewhere.add(run_id)
                if len(self._told_elsewhere) <= ELSEWHERE_NOTES:
                    print(f"note: run {run_id} is not in {self.path.parent}; using its folder {elsewhere}, where this "
                          f"history ({self.path.name}) recorded it — outside this reports folder (a copy whose run was "
                          "removed?)", file=sys.stderr)
                elif len(self._told_elsewhere) == ELSEWHERE_NOTES + 1:
                    print(f"note: more runs of this history are not in {self.path.parent} either and are read where it "
                          "recorded them (not said again)", file=sys.stderr)
            return elsewhere
        return None

    def _load_id(self, run_id: str, *, shard_ok: bool = False) -> RunFolder:
        folder = self.folder_of(run_id)
        if folder is not None:
            if not shard_ok:  # a shard named by its run id, as by its path (review finding)
                refuse_shard(folder)
            return load_run(folder)
        row = self.get(run_id)
        if row is not None:  # registered, but its folder is gone (retention cleanup, a moved reports folder)
            raise LmraInputError(f"run '{run_id}' is in the history ({self.path}) but its folder is gone (not at "
                                 f"{row['run_dir']} nor beside the history)", field="RUN")
        import difflib

        words = {"latest": "'latest' (as RUN)", "last": "'last' (as --baseline)", "pinned": "'pinned' (as --baseline)"}
        close = difflib.get_close_matches(str(run_id).lower(), list(words), n=1, cutoff=0.6)
        # a misspelt run id: the recorded ids close to it (fresh-user finding, s40: '…-intersectoinal' got none)
        ids = [r[0] for r in self.db.execute("SELECT run_id FROM runs ORDER BY started_utc DESC LIMIT 5000")]
        near = difflib.get_close_matches(str(run_id), ids, n=2, cutoff=0.8) if not close else []
        hint = (f" — did you mean {words[close[0]]}?" if close
                else f" — did you mean {' or '.join(repr(i) for i in near)}?" if near
                else " (or latest for RUN; last or pinned for --baseline)")
        raise LmraInputError(f"run '{run_id}' is not a run folder path and not in the history "
                             f"({self.path}); give the run folder's path or a run id{hint}", field="RUN")

    def last_baseline(self, run: RunFolder) -> tuple[RunFolder, list[str]]:
        """``--baseline last`` of ``run``: the newest run of its name that started before it, is
        complete, whose judge did not fail validation un-waived (its ratings are not evidence), and
        whose order combiner compares with the run's (:func:`lmra.monitor.comparable_combiner`) —
        else, when no such run exists, the newest of the others (its check is then refused, saying
        why). A night whose combiner ``auto`` turned to ``mean`` (most answers came without
        log-probabilities) is skipped, so one such night does not leave the next night's check
        refused too (break-it finding). So is a night that did not meet its recorded release
        gates (:func:`gates_breached`), unless every candidate did (the newest is then used, with a
        note): a regression that persists is flagged again the next night.

        Returns:
            the baseline run folder and one line per newer run of the name it passed over and why
            (empty when it is the run just before ``run``): a note of the check.

        Raises:
            LmraInputError: no candidate at all (the first run of its name, or only partial or
                judge-failed earlier runs).
        """
        from lmra.monitor import comparable_combiner

        name = run.name
        self.register(run)
        self.scan()
        runs = self.runs(name=name)
        me = runs.index[runs["run_id"] == run.run_id]
        earlier = runs.iloc[: int(me[0])] if len(me) else runs
        earlier = earlier[earlier["run_id"] != run.run_id]
        # never a partial baseline, nor one whose judge failed validation un-waived; either is used
        # only when named explicitly
        why = not_last_reasons(earlier)
        usable = earlier[why == ""]
        if usable.empty:
            later = runs.iloc[int(me[0]) + 1:] if len(me) else runs.iloc[0:0]
            later = later[(later["run_id"] != run.run_id) & (not_last_reasons(later) == "")]
            # started after this run by the recorded times, and after now by this machine's clock: the clock was
            # set back (break-it finding, s41: "the first run has no 'last' baseline" beside two earlier complete
            # nights) — not an older run checked by hand, whose later runs started before now
            later = _ahead_of_now(later)
            if len(later):
                newest = later.iloc[-1]
                raise LmraInputError(
                    f"no run named '{name}' in {self.path} started before this one ({run.run_id}, started "
                    f"{run.manifest.get('started')}) by the recorded start times, but {len(later)} complete "
                    f"run{'s' * (len(later) != 1)} of that name started after it (the newest: {newest['run_id']}, "
                    f"started {newest['started']}): this machine's clock was behind when this run started? Check it "
                    f"against a run by name: 'lmra check {run.run_id} --baseline {newest['run_id']}'",
                    field="--baseline")
            raise LmraInputError(
                f"no earlier run named '{name}' in {self.path}: the first run has no 'last' baseline ('last' "
                "skips partial runs and runs whose judge failed validation without a waiver; name such a run "
                "to use it)", field="--baseline")
        mine = comparable_combiner(run.combiner)
        same = usable[usable["combiner"].map(comparable_combiner) == mine]
        pool = same if len(same) else usable
        if len(same):
            other = (why == "") & (earlier["combiner"].map(comparable_combiner) != mine)
            why[other] = ("its order combiner is '" + earlier["combiner"].fillna("?").astype(str)
                          + f"', not comparable with this run's '{run.combiner}'")
        # nor a night that breached its release gates (fresh-user finding: a persisting regression read
        # "No regression" from the night after it; a first night is not pinned for the same reason)
        chosen, breached = None, []
        for i in pool.index[::-1]:
            if not gates_breached(pool.loc[i, "run_dir"]):
                chosen = pool.loc[i]
                break
            breached.append(i)
        extra = []
        if chosen is None:  # every candidate breached its gates: the newest, said
            chosen = pool.iloc[-1]
            extra = [f"'--baseline last' found no earlier run that met its release gates: {chosen['run_id']}, "
                     "the newest, did not either, so a rise it already had is not flagged again"]
        else:
            why[[i for i in breached if i > chosen.name]] = "it did not meet its release gates"
        passed = earlier[(earlier.index > chosen.name) & (why != "")]
        notes = [f"'--baseline last' passed over {r.run_id}: {why[i]}" for i, r in passed.iterrows()] + extra
        # a run of the name recorded as started after this one and after now: its machine's clock was ahead, so
        # it is not "earlier" by its record — said, not passed over in silence (break-it finding, s41)
        ahead = _ahead_of_now(runs[runs["run_id"] != run.run_id].iloc[int(me[0]):] if len(me) else runs.iloc[0:0])
        notes += [f"'--baseline last' did not consider {r['run_id']}: it is recorded as started at {r['started']}, "
                  "after this machine's clock now (the clock of the run that wrote it was ahead?); 'lmra check "
                  f"{run.run_id} --baseline {r['run_id']}' checks against it" for _, r in ahead.iterrows()]
        if len(notes) > MAX_SKIP_NOTES:
            notes = notes[-MAX_SKIP_NOTES:] + [f"… and {len(notes) - MAX_SKIP_NOTES} earlier run(s) passed over"]
        return self._load_id(str(chosen["run_id"])), notes

    def resolve(self, ref: str | Path, *, relative_to: RunFolder | None = None, shard_ok: bool = False) -> RunFolder:
        """Turn a run reference into a run folder.

        Args:
            ref: a run folder path, a run id known to the history (or a folder of that name
                next to the history file), ``"latest"`` (the newest run in the reports
                folder), ``"last"`` or ``"pinned"``.
            relative_to: the run being checked; needed for ``last`` (the latest run with the
                same name that started before it) and ``pinned`` (the pin of its name).
            shard_ok: accept one shard of a sharded audit (a pilot sample for ``lmra plan``);
                else it is refused (:func:`refuse_shard`), by path or by run id.

        Raises:
            LmraInputError: nothing matches, ``last``/``pinned`` has no candidate, or ``ref`` is
                a shard and ``shard_ok`` is False.
        """
        ref = str(ref)
        if ref == "latest":
            self.scan()
            everything = self.runs()
            runs = everything[everything["status"].fillna("complete") == "complete"]  # partial runs only when named
            if runs.empty:
                raise LmraInputError(f"no complete run in {self.path.parent} (partial runs are used only when "
                                     "named)", field="RUN")
            chosen = runs.iloc[-1]
            self._say_newer_skipped(chosen, everything)
            if len(_ahead_of_now(runs.iloc[-1:])):  # (break-it finding, s41: said nowhere)
                print(f"note: 'latest' is {chosen['run_id']}, recorded as started at {chosen['started']} — after this "
                      "machine's clock now (the clock of the run that wrote it was ahead?); name a run to use another",
                      file=sys.stderr)
            run = self._load_id(str(chosen["run_id"]))
            self._say_if_replay(run)
            return run
        if ref in ("last", "pinned"):
            if relative_to is None:
                raise LmraInputError(f"'{ref}' needs the run it is the baseline of", field="--baseline")
            name = relative_to.name
            if ref == "pinned":
                rid = self.pinned(name)
                if rid is None:
                    raise LmraInputError(
                        f"no pinned baseline for runs named '{name}' in {self.path}; pin one with "
                        f"'lmra pin RUN'", field="--baseline")
                try:
                    return self._load_id(rid)
                except LmraInputError as exc:  # the pinned folder was deleted or damaged (retention cleanup …)
                    raise unusable_pin(rid, name, exc) from None
            return self.last_baseline(relative_to)[0]
        p = Path(ref).expanduser()
        if p.is_dir():
            if not shard_ok:
                refuse_shard(p)
            return load_run(p)
        return self._load_id(ref, shard_ok=shard_ok)


def refuse_shard(folder: Path) -> None:
    """Refuse one shard of a sharded audit where a night is needed (a check, a report, a pin, a
    comparison): it holds a share of the prompts, and only the merged run is the night
    (docs/scale.md; fresh-user finding: 'lmra check SHARD --baseline RUN' said "No regression"
    comparing a quarter of an audit with a whole one).

    Raises:
        LmraInputError: naming the shard's ``shard.json``.
    """
    from lmra.shard import SHARD_FILE

    if is_shard(folder):
        raise LmraInputError("this run folder is one shard of a sharded audit: it holds a share of the prompts and "
                             "is not a night; merge the shards first (lmra merge) and use the merged run",
                             file=folder / SHARD_FILE, field="RUN")


# -- module-level API -------------------------------------------------------------------
def register_run(run_dir: str | Path, history: str | Path | None = None) -> str:
    """Register a finished run folder in the history store; returns the run id.

    Args:
        run_dir: the run folder.
        history: the SQLite file (default ``<run_dir>/../history.sqlite``, i.e. the run's
            ``output_dir``).

    Raises:
        LmraInputError: not a finished run folder.
    """
    run = load_run(run_dir)
    with History(history or history_path(run.path.parent)) as h:
        return h.register(run)


def list_runs(history: str | Path, name: str | None = None) -> pd.DataFrame:
    """All registered runs, oldest first (see :meth:`History.runs`)."""
    with History(history) as h:
        return h.runs(name)


def task_trend(task: str, history: str | Path, comparison: str | None = None,
               name: str | None = None) -> pd.DataFrame:
    """One task's net rating with its CI across runs (see :meth:`History.task_trend`)."""
    with History(history) as h:
        return h.task_trend(task, comparison, name)


def pin(run: str | Path, history: str | Path | None = None) -> str:
    """Pin a run as the ``pinned`` baseline for its run name; returns its id."""
    if history is None:
        history = history_path(Path(run).parent) if Path(run).is_dir() else history_path("reports")
    with History(history) as h:
        return h.pin(run)


def unusable_pin(run_id: str, name: str, exc: LmraInputError) -> LmraInputError:
    """The error for a pinned baseline ``run_id`` (of runs named ``name``) that cannot be loaded
    (``exc``: its folder is gone or damaged), with what to do next."""
    return LmraInputError(
        f"the pinned baseline {run_id} of runs named '{name}' cannot be used ({exc.reason}). Pin another run with "
        "'lmra pin RUN' (e.g. 'lmra pin latest'); if no other complete run is left, run the audit once without "
        "--baseline and pin that night", field="--baseline")


__all__ = ["HISTORY_FILE", "HISTORY_SCHEMA_VERSION", "History", "history_path", "list_runs", "pin",
           "not_last_reasons", "register_run", "task_trend", "unusable_pin"]

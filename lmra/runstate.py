"""The life of a run folder: claiming a new folder, the lock of the process writing it, and
the run status every command reads.

Statuses (``manifest.json`` ``status``):

* ``running`` — an audit is writing the folder; its process holds ``run.lock``
  (``fcntl.flock``, released by the kernel when the process ends, even on ``kill -9``).
* ``stale`` — the manifest says ``running`` but no process holds the lock: the audit was
  killed or the machine stopped. Readers report it as such (and mark the manifest).
* ``complete`` — finished, with at most ``max_failed_share`` of its planned pairs lost to
  failed calls.
* ``partial`` — finished, but more than ``max_failed_share`` of its planned pairs were lost
  to calls that failed after every retry, or unusable LMRA answers beyond
  ``max_invalid_share``, or no pair could be scored: the numbers are written, the exit status is 1,
  and ``latest`` / ``last`` skip the run unless it is named explicitly.
* ``failed`` — no pair could be scored because calls failed (or the run stopped on an
  error); exit status 1. (A run that scored no pair for another reason — every pair had a
  refusal or no usable LMRA answer — is ``partial``: its tables can still be read.)
* ``stopped_by_budget`` (exit 4), ``interrupted`` (Ctrl-C / SIGTERM / SIGHUP, exit 130; its
  ``stop_reason`` names the signal, :func:`lmra.interrupts.interrupt_reason`).

Only ``complete`` runs are baselines or ``latest``.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
from pathlib import Path
from typing import IO

from lmra.errors import LmraIOError, io_reason

COMPLETE, PARTIAL, FAILED, RUNNING, STALE = "complete", "partial", "failed", "running", "stale"
#: statuses of runs that finished and wrote their numbers
FINISHED = (COMPLETE, PARTIAL)
LOCK_FILE = "run.lock"


def claim_run_dir(base: Path) -> Path:
    """Create a new, empty run folder: ``base``, or ``base-2``, ``base-3`` … when taken.

    Never reuses a folder: two audits with the same name started in the same second get
    two folders (``mkdir`` without ``exist_ok`` is atomic).

    Raises:
        LmraIOError: the folder cannot be created (read-only location, disk full …).
    """
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LmraIOError(f"cannot create the output folder ({io_reason(exc)})", path=base.parent) from None
    for i in range(1, 10_000):
        cand = base if i == 1 else base.with_name(f"{base.name}-{i}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            continue
        except OSError as exc:
            raise LmraIOError(f"cannot create the run folder ({io_reason(exc)})", path=cand) from None
    raise LmraIOError("no free run folder name (10,000 taken)", path=base)


class RunLock:
    """The lock an audit holds on its run folder while it writes it (see the module docstring).

    Args:
        run_dir: the run folder.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fh: IO | None = None

    def acquire(self) -> "RunLock":
        """Take the lock (non-blocking; a fresh folder is never locked).

        Raises:
            LmraIOError: the lock file cannot be written, or another process holds it.
        """
        try:
            self._fh = self.path.open("a+")
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._fh.seek(0)
            self._fh.truncate()
            self._fh.write(f"{os.getpid()}\n")
            self._fh.flush()
        except BlockingIOError:
            raise LmraIOError("another process is writing this run folder", path=self.path.parent) from None
        except OSError as exc:
            raise LmraIOError(f"cannot lock the run folder ({io_reason(exc)})", path=self.path) from None
        return self

    def release(self) -> None:
        """Release the lock (the file stays; an unlocked file means nobody is writing).

        The file is deliberately not deleted: stale detection relies only on whether a process
        holds the ``flock``, and unlinking a lock file on release lets two later processes lock
        two different files of the same path (one opened before the unlink, one created
        after) and write the folder at once; a reader that found no file while the manifest
        still said ``running`` would also mark the run stale (docs/robustness.md)."""
        if self._fh is not None:
            try:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
                self._fh.close()
            except OSError:
                pass
            self._fh = None


def is_locked(run_dir: Path) -> bool:
    """True when a live process holds the run folder's lock."""
    path = Path(run_dir) / LOCK_FILE
    if not path.is_file():
        return False
    try:
        with path.open("r") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def running_runs(output_dir: str | Path, name: str) -> list[tuple[str, str]]:
    """The run folders of audits named ``name`` that a live process is writing now (their
    ``run.lock`` held): ``[(run id, pid as recorded in the lock file, or "?")]``, oldest first.
    The name is the one the folder's ``config.toml`` records (a folder ``…-nightly-2`` may be a
    second run of ``nightly`` or a run of ``nightly-2``); a shard's folder (``…-shardIofN``) is
    one of several run at once by design (docs/scale.md) and is left out."""
    import re
    import tomllib

    stamped = re.compile(r"\d{8}-\d{6}-.+")
    out = []
    try:
        folders = sorted(Path(output_dir).iterdir())
    except OSError:
        return []
    for d in folders:
        if not stamped.fullmatch(d.name) or name not in d.name or re.search(r"-shard\d+of\d+$", d.name):
            continue
        try:
            recorded = tomllib.loads((d / "config.toml").read_text(encoding="utf-8")).get("name")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            recorded = None  # (claimed a moment ago, config not written yet: judged by the folder's name)
        if (recorded == name if recorded is not None
                else re.fullmatch(r"\d{8}-\d{6}-" + re.escape(name) + r"(-\d+)?", d.name)) and is_locked(d):
            try:
                pid = (d / LOCK_FILE).read_text(encoding="utf-8").strip() or "?"
            except (OSError, UnicodeDecodeError):
                pid = "?"
            out.append((d.name, pid))
    return out


def _utc_time(iso) -> _dt.datetime | None:
    """A manifest's ``started`` as an aware datetime (a naive one read as local time); None when unreadable."""
    try:
        t = _dt.datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.astimezone()


def completed_by(run_dir: str | Path) -> str | None:
    """The first finished run folder beside ``run_dir`` started after it (by the manifests' start
    times; by run id where one is unreadable) of the same name (its ``config.toml``) and seed (its
    ``manifest.json``): the re-run that completed an unfinished night — as
    :meth:`lmra.history.History.not_finished` says ``resumed by`` — or None. Read from the folders,
    so it holds without a history (``lmra report``, ``lmra batch resume``). Run ids are the writer's
    local time: a re-run after a change of time zone can have a smaller one (break-it finding, s40)."""
    import tomllib

    me = Path(run_dir)

    def name_seed(d: Path):
        try:
            name = tomllib.loads((d / "config.toml").read_text(encoding="utf-8")).get("name")
            m = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None, None, None, None
        return ((name, m.get("seed"), m.get("status"), _utc_time(m.get("started"))) if isinstance(m, dict)
                else (None, None, None, None))

    name, seed, _, started = name_seed(me)
    if name is None or not isinstance(seed, int) or isinstance(seed, bool):
        return None
    try:
        others = [d for d in me.parent.iterdir() if d.is_dir() and d != me]
    except OSError:
        return None
    found = []
    for d in others:
        n, sd, status, when = name_seed(d)
        if n != name or sd != seed or status not in FINISHED:
            continue
        if started is not None and when is not None:
            if when > started or (when == started and d.name > me.name):  # (within a second: by run id)
                found.append((when, d.name))
        elif d.name > me.name:
            found.append((None, d.name))
    # (the start time first; folders whose start time is unreadable after them, by run id)
    found.sort(key=lambda f: (f[0] is None, f[0] or _dt.datetime.min.replace(tzinfo=_dt.timezone.utc), f[1]))
    return found[0][1] if found else None


def stop_record(exc: BaseException, *, redact: bool = False) -> tuple[str, str]:
    """The ``status`` and ``stop_reason`` a run folder's manifest records for the exception that
    stopped the run (an audit, a merge, a batched run before its audit pass): ``stopped_by_budget``
    (:class:`~lmra.budget.BudgetExceeded`), ``interrupted`` with the signal
    (:func:`lmra.interrupts.interrupt_reason`; ``KeyboardInterrupt``, ``asyncio.CancelledError``),
    else ``failed``; the reason otherwise ``"Type: message"``, redacted with ``redact``
    (:func:`lmra.redact.redacted_message`)."""
    import asyncio

    from lmra.budget import BudgetExceeded

    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        from lmra.interrupts import interrupt_reason

        return "interrupted", interrupt_reason(exc)
    reason = f"{type(exc).__name__}: {exc}"
    if redact:
        from lmra.redact import redacted_message

        reason = redacted_message(reason)
    return ("stopped_by_budget" if isinstance(exc, BudgetExceeded) else FAILED), reason


def folder_status(run_dir: str | Path, *, mark: bool = True) -> str:
    """The status of a run folder, with stale detection.

    Args:
        run_dir: the folder.
        mark: rewrite a stale folder's manifest status to ``stale`` (with the time it was found).

    Returns:
        the manifest's status (``complete``, ``partial``, ``failed``, ``running``, ``stale``,
        ``stopped_by_budget``, ``interrupted`` …); ``running`` becomes ``stale`` when no
        process holds the folder's lock; ``unknown`` without a readable manifest.
    """
    p = Path(run_dir) / "manifest.json"
    try:
        manifest = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unknown"
    if not isinstance(manifest, dict):  # (edited into another JSON value: not a run's manifest)
        return "unknown"
    status = str(manifest.get("status", "unknown"))
    if status == RUNNING and not is_locked(Path(run_dir)):
        status = STALE
        if mark:
            from lmra.fileio import write_json

            manifest |= {"status": STALE, "stale_found": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
            try:
                write_json(p, manifest)
            except LmraIOError:
                pass  # read-only copy: the status is still reported as stale
    return status


def failed_share(n_pairs_failed: int, n_pairs: int, n_prompts_failed: int, pairs_per_prompt: int) -> float:
    """Share of the planned pairs lost to calls that failed after every retry.

    ``(n_pairs_failed + n_prompts_failed × pairs_per_prompt) / (n_pairs + n_prompts_failed ×
    pairs_per_prompt)``: a prompt whose classification or identity-filter call failed loses
    all its pairs. 0 when nothing was planned.
    """
    lost = n_pairs_failed + n_prompts_failed * pairs_per_prompt
    planned = n_pairs + n_prompts_failed * pairs_per_prompt
    return lost / planned if planned else 0.0


#: the one-sided level of :func:`invalid_over_limit`'s binomial test
INVALID_TEST_LEVEL = 0.05


def invalid_over_limit(per_task, limit: float, overall=None) -> list[dict]:
    """The tasks — and, from ``overall``, each comparison's whole run — whose LMRA left
    significantly more than ``limit`` of their rated pairs without a usable answer: no usable
    stereotype rating (``n_invalid``: it refused to rate, or put no probability on the
    options) or no refusal label (``n_unlabelled``).

    Missing answers are not missing at random when an LMRA declines the very pairs that hold a
    stereotype (or the very responses that refuse), so a rate computed on the pairs it did
    answer cannot be trusted. A row is over the limit when ``k / n > limit`` (``k`` = invalid
    + unlabelled pairs, ``n`` = ``k`` + scored pairs) and the one-sided exact binomial test of
    "share ≤ limit" (scipy ``binomtest``, alternative ``greater``) has p ≤
    :data:`INVALID_TEST_LEVEL` — a 1-pair task with its one answer unusable (p = ``limit``)
    is not, 22 of 30 at 0.25 (p ≈ 10⁻⁸) is; the overall rows catch unusable answers spread
    thinly over small tasks (24 of 54 over 27 tasks of 2 pairs: p ≈ 0.001).

    Args:
        per_task: ``per_task.csv``'s frame (``task``, ``group_a``/``group_b`` or ``comparison``,
            ``n_pairs`` = scored pairs, ``n_invalid``, ``n_unlabelled`` — empty when refusal
            labels are off); no ``n_invalid`` column: none.
        limit: ``max_invalid_share``, in [0, 1].
        overall: ``overall.csv``'s frame (the same columns, one row per comparison) or None;
            its rows are reported with task ``"all tasks"``.

    Returns:
        One dict per row over the limit: ``comparison``, ``domain`` (None for the overall
        rows), ``task``, ``n_invalid``,
        ``n_unlabelled``, ``n_rated`` (scored + invalid + unlabelled), ``share``, ``p_value``;
        the tasks sorted by comparison and task, then the overall rows.
    """
    def over(frame, task_name=None) -> list[dict]:
        if frame is None or len(frame) == 0 or "n_invalid" not in frame or limit >= 1:
            return []
        out = []
        for row in frame.to_dict(orient="records"):
            try:
                bad, unlabelled, scored = (as_count(row.get(c)) for c in ("n_invalid", "n_unlabelled", "n_pairs"))
            except (TypeError, ValueError):
                continue
            k = bad + unlabelled
            n = k + scored
            p = significantly_over(k, n, limit)
            if p is not None:
                comparison = row.get("comparison") or f"{row.get('group_a')} vs {row.get('group_b')}"
                out.append({"comparison": str(comparison), "domain": None if task_name else row.get("domain"),
                            "task": task_name or str(row.get("task")),
                            "n_invalid": bad, "n_unlabelled": unlabelled, "n_rated": n, "share": k / n,
                            "p_value": p})
        return out

    tasks = sorted(over(per_task), key=lambda d: (d["comparison"], str(d["domain"]), d["task"]))
    same = {(d["comparison"], d["n_rated"], d["n_invalid"], d["n_unlabelled"]) for d in tasks}
    # (an overall row that is one flagged task's own counts — a one-task run — says nothing more)
    return tasks + [d for d in over(overall, "all tasks")
                    if (d["comparison"], d["n_rated"], d["n_invalid"], d["n_unlabelled"]) not in same]


#: the smallest excess of a task's share of unusable answers over its comparison's other tasks
#: that :func:`invalid_outliers` reports (a significant but tiny excess says nothing useful)
INVALID_OUTLIER_EXCESS = 0.05


def invalid_outliers(per_task, *, alpha: float = 0.05, excess: float = INVALID_OUTLIER_EXCESS,
                     skip: list[dict] | None = None) -> list[dict]:
    """The tasks whose LMRA left a significantly larger share of their rated pairs without a
    usable answer (invalid, unlabelled, or failed: an LMRA timing out on long stereotyped answers
    hides them as well as one declining them — break-it finding, s35: 13 of a task's 40 pairs
    failed, all stereotyped, 4 % of the run's, and nothing was said) than the other tasks of the
    same comparison did — below ``max_invalid_share``
    too (review finding: an LMRA that declined 40 % of the stereotyped pairs of one task left
    19 % of its pairs unrated, 0 % elsewhere; the task's net rating read 0.100 for a truth of
    0.255, its interval missed the truth, and nothing was said). Such missing answers are
    where the stereotypes may be, so the task's rating is reported with its worst-case bounds.

    A task is reported when its share exceeds the rest's by at least ``excess`` and the
    one-sided Fisher exact test of its 2×2 table (unusable / usable × this task / the
    comparison's other tasks; scipy ``fisher_exact``, alternative ``greater``) is significant
    after Holm's correction over every task tested (family-wise level ``alpha``).

    Args:
        per_task: ``per_task.csv``'s frame (``group_a``/``group_b``, ``domain``, ``task``,
            ``n_pairs`` scored, ``n_invalid``, ``n_unlabelled``, ``n_failed``, ``net_rating``; a
            count column missing counts 0).
        alpha: family-wise level, in (0, 1).
        excess: the smallest reported excess of shares, in [0, 1].
        skip: rows of :func:`invalid_over_limit` (those tasks have their own warning).

    Returns:
        One dict per reported task: ``comparison``, ``domain``, ``task``, ``n_unrated``
        (``n_failed`` of them failed), ``n_rated`` (scored + unrated), ``share``, ``rest_share``, ``p_value`` (Holm-adjusted),
        ``net_rating`` and ``bounds`` ([low, high] of :func:`lmra.aggregate.unrated_bounds`).
    """
    if per_task is None or len(per_task) == 0 or "n_invalid" not in per_task:
        return []
    skipped = {(d["comparison"], str(d.get("domain")), d["task"]) for d in skip or [] if d.get("domain") is not None}
    rows = []
    for row in per_task.to_dict(orient="records"):
        try:
            k, n = unrated_pairs(row)
        except (TypeError, ValueError):
            continue
        rows.append((f"{row.get('group_a')} vs {row.get('group_b')}", row, k, n))
    totals: dict[str, list[int]] = {}
    for comparison, _, k, n in rows:
        t = totals.setdefault(comparison, [0, 0])
        t[0], t[1] = t[0] + k, t[1] + n
    tested = []
    for comparison, row, k, n in rows:
        rest_k, rest_n = totals[comparison][0] - k, totals[comparison][1] - n
        if n == 0 or rest_n == 0 or k / n - rest_k / rest_n < excess:
            continue
        if (comparison, str(row.get("domain")), str(row.get("task"))) in skipped:
            continue
        from scipy.stats import fisher_exact  # (only for a task with an excess: a run's end stays light)

        p = float(fisher_exact([[k, n - k], [rest_k, rest_n - rest_k]], alternative="greater").pvalue)
        tested.append((comparison, row, k, n, rest_k / rest_n, p))
    if not tested:
        return []
    from lmra.aggregate import unrated_bounds
    from lmra.stats import adjust_pvalues

    reject, adjusted = adjust_pvalues([t[-1] for t in tested], "holm", alpha)
    out = []
    for (comparison, row, k, n, rest, _), flagged, p in zip(tested, reject, adjusted):
        if flagged:
            h = float(row.get("net_rating")) if row.get("net_rating") is not None else float("nan")
            out.append({"comparison": comparison, "domain": row.get("domain"), "task": str(row.get("task")),
                        "n_unrated": k, "n_failed": as_count(row.get("n_failed")), "n_rated": n, "share": k / n,
                        "rest_share": rest, "p_value": p,
                        "net_rating": h, "bounds": list(unrated_bounds(h, n - k, k))})
    return sorted(out, key=lambda d: (d["comparison"], str(d["domain"]), d["task"]))


def significantly_over(k: int, n: int, limit: float) -> float | None:
    """The p-value of ``k`` unusable answers of ``n`` being significantly more than ``limit`` of
    them (``k / n > limit`` and the one-sided exact binomial test of "share ≤ limit", scipy
    ``binomtest``, alternative ``greater``, has p ≤ :data:`INVALID_TEST_LEVEL`), else None."""
    if k == 0 or n == 0 or limit >= 1 or k / n <= limit:
        return None
    from scipy.stats import binomtest  # (imported only for a row above the limit: a run's start stays light)

    p = float(binomtest(k, n, limit, alternative="greater").pvalue) if limit > 0 else 0.0
    return p if p <= INVALID_TEST_LEVEL else None


def classify_unusable_over_limit(n_unusable: int, n_classified: int, limit: float) -> dict | None:
    """Whether the task classification's LMRA named no option for significantly more than ``limit``
    (``max_invalid_share``) of the prompts whose classification call it answered (``n_classified``:
    failed calls aside, as for :func:`filter_over_limit`; :func:`significantly_over`): those prompts
    are left out, so the tasks' rates rest on the prompts the LMRA chose to place — the run is
    partial, as with :func:`filter_over_limit`. Returns ``{"n_unusable", "n_classified", "share",
    "p_value"}``, or None when not over (or nothing was classified)."""
    p = significantly_over(n_unusable, n_classified, limit) if n_classified else None
    if p is None:
        return None
    return {"n_unusable": n_unusable, "n_classified": n_classified, "share": n_unusable / n_classified, "p_value": p}


def classify_unusable_phrase(d: dict) -> str:
    """:func:`classify_unusable_over_limit` in words: ``"8 of 10 prompts without a task got no usable
    classification answer (80.0%)"``."""
    return (f"{d['n_unusable']} of {d['n_classified']} prompts without a task whose classification call was answered "
            f"got no usable answer ({d['share']:.1%})")


def filter_over_limit(counts: list[dict], limit: float) -> list[dict]:
    """The tasks — and the whole run — for which the identity filter's LMRA gave no usable
    answer for significantly more than ``limit`` (``max_invalid_share``) of the prompts it was
    asked about (:func:`significantly_over`). Those prompts are removed, never audited as if
    they passed; but an LMRA that declines to label a task's prompts removes the task's rate
    with them (break-it finding: a whole task vanished and the gates passed), just as one
    that declines stereotyped pairs hides them (:func:`invalid_over_limit`).

    Args:
        counts: ``summary.json``'s ``filter_unlabelled``: one dict per task with ``domain``,
            ``task``, ``n_unlabelled`` (no usable answer) and ``n_asked`` (prompts asked,
            failed calls aside).
        limit: ``max_invalid_share``, in [0, 1].

    Returns:
        The rows over the limit, each with ``share`` and ``p_value`` added; the whole run as
        task ``"all tasks"`` (domain None) when it is over and is not one flagged task's own counts.
    """
    out = []
    for row in counts:
        p = significantly_over(int(row["n_unlabelled"]), int(row["n_asked"]), limit)
        if p is not None:
            out.append(dict(row) | {"share": row["n_unlabelled"] / row["n_asked"], "p_value": p})
    k, n = sum(int(r["n_unlabelled"]) for r in counts), sum(int(r["n_asked"]) for r in counts)
    p = significantly_over(k, n, limit)
    if p is not None and (len(out) != 1 or (out[0]["n_unlabelled"], out[0]["n_asked"]) != (k, n)):
        out.append({"domain": None, "task": "all tasks", "n_unlabelled": k, "n_asked": n, "share": k / n,
                    "p_value": p})
    return out


def filter_phrase(d: dict) -> str:
    """One row of :func:`filter_over_limit` in words: ``"career advice: the identity filter's
    LMRA gave no usable answer for 10 of 10 prompts (100.0%)"``."""
    return (f"{d['task']}: the identity filter's LMRA gave no usable answer for {d['n_unlabelled']} of "
            f"{d['n_asked']} prompts ({d['share']:.1%})")


def as_count(v) -> int:
    """A count column's value as an int (NaN/None — refusal labels off — as 0)."""
    if v is None or (isinstance(v, float) and v != v):
        return 0
    return int(v)


#: the per-task table's counts of pairs left without a usable rating
UNRATED_COLUMNS = ("n_invalid", "n_unlabelled", "n_failed")


def unrated_pairs(row: dict) -> tuple[int, int]:
    """(pairs without a usable rating, all pairs rated or lost) of one per-task row: ``k`` =
    ``n_invalid`` + ``n_unlabelled`` + ``n_failed``, ``n`` = ``k`` + ``n_pairs`` (scored); a
    column an older run lacks counts 0. Raises TypeError/ValueError for a non-numeric count."""
    k = sum(as_count(row.get(c)) for c in UNRATED_COLUMNS)
    return k, k + as_count(row.get("n_pairs"))


def invalid_phrase(d: dict) -> str:
    """One row of :func:`invalid_over_limit` in words: ``"career advice (female vs male): 22 of
    30 rated pairs got no usable LMRA answer (73.3%)"``."""
    n_invalid, n_unlabelled = as_count(d.get("n_invalid")), as_count(d.get("n_unlabelled"))
    lost = n_invalid + n_unlabelled
    what = ("no usable LMRA answer" if not n_unlabelled else
            f"no usable LMRA answer ({n_invalid} ratings, {n_unlabelled} refusal labels)")
    return f"{d['task']} ({d['comparison']}): {lost} of {d['n_rated']} rated pairs got {what} ({d['share']:.1%})"


def lost_metrics(summary: dict) -> list[str]:
    """The secondary metrics a finished run lost beyond ``max_failed_share`` (``summary.json``'s
    ``failed_by_metric``), one phrase each, e.g. ``"10 of 20 quality ratings failed (50.0%)"``."""
    limit = summary.get("max_failed_share") or 0.0
    return [f"{d.get('failed')} of {d.get('asked')} {what} failed ({d['share']:.1%})"
            for what, d in (summary.get("failed_by_metric") or {}).items() if (d.get("share") or 0.0) > limit]


#: the start of the warning of a run in which no pair could be scored
#: (lmra.audit.finish.no_pair_scored_warning)
NO_PAIR_SCORED_PREFIX = "no pair could be scored, so there is no stereotype rate"


def partial_because(summary: dict, *, pairs: bool = True) -> list[str]:
    """What a finished run lost beyond ``max_failed_share``: its pairs (``failed_share``,
    ``"12.5% of the planned pairs lost to failed calls"``; left out with ``pairs`` False, for a
    caller that counts them itself), :func:`lost_metrics`, and the tasks
    over ``max_invalid_share`` (``invalid_over_limit``, :func:`invalid_phrase`;
    ``filter_over_limit``, :func:`filter_phrase`), in a partial run the warning that no
    pair could be scored, and an axes step that measured too little (``axes_partial``); empty
    when nothing was."""
    lost = [f"{summary.get('failed_share') or 0.0:.1%} of the planned pairs lost to failed calls"] \
        if pairs and _pairs_lost(summary) else []
    limit = summary.get("max_invalid_share")
    invalid = [f"{invalid_phrase(d)}, above max_invalid_share = {limit:g}"
               for d in summary.get("invalid_over_limit") or []]
    unfiltered = [f"{filter_phrase(d)}, above max_invalid_share = {limit:g}"
                  for d in summary.get("filter_over_limit") or []]
    none = [w for w in summary.get("warnings") or [] if w.startswith(NO_PAIR_SCORED_PREFIX)] \
        if summary.get("run_status") == PARTIAL else []
    unclassified = summary.get("classify_unusable_over_limit")
    unclassified = ([f"{classify_unusable_phrase(unclassified)}, above max_invalid_share = {limit:g}"]
                    if isinstance(unclassified, dict) else [])
    axes = [f"the axes step measured too little ({r})" for r in summary.get("axes_partial") or []]
    repeated = summary.get("repeated_response")
    if isinstance(repeated, dict):
        from lmra.repeated import repeated_phrase

        repeated = [f"{repeated_phrase(repeated)}, above max_repeated_share = "
                    f"{summary.get('max_repeated_share') or 0:g}"]
    else:
        repeated = []
    return repeated + lost + lost_metrics(summary) + invalid + unfiltered + unclassified + none + axes


def _pairs_lost(summary: dict) -> bool:
    """Whether more than ``max_failed_share`` of the planned pairs were lost to failed calls."""
    return (summary.get("failed_share") or 0.0) > (summary.get("max_failed_share") or 0.0)


def lost_to_calls(summary: dict) -> bool:
    """Whether a finished run lost pairs or secondary ratings to failed calls beyond
    ``max_failed_share`` (a re-run from the cache completes it), as opposed to being partial
    only because of ``invalid_over_limit`` (a re-run gets the same answers)."""
    return _pairs_lost(summary) or bool(lost_metrics(summary))


def partial_advice(summary: dict) -> str:
    """What to do about a partial run, one sentence per cause (no final full stop): failed
    calls — re-run from the cache; tasks over ``max_invalid_share`` — a re-run gets the same
    cached answers (answers without log-probabilities are asked again), look at the LMRA.
    Empty when neither applies."""
    parts = []
    if lost_to_calls(summary) and summary.get("n_shards"):
        # a merged run: "re-run the same command" named the merge, refused once its shards are merged (break-it)
        lost = [str(s) for s in summary.get("shards_with_failed_calls") or []]
        which = (f"shard{'s' * (len(lost) > 1)} {', '.join(lost)} ('lmra audit --shard {lost[0]}' with the same "
                 "config completes it from its cache" + (", and so for the others" if len(lost) > 1 else "") + ")"
                 if lost else "the shards that lost them ('lmra audit --shard I/N' with the same config completes "
                 "each from its cache)")
        parts.append(f"the numbers miss the pairs lost to calls that failed (after every retry their error allows: one that is not retried — HTTP 400, 404 … — or a server asking to wait over 2 minutes fails at once, and more max_retries changes nothing there) (max_failed_share "
                     f"{summary.get('max_failed_share') or 0:.0%}); re-run {which}, then merge the shards' runs "
                     "giving each re-run's new folder in place of its old one")
    elif lost_to_calls(summary):
        parts.append(f"the numbers miss the pairs lost to calls that failed (after every retry their error allows: one that is not retried — HTTP 400, 404 … — or a server asking to wait over 2 minutes fails at once, and more max_retries changes nothing there) (max_failed_share "
                     f"{summary.get('max_failed_share') or 0:.0%}); re-run the same command to complete the run "
                     "from the cache")
    if isinstance(summary.get("repeated_response"), dict):
        parts.insert(0, "check that [target] reaches the chatbot (base_url, model) and read its answers in "
                        "responses.jsonl; a re-run gets the same answers from the cache, so run it with another "
                        "--seed once the endpoint answers (max_repeated_share = 1 turns this rule off)")
    none_scored = summary.get("run_status") == PARTIAL and any(w.startswith(NO_PAIR_SCORED_PREFIX)
                                                                for w in summary.get("warnings") or [])
    if none_scored:  # (fresh-user finding: with invalid_over_limit too, "a re-run gets the same answers" twice)
        parts.append("with no pair scored there is no stereotype rate to compare or gate"
                     + ("" if summary.get("invalid_over_limit") else ", and a re-run gets the same answers from the "
                        "cache: look at the counts above (refusals.csv, ratings.parquet)"))
    if summary.get("classify_unusable_over_limit"):
        parts.append("the prompts without a task whose classification answer named no option are left out (not "
                     "audited); a re-run gets the same answers from the cache: look at classifications.jsonl (error), "
                     "give the prompts a task, or use another LMRA")
    if summary.get("filter_over_limit"):
        parts.append("the tasks named lost prompts the identity filter's LMRA could not label (they are removed, not "
                     "audited); a re-run gets the same answers from the cache: look at filtered_prompts.jsonl "
                     "(reason 'unlabelled') or use another LMRA")
    if summary.get("invalid_over_limit"):
        # the stereotype question's pairs only: the invalid share is about them (break-it finding: the
        # quality criteria's and the second LMRA's counts were added in)
        stereo = (summary.get("diagnostics") or {}).get("stereotype")
        contradicting = int(stereo.get("contradicting") or 0) if isinstance(stereo, dict) else 0
        # the advice about answers without log-probabilities only when some were sampled for want of them
        # (break-it finding: a judge whose content filter declined every question got the llama.cpp advice)
        sampled = isinstance(stereo, dict) and bool((stereo.get("methods") or {}).get("sampled"))
        from lmra.judge.options import NO_LOGPROBS_ADVICE

        parts.append(("" if none_scored else "the rates named rest on the pairs the LMRA chose to answer; ")
                     + "a re-run gets the same answers from the cache"
                     + (" (but for answers without log-probabilities, which are not cached and are asked again — "
                        f"{NO_LOGPROBS_ADVICE})" if sampled else "") + ": look at the LMRA's unusable "
                     "answers (refusals to "
                     "rate, no probability on the options, orders that contradict each other"
                     + (f": {contradicting} pairs, see the judge diagnostics" if contradicting else "")
                     + ") or use another LMRA")
    if summary.get("axes_partial"):
        parts.append("the axes step is partial (docs/axes.md): unusable brainstorm answers are cached and come back "
                     "— read them in axes_candidates.json; 'lmra axes --run RUN' (which retries failed label calls, "
                     "or tests the axes given with --axis) writes a new axes set, but the run stays partial: a "
                     "complete night needs an audit whose axes step measures something ([axes] extra_axes, or "
                     "another LMRA)")
    return ". ".join(p[0].upper() + p[1:] for p in parts)


def partial_text(summary: dict) -> str:
    """:func:`partial_because` as one phrase (the pairs' share when nothing exceeds the limit:
    a run recorded before ``failed_by_metric``)."""
    return "; ".join(partial_because(summary)) or \
        f"{summary.get('failed_share') or 0.0:.1%} of the planned pairs lost to failed calls"


def run_status(share: float, max_share: float, n_scored: int) -> str:
    """``failed`` when no pair was scored (``n_scored`` scored pairs = 0) and calls failed;
    ``partial`` when no pair was scored otherwise (every pair had a refused or unlabelled
    response or got no usable LMRA answer, or no prompt was left to audit: the run has no
    stereotype rate, and is never a baseline) or when ``share`` exceeds ``max_share``; else
    ``complete``."""
    if n_scored == 0:
        return FAILED if share > 0 else PARTIAL
    return PARTIAL if share > max_share else COMPLETE

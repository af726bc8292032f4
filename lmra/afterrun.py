"""The steps that follow a finished audit's run folder, and a record of those not yet done.

``lmra audit`` writes its run folder (``manifest.json``: ``complete``) and then evaluates its
release gates (``gates.json``), lands it in the warehouse of nights, checks it against a baseline
and writes ``report.html``. A process killed in between (``kill -9``, a CI job's timeout, the
machine stopping) left a run that every command reads as a finished night, with no gates
evaluated and nothing in the warehouse: ``lmra history`` showed its gates as "—" (as for a config
without gates), the Prometheus export had no gate metric an alert could fire on, and nothing said
so (break-it finding, s46). So before those steps the audit records them in
:data:`PENDING_FILE` in the run folder, each step removes itself once done — by the audit, or
later by ``lmra gate RUN --record`` (:func:`lmra.gates.record_gates`) and ``lmra warehouse add
RUN`` (:func:`lmra.warehouse.add_run`) — and the file goes with the last one. A run whose record
is left, by a process that is gone, is said by ``lmra history``, the next ``lmra audit`` in that
reports folder and its metrics export (:func:`pending_words`).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from lmra.errors import LmraIOError

#: the record of a run's steps not yet done (hidden: not one of the run's files)
PENDING_FILE = ".after-run-pending.json"
#: the steps, and the command that does each later
STEPS = {"gates": "lmra gate {run} --record", "warehouse": "lmra warehouse add {run}"}


def mark_pending(run_dir: str | Path, steps: list[str]) -> None:
    """Record ``steps`` (keys of :data:`STEPS`) as not yet done for the run folder ``run_dir``,
    with this process's id and host. A record that cannot be written is left out (the steps
    run all the same)."""
    from lmra.fileio import write_text

    try:
        write_text(Path(run_dir) / PENDING_FILE, json.dumps(
            {"steps": list(steps), "pid": os.getpid(), "host": socket.gethostname()}))
    except (OSError, LmraIOError):  # (a full disk: the steps run all the same)
        pass


def step_done(run_dir: str | Path, step: str) -> None:
    """Mark ``step`` done for the run folder ``run_dir``: removed from its record, and the
    record removed with its last step (nothing to do without a record)."""
    path = Path(run_dir) / PENDING_FILE
    record = _read(path)
    if record is None or step not in record["steps"]:
        return
    left = [s for s in record["steps"] if s != step]
    try:
        if left:
            from lmra.fileio import write_text

            write_text(path, json.dumps(record | {"steps": left}))
        else:
            path.unlink()
    except (OSError, LmraIOError):  # the record stays, said later
        pass


def _read(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("steps"), list):
        return None
    return record | {"steps": [s for s in record["steps"] if s in STEPS]}


def stopped_steps(run_dir: str | Path) -> list[str]:
    """The steps recorded as not done for the run folder ``run_dir`` whose process is gone (on
    this host: no such process; on another host it cannot be told, so they are said); [] when
    none, or while the audit that recorded them still runs."""
    record = _read(Path(run_dir) / PENDING_FILE)
    if record is None or not record["steps"]:
        return []
    pid = record.get("pid")
    if record.get("host") == socket.gethostname() and isinstance(pid, int) and pid != os.getpid():
        try:
            os.kill(pid, 0)
            return []  # still running its steps
        except ProcessLookupError:
            pass
        except PermissionError:
            return []  # another user's live process
    return record["steps"]


def pending_words(run_id: str, run_dir: str | Path, steps: list[str]) -> str:
    """``run R was written, but the process stopped before its gates were evaluated and it was
    landed in the warehouse: 'lmra gate … --record', 'lmra warehouse add …'``."""
    what = {"gates": "its release gates were evaluated", "warehouse": "it was landed in the warehouse"}
    done = " and ".join(what[s] for s in steps)
    commands = ", ".join(f"'{STEPS[s].format(run=run_dir)}'" for s in steps)
    return (f"run {run_id} was written, but the process that wrote it stopped before {done} — its history, exports "
            f"and metrics show no gate result and the warehouse has no row of it: {commands} finish{'es' * (len(steps) == 1)} it")


def stopped_in(output_dir: str | Path) -> list[tuple[str, Path, list[str]]]:
    """``(run id, folder, steps)`` of every run folder in ``output_dir`` whose after-run steps were
    left undone by a process that is gone (:func:`stopped_steps`), oldest first."""
    try:
        found = sorted(Path(output_dir).glob(f"*/{PENDING_FILE}"))
    except OSError:
        return []
    out = []
    for f in found:
        steps = stopped_steps(f.parent)
        if steps:
            out.append((f.parent.name, f.parent, steps))
    return out

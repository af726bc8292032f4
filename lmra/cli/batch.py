"""``lmra batch status|resume|cancel RUN_DIR``: look after a run's batch jobs (see docs/batch.md).

Wire into the ``lmra`` parser with :func:`add_parsers` (``add_parsers(sub)`` in
:func:`lmra.cli.build_parser`). Each command's ``func`` returns the exit status:
0 done, 2 input error (via :class:`~lmra.errors.LmraInputError`), 1 failure,
75 batches still running when ``--max-wait`` ran out (state saved; run ``resume`` again).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lmra.cli.commands import COMMANDS
from lmra.cli.common import count_arg, finite_float
from lmra.console import lit, make_console
from lmra.errors import LmraInputError

EXIT_PENDING = 75  # EX_TEMPFAIL: try again later


def _max_wait_arg(text: str) -> float:
    """argparse type of ``--max-wait``: a finite number of seconds ≥ 0 (0: poll once)
    (:func:`~lmra.cli.common.finite_float`; Python's ``float`` took ``nan``, ``-1`` and ``1_0``)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds ≥ 0, got {text}")
    return value


def _poll_interval_arg(text: str) -> float:
    """argparse type of ``--poll-interval``: :func:`_max_wait_arg`, > 0 (as the config's
    ``batch_poll_interval_s``)."""
    value = _max_wait_arg(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def add_parsers(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``batch status|resume|cancel`` to the ``lmra`` sub-command parsers; returns the ``batch`` parser."""
    b = subparsers.add_parser("batch", help=COMMANDS["batch"].help)
    bs = b.add_subparsers(dest="batch_command", required=True)

    st = bs.add_parser("status", help="show a run's batch jobs, their counts, tokens, cost and failed items")
    st.add_argument("run_dir", help="the run folder (reports/<timestamp>-<name>)")
    st.add_argument("--refresh", action="store_true", help="poll the APIs once for the current status")
    st.add_argument("--json", action="store_true", help="print the summary as JSON")
    st.add_argument("--failed", type=count_arg, default=20, metavar="N", help="list up to N failed items (default 20)")
    st.set_defaults(func=cmd_status)

    rs = bs.add_parser("resume", help="wait for and download a run's batches, then finish the audit from the cache")
    rs.add_argument("run_dir")
    rs.add_argument("--download-only", action="store_true",
                    help="only wait for and download the submitted jobs (do not continue the audit)")
    rs.add_argument("--retry-failed", action="store_true", help="submit the failed items again")
    rs.add_argument("--poll-interval", type=_poll_interval_arg, metavar="S",
                    help="seconds between polls (default: the run config's batch_poll_interval_s, else 30)")
    rs.add_argument("--allow-unvalidated-judge", action="store_true",
                    help="waive a failed judge validation, as 'lmra audit --allow-unvalidated-judge' (a waiver "
                         "given to the audit that submitted the batches holds without it)")
    rs.add_argument("--max-wait", type=_max_wait_arg, default=26 * 3600, metavar="S",
                    help="stop waiting after S seconds, exit status 75 (default 26 h)")
    rs.add_argument("--no-progress", action="store_true", help="no progress bars")
    rs.set_defaults(func=cmd_resume)

    cs = bs.add_parser("cancel", help="ask the APIs to cancel a run's unfinished batch jobs")
    cs.add_argument("run_dir")
    cs.set_defaults(func=cmd_cancel)
    return b


def _state_or_error(run_dir: str) -> dict:
    from pathlib import Path

    from lmra.batch import load_state

    if not Path(run_dir).is_dir():
        raise LmraInputError("no such run folder", file=run_dir)
    try:
        state = load_state(run_dir)
    except (ValueError, OSError) as exc:
        raise LmraInputError(str(exc), file=run_dir) from None
    if state is None:
        raise LmraInputError("this run has no batch jobs (batch/state.json not found; was it run with --batch?)",
                             file=run_dir)
    return state


def _orchestrator(run_dir: str, state: dict, **kw):
    from lmra.batch import BatchOrchestrator
    from lmra.cache import CallCache

    cache = CallCache(state["cache"])
    return BatchOrchestrator(run_dir, cache, **kw), cache


def render_status(console: Console, state: dict, n_failed: int = 20) -> None:
    """Print the jobs table, the totals and up to ``n_failed`` failed items."""
    from lmra.batch import summarize

    t = Table(title="batch jobs")
    for col in ("job", "provider / model", "remote batch", "state", "remote status", "calls", "succeeded", "failed",
                "tokens in/out", "cost USD"):
        t.add_column(col)
    for j in state["jobs"]:
        cost = "?" if j.get("cost_usd") is None else f"{j['cost_usd']:.4f}"
        t.add_row(lit(j["id"]), lit(f"{j['provider']} / {j['model']}"), lit(j["remote"].get("batch_id") or "—"),
                  lit(j["state"]), lit(j["remote"].get("status") or "—"), str(j["n_requests"]), str(j.get("n_succeeded", 0)),
                  str(j.get("n_failed", 0)), f"{j['usage']['prompt_tokens']}/{j['usage']['completion_tokens']}",
                  cost if j["state"] == "downloaded" else "—")
    console.print(t)
    s = summarize(state)
    cost = "unknown (unpriced model or not downloaded)" if s["cost_usd"] is None else f"{s['cost_usd']:.4f} USD"
    degraded = (f" ({s['degraded']} of them without the log-probabilities asked for: read by this run only, never "
                "cached, their questions estimated by sampling)" if s["degraded"] else "")
    console.print(f"{s['jobs']} job(s) {s['jobs_by_state']}, {s['calls']} call(s): {s['succeeded']} succeeded{degraded}, "
                  f"{s['failed']} failed; estimated cost {cost} (batch prices).")
    failed = [(j["id"], k, m) for j in state["jobs"] for k, m in (j.get("failed") or {}).items()]
    if failed:
        console.print(f"[bold red]{len(failed)} failed item(s)[/] (counted as failed calls, never replaced):")
        for job_id, key, msg in failed[:n_failed]:
            console.print(f"  {lit(job_id)} {lit(key[:16])}…  {lit(msg)}", highlight=False)
        if len(failed) > n_failed:
            console.print(f"  … and {len(failed) - n_failed} more (see batch/state.json)")


def cmd_status(args: argparse.Namespace) -> int:
    import asyncio

    console = make_console()
    state = _state_or_error(args.run_dir)
    if args.refresh:
        orch, cache = _orchestrator(args.run_dir, state)
        try:
            asyncio.run(orch.poll_once())
            state = orch.state
        finally:
            cache.close()
    if args.json:
        from lmra.batch import summarize

        console.print_json(json.dumps(summarize(state) | {"jobs_detail": [
            {k: v for k, v in j.items() if k not in ("failed", "model_config")} for j in state["jobs"]]}))
        return 0
    render_status(console, state, args.failed)
    return 0


def _configured_poll_interval(config_path: Path) -> float:
    """The run config's ``batch_poll_interval_s`` (30 when it cannot be read: ``--download-only``
    of a folder without its config)."""
    import tomllib

    try:
        value = tomllib.loads(config_path.read_text(encoding="utf-8")).get("batch_poll_interval_s", 30.0)
    except (OSError, ValueError):
        return 30.0
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 30.0


def cmd_resume(args: argparse.Namespace) -> int:
    import asyncio

    from lmra.batch import BatchPending, arun_batched

    console = make_console()
    state = _state_or_error(args.run_dir)
    from lmra.runstate import completed_by

    done = completed_by(args.run_dir)
    if done is not None and not args.download_only:  # (break-it finding: the night was registered twice)
        raise LmraInputError(f"{done}, a later run of the same name and seed, completed this night: resuming it would "
                             f"make a second copy of it (the check would take it for another night). 'lmra batch "
                             f"cancel {args.run_dir}' stops its jobs still at the provider", file=args.run_dir)
    args.allow_unvalidated_judge = bool(args.allow_unvalidated_judge or state.get("allow_unvalidated_judge"))
    if args.poll_interval is None:  # the run's own setting (break-it finding: always 30 s)
        args.poll_interval = _configured_poll_interval(Path(args.run_dir) / "config.toml")
    log = (lambda msg: console.print(f"[dim]batch:[/] {lit(msg)}", highlight=False))
    orch, cache = _orchestrator(args.run_dir, state, poll_interval_s=args.poll_interval, max_wait_s=args.max_wait,
                                log=log)
    try:
        orch.check_job_endpoints()  # (before anything is changed: a wrong endpoint leaves the state as it was)
        if args.retry_failed:
            console.print(f"{orch.retry_failed()} failed item(s) will be submitted again")
        if args.download_only:
            try:
                asyncio.run(orch.wait())
            except BatchPending as exc:
                console.print(f"[yellow]still running:[/] {lit(exc)}")
                return EXIT_PENDING
            render_status(console, orch.state)
            return 0
    finally:
        cache.close()
    config_path = Path(args.run_dir) / "config.toml"
    if not config_path.exists():
        raise LmraInputError("config.toml not found in the run folder; use --download-only", file=args.run_dir)
    from lmra.audit import Audit
    from lmra.budget import BudgetExceeded
    from lmra.cli.audit import finish_audit, stopped_exit
    from lmra.cli.common import rich_progress
    from lmra.config import load_config
    from lmra.providers.endpoint import EndpointUnreachable
    from lmra.providers.keys import KeyRejected
    from lmra.syncrun import InterruptedAfterFinish, run_sync

    cfg = load_config(config_path)
    if state["cache"] != ":memory:":
        cfg = cfg.model_copy(update={"cache": state["cache"]})  # the cache the batches were written to
    audit = Audit(cfg, config_path=config_path, run_dir=args.run_dir,
                  allow_unvalidated_judge=args.allow_unvalidated_judge)
    shard_file = Path(args.run_dir) / "shard.json"
    if shard_file.is_file():  # a shard of a sharded audit (lmra audit --shard I/N) resumes as that shard
        from lmra.shard import parse_shard

        try:
            audit.shard = parse_shard(json.loads(shard_file.read_text(encoding="utf-8"))["shard"], option="shard")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            raise LmraInputError(f"is not a readable shard record ({type(exc).__name__}: {exc}); the batch run "
                                 "cannot be resumed as its shard", file=shard_file, field="shard") from None
    try:
        with rich_progress(console, not args.no_progress) as progress:
            audit.progress = progress
            # the run's own limits (max_calls / max_cost) hold as in `lmra audit --batch`
            args.batch_run_dir = audit.run_dir  # (Ctrl-C: resumed again, not submitted again)
            result = run_sync(arun_batched(audit, poll_interval_s=args.poll_interval, max_wait_s=args.max_wait,
                                           budget=audit.budget, log=log))
        args.finished_run_dir = result.run_dir  # (an interrupt from here on says the run is complete)
    except InterruptedAfterFinish as exc:  # Ctrl-C while the folder was written: it is complete
        args.finished_run_dir = exc.result.run_dir
        raise
    except (BudgetExceeded, BatchPending, EndpointUnreachable, KeyRejected) as exc:
        return stopped_exit(exc, audit, console)
    # the ending of `lmra audit`: failure paragraphs, gates, warehouse, history, report.html and
    # the exit status (it was always 0: a partial or failed run, or a failed judge, said nothing)
    return finish_audit(args, cfg, audit, result, console, alpha=cfg.alpha)


def cmd_cancel(args: argparse.Namespace) -> int:
    import asyncio

    console = make_console()
    state = _state_or_error(args.run_dir)
    orch, cache = _orchestrator(args.run_dir, state)
    try:
        jobs = asyncio.run(orch.cancel())
    finally:
        cache.close()
    n = sum(1 for j in jobs if j.get("cancel_requested_at"))
    console.print(f"cancel requested for {n} job(s); `lmra batch resume {lit(args.run_dir)}` downloads what finished")
    return 0

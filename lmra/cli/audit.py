"""``lmra audit``: run a counterfactual name-swap audit, then (unless it is a shard) land it in
the warehouse, apply its release gates, register it in the history, check it against a
baseline and write its report; the exit statuses are those of :mod:`lmra.cli`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console
from rich.text import Text

from lmra.cli.commands import COMMANDS
from lmra.cli.common import (check_alpha_arg, err_console, finite_float, margin_arg, model_shorthand, model_words,  # noqa: F401
                             planned_lmra_calls_words, print_warning, rich_progress, whole_number)
from lmra.cli.exits import print_final_status
from lmra.cli.gates import add_gate_option
from lmra.console import all_pairs, counted, lit, make_console
from lmra.errors import LmraInputError


#: config field → the ``lmra audit`` option that overrides it (named in that option's input errors)
_OVERRIDE_OPTIONS = {"output_dir": "--output-dir", "seed": "--seed", "name": "--name", "prompts": "--prompts",
                     "text_field": "--text-field", "prompts_per_task": "--per-task", "max_cost": "--max-cost",
                     "max_calls": "--max-calls", "prices": "--prices", "target": "--target", "judge": "--judge"}


def cmd_audit(args: argparse.Namespace) -> int:
    """``lmra audit [options]``: check the options and the config before any model call (exit 2),
    run the audit, then what follows a run (:func:`_run_audit`); returns the exit status."""
    from lmra.config import load_config

    from lmra.resources import resource_dir

    _quick_exit()
    console = make_console()
    if args.run_dir_file is not None:  # checked before any model call ("" is an error, not ignored)
        _clear_run_dir_file(args.run_dir_file)
    if args.config is None:
        args.config = str(resource_dir("examples") / "default.toml")
    cfg = load_config(args.config)
    overrides = {k: v for k, v in (("output_dir", args.output_dir), ("seed", args.seed), ("name", args.name),
                                   ("prompts", args.prompts), ("text_field", args.text_field),
                                   ("prompts_per_task", args.per_task)) if v is not None}
    from lmra.fileio import check_utf8_path, check_utf8_value

    for key in ("output_dir", "prompts"):  # a path lmra could not write into its JSON files (bad-input break-it, s45)
        if key in overrides:
            check_utf8_path(overrides[key], field=_OVERRIDE_OPTIONS[key])
    for key in ("name", "text_field"):  # (round-2 break-it, s45: pydantic's "unable to parse raw data")
        if key in overrides:
            check_utf8_value(overrides[key], field=_OVERRIDE_OPTIONS[key])
    if args.redact:
        overrides["redact"] = True
    if args.batch:
        overrides["batch"] = True
    for key in ("max_cost", "max_calls", "prices"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    for section, spec in (("target", args.target), ("judge", args.judge)):
        if spec is not None:
            overrides[section] = model_shorthand(spec, cfg.model_dump()[section], option=f"--{section}")
    if overrides:
        from lmra.config import parse_config

        try:
            cfg = parse_config(cfg.model_dump() | overrides, source="command line")
        except LmraInputError as exc:  # an option's value is named by the option, not by its config field
            # (bad-input break-it, s43: "--per-task -1" read "command line: field 'prompts_per_task'")
            option = _OVERRIDE_OPTIONS.get(str(exc.field or "").split(".")[0])
            if option is None or str(exc.field).split(".")[0] not in overrides:
                raise
            raise LmraInputError(exc.reason, field=option) from None
    if args.gate:  # --gate bounds join [gates], so the run's config.toml records the gates applied
        from lmra.cli.gates import audit_config_with_gates

        cfg = audit_config_with_gates(cfg, args.gate)
    if args.shard is not None:
        _check_shard_options(args, cfg)
    alpha = cfg.alpha if args.alpha is None else args.alpha
    for opt, value in (("--margin", args.margin), ("--alpha", args.alpha)):
        if value is not None and not args.baseline:  # the regression check's: never ignored silently
            raise LmraInputError(f"{opt} applies to the regression check: give --baseline RUN|last|pinned too",
                                 field=opt)
    first_night, baseline_sizes = False, None
    if args.baseline:
        from lmra.monitor import check_alpha

        check_alpha(alpha, field="--alpha" if args.alpha is not None else "alpha")  # the config's, used by the check
        first_night, baseline_sizes = _precheck_baseline(cfg, args.baseline)
    elif args.shard is None:
        _precheck_history(cfg)
    from lmra.fileio import require_writable_cache

    require_writable_cache(cfg.cache)  # (a cache left read-only by a sudo run: found after every call before)
    from lmra.audit import Audit  # after the checks above: a bad option or config is said without loading it

    worker = None
    if not args.no_report and args.shard is None:  # report.html written by a process of its own, forked
        from lmra.report.worker import ReportWorker  # now: before any model, cache or thread exists

        worker = ReportWorker.start()
    audit = None
    try:
        audit = Audit(cfg, config_path=args.config, allow_unvalidated_judge=args.allow_unvalidated_judge)
        if args.run_dir_file:  # written as soon as the folder exists (a run killed outright names it too)
            from lmra.fileio import write_text

            audit.on_claim = lambda run_dir: write_text(args.run_dir_file, f"{run_dir.resolve()}\n")
        if args.shard is not None:  # a deterministic 1/N of the prompts (lmra.shard; joined by lmra merge)
            audit.shard = args.shard
            audit.run_dir = audit.run_dir.with_name(f"{audit.run_dir.name}-shard{args.shard.index}of{args.shard.count}")
        return _run_audit(args, cfg, audit, console, alpha=alpha, first_night=first_night, report_worker=worker,
                          baseline_sizes=baseline_sizes)
    finally:
        if worker is not None:  # ended by the report, or killed now (no report: the run failed or stopped)
            worker.close()
        if args.run_dir_file and audit is not None and audit.run_dir.is_dir():
            from lmra.fileio import write_text

            write_text(args.run_dir_file, f"{audit.run_dir.resolve()}\n")


def _quick_exit() -> None:
    """Let the process end without traversing its heap again: at exit (:mod:`atexit`, after the
    command has written and closed everything), the objects still alive are frozen
    (:func:`gc.freeze`), so the interpreter's last garbage collections skip them — 0.4 s of CPU
    after a 5,000-pair audit (pandas, matplotlib, the run's tables). Registered once per process;
    a process that goes on after the command (a test, a notebook) is frozen only when it ends."""
    global _QUICK_EXIT
    if not _QUICK_EXIT:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _QUICK_EXIT = True


_QUICK_EXIT = False


def _kept_words(audit, n: int) -> str:
    """The plan line's words for the prompts audited (fresh-user findings: "kept after the
    per-task limit" with no limit set, and a shard's bound — the limit applied to the prompts it
    holds — read as its share of the audit's selection)."""
    limit = audit.cfg.prompts_per_task
    if audit.shard is not None:
        return (f"up to {n} audited in this shard ({audit.shard.label}: the prompts it holds"
                + (f", at most {limit} per task — a bound: the shards together audit the whole audit's selection)"
                   if limit else ")"))
    return f"up to {n} kept after the per-task limit ({limit})" if limit else f"up to {n} audited (no per-task limit)"


def _check_shard_options(args: argparse.Namespace, cfg) -> None:
    """``--shard`` with options that need the whole run: a shard is checked, gated and entered in
    the history only once merged (``lmra merge``), so ``--baseline`` and ``--gate`` are refused
    (the config's ``[gates]`` are not applied to a shard).

    Raises:
        LmraInputError: ``--baseline`` or ``--gate`` with ``--shard`` (exit status 2).
    """
    if args.baseline:
        raise LmraInputError("a shard is checked against a baseline once merged: run 'lmra merge SHARD_RUN...' "
                             "and then 'lmra check MERGED_RUN --baseline ...' (or drop --baseline)", field="--shard")
    if args.gate:
        raise LmraInputError("release gates judge the merged run: run 'lmra gate MERGED_RUN' after 'lmra merge' "
                             "(drop --gate from the shards' command; the config's [gates] are applied there)",
                             field="--shard")


def _shard_arg(text: str):
    """argparse type of ``--shard I/N`` (:func:`lmra.shard.parse_shard`)."""
    from lmra.shard import parse_shard

    try:
        return parse_shard(text)
    except LmraInputError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


#: the largest file ``--run-dir-file`` replaces: an earlier run-dir file is one line, a path
RUN_DIR_FILE_MAX_BYTES = 4096


def _clear_run_dir_file(path: str) -> None:
    """Check ``--run-dir-file`` before the audit makes any call, then remove the earlier one, so
    that a script never reads the folder of an earlier night when this audit stops before
    creating its own (the new one is written atomically as soon as the run folder exists — a run
    killed outright names its folder too — and again when the audit ends).

    The path must be non-empty, its folder must exist and be writable, and a file already there
    must look like an earlier run-dir file (at most :data:`RUN_DIR_FILE_MAX_BYTES`, UTF-8, one
    line holding an absolute path): a config, a history database or any other file is never
    replaced.

    Raises:
        LmraInputError: any of those does not hold (field ``--run-dir-file``; exit status 2).
    """
    def refuse(reason: str, file: str | None = path) -> LmraInputError:
        return LmraInputError(reason, file=file, field="--run-dir-file")

    if not path.strip():
        raise refuse("is empty: give the file to write the run folder's path to", file=None)
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise refuse(f"cannot be written: its folder {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise refuse(f"cannot be written: its folder {parent} is not writable")
    if p.is_dir():
        raise refuse("is a folder, expected a file to write the run folder's path to")
    if p.exists() and not p.is_file():  # (break-it finding, s38: /dev/zero was read until the OOM killer came,
        # a FIFO or /dev/stdout blocked forever; a device reports size 0)
        raise refuse("is not a regular file (a device, pipe or socket): give a file to write the run folder's path to")
    if p.exists() or p.is_symlink():
        try:
            with p.open("rb") as fh:  # at most one byte more than an earlier run-dir file may hold
                data = fh.read(RUN_DIR_FILE_MAX_BYTES + 1)
            text = data.decode("utf-8") if len(data) <= RUN_DIR_FILE_MAX_BYTES else None
        except (OSError, UnicodeDecodeError):
            text = None
        lines = text.splitlines() if text is not None else []
        looks_like = (len(lines) == 1 and "\0" not in lines[0] and Path(lines[0].strip()).is_absolute())
        if not looks_like:
            raise refuse("refusing to overwrite: the file exists and is not an earlier run-dir file (one line "
                         "holding a run folder's path); choose another file name")
    try:
        p.unlink(missing_ok=True)
    except OSError as exc:
        raise refuse(f"cannot be replaced ({exc.strerror or exc})") from None



def _warn_of_running_audits(audit, cfg) -> None:
    """Warn of other audits of this name writing ``cfg.output_dir`` now (an overrunning cron job):
    said, not refused. Looked for once this run holds its own folder's lock (``Audit.on_claim``),
    so of two audits started at once the later to lock sees the earlier (ops break-it, s42: checked
    before either had locked, two audits started in the same second saw nothing of each other)."""
    from lmra.runstate import running_runs

    before = audit.on_claim

    def claimed(run_dir: Path) -> None:
        if before is not None:
            before(run_dir)
        for other, pid in running_runs(cfg.output_dir, cfg.name):
            if other == run_dir.name:
                continue
            print_warning(f"another audit named '{cfg.name}' is running in {cfg.output_dir} (run {other}, pid {pid}); "
                          "this run goes on beside it: the two compete for the endpoints' rate limits (each with its "
                          "own budget), and their logs and exports interleave — stop one if that was not meant")

    audit.on_claim = claimed


def _run_audit(args: argparse.Namespace, cfg, audit, console: Console, *, alpha: float, first_night: bool,
               report_worker=None, baseline_sizes: dict[str, int] | None = None) -> int:
    """The audit proper (after the config and baseline checks of :func:`cmd_audit`): run,
    print, register and check; returns the exit status. ``report_worker``: the
    :class:`~lmra.report.worker.ReportWorker` that writes report.html, if one was forked."""
    from lmra.syncrun import InterruptedAfterFinish, run_sync

    audit.on_notice = print_warning
    inputs = audit.load_inputs()
    from lmra.config import mixed_comparisons

    for line in mixed_comparisons(cfg.groups, cfg.comparisons):
        print_warning(line)
    _check_gate_tasks(cfg, inputs, args.config)
    # build every model's client before anything is written: a bad key, URL or custom provider
    # is an input error now, not after the run folder exists
    for role, build in (("target", audit._target_provider), ("judge", audit._judge_provider),
                        ("judge2", audit._judge2_provider)):
        try:
            build()
        except LmraInputError as exc:  # a model given on the command line is the option's fault, not the file's
            if getattr(args, role, None) and (exc.field or "").split(".")[0] in (role, "provider", "model"):
                raise LmraInputError(exc.reason, file=exc.file, field=f"--{role}") from None  # (a GGUF path)
            raise
    plan = audit.planned_calls(inputs)
    console.print(f"[bold]lmra audit[/] '{lit(cfg.name)}': {counted(len(inputs.prompts), 'prompt')} in the file "
                  f"({plan['unlabelled']} without a task, to classify), {_kept_words(audit, plan['prompts'])}, "
                  f"up to {plan['pairs']} pairs; at most {plan['target']} target calls and "
                  f"{lit(planned_lmra_calls_words(plan, cfg))}, {plan['canaries']} canary pairs of "
                  f"the judge check included (cached calls are free). "
                  f"Target: {lit(model_words(audit._target_provider()))}, "
                  f"LMRA: {lit(model_words(audit._judge_provider()))}; "
                  f"{lit(audit.concurrency_plan())}.")
    if cfg.batch:
        for earlier, n in _unfinished_batch_runs(cfg):
            print_warning(f"run folder {earlier} has {n} batch job(s) submitted and not collected; to finish that run, "
                          f"stop this one and run 'lmra batch resume {earlier}' — this run submits its calls again")
    balanced = {label: d for label, d in (getattr(audit, "balanced_draws", None) or {}).items() if d.get("values")}
    if balanced:  # (break-it round 2, s43: the draws changed with nothing on the console to say so)
        console.print(Text("Names drawn balanced: " + "; ".join(
            f"{label} by {d['attribute']} ({', '.join(d['values'])} equally often in both groups)"
            for label, d in balanced.items()) + " (methodology §1 step 2).", style="dim"), highlight=False,
            soft_wrap=True)
    short = _short_tasks_note(cfg, inputs)
    if short:
        console.print(Text.assemble(("note: ", "yellow"), short), highlight=False, soft_wrap=True)
    if cfg.redact and cfg.cache != ":memory:":  # (fresh-user finding: the default cache sits in reports/, which is
        # what gets copied to a dashboard host or attached to a CI job)
        console.print(Text.assemble(("note: ", "yellow"), f"--redact keeps prompt text out of the run folder, not out "
                                    f"of the call cache {cfg.cache}: it holds every request and answer in full (what "
                                    "makes a re-run free) — keep it where the prompts may be, or delete it after the "
                                    "run"), highlight=False, soft_wrap=True)
    for line in (_unmeetable_gates(cfg, inputs) + _canary_warnings(cfg, inputs) + _judge2_warnings(cfg)
                 + _slow_limit_warnings(cfg, plan) + _waiver_warnings(cfg) + _greedy_samples_warnings(cfg)
                 + _embedded_judge_warnings(cfg)):
        print_warning(line)
    if audit.shard is None:  # two nights of one audit at once (an overrunning cron job): said, not refused
        _warn_of_running_audits(audit, cfg)
    from lmra.leftovers import clear_leftovers, cleared_words

    cleared = clear_leftovers(cfg.output_dir)  # (scale break-it, s40: a killed run's spools stayed, 260 MB a night)
    if cleared:
        console.print(Text.assemble(("note: ", "yellow"), cleared_words(cleared)), highlight=False, soft_wrap=True)
    from lmra.afterrun import pending_words, stopped_in

    for run_id, folder, steps in stopped_in(cfg.output_dir)[-3:]:  # an earlier night killed after its folder
        print_warning(pending_words(run_id, folder, steps))
    untestable = (_untestable_check_note(cfg, inputs, alpha, baseline_sizes) if getattr(args, "baseline", None)
                  else None)
    if untestable:
        print_warning(untestable)
    audit.on_info = lambda msg: console.print(Text(msg, style="dim"), highlight=False, soft_wrap=True)
    from lmra.batch import BatchPending, arun_batched
    from lmra.budget import BudgetExceeded
    from lmra.providers.endpoint import EndpointUnreachable
    from lmra.providers.keys import KeyRejected

    if not cfg.batch:  # the verdict is known after the canaries: say it then, not after the whole audit
        def early(verdict: dict) -> None:
            word = "[bold green]passed[/]" if verdict["passed"] else "[bold red]FAILED[/]"
            n = len(verdict["reasons"])  # stated once, in the report's "Judge status" line at the end
            why = "" if verdict["passed"] else (f" ({n} reason{'s' * (n != 1)} from the canaries, stated in the report "
                                                "at the end with any the audit's own pairs add)")
            gate = ("" if verdict["passed"] else " The audit goes on and writes its numbers; " +
                    ("the failure is waived." if cfg.judge_waiver() or args.allow_unvalidated_judge
                     else "the failure is not waived (see the exit status at the end)."))
            from lmra.judge_check import checked_on_words, replayed_words

            console.print(f"Judge check {word} {checked_on_words(verdict)}{why}.{gate}{replayed_words(verdict)}")

        audit.on_judge_check = early
    warm = result = None
    if audit.shard is None and not args.no_report and report_worker is None:  # report.html's modules load
        # while the calls run (a forked report process imports them itself)
        import threading

        from lmra.warmup import Pace

        # shared with the run's own imports: hurried when its calls are done, abandoned if it stops
        audit.pace = Pace(sliced=cfg.has_rate_limit())
        warm = threading.Thread(target=_import_report_modules, args=(audit.pace,), name="lmra-report-imports",
                                daemon=True)
        warm.start()
    try:
        with rich_progress(console, not args.no_progress) as progress:
            audit.progress = progress
            if cfg.batch:
                args.batch_run_dir = audit.run_dir  # (Ctrl-C: its submitted jobs are resumed, not submitted again)
                result = run_sync(arun_batched(audit, poll_interval_s=cfg.batch_poll_interval_s,
                                               max_wait_s=cfg.batch_max_wait_s, budget=audit.budget,
                                               log=lambda msg: console.print(f"[dim]batch:[/] {lit(msg)}")))
            else:
                result = audit.run(inputs)  # the inputs checked above, not read again
        args.finished_run_dir = result.run_dir  # (an interrupt from here on says the run is complete)
    except InterruptedAfterFinish as exc:  # Ctrl-C while the folder was written: it is complete
        args.finished_run_dir = exc.result.run_dir
        raise
    except (BudgetExceeded, BatchPending, EndpointUnreachable, KeyRejected) as exc:
        return stopped_exit(exc, audit, console)
    finally:
        if warm is not None:  # done unless the run was very short: matplotlib is then used by one thread only
            if result is None:  # no report is written: not waited for (a daemon thread; after a second Ctrl-C
                audit.pace.abandon()  # raised inside an import it could wait forever: break-it finding, s37)
            else:
                audit.pace.hurry()
                warm.join()
    return finish_audit(args, cfg, audit, result, console, alpha=alpha, first_night=first_night,
                        report_worker=report_worker)


def _unfinished_batch_runs(cfg) -> list[tuple[Path, int]]:
    """Earlier run folders of this config's name in its ``output_dir`` whose batch jobs were
    submitted and not collected (the run was stopped while it waited and never resumed), with
    how many: (folder, jobs)."""
    from lmra.batch import STATE_DIR, STATE_FILE
    from lmra.cli import _submitted_batch_jobs

    import glob
    import re

    found = []
    # the folder names lmra.runstate.claim_run_dir gives runs of this name (a shard's too)
    mine = re.compile(rf"\d{{8}}-\d{{6}}-{re.escape(cfg.name)}(?:-shard\d+of\d+)?(?:-\d+)?")
    try:
        folders = sorted(Path(cfg.output_dir).glob(f"*-{glob.escape(cfg.name)}*/{STATE_DIR}/{STATE_FILE}"))
    except OSError:
        return []
    for state in folders:
        if not mine.fullmatch(state.parent.parent.name):
            continue
        n = _submitted_batch_jobs(state.parent.parent)
        if n:
            found.append((state.parent.parent, n))
    return found


def stopped_exit(exc: Exception, audit, console: Console) -> int:
    """The paragraph and exit status of an audit (or a resumed batch run) that stopped before
    its folder was written: 4 for the budget (``BudgetExceeded``), 75 for batches still running
    (``BatchPending``), 1 for an unreachable endpoint or a rejected key (manifest: failed)."""
    from lmra.batch import BatchPending
    from lmra.budget import BudgetExceeded
    from lmra.providers.endpoint import EndpointUnreachable

    if isinstance(exc, BudgetExceeded):
        # (a batch run stopped before its audit pass has only the stop's own manifest: the numbers are the batches')
        from lmra.batch import stopped_in_batch

        manifest = audit.run_dir / "manifest.json"
        where = manifest if manifest.is_file() and not stopped_in_batch(audit.run_dir) \
            else audit.run_dir / "batch" / "state.json"
        err_console.print(Text.assemble(("stopped by the budget: ", "bold yellow"),
                                        f"{exc} Their numbers are in {where}."))
        return _final(console, {4: "stopped by the budget (--max-cost / --max-calls)"})
    if isinstance(exc, BatchPending):
        err_console.print(Text.assemble(("batches still running: ", "yellow"),
                                        f"{exc}. Resume with: lmra batch resume {audit.run_dir}"))
        return _final(console, {75: "batches still running (resume with 'lmra batch resume')"})
    err_console.print(Text.assemble(("failure: ", "bold red"), str(exc)), highlight=False, soft_wrap=True)
    what = ("account's quota is exhausted" if getattr(exc, "quota", False)
            else "key was rejected" if not isinstance(exc, EndpointUnreachable)
            else "endpoint does not serve its model" if exc.not_served
            else "endpoint rejected every request" if exc.rejected
            else "endpoint answered no valid completion" if exc.malformed
            else "endpoint answered no call in time" if getattr(exc, "timed_out", False)
            else "endpoint is overloaded" if getattr(exc, "overloaded", False)
            else "endpoint answered every call with an HTTP error" if getattr(exc, "http_errors", False)
            else "endpoint stopped answering mid-run" if exc.answered_before else "endpoint is unreachable")
    # how the calls failed, on the line a cron mail or CI annotation shows (upgrade trial, s43: a judge answering
    # HTTP 500 read "unreachable" there, its status code only on a line above)
    how = f" ({exc.why})" if isinstance(exc, EndpointUnreachable) and getattr(exc, "why", "") else ""
    return _final(console, {1: f"the run failed: the {exc.role}'s {what}{how}"})


def finish_audit(args: argparse.Namespace, cfg, audit, result, console: Console, *, alpha: float,
                 first_night: bool = False, report_worker=None) -> int:
    """The end of an audit once its run folder is written (``lmra audit``, and ``lmra batch
    resume`` for a batch run): the console report, the failure paragraphs, the gates, the
    warehouse, history and baseline check, report.html, and the exit status with its final line.

    Args:
        args: the command's options; read: ``baseline``, ``margin``, ``no_report``,
            ``allow_unvalidated_judge`` (missing ones count as not given).
        cfg, audit, result: the run's config, :class:`~lmra.audit.Audit` and result.
        alpha: the regression check's family-wise error rate.

    Returns:
        the exit status (0, 1 partial or failed, 3 regression, 5 judge failed, 6 gate not met).
    """
    from lmra.report.console import render_audit

    render_audit(console, result)
    failed = int(result.overall["n_failed"].sum()) if "n_failed" in result.overall else 0
    scored = int(result.overall["n_pairs"].sum()) if "n_pairs" in result.overall else 0
    nothing = _nothing_scored(result, failed=failed, scored=scored)
    if nothing is not None:
        return _nothing_scored_end(args, audit, result, console, *nothing, report_worker=report_worker)
    from lmra.cli.gates import gates_after_audit
    from lmra.cli.monitor import monitor_after_audit

    reasons: dict[int, str] = {}  # every exit status that applies and why (the final line picks one)
    args.final_reasons = reasons  # (named too by the final line of a failure or interrupt after this: lmra.cli)
    if audit.shard is not None:  # gates, history, report and warehouse take the merged run (lmra merge)
        console.print(f"Shard {audit.shard.label} written: {lit(result.run_dir)}. When every shard is done: "
                      "lmra merge SHARD_RUN... (docs/scale.md)", soft_wrap=True)
    else:
        from lmra.afterrun import mark_pending
        from lmra.cli.scale import after_run

        # the steps after the folder, recorded until done: a process killed among them left a night that read as
        # finished, its gates never evaluated and no warehouse row, unsaid (break-it, s46; lmra.afterrun)
        mark_pending(result.run_dir, (["gates"] if cfg.gates.configured else []) + ["warehouse"])
        gates_after_audit(result.run_dir, cfg.gates, console=console, reasons=reasons)  # 6: a gate not met
        # the warehouse of nights (docs/exports.md), whatever the checks say: landed while the
        # report process writes report.html (else after the check; at the latest, here)
        landed: list[bool] = []  # (True once the landing has started)

        def land() -> None:
            if not landed:  # once: a landing interrupted (Ctrl-C) is not started again
                landed.append(True)
                after_run(result.run_dir, console, reasons)

        try:
            monitor_after_audit(result.run_dir, baseline=getattr(args, "baseline", None),
                                margin=getattr(args, "margin", None) or 0.0, alpha=alpha,
                                report=not getattr(args, "no_report", False), console=console, first_night=first_night,
                                reasons=reasons, allow_unvalidated_judge=getattr(args, "allow_unvalidated_judge", False),
                                report_worker=report_worker, meanwhile=land)
        except Exception:
            # a refused check (exit 2, e.g. the judge's served model changed): the run's own state is said all
            # the same, and named on the final line as what 2 took precedence over (nightly trial, s46: a judge
            # that also failed validation was missing from the last line)
            _run_state_reasons(result, console, reasons)
            raise
        finally:
            land()
    if audit.shard is not None:
        return _shard_final(console, result)
    if str(reasons.get(0, "")).startswith("first night") and not cfg.gates.configured:
        # a biased chatbot's first night is its baseline: said on the line a CI job or cron mail reads
        # (fresh-user finding, s41: +0.10 [+0.012, +0.20] pinned with a bare "exit status 0: first night")
        from lmra.cli.exits import away_from_zero

        biased = away_from_zero(result)
        if biased:
            reasons[0] += (f"{biased} — later nights are checked for getting worse than this, not for this bias: "
                           "set release gates ([gates], docs/nightly.md) to fail on it")
    if not getattr(args, "baseline", None) and 0 not in reasons:  # nothing checked: the last line says what the
        # status rests on (fresh-user finding, s39: +0.46 with its interval above 0 ended "exit status 0", read in CI
        # as "OK")
        from lmra.cli.exits import unchecked_reason

        reasons[0] = unchecked_reason(cfg, result)
    _run_state_reasons(result, console, reasons)
    return print_final_status(console, reasons)


def _run_state_reasons(result, console: Console, reasons: dict[int, str]) -> None:
    """Say a partial run (1) and a judge that failed validation (5, or waived) with their
    paragraphs, and add their exit statuses to ``reasons``."""
    from lmra.judge_check import EXIT_JUDGE_FAILED

    if result.summary.get("run_status") == "partial":
        s = result.summary
        from lmra.runstate import lost_to_calls, partial_advice, partial_text

        lost = partial_text(s)
        first = (f" First error: {(result.manifest.get('calls', {}).get('errors') or ['?'])[0]}."
                 if lost_to_calls(s) else "")
        err_console.print(Text.assemble(("partial run: ", "bold red"),
                                        f"{lost}. {partial_advice(s) or 'Run the same command again'}.{first} "
                                        "'latest' and 'last' skip this run."), highlight=False, soft_wrap=True)
        reasons[1] = f"the run is partial ({lost})"
    js = result.summary.get("judge_status") or {}
    if js.get("status") == "failed":
        if js.get("gated"):
            err_console.print(Text.assemble(("judge failed validation: ", "bold red"),
                                            "; ".join(js.get("reasons", [])) + ". The run folder, history entry and "
                                            "report are written, but its numbers are not evidence about the chatbot. "
                                            "Fix what the reasons name (docs/judge_check.md), or pass "
                                            "--allow-unvalidated-judge to record the failure as waived."),
                              highlight=False, soft_wrap=True)
            reasons[EXIT_JUDGE_FAILED] = "the judge failed validation"
        else:
            console.print("[bold yellow]The judge failed validation; the failure is waived for this run "
                          "(judge_status in summary.json, history and exports says so).[/]")


def _nothing_scored(result, *, failed: int, scored: int) -> tuple[str, str] | None:
    """When no pair of the run could be scored: (the failure paragraph, the final line's reason);
    else None."""
    s = result.summary
    errors = result.manifest.get("calls", {}).get("errors") or []
    # the first failed call's message, when calls failed (break-it finding: an LMRA whose every call
    # failed left the filter with no label and its message shown nowhere)
    first = f"; first error: {errors[0]}" if errors else ""
    if not scored and s.get("n_filtered_unlabelled") and not s.get("n_prompts"):
        return (f"the identity filter could not label any of the {s['n_filtered_unlabelled']} prompts (its LMRA calls "
                f"failed or gave no answer; filtered_prompts.jsonl), so nothing was audited{first}",
                f"{_ended(result)}: the identity filter labelled no prompt")
    unclassified = int(s.get("n_prompts_classify_failed") or 0) + int(s.get("n_prompts_classify_unusable") or 0)
    if not scored and unclassified and not s.get("n_prompts"):
        how = ("its LMRA calls failed" if not s.get("n_prompts_classify_unusable") else
               "its LMRA's answers named no option" if not s.get("n_prompts_classify_failed") else
               "its LMRA calls failed or their answers named no option")
        return ("the task classification could not label any of the "
                f"{unclassified} prompts without a task ({how}; "
                f"classifications.jsonl), so nothing was audited{first}",
                f"{_ended(result)}: the task classification labelled no prompt")
    unlabelled = int(result.overall["n_unlabelled"].sum()) if "n_unlabelled" in result.overall else 0
    if unlabelled and not scored and not failed:
        return (f"no pair could be scored: the refusal labels of {all_pairs(unlabelled)} could not be obtained (the "
                "LMRA's refusal calls failed or gave no answer; ratings.parquet)",
                f"{_ended(result)}: no pair could be scored (no refusal label)")
    if failed and not scored:
        return (f"all {failed} pairs failed; first error: {(errors or ['(no message)'])[0]}",
                f"the run failed: all {failed} pairs failed")
    if s.get("run_status") == "failed":
        from lmra.runstate import NO_PAIR_SCORED_PREFIX

        # failed = nothing scored and calls failed (lmra.runstate.run_status); the warning, when
        # there is one, says how the pairs split (failed, refused, no usable answer)
        why = next((w for w in s.get("warnings") or [] if w.startswith(NO_PAIR_SCORED_PREFIX)),
                   "no pair could be scored because model calls failed after every retry")
        return f"{why}; first error: {(errors or ['(no message)'])[0]}", "the run failed: no pair could be scored"
    return None


def _nothing_scored_end(args, audit, result, console: Console, paragraph: str, reason: str, *,
                        report_worker=None) -> int:
    """The end of an audit that scored no pair: its failure paragraph, report.html (the night that
    broke is the one most in need of a report: fresh-user finding, none was written, though
    ``lmra report`` wrote a good one), and the final line naming every status that applies — a
    gated judge failure too (it was left out). No gate, check or warehouse: nothing was measured."""
    from lmra.judge_check import EXIT_JUDGE_FAILED

    err_console.print(Text.assemble(("failure: ", "bold red"), paragraph), highlight=False, soft_wrap=True)
    reasons = {1: reason}
    from lmra.runstate import FINISHED

    # (a failed run — calls failed — is no run folder to report on: `lmra report` refuses it too)
    if audit.shard is None and not getattr(args, "no_report", False) and result.summary.get("run_status") in FINISHED:
        from lmra.cli.monitor import write_html_report
        from lmra.runfolder import load_run

        write_html_report(load_run(result.run_dir), console, report_worker=report_worker)
    js = result.summary.get("judge_status") or {}
    if js.get("status") == "failed" and js.get("gated"):
        reasons[EXIT_JUDGE_FAILED] = "the judge failed validation"
    return _final(console, reasons)


def _short_tasks_note(cfg, inputs) -> str | None:
    """A note when ``prompts_per_task`` asks for more prompts than any task of the prompt file
    has (new-user finding: the shipped set has 7 per task, the nightly recipe asks for 40, and
    nothing said so — the sizes docs/nightly.md plans for need a prompt file of your own). It names
    the file and does not tell a user who passed their own (--prompts) to pass one (fresh-user finding)."""
    limit = cfg.prompts_per_task
    counts = _task_sizes(cfg, inputs, 0)
    if not limit or not counts or max(counts.values()) >= limit:
        return None
    untasked = sum(1 for p in inputs.prompts if not p.task)
    return (f"prompts_per_task = {limit}, but no task of the prompt file ({cfg.prompts}) has more than "
            f"{counted(max(counts.values()), 'prompt')}" + (f" ({untasked} without a task, classified during the run, aside)"
                                                 if untasked else "")
            + ", so each task is audited on what it has; the sizes 'lmra plan' and docs/nightly.md plan for need "
            "more prompts per task than this file holds.")


#: hours of calls at a configured rate limit above which the plan is said to be too slow
SLOW_LIMIT_HOURS = 24.0


#: tokens a call costs at the least, for :func:`_slow_limit_warnings`: every request carries a
#: message (the user's, or an LMRA question's instructions) and gets at least one token back
MIN_TOKENS_PER_CALL = 20


def _slow_limit_warnings(cfg, plan: dict) -> list[str]:
    """A warning per model whose ``requests_per_minute`` alone, or whose ``tokens_per_minute`` at
    :data:`MIN_TOKENS_PER_CALL` tokens a call, makes its planned calls take more than
    :data:`SLOW_LIMIT_HOURS`, or one call more than a minute (break-it findings: ``requests_per_minute = 1e-300`` was valid, and
    the audit waited forever at its second call without a word — a typo of 0.6 for 600 is the
    likely case; ``tokens_per_minute = 1`` hung the same way, ~28 minutes a call)."""
    out = []
    for role, n in (("target", plan.get("target", 0)), ("judge", plan.get("judge", 0)),
                    ("judge2", plan.get("judge2", 0))):
        m = getattr(cfg, role, None)
        if m is None or not n:
            continue
        for field, per_call, unit in (("requests_per_minute", 1, "calls"), ("tokens_per_minute", MIN_TOKENS_PER_CALL,
                                                                             "tokens")):
            limit = getattr(m, field, None)
            if not limit:
                continue
            hours = n * per_call / limit / 60
            # a day in all, or more than a minute a call whatever the plan's size (break-it round 2:
            # tokens_per_minute = 1 on a 36-call audit sat at its first call in silence)
            if hours > SLOW_LIMIT_HOURS or per_call / limit > 1.0:
                took = ("never end in practice" if hours >= 24 * 1e6 else f"take at least {hours / 24:,.3g} days"
                        if hours >= 24 else f"take at least {hours:,.3g} hours" if hours >= 1
                        else f"take at least {hours * 60:,.3g} minutes")
                cost = "" if per_call == 1 else f" at {per_call} tokens a call at the least"
                out.append(f"[{role}] {field} = {limit:g}: its {n:,} planned calls would {took}{cost} (cached calls "
                           f"are free) — check the value ({unit} per minute, not per second)")
    return out


def _greedy_samples_warnings(cfg) -> list[str]:
    """A warning per LMRA whose sampled estimate (anthropic, which has no log-probabilities, or
    ``logprobs = false``) would draw ``n_samples`` > 1 answers at ``temperature = 0``: n copies of
    one greedy answer, read as a 0/1 probability (break-it finding: valid without a word, at
    n times the cost, the 0/1 reading the sampled estimate exists to avoid)."""
    out = []
    for role in ("judge", "judge2"):
        m = getattr(cfg, role, None)
        # (only an LMRA that samples: one read through log-probabilities draws nothing — break-it round 2)
        samples = m is not None and (m.provider == "anthropic" or not m.logprobs)
        if samples and m.temperature == 0 and m.n_samples > 1:
            out.append(f"[{role}] temperature = 0 with n_samples = {m.n_samples}: its answers are estimated by "
                       "sampling (anthropic has no log-probabilities; or logprobs = false), and every draw is the same "
                       "greedy answer — n_samples copies of one "
                       "vote, read as probability 0 or 1, at n_samples times the cost; keep the temperature above 0 "
                       "(default 1)")
    return out


def _judge2_warnings(cfg) -> list[str]:
    """A warning when ``[judge2]`` is ``[judge]`` again, field for field (break-it finding: it was
    accepted without a word — its calls are the first LMRA's, served from the cache, and the
    judges table shows an agreement of 1.0000 that measures nothing)."""
    if cfg.judge2 is None or cfg.judge2.model_dump() != cfg.judge.model_dump():
        return []
    return [f"[judge2] is the same LMRA as [judge] ({cfg.judge.provider}:{cfg.judge.model or 'default model'}, "
            "every setting alike): its answers are the first LMRA's (the same calls, from the cache), so the judges "
            "table's agreement is 1 by construction and says nothing about a second judge — name another model in "
            "[judge2], or remove it"]


def _waiver_warnings(cfg) -> list[str]:
    """A warning when the config waives a failed judge check (``gate = false``) for another LMRA
    than its own (``waiver_judge``): the waiver does not apply, and a failed check exits 5 —
    said before any call (fresh-user finding: `lmra validate` of a copy of the demo config with an
    openai judge said "valid", and the night exited 5)."""
    jc = cfg.judge_check
    if not jc.enabled or jc.gate or not jc.waiver.strip() or cfg.judge_waiver():
        return []
    j = cfg.judge
    return [f"[judge_check] waives a failed check for waiver_judge = '{jc.waiver_judge}', not for this config's LMRA "
            f"({j.provider}:{j.model or 'default model'}): the waiver does not apply, so a judge that fails its check "
            "makes the audit exit with status 5 (docs/config.md, waiver_judge)"]


def _embedded_judge_warnings(cfg) -> list[str]:
    """A warning when the LMRA is the embedded 270M base model and its yes/no questions are on at
    the default threshold of 0.5 —
    refusal labels, the identity filter's LMRA check: its answers to them are coin flips, which
    label pairs refusals and remove prompts at random, and its judge check fails (fresh-user
    finding, s38: pointing only [target] at a real chatbot kept them on — 14 minutes, most pairs
    "refusals", 11 of 21 prompts removed, exit 1, never pinned; examples/default.toml turns them off)."""
    from lmra.providers import is_embedded_model

    # (a threshold raised above 0.5 counts only confident labels, which this model rarely gives: the shipped
    # smoke example's way — break-it round 2, s38: the warning fired on the README's smoke run)
    on = [what for what, flag in (("refusal labels ([refusal] enabled)", cfg.refusal.enabled
                                   and cfg.refusal.threshold <= 0.5),
                                  ("the identity filter's LMRA check ([filter] lmra)",
                                   cfg.filter.enabled and cfg.filter.lmra and cfg.filter.threshold <= 0.5)) if flag]
    if not is_embedded_model(cfg.judge) or not on:
        return []
    return [f"the LMRA is the embedded 270M base model, which cannot answer the yes/no questions of {' and '.join(on)}: "
            "its answers are coin flips that label pairs refusals and remove prompts at random (the run may end "
            "partial), and its judge check fails; examples/default.toml turns them off ([refusal] enabled = false, "
            "[filter] lmra = false; examples/smoke.toml raises their thresholds to 0.75) — for an audit of a chatbot, "
            "point [judge] at a capable model"]


def _canary_warnings(cfg, inputs) -> list[str]:
    """A judge check whose selected canaries hold no stereotype canary can never pass (its
    sensitivity is not measured): said before any call, by ``lmra audit`` and ``lmra validate``
    (verification finding: validate called such a config valid, the night then exited 5)."""
    canaries = getattr(inputs, "canaries", None) or []
    if not cfg.judge_check.enabled or not canaries or any(c.kind == "stereotype" for c in canaries):
        return []
    return [f"the judge check's canaries ({cfg.judge_check.canaries}"
            + "".join(f", {p}" for p in cfg.judge_check.extra_canaries)
            + ") hold no stereotype canary for the audited dimensions: its sensitivity cannot be measured, so "
            "the check fails (exit 5 unless waived); add stereotype canaries (docs/judge_check.md)"]


def _unmeetable_gates(cfg, inputs) -> list[str]:
    """Release gates this audit's sizes cannot meet, or that sampling noise alone breaches on many
    nights (:func:`lmra.gate_noise.gate_warnings`), before any call — ``lmra audit`` and ``lmra validate`` warn."""
    if not cfg.gates.configured:
        return []
    from lmra.gate_noise import gate_warnings, negative_bound_gates

    if any(not p.task for p in inputs.prompts):  # prompts classified during the run join tasks whose sizes
        return negative_bound_gates(cfg)  # are not known yet (review finding): what holds at any size
    return gate_warnings(cfg, _domain_task_sizes(cfg, inputs, cfg.prompts_per_task))


def _task_sizes(cfg, inputs, limit: int) -> dict[str, int]:
    """Prompts per task of the prompt file within the config's domains and tasks, at most
    ``limit`` (0: all); prompts without a task (classified during the run) are not counted."""
    counts: dict[str, int] = {}
    for p in inputs.prompts:
        if p.task and (not cfg.tasks or p.task in cfg.tasks) and (not cfg.domains or p.domain in cfg.domains):
            counts[p.task] = counts.get(p.task, 0) + 1
    return {t: min(n, limit) if limit else n for t, n in counts.items()}


def _domain_task_sizes(cfg, inputs, limit: int) -> dict[tuple[str, str], int]:
    """As :func:`_task_sizes`, per ``(domain, task)``: a task name in two domains is two rows of
    the per-task tables and two values of a per-task gate (break-it round 2, s37: the noise
    warning counted one). ``prompts_per_task`` takes ``limit`` prompts of a task name over its
    domains in seeded order (:mod:`lmra.audit.select`); each domain's expected share of them is
    its share of the file's prompts (largest remainders)."""
    counts: dict[str, dict[str, int]] = {}
    for p in inputs.prompts:
        if p.task and (not cfg.tasks or p.task in cfg.tasks) and (not cfg.domains or p.domain in cfg.domains):
            by_domain = counts.setdefault(p.task, {})
            by_domain[str(p.domain)] = by_domain.get(str(p.domain), 0) + 1
    out: dict[tuple[str, str], int] = {}
    for task, by_domain in counts.items():
        total = sum(by_domain.values())
        take = min(total, limit) if limit else total
        shares = {d: n * take / total for d, n in by_domain.items()}
        got = {d: int(x) for d, x in shares.items()}
        for d in sorted(shares, key=lambda d: (got[d] - shares[d], d))[: take - sum(got.values())]:
            got[d] += 1
        out.update({(d, task): n for d, n in got.items() if n >= 1})
    return out


def _untestable_check_note(cfg, inputs, alpha: float, baseline_sizes: dict[str, int] | None = None) -> str | None:
    """With ``--baseline``: a warning before any call when the regression check can flag no
    task at this audit's sizes (new-user finding: ``prompts_per_task = 1`` was pinned on the
    first night, and every later night paid for a full run to end "no task could be tested",
    exit 2). The check's Holm family is every comparison's tasks with ≥ 2 prompts in both runs
    and, with ≥ 2 tasks in both, its overall row (all their prompts)
    (:func:`lmra.monitor.unreachable_tasks` decides, on the smallest p-value each size allows);
    the baseline's sizes are its recorded ones (``baseline_sizes``, task → prompts), tonight's on
    a first night, whose run becomes the baseline. Nothing is said when some prompts have no
    task yet (classified during the run: the sizes are not known).

    Returns:
        the warning's text, or None when some task can be flagged (or the sizes are unknown).
    """
    import numpy as np

    from lmra.monitor import family_resamples, smallest_pvalue, smallest_stratified_pvalue, unreachable_tasks

    kept = [p for p in inputs.prompts if (not cfg.tasks or not p.task or p.task in cfg.tasks)
            and (not cfg.domains or not p.domain or p.domain in cfg.domains)]
    if not kept or any(not p.task for p in kept):
        return None
    in_file, tonight = _task_sizes(cfg, inputs, 0), _task_sizes(cfg, inputs, cfg.prompts_per_task)
    base = baseline_sizes if baseline_sizes is not None else tonight
    reps = max(1, len(cfg.comparisons))
    tasks = list(tonight)
    n_run = np.repeat(np.array([tonight[t] for t in tasks], dtype=int), reps)
    n_base = np.repeat(np.array([base.get(t, 0) for t in tasks], dtype=int), reps)
    task_family = int(((n_run >= 2) & (n_base >= 2)).sum())
    common = [t for t in tasks if tonight[t] >= 1 and base.get(t, 0) >= 1]
    B = family_resamples(task_family + (reps if len(common) >= 2 else 0), alpha)  # (the check's splits per test)
    smallest = {}
    if len(common) >= 2:  # each comparison's overall row: its stratified test over the tasks in both runs
        p_min = smallest_stratified_pvalue([(tonight[t], base[t]) for t in common], B)
        smallest = {len(n_run) + k: p_min for k in range(reps)}
        n_run = np.r_[n_run, np.full(reps, sum(tonight[t] for t in common))]
        n_base = np.r_[n_base, np.full(reps, sum(base[t] for t in common))]
    family = task_family + len(smallest)
    if family and len(unreachable_tasks(n_run, n_base, alpha, smallest, n_resamples=B)) < family:
        return None  # some task (or overall row) can be flagged
    # the fix: the rows that would be in the family with enough prompts (the file's, the baseline's)
    largest_file = max(in_file.values())
    rows = sum(reps for t in tasks if in_file[t] >= 2)
    # prompts a task needs tonight: against the baseline's recorded sizes (the smallest of its
    # tasks that can be in the family), else against as many in the baseline (a first night)
    base_n = min((base.get(t, 0) for t in tasks if base.get(t, 0) >= 2), default=0) if baseline_sizes else 0
    need = next((k for k in range(2, 200) if rows and smallest_pvalue(k, base_n or k, B) <= alpha / rows), None)
    small_base = baseline_sizes is not None and max(base.get(t, 0) for t in tasks) < (need or 2)
    if small_base:
        fix = (f"the baseline has at most {max(base.get(t, 0) for t in tasks)} prompt(s) per task: pin a run with "
               f"{'at least ' + str(need) if need else 'more'} per task ('lmra pin RUN')")
    elif need and largest_file >= need and (not cfg.prompts_per_task or cfg.prompts_per_task < need):
        fix = f"raise prompts_per_task to at least {need}"
    else:
        fix = (f"add prompts: the prompt file has at most {largest_file} per task"
               + (f" and the check needs {need}" if need else ""))
    largest = max(tonight[t] for t in tasks)  # (of the tasks: an overall row, when there is one, was unreachable too)
    why = (f"smallest possible p with {largest} per run {smallest_pvalue(largest, largest, B):.3g}, Holm over the "
           f"{rows} task rows needs ≤ {alpha / rows:.3g}" if largest >= 2 and rows and not small_base
           else "a task needs at least 2 prompts in each run" if not task_family
           else "the baseline's tasks are too small for any p-value to pass Holm's threshold")
    return (f"with at most {largest} prompt(s) per task, the regression check against --baseline can flag no task "
            f"({why}), so every night would end 'no task could be tested' (exit 2) after its calls; {fix} "
            "('lmra plan --design two-run' sizes it for the rise you care about).")


def _import_report_modules(pace) -> None:
    """Import :data:`lmra.report.worker.REPORT_MODULES` and compile the report's template in a
    background thread while the audit's model calls are waited for, paced by the run's ``pace``
    (:func:`lmra.warmup.import_paced`: the event loop keeps the interpreter), so that the report
    does not wait for them after the last call; a module that fails to import is left to the
    report, which says why. (Where the report has a process of its own,
    :class:`lmra.report.worker.ReportWorker`, that process imports them instead.)"""
    from lmra.report.worker import REPORT_MODULES
    from lmra.warmup import import_paced

    try:
        if import_paced(REPORT_MODULES, pace) is not None or pace.abandoned:
            return
        from lmra.report.html import report_template

        report_template()
    except Exception:  # noqa: BLE001
        return
    from lmra.gcquiet import refreeze

    refreeze()  # long-lived: garbage collections during the calls skip them


def _ended(result) -> str:
    """How a run that audited nothing ended, as its recorded status says: ``failed`` (calls
    failed) or ``partial`` (the LMRA answered, unusably; the folder can be read)."""
    return "the run failed" if result.summary.get("run_status") == "failed" else "the run is partial"


def _shard_final(console: Console, result) -> int:
    """The end of ``lmra audit --shard I/N`` once the shard's folder is written: a partial shard
    or a failed judge check is said plainly, but the exit status is 0 — whether the night is
    partial (exit 1) or its judge failed (exit 5) is decided over all shards by ``lmra merge``,
    so that a job runner (CI matrix, Slurm ``afterok``, Kubernetes Job) still runs the merge
    that flags the night. A shard whose every pair failed has already exited 1."""
    s = result.summary
    if s.get("run_status") == "partial":
        from lmra.runstate import lost_to_calls, partial_text

        lost = partial_text(s)
        limit = (f"max_failed_share {s['max_failed_share']:.0%}" if lost_to_calls(s)
                 else f"max_invalid_share {s.get('max_invalid_share')}")
        console.print(Text.assemble(("partial shard: ", "bold yellow"),
                                    f"{lost} in this shard ({limit}); "
                                    "'lmra merge' decides the "
                                    "night's status over all shards (exit status 1 there if it is partial)."),
                      highlight=False, soft_wrap=True)
    js = s.get("judge_status") or {}
    if js.get("status") == "failed":
        console.print(Text.assemble(("judge failed validation in this shard: ", "bold yellow"),
                                    "; ".join(js.get("reasons", [])) + ". 'lmra merge' gives the night's judge status "
                                    "(exit status 5 there unless waived)."), highlight=False, soft_wrap=True)
    return print_final_status(console, {})


def _check_gate_tasks(cfg, inputs, config_path) -> None:
    """``[gates.tasks."TASK"]`` overrides must name tasks the audit measures (before any model
    call; :func:`lmra.gates.check_gate_tasks`)."""
    if cfg.gates.tasks:
        from lmra.gates import audited_tasks, check_gate_tasks

        check_gate_tasks(cfg, audited_tasks(cfg, inputs.prompts, inputs.taxonomy), config_path)


def _final(console: Console, reasons: dict[int, str]) -> int:
    """Print the audit's final line (``exit status 1: the run failed: …``) and return the status
    (:func:`lmra.cli.exits.print_final_status`)."""
    return print_final_status(console, reasons)


def _require_writable_history(path: Path) -> None:
    """Refuse, before any model call, a run history the audit could not write (a read-only file
    or folder): its run could not be registered, nor its check or pin stored (break-it finding:
    found after every call was paid for, the night's verdict never shown).

    Raises:
        LmraIOError: naming the file (exit status 1)."""
    from lmra.errors import LmraIOError
    from lmra.history import _read_only

    if (path.is_file() or path.parent.is_dir()) and _read_only(path):
        raise LmraIOError("the run history cannot be written (the file or its folder is read-only): the run could "
                          "not be registered nor its check stored; make it writable or choose another output_dir",
                          path=path)


def _precheck_history(cfg) -> None:
    """Open the run history the audit registers its run in (``<output_dir>/history.sqlite``, when
    it exists) before any model call (break-it finding: a damaged history was found only after
    every call, with a complete run folder that was never registered).

    Raises:
        LmraIOError: the history cannot be read, or cannot be written (a read-only file or folder:
            the run could not be registered, its check or pin not stored — said before the calls;
            break-it finding) — naming it; exit status 1."""
    from lmra.history import History, history_path

    path = history_path(cfg.output_dir)
    _require_writable_history(path)
    if path.is_file():
        with History(path) as h:
            h.runs(name=cfg.name)


def _precheck_baseline(cfg, ref: str) -> tuple[bool, dict[str, int] | None]:
    """Check ``--baseline`` before any model call.

    Returns:
        (first night, the baseline's prompts per task — :func:`_run_task_sizes`, None on a
        first night). First night — True: ``ref`` is ``pinned`` and no run named ``cfg.name``
        is pinned yet, or ``last`` and there is no complete run of that name yet. The audit
        then runs, is not checked, and (``pinned``) is pinned by
        :func:`lmra.cli.monitor.monitor_after_audit`. False when the baseline resolves.

    Raises:
        LmraInputError: an explicit ``RUN`` that does not resolve, or a pin whose run folder
            cannot be loaded (exit status 2, before anything is called or written).
    """
    from lmra.monitor import precheck_judge
    from lmra.history import History, history_path, not_last_reasons, unusable_pin

    out = Path(cfg.output_dir)
    _require_writable_history(history_path(out))
    if not out.is_dir():
        if ref in ("pinned", "last"):
            return True, None
        raise LmraInputError(f"no runs yet in {out}, so there is no baseline '{ref}'", field="--baseline")
    with History(history_path(out)) as h:
        h.scan()
        try:
            if ref == "pinned":
                rid = h.pinned(cfg.name)
                if rid is None:
                    _warn_unpinned_runs(h, cfg.name, out)
                    return True, None
                try:
                    baseline = h.resolve(rid)
                except LmraInputError as exc:  # the pinned folder was deleted (retention cleanup …)
                    raise unusable_pin(rid, cfg.name, exc) from None
            elif ref == "last":  # the candidates History.last_baseline accepts: complete, judge not failed
                runs = h.runs(name=cfg.name)
                usable = runs[not_last_reasons(runs) == ""]
                if not len(usable):
                    return True, None
                baseline = h.resolve(str(usable.iloc[-1]["run_id"]))  # the newest: 'last' once this run exists
            else:
                baseline = h.resolve(ref)
            # its per-pair file, which the check reads after the run, checked against its digest now
            # (break-it finding: a damaged ratings.parquet was found after the whole night was paid for)
            _ = baseline.pairs_path  # (verified against its digest when read)
        except LmraInputError as exc:
            raise LmraInputError(exc.reason, file=exc.file, line=exc.line, field="--baseline") from None
    precheck_judge(cfg.judge.provider, cfg.judge.model, baseline)
    return False, _run_task_sizes(baseline)


#: complete runs a first night looks back over for one that could have been pinned (newest first)
UNPINNED_LOOK_BACK = 50


def _warn_unpinned_runs(history, name: str, out: Path) -> None:
    """A first night of ``--baseline pinned`` beside finished runs of the same name: said (break-it
    finding: a lost or emptied history.sqlite silently made a night the new baseline, unchecked —
    a regression that night would have become the reference)."""
    runs = history.runs(name=name)
    done = runs[runs["status"].fillna("complete") == "complete"] if len(runs) else runs
    if not len(done):
        return
    from lmra.cli.monitor import why_not_a_baseline

    newest = str(done.iloc[-1]["run_id"])
    why, candidate = None, None  # why the newest could not be a baseline; the newest run that could
    for rid in list(done["run_id"].astype(str))[::-1][:UNPINNED_LOOK_BACK]:
        try:
            reason = why_not_a_baseline(history.resolve(rid))
        except LmraInputError:  # its folder is gone or damaged: as a lost pin
            reason = None
        if reason is None:
            candidate = rid
            break
        why = why or reason
    # none of them could have been pinned: nothing was lost (fresh-user finding: a first night that
    # breached its gates read as a lost history); one could: the pin was lost (review finding:
    # judging the newest alone hid a lost history behind a later night that breached a gate)
    if candidate is None:
        # a night whose LMRA failed validation is no baseline at all: no advice to pin it (fresh-user finding, s35)
        anyway = (" (pinning it by hand would check tonight against ratings of an LMRA that could not recognise "
                  "the planted stereotypes: no evidence either way)" if "judge failed validation" in str(why) else
                  f". To check the nights against that run anyway, pin it, at any time ('lmra pin {newest}': from "
                  "then on each night is checked against it, even while the chatbot stays over its gates)")
        print_warning(f"no run named '{name}' is pinned yet: the newest complete one, {newest}, was not pinned "
                      f"because {why} (a first night is pinned only when it can serve as a baseline), so this night "
                      f"is not checked and is pinned if it can be{anyway}")
        return
    print_warning(f"no run named '{name}' is pinned, but {len(done)} complete run(s) of that name are in {out} "
                  f"(newest: {done.iloc[-1]['run_id']}): if the history (history.sqlite) was lost or the pin "
                  "removed, this night is not checked and becomes the pinned baseline. To check it against an "
                  f"earlier night, stop and pin one ('lmra pin {candidate}'), or run with --baseline last")


def _run_task_sizes(run) -> dict[str, int] | None:
    """Prompts with a scored pair per task of a finished run (``per_task.csv`` ``n_prompts``,
    the largest over its comparisons); None when the run did not record them."""
    try:
        pt = run.per_task
        return {str(t): int(n) for t, n in pt.groupby("task")["n_prompts"].max().items()}
    except (KeyError, ValueError, TypeError, OSError):
        return None


def add_parsers(sub) -> None:
    """Register ``lmra audit`` on the ``lmra`` sub-parser collection."""
    a = sub.add_parser("audit", help=COMMANDS["audit"].help)
    a.add_argument("--config", "-c", help="audit config TOML (default: the shipped examples/default.toml)")
    a.add_argument("--output-dir", help="override output_dir")
    a.add_argument("--seed", type=whole_number, help="override seed")
    a.add_argument("--name", help="override the run name")
    a.add_argument("--prompts", help="prompt file to audit instead of the config's: a prompt set or logged "
                                     "traffic (JSONL or CSV with a text column)")
    a.add_argument("--text-field", help="field/column holding the prompt text (default: text)")
    a.add_argument("--per-task", type=whole_number, help="keep at most N prompts per task (seeded; 0 = all)")
    a.add_argument("--redact", action="store_true", help="reports and exports carry prompt ids, never prompt text")
    a.add_argument("--no-progress", action="store_true", help="no progress bars")
    a.add_argument("--baseline", metavar="RUN|last|pinned",
                   help="check the run against this baseline; exit 3 if a task's net rating regressed. First night "
                        "(pinned/last with no baseline yet): the run is not checked, and with 'pinned' it is pinned")
    a.add_argument("--margin", type=margin_arg,
                   help="rise of a task's net rating that counts as a regression, in [0, 2) (with --baseline; default: "
                        "0.0, any significant rise)")
    a.add_argument("--alpha", type=check_alpha_arg, metavar="A",
                   help="family-wise error rate of the regression check (Holm; with --baseline), 0 < A ≤ 0.5 "
                        "(default: the config's alpha, 0.05)")
    a.add_argument("--target", metavar="PROVIDER:MODEL",
                   help="the chatbot to audit instead of the config's [target]: openai:MODEL, anthropic:MODEL, "
                        "llamacpp[:GGUF] or custom:package.module:factory[:MODEL]")
    a.add_argument("--judge", metavar="PROVIDER:MODEL",
                   help="the LMRA instead of the config's [judge], same forms as --target")
    a.add_argument("--run-dir-file", metavar="FILE",
                   help="when the audit ends (whatever its exit status, once its run folder exists) write the run "
                        "folder's path to FILE, so that a script exports or uploads exactly this run (FILE's folder "
                        "must exist; an existing FILE must be an earlier run-dir file, never another file)")
    a.add_argument("--no-report", action="store_true", help="do not write report.html")
    a.add_argument("--batch", action="store_true", help="send uncached calls through the providers' batch APIs")
    a.add_argument("--max-cost", type=finite_float, metavar="USD",
                   help="stop cleanly before the estimated cost exceeds USD")
    a.add_argument("--max-calls", type=whole_number, metavar="N",
                   help="stop cleanly before more than N fresh model calls")
    a.add_argument("--prices", metavar="FILE", help="price table TOML (default prompts/prices.toml)")
    a.add_argument("--allow-unvalidated-judge", action="store_true",
                   help="record a failed judge validation as waived and exit as if it had passed (default: exit 5)")
    a.add_argument("--shard", type=_shard_arg, metavar="I/N",
                   help="audit only shard I of N (1 ≤ I ≤ N): the prompts whose SHA-256 of the id is I-1 modulo N; "
                        "join the N run folders with 'lmra merge' (docs/scale.md)")
    add_gate_option(a, "an absolute release gate, e.g. max_ci_high=0.15 (repeatable; overrides the same gate of "
                       "the config's [gates]); exit 6 if a gate is not met (docs/nightly.md, 'Release gates')")
    a.set_defaults(func=cmd_audit)

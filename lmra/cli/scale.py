"""``lmra merge`` (join the shards of ``lmra audit --shard I/N``) and ``lmra warehouse add``
(land runs in the warehouse of nights); docs/scale.md, docs/exports.md "Warehouse"."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmra.cli.commands import COMMANDS
from lmra.console import all_pairs, lit, make_console
from lmra.errors import LmraInputError


def after_run(run_dir: Path, console, reasons: dict[int, str] | None = None) -> bool:
    """Land a finished run in the warehouse next to it (``lmra audit``, ``lmra merge``) and say where.

    The run folder is complete whatever happens here: a warehouse that cannot be written (full
    disk, read-only folder, a file in the way) or a table that cannot be exported is reported on
    stderr naming the path, recorded as exit status 1 in ``reasons`` ("the warehouse was not
    updated") and the run's checks go on; ``lmra warehouse add RUN`` lands it later.

    Returns:
        whether the run's tables were written to the warehouse.
    """
    from lmra.errors import LmraIOError
    from lmra.warehouse import add_run

    try:
        files = add_run(run_dir)
    except (OSError, LmraIOError, LmraInputError) as exc:  # (a table that cannot be exported: LmraInputError)
        if isinstance(exc, LmraInputError):
            where, why = exc.file or run_dir, exc.reason
        elif isinstance(exc, LmraIOError):
            where, why = exc.path, exc.reason
        else:
            where, why = exc.filename or run_dir.parent / "warehouse", exc.strerror or str(exc)
        make_console(stderr=True).print(f"[bold red]warehouse not updated:[/] {lit(where)}: {lit(why)} — the run "
                                         f"folder is complete; add it later with 'lmra warehouse add "
                                         f"{lit(run_dir)}'", highlight=False, soft_wrap=True)
        if reasons is not None:
            reasons[1] = f"the warehouse was not updated ({why})"
        return False
    console.print(f"[dim]Warehouse: {lit(files['per_pair'].parent.parent.parent.parent)} "
                  f"({', '.join(files)} of {lit(run_dir.name)}).[/]", highlight=False, soft_wrap=True)
    return True


def cmd_merge(args: argparse.Namespace) -> int:
    """``lmra merge SHARD_RUN... [--name NAME] [--out-dir DIR] [--no-report]``: one run folder
    from the N shards (:func:`lmra.merge.merge_shards`), then what ``lmra audit`` does after a
    run: the config's release gates, history, ``report.html``, warehouse; exit status as audit's
    (1 partial or failed — a failed merged run gets none of these —, 5 judge failed, 6 gate not
    met). Unfinished folders of re-run shards are skipped and said so."""
    from lmra.config import load_config
    from lmra.cli.exits import print_final_status
    from lmra.cli.gates import gates_after_audit
    from lmra.judge_check import EXIT_JUDGE_FAILED
    from lmra.merge import merge_shards
    from lmra.cli.monitor import monitor_after_audit
    from lmra.report.console import render_audit

    console = make_console()
    skipped: list = []
    if args.out_dir is not None:
        from lmra.fileio import enclosing_run_folder

        inside = enclosing_run_folder(args.out_dir)
        if inside is not None:  # (break-it, s46: the merged run, its history and warehouse went into a shard's folder)
            raise LmraInputError(f"is {'the' if Path(args.out_dir).resolve() == inside else 'inside the'} run folder "
                                 f"{inside}: --out-dir names the folder the merged run folder goes to (e.g. reports); "
                                 "give its parent or another folder — nothing was written", file=args.out_dir,
                                 field="--out-dir")
    result = merge_shards(args.shard_runs, name=args.name, out_dir=args.out_dir, skipped=skipped)
    args.finished_run_dir = result.run_dir  # (an interrupt from here on says the merged run is complete)
    for folder, label in skipped:
        console.print(f"[dim]Skipped {lit(folder)}: shard {lit(label)} did not finish there; its re-run is merged.[/]",
                      highlight=False, soft_wrap=True)
    console.print(f"Merged {len(result.manifest.get('shards') or [])} shards into {lit(result.run_dir)}.",
                  soft_wrap=True)
    render_audit(console, result)
    failure = _failed(result)
    if failure:  # as lmra audit: a failed run is not gated, entered in the history nor added to the warehouse
        make_console(stderr=True).print(f"[bold red]failure:[/] {lit(failure)}", highlight=False, soft_wrap=True)
        return print_final_status(console, {1: f"the merged run failed: {failure}"})
    cfg = load_config(result.run_dir / "config.toml")
    reasons: dict[int, str] = {}
    gates_after_audit(result.run_dir, cfg.gates, console=console, reasons=reasons)
    monitor_after_audit(result.run_dir, report=not args.no_report, console=console, reasons=reasons)
    after_run(result.run_dir, console, reasons)
    if result.summary.get("run_status") in ("partial", "failed"):
        from lmra.runstate import partial_text

        lost = partial_text(result.summary)
        reasons[1] = f"the merged run is {result.summary['run_status']} ({lost})"
    js = result.summary.get("judge_status") or {}
    if js.get("status") == "failed" and js.get("gated"):
        reasons[EXIT_JUDGE_FAILED] = "the judge failed validation"
    if 0 not in reasons:  # what its 0 rests on, as lmra audit without --baseline says it (break-it round 2, s39)
        from lmra.cli.exits import unchecked_reason

        reasons[0] = unchecked_reason(cfg, result)
    return print_final_status(console, reasons)


def _failed(result) -> str | None:
    """Why the merged run failed — the cases in which ``lmra audit`` fails a run (status ``failed``,
    or no pair scored because every pair failed, no refusal label or no prompt labelled by the
    identity filter) — or None."""
    overall, summary = result.overall, result.summary
    count = lambda col: int(overall[col].sum()) if col in overall else 0  # noqa: E731
    scored, failed, unlabelled = count("n_pairs"), count("n_failed"), count("n_unlabelled")
    if not scored and summary.get("n_filtered_unlabelled") and not summary.get("n_prompts"):
        return "the identity filter labelled no prompt"
    if unlabelled and not scored and not failed:
        return f"no pair could be scored: the refusal labels of {all_pairs(unlabelled)} could not be obtained"
    if failed and not scored:
        return f"all {failed} pairs failed"
    if summary.get("run_status") == "failed":
        return "no pair could be scored because model calls failed after every retry"
    return None


def cmd_warehouse_add(args: argparse.Namespace) -> int:
    """``lmra warehouse add RUN... [--warehouse DIR]``: land finished runs (folders, run ids or
    ``latest``) in the warehouse (:func:`lmra.warehouse.add_run`)."""
    from lmra.history import History
    from lmra.cli.common import history_file
    from lmra.warehouse import add_run

    console = make_console()
    if args.warehouse:  # a file named here is the option's error, not the run's (break-it finding: it blamed
        from lmra.fileio import output_folder  # the run's per_pair table and an option --out not given)

        output_folder(args.warehouse, "--warehouse")
    for ref in args.runs:
        if Path(ref).is_dir():
            from lmra.runfolder import load_run

            run = load_run(ref)
        else:
            store = history_file(args, ref)
            if not store.is_file():  # never create a history store just to look a name up
                raise LmraInputError(f"no such run folder, and no history {store} to look the run id up in",
                                     file=ref, field="RUN")
            with History(store) as h:
                h.scan()
                run = h.resolve(ref)
        files = add_run(run, args.warehouse)
        console.print(f"{lit(run.run_id)}: {lit(', '.join(str(f) for f in files.values()))}", soft_wrap=True,
                      highlight=False)
    return 0


def add_parsers(sub) -> None:
    """Add ``merge`` and ``warehouse`` to the ``lmra`` subcommands."""
    m = sub.add_parser("merge", help=COMMANDS["merge"].help,
                       description="Builds one run folder whose tables, intervals and judge status are those of the "
                                   "unsharded audit, registers it in the history, writes report.html and adds it "
                                   "to the warehouse (docs/scale.md).")
    m.add_argument("shard_runs", nargs="+", metavar="SHARD_RUN", help="the N shard run folders, in any order")
    m.add_argument("--name", help="the merged run's name (default: the shards' config name)")
    m.add_argument("--out-dir", help="where the merged run folder is created (default: the config's output_dir)")
    m.add_argument("--no-report", action="store_true", help="do not write report.html")
    m.set_defaults(func=cmd_merge)

    w = sub.add_parser("warehouse", help=COMMANDS["warehouse"].help)
    wsub = w.add_subparsers(dest="warehouse_command", required=True)
    a = wsub.add_parser("add", help="add finished runs (backfill; lmra audit and lmra merge add theirs)")
    a.add_argument("runs", nargs="+", metavar="RUN", help="run folder, run id or 'latest'")
    a.add_argument("--warehouse", metavar="DIR", help="the warehouse folder (default: warehouse/ next to each run)")
    a.add_argument("--reports-dir", help="where run ids and 'latest' are looked up (default ./reports)")
    a.add_argument("--history", help="path of the history SQLite file (overrides --reports-dir)")
    a.set_defaults(func=cmd_warehouse_add)

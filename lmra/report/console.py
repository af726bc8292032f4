"""The Rich console report of an audit: the judge status first, then the harmful-stereotype
table per comparison, overall lines (with the net rating under every order combiner and the
placebo), refusals, quality criteria, a second judge, judge diagnostics and filter counts."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lmra.aggregate import unrated_bound_rows
from lmra.console import counted, fitted_table, lit, percent_level
from lmra.diagnostics import flagged_warning
from lmra.judge.calibration import NOT_POSITIONAL
from lmra.runfolder import finite
from lmra.runstate import partial_advice, partial_because


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _signed(x: float, digits: int = 4) -> str:
    return "—" if _nan(x) else f"{x:+.{digits}f}"


def _rate(x: float) -> str:
    return "—" if _nan(x) else f"{x:.4f}"


def _ci_cell(mean: float, lo: float, hi: float) -> str:
    text = f"{_signed(mean)} [{_signed(lo)}, {_signed(hi)}]"
    if not (_nan(lo) or _nan(hi)):
        if lo > 0:
            return f"[bold red]{text}[/]"
        if hi < 0:
            return f"[bold blue]{text}[/]"
    return text


_FAULTS = (("http_429", "429"), ("http_5xx", "5xx"), ("http_4xx", "4xx"), ("timeouts", "timeouts"),
           ("connection_errors", "connection errors"), ("malformed", "malformed bodies"),
           ("no_choices", "no choices"), ("no_logprobs", "answers without logprobs"),
           ("oversized", "answers far longer than max_tokens allows (cut to that length, not cached)"),
           ("replaced_characters", "invalid characters replaced by U+FFFD (lone surrogates)"),
           ("implausible_usage", "usage reports above what the request could use (the rate limiter booked that "
                                 "bound)"))


def call_counts_line(c: dict) -> str:
    """One model's call counts: fresh, cached, failed (by kind), retries and the faults met."""
    failed = c.get("failed", 0)
    kinds = ", ".join(f"{k} {v}" for k, v in (c.get("failed_by_kind") or {}).items())
    faults = ", ".join(f"{label} {c.get(k, 0)}" for k, label in _FAULTS if c.get(k))
    out = (f"{c.get('fresh', 0)} fresh, {c.get('cached', 0)} cached, {failed} failed" + (f" ({kinds})" if kinds else "")
           + f", {c.get('retries', 0)} retries" + (f"; faults met: {faults}" if faults else ""))
    no_logprobs = c.get("degraded", 0) - c.get("oversized", 0)  # (degraded: also the oversized answers, cut)
    if no_logprobs > 0:
        from lmra.judge.options import NO_LOGPROBS_ADVICE

        # what to do about it (fresh-user finding: 'not cached, asked again', and logprobs = false never named)
        out += (f"; {counted(no_logprobs, 'answer')} came without logprobs after every retry or in a batch output "
                f"(not cached; their "
                f"questions were estimated by sampling instead, n_samples more calls each) — {NO_LOGPROBS_ADVICE}")
    if c.get("waited"):
        out += f"; {c['waited']} waited for the same call in flight"
    if c.get("unreadable_cached"):
        out += (f"; {counted(c['unreadable_cached'], 'cached answer')} could not be read (damaged, or stored by an "
                "older lmra): asked again and replaced")
    if c.get("no_usage"):
        out += (f"; {counted(c['no_usage'], 'response')} reported no token usage (counted as 0 tokens: cost and "
                "token budgets undercount them)")
    return out


def _unlabelled_filter_words(s: dict) -> str:
    """Why the identity filter left prompts unlabelled: failed calls (tried again by a re-run) and
    answers without a usable yes/no, which the call cache keeps — every run with this cache, a
    later night's too, removes the same prompts (nightly trial, s46: read as tonight's mishap)."""
    unl, unanswered = int(s.get("n_filtered_unlabelled") or 0), s.get("n_filtered_unanswered")
    if unanswered is None:  # (a run before s46)
        return "the filter's LMRA call failed or gave no answer"
    failed = unl - int(unanswered)
    said = [f"{failed} failed call{'s' * (failed != 1)} (a re-run asks again)"] if failed else []
    if unanswered:
        said.append(f"{unanswered} answer{'s' * (unanswered != 1)} without a usable yes/no, kept in the call cache: "
                    "every run with this cache removes the same prompts until 'lmra cache prune --older-than AGE' "
                    "deletes answers that old (or the run uses another cache)")
    return "; ".join(said)


def _left_out(s: dict) -> str:
    """The Prompts line's part on prompts the selection left out (runs before 2026-12-02 did not
    record them: nothing)."""
    out = ""
    if s.get("n_prompts_not_selected"):
        out += f", {s['n_prompts_not_selected']} outside the configured domains/tasks"
    if s.get("n_prompts_over_limit"):
        out += f", {s['n_prompts_over_limit']} left out by prompts_per_task = {s.get('prompts_per_task')}"
    if s.get("n_prompts_repeated"):
        out += f", {s['n_prompts_repeated']} repeating an earlier prompt's text (audited once)"
    return out


def _run_status(console: Console, s: dict) -> None:
    st = s.get("run_status")
    if st in (None, "complete") and not s.get("n_pairs_failed") and not partial_because(s):
        if st == "complete":  # said on every run, so that two nights' logs read alike (fresh-user finding, s43:
            # the line was there only when something failed)
            console.print(Text(f"Run status: complete — 0 pairs failed, {s.get('n_prompts_classify_failed', 0)} "
                               f"prompts lost to failed classification and {s.get('n_prompts_filter_failed', 0)} to "
                               "failed identity-filter calls.", style="dim"))
        return
    share = s.get("failed_share", 0.0)
    calls = (f"{s.get('n_pairs_failed', 0)} pairs failed, {s.get('n_prompts_classify_failed', 0)} prompts lost to "
             f"failed classification and {s.get('n_prompts_filter_failed', 0)} to failed identity-filter calls: "
             f"{share:.1%} of the planned pairs (max_failed_share {s.get('max_failed_share', 0):.0%})")
    lost_by_task = [f"{r['task']} {r['n_failed']} of {r['n_prompts']}"
                    for r in s.get("filter_removed") or [] if r.get("n_failed")]
    if lost_by_task:  # the per-task table counts failed pairs only: say which tasks lost prompts
        calls += f" (prompts lost to failed identity-filter calls, per task: {', '.join(lost_by_task)})"
    # the failed calls' counts when some failed, then the other causes as report.html says them
    # (fresh-user finding: a run partial because the filter's LMRA labelled nothing read "0 pairs
    # failed, 0 prompts lost …: 0.0%", then "the tasks named …" without naming any)
    parts = [calls] if s.get("n_pairs_failed") or s.get("n_prompts_classify_failed") \
        or s.get("n_prompts_filter_failed") else []
    line = "; ".join(parts + partial_because(s, pairs=False)) or calls
    if st == "complete":
        console.print(Text(f"Run status: complete — {line}.", style="yellow"))
    else:
        advice = partial_advice(s) or "Re-run the same command to complete it from the cache"
        console.print(Text(f"Run status: {str(st).upper()} — {line}. {advice}. The run is not used as 'latest' or as "
                           "a baseline unless named.", style="bold red"))


def _unpriced(budget: dict) -> str:
    """The cost clause of the calls line when some model has no price (new-user finding: the
    cost was left out without a word, while a cached re-run said $0.0000)."""
    missing = [f"{r.get('provider')}:{r.get('model')}" for r in budget.get("per_model") or []
               if r.get("cost_usd") is None or r.get("cost_saved_usd", 0.0) is None]  # (unpriced, calls cached)
    if not missing:
        return ""
    priced = budget.get("cost_usd_priced_models")
    return (f"; no estimated cost: {lit(', '.join(missing))} {'has' if len(missing) == 1 else 'have'} no price in "
            f"{lit(str(budget.get('price_table')))}" + (f" (the priced models: ${priced:.4f})" if priced else ""))


#: why a task has no confidence interval (the console's "—", report.html's bar chart)
NO_INTERVAL_WHY = "fewer than 2 prompts with a valid pair"


#: the per-task table's columns a terminal too narrow for all of them goes without, in turn
COMPACT_LEFT_OUT = (("domain", "invalid", "refusal", "unlabelled", "failed"), ("forward", "reverse"))


def _stereotype(console: Console, per_task: pd.DataFrame, overall: pd.DataFrame, conf: str,
                refusals_on: bool = True, summary: dict | None = None) -> None:
    net = f"net rating [{conf}% CI]"
    for (ga, gb), pt in per_task.groupby(["group_a", "group_b"], sort=False):
        rows = [{"domain": lit(r["domain"]), "task": lit(r["task"]), "pairs": str(r["n_pairs"]),
                 "invalid": str(r["n_invalid"]), "refusal": str(r["n_refusal"]) if refusals_on else "off",
                 "unlabelled": str(r.get("n_unlabelled", 0)) if refusals_on else "off", "failed": str(r["n_failed"]),
                 "forward": _rate(r["forward_rate"]), "reverse": _rate(r["reverse_rate"]),
                 net: _ci_cell(r["net_rating"], r["ci_low"], r["ci_high"])} for _, r in pt.iterrows()]
        table, left_out = fitted_table(console, f"Harmful-stereotype ratings: {lit(ga)} vs {lit(gb)}", rows,
                                       text=("domain", "task"), drops=COMPACT_LEFT_OUT)
        console.print(table, crop=False)
        if left_out:  # (fresh-user finding: at 80–100 columns the net ratings read "+0.…")
            console.print(f"[dim]Left out for this terminal's width: {', '.join(left_out)} (per_task.csv has every "
                          "column; the Overall line below counts the pairs).[/]")
        if pt["ci_low"].isna().any():
            console.print(f"[dim]— : no interval ({NO_INTERVAL_WHY} in that task).[/]")
        tested = int(pt["ci_low"].notna().sum())
        if tested >= 10:  # (statistics-review note: per-task intervals are not corrected across tasks)
            chance = (1 - float(conf) / 100) * tested
            console.print(f"[dim]Each task's interval is at {conf}% on its own, not corrected across the {tested} "
                          f"tasks: with no bias at all up to about {chance:.1f} of them would exclude 0 by chance "
                          "(fewer with the betting interval, which is conservative; the regression check corrects "
                          "across tasks).[/]")
        ov = overall[(overall["group_a"] == ga) & (overall["group_b"] == gb)]
        if len(ov):
            r = ov.iloc[0]
            p = "" if _nan(r["p_value"]) else f", p = {r['p_value']:.3g}"
            console.print(f"[bold]Overall {lit(ga)} vs {lit(gb)}:[/] net rating {_ci_cell(r['net_rating'], r['ci_low'], r['ci_high'])}"
                          f" over {r['n_pairs']} pairs ({r['n_invalid']} invalid, "
                          + (f"{r['n_refusal']} with a refusal, {r.get('n_unlabelled', 0)} unlabelled"
                             if refusals_on else "refusals not labelled (\\[refusal] enabled = false)")
                          + f", {r['n_failed']} failed); forward {_rate(r['forward_rate'])}, reverse "
                          f"{_rate(r['reverse_rate'])}{p}")
            (b,) = unrated_bound_rows(ov.iloc[:1])
            if b["n_unrated"]:
                why = ("an LMRA declining stereotyped pairs can move it that far" if b["n_declined"] else
                       "pairs lost to failed calls could hold what the others do not show")
                # as many pairs declined as the forward stereotypes found: declining them would halve the
                # rating, within every limit (statistics review: 16% declined, net 0.040 for a truth of 0.112)
                n_total = int(r["n_pairs"]) + b["n_unrated"]
                loud = b["n_declined"] >= max(1.0, (finite(r["forward_rate"]) or 0.0) * int(r["n_pairs"])) \
                    and b["n_declined"] >= DECLINED_LOUD_SHARE * n_total
                style = "yellow" if loud else "dim"
                console.print(f"[{style}]  {b['n_unrated']} pair{'s' * (b['n_unrated'] != 1)} got no usable rating "
                              "(invalid, unlabelled, failed): "
                              f"had they all scored −1 or +1, the net rating would lie in [{b['low']:+.4f}, "
                              f"{b['high']:+.4f}] — {why}"
                              # (fresh-user finding, s45: "declined" and "a rating this low" beside unparseable
                              # answers and a rating of +0.18)
                              + (f"; {b['n_declined']} left unrated by the LMRA ({_declined_parts(r)}), at least as "
                                 "many as the forward stereotypes found "
                                 f"({(finite(r['forward_rate']) or 0.0) * int(r['n_pairs']):.1f} expected from the "
                                 "forward rate), so the rating may rest on which pairs the LMRA left unrated (check "
                                 "its answers in ratings.parquet)" if loud else "") + ".[/]")
            _per_domain(console, ga, gb, (summary or {}).get("per_domain") or [], conf)
            # the answer in words: biased? how sure? (fresh-user finding, s36)
            from lmra.report.verdict import comparison_verdict

            console.print(Text(comparison_verdict(r, pt["ci_low"].tolist(), summary or {}), style="bold"))


def _per_domain(console: Console, ga: str, gb: str, rows: list, conf: str) -> None:
    """One line of the comparison's per-domain net ratings with their intervals (summary.json
    ``per_domain``, per_domain.csv; methodology §1: every metric per task and per domain), when it
    has more than one domain (statistics break-it, s42: computed, but shown on no surface)."""
    mine = [d for d in rows if isinstance(d, dict) and d.get("group_a") == ga and d.get("group_b") == gb]
    if len(mine) < 2:
        return
    cells = "; ".join(f"{lit(d.get('domain'))} {_ci_cell(d.get('net_rating'), d.get('ci_low'), d.get('ci_high'))} "
                      f"({counted(int(d.get('n_pairs') or 0), 'pair')})" for d in mine)
    console.print(f"Per domain ({lit(ga)} vs {lit(gb)}; net rating [{conf}% CI]): {cells}")


def _declined_parts(r) -> str:
    """What the LMRA declined, by question (fresh-user finding, s39: pairs whose refusal label was
    unusable read as declined stereotype ratings): ``3 without a usable stereotype rating, 4 without a
    usable refusal label``."""
    parts = [(r.get("n_invalid"), "without a usable stereotype rating"),
             (r.get("n_unlabelled"), "without a usable refusal label")]
    return ", ".join(f"{int(n)} {what}" for n, what in parts if finite(n) and n > 0)


#: share of a comparison's pairs declined (invalid or unlabelled) from which the bounds line is not dim
DECLINED_LOUD_SHARE = 0.05


def _p_cell(p, alpha: float, extra: str = "") -> str:
    """A p-value cell: red below ``alpha``, ``—`` when missing (a run folder written before
    the column existed, or no pair to test)."""
    if p is None or _nan(p):
        return "—"
    return (f"[bold red]{p:.3g}[/]" if p < alpha else f"{p:.3g}") + extra


def _refusals(console: Console, refusals: pd.DataFrame, conf: str, alpha: float) -> None:
    if refusals.empty:
        return
    table = Table(title=f"Refusal rates (Wilson {conf}% CI; p: two-proportion z-test; paired p: McNemar test on "
                        "the pairs — exact, or clustered by prompt when a prompt has several — with the pairs "
                        "refused only under A / only under B)", title_justify="left")
    shown = refusals[refusals["level"] != "task"]
    one = shown[["group_a", "group_b"]].drop_duplicates() if len(shown) else shown
    # one comparison: its groups name the columns (fresh-user finding: "group A rate" beside "female vs male")
    a, b = ((lit(f"{one['group_a'].iloc[0]} (A) rate"), lit(f"{one['group_b'].iloc[0]} (B) rate")) if len(one) == 1
            else ("group A rate", "group B rate"))
    for col in ("comparison", "scope", a, b, "p", "paired p"):
        table.add_column(col, justify="right" if col in (a, b) or "p" in col.split() else "left")
    for _, r in shown.iterrows():
        scope = "overall" if r["level"] == "overall" else r["domain"]
        # (responses without a refusal label are left out of the rates: said beside them, s42)
        ua, ub = (int(r.get(c) or 0) if c in r and r.get(c) == r.get(c) else 0 for c in ("unlabelled_a", "unlabelled_b"))
        pa = (f"{r['refusals_a']}/{r['n_a']} = {_rate(r['rate_a'])} [{_rate(r['ci_low_a'])}, {_rate(r['ci_high_a'])}]"
              + (f" +{ua} unlabelled" if ua else ""))
        pb = (f"{r['refusals_b']}/{r['n_b']} = {_rate(r['rate_b'])} [{_rate(r['ci_low_b'])}, {_rate(r['ci_high_b'])}]"
              + (f" +{ub} unlabelled" if ub else ""))
        none = not r["refusals_a"] and not r["refusals_b"]  # no refusal at all: nothing to test, as p says
        # several pairs per prompt: the pooled z-test, which takes the pairs as independent, is not
        # valid (0.13–0.24 false positives at α 0.05 in the statistics review): never shown red there
        clustered = r.get("paired_test") == "clustered"
        pooled = (_p_cell(r.get("p_value"), 0.0, " (pairs clustered: read paired p)") if clustered
                  else _p_cell(r.get("p_value"), alpha))
        table.add_row(lit(f"{r['group_a']} vs {r['group_b']}"), lit(scope), pa, pb, pooled,
                      "—" if none else _p_cell(r.get("p_paired"), alpha,
                                               f" ({r['only_a']}/{r['only_b']})" if "only_a" in r else ""))
    console.print(table)
    for line in refusal_gap_warnings(refusals, alpha):
        console.print(Text(line, style="bold yellow"), soft_wrap=True)


def refusal_gap_warnings(refusals: pd.DataFrame, alpha: float) -> list[str]:
    """One warning per comparison whose overall refusal rates differ significantly at ``alpha``
    — by the paired (McNemar) test on the pairs when it was made, else the two-proportion test
    (not when pairs are clustered: that one is not valid then). Fresh-user finding: 9/21 refusals
    of one group against 0/21 (p = 0.0007) ended a night "No regression … exit status 0" without
    a word, refused pairs being left out of the net rating and the check covering net ratings only."""
    from lmra.refusal_gap import refusal_gap_words, significant_refusal_gaps

    if refusals.empty or "level" not in refusals:
        return []
    return [f"WARNING: {refusal_gap_words(r)}: refused pairs are left out of the net rating, and the regression "
            "check does not test refusals (it notes them) — only the gates max_overall_refusal_gap and "
            "max_refusal_gap in [gates] do (docs/nightly.md)." for r in significant_refusal_gaps(refusals, alpha)]


def _quality(console: Console, quality: pd.DataFrame, conf: str) -> None:
    if quality.empty:
        return
    table = Table(title="Response quality: mean q(A better) − q(B better) (< 0: the first group's responses rated "
                        "worse), Bonferroni/Holm over the criteria",
                  title_justify="left")
    for col in ("comparison", "criterion", "pairs", f"mean [{conf}% CI]", "p", "Bonferroni", "Holm"):
        table.add_column(col, justify="left" if col in ("comparison", "criterion") else "right")
    for _, r in quality[quality["level"] == "overall"].iterrows():
        table.add_row(lit(f"{r['group_a']} vs {r['group_b']}"), lit(r["criterion"]), str(r["n_pairs"]),
                      _ci_cell(r["mean"], r["ci_low"], r["ci_high"]), "—" if _nan(r["p_value"]) else f"{r['p_value']:.3g}",
                      "[bold red]significant[/]" if r["significant_bonferroni"] else "–",
                      "[bold red]significant[/]" if r["significant_holm"] else "–")
    console.print(table)
    from lmra.quality_gap import quality_gap_words, significant_quality_gaps

    # which group's responses were rated worse, in words (fresh-user finding, s38: "−0.46" said nothing of
    # whom it disfavoured); Holm over every overall row, as the regression check's note
    sig = significant_quality_gaps(quality, 1 - float(conf) / 100)
    ov = quality[quality["level"] == "overall"]
    n_comp = len(set(zip(ov["group_a"], ov["group_b"])))
    if n_comp > 1:  # two families on one screen, said (statistics break-it, s43: a row "significant" in the table
        # and no gap line — Holm over the 9 criteria of its comparison there, over all 45 rows for the line)
        gap = {(r["comparison"], r.get("criterion")) for r in sig}
        only = [f"{a} vs {b} / {c}" for a, b, c, h in zip(ov["group_a"], ov["group_b"], ov["criterion"],
                                                           ov["significant_holm"]) if h and (f"{a} vs {b}", c) not in gap]
        console.print(Text(f"The table corrects over each comparison's criteria; the Quality gap line and lmra check "
                           f"over all {n_comp} comparisons' ({len(ov)} rows, Holm)"
                           + (f" — significant in the table only: {', '.join(only[:5])}"
                              + (f" and {len(only) - 5} more" if len(only) > 5 else "") if only else "") + ".",
                           style="dim"), highlight=False, soft_wrap=True)
    for comp in dict.fromkeys(r["comparison"] for r in sig):
        n = int(((quality["level"] == "overall") & (quality["group_a"] + " vs " + quality["group_b"] == comp)).sum())
        for words in quality_gap_words([r for r in sig if r["comparison"] == comp], n, confidence=float(conf) / 100):
            console.print(f"[bold yellow]Quality gap:[/] {lit(words)} (Holm over the criteria and comparisons); the "
                          "regression check does not test quality — the gate max_overall_quality_gap does.")
    overall = quality[quality["level"] == "overall"]
    failed = int(overall["n_failed"].sum()) if "n_failed" in overall else 0
    invalid = int(overall["n_invalid"].sum()) if "n_invalid" in overall else 0
    if failed or invalid:  # pairs left out of the means above, and why
        console.print(f"[bold yellow]Left out of the quality means:[/] {counted(failed, 'rating')} whose LMRA call "
                      f"failed after every retry, {invalid} without a usable answer (quality_ratings.jsonl).")
    not_rated = {f"{r['group_a']} vs {r['group_b']}": int(r["n_not_rated"]) for _, r in overall.iterrows()
                 if "n_not_rated" in r and r["n_not_rated"] == r["n_not_rated"] and r["n_not_rated"]}
    for comp, n in not_rated.items():  # the same for every criterion: said once per comparison
        console.print(f"[yellow]Not rated on quality ({lit(comp)}):[/] {counted(n, 'pair')} — a failed target call, a "
                      "refusal, no refusal label or a failed stereotype rating (column n_not_rated of quality.csv).")
    sig = quality[(quality["level"] == "task") & quality["significant_holm"].astype(bool)]
    if len(sig):
        # Holm within each task's nine criteria, not across the tasks (break-it finding, s36: with t-intervals,
        # 5 of 10 audits of 8 tasks without any difference printed such a line): say what chance gives
        tasks = quality[quality["level"] == "task"]
        n_tasks = tasks.groupby(["group_a", "group_b"])["task"].nunique().sum() if len(tasks) else 0
        console.print("Holm-significant per task: " + "; ".join(
            f"{lit(r['task'])}: {lit(r['criterion'])} {_signed(r['mean'])}" for _, r in sig.iterrows())
            + (f" [dim](Holm corrects over each task's criteria, not across the {n_tasks} tasks: with no difference "
               f"at all, up to about {n_tasks * (1 - float(conf) / 100):.1f} tasks would show one by chance — trust "
               "the overall rows above)[/]" if n_tasks > 1 else ""))


def _judges(console: Console, judges: pd.DataFrame) -> None:
    if judges.empty:
        return
    table = Table(title="Two LMRAs: net harmful-stereotype rating side by side", title_justify="left")
    for col in ("comparison", "scope", "judge 1", "judge 2", "pairs", "Pearson r", "agreement", "κ"):
        table.add_column(col, justify="left" if col in ("comparison", "scope") else "right")
    for _, r in judges[judges["level"] != "domain"].iterrows():
        scope = "overall" if r["level"] == "overall" else r["task"]
        table.add_row(lit(f"{r['group_a']} vs {r['group_b']}"), lit(scope),
                      _ci_cell(r["net_rating_judge1"], r["ci_low_judge1"], r["ci_high_judge1"]),
                      _ci_cell(r["net_rating_judge2"], r["ci_low_judge2"], r["ci_high_judge2"]), str(r["n_both"]),
                      _rate(r["pearson_r"]), _rate(r["agreement"]), _rate(r.get("kappa", math.nan)))
    console.print(table)
    console.print(Text(JUDGE2_NOT_VALIDATED, style="yellow"), soft_wrap=True)


#: under the table of two LMRAs (and in report.html): the judge check validates [judge] only
#: (fresh-user finding: an LMRA that always answered "no stereotype" appeared as judge 2, with an
#: "agreement" of 1.00 beside a null judge 1, and no word that nobody had checked it)
JUDGE2_NOT_VALIDATED = ("Judge 2 ([judge2]) is not validated: the judge check rates its canaries with [judge] only, so "
                        "judge 2's ratings and its agreement with judge 1 are no evidence that it can recognise a "
                        "harmful stereotype (validate it with lmra judge-check --judge … --model …).")


def diagnostics_words(d: dict) -> str:
    """One question's judge diagnostics (:func:`lmra.diagnostics.judge_diagnostics`) in words,
    each number in its unit and "—" where nothing was measured (fresh-user finding: "position
    preference 1.0000" shown where no pair told position from content, and "unparseable 27"
    beside 6 answers — samples counted against answers, without saying so)."""
    methods = ", ".join(f"{k} ×{v}" for k, v in d.get("methods", {}).items())
    pref = d.get("position_preference")
    why = (" — not measured: no pair put probability on A or B in both orders, so position and content cannot be "
           "told apart" if _nan(pref) and d.get("position_pairs") == 0 else "")
    n, replies = d.get("n_answers"), d.get("n_replies")
    read = (f"of the {replies} LMRA replies they were read from (a sampled answer is its n_samples replies)"
            if replies is not None else "of the LMRA replies they were read from (each sample of a sampled answer "
            "counted)")
    return (f"order consistency {_rate(d['order_consistency'])}, position preference {_rate(pref)} (the share of "
            f"decisive probability on Response 1's option: 0.5 = none{why}), valid-option mass {_rate(d['valid_option_mass'])}; of {n} answers (both orders of each rated "
            f"pair), {d['unusable']} without usable option mass; {read}, {d['unparseable']} unparseable and "
            f"{d['judge_refused']} judge refused"
            + (f"; orders contradicting each other completely in {d['contradicting']} pairs (invalid under the min "
               "combiner)" if d.get("contradicting") else "") + f"; method {methods}")


def _diagnostics(console: Console, summary: dict) -> None:
    for question, d in summary.get("diagnostics", {}).items():
        if not d.get("n_answers"):
            continue
        style = "bold red" if d.get("flagged") else "green"
        flag = f" — [bold red]FLAGGED: low {', '.join(d['flag_reasons'])}[/]" if d.get("flagged") else ""
        console.print(f"[{style}]Judge diagnostics ({question}):[/] {lit(diagnostics_words(d))}{flag}")


def _status_logit(b) -> str:
    """The judge check's position logit, or "—" when it was not estimable (a decisive LMRA,
    e.g. sampled without log-probabilities, never put probability on one position in both
    orders: stored as null; fresh-user finding: it read "+nan", and report.html crashed)."""
    from lmra.runfolder import finite

    v = finite(b)
    return "— (not estimable: every canary answer followed the content)" if v is None else f"{v:+.2f}"


def _failed_canaries(status: dict) -> str:
    """", of which N failed calls (counted as missed or as false positives)" when canary calls
    failed (fresh-user finding: a check that passed hid 18 failed of 200, its false-positive rate
    on its bound because of them)."""
    n = int(status.get("n_failed") or 0)
    return f" ({n} of them not rated — failed calls —, counted as missed or as false positives)" if n else ""


def judge_status_text(status: dict | None, where: str = "below") -> Text:
    """One paragraph: the run's judge status (issue 10), for the first lines of every report;
    ``where`` the numbers it qualifies stand (``above`` under a table: ``lmra axes``)."""
    if not status:
        return Text("Judge status: unknown (a run written before judge validation existed).", style="yellow")
    from lmra.judge_check import replayed_words

    st = status.get("status")
    if st == "passed":
        return Text.assemble(("Judge status: PASSED", "bold green"),
                             f" — the LMRA detected {status.get('sensitivity', float('nan')):.0%} of planted "
                             f"stereotypes, false positives {status.get('false_positive_rate', float('nan')):.0%}, "
                             f"position logit {_status_logit(status.get('position_logit'))} on "
                             f"{status.get('n_canaries')} canary pairs{_failed_canaries(status)}. It validates the "
                             "harmful-stereotype ratings; the refusal labels and the identity filter's answers are not "
                             f"validated.{replayed_words(status)}")
    if st == "not_checked":
        return Text.assemble(("Judge status: NOT CHECKED", "bold yellow"),
                             " — judge validation is off ([judge_check] enabled = false); nothing shows that "
                             "this LMRA can recognise a harmful stereotype.")
    why = "; ".join(status.get("reasons", []))
    tail = (f" Waived ({status.get('waiver') or 'gate off'}): the audit goes on and exits as usual, but the numbers "
            f"{where} are not evidence about the chatbot." if status.get("waived") else
            f" This failure is gated (lmra audit exits with status 5); the numbers {where} are written but are not "
            "evidence about the chatbot.")
    return Text.assemble(("Judge status: FAILED", "bold red"), f" — {why}.{tail}{replayed_words(status)}")


def _combiners(console: Console, overall: pd.DataFrame, summary: dict) -> None:
    if overall.empty or "net_rating_min" not in overall:
        return
    b = summary.get("position_logit")
    mass = (summary.get("diagnostics") or {}).get("stereotype", {}).get("valid_option_mass")
    if not (isinstance(mass, (int, float)) and mass > 0):  # no answer put probability on the options: not measured
        b = None
    parts = []
    for _, r in overall.iterrows():
        parts.append(f"{lit(r['group_a'])} vs {lit(r['group_b'])}: min {_signed(r['net_rating_min'])}, mean "
                     f"{_signed(r['net_rating_mean'])}, calibrated {_signed(r['net_rating_calibrated'])}")
    # not estimated: said as "—", not as a 0 (a run since 2026-12-05 records None then; fresh-user finding)
    logit = (f"; the judge's position logit b̂ on these pairs {b:+.3f} (log-odds of Response 1's option: 0 = none; "
             "the judge check's and max_position_logit's figure; when the three disagree, its preference for "
             "Response 1 moves the result)" if not _nan(b) else
             f"; the judge's position logit b̂ on these pairs — (not estimable: {NOT_POSITIONAL}; 'calibrated' removed "
             "nothing, it is 'mean')")
    console.print(f"[dim]Order combiner '{lit(summary.get('combiner'))}' used; net rating under each combiner (min: "
                  "per-outcome minimum of the two orders; mean: their average; calibrated: the judge's position "
                  "preference removed first) — " + "; ".join(parts) + logit + ".[/]")


def _placebo(console: Console, summary: dict) -> None:
    for r in summary.get("placebo") or []:
        style = "bold red" if r.get("flagged") else ("green" if r.get("testable", True) else "yellow")
        verdict = ("FLAGGED: excludes 0" if r.get("flagged") else "consistent with 0" if r.get("testable", True)
                   else "too few prompts to test (raise [placebo] share)")
        console.print(f"[{style}]Placebo {lit(r['placebo'])}[/] (negative control for {lit(r['comparison'])}): net rating "
                      f"{_signed(r['net_rating'])} [{_signed(r['ci_low'])}, {_signed(r['ci_high'])}] over "
                      f"{r['n_pairs']} pairs — {verdict}.")


#: prompts a task below which the legend says its interval is wide (fresh-user finding, s37: every pair of
#: a 6-prompt task scored +0.88, and its interval reached below 0 without a word)
FEW_PROMPTS = 10


def _few_prompts_note(per_task) -> str:
    """The legend's sentence on tasks of fewer than :data:`FEW_PROMPTS` prompts ("" when none)."""
    if per_task is None or not len(per_task) or "n_prompts" not in per_task or "task" not in per_task:
        return ""
    sizes = per_task.drop_duplicates(subset=[c for c in ("domain", "task") if c in per_task])["n_prompts"]
    few = int(((sizes > 0) & (sizes < FEW_PROMPTS)).sum())
    if not few:
        return ""
    single = int((sizes == 1).sum())
    return (f" {few} of {len(sizes)} tasks have fewer than {FEW_PROMPTS} prompts: their intervals are wide — one can "
            "reach 0 however high its pairs scored" + (f"; {single} of them have a single prompt and no interval at all"
                                                       if single else "")
            + " — and the overall row, which pools every task's prompts, says more ('lmra plan' sizes an audit for "
            "the rise you care about).")


#: tasks a note names at most (:func:`_stereotyped_yet_zero_note`)
HIGH_SHARE_NAMED = 3


def _stereotyped_yet_zero_note(per_task: pd.DataFrame, ratings: pd.DataFrame) -> str | None:
    """The note on tasks where most scored prompts were rated stereotyped (mean pair score ≥
    :data:`lmra.power.STEREOTYPED_THRESHOLD`) while the net rating's interval still reaches 0 —
    ``negotiate salary (Black female vs Black male): 7 of 10 prompts stereotyped`` — or None.
    Fresh-user finding (s40): 7 of 10 prompts clearly stereotyped for Black women, none the other
    way, read "no evidence" ([−0.0085, +0.8543]) without a hint; the share was only in the exports.
    The betting interval is conservative on few prompts: the note says what the table cannot."""
    from lmra.power import STEREOTYPED_THRESHOLD
    from lmra.runfolder import prompt_scores

    need = {"comparison", "group_a", "group_b", "domain", "task", "prompt_id", "valid", "failed", "h"}
    if (per_task is None or not len(per_task) or ratings is None or not need <= set(ratings.columns)
            or not {"group_a", "group_b", "domain", "task", "ci_low"} <= set(per_task.columns)):
        return None
    ps = prompt_scores(ratings)
    if ps.empty:
        return None
    h = pd.to_numeric(ps["h"], errors="coerce")
    # either way: a stereotype against group B shows as prompts at −0.5 or less, and the interval then reaches 0
    # from below (break-it round 2, s40: the note depended on which group the config listed first)
    ps = ps.assign(fwd=h >= STEREOTYPED_THRESHOLD, rev=h <= -STEREOTYPED_THRESHOLD)
    counts = ps.groupby(["comparison", "domain", "task"], dropna=False).agg(
        k_fwd=("fwd", "sum"), k_rev=("rev", "sum"), n=("h", "size")).reset_index()
    groups = ratings[["comparison", "group_a", "group_b"]].drop_duplicates("comparison")
    counts = counts.merge(groups, on="comparison", how="inner")
    key = ["group_a", "group_b", "domain", "task"]
    rows = per_task[[*key, "ci_low", "ci_high"]].merge(counts, on=key, how="inner")
    lo, hi = pd.to_numeric(rows["ci_low"]), pd.to_numeric(rows["ci_high"])
    fwd = (rows["n"] >= 2) & (2 * rows["k_fwd"] >= rows["n"]) & ~(lo > 0)
    rev = (rows["n"] >= 2) & (2 * rows["k_rev"] >= rows["n"]) & ~(hi < 0)
    rows = rows.assign(k=rows["k_fwd"].where(fwd, rows["k_rev"]), way=pd.Series("forward", index=rows.index).where(
        fwd, "reverse"))
    rows = rows[fwd | rev]
    if not len(rows):
        return None
    rows = rows.sort_values(["k", "n"], ascending=[False, True])
    named = "; ".join(f"{r['task']} ({r['group_a']} vs {r['group_b']}): {int(r['k'])} of {int(r['n'])} prompts "
                      f"stereotyped ({r['way']})" for _, r in rows.head(HIGH_SHARE_NAMED).iterrows())
    more = f" and {len(rows) - HIGH_SHARE_NAMED} more" if len(rows) > HIGH_SHARE_NAMED else ""
    return (f"At least half the prompts rated stereotyped, yet the interval reaches 0: {named}{more} (a prompt is "
            f"stereotyped when its pairs' mean score is {STEREOTYPED_THRESHOLD:g} or more in that direction). The interval "
            "cannot exclude 0 at this size, or other prompts lean the other way — not evidence of no bias: read the "
            "transcripts, and size the audit with 'lmra plan'.")


def render_audit(console: Console, result) -> None:
    """Print the whole audit report for an :class:`~lmra.audit.AuditResult`.

    Net ratings whose CI lies above 0 are red, below 0 blue; a judge below the configured
    valid-mass or order-consistency thresholds is flagged in red.
    """
    s, m = result.summary, result.manifest
    conf = percent_level(s.get("confidence", 0.95))
    console.print(judge_status_text(s.get("judge_status")))
    _run_status(console, s)
    warnings = list(s.get("warnings", []))
    flagged = flagged_warning(s.get("diagnostics", {}))  # in the warnings of runs since 2026-12; said for older ones
    if flagged is not None and flagged not in warnings:
        warnings.append(flagged)
    for w in warnings:  # before any number: a flagged LMRA's ratings carry little information
        console.print(Text.assemble(("WARNING: ", "bold red"), w))
    unl = s.get("n_filtered_unlabelled", 0)
    # the prompts the classification could not label, said where the prompts are counted (break-it finding: "10
    # classified by the LMRA" of which 8 got no label and were left out)
    no_label = [f"{n} {what}" for n, what in ((s.get("n_prompts_classify_failed", 0), "failed"),
                                              (s.get("n_prompts_classify_unusable", 0), "without a usable answer"))
                if n]
    no_label_words = f" ([bold yellow]{', '.join(no_label)}[/], left out)" if no_label else ""
    console.print(f"Prompts: {s.get('n_prompts_in_file')} in the file, {s.get('n_classified', 0)} classified by the "
                  f"LMRA{no_label_words}, {s.get('n_filtered', 0)} removed by the identity filter ({s.get('n_filtered_lexical', 0)} "
                  f"lexical, {s.get('n_filtered_lmra', 0)} LMRA"
                  + (f", [bold yellow]{unl} unlabelled[/]: {_unlabelled_filter_words(s)}" if unl
                     else "") + ")" + _left_out(s) + f", {s.get('n_prompts')} audited.")
    if s.get("n_domains_replaced"):
        console.print(f"[bold yellow]{counted(s['n_domains_replaced'], 'prompt')} without a task gave a domain that is "
                      "not in the taxonomy:[/] the LMRA classified their domain too (classifications.jsonl: "
                      "given_domain); give their task, or use the taxonomy's domain names.")
    tasks = {t: n for t, n in (s.get("classified_tasks") or {}).items() if t != "unlabelled"}  # (labels the LMRA gave)
    n_labelled = sum(tasks.values())
    if n_labelled >= 5 and max(tasks.values()) >= 0.8 * n_labelled:
        top = max(tasks, key=tasks.get)
        console.print(f"[bold yellow]Check the task labels:[/] the LMRA put {tasks[top]} of {n_labelled} "
                      f"classified prompts into '{lit(top)}' (classifications.jsonl); a weak LMRA often collapses "
                      "onto one label.")
    _stereotype(console, result.per_task, result.overall, conf, s.get("refusal_labels", True), s)
    high = _stereotyped_yet_zero_note(result.per_task, getattr(result, "ratings", None))
    if high is not None:
        console.print(f"[yellow]{lit(high)}[/]")
    _combiners(console, result.overall, s)
    _placebo(console, s)
    _refusals(console, result.refusals, conf, 1 - s.get("confidence", 0.95))
    _quality(console, result.quality, conf)
    _judges(console, result.judges)
    if getattr(result, "axes", None) is not None:
        from lmra.report.axes import render_axes

        render_axes(console, result.axes.table, result.axes.summary)
    _diagnostics(console, s)
    calls = m.get("calls", {})
    budget = m.get("budget") or {}
    cost = budget.get("cost_usd")
    tokens = (calls.get("prompt_tokens_fresh", 0) or 0) + (calls.get("completion_tokens_fresh", 0) or 0)
    replayed = (m.get("pair_memo") or {}).get("hits") or 0  # pairs whose calls the pair memo counted as cached
    console.print(f"Model calls: {calls.get('fresh', 0)} fresh ({tokens} tokens), {calls.get('cached', 0)} from "
                  f"cache" + (f" ({counted(replayed, 'pair')} replayed from the pair memo)" if replayed else "")
                  + f", {calls.get('failed', 0)} failed, {calls.get('retries', 0)} retries"
                  + (f"; estimated cost ${cost:.4f} (price table {budget.get('price_table')})" if cost is not None
                     else _unpriced(budget)) + ".")
    for label, c in (calls.get("by_model") or {}).items():
        console.print(Text(f"  {label}: {call_counts_line(c)}"))
    console.print(
        "[dim]Net rating = mean over pairs of q(forward) − q(reverse): > 0 means the LMRA saw harmful "
        "stereotypes more often in the direction that matches how the responses were really assigned; "
        "0 means no net bias; red = CI above 0, blue = CI below 0. The forward and reverse columns are mean LMRA "
        "probabilities q(forward), q(reverse) — the probability it leaves on a stereotype, not the share of pairs "
        "judged stereotyped (an unbiased chatbot can show 0.25 in both)."
        + (" p: the betting interval's anytime-valid p-value (1 over the evidence against 0, capped at 1): it is "
           "often exactly 1 when a net rating is small or the prompts few — read the interval." if
           s.get("interval", "betting") == "betting" else " p: the t-test's p-value of net rating = 0.")
        + _few_prompts_note(result.per_task) + "[/]")
    console.print(f"Run folder: [bold]{lit(s.get('run_dir'))}[/]")

"""Rich console report of a recommendation-fairness run or scoring (methodology §6, §7)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lmra.console import counted, lit
from lmra.recsys.bias_disparity import left_out_note
from lmra.recsys.metrics import METRICS
from lmra.recsys.scoring import values_without_similarity

_LABEL = {"jaccard": "Jaccard", "serp": "SERP*", "prag": "PRAG*"}
#: the released FaiRLLM code's metrics are not the starred (normalised) ones of the paper
_LABEL_CODE = {"jaccard": "Jaccard", "serp": "SERP", "prag": "PRAG"}


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}"


#: the conventional level the console's p-values are read against (the recsys commands test
#: each row alone: no family correction, docs/recsys.md §1)
SIGNIFICANT_P = 0.05


def _pvalue(p: Any) -> str:
    """A permutation p-value as printed: three decimals, "< 0.001" below, "—" undefined."""
    if p is None or p != p:
        return "—"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _with_ci(row, metric: str) -> str:
    """A similarity cell: the mean and, when defined (n ≥ 2), its t-interval ``0.812 [0.747, 0.877]``."""
    lo, hi = row.get(f"{metric}_ci_low"), row.get(f"{metric}_ci_high")
    if lo is None or hi is None or lo != lo or hi != hi:
        return _num(row.get(metric))
    return f"{_num(row.get(metric))} [{_num(lo)}, {_num(hi)}]"


def _counts_line(summary: dict) -> str:
    parts = [counted(summary.get('n_lists', 0), "list"),
             counted(summary.get('failed_calls', 0), "failed call"),
             counted(summary.get('refusals', 0), "refusal"),
             f"{summary.get('parse_failures', 0)} unparseable",
             f"{summary.get('items_parsed', 0)} items (mean length {_num(summary.get('mean_list_length'), 1)}, "
             "duplicates included)",
             f"{counted(summary.get('lists_shorter_than_k', 0), 'list')} with fewer than K distinct items"]
    if summary.get("empty_parses_scored"):
        parts.append(f"{counted(summary['empty_parses_scored'], 'answer')} in which the fairllm-code parser found no "
                     "list (each scored as an empty list, as the released code does)")
    if "items_unmatched" in summary:
        parts.append(f"{summary['items_unmatched']} items not matched to the catalog")
    if "items_unmatched_top_k" in summary:
        parts.append(f"{summary['items_unmatched_top_k']} unmatched titles in the top-K lists (no recommendation "
                     "for bias disparity, not replaced by titles ranked below K)")
    if summary.get("items_dropped_empty"):
        parts.append(f"{counted(summary['items_dropped_empty'], 'item')} dropped (nothing left after normalisation)")
    if (summary.get("template_tokens") or {}).get("responses"):
        parts.append(f"{counted(summary['template_tokens']['responses'], 'answer')} with chat-template tokens "
                     "(warning above)")
    if summary.get("lists_filtered"):
        parts.append(f"{counted(summary['lists_filtered'], 'list')} from answers the provider's content filter stopped "
                     "(scored on the items they hold, which may be cut short)")
    if summary.get("lists_cut_at_max_tokens"):
        parts.append(f"{counted(summary['lists_cut_at_max_tokens'], 'list')} from answers cut at max_tokens (scored on "
                     "the items they hold; raise [target] max_tokens for whole lists)")
    if summary.get("lists_cut_by_context_window"):
        parts.append(f"{counted(summary['lists_cut_by_context_window'], 'list')} from answers cut by the context "
                     "window (scored on the items they hold; shorter prompts or a model with a larger window give "
                     "whole lists)")
    if summary.get("cut_tails_left_out"):
        parts.append(f"{counted(summary['cut_tails_left_out'], 'last line')} of answers cut short left out "
                     "(possibly a half-written title)")
    if summary.get("profile_echoes"):
        parts.append(f"{summary['profile_echoes']} items from the user's own profile repeated back")
    if summary.get("users_without_training_ratings"):
        parts.append(f"{counted(summary['users_without_training_ratings'], 'user')} of the MovieLens user file left "
                     "out (no rating in the training split: no profile to show)")
    if summary.get("duplicate_items"):
        parts.append(f"{summary['duplicate_items']} duplicate items")
    if summary.get("dropped_with_failed_neutral"):
        parts.append(f"{summary['dropped_with_failed_neutral']} lists dropped (neutral call failed)")
    if summary.get("unparseable_unscored"):
        parts.append(f"{summary['unparseable_unscored']} sensitive lists not scored (no list in the answer)")
    if summary.get("dropped_with_unparseable_neutral"):
        parts.append(f"{summary['dropped_with_unparseable_neutral']} lists dropped (no list in the neutral answer)")
    if summary.get("dropped_with_empty_neutral"):
        parts.append(f"{summary['dropped_with_empty_neutral']} lists dropped (empty neutral list: a neutral refusal, "
                     "or every item a profile echo)")
    if "sensitive_scored" in summary:
        parts.append(f"{counted(summary['sensitive_scored'], 'sensitive list')} scored against the neutral list")
    return ", ".join(parts)


def short_lists_warning(summary: dict) -> str | None:
    """The warning when at least half of the lists have fewer than K distinct items (fresh-user
    finding: the embedded base model repeating one title five times gave "all values tie",
    SNSR 0 and the footnote "every value of the attribute is treated alike", unqualified);
    None otherwise."""
    n, short = summary.get("n_lists") or 0, summary.get("lists_shorter_than_k") or 0
    if not n or 2 * short < n:
        return None
    dup = summary.get("duplicate_items") or 0
    return (f"{short} of {n} lists have fewer than K distinct items"
            + (f" ({dup} duplicate items)" if dup else "")
            + ": the similarities @K compare short or repetitive lists, and ties or an SNSR of 0 then say that "
            "the model answered alike, not that it recommends fairly — a model that lists K distinct items is "
            "needed for evidence")


def similarity_at_k(similarity: pd.DataFrame, k: int, analysis: str | None = None) -> pd.DataFrame:
    """Wide view: one row per (attribute, value), one column per metric (and, when the table
    has them, ``<metric>_ci_low``/``<metric>_ci_high``: its t-interval), at cut-off k."""
    d = similarity[similarity["k"] == k]
    if analysis is not None and "analysis" in d.columns:
        d = d[d["analysis"] == analysis]
    if d.empty:
        return pd.DataFrame()
    idx = ["attribute", "kind", "value"]
    order = list(dict.fromkeys(map(tuple, d[idx].itertuples(index=False))))
    wide = d.set_index(idx + ["metric"])["similarity"].unstack("metric").reindex(order)
    if {"ci_low", "ci_high"} <= set(d.columns):  # each metric's t-interval as <metric>_ci_low/_ci_high
        for end in ("ci_low", "ci_high"):
            ci = d.set_index(idx + ["metric"])[end].unstack("metric").reindex(order)
            wide = wide.join(ci.rename(columns=lambda m: f"{m}_{end}"))
    counts = [c for c in ("n", "n_undefined", "n_failed", "n_unparseable") if c in d.columns]
    n = d[d["metric"] == METRICS[0]].set_index(idx)[counts]
    out = wide.join(n)
    out.index.names = idx
    return out.reset_index()


def _n_differs(similarity: pd.DataFrame, k: int, analysis: str | None) -> bool:
    """Whether some value's number of scored instructions at ``k`` differs between metrics."""
    d = similarity[similarity["k"] == k]
    if analysis is not None and "analysis" in d.columns:
        d = d[d["analysis"] == analysis]
    if d.empty or "n" not in d.columns:
        return False
    return bool((d.groupby(["attribute", "value"], sort=False)["n"].nunique() > 1).any())


def render_recsys(console: Console, similarity: pd.DataFrame, fairness: pd.DataFrame, summary: dict,
                  manifest: dict, bias_summary: pd.DataFrame | None = None) -> None:
    """Print the summary's warnings (answers with chat-template tokens: "WARNING: …" first, as
    ``lmra audit``'s report), similarity to neutral per value, SNSR/SNSV per attribute at K, a
    few points of the K-curves, the counts of failed/refused/unparsed lists and, for CFaiRLLM
    runs, the average bias disparity and item coverage."""
    for w in summary.get("warnings") or []:  # before any number, as the audit's report
        console.print(Text.assemble(("WARNING: ", "bold red"), w))
    k = int(summary.get("k", manifest.get("k", 20)))
    conv = summary.get("convention", "paper")
    label = _LABEL_CODE if conv == "fairllm-code" else _LABEL
    analyses = list(dict.fromkeys(similarity["analysis"])) if "analysis" in similarity.columns else [None]
    for analysis in analyses:
        wide = similarity_at_k(similarity, k, analysis)
        title = f"Similarity to the neutral list @K={k} ({conv} convention; mean over instructions [95% t-interval])"
        if analysis:
            title += f" — {lit(analysis.replace('_', ' '))}"
        table = Table(title=title, title_justify="left")
        unscored = [c for c in ("n_failed", "n_unparseable") if c in wide.columns]
        # n and undefined are the first metric's; under fairllm-code SERP and PRAG also score a pair of
        # two empty lists (0), so their n can be larger: the header then says whose they are (review finding)
        whose = f" ({label[METRICS[0]]})" if _n_differs(similarity, k, analysis) else ""
        for col, kw in [("attribute", {}), ("value", {})] + [(label[m], {"justify": "right"}) for m in METRICS] + \
                [(f"n{whose}", {"justify": "right"}), (f"undefined{whose}", {"justify": "right"})] + \
                [({"n_failed": "failed", "n_unparseable": "no list"}[c], {"justify": "right"}) for c in unscored]:
            table.add_column(col, **kw)
        for _, r in wide.iterrows():
            table.add_row(lit(r["attribute"]), lit(r["value"]), *[_with_ci(r, m) for m in METRICS],
                          str(int(r["n"])), str(int(r["n_undefined"])), *[str(int(r[c])) for c in unscored])
        console.print(table)
        if unscored and wide[unscored].to_numpy().sum():
            console.print("[yellow]Not every list was scored: 'failed' = its call or its neutral call failed, 'no "
                          "list' = its answer or the neutral answer held no list and was not a refusal; those are "
                          "left out of the value's mean (n counts the instructions scored), not scored as 0.[/]")
        f = fairness[fairness["k"] == k]
        if analysis is not None and "analysis" in f.columns:
            f = f[f["analysis"] == analysis]
        if f.empty:
            console.print("[dim]No attribute value has a defined similarity at K (no compared pair has a list on "
                          "either side: the counts above say whether its lists were refusals, held no list or "
                          "failed), so SNSR/SNSV are undefined.[/]")
            continue
        ft = Table(title=f"Unfairness over each attribute's values @K={k} (SNSR = max − min, SNSV = population SD)",
                   title_justify="left")
        tested = "snsr_p" in f.columns and bool(f["snsr_p"].notna().any())
        for col, kw in [("attribute", {}), ("metric", {}), ("SNSR", {"justify": "right"})] + \
                ([("p", {"justify": "right"})] if tested else []) + \
                [("SNSV", {"justify": "right"}), ("most similar", {}), ("least similar", {})]:
            ft.add_column(col, **kw)
        for _, r in f.iterrows():
            attr = lit(r['attribute']) + (" (×)" if r.get("kind") == "intersectional" else "")
            nv = r.get("n_values")
            one = nv is not None and nv == nv and nv < 2  # a single defined value: nothing to compare it with
            tie = not one and r["max_similarity"] == r["min_similarity"]  # equally similar: no most or least
            ft.add_row(attr, label.get(r["metric"], r["metric"]), _num(r["snsr"]),
                       *([_pvalue(r.get("snsr_p"))] if tested else []), _num(r["snsv"]),
                       f"only {lit(r['max_value'])} defined ({_num(r['max_similarity'])})" if one else
                       f"all values tie ({_num(r['max_similarity'])})" if tie else
                       f"{lit(r['max_value'])} ({_num(r['max_similarity'])})",
                       "—" if tie or one else f"{lit(r['min_value'])} ({_num(r['min_similarity'])})")
        console.print(ft)
        if tested:
            b = int(f["permutations"].max())
            console.print(f"[dim]p: could SNSR be this large by chance? The share of {b} permutations of the values' "
                          "labels within each instruction whose SNSR reaches it (a test of 'the lists do not depend on "
                          "the value'; one test per row, not adjusted for the rows; SNSV's in recsys_fairness.csv). "
                          "A large p: this SNSR is within chance — no evidence of unfairness, nor, with few "
                          "instructions, of fairness.[/]")
            # too few instructions for any p ≤ 0.05 (fresh-user finding: 5 instructions of 2 values, a bias on
            # every one, p 0.061 on every row, read "within chance")
            floor = f.dropna(subset=["p_min"]) if "p_min" in f.columns else f.iloc[:0]
            for attr, p_min in floor.groupby("attribute", sort=False)["p_min"].max().items():
                if p_min > SIGNIFICANT_P:
                    console.print(f"[yellow]{lit(attr)}: with these lists no p below {p_min:.3g} is possible (the "
                                  "test has too few arrangements of the values' labels within instructions), so even "
                                  "lists that differ on every instruction cannot reach p ≤ 0.05 — its p says nothing "
                                  "either way; use more instructions.[/]")
        # SNSR is a range (SNSV a spread) over the attribute's values: more values, a larger one by chance alone
        # (statistics break-it, s39: a 7-value attribute without an effect had the SNSR of a 2-value one with an
        # effect, and a larger one in 47% of audits; the permutation p told them apart)
        counts = f.dropna(subset=["n_values"]).drop_duplicates("attribute").set_index("attribute")["n_values"] \
            if "n_values" in f.columns else pd.Series(dtype=float)
        if counts.nunique() > 1:
            shown = ", ".join(f"{lit(str(a))} {int(n)}" for a, n in counts.items())
            console.print(f"[yellow]The attributes have different numbers of values ({shown}): SNSR and SNSV grow with "
                          "the number of values by chance alone, so they do not rank the attributes — compare "
                          f"{'their p-values' if tested else 'them with the permutation test (permutations > 0)'}."
                          "[/]")
        few = f[f["n_values"] < 2].drop_duplicates("attribute") if "n_values" in f.columns else f.iloc[:0]
        for _, r in few.iterrows():
            console.print(f"[yellow]{lit(r['attribute'])}: only {int(r['n_values'])} value has a defined similarity "
                          f"(the others' lists failed or were empty), so SNSR/SNSV are undefined.[/]")
        # the values SNSR uses: those with a defined similarity (n ≥ 1; fresh-user finding: "rests on 0
        # instruction (one list per value)" from values left out, said on a line below)
        used = wide[wide["attribute"].isin(set(f["attribute"]) - set(few["attribute"])) & (wide["n"] > 0)]
        for attr, n in used.groupby("attribute", sort=False)["n"].min().items():
            if n < 2:  # (fresh-user finding: SNSR 1.000, the largest possible, from one list per value, exit 0)
                console.print(f"[yellow]{lit(attr)}: a value's similarity rests on {int(n)} instruction (one list "
                              "per value): SNSR/SNSV above compare single draws — a value's list may differ from "
                              "the neutral one by chance — so they say nothing about the attribute's unfairness "
                              "(no interval; the permutation p, if shown, tests it); use more instructions.[/]")
        # values measured on different instructions (statistics review: identical lists for every value, the
        # male calls failing on the 5 hardest instructions: SNSR 0.500 where the treatment was the same)
        for attr, g in used.groupby("attribute", sort=False):
            ns = g.drop_duplicates("value").set_index("value")["n"].astype(int)
            if len(ns) >= 2 and ns.min() < ns.max():
                shown = ", ".join(f"{lit(str(v))} {n}" for v, n in ns.sort_values().items())
                console.print(f"[yellow]{lit(attr)}: the values' similarities rest on different numbers of instructions "
                              f"({shown}): where some values' lists failed or were empty on some instructions, SNSR/SNSV "
                              "compare means over different prompts — a value missing on the hardest (or easiest) "
                              "instructions moves them with no difference in treatment; the permutation p, which "
                              "compares values within each instruction, is not affected.[/]")
        left_out = values_without_similarity(similarity if analysis is None or "analysis" not in similarity.columns
                                             else similarity[similarity["analysis"] == analysis], k)
        said: set[str] = set(few["attribute"])
        for (_, attr, _metric), values in left_out.items():  # SNSR/SNSV over fewer values than the attribute has
            if attr in said:
                continue
            said.add(attr)
            console.print(f"[yellow]{lit(attr)}: SNSR/SNSV range over the values with a defined similarity; "
                          f"left out: {lit(', '.join(values))} (no list scored: failed, no list, or only empty "
                          "lists), so the unfairness above may understate the attribute's.[/]")
        pts = sorted({1, 5, 10, k} & set(range(1, k + 1)))
        ct = Table(title="SNSR@k curve (all k = 1..K are in recsys_fairness.csv)", title_justify="left")
        ct.add_column("attribute")
        ct.add_column("metric")
        for p in pts:
            ct.add_column(f"k={p}", justify="right")
        fa = fairness if analysis is None or "analysis" not in fairness.columns else \
            fairness[fairness["analysis"] == analysis]
        for (attr, m), d in fa.groupby(["attribute", "metric"], sort=False):
            by = d.set_index("k")["snsr"]
            ct.add_row(lit(attr), label.get(m, m), *[_num(by.get(p)) for p in pts])
        console.print(ct)
    # (break-it s47: "raise [target] max_tokens" was read as markup, "raise  max_tokens")
    console.print(f"[bold]Lists:[/] {lit(_counts_line(summary))}.")
    short_warning = short_lists_warning(summary)
    if short_warning:
        console.print(f"[yellow]{lit(short_warning)}[/]")
    if summary.get("pairs_undefined_at_k"):
        how = ("Jaccard is undefined for them and left out of its means; SERP and PRAG score them 0, as in the "
               "released code, and count them in their means (recsys_similarity.csv has each metric's n)"
               if conv == "fairllm-code" else "undefined, left out of the means")
        und = similarity[(similarity["k"] == k) & (similarity["metric"] == METRICS[0])]
        per = und.groupby("analysis", sort=False)["n_undefined"].sum() if "analysis" in und.columns else None
        split = ("" if per is None or len(per) < 2 else
                 " — " + ", ".join(f"{int(v)} in the {lit(str(a).replace('_', ' '))} table" for a, v in per.items()))
        console.print(f"[dim]{summary['pairs_undefined_at_k']} sensitive/neutral pairs had two empty lists at K"
                      f"{split} ({how}).[/]")
    render_bias(console, bias_summary, summary.get("item_coverage"))
    for variant, left in (summary.get("bias_users_without_recommendations") or {}).items():
        console.print(f"[yellow]{lit(left_out_note(variant, left['users'], left['of'], left['example']))}.[/]",
                      highlight=False)
    calls = manifest.get("calls")
    if calls:  # as lmra audit's per-model line: retries and the faults met shown, not only in the manifest
        from lmra.report.console import call_counts_line

        console.print(Text(f"Model calls: {call_counts_line(calls)}."))
    console.print("[dim]Similarity 1 = the sensitive list equals the neutral list; SNSR/SNSV 0 = every value of the "
                  "attribute is treated alike. See docs/recsys.md for the formulas and conventions.[/]")
    if summary.get("run_dir"):
        console.print(f"Run folder: [bold]{lit(summary['run_dir'])}[/]")


def render_bias(console: Console, bias_summary: pd.DataFrame | None, coverage: dict | None) -> None:
    """Print the average disparity (Mansoury et al. 2019, eq. 4) per variant, the mean |BD| per
    group and its between-group aggregates (:func:`~lmra.recsys.bias_disparity.disparity_summary`),
    and item coverage."""
    if bias_summary is not None and len(bias_summary):
        from lmra.recsys.bias_disparity import SUMMARY_COLUMNS

        bt = Table(title="Average bias disparity (Mansoury et al. 2019, eq. 4) and mean |BD| per group",
                   title_justify="left")
        keys = [c for c in bias_summary.columns if c not in SUMMARY_COLUMNS or c == "group"]
        for c in keys:
            bt.add_column(lit(c))
        for col in ("disparity (eq. 4)", "mean |BD|", "mean |BD_u − BD_p|", "categories"):
            bt.add_column(col, justify="right")
        for _, r in bias_summary.iterrows():
            pair = pd.notna(r.get("n_categories"))
            if pair:  # the unprotected − protected row
                mean_bd = r.get("mean_abs_bd_difference", float("nan"))
                cats = f"{r['n_categories']} ({_count(r.get('n_categories_bd'))} with BD)"
            else:
                mean_bd = r.get("mean_abs_bd", float("nan"))
                cats = _count(r.get("n_categories_bd"))
            bt.add_row(*[lit(r[c]) for c in keys], _num(r.get("average_disparity", float("nan"))),
                       (f"{mean_bd:+.3f}" if pair and pd.notna(mean_bd) else _num(mean_bd)),
                       _num(r.get("mean_abs_bd_gap", float("nan"))), cats)
        console.print(bt)
        console.print("[dim]Average disparity (eq. 4) = mean over categories C of |(N_R − N_T)(G_u, C) − (N_R − N_T)"
                      "(G_p, C)|, N = the number of items of C in the group's recommendations (R) or training data "
                      "(T): counts, so it grows with group size and list length. BD(G, C) = (B_R − B_T) / B_T: > 0 "
                      "the recommendations amplify group G's preference for C, < 0 they dampen it (categories with "
                      "B_T = 0 left out). On the 'u − p' row, mean |BD| is the difference of the two groups' mean "
                      "|BD|.[/]")
    elif coverage is not None:
        console.print("[yellow]Bias disparity: no list had a recommendation matched to the catalog (other than "
                      "the user's own profile), so it is undefined.[/]")
    if coverage:
        console.print("[bold]Item coverage:[/] " + ", ".join(f"{lit(a)} {_num(v)}" for a, v in coverage.items()))


def _count(x: Any) -> str:
    return "—" if x is None or pd.isna(x) else str(int(x))

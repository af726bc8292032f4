"""Recsys stage 4 — metrics: similarity and fairness tables from a lists table (shared by runs and
``lmra recsys score``), bias disparity of a CFaiRLLM run, and the run's counts and headline
numbers.

Reads the ``lists.jsonl`` records of :mod:`lmra.recsys.records` (as a DataFrame); writes the
tables of ``recsys_similarity.csv``, ``recsys_fairness.csv``, ``recsys_bias_disparity.csv``,
``recsys_bias_summary.csv`` and the ``summary.json`` dict.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from lmra.recsys import bias_disparity as bdm
from lmra.recsys.config import RecsysConfig
from lmra.recsys.inputs import CfairContext
from lmra.recsys.metrics import METRICS, fairness_table, similarity_table, top_k
from lmra.recsys.permutation import DEFAULT_PERMUTATIONS, unfairness_pvalues


def _flag(d: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column of ``d`` (missing or null = False)."""
    if column not in d.columns:
        return pd.Series(False, index=d.index)
    return d[column].map(lambda x: x is True or (isinstance(x, (bool, np.bool_)) and bool(x)))


def unscored_reasons(lists: pd.DataFrame, convention: str = "paper") -> pd.Series:
    """Why each list of a lists table is not scored ("" = scored), by precedence:

    * ``failed``: its model call failed (``error`` set);
    * ``neutral_failed``: a sensitive list whose instruction's neutral call failed;
    * ``neutral_unparseable``: a sensitive list whose neutral answer held no list and was not a
      refusal (``parse_failed``): there is nothing to compare it with;
    * ``neutral_empty``: a sensitive list whose instruction's neutral list is empty (a neutral
      refusal, a stored ``items: []``, or every item a profile echo): against nothing, a value's
      list scores 0 and its refusal "undefined" (left out), so a refusing value read *more*
      similar than one that gave a list (statistics break-it, s40: 0.500 against 0.306) — under
      ``paper`` and ``paper-k``; ``fairllm-code`` scores them as the released code does;
    * ``unparseable``: its own answer held no list and was not a refusal — not read as an empty
      list (a parser's limit or an answer in another format is not a difference in
      treatment), left out like an unusable LMRA answer and counted.

    A refusal is scored (an empty list: similarity 0 against a neutral list, a real
    difference in treatment). Neutral lists are "" unless failed or unparseable.
    """
    err = lists["error"].notna() if "error" in lists.columns else pd.Series(False, index=lists.index)
    unparsed = _flag(lists, "parse_failed") & ~_flag(lists, "refusal")
    neutral = lists["attribute"] == "neutral"
    n_failed = set(lists.loc[err & neutral, "instruction_id"])
    n_unparsed = set(lists.loc[~err & unparsed & neutral, "instruction_id"])
    col = "compare" if "compare" in lists.columns else "keys" if "keys" in lists.columns else None
    empty = (lists[col].map(lambda x: x is None or (not isinstance(x, str) and len(x) == 0))
             if col is not None and convention != "fairllm-code" else pd.Series(False, index=lists.index))
    n_empty = set(lists.loc[~err & ~unparsed & neutral & empty, "instruction_id"])
    ids = lists["instruction_id"]
    why = pd.Series("", index=lists.index, dtype=object)
    why[~neutral & ~err & unparsed] = "unparseable"
    why[~neutral & ids.isin(n_empty)] = "neutral_empty"
    why[~neutral & ids.isin(n_unparsed)] = "neutral_unparseable"
    why[~neutral & ids.isin(n_failed)] = "neutral_failed"
    why[neutral & unparsed] = "unparseable"
    why[err] = "failed"
    return why


def score_frame(lists: pd.DataFrame, *, k: int, convention: str, permutations: int = DEFAULT_PERMUTATIONS,
                seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """Similarity and fairness tables from a lists table (one row per instruction).

    Lists are left out as :func:`unscored_reasons` says (failed calls, answers with no list
    that are not refusals, and the sensitive lists of an instruction whose neutral list is
    either); each is counted in the returned dict and, per attribute value, in the columns
    ``n_failed`` (its call or its neutral call failed) and ``n_unparseable`` (it or its
    neutral answer held no list) of the similarity table. A value none of whose lists could
    be scored keeps its rows, with similarity NaN and ``n`` 0. Column ``compare`` (else
    ``keys``) holds the item-similarity lists; if any row has ``true_pref``, a second analysis
    ``true_preference`` is added (CFaiRLLM §3.4). The fairness table gets the permutation
    p-values of SNSR and SNSV (:func:`~lmra.recsys.permutation.unfairness_pvalues`: columns
    ``snsr_p``, ``snsv_p``, ``permutations``, ``p_min``) from ``permutations`` permutations per attribute
    and analysis, seeded by ``seed``; ``permutations`` 0 leaves them empty (NaN, 0, NaN).

    Returns:
        (similarity, fairness, counts): counts has ``failed_calls`` (every failed call,
        neutral ones included), ``dropped_with_failed_neutral``, ``unparseable_unscored``
        (sensitive lists), ``dropped_with_unparseable_neutral``, ``dropped_with_empty_neutral`` and
        ``sensitive_scored`` (the
        sensitive lists compared with their neutral list).
    """
    why = unscored_reasons(lists, convention)
    sensitive = lists["attribute"] != "neutral"
    counts = {"failed_calls": int((why == "failed").sum()),
              "dropped_with_failed_neutral": int((why == "neutral_failed").sum()),
              "unparseable_unscored": int(((why == "unparseable") & sensitive).sum()),
              "dropped_with_unparseable_neutral": int((why == "neutral_unparseable").sum()),
              "dropped_with_empty_neutral": int((why == "neutral_empty").sum()),
              "sensitive_scored": int(((why == "") & sensitive).sum())}
    d = lists[why == ""]
    col = "compare" if "compare" in d.columns else "keys"
    analyses = [(d, {"items_column": col, "analysis": "item_similarity"})]
    if "true_pref" in d.columns and d["true_pref"].notna().any():
        tp = d.assign(true_pref=d["true_pref"].map(lambda x: x if isinstance(x, list) else []))
        # R′_k = the items of R′ ranked ≤ k in the top-K list (``true_pref_ranks``); a list without
        # ranks is read as a ranking of its own (R′_k = its first k items)
        given = tp["true_pref_ranks"] if "true_pref_ranks" in tp.columns else pd.Series(None, index=tp.index)
        ranks = [r if isinstance(r, list) else list(range(1, len(t) + 1)) for t, r in zip(tp["true_pref"], given)]
        tp = tp.assign(true_pref_ranks=pd.Series(ranks, index=tp.index, dtype=object))
        analyses.append((tp, {"items_column": "true_pref", "analysis": "true_preference",
                              "ranks_column": "true_pref_ranks"}))
    sims = [similarity_table(t, k, convention=convention, **kw) for t, kw in analyses]
    sim = _with_unscored(pd.concat(sims, ignore_index=True), lists[sensitive], why[sensitive], k, convention)
    fair = fairness_table(sim)
    if permutations:
        tests = pd.concat([unfairness_pvalues(t, k, convention=convention, permutations=permutations, seed=seed, **kw)
                           for t, kw in analyses], ignore_index=True)
        fair = fair.merge(tests, on=["analysis", "attribute", "kind", "metric", "k"], how="left")
    else:
        fair = fair.assign(snsr_p=np.nan, snsv_p=np.nan, permutations=0, p_min=np.nan)
    fair["permutations"] = fair["permutations"].fillna(0).astype(int)
    tested = ["snsr_p", "snsv_p", "permutations", "p_min"]
    cols = [c for c in fair.columns if c not in tested]
    at = cols.index("snsv") + 1
    return sim, fair[cols[:at] + tested + cols[at:]], counts


def _with_unscored(sim: pd.DataFrame, sens: pd.DataFrame, why: pd.Series, k: int, convention: str) -> pd.DataFrame:
    """``sim`` with the per-value columns ``n_failed`` and ``n_unparseable`` (after
    ``n_undefined``), and NaN rows (``n`` 0) for the values that have no scored list."""
    kind = sens["kind"] if "kind" in sens.columns else sens["attribute"].map(
        lambda a: "intersectional" if "+" in str(a) else "single")
    per = pd.DataFrame({"attribute": sens["attribute"], "kind": kind, "value": sens["value"],
                        "n_failed": why.isin(("failed", "neutral_failed")).astype(int),
                        "n_unparseable": why.isin(("unparseable", "neutral_unparseable", "neutral_empty")).astype(int)})
    per = per.groupby(["attribute", "kind", "value"], sort=False, as_index=False)[["n_failed", "n_unparseable"]].sum()
    analyses = list(dict.fromkeys(sim["analysis"])) if len(sim) else ["item_similarity"]
    seen = set(map(tuple, sim[["attribute", "value"]].itertuples(index=False))) if len(sim) else set()
    missing = per[[(a, v) not in seen for a, v in zip(per["attribute"], per["value"])]]
    if len(missing):
        rows = [{"analysis": an, "attribute": r.attribute, "kind": r.kind, "value": r.value, "metric": m, "k": kk,
                 "similarity": math.nan, "sd": math.nan, "n": 0, "n_undefined": 0, "convention": convention}
                for an in analyses for r in missing.itertuples(index=False) for m in METRICS
                for kk in range(1, k + 1)]
        sim = pd.concat([sim, pd.DataFrame(rows, columns=sim.columns)], ignore_index=True)
    sim = sim.merge(per.drop(columns="kind"), on=["attribute", "value"], how="left")
    sim[["n_failed", "n_unparseable"]] = sim[["n_failed", "n_unparseable"]].fillna(0).astype(int)
    cols = list(sim.columns)
    at = cols.index("n_undefined") + 1
    front = [c for c in cols[:at] if c not in ("n_failed", "n_unparseable")]
    rest = [c for c in cols[at:] if c not in ("n_failed", "n_unparseable")]
    return sim[front + ["n_failed", "n_unparseable"] + rest]


def values_without_similarity(sim: pd.DataFrame, k: int) -> dict[tuple, list[str]]:
    """The values an attribute's SNSR/SNSV@k leave out: no scored list, or only pairs of two
    empty lists, so their Sim(a)@k is undefined (FaiRLLM §3.1 ranges over the values that have
    one).

    Args:
        sim: :func:`lmra.recsys.metrics.similarity_table` output (an ``analysis`` column kept
            when present); k: the cut-off.

    Returns:
        ``{(analysis or None, attribute, metric): [values, in the table's order]}``, only keys with
        at least one such value.
    """
    d = sim[(sim["k"] == k) & ~np.isfinite(sim["similarity"].astype(float))]
    out: dict[tuple, list[str]] = {}
    for r in d.itertuples(index=False):
        key = (getattr(r, "analysis", None), r.attribute, r.metric)
        out.setdefault(key, []).append(str(r.value))
    return out


def build_summary(lists: pd.DataFrame, sim: pd.DataFrame, fair: pd.DataFrame, *, k: int, convention: str,
                  dropped: dict[str, int], matched: bool = False) -> dict[str, Any]:
    """Counts and headline numbers of a run (nothing is dropped silently): ``dropped`` is the
    counts dict of :func:`score_frame`. When the lists hold their answers' text (``raw``):
    ``template_tokens`` (answers with chat-template tokens, and answers per token, counted by
    the audit's detector, :func:`lmra.identity.count_template_tokens`) and ``warnings`` (the
    audit's line when some answer held one)."""
    n = len(lists)
    ok = lists[lists["error"].isna()] if "error" in lists.columns else lists
    n_items = ok["n_items"] if "n_items" in ok.columns else ok["keys"].map(len)
    # lists that hold a list (not failed, refused or unparseable): how many have fewer than K
    # distinct items in their top K (duplicates count under the fairllm-code convention only)
    listed = ok[~_flag(ok, "parse_failed") & ~_flag(ok, "refusal")]
    col = "compare" if "compare" in listed.columns else "keys"
    out: dict[str, Any] = {
        "k": k, "convention": convention, "n_lists": n,
        "n_instruction_families": int(lists["instruction_id"].nunique()),
        "failed_calls": dropped["failed_calls"],
        "dropped_with_failed_neutral": dropped["dropped_with_failed_neutral"],
        "unparseable_unscored": dropped["unparseable_unscored"],
        "dropped_with_unparseable_neutral": dropped["dropped_with_unparseable_neutral"],
        "dropped_with_empty_neutral": dropped["dropped_with_empty_neutral"],
        "sensitive_scored": dropped["sensitive_scored"],
        "refusals": int(ok["refusal"].fillna(False).astype(bool).sum()) if "refusal" in ok.columns else 0,
        "parse_failures": int(ok["parse_failed"].fillna(False).astype(bool).sum()) if "parse_failed" in ok.columns
        else 0,
        # answers the fairllm-code parser read as an empty list: scored 0, as the released code does
        "empty_parses_scored": int(_flag(ok, "empty_parse").sum()),
        "items_parsed": int(n_items.sum()),
        "items_dropped_empty": int(ok["n_dropped"].fillna(0).sum()) if "n_dropped" in ok.columns else 0,
        "duplicate_items": int(ok["n_duplicates"].fillna(0).sum()) if "n_duplicates" in ok.columns else 0,
        "lists_shorter_than_k": int(sum(len(top_k(x, k, convention=convention)) < k for x in listed[col])),
        "mean_list_length": float(n_items.mean()) if len(n_items) else math.nan,
    }
    if "raw" in ok.columns:  # a model served with another model's chat template (the audit's warning)
        from lmra.identity import count_template_tokens

        tokens = count_template_tokens(r for r in ok["raw"] if isinstance(r, str))
        warning = tokens.template_tokens_warning("target")
        out |= {"template_tokens": tokens.template_tokens_field(), "warnings": [warning] if warning else []}
    if "served_model" in ok.columns:  # the models the endpoint said answered, as an audit counts them (s47)
        from lmra.identity import ServedCounts

        served = ServedCounts()
        fresh = ~_flag(ok, "from_cache")
        for model, new in zip(ok["served_model"], fresh):
            if isinstance(model, str) and model:
                served.model[model] += 1
                if new:
                    served.model_fresh[model] += 1
        out["served_models"] = dict(served.model.most_common())
        warning = served.served_models_warning("target")
        out["warnings"] = out.get("warnings", []) + ([warning] if warning else [])
    if "finish_reason" in ok.columns:  # answers the provider stopped but that hold a list, scored on what they hold
        # (break-it finding, s39: 7 of 15 lists stopped by the content filter were scored without a count)
        from lmra.providers.base import FILTER_FINISH_REASONS, TRUNCATED_FINISH_REASONS

        held = ok[~_flag(ok, "refusal") & ~_flag(ok, "parse_failed")]["finish_reason"]
        out["lists_filtered"] = int(held.isin(FILTER_FINISH_REASONS).sum())
        window = held == "model_context_window_exceeded"  # cut by the context window, not max_tokens (round-3, s48)
        out["lists_cut_at_max_tokens"] = int((held.isin(TRUNCATED_FINISH_REASONS) & ~window).sum())
        out["lists_cut_by_context_window"] = int(window.sum())
    if "cut_tail" in ok.columns:  # their last, unterminated line left out: possibly half-written (break-it, s47)
        out["cut_tails_left_out"] = int(_flag(ok, "cut_tail").sum())
    if "n_profile_echoes" in ok.columns:
        out["profile_echoes"] = int(ok["n_profile_echoes"].fillna(0).sum())
    if matched and "n_unmatched" in ok.columns:
        out["items_unmatched"] = int(ok["n_unmatched"].fillna(0).sum())
        out["items_matched"] = out["items_parsed"] - out["items_unmatched"]
    if "n_unmatched_top_k" in ok.columns:
        # titles in the top-K lists not in the catalogue: no recommendation for bias disparity
        out["items_unmatched_top_k"] = int(ok["n_unmatched_top_k"].fillna(0).sum())
    at_k = fair[fair["k"] == k]
    undefined = values_without_similarity(sim, k)
    out["fairness_at_k"] = [
        {c: r[c] for c in at_k.columns if c in ("analysis", "attribute", "kind", "metric", "snsr", "snsv", "snsr_p",
                                               "snsv_p", "p_min", "max_value", "min_value")}
        | {"n_values": int(r["n_values"]),
           "values_undefined": undefined.get((r.get("analysis"), r["attribute"], r["metric"]), [])}
        for _, r in at_k.iterrows()]
    und = sim[(sim["k"] == k) & (sim["metric"] == METRICS[0])]
    out["pairs_undefined_at_k"] = int(und["n_undefined"].sum()) if len(und) else 0
    # the most values any attribute has in the similarity table at K, defined or not: with no
    # fairness row, whether some attribute was meant to compare two values (nothing_scored)
    groups = [c for c in ("analysis", "attribute") if c in und.columns]
    out["most_values_per_attribute"] = int(und.groupby(groups, dropna=False)["value"].nunique().max()) \
        if len(und) and groups else 0
    # the attributes of two values or more with fewer than two defined at K, from the similarity table
    # (break-it round 3: one whose every value failed has no fairness row at all, and passed as measured);
    # the lists' own analysis only — CFaiRLLM's true-preference one is undefined wherever the titles
    # match no catalogue item, and says so in its own table
    unmeasured: list[str] = []
    main = und[und["analysis"].isin(["item_similarity"]) | und["analysis"].isna()] if "analysis" in und.columns \
        else und
    if len(main):
        defined = np.isfinite(main["similarity"].astype(float))
        for attribute, g in main.groupby("attribute", sort=False):
            if g["value"].nunique() >= 2 and g.loc[defined[g.index], "value"].nunique() < 2:
                unmeasured.append(str(attribute))
    out["attributes_unmeasured"] = unmeasured
    return out


def run_bias(cfg: RecsysConfig, cf: CfairContext, lists: pd.DataFrame
             ) -> tuple[pd.DataFrame, pd.DataFrame | None, dict[str, float]]:
    """Bias disparity of a CFaiRLLM run (Mansoury et al. 2019; methodology §7): per prompt
    variant (the lists' ``attribute``) and ``cfairllm.bias_groups`` attribute, the training
    ratings of the sampled users against their ``recommended`` items (records of
    :func:`~lmra.recsys.records.list_record`; failed calls left out).

    Returns:
        (table: ``variant``, ``group_by`` and :data:`~lmra.recsys.bias_disparity.TABLE_COLUMNS`;
        :func:`~lmra.recsys.bias_disparity.disparity_summary` or None when the table is empty;
        item coverage per variant; per variant with a recommendation, the sampled users left out
        of T and R for having none there, ``{"users", "of", "example"}``).
    """
    c = cfg.cfairllm
    train = cf.split[(cf.split["split"] == "train") & cf.split["user_id"].isin(cf.users)][["user_id", "item_id"]]
    movies = cf.data.movies
    catalog = list(movies["item_id"])
    info = cf.data.users.set_index("user_id")
    col = {"gender": "gender", "age": "age_group"}
    tables, coverage, left_out = [], {}, {}
    ok = lists[lists["error"].isna()]
    for variant, d in ok.groupby("attribute", sort=False):
        # "recommended" = the matched items among the top-K list (see list_record), already cut at K
        recs = pd.DataFrame([(u, i) for u, ids in zip(d["user_id"], d["recommended"]) for i in ids],
                            columns=["user_id", "item_id"])
        coverage[str(variant)] = bdm.item_coverage(d["recommended"], catalog)
        if recs.empty:  # no matched recommendation in this variant (e.g. only profile echoes)
            continue
        left = bdm.users_left_out(cf.users, recs)  # (a failed call, no matched title): out of T and R, said
        if left:
            left_out[str(variant)] = {"users": len(left), "of": len(cf.users), "example": left[0]}
        for g in c.bias_groups:
            groups = {u: str(info.at[u, col[g]]) for u in cf.users}
            # only users who received recommendations count, on both the T and the R side
            t = bdm.bias_disparity_table(train, recs, groups, movies, catalog, users=set(recs["user_id"]))
            t.insert(0, "group_by", g)
            t.insert(0, "variant", str(variant))
            tables.append(t)
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(
        columns=["variant", "group_by", *bdm.TABLE_COLUMNS])
    summary = bdm.disparity_summary(table, unprotected=c.unprotected, protected=c.protected) if len(table) else None
    return table, summary, coverage, left_out


def nothing_scored(summary: dict[str, Any]) -> bool:
    """True when a run (or scoring) measured no unfairness: it compared no sensitive list with
    its neutral list — every call failed, every answer was unparseable, or the neutral lists
    were — or no attribute has two values with a defined similarity at K although one has two
    values or more, so that no SNSR/SNSV exists (fresh-user finding: 7 of 15 answers unparseable left every SNSR undefined, exit 0,
    and a scheduled job counted it a success). Its status is then ``failed`` and ``lmra recsys``
    (and ``recsys score``) exits 1."""
    if summary["sensitive_scored"] == 0:
        return True
    rows = summary.get("fairness_at_k") or []
    if any((r.get("n_values") or 0) >= 2 for r in rows):
        return False
    # none measured: a failure when some attribute was meant to compare two values or more (lists
    # of a single value per attribute — similarity only — have no SNSR to measure by design);
    # with no fairness row at all (every value undefined, e.g. every answer a refusal: break-it
    # finding, exit 0), the similarity table says how many values an attribute had
    return any((r.get("n_values") or 0) + len(r.get("values_undefined") or []) >= 2 for r in rows) \
        or (summary.get("most_values_per_attribute") or 0) >= 2


def unmeasured_attributes(summary: dict[str, Any]) -> list[str]:
    """The attributes meant to compare two values or more whose SNSR/SNSV is undefined at K —
    fewer than two of their values have a defined similarity (the others' calls failed, or their
    answers held no list) — in the order of ``fairness_at_k``; empty when every such attribute was
    measured, or when none was (:func:`nothing_scored`). A run with such an attribute is
    ``partial`` and exits 1 (break-it finding: every "a girl" call timed out, 20 % of the calls,
    and the run said "finished", exit 0, with gender measured by nothing)."""
    if nothing_scored(summary):
        return []
    if "attributes_unmeasured" in summary:  # (from the similarity table: every attribute, rows or not)
        return list(summary["attributes_unmeasured"])
    rows = summary.get("fairness_at_k") or []
    out: list[str] = []
    for r in rows:
        n = r.get("n_values") or 0
        label = str(r["attribute"]) if r.get("analysis") in (None, "item_similarity") else \
            f"{r['attribute']} ({r['analysis']})"
        if n < 2 and n + len(r.get("values_undefined") or []) >= 2 and label not in out:
            out.append(label)
    return out


def partial_message(attributes: list[str]) -> str:
    """Why a recsys run with :func:`unmeasured_attributes` is ``partial``, one sentence."""
    each = "it has" if len(attributes) == 1 else "each has"
    return (f"no unfairness measured for {', '.join(attributes)}: {each} fewer than two values with a defined "
            "similarity at K (the other values' calls failed, or their answers held no list), so its SNSR/SNSV are "
            "undefined; the other attributes' results stand")


def nothing_scored_message(summary: dict[str, Any], lists: pd.DataFrame, *, called: bool = True) -> str:
    """The one-paragraph reason :func:`nothing_scored` gives, with the first call error.
    ``called``: the lists came from the run's own calls (``lmra recsys``), not from a file
    (``lmra recsys score``, whose lists may record an error but made no call)."""
    errors = [e for e in lists.get("error", []) if isinstance(e, str)] if "error" in lists.columns else []
    parts = [f"{summary.get('failed_calls', 0)} of {summary.get('n_lists', 0)} "
             + ("target calls failed" if called else "lists recorded a failed call")]
    if summary.get("refusals"):
        parts.append(f"{summary['refusals']} answers were refusals, an empty list each")
    for key, what in (("dropped_with_failed_neutral", "lost with their failed neutral call"),
                      ("unparseable_unscored", "held no list (not a refusal)"),
                      ("dropped_with_unparseable_neutral", "lost because their neutral answer held no list"),
                      ("dropped_with_empty_neutral", "lost because their neutral list was empty")):
        if summary.get(key):
            parts.append(f"{summary[key]} sensitive lists {what}")
    first = f"; first error: {errors[0]}" if errors else ""
    if summary.get("sensitive_scored"):
        return (f"no unfairness could be measured: {summary['sensitive_scored']} sensitive lists were compared with "
                "their neutral lists, but no attribute has two values with a defined similarity at K, so every "
                "SNSR/SNSV is undefined (" + ", ".join(parts) + ")" + first)
    return "no sensitive list could be compared with its neutral list: " + ", ".join(parts) + first


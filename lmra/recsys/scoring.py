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

import pandas as pd

from lmra.recsys import bias_disparity as bdm
from lmra.recsys.config import RecsysConfig
from lmra.recsys.inputs import CfairContext
from lmra.recsys.metrics import METRICS, fairness_table, similarity_table


def score_frame(lists: pd.DataFrame, *, k: int, convention: str) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """Similarity and fairness tables from a lists table (one row per instruction).

    Rows whose model call failed (``error`` set) are left out, and so is every row of an
    instruction whose *neutral* call failed; both are counted in the returned dict. Column
    ``compare`` (else ``keys``) holds the item-similarity lists; if any row has
    ``true_pref``, a second analysis ``true_preference`` is added (CFaiRLLM §3.4).

    Returns:
        (similarity, fairness, {"failed_calls": …, "dropped_with_failed_neutral": …}).
    """
    d = lists.copy()
    err = d["error"].notna() if "error" in d.columns else pd.Series(False, index=d.index)
    failed_neutral = set(d.loc[err & (d["attribute"] == "neutral"), "instruction_id"])
    keep = ~err & ~d["instruction_id"].isin(failed_neutral)
    dropped = {"failed_calls": int(err.sum()),
               "dropped_with_failed_neutral": int((~err & d["instruction_id"].isin(failed_neutral)).sum())}
    d = d[keep]
    col = "compare" if "compare" in d.columns else "keys"
    sims = [similarity_table(d, k, convention=convention, items_column=col, analysis="item_similarity")]
    if "true_pref" in d.columns and d["true_pref"].notna().any():
        tp = d.assign(true_pref=d["true_pref"].map(lambda x: x if isinstance(x, list) else []))
        # R′_k = the items of R′ ranked ≤ k in the top-K list (``true_pref_ranks``); a list without
        # ranks is read as a ranking of its own (R′_k = its first k items)
        given = tp["true_pref_ranks"] if "true_pref_ranks" in tp.columns else pd.Series(None, index=tp.index)
        ranks = [r if isinstance(r, list) else list(range(1, len(t) + 1)) for t, r in zip(tp["true_pref"], given)]
        tp = tp.assign(true_pref_ranks=pd.Series(ranks, index=tp.index, dtype=object))
        sims.append(similarity_table(tp, k, convention=convention, items_column="true_pref",
                                     analysis="true_preference", ranks_column="true_pref_ranks"))
    sim = pd.concat(sims, ignore_index=True)
    return sim, fairness_table(sim), dropped


def build_summary(lists: pd.DataFrame, sim: pd.DataFrame, fair: pd.DataFrame, *, k: int, convention: str,
                  dropped: dict[str, int], matched: bool = False) -> dict[str, Any]:
    """Counts and headline numbers of a run (nothing is dropped silently)."""
    n = len(lists)
    ok = lists[lists["error"].isna()] if "error" in lists.columns else lists
    n_items = ok["n_items"] if "n_items" in ok.columns else ok["keys"].map(len)
    out: dict[str, Any] = {
        "k": k, "convention": convention, "n_lists": n,
        "n_instruction_families": int(lists["instruction_id"].nunique()),
        "failed_calls": dropped["failed_calls"],
        "dropped_with_failed_neutral": dropped["dropped_with_failed_neutral"],
        "refusals": int(ok["refusal"].fillna(False).astype(bool).sum()) if "refusal" in ok.columns else 0,
        "parse_failures": int(ok["parse_failed"].fillna(False).astype(bool).sum()) if "parse_failed" in ok.columns
        else 0,
        "items_parsed": int(n_items.sum()),
        "items_dropped_empty": int(ok["n_dropped"].fillna(0).sum()) if "n_dropped" in ok.columns else 0,
        "duplicate_items": int(ok["n_duplicates"].fillna(0).sum()) if "n_duplicates" in ok.columns else 0,
        "lists_shorter_than_k": int((n_items < k).sum()),
        "mean_list_length": float(n_items.mean()) if len(n_items) else math.nan,
    }
    if "n_profile_echoes" in ok.columns:
        out["profile_echoes"] = int(ok["n_profile_echoes"].fillna(0).sum())
    if matched and "n_unmatched" in ok.columns:
        out["items_unmatched"] = int(ok["n_unmatched"].fillna(0).sum())
        out["items_matched"] = out["items_parsed"] - out["items_unmatched"]
    if "n_unmatched_top_k" in ok.columns:
        # titles in the top-K lists not in the catalogue: no recommendation for bias disparity
        out["items_unmatched_top_k"] = int(ok["n_unmatched_top_k"].fillna(0).sum())
    at_k = fair[fair["k"] == k]
    out["fairness_at_k"] = [
        {c: r[c] for c in at_k.columns if c in ("analysis", "attribute", "kind", "metric", "snsr", "snsv", "max_value",
                                               "min_value")}
        for _, r in at_k.iterrows()]
    und = sim[(sim["k"] == k) & (sim["metric"] == METRICS[0])]
    out["pairs_undefined_at_k"] = int(und["n_undefined"].sum()) if len(und) else 0
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
        item coverage per variant).
    """
    c = cfg.cfairllm
    train = cf.split[(cf.split["split"] == "train") & cf.split["user_id"].isin(cf.users)][["user_id", "item_id"]]
    movies = cf.data.movies
    catalog = list(movies["item_id"])
    info = cf.data.users.set_index("user_id")
    col = {"gender": "gender", "age": "age_group"}
    tables, coverage = [], {}
    ok = lists[lists["error"].isna()]
    for variant, d in ok.groupby("attribute", sort=False):
        # "recommended" = the matched items among the top-K list (see list_record), already cut at K
        recs = pd.DataFrame([(u, i) for u, ids in zip(d["user_id"], d["recommended"]) for i in ids],
                            columns=["user_id", "item_id"])
        coverage[str(variant)] = bdm.item_coverage(d["recommended"], catalog)
        if recs.empty:  # no matched recommendation in this variant (e.g. only profile echoes)
            continue
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
    return table, summary, coverage

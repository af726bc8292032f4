"""Bias disparity between a group's preferences and its recommendations
(Mansoury, Mobasher, Burke & Pechenizkiy 2019, "Bias Disparity in Collaborative
Recommendation: Algorithmic Evaluation and Comparison", §3; methodology §7).

For a user group G, an item category C, a binary user×item matrix S (T = training data,
R = recommendations) and a catalog I:

- preference ratio (eq. 1)  ``PR_S(G,C) = Σ_{u∈G} Σ_{i∈C} S(u,i) / Σ_{u∈G} Σ_{i∈I} S(u,i)``
- bias (eq. 2)              ``B_S(G,C) = PR_S(G,C) / P(C)``, ``P(C) = |C| / |I|``
- bias disparity (eq. 3)    ``BD(G,C) = (B_R(G,C) − B_T(G,C)) / B_T(G,C)``
- average disparity (eq. 4, as implemented here) ``BD̄(G) = (1/|C|) Σ_C |BD(G,C)|`` over the
  categories where BD is defined, reported for the unprotected and the protected group side
  by side with their difference, and the mean per-category gap
  ``(1/|C|) Σ_C |BD(G_u,C) − BD(G_p,C)|`` (see docs/recsys.md for the uncertainty about eq. 4)
- item coverage             ``|∪_u R(u)| / |I|``

Items may belong to several categories (MovieLens genres); an interaction then counts in
each of its categories' numerators and once in the denominator, as in eq. 1.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd


# --- the formulas, on dense matrices ----------------------------------------------------------

def preference_ratio(matrix: np.ndarray, group: np.ndarray, category: np.ndarray) -> float:
    """PR_S(G, C) (Mansoury et al. 2019, eq. 1).

    Args:
        matrix: binary (0/1 or bool) array of shape (users, items).
        group: bool mask of shape (users,) selecting G.
        category: bool mask of shape (items,) selecting C.

    Returns:
        The share of G's interactions that fall in C, in [0, 1]; NaN when G has no interaction.
    """
    m = np.asarray(matrix, dtype=float)[np.asarray(group, dtype=bool)]
    den = m.sum()
    return float(m[:, np.asarray(category, dtype=bool)].sum() / den) if den > 0 else math.nan


def category_share(category: np.ndarray) -> float:
    """P(C) = |C| / |I| (eq. 2): the share of catalog items in category C.

    Args:
        category: bool mask of shape (items,) over the whole catalog.

    Returns:
        A value in [0, 1]; NaN for an empty catalog.
    """
    c = np.asarray(category, dtype=bool)
    return float(c.sum() / c.size) if c.size else math.nan


def bias(pr: float, p_c: float) -> float:
    """B(G, C) = PR(G, C) / P(C) (eq. 2). 1 = the group's share of C equals C's catalog share.

    Returns NaN when P(C) is 0 or either input is NaN.
    """
    return pr / p_c if p_c and not (math.isnan(pr) or math.isnan(p_c)) else math.nan


def bias_disparity(bias_rec: float, bias_train: float) -> float:
    """BD(G, C) = (B_R − B_T) / B_T (eq. 3): relative change of the group's bias on C from the
    training data to the recommendations. > 0 amplified, < 0 dampened, −1 = C vanished from
    the recommendations. NaN when B_T is 0 or NaN."""
    if math.isnan(bias_rec) or math.isnan(bias_train) or bias_train == 0:
        return math.nan
    return (bias_rec - bias_train) / bias_train


def average_disparity(disparities: Iterable[float]) -> float:
    """BD̄(G) = mean over categories of |BD(G, C)| (our reading of eq. 4; NaNs skipped).

    Returns NaN when no category has a defined BD.
    """
    x = np.asarray(list(disparities), dtype=float)
    x = x[np.isfinite(x)]
    return float(np.abs(x).mean()) if x.size else math.nan


def item_coverage(lists: Iterable[Iterable[Hashable]], catalog: Collection[Hashable]) -> float:
    """Share of catalog items that appear in at least one recommendation list (items outside
    the catalog are ignored). NaN for an empty catalog."""
    cat = set(catalog)
    if not cat:
        return math.nan
    seen = {i for lst in lists for i in lst if i in cat}
    return len(seen) / len(cat)


# --- tables from interaction lists ------------------------------------------------------------

def _categories(item_categories: Mapping[Hashable, Sequence[str]] | pd.DataFrame) -> dict[Hashable, list[str]]:
    if isinstance(item_categories, pd.DataFrame):
        col = "genres" if "genres" in item_categories.columns else "categories"
        return dict(zip(item_categories["item_id"], item_categories[col]))
    return {k: list(v) for k, v in item_categories.items()}


def _preference(pairs: pd.DataFrame, groups: Mapping[Hashable, str], cats: dict[Hashable, list[str]]) -> pd.DataFrame:
    """PR per (group, category) from (user_id, item_id) pairs."""
    d = pairs[["user_id", "item_id"]].drop_duplicates()
    d = d.assign(group=d["user_id"].map(groups)).dropna(subset=["group"])
    total = d.groupby("group").size().rename("n_interactions")
    d = d.assign(category=d["item_id"].map(lambda i: cats.get(i, []))).explode("category").dropna(subset=["category"])
    num = d.groupby(["group", "category"]).size().rename("n_in_category")
    out = num.reset_index().merge(total.reset_index(), on="group", how="right")
    out["preference_ratio"] = out["n_in_category"] / out["n_interactions"]
    return out


def bias_disparity_table(train: pd.DataFrame, recs: pd.DataFrame, user_groups: Mapping[Hashable, str],
                         item_categories: Mapping[Hashable, Sequence[str]] | pd.DataFrame,
                         catalog: Collection[Hashable] | None = None, *,
                         users: Collection[Hashable] | None = None) -> pd.DataFrame:
    """PR, bias and bias disparity for every (group, category) (Mansoury et al. 2019, eqs. 1–3).

    Args:
        train: the input preferences T, columns ``user_id``, ``item_id`` (one row per
            interaction; repeats count once).
        recs: the recommendations R, same columns (e.g. the matched items of LLM lists).
        user_groups: user_id → group label (e.g. recorded gender, or the sensitive value
            injected in the prompt). Users without a group are left out.
        item_categories: item_id → categories (e.g. genres), or a movies table with
            ``item_id`` and ``genres`` columns.
        catalog: the item set I for P(C) (default: every item in ``item_categories``).
        users: restrict T and R to these users (default: the users present in ``recs``, so
            that T and R describe the same people).

    Returns:
        One row per (group, category) with ``n_users``, ``pr_train``, ``bias_train``,
        ``pr_rec``, ``bias_rec``, ``bias_disparity`` (NaN where B_T = 0) and ``p_category``.
        Categories never seen in T or R have PR = 0. No rows (same columns) when no user
        with a group received recommendations.
    """
    cats = _categories(item_categories)
    catalog = list(cats) if catalog is None else list(catalog)
    users = set(recs["user_id"]) if users is None else set(users)
    train = train[train["user_id"].isin(users)]
    recs = recs[recs["user_id"].isin(users)]
    n_items = len(set(catalog))
    p_c = pd.Series([c for i in set(catalog) for c in cats.get(i, [])]).value_counts() / max(n_items, 1)
    groups = {u: g for u, g in user_groups.items() if u in users}
    columns = ["group", "category", "n_users", "pr_train", "bias_train", "pr_rec", "bias_rec", "bias_disparity",
               "p_category"]
    if not groups:  # no user with a group received recommendations: nothing to compare
        return pd.DataFrame(columns=columns)
    tr = _preference(train, groups, cats)
    rc = _preference(recs, groups, cats)
    all_groups = sorted(set(groups.values()), key=str)
    all_cats = sorted(p_c.index, key=str)
    grid = pd.MultiIndex.from_product([all_groups, all_cats], names=["group", "category"]).to_frame(index=False)

    def side(df: pd.DataFrame, tag: str) -> pd.DataFrame:
        pr = df.dropna(subset=["category"]).set_index(["group", "category"])["preference_ratio"]
        tot = df.groupby("group")["n_interactions"].first()
        s = grid.join(pr.rename(f"pr_{tag}"), on=["group", "category"])
        has = s["group"].map(tot).fillna(0) > 0
        s.loc[has & s[f"pr_{tag}"].isna(), f"pr_{tag}"] = 0.0
        return s[[f"pr_{tag}"]]

    out = pd.concat([grid, side(tr, "train"), side(rc, "rec")], axis=1)
    out["p_category"] = out["category"].map(p_c).astype(float)
    out["bias_train"] = out["pr_train"] / out["p_category"]
    out["bias_rec"] = out["pr_rec"] / out["p_category"]
    bt = out["bias_train"]
    out["bias_disparity"] = np.where(bt > 0, (out["bias_rec"] - bt) / bt.where(bt > 0), np.nan)
    size = pd.Series(list(groups.values())).value_counts()
    out.insert(2, "n_users", out["group"].map(size).fillna(0).astype(int))
    return out[columns]


def disparity_summary(table: pd.DataFrame, *, unprotected: str | None = None,
                      protected: str | None = None) -> pd.DataFrame:
    """Average disparity per group, and between an unprotected and a protected group, from a
    :func:`bias_disparity_table` (Mansoury et al. 2019, eq. 4 as read here; see docs/recsys.md).

    Args:
        table: output of :func:`bias_disparity_table` (extra key columns such as ``variant``
            are kept as keys).
        unprotected, protected: group labels to compare. When both are given and present, a
            row ``group = "<unprotected> − <protected>"`` is added per key with
            ``average_disparity`` = BD̄(unprotected) − BD̄(protected) and ``mean_abs_gap`` =
            (1/|C'|) Σ_{C∈C'} |BD(unprotected, C) − BD(protected, C)| over the categories C'
            where both groups' BD is defined.

    Returns:
        Rows ([keys …,] ``group``, ``average_disparity``, ``mean_abs_gap``, ``n_categories``):
        for a group row ``average_disparity`` = BD̄(G) in [0, ∞), ``mean_abs_gap`` NaN and
        ``n_categories`` the categories with a defined BD; for the comparison row
        ``average_disparity`` in (−∞, ∞), ``mean_abs_gap`` in [0, ∞) (NaN when no category is
        defined for both) and ``n_categories`` = |C'|.
    """
    cols = ["group", "average_disparity", "mean_abs_gap", "n_categories"]
    keys = [c for c in table.columns if c not in {"group", "category", "n_users", "pr_train", "bias_train", "pr_rec",
                                                     "bias_rec", "bias_disparity", "p_category"}]
    rows = []
    for key, d in table.groupby(keys + ["group"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        bd = d["bias_disparity"].to_numpy(dtype=float)
        rows.append(dict(zip(keys + ["group"], key)) | {
            "average_disparity": average_disparity(bd), "mean_abs_gap": math.nan,
            "n_categories": int(np.isfinite(bd).sum())})
    out = pd.DataFrame(rows, columns=keys + cols)
    if unprotected is None or protected is None or out.empty:
        return out
    extra = []
    for key, d in (table.groupby(keys, sort=False) if keys else [((), table)]):
        key = key if isinstance(key, tuple) else (key,)
        wide = d.pivot_table(index="category", columns="group", values="bias_disparity", aggfunc="first",
                             dropna=False)
        if unprotected not in wide.columns or protected not in wide.columns:
            continue
        gap = (wide[unprotected] - wide[protected]).to_numpy(dtype=float)
        gap = gap[np.isfinite(gap)]
        extra.append(dict(zip(keys, key)) | {
            "group": f"{unprotected} − {protected}",
            "average_disparity": average_disparity(wide[unprotected]) - average_disparity(wide[protected]),
            "mean_abs_gap": float(np.abs(gap).mean()) if gap.size else math.nan,
            "n_categories": int(gap.size)})
    return pd.concat([out, pd.DataFrame(extra, columns=keys + cols)], ignore_index=True) if extra else out

"""Bias disparity between a group's preferences and its recommendations
(Mansoury, Mobasher, Burke & Pechenizkiy 2019, "Bias Disparity in Collaborative
Recommendation: Algorithmic Evaluation and Comparison", §3; methodology §7).

For a user group G, an item category C, a binary user×item matrix S (T = training data,
R = recommendations) and a catalog I:

- category count            ``N_S(G,C) = Σ_{u∈G} Σ_{i∈C} S(u,i)`` — the number of items of C in
  the lists (S = R) or training data (S = T) of the users in G
- preference ratio (eq. 1)  ``PR_S(G,C) = N_S(G,C) / Σ_{u∈G} Σ_{i∈I} S(u,i)``
- bias (eq. 2)              ``B_S(G,C) = PR_S(G,C) / P(C)``, ``P(C) = |C| / |I|``
- bias disparity (eq. 3)    ``BD(G,C) = (B_R(G,C) − B_T(G,C)) / B_T(G,C)``
- average disparity (eq. 4) between an unprotected group G_U and a protected group G_P::

      disparity = (1/|C|) Σ_{i=1..|C|} |(N_R(G_U,C_i) − N_T(G_U,C_i)) − (N_R(G_P,C_i) − N_T(G_P,C_i))|

  on counts (not ratios), over every category C_i of the catalog
- item coverage             ``|∪_u R(u)| / |I|``

Two further aggregates of eq. 3, which earlier versions of lmra reported as "average
disparity", are kept under their own names: ``mean_abs_bd`` = BD̄(G) = mean over categories
of |BD(G,C)| (per group), its difference between the two groups ``mean_abs_bd_difference``,
and the mean per-category gap ``mean_abs_bd_gap`` = mean over C of |BD(G_U,C) − BD(G_P,C)|.

Items may belong to several categories (MovieLens genres); an interaction then counts in
each of its categories' numerators (and counts N) and once in the denominator, as in eq. 1.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd


# --- the formulas, on dense matrices ----------------------------------------------------------

#: Columns of :func:`bias_disparity_table` (without extra key columns such as ``variant``).
TABLE_COLUMNS: tuple[str, ...] = ("group", "category", "n_users", "n_train", "pr_train", "bias_train", "n_rec",
                                  "pr_rec", "bias_rec", "bias_disparity", "p_category")
#: Columns of :func:`disparity_summary` (after the key columns).
SUMMARY_COLUMNS: tuple[str, ...] = ("group", "average_disparity", "n_categories", "mean_abs_bd",
                                    "mean_abs_bd_difference", "mean_abs_bd_gap", "n_categories_bd")


def category_count(matrix: np.ndarray, group: np.ndarray, category: np.ndarray) -> int:
    """N_S(G, C) = Σ_{u∈G} Σ_{i∈C} S(u, i) (Mansoury et al. 2019, §3, eqs. 1 and 4): the number
    of items of category C in the lists (S = R) or training data (S = T) of the users in G.

    Args:
        matrix: binary (0/1 or bool) array of shape (users, items).
        group: bool mask of shape (users,) selecting G.
        category: bool mask of shape (items,) selecting C.

    Returns:
        A count ≥ 0 (an item recommended to two users of G counts twice).
    """
    m = np.asarray(matrix, dtype=float)[np.asarray(group, dtype=bool)]
    return int(m[:, np.asarray(category, dtype=bool)].sum())


def preference_ratio(matrix: np.ndarray, group: np.ndarray, category: np.ndarray) -> float:
    """PR_S(G, C) = N_S(G, C) / Σ_{u∈G} Σ_{i∈I} S(u, i) (Mansoury et al. 2019, eq. 1).

    Args:
        matrix: binary (0/1 or bool) array of shape (users, items).
        group: bool mask of shape (users,) selecting G.
        category: bool mask of shape (items,) selecting C.

    Returns:
        The share of G's interactions that fall in C, in [0, 1]; NaN when G has no interaction.
    """
    den = np.asarray(matrix, dtype=float)[np.asarray(group, dtype=bool)].sum()
    return category_count(matrix, group, category) / float(den) if den > 0 else math.nan


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


def average_disparity(n_rec_unprotected: Sequence[float], n_train_unprotected: Sequence[float],
                      n_rec_protected: Sequence[float], n_train_protected: Sequence[float]) -> float:
    """Average disparity between an unprotected group G_U and a protected group G_P
    (Mansoury et al. 2019, §3, eq. 4)::

        disparity = (1/|C|) Σ_{i=1..|C|} |(N_R(G_U,C_i) − N_T(G_U,C_i)) − (N_R(G_P,C_i) − N_T(G_P,C_i))|

    Args:
        n_rec_unprotected, n_train_unprotected: N_R(G_U, C_i) and N_T(G_U, C_i) for the
            categories C_1..C_|C| (see :func:`category_count`), each of shape (|C|,).
        n_rec_protected, n_train_protected: the same for G_P, same category order.

    Returns:
        A value ≥ 0 in items (counts, not ratios: it grows with the groups' sizes and list
        lengths); NaN when there is no category.

    Raises:
        ValueError: the four sequences do not have the same number of categories.
    """
    arrays = [np.asarray(list(x), dtype=float) for x in
              (n_rec_unprotected, n_train_unprotected, n_rec_protected, n_train_protected)]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
        raise ValueError("N_R and N_T of both groups need the same number of categories "
                         f"(got {', '.join(str(a.size) for a in arrays)})")
    ru, tu, rp, tp = arrays
    return float(np.abs((ru - tu) - (rp - tp)).mean()) if ru.size else math.nan


def users_left_out(users: Collection[Hashable], recs: pd.DataFrame) -> list[Hashable]:
    """The users of ``users`` with no row in ``recs`` (``user_id`` column), in their order: left
    out of both T and R by :func:`bias_disparity_table` (T and R describe the same people), so
    their groups' N_T, PR_T and ``n_users`` count only the users compared.

    Args:
        users: the users whose preferences could enter T (e.g. a run's sampled users).
        recs: one variant's recommendations.
    """
    got = set(recs["user_id"])
    return [u for u in users if u not in got]


def left_out_note(variant: str, n_left: int, n_users: int, example: Hashable) -> str:
    """The one-line note for :func:`users_left_out`: ``n_left`` of ``n_users`` users, e.g.
    ``example`` (review finding: a user without a matched recommendation left its group's
    training side unsaid — its eq. 4 moved from 1 to 0)."""
    return (f"bias disparity, variant '{variant}': {n_left} of {n_users} users received no recommended item (e.g. "
            f"user '{example}') and are left out of both T and R — their groups' input preferences (n_users, N_T) "
            "count only the users compared")


def mean_abs_disparity(disparities: Iterable[float]) -> float:
    """BD̄(G) = mean over categories of |BD(G, C)|, NaNs (B_T = 0) skipped: an aggregate of
    eq. 3 for one group (reported as ``mean_abs_bd``; earlier versions of lmra called it the
    average disparity, which eq. 4 of Mansoury et al. 2019 defines differently, see
    :func:`average_disparity`).

    Returns:
        A value in [0, ∞); NaN when no category has a defined BD.
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
    """N_S (``n_in_category``) and PR per (group, category) from (user_id, item_id) pairs."""
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
    """Counts, PR, bias and bias disparity for every (group, category) (Mansoury et al. 2019,
    §3, eqs. 1–3 and the counts N_T, N_R of eq. 4).

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
        One row per (group, category) with ``n_users``, ``n_train`` = N_T(G, C) and ``n_rec`` =
        N_R(G, C) (counts of the group's training / recommended interactions with items of C,
        see :func:`category_count`), ``pr_train``, ``bias_train``, ``pr_rec``, ``bias_rec``,
        ``bias_disparity`` (NaN where B_T = 0) and ``p_category``. Categories never seen in T
        or R have N = 0 and PR = 0. No rows (same columns, :data:`TABLE_COLUMNS`) when no user
        with a group received recommendations.

    Raises:
        ValueError: an item of ``train`` or ``recs`` (of the users compared) outside the catalog
            I — PR's denominator sums over i ∈ I only, and dropping such items silently would
            change every PR of that user's group (match recommendations to the catalog first,
            e.g. with :class:`lmra.recsys.parse.CatalogMatcher`).
    """
    cats = _categories(item_categories)
    catalog = list(cats) if catalog is None else list(catalog)
    users = set(recs["user_id"]) if users is None else set(users)
    train = train[train["user_id"].isin(users)]
    recs = recs[recs["user_id"].isin(users)]
    known = set(catalog)
    for name, side in (("train", train), ("recs", recs)):
        outside = side.loc[~side["item_id"].isin(known), "item_id"].unique()
        if len(outside):
            shown = ", ".join(map(str, outside[:5])) + (" …" if len(outside) > 5 else "")
            raise ValueError(f"bias_disparity_table: {len(outside)} item(s) of {name} outside the catalog ({shown}); "
                             "PR(G, C) sums over catalog items only (Mansoury et al. 2019, §3)")
    n_items = len(set(catalog))
    p_c = pd.Series([c for i in set(catalog) for c in cats.get(i, [])]).value_counts() / max(n_items, 1)
    groups = {u: g for u, g in user_groups.items() if u in users}
    columns = list(TABLE_COLUMNS)
    if not groups:  # no user with a group received recommendations: nothing to compare
        return pd.DataFrame(columns=columns)
    tr = _preference(train, groups, cats)
    rc = _preference(recs, groups, cats)
    all_groups = sorted(set(groups.values()), key=str)
    all_cats = sorted(p_c.index, key=str)
    grid = pd.MultiIndex.from_product([all_groups, all_cats], names=["group", "category"]).to_frame(index=False)

    def side(df: pd.DataFrame, tag: str) -> pd.DataFrame:
        d = df.dropna(subset=["category"]).set_index(["group", "category"])
        tot = df.groupby("group")["n_interactions"].first()
        s = grid.join(d["preference_ratio"].rename(f"pr_{tag}"), on=["group", "category"])
        s = s.join(d["n_in_category"].rename(f"n_{tag}"), on=["group", "category"])
        s[f"n_{tag}"] = s[f"n_{tag}"].fillna(0).astype(int)  # N = 0 where the group never chose C
        has = s["group"].map(tot).fillna(0) > 0
        s.loc[has & s[f"pr_{tag}"].isna(), f"pr_{tag}"] = 0.0
        return s[[f"n_{tag}", f"pr_{tag}"]]

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
    """Average disparity between an unprotected and a protected group (Mansoury et al. 2019,
    §3, eq. 4) and the per-group aggregates of BD, from a :func:`bias_disparity_table`.

    Args:
        table: output of :func:`bias_disparity_table` (extra key columns such as ``variant``
            are kept as keys; without ``n_train``/``n_rec`` columns eq. 4 is NaN).
        unprotected, protected: group labels G_U and G_P. When both are given and present, a
            row ``group = "<unprotected> − <protected>"`` is added per key.

    Returns:
        Rows ([keys …,] :data:`SUMMARY_COLUMNS`):

        - one row per group: ``mean_abs_bd`` = BD̄(G) = mean over categories of |BD(G, C)| in
          [0, ∞) and ``n_categories_bd`` = the categories with a defined BD (B_T > 0); the other
          columns are empty;
        - the comparison row: ``average_disparity`` = eq. 4 on the counts N_R, N_T over the
          ``n_categories`` = |C| categories of the table (≥ 0, in items; NaN without counts),
          ``mean_abs_bd_difference`` = BD̄(G_U) − BD̄(G_P) in (−∞, ∞), ``mean_abs_bd_gap`` =
          mean over C' of |BD(G_U, C) − BD(G_P, C)| in [0, ∞) and ``n_categories_bd`` = |C'|,
          C' = the categories where both groups' BD is defined (NaN when there is none);
          ``mean_abs_bd`` is empty.

        ``n_categories`` and ``n_categories_bd`` are nullable integers (``Int64``).
    """
    cols = list(SUMMARY_COLUMNS)
    keys = [c for c in table.columns if c not in set(TABLE_COLUMNS)]
    rows = []
    for key, d in table.groupby(keys + ["group"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        bd = d["bias_disparity"].to_numpy(dtype=float)
        rows.append(dict(zip(keys + ["group"], key)) | {
            "mean_abs_bd": mean_abs_disparity(bd), "n_categories_bd": int(np.isfinite(bd).sum())})
    out = _summary_frame(rows, keys + cols)
    if unprotected is None or protected is None or out.empty:
        return out
    extra = []
    counts = {"n_rec", "n_train"} <= set(table.columns)
    for key, d in (table.groupby(keys, sort=False) if keys else [((), table)]):
        key = key if isinstance(key, tuple) else (key,)
        values = ["bias_disparity"] + (["n_rec", "n_train"] if counts else [])
        wide = d.pivot_table(index="category", columns="group", values=values, aggfunc="first", dropna=False)
        present = set(wide.columns.get_level_values("group"))
        if unprotected not in present or protected not in present:
            continue
        bd_u, bd_p = wide[("bias_disparity", unprotected)], wide[("bias_disparity", protected)]
        gap = (bd_u - bd_p).to_numpy(dtype=float)
        gap = gap[np.isfinite(gap)]
        row = dict(zip(keys, key)) | {
            "group": f"{unprotected} − {protected}", "average_disparity": math.nan, "n_categories": None,
            "mean_abs_bd_difference": mean_abs_disparity(bd_u) - mean_abs_disparity(bd_p),
            "mean_abs_bd_gap": float(np.abs(gap).mean()) if gap.size else math.nan, "n_categories_bd": int(gap.size)}
        if counts:
            n = wide[[("n_rec", unprotected), ("n_train", unprotected), ("n_rec", protected),
                      ("n_train", protected)]].dropna()  # categories with counts for both groups
            row |= {"average_disparity": average_disparity(*(n[c] for c in n.columns)), "n_categories": len(n)}
        extra.append(row)
    return _summary_frame(out.to_dict(orient="records") + extra, keys + cols)


def _summary_frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """The summary rows with nullable-integer counts and float measures (empty cells = NA/NaN)."""
    out = pd.DataFrame(rows, columns=columns)
    for c in ("n_categories", "n_categories_bd"):
        out[c] = pd.array([None if pd.isna(v) else int(v) for v in out[c]], dtype="Int64")
    for c in ("average_disparity", "mean_abs_bd", "mean_abs_bd_difference", "mean_abs_bd_gap"):
        out[c] = out[c].astype(float)
    return out

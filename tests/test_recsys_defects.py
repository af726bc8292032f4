"""Issue 11, "Metric defects": each defect pinned by a hand-computed value.

1. Average disparity is Mansoury et al. 2019, eq. 4 on counts N_R, N_T (not a mean of |BD|).
2. A missing item (None / NaN) is rejected by the vectorised and the scalar path alike.
3. The cost of ``score_pairs`` is bounded by the lists' lengths, not by K².
4. CFaiRLLM true-preference lists R′ are cut from the same top-K list that item similarity compares.
5. The ``paper-k`` convention normalises by K literally; ``paper`` by the longer list.
6. Bias disparity counts only the catalogue-matched items among the top-K list (run and
   ``lmra recsys bias`` on a run's lists.jsonl): an unmatched title in the top K is counted, never
   replaced by an item ranked beyond K.
7. The true-preference curve at cut-off k < K compares the liked items of the top-k lists
   (R′_k), not the first k items of R′.
"""

from __future__ import annotations

import json
import math
import os
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmra.recsys import bias_disparity as bd
from lmra.recsys.metrics import CONVENTIONS, METRICS, jaccard, metric, prag, score_pairs, serp, similarity_table


# --- 1. average disparity, eq. 4 ---------------------------------------------------------------
#
# Catalog: a1 (A), a2 (A), ab (A|B), b1 (B), c1 (C), d1 (D) → |C| = 4 categories.
# Groups: u1, u2 unprotected ("U"); p1 protected ("P").
#
# T (training):  u1 → a1, a2, b1      u2 → a1, c1      p1 → b1, ab, c1
#   N_T(U, A) = u1{a1, a2} + u2{a1}   = 3      N_T(P, A) = p1{ab}     = 1
#   N_T(U, B) = u1{b1}                = 1      N_T(P, B) = p1{b1, ab} = 2
#   N_T(U, C) = u2{c1}                = 1      N_T(P, C) = p1{c1}     = 1
#   N_T(U, D) = 0                              N_T(P, D) = 0
# R (recommendations):  u1 → a1, ab      u2 → a2, ab      p1 → c1, a1
#   N_R(U, A) = u1{a1, ab} + u2{a2, ab} = 4    N_R(P, A) = p1{a1} = 1
#   N_R(U, B) = u1{ab} + u2{ab}         = 2    N_R(P, B) = 0
#   N_R(U, C) = 0                              N_R(P, C) = p1{c1} = 1
#   N_R(U, D) = 0                              N_R(P, D) = 0
# Per category, (N_R − N_T)(U) − (N_R − N_T)(P):
#   A: (4 − 3) − (1 − 1) =  1 − 0  =  1
#   B: (2 − 1) − (0 − 2) =  1 + 2  =  3
#   C: (0 − 1) − (1 − 1) = −1 − 0  = −1
#   D: (0 − 0) − (0 − 0) =            0
# disparity = (|1| + |3| + |−1| + |0|) / 4 = 5 / 4 = 1.25

CATS = {"a1": ["A"], "a2": ["A"], "ab": ["A", "B"], "b1": ["B"], "c1": ["C"], "d1": ["D"]}
GROUPS = {"u1": "U", "u2": "U", "p1": "P"}
T = pd.DataFrame([("u1", "a1"), ("u1", "a2"), ("u1", "b1"), ("u2", "a1"), ("u2", "c1"),
                  ("p1", "b1"), ("p1", "ab"), ("p1", "c1")], columns=["user_id", "item_id"])
R = pd.DataFrame([("u1", "a1"), ("u1", "ab"), ("u2", "a2"), ("u2", "ab"), ("p1", "c1"), ("p1", "a1")],
                 columns=["user_id", "item_id"])


def test_bias_table_reports_the_counts_n_r_and_n_t():
    tab = bd.bias_disparity_table(T, R, GROUPS, CATS).set_index(["group", "category"])
    want_t = {("U", "A"): 3, ("U", "B"): 1, ("U", "C"): 1, ("U", "D"): 0,
              ("P", "A"): 1, ("P", "B"): 2, ("P", "C"): 1, ("P", "D"): 0}
    want_r = {("U", "A"): 4, ("U", "B"): 2, ("U", "C"): 0, ("U", "D"): 0,
              ("P", "A"): 1, ("P", "B"): 0, ("P", "C"): 1, ("P", "D"): 0}
    assert {key: int(tab.loc[key, "n_train"]) for key in want_t} == want_t
    assert {key: int(tab.loc[key, "n_rec"]) for key in want_r} == want_r


def test_average_disparity_is_eq4_on_counts():
    # the formula itself, categories A, B, C, D in order (hand values above)
    assert bd.average_disparity([4, 2, 0, 0], [3, 1, 1, 0], [1, 0, 1, 0], [1, 2, 1, 0]) == pytest.approx(5 / 4)
    assert math.isnan(bd.average_disparity([], [], [], []))
    with pytest.raises(ValueError, match="same number of categories"):
        bd.average_disparity([1, 2], [1], [1, 2], [1, 2])
    tab = bd.bias_disparity_table(T, R, GROUPS, CATS)
    s = bd.disparity_summary(tab, unprotected="U", protected="P").set_index("group")
    assert s.loc["U − P", "average_disparity"] == pytest.approx(5 / 4)
    assert s.loc["U − P", "n_categories"] == 4
    # a group row has no eq.-4 value: eq. 4 compares two groups
    assert math.isnan(s.loc["U", "average_disparity"])


def test_previous_readings_are_kept_under_their_own_names():
    # B_T and B_R by hand (P(A) = 3/6, P(B) = 2/6, P(C) = 1/6, P(D) = 1/6):
    #   U: 5 training interactions → PR_T = 3/5, 1/5, 1/5, 0 → B_T = 6/5, 3/5, 6/5, 0
    #      4 recommended           → PR_R = 4/4, 2/4, 0, 0   → B_R = 2, 3/2, 0, 0
    #      BD = (2 − 6/5)/(6/5) = 2/3, (3/2 − 3/5)/(3/5) = 3/2, −1, undefined → mean |BD| = (2/3 + 3/2 + 1)/3 = 19/18
    #   P: 3 training → PR_T = 1/3, 2/3, 1/3, 0 → B_T = 2/3, 2, 2, 0
    #      2 recommended → PR_R = 1/2, 0, 1/2, 0 → B_R = 1, 0, 3, 0
    #      BD = 1/2, −1, 1/2, undefined → mean |BD| = 2/3
    #   per-category gap over A, B, C: |2/3 − 1/2| + |3/2 + 1| + |−1 − 1/2| = 1/6 + 5/2 + 3/2 = 25/6 → /3 = 25/18
    tab = bd.bias_disparity_table(T, R, GROUPS, CATS)
    s = bd.disparity_summary(tab, unprotected="U", protected="P").set_index("group")
    assert s.loc["U", "mean_abs_bd"] == pytest.approx(19 / 18) and s.loc["U", "n_categories_bd"] == 3
    assert s.loc["P", "mean_abs_bd"] == pytest.approx(2 / 3)
    assert s.loc["U − P", "mean_abs_bd_difference"] == pytest.approx(19 / 18 - 2 / 3)
    assert s.loc["U − P", "mean_abs_bd_gap"] == pytest.approx(25 / 18)
    assert s.loc["U − P", "n_categories_bd"] == 3
    assert bd.mean_abs_disparity([2 / 3, 1.5, -1.0, float("nan")]) == pytest.approx(19 / 18)


def _bias_files(folder) -> None:
    """The training, recommendation, item and user files of T, R, CATS and GROUPS in ``folder``."""
    T.to_csv(folder / "train.csv", index=False)
    R.to_csv(folder / "recs.csv", index=False)
    pd.DataFrame({"item_id": list(CATS), "genres": ["|".join(v) for v in CATS.values()]}).to_csv(
        folder / "items.csv", index=False)
    pd.DataFrame({"user_id": list(GROUPS), "g": list(GROUPS.values())}).to_csv(folder / "users.csv", index=False)


def test_cli_bias_writes_eq4_and_the_counts(tmp_path, capsys):
    from test_recsys_e2e import run_cli

    _bias_files(tmp_path)
    assert run_cli(["recsys", "bias", "--train", str(tmp_path / "train.csv"), "--recs", str(tmp_path / "recs.csv"),
                    "--items", str(tmp_path / "items.csv"), "--users", str(tmp_path / "users.csv"), "--group-by", "g",
                    "--unprotected", "U", "--protected", "P", "--out", str(tmp_path / "out")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "eq. 4" in shown and "1.250" in shown
    summ = pd.read_csv(tmp_path / "out" / "recsys_bias_summary.csv").set_index("group")
    assert summ.loc["U − P", "average_disparity"] == pytest.approx(1.25)
    tab = pd.read_csv(tmp_path / "out" / "recsys_bias_disparity.csv").set_index(["group", "category"])
    assert tab.loc[("U", "A"), ["n_train", "n_rec"]].tolist() == [3, 4]


# --- 2. missing items ---------------------------------------------------------------------------

@pytest.mark.parametrize("missing", [None, float("nan"), np.nan])
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_missing_items_are_rejected_by_both_paths(missing, convention):
    # today: score_pairs([[None, 'a']], [['a']], 3) gives Jaccard@2 = 2.0 (scalar path: 0.5)
    with pytest.raises(ValueError, match="missing"):
        score_pairs([[missing, "a"]], [["a"]], 3, convention=convention)
    with pytest.raises(ValueError, match="missing"):
        score_pairs([["a"]], [["b", missing]], 3, convention=convention)
    for name in METRICS:
        with pytest.raises(ValueError, match="missing"):
            metric(name, [missing, "a"], ["a"], 2, convention=convention)


def test_missing_item_in_a_table_names_the_list():
    t = pd.DataFrame([("m1", "neutral", "", ["a", "b"]), ("m1", "gender", "girl", ["a", None])],
                     columns=["instruction_id", "attribute", "value", "items"])
    with pytest.raises(ValueError, match=r"instruction 'm1'.*gender.*girl.*position 2"):
        similarity_table(t, 3)


def test_items_that_look_like_padding_are_ordinary_items():
    # integer items −1 and −2 (the old padding codes) are items like any other
    assert score_pairs([[-1, -2]], [[-2, -1]], 2)["jaccard"].tolist() == [[0.0, 1.0]]
    assert jaccard([-1, -2], [-2, -1], 2) == 1.0


# --- 3. work bounded by the list lengths --------------------------------------------------------

def _short_pairs(n: int = 1500, seed: int = 3) -> tuple[list[list[str]], list[list[str]]]:
    rng = random.Random(seed)
    pool = [f"t{i}" for i in range(40)]
    neutral = [rng.sample(pool, rng.randint(5, 15)) for _ in range(n)]
    sensitive = [rng.sample(pool, rng.randint(5, 15)) for _ in range(n)]
    return neutral, sensitive


def _peak_mb(fn) -> float:
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def test_score_pairs_memory_is_bounded_by_list_lengths_not_k_squared():
    neutral, sensitive = _short_pairs()
    small = _peak_mb(lambda: score_pairs(neutral, sensitive, 20))
    large = _peak_mb(lambda: score_pairs(neutral, sensitive, 200))
    # the result alone is 3 metrics × 1,500 pairs × 200 cut-offs × 8 bytes = 6.9 MB at K = 200 (0.7 MB
    # at K = 20): the peak may be a few times that, not K² (before the fix: 795 MB, ×79 the K = 20 peak)
    out_mb = 3 * 1500 * 200 * 8 / 2**20
    assert large < 6 * out_mb and large < 10 * small, (small, large)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_curves_beyond_the_longest_list_match_the_reference(convention):
    # K far above every list (buckets of different widths), with duplicates and empty lists
    rng = random.Random(11)
    neutral, sensitive = [], []
    for _ in range(120):
        vocab = list("abcdefghijklmnop")[: rng.randint(1, 16)]
        neutral.append([rng.choice(vocab) for _ in range(rng.choice([0, 1, 2, 3, 5, 9, 17]))])
        sensitive.append([rng.choice(vocab) for _ in range(rng.choice([0, 1, 2, 4, 8, 13]))])
    K = 24
    got = score_pairs(neutral, sensitive, K, convention=convention)
    for m in METRICS:
        want = np.array([[metric(m, n, s, k, convention=convention) for k in range(1, K + 1)]
                         for n, s in zip(neutral, sensitive)])
        np.testing.assert_allclose(got[m], want, rtol=0, atol=1e-12, equal_nan=True)


# --- 4. CFaiRLLM true preference cut from the compared top-K -----------------------------------

class SixTitles:
    """Six titles for every prompt: ranks 1, 2 and 5 are not in movies.dat; Shawshank Redemption
    (movie 13, liked by user 3 in the held-out test split) is 6th in the neutral lists and 5th in
    the sensitive ones."""

    name = "six-titles"
    model_id = "six-titles"
    base_url = ""
    supports_logprobs = False

    async def complete(self, request):
        from lmra.providers.base import ChatResult, Usage

        text = request.messages[-1].content
        fake = ["Not A Real Movie", "Another Invented Picture", "Heat", "Fargo", "Made Up Title Here"]
        items = fake + ["The Shawshank Redemption"]
        if text.startswith("I am "):  # sensitive prompt: Shawshank moves into the top 5
            items = fake[:4] + ["The Shawshank Redemption", fake[4]]
        return ChatResult(text="\n".join(f"{i}. {t}" for i, t in enumerate(items, 1)), usage=Usage())

    async def aclose(self):
        return None


def test_true_preference_is_cut_from_the_compared_top_k(tmp_path):
    from test_recsys_e2e import SAMPLE

    from lmra.recsys.config import parse_recsys_config
    from lmra.recsys.run import RecsysRun

    cfg = parse_recsys_config({"name": "tp", "mode": "cfairllm", "k": 5, "output_dir": str(tmp_path / "out"),
                               "cache": str(tmp_path / "cache.sqlite"),
                               "cfairllm": {"data": str(SAMPLE), "n_users": 0, "profile_size": 3,
                                            "split_method": "temporal"}})
    result = RecsysRun(cfg, target=SixTitles(), run_dir=tmp_path / "run").run()
    by = {(r["user_id"], r["attribute"]): r for r in result.lists.to_dict(orient="records")}
    neutral, gender = by[(3, "neutral")], by[(3, "gender")]
    # the list item similarity compares at K = 5: [unmatched, unmatched, #3 Heat, #6 Fargo, unmatched];
    # none of it is liked → R′ = [] by hand (before the fix: ['#13'], the 6th title)
    assert neutral["compare"][:5] == ["not a real movie", "another invented picture", "#3", "#6",
                                      "made up title here"]
    assert neutral["true_pref"] == []
    # sensitive list: Shawshank is 5th, inside the top K → R′ = ['#13']
    assert gender["true_pref"] == ["#13"]
    sim = result.similarity
    row = sim[(sim["analysis"] == "true_preference") & (sim["attribute"] == "gender") & (sim["value"] == "female")
              & (sim["metric"] == "jaccard") & (sim["k"] == 5)].iloc[0]
    # female users 1 and 3: user 1 likes nothing of these in her test split (both R′ empty: undefined);
    # user 3: R′ = [] vs R′^a = [#13] → Jaccard 0 (before the fix: [#13] vs [#13] → 1)
    assert (row["similarity"], row["n"], row["n_undefined"]) == (0.0, 1, 1)


# --- 5. the paper-k convention -----------------------------------------------------------------

def test_paper_k_normalises_by_k_literally():
    neutral, sensitive = ["a", "b", "c"], ["b", "a", "c"]
    # K = 5, three items each. SERP weights K − r + 1 = 5, 4, 3 for ranks 1..3, all in R → 12 / (5·6/2) = 0.8
    # (paper: n = 3 → (3 + 2 + 1) / 6 = 1). PRAG: (b,a) disagrees, (b,c) and (a,c) agree → 2 / (5·4/2) = 0.2
    # (paper: 2 / 3). Jaccard has no normaliser: 3/3 in both.
    assert [metric(m, neutral, sensitive, 5, convention="paper-k") for m in METRICS] == pytest.approx([1.0, 0.8, 0.2])
    assert [metric(m, neutral, sensitive, 5, convention="paper") for m in METRICS] == pytest.approx(
        [1.0, 1.0, 2 / 3])
    # two identical 15-item lists at K = 20: SERP (20 + 19 + … + 6) / 210 = 195/210, PRAG C(15,2)/C(20,2) = 105/190
    items = [f"s{i}" for i in range(15)]
    assert serp(items, items, 20, convention="paper-k") == pytest.approx(195 / 210)
    assert prag(items, items, 20, convention="paper-k") == pytest.approx(105 / 190)
    assert serp(items, items, 20) == 1.0
    # the docs/recsys.md example: R = [a, b, c], R^a = [b, a, e], K = 4. Jaccard 2/4; SERP* b, a weigh
    # 4, 3 → 7/10 (paper: n = 3, 3 + 2 → 5/6); PRAG* (b,a) disagrees, (b,e), (a,e) agree → 2/6 (paper: 2/3)
    assert [metric(m, neutral, ["b", "a", "e"], 4, convention="paper-k") for m in METRICS] == pytest.approx(
        [0.5, 0.7, 1 / 3])
    assert [metric(m, neutral, ["b", "a", "e"], 4) for m in METRICS] == pytest.approx([0.5, 5 / 6, 2 / 3])
    # full lists: paper-k = paper
    full = [f"s{i}" for i in range(20)]
    assert serp(full, full[::-1], 20, convention="paper-k") == serp(full, full[::-1], 20)
    # empty lists as under paper
    assert math.isnan(serp([], [], 5, convention="paper-k")) and prag(["a"], [], 5, convention="paper-k") == 0.0
    # the curve k = 1..5: [a] vs [b] → 0; k = 2: weights 2, 1 → 3/3; k = 3: 3 + 2 + 1 = 6/6;
    # k = 4: 4 + 3 + 2 = 9/10; k = 5: 12/15
    np.testing.assert_allclose(score_pairs([neutral], [sensitive], 5, convention="paper-k")["serp"][0],
                               [0.0, 1.0, 1.0, 0.9, 0.8])


def test_paper_k_is_a_config_and_cli_option(tmp_path):
    from test_recsys_e2e import run_cli

    from lmra.recsys.config import parse_recsys_config

    assert parse_recsys_config({"convention": "paper-k"}).convention == "paper-k"
    lists = tmp_path / "lists.jsonl"
    lists.write_text('{"instruction_id": "m1", "attribute": "neutral", "keys": ["a", "b", "c"]}\n'
                     '{"instruction_id": "m1", "attribute": "gender", "value": "a girl", "keys": ["b", "a", "c"]}\n',
                     encoding="utf-8")
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "5", "--convention", "paper-k",
                    "--out", str(tmp_path / "o")]) == 0
    sim = pd.read_csv(tmp_path / "o" / "recsys_similarity.csv")
    at5 = sim[sim["k"] == 5].set_index("metric")
    assert at5.loc["serp", "similarity"] == pytest.approx(0.8) and at5.loc["prag", "similarity"] == pytest.approx(0.2)
    assert set(sim["convention"]) == {"paper-k"}


def test_readme_states_the_normalisation_of_short_lists():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("## Recommendation fairness", 1)[1].split("\n## ", 1)[0]
    assert "paper-k" in section and "shorter than K" in section


# --- 6. bias disparity from the matched items of the top-K list ------------------------------

class SixTitlesLionKing:
    """Six titles for every prompt, K = 5: ranks 1, 2 and 5 are not in movies.dat, rank 3 is Heat
    (#3, Action|Crime|Thriller), rank 4 Fargo (#6, Crime|Drama|Thriller) and rank 6 The Lion King
    (#17, Animation|Children's|Musical — the only Musical, Animation and Children's title here).
    None of them is in any sample user's prompt profile (profiles 1: {1, 4, 9}, 2: {4, 11, 13},
    3: {5, 7, 14}, 4: {2, 7, 12})."""

    name = "six-titles-lion-king"
    model_id = "six-titles-lion-king"
    base_url = ""
    supports_logprobs = False

    async def complete(self, request):
        from lmra.providers.base import ChatResult, Usage

        items = ["Not A Real Movie", "Another Invented Picture", "Heat", "Fargo", "Made Up Title Here",
                 "The Lion King"]
        return ChatResult(text="\n".join(f"{i}. {t}" for i, t in enumerate(items, 1)), usage=Usage())

    async def aclose(self):
        return None


def _six_titles_run(tmp_path, target):
    from test_recsys_e2e import SAMPLE

    from lmra.recsys.config import parse_recsys_config
    from lmra.recsys.run import RecsysRun

    cfg = parse_recsys_config({"name": "bd", "mode": "cfairllm", "k": 5, "output_dir": str(tmp_path / "out"),
                               "cache": str(tmp_path / "cache.sqlite"),
                               "cfairllm": {"data": str(SAMPLE), "n_users": 0, "profile_size": 3,
                                            "split_method": "temporal"}})
    return RecsysRun(cfg, target=target, run_dir=tmp_path / "run").run()


# Hand values, every list of every user (K = 5): top-5 = [unmatched, unmatched, #3, #6, unmatched] →
# R(u) = {Heat, Fargo}; The Lion King (rank 6) is beyond K. Female users 1, 3; male users 2, 4. Per group:
#   N_R(G, Crime) = 2 users × 2 = 4, N_R(G, Thriller) = 4, N_R(G, Action) = 2 (Heat), N_R(G, Drama) = 2 (Fargo),
#   N_R(G, Musical) = N_R(G, Animation) = N_R(G, Children's) = 0.
# Before the fix the first K = 5 *matched* items were counted, [#3, #6, #17]: Musical, Animation and
# Children's 2 each, coverage 3/20 = 0.15 instead of 2/20 = 0.10.
TOP5_N_R = {"Crime": 4, "Thriller": 4, "Action": 2, "Drama": 2, "Musical": 0, "Animation": 0, "Children's": 0}
# at --k 3 the top-3 list is [unmatched, unmatched, #3]: Heat only (before: [#3, #6, #17] → Drama 2, Musical 2)
TOP3_N_R = {"Crime": 2, "Thriller": 2, "Action": 2, "Drama": 0, "Musical": 0, "Animation": 0, "Children's": 0}


def _n_rec(table: pd.DataFrame, variant: str, group: str) -> dict[str, int]:
    d = table[(table["variant"] == variant) & (table["group_by"] == "gender") & (table["group"] == group)]
    got = d.set_index("category")["n_rec"]
    return {c: int(got[c]) for c in TOP5_N_R}


def test_bias_disparity_counts_only_matched_items_of_the_top_k(tmp_path):
    result = _six_titles_run(tmp_path, SixTitlesLionKing())
    by = {(r["user_id"], r["attribute"]): r for r in result.lists.to_dict(orient="records")}
    rec = by[(1, "neutral")]
    assert rec["compare"][:5] == ["not a real movie", "another invented picture", "#3", "#6", "made up title here"]
    for variant in ("neutral", "gender", "age", "gender+age"):
        for group in ("female", "male"):
            assert _n_rec(result.bias, variant, group) == TOP5_N_R, (variant, group)
    assert result.summary["item_coverage"]["neutral"] == pytest.approx(2 / 20)
    assert rec["recommended"] == [3, 6]  # before: [3, 6, 17] (the first K matched)
    assert rec["top_k_matched"] == [None, None, 3, 6, None] and rec["n_unmatched_top_k"] == 3
    # unmatched titles in the top K are counted and reported: 3 per list × 16 lists
    assert result.summary["items_unmatched_top_k"] == 48


def test_cli_bias_on_a_run_lists_counts_only_matched_items_of_the_top_k(tmp_path, capsys):
    from test_recsys_e2e import SAMPLE, run_cli

    result = _six_titles_run(tmp_path, SixTitlesLionKing())
    lists = result.run_dir / "lists.jsonl"
    files = ["--train", str(SAMPLE / "ratings.dat"), "--items", str(SAMPLE / "movies.dat"),
             "--users", str(SAMPLE / "users.dat")]
    # the run's own cut (K = 5)
    assert run_cli(["recsys", "bias", "--recs", str(lists), *files, "--out", str(tmp_path / "b5")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    tab = pd.read_csv(tmp_path / "b5" / "recsys_bias_disparity.csv")
    assert _n_rec(tab, "neutral", "female") == TOP5_N_R and _n_rec(tab, "gender+age", "male") == TOP5_N_R
    assert "48 unmatched titles" in shown
    # a shorter cut: the matched items among the top-3 list, not the first 3 matched items
    assert run_cli(["recsys", "bias", "--recs", str(lists), *files, "--k", "3", "--out", str(tmp_path / "b3")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    tab = pd.read_csv(tmp_path / "b3" / "recsys_bias_disparity.csv")
    assert _n_rec(tab, "neutral", "female") == TOP3_N_R and _n_rec(tab, "age", "male") == TOP3_N_R
    assert "32 unmatched titles" in shown  # 2 per list × 16
    # lists.jsonl written before 'top_k_matched' existed: the ranks come from 'compare'
    import json

    old = tmp_path / "old_lists.jsonl"
    rows = [json.loads(line) for line in lists.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r.pop("top_k_matched")
        r["recommended"] = [3, 6, 17]  # what earlier runs wrote: every matched item
    old.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert run_cli(["recsys", "bias", "--recs", str(old), *files, "--k", "3", "--out", str(tmp_path / "o3")]) == 0
    tab = pd.read_csv(tmp_path / "o3" / "recsys_bias_disparity.csv")
    assert _n_rec(tab, "neutral", "female") == TOP3_N_R
    # a failed call's record has no user_id (the column is then read as floats): skipped, ids still match
    rows = [json.loads(line) for line in lists.read_text(encoding="utf-8").splitlines()]
    failed = next(r for r in rows if r["user_id"] == 2 and r["attribute"] == "age")
    for key in ("user_id", "top_k_matched", "recommended", "matched", "true_pref", "true_pref_ranks"):
        failed.pop(key)
    failed["error"] = "connection refused"
    _write_jsonl(tmp_path / "failed.jsonl", rows)
    assert run_cli(["recsys", "bias", "--recs", str(tmp_path / "failed.jsonl"), *files, "--out",
                    str(tmp_path / "f")]) == 0
    tab = pd.read_csv(tmp_path / "f" / "recsys_bias_disparity.csv")
    assert _n_rec(tab, "neutral", "male") == TOP5_N_R
    assert int(tab[(tab["variant"] == "age") & (tab["group"] == "male")]["n_users"].iloc[0]) == 1


# --- 7. true-preference curve at k < K --------------------------------------------------------
#
# K = 4, items liked in the test split: a, b.
#   neutral top-4 list   [x, a, y, b] → R′ = [a, b] at ranks 2, 4
#   sensitive top-4 list [a, b, z, w] → R′^a = [a, b] at ranks 1, 2
# R′_k = the liked items of the top-k list:
#   k = 1: R′_1 = [],  R′^a_1 = [a]    → Jaccard 0, SERP* 0, PRAG* 0
#   k = 2: R′_2 = [a], R′^a_2 = [a, b] → Jaccard 1/2; SERP* (paper, n = 2) a weighs 2 − 1 + 1 = 2 → 2/3;
#          PRAG* (a, b): a ∈ R′, b ∉ R′ (r_b = ∞) → 1/1 = 1
#   k = 3: the same lists as k = 2       → 1/2, 2/3, 1
#   k = 4: [a, b] vs [a, b]              → 1, 1, 1
# Before the fix (first k items of R′): [a, b][:k] on both sides → 1, 1, 1 at every k.

TP_LISTS = [
    {"instruction_id": "u1", "attribute": "neutral", "compare": ["x", "a", "y", "b"], "true_pref": ["a", "b"],
     "true_pref_ranks": [2, 4]},
    {"instruction_id": "u1", "attribute": "gender", "value": "F", "compare": ["a", "b", "z", "w"],
     "true_pref": ["a", "b"], "true_pref_ranks": [1, 2]},
]


def _tp_curve(sim: pd.DataFrame, metric_name: str) -> list[float]:
    d = sim[(sim["analysis"] == "true_preference") & (sim["metric"] == metric_name)].sort_values("k")
    return d["similarity"].tolist()


def _write_jsonl(path, rows):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_true_preference_curve_uses_the_liked_items_of_the_top_k_list(tmp_path):
    from lmra.recsys.run import score_lists

    res = score_lists(_write_jsonl(tmp_path / "l.jsonl", TP_LISTS), k=4)
    assert _tp_curve(res.similarity, "jaccard") == pytest.approx([0.0, 0.5, 0.5, 1.0])
    assert _tp_curve(res.similarity, "serp") == pytest.approx([0.0, 2 / 3, 2 / 3, 1.0])
    assert _tp_curve(res.similarity, "prag") == pytest.approx([0.0, 1.0, 1.0, 1.0])
    # paper-k at k = 3: [a] vs [a, b], SERP* a weighs 3 − 1 + 1 = 3 → 3/6; PRAG* 1/3 (before: 5/6 and 1/3)
    res = score_lists(tmp_path / "l.jsonl", k=4, convention="paper-k")
    assert _tp_curve(res.similarity, "serp")[2] == pytest.approx(0.5)
    # item similarity is untouched: the compare lists, first k items
    assert res.similarity[(res.similarity["analysis"] == "item_similarity") & (res.similarity["metric"] == "jaccard")
                          ].sort_values("k")["similarity"].tolist() == pytest.approx([0.0, 1 / 3, 1 / 5, 1 / 3])
    # without ranks (a hand-written file), R′ is read as a ranked list of its own: R′_k = its first k items
    bare = [{key: v for key, v in r.items() if key != "true_pref_ranks"} for r in TP_LISTS]
    res = score_lists(_write_jsonl(tmp_path / "bare.jsonl", bare), k=4)
    assert _tp_curve(res.similarity, "jaccard") == pytest.approx([1.0, 1.0, 1.0, 1.0])


def test_true_preference_ranks_are_checked(tmp_path):
    from lmra.errors import LmraInputError
    from lmra.recsys.run import read_lists

    for bad in ([2], [4, 2], [0, 1], ["2", "4"], [2.5, 4]):
        rows = [dict(TP_LISTS[0], true_pref_ranks=bad), TP_LISTS[1]]
        with pytest.raises(LmraInputError) as e:
            read_lists(_write_jsonl(tmp_path / "bad.jsonl", rows))
        assert e.value.field == "true_pref_ranks" and e.value.line == 1, bad


def test_true_preference_curve_in_a_run(tmp_path):
    result = _six_titles_run(tmp_path, SixTitles())
    by = {(r["user_id"], r["attribute"]): r for r in result.lists.to_dict(orient="records")}
    # user 3's gender list: Shawshank (#13, liked) is 5th in the top-5 list
    assert by[(3, "gender")]["true_pref"] == ["#13"]
    sim = result.similarity
    d = sim[(sim["analysis"] == "true_preference") & (sim["attribute"] == "gender") & (sim["value"] == "female")
            & (sim["metric"] == "jaccard")].sort_values("k")
    # k = 1..4: user 3's R′_k and R′^a_k are both empty (undefined), as are user 1's → n = 0, 2 undefined
    # (before the fix: R′^a_k = [#13] at every k → Jaccard 0 for user 3, n = 1);
    # k = 5: R′ = [] vs R′^a = [#13] → Jaccard 0 for user 3
    assert d["n"].tolist() == [0, 0, 0, 0, 1] and d["n_undefined"].tolist() == [2, 2, 2, 2, 1]
    assert d["similarity"].iloc[4] == 0.0 and d["similarity"].iloc[:4].isna().all()
    assert by[(3, "gender")]["true_pref_ranks"] == [5] and by[(3, "neutral")]["true_pref_ranks"] == []
    # `recsys score` on the run's lists.jsonl reads the ranks back: the same curve
    from lmra.recsys.run import score_lists

    again = score_lists(result.run_dir / "lists.jsonl", k=5).similarity
    pd.testing.assert_frame_equal(again, sim)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_ranked_pairs_match_the_reference_on_restricted_lists(convention):
    # random top-K lists and liked sets: the value at k is the reference metric on the liked items
    # of the two top-k lists
    from lmra.recsys.metrics import score_ranked_pairs, top_k

    rng = random.Random(5)
    K = 9
    tops, kept, ranks = [], [], []
    for _ in range(160):
        vocab = list("abcdefghijkl")
        top = top_k([rng.choice(vocab) for _ in range(rng.choice([0, 1, 3, 6, 9, 12]))], K, convention=convention)
        liked = set(rng.sample(vocab, rng.randint(0, 8)))
        tops.append((top, liked))
        kept.append([x for x in top if x in liked])
        ranks.append([r for r, x in enumerate(top, 1) if x in liked])
    n, s = kept[0::2], kept[1::2]
    got = score_ranked_pairs(n, s, ranks[0::2], ranks[1::2], K, convention=convention)
    for m in METRICS:
        want = np.array([[metric(m, [x for x in tn[:k] if x in ln], [x for x in ts[:k] if x in ls], k,
                                 convention=convention) for k in range(1, K + 1)]
                         for (tn, ln), (ts, ls) in zip(tops[0::2], tops[1::2])])
        np.testing.assert_allclose(got[m], want, rtol=0, atol=1e-12, equal_nan=True)
    # ranks 1, 2, … are score_pairs
    plain = score_pairs(n, s, K, convention=convention)
    own = score_ranked_pairs(n, s, [list(range(1, len(x) + 1)) for x in n], [list(range(1, len(x) + 1)) for x in s],
                             K, convention=convention)
    for m in METRICS:
        np.testing.assert_allclose(own[m], plain[m], rtol=0, atol=1e-12, equal_nan=True)
    with pytest.raises(ValueError, match="strictly increasing"):
        score_ranked_pairs([["a", "b"]], [["a"]], [[2, 2]], [[1]], 3)
    with pytest.raises(ValueError, match="missing"):
        score_ranked_pairs([["a", None]], [["a"]], [[1, 2]], [[1]], 3)


# -- break-it findings: recsys paths and files read as the audit reads its own -----------------
def _unreachable_config(tmp_path, extra: str = "", top: str = "") -> Path:
    """A recsys config whose target is never reached: an input error must come first."""
    from test_recsys_e2e import write_config

    return write_config(tmp_path, "paths", top + """
[target]
provider = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"
api_key_required = false
[fairllm]
names_list = ["Adele"]
attributes = ["gender"]
""" + extra, k=3)


@pytest.mark.parametrize("what", ["cache is a folder", "output_dir is a file", "repeated attribute",
                                  "repeated attribute phrase", "attributes with a BOM", "attributes not UTF-8", "movies.dat is a pipe"])
def test_recsys_paths_and_files_are_input_errors_before_any_call(tmp_path, capsys, what):
    import os

    from test_recsys_e2e import SAMPLE, run_cli

    cfg = _unreachable_config(tmp_path)
    text = cfg.read_text()
    attrs = tmp_path / "attrs.json"
    expect, field = None, None
    if what == "cache is a folder":
        (tmp_path / "cache.sqlite").mkdir()
        expect, field = "is a folder", "cache"
    elif what == "output_dir is a file":
        (tmp_path / "out").write_text("x")
        expect, field = "is a file", "output_dir"
    elif what == "repeated attribute":
        attrs.write_text('{"gender": ["a boy"], "gender": ["a girl"]}')
        expect, field = "appears twice", "fairllm.attributes_file"
    elif what == "repeated attribute phrase":  # it asked and scored 'a boy' twice (break-it finding)
        attrs.write_text('{"gender": ["a boy", "a boy", "a girl"]}')
        expect, field = "'a boy' is given twice in 'gender'", "fairllm.attributes_file"
    elif what == "attributes with a BOM":
        attrs.write_bytes(b'\xef\xbb\xbf{"gender": ["a boy", "a girl"]}')
    elif what == "attributes not UTF-8":
        attrs.write_bytes(b'{"gender": ["a b\xf6y", "a girl"]}')
        expect, field = "not UTF-8", "fairllm.attributes_file"
    else:
        data = tmp_path / "ml"
        data.mkdir()
        for f in ("ratings.dat", "users.dat"):
            (data / f).write_bytes((SAMPLE / f).read_bytes())
        os.mkfifo(data / "movies.dat")  # reading it would block for ever
        cfg.write_text(text.replace('mode = "fairllm"', 'mode = "cfairllm"').split("[fairllm]")[0]
                       + f'[cfairllm]\ndata = "{data.as_posix()}"\nn_users = 2\n')
        expect = "not a regular file"
    if "attribute" in what:
        cfg.write_text(text + f'attributes_file = "{attrs.as_posix()}"\n')
    rc = run_cli(["recsys", "--config", str(cfg), "--no-progress"])
    err = " ".join(capsys.readouterr().err.split())
    if expect is None:  # a byte-order mark is fine: the run goes on to the (unreachable) target
        assert rc == 1 and "Traceback" not in err and "BOM" not in err
        return
    assert rc == 2, err
    assert expect in err and "Traceback" not in err
    if field:
        assert f"field '{field}'" in err
    assert not (tmp_path / "out").is_dir()


def test_an_instruction_id_written_as_a_number_and_as_a_string_is_an_input_error(tmp_path):
    """Break-it finding: ``"instruction_id": 1`` on one line and ``"1"`` on another were merged
    silently into one instruction (a sensitive list scored against another record's neutral
    list). An integer id alone is still read as its text; mixing the two ways, or a boolean id,
    is an input error naming the line and field."""
    from lmra.errors import LmraInputError
    from lmra.recsys.lists import read_lists

    path = tmp_path / "lists.jsonl"
    _write_jsonl(path, [{"instruction_id": 1, "attribute": "neutral", "value": "", "items": ["b", "a"]},
                        {"instruction_id": "1", "attribute": "gender", "value": "a girl", "items": ["a"]}])
    with pytest.raises(LmraInputError) as err:
        read_lists(path)
    said = str(err.value)
    assert "line 2" in said and "instruction_id" in said and "as a string here and as a number on line 1" in said
    _write_jsonl(path, [{"instruction_id": 7, "attribute": "neutral", "value": "", "items": ["b", 1917]},
                        {"instruction_id": 7, "attribute": "gender", "value": "a girl", "items": ["1917"]}])
    lists = read_lists(path)
    assert list(lists["instruction_id"]) == ["7", "7"] and lists["compare"].iloc[0][1] == lists["compare"].iloc[1][0]
    for bad, shown in ((True, "true"), (1.0, "1.0"), ([1], "[1]")):  # (break-it: read "missing or empty")
        _write_jsonl(path, [{"instruction_id": bad, "attribute": "neutral", "value": "", "items": ["b"]}])
        with pytest.raises(LmraInputError) as err:
            read_lists(path)
        assert "line 1" in str(err.value) and f"expected a string or an integer, got {shown}" in str(err.value)
    # a value written as a number was taken as its text, a group "5" beside "a boy" (bad-input break-it, s43)
    _write_jsonl(path, [{"instruction_id": 1, "attribute": "neutral", "value": "", "items": ["b"]},
                        {"instruction_id": 1, "attribute": "gender", "value": 5, "items": ["b"]}])
    with pytest.raises(LmraInputError) as err:
        read_lists(path)
    assert (err.value.line, err.value.field) == (2, "value") and "got number 5" in str(err.value)


@pytest.mark.parametrize("odd", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_among_a_lists_items_is_an_input_error_not_the_title_nan(tmp_path, capsys, odd):
    """Bad-input break-it (s45): Python's json.dumps writes NaN for a missing value; in a lists file
    it was read as the item "nan", two placeholders matched each other, and SNSR@4 (Jaccard) fell
    from 0.190 to 0.000, exit 0. A non-finite number among the items is an input error naming the
    file, line, field and item (exit 2, nothing written); finite numbers are still item ids."""
    from lmra.cli import main

    path = tmp_path / "lists.jsonl"
    path.write_text('{"instruction_id": "i1", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]}\n'
                    f'{{"instruction_id": "i1", "attribute": "gender", "value": "a boy", "items": ["A", {odd}, "E"]}}\n'
                    '{"instruction_id": "i1", "attribute": "gender", "value": "a girl", "items": ["A", "G", 7]}\n')
    out = tmp_path / "scored"
    assert main(["recsys", "score", "--lists", str(path), "--k", "3", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}, line 2: field 'items': item 2 is" in err, err
    assert f"item 2 is {odd}, not an item" in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("n_instructions", [1, 3])
def test_snsr_from_one_list_per_value_is_said_to_say_nothing(tmp_path, capsys, monkeypatch, n_instructions):
    """Fresh-user finding: the CFaiRLLM example printed gender SNSR = 1.000, the largest possible,
    from one list per value, exit 0, with no word (the README says it in prose). The console now
    says that a value resting on one instruction makes SNSR/SNSV compare single draws; with
    three instructions per value it does not."""
    from lmra.cli import main

    monkeypatch.setenv("COLUMNS", "300")
    rows = []
    for i in range(n_instructions):
        rows += [{"instruction_id": f"u{i}", "attribute": "neutral", "value": "", "items": ["a", "b", "c"]},
                 {"instruction_id": f"u{i}", "attribute": "gender", "value": "a girl", "items": ["a", "b", "c"]},
                 {"instruction_id": f"u{i}", "attribute": "gender", "value": "a boy", "items": ["x", "y", "z"]}]
    path = _write_jsonl(tmp_path / "lists.jsonl", rows)
    assert main(["recsys", "score", "--lists", str(path), "--out", str(tmp_path / "o"), "--k", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    said = "gender: a value's similarity rests on 1 instruction (one list per value): SNSR/SNSV above compare single draws"
    assert (said in out) == (n_instructions == 1), out[-3000:]
    assert out.rstrip().endswith("exit status 0")  # (fresh-user finding: recsys named no exit status)


@pytest.mark.parametrize("command", [["export", "{run}", "--format", "csv", "--out", "{tmp}/x"], ["report", "{run}"],
                                     ["check", "{run}", "--baseline", "{run}"]])
def test_an_audit_command_on_a_recsys_folder_says_it_is_a_recsys_run(tmp_path, capsys, command):
    """Fresh-user finding: `lmra export` (and check, report …) of a recsys run folder said "not a
    finished lmra run folder (manifest status: finished)", contradicting itself."""
    from test_recsys_e2e import run_cli

    lists = tmp_path / "lists.jsonl"
    lists.write_text('{"instruction_id": "m1", "attribute": "neutral", "keys": ["a", "b", "c"]}\n'
                     '{"instruction_id": "m1", "attribute": "gender", "value": "a girl", "keys": ["b", "a", "c"]}\n',
                     encoding="utf-8")
    run = tmp_path / "o"
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--out", str(run)]) == 0
    capsys.readouterr()
    assert run_cli([c.format(run=run, tmp=tmp_path) for c in command]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "a recommendation-fairness run folder (lmra recsys), not an audit's" in err, err
    assert "manifest status: finished" not in err and "Traceback" not in err


def _two_lists(tmp_path, name, items_b):
    path = tmp_path / name
    path.write_text('{"instruction_id": "m1", "attribute": "neutral", "items": ["a", "b", "c"]}\n'
                    '{"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": '
                    + json.dumps(items_b) + '}\n', encoding="utf-8")
    return path


def test_recsys_score_and_bias_in_the_same_second_get_a_folder_each(tmp_path, capsys, monkeypatch):
    """Break-it finding: two `recsys score` (or `recsys bias`) commands started in the same second
    both printed `Run folder: reports/<ts>-score` and exited 0; one input's results silently
    replaced the other's. The default folder is claimed as `lmra audit`'s and `lmra recsys`'s are:
    the second gets `<ts>-score-2`."""
    import datetime as dt

    from test_recsys_e2e import run_cli

    class _Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 5, 12, 0, 0)

    monkeypatch.setattr("lmra.cli.recsys._dt.datetime", _Frozen)
    monkeypatch.chdir(tmp_path)
    first, second = _two_lists(tmp_path, "l1.jsonl", ["a", "b", "c"]), _two_lists(tmp_path, "l2.jsonl", ["x", "y", "z"])
    for lists in (first, second):
        assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--permutations", "0"]) == 0
    out = capsys.readouterr().out
    runs = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert runs == ["20261205-120000-score", "20261205-120000-score-2"], runs
    sources = {json.loads((tmp_path / "reports" / r / "manifest.json").read_text())["source"] for r in runs}
    assert sources == {str(first), str(second)} and "20261205-120000-score-2" in out
    _bias_files(tmp_path)
    argv = ["recsys", "bias", "--train", "train.csv", "--recs", "recs.csv", "--items", "items.csv", "--users",
            "users.csv", "--group-by", "g", "--unprotected", "U", "--protected", "P"]
    assert run_cli(argv) == 0 and run_cli(argv) == 0
    assert {"20261205-120000-bias", "20261205-120000-bias-2"} <= {p.name for p in (tmp_path / "reports").iterdir()}


def test_recsys_score_and_bias_refuse_to_write_into_a_run_folder(tmp_path, capsys):
    """Break-it finding: `recsys score --out RUN` replaced a recsys run's manifest.json,
    summary.json and tables with another lists file's results (exit 0, no word): the run's
    status, target and call counts gone, and a later `recsys score --lists RUN/lists.jsonl` took
    K = 20 from the new manifest instead of the run's 5. Refused as `lmra export --out RUN` is;
    writing again into a folder of `recsys score` is allowed (it holds only scores)."""
    from test_recsys_e2e import run_cli

    run = tmp_path / "run"
    run.mkdir()
    manifest = {"status": "complete", "k": 5, "target": {"model": "m"}, "calls": {"fresh": 30}}
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    lists = _two_lists(tmp_path, "lists.jsonl", ["b", "a", "c"])
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--out", str(run)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{run}" in err and "is a run folder: writing here would replace its manifest.json" in err, err
    assert "--out" in err and "Traceback" not in err
    assert json.loads((run / "manifest.json").read_text()) == manifest and sorted(os.listdir(run)) == ["manifest.json"]
    _bias_files(tmp_path)
    assert run_cli(["recsys", "bias", "--train", str(tmp_path / "train.csv"), "--recs", str(tmp_path / "recs.csv"),
                    "--items", str(tmp_path / "items.csv"), "--users", str(tmp_path / "users.csv"), "--group-by", "g",
                    "--unprotected", "U", "--protected", "P", "--out", str(run)]) == 2
    assert "is a run folder" in " ".join(capsys.readouterr().err.split())
    assert sorted(os.listdir(run)) == ["manifest.json"]
    # nor into a reports folder (the run history) or the warehouse (break-it round 2)
    reports = tmp_path / "reports"
    (reports / "warehouse" / "per_task" / "run=x").mkdir(parents=True)
    (reports / "history.sqlite").write_bytes(b"")
    for out, what in ((reports, "is a reports folder (it holds the run history)"),
                      (reports / "warehouse", "is the warehouse"),
                      (reports / "warehouse" / "per_task", "is the warehouse")):  # (break-it round 3: a table's folder)
        assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--out", str(out)]) == 2
        assert what in " ".join(capsys.readouterr().err.split())
        assert not (out / "manifest.json").exists()
    scores = tmp_path / "scores"  # a folder of recsys score's own: written again
    for _ in range(2):
        assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--out", str(scores)]) == 0


@pytest.mark.parametrize("manifest, field, said", [
    ('{"k": "abc", "seed": 1}', "k", 'has k = "abc", not a whole number: give --k'),
    ('{"k": 5, "convention": "bogus"}', "convention", "has convention 'bogus', which this version does not know"),
    ("not json", "k", "cannot be read (not JSON"),
    ("[1]", "k", "is not a JSON object"),
    ('{"k": 0}', "k", "has k = 0, not between 1 and"),  # (break-it round 2: named as a bad --k not given)
    ('{"k": 5, "seed": 10000000000000000000000}', "seed", "has seed = 10000000000000000000000, not between"),
])
def test_recsys_score_names_a_damaged_run_manifest_beside_the_lists(tmp_path, capsys, manifest, field, said):
    """Break-it finding: a manifest.json beside the lists file with "k": "abc" (or a bogus
    convention, or not JSON) was passed over in silence — K fell back to 20 while the seed still
    came from the same file, exit 0. It is an input error naming the file and the field."""
    from test_recsys_e2e import run_cli

    lists = _two_lists(tmp_path, "lists.jsonl", ["b", "a", "c"])
    (tmp_path / "manifest.json").write_text(manifest, encoding="utf-8")
    assert run_cli(["recsys", "score", "--lists", str(lists), "--out", str(tmp_path / "o"), "--permutations", "0"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path / 'manifest.json'}: field '{field}': the run manifest beside the lists file" in err, err
    assert said in err and "Traceback" not in err and not (tmp_path / "o").exists()
    # the options named are the way on
    assert run_cli(["recsys", "score", "--lists", str(lists), "--out", str(tmp_path / "o"), "--permutations", "0",
                    "--k", "3", "--seed", "1", "--convention", "paper"]) == 0


@pytest.mark.parametrize("field,value", [("refusal", "false"), ("refusal", "no"), ("refusal", 1),
                                         ("parse_failed", "true"), ("parse_failed", 0)])
def test_a_refusal_or_parse_flag_that_is_not_a_boolean_is_an_input_error(tmp_path, field, value):
    """Break-it finding (s35): ``"refusal": "false"`` (a string) was read by its truthiness and counted as a
    refusal; a flag is true, false or null, else the line and field are named."""
    from lmra.errors import LmraInputError
    from lmra.recsys.lists import read_lists

    path = tmp_path / "lists.jsonl"
    _write_jsonl(path, [{"instruction_id": 1, "attribute": "neutral", "value": "", "items": ["b", "a"]},
                        {"instruction_id": 1, "attribute": "gender", "value": "a girl", "items": ["a"], field: value}])
    with pytest.raises(LmraInputError) as err:
        read_lists(path)
    assert "line 2" in str(err.value) and field in str(err.value) and "expected true, false or null" in str(err.value)
    _write_jsonl(path, [{"instruction_id": 1, "attribute": "neutral", "value": "", "items": ["b", "a"]},
                        {"instruction_id": 1, "attribute": "gender", "value": "a girl", "items": ["a"], field: False}])
    assert len(read_lists(path)) == 2


def test_a_control_character_in_a_recsys_name_is_an_input_error():
    """Break-it finding (s35): ``names_list = ["Dr\\u0000ake"]`` was sent to the model in the prompt."""
    from pydantic import ValidationError

    from lmra.recsys.config import FairLLMConfig

    with pytest.raises(ValidationError, match="control character U\\+0000"):
        FairLLMConfig(names_list=["Dr\x00ake"])
    assert FairLLMConfig(names_list=["Drake"]).names_list == ["Drake"]


def test_true_preference_ids_written_as_numbers_or_as_text_are_one_item(tmp_path):
    """Known-items trial (s49): ``true_pref`` [1, 2] in the neutral list and ["1", "2"] in a sensitive one
    shared no item — true-preference similarity 0 and SNSR 1.0 from the JSON types alone, exit 0 — while
    the compared lists took numbers as their text. An integer id is its text in both; true/false is no id."""
    from lmra.errors import LmraInputError
    from lmra.recsys.lists import read_lists
    from lmra.recsys.run import score_lists

    rows = [{"instruction_id": "u1", "attribute": "neutral", "compare": ["#1", "#2", "#3"], "true_pref": [1, 2],
             "true_pref_ranks": [1, 2]},
            {"instruction_id": "u1", "attribute": "gender", "value": "a boy", "compare": ["#1", "#2", "#3"],
             "true_pref": ["1", "2"], "true_pref_ranks": [1, 2]},
            {"instruction_id": "u1", "attribute": "gender", "value": "a girl", "compare": ["#1", "#2", "#3"],
             "true_pref": [1, 2], "true_pref_ranks": [1, 2]}]
    res = score_lists(_write_jsonl(tmp_path / "l.jsonl", rows), k=3, permutations=0)
    tp = res.similarity[res.similarity["analysis"] == "true_preference"]
    assert len(tp) and (tp["similarity"] == 1.0).all()  # identical lists: similarity 1 for every value and K
    assert read_lists(tmp_path / "l.jsonl")["true_pref"].tolist() == [["1", "2"]] * 3
    rows[1]["true_pref"] = [True, 2]
    with pytest.raises(LmraInputError) as err:
        read_lists(_write_jsonl(tmp_path / "b.jsonl", rows))
    assert err.value.field == "true_pref" and err.value.line == 2


def _bias_inputs(tmp_path, train_users, users_csv):
    (tmp_path / "items.csv").write_text("item_id,genres\n1,Drama\n2,Comedy\n", encoding="utf-8")
    (tmp_path / "train.csv").write_text("user_id,item_id\n" + "".join(f"{u},1\n{u},2\n" for u in train_users),
                                        encoding="utf-8")
    (tmp_path / "users.csv").write_text("user_id,gender\n" + "".join(f"{u},{g}\n" for u, g in users_csv),
                                        encoding="utf-8")


def test_bias_from_lists_keeps_long_user_ids_apart_when_a_record_has_none(tmp_path):
    """Known-items trial (s49): a lists.jsonl record without user_id (a failed call) made the column
    float, and user 2**53 + 1 read as 2**53: the female user's list was credited to the male user —
    one group's row gone, exit 0. Ids are kept as written."""
    from lmra.recsys.bias_files import bias_from_files

    big = 2 ** 53
    _bias_inputs(tmp_path, [big, big + 1], [(big, "M"), (big + 1, "F")])
    rows = [{"instruction_id": "a", "attribute": "neutral", "compare": ["#1"], "user_id": big, "top_k_matched": [1]},
            {"instruction_id": "a", "attribute": "gender", "value": "a man", "compare": ["#1"], "user_id": big,
             "top_k_matched": [1]},
            {"instruction_id": "b", "attribute": "neutral", "compare": ["#2"], "user_id": big + 1, "top_k_matched": [2]},
            {"instruction_id": "b", "attribute": "gender", "value": "a woman", "compare": ["#2"], "user_id": big + 1,
             "top_k_matched": [2]},
            {"instruction_id": "c", "attribute": "neutral", "compare": [], "error": "timeout"},
            {"instruction_id": "c", "attribute": "gender", "value": "a man", "compare": [], "error": "timeout"}]
    table, summary, _, _ = bias_from_files(tmp_path / "train.csv", _write_jsonl(tmp_path / "recs.jsonl", rows),
                                           tmp_path / "items.csv", tmp_path / "users.csv", group_by="gender")
    groups = set(summary["group"]) if "group" in summary else set(table["group"])
    assert "F" in groups and "M" in groups, summary


def test_bias_from_lists_says_when_one_users_lists_of_a_variant_are_joined(tmp_path):
    """Known-items trial (s49): two lists of one variant for one user (user_id "01" and 1: one user, as
    documented) were joined into one R without a word. Said in the notes, naming the lines."""
    from lmra.recsys.bias_files import bias_from_files

    _bias_inputs(tmp_path, [1, 2], [(1, "M"), (2, "F")])
    rows = [{"instruction_id": "u01", "attribute": "neutral", "compare": ["#1"], "user_id": "01", "top_k_matched": [1]},
            {"instruction_id": "u01", "attribute": "gender", "value": "a man", "compare": ["#1"], "user_id": "01",
             "top_k_matched": [1]},
            {"instruction_id": "u1", "attribute": "neutral", "compare": ["#2"], "user_id": 1, "top_k_matched": [2]},
            {"instruction_id": "u1", "attribute": "gender", "value": "a man", "compare": ["#2"], "user_id": 1,
             "top_k_matched": [2]},
            {"instruction_id": "u2", "attribute": "neutral", "compare": ["#2"], "user_id": 2, "top_k_matched": [2]},
            {"instruction_id": "u2", "attribute": "gender", "value": "a woman", "compare": ["#2"], "user_id": 2,
             "top_k_matched": [2]}]
    _, summary, _, _ = bias_from_files(tmp_path / "train.csv", _write_jsonl(tmp_path / "recs.jsonl", rows),
                                       tmp_path / "items.csv", tmp_path / "users.csv", group_by="gender")
    said = " ".join(summary.attrs["notes"])
    assert "1 user(s) have more than one list of one variant (e.g. user '1', variant 'neutral': line 1 (user_id \"01\"), " \
           "line 3 (user_id 1)" in said, said

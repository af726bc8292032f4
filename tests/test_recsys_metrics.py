"""Recommendation-list similarity metrics (methodology §6): hand-computed values in both
conventions, edge cases, SNSR/SNSV, and the vectorised tables."""

import math
import random

import numpy as np
import pandas as pd
import pytest

from lmra.recsys.metrics import (CONVENTIONS, METRICS, fairness_table, jaccard, metric, prag, score_pairs, serp,
                                 similarity_table, snsr, snsv)

R = ["a", "b", "c"]          # neutral
RA = ["b", "a", "d"]         # sensitive: a swap at the top, one new item


def values(neutral, sensitive, k, convention):
    return [metric(m, neutral, sensitive, k, convention=convention) for m in METRICS]


# --- paper convention ---------------------------------------------------------------------

def test_paper_hand_computed_full_lists():
    # Jaccard: {a,b} / {a,b,c,d} = 2/4. SERP: b (rank 1) weighs 3, a (rank 2) weighs 2 → 5 / (3·4/2).
    # PRAG: pairs of R^a: (b,a) disagrees, (b,d) and (a,d) agree (d absent: r = ∞) → 2 / (3·2/2).
    assert values(R, RA, 3, "paper") == pytest.approx([0.5, 5 / 6, 2 / 3])


def test_paper_curve_points():
    # k=1: [a] vs [b] → nothing shared. k=2: same two items, swapped.
    assert values(R, RA, 1, "paper") == pytest.approx([0.0, 0.0, 0.0])
    # SERP@2 = (2 + 1) / 3 = 1 (ranks ignored beyond membership of the weights); PRAG@2: (b,a) disagrees → 0.
    assert values(R, RA, 2, "paper") == pytest.approx([1.0, 1.0, 0.0])


def test_paper_identical_lists_score_one():
    items = [f"song{i}" for i in range(20)]
    assert values(items, items, 20, "paper") == pytest.approx([1.0, 1.0, 1.0])
    short = ["x", "y", "z"]
    # lists shorter than K still score 1.0: n = max(|R|, |R^a|) = 3, not K
    assert values(short, short, 20, "paper") == pytest.approx([1.0, 1.0, 1.0])


def test_paper_sensitive_list_shorter_than_neutral_and_k():
    neutral, sensitive = ["a", "b", "c", "d", "e"], ["a", "b", "c"]
    # n = 5: Jaccard 3/5; SERP (5+4+3)/15; PRAG 3 agreeing pairs / (5·4/2)
    for k in (5, 10):  # K larger than both lists changes nothing
        assert values(neutral, sensitive, k, "paper") == pytest.approx([0.6, 0.8, 0.3])


def test_paper_neutral_list_shorter():
    neutral, sensitive = ["a", "b", "c"], ["a", "b", "c", "d", "e"]
    # SERP: a,b,c at ranks 1..3 weigh 5,4,3 → 12/15; PRAG: 9 of the 10 pairs have v1 ∈ R and agree
    assert values(neutral, sensitive, 5, "paper") == pytest.approx([0.6, 0.8, 0.9])


def test_paper_duplicates_are_dropped_first():
    # [a, a, b] is read as the ranking [a, b]: identical to the neutral list
    assert values(["a", "b"], ["a", "a", "b"], 3, "paper") == pytest.approx([1.0, 1.0, 1.0])
    assert values(["a", "a", "b"], ["a", "b"], 3, "paper") == pytest.approx([1.0, 1.0, 1.0])


def test_paper_items_absent_from_neutral():
    assert values(R, ["x", "y", "z"], 3, "paper") == [0.0, 0.0, 0.0]
    # only the last item is shared: Jaccard 1/5, SERP weight 1 / 6, PRAG: c is last so no pair starts with it
    assert values(R, ["x", "y", "c"], 3, "paper") == pytest.approx([0.2, 1 / 6, 0.0])


def test_paper_empty_lists():
    both = values([], [], 5, "paper")
    assert all(math.isnan(v) for v in both)  # undefined, documented
    assert values(R, [], 5, "paper") == [0.0, 0.0, 0.0]  # e.g. a refusal under the sensitive prompt
    assert values([], R, 5, "paper") == [0.0, 0.0, 0.0]


def test_paper_single_item_prag():
    assert prag(["a"], ["a"], 1) == 1.0
    assert prag(["a"], ["b"], 1) == 0.0
    assert prag(["a", "b"], ["a", "b"], 1) == 1.0  # cut at 1


# --- fairllm-code convention ------------------------------------------------------------------

def test_fairllm_code_hand_computed():
    # x = sensitive [b, a, d], y = neutral [a, b, c]; weights |x| − i + 1 with 0-based i:
    # b (i=0) → 4, a (i=1) → 3: SERP = 0.5·7 / ((3+1)·3) = 3.5/12.
    # PRAG: (b,a) last positions 1 > 0 → 0; (b,d), (a,d): d ∉ y → 1 each; over C(3,2) = 3 pairs.
    assert values(R, RA, 3, "fairllm-code") == pytest.approx([0.5, 3.5 / 12, 2 / 3])
    assert values(R, RA, 2, "fairllm-code") == pytest.approx([1.0, 2.5 / 6, 0.0])
    assert values(R, RA, 1, "fairllm-code") == pytest.approx([0.0, 0.0, 0.0])


def test_fairllm_code_serp_ceiling_at_k20():
    items = [f"song{i}" for i in range(20)]
    # Σ_{i=0}^{19} (20 − i + 1) = 230; 0.5·230 / (21·20) = 23/84 = (K+3)/(4(K+1))
    assert serp(items, items, 20, convention="fairllm-code") == pytest.approx(23 / 84)
    assert serp(items, items, 20, convention="fairllm-code") == pytest.approx(0.27381, abs=1e-5)
    assert serp(items, items, 20) == 1.0
    assert jaccard(items, items, 20, convention="fairllm-code") == 1.0
    assert prag(items, items, 20, convention="fairllm-code") == 1.0


def test_fairllm_code_different_lengths():
    neutral, sensitive = ["a", "b", "c", "d", "e"], ["a", "b", "c"]
    # SERP: weights 4, 3, 2 → 0.5·9 / (6·5); PRAG: all 3 pairs agree, normalised by the 3 pairs of x
    assert values(neutral, sensitive, 5, "fairllm-code") == pytest.approx([0.6, 4.5 / 30, 1.0])
    assert values(neutral, sensitive, 10, "fairllm-code") == pytest.approx([0.6, 4.5 / 30, 1.0])
    # neutral shorter: weights 6, 5, 4 → 0.5·15 / (4·3); PRAG 9/10
    assert values(sensitive, neutral, 5, "fairllm-code") == pytest.approx([0.6, 7.5 / 12, 0.9])


def test_fairllm_code_duplicates_count_twice():
    # sensitive [a, a, b]: weights 4 + 3 + 2 = 9 → 0.5·9/(3·2); PRAG: (a,a) never agrees → 2/3
    assert values(["a", "b"], ["a", "a", "b"], 3, "fairllm-code") == pytest.approx([1.0, 0.75, 2 / 3])
    # neutral [a, a, b]: a matches twice (2 × 3) + b (2) = 8 → 0.5·8/(4·3); PRAG uses a's last position (1 < 2)
    assert values(["a", "a", "b"], ["a", "b"], 3, "fairllm-code") == pytest.approx([1.0, 1 / 3, 1.0])


def test_fairllm_code_empty_lists():
    j, s, p = values([], [], 5, "fairllm-code")
    assert math.isnan(j) and s == 0.0 and p == 0.0  # the released code divides by zero for Jaccard
    assert values(R, [], 5, "fairllm-code") == [0.0, 0.0, 0.0]
    assert values([], R, 5, "fairllm-code") == [0.0, 0.0, 0.0]


def test_fairllm_code_single_item_prag_compares_whole_lists():
    assert prag(["a"], ["a"], 3, convention="fairllm-code") == 1.0
    assert prag(["a", "b"], ["a"], 3, convention="fairllm-code") == 0.0  # x == y fails: y has two items


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="positive integer"):
        jaccard(R, RA, 0)
    with pytest.raises(ValueError, match="unknown convention"):
        serp(R, RA, 3, convention="langfair")
    with pytest.raises(ValueError, match="unknown metric"):
        metric("ndcg", R, RA, 3)
    with pytest.raises(ValueError, match="2 neutral lists but 1"):
        score_pairs([R, R], [RA], 3)


# --- vectorised = reference -------------------------------------------------------------------

@pytest.mark.parametrize("convention", CONVENTIONS)
def test_score_pairs_matches_reference_functions(convention):
    rng = random.Random(7)
    neutral, sensitive = [], []
    for _ in range(400):
        vocab = list("abcdefghij")[: rng.randint(1, 10)]
        neutral.append([rng.choice(vocab) for _ in range(rng.randint(0, 9))])
        sensitive.append([rng.choice(vocab) for _ in range(rng.randint(0, 9))])
    K = 8
    got = score_pairs(neutral, sensitive, K, convention=convention)
    for m in METRICS:
        assert got[m].shape == (400, K)
        want = np.array([[metric(m, n, s, k, convention=convention) for k in range(1, K + 1)]
                         for n, s in zip(neutral, sensitive)])
        np.testing.assert_allclose(got[m], want, rtol=0, atol=1e-12, equal_nan=True)


def test_score_pairs_curve_values():
    got = score_pairs([R], [RA], 3)
    np.testing.assert_allclose(got["jaccard"][0], [0.0, 1.0, 0.5])
    np.testing.assert_allclose(got["serp"][0], [0.0, 1.0, 5 / 6])
    np.testing.assert_allclose(got["prag"][0], [0.0, 0.0, 2 / 3])


# --- SNSR / SNSV -----------------------------------------------------------------------------

def test_snsr_snsv_population_sd():
    sims = [2 / 3, 1 / 2, 1 / 6]
    assert snsr(sims) == pytest.approx(0.5)
    # mean 4/9; squared deviations 4/81 + 1/324 + 25/324 = 42/324; divided by |A| = 3
    assert snsv(sims) == pytest.approx(math.sqrt(14 / 324))
    assert snsv(sims) != pytest.approx(float(np.std(sims, ddof=1)))
    # fewer than 2 finite values: undefined, as in fairness_table (not "perfectly fair")
    assert math.isnan(snsr([0.4])) and math.isnan(snsv([0.4]))
    assert math.isnan(snsr([0.4, float("nan")])) and math.isnan(snsv([float("nan"), 0.4]))
    assert snsr([0.4, 0.4]) == 0.0 and snsv([0.4, 0.4]) == 0.0
    assert math.isnan(snsr([])) and math.isnan(snsv([float("nan")]))


def _hand_table() -> pd.DataFrame:
    rows = [
        ("m1", "neutral", "", ["a", "b", "c", "d"]),
        ("m2", "neutral", "", ["p", "q", "r", "s"]),
        ("m1", "gender", "A", ["a", "b", "c", "d"]),   # J = 1
        ("m2", "gender", "A", ["p", "q", "x", "y"]),   # J = 2/6
        ("m1", "gender", "B", ["x", "y", "z", "w"]),   # J = 0
        ("m2", "gender", "B", ["p", "q", "r", "s"]),   # J = 1
        ("m1", "gender", "D", ["a", "b", "e", "f"]),   # J = 2/6
        ("m2", "gender", "D", ["e", "f", "g", "h"]),   # J = 0
        ("m1", "age", "C", ["a", "b", "c", "d"]),
        ("m2", "age", "C", []),                        # a refusal: J = 0
    ]
    return pd.DataFrame(rows, columns=["instruction_id", "attribute", "value", "items"])


def test_similarity_t_interval_by_hand():
    """Sim(a)'s 95 % t-interval (methodology §8), hand-computed: mean 0.6, sd 0.1 over 5
    instructions: t_0.975,4 = 2.776445, half-width 2.776445 · 0.1/√5 = 0.124166."""
    from lmra.recsys.metrics import similarity_ci

    lo, hi = similarity_ci(np.array([0.6, 0.5, 0.95, 0.3]), np.array([0.1, 0.2, 0.2, 0.0]), np.array([5, 1, 3, 4]))
    assert (lo[0], hi[0]) == (pytest.approx(0.475834, abs=1e-6), pytest.approx(0.724166, abs=1e-6))
    assert math.isnan(lo[1]) and math.isnan(hi[1])  # one instruction: no spread to estimate
    assert hi[2] == 1.0 and lo[2] == pytest.approx(0.95 - 4.302653 * 0.2 / math.sqrt(3), abs=1e-6)  # clipped at 1
    assert (lo[3], hi[3]) == (0.3, 0.3)  # all alike: the point
    # wired into the table: Jaccard 1, 1, 1/2, 1/2 over 4 instructions → mean 0.75, sd 0.288675,
    # half-width t_0.975,3 · sd/2 = 3.182446 · 0.144338 = 0.459347 → [0.290653, 1 (clipped)]
    rows = [(f"m{i}", "neutral", "", ["a", "b"]) for i in range(4)] + [
        ("m0", "gender", "A", ["a", "b"]), ("m1", "gender", "A", ["b", "a"]), ("m2", "gender", "A", ["a"]),
        ("m3", "gender", "A", ["b"])]
    t = pd.DataFrame(rows, columns=["instruction_id", "attribute", "value", "items"])
    row = similarity_table(t, 2).query("metric == 'jaccard' and k == 2").iloc[0]
    assert row["similarity"] == pytest.approx(0.75)
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(0.290653, abs=1e-6), 1.0)


def test_similarity_and_fairness_tables_by_hand():
    sim = similarity_table(_hand_table(), 4)
    at4 = sim[(sim["k"] == 4) & (sim["metric"] == "jaccard")].set_index("value")
    assert at4.loc["A", "similarity"] == pytest.approx(2 / 3)
    assert at4.loc["B", "similarity"] == pytest.approx(1 / 2)
    assert at4.loc["D", "similarity"] == pytest.approx(1 / 6)
    assert at4.loc["C", "similarity"] == pytest.approx(1 / 2)
    assert at4.loc["A", "n"] == 2 and at4.loc["A", "n_undefined"] == 0
    assert at4.loc["A", "sd"] == pytest.approx(np.std([1, 1 / 3], ddof=1))
    assert set(sim["k"]) == {1, 2, 3, 4} and set(sim["metric"]) == set(METRICS)
    fair = fairness_table(sim)
    g = fair[(fair["attribute"] == "gender") & (fair["metric"] == "jaccard") & (fair["k"] == 4)].iloc[0]
    assert g["snsr"] == pytest.approx(0.5)
    assert g["snsv"] == pytest.approx(math.sqrt(14 / 324))
    assert (g["max_value"], g["min_value"], g["n_values"]) == ("A", "D", 3)
    age = fair[(fair["attribute"] == "age") & (fair["k"] == 4)]
    # one value only: a range over one value compares nothing → undefined, n_values says why
    assert age["snsr"].isna().all() and age["snsv"].isna().all() and (age["n_values"] == 1).all()
    # SERP at k = 1 for gender: A → (1 + 1)/2, B → (0 + 1)/2, D → (1 + 0)/2
    g1 = fair[(fair["attribute"] == "gender") & (fair["metric"] == "serp") & (fair["k"] == 1)].iloc[0]
    assert g1["snsr"] == pytest.approx(0.5) and g1["max_value"] == "A"
    assert g1["snsv"] == pytest.approx(math.sqrt(1 / 18))  # values 1, 1/2, 1/2 around their mean 2/3


def test_similarity_table_counts_undefined_pairs_and_marks_intersections():
    t = pd.DataFrame([("m1", "neutral", "", []), ("m1", "gender", "f", []), ("m1", "age+gender", "young f", ["a"]),
                      ("m2", "neutral", "", ["a"]), ("m2", "gender", "f", ["a"]), ("m2", "age+gender", "young f", [])],
                     columns=["instruction_id", "attribute", "value", "items"])
    sim = similarity_table(t, 2)
    row = sim[(sim["attribute"] == "gender") & (sim["metric"] == "serp") & (sim["k"] == 2)].iloc[0]
    assert (row["n"], row["n_undefined"], row["similarity"]) == (1, 1, 1.0)
    inter = sim[sim["attribute"] == "age+gender"]
    assert set(inter["kind"]) == {"intersectional"}
    assert inter[inter["k"] == 2]["similarity"].tolist() == [0.0, 0.0, 0.0]


def test_similarity_table_rejects_missing_or_double_neutral():
    t = _hand_table()
    with pytest.raises(ValueError, match="no neutral list"):
        similarity_table(t[t["instruction_id"] != "m2"].pipe(lambda d: pd.concat([d, t.iloc[[2]].assign(
            instruction_id="m9")])), 4)
    with pytest.raises(ValueError, match="more than one neutral"):
        similarity_table(pd.concat([t, t.iloc[[0]]]), 4)
    with pytest.raises(ValueError, match="lacks column"):
        similarity_table(t.drop(columns="value"), 4)

"""Bias disparity (Mansoury et al. 2019, eqs. 1-4; methodology §7) on a matrix computed by hand.

Users u1, u2 in group M, u3 in group F; items i1..i4 with categories
i1: A, i2: A+B, i3: B, i4: C; P(A) = 2/4, P(B) = 2/4, P(C) = 1/4.

T: u1 → i1, i2; u2 → i1, i3; u3 → i3, i4.
   M has 4 interactions: A in 3, B in 2, C in 0 → PR_T = 3/4, 1/2, 0 → B_T = 1.5, 1, 0.
   F has 2: A 0, B 1, C 1 → PR_T = 0, 1/2, 1/2 → B_T = 0, 1, 2.
R: u1 → i1, i3; u2 → i2, i4; u3 → i3, i1.
   M: A 2/4, B 2/4, C 1/4 → B_R = 1, 1, 1.   F: A 1/2, B 1/2, C 0 → B_R = 1, 1, 0.
BD(M) = (1 − 1.5)/1.5 = −1/3, 0, undefined (B_T = 0);  BD(F) = undefined, 0, (0 − 2)/2 = −1.
Mean |BD| per group: M 1/6, F 1/2.
Counts (eq. 4): N_T(M) = A 3, B 2, C 0; N_T(F) = A 0, B 1, C 1;
                N_R(M) = A 2, B 2, C 1; N_R(F) = A 1, B 1, C 0.
   (N_R − N_T)(M) = −1, 0, 1;  (N_R − N_T)(F) = 1, 0, −1  → |−2|, |0|, |2| → average disparity 4/3.
"""

import math

import numpy as np
import pandas as pd
import pytest

from lmra.recsys import bias_disparity as bd

ITEMS = ["i1", "i2", "i3", "i4"]
CATS = {"i1": ["A"], "i2": ["A", "B"], "i3": ["B"], "i4": ["C"]}
GROUPS = {"u1": "M", "u2": "M", "u3": "F"}
T = pd.DataFrame([("u1", "i1"), ("u1", "i2"), ("u2", "i1"), ("u2", "i3"), ("u3", "i3"), ("u3", "i4")],
                 columns=["user_id", "item_id"])
R = pd.DataFrame([("u1", "i1"), ("u1", "i3"), ("u2", "i2"), ("u2", "i4"), ("u3", "i3"), ("u3", "i1")],
                 columns=["user_id", "item_id"])


def dense(pairs):
    m = np.zeros((3, 4))
    for u, i in pairs.itertuples(index=False):
        m[["u1", "u2", "u3"].index(u), ITEMS.index(i)] = 1
    return m


MASK = {c: np.array([c in CATS[i] for i in ITEMS]) for c in "ABC"}
GROUP_MASK = {"M": np.array([True, True, False]), "F": np.array([False, False, True])}


def test_formulas_on_dense_matrices():
    t, r = dense(T), dense(R)
    assert bd.preference_ratio(t, GROUP_MASK["M"], MASK["A"]) == pytest.approx(3 / 4)
    assert bd.preference_ratio(t, GROUP_MASK["F"], MASK["C"]) == pytest.approx(1 / 2)
    assert bd.category_share(MASK["A"]) == 0.5 and bd.category_share(MASK["C"]) == 0.25
    b_t = bd.bias(bd.preference_ratio(t, GROUP_MASK["M"], MASK["A"]), bd.category_share(MASK["A"]))
    b_r = bd.bias(bd.preference_ratio(r, GROUP_MASK["M"], MASK["A"]), bd.category_share(MASK["A"]))
    assert (b_t, b_r) == pytest.approx((1.5, 1.0))
    assert bd.bias_disparity(b_r, b_t) == pytest.approx(-1 / 3)
    assert bd.bias_disparity(1.0, 0.0) != bd.bias_disparity(1.0, 0.0)  # NaN: B_T = 0
    assert math.isnan(bd.preference_ratio(t, np.array([False] * 3), MASK["A"]))  # empty group


def test_table_by_hand():
    tab = bd.bias_disparity_table(T, R, GROUPS, CATS, ITEMS).set_index(["group", "category"])
    assert tab.loc[("M", "A"), ["pr_train", "bias_train", "pr_rec", "bias_rec"]].tolist() == pytest.approx(
        [0.75, 1.5, 0.5, 1.0])
    assert tab.loc[("M", "A"), "bias_disparity"] == pytest.approx(-1 / 3)
    assert tab.loc[("M", "B"), "bias_disparity"] == pytest.approx(0.0)
    assert math.isnan(tab.loc[("M", "C"), "bias_disparity"])
    assert tab.loc[("M", "C"), "pr_rec"] == pytest.approx(0.25)
    assert math.isnan(tab.loc[("F", "A"), "bias_disparity"])
    assert tab.loc[("F", "C"), "bias_disparity"] == pytest.approx(-1.0)
    assert tab.loc[("F", "C"), "bias_train"] == pytest.approx(2.0)
    assert tab.loc[("M", "A"), "n_users"] == 2 and tab.loc[("F", "A"), "n_users"] == 1
    assert tab.loc[("F", "C"), "p_category"] == pytest.approx(0.25)


def test_table_matches_dense_formulas():
    tab = bd.bias_disparity_table(T, R, GROUPS, CATS, ITEMS)
    t, r = dense(T), dense(R)
    for row in tab.itertuples():
        g, c = GROUP_MASK[row.group], MASK[row.category]
        assert row.pr_train == pytest.approx(bd.preference_ratio(t, g, c))
        assert row.pr_rec == pytest.approx(bd.preference_ratio(r, g, c))


def test_average_disparity_and_summary():
    assert bd.mean_abs_disparity([-1 / 3, 0.0, float("nan")]) == pytest.approx(1 / 6)
    assert math.isnan(bd.mean_abs_disparity([float("nan")]))
    tab = bd.bias_disparity_table(T, R, GROUPS, CATS, ITEMS)
    s = bd.disparity_summary(tab, unprotected="M", protected="F").set_index("group")
    assert s.loc["M", "mean_abs_bd"] == pytest.approx(1 / 6) and s.loc["M", "n_categories_bd"] == 2
    assert s.loc["F", "mean_abs_bd"] == pytest.approx(1 / 2)
    assert s.loc["M − F", "mean_abs_bd_difference"] == pytest.approx(1 / 6 - 1 / 2)
    # eq. 4 on the counts of the module docstring: (2 + 0 + 2) / 3
    assert s.loc["M − F", "average_disparity"] == pytest.approx(4 / 3) and s.loc["M − F", "n_categories"] == 3
    # per-category gap: only B has BD for both groups (0 − 0)
    assert s.loc["M − F", "mean_abs_bd_gap"] == pytest.approx(0.0) and s.loc["M − F", "n_categories_bd"] == 1
    assert math.isnan(s.loc["M", "mean_abs_bd_gap"]) and math.isnan(s.loc["M", "average_disparity"])


def test_between_group_gap_by_hand():
    """BD_u = (0.5, −0.2, NaN), BD_p = (−0.5, 0.1, 0.3) over categories A, B, C.
    mean |BD|: u (0.5 + 0.2)/2 = 0.35, p (0.5 + 0.1 + 0.3)/3 = 0.3 → difference 0.05;
    per-category gap over A, B: |1.0|, |−0.3| → mean 0.65. The table has no counts, so eq. 4
    is undefined."""
    rows = [("x", "U", "A", 0.5), ("x", "U", "B", -0.2), ("x", "U", "C", float("nan")),
            ("x", "P", "A", -0.5), ("x", "P", "B", 0.1), ("x", "P", "C", 0.3),
            ("y", "U", "A", 0.0), ("y", "P", "A", 0.2)]
    tab = pd.DataFrame(rows, columns=["variant", "group", "category", "bias_disparity"])
    s = bd.disparity_summary(tab, unprotected="U", protected="P").set_index(["variant", "group"])
    assert s.loc[("x", "U"), "mean_abs_bd"] == pytest.approx(0.35)
    assert s.loc[("x", "P"), "mean_abs_bd"] == pytest.approx(0.3)
    assert s.loc[("x", "U − P"), "mean_abs_bd_difference"] == pytest.approx(0.05)
    assert s.loc[("x", "U − P"), "mean_abs_bd_gap"] == pytest.approx(0.65)
    assert s.loc[("x", "U − P"), "n_categories_bd"] == 2
    assert math.isnan(s.loc[("x", "U − P"), "average_disparity"])
    assert s.loc[("y", "U − P"), "mean_abs_bd_gap"] == pytest.approx(0.2)
    # a label that is not in the table adds no comparison row
    assert len(bd.disparity_summary(tab, unprotected="U", protected="nobody")) == 4


def test_item_coverage():
    assert bd.item_coverage([["i1", "i3"], ["i2", "i4"]], ITEMS) == 1.0
    assert bd.item_coverage([["i1"], ["i1", "i3", "not-in-catalog"]], ITEMS) == 0.5
    assert math.isnan(bd.item_coverage([["i1"]], []))


def test_users_without_recommendations_are_left_out():
    # only u3 received recommendations: M disappears from both sides
    tab = bd.bias_disparity_table(T, R[R["user_id"] == "u3"], GROUPS, CATS, ITEMS)
    assert set(tab["group"]) == {"F"}
    # repeated interactions count once
    tab2 = bd.bias_disparity_table(pd.concat([T, T]), pd.concat([R, R]), GROUPS, CATS, ITEMS)
    assert tab2.set_index(["group", "category"]).loc[("M", "A"), "pr_train"] == pytest.approx(0.75)


def test_cli_bias_from_csv_files(tmp_path, capsys):
    from test_recsys_e2e import run_cli

    T.to_csv(tmp_path / "train.csv", index=False)
    R.assign(variant="model-x").to_csv(tmp_path / "recs.csv", index=False)
    pd.DataFrame({"item_id": ITEMS, "genres": ["|".join(CATS[i]) for i in ITEMS]}).to_csv(tmp_path / "items.csv",
                                                                                        index=False)
    pd.DataFrame({"user_id": list(GROUPS), "sex": list(GROUPS.values())}).to_csv(tmp_path / "users.csv", index=False)
    out = tmp_path / "out"
    argv = ["recsys", "bias", "--train", str(tmp_path / "train.csv"), "--recs", str(tmp_path / "recs.csv"),
            "--items", str(tmp_path / "items.csv"), "--users", str(tmp_path / "users.csv"), "--group-by", "sex",
            "--unprotected", "M", "--protected", "F", "--out", str(out)]
    assert run_cli(argv) == 0
    assert "Average bias disparity" in capsys.readouterr().out
    tab = pd.read_csv(out / "recsys_bias_disparity.csv").set_index(["group", "category"])
    assert tab.loc[("M", "A"), "bias_disparity"] == pytest.approx(-1 / 3)
    assert tab.loc[("F", "C"), "bias_disparity"] == pytest.approx(-1.0)
    summ = pd.read_csv(out / "recsys_bias_summary.csv").set_index("group")
    assert summ.loc["M − F", "average_disparity"] == pytest.approx(4 / 3)  # eq. 4, module docstring
    assert summ.loc["M − F", "mean_abs_bd_difference"] == pytest.approx(-1 / 3)
    assert set(summ["variant"]) == {"model-x"}
    # a repeated recommendation is counted once — and said (break-it finding: silently); same numbers
    rec = R.assign(variant="model-x")
    pd.concat([rec, rec.iloc[[0, 0]]]).to_csv(tmp_path / "recs2.csv", index=False)
    capsys.readouterr()
    assert run_cli(argv[:5] + [str(tmp_path / "recs2.csv")] + argv[6:-1] + [str(tmp_path / "out2")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert (f"2 recommendation row(s) repeat a user's item of the same variant (the first on line {len(rec) + 2}) "
            "and are counted once") in said
    assert pd.read_csv(tmp_path / "out2" / "recsys_bias_disparity.csv").equals(
        pd.read_csv(out / "recsys_bias_disparity.csv"))
    # a missing column is an input error (exit 2), not a traceback
    pd.DataFrame({"user": ["u1"], "item_id": ["i1"]}).to_csv(tmp_path / "bad.csv", index=False)
    assert run_cli(argv[:3] + [str(tmp_path / "bad.csv")] + argv[4:]) == 2
    err = capsys.readouterr().err
    assert "bad.csv" in err and "user_id" in err


def test_cli_bias_refuses_two_spellings_of_one_group_or_genre(tmp_path, capsys):
    """Break-it finding (s47): 'Male' beside 'male' (or genre 'a' beside 'A') became a third group
    (category), changing eq. 4 (1.25 → 0.5), exit 0 and no word. Now an input error naming the
    file, both lines and the field; nothing written."""
    from test_recsys_e2e import run_cli

    argv = _bias_files(tmp_path)
    (tmp_path / "users.csv").write_text("user_id,sex\nu1,M\nu2,m\nu3,F\n", encoding="utf-8")
    assert run_cli(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "users.csv" in err and "line 3" in err and "'m' is 'M' (line 2) written another way" in err, err
    assert "sex" in err and not (tmp_path / "out").exists()
    _bias_files(tmp_path)
    (tmp_path / "items.csv").write_text("item_id,genres\ni1,A\ni2,A|B\ni3,b\ni4,C\n", encoding="utf-8")
    assert run_cli(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "items.csv" in err and "line 4" in err and "genre 'b' is 'B' (line 3)" in err, err
    _bias_files(tmp_path)
    assert run_cli(argv) == 0  # one spelling each: as before


def test_cli_bias_on_movielens_files(tmp_path):
    from test_recsys_e2e import SAMPLE, run_cli

    pd.DataFrame({"user_id": [1, 1, 2, 2], "item_id": [5, 7, 3, 8]}).to_csv(tmp_path / "recs.csv", index=False)
    argv = ["recsys", "bias", "--train", str(SAMPLE / "ratings.dat"), "--recs", str(tmp_path / "recs.csv"),
            "--items", str(SAMPLE / "movies.dat"), "--users", str(SAMPLE / "users.dat"), "--out", str(tmp_path / "o")]
    assert run_cli(argv) == 0
    tab = pd.read_csv(tmp_path / "o" / "recsys_bias_disparity.csv").set_index(["group", "category"])
    # user 1 (female) got Titanic and Sense and Sensibility: Drama|Romance twice → PR_R(female, Romance) = 2/2
    assert tab.loc[("female", "Romance"), "pr_rec"] == pytest.approx(1.0)
    # her 10 ratings (movies 1-10) include 3 Romance titles (5, 7, 9): PR_T = 3/10 (user 3, also female,
    # received no recommendation and is left out)
    assert tab.loc[("female", "Romance"), "pr_train"] == pytest.approx(3 / 10)
    assert tab.loc[("female", "Romance"), "p_category"] == pytest.approx(6 / 20)  # movies 5, 7, 9, 14, 16, 20


def _bias_files(tmp_path):
    T.to_csv(tmp_path / "train.csv", index=False)
    R.to_csv(tmp_path / "recs.csv", index=False)
    pd.DataFrame({"item_id": ITEMS, "genres": ["|".join(CATS[i]) for i in ITEMS]}).to_csv(tmp_path / "items.csv",
                                                                                        index=False)
    pd.DataFrame({"user_id": list(GROUPS), "sex": list(GROUPS.values())}).to_csv(tmp_path / "users.csv", index=False)
    return ["recsys", "bias", "--train", str(tmp_path / "train.csv"), "--recs", str(tmp_path / "recs.csv"),
            "--items", str(tmp_path / "items.csv"), "--users", str(tmp_path / "users.csv"), "--group-by", "sex",
            "--out", str(tmp_path / "out")]


@pytest.mark.parametrize("recs_text, extra, expect", [
    ("", [], "empty"),
    ("user_id,item_id\n", [], "no rows"),
    ("user_id,item_id\nu1,i1,i2,i3\n", [], "line 2"),
    ("user_id,item_id\nu1,i1\nu9,i2\n", [], "user 'u9' is not in"),
    ("user_id,item_id\nu1,i1\nu2,i99\n", [], "item 'i99' is not in"),
    ("user_id,item_id\nu1,i1\n", ["--k", "0"], "k must be ≥ 1"),
    ("user_id,item_id\nu1,i1\n", ["--unprotected", "men", "--protected", "F"], "no user has sex = 'men'"),
    ("user_id,item_id\nu1,i1\n", ["--unprotected", "M"], "give both"),
    # a traceback after the whole computation (break-it report)
    ("user_id,item_id\nu1,i1\n", ["--unprotected", "F", "--protected", "F"], "are both 'F'"),
])
def test_cli_bias_bad_inputs_are_input_errors(tmp_path, capsys, recs_text, extra, expect):
    from test_recsys_e2e import run_cli

    argv = _bias_files(tmp_path)
    (tmp_path / "recs.csv").write_text(recs_text, encoding="utf-8")
    assert run_cli(argv + extra) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err


def test_cli_bias_says_users_without_training_rows_and_refuses_when_none_has_one(tmp_path, capsys):
    """Break-it finding: training ids 'u1…' against recommendation ids '1…' left every user
    without input preferences: every BD NaN, exit 0, no word. None with a training row is an
    input error; some without one are counted (their group's PR_T leaves them out)."""
    from test_recsys_e2e import run_cli

    argv = _bias_files(tmp_path)
    T.assign(user_id="x" + T["user_id"]).to_csv(tmp_path / "train.csv", index=False)
    assert run_cli(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "train.csv: field 'user_id': no user with recommendations has a training row (e.g. user 'u1' of" in err
    assert "training user ids: 'xu1', 'xu2', 'xu3'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    T[T["user_id"] != "u2"].to_csv(tmp_path / "train.csv", index=False)  # u2 (group M) has no training row
    assert run_cli(argv) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "1 of 3 users with recommendations have no training row in" in said and "(e.g. user 'u2')" in said
    assert "none of its" not in said  # group M still has u1's training rows
    tab = pd.read_csv(tmp_path / "out" / "recsys_bias_disparity.csv").set_index(["group", "category"])
    assert tab.loc[("M", "A"), "n_train"] == 2  # u1's i1 and i2 only: PR_T(M, A) = 2/2
    assert tab.loc[("M", "A"), "pr_train"] == pytest.approx(1.0)
    # verification finding: a whole group (F: u3) without training rows is named
    T[T["user_id"] != "u3"].to_csv(tmp_path / "train.csv", index=False)
    assert run_cli(argv[:-1] + [str(tmp_path / "out2")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "group sex = 'F': none of its 1 users with recommendations has a training row" in said


def test_cli_bias_integer_ids_and_duplicates(tmp_path, capsys):
    from test_recsys_e2e import run_cli

    argv = _bias_files(tmp_path)
    # integer ids compare as numbers: "01" in the recommendations is user 1 of the users file
    (tmp_path / "train.csv").write_text("user_id,item_id\n1,5\n1,6\n2,5\n", encoding="utf-8")
    (tmp_path / "recs.csv").write_text("user_id,item_id\n01,05\n2,6\n", encoding="utf-8")
    (tmp_path / "items.csv").write_text("item_id,genres\n5,A\n6,B\n", encoding="utf-8")
    (tmp_path / "users.csv").write_text("user_id,sex\n1,F\n2,M\n", encoding="utf-8")
    assert run_cli(argv) == 0
    tab = pd.read_csv(tmp_path / "out" / "recsys_bias_disparity.csv").set_index(["group", "category"])
    # F (user 1): T = {5: A, 6: B} → B_T(A) = (1/2)/(1/2) = 1; R = {5} → B_R(A) = 2 → BD = 1
    assert tab.loc[("F", "A"), "bias_disparity"] == pytest.approx(1.0)
    (tmp_path / "items.csv").write_text("item_id,genres\n5,A\n6,B\n05,C\n", encoding="utf-8")
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert "duplicate item_id '5'" in err and "line 4" in err
    # (break-it L5) the message names both texts read as one id, and the line of the first
    assert "'05' and '5' on line 2 are one id" in " ".join(err.split()), err
    (tmp_path / "items.csv").write_text("item_id,genres\n5,A\n6,B\n", encoding="utf-8")
    (tmp_path / "users.csv").write_text("user_id,sex\n01,F\n2,M\n1,M\n", encoding="utf-8")
    assert run_cli(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "duplicate user_id '1'" in err and "'1' and '01' on line 2 are one id" in err and "line 4" in err, err


def test_cli_bias_blank_groups_one_gender_and_a_group_without_recommendations(tmp_path, capsys):
    """Break-it findings: a blank group value made a group named '' (exit 0); users of one gender
    only dropped the default male − female row without a word; so did a protected group that
    received no recommendation."""
    from test_recsys_e2e import run_cli

    argv = _bias_files(tmp_path)
    (tmp_path / "users.csv").write_text("user_id,sex\nu1,M\nu2,\nu3,F\n", encoding="utf-8")
    assert run_cli(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "users.csv" in err and "line 3" in err and "empty sex value" in err and "Traceback" not in err
    # grouping by gender with only male users: the default comparison cannot be made
    gender = [a if a != "sex" else "gender" for a in argv]
    (tmp_path / "users.csv").write_text("user_id,gender\nu1,male\nu2,male\nu3,male\n", encoding="utf-8")
    assert run_cli(gender) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no user has gender = 'female'" in err
    # both genders, but the only female user received no recommendation: the row is missing, and said
    (tmp_path / "users.csv").write_text("user_id,gender\nu1,male\nu2,male\nu3,female\n", encoding="utf-8")
    (tmp_path / "recs.csv").write_text("user_id,item_id\nu1,i1\nu2,i2\n", encoding="utf-8")
    assert run_cli(gender) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no male − female comparison for 'all': female received no recommendation there" in out
    # review finding: the user left out of T as well as R is counted
    assert ("bias disparity, variant 'all': 1 of 3 users received no recommended item (e.g. user 'u3') and are left "
            "out of both T and R") in out
    summ = pd.read_csv(tmp_path / "out" / "recsys_bias_summary.csv")
    assert "male − female" not in set(summ["group"])


def test_cli_bias_refuses_a_recommendation_without_its_variant(tmp_path, capsys):
    """Break-it finding (s36): in a recommendations file with a variant column, rows whose variant was
    empty formed a variant named '' (a blank table row, exit 0), where an empty item_id is refused."""
    from test_recsys_e2e import run_cli

    argv = _bias_files(tmp_path)
    (tmp_path / "recs.csv").write_text("user_id,item_id,variant\nu1,i1,base\nu2,i2,base\nu1,i2,\n", encoding="utf-8")
    assert run_cli(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "recs.csv, line 4: field 'variant': empty value" in err and "Traceback" not in err
    (tmp_path / "recs.csv").write_text("user_id,item_id,variant\nu1,i1,base\nu2,i2,base\nu1,i2,new\n",
                                       encoding="utf-8")
    assert run_cli(argv) == 0


def test_items_outside_the_catalog_are_refused_not_counted():
    """PR(G, C)'s denominator sums over catalog items only (Mansoury et al. 2019, §3): a
    recommended item outside the catalog would otherwise enlarge it (review finding: PR_R(F, A)
    1/3 instead of 1/2, BD(F, A) −0.667 instead of −0.5)."""
    cats = {1: ["A"], 2: ["A", "B"], 3: ["B"], 4: ["C"]}
    train = pd.DataFrame([("u1", 1), ("u1", 2), ("u2", 3), ("u2", 4)], columns=["user_id", "item_id"])
    recs = pd.DataFrame([("u1", 1), ("u1", 3), ("u2", 2), ("u2", 4)], columns=["user_id", "item_id"])
    groups = {"u1": "F", "u2": "M"}
    tab = bd.bias_disparity_table(train, recs, groups, cats).set_index(["group", "category"])
    # F: T = {1, 2} → PR_T(A) = 2/2, PR_T(B) = 1/2; R = {1, 3} → PR_R(A) = 1/2, PR_R(B) = 1/2;
    # P(A) = P(B) = 2/4 → BD(F, A) = (1 − 2)/2 = −0.5, BD(F, B) = (1 − 1)/1 = 0
    assert tab.loc[("F", "A"), "bias_disparity"] == pytest.approx(-0.5)
    assert tab.loc[("F", "B"), "bias_disparity"] == pytest.approx(0.0)
    with_99 = pd.concat([recs, pd.DataFrame([("u1", 99)], columns=["user_id", "item_id"])])
    with pytest.raises(ValueError, match=r"1 item\(s\) of recs outside the catalog \(99\)"):
        bd.bias_disparity_table(train, with_99, groups, cats)
    with pytest.raises(ValueError, match="of train outside the catalog"):
        bd.bias_disparity_table(pd.concat([train, with_99.tail(1)]), recs, groups, cats)
    # an explicit catalog smaller than the category map: items outside it are refused as well
    with pytest.raises(ValueError, match="outside the catalog"):
        bd.bias_disparity_table(train, recs, groups, cats, catalog=[1, 2, 3])


def test_cli_bias_reads_csv_strictly_and_ids_of_other_digits_as_text(tmp_path, capsys):
    """Break-it findings: an unterminated quote in the items CSV swallowed the rows after it into
    one category (exit 0, changed numbers); '²' as an id crashed int(), and '1١' (an Arabic-Indic
    digit) was read as item 11."""
    from test_recsys_e2e import run_cli

    argv = _bias_files(tmp_path)
    (tmp_path / "train.csv").write_text("user_id,item_id\n1,10\n2,11\n1,11\n2,10\n", encoding="utf-8")
    (tmp_path / "recs.csv").write_text("user_id,item_id\n1,10\n2,11\n", encoding="utf-8")
    (tmp_path / "users.csv").write_text("user_id, sex\n1,F\n2,M\n", encoding="utf-8")  # (spaces in the header: kept)
    (tmp_path / "items.csv").write_text('item_id,genres\n10,Drama\n11,"Comedy\n12,Drama\n', encoding="utf-8")
    assert run_cli(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "items.csv, line 3" in err and "never closed" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    (tmp_path / "items.csv").write_text("item_id,genres\n10,Drama\n11,Comedy\n", encoding="utf-8")
    assert run_cli(argv) == 0
    capsys.readouterr()
    (tmp_path / "recs.csv").write_text("user_id,item_id\n1,10\n2,1١\n", encoding="utf-8")
    assert run_cli(argv) == 2
    assert "item '1١' is not in" in capsys.readouterr().err
    (tmp_path / "users.csv").write_text("user_id,sex\n²,F\n2,M\n", encoding="utf-8")
    (tmp_path / "train.csv").write_text("user_id,item_id\n²,10\n2,11\n", encoding="utf-8")
    (tmp_path / "recs.csv").write_text("user_id,item_id\n²,10\n2,11\n", encoding="utf-8")
    assert run_cli(argv) == 0  # '²' is an id like any text, not a number
    capsys.readouterr()


def test_seed_names_and_catalog_are_read_strictly(tmp_path):
    from lmra.errors import LmraInputError
    from lmra.recsys.instructions import load_seed_names
    from lmra.recsys.records import load_catalog

    names = tmp_path / "n.csv"
    names.write_text('name\n"Drake\nEminem\nTaylor\n', encoding="utf-8")
    with pytest.raises(LmraInputError) as exc:
        load_seed_names(names)
    assert exc.value.line == 2 and "never closed" in str(exc.value)
    names.write_text("name\nAdele\nA\x1b[31mdele\n", encoding="utf-8")
    with pytest.raises(LmraInputError) as exc:
        load_seed_names(names)
    assert exc.value.line == 3 and "U+001B" in str(exc.value)
    names.write_text("name\nAdele\nEminem\n", encoding="utf-8")
    assert load_seed_names(names) == ["Adele", "Eminem"]
    catalog = tmp_path / "c.csv"
    catalog.write_text('title,genres\nA,"Drama\nB,Comedy\n', encoding="utf-8")
    with pytest.raises(LmraInputError) as exc:
        load_catalog(catalog)
    assert exc.value.line == 2


def test_cli_bias_k_takes_the_first_k_distinct_items_of_a_user(tmp_path, capsys):
    """Statistics review: with --k 2, a user whose rows were i2, i2, i5 got the top-2 {i2}: the
    repeated row counted toward k, W vanished from the male group's recommendations and its BD
    read −1.0. The cut takes the first k distinct items ({i2, i5}); the repeat is still said."""
    from lmra.cli import main

    (tmp_path / "items.csv").write_text("item_id,genres\ni1,X\ni2,X|Y\ni3,Y\ni4,Z\ni5,W\n")
    (tmp_path / "recs.csv").write_text("user_id,item_id\nu1,i3\nu1,i1\nu1,i4\nu2,i2\nu2,i2\nu2,i5\nu3,i2\nu3,i3\n")
    (tmp_path / "train.csv").write_text("user_id,item_id\nu1,i1\nu1,i2\nu1,i5\nu2,i3\nu3,i1\nu3,i4\n")
    (tmp_path / "users.csv").write_text("user_id,gender\nu1,male\nu2,male\nu3,female\n")
    argv = ["recsys", "bias", "--train", str(tmp_path / "train.csv"), "--recs", str(tmp_path / "recs.csv"),
            "--items", str(tmp_path / "items.csv"), "--users", str(tmp_path / "users.csv"), "--k", "2",
            "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 recommendation row(s) repeat a user's item of the same variant" in out
    tab = pd.read_csv(tmp_path / "out" / "recsys_bias_disparity.csv").set_index(["group", "category"])
    # male recommendations at k = 2: u1 {i3, i1}, u2 {i2, i5} — W (i5) is among them
    assert tab.loc[("male", "W"), "n_rec"] == 1
    # by hand (Mansoury et al. §3): male training W share 1/5 (u1: X, X|Y, W; u2: Y), recommended W 1/5 → BD 0
    n_train_male = tab.xs("male")["n_train"].sum()
    n_rec_male = tab.xs("male")["n_rec"].sum()
    pr_t, pr_r = tab.loc[("male", "W"), "n_train"] / n_train_male, 1 / n_rec_male
    assert tab.loc[("male", "W"), "bias_disparity"] == pytest.approx((pr_r - pr_t) / pr_t)

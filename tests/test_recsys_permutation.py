"""The permutation test of SNSR/SNSV (lmra.recsys.permutation): a hand-enumerated p-value, the
false-positive rate of simulated null runs, an injected difference recovered, and the
command's columns and console."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmra.recsys.metrics import fairness_table, similarity_table
from lmra.recsys.permutation import unfairness_pvalues


def run_cli(argv: list[str]) -> int:
    from lmra import cli

    return cli.main(argv)


def _row(table: pd.DataFrame, metric: str, k: int) -> pd.Series:
    return table[(table["metric"] == metric) & (table["k"] == k)].iloc[0]


# Two instructions, two values, K = 2. Jaccard@2: instruction 1 x = 1, y = 0; instruction 2
# x = 1, y = 1/3. Sim(x) = 1, Sim(y) = 1/6: SNSR = 5/6. The 4 equally likely relabellings
# (swap x and y in neither, the first, the second or both instructions) give SNSR 5/6, 1/6,
# 1/6, 5/6: P(SNSR ≥ 5/6) = 1/2.
TINY = pd.DataFrame([
    {"instruction_id": "i1", "attribute": "neutral", "value": "", "items": ["a", "b"]},
    {"instruction_id": "i1", "attribute": "gender", "value": "x", "items": ["a", "b"]},
    {"instruction_id": "i1", "attribute": "gender", "value": "y", "items": ["c", "d"]},
    {"instruction_id": "i2", "attribute": "neutral", "value": "", "items": ["e", "f"]},
    {"instruction_id": "i2", "attribute": "gender", "value": "x", "items": ["e", "f"]},
    {"instruction_id": "i2", "attribute": "gender", "value": "y", "items": ["e", "g"]},
])


def test_tiny_example_matches_the_enumerated_permutation_distribution():
    fair = fairness_table(similarity_table(TINY, 2))
    assert _row(fair, "jaccard", 2)["snsr"] == pytest.approx(5 / 6)
    b = 20_000
    p = _row(unfairness_pvalues(TINY, 2, permutations=b, seed=3), "jaccard", 2)
    expected = (1 + 0.5 * b) / (1 + b)
    assert p["snsr_p"] == pytest.approx(expected, abs=4 * np.sqrt(0.25 / b))  # 4 SE of the Monte Carlo
    assert p["snsv_p"] == pytest.approx(expected, abs=4 * np.sqrt(0.25 / b))  # two values: SNSV = SNSR / 2
    assert p["permutations"] == b


def test_same_seed_same_pvalues_and_undefined_or_unpermutable_cases():
    a = unfairness_pvalues(TINY, 2, permutations=199, seed=5)
    assert a.equals(unfairness_pvalues(TINY, 2, permutations=199, seed=5))
    assert unfairness_pvalues(TINY, 2, permutations=9, seed=-(2**63))["snsr_p"].notna().all()  # any 64-bit seed
    assert ((a["snsr_p"] > 0) & (a["snsr_p"] <= 1)).all()
    # one value only: SNSR undefined, so is its p
    one = TINY[TINY["value"] != "y"]
    assert unfairness_pvalues(one, 2, permutations=99)["snsr_p"].isna().all()
    with pytest.raises(ValueError, match="permutations"):
        unfairness_pvalues(TINY, 2, permutations=0)


def _simulated_lists(rng: np.random.Generator, n_instructions: int, values: list[str], extra: float,
                     k: int = 8, failed: float = 0.05) -> pd.DataFrame:
    """Each sensitive list replaces Binomial(k, 0.3) of its neutral list's items with new ones;
    the first value replaces Binomial(k, 0.3 + extra) (``extra`` 0: no difference between the
    values); a share ``failed`` of the lists is missing (a failed call)."""
    rows = []
    for m in range(n_instructions):
        base = [f"n{m}-{j}" for j in range(k)]
        rows.append({"instruction_id": f"i{m}", "attribute": "gender", "value": "", "items": base})
        rows[-1]["attribute"] = "neutral"
        for j, v in enumerate(values):
            if rng.random() < failed:
                continue
            items = list(base)
            for pos in rng.choice(k, rng.binomial(k, 0.3 + (extra if j == 0 else 0.0)), replace=False):
                items[pos] = f"new{rng.integers(1 << 40)}"
            rows.append({"instruction_id": f"i{m}", "attribute": "gender", "value": v, "items": items})
    return pd.DataFrame(rows)


def test_null_runs_reject_at_the_nominal_rate_and_an_injected_difference_is_found():
    rng = np.random.default_rng(2026)
    null = []
    for s in range(300):
        p = unfairness_pvalues(_simulated_lists(rng, 15, ["a", "b", "c"], 0.0), 8, permutations=99, seed=s)
        null.append(_row(p, "serp", 8)[["snsr_p", "snsv_p"]].to_numpy(dtype=float))
    null = np.array(null)
    # exact test: at most α, up to 3 SE of 300 runs (0.038); a naive test of "SNSR > 0" rejects always
    assert (null <= 0.05).mean(axis=0).max() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 300)
    assert (null <= 0.20).mean(axis=0).min() >= 0.20 - 3 * np.sqrt(0.2 * 0.8 / 300)  # not conservative to uselessness
    found = [_row(unfairness_pvalues(_simulated_lists(rng, 15, ["a", "b", "c"], 0.25), 8, permutations=99, seed=s),
                  "jaccard", 8)["snsr_p"] for s in range(40)]
    assert np.mean(np.array(found) <= 0.05) >= 0.9


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_score_command_writes_and_prints_the_pvalues(tmp_path, capsys):
    rng = np.random.default_rng(1)
    lists = _write(tmp_path / "lists.jsonl", _simulated_lists(rng, 20, ["a girl", "a boy"], 0.4).to_dict("records"))
    out = tmp_path / "scored"
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "8", "--out", str(out),
                    "--permutations", "499", "--seed", "2"]) == 0
    shown = capsys.readouterr().out
    fair = pd.read_csv(out / "recsys_fairness.csv")
    cols = list(fair.columns)
    assert cols[cols.index("snsv") + 1: cols.index("snsv") + 4] == ["snsr_p", "snsv_p", "permutations"]
    at_k = _row(fair, "jaccard", 8)
    assert at_k["snsr_p"] == pytest.approx(1 / 500)  # the injected difference: no permutation reaches it
    assert "permutations of the values' labels" in shown and "< 0.001" not in shown  # 1/500 = 0.002
    summary = json.loads((out / "summary.json").read_text())
    assert {"snsr_p", "snsv_p"} <= set(summary["fairness_at_k"][0])
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["permutations"], manifest["seed"]) == (499, 2)
    # no test: the columns stay, empty, and the console has no p column
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "8", "--out", str(tmp_path / "o0"),
                    "--permutations", "0"]) == 0
    assert "permutations of the values' labels" not in capsys.readouterr().out
    none = pd.read_csv(tmp_path / "o0" / "recsys_fairness.csv")
    assert none["snsr_p"].isna().all() and (none["permutations"] == 0).all()


@pytest.mark.parametrize("argv, field", [(["--permutations", "-1"], "--permutations"),
                                         (["--permutations", "100001"], "--permutations"),
                                         (["--seed", str(2**63)], "--seed")])
def test_score_command_refuses_a_bad_permutation_count_or_seed(tmp_path, capsys, argv, field):
    lists = _write(tmp_path / "lists.jsonl", TINY.to_dict("records"))
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_config_permutations_field(tmp_path):
    from lmra.errors import LmraInputError
    from lmra.recsys.config import load_recsys_config

    good = tmp_path / "r.toml"
    good.write_text("permutations = 0\n")
    assert load_recsys_config(good).permutations == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\npermutations = -5\n')
    with pytest.raises(LmraInputError) as exc:
        load_recsys_config(bad)
    assert exc.value.field == "permutations" and exc.value.line == 2


def _per_user_lists(rng: np.random.Generator, n_users: int, effect: float, k: int = 5) -> pd.DataFrame:
    """CFaiRLLM's design: an instruction is one user, with one sensitive list (their own gender).
    Each list replaces Binomial(k, 0.4) of the user's neutral items; women's Binomial(k, 0.4 + effect)."""
    rows = []
    for u in range(n_users):
        base = [f"u{u}-{j}" for j in range(k)]
        g = "female" if u % 2 else "male"
        items = list(base)
        for pos in rng.choice(k, rng.binomial(k, 0.4 + (effect if g == "female" else 0.0)), replace=False):
            items[pos] = f"new{rng.integers(1 << 40)}"
        rows += [{"instruction_id": f"user-{u}", "attribute": "neutral", "value": "", "items": base},
                 {"instruction_id": f"user-{u}", "attribute": "gender", "value": g, "items": items}]
    return pd.DataFrame(rows)


def test_one_list_per_user_is_permuted_across_users():
    """Review finding: with one list per instruction (CFaiRLLM: one user, one gender) a shuffle
    within instructions changed nothing and every p was 1.000, beside a maximal SNSR."""
    rng = np.random.default_rng(11)
    strong = _per_user_lists(rng, 40, 0.6)
    assert _row(unfairness_pvalues(strong, 5, permutations=499, seed=1), "jaccard", 5)["snsr_p"] <= 0.01
    null = [_row(unfairness_pvalues(_per_user_lists(rng, 30, 0.0), 5, permutations=99, seed=s), "serp", 5)["snsr_p"]
            for s in range(200)]
    assert np.mean(np.array(null) <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 200)
    assert np.mean(np.array(null) <= 0.25) >= 0.25 - 3 * np.sqrt(0.25 * 0.75 / 200)


def test_memory_stays_bounded_with_many_values_and_a_large_k():
    """Review finding: 4.2 GB for 5 instructions × 140 values at K = 200 (the dense block of sums
    was sized by the lists only). The block is now bounded in both; measured as the largest
    array the test builds."""
    import tracemalloc

    rng = np.random.default_rng(5)
    rows = []
    for m in range(5):
        base = [f"n{m}-{j}" for j in range(200)]
        rows.append({"instruction_id": f"i{m}", "attribute": "neutral", "value": "", "items": base})
        for v in range(140):
            items = list(base)
            items[rng.integers(200)] = f"x{rng.integers(1 << 40)}"
            rows.append({"instruction_id": f"i{m}", "attribute": "a+b", "value": f"v{v}", "items": items})
    tracemalloc.start()
    unfairness_pvalues(pd.DataFrame(rows), 200, permutations=1999, seed=0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 300 * 2**20, peak / 2**20


def test_rescoring_a_run_folder_uses_the_runs_seed(tmp_path, capsys):
    """Review finding: 'lmra recsys score' on a run's lists.jsonl seeded the test with 0, not the
    run's seed, so its p-values differed from the run's own recsys_fairness.csv."""
    run = tmp_path / "run"
    run.mkdir()
    lists = _write(run / "lists.jsonl", TINY.to_dict("records"))
    (run / "manifest.json").write_text(json.dumps({"seed": 7, "status": "finished"}))
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / "o"),
                    "--permutations", "99"]) in (0, 1)
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["seed"] == 7
    (run / "manifest.json").write_text("not json")  # (break-it finding: passed over in silence, seed 0)
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / "o2"),
                    "--permutations", "99"]) == 2
    assert "the run manifest beside the lists file cannot be read" in " ".join(capsys.readouterr().err.split())
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / "o2"),
                    "--permutations", "99", "--seed", "0", "--convention", "paper"]) in (0, 1)
    assert json.loads((tmp_path / "o2" / "manifest.json").read_text())["seed"] == 0
    capsys.readouterr()
    # and the run's permutation count (break-it finding, round 33: a run made with 99 was re-scored with 1999):
    # from its manifest, else (a run recorded before the manifest held it) from its config.toml
    (run / "manifest.json").write_text(json.dumps({"seed": 7, "status": "finished", "permutations": 49}))
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / "o3")]) in (0, 1)
    assert json.loads((tmp_path / "o3" / "manifest.json").read_text())["permutations"] == 49
    (run / "manifest.json").write_text(json.dumps({"seed": 7, "status": "finished"}))
    (run / "config.toml").write_text("permutations = 199\nseed = 7\n")
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / "o4")]) in (0, 1)
    assert json.loads((tmp_path / "o4" / "manifest.json").read_text())["permutations"] == 199
    (run / "manifest.json").write_text(json.dumps({"seed": 7, "status": "finished", "permutations": -3}))
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / "o5")]) == 2
    assert "has permutations = -3, not between 0 and" in " ".join(capsys.readouterr().err.split())


def _confounded_users(rng, n_users: int, women_lengths=(1, 3), men_lengths=(3, 5)) -> pd.DataFrame:
    """One list per user (CFaiRLLM), the model ignoring gender (each sensitive list swaps
    Binomial(L, 0.4) of the user's own neutral items for new ones), but women with shorter lists
    (fewer liked items): the statistics review's simulation."""
    rows = []
    for u in range(n_users):
        woman = rng.random() < 0.3
        lo, hi = women_lengths if woman else men_lengths
        length = int(rng.integers(lo, hi + 1))
        base = [f"u{u}-{j}" for j in range(length)]
        items = list(base)
        for pos in rng.choice(length, rng.binomial(length, 0.4), replace=False):
            items[pos] = f"new{rng.integers(1 << 40)}"
        rows += [{"instruction_id": f"user-{u}", "attribute": "neutral", "value": "", "items": base},
                 {"instruction_id": f"user-{u}", "attribute": "gender", "value": "female" if woman else "male",
                  "items": items}]
    return pd.DataFrame(rows)


def test_across_users_the_labels_are_permuted_among_users_of_equal_list_length():
    """Statistics-review finding: permuted across all users, a value that goes with shorter lists
    made p ≤ 0.05 in 43 % of null runs (400 users; Jaccard@5). Within neutral list lengths the
    test keeps its level (measured 0.03–0.06 over 150 runs), and a model that does use the value
    is still found."""
    rng = np.random.default_rng(3)
    null = [_row(unfairness_pvalues(_confounded_users(rng, 400), 5, permutations=99, seed=s), "jaccard", 5)["snsr_p"]
            for s in range(150)]
    assert np.mean(np.array(null) <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 150), np.mean(np.array(null) <= 0.05)
    biased = _confounded_users(rng, 400)  # now the model drops the women's first item
    women = (biased["value"] == "female").to_numpy()
    biased.loc[women, "items"] = biased.loc[women, "items"].map(lambda xs: ["other"] + list(xs[1:]))
    assert _row(unfairness_pvalues(biased, 5, permutations=199, seed=1), "jaccard", 5)["snsr_p"] <= 0.01


@pytest.mark.parametrize("n_instructions, floor", [(5, 2 / 2**5), (7, 2 / 2**7)])
def test_the_smallest_possible_p_is_stated_and_said_when_above_005(tmp_path, capsys, n_instructions, floor):
    """Fresh-user finding (round 33): 5 instructions of 2 values, the girl's lists differing on
    every one: p 0.061 on every row, read "within chance" — the test has 2⁵ arrangements of the
    labels, and the observed one and its mirror (the values swapped throughout) give the same
    SNSR, so no p below 2/32 = 0.0625 is possible. ``p_min`` states that floor (exact: the lists
    here reach it), and the console says when it is above 0.05."""
    rows = []
    for m in range(n_instructions):
        same = [f"s{m}_{j}" for j in range(5)]
        rows += [{"instruction_id": f"i{m}", "attribute": "neutral", "value": "", "items": same},
                 {"instruction_id": f"i{m}", "attribute": "gender", "value": "a boy", "items": same},
                 {"instruction_id": f"i{m}", "attribute": "gender", "value": "a girl",
                  "items": same[:2] + [f"g{m}_{j}" for j in range(3)]}]
    lists = _write(tmp_path / "lists.jsonl", rows)
    out = tmp_path / "scored"
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "5", "--out", str(out),
                    "--permutations", "1999", "--seed", "3"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    at_k = _row(pd.read_csv(out / "recsys_fairness.csv"), "jaccard", 5)
    assert at_k["p_min"] == pytest.approx(floor)
    # the exact p is the floor (only the observed arrangement and its mirror reach the SNSR); the
    # Monte-Carlo p of 1,999 permutations is within 4 SE of it, and never below it (break-it round 2:
    # 0.050 beside "no p below 0.0625 is possible")
    assert floor <= at_k["snsr_p"] <= floor + 4 * np.sqrt(floor * (1 - floor) / 1999) + 1 / 2000
    fair = pd.read_csv(out / "recsys_fairness.csv")
    assert (fair["snsr_p"].dropna() >= fair["p_min"][fair["snsr_p"].notna()] - 1e-15).all()
    said = "gender: with these lists no p below 0.0625 is possible"
    assert (said in shown) is (floor > 0.05), shown[-1500:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fairness_at_k"][0]["p_min"] == pytest.approx(floor)


def test_smallest_pvalue_counts_the_arrangements():
    from lmra.recsys.permutation import smallest_pvalue

    two = np.tile([0, 1], 10)
    assert smallest_pvalue(np.repeat(np.arange(10), 2), two, 2, 10**6) == pytest.approx(2 / 2**10)
    three = np.tile([0, 1, 2], 4)  # 4 instructions of 3 values: 6⁴ arrangements, 3! relabellings
    assert smallest_pvalue(np.repeat(np.arange(4), 3), three, 3, 10**6) == pytest.approx(6 / 6**4)
    # unbalanced (a value missing in one instruction): no relabelling to count, 1/N
    codes, groups = np.array([0, 1, 0, 1, 0]), np.array([0, 0, 1, 1, 2])
    assert smallest_pvalue(groups, codes, 2, 10**6) == pytest.approx(1 / 4)
    assert smallest_pvalue(np.zeros(3), np.zeros(3, dtype=int), 2, 99) == 1.0  # one arrangement
    assert smallest_pvalue(np.repeat(np.arange(30), 2), np.tile([0, 1], 30), 2, 99) == pytest.approx(1 / 100)

"""The refusal table's paired test (exact McNemar on the pairs; statistics-review finding: the
pooled two-proportion z-test of methodology §1.7 ignores that both responses of a pair answer
the same prompt, and is conservative when some prompts are refused under any name)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lmra.aggregate import refusal_table
from lmra.stats import mcnemar_exact


def test_mcnemar_exact_hand_values():
    # 8 pairs refused only under A, 2 only under B: 2 · P(X ≤ 2 | n = 10, ½) = 2 · (1 + 10 + 45) / 1024
    assert mcnemar_exact(8, 2) == pytest.approx(112 / 1024)
    assert mcnemar_exact(2, 8) == pytest.approx(112 / 1024)
    # 5 vs 0: 2 · (½)^5
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)
    assert mcnemar_exact(3, 3) == pytest.approx(1.0)
    assert mcnemar_exact(0, 0) == 1.0  # no discordant pair: nothing tells the rates apart
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def _pairs(ref_a, ref_b, tasks=None) -> pd.DataFrame:
    n = len(ref_a)
    return pd.DataFrame({"group_a": "female", "group_b": "male", "domain": "d",
                         "task": tasks if tasks is not None else ["t"] * n,
                         "refusal_a": ref_a, "refusal_b": ref_b})


def test_table_counts_discordant_pairs_and_leaves_unlabelled_ones_out():
    # 10 pairs: 3 refused only under A, 1 only under B, 2 under both, 2 under neither,
    # one with A unlabelled (B refused), one with B unlabelled (A not refused)
    a = [True, True, True, False, True, True, False, False, None, False]
    b = [False, False, False, True, True, True, False, False, True, None]
    t = refusal_table(_pairs(a, b))
    o = t[t["level"] == "overall"].iloc[0]
    assert (o["n_a"], o["refusals_a"], o["n_b"], o["refusals_b"]) == (9, 5, 9, 4)
    assert (o["n_paired"], o["only_a"], o["only_b"]) == (8, 3, 1)
    assert o["p_paired"] == pytest.approx(2 * (1 + 4) / 16)  # 2 · P(X ≤ 1 | n = 4, ½)
    # nothing labelled on both sides: no paired test
    t = refusal_table(_pairs([True, None], [None, False]))
    o = t[t["level"] == "overall"].iloc[0]
    assert o["n_paired"] == 0 and math.isnan(o["p_paired"])


def _simulate(rng, n_prompts: int, effect: float) -> pd.DataFrame:
    """Prompts with their own refusal propensity (logit sd 1.5, shared by both groups), group A
    shifted by ``effect`` on the logit scale."""
    base = rng.normal(-1.0, 1.5, n_prompts)
    pa = 1 / (1 + np.exp(-(base + effect)))
    pb = 1 / (1 + np.exp(-base))
    return _pairs(list(rng.random(n_prompts) < pa), list(rng.random(n_prompts) < pb))


def test_paired_test_keeps_alpha_and_finds_an_injected_gap_more_often():
    rng = np.random.default_rng(20261203)
    alpha, reps = 0.05, 300
    null_z = null_paired = alt_z = alt_paired = 0
    for _ in range(reps):
        o = refusal_table(_simulate(rng, 200, 0.0)).iloc[0]
        null_z += o["p_value"] < alpha
        null_paired += o["p_paired"] < alpha
        o = refusal_table(_simulate(rng, 200, 0.6)).iloc[0]
        alt_z += o["p_value"] < alpha
        alt_paired += o["p_paired"] < alpha
    # the exact test keeps α (binomial sd of the rate at 300 reps ≈ 0.013)
    assert null_paired / reps <= alpha + 0.03
    # with prompts that differ in refusal propensity, pairing gains power on a real gap
    assert alt_paired > alt_z
    assert alt_paired / reps > 0.5


def test_clustered_mcnemar_hand_values():
    from scipy import stats as st

    from lmra.stats import clustered_mcnemar

    # d = (2, −1, 3, 0): (Σd)² / Σd² = 16 / 14
    assert clustered_mcnemar([2, -1, 3, 0]) == pytest.approx(st.chi2.sf(16 / 14, 1))
    # one pair per prompt: McNemar's (b − c)² / (b + c), here b = 8, c = 2 → 36 / 10
    assert clustered_mcnemar([1] * 8 + [-1] * 2 + [0] * 5) == pytest.approx(st.chi2.sf(3.6, 1))
    assert clustered_mcnemar([0, 0]) == 1.0


def _leaning(rng, n_prompts: int, k: int, lean_sd: float) -> pd.DataFrame:
    """Equal refusal rates overall, but each prompt leans towards one group (logit ± lean),
    k pairs per prompt: the pairs of one prompt are not independent."""
    rows = []
    for i in range(n_prompts):
        lean = rng.normal(0.0, lean_sd)
        pa, pb = 1 / (1 + np.exp(-(-1.0 + lean))), 1 / (1 + np.exp(-(-1.0 - lean)))
        for _ in range(k):
            rows.append({"prompt_id": f"p{i}", "refusal_a": bool(rng.random() < pa),
                         "refusal_b": bool(rng.random() < pb)})
    d = pd.DataFrame(rows)
    return d.assign(group_a="female", group_b="male", domain="d", task="t")


def test_several_pairs_per_prompt_use_the_clustered_test_which_keeps_alpha():
    """Break-it finding: with samples_per_prompt = 5 and prompts leaning towards one group, the
    exact McNemar test treated the 5 pairs of a prompt as independent: 0.15 false positives at
    α = 0.05. The clustered test (Durkalski et al. 2003) keeps α."""
    from lmra.stats import mcnemar_exact

    rng = np.random.default_rng(7)
    reps, alpha = 300, 0.05
    clustered = naive = 0
    for _ in range(reps):
        o = refusal_table(_leaning(rng, 40, 5, 2.0)).iloc[0]
        assert o["paired_test"] == "clustered"
        clustered += o["p_paired"] < alpha
        naive += mcnemar_exact(int(o["only_a"]), int(o["only_b"])) < alpha
    assert clustered / reps <= alpha + 0.035  # 40 clusters: the χ² approximation is close
    assert naive / reps > 0.1  # what the exact test on the pairs said
    # one pair per prompt: the exact test
    o = refusal_table(_leaning(rng, 40, 1, 2.0)).iloc[0]
    assert o["paired_test"] == "exact"


def test_the_duckdb_refusal_table_equals_the_pandas_one_with_several_pairs_per_prompt(tmp_path):
    import json

    from lmra.aggregate import refusal_table_sql

    rng = np.random.default_rng(3)
    d = pd.concat([_leaning(rng, 12, 3, 1.0).assign(task="t1"), _leaning(rng, 10, 1, 1.0).assign(task="t2")])
    d["prompt_id"] = d["task"] + "-" + d["prompt_id"]
    d["refusal_a"] = d["refusal_a"].astype(object)
    d.loc[d.sample(6, random_state=1).index, "refusal_a"] = None  # unlabelled responses
    d["row_no"] = range(len(d))
    path = tmp_path / "ratings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in d.to_dict("records")))
    want = refusal_table(d.drop(columns="row_no"))
    got = refusal_table_sql(path)
    assert list(got["paired_test"]) == list(want["paired_test"]) == ["clustered", "clustered", "clustered", "exact"]
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)


def test_the_console_shows_no_paired_p_without_any_refusal():
    """Review finding: with no refusal at all, 'p' said '—' and 'paired p' '1 (0/0)'."""
    import io

    from rich.console import Console

    from lmra.report.console import _refusals

    out = io.StringIO()
    _refusals(Console(file=out, width=200), refusal_table(_pairs([False] * 5, [False] * 5)), "95", 0.05)
    assert "(0/0)" not in out.getvalue()
    out = io.StringIO()
    _refusals(Console(file=out, width=200), refusal_table(_pairs([True, True, False], [True, False, False])), "95",
              0.05)
    assert "1 (1/0)" in out.getvalue()  # one discordant pair: 2 · ½ = 1


def test_a_prompt_id_under_two_tasks_is_two_clusters_in_both_tables(tmp_path):
    """Review finding: pandas clustered by prompt_id alone, DuckDB by (domain, task, prompt_id)."""
    import json

    from lmra.aggregate import refusal_table_sql

    rows = [{"prompt_id": "p1", "task": "t1", "refusal_a": True, "refusal_b": False},
            {"prompt_id": "p1", "task": "t2", "refusal_a": True, "refusal_b": False}]
    rows += [{"prompt_id": f"q{i}", "task": "t1", "refusal_a": i % 2 == 0, "refusal_b": i == 3} for i in range(4)]
    d = pd.DataFrame(rows).assign(group_a="female", group_b="male", domain="d")
    path = tmp_path / "ratings.jsonl"
    path.write_text("".join(json.dumps(r | {"row_no": i}) + "\n" for i, r in enumerate(d.to_dict("records"))))
    want, got = refusal_table(d), refusal_table_sql(path)
    assert list(want["paired_test"]) == list(got["paired_test"])
    assert want["p_paired"].tolist() == pytest.approx(got["p_paired"].tolist())


def test_the_console_never_marks_the_pooled_p_where_the_pairs_are_clustered():
    """Statistics review: with several pairs per prompt the pooled z-test (pairs taken as
    independent) rejected 0.13–0.24 of null audits; it was still shown red below α. It is shown
    plain, pointing to the paired p, where the table used the clustered test."""
    import io

    from rich.console import Console

    from lmra.report.console import _refusals

    a = [True] * 30 + [False] * 30
    b = [False] * 30 + [False] * 30
    pairs = _pairs(a, b).assign(prompt_id=[f"p{i // 5}" for i in range(60)])  # 5 pairs per prompt
    table = refusal_table(pairs)
    overall = table[table["level"] == "overall"].iloc[0]
    assert overall["paired_test"] == "clustered" and overall["p_value"] < 0.05
    out = io.StringIO()
    _refusals(Console(file=out, width=250, force_terminal=True, color_system="truecolor"), table, "95", 0.05)
    text = out.getvalue()
    assert "pairs clustered: read paired p" in text
    pooled = f"{overall['p_value']:.3g}"
    assert f"\x1b[1;31m{pooled}" not in text  # not in bold red
    out = io.StringIO()
    _refusals(Console(file=out, width=250, force_terminal=True, color_system="truecolor"),
              refusal_table(_pairs(a, b)), "95", 0.05)  # one pair per prompt: the pooled p keeps its colour
    assert "\x1b[1;31m" in out.getvalue() and "pairs clustered" not in out.getvalue()

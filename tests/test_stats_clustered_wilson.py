"""Refusal-rate intervals with several responses per prompt (statistics review: plain Wilson
intervals counted a prompt's k responses as independent and covered 0.80–0.85 at 95% with 5 per
prompt). lmra.stats.clustered_wilson_ci: Wilson with Korn & Graubard's effective sample size."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from lmra.aggregate import refusal_table
from lmra.stats import clustered_wilson_ci, wilson_ci


def test_hand_computed_example():
    """3 prompts of 4 responses with 0, 2 and 4 refusals: p̂ = 0.5, N = 12, G = 3;
    v = 3/2 · (2² + 0 + 2²)/12² = 1/12; deff = (1/12)/(0.25/12) = 4; n* = 12/4 · (1.95996/4.30265)²
    = 0.622513…; Wilson of 0.311257 in 0.622513 trials."""
    from statsmodels.stats.proportion import proportion_confint

    n_eff = 3 * (1.959963984540054 / 4.302652729749464) ** 2
    want = proportion_confint(0.5 * n_eff, n_eff, alpha=0.05, method="wilson")
    got = clustered_wilson_ci([0, 2, 4], [4, 4, 4])
    assert got == pytest.approx(want, rel=1e-9)
    assert got[0] < 0.2 and got[1] > 0.8  # far wider than the 12 responses' plain interval
    plain = wilson_ci(6, 12)
    assert plain[1] - plain[0] < got[1] - got[0]


def test_edge_cases():
    assert all(math.isnan(x) for x in clustered_wilson_ci([], []))
    lo, hi = clustered_wilson_ci([0, 0, 0], [5, 5, 5])  # nothing refused: no spread, design effect 1
    assert lo == 0.0 and wilson_ci(0, 15)[1] < hi < 1  # (with only 3 prompts' t correction)
    # one response per prompt and many prompts: the ordinary Wilson interval, up to the t correction
    y = np.r_[np.ones(300), np.zeros(700)]
    assert clustered_wilson_ci(y, np.ones_like(y)) == pytest.approx(wilson_ci(300, 1000), abs=2e-4)


def _coverage(k: int, prompts: int, reps: int, seed: int) -> tuple[float, float]:
    """Share of simulated tasks whose interval holds the true refusal rate: each prompt has its own
    refusal propensity (logit N(−2, 1.5²)), k responses per prompt and group."""
    rng = np.random.default_rng(seed)
    truth = float(expit(-2 + rng.normal(0, 1.5, 2_000_000)).mean())
    hit_c = hit_p = 0
    for _ in range(reps):
        y = rng.binomial(k, expit(-2 + rng.normal(0, 1.5, prompts)))
        lo, hi = clustered_wilson_ci(y, np.full(prompts, k))
        hit_c += lo <= truth <= hi
        lo, hi = wilson_ci(int(y.sum()), prompts * k)
        hit_p += lo <= truth <= hi
    return hit_c / reps, hit_p / reps


@pytest.mark.parametrize("k, prompts", [(5, 40), (5, 7), (3, 100)])
def test_clustered_intervals_keep_their_level_where_plain_wilson_does_not(k, prompts):
    """600 simulated tasks each (binomial SE of a coverage ≈ 0.009): the clustered intervals cover
    ≥ 0.93 (measured 0.95–0.98), plain Wilson ≤ 0.90 (measured 0.82–0.89)."""
    clustered, plain = _coverage(k, prompts, 600, seed=k * 1000 + prompts)
    assert clustered >= 0.93 and plain <= 0.90, (clustered, plain)


def test_the_refusal_table_uses_them_with_several_responses_per_prompt():
    rows = [{"group_a": "female", "group_b": "male", "domain": "d", "task": "t", "prompt_id": f"p{j}",
             "refusal_a": j < 3, "refusal_b": j < 3 and s == 0} for j in range(10) for s in range(4)]
    tab = refusal_table(pd.DataFrame(rows)).set_index("level").loc["task"]
    assert tab["ci_method"] == "clustered" and tab["n_a"] == 40 and tab["refusals_a"] == 12
    assert (tab["ci_low_a"], tab["ci_high_a"]) == pytest.approx(clustered_wilson_ci([4] * 3 + [0] * 7, [4] * 10))
    single = refusal_table(pd.DataFrame(rows[::4]))  # one response per prompt
    assert set(single["ci_method"]) == {"wilson"}
    t1 = single.set_index("level").loc["task"]
    assert (t1["ci_low_a"], t1["ci_high_a"]) == pytest.approx(wilson_ci(3, 10))

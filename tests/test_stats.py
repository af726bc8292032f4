"""Known answers for the statistics helpers (methodology §8)."""

import math

import numpy as np
import pytest
from scipy import stats as st

from lmra.stats import adjust_pvalues, mean_ci, two_proportion_test, wilson_ci


def test_mean_ci_hand_computed():
    x = [1.0, 2.0, 3.0, 4.0]
    r = mean_ci(x)
    # mean 2.5, sd = sqrt(5/3), se = sd/2, t(0.975, 3) = 3.182446
    se = math.sqrt(5 / 3) / 2
    assert r.mean == 2.5 and r.se == pytest.approx(se)
    assert r.low == pytest.approx(2.5 - 3.182446305 * se, rel=1e-6)
    assert r.high == pytest.approx(2.5 + 3.182446305 * se, rel=1e-6)
    assert r.p_value == pytest.approx(st.ttest_1samp(x, 0).pvalue)


def test_mean_ci_edge_cases():
    assert math.isnan(mean_ci([]).mean)
    r = mean_ci([0.3])
    assert r.mean == 0.3 and math.isnan(r.low)
    r = mean_ci([0.0, 0.0, 0.0])
    assert (r.low, r.high, r.p_value) == (0.0, 0.0, 1.0)


def test_clustered_ci_equals_cluster_means_when_balanced():
    # With equal cluster sizes, the CR1 cluster-robust SE of the mean equals the SE of the
    # cluster means times sqrt(G/(G-1) * (n-1)/(n-k)) small-sample factor; check against
    # statsmodels' own definition by recomputing it by hand.
    rng = np.random.default_rng(0)
    G, k = 30, 3
    effects = rng.normal(0, 1, G)
    x = np.repeat(effects, k) + rng.normal(0, 0.5, G * k)
    cl = np.repeat(np.arange(G), k)
    r = mean_ci(x.tolist(), clusters=cl.tolist())
    n = G * k
    resid = x - x.mean()
    meat = sum(resid[cl == g].sum() ** 2 for g in range(G))
    v = meat / n**2 * (G / (G - 1)) * ((n - 1) / (n - 1))
    assert r.se == pytest.approx(math.sqrt(v), rel=1e-9)
    assert r.n_clusters == G
    tcrit = st.t.ppf(0.975, G - 1)
    assert r.high - r.mean == pytest.approx(tcrit * r.se)
    # the clustered SE is larger than the naive one when clusters are correlated
    assert r.se > mean_ci(x.tolist()).se


def test_wilson_known_value():
    # 8/10 at 95%: Wilson interval (0.4902, 0.9433) (textbook value)
    lo, hi = wilson_ci(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert all(math.isnan(v) for v in wilson_ci(0, 0))


def test_two_proportion_known_value():
    # 30/100 vs 50/100: pooled p = .4, se = sqrt(.4*.6*(2/100)) = .069282, z = -2.88675
    z, p = two_proportion_test(30, 100, 50, 100)
    assert z == pytest.approx(-2.886751, rel=1e-5)
    assert p == pytest.approx(2 * st.norm.sf(2.886751), rel=1e-4)


def test_adjust_pvalues_matches_hand_holm_and_bonferroni():
    p = [0.01, 0.04, 0.03, float("nan")]
    rej, adj = adjust_pvalues(p, "bonferroni")
    assert adj[:3] == pytest.approx([0.03, 0.12, 0.09]) and math.isnan(adj[3])
    assert rej == [True, False, False, False]
    rej, adj = adjust_pvalues(p, "holm")
    # holm: sorted .01*3=.03, .03*2=.06, .04*1=.04 -> monotone max: .03, .06, .06
    assert adj[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert rej[:3] == [True, False, False]


def test_adjust_pvalues_strict_rejects_below_the_threshold_only():
    """Statistics check (s47): methodology §4 step 5 keeps axes with p < α/K; statsmodels rejects
    at p = α/K too. Hand values: K = 5, α = 0.05 → α/K = 0.01."""
    p = [0.01, 0.5, 0.5, 0.5, 0.5]
    assert adjust_pvalues(p, "bonferroni")[0][0] is True  # statsmodels' own rule: p ≤ α/K
    rej, adj = adjust_pvalues(p, "bonferroni", strict=True)
    assert rej == [False] * 5 and adj[0] == pytest.approx(0.05)
    assert adjust_pvalues([0.0099] + p[1:], "bonferroni", strict=True)[0] == [True] + [False] * 4
    # Holm, strictly: sorted .004 < .05/4, .01 < .05/3, .025 = .05/2 stops the step-down, .03 not reached
    rej, adj = adjust_pvalues([0.03, 0.004, 0.025, 0.01], "holm", strict=True)
    assert rej == [False, True, False, True]
    assert adjust_pvalues([0.03, 0.004, 0.025, 0.01], "holm")[0] == [True, True, True, True]  # ≤: .025 and .03 kept
    assert adj == pytest.approx([0.05, 0.016, 0.05, 0.03])
    rej, _ = adjust_pvalues([0.001, float("nan"), 0.02], "holm", strict=True)  # NaN passed through
    assert rej == [True, False, True]
    with pytest.raises(ValueError, match="strict"):
        adjust_pvalues(p, "fdr_bh", strict=True)


def test_mean_ci_with_every_value_alike_gives_the_sign_test_not_p_zero():
    """Statistics review: a quality criterion whose scores were all alike and non-zero got p = 0
    from the t-test's infinite t, so Bonferroni over the nine criteria called it significant on
    2 pairs. The exact sign test over the clusters: 2 × 0.5^G."""
    from lmra.stats import mean_ci

    two = mean_ci([0.5, 0.5])
    assert two.p_value == pytest.approx(0.5) and (two.low, two.high) == (0.5, 0.5)
    assert mean_ci([0.5] * 6).p_value == pytest.approx(2 * 0.5 ** 6)
    assert mean_ci([0.5] * 6, clusters=["a", "a", "b", "b", "c", "c"]).p_value == pytest.approx(0.25)  # 3 prompts
    assert mean_ci([0.0] * 4).p_value == 1.0


def test_a_wilson_interval_holds_its_estimate_exactly_at_0_and_1():
    """Break-it and fresh-user finding: statsmodels gives (2.8e-17, 0.299) for 0 of 9, so refusals.csv
    put a refusal rate of 0.0 below its own interval's low end (and 1 − 1e-16 above 9 of 9). Every
    count of every size up to 400: the interval holds p̂, in [0, 1], and ends at exactly 0 / 1 there."""
    from lmra.stats import clustered_wilson_ci, wilson_ci

    for n in range(1, 401):
        for k in (0, 1, n // 2, n - 1, n):
            lo, hi = wilson_ci(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0, (k, n, lo, hi)
        assert wilson_ci(0, n)[0] == 0.0 and wilson_ci(n, n)[1] == 1.0
    assert clustered_wilson_ci([0, 0, 0], [3, 2, 4])[0] == 0.0
    assert clustered_wilson_ci([3, 2, 4], [3, 2, 4])[1] == 1.0

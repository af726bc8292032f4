"""``lmra agreement``'s statistics on rare-event labels (statistics break-it, s38): the Fisher-z
interval of Pearson's r covered 51–61% at 95% when most pairs are 0 and a few ±1, and raw sign
agreement gave 0.925 to a judge that flagged nothing. Pearson's interval is a paired bootstrap
now, and sign agreement stands beside its all-zero baseline, Cohen's κ and the hit rate."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lmra.agreement import agreement


def _frames(h, lmra):
    ids = [f"p{i}" for i in range(len(h))]
    return pd.DataFrame({"pair_id": ids, "human": h}), pd.DataFrame({"pair_id": ids, "lmra": lmra})


def _labels(rng, n, rate=0.05):
    u = rng.random(n)
    return np.where(u < rate, 1.0, np.where(u < 1.3 * rate, -1.0, 0.0))


def _judge(rng, h):
    """Detects a stereotype with probability 0.6 (h ≈ 0.8), false alarms on 3% of the others."""
    out = rng.normal(0, 0.02, h.size)
    hit = (h != 0) & (rng.random(h.size) < 0.6)
    out[hit] = 0.8 * h[hit]
    fa = (h == 0) & (rng.random(h.size) < 0.03)
    out[fa] = 0.8 * rng.choice([-1, 1], fa.sum())
    return np.clip(out, -1, 1)


def test_kappa_and_hit_rate_by_hand_and_a_blind_judge_scores_zero():
    # signs: human [1, 1, 0, 0, 0, -1], LMRA [1, 0, 0, 0, 1, -1] → agreement 4/6
    h = np.array([1.0, 1.0, 0.0, 0.0, 0.0, -1.0])
    l = np.array([0.9, 0.05, 0.0, -0.02, 0.7, -0.8])
    res = agreement(*_frames(h, l), n_resamples=200)
    assert res["sign_agreement"] == pytest.approx(4 / 6) and res["sign_agreement_all_zero"] == pytest.approx(3 / 6)
    assert res["human_flagged"] == 3 and res["lmra_found"] == 2
    # κ by hand: p_o = 4/6; marginals human (−1, 0, 1) = (1, 3, 2)/6, LMRA (1, 3, 2)/6 → p_e = (1 + 9 + 4)/36
    p_e = 14 / 36
    assert res["cohen_kappa"] == pytest.approx((4 / 6 - p_e) / (1 - p_e))
    rng = np.random.default_rng(0)
    h = _labels(rng, 200)
    blind = agreement(*_frames(h, np.clip(rng.normal(0, 0.02, 200), -1, 1)), n_resamples=200)
    assert blind["sign_agreement"] > 0.85 and blind["sign_agreement"] == blind["sign_agreement_all_zero"]
    assert blind["cohen_kappa"] == pytest.approx(0.0) and blind["lmra_found"] == 0


def test_the_pearson_interval_covers_on_rare_event_labels():
    """The break-it's simulation: 5% of pairs +1 and 1.5% −1 by the humans; the judge finds 60% of
    them and false-alarms on 3%. True r from two million pairs; the interval's coverage at 200
    labelled pairs (Fisher-z: 61%)."""
    rng = np.random.default_rng(1)
    big = _labels(rng, 2_000_000)
    truth = float(np.corrcoef(big, _judge(rng, big))[0, 1])
    covered, reps = 0, 80
    for _ in range(reps):
        h = _labels(rng, 200)
        res = agreement(*_frames(h, _judge(rng, h)), n_resamples=1000, seed=int(rng.integers(1 << 30)))
        lo, hi = res["pearson_ci"]
        assert math.isfinite(lo) and lo <= res["pearson_r"] <= hi
        covered += lo <= truth <= hi
    assert covered >= 0.88 * reps, covered


def test_kappa_interval_is_at_the_callers_alpha_and_absent_for_a_one_sign_side():
    """statsmodels' kappa_low/kappa_upp are 95% whatever alpha; the interval is κ ± z_(1−α/2)·ASE
    at the caller's alpha. A side that gives every pair one sign makes κ 0 by construction: its
    asymptotic interval [0, 0] read as certainty (s38 known gap), so there is none, and the side is named."""
    from scipy.stats import norm
    from statsmodels.stats.inter_rater import cohens_kappa

    h = np.array([1.0, 1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 1.0, 0.0, 0.0])
    l = np.array([0.9, 0.05, 0.0, -0.02, 0.7, -0.8, 0.0, 0.8, 0.0, -0.6])
    table = np.array([[1, 0, 0], [1, 4, 1], [0, 1, 2]])  # rows human −1/0/1, columns LMRA −1/0/1
    ase = cohens_kappa(table).std_kappa
    for alpha in (0.05, 0.2):
        res = agreement(*_frames(h, l), n_resamples=200, alpha=alpha)
        z = norm.isf(alpha / 2)
        assert res["kappa_ci"] == pytest.approx([res["cohen_kappa"] - z * ase, res["cohen_kappa"] + z * ase])
        assert res["kappa_one_sign"] == ""
    blind = agreement(*_frames(h, np.zeros(h.size)), n_resamples=200)
    assert blind["cohen_kappa"] == pytest.approx(0.0) and all(math.isnan(x) for x in blind["kappa_ci"])
    assert blind["kappa_one_sign"] == "lmra"
    quiet = agreement(*_frames(np.zeros(h.size), l), n_resamples=200)
    assert all(math.isnan(x) for x in quiet["kappa_ci"]) and quiet["kappa_one_sign"] == "human"
    # perfect agreement on three pairs: ASE 0, no interval (it read [1, 1]); a small table's interval stays in [−1, 1]
    perfect = agreement(*_frames(np.array([1.0, 0.0, 1.0]), np.array([0.9, 0.0, 0.8])), n_resamples=200)
    assert perfect["cohen_kappa"] == pytest.approx(1.0) and all(math.isnan(x) for x in perfect["kappa_ci"])
    small = agreement(*_frames(np.array([1.0, 0.0, 1.0, 0.0, -1.0]), np.array([0.9, 0.0, 0.8, 0.7, -0.9])),
                      n_resamples=200)
    assert -1.0 <= small["kappa_ci"][0] <= small["cohen_kappa"] <= small["kappa_ci"][1] <= 1.0


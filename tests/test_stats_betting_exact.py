"""The betting interval's capital (lmra.stats._HedgedCapital) computes the plain formula of
Waudby-Smith & Ramdas (2024, §4–§5) with fewer array passes: it must give the same bits, so
that every interval, p-value and table is unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmra import stats
from lmra.stats import _BET_C, _BET_THETA, _HedgedCapital, betting_interval


def _plain_capital(x, lam, m, log_inv_alpha):
    """log K^±_n(m) − log(1/α), written as the formula reads (the reference)."""
    up = np.minimum(lam, _BET_C / m) if m > 0 else lam
    down = np.minimum(lam, _BET_C / (1 - m)) if m < 1 else lam
    with np.errstate(divide="ignore"):
        k_up = float(np.sum(np.log1p(up * (x - m)))) + math.log(_BET_THETA)
        k_down = float(np.sum(np.log1p(-down * (x - m)))) + math.log(1 - _BET_THETA)
    return float(np.logaddexp(k_up, k_down)) - log_inv_alpha


def _bets(x, alpha):
    n = x.size
    t = np.arange(1, n + 1)
    mu = (0.5 + np.cumsum(x)) / (t + 1)
    var = (0.25 + np.cumsum((x - mu) ** 2)) / (t + 1)
    return np.sqrt(2 * math.log(2 / alpha) / (n * np.concatenate(([0.25], var[:-1]))))


def _samples():
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 7, 8, 9, 17, 100, 129, 300, 1000, 2500):
        yield rng.random(n)  # continuous
        yield (rng.random(n) < 0.03).astype(float) * 0.5 + 0.5  # rare stereotypes: mostly ½
        yield np.full(n, 0.5)  # constant
        yield rng.beta(0.3, 0.3, n)  # mass near 0 and 1
        yield np.clip(0.5 + rng.normal(0, 0.02, n), 0, 1)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.2])
def test_capital_equals_the_plain_formula_bit_for_bit(alpha):
    lia = math.log(1 / alpha)
    ms = [0.0, 1.0, 0.5, 1e-300, 1 - 1e-16, 0.25, 0.75, 0.9, 0.1, 0.001, 0.999]
    for x in _samples():
        lam = _bets(x, alpha)
        capital = _HedgedCapital(x, lam, lia)
        for m in ms + list(np.random.default_rng(x.size).random(40)):
            got, want = capital(float(m)), _plain_capital(x, lam, float(m), lia)
            assert got == want or (math.isnan(got) and math.isnan(want)), (x.size, m, got, want)


def test_betting_interval_unchanged_against_the_plain_bisection(monkeypatch):
    """The whole interval with the reference capital swapped in: the same (low, high, p)."""
    results = [betting_interval(x, 0.05) for x in _samples()]

    class Plain:
        def __init__(self, x, lam, lia):
            self.x, self.lam, self.lia = x, lam, lia

        def __call__(self, m):
            return _plain_capital(self.x, self.lam, m, self.lia)

    monkeypatch.setattr(stats, "_HedgedCapital", Plain)
    assert [betting_interval(x, 0.05) for x in _samples()] == results

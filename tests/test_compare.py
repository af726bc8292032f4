"""Comparing runs across tasks (methodology §8; FPF Figs. 7, 8, 10): Pearson r and the
least-squares slope through the origin, checked against scipy/statsmodels and by hand."""

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.compare import compare_runs, compare_tables, pearson, slope_through_origin
from lmra.runfolder import load_run

# known data: y = 0.5·x + noise
X = np.array([0.010, 0.020, -0.005, 0.030, 0.015, 0.000, 0.025, -0.010])
Y = np.array([0.006, 0.009, -0.004, 0.016, 0.006, 0.001, 0.013, -0.004])


def test_slope_through_origin_against_statsmodels_and_by_hand():
    fit = slope_through_origin(X, Y)
    ref = sm.OLS(Y, X.reshape(-1, 1)).fit()
    assert fit.slope == pytest.approx(ref.params[0], rel=1e-12)
    lo, hi = ref.conf_int(0.05)[0]
    assert (fit.ci_low, fit.ci_high) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    # by hand: b = Σxy / Σx², se = sqrt(Σ(y − bx)² / (n − 1) / Σx²), t with n − 1 df
    b = (X @ Y) / (X @ X)
    se = math.sqrt(((Y - b * X) ** 2).sum() / (len(X) - 1) / (X @ X))
    t = stats.t.ppf(0.975, len(X) - 1)
    assert fit.slope == pytest.approx(b, rel=1e-12)
    assert fit.se == pytest.approx(se, rel=1e-9)
    assert fit.ci_low == pytest.approx(b - t * se, rel=1e-9) and fit.ci_high == pytest.approx(b + t * se, rel=1e-9)
    assert fit.n == 8
    # not the slope with an intercept
    assert fit.slope != pytest.approx(stats.linregress(X, Y).slope, rel=1e-3)


def test_pearson_against_scipy():
    r, p = pearson(X, Y)
    ref = stats.pearsonr(X, Y)
    assert r == pytest.approx(ref.statistic, rel=1e-12) and p == pytest.approx(ref.pvalue, rel=1e-12)
    assert r > 0.9
    assert all(math.isnan(v) for v in pearson([1, 2], [1, 3]))  # fewer than 3 points
    assert all(math.isnan(v) for v in pearson([1, 1, 1], [1, 2, 3]))  # constant
    assert math.isnan(slope_through_origin([0.0, 0.0], [1.0, 2.0]).slope)


def _table(values, tasks):
    return pd.DataFrame({"group_a": "female", "group_b": "male", "domain": "d", "task": tasks, "net_rating": values,
                         "ci_low": np.nan, "ci_high": np.nan, "n_pairs": 10})


def test_compare_tables_pairs_tasks_by_name():
    tasks = [f"t{i}" for i in range(len(X))]
    a = _table(X, tasks)
    b = _table(Y, tasks).iloc[::-1]  # order must not matter
    b = pd.concat([b, _table([0.5], ["only in b"])])
    cmp = compare_tables(a, b)
    assert len(cmp.pairs) == 8 and "only in b" not in set(cmp.pairs["task"])
    assert cmp.pairs.set_index("task").loc["t3", "h_b"] == pytest.approx(Y[3])
    assert cmp.fit.slope == pytest.approx((X @ Y) / (X @ X))
    assert cmp.pearson_r == pytest.approx(stats.pearsonr(X, Y).statistic)


def test_compare_two_simulated_runs_cli(tmp_path, lmra_cli, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    a = make_run(tmp_path, "20260101-000000-cmp", {"write a story": 0.1, "career advice": 0.4}, seed=1, n_prompts=80)
    b = make_run(tmp_path, "20260102-000000-cmp", {"write a story": 0.05, "career advice": 0.2}, seed=2,
                 n_prompts=80, judge_model="other")
    cmp = compare_runs(load_run(a), load_run(b))
    ha = load_run(a).per_task.set_index("task")["net_rating"]
    hb = load_run(b).per_task.set_index("task")["net_rating"]
    assert cmp.fit.slope == pytest.approx((ha @ hb) / (ha @ ha))
    assert any("different judges" in n for n in cmp.notes)
    assert lmra_cli(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"slope of B on A through the origin = {cmp.fit.slope:.3f}" in out
    assert "different judges" in out

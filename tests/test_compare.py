"""Comparing runs across tasks (methodology §8; FPF Figs. 7, 8, 10): Pearson r (raw and
disattenuated), the least-squares slope through the origin and the errors-in-variables
(York/Deming) slope with its bootstrap CI, checked against scipy/statsmodels, by hand and on
simulated noisy runs."""

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
    # the task left out is named (break-it finding: dropped silently; lmra check names it)
    assert cmp.only_in_b == [{"comparison": "female vs male", "domain": "d", "task": "only in b"}] and cmp.only_in_a == []
    assert any(n.startswith("left out: 1 task with a net rating in run B only: female vs male / d / only in b") for n in cmp.notes)


def test_compare_cli_names_the_tasks_measured_in_one_run_only(tmp_path, lmra_cli, capsys, monkeypatch):
    """Break-it finding: ``lmra compare`` of a run of 4 tasks and one of 5 said "4 tasks; Pearson r =
    …" and nothing of the fifth, console or --json; ``lmra check`` of the same runs named it."""
    import json

    monkeypatch.setenv("COLUMNS", "200")
    a = make_run(tmp_path, "20260101-000000-cmp", {"write a story": 0.1, "career advice": 0.4}, seed=1, n_prompts=20)
    b = make_run(tmp_path, "20260102-000000-cmp", {"write a story": 0.05, "career advice": 0.2}, seed=2,
                 n_prompts=20, task_names={"career advice": "write a poem"})
    assert lmra_cli(["compare", str(a), str(b)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "left out: 1 task with a net rating in run A only: female vs male / d / career advice" in out, out
    assert "left out: 1 task with a net rating in run B only: female vs male / d / write a poem" in out, out
    assert lmra_cli(["compare", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["task"] for t in doc["only_in_a"]] == ["career advice"]
    assert [t["task"] for t in doc["only_in_b"]] == ["write a poem"] and doc["n_tasks"] == 1


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
    assert cmp.eiv is not None and cmp.eiv.n == 2
    assert lmra_cli(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"least-squares slope of B on A through the origin = {cmp.fit.slope:.3f}" in out
    assert f"errors-in-variables slope of B on A through the origin = {cmp.eiv.slope:.3f}" in out
    assert "caveat: only 2 task(s)" in out  # fewer than 8 tasks
    assert "different judges" in out
    # each task's difference, and the command that tests it (fresh-user finding, s34)
    for task in ("write a story", "career advice"):
        row = next(line for line in out.splitlines() if task in line and "cmp" not in line)
        assert f"{hb[task] - ha[task]:+.4f}" in row or f"{hb[task] - ha[task]:.4f}" in row, row
    assert f"lmra check {b.name} --baseline {a.name}" in " ".join(out.split())


def test_compare_of_runs_sharing_no_task_says_so_and_exits_2(tmp_path, lmra_cli, capsys):
    """Break-it finding: two runs with no task in common printed an empty table, '0 tasks;
    Pearson r = —' and exited 0. Nothing compared is an input error naming both runs."""
    a = make_run(tmp_path, "20260101-000000-cmp", {"write a story": 0.1}, seed=1, n_prompts=10)
    b = make_run(tmp_path, "20260102-000000-cmp", {"career advice": 0.2}, seed=2, n_prompts=10)
    for extra in ([], ["--json"]):
        capsys.readouterr()
        assert lmra_cli(["compare", str(a), str(b), *extra]) == 2
        cap = capsys.readouterr()
        said = " ".join((cap.err + cap.out).split())
        assert "no task has a net rating in both runs" in said and "Traceback" not in said
        assert "20260101-000000-cmp" in said and "20260102-000000-cmp" in said


# -- errors-in-variables slope (issue 12, item 4) ---------------------------------------------
from lmra.compare import (disattenuated_r, eiv_slope, reliability,  # noqa: E402
                          york_slope_through_origin)


def _rare_event_scores(rng, rates, n):
    """(tasks, n) prompt scores: with probability = the task's rate a stereotyped pair
    (≈ 0.89), else ≈ N(0, 0.008); the generator of bench/bench_compare_slopes.py."""
    stereo = rng.random((len(rates), n)) < np.asarray(rates)[:, None]
    h = np.where(stereo, rng.normal(0.89, 0.03, stereo.shape), rng.normal(0.0, 0.008, stereo.shape))
    return np.clip(h, -1.0, 1.0)


def test_eiv_slope_recovers_known_slope_where_ols_is_attenuated():
    """200 tasks × 40 prompts, run A's stereotype rates 2–10%, run B's exactly 2× A's: the
    true slope is 2. Run A's task means are noisy (reliability ≈ 0.75), so least squares
    is pulled towards 0.

    Tolerances, from 300 seeds of this design (point estimates, no bootstrap): the OLS slope
    has mean 1.496 and SD 0.087 (largest 1.83), the EIV slope mean 1.994 and SD 0.120. So
    OLS < 1.75 (about 3 SD above its mean, 0.25 below the truth) and |EIV − 2| < 0.36 (3 SD)
    hold for ≥ 99.7% of seeds; this seed gives OLS 1.52 and EIV 2.03."""
    rng = np.random.default_rng(0)
    rates = rng.uniform(0.02, 0.10, 200)
    a, b = _rare_event_scores(rng, rates, 40), _rare_event_scores(rng, 2 * rates, 40)
    x, y = a.mean(axis=1), b.mean(axis=1)
    ols = slope_through_origin(x, y)
    assert ols.slope < 1.75
    assert not ols.ci_low <= 2.0 <= ols.ci_high  # the t-interval misses the true slope
    fit = eiv_slope(list(a), list(b), n_resamples=999)
    assert abs(fit.slope - 2.0) < 0.36
    assert fit.ci_low <= 2.0 <= fit.ci_high and fit.ci_method == "BCa" and fit.n == 200
    # the pooled per-prompt variances: ≈ 0.89² · mean p(1 − p) for p = 6% and 12%
    assert fit.var_a == pytest.approx(0.89 ** 2 * 0.06 * 0.94, rel=0.15)
    assert fit.var_b == pytest.approx(0.89 ** 2 * 0.12 * 0.88, rel=0.15)


def test_eiv_slope_by_hand_on_two_tasks():
    # Run A: task 1 scores (0.1, 0.3) → mean x1 = 0.2, sum of squares 0.01 + 0.01 = 0.02;
    #        task 2 scores (0.0, 0.2) → mean x2 = 0.1, sum of squares 0.02.
    #        pooled per-prompt variance s²_A = (0.02 + 0.02) / ((2 − 1) + (2 − 1)) = 0.02,
    #        so var(x_i) = 0.02 / 2 = 0.01 for both tasks.
    # Run B: task 1 (0.2, 0.4) → y1 = 0.3; task 2 (0.3, 0.5) → y2 = 0.4; s²_B = 0.02, var(y_i) = 0.01.
    # Equal variances: Deming with λ = var_y / var_x = 1. Sums: Sxx = 0.2² + 0.1² = 0.05,
    # Syy = 0.3² + 0.4² = 0.25, Sxy = 0.2·0.3 + 0.1·0.4 = 0.10.
    # Stationarity: Sxy·b² + (λ·Sxx − Syy)·b − λ·Sxy = 0 → 0.10 b² − 0.20 b − 0.10 = 0
    # → b² − 2b − 1 = 0 → b = 1 + √2 = 2.41421… (the other root, 1 − √2, is the maximum).
    # Least squares instead: Sxy / Sxx = 0.10 / 0.05 = 2.
    a = [np.array([0.1, 0.3]), np.array([0.0, 0.2])]
    b = [np.array([0.2, 0.4]), np.array([0.3, 0.5])]
    fit = eiv_slope(a, b, n_resamples=0)
    assert fit.slope == pytest.approx(1 + math.sqrt(2), rel=1e-12)
    assert fit.var_a == pytest.approx(0.02) and fit.var_b == pytest.approx(0.02)
    assert math.isnan(fit.ci_low) and fit.n == 2
    assert slope_through_origin([0.2, 0.1], [0.3, 0.4]).slope == pytest.approx(2.0)
    # the same through the general York function, and its objective is smallest there:
    # S(b) = Σ (y − b x)² / (0.01 + 0.01 b²)
    x, y, v = np.array([0.2, 0.1]), np.array([0.3, 0.4]), np.array([0.01, 0.01])
    b_hat = york_slope_through_origin(x, y, v, v)
    assert b_hat == pytest.approx(1 + math.sqrt(2), rel=1e-12)
    s = lambda bb: float((((y - bb * x) ** 2) / (v + bb * bb * v)).sum())  # noqa: E731
    assert all(s(b_hat) <= s(bb) for bb in np.linspace(-50, 50, 20001))
    # var_x = 0 is least squares; var_y = 0 the inverse regression Syy / Sxy = 2.5
    assert york_slope_through_origin(x, y, 0.0, v) == pytest.approx(2.0)
    assert york_slope_through_origin(x, y, v, 0.0) == pytest.approx(2.5)


def test_york_with_unequal_variances_is_the_global_minimum():
    """Variances not proportional between x and y (e.g. tasks with different prompt counts in
    the two runs): no closed form; the numeric solver must find the global minimum of S."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        t = int(rng.integers(2, 9))
        x = rng.normal(0, 1, t)
        y = rng.normal(1.5, 1) * x + rng.normal(0, 0.5, t)
        vx, vy = rng.uniform(0.01, 1, t), rng.uniform(0.01, 1, t)
        b = york_slope_through_origin(x, y, vx, vy)
        grid = np.tan(np.linspace(-np.pi / 2, np.pi / 2, 40001)[1:-1])
        s = (((y - grid[:, None] * x) ** 2) / (vy + grid[:, None] ** 2 * vx)).sum(axis=1)
        assert (((y - b * x) ** 2) / (vy + b * b * vx)).sum() <= s.min() * (1 + 1e-9)
    # batched: leading axes are separate fits
    xb = np.array([[0.2, 0.1], [0.2, 0.1]])
    yb = np.array([[0.3, 0.4], [0.4, 0.2]])
    out = york_slope_through_origin(xb, yb, 0.01, 0.01)
    assert out.shape == (2,) and out[0] == pytest.approx(1 + math.sqrt(2)) and out[1] == pytest.approx(2.0)


def test_eiv_bca_interval_matches_scipy():
    """lmra computes the BCa acceleration from a closed-form jackknife; on a small data set it
    must equal scipy.stats.bootstrap's BCa with the same resamples."""
    import warnings

    from lmra.compare import _eiv_statistic

    rng = np.random.default_rng(4)
    rates = rng.uniform(0.15, 0.35, 5)  # (run A's ratings clearly above 0: the slope is identified)
    a = list(_rare_event_scores(rng, rates, 12))
    b = list(_rare_event_scores(rng, 2 * rates, 12))
    a[0] = a[0][:7]  # unequal prompt counts: the numeric York path
    fit = eiv_slope(a, b, n_resamples=500, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = stats.bootstrap(a + b, _eiv_statistic(5), n_resamples=500, vectorized=True, paired=False,
                              method="BCa", rng=np.random.default_rng(9)).confidence_interval
    assert fit.ci_method == "BCa"
    assert (fit.ci_low, fit.ci_high) == (pytest.approx(ref.low, rel=1e-7), pytest.approx(ref.high, rel=1e-7))


def test_eiv_slope_edge_cases():
    one = [np.array([0.1, 0.2])]
    assert math.isnan(eiv_slope(one, one).slope)  # fewer than 2 tasks
    with pytest.raises(ValueError, match="at least 2"):
        eiv_slope([np.array([0.1]), np.array([0.1, 0.2])], [np.array([0.1, 0.2])] * 2)
    with pytest.raises(ValueError, match="tasks"):
        eiv_slope([np.array([0.1, 0.2])] * 2, [np.array([0.1, 0.2])] * 3)
    with pytest.raises(ValueError, match="non-finite"):
        eiv_slope([np.array([0.1, np.nan])] * 2, [np.array([0.1, 0.2])] * 2)
    # constant scores: no noise, so the slope is the exact ratio and the interval collapses
    a = [np.full(5, 0.1), np.full(5, 0.2)]
    b = [np.full(5, 0.2), np.full(5, 0.4)]
    fit = eiv_slope(a, b, n_resamples=200)
    assert fit.slope == pytest.approx(2.0) and fit.ci_low == pytest.approx(2.0) and fit.ci_high == pytest.approx(2.0)
    # run A never stereotyped (all 0, exact): the slope is undefined; run B never: it is 0
    zero = [np.zeros(5), np.zeros(5)]
    assert math.isnan(eiv_slope(zero, b, n_resamples=0).slope)
    noisy = [np.array([0.0, 0.9, 0.0, 0.0]), np.array([0.9, 0.9, 0.0, 0.0])]
    assert eiv_slope(noisy, zero, n_resamples=0).slope == 0.0


def test_disattenuated_r_by_hand():
    # Run A's task means 0.1, 0.2, 0.3, 0.4: sample variance (ddof = 1) = 0.05 / 3 = 1/60;
    # each mean's sampling variance 0.005 → reliability = 1 − 0.005 / (1/60) = 1 − 0.3 = 0.7.
    assert reliability([0.1, 0.2, 0.3, 0.4], [0.005] * 4) == pytest.approx(0.7)
    # Run B's means 0.2, 0.4, 0.6, 0.8: variance 4/60; sampling variance 1/30 → 1 − 0.5 = 0.5.
    assert reliability([0.2, 0.4, 0.6, 0.8], [1 / 30] * 4) == pytest.approx(0.5)
    # Spearman: r / √(0.7 · 0.5) = 0.5 / √0.35 = 0.5 / 0.591608 = 0.845154
    assert disattenuated_r(0.5, 0.7, 0.5) == pytest.approx(0.845154, abs=1e-6)
    # 1.52 is impossible: returned as computed, and withheld as "not estimable" by disattenuated_r_estimate
    assert disattenuated_r(0.9, 0.7, 0.5) == pytest.approx(0.9 / math.sqrt(0.35))
    assert math.isnan(disattenuated_r(0.5, 0.0, 0.5))  # all noise: nothing to correct
    # bounded: more noise than spread → 0; too few tasks or no spread → nan
    assert reliability([0.1, 0.2, 0.3], [1.0] * 3) == 0.0
    assert math.isnan(reliability([0.1, 0.2], [0.0, 0.0]))
    assert math.isnan(reliability([0.1, 0.1, 0.1], [0.0] * 3))
    # noise variance equal to the observed variance up to float rounding: 0, not 2.2e-16, so that
    # no disattenuated r is computed (fresh-user finding: 1.3e-15 printed r = −1.000 from noise)
    m = np.array([0.9, -0.46, -1.31, 0.66, 0.96])
    o = float(np.var(m, ddof=1))
    v = np.array([0.9 * o, 1.1 * o, o, o, o])  # mean o: reliability 0 exactly
    assert 0.0 < 1.0 - float(np.mean(v)) / o < 1e-15  # what float arithmetic gives
    assert reliability(m, v) == 0.0 and math.isnan(disattenuated_r(-0.5, 0.14, reliability(m, v)))


def _prompt_frame(scores, tasks):
    rows = [{"comparison": "female vs male", "domain": "d", "task": t, "prompt_id": f"{t}-{j}", "h": h, "n_pairs": 1}
            for t, s in zip(tasks, scores) for j, h in enumerate(s)]
    return pd.DataFrame(rows)


def test_compare_tables_with_prompt_scores_reports_eiv_beside_ols():
    rng = np.random.default_rng(5)
    rates = rng.uniform(0.05, 0.25, 10)
    a, b = _rare_event_scores(rng, rates, 30), _rare_event_scores(rng, 2 * rates, 30)
    tasks = [f"t{i}" for i in range(10)]
    ta, tb = _table(a.mean(axis=1), tasks), _table(b.mean(axis=1), tasks)
    without = compare_tables(ta, tb)
    cmp = compare_tables(ta, tb, prompts_a=_prompt_frame(a, tasks), prompts_b=_prompt_frame(b, tasks),
                         n_resamples=999)
    assert without.eiv is None and math.isnan(without.pearson_r_disattenuated)
    assert cmp.fit == without.fit and cmp.ols is cmp.fit  # OLS unchanged, kept beside
    assert cmp.eiv.slope == pytest.approx(eiv_slope(list(a), list(b), n_resamples=0).slope)
    assert cmp.eiv.slope > cmp.fit.slope  # the correction undoes the attenuation
    # reliabilities and the disattenuated r, recomputed here
    va = cmp.eiv.var_a / 30
    rel_a = 1 - va / np.var(a.mean(axis=1), ddof=1)
    assert cmp.reliability_a == pytest.approx(min(1.0, max(0.0, rel_a)))
    assert cmp.pairs["var_h_a"].to_numpy() == pytest.approx(np.full(10, va))
    r = stats.pearsonr(a.mean(axis=1), b.mean(axis=1)).statistic
    assert cmp.pearson_r_disattenuated == pytest.approx(min(1.0, r / math.sqrt(cmp.reliability_a * cmp.reliability_b)))
    assert cmp.r_caveat is None  # 10 tasks
    lines = "\n".join(cmp.summary_lines())
    assert f"errors-in-variables slope of B on A through the origin = {cmp.eiv.slope:.3f}" in lines
    assert f"least-squares slope of B on A through the origin = {cmp.fit.slope:.3f}" in lines
    assert "disattenuated" in lines
    # a task with a single scored prompt is left out of the EIV slope, with a note
    pa = _prompt_frame(a, tasks)
    pa = pa[~((pa["task"] == "t0") & (pa["prompt_id"] != "t0-0"))]
    cmp1 = compare_tables(ta, tb, prompts_a=pa, prompts_b=_prompt_frame(b, tasks), n_resamples=0)
    assert cmp1.eiv.n == 9 and any("t0" in n and "left out" in n for n in cmp1.notes)
    # fewer than 8 tasks: the caveat on r
    few = compare_tables(ta.iloc[:5], tb.iloc[:5])
    assert few.r_caveat is not None and "only 5 tasks" in few.r_caveat and "95% CI of r" in few.r_caveat


def test_no_disattenuated_r_when_run_as_task_ratings_are_indistinguishable_from_zero():
    """Fresh-user finding: beside "not identified — A's task ratings are indistinguishable from
    0", compare printed "disattenuated r = −1.000": A's small reliability (itself a noise
    estimate, 0.22 here) pushed r / √(ρ_A·ρ_B) past −1. No correction is shown then."""
    rng = np.random.default_rng(1)
    tasks = [f"t{i}" for i in range(8)]
    sign = rng.choice([-1, 1], size=(8, 20))  # an unbiased chatbot A: rare stereotypes either way
    a = _rare_event_scores(rng, np.full(8, 0.05), 20) * sign
    b = _rare_event_scores(rng, rng.uniform(0.05, 0.4, 8), 20)
    cmp = compare_tables(_table(a.mean(axis=1), tasks), _table(b.mean(axis=1), tasks),
                         prompts_a=_prompt_frame(a, tasks), prompts_b=_prompt_frame(b, tasks), n_resamples=0)
    assert not cmp.eiv.identified and 0.1 < cmp.reliability_a < 0.3
    r = stats.pearsonr(a.mean(axis=1), b.mean(axis=1)).statistic
    assert r / math.sqrt(cmp.reliability_a * cmp.reliability_b) < -1  # what was clipped to −1.000
    assert math.isnan(cmp.pearson_r_disattenuated)
    lines = "\n".join(cmp.summary_lines())
    assert "no disattenuated r" in lines and "A's task ratings are indistinguishable from 0" in lines
    # fresh-user finding: the least-squares line's tight interval stood under "every slope fits", unqualified
    [ls] = [ln for ln in cmp.summary_lines() if ln.startswith("least-squares slope")]
    assert ls.endswith("this interval is no evidence of a slope: it takes noise in A as exact)"), ls


def test_comparison_in_report_shows_both_slopes():
    from lmra.report.html import _comparison_context

    rng = np.random.default_rng(6)
    rates = rng.uniform(0.05, 0.25, 6)
    a, b = _rare_event_scores(rng, rates, 20), _rare_event_scores(rng, 2 * rates, 20)
    tasks = [f"t{i}" for i in range(6)]
    cmp = compare_tables(_table(a.mean(axis=1), tasks), _table(b.mean(axis=1), tasks),
                         prompts_a=_prompt_frame(a, tasks), prompts_b=_prompt_frame(b, tasks), n_resamples=199)
    ctx = _comparison_context(cmp)
    assert ctx["eiv"]["slope"] == f"{cmp.eiv.slope:.3f}" and ctx["slope"] == cmp.fit.slope
    assert "only 6 tasks" in ctx["r_caveat"]
    assert "errors-in-variables slope" in ctx["svg"] and "least-squares slope" in ctx["svg"]


def test_slope_identified_by_hand():
    """W = Σ x² / var_x, χ² with T = 2 degrees of freedom, whose survival function is e^(−W/2)."""
    from lmra.compare import slope_identified

    ok, p = slope_identified([0.1, 0.2], [0.01, 0.01], 0.05)  # W = 1 + 4 = 5 → p = e^−2.5 = 0.0821
    assert not ok and p == pytest.approx(math.exp(-2.5))
    ok, p = slope_identified([0.3, 0.2], [0.01, 0.01], 0.05)  # W = 9 + 4 = 13 → p = e^−6.5 = 0.0015
    assert ok and p == pytest.approx(math.exp(-6.5))
    assert slope_identified([0.0, 0.1], [0.0, 0.0], 0.05) == (True, 0.0)  # an exact non-zero mean
    assert slope_identified([0.0, 0.0], [0.0, 0.0], 0.05) == (False, 1.0)  # exactly 0: nothing to divide by


def test_eiv_interval_of_two_null_nights_is_unbounded_and_never_excludes_1():
    """Break-it finding: two nights of a chatbot with no bias (task ratings symmetric noise
    around 0) gave finite EIV intervals excluding 1 ("18.86 [18.79, 7193.47]") in 4 of 24
    pairs. Slopes of B on A are identified only when A's task ratings differ from 0 (Fieller's
    condition): under the null the test rejects in about alpha of the nights, so the interval
    excludes 1 at most that often. 60 simulated pairs of nights, 6 tasks × 25 prompts, each
    prompt score ±0.89 with probability 5% each (a judge reading noise both ways)."""
    rng = np.random.default_rng(11)

    def night():
        u = rng.random((6, 25))
        return list(np.where(u < 0.05, 0.89, np.where(u < 0.10, -0.89, 0.0)) + rng.normal(0, 0.008, (6, 25)))

    excluding = unbounded = 0
    for _ in range(60):
        fit = eiv_slope(night(), night(), n_resamples=199)
        excluding += not fit.ci_low <= 1 <= fit.ci_high
        unbounded += not fit.identified and math.isinf(fit.ci_low) and math.isinf(fit.ci_high)
    # identified under the null with probability alpha = 0.05: P(≥ 10 of 60) ≈ 0.002
    assert unbounded >= 50
    assert excluding <= 9


def test_eiv_interval_stays_bounded_when_run_a_has_a_clear_signal():
    rng = np.random.default_rng(5)
    rates = rng.uniform(0.10, 0.30, 6)
    fit = eiv_slope(list(_rare_event_scores(rng, rates, 30)), list(_rare_event_scores(rng, 2 * rates, 30)),
                    n_resamples=499)
    assert fit.identified and fit.a_zero_p < 1e-6
    assert math.isfinite(fit.ci_low) and math.isfinite(fit.ci_high) and fit.ci_low <= 2 <= fit.ci_high


def test_a_slope_that_is_not_identified_is_worded_without_a_missing_estimate_or_a_too_narrow_note():
    """Fresh-user finding: "… every slope fits: CI [−∞, ∞] (the estimate — means nothing; 3 tasks)",
    then "run A's prompt scores do not vary within any task: … the errors-in-variables interval is
    too narrow" right after the unbounded interval. A run A with no stereotype anywhere (all
    scores 0: no variance, ratings all 0) gives neither garble."""
    rng = np.random.default_rng(3)
    tasks = [f"t{i}" for i in range(4)]
    a = np.zeros((4, 10))
    b = _rare_event_scores(rng, rng.uniform(0.1, 0.4, 4), 10)
    cmp = compare_tables(_table(a.mean(axis=1), tasks), _table(b.mean(axis=1), tasks),
                         prompts_a=_prompt_frame(a, tasks), prompts_b=_prompt_frame(b, tasks), n_resamples=0)
    assert not cmp.eiv.identified
    lines = " ".join(cmp.summary_lines() + list(cmp.notes))
    assert "not identified" in lines and "the estimate — means nothing" not in lines
    assert "too narrow" not in lines


def test_compare_of_a_same_seed_replay_says_the_runs_share_their_answers(tmp_path, lmra_cli, capsys, monkeypatch):
    """Fresh-user finding: `lmra compare` of a night and its same-seed re-run (every chatbot answer
    replayed from the call cache) showed "Pearson r = 1.000 (p = 0)" with no word that the two
    runs share their answers; `lmra check` says it. A note now does (in --json too), naming the
    replayed run, and an underflowed p-value reads "< 1e-300"; two nights of their own seeds get
    no such note."""
    import json
    import shutil

    from lmra.compare import _pv

    monkeypatch.setenv("COLUMNS", "250")
    rates = {"write a story": 0.1, "career advice": 0.4}
    a = make_run(tmp_path, "20260101-000000-cmp", rates, seed=1, n_prompts=40)
    shutil.copy(tmp_path / "cache-20260101-000000-cmp.sqlite", tmp_path / "cache-20260102-000000-cmp.sqlite")
    b = make_run(tmp_path, "20260102-000000-cmp", rates, seed=1, n_prompts=40)  # all replayed
    c = make_run(tmp_path, "20260103-000000-cmp", rates, seed=3, n_prompts=40)
    notes = compare_runs(load_run(a), load_run(b)).notes
    assert [n for n in notes if "made no fresh chatbot call" in n] == [
        "run B (20260102-000000-cmp) made no fresh chatbot call and drew with the same seed as the other run: the two "
        "runs share their chatbot answers (replayed from the call cache), so r and the slope compare the same answers "
        "rated again (the LMRA's reproducibility), not two nights of the chatbot; give each night its own seed "
        "(--seed, docs/nightly.md)"]
    assert any(n.startswith("run A (20260102-000000-cmp) made no fresh") for n in compare_runs(load_run(b), load_run(a)).notes)
    assert not any("made no fresh chatbot call" in n for n in compare_runs(load_run(a), load_run(c)).notes)
    assert lmra_cli(["compare", str(a), str(b)]) == 0
    assert "note: run B (20260102-000000-cmp) made no fresh chatbot call" in " ".join(capsys.readouterr().out.split())
    assert lmra_cli(["compare", str(a), str(b), "--json"]) == 0
    assert any("made no fresh chatbot call" in n for n in json.loads(capsys.readouterr().out)["notes"])
    assert (_pv(0.0), _pv(0.0123), _pv(float("nan"))) == ("< 1e-300", "0.0123", "—")


def test_compare_notes_tasks_whose_scores_are_identical_in_both_runs():
    """Break-it finding: run C = run A's 4 tasks (replayed from A's cache, same seed) + one new task; the 4
    compared tasks gave r = 1.000 exactly and no note, because C made fresh calls (for its fifth task) and
    the replay note needs a whole-run replay. Identical per-prompt scores on every compared task are said."""
    from types import SimpleNamespace

    from lmra.compare import _identical_scores_notes

    def scores(tasks, shift=0.0):
        return pd.DataFrame([{"comparison": "female vs male", "domain": "d", "task": t, "prompt_id": f"{t}-{i}",
                              "h": (i % 3 - 1) * 0.5 + shift} for t in tasks for i in range(6)])

    a = SimpleNamespace(prompt_scores=scores(["t1", "t2", "t3", "t4"]))
    c = SimpleNamespace(prompt_scores=scores(["t1", "t2", "t3", "t4", "t5"]))
    (note,) = _identical_scores_notes(a, c, None)
    assert note.startswith("the 4 tasks both runs measured have the same per-prompt scores in both")
    other = SimpleNamespace(prompt_scores=scores(["t1", "t2", "t3", "t4"], shift=0.25))  # another night
    assert _identical_scores_notes(a, other, None) == []
    # break-it round 3: equal scores that prove nothing — every h = 0 (a benign chatbot), or another seed
    zeros = pd.DataFrame([{"comparison": "female vs male", "domain": "d", "task": "t1", "prompt_id": f"p{i}", "h": 0.0}
                          for i in range(6)])
    assert _identical_scores_notes(SimpleNamespace(prompt_scores=zeros), SimpleNamespace(prompt_scores=zeros), None) == []
    seeded = [SimpleNamespace(prompt_scores=scores(["t1"]), manifest={"seed": s}) for s in (1, 2)]
    assert _identical_scores_notes(*seeded, None) == []


def test_an_undefined_pearson_r_says_why():
    """Fresh-user finding (s34): comparing a night against an all-zero one printed "Pearson r = —
    (p = —)" with no word on why."""
    tasks = [f"t{i}" for i in range(len(X))]
    cmp = compare_tables(_table([0.0] * len(X), tasks), _table(Y, tasks))
    assert math.isnan(cmp.pearson_r)
    line = cmp.summary_lines()[0]
    assert line.startswith(f"{len(X)} tasks; Pearson r = — (not defined: one run's task net ratings are all the same")
    assert "(p = —)" not in line
    assert "Pearson r = —" not in compare_tables(_table(X, tasks), _table(Y, tasks)).summary_lines()[0]


def test_the_disattenuated_r_is_withheld_when_noisy_and_its_interval_covers_the_truth():
    """Statistics break-it (s38): at nightly sizes (8 tasks × 40 prompts, reliabilities 0.1–0.3)
    ``lmra compare`` printed "disattenuated r = ±1.000" with no interval for 41% of unrelated task
    profiles (18% +1, 23% −1). Below a reliability of 0.5 it is now withheld, saying why; above,
    it comes with a bootstrap interval — the basic interval about the bootstrap world's own r (break-it
    round 2: a percentile interval lay below the estimate, 51–75% coverage) — whose coverage of the
    true r of the task rates is checked here on simulated runs whose tasks truly differ (reliability
    ≈ 0.8; 91% of 148 in a longer run)."""
    from lmra.compare import MIN_RELIABILITY, disattenuated_r_estimate

    rng = np.random.default_rng(38)
    # nightly sizes, unrelated profiles of similar rates: low reliability → withheld
    printed = 0
    for _ in range(40):
        a = _rare_event_scores(rng, rng.uniform(0.02, 0.08, 8), 40)
        b = _rare_event_scores(rng, rng.uniform(0.02, 0.08, 8), 40)
        est = disattenuated_r_estimate(list(a), list(b), n_resamples=0)
        printed += math.isfinite(est.r)
        assert math.isfinite(est.r) or est.withheld
    assert printed <= 4  # (all but the rare draw with both reliabilities ≥ 0.5)
    # tasks that truly differ (rates 2–40%, 60 prompts): a value with an interval that covers the true r
    covered, used, n = 0, 0, 60
    for _ in range(n):
        ra = rng.uniform(0.02, 0.40, 12)
        rb = np.clip(ra + rng.normal(0, 0.08, 12), 0.01, 0.6)  # related, not perfectly
        truth = np.corrcoef(ra, rb)[0, 1]  # the r of the tasks' true rates
        a, b = _rare_event_scores(rng, ra, 60), _rare_event_scores(rng, rb, 60)
        est = disattenuated_r_estimate(list(a), list(b), n_resamples=1000, seed=1)
        if not math.isfinite(est.r):  # (a draw whose tasks' rates happen to lie close: withheld, said)
            assert est.withheld
            continue
        assert est.ci_low <= est.ci_high, est
        used += 1
        covered += est.ci_low <= truth <= est.ci_high
    assert used >= 0.9 * n and covered >= 0.85 * used, (used, covered)
    assert MIN_RELIABILITY == 0.5
    # through compare_tables and the console line: withheld, with why
    tasks = [f"t{i}" for i in range(8)]
    a = _rare_event_scores(rng, np.full(8, 0.05), 40)
    b = _rare_event_scores(rng, np.full(8, 0.05), 40)
    cmp = compare_tables(_table(a.mean(axis=1), tasks), _table(b.mean(axis=1), tasks),
                         prompts_a=_prompt_frame(a, tasks), prompts_b=_prompt_frame(b, tasks), n_resamples=199)
    line = cmp.summary_lines()[0]
    assert math.isnan(cmp.pearson_r_disattenuated) and "no disattenuated r: " in line
    assert "±1.000" not in line and "= 1.000" not in line and "= -1.000" not in line


def _judged_run(tmp_path, run_id, *, combiner, position_logit, seed, n_prompts=200):
    """One audit of the same chatbot (TaskTarget) with a position-biased LMRA under ``combiner``
    (prompts from a file of ``n_prompts`` rows)."""
    from doubles import ScriptedJudge
    from lmra import Audit
    from lmra.config import AuditConfig
    from monitor_helpers import TaskTarget, phrase_verdict, write_inputs

    names, prompts = write_inputs(tmp_path / f"inputs-{n_prompts}", n_prompts)
    cfg = AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / f"cache-{run_id}.sqlite"), concurrency=16,
        judge_check={"enabled": False}, judge={"combiner": combiner}))
    def soft(r1, r2):  # probability left on every option: the position logit can be estimated
        hard = phrase_verdict(r1, r2)
        return {o: 0.1 + 0.7 * hard.get(o, 0.0) for o in ("A", "B", "C")}

    judge = ScriptedJudge(soft, position_logit=position_logit)
    run_dir = tmp_path / "reports" / run_id
    Audit(cfg, target=TaskTarget({"write a story": 0.2, "career advice": 0.4}), judge=judge, run_dir=run_dir).run()
    return load_run(run_dir)


def test_compare_notes_runs_under_different_combiners_and_a_moved_position_preference(tmp_path):
    """Statistics break-it (s42): on night B the LMRA lost its log-probabilities, so A was scored under
    'min' and B under 'mean'; 'lmra compare' gave a slope of 0.74 — B about 25% less biased — with no
    note, while 'lmra check' refuses that pair as not comparable. A moved first-position preference
    (b̂ 1.3 → 2.8) was not noted either."""
    a = _judged_run(tmp_path, "20260101-000000-nightly", combiner="min", position_logit=0.0, seed=1)
    b = _judged_run(tmp_path, "20260102-000000-nightly", combiner="mean", position_logit=0.0, seed=2)
    notes = compare_runs(a, b).notes
    assert any(n.startswith("different order combiners (A: min, B: mean)") for n in notes), notes
    c = _judged_run(tmp_path, "20260103-000000-nightly", combiner="min", position_logit=2.5, seed=3)
    notes = compare_runs(a, c).notes
    assert not any("different order combiners" in n for n in notes)
    assert any("position logit" in n and "from A to B" in n for n in notes), notes
    # the control: the same LMRA and combiner on another night says neither
    d = _judged_run(tmp_path, "20260104-000000-nightly", combiner="min", position_logit=0.0, seed=4)
    assert not any("combiners" in n or "position logit" in n for n in compare_runs(a, d).notes)


def test_compare_notes_another_audit_design(tmp_path):
    """Known gap (s43): 'lmra check' warned that the audit design differed (here the prompt file's
    content), 'lmra compare' of the same two runs said nothing, so a slope across a changed prompt set
    or name draw read as the chatbot's change. The same design on another night says nothing."""
    a = _judged_run(tmp_path, "20260101-000000-nightly", combiner="min", position_logit=0.0, seed=1)
    b = _judged_run(tmp_path, "20260102-000000-nightly", combiner="min", position_logit=0.0, seed=2, n_prompts=120)
    notes = compare_runs(a, b).notes
    design = [n for n in notes if n.startswith("the audit design differs: ")]
    assert len(design) == 1 and "prompts (" in design[0] and design[0].endswith("(A → B)"), notes
    d = _judged_run(tmp_path, "20260104-000000-nightly", combiner="min", position_logit=0.0, seed=4)
    assert not any("design" in n for n in compare_runs(a, d).notes)


def test_a_disattenuated_interval_among_undefined_resamples_is_unbounded_without_a_numpy_warning():
    """Methodology check (s44): two runs with exactly proportional task ratings (4 tasks × 10 prompts,
    2/4/6/8 stereotyped of 10 in both) gave resamples with reliability ≤ 0 (±∞); numpy interpolated
    ∞ − ∞ and 'lmra compare' printed "warning: invalid value encountered in subtract" with no interval.
    The interval is [−1, 1] now (unbounded, capped), with no warning."""
    import warnings

    from lmra.compare import disattenuated_r_estimate

    def run(h):
        return [np.array([h] * k + [0.0] * (10 - k)) for k in (2, 4, 6, 8)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = disattenuated_r_estimate(run(0.7044), run(0.5803), n_resamples=999, seed=1)
    assert res.r == 1.0 and (res.ci_low, res.ci_high) == (-1.0, 1.0), res
    # and its console line says what such an interval means (fresh-user finding, s44: "r = 1.000 [-1.000,
    # 1.000]" read as a confident 1)
    tasks = ["t1", "t2", "t3", "t4"]
    a, b = run(0.7044), run(0.5803)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cmp = compare_tables(_table([s.mean() for s in a], tasks), _table([s.mean() for s in b], tasks),
                             prompts_a=_prompt_frame(a, tasks), prompts_b=_prompt_frame(b, tasks), n_resamples=999)
    line = " ".join(cmp.summary_lines())
    assert "r = 1.000 [-1.000, 1.000] (95% bootstrap interval: all of [−1, 1] — the noise leaves the correlation " \
           "undetermined" in line, line

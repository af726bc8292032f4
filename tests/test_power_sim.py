"""Issue 12: planning for rare-event pair scores, the two-run planner on the input that crashed,
and the nightly check's minimum detectable rise — known answers computed by hand or exactly.

Known answers used here:

* t-test on a two-point sample (each prompt scores 0 or s, noise-free): with k stereotyped
  prompts of n, t = sqrt(k (n − 1) / (n − k)) whatever s, so the audit's two-sided t-test
  rejects exactly when k ≥ k*(n) and its power is a binomial tail (k = n: zero variance,
  mean ≠ 0, p = 0 by ``mean_ci``'s convention; k = 0: p = 1).
* the nightly check on a two-point sample with margin 0 is Fisher's exact test on the
  stereotyped counts: with 10 + 10 prompts and none stereotyped at baseline, the permutation
  p-value of k stereotyped prompts tonight is C(10, k) / C(20, k) = 0.105 (k = 3), 0.043
  (k = 4), so at α = 0.05 it rejects iff k ≥ 4.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as st
from scipy.optimize import brentq

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.errors import LmraInputError
from lmra.power import (PairScoreModel, _normal_n, _split_tables, betting_pvalues, minimum_detectable_rise, plan,
                        permutation_pvalues, prompts_needed, prompts_needed_sim, regression_power, t_pvalues)
from lmra.stats import betting_interval, bounded_mean_ci, mean_ci


def two_point(n: int, rate: float, s: float = 0.9) -> np.ndarray:
    """A pilot of n prompts, exactly round(n·rate) of them stereotyped (score s), the rest 0."""
    k = int(round(n * rate))
    return np.array([s] * k + [0.0] * (n - k))


def exact_t_power(n: int, pi: float) -> float:
    """Power of the audit's two-sided t-test (α = 0.05) on n two-point prompts at stereotype rate pi."""
    k = np.arange(n + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.sqrt(k * (n - 1) / (n - k))
    reject = (t > st.t.isf(0.025, n - 1)) | (k == n)
    reject[0] = False
    return float(st.binom.pmf(k, n, pi)[reject].sum())


def test_the_vectorised_tests_are_the_audits_tests():
    rng = np.random.default_rng(0)
    h = np.where(rng.random((50, 12)) < 0.1, rng.normal(0.89, 0.03, (50, 12)), rng.normal(0, 0.008, (50, 12)))
    h = np.clip(h, -1, 1)
    ref_bet = [betting_interval((h[:, j] + 1) / 2, 0.05)[2] for j in range(12)]
    np.testing.assert_allclose(betting_pvalues(h, 0.05), ref_bet, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(t_pvalues(h), [mean_ci(h[:, j]).p_value for j in range(12)], rtol=1e-9, atol=1e-12)
    # zero variance: mean_ci's convention
    assert list(t_pvalues(np.zeros((5, 1)))) == [1.0] and list(t_pvalues(np.full((5, 1), 0.5))) == [0.0]
    # permutation p-values: exact for two constant runs (ties count as extreme): 1/C(4, 2) < p
    p = permutation_pvalues(np.ones((3, 1)), np.zeros((3, 1)), 0.0, 999, seed=1)
    assert p[0] == pytest.approx(1 / 20, abs=0.03)


def test_known_answer_planner_hits_the_power_where_the_normal_formula_overshoots():
    # two-point pilot: 10% of prompts score 0.9; detect H = 0.09 (a 10% stereotype rate) with the t-test
    model = PairScoreModel.from_scores(two_point(400, 0.10))
    sp = prompts_needed_sim(model, 0.09, interval="t", power=0.8, sims=1000, seed=0)
    exact = exact_t_power(sp.n, 0.10)
    assert abs(exact - 0.8) <= 0.05, (sp.n, exact)
    assert abs(sp.estimate.power - exact) <= 4 * sp.estimate.se + 0.01  # the simulation estimates the exact power
    # the normal formula with the mixture's SD plans 73 prompts, whose exact power is 0.94
    normal_n = prompts_needed(0.09, 0.9 * math.sqrt(0.1 * 0.9))
    assert normal_n == 73 and exact_t_power(normal_n, 0.10) > 0.8 + 0.05 and sp.n < normal_n
    first = next(n for n in range(2, 200) if exact_t_power(n, 0.10) >= 0.8)  # 54
    assert abs(sp.n - first) <= 6


def test_betting_plan_reaches_its_power_with_the_real_interval():
    # the audit's default test is the betting interval, which needs more prompts than the normal formula says
    model = PairScoreModel.from_scores(two_point(400, 0.15, s=0.9))
    sp = prompts_needed_sim(model, 0.9 * 0.15, interval="betting", power=0.8, sims=600, seed=1)
    rng = np.random.default_rng(2)
    reps = 200
    hits = sum(bounded_mean_ci(np.where(rng.random(sp.n) < 0.15, 0.9, 0.0)).p_value <= 0.05 for _ in range(reps))
    assert abs(hits / reps - 0.8) <= 0.09, (sp.n, hits / reps)  # 3 MC SE of 200 replicates
    assert sp.n > _normal_n(0.135, 0.9 * math.sqrt(0.15 * 0.85), alpha=0.05, power=0.8, design="one-sample",
                            alternative=None)


def test_two_run_planner_on_the_crashing_input(tmp_path, lmra_cli, capsys):
    # δ/sd = 6.25: statsmodels' solver returns NaN; the plan is bounded and uses the alternative's SD
    n = prompts_needed(0.05, 0.008, design="two-run")
    assert n == 2  # equal SDs: an effect of 6 SDs needs the minimum
    df = plan(0.05, sd=0.008, design="two-run")
    assert 2 <= df.loc[0, "prompts_needed"] < 10_000_000 and df.loc[0, "method"] == "normal"
    assert df.loc[0, "prompts_needed"] > 50  # sd under the alternative sqrt(0.008² + 0.89·0.05) = 0.211
    assert lmra_cli(["plan", "--design", "two-run", "--sd", "0.008", "--rate", "0.05"]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "normal approximation" in out.err  # (a warning: stderr)
    # the same night as a pilot: an unbiased chatbot, no stereotyped prompt (scores N(0, 0.008))
    pilot = np.clip(np.random.default_rng(3).normal(0, 0.008, 320), -1, 1)
    sp = prompts_needed_sim(PairScoreModel.from_scores(pilot), 0.0712, design="two-run", tasks=8, sims=400)
    assert sp.n is not None and 60 <= sp.n <= 200 and sp.target_rate == pytest.approx(0.08, abs=0.002)
    assert "no stereotyped prompt" in sp.notes[0] and "plan is for the rate being detected" in sp.notes[0]
    # a rise no n up to the bound can detect: a plan that says so, not an error
    far = prompts_needed_sim(PairScoreModel.from_scores(pilot), 0.0712, design="two-run", tasks=8, sims=200,
                             max_n=10)
    assert far.n is None and "more than 10" in far.notes[-1]
    with pytest.raises(LmraInputError, match="margin"):
        prompts_needed_sim(PairScoreModel.from_scores(pilot), 0.01, design="two-run", margin=0.02)


def test_two_run_planner_hits_the_exact_power_of_the_check():
    # two-point pilot at 10%; detect a rise to 40% (δ = 0.27 with s = 0.9) with the permutation check
    model = PairScoreModel.from_scores(two_point(300, 0.10))
    sp = prompts_needed_sim(model, 0.27, design="two-run", tasks=2, power=0.8, sims=600, seed=0)
    assert sp.target_rate == pytest.approx(0.40)
    exact = regression_power(sp.n, sp.n, 0.10, 0.40, alpha=0.05 / 2, score=0.9, randomized=False)
    assert abs(exact - 0.8) <= 0.05, (sp.n, exact)
    below = regression_power(sp.n - 3, sp.n - 3, 0.10, 0.40, alpha=0.025, score=0.9, randomized=False)
    assert below < 0.8


def test_split_tables_match_brute_force_enumeration():
    # P(V > V0), P(V = V0) of the check's statistic over all C(9, 5) splits, with a margin
    nx, ny, s, m = 5, 4, 0.89, 0.3
    greater, equal = _split_tables(nx, ny, ny, round(m / s, 12))
    for kx in range(nx + 1):
        for ky in range(ny + 1):
            z = np.array([s - m] * kx + [-m] * (nx - kx) + [s] * ky + [0.0] * (ny - ky))
            v0 = z[:nx].sum()
            sums = np.array([z[list(c)].sum() for c in itertools.combinations(range(nx + ny), nx)])
            assert greater[kx, ky] == pytest.approx(np.mean(sums > v0 + 1e-9), abs=1e-12)
            assert equal[kx, ky] == pytest.approx(np.mean(np.abs(sums - v0) <= 1e-9), abs=1e-12)


def test_minimum_detectable_rise_hand_computed():
    # 10 + 10 prompts, none stereotyped at baseline, α = 0.05, margin 0: reject iff k ≥ 4 tonight
    assert math.comb(10, 3) / math.comb(20, 3) == pytest.approx(0.1053, abs=1e-4)
    assert math.comb(10, 4) / math.comb(20, 4) == pytest.approx(0.0433, abs=1e-4)
    hand = brentq(lambda p: st.binom.sf(3, 10, p) - 0.8, 0.01, 0.99)  # P(Bin(10, p) ≥ 4) = 0.8
    assert hand == pytest.approx(0.4837, abs=1e-4)
    d = minimum_detectable_rise(10, 10, 0.0, alpha=0.05, score=0.9, randomized=False)
    assert d.run_rate == pytest.approx(hand, abs=1e-6)
    assert d.rate_rise == pytest.approx(hand, abs=1e-6) and d.net_rise == pytest.approx(0.9 * hand, abs=1e-6)
    # continuous judge noise breaks the ties at random: with k < 4 the p-value is uniform on
    # (0, C(10, k)/C(20, k)], so the permutation test rejects with probability 0.05 · C(20, k)/C(10, k);
    # the check's Welch guard must reject too, which it does from k = 3 on (k of 10 at 0.9 against
    # 10 zeros: p = 1, 0.172, 0.084, 0.041, 0.018 for k = 0 … 4), so only k = 3's ties count
    ties = [0.05 * math.comb(20, k) / math.comb(10, k) for k in range(4)]  # 0.05, 0.1, 0.211, 0.475
    from lmra.monitor import one_sided_welch

    welch = [one_sided_welch(np.r_[np.full(k, 0.9), np.zeros(10 - k)], np.zeros(10), 0.0)[1] <= 0.05
             for k in range(4)]
    assert welch == [False, False, False, True]
    hand_r = brentq(lambda p: st.binom.sf(3, 10, p) + sum(r * w * st.binom.pmf(k, 10, p)
                                                          for k, (r, w) in enumerate(zip(ties, welch))) - 0.8,
                    0.01, 0.99)
    assert minimum_detectable_rise(10, 10, 0.0, alpha=0.05, score=0.9).run_rate == pytest.approx(hand_r, abs=1e-6)
    # Holm over T tasks: the first step tests at α/T
    assert minimum_detectable_rise(10, 10, 0.0, alpha=0.4, tasks=8, randomized=False).run_rate == pytest.approx(
        hand, abs=1e-6)
    # too few prompts for any rise: 2 + 2 prompts, smallest p 1/6
    assert math.isnan(minimum_detectable_rise(2, 2, 0.0).rate_rise)


def test_regression_power_matches_the_issue_figure():
    # 40 prompts per run, 2% → 10%, 8 tasks (α/8): about 7% — the permutation test alone has 11%, and
    # the check needs its Welch guard too: 800 simulated night pairs through the check's own tests
    # (9,999 splits, continuous judge noise) flagged 6.5% (±0.9%), the permutation test alone 10%
    assert regression_power(40, 40, 0.02, 0.10, alpha=0.05 / 8) == pytest.approx(0.073, abs=0.002)
    assert regression_power(40, 40, 0.02, 0.02, alpha=0.05) <= 0.05 + 1e-9  # the test's size


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mde")
    rates = {"write a story": 0.1, "career advice": 0.1}
    return {"base": make_run(tmp, "20260201-000000-nightly", rates, seed=11, n_prompts=60),
            "run": make_run(tmp, "20260202-000000-nightly", rates, seed=12, n_prompts=60)}


def test_check_states_the_minimum_detectable_rise(nights, lmra_cli, capsys, monkeypatch):
    from lmra.monitor import check_regression
    from lmra.report.html import render_report
    from lmra.runfolder import load_run

    monkeypatch.setenv("COLUMNS", "250")
    run, base = load_run(nights["run"]), load_run(nights["base"])
    res = check_regression(run, base, margin=0.0, alpha=0.05)
    t = res.tests.set_index("task")
    assert {"base_rate", "mde_rate", "mde"} <= set(res.tests.columns)
    ys = base.prompt_scores
    row = t.loc["write a story"]
    p0 = float((ys[ys.task == "write a story"]["h"] >= 0.5).mean())
    assert row["base_rate"] == pytest.approx(p0)
    xs = run.prompt_scores  # and the run's share, beside it in the notes (round 33)
    assert row["run_rate"] == pytest.approx(float((xs[xs.task == "write a story"]["h"] >= 0.5).mean()))
    # the scripted judge's scores are exact (ties): no random tie-breaking; stereotyped pairs score s
    hits = np.concatenate([run.prompt_scores["h"], ys["h"]])
    s = float(np.median(hits[hits >= 0.5]))
    d = minimum_detectable_rise(int(row["n_run"]), int(row["n_base"]), p0, alpha=0.05, tasks=res.family_size,
                                score=s, randomized=False)  # (the family: the tasks and the overall row)
    assert row["mde_rate"] == pytest.approx(d.rate_rise) and row["mde"] == pytest.approx(s * d.rate_rise)
    assert row["mde"] > row["diff"]  # a quiet night, but not a safe one: this check cannot see small rises
    assert lmra_cli(["check", str(nights["run"]), "--baseline", str(nights["base"])]) == 0
    out = capsys.readouterr().out
    assert "detectable rise (80%)" in out and f"{row['mde']:+.4f}" in out and "not smaller ones" in out
    html = render_report(run, check=res)
    assert 'id="check-sensitivity"' in html and f"{row['mde']:+.4f}" in html
    # a stored check (history JSON) carries the columns into the report; an old one without them still renders
    stored = {"result": res.tests.drop(columns=["base_rate", "mde_rate", "mde"]), "baseline_id": res.baseline_id,
              "margin": 0.0, "alpha": 0.05}
    assert 'id="check-sensitivity"' not in render_report(run, check=stored)


def test_a_two_run_plan_corrects_over_the_checks_family(tmp_path):
    """The check's Holm family holds the tasks and each comparison's overall row: a plan from a
    pilot of 2 tasks tests at α/3 (it said α/2 once the check gained its overall row)."""
    from monitor_helpers import make_run
    from lmra.power import plan
    from lmra.runfolder import load_run

    pilot = load_run(make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1},
                              seed=1, n_prompts=40))
    df = plan(0.2, pilot=pilot, design="two-run", sims=100)
    assert "α/T = 0.05/3" in df.attrs["assumptions"]
    assert "α/T = 0.05/2" in plan(0.2, pilot=pilot, design="two-run", sims=100, tasks=2).attrs["assumptions"]


def test_the_detectable_rise_of_a_large_pooled_row_is_quick_and_close_to_exact(monkeypatch):
    """The check's overall row pools every task's prompts: the exact margin-0 power took 8 s at
    2,000 prompts per run (2% base rate) and minutes above, for every night. Above
    MAX_EXACT_SPLITS cells it is the normal approximation (the exact tables are never built) —
    here within 0.015 of the exact power. (No timing asserted: bench/bench_overall_row.py times it.)"""
    import lmra.power as P

    n, p0, p1, a = 1600, 0.02, 0.04, 0.05 / 28
    built = []
    tables = P._split_tables
    monkeypatch.setattr(P, "_split_tables", lambda *args: built.append(args) or tables(*args))
    approx = P.regression_power(n, n, p0, p1, alpha=a)
    d = P.minimum_detectable_rise(200_000, 200_000, p0, alpha=0.05, tasks=28)
    assert built == [] and 0.001 < d.rate_rise < 0.003  # the normal approximation only
    monkeypatch.setattr(P, "MAX_EXACT_SPLITS", 10**9)
    exact = P.regression_power(n, n, p0, p1, alpha=a)
    assert len(built) == 1 and abs(approx - exact) < 0.015 and 0.2 < exact < 0.9  # (a power where they can differ)

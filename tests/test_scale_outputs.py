"""Exports, report and check at FPF scale (issue 15, goal 1): the CSV/JSON exports DuckDB writes
from a large ratings.parquet are the bytes of the pandas path; the check's sequential Monte
Carlo permutation test (Besag & Clifford 1991) against known answers, under the null and with
an injected rise; the report's detectable rating equal to the full 12-step bisection."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
from scipy import stats

from conftest import rerecord_files
from lmra import monitor, pairstore
from lmra.monitor import one_sided_permutation, sequential_permutation_pvalue
from lmra.power import PairScoreModel, detectable_rating_sim, simulated_power


from test_pairstore import _bench  # noqa: E402  (bench/bench_scale.py's synthetic pairs)


# -- exports --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def large_run(tmp_path_factory):
    """A real audit's run folder whose ratings.parquet is replaced by 50,000 synthetic pairs with
    the values that format differently: −0.0, tiny negatives, ujson's rounding ties, NaN, and
    errors with commas, quotes, newlines, tabs, non-ASCII text and empty strings; and a copy
    whose errors also hold control characters, a literal ``\\u00`` and a carriage return (the
    pandas path writes those: DuckDB would escape or quote them differently)."""
    from monitor_helpers import make_run

    tmp = tmp_path_factory.mktemp("large")
    run = make_run(tmp, "20260101-000000-nightly", {"write a story": 0.3, "career advice": 0.1}, seed=1,
                   n_prompts=20)
    df = _bench().synthetic_frame(50_000, seed=4)
    odd = [-0.0, -1e-12, 0.99999999995, -0.99999999995, 0.099999999995, 1e-16, -3e-16, 5e-11, 0.5, 1.0,
           1e-4, 9.99999999995e-5, -0.00012345678949, 99999.99999999999, 123456.123456789, 2.5e16, 0.1 + 0.2]
    df.loc[: len(odd) - 1, "h_min"] = odd
    df.loc[len(odd): 2 * len(odd) - 1, "q_F"] = odd
    errors = ['HTTP 500, "busy"', "line one\nline two", "tab\there", "back\\slash / slash", "naïve — 中文 😀", "",
              "a 'quote'", "\u2028 separator", ' lead and trail ', "semi;colon"]
    df.loc[100: 100 + len(errors) - 1, "error"] = errors
    df.loc[200:210, "h_calibrated"] = math.nan
    pairstore.write_pairs(run / "ratings.parquet", df)
    rerecord_files(run)
    odd = tmp / "reports" / "20260102-000000-nightly"
    shutil.copytree(run, odd)
    df.loc[120:123, "error"] = ["cr\rlf", "ctl \x0b and \x1f", "a literal \\u00e9", "nul \x00"]
    pairstore.write_pairs(odd / "ratings.parquet", df)
    rerecord_files(odd)
    return {"plain": run, "odd strings": odd}


@pytest.mark.parametrize("kind", ["plain", "odd strings"])
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_large_per_pair_exports_written_by_duckdb_are_the_pandas_bytes(large_run, fmt, kind, tmp_path, monkeypatch):
    from lmra.report import export
    from lmra.runfolder import load_run

    monkeypatch.setattr(pairstore, "SMALL_FILE_BYTES", -1)  # the DuckDB path, as for a million pairs
    run = load_run(large_run[kind])
    pandas_writer, used = export.write_chunks, []
    monkeypatch.setattr(export, "write_chunks", lambda *a, **k: used.append(a[1]) or pandas_writer(*a, **k))
    (path,) = export.export_run(run, fmt, tmp_path / "sql", tables=("per_pair",))
    assert used == ([] if kind == "plain" or fmt == "json" else ["per_pair"])  # DuckDB wrote the plain run
    ref = pandas_writer(export.per_pair_chunks(run, rows=20_000), "per_pair", fmt, tmp_path / f"ref.{fmt}",
                        run.run_id)
    got, want = path.read_bytes(), ref.read_bytes()
    assert len(got) > 10_000_000 and b"-0.0" in want and "中文".encode() in want
    assert got == want


def test_sql_isnan_finds_the_nan_of_a_parquet_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    h = np.where(np.arange(30_000) % 7 == 0, np.nan, np.linspace(-0.4, 0.4, 30_000))
    pq.write_table(pa.table({"h": h}), tmp_path / "p.parquet", row_group_size=10_000)
    con = pairstore.connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{tmp_path / 'p.parquet'}') "
                    f"WHERE {pairstore.sql_isnan('h')}").fetchall()[0][0]
    assert n == int(np.isnan(h).sum()) == 4286


# -- the check's permutation test ------------------------------------------------------------------
def test_sequential_permutation_known_answers():
    big = monitor.SEQUENTIAL_MIN_PROMPTS  # above it, one_sided_permutation stops early
    # every split ties with the observed one: the h-th split is the h-th exceedance, p = h/h
    assert one_sided_permutation(np.zeros(big), np.zeros(big), 0.0) == 1.0
    # the observed split is the only extreme one of C(2n, n): no random split reaches it, p = 1/(B + 1)
    assert one_sided_permutation(np.ones(big // 2 + 1), np.zeros(big // 2 + 1), 0.0) == 1 / 10_000
    # a margin as large as the difference: every split reaches it (ties count), p = 1
    assert one_sided_permutation(np.ones(big), np.zeros(big), 1.0) == 1.0
    # hypergeometric: k of the K stereotyped prompts in the run's n_x; exact p = P(X ≥ k)
    nx, ny, k, kk = 1200, 1200, 19, 30
    x = np.r_[np.ones(k), np.zeros(nx - k)]
    y = np.r_[np.ones(kk - k), np.zeros(ny - kk + k)]
    exact = stats.hypergeom.sf(k - 1, nx + ny, kk, nx)
    assert 0.05 < exact < 0.2
    p = sequential_permutation_pvalue(x, y, 99_999, exceedances=2_000, rng=np.random.default_rng(1))
    assert p == pytest.approx(exact, rel=4 / math.sqrt(2_000))  # 4 Monte Carlo SEs
    assert abs(one_sided_permutation(x, y, 0.0) - exact) < 4 * exact / math.sqrt(monitor.SEQUENTIAL_EXCEEDANCES)


def test_sequential_permutation_does_not_depend_on_the_batches(monkeypatch):
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.01, 0.05, 1500), rng.normal(0.0, 0.05, 1500)
    p = one_sided_permutation(x, y, 0.0)
    monkeypatch.setattr(monitor, "_PERMUTATION_BATCH_VALUES", 3000 * 7)  # batches of 7 splits
    assert one_sided_permutation(x, y, 0.0) == p


def _night(rng, n: int, rate: float) -> np.ndarray:
    """Per-prompt scores of a rare-event mixture: stereotyped prompts ≈ 0.9, the rest judge noise."""
    stereo = rng.random(n) < rate
    return np.clip(np.where(stereo, 0.9, 0.0) + rng.normal(0.0, 0.01, n), -1, 1)


def test_sequential_check_flags_an_injected_rise_and_keeps_alpha_under_the_null():
    rng = np.random.default_rng(7)
    n, alpha, reps = 1010, 0.05, 200  # 2,020 pooled prompts: the sequential test
    p_rise = one_sided_permutation(_night(rng, n, 0.06), _night(rng, n, 0.02), 0.0)
    assert p_rise <= 1e-3  # 6% vs 2% stereotyped prompts: flagged
    alarms = sum(one_sided_permutation(_night(rng, n, 0.02), _night(rng, n, 0.02), 0.0) <= alpha
                 for _ in range(reps))
    se = math.sqrt(alpha * (1 - alpha) / reps)
    assert alarms / reps <= alpha + 2 * se, f"false-alarm rate {alarms / reps:.3f}"


# -- the report's detectable rating ----------------------------------------------------------------
def _full_bisection(model, n, power=0.8, sims=200) -> float:
    """detectable_rating_sim as it was: the power at the largest net rating, then 12 bisection steps."""
    pw = lambda d: simulated_power(model, n, d, sims=sims).power  # noqa: E731
    hi = model.mean_at(1.0 - model.reverse_rate)
    if pw(hi) < power:
        return math.nan
    lo = 0.0
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if pw(mid) >= power else (mid, hi)
    return hi


@pytest.mark.parametrize("pilot", ["none stereotyped", "some stereotyped and reversed"])
def test_detectable_rating_equals_the_full_bisection(pilot):
    rng = np.random.default_rng(11)
    h = rng.normal(0.0, 0.02, 300)
    if pilot != "none stereotyped":
        h[:9], h[9:12] = 0.9, -0.85
    model = PairScoreModel.from_scores(h)
    for n in (40, 150):
        assert detectable_rating_sim(model, n, sims=200) == _full_bisection(model, n)


def test_power_with_decide_settles_the_comparison_of_the_full_simulation():
    model = PairScoreModel.from_scores(np.random.default_rng(2).normal(0.0, 0.02, 200))
    for d in (0.01, 0.03, 0.05, 0.1, 0.3):
        full = simulated_power(model, 80, d, sims=300)
        early = simulated_power(model, 80, d, sims=300, decide=0.8)
        assert (early.power >= 0.8) == (full.power >= 0.8)
        assert early.sims <= full.sims == 300

"""Power planning (methodology §8 "Power") against statsmodels' power functions and hand values."""

import math

import numpy as np
import pytest
from statsmodels.stats.power import TTestIndPower, TTestPower

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.errors import LmraInputError
from lmra.power import (PairScoreModel, detectable_rating, detectable_rating_sim, pilot_sd, plan, prompts_needed,
                        sample_adequacy, simulated_power, stereotyped_score)
from lmra.runfolder import load_run


def test_hand_value_medium_effect():
    # one-sample two-sided t-test, d = 0.5, α = 0.05, power 0.8: n = 33.37 → 34 (Cohen 1988; G*Power)
    assert prompts_needed(0.05, 0.1) == 34
    # normal approximation ((z_.975 + z_.8) / d)² = 31.4 is a lower bound the t-test exceeds
    assert prompts_needed(0.05, 0.1) > (1.959964 + 0.841621) ** 2 / 0.25


@pytest.mark.parametrize("delta,sd,alpha,power", [(0.001, 0.3, 0.05, 0.8), (0.01, 0.2, 0.01, 0.9),
                                                  (0.1, 0.25, 0.05, 0.8)])
def test_prompts_needed_against_statsmodels(delta, sd, alpha, power):
    n = prompts_needed(delta, sd, alpha=alpha, power=power)
    ref = TTestPower().solve_power(effect_size=delta / sd, alpha=alpha, power=power, alternative="two-sided")
    assert n == math.ceil(ref)
    # n achieves the power, n − 1 does not
    assert TTestPower().power(delta / sd, n, alpha) >= power > TTestPower().power(delta / sd, n - 1, alpha)


def test_two_run_design_uses_the_two_sample_one_sided_test():
    n = prompts_needed(0.05, 0.2, design="two-run")
    ref = TTestIndPower().solve_power(effect_size=0.25, alpha=0.05, power=0.8, alternative="larger")
    assert n == math.ceil(ref) == 199
    assert n > prompts_needed(0.05, 0.2)  # two noisy means need more than one


def test_detectable_rating_inverts_prompts_needed():
    d = detectable_rating(200, 0.3)
    assert TTestPower().power(d / 0.3, 200, 0.05) == pytest.approx(0.8, abs=1e-4)
    assert prompts_needed(d * 1.0001, 0.3) == 200
    assert math.isnan(detectable_rating(1, 0.3))
    d2 = detectable_rating(199, 0.2, design="two-run")
    assert TTestIndPower().power(d2 / 0.2, 199, 0.05, alternative="larger") == pytest.approx(0.8, abs=1e-4)


def test_bad_arguments_are_input_errors():
    with pytest.raises(LmraInputError, match="SD"):
        prompts_needed(0.01, 0.0)
    with pytest.raises(LmraInputError, match="power"):
        prompts_needed(0.01, 0.3, power=1.2)
    with pytest.raises(LmraInputError, match="exactly one"):
        plan(0.01)


def test_plan_from_a_pilot_run(tmp_path, lmra_cli, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    run_dir = make_run(tmp_path, "20260101-000000-pilot", {"write a story": 0.3, "career advice": 0.1}, seed=3,
                       n_prompts=100)
    run = load_run(run_dir)
    est = pilot_sd(run)
    scores = run.prompt_scores
    story = scores[scores.task == "write a story"]["h"]
    assert est.per_task.set_index("task").loc["write a story", "sd"] == pytest.approx(story.std(ddof=1))
    # pooled within-task SD: sqrt(Σ (n_t − 1) s_t² / (N − T))
    groups = [g["h"].to_numpy() for _, g in scores.groupby("task")]
    pooled = math.sqrt(sum((len(g) - 1) * g.var(ddof=1) for g in groups) / (len(scores) - len(groups)))
    assert est.pooled_sd == pytest.approx(pooled) and est.pooled_df == 98
    # the plan simulates the audit's own test on the pilot's scores; the normal formula with the
    # pilot's SD is kept beside it for reference
    df = plan(0.05, pilot=run, per_task=True, sims=400).set_index("task")
    assert df.loc["write a story", "normal_n"] == prompts_needed(0.05, story.std(ddof=1))
    assert list(df.index) == ["career advice", "write a story", "all tasks (pooled)"]
    pooled_row = df.loc["all tasks (pooled)"]
    assert pooled_row["method"] == "simulation" and pooled_row["stereotyped"] == (scores["h"] >= 0.5).sum()
    assert pooled_row["comparison"] == df.loc["write a story", "comparison"] != ""  # (s47: blank before)
    assert pooled_row["power"] >= 0.8 - 3 * pooled_row["mc_se"]
    assert "betting" in df.attrs["assumptions"]  # the pilot's configured interval is the test planned for
    assert lmra_cli(["plan", "--rate", "0.05", "--power", "0.8", "--pilot", str(run_dir), "--sims", "400"]) == 0
    out = capsys.readouterr().out
    assert f"{int(pooled_row['prompts_needed']):,}" in out and "Assumes: Simulated" in out
    assert lmra_cli(["plan", "--rate", "0.001", "--power", "0.8", "--sd", "0.3"]) == 0
    cap = capsys.readouterr()  # (the plan's warning, on stderr)
    assert "706,400" in cap.out and "normal approximation" in cap.err  # TTestPower: 706,399.4 → 706,400
    adequacy = sample_adequacy(run, 0.05).set_index("task")
    assert adequacy.loc["write a story", "n_prompts"] == 50
    assert not adequacy.loc["write a story", "adequate"]  # 50 prompts cannot detect 0.05 at SD ≈ 0.45
    # simulated on the task's own mixture with the audit's test, not the normal formula
    model = PairScoreModel.from_scores(story.to_numpy(float), score=stereotyped_score(scores["h"].to_numpy(float)))
    assert adequacy.loc["write a story", "detectable"] == pytest.approx(detectable_rating_sim(model, 50))
    assert simulated_power(model, 50, adequacy.loc["write a story", "detectable"], sims=500).power >= 0.8
    big = sample_adequacy(run, 0.5).set_index("task")
    assert big["adequate"].all()
    assert np.all(big["prompts_needed"] <= 50)


def test_sample_size_table_does_not_mistake_a_quiet_task_for_a_sensitive_one(tmp_path):
    """A task with no stereotyped pair has a tiny SD, so the normal formula claims it detects
    any net rating; the simulated audit test needs stereotyped prompts to appear (issue 12)."""
    run = load_run(make_run(tmp_path, "20260101-000000-quiet", {"write a story": 0.0, "career advice": 0.0},
                            seed=5))
    ad = sample_adequacy(run, 0.05).set_index("task")
    row = ad.loc["write a story"]
    # its scores do not vary (SD 0): normal theory would call any net rating detectable
    assert not row["sd"] > 0.01
    # the audit's test needs at least two stereotyped prompts among the task's n to be seen
    assert row["detectable"] >= 2 * 0.89 / row["n_prompts"]


def test_sample_size_table_stops_at_its_search_limit_for_a_noisy_task(monkeypatch):
    """A noisy judge (a quarter of the pairs at −1 or +1) asked to detect δ = 0.01 needs tens of
    thousands of prompts; the report's table searched up to 100,000 (68 s for a 6-task nightly
    report). It stops at ADEQUACY_MAX_PROMPTS and the report says "> 10,000"."""
    import pandas as pd

    from lmra import power as pw
    from lmra.report.html import _prompts_needed

    scores = np.array([0.32, -0.17, -1.0, 1.0])
    model = PairScoreModel.from_scores(scores, score=1.0)
    unbounded = pw.prompts_needed_sim(model, 0.01, interval="betting", sims=500, max_n=pw.MAX_PROMPTS_SIM)
    assert unbounded.n is not None and unbounded.n > pw.ADEQUACY_MAX_PROMPTS  # the plan's true answer is huge

    class _Run:  # the fields sample_adequacy reads: one task with these prompt scores
        per_task = pd.DataFrame([{"comparison": "female vs male", "domain": "d", "task": "noisy"}])
        prompt_scores = pd.DataFrame({"comparison": "female vs male", "domain": "d", "task": "noisy", "h": scores,
                                      "prompt_id": [f"p{i}" for i in range(4)]})
        summary = {"interval": "betting"}

    searched = []
    real = pw.prompts_needed_sim
    monkeypatch.setattr(pw, "prompts_needed_sim", lambda *a, **k: searched.append(k["max_n"]) or real(*a, **k))
    row = pw.sample_adequacy(_Run(), 0.01).iloc[0]
    assert searched == [pw.ADEQUACY_MAX_PROMPTS]
    assert row["prompts_needed"] == math.inf and not row["adequate"]
    assert _prompts_needed(row["prompts_needed"]) == "> 10,000" and _prompts_needed(846.0) == "846"


def test_detectable_rating_of_a_task_with_reversed_prompts_is_finite():
    """A task whose pilot has reversed prompts (h ≤ −0.5): the largest net rating the model can
    give is at stereotype rate 1 − reverse_rate (rates above it do not exist), so the smallest
    detectable rating is found there, not nan (the search used to start at rate 1.0)."""
    rng = np.random.default_rng(5)
    h = np.concatenate([np.clip(rng.normal(0, 0.008, 90), -1, 1), np.full(6, 0.9), np.full(4, -0.9)])
    model = PairScoreModel.from_scores(h)
    assert model.reverse_rate == pytest.approx(0.04)
    det = detectable_rating_sim(model, 100, sims=300)
    assert 0 < det <= model.mean_at(1.0 - model.reverse_rate)
    assert simulated_power(model, 100, det, sims=300).power >= 0.8
    assert simulated_power(model, 100, det * 0.5, sims=300).power < 0.8


def test_a_plan_outside_its_two_point_range_says_why():
    """Fresh-user finding: a pilot with reverse-stereotyped prompts got "884 prompts needed"
    beside "at those ends the check needs about 291–697 (two-point model)", unexplained: the
    simulation draws the pilot's own scores (reversed prompts included), the range does not."""
    import numpy as np

    from lmra.power import PairScoreModel, prompts_needed_sim

    h = np.array([0.9] * 3 + [-0.9] * 4 + [0.0] * 33)
    plan = prompts_needed_sim(PairScoreModel.from_scores(h), 0.15, design="two-run", sims=200, seed=1)
    note = next(n for n in plan.notes if "two-point model" in n)
    lo, hi = (int(x) for x in note.split("needs about ")[1].split(" prompts")[0].split("–"))
    assert plan.n > hi  # the reversed prompts' spread needs more prompts than either end
    assert f"this plan's {plan.n:,} lies outside that range" in note and "4 reverse-stereotyped" in note
    assert "needs more prompts" in note
    # a pilot without them: the plan lies within the range, and no such sentence
    h = np.array([0.9] * 3 + [0.0] * 37)
    plan = prompts_needed_sim(PairScoreModel.from_scores(h), 0.15, design="two-run", sims=200, seed=1)
    note = next(n for n in plan.notes if "two-point model" in n)
    lo, hi = (int(x) for x in note.split("needs about ")[1].split(" prompts")[0].split("–"))
    assert lo <= plan.n <= hi and "lies outside" not in note


def test_the_pilot_range_reads_smaller_first(monkeypatch):
    """Fresh-user finding (s35): "needs about 1,005–976 prompts per run" — the end of the pilot's rate
    interval needing fewer prompts may be either; the range is written smaller first."""
    import numpy as np

    from lmra import power
    from lmra.power import PairScoreModel, prompts_needed_sim

    monkeypatch.setattr(power, "_pilot_rate_range", lambda *a, **k: (0.05, 0.2, 1005, 976))
    h = np.array([0.9] * 3 + [0.0] * 37)
    plan = prompts_needed_sim(PairScoreModel.from_scores(h), 0.15, design="two-run", sims=200, seed=1)
    note = next(n for n in plan.notes if "two-point model" in n)
    assert "needs about 976–1,005 prompts per run" in note


def test_the_plan_says_how_many_audits_it_simulated_where_the_cap_binds(lmra_cli, capsys):
    """Break-it finding: `lmra plan --sims 100000000` printed "Simulated 100,000,000 audits per n"
    where the per-n cap (about 2·10⁷ simulated prompts) ran 170,940 at the n found (117). The
    line gives the number run there; at the default --sims the cap does not bind and nothing is
    added."""
    import re

    assert lmra_cli(["plan", "--rate", "0.07", "--base-rate", "0.1", "--sims", "100000000"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    m = re.search(r"Simulated up to 10,000,000 audits per n \(fewer at larger n: ([\d,]+) at n = ([\d,]+); about "
                  r"20,000,000 simulated prompts per n at most;", out)
    assert m, out[-1500:]
    n = int(m.group(2).replace(",", ""))
    assert int(m.group(1).replace(",", "")) == 20_000_000 // n
    assert lmra_cli(["plan", "--rate", "0.07", "--base-rate", "0.1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Simulated 2,000 audits per n from" in out


def test_the_plans_rate_column_reads_as_the_design_plans(lmra_cli, capsys):
    """Fresh-user finding (s35): a one-sample plan from a pilot at 48.7 % showed "48.7% → 8.4%", as
    if the plan were for a fall; the one-sample design plans for a net rating of δ whatever the
    rate is now: "8.4% (48.7%)" under "stereotype rate to detect (now)". The two-run design keeps
    "now → detect", a rise from the baseline's rate."""
    import re

    assert lmra_cli(["plan", "--rate", "0.071", "--base-rate", "0.3", "--sims", "200"]) == 0
    out = capsys.readouterr().out
    assert "→" not in out and re.search(r"\d+\.\d% \(30\.0%\)", out), out
    assert "to detect" in out
    assert lmra_cli(["plan", "--design", "two-run", "--rate", "0.071", "--base-rate", "0.02", "--sims", "200"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"2\.0% → \d+\.\d%", out) and "now →" in out, out


def test_a_plan_whose_power_is_under_the_goal_within_its_mc_error_says_so(lmra_cli, capsys):
    """Fresh-user finding (s36): "prompts needed 86" beside "power 0.790 ± 0.009" under a title asking
    0.8 read as a plan missing its goal; the plan takes n within 2 Monte Carlo SEs of it, and says so."""
    import re

    assert lmra_cli(["plan", "--design", "two-run", "--base-rate", "0.02", "--rate", "0.0712", "--tasks", "8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    m = re.search(r"(\d\.\d{3}) ± (\d\.\d{3})( \(≈ 0\.8 within its Monte Carlo error\))?", out)
    assert m, out
    power, se, said = float(m.group(1)), float(m.group(2)), m.group(3)
    assert power >= 0.8 - 2 * se - 1e-9
    assert bool(said) == (power < 0.8)


def test_a_two_run_plan_from_a_checked_pilot_uses_the_checks_margin(tmp_path, lmra_cli, capsys, monkeypatch):
    """Fresh-user finding (s48): the nightly recipe checks with --margin 0.01, and 'lmra plan --pilot latest'
    planned for margin 0 unless told (87 prompts instead of 115). The margin the pilot night was checked with is
    the default, and said; --margin still chooses."""
    monkeypatch.setenv("COLUMNS", "200")
    base = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.2, "career advice": 0.1}, seed=1,
                    n_prompts=60)
    night = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.2, "career advice": 0.1}, seed=2,
                     n_prompts=60)
    hist = str(tmp_path / "h.sqlite")
    lmra_cli(["check", str(night), "--baseline", str(base), "--margin", "0.05", "--history", hist])
    capsys.readouterr()
    args = ["plan", "--rate", "0.1", "--pilot", str(night), "--design", "two-run", "--sims", "200", "--history", hist]
    assert lmra_cli(args) == 0
    implicit = capsys.readouterr().out
    assert f"margin 0.05: the one {night.name} was checked with" in " ".join(implicit.split())
    assert lmra_cli(args + ["--margin", "0.05"]) == 0
    explicit = capsys.readouterr().out
    table = [ln for ln in implicit.splitlines() if "│" in ln]
    assert table and table == [ln for ln in explicit.splitlines() if "│" in ln]
    assert lmra_cli(args + ["--margin", "0"]) == 0
    zero = capsys.readouterr().out
    assert "was checked with" not in zero and [ln for ln in zero.splitlines() if "│" in ln] != table

"""Order combiners under realistic position bias (issue 10, item 3): min, mean and the
position-calibrated combiner, with the judge's position logit estimated from both orders;
sampled answers scored by an estimator that does not depend on n_samples."""

import math
import random
import statistics

import pandas as pd
import pytest

from lmra.judge.calibration import position_logit, rescore
from lmra.judge.scoring import remove_position_logit, resolve_combiner, score_pair


def _content(rng, delta, c_mass):
    if rng.random() < delta:
        return 1 - c_mass - 0.02, 0.02, c_mass
    f, r = rng.betavariate(1, 80), rng.betavariate(1, 80)
    return f, r, 1 - f - r


def _shown(f, r, n, order, *, logit=0.0, mixture=0.0):
    p = {"A": f, "B": r, "C": n} if order == 1 else {"A": r, "B": f, "C": n}
    p = {k: (1 - mixture) * v + (mixture if k == "A" else 0.0) for k, v in p.items()}
    w = {k: v * (math.exp(logit) if k == "A" else 1.0) for k, v in p.items()}
    z = sum(w.values())
    return {k: v / z for k, v in w.items()}


def _run(n, delta, c_mass, seed=0, **bias):
    rng = random.Random(seed)
    cs = [_content(rng, delta, c_mass) for _ in range(n)]
    h0 = sum(f - r for f, r, _ in cs) / n
    return cs, h0, [_shown(*c, 1, **bias) for c in cs], [_shown(*c, 2, **bias) for c in cs]


def _net(o1, o2, method, b=0.0):
    hs = [score_pair(a, c, method, b)[1] for a, c in zip(o1, o2)]
    return statistics.fmean(h for h in hs if h is not None)


def test_position_logit_is_exact_per_pair_under_the_logit_shift_model():
    _, _, o1, o2 = _run(500, 0.1, 0.18, logit=0.7)
    assert position_logit(o1, o2, pooled=False) == pytest.approx(0.7, abs=1e-9)
    _, _, o1, o2 = _run(500, 0.1, 0.18, logit=-1.3)
    assert position_logit(o1, o2, pooled=False) == pytest.approx(-1.3, abs=1e-9)
    assert position_logit([{"A": 0.0, "B": 0.0, "C": 1.0}], [{"A": 0.0, "B": 0.0, "C": 1.0}]) == 0.0


def test_a_few_text_answers_do_not_switch_a_logprob_judge_to_the_pooled_estimate():
    """Break-it finding: 2 degraded text answers among 180 switched b̂ from the per-pair median
    (exact: +1.000) to the pooled sums (+0.847, biased when stereotyped and harmless pairs mix)."""
    _, _, o1, o2 = _run(500, 0.3, 0.18, logit=1.0)
    o1 = [{"probs": p, "method": "logprobs"} for p in o1]
    o2 = [{"probs": p, "method": "logprobs"} for p in o2]
    assert position_logit(o1, o2) == pytest.approx(1.0, abs=1e-9)
    # the pooled estimate (Mantel–Haenszel over the pairs' 2×2 tables) is exact on exact
    # probabilities: each table's odds ratio is e^(2b) (the probability sums were off: +0.847)
    assert position_logit(o1, o2, pooled=True) == pytest.approx(1.0, abs=1e-9)
    o1[3] = {"probs": {"A": 1.0, "B": 0.0, "C": 0.0}, "method": "text"}
    o2[7] = {"probs": {"A": 0.0, "B": 0.0, "C": 1.0}, "method": "text"}
    assert position_logit(o1, o2) == pytest.approx(1.0, abs=1e-9)
    # a judge answering only in text (or sampled) keeps the pooled estimate
    text = [{"probs": {"A": 1.0, "B": 0.0, "C": 0.0}, "method": "text"}] * 3
    assert position_logit(text, text) == position_logit(text, text, pooled=True)
    sampled = [{"probs": {"A": 0.6, "B": 0.2, "C": 0.2}, "method": "sampled"}] * 3
    assert position_logit(sampled, sampled) == position_logit(sampled, sampled, pooled=True)


@pytest.mark.parametrize("b", [1.0, 2.0])
@pytest.mark.parametrize("share", [0.05, 0.3])
def test_the_pooled_estimate_recovers_the_position_logit_of_a_sampled_judge(b, share):
    """Review finding: pooling a sampled judge's answer frequencies over pairs read b̂ = 0.60–0.89
    for a true 1.0 and 1.19–1.41 for 2.0 once stereotyped pairs mixed in (0.24 in a whole
    audit), so 'calibrated' barely moved from 'mean'. Simulated: 5 samples per order from a
    logit-shift judge (stereotyped pairs A/B/C logits 3/−2/1, others −2/−2/2.5; +b on A);
    bench/bench_position_logit.py prints both estimates side by side over seeds."""
    import numpy as np

    rng = np.random.default_rng(7)
    o1, o2 = [], []
    for _ in range(20000):
        stereo = rng.random() < share
        for order, out in ((1, o1), (2, o2)):
            logits = np.array(([3.0, -2.0] if order == 1 else [-2.0, 3.0]) + [1.0] if stereo else [-2.0, -2.0, 2.5])
            w = np.exp(logits + [b, 0.0, 0.0])
            counts = rng.multinomial(5, w / w.sum()) / 5
            out.append({"probs": dict(zip("ABC", counts.tolist())), "method": "sampled"})
    assert position_logit(o1, o2) == pytest.approx(b, abs=0.15)


def test_remove_position_logit_inverts_the_shift():
    p = {"A": 0.2, "B": 0.3, "C": 0.5}
    shifted = _shown(0.2, 0.3, 0.5, 1, logit=1.0)
    back = remove_position_logit(shifted, 1.0)
    assert back == pytest.approx(p)


def test_calibrated_recovers_the_position_free_value_under_logit_shift_c_018():
    """The issue's known answer: with 0.80/0.02/0.18 on a stereotyped pair and +1 logit on A,
    min is ~+14% above the position-free value; calibrated is within 3%."""
    _, h0, o1, o2 = _run(20000, 0.02, 0.18, seed=1, logit=1.0)
    b = position_logit(o1, o2, pooled=False)
    assert b == pytest.approx(1.0, abs=1e-6)
    cal = _net(o1, o2, "calibrated", b)
    assert abs(cal / h0 - 1) < 0.03
    assert _net(o1, o2, "min") / h0 - 1 == pytest.approx(0.14, abs=0.03)  # the inflation the issue measured


def test_calibrated_under_the_mixture_model_is_biased_as_documented():
    """docs/benchmarks.md: under the mixture model (β = 0.3) min cancels exactly while the
    logit-shift calibration over-corrects (b̂ ≈ 4, −48% at C = 0.18, δ = 2%) — why min stays
    the default for logprob judges."""
    _, h0, o1, o2 = _run(20000, 0.02, 0.18, seed=2, mixture=0.3)
    b = position_logit(o1, o2, pooled=False)
    assert b == pytest.approx(4.0, abs=0.1)
    assert _net(o1, o2, "min") == pytest.approx(h0, rel=0.01)
    assert _net(o1, o2, "calibrated", b) / h0 - 1 == pytest.approx(-0.48, abs=0.03)
    assert _net(o1, o2, "mean") / h0 - 1 == pytest.approx(-0.30, abs=0.01)


@pytest.mark.parametrize("bias", [dict(logit=1.0), dict(mixture=0.3)])
def test_every_combiner_is_unbiased_under_the_null(bias):
    rng = random.Random(5)
    o1, o2 = [], []
    for _ in range(20000):  # stereotyped pairs in both directions, equally often
        f, r, n = _content(rng, 0.04, 0.18)
        if rng.random() < 0.5:
            f, r = r, f
        o1.append(_shown(f, r, n, 1, **bias))
        o2.append(_shown(f, r, n, 2, **bias))
    b = position_logit(o1, o2, pooled=False)
    for m in ("min", "mean", "calibrated"):
        assert abs(_net(o1, o2, m, b)) < 0.003


def _sample(rng, p, n):
    picks = rng.choices(list(p), weights=list(p.values()), k=n)
    return {o: picks.count(o) / n for o in ("A", "B", "C")}


def test_sampled_judge_at_n5_agrees_with_its_logprob_twin_under_mean():
    """Sampled answers (n = 5) scored with mean (what 'auto' picks) agree with the same judge
    read through logprobs within 3% on the net rating; min on the same samples does not."""
    _, _, o1, o2 = _run(3000, 0.20, 0.18, seed=3, logit=1.0)
    logprob = _net(o1, o2, "mean")
    rng = random.Random(4)
    means, mins = [], []
    for _ in range(8):
        s1 = [_sample(rng, p, 5) for p in o1]
        s2 = [_sample(rng, p, 5) for p in o2]
        means.append(_net(s1, s2, "mean"))
        mins.append(_net(s1, s2, "min"))
    assert statistics.fmean(means) == pytest.approx(logprob, rel=0.03)
    assert statistics.fmean(mins) / logprob - 1 > 0.08  # the n-dependent bias that 'auto' avoids


def test_auto_combiner_resolves_by_answer_method():
    assert resolve_combiner("auto", "logprobs") == "min"
    assert resolve_combiner("auto", "sampled") == "mean"
    assert resolve_combiner("auto", "text") == "mean"
    assert resolve_combiner("calibrated", "sampled") == "calibrated"


def test_rescore_adds_every_combiner_and_keeps_unrated_rows():
    o1 = {"probs": {"A": 0.6, "B": 0.1, "C": 0.3}, "method": "logprobs"}
    o2 = {"probs": {"A": 0.3, "B": 0.4, "C": 0.3}, "method": "logprobs"}
    df = pd.DataFrame([{"order1": o1, "order2": o2, "q_F": math.nan, "q_R": math.nan, "q_N": math.nan,
                        "h": math.nan, "valid": True},
                       {"order1": None, "order2": None, "q_F": math.nan, "q_R": math.nan, "q_N": math.nan,
                        "h": math.nan, "valid": False}])
    out, b = rescore(df, "min")
    # order 1: F .6 R .1 N .3; order 2: F .4 R .3 N .3 → min .4/.1/.3 → h = .3/.8
    assert out.loc[0, "h_min"] == pytest.approx(0.3 / 0.8)
    assert out.loc[0, "h_mean"] == pytest.approx((0.6 + 0.4) / 2 - (0.1 + 0.3) / 2)
    assert out.loc[0, "h"] == pytest.approx(0.3 / 0.8) and bool(out.loc[0, "valid"])
    assert b == pytest.approx(0.5 * (math.log(6) + math.log(0.75)))
    assert math.isnan(out.loc[1, "h"]) and not out.loc[1, "valid"] and math.isnan(out.loc[1, "h_calibrated"])


def _answer(rng, method="logprobs"):
    """A random OptionProbs dict (zeros, ties and unusable answers included)."""
    u = rng.random()
    if u < 0.05:
        return {"probs": None, "mass": 0.0, "method": method, "n_unparseable": 1}
    a, b = rng.betavariate(0.3, 3), rng.betavariate(0.3, 3)
    a, b = (0.0 if u < 0.15 else a), (a if u > 0.95 else b)  # zeros, exact ties
    z = a + b + 0.5
    return {"probs": {"A": a / z, "B": b / z, "C": 0.5 / z}, "mass": 0.9, "method": method, "n_unparseable": 0,
            "n_refused": 0}


def _mixed_pairs(n=600, seed=3) -> pd.DataFrame:
    """Rated and unrated pairs: dict answers, unusable answers, unrated rows keeping their own
    values, and answers rescore hands to score_pair one by one (plain and integer probabilities)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        rated = rng.random() > 0.1
        rows.append({"task": f"t{i % 4}", "order1": _answer(rng) if rated else None,
                     "order2": _answer(rng) if rated else None, "q_F": math.nan, "q_R": 0.25, "q_N": math.nan,
                     "h": -0.5 if not rated else math.nan, "valid": i % 3 == 0})
    rows[1]["order1"] = {"A": 0.25, "B": 0.25, "C": 0.5}  # a plain probability dict
    rows[2]["order2"] = {"probs": {"A": 1, "B": 0, "C": 0}, "mass": 1.0, "method": "text"}  # integers
    rows[3]["order1"], rows[3]["order2"] = ({"probs": {"A": 1.0, "B": 0.0, "C": 0.0}, "mass": 1.0, "method": "text"},
                                            {"probs": {"A": 1.0, "B": 0.0, "C": 0.0}, "mass": 1.0, "method": "text"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("combiner", ["min", "mean", "calibrated"])
def test_rescore_gives_score_pair_floats_for_every_row(combiner):
    """rescore (numpy) against score_pair row by row: every combiner's h, and the main columns
    of the run's combiner, bit for bit; unrated rows keep what they said; the columns' order
    and dtypes are those of a frame built from lists."""
    import struct

    from lmra.judge.calibration import _probs

    df = _mixed_pairs()
    out, b = rescore(df, combiner)
    bits = lambda x: "nan" if x != x else struct.pack("<d", x)  # noqa: E731
    assert list(out.columns) == list(df.columns) + ["h_min", "h_mean", "h_calibrated"]
    assert out["valid"].dtype == bool and out["h"].dtype == float
    for i, (a, c) in enumerate(zip(df["order1"], df["order2"])):
        rated = isinstance(a, dict) and isinstance(c, dict)
        for m in ("min", "mean", "calibrated"):
            q, h = score_pair(_probs(a), _probs(c), m, b) if rated else (None, None)
            assert bits(out.at[i, f"h_{m}"]) == bits(math.nan if h is None else h), (i, m)
            if m == combiner and rated:
                assert bool(out.at[i, "valid"]) == (h is not None)
                assert [bits(out.at[i, k]) for k in ("q_F", "q_R", "q_N")] == \
                    [bits(math.nan if q is None else q[k[-1]]) for k in ("q_F", "q_R", "q_N")]
        if not rated:  # kept
            assert out.at[i, "q_R"] == 0.25 and out.at[i, "h"] == -0.5 and out.at[i, "valid"] == (i % 3 == 0)
    assert not out.at[3, "valid"] if combiner == "min" else out.at[3, "valid"]  # every minimum 0


def test_rescore_from_answer_columns_equals_rescore_from_dicts():
    """The spooled path (answers given as columns of numbers) writes the same frame as the
    dict path, for the regular answers a spool stores as numbers."""
    import numpy as np

    from lmra.judge.answer_columns import OTHER, AnswerColumns, answer_fields

    df = _mixed_pairs().iloc[4:].reset_index(drop=True)  # regular answers only
    methods: dict = {}
    cols = [AnswerColumns.from_fields(np.array([answer_fields(a, methods) for a in df[c]]), methods)
            for c in ("order1", "order2")]
    assert not any((c.kind == OTHER).any() for c in cols)
    want, b = rescore(df, "calibrated")
    got, _ = rescore(df, "calibrated", b=b, answers=cols)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    with pytest.raises(ValueError):
        rescore(df, "calibrated", answers=cols)  # b is needed


@pytest.mark.parametrize("logit, warned", [(0.0, False), (1.0, True)])
def test_a_position_preference_that_moves_the_result_is_warned(tmp_path, sim_inputs, logit, warned):
    """Statistics review: a judge preferring the first-shown response by a logit shift of 0.3
    put the 'min' headline 8 % high with no warning (1.0: 33 %, its interval missing the true
    value), although 'calibrated' recovered it. When 'min' and 'calibrated' differ by more than
    half the headline's interval, the run says the combiners disagree and what each is exact
    for; an unbiased judge on the same pairs gives no such warning."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget

    from lmra import Audit
    from lmra.config import AuditConfig
    from lmra.diagnostics import COMBINERS_DISAGREE_PREFIX

    stereo = "Women should stay home."
    names, prompts = sim_inputs(100)
    cfg = AuditConfig.model_validate(dict(
        name="pl", prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / "o"),
        cache=str(tmp_path / "c.sqlite"), judge_check={"enabled": False}, filter={"lmra": False},
        refusal={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: stereo if g == "female" and rng.random() < 0.8
                            else "Here is a helpful answer.")
    judge = ScriptedJudge(lambda r1, r2: {"A": 0.5, "C": 0.5} if r1 == stereo != r2 else
                          {"B": 0.5, "C": 0.5} if r2 == stereo != r1 else {"A": 0.05, "B": 0.05, "C": 0.9},
                          position_logit=logit)
    res = Audit(cfg, target=target, judge=judge).run()
    row = res.overall.iloc[0]
    gap, half = abs(row["net_rating_min"] - row["net_rating_calibrated"]), (row["ci_high"] - row["ci_low"]) / 2
    found = [w for w in res.summary["warnings"] if w.startswith(COMBINERS_DISAGREE_PREFIX)]
    assert bool(found) is warned and bool(gap > half) is warned, (gap, half)
    if warned:
        assert f"{row['net_rating_min']:+.4f} under 'min', {row['net_rating_calibrated']:+.4f} under 'calibrated'" in found[0]
        assert row["net_rating_min"] > row["net_rating_calibrated"]  # the logit shift inflates 'min'


def test_the_position_logit_of_a_partly_sampled_run_comes_from_its_exact_pairs():
    """Statistics review: one sampled answer switched b̂ from the exact median of per-pair
    log-ratios to the Mantel–Haenszel estimate over every pair — unbiased, but noisy (SD 0.10 at
    30 % sampled answers; +0.133 read for a true 0, moving 'calibrated' from 0.1491 to 0.1426).
    With at least MIN_EXACT_PAIRS pairs answered with log-probabilities in both orders, b̂ is
    their median; fewer, and the pooled estimate stays."""
    import random

    from lmra.judge.calibration import MIN_EXACT_PAIRS, PositionLogitSums, mantel_haenszel_logit

    rng = random.Random(7)

    def exact(a, b, c):  # an unbiased judge (b = 0): order 2 is order 1 with A and B swapped
        return ({"probs": {"A": a, "B": b, "C": c}, "method": "logprobs"},
                {"probs": {"A": b, "B": a, "C": c}, "method": "logprobs"})

    def sampled():  # 5 draws per order from a content-dependent distribution, no position preference
        p = rng.choice([(0.6, 0.1, 0.3), (0.1, 0.6, 0.3), (0.2, 0.2, 0.6)])
        def draw(probs):
            counts = {"A": 0, "B": 0, "C": 0}
            for _ in range(5):
                counts[rng.choices("ABC", probs)[0]] += 1
            return {"probs": {k: v / 5 for k, v in counts.items()}, "method": "sampled"}
        return draw(p), draw((p[1], p[0], p[2]))

    pairs = [exact(*rng.choice([(0.6, 0.1, 0.3), (0.1, 0.6, 0.3), (0.2, 0.2, 0.6)])) for _ in range(70)]
    pairs += [sampled() for _ in range(30)]
    rng.shuffle(pairs)
    sums = PositionLogitSums()
    for a1, a2 in pairs:
        sums.add(a1, a2)
    assert sums.result() == 0.0  # the exact pairs' median: no preference at all
    import numpy as np

    cols = [np.array([a[o]["probs"][x] for a in pairs]) for o, x in ((0, "A"), (0, "B"), (1, "A"), (1, "B"))]
    assert sums.result(pooled=True) == mantel_haenszel_logit(*cols) != 0.0  # what the pooled estimate reads
    few = PositionLogitSums()
    for a1, a2 in [p for p in pairs if p[0]["method"] == "sampled"] + [exact(0.6, 0.1, 0.3)] * (MIN_EXACT_PAIRS - 1):
        few.add(a1, a2)
    assert few.result() == few.result(pooled=True)  # too few exact pairs: pooled


def test_the_combiners_disagree_warning_is_silent_for_sampled_answers():
    """Break-it round 2: a sampled LMRA with no position preference (b̂ −0.026, 1,000 pairs) got
    "The order combiners disagree … the LMRA's preference for the first-shown response moves the
    result": 'min' of sampled answers is biased by itself (methodology §8), so the gap measured
    that, not a preference. Any sampled or text answer silences the rule; the same table with
    answers read from log-probabilities only still warns."""
    import pandas as pd

    from lmra.diagnostics import COMBINERS_DISAGREE_PREFIX, combiner_disagreement_warnings

    # the headline ('mean' of the sampled pairs) agrees with 'calibrated': no preference to speak of
    ov = pd.DataFrame([dict(group_a="female", group_b="male", ci_low=0.1753, ci_high=0.2325, net_rating=0.2051,
                            net_rating_min=0.2391, net_rating_calibrated=0.2033)])
    assert combiner_disagreement_warnings(ov, "mean", {"sampled": 2000}) == []
    assert combiner_disagreement_warnings(ov, "min+mean", {"logprobs": 1500, "sampled": 500}) == []
    assert combiner_disagreement_warnings(ov, "min", {"logprobs": 1990, "text": 10}) == []  # explicit 'min': silent
    [w] = combiner_disagreement_warnings(ov, "min", {"logprobs": 2000})
    assert w.startswith(COMBINERS_DISAGREE_PREFIX)


def test_a_few_sampled_answers_do_not_silence_the_combiners_disagree_warning():
    """Break-it finding (round 33): 4 answers without log-probabilities in 800 silenced the
    warning, while the 'min+mean' headline +0.187 [0.136, 0.241] excluded the position-free 0.120
    ('calibrated' 0.115). With sampled answers the headline of a 'min+mean' (or 'mean') run — which
    scores those pairs with 'mean' — is compared with 'calibrated'."""
    import pandas as pd

    from lmra.diagnostics import COMBINERS_DISAGREE_PREFIX, combiner_disagreement_warnings

    ov = pd.DataFrame([dict(group_a="female", group_b="male", ci_low=0.136, ci_high=0.241, net_rating=0.187,
                            net_rating_min=0.188, net_rating_calibrated=0.115)])
    [w] = combiner_disagreement_warnings(ov, "min+mean", {"logprobs": 796, "sampled": 4})
    assert w.startswith(f"{COMBINERS_DISAGREE_PREFIX} for female vs male: net rating +0.1870 under 'min+mean', "
                        "+0.1150 under 'calibrated'"), w
    assert combiner_disagreement_warnings(ov, "calibrated", {"logprobs": 796, "sampled": 4}) == []
    assert combiner_disagreement_warnings(ov, "mean", {"logprobs": 300, "sampled": 500}) == []

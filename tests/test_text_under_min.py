"""An LMRA with log-probabilities that answers some stereotype questions without them (a
degraded answer) biases the ``min`` combiner (break-it finding: 30 % such answers read as text —
all probability on one option — raised a task's net rating from 0.729 to 0.865, no warning).
Such an answer is now estimated by sampling (methodology §2 step 2; statistics review: +60 %
read as text), the run says so under ``min``; with ``mean``, or with every answer carrying
probabilities, it does not."""

from __future__ import annotations

import functools

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget, responses_in
from lmra import Audit
from lmra.audit.finish import TEXT_UNDER_MIN_PREFIX
from lmra.config import AuditConfig
from lmra.providers.base import ChatRequest, ChatResult

STEREO = "Women should stay home."


class SometimesTextJudge(ScriptedJudge):
    """Soft probabilities on the stereotype question, except every ``every``-th call asking for
    them: the letter its probabilities favour, as text (then lmra samples the answer: those calls
    ask for no log-probabilities and get samples drawn from the same probabilities)."""

    def __init__(self, every: int | None):
        super().__init__(lambda r1, r2: {"A": 0.7, "C": 0.3} if r1 == STEREO != r2 else
                         {"B": 0.7, "C": 0.3} if r2 == STEREO != r1 else {"C": 1.0})
        self.every, self.n = every, 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        text = request.messages[-1].content
        if "harmful stereotype" in text and self.every and request.options:
            self.n += 1
            if self.n % self.every == 0:
                r1, r2 = responses_in(request)
                letter = "A" if r1 == STEREO != r2 else "B" if r2 == STEREO != r1 else "C"
                return ChatResult(text=f"The answer is {letter}.", provider=self.name, model=self.model_id)
        return await super().complete(request)


def _run(tmp_path, sim_inputs, tag, every, combiner="auto"):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name=tag, prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
        output_dir=str(tmp_path / tag), cache=str(tmp_path / f"{tag}.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, judge={"combiner": combiner}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
    return Audit(cfg, target=target, judge=SometimesTextJudge(every)).run()


def _night(tmp_path, sim_inputs, tag, every, seed):
    """A night of audit "n" in ``tmp_path/out`` (its own cache ``tag``.sqlite, seed ``seed``): a
    chatbot stereotyping its female users, judged by :class:`SometimesTextJudge` (``every``)."""
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="n", prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1, seed=seed,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / f"{tag}.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
    return Audit(cfg, target=target, judge=SometimesTextJudge(every)).run()


@pytest.mark.parametrize("every,combiner,warned", [(3, "min", True), (3, "auto", False), (None, "auto", False),
                                                   (3, "mean", False)])
def test_text_answers_under_min_are_said(tmp_path, sim_inputs, every, combiner, warned):
    res = _run(tmp_path, sim_inputs, f"t{every}{combiner}", every, combiner)
    s = res.summary
    found = [w for w in s["warnings"] if w.startswith(TEXT_UNDER_MIN_PREFIX)]
    assert bool(found) is warned
    if warned:
        n_sampled = s["judge_methods"].get("sampled", 0)
        assert s["judge_methods"].get("text", 0) == 0  # (never read as text any more)
        assert n_sampled > 0 and found[0].startswith(f"{TEXT_UNDER_MIN_PREFIX}{n_sampled} of {2 * s['n_pairs_total']}")
        assert f"({n_sampled} estimated by sampling)" in found[0]
        # the effect it warns about: the text answers push the min-combined rating above the soft one
        assert res.overall.iloc[0]["net_rating_min"] > res.overall.iloc[0]["net_rating_mean"]


class TextAndBlankJudge(SometimesTextJudge):
    """Every 3rd stereotype answer as text, every 2nd of the rest with no probability on any
    option (review finding: those zero-mass log-probability answers were subtracted from the
    text answers read, and the warning vanished)."""

    async def complete(self, request: ChatRequest) -> ChatResult:
        text = request.messages[-1].content
        if "harmful stereotype" in text and request.options and (self.n + 1) % 3 and (self.n + 1) % 2 == 0:
            self.n += 1
            return ChatResult(text="", option_probs={"A": 0.0, "B": 0.0, "C": 0.0}, provider=self.name,
                              model=self.model_id)
        return await super().complete(request)


def test_zero_mass_answers_do_not_hide_the_text_answers(tmp_path, sim_inputs):
    names, prompts = sim_inputs(30)
    cfg = AuditConfig.model_validate(dict(
        name="mix", prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
        output_dir=str(tmp_path / "mix"), cache=str(tmp_path / "mix.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, judge={"combiner": "min"}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
    res = Audit(cfg, target=target, judge=TextAndBlankJudge(3)).run()
    d = res.summary["diagnostics"]["stereotype"]
    assert d["unparseable"] > 0 or d["unusable"] > 0
    assert d["methods"]["sampled"] > 0 and d["text_read"] == 0
    assert any(w.startswith(TEXT_UNDER_MIN_PREFIX) for w in res.summary["warnings"])


@pytest.mark.parametrize("spool", [False, True])
@pytest.mark.parametrize("every,combiner,used", [(1, "auto", "mean"), (3, "auto", "min+mean"), (None, "auto", "min"),
                                                  (1, "min", "min")])
def test_auto_uses_mean_when_most_answers_came_without_log_probabilities(tmp_path, sim_inputs, spool, every,
                                                                        combiner, used):
    """Review finding: an LMRA whose provider supports log-probabilities but whose endpoint
    answered every stereotype question as text kept 'min' under 'auto' (12 % of the pairs
    invalid, the rating off by +8 %); 'auto' means 'mean' for such answers. A third of the
    answers without log-probabilities gives 'min+mean' (statistics review: 'min' for every pair
    put the rating 35 % low), with its own note and not the warning of 'min'; an explicit 'min'
    is kept."""
    from lmra.audit.finish import AUTO_MEAN_PREFIX, AUTO_MIN_MEAN_PREFIX

    names, prompts = sim_inputs(20)
    tag = f"a{every}{combiner}{spool}"
    cfg = AuditConfig.model_validate(dict(
        name=tag, prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
        output_dir=str(tmp_path / tag), cache=str(tmp_path / f"{tag}.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, judge={"combiner": combiner}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
    audit = Audit(cfg, target=target, judge=SometimesTextJudge(every))
    audit.spool_min_pairs = 0 if spool else 10**9
    s = audit.run().summary
    assert s["combiner"] == used
    notes = [w for w in s["warnings"] if w.startswith(AUTO_MEAN_PREFIX)]
    assert bool(notes) is (used == "mean")
    if notes:
        assert notes[0].startswith(f"{AUTO_MEAN_PREFIX}{2 * s['n_pairs_total']} of {2 * s['n_pairs_total']} rated")
    mixed = [w for w in s["warnings"] if w.startswith(AUTO_MIN_MEAN_PREFIX)]
    assert bool(mixed) is (used == "min+mean")
    if mixed:
        n = s["judge_methods"]["sampled"]
        assert 0 < n <= s["n_pairs_total"] and mixed[0].startswith(f"{AUTO_MIN_MEAN_PREFIX}{n} of {2 * s['n_pairs_total']}")
    assert any(w.startswith(TEXT_UNDER_MIN_PREFIX) for w in s["warnings"]) is (combiner == "min")


@pytest.mark.parametrize("spool", [False, True])
def test_auto_scores_each_pair_as_its_answers_came(tmp_path, sim_inputs, spool):
    """Statistics review: with part of the answers sampled (no log-probabilities), 'auto' kept
    'min' for every pair, so the sampled ones went through the biased minimum of two sample
    frequencies. Under 'min+mean' a pair read from log-probabilities in both orders keeps its
    'min' score and a pair with a sampled order gets its 'mean' score, in ratings.parquet and in
    the tables; the headline is nearer the judge's 0.7 than 'min' for every pair."""
    from lmra.pairstore import read_pairs

    names, prompts = sim_inputs(40)
    tag = f"mix{spool}"
    cfg = AuditConfig.model_validate(dict(
        name=tag, prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
        output_dir=str(tmp_path / tag), cache=str(tmp_path / f"{tag}.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
    audit = Audit(cfg, target=target, judge=SometimesTextJudge(3))
    audit.spool_min_pairs = 0 if spool else 10**9
    res = audit.run()
    assert res.summary["combiner"] == "min+mean"
    pairs = read_pairs(res.run_dir / "ratings.parquet")
    exact = [o1["method"] == "logprobs" and o2["method"] == "logprobs" for o1, o2 in zip(pairs["order1"], pairs["order2"])]
    assert 0 < sum(exact) < len(exact)
    for e, h, h_min, h_mean in zip(exact, pairs["h"], pairs["h_min"], pairs["h_mean"]):
        assert h == (h_min if e else h_mean)
    row = res.overall.iloc[0]
    assert row["net_rating"] == pytest.approx(pairs["h"].mean())
    assert abs(row["net_rating"] - 0.7) < abs(row["net_rating_min"] - 0.7)


def test_the_auto_mean_note_counts_the_answers_the_diagnostics_count(tmp_path, sim_inputs):
    """Break-it finding: placebo pairs were counted (27 of 40 in the note, 22 of 32 in the
    diagnostics), so they could decide the switch."""
    from lmra.audit.finish import AUTO_MEAN_PREFIX

    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="pl", prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
        output_dir=str(tmp_path / "pl"), cache=str(tmp_path / "pl.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, placebo={"share": 0.5}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
    s = Audit(cfg, target=target, judge=SometimesTextJudge(1)).run().summary
    methods = s["judge_methods"]
    [note] = [w for w in s["warnings"] if w.startswith(AUTO_MEAN_PREFIX)]
    assert note.startswith(f"{AUTO_MEAN_PREFIX}{methods.get('sampled', 0)} of {sum(methods.values())} rated")


def test_answers_without_log_probabilities_are_sampled_so_the_mean_is_not_inflated(tmp_path, sim_inputs):
    """Statistics review: a log-probability LMRA answering 30 % of its questions without them had
    each such answer read as its greedy letter (probability 1 on it): for a judge putting 0.7 on
    the stereotype, 'mean' then averages 1.0 for those orders — 0.7 + 0.3 × 0.3 = 0.79 in
    expectation instead of 0.70 (+13 %; +60 % under 'min' in the review's simulation). Sampled
    (5 draws from the same probabilities), such an answer is 0.7 in expectation."""
    def net(tag, every):
        names, prompts = sim_inputs(40)
        cfg = AuditConfig.model_validate(dict(
            name=tag, prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
            output_dir=str(tmp_path / tag), cache=str(tmp_path / f"{tag}.sqlite"), judge_check={"enabled": False},
            filter={"lmra": False}, refusal={"enabled": False}, judge={"combiner": "mean"}))
        target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
        res = Audit(cfg, target=target, judge=SometimesTextJudge(every)).run()
        return res.overall.iloc[0]["net_rating"], res.summary["judge_methods"]

    exact, m0 = net("exact", None)
    degraded, m3 = net("degraded", 3)
    assert exact == pytest.approx(0.7) and set(m0) == {"logprobs"}
    assert m3["sampled"] > 0.25 * sum(m3.values())  # a third of the answers came without log-probabilities
    assert abs(degraded - exact) < 0.05, (degraded, exact)  # read as text it was ≈ 0.79


def test_a_pair_with_one_order_sampled_is_a_sampled_pair(tmp_path, sim_inputs):
    """Fresh-user finding: the per-pair ``method`` took order 1's, so a pair whose second order
    came without log-probabilities (and was sampled) read ``logprobs`` — 18 of 35 such pairs.
    It is ``logprobs`` only when both orders came with them; the yes/no questions alike."""
    import json

    import pandas as pd

    from lmra.judge.options import method_of

    assert method_of("logprobs", "logprobs") == "logprobs"
    assert method_of("logprobs", "sampled") == method_of("sampled", "logprobs") == "sampled"
    assert method_of("sampled", "text") == method_of("text", "logprobs") == "text"
    assert method_of(None, "logprobs") is None and method_of("logprobs", "odd") == "odd"

    res = _run(tmp_path, sim_inputs, "mixed", every=3)
    df = pd.read_parquet(res.run_dir / "ratings.parquet")
    for o in ("order1", "order2"):  # each order's own answer (JSON), its method
        df[o] = df[o].map(lambda text: json.loads(text)["method"])
    mixed = df[df["order1"] != df["order2"]]
    assert len(mixed) >= 3  # every third stereotype question came without log-probabilities
    assert (mixed["method"] == "sampled").all(), mixed[["method", "order1", "order2"]]
    assert set(mixed["order1"]) == {"logprobs", "sampled"}  # either order may be the sampled one
    both = df[(df["order1"] == "logprobs") & (df["order2"] == "logprobs")]
    assert len(both) and (both["method"] == "logprobs").all()


def test_the_calls_line_says_answers_without_log_probabilities_were_sampled():
    """Fresh-user finding: the calls line said such answers were "parsed as text" while the
    warning above it said "estimated by sampling" (what is done since 2026-12-04)."""
    from lmra.report.console import call_counts_line

    line = call_counts_line({"fresh": 10, "degraded": 2, "no_logprobs": 6})
    assert "2 answers came without logprobs after every retry or in a batch output (not cached; their questions were estimated by " \
           "sampling instead, n_samples more calls each)" in line and "set logprobs = false" in line
    assert "parsed as text" not in line


def test_a_min_plus_mean_night_is_checked_against_a_min_baseline(tmp_path, sim_inputs, capsys):
    """Break-it round 2: one stereotype answer without log-probabilities in 800 made the night
    'min+mean', and `lmra check` / `audit --baseline` refused every 'min' baseline as not
    comparable (exit 2) — a lost answer stopped the nightly check. 'min+mean' is 'min' on every
    pair read from log-probabilities: the check runs, saying what differs."""
    from lmra.cli import main


    night = functools.partial(_night, tmp_path, sim_inputs)

    base, run = night("base", None, 1), night("run", 7, 2)
    assert base.summary["combiner"] == "min" and run.summary["combiner"] == "min+mean"
    capsys.readouterr()
    status = main(["check", str(run.run_dir), "--baseline", str(base.run_dir), "--allow-unvalidated-judge"])
    cap = capsys.readouterr()
    out = " ".join((cap.out + cap.err).split())
    assert status in (0, 3), out[-2000:]
    assert "not comparable" not in out
    assert "Note: the order combiner differs: baseline 'min', run 'min+mean' — the run scored its pairs with an " \
           "answer that came without log-probabilities with 'mean'" in out, out[-3000:]
    assert "this check compares both runs under 'mean'" in out and "warning: the order combiner" not in out
    # and the final line says so (fresh-user finding, s45: a task with 0 valid pairs in the run was "tested" under
    # 'mean', exit 0, the note only under the check's table)
    final = [ln for ln in (cap.out + cap.err).splitlines() if ln.startswith("exit status")][-1]
    assert final.endswith("; compared under 'mean', not the runs' headline combiner — an answer came without "
                          "log-probabilities (above)"), final
    # compared under 'mean': the H columns are both runs' per-prompt means of h_mean (break-it round 3: each run's
    # own combiner flagged an unchanged chatbot when its position preference set 'min' and 'mean' apart)
    from lmra.monitor import check_regression
    from lmra.runfolder import load_run

    result = check_regression(load_run(run.run_dir), load_run(base.run_dir))
    r = result.tests.set_index("task")
    for task, g in run.ratings.groupby("task"):
        assert r.loc[task, "h_run"] == pytest.approx(g["h_mean"].mean())
    assert result.notes and not [w for w in result.comparability if "combiner" in w]
    # a 'mean' night (most answers without log-probabilities) is still refused against a 'min' baseline
    mean_night = night("mean", 1, 3)
    assert mean_night.summary["combiner"] == "mean"
    assert main(["check", str(mean_night.run_dir), "--baseline", str(base.run_dir), "--allow-unvalidated-judge"]) == 2


@pytest.mark.parametrize("spool", [False, True])
def test_the_second_lmra_is_resolved_by_how_its_answers_came(tmp_path, sim_inputs, spool):
    """Break-it round 2: [judge2] kept 'min' for every pair with 40 % of its answers sampled (its
    net rating 11 % above an identical first LMRA's, no word, its combiner not recorded). It is
    resolved as the first LMRA is: 'min+mean' here, recorded, with a note; each of its pairs
    scored as its answers came."""
    from lmra.pairstore import read_pairs

    names, prompts = sim_inputs(40)
    tag = f"j2{spool}"
    cfg = AuditConfig.model_validate(dict(
        name=tag, prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
        output_dir=str(tmp_path / tag), cache=str(tmp_path / f"{tag}.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, judge2={"provider": "llamacpp"}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: STEREO if g == "female" else "Here is a helpful answer.")
    second = SometimesTextJudge(3)
    second.model_id = "scripted-2"
    audit = Audit(cfg, target=target, judge=SometimesTextJudge(None), judge2=second)
    audit.spool_min_pairs = 0 if spool else 10**9
    res = audit.run()
    s = res.summary
    assert s["combiner"] == "min" and s["judge2_combiner"] == "min+mean"
    notes = [w for w in s["warnings"] if "rated answers of the second LMRA (judge2)" in w]
    assert len(notes) == 1 and notes[0].startswith("combiner 'auto' used 'min+mean': "), s["warnings"]
    pairs = read_pairs(res.run_dir / "ratings.parquet")
    exact = [o1["method"] == "logprobs" and o2["method"] == "logprobs"
             for o1, o2 in zip(pairs["judge2_order1"], pairs["judge2_order2"])]
    assert 0 < sum(exact) < len(exact)
    for e, h, h_min, h_mean in zip(exact, pairs["judge2_h"], pairs["judge2_h_min"], pairs["judge2_h_mean"]):
        assert h == (h_min if e else h_mean)


def test_baseline_last_passes_over_a_mean_night(tmp_path, sim_inputs, capsys):
    """Known, not done in round 32: a night whose 'auto' combiner turned to 'mean' (most answers
    came without log-probabilities) was refused against its 'min' baseline, and the next 'min'
    night's `--baseline last` picked that 'mean' night, so its check was refused too (exit 2): one
    glitch cost two nights' verdicts. 'last' takes the newest comparable night and notes the one
    it passed over; a 'mean' night's own 'last' is still the newest night (refused, saying why)."""
    from lmra.cli import main
    from lmra.history import History, history_path
    from lmra.runfolder import load_run

    out = tmp_path / "out"

    night = functools.partial(_night, tmp_path, sim_inputs)

    first, glitch, third = night("a", None, 1), night("b", 1, 2), night("c", None, 3)
    assert [r.summary["combiner"] for r in (first, glitch, third)] == ["min", "mean", "min"]
    capsys.readouterr()
    status = main(["check", str(third.run_dir), "--baseline", "last", "--allow-unvalidated-judge", "--json"])
    cap = capsys.readouterr()
    assert status in (0, 3), (cap.out + cap.err)[-2000:]
    import json

    doc = json.loads(cap.out)
    assert doc["baseline_id"] == first.run_dir.name
    assert doc["notes"] == [f"'--baseline last' passed over {glitch.run_dir.name}: its order combiner is 'mean', "
                            "not comparable with this run's 'min'"]
    assert main(["check", str(third.run_dir), "--baseline", "last", "--allow-unvalidated-judge"]) in (0, 3)
    said = " ".join(capsys.readouterr().out.split())
    assert f"Note: '--baseline last' passed over {glitch.run_dir.name}: its order combiner is 'mean'" in said
    with History(history_path(out)) as h:
        # the glitch night itself: no earlier 'mean' night, so the newest night — refused, saying why
        base, notes = h.last_baseline(load_run(glitch.run_dir))
        assert base.run_id == first.run_dir.name and notes == []
    capsys.readouterr()
    # the task trend marks the night scored under another combiner (fresh-user finding, round 33)
    task = str(third.per_task["task"].iloc[0])
    assert main(["history", "--reports-dir", str(out), "--task", task]) == 0
    trend = " ".join(capsys.readouterr().out.split())
    assert f"{glitch.run_dir.name} combiner mean" in trend and f"{third.run_dir.name} combiner" not in trend
    assert "'combiner X': that night's pairs were scored under another order combiner than the other nights' ('min')" \
        in trend
    assert main(["check", str(glitch.run_dir), "--baseline", "last", "--allow-unvalidated-judge"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    # the advice fits the cause (fresh-user finding: "pin one made with the run's settings" for unchanged settings)
    assert "because most of its LMRA answers came without log-probabilities (combiner 'auto')" in err, err
    assert "do not pin that night" in err and "pin one made with the run's settings" not in err


def test_two_min_plus_mean_nights_are_compared_under_mean(tmp_path, sim_inputs):
    """Break-it finding (round 33): two 'min+mean' nights — 25 % and 1 % of their answers without
    log-probabilities — were compared on their own headlines, each a mix of 'min' and 'mean' pairs
    in its own proportion; under a position preference 'min' and 'mean' differ, so an unchanged
    chatbot was flagged (+0.043 built in, exit 3). Such a check compares both runs under 'mean',
    as a 'min' against a 'min+mean' night is, and says so."""
    from lmra.monitor import check_regression
    from lmra.runfolder import load_run


    night = functools.partial(_night, tmp_path, sim_inputs)

    base, run = night("base", 3, 1), night("run", 9, 2)
    assert base.summary["combiner"] == run.summary["combiner"] == "min+mean"
    result = check_regression(load_run(run.run_dir), load_run(base.run_dir))
    r = result.tests.set_index("task")
    for res, col in ((run, "h_run"), (base, "h_base")):
        for task, g in res.ratings.groupby("task"):
            assert r.loc[task, col] == pytest.approx(g["h_mean"].mean())
    assert result.notes and result.notes[0].startswith("both runs scored their pairs with an answer that came without "
                                                       "log-probabilities with 'mean'")
    assert "this check compares both runs under 'mean'" in result.notes[0]


def test_the_lost_log_probabilities_advice_is_for_auto_nights_only():
    """Break-it round 4: a night whose config turned log-probabilities off (`logprobs = false`), or a
    baseline whose combiner was 'calibrated', was told "the settings did not change, the LMRA's
    endpoint did". The advice is for a night that 'auto' turned to 'mean' although it asked for
    log-probabilities (its recorded warning), against a 'min' or 'min+mean' night."""
    from types import SimpleNamespace

    from lmra.audit.finish import AUTO_MEAN_PREFIX
    from lmra.monitor import _auto_mean

    warned = {"warnings": [AUTO_MEAN_PREFIX + "30 of 42 rated LMRA answers …"]}
    night = lambda judge, summary, combiner="mean": SimpleNamespace(  # noqa: E731
        combiner=combiner, config={"judge": judge}, summary=summary)
    assert _auto_mean(night({"combiner": "auto"}, warned))
    assert _auto_mean(night({}, warned))  # (auto by default)
    assert not _auto_mean(night({"combiner": "auto", "logprobs": False}, warned))
    assert not _auto_mean(night({"combiner": "auto"}, {"warnings": []}))  # no lost answers recorded
    assert not _auto_mean(night({"combiner": "mean"}, warned))
    assert not _auto_mean(night({"combiner": "auto"}, warned, combiner="min"))

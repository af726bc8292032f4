"""Judge validation on canary pairs (issue 10, item 1): scripted judges with known flaws fail
on the right criterion, a good judge with a realistic position preference passes, bad
canary files are input errors, and the verdict reaches the audit, the CLI and the exports."""

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

from doubles import ScriptedJudge
from lmra.config import AuditConfig, JudgeCheckConfig, JudgeConfig
from lmra.errors import LmraInputError
from lmra.judge.calibration import rescore
from lmra.judge_check import evaluate, load_canaries, rate_canaries, select_canaries
from lmra.resources import resolve_resource
from lmra.templates import load_template

SHIPPED = load_canaries("prompts/canaries/canaries.jsonl")
#: stereotyped response → the group it stereotypes: the stereotyped response is response_a of
#: every stereotype canary; it goes to its target (forward) or to the other group (reverse)
TARGET = {c.response_a: (c.group_a if c.expected == "forward" else c.group_b) for c in SHIPPED
          if c.kind == "stereotype"}
STEREOTYPED = set(TARGET)


def good(r1, r2, group_a, group_b):
    """Reads the question as a careful LMRA does: a planted stereotype is harmful when it goes
    to the group it stereotypes — option A gives Response 1 to group_a and Response 2 to group_b
    — and leaves mass on C (0.80 / 0.02 / 0.18 as in the issue)."""
    for stereo, goes_to_under_a in ((r1, group_a), (r2, group_b)):
        if stereo in TARGET:
            harmful_a = TARGET[stereo] == goes_to_under_a
            return {"A": 0.80, "B": 0.02, "C": 0.18} if harmful_a else {"A": 0.02, "B": 0.80, "C": 0.18}
    return {"A": 0.01, "B": 0.01, "C": 0.98}


def test_every_stereotype_canary_is_labelled_as_a_careful_judge_reads_it():
    """New-user finding: every '-rev' canary swapped both the groups and the responses, so the
    target still got the stereotype (a forward pair) labelled 'reverse': a judge answering the
    template's question literally scored sensitivity 0.50 and failed validation. Read
    literally: option A (the actual assignment) is harmful iff response_a, the stereotyped one,
    goes to the group it stereotypes — the target named in the builder's scenario."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_canaries",
                                                  resolve_resource("prompts/canaries/build_canaries.py", "prompts"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    target_of = {build.t(s["stereo"]): s["target"] for dim in build.DIMENSIONS for s in build.STEREOTYPE[dim]}
    st = [c for c in SHIPPED if c.kind == "stereotype"]
    assert len(st) == 120 and all(c.response_a in target_of for c in st)
    for c in st:  # forward iff the actual assignment gives the stereotype to its target
        assert c.expected == ("forward" if c.group_a == target_of[c.response_a] else "reverse"), c.id
    assert sum(c.expected == "reverse" for c in st) == 60


def verdict_of(judge, *, per_kind=8, combiner="auto", dims=("gender", "race", "profile")):
    check = JudgeCheckConfig(per_kind=per_kind)
    jcfg = JudgeConfig(combiner=combiner)
    canaries = select_canaries(SHIPPED, list(dims), per_kind, seed=0)
    rows = asyncio.run(rate_canaries(judge, jcfg, load_template("harmful_stereotype", "judge"), canaries,
                                     asyncio.Semaphore(8)))
    rows, _ = rescore(rows, "min" if judge.supports_logprobs else "mean")
    return evaluate(rows, check, jcfg)


def failed(v):
    return {k for k, c in v["criteria"].items() if not c["passed"]}


def test_shipped_canary_set_covers_every_dimension_and_kind():
    counts = pd.DataFrame([c.model_dump() for c in SHIPPED]).groupby(["dimension", "kind"]).size()
    assert len(counts) == 15 and counts.min() >= 40
    st = [c for c in SHIPPED if c.kind == "stereotype"]
    fwd = sum(c.expected == "forward" for c in st)
    assert 0.3 < fwd / len(st) < 0.7  # both directions
    assert all(c.response_a == c.response_b for c in SHIPPED if c.kind == "identical")


def test_good_judge_with_a_realistic_position_preference_passes():
    v = verdict_of(ScriptedJudge(good, position_logit=0.5))
    assert v["passed"], v["reasons"]
    assert v["sensitivity"] == 1.0 and v["false_positive_rate"] == 0.0
    assert v["position_logit"] == pytest.approx(0.5, abs=1e-6)


def test_position_only_judge_fails_on_position():
    v = verdict_of(ScriptedJudge(lambda r1, r2: {"A": 0.90, "B": 0.05, "C": 0.05}))
    assert "position_logit" in failed(v) and v["position_logit"] == pytest.approx(2.89, abs=0.01)
    assert not v["passed"]


def test_always_c_judge_fails_on_sensitivity_and_has_no_position_logit():
    """Probability 1 on C in every answer: nothing says which response it would prefer, so the
    position logit is not measured (it read 0.000, passed — fresh-user finding), not "none"."""
    import math

    v = verdict_of(ScriptedJudge(lambda r1, r2: {"C": 1.0}))
    assert failed(v) == {"sensitivity", "position_logit"} and v["sensitivity"] == 0.0
    assert math.isnan(v["position_logit"])
    assert "position logit could not be measured (no usable canary answer)" in v["reasons"]
    # the slightest probability on A or B is information: a near-certain C judge is measured
    v = verdict_of(ScriptedJudge(lambda r1, r2: {"A": 1e-4, "B": 1e-4, "C": 1 - 2e-4}))
    assert "position_logit" not in failed(v) and abs(v["position_logit"]) < 0.01


def test_always_a_or_b_judge_fails_on_false_positives():
    v = verdict_of(ScriptedJudge(lambda r1, r2: {"A": 0.5, "B": 0.5}))
    assert "false_positive_rate" in failed(v) and v["false_positive_rate"] == 1.0
    assert "position_logit" not in failed(v)


def test_sampled_judge_uses_mean_and_passes_when_good():
    v = verdict_of(ScriptedJudge(good, supports_logprobs=False, position_logit=0.3), per_kind=4)
    assert v["passed"], v["reasons"]


def test_a_canary_set_without_stereotype_canaries_fails_on_sensitivity_without_a_crash():
    """Break-it finding: a canary file holding the four harmless kinds only crashed the check
    (TypeError: the empty sign map was of objects). Its sensitivity is not measured: NaN, and
    the criterion fails saying why, as for a set without harmless canaries."""
    import math

    check, jcfg = JudgeCheckConfig(per_kind=2), JudgeConfig()
    canaries = [c for c in select_canaries(SHIPPED, ["gender"], 2, seed=0) if c.kind != "stereotype"]
    rows = asyncio.run(rate_canaries(ScriptedJudge(good), jcfg, load_template("harmful_stereotype", "judge"),
                                     canaries, asyncio.Semaphore(4)))
    rows, _ = rescore(rows, "min")
    v = evaluate(rows, check, jcfg)
    assert math.isnan(v["sensitivity"]) and not v["passed"] and "sensitivity" in failed(v)
    assert "sensitivity could not be measured (no stereotype canary in the set)" in v["reasons"]
    assert v["false_positive_rate"] == 0.0


def test_validate_warns_that_a_canary_set_without_stereotype_canaries_cannot_pass(tmp_path, capsys):
    """Verification finding: `lmra validate` called such a config valid; the night then failed its
    judge check (exit 5). validate (and the audit, before any call) say so."""
    from lmra.cli import main

    harmless = tmp_path / "harmless.jsonl"
    harmless.write_text("".join(json.dumps(c.model_dump()) + "\n" for c in SHIPPED
                                if c.kind != "stereotype" and c.dimension == "gender"), encoding="utf-8")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'name = "c"\ntasks = ["write a story"]\nprompts_per_task = 1\noutput_dir = "{tmp_path / "out"}"\n'
                   f'[judge_check]\ncanaries = "{harmless}"\nper_kind = 2\n', encoding="utf-8")
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: the judge check's canaries ({harmless}) hold no stereotype canary for the audited dimensions: " \
           "its sensitivity cannot be measured, so the check fails" in err
    cfg.write_text(cfg.read_text().replace(f'canaries = "{harmless}"\n', ""), encoding="utf-8")  # the shipped set
    assert main(["validate", str(cfg)]) == 0
    assert "hold no stereotype canary" not in capsys.readouterr().err


def test_failed_calls_count_as_misses_not_passes():
    v = verdict_of(ScriptedJudge(good, fail_on=lambda text: True), per_kind=2)
    assert not v["passed"] and v["n_failed"] == v["n_canaries"]
    assert "sensitivity could not be measured" not in " ".join(v["reasons"])  # failed calls are misses
    # said first, with what to do (ops trial, s49: an outage during the check led with "false-positive rate 100%")
    assert v["failed_calls_explain"] and v["reasons"][0].startswith(
        f"{v['n_canaries']} of {v['n_canaries']} canary calls failed") and "re-run the same command" in v["reasons"][0]


def test_failed_canary_calls_lead_the_reasons_only_when_they_explain_the_failure():
    """A good judge some of whose canary calls failed fails the check (failed calls are misses) and
    the reasons lead with the failed calls and the advice to re-run; a judge that rates badly is
    not excused by one failed call."""
    import zlib

    flaky = ScriptedJudge(good, fail_on=lambda text: zlib.crc32(text.encode()) % 3 == 0)
    v = verdict_of(flaky, per_kind=6)
    assert not v["passed"] and 0 < v["n_failed"] < v["n_canaries"]
    assert v["failed_calls_explain"] and v["reasons"][0].startswith(f"{v['n_failed']} of {v['n_canaries']} canary "
                                                                    "calls failed (")
    assert "the canaries it answered pass" in v["reasons"][0]
    blind = ScriptedJudge(lambda r1, r2: {"A": 0.1, "B": 0.1, "C": 0.8}, fail_on=lambda text: zlib.crc32(text.encode()) % 7 == 0)
    w = verdict_of(blind, per_kind=6)  # never sees a stereotype: its sensitivity fails over the answered canaries too
    assert not w["passed"] and w["n_failed"] > 0 and not w["failed_calls_explain"]
    assert not any("canary calls failed" in r for r in w["reasons"])


def test_bad_canary_file_names_file_line_and_field(tmp_path):
    good_line = json.dumps(SHIPPED[0].model_dump())
    bad = dict(SHIPPED[0].model_dump(), kind="stereotype", expected="none")
    f = tmp_path / "c.jsonl"
    f.write_text(good_line + "\n" + json.dumps(bad | {"id": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(LmraInputError) as e:
        load_canaries(f)
    assert e.value.line == 2 and e.value.field == "expected"
    f.write_text(good_line + "\n" + json.dumps({k: v for k, v in bad.items() if k != "prompt"}) + "\n")
    with pytest.raises(LmraInputError) as e:
        load_canaries(f)
    assert e.value.line == 2 and e.value.field == "prompt"
    f.write_text(good_line + "\n" + good_line + "\n")
    with pytest.raises(LmraInputError, match="duplicate"):
        load_canaries(f)
    # break-it findings: one group twice, and a stereotype canary with two identical responses
    stereo = next(c for c in SHIPPED if c.kind == "stereotype").model_dump()
    same = next(c for c in SHIPPED if c.kind == "identical").model_dump()
    for row, field, said in ((stereo | {"group_b": stereo["group_a"].upper()}, "group_b", "is group_a too"),
                             (stereo | {"response_b": stereo["response_a"]}, "response_b", "two different responses"),
                             (same | {"response_b": same["response_a"] + " More."}, "response_b",
                              "two identical responses")):
        f.write_text(good_line + "\n" + json.dumps(row | {"id": "x"}) + "\n", encoding="utf-8")
        with pytest.raises(LmraInputError, match=said) as e:
            load_canaries(f)
        assert e.value.line == 2 and e.value.field == field


def test_canaries_are_found_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_resource("prompts/canaries/canaries.jsonl", "prompts").is_file()
    assert AuditConfig().judge_check.enabled and AuditConfig().judge_check.gate


def test_judge_blaming_response_1_on_some_harmless_pairs_fails_under_any_combiner():
    """Found by trying to break it: a judge that answers A (blames Response 1) in both orders
    on 30% of harmless pairs makes those pairs invalid or 'no stereotype' under min — it must
    still fail the false-positive rate."""
    harmless = {c.response_a for c in SHIPPED if c.kind in ("benign", "identical", "quality")}
    blamed = set(sorted(harmless)[::3])  # a third of them, deterministically

    def blames(r1, r2, group_a, group_b):
        if r1 in blamed or r2 in blamed:
            return {"A": 0.97, "C": 0.03}
        return good(r1, r2, group_a, group_b)

    for combiner in ("min", "mean"):
        v = verdict_of(ScriptedJudge(blames), per_kind=0, combiner=combiner, dims=("gender",))
        assert "false_positive_rate" in failed(v) and v["false_positive_rate"] > 0.1, combiner


def test_duplicate_canary_ids_across_files_are_refused(tmp_path):
    from lmra.judge_check import load_canary_set

    f = tmp_path / "mine.jsonl"
    f.write_text(json.dumps(SHIPPED[0].model_dump() | {"expected": "reverse"}) + "\n", encoding="utf-8")
    with pytest.raises(LmraInputError, match="in both"):
        load_canary_set(["prompts/canaries/canaries.jsonl", str(f)])


def test_gate_off_needs_a_waiver_sentence():
    with pytest.raises(Exception, match="waiver"):
        AuditConfig.model_validate({"judge_check": {"gate": False}})
    assert not AuditConfig.model_validate({"judge_check": {"gate": False, "waiver": "demo"}}).judge_check.gate


def test_a_judge_without_probability_on_the_options_has_no_position_logit_to_pass():
    """Every answer unusable (no probability on A, B or C): the position logit is not measured —
    NaN and a failed criterion saying so — instead of b̂ = 0 passing as "no preference"."""
    import math

    v = verdict_of(ScriptedJudge(lambda r1, r2: {}), per_kind=2)
    assert v["valid_option_mass"] == 0.0 and math.isnan(v["position_logit"])
    assert {"position_logit", "valid_option_mass"} <= failed(v)
    assert "position logit could not be measured (no usable canary answer)" in v["reasons"]


def _judge_check_config(tmp_path, monkeypatch, make, judge_check: str) -> Path:
    """A config for ``lmra judge-check --config`` whose LMRA is ``make`` (a provider factory put
    in a module of its own) with the ``[judge_check]`` lines ``judge_check``; its path."""
    import sys
    import types

    name = f"lmra_test_judge_{tmp_path.name}"
    module = types.ModuleType(name)
    module.make = make
    monkeypatch.setitem(sys.modules, name, module)
    cfg = tmp_path / "audit.toml"
    cfg.write_text(f'cache = "{(tmp_path / "c.sqlite").as_posix()}"\n[judge]\nprovider = "{name}:make"\n'
                   f"[judge_check]\n{judge_check}\n", encoding="utf-8")
    return cfg


def test_lmra_judge_check_says_how_many_calls_it_plans_before_it_starts(tmp_path, monkeypatch, capsys):
    """New-user finding: ``lmra judge-check`` on the embedded model ran 17+ minutes (600 canaries)
    without a word of how many calls it would make; with ``--json`` the line goes to stderr."""
    from lmra import cli

    cfg = _judge_check_config(tmp_path, monkeypatch, lambda cfg: ScriptedJudge(lambda r1, r2: {"C": 1.0}),
                              "per_kind = 2")
    assert cli.main(["judge-check", "--config", str(cfg), "--json"]) in (0, 5)
    out, err = capsys.readouterr()
    n = json.loads(out)["n_canaries"]
    assert f"Judge check: {n} canary pairs in both orders = up to {2 * n} LMRA calls" in " ".join(err.split())


def test_canaries_share_the_places_with_other_waiting_calls_and_stop_when_told():
    """The canaries take places in the calls' semaphore one at a time: a call that starts
    waiting once the check holds every place gets the next free one (not after every canary),
    and once ``stop`` raises no canary call starts, while the ones in flight settle first."""
    class Slow(ScriptedJudge):
        async def complete(self, request):
            await asyncio.sleep(0.01)
            self.n_calls += 1
            return await super().complete(request)

    judge = Slow(good)
    judge.n_calls = 0
    canaries = select_canaries(SHIPPED, ["gender"], 8, seed=0)
    assert len(canaries) >= 30
    jcfg = JudgeConfig()
    tpl = load_template("harmful_stereotype", "judge")

    async def main():
        sem = asyncio.Semaphore(2)
        stopped = []

        def stop():
            if stopped:
                raise RuntimeError("the run failed")

        async def other_call():  # e.g. the audit's first target call, waiting behind the check
            await asyncio.sleep(0)
            async with sem:
                served_after = judge.n_calls
                stopped.append(True)  # it fails: the run stops
                return served_after

        check = asyncio.ensure_future(rate_canaries(judge, jcfg, tpl, canaries, sem, stop=stop))
        served_after = await other_call()
        with pytest.raises(RuntimeError, match="the run failed"):
            await check
        return served_after, sem._value

    served_after, free = asyncio.run(main())
    assert served_after <= 2 * 2  # at most the two canaries holding the places (2 calls each) went first
    assert judge.n_calls <= 2 * 3  # and the ones holding places when it failed: no new canary started
    assert free == 2  # every place given back


def test_a_failed_criterion_says_how_many_misses_were_not_rated_at_all():
    """New-user finding: a judge check failed at 75% sensitivity because one of 4 planted
    stereotypes got a declined answer, not a wrong rating, and the reason did not say so."""
    import re

    class Declining(ScriptedJudge):  # every 4th answer: no probability on any option
        n = 0

        def _probs(self, request):
            type(self).n += 1
            return {"A": 0.0, "B": 0.0, "C": 0.0} if type(self).n % 4 == 0 else super()._probs(request)

    v = verdict_of(Declining(good), per_kind=4)
    sens = next(r for r in v["reasons"] if r.startswith("detected"))
    m = re.search(r"of the (\d+) missed, (\d+) unusable or declined answers? \(not rated wrongly\)", sens)
    assert m and int(m.group(2)) == int(m.group(1)) > 0  # every miss here was an unrated canary
    # a judge that rates wrongly (always C) misses as many, none of them unrated: not said
    v = verdict_of(ScriptedJudge(lambda r1, r2: {"C": 1.0}), per_kind=4)
    assert not any("not rated wrongly" in r for r in v["reasons"])


def test_the_canary_progress_says_which_canaries_failed():
    """Fresh-user finding: the judge-check bar of an audit showed 200/200 and no "(18 failed)"
    while 18 canaries' calls had failed (README: a bar whose calls failed says how many).
    ``rate_canaries`` tells its progress callback, per canary, whether it failed."""
    from lmra.providers.base import ProviderError

    class FailsOnStereotypes(ScriptedJudge):
        async def complete(self, request):
            if any(s in m.content for m in request.messages for s in STEREOTYPED):
                raise ProviderError("HTTP 500 (injected)", kind="http_500")
            return await super().complete(request)

    canaries = select_canaries(SHIPPED, ["gender"], 2, seed=0)
    seen: list[bool] = []
    rows = asyncio.run(rate_canaries(FailsOnStereotypes(good), JudgeConfig(), load_template("harmful_stereotype", "judge"),
                                     canaries, asyncio.Semaphore(4), progress=seen.append))
    assert len(seen) == len(canaries) == len(rows)
    assert sum(seen) == int(rows["failed"].sum()) == sum(c.kind == "stereotype" for c in canaries) > 0
    assert not all(seen)


def test_lmra_judge_check_says_a_criterion_it_could_not_measure_fails_as_not_measurable(tmp_path, monkeypatch,
                                                                                          capsys):
    """Fresh-user finding: with every canary answer unusable the table read "position logit — …
    FAIL" and "order consistency — … FAIL" with no word why a blank value fails. Such a row now
    says "FAIL (not measurable)", with a line saying what that means; a measured FAIL does not."""
    from lmra import cli

    monkeypatch.setenv("COLUMNS", "200")
    cfg = _judge_check_config(tmp_path, monkeypatch, lambda cfg: ScriptedJudge(lambda r1, r2: {}),  # nothing usable
                              "per_kind = 1")
    assert cli.main(["judge-check", "--config", str(cfg)]) == 5
    out = capsys.readouterr().out
    rows = {ln.split("│")[1].strip(): ln for ln in out.splitlines() if ln.count("│") >= 5}
    assert "FAIL (not measurable)" in rows["position logit"] and "—" in rows["position logit"], out
    assert "not measurable: the canary answers it needs were unusable" in " ".join(out.split())
    assert "(not measurable)" not in rows["sensitivity"] and "FAIL" in rows["sensitivity"]  # measured: 0%


def _flaky_judge(p_unusable: float, p_failed: float, seed: int):
    """A good LMRA (:func:`good`) whose answer to a canary is unusable (no option probability)
    with probability ``p_unusable`` and whose call fails with ``p_failed`` — drawn per response
    pair, so both orders of a canary share their fate."""
    import hashlib

    def draw(r1, r2, salt):
        key = "|".join(sorted((r1, r2))) + f"|{seed}|{salt}"
        return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 16 ** 8

    def verdict(r1, r2, group_a, group_b):
        return {} if draw(r1, r2, "u") < p_unusable else good(r1, r2, group_a, group_b)

    def fail_on(text):
        return False

    judge = ScriptedJudge(verdict)
    inner = judge.complete

    async def complete(request):
        body = request.messages[-1].content
        if p_failed and draw(body, "", "f") < p_failed:
            from lmra.providers.base import ProviderError

            raise ProviderError("simulated failure", kind="http_503")
        return await inner(request)

    judge.complete = complete
    return judge


@pytest.mark.parametrize("p_unusable, p_failed, seed", [(0.0, 0.0, 0), (0.05, 0.02, 1), (0.2, 0.0, 2), (0.35, 0.1, 3),
                                                        (0.6, 0.0, 4), (1.0, 0.0, 5), (0.0, 1.0, 6)])
def test_a_judge_check_stops_early_only_when_it_can_no_longer_pass(p_unusable, p_failed, seed):
    """Fresh-user finding: a judge whose every answer was unusable ran all 200 canary pairs (18 of
    the night's 20 minutes) before "Judge check FAILED". CheckFutility stops the check once the
    answers no combiner can rate (unusable) leave the sensitivity below its threshold or
    put the false-positive rate above its own, whatever the rest would answer. Simulated on
    the shipped canaries with injected unusable answers and failed calls at several rates: a
    stopped check's verdict fails, and so does the same judge's verdict on every canary (the
    stop changed no verdict); a check that was not stopped rated every canary, the same rows."""
    from lmra.judge_check import CheckFutility

    canaries = select_canaries(SHIPPED, ["gender", "race"], 10, seed=seed)
    check, jcfg = JudgeCheckConfig(), JudgeConfig(combiner="min")
    tpl = load_template("harmful_stereotype", "judge")

    def rated(futility):
        rows = asyncio.run(rate_canaries(_flaky_judge(p_unusable, p_failed, seed), jcfg, tpl, canaries,
                                         asyncio.Semaphore(4), futility=futility))
        return rescore(rows, "min")[0]

    every = rated(None)
    full = evaluate(every, check, jcfg)
    futility = CheckFutility(canaries, check)
    some = rated(futility)
    if futility.reason is None:
        assert len(some) == len(canaries) and evaluate(some, check, jcfg)["passed"] == full["passed"]
        assert sorted(some["id"]) == sorted(every["id"])
    else:
        assert len(some) < len(canaries)
        stopped = futility.stopped_words(len(some))
        partial = evaluate(some, check, jcfg, stopped=stopped)
        assert not full["passed"] and not partial["passed"]
        assert partial["reasons"][0] == stopped and partial["stopped_early"] == stopped
        assert stopped.startswith(f"stopped after {len(some)} of {len(canaries)} canary pairs (")
        # the criterion that stopped it fails on the canaries asked too
        crit = "sensitivity" if futility.reason.startswith("sensitivity") else "false_positive_rate"
        assert not partial["criteria"][crit]["passed"] and not full["criteria"][crit]["passed"]
    if p_unusable >= 0.6:  # a hopeless judge stops well before the end
        assert futility.reason is not None and len(some) <= len(canaries) // 2
    if p_unusable == 0:  # failed calls never stop it (the endpoint breaker's to name), though they fail it
        assert futility.reason is None and (p_failed < 1.0 or not full["passed"])
    if p_unusable == 0 and p_failed == 0:  # a judge that answers is never stopped
        assert futility.reason is None and full["passed"]


@pytest.mark.parametrize("stop_when_failed", [True, False])
def test_an_audit_whose_lmra_cannot_pass_its_check_stops_asking_canaries(tmp_path, sim_inputs, stop_when_failed):
    """The audit's judge check with an LMRA that gives no usable answer: it stops after a few
    canaries (the verdict FAILED, its first reason saying where and why it stopped, the progress
    bar's total brought down to the canaries asked); ``stop_when_failed = false`` rates them all."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedTarget
    from lmra import Audit
    from lmra.config import AuditConfig
    from lmra.progress import Progress

    names, prompts = sim_inputs(4)
    cfg = AuditConfig.model_validate(dict(
        name="mute", prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / "out"),
        cache=str(tmp_path / "c.sqlite"), filter={"lmra": False}, refusal={"enabled": False},
        judge_check={"enabled": True, "dimensions": ["gender"], "gate": False, "waiver": "test",
                     "stop_when_failed": stop_when_failed}))
    planned = len(select_canaries(SHIPPED, ["gender"], 0))
    starts = []
    progress = Progress(start=lambda stage, total: starts.append((stage, total)))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Hi."), judge=ScriptedJudge(lambda *a: {}),
                progress=progress).run()
    status = res.summary["judge_status"]
    assert status["status"] == "failed"
    # the manifest says the failure was waived too (fresh-user finding: it read as an un-waived failure)
    assert res.manifest["judge_status"] == "failed" and res.manifest["judge_waived"] is True
    check_starts = [t for s, t in starts if s == "judge-check"]
    if stop_when_failed:
        assert status["n_canaries"] < planned // 4, status["n_canaries"]
        assert status["reasons"][0].startswith(f"canaries: stopped after {status['n_canaries']} of {planned} canary pairs (")
        assert check_starts == [planned, status["n_canaries"]]
    else:
        assert status["n_canaries"] == planned and check_starts == [planned]
        assert not any("stopped after" in r for r in status["reasons"])


def test_a_criterion_whose_canaries_a_stopped_check_never_asked_is_marked_not_asked(capsys, monkeypatch, tmp_path):
    """Break-it finding: a check that stopped before any no-stereotype canary showed the
    false-positive rate as "FAIL (not measurable)" — a failure the full check would not have.
    Such a criterion is marked ``not_asked`` (JSON) and "not asked (stopped)" (console); the
    verdict fails by the stop either way."""
    from lmra import cli
    from lmra.judge_check import CheckFutility

    stereo = [c for c in select_canaries(SHIPPED, ["gender"], 0) if c.kind == "stereotype"]
    harmless = [c for c in select_canaries(SHIPPED, ["gender"], 0) if c.kind in ("benign", "identical")]
    canaries = stereo + harmless  # every stereotype canary first: the stop comes before any harmless one
    check = JudgeCheckConfig()
    futility = CheckFutility(canaries, check)
    rows = asyncio.run(rate_canaries(ScriptedJudge(lambda *a: {}), JudgeConfig(combiner="min"),
                                     load_template("harmful_stereotype", "judge"), canaries, asyncio.Semaphore(2),
                                     futility=futility))
    assert futility.reason is not None and set(rows["kind"]) == {"stereotype"}
    v = evaluate(rescore(rows, "min")[0], check, JudgeConfig(combiner="min"), stopped=futility.stopped_words(len(rows)))
    assert v["criteria"]["false_positive_rate"]["not_asked"] and not v["criteria"]["sensitivity"]["not_asked"]
    assert not v["passed"]
    full = evaluate(rescore(rows, "min")[0], check, JudgeConfig(combiner="min"))  # not stopped: no such mark
    assert not any(c["not_asked"] for c in full["criteria"].values())
    # the console of lmra judge-check (shipped order, all unusable): the early line says it stopped
    monkeypatch.setenv("COLUMNS", "250")
    cfg = _judge_check_config(tmp_path, monkeypatch, lambda cfg: ScriptedJudge(lambda r1, r2: {}),
                              'dimensions = ["gender"]')
    assert cli.main(["judge-check", "--config", str(cfg)]) == 5
    out = " ".join(capsys.readouterr().out.split())
    assert "Judge check FAILED: stopped after" in out and "it could no longer pass" in out


def make_target(cfg):
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedTarget

    return ScriptedTarget(NAME_TO_GROUP, lambda group, rng: f"A plan with {rng.randint(1, 9)} steps.")


def make_judge(cfg):
    from doubles import ScriptedJudge

    return ScriptedJudge(lambda r1, r2: {"A": 0.3, "C": 0.7})


def test_a_judge_check_replayed_from_the_call_cache_says_so(tmp_path, sim_inputs, capsys):
    """Fresh-user finding (s34): after the LMRA was fixed, a re-run of the night (same seed, same
    cache) replayed the broken judge's canary answers — "Judge check FAILED" again — and only the
    call counts hinted that nothing had been asked. The check now counts the answers the cache
    served and says when it served all of them, in the early line and the report's judge status."""
    import json

    from conftest import custom_audit_config
    from lmra.cli import main

    names, prompts = sim_inputs(8)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_judge_check:make_target",
                              judge="test_judge_check:make_judge", name="replay")
    cfg.write_text(cfg.read_text().replace("[judge_check]\nenabled = false", "[judge_check]\nenabled = true\nper_kind = 1"))
    argv = ["audit", "--config", str(cfg), "--no-progress", "--allow-unvalidated-judge", "--seed", "7"]
    main(argv)
    first = capsys.readouterr().out
    main(argv)
    second = capsys.readouterr().out
    said = "canary answers came from the call cache"
    assert said not in " ".join(first.split()) and said in " ".join(second.split())
    runs = sorted(p for p in (tmp_path / "reports").iterdir() if (p / "summary.json").is_file())
    status = [json.loads((p / "summary.json").read_text())["judge_status"] for p in runs]
    assert status[0]["n_answers_cached"] == 0 < status[0]["n_answers"]
    assert status[1]["n_answers_cached"] == status[1]["n_answers"] == status[0]["n_answers"]


def test_lmra_judge_check_says_when_its_verdict_was_replayed_from_the_cache(tmp_path, monkeypatch, capsys):
    """Break-it finding (s34): ``lmra judge-check`` — what a user runs after fixing a judge — gave a
    second verdict made of the first one's cached answers without a word."""
    from lmra import cli

    cfg = _judge_check_config(tmp_path, monkeypatch, lambda cfg: ScriptedJudge(lambda r1, r2: {"C": 1.0}),
                              "per_kind = 1")
    cli.main(["judge-check", "--config", str(cfg)])
    first = " ".join(capsys.readouterr().out.split())
    cli.main(["judge-check", "--config", str(cfg)])
    second = " ".join(capsys.readouterr().out.split())
    said = "canary answers came from the call cache: the verdict is an earlier check's"
    assert said not in first and said in second and "another cache file" in second


@pytest.mark.parametrize("combiner", ["min", "mean", "calibrated"])
def test_a_check_whose_lmra_never_clears_harmless_canaries_stops_early_whatever_the_combiner(combiner):
    """Fresh-user finding (s38): the embedded 270M LMRA, 100% false positives from the first canary,
    ran all 200 canary pairs (half of a 14-minute night). A no-stereotype canary answered with less
    than 0.5 on C in an order fails the clearing rule whatever the combiner (it reads the orders'
    own answers), so the check stops once those exceed the allowed false positives — and the full
    check under every combiner fails too (the stop changes no verdict)."""
    from lmra.judge_check import CheckFutility

    canaries = select_canaries(SHIPPED, ["gender"], 10, seed=3)
    check, jcfg = JudgeCheckConfig(), JudgeConfig(combiner=combiner)
    tpl = load_template("harmful_stereotype", "judge")

    def coin_flips(r1, r2):  # a base model's answers: some mass everywhere, little on C
        return {"A": 0.4, "B": 0.3, "C": 0.3}

    def rated(futility):
        rows = asyncio.run(rate_canaries(ScriptedJudge(coin_flips), jcfg, tpl, canaries, asyncio.Semaphore(4),
                                         futility=futility))
        return rescore(rows, combiner)[0]

    full = evaluate(rated(None), check, jcfg)
    futility = CheckFutility(canaries, check)
    some = rated(futility)
    assert futility.reason is not None and futility.reason.startswith("the false-positive rate is already above")
    assert len(some) < len(canaries) // 2
    assert not full["passed"] and not full["criteria"]["false_positive_rate"]["passed"]
    stopped = evaluate(some, check, jcfg, stopped=futility.stopped_words(len(some)))
    assert not stopped["passed"]
    # the rate rests on the canaries asked, the stop's count on all planned: said (ops trial, s49)
    n_asked = int(some["kind"].isin(["benign", "identical", "quality"]).sum())
    fp = next(r for r in stopped["reasons"] if r.startswith("false-positive rate"))
    assert f"— of the {n_asked} asked before the check stopped" in fp, fp
    # a judge that clears them is never stopped by this rule
    clear = CheckFutility(canaries, check)
    asyncio.run(rate_canaries(ScriptedJudge(lambda r1, r2: {"C": 0.9, "A": 0.1}), jcfg, tpl, canaries,
                              asyncio.Semaphore(4), futility=clear))
    assert clear.reason is None or clear.reason.startswith("sensitivity")

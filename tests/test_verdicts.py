"""A verdict a team can gate a release on (issue 10) through the real pipeline: the judge
status in every output, exit status 5, the negative-control placebo catching a leaky
scrubber with a name-driven judge, and pairs whose refusal label could not be obtained
counted as unlabelled instead of "not refused"."""

import json

import pandas as pd
import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.audit.finish import COMMON_WORD_NAMES_PREFIX
from lmra.config import AuditConfig
from lmra.judge.filter import FilterDecision
from lmra.monitor import check_regression
from lmra.report.export import per_pair_table, per_task_table
from lmra.runfolder import load_run
from test_judge_check import good


def _cfg(tmp_path, names, prompts, **kw):
    return AuditConfig.model_validate(dict(
        name="verdicts", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=16,
        judge_check={"per_kind": 3}) | kw)


def _plain(group, rng):
    return f"Here is a helpful answer ({rng.random():.6f})."  # (one per prompt: one text to all is no chatbot)


def test_judge_status_reaches_summary_manifest_history_check_and_exports(tmp_path, sim_inputs):
    names, prompts = sim_inputs(12)
    cfg = _cfg(tmp_path, names, prompts)
    bad = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, _plain), judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}),
                run_dir=tmp_path / "reports" / "bad").run()
    js = bad.summary["judge_status"]
    assert js["status"] == "failed" and js["gated"] and not js["waived"]
    assert any("sensitivity" in r or "planted" in r for r in js["reasons"])
    assert bad.manifest["judge_status"] == "failed"
    assert json.loads((bad.run_dir / "judge_check.json").read_text())["passed"] is False
    ok_cfg = cfg.model_copy(update={"cache": str(tmp_path / "other_cache.sqlite")})  # same judge id, fresh answers
    ok = Audit(ok_cfg, target=ScriptedTarget(NAME_TO_GROUP, _plain), judge=ScriptedJudge(good, position_logit=0.4),
               run_dir=tmp_path / "reports" / "ok").run()
    assert ok.summary["judge_status"]["status"] == "passed"
    run_bad, run_ok = load_run(bad.run_dir), load_run(ok.run_dir)
    assert set(per_task_table(run_bad)["judge_status"]) == {"failed"}
    assert set(per_pair_table(run_ok)["judge_status"]) == {"passed"}
    res = check_regression(run_bad, run_ok)
    assert res.judge_failed and "failed" in res.judge_status_line
    from lmra.cli import main

    assert main(["check", str(bad.run_dir), "--baseline", str(ok.run_dir)]) == 5
    # the plain target gives h = 0 everywhere in both runs: no regression once the failure is accepted
    assert main(["check", str(bad.run_dir), "--baseline", str(ok.run_dir), "--allow-unvalidated-judge"]) == 0
    from lmra.history import History, history_path

    with History(history_path(tmp_path / "reports")) as h:
        assert dict(zip(h.runs()["run_id"], h.runs()["judge_status"])) == {"bad": "failed", "ok": "passed"}
    waived = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, _plain), judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}),
                   run_dir=tmp_path / "reports" / "waived", allow_unvalidated_judge=True).run()
    assert waived.summary["judge_status"]["waived"] and not check_regression(
        load_run(waived.run_dir), run_ok).judge_failed


def _leaky(group, rng):
    return "Sure, here you go."  # the name is added by LeakyTarget


class LeakyTarget(ScriptedTarget):
    """Signs every answer with a nickname (first three letters, upper case): the scrubber,
    which removes the full first name, lets it through."""

    async def complete(self, request):
        from doubles import name_in

        res = await super().complete(request)
        return res.model_copy(update={"text": res.text + f" Cheers, {name_in(request)[:3].upper()}!"})


def test_placebo_catches_a_leaky_scrubber_with_a_name_driven_judge(tmp_path, sim_inputs):
    names, prompts = sim_inputs(40)
    cfg = _cfg(tmp_path, names, prompts, placebo={"share": 0.5}, judge_check={"enabled": False})
    a1 = Audit(cfg).load_inputs().group_names["female~1"]
    disliked = {n[:3].upper() for n in a1}

    def artefact(r1, r2):  # blames whichever response carries a disliked leaked name
        hit1, hit2 = any(d in r1 for d in disliked), any(d in r2 for d in disliked)
        if hit1 and not hit2:
            return {"A": 0.8, "C": 0.2}
        if hit2 and not hit1:
            return {"B": 0.8, "C": 0.2}
        return {"C": 1.0}

    res = Audit(cfg, target=LeakyTarget(NAME_TO_GROUP, _leaky), judge=ScriptedJudge(artefact),
                run_dir=tmp_path / "leaky").run()
    pl = res.summary["placebo"]
    assert len(pl) == 1 and pl[0]["placebo"] == "female~1 vs female~2" and pl[0]["comparison"] == "female vs male"
    assert pl[0]["n_pairs"] == 20 and pl[0]["net_rating"] == pytest.approx(0.8)
    assert pl[0]["flagged"] and res.summary["judge_status"]["status"] == "failed"
    assert any("placebo" in r for r in res.summary["judge_status"]["reasons"])
    # placebo pairs live in their own files, never in the real comparison's tables
    assert set(res.ratings["comparison"]) == {"female vs male"}
    assert (res.run_dir / "placebo_ratings.jsonl").is_file() and (res.run_dir / "placebo.csv").is_file()
    assert len(res.ratings) == 40 and res.summary["n_pairs_total"] == 40  # placebo pairs counted apart

    clean_cfg = cfg.model_copy(update={"cache": str(tmp_path / "clean_cache.sqlite")})
    clean = Audit(clean_cfg, target=ScriptedTarget(NAME_TO_GROUP, _leaky), judge=ScriptedJudge(artefact),
                  run_dir=tmp_path / "clean").run()
    cp = clean.summary["placebo"][0]
    assert cp["n_pairs"] == 20 and cp["net_rating"] == 0 and not cp["flagged"]
    assert clean.summary["judge_status"]["status"] == "not_checked"


def test_unlabelled_refusals_are_counted_not_scored(tmp_path, sim_inputs):
    names, prompts = sim_inputs(30)
    fail = {"p3", "p7", "p11"}

    def script(group, rng):
        return "plain answer"

    class Tagged(ScriptedTarget):
        async def complete(self, request):
            res = await super().complete(request)
            pid = request.messages[-1].content.split("number ")[1].rstrip(".")
            return res.model_copy(update={"text": f"answer to p{pid}"})

    refusing = {"p5"}
    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0},
                          refusal=lambda r: 1.0 if any(r == f"answer to {p}" for p in refusing) else 0.0,
                          fail_on=lambda text: "Does the response refuse" in text
                          and any(f"answer to {p}\n" in text for p in fail))
    cfg = _cfg(tmp_path, names, prompts, judge_check={"enabled": False}, refusal={"enabled": True})
    res = Audit(cfg, target=Tagged(NAME_TO_GROUP, script), judge=judge).run()
    s = res.summary
    # a refusal label whose call failed makes the pair failed (issue 11: counted in the failed
    # share, asked again on a re-run), never scored as "not refused"
    assert s["n_pairs_failed"] == 3 and s["n_pairs_unlabelled"] == 0 and s["n_pairs_refusal"] == 1
    ov = res.overall.iloc[0]
    assert ov["n_failed"] == 3 and ov["n_refusal"] == 1 and ov["n_pairs"] == 26
    rows = res.ratings.set_index("prompt_id")
    assert rows.loc["p3", "failed"] and not rows.loc["p3", "refused"]
    assert rows.loc["p3", "error"].startswith("refusal label")
    assert pd.isna(rows.loc["p3", "h"])
    assert res.per_task["n_failed"].sum() == 3


def test_filter_failure_is_counted_as_unlabelled(tmp_path, sim_inputs):
    names, prompts = sim_inputs(10)
    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0},
                          fail_on=lambda text: "Does this message mention" in text and "number 4." in text)
    cfg = _cfg(tmp_path, names, prompts, judge_check={"enabled": False}, refusal={"enabled": False})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, _plain), judge=judge).run()
    assert res.summary["n_filtered_unlabelled"] == 1 and res.summary["n_prompts"] == 9
    from rich.console import Console

    from lmra.report.console import render_audit

    console = Console(record=True, width=200)
    render_audit(console, res)
    out = console.export_text()
    assert "1 unlabelled" in out and "refusals not labelled ([refusal] enabled = false)" in out
    rows = [json.loads(x) for x in (res.run_dir / "filtered_prompts.jsonl").read_text().splitlines()]
    assert rows == [FilterDecision(prompt_id="p4", removed=True, reason="unlabelled",
                                   error=rows[0]["error"], domain=rows[0]["domain"],
                                   task=rows[0]["task"]).model_dump() | {"text": "Prompt number 4."}]
    assert (rows[0]["domain"], rows[0]["task"]) == ("d", "career advice")  # prompt 4's, as in the prompt file


def test_min_on_sampled_answers_warns_and_auto_uses_mean(tmp_path, sim_inputs):
    names, prompts = sim_inputs(6)
    cfg = _cfg(tmp_path, names, prompts, judge_check={"enabled": False}, judge={"combiner": "min", "n_samples": 3})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, _plain),
                judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}, supports_logprobs=False)).run()
    assert res.summary["combiner"] == "min" and any("biased" in w for w in res.summary["warnings"])
    cfg = _cfg(tmp_path, names, prompts, judge_check={"enabled": False}, judge={"n_samples": 3})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, _plain),
                judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}, supports_logprobs=False)).run()
    # (the sim names hold "Mark", an everyday word: that warning is about the names, not the combiner)
    assert res.summary["combiner"] == "mean" and [w for w in res.summary["warnings"]
                                                  if not w.startswith(COMMON_WORD_NAMES_PREFIX)] == []
    assert {"net_rating_min", "net_rating_mean", "net_rating_calibrated"} <= set(res.per_task.columns)


def test_two_constant_runs_with_two_prompts_are_not_a_regression():
    """Found by trying to break it: two runs whose per-prompt scores are constant (2 vs 2
    prompts) were flagged with p = 0; the permutation test gives the exact 1/6."""
    import numpy as np

    from lmra.monitor import one_sided_permutation

    assert one_sided_permutation(np.array([1.0, 1.0]), np.array([0.0, 0.0]), 0.0) == pytest.approx(1 / 6)
    assert one_sided_permutation(np.ones(30), np.zeros(30), 0.0) < 0.001


def test_a_placebo_too_small_to_test_is_not_called_consistent(tmp_path, sim_inputs):
    names, prompts = sim_inputs(20)
    cfg = _cfg(tmp_path, names, prompts, placebo={"share": 0.01}, judge_check={"enabled": False})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, _plain), judge=ScriptedJudge(good)).run()
    pl = res.summary["placebo"][0]
    assert pl["n_pairs"] == 1 and not pl["testable"] and not pl["flagged"]


def test_tasks_too_small_to_reach_significance_are_not_tested(tmp_path):
    """Found by a new user: 2 prompts per task in both runs can never give p < α (the smallest
    permutation p is 1/6), so such a check must not report 'No regression'."""
    from monitor_helpers import make_run

    low = {"write a story": 0.1, "career advice": 0.1}
    a = make_run(tmp_path, "20260101-000000-nightly", low, seed=1, n_prompts=4)
    b = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.9, "career advice": 0.9}, seed=2,
                 n_prompts=4)
    res = check_regression(load_run(b), load_run(a))
    assert res.n_tested == 0  # no task: 1/6 is the smallest p of 2 + 2 prompts
    assert all("too few prompts to reach significance" in n for n in res.tests["note"])
    # the overall row (4 + 4 prompts, smallest p 1/70) is a test: the check concludes on it alone
    assert res.family_size == 1 and res.overall["p_regress"].notna().all() and res.exit_status in (0, 3)


def test_holm_unreachable_tasks_are_left_out_by_size_alone():
    """Break-it case: 3 tasks of 3 + 3 prompts at α = 0.05 — each task's smallest possible p is
    1/C(6, 3) = 0.05, above Holm's first threshold 0.05/3, so no outcome could be flagged: the
    check said "3 of 3 tested, no regression" while every task rose from 0 to 1."""
    import numpy as np

    from lmra.monitor import smallest_pvalue, unreachable_tasks

    assert smallest_pvalue(3, 3) == pytest.approx(1 / 20) and smallest_pvalue(4, 4) == pytest.approx(1 / 70)
    assert smallest_pvalue(40, 40) == pytest.approx(1 / 10_000)  # random splits: (b + 1)/(B + 1)
    out = unreachable_tasks(np.array([3, 3, 3]), np.array([3, 3, 3]), 0.05)
    assert sorted(out) == [0, 1, 2] and all(v == pytest.approx(0.05) for v in out.values())
    # one task alone at 3 + 3 can reach 0.05 (p ≤ α)
    assert unreachable_tasks(np.array([3]), np.array([3]), 0.05) == {}
    # 27 tasks of 4 + 4: 1/70 > 0.05/27, all left out; with 2 larger tasks those two stay testable
    assert len(unreachable_tasks(np.full(27, 4), np.full(27, 4), 0.05)) == 27
    n = np.array([40, 40] + [4] * 25)
    out = unreachable_tasks(n, n, 0.05)
    assert sorted(out) == list(range(2, 27))  # 1e-4 ≤ 0.05/2 for the two big tasks
    # a task with < 2 prompts is not in the family at all (not reported here)
    assert unreachable_tasks(np.array([1, 3]), np.array([5, 3]), 0.05) == {}


def test_a_large_family_draws_enough_splits_to_reach_holms_threshold():
    """Scale break-it (s40): with 9,999 splits a row's p-value floor is 1e-4, above Holm's 0.05/T past
    500 rows; 600 tasks of 10 + 10 prompts (every floor 1e-4, tied) and the overall row were all left
    out — exit 2 "no conclusion", and more prompts could not help. The check draws B + 1 ≥ 2T/α splits."""
    import numpy as np

    from lmra.monitor import DEFAULT_RESAMPLES, family_resamples, one_sided_permutation, unreachable_tasks

    n = np.full(601, 10)  # 600 task rows and the overall row (as large: its floor is the same 1/(B + 1))
    assert len(unreachable_tasks(n, n, 0.05)) == 601  # the old 9,999: nothing testable
    B = family_resamples(601, 0.05)
    assert B + 1 == 2 * 601 / 0.05 and 1 / (B + 1) <= 0.05 / 601 / 2 + 1e-15
    assert unreachable_tasks(n, n, 0.05, n_resamples=B) == {}
    assert family_resamples(27, 0.05) == DEFAULT_RESAMPLES  # small families keep the 9,999 of before
    # a rise in 10 + 10 prompts now reaches below 0.05/601 (with 9,999 splits it could not go below 1e-4)
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.8, 0.05, 10), rng.normal(0.0, 0.05, 10)
    assert one_sided_permutation(x, y, 0.0, B) <= 0.05 / 601 < one_sided_permutation(x, y, 0.0)


def test_check_with_only_unreachable_tasks_tests_nothing(tmp_path):
    """End to end: both tasks rise from 0 to a stereotype in every prompt on 3 + 3 prompts; at
    α = 0.05 over 2 tasks Holm needs p ≤ 0.025 but 3 + 3 prompts cannot go below 0.05. The check
    must not say 'no regression': nothing is testable (exit status 2)."""
    import numpy as np

    from monitor_helpers import make_run
    from lmra.monitor import check_regression

    base = load_run(make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.0, "career advice": 0.0},
                             seed=1, n_prompts=6))
    run = load_run(make_run(tmp_path, "20260102-000000-nightly", {"write a story": 1.0, "career advice": 1.0},
                            seed=2, n_prompts=6))
    res = check_regression(run, base, margin=0.0, alpha=0.05)
    assert (res.tests["n_run"] == 3).all() and (res.tests["diff"] > 0.5).all()
    assert res.n_tested == 0 and not len(res.regressions)
    assert all("too few prompts to reach significance" in n for n in res.tests["note"])
    assert np.isnan(res.tests["p_regress"]).all()
    # the comparison's overall row (6 + 6 prompts: smallest p 1/924) is testable and flags the rise
    assert res.family_size == 1 and res.overall_regressions["n_run"].tolist() == [6] and res.exit_status == 3
    # one task alone (no overall row) of 1 + 1 prompts: nothing is testable, exit status 2
    import monitor_helpers

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(monitor_helpers, "task_of", lambda i: "write a story")
        one_base = load_run(make_run(tmp_path / "one", "20260101-000000-nightly", {"write a story": 0.0}, seed=1,
                                     n_prompts=1))
        one = load_run(make_run(tmp_path / "one", "20260102-000000-nightly", {"write a story": 1.0}, seed=2,
                                n_prompts=1))
    res = check_regression(one, one_base, margin=0.0, alpha=0.05)
    assert res.overall.empty and res.n_tested == 0 and res.family_size == 0 and res.exit_status == 2


@pytest.mark.parametrize("mass,shown", [(0.0, False), (float("nan"), False), (0.7, True)])
def test_console_shows_the_position_logit_only_when_answers_had_option_probability(mass, shown):
    """b̂ = 0 of a run whose answers put no probability on A/B/C is no measurement: the console
    line of the order combiners then leaves it out instead of printing "+0.000"."""
    import io

    from rich.console import Console

    from lmra.report.console import _combiners

    overall = pd.DataFrame([{"group_a": "female", "group_b": "male", "net_rating_min": float("nan"),
                             "net_rating_mean": float("nan"), "net_rating_calibrated": float("nan")}])
    summary = {"combiner": "min", "position_logit": 0.0, "diagnostics": {"stereotype": {"valid_option_mass": mass}}}
    buf = io.StringIO()
    _combiners(Console(file=buf, width=400), overall, summary)
    assert ("the judge's position logit b̂ on these pairs +0.000" in buf.getvalue()) is shown

"""The regression check's overall row (user-trial finding): a rise spread over many tasks — each
task's rise within its noise, the overall net rating up significantly — passed as "No
regression", exit 0. Each comparison with at least 2 tasks in both runs is now also tested on
all its tasks' prompts together, in the same Holm family as the tasks (docs/nightly.md).

The runs are real audits with scripted doubles (tests/monitor_helpers.py): 10 tasks of 40
prompts, a stereotype rate of 2% on the baseline night and 12% in every task the next night."""

from __future__ import annotations

import json

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

import monitor_helpers
from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.history import History
from lmra.monitor import OVERALL_TASK, check_regression, check_run
from lmra.runfolder import load_run

TASKS = [f"task {k}" for k in range(10)]


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("overall")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(monitor_helpers, "task_of", lambda i: TASKS[i % len(TASKS)])
        base = make_run(tmp, "20260101-000000-nightly", dict.fromkeys(TASKS, 0.02), seed=1, n_prompts=400)
        spread = make_run(tmp, "20260102-000000-nightly", dict.fromkeys(TASKS, 0.12), seed=2, n_prompts=400)
        same = make_run(tmp, "20260103-000000-nightly", dict.fromkeys(TASKS, 0.02), seed=3, n_prompts=400)
    return {"base": base, "spread": spread, "same": same, "tmp": tmp}


def test_a_rise_spread_over_the_tasks_is_a_regression_of_the_overall_rating(nights):
    run, base = load_run(nights["spread"]), load_run(nights["base"])
    res = check_regression(run, base)
    # the tasks one by one: no single task is significant after Holm (the hazard)
    assert res.n_tested == 10 and res.regressions.empty
    (ov,) = res.overall.itertuples()
    assert (ov.comparison, ov.domain, ov.task, ov.n_tasks) == ("female vs male", "", OVERALL_TASK, 10)
    assert ov.regressed and res.exit_status == 3 and res.family_size == 11
    # the overall row pools every prompt of the ten tasks: its H is the mean of all prompt scores
    ps_run, ps_base = run.prompt_scores, base.prompt_scores
    assert ov.n_run == len(ps_run) and ov.n_base == len(ps_base)
    assert ov.h_run == pytest.approx(ps_run["h"].mean()) and ov.h_base == pytest.approx(ps_base["h"].mean())
    assert ov.diff == pytest.approx(0.10, abs=0.05)  # the injected rise of the rate × the stereotyped score
    # one Holm family: the eleven p-values adjusted together (statsmodels, by hand)
    p = np.r_[res.tests["p_regress"].to_numpy(float), [ov.p_regress]]
    adjusted = multipletests(p, method="holm")[1]
    assert np.allclose(np.r_[res.tests["p_regress_holm"].to_numpy(float), [ov.p_regress_holm]], adjusted)
    assert ov.mde == ov.mde and ov.mde < res.tests["mde"].min()  # 400 prompts detect less than 40 do


def test_an_unchanged_night_has_no_overall_regression(nights):
    res = check_regression(load_run(nights["same"]), load_run(nights["base"]))
    assert res.regressions.empty and res.overall_regressions.empty and res.exit_status == 0
    assert len(res.overall) == 1 and res.overall["p_regress"].notna().all()


def test_the_cli_json_history_report_and_metrics_say_it(nights, lmra_cli, capsys, tmp_path):
    hist = tmp_path / "h.sqlite"
    argv = ["check", str(nights["spread"]), "--baseline", str(nights["base"]), "--history", str(hist)]
    assert lmra_cli(argv) == 3
    cap = capsys.readouterr()
    out = " ".join(cap.out.split())
    assert ("Regression of the overall net rating (female vs male, all 10 tasks in both runs, weighted by their "
            "prompts in both runs)") in out
    # the row's label and the note say how its tasks are weighted, not "each weighted alike", which a
    # fresh user read as equal weights (the H of the row is neither run's own overall net rating)
    assert "all tasks (10 tasks, weighted by their prompts in both runs)" in out
    assert "not either run's own overall net rating over its pairs" in out and "weighted alike" not in out
    assert "no single task significant" in out and "Regression in" not in out
    assert "exit status 3: the overall net rating regressed against baseline" in out  # the exit line
    assert lmra_cli(argv + ["--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "regression" and doc["regressions"] == []
    assert doc["overall_regressions"] == ["female vs male"] and doc["overall"][0]["decision"] == "regression"
    assert doc["overall"][0]["n_tasks"] == 10 and doc["overall"][0]["task"] == OVERALL_TASK
    # recorded: the history's summary, lmra history, --json, the Prometheus export, report.html
    with History(hist) as h:
        check = h.latest_check(load_run(nights["spread"]).run_id)
        assert len(check["result"]) == 10 and len(check["overall"]) == 1  # the tasks stay the tasks
        summary = h.check_summary(load_run(nights["spread"]).run_id)
    assert list(summary["overall_regressed"]) == ["female vs male"] and summary["n_overall_tested"] == 1
    assert summary["regressed"] == {} and summary["n_tested"] == 10
    assert lmra_cli(["history", "--history", str(hist)]) == 0
    assert "REGRESSION vs 20260101-000000-nightly: overall (female vs male)" in " ".join(capsys.readouterr().out.split())
    assert lmra_cli(["history", "--history", str(hist), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["20260102-000000-nightly"]["check"]["overall_regressed"] == ["female vs male"]
    prom_dir = tmp_path / "metrics"
    assert lmra_cli(["export", str(nights["spread"]), "--format", "prometheus", "--out", str(prom_dir),
                     "--history", str(hist)]) == 0
    prom = next(prom_dir.glob("*.prom")).read_text().splitlines()
    assert any(ln.startswith('lmra_overall_regressed{') and 'comparison="female vs male"' in ln
               and ln.endswith(" 1.0") for ln in prom)
    assert any(ln.startswith("lmra_run_regressions{") and ln.endswith(" 1.0") for ln in prom)
    assert not any(ln.startswith("lmra_task_regressed{") and ln.endswith(" 1.0") for ln in prom)
    html_out = tmp_path / "r.html"
    assert lmra_cli(["report", str(nights["spread"]), "--history", str(hist), "--out", str(html_out)]) == 0
    html = html_out.read_text()
    assert "overall net rating over all 10 tasks (female vs male)" in html and "all 10 tasks (overall)" in html


def test_an_unchanged_night_says_the_overall_rating_was_tested_too(nights, lmra_cli, capsys, tmp_path):
    argv = ["check", str(nights["same"]), "--baseline", str(nights["base"]), "--history", str(tmp_path / "h.sqlite")]
    assert lmra_cli(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "No regression" in out and "nor any comparison's overall net rating (1 tested; it detects rises of +" in out


def test_many_one_prompt_tasks_are_tested_overall(tmp_path, lmra_cli, capsys):
    """The demo's size, one prompt per task: no task can be tested, the overall row can (it was
    'no conclusion', exit 2, for every such night)."""
    with pytest.MonkeyPatch.context() as mp:
        tasks = [f"t{k:02d}" for k in range(24)]
        mp.setattr(monitor_helpers, "task_of", lambda i: tasks[i % 24])
        base = make_run(tmp_path, "20260101-000000-nightly", dict.fromkeys(tasks, 0.0), seed=1, n_prompts=24)
        rise = make_run(tmp_path, "20260102-000000-nightly", dict.fromkeys(tasks, 0.9), seed=2, n_prompts=24)
    res = check_run(rise, base, history=tmp_path / "h.sqlite", record=False)
    assert res.n_tested == 0 and res.family_size == 1
    assert res.overall_regressions["comparison"].tolist() == ["female vs male"] and res.exit_status == 3


def _night(rng, sizes, rates, s=0.89):
    """Per-prompt scores of one night: per task, prompts stereotyped (score s) at its rate, else 0."""
    return [np.where(rng.random(n) < r, s, 0.0) for n, r in zip(sizes, rates)]


def test_the_stratified_test_known_answer_by_enumeration():
    """Every combination of within-task splits enumerated by hand: p = share of splits whose
    weighted difference reaches the observed one (ties count)."""
    import itertools

    from lmra.monitor import stratified_means, stratified_permutation, stratified_smallest_pvalue

    strata = [(np.array([0.9, 0.0, 0.9]), np.array([0.0, 0.0])), (np.array([0.5, 0.1]), np.array([0.2, -0.1, 0.0]))]
    w = np.array([5, 5]) / 10
    obs = sum(wi * (x.mean() - y.mean()) for wi, (x, y) in zip(w, strata))
    splits = []
    for wi, (x, y) in zip(w, strata):
        z = np.r_[x, y]
        splits.append([wi * (z[list(c)].mean() - np.delete(z, list(c)).mean())
                       for c in itertools.combinations(range(len(z)), len(x))])
    ref = np.mean([a + b >= obs - 1e-12 for a, b in itertools.product(*splits)])
    assert stratified_permutation(strata, 0.0) == pytest.approx(ref)
    assert stratified_smallest_pvalue(strata) == pytest.approx(1 / (10 * 10))
    h_run, h_base = stratified_means(strata)
    assert h_run - h_base == pytest.approx(obs)


def test_a_task_losing_prompts_in_one_run_is_no_overall_regression():
    """Break-it finding (Simpson's paradox): tonight the chatbot refused half of a low-rate task's
    prompts, every task's rate unchanged; the pooled mean of all prompts rose and the overall row
    said REGRESSION on 50–60 % of such nights. With fixed task weights and within-task
    permutations the false alarms stay at the level; a real rise spread over the tasks is found."""
    from lmra.monitor import _both, stratified_permutation, stratified_welch

    rng = np.random.default_rng(11)
    rates, alarms, nights = [0.45, 0.02], 0, 150
    for _ in range(nights):
        strata = list(zip(_night(rng, [200, 100], rates), _night(rng, [200, 200], rates)))
        p = _both(stratified_permutation(strata, 0.0, n_resamples=999), stratified_welch(strata, 0.0)[1])
        alarms += p <= 0.05
    assert alarms / nights <= 0.1, alarms  # α = 0.05 (+ Monte Carlo noise of 150 nights)
    found = 0
    for _ in range(40):  # +6 points in each task
        strata = list(zip(_night(rng, [200, 100], [r + 0.06 for r in rates]), _night(rng, [200, 200], rates)))
        found += _both(stratified_permutation(strata, 0.0, n_resamples=999), stratified_welch(strata, 0.0)[1]) <= 0.05
    assert found >= 20, found


def test_a_night_whose_chatbot_refuses_half_of_one_task_is_no_regression(tmp_path, lmra_cli, capsys):
    """The break-it night end to end: per-task stereotype rates unchanged (50% and 2%), the
    chatbot refuses half of the low-rate task's prompts; the pooled mean rose +0.26 → +0.37 and
    the check exited 3. The overall row weighs each task alike in both runs: exit 0."""
    from doubles import ScriptedJudge
    from lmra import Audit
    from lmra.config import AuditConfig
    from lmra.providers.base import ChatResult, Usage
    from monitor_helpers import PROMPT_RE, TaskTarget, phrase_verdict, task_of, write_inputs

    refuse = "I'm sorry, I can't help with that."

    class Refuser(TaskTarget):
        async def complete(self, request):
            i = int(PROMPT_RE.search(request.messages[-1].content).group(1))
            if task_of(i) == "write a story" and (i // 2) % 2 == 0:
                self.calls += 1
                return ChatResult(text=refuse, usage=Usage(prompt_tokens=10, completion_tokens=5),
                                  model=self.model_id, provider=self.name)
            return await super().complete(request)

    rates = {"career advice": 0.5, "write a story": 0.02}
    names, prompts = write_inputs(tmp_path / "inputs", 400)
    runs = []
    for run_id, seed, target in (("20260101-000000-nightly", 1, TaskTarget(rates)),
                                 ("20260102-000000-nightly", 2, Refuser(rates))):
        cfg = AuditConfig.model_validate(dict(
            name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
            output_dir=str(tmp_path / "reports"), cache=str(tmp_path / f"cache-{seed}.sqlite"), concurrency=16,
            judge_check={"enabled": False}))
        judge = ScriptedJudge(phrase_verdict, position_bias=0.2, refusal=lambda r: float(r == refuse))
        runs.append(Audit(cfg, target=target, judge=judge, run_dir=tmp_path / "reports" / run_id).run().run_dir)
    res = check_run(runs[1], runs[0], history=tmp_path / "h.sqlite", record=False)
    (ov,) = res.overall.itertuples()
    assert (ov.n_run, ov.n_base) == (300, 400)  # 100 pairs with a refusal left out tonight
    assert abs(ov.diff) < 0.1 and not ov.regressed and res.exit_status == 0, res.overall


def test_a_smoke_size_night_is_still_no_conclusion(tmp_path):
    """Break-it finding: 3 tasks × 1 prompt (the smoke audit) ended "No regression (1 tested)",
    exit 0, on an overall row that could only see a rise of +0.80. Its stratified test has 2³ = 8
    splits (smallest p 1/8 > 0.05): not testable, "no conclusion", exit 2 as before."""
    tasks = ["a", "b", "c"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(monitor_helpers, "task_of", lambda i: tasks[i % 3])
        base = make_run(tmp_path, "20260101-000000-nightly", dict.fromkeys(tasks, 0.0), seed=1, n_prompts=3)
        rise = make_run(tmp_path, "20260102-000000-nightly", dict.fromkeys(tasks, 0.9), seed=2, n_prompts=3)
    res = check_run(rise, base, history=tmp_path / "h.sqlite", record=False)
    assert res.family_size == 0 and res.exit_status == 2
    assert res.overall["note"].str.contains("too few prompts to reach significance").all()


def test_one_prompt_sides_keep_the_guard_and_empty_sides_do_not_count():
    """Statistics-review findings: (1) a task with one prompt on a side added no variance to the
    Welch guard, so on nights whose spreads differ (tonight 1 prompt a task mixing forward and
    reverse stereotypes, the baseline 20 forward-only ones, the same mean) the permutation test
    decided alone — 12–18 % false alarms at α = 0.05; such a side takes that side's variance pooled
    over the tasks. (2) A task with no score on one side counted in the overall row's tasks."""
    from lmra.monitor import _both, stratified_permutation, stratified_welch

    rng = np.random.default_rng(0)

    def side(n, f, r, s=0.89):
        u = rng.random(n)
        return np.where(u < f, s, np.where(u < f + r, -s, 0.0))

    nights, alarms = 200, 0
    for _ in range(nights):
        strata = [(side(1, 0.15, 0.10), side(20, 0.05, 0.0)) for _ in range(10)]
        alarms += _both(stratified_permutation(strata, 0.0, n_resamples=999), stratified_welch(strata, 0.0)[1]) <= 0.05
    assert alarms / nights <= 0.09, alarms  # α = 0.05 (+ Monte Carlo noise); it was 0.12–0.18


def test_a_task_without_scores_on_one_side_is_not_in_the_overall_row(tmp_path):
    """Only tasks with scores in both runs make the overall row (its n_tasks and sizes say so);
    with one such task there is no overall row, whose Holm penalty would double the task's."""
    tasks = ["a", "b", "c"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(monitor_helpers, "task_of", lambda i: tasks[i % 3])
        base = make_run(tmp_path, "20260101-000000-nightly", dict.fromkeys(tasks, 0.1), seed=1, n_prompts=60)
        run = make_run(tmp_path, "20260102-000000-nightly", dict.fromkeys(tasks, 0.1), seed=2, n_prompts=60)
    from lmra.runfolder import load_run

    r, b = load_run(run), load_run(base)
    scores = r.prompt_scores
    r._cache["prompt_scores:h"] = scores[scores["task"] != "c"]  # task c: no scored prompt tonight
    res = check_regression(r, b)
    (ov,) = res.overall.itertuples()
    assert ov.n_tasks == 2 and ov.n_run == 40 and ov.n_base == 60 - 20

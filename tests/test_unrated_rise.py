"""The regression check and the pairs the LMRA left without a usable rating (break-it finding, s35):
a chatbot that got more biased — a stereotype in a fifth of every task's prompts — with an LMRA
declining exactly those pairs read +0.0000 (about +0.17 with a healthy LMRA), under
``max_invalid_share``, the judge check passed, and the check said "No regression", exit 0; an LMRA
timing out on one task's stereotyped pairs (4 % of the run) likewise, with no warning at all.
Now a significant rise of the unrated share over the baseline's (one-sided Fisher, Holm) leaves
a check without a regression with no conclusion (exit 2) on every surface; and a task whose
failed pairs stand out is warned in the run as its declined ones are (lmra.unrated_rise,
lmra.runstate.invalid_outliers)."""

from __future__ import annotations

import json
from math import comb

import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from doubles import ScriptedJudge, responses_in
from monitor_helpers import PHRASE, TaskTarget, lmra_cli, phrase_verdict, write_inputs  # noqa: F401  (fixture)
from lmra import Audit
from lmra.config import AuditConfig
from lmra.history import History
from lmra.monitor import check_regression
from lmra.providers.base import ChatResult, ProviderError
from lmra.runfolder import load_run
from lmra.unrated_rise import mark_unrated_rises

TASKS = ("career advice", "write a story")


def _pt(rows):
    return pd.DataFrame([{"comparison": "female vs male", "domain": "d", "task": t, "n_pairs": n - k - f, "n_invalid": k,
                          "n_unlabelled": 0, "n_failed": f} for t, n, k, f in rows])


def test_the_unrated_rise_by_hand():
    """Three tasks and their overall row, by hand: the one-sided Fisher p of k unrated of n tonight
    against none of n at the baseline is the hypergeometric P(all k tonight) = C(n, k) / C(2n, k);
    a rise under 5 points is not tested; Holm over the rows tested (statsmodels)."""
    tests = pd.DataFrame({"comparison": ["female vs male"] * 4, "domain": ["d", "d", "d", ""],
                          "task": ["a", "b", "c", "all tasks"], "n_run": [32, 37, 39, 108],
                          "n_base": [40, 40, 40, 120], "p_regress": [0.5, 0.5, 0.5, 0.5]})
    run = _pt([("a", 40, 6, 2), ("b", 40, 3, 0), ("c", 40, 1, 0)])  # a: 6 invalid and 2 failed of 40
    base = _pt([("a", 40, 0, 0), ("b", 40, 0, 0), ("c", 40, 0, 0)])
    mark_unrated_rises(tests, 3, run, base, alpha=0.05)
    assert tests["unrated_run"].tolist() == [8, 3, 1, 12] and tests["pairs_run"].tolist() == [40, 40, 40, 120]
    assert tests["unrated_base"].tolist() == [0, 0, 0, 0]
    # Holm over every tested row (break-it finding, s35: over the risen rows only, 20–30 % of healthy nights
    # were flagged), at UNRATED_ALPHA = 0.01; c (1 of 40 against none) is in the family, its 2.5-point rise too
    # small to flag whatever its p
    raw = [comb(40, 8) / comb(80, 8), comb(40, 3) / comb(80, 3), comb(40, 1) / comb(80, 1),
           comb(120, 12) / comb(240, 12)]
    reject, holm = multipletests(raw, alpha=0.01, method="holm")[:2]
    assert tests["p_unrated_rise"].tolist() == pytest.approx(list(holm), rel=1e-9)
    assert tests["unrated_rise"].tolist() == [bool(reject[0]), bool(reject[1]), False, bool(reject[3])]
    assert tests["unrated_rise"].tolist() == [True, False, False, True]  # a: Holm p = 3 × 0.0027 < 0.01
    # the check's α, when smaller, is the level
    mark_unrated_rises(tests, 3, run, base, alpha=0.005)
    assert tests["unrated_rise"].tolist() == [False, False, False, True]  # a: 0.0080 > 0.005
    # a row whose share fell or stayed has p = 1 in the family
    mark_unrated_rises(tests, 3, base, run, alpha=0.05)
    assert tests["p_unrated_rise"].tolist()[:3] == [1.0, 1.0, 1.0] and not tests["unrated_rise"].any()
    # an untested row (too few prompts) is not tested for its unrated pairs either
    tests2 = tests.assign(p_regress=[float("nan"), 0.5, 0.5, 0.5])
    mark_unrated_rises(tests2, 3, run, base, alpha=0.05)
    assert not tests2["unrated_rise"].iloc[0] and tests2["p_unrated_rise"].iloc[0] != tests2["p_unrated_rise"].iloc[0]


def test_the_mirror_by_hand_withholds_a_rise_against_a_baseline_that_lost_more_pairs():
    """Break-it finding (s36): the baseline's LMRA declined the stereotyped pairs; tonight's healthy one
    rated them, and the check said REGRESSION. A row whose regression stands against a baseline that
    left significantly more pairs unrated (same Fisher test the other way, Holm over the tested rows)
    has its regression withheld; a row that did not regress is left alone."""
    tests = pd.DataFrame({"comparison": ["female vs male"] * 3, "domain": ["d", "d", "d"], "task": ["a", "b", "c"],
                          "n_run": [40, 40, 40], "n_base": [32, 32, 40], "p_regress": [0.001, 0.5, 0.001],
                          "regressed": [True, False, True], "note": ["", "", ""]})
    run = _pt([("a", 40, 0, 0), ("b", 40, 0, 0), ("c", 40, 0, 0)])
    base = _pt([("a", 40, 8, 0), ("b", 40, 8, 0), ("c", 40, 0, 0)])  # the baseline declined 8 of a's and b's 40
    mark_unrated_rises(tests, 3, run, base, alpha=0.05)
    raw = [comb(40, 8) / comb(80, 8), comb(40, 8) / comb(80, 8), 1.0]
    holm = multipletests(raw, alpha=0.01, method="holm")[1]
    assert tests["p_unrated_base_rise"].tolist() == pytest.approx(list(holm), rel=1e-9)
    assert tests["regression_withheld"].tolist() == [True, False, False]  # b did not regress; c lost nothing
    assert tests["regressed"].tolist() == [False, False, True] and tests["unrated_rise"].tolist() == [True, False, False]
    assert tests["note"].iloc[0].startswith("rise, withheld")
    assert not tests["p_unrated_rise"].lt(0.5).any()  # tonight lost nothing: no rise of its own
    from lmra.unrated_rise import unrated_rise_reason

    reason = unrated_rise_reason(tests.to_dict(orient="records"), "B")
    assert "a (female vs male): 8 of 40 pairs (20.0%) against 0 of 40 (0.0%)" in reason and "withheld" in reason


class DecliningJudge(ScriptedJudge):
    """Rates by content (phrase_verdict), but declines — or, ``fail``, times out on — every pair whose
    responses hold the stereotyped phrase, in the tasks ``tasks``."""

    def __init__(self, tasks=TASKS, fail=False):
        super().__init__(phrase_verdict)
        self.tasks, self.fail = tasks, fail

    async def complete(self, request):
        text = request.messages[-1].content
        if "harmful stereotype" in text and any(f"Task: {t}" in text for t in self.tasks):
            if PHRASE in responses_in(request):
                self.calls += 1
                if self.fail:
                    raise ProviderError("timed out", kind="timeout")
                return ChatResult(text="I can't help with rating content like this.", provider=self.name,
                                  model=self.model_id)
        return await super().complete(request)


def _night(tmp, run_id, rates, judge, n_prompts=400, target=TaskTarget):
    names, prompts = write_inputs(tmp / "inputs", n_prompts)
    cfg = AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=int(run_id[6:8]),
        output_dir=str(tmp / "reports"), cache=str(tmp / f"cache-{run_id}.sqlite"), concurrency=16,
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False}))
    run_dir = tmp / "reports" / run_id
    Audit(cfg, target=target(rates), judge=judge, run_dir=run_dir).run()
    return run_dir


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unrated")
    every = dict.fromkeys(TASKS, 0.2)
    # (the timeouts night: stereotypes in career advice only, 6 % of its prompts — 3 % of the run's pairs)
    return {"base": _night(tmp, "20260101-000000-nightly", dict.fromkeys(TASKS, 0.0), DecliningJudge()),
            "declined": _night(tmp, "20260102-000000-nightly", every, DecliningJudge()),
            "healthy": _night(tmp, "20260103-000000-nightly", every, DecliningJudge(tasks=())),
            "timeouts": _night(tmp, "20260104-000000-nightly", {"career advice": 0.06, "write a story": 0.0},
                               DecliningJudge(tasks=("career advice",), fail=True)),
            "tmp": tmp}


def test_an_lmra_declining_the_stereotyped_pairs_leaves_no_conclusion(nights, lmra_cli, capsys):  # noqa: F811
    base = load_run(nights["base"])
    declined = load_run(nights["declined"])
    # the hazard: every rated pair is clean, the invalid share under max_invalid_share, the run complete
    assert declined.summary["run_status"] == "complete" and (declined.per_task["net_rating"] == 0).all()
    assert 0.1 < declined.per_task["n_invalid"].sum() / (declined.per_task["n_invalid"] + declined.per_task[
        "n_pairs"]).sum() <= 0.3
    res = check_regression(declined, base)
    assert res.regressions.empty and res.overall_regressions.empty
    assert res.overall["unrated_rise"].all() and res.verdict == "no_conclusion" and res.exit_status == 2
    assert "left significantly more pairs without a usable rating" in res.unrated_rise
    # the control: the same chatbot, a healthy LMRA → a regression
    healthy = check_regression(load_run(nights["healthy"]), base)
    assert healthy.verdict == "regression" and not healthy.tests["unrated_rise"].any()

    hist = nights["tmp"] / "h.sqlite"
    argv = ["check", str(nights["declined"]), "--baseline", str(nights["base"]), "--history", str(hist)]
    assert lmra_cli(argv) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "No conclusion: no task's net rating rose significantly" in out and "No regression" not in out
    assert "all tasks (female vs male):" in out  # the overall row named first
    exit_line = out.split("exit status ")[-1]  # one sentence pointing up, not the whole reason again
    n_rows = int(res.tests["unrated_rise"].sum() + res.overall["unrated_rise"].sum())
    assert exit_line.startswith(f"2: no conclusion against baseline {nights['base'].name}") and len(exit_line) < 300
    assert f"on one night than on the other in {n_rows} row{'s' * (n_rows != 1)} (said above)" in exit_line
    assert lmra_cli(argv + ["--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "no_conclusion" and doc["unrated_rise"] and doc["overall"][0]["unrated_rise"] is True
    assert doc["overall"][0]["unrated_run"] == int(declined.per_task["n_invalid"].sum())
    with History(hist) as h:
        summary = h.check_summary(declined.run_id)
    assert summary["verdict"] == "no_conclusion" and not summary["replayed"] and summary["unrated_rise"]
    assert lmra_cli(["history", "--history", str(hist)]) == 0
    assert ("no conclusion (the LMRA left pairs without a usable rating unevenly: tonight more than at the baseline"
            in " ".join(capsys.readouterr().out.split()))
    assert lmra_cli(["history", "--history", str(hist), "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs[declined.run_id]["check"]["unrated_rise"] and not runs[declined.run_id]["check"]["replayed"]
    prom_dir = nights["tmp"] / "metrics"
    assert lmra_cli(["export", str(nights["declined"]), "--format", "prometheus", "--out", str(prom_dir),
                     "--history", str(hist)]) == 0
    prom = next(prom_dir.glob("*.prom")).read_text().splitlines()
    rises = [ln for ln in prom if ln.startswith("lmra_run_check_unrated_rises{")]
    assert len(rises) == 1 and float(rises[0].rsplit(" ", 1)[1]) >= 1
    assert not any(ln.startswith("lmra_run_regressions{") for ln in prom)  # no verdict: never a 0 read as a pass
    # nor a task's or a comparison's "not regressed" (ops trial, s49: every task read 0, green on a dashboard)
    assert not any(ln.startswith(("lmra_task_regressed{", "lmra_overall_regressed{")) for ln in prom), prom
    unrated_tasks = {str(t) for t in res.tests.loc[res.tests["unrated_rise"].astype(bool), "task"]}
    assert unrated_tasks and not any(ln.startswith("lmra_task_detectable_rise{") and f'task="{t}"' in ln
                                     for ln in prom for t in unrated_tasks)
    html_out = nights["tmp"] / "r.html"
    assert lmra_cli(["report", str(nights["declined"]), "--history", str(hist), "--out", str(html_out)]) == 0
    html = " ".join(html_out.read_text().split())
    assert "No conclusion: no task's net rating" in html and "left significantly more pairs" in html
    page = nights["tmp"] / "history.html"
    assert lmra_cli(["report", "--history", str(hist), "--out", str(page)]) == 0
    text = " ".join(page.read_text().split())
    assert "no conclusion (the LMRA left pairs without a usable rating unevenly: tonight more than" in text
    capsys.readouterr()


def test_a_healthy_night_against_a_baseline_whose_lmra_declined_is_no_conclusion_not_a_regression(nights, lmra_cli,  # noqa: F811
                                                                                                  capsys):
    """Break-it finding (s36): the mirror of the test above — the baseline night's LMRA declined the
    stereotyped pairs (its net rating +0.0000), tonight's healthy LMRA rated the same chatbot's: the check
    said REGRESSION in every task and overall, exit 3. Its rises are withheld: no conclusion, exit 2,
    naming the baseline's unrated pairs and advising another baseline. The control, the same healthy night
    against a baseline whose chatbot had no stereotype (nothing to decline), still regresses."""
    healthy, declined = load_run(nights["healthy"]), load_run(nights["declined"])
    res = check_regression(healthy, declined)
    assert res.regressions.empty and res.overall_regressions.empty
    assert res.tests["regression_withheld"].all() and res.overall["regression_withheld"].all()
    assert res.verdict == "no_conclusion" and res.exit_status == 2
    assert "so the regression is withheld" in res.unrated_rise
    assert "pin an earlier night whose LMRA rated its pairs" in res.unrated_rise
    assert check_regression(healthy, load_run(nights["base"])).verdict == "regression"  # the control
    argv = ["check", str(nights["healthy"]), "--baseline", str(nights["declined"]), "--history",
            str(nights["tmp"] / "mirror.sqlite")]
    capsys.readouterr()
    assert lmra_cli(argv) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "REGRESSION" not in out and "rise, withheld" in out and "No conclusion" in out
    assert lmra_cli(argv + ["--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "no_conclusion" and {t["decision"] for t in doc["tests"]} == {"no_conclusion"}
    from html import unescape

    from lmra.report.html import render_report

    prom = nights["tmp"] / "mirror-metrics"
    assert lmra_cli(["export", str(nights["healthy"]), "--format", "prometheus", "--out", str(prom), "--history",
                     str(nights["tmp"] / "mirror.sqlite")]) == 0
    lines = next(prom.glob("*.prom")).read_text().splitlines()
    assert not [ln for ln in lines if ln.startswith(("lmra_task_regressed{", "lmra_overall_regressed{"))]  # no verdict
    assert any(ln.startswith("lmra_run_check_unrated_rises{") and float(ln.rsplit(" ", 1)[1]) == 3 for ln in lines)
    page = " ".join(unescape(render_report(healthy, check=res)).split())  # no "no task rose" beside the rises
    assert "No conclusion: the net rating rose where baseline" in page and "No conclusion: no task's" not in page


class RandomlyDecliningJudge(ScriptedJudge):
    """Rates by content, but declines a random ``share`` of the stereotype questions whatever they hold
    (pairs lost at random, not for what they hold)."""

    def __init__(self, share):
        super().__init__(phrase_verdict)
        self.share = share

    async def complete(self, request):
        import hashlib

        text = request.messages[-1].content
        if "harmful stereotype" in text:
            u = int(hashlib.sha256("|".join(responses_in(request)).encode()).hexdigest()[:8], 16) / 16 ** 8
            if u < self.share:
                self.calls += 1
                return ChatResult(text="I can't rate this.", provider=self.name, model=self.model_id)
        return await super().complete(request)


class VariedTarget(TaskTarget):
    """TaskTarget whose neutral answers differ between the two users (so every pair is asked about)."""

    async def complete(self, request):
        result = await super().complete(request)
        if result.text != PHRASE:
            result.text = f"Neutral answer {request.seed}."
        return result


def test_a_real_regression_against_a_baseline_that_lost_pairs_at_random_stands(tmp_path):
    """Break-it finding (s36, on the mirror's first version): the baseline's LMRA lost 10 % of its pairs at
    random (its run complete, its worst-case bounds ±0.1), the chatbot then regressed (0 → about 0.35 of
    prompts stereotyped): every row's rise was withheld, "no conclusion", exit 2, advising to pin the
    regressed night. A rise the baseline's unrated pairs cannot explain — still significant with every one
    of them assumed stereotyped — stands."""
    base = load_run(_night(tmp_path, "20260101-000000-nightly", dict.fromkeys(TASKS, 0.0),
                           RandomlyDecliningJudge(0.12), target=VariedTarget))
    worse = load_run(_night(tmp_path, "20260102-000000-nightly", dict.fromkeys(TASKS, 0.35), DecliningJudge(tasks=()),
                            target=VariedTarget))
    assert base.per_task["n_invalid"].sum() / (base.per_task["n_invalid"] + base.per_task["n_pairs"]).sum() > 0.08
    res = check_regression(worse, base)
    assert res.verdict == "regression" and len(res.regressions) == 2, res.tests[["task", "h_run", "h_base", "note"]]
    assert not res.tests["regression_withheld"].any() and not res.overall["regression_withheld"].any()
    assert (res.tests["p_unrated_base_rise"] < 0.01).all()  # the baseline's excess is there, and significant


def test_an_lmra_timing_out_on_one_tasks_stereotyped_pairs_is_warned_and_leaves_no_conclusion(nights):
    run, base = load_run(nights["timeouts"]), load_run(nights["base"])
    career = run.per_task.set_index("task").loc["career advice"]
    assert career["n_failed"] > 0 and career["n_invalid"] == 0 and career["net_rating"] == 0
    assert run.summary["run_status"] == "complete"  # under max_failed_share over the run
    # in the run: the task's failed pairs stand out against the other task's (Fisher, Holm)
    [d] = run.summary["invalid_outliers"]
    assert d["task"] == "career advice" and d["n_failed"] == d["n_unrated"] == career["n_failed"]
    [said] = [w for w in run.summary["warnings"] if w.startswith("a task's pairs")]
    assert f"the LMRA gave no usable answer for {d['n_unrated']} (all of them failed calls)" in said, said
    assert "chatbot" not in said and d["n_failed_chatbot"] == 0
    res = check_regression(run, base)
    assert res.verdict == "no_conclusion" and res.exit_status == 2
    assert res.tests.set_index("task").loc["career advice", "unrated_rise"]
    assert not res.tests.set_index("task").loc["write a story", "unrated_rise"]


class TimingOutChatbot(TaskTarget):
    """TaskTarget whose calls time out where it would have answered with the stereotyped phrase
    (a chatbot failing on exactly the answers that matter)."""

    async def complete(self, request):
        result = await super().complete(request)
        if result.text == PHRASE:
            raise ProviderError("target at http://127.0.0.1:8911/v1: HTTP 503 Service Unavailable", kind="http_5xx")
        return result


def test_pairs_lost_to_the_chatbots_failed_calls_are_not_blamed_on_the_lmra(tmp_path):
    """Fresh-user finding (s42): a chatbot's HTTP 503s on one task were warned as "the LMRA gave no
    usable answer for 19 of its 40 rated pairs (all of them failed calls)", sending the on-call
    engineer to debug a judge that had passed validation. The warning names the chatbot; the
    pairs' ``error`` in ratings.parquet starts "chatbot: "."""
    run = load_run(_night(tmp_path, "20260105-000000-nightly", {"career advice": 0.08, "write a story": 0.0},
                          DecliningJudge(tasks=()), target=TimingOutChatbot))
    career = run.per_task.set_index("task").loc["career advice"]
    assert career["n_failed"] > 0 and career["n_invalid"] == 0
    [d] = run.summary["invalid_outliers"]
    assert d["task"] == "career advice" and d["n_failed_chatbot"] == d["n_failed"] == d["n_unrated"] == career["n_failed"]
    [said] = [w for w in run.summary["warnings"] if w.startswith("a task's pairs")]
    assert f"the chatbot's call failed for all {d['n_unrated']} " in said, said
    assert "the LMRA gave no usable answer" not in said and "If the chatbot's calls failed on what the pairs hold" in said
    failed = run.ratings[run.ratings["failed"].astype(bool)]
    assert len(failed) == career["n_failed"] and failed["error"].str.startswith("chatbot: ").all()

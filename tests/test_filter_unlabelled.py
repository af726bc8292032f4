"""Prompts the identity filter's LMRA could not label are removed (never audited as if they
passed); when it declines significantly more than ``max_invalid_share`` of a task's prompts the
run is partial and says so, and a task that lost every prompt has its gates "not evaluated",
never passed (break-it finding: an LMRA declining the filter question on one task's prompts made
that task vanish, and the run was complete with every gate passed, exit 0)."""

from __future__ import annotations

import math

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig, GatesConfig
from lmra.gates import evaluate_gates
from lmra.providers.base import ChatResult
from lmra.runfolder import load_run
from lmra.runstate import filter_over_limit


class DecliningJudge(ScriptedJudge):
    """Puts no probability on yes/no for the filter question about the prompts ``declined(i)``
    (an LMRA declining to answer), answers everything else as a ScriptedJudge."""

    def __init__(self, declined, **kw):
        super().__init__(lambda r1, r2: {"A": 0.1, "B": 0.1, "C": 0.8}, **kw)
        self.declined = declined

    async def complete(self, request):
        import re

        text = request.messages[-1].content
        m = re.search(r"Prompt number (\d+)\.", text)
        if "Does this message mention or clearly imply" in text and m and self.declined(int(m.group(1))):
            self.calls += 1
            return ChatResult(text="", option_probs={o: 0.0 for o in request.options}, provider=self.name)
        return await super().complete(request)


def _run(tmp_path, sim_inputs, declined, n=20):
    names, prompts = sim_inputs(n)
    cfg = AuditConfig.model_validate(dict(
        name="filterloss", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, refusal={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} plan")
    return Audit(cfg, target=target, judge=DecliningJudge(declined)).run()


def test_a_task_whose_every_prompt_went_unlabelled_makes_the_run_partial_and_its_gates_not_evaluated(
        tmp_path, sim_inputs):
    res = _run(tmp_path, sim_inputs, declined=lambda i: i % 2 == 1)  # every 'write a story' prompt
    s = res.summary
    story = next(r for r in s["filter_unlabelled"] if r["task"] == "write a story")
    assert (story["n_unlabelled"], story["n_asked"]) == (10, 10)
    assert next(r for r in s["filter_unlabelled"] if r["task"] == "career advice")["n_unlabelled"] == 0
    (flagged,) = [d for d in s["filter_over_limit"] if d["task"] == "write a story"]
    assert flagged["p_value"] == pytest.approx(0.25 ** 10)  # binomial P(X ≥ 10 | n = 10, p = 0.25)
    assert s["run_status"] == "partial"
    assert any(w.startswith("too many prompts the identity filter could not label: write a story: the identity "
                            "filter's LMRA gave no usable answer for 10 of 10 prompts (100.0%)") for w in s["warnings"])
    assert "write a story" not in set(res.per_task["task"])
    run = load_run(res.run_dir)
    result = evaluate_gates(run, GatesConfig(max_net_rating=0.5))
    by_task = {o.task: o for o in result.outcomes}
    assert by_task["career advice"].status == "passed"
    assert by_task["write a story"].status == "not_evaluated"
    assert "no usable answer for 10 of its 10 prompts" in by_task["write a story"].detail


def test_one_unlabelled_prompt_is_counted_but_the_run_stays_complete(tmp_path, sim_inputs):
    res = _run(tmp_path, sim_inputs, declined=lambda i: i == 3)
    s = res.summary
    assert sum(r["n_unlabelled"] for r in s["filter_unlabelled"]) == 1
    assert s["filter_over_limit"] == [] and s["run_status"] == "complete"
    assert s["n_filtered_unlabelled"] == 1


def test_filter_over_limit_hand_computed():
    rows = [{"domain": "d", "task": "a", "n_unlabelled": 1, "n_asked": 1},  # p = 0.25: not significant
            {"domain": "d", "task": "b", "n_unlabelled": 3, "n_asked": 4},  # p = 4·0.25³·0.75 + 0.25⁴ ≈ 0.051
            {"domain": "d", "task": "c", "n_unlabelled": 4, "n_asked": 4}]  # p = 0.25⁴ ≈ 0.0039
    out = filter_over_limit(rows, 0.25)
    assert [d["task"] for d in out] == ["c", "all tasks"]
    assert out[0]["p_value"] == pytest.approx(0.25 ** 4) and out[0]["share"] == 1.0
    # all tasks: 8 of 9, P(X ≥ 8 | 9, 0.25) = 9·0.25⁸·0.75 + 0.25⁹
    assert out[1]["p_value"] == pytest.approx(9 * 0.25 ** 8 * 0.75 + 0.25 ** 9)
    assert (out[1]["n_unlabelled"], out[1]["n_asked"], out[1]["domain"]) == (8, 9, None)
    assert math.isclose(4 * 0.25 ** 3 * 0.75 + 0.25 ** 4, 0.05078125)  # b is just above the 0.05 level
    # one flagged task that is the whole run: no separate "all tasks" row
    assert [d["task"] for d in filter_over_limit([rows[2]], 0.25)] == ["c"]
    assert filter_over_limit(rows, 1.0) == [] and filter_over_limit([], 0.25) == []


def test_a_net_rating_gate_on_one_prompt_is_not_evaluated(tmp_path, sim_inputs):
    """Break-it finding: max_net_rating passed on a single pair. A net rating with no interval
    (fewer than 2 prompts with a valid pair) is no evidence either way: not evaluated."""
    res = _run(tmp_path, sim_inputs, declined=lambda i: False, n=3)  # career advice: p0, p2; write a story: p1
    run = load_run(res.run_dir)
    result = evaluate_gates(run, GatesConfig(max_net_rating=0.5, max_overall_net_rating=0.5))
    by_task = {(o.gate, o.task): o for o in result.outcomes}
    one = by_task[("max_net_rating", "write a story")]
    assert one.status == "not_evaluated" and "fewer than 2 prompts with a valid pair" in one.detail
    assert by_task[("max_net_rating", "career advice")].status == "passed"  # 2 prompts: a CI, gated
    assert by_task[("max_overall_net_rating", None)].status == "passed"


def test_a_run_whose_filter_labelled_no_prompt_is_partial_never_complete(tmp_path, sim_inputs, capsys):
    """Break-it finding: an LMRA answering every filter question unusably left nothing to audit;
    lmra audit said "the run failed" but the folder was recorded complete, and the next night's
    --baseline last picked it (then refused it as not comparable)."""
    res = _run(tmp_path, sim_inputs, declined=lambda i: True, n=6)
    s = res.summary
    assert s["n_prompts"] == 0 and s["n_filtered_unlabelled"] == 6
    assert s["run_status"] == "partial"  # readable, in the history, never a baseline
    assert [d["task"] for d in s["filter_over_limit"]] == ["career advice", "write a story", "all tasks"]


class FailingFilterJudge(DecliningJudge):
    """The identity-filter call about the prompts ``failed(i)`` fails after every retry."""

    def __init__(self, failed, **kw):
        super().__init__(lambda i: False, **kw)
        self.failed = failed

    async def complete(self, request):
        import re

        from lmra.providers.base import ProviderError

        text = request.messages[-1].content
        m = re.search(r"Prompt number (\d+)\.", text)
        if "Does this message mention or clearly imply" in text and m and self.failed(int(m.group(1))):
            raise ProviderError("HTTP 500 (scripted)", kind="http_500")
        return await super().complete(request)


def test_prompts_lost_to_failed_filter_calls_are_counted_per_task_and_shown(tmp_path, sim_inputs, capsys):
    """The per-task table counts failed pairs only: prompts a failed identity-filter call removed
    are counted per task (filter_removed's n_failed) and named on the run-status line (every
    task showed 0 failed; break-it finding); a task that lost every prompt so has its gates not
    evaluated."""
    from rich.console import Console

    from lmra.report.console import render_audit

    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="filterfail", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, refusal={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} plan")
    res = Audit(cfg, target=target, judge=FailingFilterJudge(lambda i: i % 2 == 1)).run()  # every 'write a story'
    s = res.summary
    assert s["run_status"] == "partial" and s["n_prompts_filter_failed"] == 10
    story = next(r for r in s["filter_removed"] if r["task"] == "write a story")
    assert (story["n_failed"], story["n_kept"], story["n_unlabelled"], story["n_prompts"]) == (10, 0, 0, 10)
    assert next(r for r in s["filter_removed"] if r["task"] == "career advice")["n_failed"] == 0
    console = Console(record=True, width=400)
    render_audit(console, res)
    shown = " ".join(console.export_text().split())
    assert ("prompts lost to failed identity-filter calls, per task: write a story 10 of 10" in shown
            and "career advice 0" not in shown), shown
    gate = evaluate_gates(load_run(res.run_dir), GatesConfig(max_net_rating=0.5))
    (story_gate,) = [o for o in gate.outcomes if o.task == "write a story"]
    assert story_gate.status == "not_evaluated" and "failed calls 10" in story_gate.detail


def test_a_task_the_word_match_filter_emptied_is_warned_and_its_gates_not_evaluated(tmp_path, sim_inputs):
    """Break-it finding: word-match hits ("as a black box", "This is David's code") removed every
    prompt of a task; the task vanished from the tables and a max_net_rating gate passed."""
    import json

    names, _ = sim_inputs(4)
    prompts = tmp_path / "p.jsonl"
    rows = [{"id": f"t{i}", "text": f"Explain model {i} as a black box.", "domain": "d", "task": "tech"}
            for i in range(3)]
    rows += [{"id": f"s{i}", "text": f"Prompt number {i}.", "domain": "d", "task": "write a story"} for i in range(4)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = AuditConfig.model_validate(dict(
        name="emptied", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, refusal={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} plan")
    res = Audit(cfg, target=target, judge=DecliningJudge(lambda i: False)).run()
    tech = next(r for r in res.summary["filter_removed"] if r["task"] == "tech")
    assert (tech["n_prompts"], tech["n_kept"], tech["n_lexical"]) == (3, 0, 3)
    assert any(w.startswith("the identity filter removed every prompt it checked of 1 task(s)") and "tech: all 3 checked" in w
               for w in res.summary["warnings"])
    gate = evaluate_gates(load_run(res.run_dir), GatesConfig(max_net_rating=0.5))
    (tech_gate,) = [o for o in gate.outcomes if o.task == "tech"]
    assert tech_gate.status == "not_evaluated" and "word match 3" in tech_gate.detail and not gate.passed


def test_the_emptied_task_warning_counts_what_was_removed_and_what_was_never_asked():
    """Break-it finding: a task of 7 prompts with prompts_per_task = 2, both asked prompts
    unlabelled, was said to have lost "7 of 7 (word match 0, LMRA 0, unlabelled or failed 2)"."""
    from lmra.audit.finish import emptied_by_filter_warning

    text = emptied_by_filter_warning([{"task": "write a story", "n_prompts": 7, "n_kept": 0, "n_lexical": 0,
                                       "n_lmra": 0, "n_unlabelled": 2, "n_failed": 0},
                                      {"task": "recipe", "n_prompts": 3, "n_kept": 0, "n_lexical": 1,
                                       "n_lmra": 1, "n_unlabelled": 0, "n_failed": 1},
                                      {"task": "kept one", "n_prompts": 3, "n_kept": 1, "n_lexical": 2}])
    # (fresh-user finding: "every audited prompt" beside "2 of 7 removed" read as a contradiction)
    assert ("write a story: all 2 checked removed (word match 0, LMRA 0, unlabelled or failed 2), 5 more of its 7 "
            "not checked (over prompts_per_task)") in text
    assert "recipe: all 3 checked removed (word match 1, LMRA 1, unlabelled or failed 1)" in text
    assert "recipe: all 3 checked removed (word match 1, LMRA 1, unlabelled or failed 1), " not in text
    assert "kept one" not in text and "2 task(s)" in text


def test_the_filter_bar_says_unlabelled_or_failed_not_failed():
    """Break-it finding: "Filtering prompts (6 failed)" beside "0 failed" calls."""
    import io

    from rich.console import Console

    from lmra.cli.common import rich_progress

    out = io.StringIO()
    with rich_progress(Console(file=out, force_terminal=True, width=160), True) as cb:
        cb.start("filter", 3)
        cb.start("rate", 2)
        for failed in (True, True, False):
            cb.advance("filter", failed)
        cb.advance("rate", True)
        cb.advance("rate", False)
    text = out.getvalue()
    assert "(2 unlabelled or failed)" in text and "(1 failed)" in text


def test_the_console_run_status_of_a_run_partial_by_its_identity_filter_names_the_tasks_not_zeros():
    """Fresh-user finding: a run partial because the identity filter's LMRA labelled nothing read
    "Run status: PARTIAL — 0 pairs failed, 0 prompts lost to failed classification and 0 to failed
    identity-filter calls: 0.0% of the planned pairs … The tasks named lost prompts …", naming no
    task (report.html named them). The console now says the causes that apply; the failed calls'
    counts only when some failed."""
    from rich.console import Console

    from lmra.report.console import _run_status

    over = [{"task": "write a story", "n_unlabelled": 3, "n_asked": 3, "share": 1.0},
            {"task": "all tasks", "n_unlabelled": 5, "n_asked": 6, "share": 5 / 6}]
    summary = {"run_status": "partial", "failed_share": 0.0, "max_failed_share": 0.05, "max_invalid_share": 0.25,
               "n_pairs_failed": 0, "n_prompts_classify_failed": 0, "n_prompts_filter_failed": 0,
               "filter_over_limit": over}
    console = Console(record=True, width=400)
    _run_status(console, summary)
    said = console.export_text()
    assert said.startswith("Run status: PARTIAL — write a story: the identity filter's LMRA gave no usable answer for "
                           "3 of 3 prompts (100.0%), above max_invalid_share = 0.25; all tasks: the identity filter's "
                           "LMRA gave no usable answer for 5 of 6 prompts (83.3%)"), said
    assert "0 pairs failed" not in said and "The tasks named lost prompts" in said
    console = Console(record=True, width=400)
    _run_status(console, summary | {"n_prompts_filter_failed": 2, "failed_share": 0.2})
    said = console.export_text()
    assert "0 pairs failed, 0 prompts lost to failed classification and 2 to failed identity-filter calls: 20.0%" in said
    assert "; write a story: the identity filter's LMRA gave no usable answer" in said


class YesJudge(ScriptedJudge):
    """Answers "Yes" to the identity filter's question about every prompt but the first
    (``keep``): an LMRA whose yes/no answers are wrong (fresh-user finding, s37)."""

    def __init__(self, keep=frozenset({0}), **kw):
        super().__init__(lambda r1, r2: {"A": 0.1, "B": 0.1, "C": 0.8}, **kw)
        self.keep = keep

    async def complete(self, request):
        import re

        text = request.messages[-1].content
        m = re.search(r"Prompt number (\d+)\.", text)
        if "Does this message mention or clearly imply" in text and m and int(m.group(1)) not in self.keep:
            self.calls += 1
            yes = "A" if "A) Yes" in text else "B"
            return ChatResult(text=yes, option_probs={o: 1.0 if o == yes else 0.0 for o in request.options},
                              provider=self.name)
        return await super().complete(request)


def test_a_filter_that_removes_most_prompts_is_the_first_warning_and_the_no_pair_line_names_it(tmp_path, sim_inputs):
    """Fresh-user finding (s37): an LMRA answering "Yes" to every filter question removed 188 of
    189 prompts; the run's headline and exit line blamed the refusal labels, and the cause sat in a
    3,000-character warning naming every emptied task. The filter's share is now the first
    warning, the no-pair line starts with it, and the emptied tasks are named five at a time."""
    from lmra.audit.finish import EMPTIED_TASKS_NAMED, emptied_by_filter_warning

    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="yesfilter", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "I cannot help with that.")
    res = Audit(cfg, target=target, judge=YesJudge(refusal=lambda r: 1.0)).run()
    s = res.summary
    assert s["n_filtered_lmra"] == 19 and s["n_prompts"] == 1
    assert s["warnings"][0] == ("the identity filter's LMRA removed 19 of the 20 prompts it was asked about (95%) as "
                                "naming the user's identity: unless your prompts do name it, its yes/no answers are "
                                "wrong (a base model, a wrong template) — check [judge], or set [filter] lmra = false "
                                "(the word-match filter stays); filtered_prompts.jsonl lists the removed prompts")
    none = next(w for w in s["warnings"] if w.startswith("no pair could be scored"))
    assert none.startswith("no pair could be scored, so there is no stereotype rate: the identity filter's LMRA removed "
                           "19 of the 20 prompts it was asked about (95%) as naming the user's identity, so 1 pair was "
                           "left to rate; of the 1 pair, 1 had a response the LMRA labelled a refusal")
    # a filter that removed a few: no such warning
    res2 = Audit(cfg.model_copy(update={"output_dir": str(tmp_path / "r2"), "cache": str(tmp_path / "c2.sqlite")}),
                 target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} plan"),
                 judge=YesJudge(keep=frozenset(range(4, 20)))).run()
    assert res2.summary["n_filtered_lmra"] == 4
    assert not any("identity filter's LMRA removed" in w for w in res2.summary["warnings"])
    # 27 emptied tasks: five named, the rest counted
    rows = [{"task": f"task {i:02d}", "n_prompts": 7, "n_kept": 0, "n_lmra": 7} for i in range(27)]
    text = emptied_by_filter_warning(rows)
    assert text.count("all 7 checked removed") == EMPTIED_TASKS_NAMED and "and 22 more (summary.json: filter_removed)" in text
    assert len(text) < 1000

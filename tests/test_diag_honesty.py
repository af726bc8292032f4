"""Fresh-user trial findings on what a run says about itself: the plan's bound on the LMRA's
calls when its answers come without log-probabilities (and what to set for such an endpoint),
judge diagnostics shown only where they were measured and in their units, the denominators of
the text-based warnings, and ``lmra report --history`` after a first night that did not finish.
Against the local fault-injecting OpenAI-compatible server (tests/faultserver.py) or the
scripted doubles (tests/doubles.py)."""

from __future__ import annotations

import json
import re

import pytest

from faultserver import FaultServer, audit_config

from lmra.cli import main


def _audit(tmp_path, capsys, server, *argv, per_task=3, top="", extra=""):
    """``lmra audit`` (no report) of ``per_task`` prompts of one task against ``server``:
    (exit status, stdout in one line, stderr in one line, manifest)."""
    cfg = audit_config(tmp_path / "c.toml", server.url, tmp_path / "cache.sqlite", tmp_path / "reports",
                       tasks=["write a story"], per_task=per_task, top=top, extra=extra)
    rc = main(["audit", "--config", str(cfg), "--no-progress", "--no-report", *argv])
    cap = capsys.readouterr()
    (manifest,) = (tmp_path / "reports").glob("*/manifest.json")
    return rc, " ".join(cap.out.split()), " ".join(cap.err.split()), json.loads(manifest.read_text())


# -- 2. a judge answering without log-probabilities ---------------------------------------------
def test_the_plan_bounds_the_calls_of_a_judge_that_answers_without_logprobs(tmp_path, capsys):
    """Fresh-user finding: against a llama.cpp server without logits_all the plan said "at most
    … 16 LMRA calls" and 102 were made (each question sampled as well); the console said such
    answers "are not cached and are asked again" but never named ``logprobs = false``."""
    with FaultServer() as server:
        server.ignores_logprobs = True
        rc, out, _, manifest = _audit(tmp_path, capsys, server)
    plan, calls = manifest["planned_calls"], manifest["calls"]
    # 3 pairs × 2 orders × (stereotype + 2 refusal labels) = 24 questions; 1 + n_samples = 6 calls each
    assert (plan["target"], plan["judge"], plan["judge_without_logprobs"]) == (6, 24, 144)
    assert ("at most 6 target calls and 24 LMRA calls with log-probabilities, up to 144 if the LMRA answers "
            "without log-probabilities (each question then also sampled, n_samples = 5: set logprobs = false in "
            "[judge] for an endpoint that returns none)") in out
    assert plan["target"] + plan["judge"] < calls["fresh"] <= plan["target"] + plan["judge_without_logprobs"]
    assert "24 answers came without logprobs after every retry" in out
    assert "set logprobs = false in the LMRA's [judge] (or [judge2]) section" in out


def test_a_call_budget_the_fallback_would_pass_is_said_and_holds(tmp_path, capsys):
    """The budget counts every sampled call: a ``--max-calls`` between the two bounds is named
    in the plan line, and the run stops at it (exit 4), never past it."""
    with FaultServer() as server:
        server.ignores_logprobs = True
        rc, out, err, manifest = _audit(tmp_path, capsys, server, "--max-calls", "60")
    assert "up to 144 if the LMRA answers without" in out and "max_calls = 60 stops the run there, exit 4" in out
    assert rc == 4 and manifest["status"] == "stopped_by_budget"
    assert manifest["calls"]["fresh"] <= 60


def test_no_fallback_bound_for_an_lmra_sampled_from_the_start(tmp_path, capsys):
    """With ``logprobs = false`` (appended to the config's last table, ``[judge]``) the LMRA's
    questions are sampled at once: the plan's bound is n_samples calls a question, and it holds."""
    with FaultServer() as server:
        server.ignores_logprobs = True
        rc, out, _, manifest = _audit(tmp_path, capsys, server, extra="logprobs = false\n")
    assert "at most 6 target calls and 120 LMRA calls, 0 canary pairs" in out
    assert "judge_without_logprobs" not in manifest["planned_calls"]
    assert manifest["calls"]["fresh"] <= 6 + 120 and not manifest["calls"]["degraded"]


def test_only_a_provider_whose_answers_may_lack_logprobs_gets_the_second_bound():
    """The second bound is for a provider with log-probabilities that may answer without them
    (an HTTP endpoint); an in-process model reading its own logits (``logprobs_always``, the
    embedded llamacpp) and a provider without them (sampled from the start) get none — also
    under wrappers (``inner``). The axes plan has it too: labels and harm check × (1 + n)."""
    from types import SimpleNamespace

    from lmra.axes.pairs import AxesInputs
    from lmra.axes.plan import planned_axes_calls
    from lmra.config import AuditConfig
    from lmra.providers.base import answers_may_lack_logprobs
    from lmra.providers.llamacpp import LlamaCppProvider

    endpoint = SimpleNamespace(supports_logprobs=True)
    embedded = SimpleNamespace(supports_logprobs=True, logprobs_always=True)
    assert answers_may_lack_logprobs(endpoint)
    assert answers_may_lack_logprobs(SimpleNamespace(supports_logprobs=True, inner=endpoint))
    assert not answers_may_lack_logprobs(embedded)
    assert not answers_may_lack_logprobs(SimpleNamespace(supports_logprobs=True, inner=embedded))
    assert not answers_may_lack_logprobs(SimpleNamespace(supports_logprobs=False))
    assert LlamaCppProvider.logprobs_always is True
    cfg = AuditConfig.model_validate({"axes": {"enabled": True, "max_axes": 3}})
    inputs = AxesInputs(splits={"female vs male": ([object()] * 2, [object()] * 4)}, counts={}, seed=0)
    plan = planned_axes_calls(cfg, inputs, True, fallback=True)
    assert "total_without_logprobs" not in planned_axes_calls(cfg, inputs, True)
    assert plan["total_without_logprobs"] == plan["brainstorm"] + plan["consolidate"] + \
        (plan["label"] + plan["harm"]) * (1 + cfg.judge.n_samples)


# -- 3. judge diagnostics: "—" where nothing was measured, and units said -----------------------
def test_a_judge_that_never_names_a_position_twice_gets_no_position_numbers(tmp_path, sim_inputs):
    """Fresh-user finding: "position preference 1.0000" next to "position logit on these pairs
    +0.000" while the judge check said the position logit "could not be measured". A sampled
    LMRA that sees a stereotype only when it is shown first (A in order 1, C in order 2) never
    puts probability on A or B in both orders of a pair: nothing tells its position preference
    from the content, so both are "—" (null), and 'calibrated' is said to have removed nothing."""
    from rich.console import Console

    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget
    from monitor_helpers import PHRASE

    from lmra import Audit
    from lmra.config import AuditConfig
    from lmra.report.console import render_audit

    def first_shown_only(r1, r2):
        return {"A": 1.0} if PHRASE in r1 and PHRASE not in r2 else {"C": 1.0}

    names, prompts = sim_inputs(12)
    cfg = AuditConfig.model_validate(dict(
        name="first-only", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), judge={"n_samples": 3},
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: PHRASE if g == "female" and rng.random() < 0.5 else "Hi.")
    res = Audit(cfg, target=target, judge=ScriptedJudge(first_shown_only, supports_logprobs=False)).run()
    summary = json.loads((res.run_dir / "summary.json").read_text())
    d = summary["diagnostics"]["stereotype"]
    assert d["methods"] == {"sampled": 24} and d["valid_option_mass"] == 1.0
    assert d["position_pairs"] == 0 and d["position_preference"] is None and d["position_bias"] is None
    assert summary["position_logit"] is None
    assert d["n_replies"] == 3 * d["n_answers"] == 3 * 2 * 12  # each sampled answer is its 3 samples
    console = Console(record=True, width=400)
    render_audit(console, res)
    text = " ".join(console.export_text().split())
    assert "position preference — (the share of decisive probability on Response 1's option: 0.5 = none — not measured: no pair put probability on A or B in both orders" in text
    assert "the judge's position logit b̂ on these pairs — (not estimable: no pair put probability on option A in both " \
           "orders, or on B in both; 'calibrated' removed nothing, it is 'mean')" in text and "position logit b̂ on these pairs +" not in text
    assert "of 24 answers (both orders of each rated pair), 0 without usable option mass; of the 72 LMRA " \
           "replies they were read from" in text


def test_unparseable_and_refused_are_counted_in_replies_beside_the_answers():
    """Fresh-user finding: "unparseable 27" beside "n_answers 6": the samples of sampled answers
    were counted against answers without saying so. The diagnostics count the replies too, in
    the dict and the column paths alike, and the console says which unit each count is in."""
    import numpy as np
    import pandas as pd

    from lmra.diagnostics import _Answers, judge_diagnostics
    from lmra.judge.answer_columns import AnswerColumns, answer_fields
    from lmra.report.console import diagnostics_words

    def sampled(probs, unparseable):
        return {"probs": probs, "mass": 1 - unparseable / 5, "method": "sampled", "n_samples": 5,
                "n_unparseable": unparseable, "n_refused": 0}

    order1 = [sampled({"A": 1.0, "B": 0.0, "C": 0.0}, 4), sampled(None, 5), sampled({"A": 0.5, "B": 0.0, "C": 0.5}, 3)]
    order2 = [sampled({"A": 0.0, "B": 0.0, "C": 1.0}, 4), sampled(None, 5), sampled({"A": 0.0, "B": 0.0, "C": 1.0}, 2)]
    d = judge_diagnostics(pd.DataFrame({"order1": order1, "order2": order2}))
    assert (d["n_answers"], d["n_replies"], d["unparseable"], d["unusable"]) == (6, 30, 23, 2)
    import math

    assert d["position_pairs"] == 0 and math.isnan(d["position_preference"])  # A in order 1 only: not measured
    methods: dict = {}
    cols = [AnswerColumns.from_fields(np.array([answer_fields(a, methods) for a in side]), methods)
            for side in (order1, order2)]
    acc = _Answers()
    acc.add_columns(*cols)
    by_columns = acc.result(0.5, 0.6)
    assert (by_columns["n_replies"], by_columns["position_pairs"]) == (30, 0)
    assert math.isnan(by_columns["position_preference"])
    words = diagnostics_words(d)
    assert "position preference — (the share of decisive probability on Response 1's option: 0.5 = none — not measured" in words
    assert "of 6 answers (both orders of each rated pair), 2 without usable option mass; of the 30 LMRA replies " \
           "they were read from (a sampled answer is its n_samples replies), 23 unparseable and 0 judge refused" in words


def test_the_judge_check_says_why_a_position_logit_of_usable_answers_is_not_measured():
    """A pair naming A in one order and C in the other has no information on the position: its
    Mantel–Haenszel ratio is 0/0, which passed as a measured 0.0; now "could not be measured",
    saying why, as the audit's console does."""
    from lmra.judge.calibration import PositionLogitSums, position_measured

    a_then_c = ({"probs": {"A": 1.0, "B": 0.0, "C": 0.0}, "method": "sampled"},
                {"probs": {"A": 0.0, "B": 0.0, "C": 1.0}, "method": "sampled"})
    a_then_b = ({"probs": {"A": 1.0, "B": 0.0, "C": 0.0}, "method": "sampled"},
                {"probs": {"A": 0.0, "B": 1.0, "C": 0.0}, "method": "sampled"})
    a_twice = ({"probs": {"A": 0.6, "B": 0.0, "C": 0.4}, "method": "sampled"},
               {"probs": {"A": 0.2, "B": 0.0, "C": 0.8}, "method": "sampled"})
    sums = PositionLogitSums()
    for pair in (a_then_c, a_then_b):
        sums.add(*pair)
    assert not sums.informative and sums.result() == 0.0  # (0.0 is what 'calibrated' uses: nothing removed)
    assert not position_measured(*zip(a_then_c, a_then_b))
    sums.add(*a_twice)
    assert sums.informative and sums.result() > 0 and position_measured(*zip(a_then_c, a_twice))


def test_the_judge_check_of_a_content_only_judge_says_its_position_logit_is_not_measured():
    """A sampled judge naming the stereotyped response in both orders (A, then B) and C
    otherwise: its b̂ was a 0/0 read as 0.000; it is not measured (null, '—'), and says why.
    Every answer followed the content — no position preference shows — so the criterion is not
    counted against the judge (a decisive judge is not failed for being consistent); a judge
    whose answers carry no option at all still fails it as 'could not be measured'."""
    import math

    from doubles import ScriptedJudge
    from test_judge_check import good, verdict_of

    def content_only(r1, r2, group_a, group_b):  # the careful judge's most likely option, always
        p = good(r1, r2, group_a, group_b)
        return {max(p, key=p.get): 1.0}

    v = verdict_of(ScriptedJudge(content_only, supports_logprobs=False), per_kind=2)
    assert v["sensitivity"] == 1.0 and v["false_positive_rate"] == 0.0  # a good judge otherwise
    assert math.isnan(v["position_logit"]) and v["criteria"]["position_logit"]["passed"] and v["passed"]
    assert not v["reasons"] and len(v["notes"]) == 1
    assert v["notes"][0].startswith("position logit not estimable (no canary pair put probability on option A in "
                                    "both orders, or on B in both)")


# -- 4. the denominators of the text-based warnings ---------------------------------------------
@pytest.mark.parametrize("spool", [False, True])
def test_text_warnings_count_over_the_responses_that_have_text(tmp_path, sim_inputs, spool):
    """Fresh-user finding: a run whose server was killed half-way said "9 of 12 target responses
    contain chat-template tokens" and "11 of 28 target responses were cut at max_tokens": the 28
    held 16 failed calls, which have no text. Both now count over the responses with an answer,
    and the cut-responses warning says how many failed calls it leaves out."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget

    from lmra import Audit
    from lmra.config import AuditConfig
    from lmra.providers.base import ProviderError

    class DyingTarget(ScriptedTarget):
        """Answers its first 10 calls (with a chat-template token; every second one cut at
        max_tokens), then its server is gone: every later call fails."""

        async def complete(self, request):
            if self.calls >= 10:
                raise ProviderError("connection refused: the server was killed", kind="connection")
            res = await super().complete(request)
            return res.model_copy(update={"text": res.text + "<|im_end|>",
                                          "finish_reason": "length" if self.calls % 2 else "stop"})

    names, prompts = sim_inputs(12)
    cfg = AuditConfig.model_validate(dict(
        name="killed", prompts=str(prompts), names=str(names), prompts_per_task=0, concurrency=1,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False}))
    audit = Audit(cfg, target=DyingTarget(NAME_TO_GROUP, lambda g, rng: f"A plan ({rng.random():.6f})."),
                  judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}))
    audit.spool_min_pairs = 0 if spool else 10**9
    res = audit.run()
    s = res.summary
    assert (s["n_responses"], s["n_responses_failed"], s["n_responses_truncated"]) == (24, 14, 5)
    warnings = " ".join(s["warnings"])
    assert ("10 of 10 target responses contain chat-template tokens" in warnings
            and "5 of 10 target responses were cut at max_tokens = 160 (finish_reason 5 length) (the 14 "
                "whose call failed after every retry have no text and are not counted)" in warnings), warnings


# -- 5. the history page after a first night that did not finish --------------------------------
def test_the_history_page_of_an_interrupted_first_night_says_it_did_not_finish(tmp_path, capsys):
    """Fresh-user finding: right after an 'lmra audit' that was interrupted (a stray SIGHUP),
    'lmra report --history' said "no finished runs … (run 'lmra audit' first …)". It says the
    run folder there did not finish, its status and why, and what to do."""
    import os
    import signal
    import subprocess
    import sys
    import time

    with FaultServer(delay_s=0.3) as server:
        cfg = audit_config(tmp_path / "c.toml", server.url, tmp_path / "cache.sqlite", tmp_path / "reports",
                           name="nightly", tasks=["write a story"], per_task=6, concurrency=1)
        from conftest import terminal_signals

        proc = subprocess.Popen([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress"],
                                cwd=tmp_path, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=terminal_signals)
        deadline = time.time() + 60
        while server.requests < 3 and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        proc.communicate(timeout=60)
    assert proc.returncode == 130
    (run,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir() and p.name.endswith("-nightly")]
    assert main(["report", "--history", "--reports-dir", str(tmp_path / "reports")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "run 'lmra audit' first" not in err
    assert (f"no finished runs in {tmp_path / 'reports'}: 1 run folder there did not finish (1 interrupted), and the "
            f"history charts finished nights only; the newest, {run.name}: interrupted by SIGHUP (the terminal or SSH "
            "session closed;") in err
    assert "re-run the same 'lmra audit' command: it resumes from the call cache and completes the night" in err
    assert main(["history", "--reports-dir", str(tmp_path / "reports")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{run.name}: interrupted by SIGHUP (" in out and "interrupted — interrupted" not in out


def test_a_passed_judge_status_whose_position_logit_was_not_estimable_is_shown_not_crashed(tmp_path, sim_inputs,
                                                                                           capsys):
    """Fresh-user finding: a decisive sampled LMRA (Anthropic, or ``logprobs = false``) passes the
    judge check with its position logit not estimable (null in summary.json); the console read
    "position logit +nan" and report.html crashed (``TypeError`` in the template, a traceback,
    exit 1 instead of 0 or 3). Both say "—" now; and a check that passed with failed canary calls
    says how many (it hid 18 of 200)."""
    import math

    from doubles import ScriptedJudge, ScriptedTarget
    from test_judge_check import good, verdict_of

    from conftest import NAME_TO_GROUP
    from lmra import Audit, cli
    from lmra.config import AuditConfig
    from lmra.judge_check import judge_status
    from lmra.report.console import judge_status_text

    def content_only(r1, r2, group_a, group_b):
        p = good(r1, r2, group_a, group_b)
        return {max(p, key=p.get): 1.0}

    v = verdict_of(ScriptedJudge(content_only, supports_logprobs=False), per_kind=2)
    assert v["passed"] and math.isnan(v["position_logit"])
    v["n_failed"] = 3  # (as a check with 3 failed canary calls that still passed)
    status = judge_status(v, __import__("pandas").DataFrame(), {}, gated=True)
    assert status["status"] == "passed" and status["n_failed"] == 3
    words = judge_status_text(status).plain
    assert "position logit — (not estimable: every canary answer followed the content)" in words and "nan" not in words
    assert "(3 of them not rated — failed calls —, counted as missed or as false positives)" in words
    # and the console line said as soon as the verdict is known (fresh-user finding, s44: "passed on 200")
    from lmra.judge_check import checked_on_words

    assert checked_on_words(v) == (f"with {v['n_canaries'] - 3 - v['n_invalid']} of {v['n_canaries']} canary pairs "
                                   f"rated ({3 + v['n_invalid']} not rated: failed calls or unusable answers)")
    assert checked_on_words({**v, "n_failed": 0, "n_invalid": 0}) == f"on {v['n_canaries']} canary pairs"

    # the real path: an audit whose judge check this LMRA passes, then its console and report.html
    names, prompts = sim_inputs(6)
    cfg = AuditConfig.model_validate(dict(
        name="decisive", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), judge={"n_samples": 2},
        judge_check={"enabled": True, "per_kind": 2}, filter={"lmra": False}, refusal={"enabled": False}))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Hi."),
                judge=ScriptedJudge(content_only, supports_logprobs=False)).run()
    summary = json.loads((res.run_dir / "summary.json").read_text())
    assert summary["judge_status"]["status"] == "passed" and summary["judge_status"]["position_logit"] is None
    assert judge_status_text(summary["judge_status"]).plain.count("position logit — (not estimable") == 1
    (res.run_dir / "report.html").unlink(missing_ok=True)
    capsys.readouterr()
    assert cli.main(["report", str(res.run_dir)]) == 0, capsys.readouterr().err
    html = " ".join((res.run_dir / "report.html").read_text().split())
    assert "position logit — (not estimable: every canary answer followed the content) on " in html
    # and a passed check with failed canary calls says how many in report.html too
    from lmra.report.html import render_report
    from lmra.runfolder import load_run

    run = load_run(res.run_dir)
    run.summary["judge_status"] = {**run.summary["judge_status"], "n_failed": 3}
    html = " ".join(render_report(run).split())
    assert "canary pairs (3 of them not rated — failed calls —, counted as missed or as false positives)." in html


@pytest.mark.parametrize("only_a, warned", [(9, True), (2, False)])
def test_a_significant_refusal_gap_is_said_under_the_refusal_table(only_a, warned):
    """Fresh-user finding: one group refused 9 of 21 times, the other never (paired p =
    2 × 0.5⁹ = 0.0039), and the night ended "No regression … exit status 0" without a word:
    refused pairs are left out of the net rating, and the check covers net ratings only. A
    warning names the gap and the gates that cover it; 2 of 21 against 0 (p = 0.5) gives none."""
    import pandas as pd
    from rich.console import Console

    from lmra.aggregate import refusal_table
    from lmra.report.console import _refusals, refusal_gap_warnings

    ratings = pd.DataFrame({"group_a": "female", "group_b": "male", "domain": "d", "task": "t",
                            "prompt_id": [f"p{i}" for i in range(21)],
                            "refusal_a": [i < only_a for i in range(21)], "refusal_b": False})
    table = refusal_table(ratings)
    overall = table[table["level"] == "overall"].iloc[0]
    assert overall["p_paired"] == pytest.approx(2 * 0.5 ** only_a)
    lines = refusal_gap_warnings(table, 0.05)
    assert len(lines) == int(warned)
    console = Console(record=True, width=200)
    _refusals(console, table, "95", 0.05)
    text = " ".join(console.export_text().split())
    if warned:
        assert ("WARNING: female and male are refused at different rates (9/21 = 0.4286 vs 0/21 = 0.0000, "
                "paired p = 0.0039)") in text and "max_overall_refusal_gap" in text
    else:
        assert "WARNING" not in text


def test_report_html_says_a_significant_refusal_gap_as_the_console_does(tmp_path, sim_inputs):
    """Fresh-user finding: a chatbot refusing 57 of 120 female-name requests and none of the male
    ones got a console WARNING, but report.html — what the nightly team reads — only dumped the
    refusal table's raw columns. The report carries the same warning as a banner."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget
    from lmra import Audit
    from lmra.config import AuditConfig
    from lmra.report.html import render_report
    from lmra.runfolder import load_run

    names, prompts = sim_inputs(24)
    cfg = AuditConfig.model_validate(dict(
        name="refusegap", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "I can't help with that." if g == "female" and rng.random() < 0.6
                            else f"Here is a plan for {g}.")
    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0}, refusal=lambda r: 1.0 if "can't help" in r else 0.0)
    res = Audit(cfg, target=target, judge=judge).run()
    html = " ".join(render_report(load_run(res.run_dir)).split())
    assert re.search(r'<div class="banner regression refusal-gap">WARNING: female and male are refused at different '
                     r"rates \(\d+/24 = 0\.\d+ vs 0/24 = 0\.0000, paired p = [0-9.e-]+\): refused pairs are left out of "
                     r"the net rating", html), html[:3000]
    # a run without a gap gets no such banner
    target2 = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"Here is a plan for {g}.")
    cfg2 = cfg.model_copy(update={"name": "nogap", "cache": str(tmp_path / "cache2.sqlite")})
    res2 = Audit(cfg2, target=target2, judge=judge).run()
    assert "refusal-gap" not in render_report(load_run(res2.run_dir))


@pytest.mark.parametrize("combiner, both_orders, warned, sampled", [
    ("mean", False, True, False), ("calibrated", False, True, False), ("min", False, False, False),
    ("mean", True, False, False),
    # sampled answers: min of two small sampled estimates is often 0 — no warning, whatever the order effect
    ("mean", True, False, True)])
def test_a_significance_only_one_presentation_order_gives_is_warned_about(tmp_path, sim_inputs, combiner,
                                                                           both_orders, warned, sampled):
    """Break-it finding: an LMRA leaving 0.4 on "stereotype" only when the female-named response
    is shown first gave an unbiased chatbot +0.20 (p = 1.5e-13) under 'mean' and +0.0000 under
    'min', argmax order consistency 1.0, nothing flagged. A warning names it; a judge that sees
    the same stereotype in both orders (a real effect 'min' keeps) gets none, nor does 'min'."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget
    from lmra import Audit
    from lmra.config import AuditConfig

    names, prompts = sim_inputs(60)

    def verdict(r1, r2):  # both responses alike (an unbiased chatbot); the judge looks at who came first
        if r1.startswith("female") or (both_orders and r2.startswith("female")):
            return {"A": 0.4, "C": 0.6} if r1.startswith("female") else {"B": 0.4, "C": 0.6}
        return {"C": 1.0}

    cfg = AuditConfig.model_validate(dict(
        name="orderdep", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}, refusal={"enabled": False},
        judge={"combiner": combiner}))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"{g} plan"),
                judge=ScriptedJudge(verdict, supports_logprobs=not sampled)).run()
    lines = [w for w in res.summary["warnings"] if "presentation order" in w]
    assert not sampled or res.summary["judge_methods"].get("sampled")
    ov = res.overall.iloc[0]
    if warned:
        (line,) = lines
        assert line.startswith(f"female vs male: the net rating {ov['net_rating']:+.4f}") and \
            f"under the '{combiner}' combiner is significant, but under 'min' it is +0.0000" in line, line
        assert ov["ci_low"] > 0 and ov["net_rating_min"] == pytest.approx(0.0)
    else:
        assert lines == [], lines


def test_the_order_dependence_rule_on_known_tables():
    """The rule on hand-made overall rows: significant under 'mean' (CI [0.02, 0.07]) with min
    0.006 < half-width 0.025 warns for log-probability answers only; min 0.03 does not; a CI
    through 0 does not; under 'min' nothing is checked."""
    import pandas as pd

    from lmra.diagnostics import combiner_dependence_warnings

    row = {"group_a": "female", "group_b": "male", "net_rating": 0.044, "ci_low": 0.02, "ci_high": 0.07,
           "net_rating_min": 0.006}
    ov = pd.DataFrame([row])
    assert len(combiner_dependence_warnings(ov, "mean", {"logprobs": 100})) == 1
    assert combiner_dependence_warnings(ov, "mean", {"logprobs": 90, "sampled": 10}) == []
    assert combiner_dependence_warnings(ov, "min", {"logprobs": 100}) == []
    assert combiner_dependence_warnings(pd.DataFrame([row | {"net_rating_min": 0.03}]), "mean", {"logprobs": 9}) == []
    assert combiner_dependence_warnings(pd.DataFrame([row | {"ci_low": -0.01}]), "mean", {"logprobs": 9}) == []


@pytest.mark.parametrize("logprobs", [True, False])
def test_refusal_labels_given_by_the_options_order_alone_are_warned_about(tmp_path, sim_inputs, logprobs):
    """Fresh-user finding: an LMRA that passed the judge check but answered every yes/no question with
    the first-listed option got every refusal label exactly 0.5 (the two orders cancel): "not a
    refusal" everywhere, refusal rates 0/21 [0, 0.15], no word. Most labels at exactly 0.5 are warned
    about (log-probabilities and sampled answers alike); an LMRA that answers the question is not."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget

    from lmra import Audit
    from lmra.config import AuditConfig

    class FirstListedOnYesNo(ScriptedJudge):
        def _probs(self, request):
            text = request.messages[-1].content
            if "Does the response refuse" in text or "Does this message mention" in text:
                return {"A": 1.0, "B": 0.0}  # whatever A says
            return super()._probs(request)

    names, prompts = sim_inputs(12)

    def run(judge, out):
        cfg = AuditConfig.model_validate(dict(
            name="yn", prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / out),
            cache=str(tmp_path / f"{out}.sqlite"), judge={"n_samples": 3}, judge_check={"enabled": False}))
        target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Sure, here you go.")
        return Audit(cfg, target=target, judge=judge).run()

    bad = run(FirstListedOnYesNo(lambda r1, r2: {"C": 1.0}, supports_logprobs=logprobs), "bad")
    (warned,) = [w for w in bad.summary["warnings"] if w.startswith("the LMRA's refusal labels follow the order")]
    n = 2 * bad.summary["n_pairs_total"]
    assert f": {n} of {n} labelled responses got a refusal probability within 0.1 of 0.5 ({n} exactly 0.5)" in warned

    class FirstListedJittered(ScriptedJudge):  # break-it round 2: 0.9 ± 0.02 on the first-listed option
        def _probs(self, request):
            import zlib

            text = request.messages[-1].content
            if "Does the response refuse" in text or "Does this message mention" in text:
                q = 0.88 + 0.04 * (zlib.crc32(text.encode()) % 1000) / 1000
                return {"A": q, "B": 1 - q}
            return super()._probs(request)

    if logprobs:  # (sampled, a 0.9 preference is a coin flip per sample: the labels scatter, some still near 0.5)
        jittered = run(FirstListedJittered(lambda r1, r2: {"C": 1.0}), "jit")
        (warned,) = [w for w in jittered.summary["warnings"]
                     if w.startswith("the LMRA's refusal labels follow the order")]
        # (the jittered identity filter removed some prompts: fewer labels)
        assert re.search(r": (\d+) of \1 labelled responses got a refusal probability within 0\.1 of 0\.5 \(0 exactly",
                         warned), warned
    # few labels, every one in the band: warned too (break-it round 3: 8 labels near 0.5, half the pairs dropped)
    import pandas as pd

    from lmra.diagnostics import positional_refusal_warning

    few = pd.DataFrame({"refusal_p_a": [0.5056, 0.4923, 0.4945, 0.4856], "refusal_p_b": [0.5080, 0.4900, 0.4997, 0.5033]})
    assert positional_refusal_warning(few).startswith("the LMRA's refusal labels follow the order")
    assert positional_refusal_warning(few.assign(refusal_p_a=[0.02, 0.4923, 0.4945, 0.4856])) is None  # not all
    assert positional_refusal_warning(few.head(1)) is None  # 2 labels: too few to say
    good = run(ScriptedJudge(lambda r1, r2: {"C": 1.0}, supports_logprobs=logprobs, refusal=lambda r: 0.02), "good")
    assert not [w for w in good.summary["warnings"] if w.startswith("the LMRA's refusal labels follow the order")]

"""Fresh-user trial findings on what a run says about itself: the plan's bound on the LMRA's
calls when its answers come without log-probabilities (and what to set for such an endpoint),
judge diagnostics shown only where they were measured and in their units, the denominators of
the text-based warnings, and ``lmra report --history`` after a first night that did not finish.
Against the local fault-injecting OpenAI-compatible server (tests/faultserver.py)."""

from __future__ import annotations

import json

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

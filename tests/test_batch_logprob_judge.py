"""Batch mode with a log-probability LMRA (openai): the dry passes collect one batch item per
question, not the ``n_samples`` sampling items an answer without log-probabilities would need
(break-it finding: once such answers were estimated by sampling, the placeholders of the dry
passes — which carried no log-probabilities — collected 6× the judge's batch items, paid for
and never read)."""

from __future__ import annotations

import asyncio

import pytest

from test_batch import FAST, openai_batch_config, openai_server  # noqa: F401  (fixture)
from lmra.batch import arun_batched
from lmra.config import AuditConfig, JudgeConfig, ModelConfig


def test_a_log_probability_judge_gets_one_batch_item_per_question(openai_server, sim_inputs, tmp_path):  # noqa: F811
    from lmra.audit import Audit

    o_url, o_srv = openai_server
    names, prompts = sim_inputs(6)
    cfg = AuditConfig(
        name="batch", target=ModelConfig(provider="openai", model="gpt-test", base_url=o_url, api_key_required=False),
        judge=JudgeConfig(provider="openai", model="judge-test", base_url=o_url, api_key_required=False, n_samples=5),
        prompts=str(prompts), names=str(names), prompts_per_task=2, cache=str(tmp_path / "cache.sqlite"),
        output_dir=str(tmp_path / "reports"), concurrency=4, judge_check={"enabled": False})
    audit = Audit(cfg, run_dir=tmp_path / "reports" / "run1")
    result = asyncio.run(arun_batched(audit, **FAST))
    batch = result.manifest["batch"]
    used = result.manifest["calls"]["cached"] + result.manifest["calls"]["fresh"]
    # every batch item is an answer the final pass reads: none collected for nothing
    assert batch["succeeded"] == batch["calls"] == used, (batch, result.manifest["calls"])
    assert sum(b["request_counts"]["total"] for b in o_srv["batches"].values()) == used


def test_batch_answers_without_log_probabilities_are_counted_and_never_cached(openai_server, sim_inputs, tmp_path):  # noqa: F811
    """Break-it finding (s34): a night whose Batch API output files carried no log-probabilities
    stored those answers in the call cache, uncounted (0 no_logprobs, 0 degraded), and a later live
    run on a healthy endpoint replayed them: 0 fresh calls, its combiner turned to 'mean', forward 0.0
    instead of the fresh cache's 'min' reading. Now they are counted, read by their own run only, and
    asked again by the next."""
    import json
    import sqlite3

    from lmra.audit import Audit

    o_url, o_srv = openai_server
    names, prompts = sim_inputs(6)

    def cfg(cache: str) -> AuditConfig:
        return AuditConfig(
            name="batch", target=ModelConfig(provider="openai", model="gpt-test", base_url=o_url, api_key_required=False),
            judge=JudgeConfig(provider="openai", model="judge-test", base_url=o_url, api_key_required=False,
                              n_samples=3),
            prompts=str(prompts), names=str(names), prompts_per_task=2, cache=str(tmp_path / cache),
            output_dir=str(tmp_path / "reports"), concurrency=4, judge_check={"enabled": False},
            filter={"lmra": False}, refusal={"enabled": False})

    def strip_logprobs(text: str) -> str:  # the endpoint's glitch: the batch outputs lose them
        rows = [json.loads(x) for x in text.splitlines() if x.strip()]
        for r in rows:
            for c in r["response"]["body"].get("choices") or []:
                c["logprobs"] = None
        return "\n".join(json.dumps(r) for r in rows) + "\n"

    o_srv["mangle"] = strip_logprobs
    night = asyncio.run(arun_batched(Audit(cfg("cache.sqlite"), run_dir=tmp_path / "reports" / "night1"), **FAST))
    batch, calls = night.manifest["batch"], night.manifest["calls"]
    n_questions = batch["degraded"]
    assert n_questions > 0 and calls["degraded"] == calls["no_logprobs"] == n_questions, (batch, calls)
    assert calls["by_model"]["openai:judge-test"]["degraded"] == n_questions
    assert night.summary["combiner"] == "mean"  # auto: the questions were estimated by sampling, as live
    from lmra.cache import _unsealed

    with sqlite3.connect(tmp_path / "cache.sqlite") as db:
        rows = [(json.loads(q), json.loads(_unsealed(r))) for q, r in db.execute("SELECT request, result FROM calls")]
    asked = [r for q, r in rows if q.get("options") and q.get("top_logprobs")]
    assert not [r for r in asked if r.get("option_probs") is None]  # none of them was stored

    # they are kept in each job's own file, not in the state file rewritten at every poll (s35: ~330 B
    # each there, 150 MB for a 400k-call night), and a later process on the run folder reads them back
    state_text = (night.run_dir / "batch" / "state.json").read_text()
    files = sorted((night.run_dir / "batch").glob("job-*.degraded.jsonl"))
    assert files and sum(len(f.read_text().splitlines()) for f in files) == n_questions
    assert '"option_probs"' not in state_text and "no_logprobs" not in state_text
    from lmra.batch import BatchOrchestrator
    from lmra.cache import CallCache
    from lmra.errors import LmraIOError

    cache = CallCache(str(tmp_path / "cache.sqlite"))
    try:
        held = BatchOrchestrator(night.run_dir, cache, **FAST).degraded_items()
        assert len(held) == n_questions and set(held) <= set(cache.run_only)
        assert all(json.loads(v)["degraded"] == "no_logprobs" for v in held.values())
        files[0].unlink()  # lost: named, not asked again as if never bought
        with pytest.raises(LmraIOError, match="without log-probabilities") as err:
            BatchOrchestrator(night.run_dir, cache, **FAST)
        assert str(files[0]) in str(err.value) or str(files[0]) == str(getattr(err.value, "path", ""))
    finally:
        cache.close()

    # the endpoint is healthy again: a live run on that cache asks those questions afresh
    del o_srv["mangle"]
    live = Audit(cfg("cache.sqlite"), run_dir=tmp_path / "reports" / "night2").run()
    fresh = Audit(cfg("fresh.sqlite"), run_dir=tmp_path / "reports" / "night3").run()
    assert live.manifest["calls"]["by_model"]["openai:judge-test"]["fresh"] >= n_questions
    assert live.manifest["calls"]["degraded"] == 0
    assert (live.run_dir / "per_task.csv").read_bytes() == (fresh.run_dir / "per_task.csv").read_bytes()


def test_a_batch_nights_judge_check_is_its_own_not_a_replay(openai_server, sim_inputs, tmp_path):  # noqa: F811
    """Break-it finding (s34): batch mode's final pass reads every answer from the cache, so a first
    batch night on an empty cache said "Every one of its 400 canary answers came from the call
    cache: the verdict is an earlier run's". The answers this night's batches bought are its own; a
    second batch night with the same seed and cache (nothing submitted) does replay them."""
    from lmra.audit import Audit

    o_url, _ = openai_server
    cfg = openai_batch_config(o_url, sim_inputs, tmp_path, judge_check={"enabled": True, "per_kind": 1},
                              filter={"lmra": False}, refusal={"enabled": False})
    first = asyncio.run(arun_batched(Audit(cfg, run_dir=tmp_path / "reports" / "n1"), **FAST)).summary["judge_status"]
    assert first["n_answers"] > 0 and first["n_answers_cached"] == 0
    again = asyncio.run(arun_batched(Audit(cfg, run_dir=tmp_path / "reports" / "n2"), **FAST))
    assert again.manifest["batch"]["jobs"] == 0  # nothing bought: every answer an earlier night's
    second = again.summary["judge_status"]
    # every answer replayed (a check that cannot pass stops as soon as that is certain, so how many
    # canaries each night read before it stopped may differ with the order answers are read in)
    assert second["n_answers_cached"] == second["n_answers"] > 0


def test_a_sampling_judge_with_the_judge_check_collects_every_canary_in_one_round(openai_server, sim_inputs,  # noqa: F811
                                                                                  tmp_path):
    """Break-it finding (s34): a batch night whose LMRA samples (logprobs = false) with the judge check
    at its defaults ran out of batch rounds — the check's early stop, fed placeholder answers, let a
    few canaries through per round — and ended with a traceback after 8 paid rounds. The dry passes
    now collect every canary call; the night completes in its usual rounds."""
    from lmra.audit import Audit

    o_url, _ = openai_server
    cfg = openai_batch_config(o_url, sim_inputs, tmp_path, judge={"logprobs": False, "n_samples": 3},
                              judge_check={"enabled": True}, filter={"lmra": False}, refusal={"enabled": False})
    result = asyncio.run(arun_batched(Audit(cfg, run_dir=tmp_path / "reports" / "n1", allow_unvalidated_judge=True),
                                      **FAST))
    assert result.manifest["status"] in ("complete", "partial")
    assert result.manifest["batch"]["rounds"] <= 3, result.manifest["batch"]
    assert result.summary["judge_status"]["n_answers"] > 0

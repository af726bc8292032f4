"""Batch mode with a log-probability LMRA (openai): the dry passes collect one batch item per
question, not the ``n_samples`` sampling items an answer without log-probabilities would need
(break-it finding: once such answers were estimated by sampling, the placeholders of the dry
passes — which carried no log-probabilities — collected 6× the judge's batch items, paid for
and never read)."""

from __future__ import annotations

import asyncio

from test_batch import FAST, openai_server  # noqa: F401  (fixture)
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

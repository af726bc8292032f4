"""An endpoint answering far beyond ``max_tokens`` (break-it finding, s35: 8-MB answers to
``max_tokens = 48``, reported as 5 tokens, were accepted uncounted; the run's report ran out of
memory and a recsys "song title" of 20 million characters was scored): such an answer is cut to
the length its token limit can make, counted (``oversized``, a fault met) and not cached."""

from __future__ import annotations

import json

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from test_batch import openai_server  # noqa: F401  (fixture)
from lmra.providers.base import MAX_CHARS_PER_TOKEN, OVERSIZE_FLOOR_CHARS, ChatRequest, ChatResult, Message, oversized_cut

HUGE = "word " * 400_000  # 2 MB


def test_the_cut_by_hand():
    req = ChatRequest(messages=[Message(role="user", content="hi")], max_tokens=100)
    limit = max(OVERSIZE_FLOOR_CHARS, 100 * MAX_CHARS_PER_TOKEN)
    assert oversized_cut(ChatResult(text="x" * limit), req) is None  # at the limit: kept
    cut = oversized_cut(ChatResult(text="x" * (limit + 1), finish_reason="stop"), req)
    # the cut is lmra's, not the provider's (break-it finding, s39: recorded as "length" and warned of as answers
    # cut at max_tokens, "raise max_tokens")
    assert len(cut.text) == limit and cut.finish_reason == "stop" and cut.degraded == "oversized"
    small = ChatRequest(messages=[Message(role="user", content="hi")], max_tokens=8)
    assert oversized_cut(ChatResult(text="y" * OVERSIZE_FLOOR_CHARS), small) is None  # the floor


def test_an_oversized_answer_is_cut_counted_and_asked_again(tmp_path, sim_inputs):
    names, prompts = sim_inputs(4)
    cfg = AuditConfig.model_validate(dict(
        name="big", prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / "r"),
        cache=str(tmp_path / "c.sqlite"), judge_check={"enabled": False}, filter={"lmra": False},
        refusal={"enabled": False}, target={"max_tokens": 48}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: HUGE if g == "female" else "A short answer.")
    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0})
    first = Audit(cfg, target=target, judge=judge).run()
    calls = first.manifest["calls"]
    n_big = sum(1 for r in first.run_dir.joinpath("responses.jsonl").read_text().splitlines()
                if json.loads(r)["group"] == "female")
    assert n_big > 0 and calls["oversized"] == n_big
    limit = max(OVERSIZE_FLOOR_CHARS, 48 * MAX_CHARS_PER_TOKEN)
    lengths = [len(json.loads(r)["text"]) for r in first.run_dir.joinpath("responses.jsonl").read_text().splitlines()]
    assert max(lengths) == limit
    assert first.summary["n_responses_truncated"] == 0  # (nor is it warned of as one cut at max_tokens)
    again = Audit(cfg, target=target, judge=judge).run()  # not cached: asked again, counted again
    assert again.manifest["calls"]["by_model"][f"{target.name}:{target.model_id}"]["fresh"] == n_big
    assert again.manifest["calls"]["oversized"] == n_big


def test_an_oversized_batch_answer_is_cut_counted_and_never_cached(openai_server, sim_inputs, tmp_path):  # noqa: F811
    """Break-it leftover (s35): the Batch API's output files bypassed the cut — a batch night stored
    the megabyte answers in the call cache, uncounted. Now they are cut, counted ``oversized`` (and
    ``degraded``) by the night that bought them, and asked again by the next run."""
    import asyncio
    import sqlite3

    from lmra.batch import arun_batched
    from lmra.config import JudgeConfig, ModelConfig
    from test_batch import FAST

    o_url, o_srv = openai_server
    names, prompts = sim_inputs(4)
    cfg = AuditConfig(
        name="batch", target=ModelConfig(provider="openai", model="gpt-test", base_url=o_url, api_key_required=False,
                                         max_tokens=48),
        judge=JudgeConfig(provider="openai", model="judge-test", base_url=o_url, api_key_required=False),
        prompts=str(prompts), names=str(names), prompts_per_task=2, cache=str(tmp_path / "cache.sqlite"),
        output_dir=str(tmp_path / "reports"), concurrency=4, judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False})

    def inflate(text: str) -> str:  # the endpoint's glitch: the target's answers come back megabytes long
        rows = [json.loads(x) for x in text.splitlines() if x.strip()]
        for r in rows:
            body = r["response"]["body"]
            if body.get("model") == "gpt-test":
                for c in body.get("choices") or []:
                    c["message"]["content"] = HUGE
        return "\n".join(json.dumps(r) for r in rows) + "\n"

    o_srv["mangle"] = inflate
    night = asyncio.run(arun_batched(Audit(cfg, run_dir=tmp_path / "reports" / "night1"), **FAST))
    calls = night.manifest["calls"]["by_model"]["openai:gpt-test"]
    n_target = calls["cached"] + calls["fresh"]
    assert n_target > 0 and calls["oversized"] == calls["degraded"] == n_target, calls
    assert night.manifest["calls"]["oversized"] == n_target
    limit = max(OVERSIZE_FLOOR_CHARS, 48 * MAX_CHARS_PER_TOKEN)
    lengths = [len(json.loads(r)["text"]) for r in night.run_dir.joinpath("responses.jsonl").read_text().splitlines()]
    assert lengths and max(lengths) <= limit, max(lengths)
    from lmra.cache import _unsealed

    with sqlite3.connect(tmp_path / "cache.sqlite") as db:
        stored = [len(json.loads(_unsealed(r)).get("text") or "") for (r,) in db.execute("SELECT result FROM calls")]
    assert stored and max(stored) <= limit  # none of the megabyte answers (nor their cut) was stored

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
from lmra.providers.base import MAX_CHARS_PER_TOKEN, OVERSIZE_FLOOR_CHARS, ChatRequest, ChatResult, Message, oversized_cut

HUGE = "word " * 400_000  # 2 MB


def test_the_cut_by_hand():
    req = ChatRequest(messages=[Message(role="user", content="hi")], max_tokens=100)
    limit = max(OVERSIZE_FLOOR_CHARS, 100 * MAX_CHARS_PER_TOKEN)
    assert oversized_cut(ChatResult(text="x" * limit), req) is None  # at the limit: kept
    cut = oversized_cut(ChatResult(text="x" * (limit + 1), finish_reason="stop"), req)
    assert len(cut.text) == limit and cut.finish_reason == "length"
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
    again = Audit(cfg, target=target, judge=judge).run()  # not cached: asked again, counted again
    assert again.manifest["calls"]["by_model"][f"{target.name}:{target.model_id}"]["fresh"] == n_big
    assert again.manifest["calls"]["oversized"] == n_big

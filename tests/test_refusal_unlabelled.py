"""Responses without a refusal label (statistics break-it, s42): the refusal rates count labelled
responses only, so an LMRA that fails to label refusals — more of them for the group refused more —
hid a 20 % vs 2 % refusal gap (reported 3/83 vs 0/98, complete, no warning). refusals.csv now
counts each group's unlabelled responses, a significant difference between the groups' unlabelled
shares is warned with each rate's worst-case bounds, and responses.jsonl writes an unlabelled
response's ``refused`` as null, not false."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from scipy.stats import binomtest, fisher_exact

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.aggregate import refusal_table, refusal_table_sql
from lmra.config import AuditConfig
from lmra.providers.base import ChatResult
from lmra.refusal_gap import UNLABELLED_PREFIX, unlabelled_refusal_warnings

REFUSAL = "I'm sorry, but I can't help with that."


def _pairs(a, b, failed=()):
    """Pairs of one task: ``a``/``b`` the refusal labels (True, False, None = no label)."""
    rows = [{"group_a": "female", "group_b": "male", "domain": "d", "task": "t", "prompt_id": f"p{i}",
             "refusal_a": x, "refusal_b": y, "failed": i in failed, "error": "chatbot: HTTP 503" if i in failed else None}
            for i, (x, y) in enumerate(zip(a, b))]
    return pd.DataFrame(rows)


def test_unlabelled_responses_are_counted_per_group_but_not_a_failed_chatbot_call(tmp_path):
    a = [True, None, None, False, None, False]
    b = [False, False, None, False, None, False]
    d = _pairs(a, b, failed={4})  # pair 4: the chatbot's call failed, there was nothing to label
    row = refusal_table(d).iloc[0]
    assert (row["n_a"], row["refusals_a"], row["unlabelled_a"]) == (3, 1, 2)
    assert (row["n_b"], row["refusals_b"], row["unlabelled_b"]) == (4, 0, 1)
    path = tmp_path / "ratings.jsonl"
    path.write_text("".join(json.dumps(r | {"row_no": i}) + "\n" for i, r in enumerate(d.to_dict("records"))))
    pd.testing.assert_frame_equal(refusal_table_sql(path).reset_index(drop=True),
                                  refusal_table(d).reset_index(drop=True), check_dtype=False)


def test_a_gap_of_unlabelled_responses_is_warned_with_the_rates_bounds_by_hand():
    # the break-it's night: 20 of 100 female and 2 of 100 male responses refused; the LMRA labels
    # 3 of the 20 and 0 of the 2 (17 and 2 unlabelled)
    a = [True] * 3 + [None] * 17 + [False] * 80
    b = [None] * 2 + [False] * 98
    row = refusal_table(_pairs(a, b)).iloc[0]
    assert (row["refusals_a"], row["n_a"], row["unlabelled_a"], row["refusals_b"], row["n_b"], row["unlabelled_b"]) \
        == (3, 83, 17, 0, 98, 2)
    [said] = unlabelled_refusal_warnings(refusal_table(_pairs(a, b)), 0.05)
    # the pairs: 17 with only A's response unlabelled (b has labels there), 2 with only B's: exact McNemar
    p = binomtest(2, 19, 0.5).pvalue  # one comparison: Holm leaves it
    assert refusal_table(_pairs(a, b)).iloc[0]["p_unlabelled"] == pytest.approx(p)
    assert said.startswith(UNLABELLED_PREFIX) and f"paired p = {p:.2g}" in said
    # a refusals.csv written before the paired test: Fisher on the pooled counts
    [old] = unlabelled_refusal_warnings(refusal_table(_pairs(a, b)).drop(columns="p_unlabelled"), 0.05)
    assert f"Fisher p = {fisher_exact([[17, 83], [2, 98]]).pvalue:.2g}" in old
    assert "17 of the 100 responses to female and 2 of the 100 to male" in said
    assert "female's rate lies in [0.0300, 0.2000]" in said and "male's in [0.0000, 0.0200]" in said
    # controls: the same unlabelled share in both groups; too few unlabelled to test
    assert unlabelled_refusal_warnings(refusal_table(_pairs([None] * 10 + [False] * 90,
                                                            [None] * 10 + [False] * 90)), 0.05) == []
    assert unlabelled_refusal_warnings(refusal_table(_pairs([None] * 4 + [False] * 96, [False] * 100)), 0.05) == []


class _RefusingTarget(ScriptedTarget):
    """Refuses 30 % of female users' prompts and 3 % of male users'."""

    def __init__(self):
        super().__init__(NAME_TO_GROUP, lambda g, rng: REFUSAL if rng.random() < (0.3 if g == "female" else 0.03)
                         else f"An answer {rng.random():.6f}.")


class _BlindToRefusals(ScriptedJudge):
    """Labels answers "not a refusal", but gives no usable label (no probability on either option)
    to four refusals in five."""

    def __init__(self):
        super().__init__(lambda r1, r2: {"C": 1.0}, refusal=lambda r: 1.0 if r == REFUSAL else 0.0)

    async def complete(self, request):
        text = request.messages[-1].content
        if "Does the response refuse" in text and REFUSAL in text and random.Random(request.seed).random() < 0.8:
            self.calls += 1
            return ChatResult(text="", option_probs={o: 0.0 for o in request.options}, provider=self.name)
        return await super().complete(request)


def test_an_lmra_blind_to_one_groups_refusals_is_warned_in_the_run(tmp_path, sim_inputs):
    names, prompts = sim_inputs(200)
    cfg = AuditConfig.model_validate(dict(
        name="refusals", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=5,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        judge_check={"enabled": False}, filter={"lmra": False}))
    res = Audit(cfg, target=_RefusingTarget(), judge=_BlindToRefusals()).run()
    ov = pd.read_csv(res.run_dir / "refusals.csv").query("level == 'overall'").iloc[0]
    assert ov["unlabelled_a"] > 3 * max(ov["unlabelled_b"], 1)
    said = [w for w in res.summary["warnings"] if w.startswith(UNLABELLED_PREFIX)]
    assert len(said) == 1 and f"{int(ov['unlabelled_a'])} of the {int(ov['n_a'] + ov['unlabelled_a'])}" in said[0]
    lines = [json.loads(x) for x in (res.run_dir / "responses.jsonl").read_text().splitlines()]
    unlabelled = [r for r in lines if r["error"] is None and r["refusal_p"] is None]
    assert len(unlabelled) == ov["unlabelled_a"] + ov["unlabelled_b"]
    assert all(r["refused"] is None for r in unlabelled)  # not "false": no label is no answer
    assert all(r["refused"] in (True, False) for r in lines if r["refusal_p"] is not None)


@pytest.mark.parametrize("unlabelled", [0, 30])
def test_no_warning_without_a_difference(unlabelled):
    a = [None] * unlabelled + [True] * 10 + [False] * (90 - unlabelled)
    b = [None] * unlabelled + [True] * 9 + [False] * (91 - unlabelled)
    assert unlabelled_refusal_warnings(refusal_table(_pairs(a, b)), 0.05) == []


def test_a_merged_run_has_the_unsharded_runs_unlabelled_warning_not_each_shards(tmp_path, sim_inputs):
    """Break-it round 2 (s42): ``lmra merge`` kept each shard's unlabelled-refusal warning with that
    shard's counts beside the merged run's own — three warnings where the unsharded run has one."""
    from lmra.merge import merge_shards
    from lmra.shard import Shard

    names, prompts = sim_inputs(200)

    def cfg(out, cache):
        return AuditConfig.model_validate(dict(
            name="refusals", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=5,
            output_dir=str(tmp_path / out), cache=str(tmp_path / cache), concurrency=8,
            judge_check={"enabled": False}, filter={"lmra": False}))

    whole = Audit(cfg("whole", "whole.sqlite"), target=_RefusingTarget(), judge=_BlindToRefusals()).run()
    shards = []
    for i in (1, 2):
        audit = Audit(cfg("shards", f"shard{i}.sqlite"), target=_RefusingTarget(), judge=_BlindToRefusals())
        audit.shard = Shard(i, 2)
        audit.run_dir = audit.run_dir.with_name(f"{audit.run_dir.name}-shard{i}of2")
        shards.append(audit.run())
    merged = merge_shards([str(s.run_dir) for s in shards], out_dir=str(tmp_path / "merged"))
    said = [[w for w in r.summary["warnings"] if w.startswith(UNLABELLED_PREFIX)] for r in (whole, merged)]
    assert len(said[0]) == 1 and said[1] == said[0]
    assert (whole.run_dir / "refusals.csv").read_bytes() == (merged.run_dir / "refusals.csv").read_bytes()


def test_the_unlabelled_test_keeps_its_level_when_a_prompt_and_group_share_a_propensity():
    """Break-it round 2 (s42): Fisher on the pooled counts warned 16–21 % of healthy runs at α 0.05
    when the LMRA's failure to label was shared within a (prompt, group) — 5 pairs per prompt. The
    paired test clustered by prompt keeps the level: 300 simulated runs of 40 prompts × 5 pairs, both
    groups drawing their (prompt, group) propensity from one distribution."""
    import numpy as np

    rng = np.random.default_rng(42)
    warned = 0
    runs = 300
    for _ in range(runs):
        rows = []
        for i in range(40):
            pa, pb = rng.beta(0.3, 2.0, size=2)  # each (prompt, group) its own propensity, same distribution
            for k in range(5):
                rows.append({"group_a": "female", "group_b": "male", "domain": "d", "task": "t",
                             "prompt_id": f"p{i}", "refusal_a": None if rng.random() < pa else False,
                             "refusal_b": None if rng.random() < pb else False, "failed": False, "error": None})
        warned += bool(unlabelled_refusal_warnings(refusal_table(pd.DataFrame(rows)), 0.05))
    assert warned / runs <= 0.08, warned  # 0.05 ± 2 SE over 300 runs; the pooled Fisher test gave 0.16–0.21

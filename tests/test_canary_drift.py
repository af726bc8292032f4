"""The regression check notes an LMRA that rated the same canary pairs differently on the two nights
(statistics break-it, s42: behind one model id the LMRA left 0.3 instead of 0.6 on "no harmful
stereotype", its position preference unchanged, so no drift note; an unchanged chatbot read
"REGRESSION", exit 3). lmra.comparable.canary_drift_note: a paired t-test over the shared canaries'
probability on "no stereotype"."""

from __future__ import annotations

import json

import pytest
from scipy.stats import ttest_rel

from doubles import ScriptedJudge
from monitor_helpers import PHRASE, TaskTarget, write_inputs
from lmra import Audit
from lmra.comparable import canary_drift_note
from lmra.config import AuditConfig
from lmra.monitor import check_regression
from lmra.runfolder import load_run


def _judge(no_stereotype: float) -> ScriptedJudge:
    """An LMRA leaving about ``no_stereotype`` on C (jittered per pair), the rest on the options; on a
    pair with the phrase, half as much on C and the rest on the option that names it."""
    import zlib

    def verdict(r1, r2):
        c = no_stereotype * (0.8 + 0.4 * (zlib.crc32((r1 + r2).encode()) % 1000) / 1000)
        if PHRASE in r1 and PHRASE not in r2:
            return {"A": 1 - c / 2 - 0.05, "B": 0.05, "C": c / 2}
        if PHRASE in r2 and PHRASE not in r1:
            return {"A": 0.05, "B": 1 - c / 2 - 0.05, "C": c / 2}
        return {"A": (1 - c) / 2, "B": (1 - c) / 2, "C": c}

    return ScriptedJudge(verdict)


def _night(tmp_path, run_id, judge, seed):
    names, prompts = write_inputs(tmp_path / "inputs", 200)
    cfg = AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / f"cache-{run_id}.sqlite"), concurrency=16,
        judge_check={"enabled": True, "dimensions": ["gender"], "per_kind": 0, "gate": False, "stop_when_failed": False,
                                "waiver": "a scripted LMRA in a test"}))
    run_dir = tmp_path / "reports" / run_id
    Audit(cfg, target=TaskTarget({"write a story": 0.2, "career advice": 0.2}), judge=judge, run_dir=run_dir).run()
    return load_run(run_dir)


def _q_n(run) -> dict:
    rows = [json.loads(x) for x in (run.path / "judge_check_ratings.jsonl").read_text().splitlines()]
    return {r["id"]: r["q_N"] for r in rows if r["valid"] and not r["failed"]}


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("canary-drift")
    return {"base": _night(tmp, "20260101-000000-nightly", _judge(0.6), 1),
            "same": _night(tmp, "20260102-000000-nightly", _judge(0.6), 2),
            "drifted": _night(tmp, "20260103-000000-nightly", _judge(0.3), 3)}


def test_an_lmra_leaving_less_on_no_stereotype_is_noted_with_the_paired_test_by_hand(nights):
    base, drifted = nights["base"], nights["drifted"]
    a, b = _q_n(base), _q_n(drifted)
    shared = sorted(set(a) & set(b))
    assert len(shared) >= 10
    p = ttest_rel([b[k] for k in shared], [a[k] for k in shared]).pvalue
    note = canary_drift_note(base, drifted, 0.05)
    assert note is not None and f"the same {len(shared)} canary pairs" in note and "left less probability" in note
    mean_a, mean_b = sum(a[k] for k in shared) / len(shared), sum(b[k] for k in shared) / len(shared)
    assert f"({mean_a:.3f} → {mean_b:.3f} on average, paired t-test p = {p:.2g})" in note
    res = check_regression(drifted, base)
    # the unchanged chatbot's rise (+0.03 here, under the check's power) is now explained either way
    assert res.verdict in ("regression", "no_regression") and note in res.notes
    assert res.overall["h_run"].iloc[0] > res.overall["h_base"].iloc[0]


def test_the_same_lmra_on_another_night_gives_no_note(nights):
    assert canary_drift_note(nights["base"], nights["same"], 0.05) is None
    assert not any("canary pairs differently" in n for n in check_regression(nights["same"], nights["base"]).notes)

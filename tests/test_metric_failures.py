"""A run that loses most of a secondary metric to failed calls — the quality ratings, the second
LMRA's ratings — is ``partial``, as a run that loses pairs is, and says which metric and how
much (break-it finding: every quality call failing, or a second LMRA that always raised, left a
``complete`` run with exit 0, no warning and an empty table)."""

from __future__ import annotations

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.providers.base import ProviderError


class QualityFailingJudge(ScriptedJudge):
    """Raises for the quality questions of the prompts whose number is in ``failing``."""

    def __init__(self, failing: set[int], **kw):
        super().__init__(lambda r1, r2: {"C": 1.0}, **kw)
        self.failing = failing

    async def complete(self, request):
        text = request.messages[-1].content
        if "clarity" in text.lower() and any(f"Prompt number {i}." in text for i in self.failing):
            raise ProviderError("quality call failed")
        return await super().complete(request)


class AlwaysFailing(ScriptedJudge):
    async def complete(self, request):
        raise ProviderError("second LMRA down")


def _run(tmp_path, sim_inputs, judge, second=None, **kw):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="metrics", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}, quality={"enabled": True, "criteria": ["clarity"]}) | kw)
    return Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"A plan ({rng.random():.6f})."), judge=judge, judge2=second).run()


@pytest.mark.parametrize("failing, status", [(set(range(10)), "partial"), ({3}, "complete"), (set(), "complete")])
def test_failed_quality_ratings_beyond_the_share_make_the_run_partial(tmp_path, sim_inputs, failing, status):
    res = _run(tmp_path, sim_inputs, QualityFailingJudge(failing))
    s = res.summary
    assert s["failed_by_metric"]["quality ratings"] == {"failed": len(failing), "asked": 20,
                                                        "share": len(failing) / 20}
    assert s["failed_share"] == 0.0 and s["run_status"] == status == res.manifest["status"]
    said = [w for w in s["warnings"] if "quality ratings failed" in w]
    assert bool(said) == (status == "partial")
    if said:
        assert said[0].startswith("10 of 20 quality ratings failed (50.0%, above max_failed_share = 0.05)")


def test_a_second_lmra_that_always_fails_makes_the_run_partial(tmp_path, sim_inputs):
    res = _run(tmp_path, sim_inputs, ScriptedJudge(lambda r1, r2: {"C": 1.0}), second=AlwaysFailing(
        lambda r1, r2: {"C": 1.0}, model_id="j2"), judge2={"provider": "llamacpp"}, quality={"enabled": False})
    s = res.summary
    assert s["failed_by_metric"] == {"second-LMRA ratings": {"failed": 20, "asked": 20, "share": 1.0}}
    assert s["run_status"] == "partial" and any("20 of 20 second-LMRA ratings failed" in w for w in s["warnings"])
    assert int(res.overall["n_pairs"].sum()) == 20  # the primary ratings stand


def test_the_readers_of_a_partial_run_say_which_metric_made_it_partial(tmp_path, sim_inputs):
    """report.html and the regression check's warning name the failed quality ratings, not
    "0.0% of the planned pairs lost" (review finding)."""
    import re

    from lmra.cli.monitor import partial_run_warnings
    from lmra.monitor import check_regression
    from lmra.report.html import write_report
    from lmra.runfolder import load_run

    res = _run(tmp_path, sim_inputs, QualityFailingJudge(set(range(10))))
    run = load_run(res.run_dir)
    html = write_report(run).read_text()
    banner = " ".join(re.search(r'id="run-status">(.*?)</div>', html, re.S).group(1).split())
    assert "10 of 20 quality ratings failed (50.0%)" in banner and "planned pairs" not in banner
    import shutil

    twin = shutil.copytree(res.run_dir, res.run_dir.with_name(res.run_dir.name + "-2"))
    import json

    manifest = json.loads((twin / "manifest.json").read_text())  # another night, not a copy of this one
    manifest["started"] = "2000-01-01T00:00:00+00:00"  # (lmra.monitor.is_copy_of refuses a copy as baseline)
    (twin / "manifest.json").write_text(json.dumps(manifest))
    check = check_regression(run, load_run(twin))
    assert check.run_partial_because == ["10 of 20 quality ratings failed (50.0%)"]
    assert any("10 of 20 quality ratings failed" in w for w in partial_run_warnings(check))

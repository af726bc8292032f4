"""Worst-case (Manski) bounds on the net rating for the pairs without a usable rating: an LMRA
that declines exactly the stereotyped pairs reports a net rating near 0 (break-it finding: an
injected rate of 0.12 read as 0.000, run complete, gates passed); the bounds printed beside it
show how far those pairs could move it, and contain the injected rate."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.aggregate import unrated_bounds
from lmra.config import AuditConfig
from lmra.report.console import render_audit


def test_unrated_bounds_by_hand():
    # 90 scored pairs with mean 0.02, 10 unrated: (1.8 − 10) / 100 and (1.8 + 10) / 100
    assert unrated_bounds(0.02, 90, 10) == (pytest.approx(-0.082), pytest.approx(0.118))
    assert unrated_bounds(0.3, 5, 0) == (0.3, 0.3)
    assert unrated_bounds(math.nan, 0, 4) == (-1.0, 1.0)
    assert all(math.isnan(v) for v in unrated_bounds(math.nan, 0, 0))


class Declining(ScriptedJudge):
    """Rates stereotyped pairs (a response saying "women") by declining to answer: no
    probability on any option, in both orders; rates the others 'no difference'."""

    async def complete(self, request):
        from lmra.providers.base import ChatResult

        text = request.messages[-1].content
        if "women" in text and "Compare the two responses on one criterion" not in text \
                and "Does the response refuse" not in text:
            self.calls += 1
            return ChatResult(text="", option_probs={o: 0.0 for o in request.options}, provider=self.name)
        return await super().complete(request)


def _cfg(tmp_path, sim_inputs, n_prompts: int, **kw) -> AuditConfig:
    names, prompts = sim_inputs(n_prompts)
    return AuditConfig.model_validate(dict(
        name="bounds", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}) | kw)


def _declined_run(tmp_path, sim_inputs, n_prompts: int, rate: float):
    """An audit whose female response is stereotyped with probability ``rate`` (the injected
    effect) and whose LMRA declines exactly those pairs."""
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Advice for women only." if g == "female"
                            and rng.random() < rate else "General advice.")
    return Audit(_cfg(tmp_path, sim_inputs, n_prompts), target=target, judge=Declining(lambda a, b: {"C": 1.0})).run()


def test_an_lmra_declining_the_stereotyped_pairs_hides_them_but_not_from_the_bounds(tmp_path, sim_inputs):
    res = _declined_run(tmp_path, sim_inputs, 60, 0.12)
    (row,) = res.overall.to_dict(orient="records")
    k = row["n_invalid"]
    assert 2 <= k <= 15  # the stereotyped pairs, all declined
    assert row["net_rating"] == 0.0  # what the LMRA chose to answer shows nothing
    (b,) = res.summary["unrated_bounds"]
    n = row["n_pairs"]
    assert b["n_unrated"] == k and b["low"] == pytest.approx(-k / (n + k)) and b["high"] == pytest.approx(k / (n + k))
    injected = k / (n + k)  # had the LMRA rated them as stereotypes (+1): exactly the upper bound
    assert b["low"] <= injected <= b["high"]
    console = Console(record=True, width=400)
    render_audit(console, res)
    text = console.export_text()
    assert (f"{k} pairs got no usable rating (invalid, unlabelled, failed): had they all scored −1 or +1, the net "
            f"rating would lie in [{b['low']:+.4f}, {b['high']:+.4f}]") in text
    # declined pairs as many as the forward stereotypes found (none here) — said aloud from 5% of the pairs
    # (by question: these the LMRA left without a stereotype rating; fresh-user finding, s39, unlabelled refusal
    # labels read as declined ratings)
    said = (f"{k} left unrated by the LMRA ({k} without a usable stereotype rating), at least as many as the "
            "forward stereotypes found")
    assert (said in text) is (k >= 0.05 * (n + k))


def test_many_declined_pairs_beside_the_stereotypes_found_are_said_aloud(tmp_path, sim_inputs):
    """Statistics-review finding: an LMRA declining half the stereotyped pairs left 16% of the pairs
    invalid (under every limit) and a net rating of 0.040 for a truth of 0.112, the bounds line
    dim. With as many declined pairs as forward stereotypes found, it is said in yellow."""
    res = _declined_run(tmp_path, sim_inputs, 60, 0.4)
    (row,) = res.overall.to_dict(orient="records")
    k, n = row["n_invalid"], row["n_pairs"]
    assert k >= 0.05 * (n + k)
    console = Console(record=True, width=400)
    render_audit(console, res)
    assert (f"{k} left unrated by the LMRA ({k} without a usable stereotype rating), at least as many as the forward "
            "stereotypes found") in " ".join(console.export_text().split())


def test_a_few_declined_pairs_beside_many_stereotypes_stay_a_quiet_bounds_line(tmp_path, sim_inputs):
    """The loud note needs the declined pairs to rival the stereotypes found: here the LMRA rates
    every stereotyped pair (forward rate ≈ 0.5) and declines none of them, only failed calls."""
    import zlib

    from doubles import ScriptedJudge

    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Advice for women only." if g == "female"
                            and rng.random() < 0.5 else "General advice.")
    judge = ScriptedJudge(lambda a, b: {"A": 1.0} if "women only" in a else {"B": 1.0} if "women only" in b
                          else {"C": 1.0}, fail_on=lambda text: zlib.crc32(text.encode()) % 8 == 0)
    res = Audit(_cfg(tmp_path, sim_inputs, 40), target=target, judge=judge).run()
    console = Console(record=True, width=400)
    render_audit(console, res)
    text = console.export_text()
    assert "pairs got no usable rating" in text and "as many as the forward stereotypes found" not in text


def test_no_bounds_line_when_every_pair_was_rated(tmp_path, sim_inputs):
    res = Audit(_cfg(tmp_path, sim_inputs, 6), target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "x"),
                judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    assert res.summary["unrated_bounds"][0]["n_unrated"] == 0
    console = Console(record=True, width=400)
    render_audit(console, res)
    assert "got no usable rating" not in console.export_text()


def test_report_html_states_the_bounds(tmp_path, sim_inputs):
    from lmra.report.html import write_report
    from lmra.runfolder import load_run

    res = _declined_run(tmp_path, sim_inputs, 30, 0.3)
    (b,) = res.summary["unrated_bounds"]
    assert b["n_unrated"] > 0
    html = write_report(load_run(res.run_dir)).read_text()
    assert f'id="unrated-bounds-1">female vs male: {b["n_unrated"]}' in html
    assert f"in [{b['low']:+.4f}, {b['high']:+.4f}]" in html


def test_the_bounds_line_names_failed_calls_when_nothing_was_declined(tmp_path, sim_inputs):
    """New-user finding: with 6 pairs lost to failed calls and none declined, the line blamed a
    declining LMRA."""
    cfg = _cfg(tmp_path, sim_inputs, 20, max_failed_share=1.0, refusal={"enabled": False})
    judge = ScriptedJudge(lambda a, b: {"C": 1.0}, fail_on=lambda text: "Prompt number 3." in text)
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "x"), judge=judge).run()
    (row,) = res.overall.to_dict(orient="records")
    assert row["n_failed"] >= 1 and row["n_invalid"] == 0
    console = Console(record=True, width=400)
    render_audit(console, res)
    text = console.export_text()
    assert "pairs lost to failed calls could hold what the others do not show" in text
    assert "declining" not in text

"""The progress bars count every item done, failed or not; a stage whose items failed says how
many in its label ("LMRA rating pairs (3 failed)"), so that a bar at 100% does not read as a
clean run. Checked on real audits (pipelined and staged) against the run's own counts."""

from __future__ import annotations

import io
import re

import pandas as pd
import pytest
from rich.console import Console

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.cli.common import rich_progress
from lmra.config import AuditConfig
from lmra.providers import ProviderError


class FailingTarget(ScriptedTarget):
    """Fails (a ProviderError, as a provider's failed call) every call about prompt 3 or 7."""

    async def complete(self, request):
        if re.search(r"Prompt number [37]\.", request.messages[-1].content):
            self.calls += 1
            raise ProviderError("scripted target failure")
        return await super().complete(request)


def _bars(text: str) -> dict[str, str]:
    """The last drawn line of each bar: label → the rest of the line."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    out = {}
    for label in ("Generating responses", "LMRA labelling refusals", "LMRA rating pairs", "Filtering prompts",
                  "Selecting prompts"):
        lines = [ln for ln in re.split(r"[\r\n]", plain) if ln.startswith(label)]
        if lines:
            out[label] = lines[-1]
    return out


def _failed(line: str) -> int:
    m = re.search(r"\(([\d,]+) failed\)", line)
    return int(m.group(1).replace(",", "")) if m else 0


@pytest.mark.parametrize("staged", [False, True])
def test_the_bars_say_how_many_items_failed_and_match_the_run(tmp_path, sim_inputs, staged):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="bars", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=3,
        judge_check={"enabled": False}, refusal={"enabled": True}, filter={"lmra": False}))
    target = FailingTarget(NAME_TO_GROUP, lambda g, rng: f"{g} answer {rng.random():.6f}")
    # the LMRA fails the refusal label of one response in ten and every rating of prompt 11's pairs
    judge = ScriptedJudge(lambda a, b: {"A": 0.2, "B": 0.2, "C": 0.6},
                          fail_on=lambda text: ("Does the response refuse" in text and "answer 0.1" in text)
                          or ("Prompt number 11." in text and "Does the response refuse" not in text))
    out = io.StringIO()
    with rich_progress(Console(file=out, force_terminal=True, width=160), True) as progress:
        audit = Audit(cfg, target=target, judge=judge, progress=progress)
        audit.staged = staged
        result = audit.run()
    bars = _bars(out.getvalue())
    responses = pd.read_json(result.run_dir / "responses.jsonl", lines=True)
    failed_responses = int(responses["error"].notna().sum())
    assert failed_responses == 2 * 2  # prompts 3 and 7: one comparison (two groups), one sample
    assert _failed(bars["Generating responses"]) == failed_responses
    n_pairs = len(responses) // 2
    assert re.search(rf"{2 * n_pairs}/{2 * n_pairs}", bars["Generating responses"])
    ratings = pd.read_parquet(result.run_dir / "ratings.parquet")
    n_rating_failed = int(ratings["failed"].sum())
    assert n_rating_failed >= failed_responses // 2 + 1  # the failed responses' pairs and prompt 11's
    assert _failed(bars["LMRA rating pairs"]) == n_rating_failed
    # a refusal-label call that failed (a failed response is counted by "Generating responses")
    assert len(audit.refusal_errors) > 0
    assert _failed(bars["LMRA labelling refusals"]) == len(audit.refusal_errors)
    assert "failed" not in bars.get("Filtering prompts", "")
    # the identity filter's LMRA is off: the prompts are selected, not filtered (fresh-user finding, round 33)
    assert "Filtering prompts" not in bars and re.search(r"\b20/20\b", bars["Selecting prompts"])


@pytest.mark.parametrize("staged", [False, True])
def test_the_filter_bar_ends_full_when_the_lmra_removes_prompts_none_can_replace(tmp_path, sim_inputs, staged):
    """Break-it finding (s36): with the LMRA filter removing most prompts and none left to take their
    places, the bar ended at "Filtering prompts 1/6", as if the step had stopped early. The places
    left unfilled leave the total: the bar ends full, at the prompts kept."""
    names, prompts = sim_inputs(12)  # 6 prompts a task
    cfg = AuditConfig.model_validate(dict(
        name="bars", prompts=str(prompts), names=str(names), prompts_per_task=3,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=3,
        judge_check={"enabled": False}, refusal={"enabled": False}))
    # the filter's LMRA calls every prompt but 0 and 1 identity-revealing
    keep = ("Prompt number 0.", "Prompt number 1.")
    judge = ScriptedJudge(lambda a, b: {"C": 1.0}, identity=lambda p: 0.0 if any(k in p for k in keep) else 1.0)
    out = io.StringIO()
    with rich_progress(Console(file=out, force_terminal=True, width=160), True) as progress:
        audit = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "ok"), judge=judge, progress=progress)
        audit.staged = staged
        result = audit.run()
    kept = result.summary["n_prompts"]
    assert kept == 2
    bar = _bars(out.getvalue())["Filtering prompts"]
    assert re.search(rf"\b{kept}/{kept}\b", bar), bar


def test_a_clean_run_shows_no_failed_count(tmp_path, sim_inputs):
    names, prompts = sim_inputs(6)
    cfg = AuditConfig.model_validate(dict(
        name="bars", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}))
    out = io.StringIO()
    with rich_progress(Console(file=out, force_terminal=True, width=160), True) as progress:
        Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "ok"),
              judge=ScriptedJudge(lambda a, b: {"C": 1.0}), progress=progress).run()
    assert "failed" not in out.getvalue()


def test_the_recsys_bar_counts_its_failed_calls(tmp_path, capsys):
    from test_recsys_e2e import run_cli, write_config

    cfg = write_config(tmp_path, "dead", """
[target]
provider = "test_recsys_e2e:make_dead"
[fairllm]
names_list = ["Adele"]
attributes = ["gender"]
values = { gender = ["a boy", "a girl"] }
""", k=3)
    assert run_cli(["recsys", "--config", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"Recommendation lists \(3 failed\).*3/3", out), out


def test_the_axes_bars_count_failed_lmra_calls(tmp_path, sim_inputs):
    """The axes steps' bars (brainstorm, label) say how many LMRA calls failed."""
    from test_axes import TRAITS, AxesJudge, _audit, formal_target

    from lmra.axes import run_axes

    cfg, res = _audit(tmp_path, sim_inputs, 40, formal_target(0.7, 0.3),
                      axes={"discovery_pairs": 10, "test_pairs": 20, "max_axes": 2})

    class Failing(AxesJudge):
        """Fails one call in three."""

        async def complete(self, request):
            self.n = getattr(self, "n", 0) + 1
            if self.n % 3 == 0:
                raise ProviderError("scripted LMRA failure")
            return await super().complete(request)

    out = io.StringIO()
    with rich_progress(Console(file=out, force_terminal=True, width=160), True) as progress:
        run_axes(cfg, Failing(TRAITS, harmful=lambda a: 0.1), run_dir=res.run_dir, progress=progress)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    for label in ("LMRA brainstorming differences", "LMRA labelling test pairs on axes"):
        last = [ln for ln in re.split(r"[\r\n]", text) if ln.startswith(label)][-1]
        assert _failed(last) > 0, last

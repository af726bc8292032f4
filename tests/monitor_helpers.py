"""Helpers for the monitoring/reporting tests: simulated run folders made by the real
``lmra.Audit`` with scripted doubles, and the ``lmra`` CLI with the monitoring subcommands."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from conftest import FEMALE, MALE, NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget, name_in
from lmra import Audit
from lmra.config import AuditConfig

PHRASE = "As a woman, you may prefer gentle options."
PROMPT_RE = re.compile(r"Prompt number (\d+)\.")


def task_of(i: int) -> str:
    """The task of prompt i in the ``sim_inputs`` prompt file."""
    return "write a story" if i % 2 else "career advice"


class TaskTarget(ScriptedTarget):
    """A target that adds a stereotyped phrase to female users' answers with a per-task rate."""

    def __init__(self, rates: dict[str, float]):
        super().__init__(NAME_TO_GROUP, script=None)
        self.rates = rates

    async def complete(self, request):
        from lmra.providers.base import ChatResult, Usage

        self.calls += 1
        group = self.name_to_group[name_in(request)]
        i = int(PROMPT_RE.search(request.messages[-1].content).group(1))
        rng = random.Random(request.seed)
        stereo = group == "female" and rng.random() < self.rates[task_of(i)]
        # (a neutral answer of its own per prompt: one text to every prompt is no chatbot, lmra.repeated)
        return ChatResult(text=PHRASE if stereo else f"Neutral answer about prompt {i}.",
                          usage=Usage(prompt_tokens=10, completion_tokens=5), model=self.model_id, provider=self.name)


def phrase_verdict(r1: str, r2: str) -> dict:
    if PHRASE in r1 and PHRASE not in r2:
        return {"A": 1.0}
    if PHRASE in r2 and PHRASE not in r1:
        return {"B": 1.0}
    return {"C": 1.0}


def write_inputs(folder: Path, n_prompts: int, task_names: dict[str, str] | None = None) -> tuple[Path, Path]:
    """A names CSV and ``n_prompts`` prompts alternating between two tasks (as ``sim_inputs``);
    ``task_names`` renames the tasks in the prompt file (the target still keys on ``task_of``)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    names = folder / "names.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                     + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
    task_names = task_names or {}
    prompts = folder / f"prompts-{n_prompts}{'-renamed' if task_names else ''}.jsonl"
    with prompts.open("w") as fh:
        for i in range(n_prompts):
            fh.write(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                 "task": task_names.get(task_of(i), task_of(i))})
                     + "\n")
    return names, prompts


def make_run(tmp_path: Path, run_id: str, rates: dict[str, float], *, seed: int,
             judge_model: str = "scripted", n_prompts: int = 400, samples: int = 1, name: str = "nightly",
             refusal=None, judge_check: dict | None = None, task_names: dict[str, str] | None = None,
             target_model: str | None = None) -> Path:
    """Run a real audit with scripted doubles into ``tmp_path/reports/<run_id>``; returns the folder.

    Each run gets its own seed (as the nightly recipe recommends) so names and target samples
    are fresh draws. ``task_names`` renames the two tasks, ``target_model`` sets the target's model id.
    """
    names, prompts = write_inputs(tmp_path / "inputs", n_prompts, task_names)
    cfg = AuditConfig.model_validate(dict(
        name=name, prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
        samples_per_prompt=samples, output_dir=str(tmp_path / "reports"),
        cache=str(tmp_path / f"cache-{run_id}.sqlite"), concurrency=16,
        judge_check=judge_check or {"enabled": False}))
    judge = ScriptedJudge(phrase_verdict, position_bias=0.2, model_id=judge_model, refusal=refusal)
    run_dir = tmp_path / "reports" / run_id
    target = TaskTarget(rates)
    if target_model:
        target.model_id = target_model
    Audit(cfg, target=target, judge=judge, run_dir=run_dir).run()
    return run_dir


@pytest.fixture
def lmra_cli():
    """``lmra.cli.main``, the ``lmra`` command in-process."""
    from lmra.cli import main

    return main

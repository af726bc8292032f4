"""Prompts the selection leaves out — outside the configured ``domains``/``tasks``, or beyond
``prompts_per_task`` in their task — are counted in ``summary.json`` and on the console's
Prompts line (break-it finding: a per-task limit dropped most of a prompt file without a word
in the report; only the plan line said "up to N kept")."""

from __future__ import annotations

import json

from rich.console import Console

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.report.console import render_audit


def _prompts(tmp_path):
    rows = [{"id": f"c{i}", "text": f"Career question {i}.", "domain": "work", "task": "career advice"} for i in range(9)]
    rows[4]["text"] = "My name is Emily, which job should I take?"  # removed by the lexical filter
    rows += [{"id": f"s{i}", "text": f"Story request {i}.", "domain": "art", "task": "write a story"} for i in range(5)]
    rows += [{"id": f"r{i}", "text": f"Recipe request {i}.", "domain": "food", "task": "recipe"} for i in range(4)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp_path, sim_inputs, extra_names: str = "", **kw):
    names, _ = sim_inputs(2)
    names.write_text(names.read_text() + extra_names, encoding="utf-8")
    cfg = AuditConfig.model_validate(dict(
        name="left-out", prompts=str(_prompts(tmp_path)), names=str(names), output_dir=str(tmp_path / "out"),
        cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False}, filter={"lmra": False},
        refusal={"enabled": False}) | kw)
    return Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "An answer."),
                 judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run()


def test_prompts_beyond_the_limit_and_outside_the_tasks_are_counted_and_shown(tmp_path, sim_inputs):
    res = _run(tmp_path, sim_inputs, prompts_per_task=3, tasks=["career advice", "write a story"])
    s = json.loads((res.run_dir / "summary.json").read_text())
    # 18 in the file: 4 recipes outside the tasks; career: 9 − 1 removed (lexical) − 3 kept = 5 over the
    # limit; story: 5 − 3 = 2 over the limit
    assert (s["n_prompts_in_file"], s["n_prompts_not_selected"], s["n_filtered_lexical"]) == (18, 4, 1)
    assert (s["n_prompts_over_limit"], s["prompts_per_task"], s["n_prompts"]) == (7, 3, 6)
    assert s["n_prompts_not_selected"] + s["n_filtered"] + s["n_prompts_over_limit"] + s["n_prompts"] == 18
    console = Console(record=True, width=400)
    render_audit(console, res)
    line = next(t for t in console.export_text().splitlines() if t.startswith("Prompts:"))
    assert "4 outside the configured domains/tasks" in line and "7 left out by prompts_per_task = 3" in line
    assert line.endswith("6 audited.")


def test_nothing_is_said_when_every_prompt_is_audited(tmp_path, sim_inputs):
    res = _run(tmp_path, sim_inputs, prompts_per_task=0)
    s = res.summary
    assert (s["n_prompts_not_selected"], s["n_prompts_over_limit"], s["n_prompts"]) == (0, 0, 17)
    console = Console(record=True, width=400)
    render_audit(console, res)
    line = next(t for t in console.export_text().splitlines() if t.startswith("Prompts:"))
    assert "left out" not in line and "outside" not in line


def test_names_whose_gender_no_group_selects_are_counted_and_said(tmp_path, sim_inputs, capsys):
    """A misspelt gender value ('mal') leaves its names out of every group: said on stderr and
    counted in summary.json (break-it finding: silently left out)."""
    res = _run(tmp_path, sim_inputs, "Zed,mal,,test\nYan,Mal,,test\n", prompts_per_task=0)
    assert res.summary["names_unmatched"] == {"gender": {"Mal": 1, "mal": 1}}
    assert "names whose value no group selects are never drawn (gender 'Mal' ×1; gender 'mal' ×1)" in \
        capsys.readouterr().err


def test_a_prompt_line_with_a_key_given_twice_is_an_input_error(tmp_path):
    """``{"id": "a", …, "id": "b"}``: json.loads keeps the last silently (break-it finding)."""
    import subprocess
    import sys

    (tmp_path / "dup.jsonl").write_text('{"id": "a", "text": "hi", "domain": "d", "task": "t"}\n'
                                        '{"id": "b", "text": "hi", "domain": "d", "task": "t", "id": "c"}\n')
    (tmp_path / "v.toml").write_text('name = "v"\nprompts = "dup.jsonl"\n')
    p = subprocess.run([sys.executable, "-m", "lmra.cli", "validate", "v.toml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "dup.jsonl, line 2: field 'id': key 'id' appears twice in one object" in p.stderr


def test_the_plan_lines_words_for_the_prompts_audited():
    """Fresh-user findings: "kept after the per-task limit" was said with no limit set, and a
    shard's bound read as its share of the audit's selection."""
    from types import SimpleNamespace

    from lmra.cli.audit import _kept_words
    from lmra.shard import Shard

    def audit(limit, shard=None):
        return SimpleNamespace(cfg=SimpleNamespace(prompts_per_task=limit), shard=shard)

    assert _kept_words(audit(0), 300) == "up to 300 audited (no per-task limit)"
    assert _kept_words(audit(20), 120) == "up to 120 kept after the per-task limit (20)"
    words = _kept_words(audit(20, Shard(1, 4)), 76)
    assert words.startswith("up to 76 audited in this shard (1/4: the prompts it holds, at most 20 per task")
    assert "the shards together audit the whole audit's selection" in words
    assert _kept_words(audit(0, Shard(2, 4)), 75) == "up to 75 audited in this shard (2/4: the prompts it holds)"


def test_names_a_group_draws_are_not_said_to_be_never_drawn():
    """Fresh-user finding (s43): gender-only groups (female, male) beside race groups (Black,
    White) draw the Hispanic names too, yet every audit warned "race 'Hispanic' ×20 … never
    drawn". Only names that no group selects are counted, by the values no group filters for."""
    from lmra.audit.inputs import unmatched_name_values
    from lmra.config import Group
    from lmra.data import NameRecord

    names = [NameRecord(name="Ana", gender="female", race="Hispanic"), NameRecord(name="Juan", gender="male", race="Hispanic"),
             NameRecord(name="Ama", gender="female", race="Black"), NameRecord(name="Zed", gender="mal", race="Hispanic"),
             NameRecord(name="Kim", gender="nonbinary", race="White")]
    gender_and_race = [Group(name="female", gender="female"), Group(name="male", gender="male"),
                       Group(name="Black", race="Black"), Group(name="White", race="White")]
    # Zed: no group selects him (gender 'mal', race Hispanic); Kim is White: the White group draws her
    assert unmatched_name_values(names, gender_and_race) == {"gender": {"mal": 1}, "race": {"Hispanic": 1}}
    intersections = [Group(name="Black female", gender="female", race="Black"),
                     Group(name="White male", gender="male", race="White")]
    # only Ama is drawn; of the others, the values no group filters for
    assert unmatched_name_values(names, intersections) == {"gender": {"mal": 1, "nonbinary": 1},
                                                            "race": {"Hispanic": 3}}
    assert unmatched_name_values(names, [Group(name="p", profile="I am a woman")]) == {}  # no name group
    # a name with no gender under gender groups is never drawn either: counted, as "" (bad-input break-it, s43)
    blank = names + [NameRecord(name="Alex", gender=None, race="White")]
    assert unmatched_name_values(blank, gender_and_race[:2]) == {"gender": {"": 1, "mal": 1, "nonbinary": 1}}

"""Names of two groups that leave an attribute free are drawn balanced by it (methodology §1 step 2;
statistics break-it, s43): the shipped list has 10 female and 5 male Black names, 10 and 10 of every
other race, so race groups drawn from all their names made "Black" users ⅔ female and "White" ½, and
a chatbot treating women differently read as a race gap. Real audits on scripted doubles."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.audit.inputs import comparison_strata
from lmra.config import AuditConfig, Group
from lmra.data import NameRecord, load_names
from lmra.generate import draw_balanced, names_for_group
from lmra.resources import resolve_resource
from monitor_helpers import PHRASE, phrase_verdict

RACE_NAMES = load_names(resolve_resource("names/race_gender.csv", "names"))
GENDER_OF = {n.name: n.gender for n in RACE_NAMES}


def test_the_strata_of_race_groups_are_their_names_by_gender():
    groups = [Group(name=r, race=r) for r in ("Black", "White")] + [
        Group(name="Black female", race="Black", gender="female"), Group(name="White male", race="White", gender="male")]
    names = {g.name: names_for_group(RACE_NAMES, g) for g in groups}
    st = comparison_strata(RACE_NAMES, groups, [("Black", "White"), ("Black female", "White male"),
                                                ("Black female", "White")], names)
    assert list(st) == ["Black vs White"]  # an intersection, a mixed comparison: drawn as before
    black = st["Black vs White"]
    assert black["attribute"] == "gender" and black["values"] == ["female", "male"]
    assert [len(c) for c in black["cells"]["Black"]] == [10, 5] and [len(c) for c in black["cells"]["White"]] == [10, 10]
    assert black["left_out"] == {"Black": 0, "White": 0}
    # a value the other group lacks, or none, is left out of the comparison (counted)
    extra = RACE_NAMES + [NameRecord(name="Robin", gender="nonbinary", race="White"),
                          NameRecord(name="Sasha", gender=None, race="Black")]
    names = {g.name: names_for_group(extra, g) for g in groups[:2]}
    st = comparison_strata(extra, groups[:2], [("Black", "White")], names)["Black vs White"]
    assert st["values"] == ["female", "male"] and st["left_out"] == {"Black": 1, "White": 1}


def test_a_balanced_draw_takes_each_cell_equally_often():
    """Draws over 20,000 prompts: each of 2 cells half the time (within 4 SD: ±0.014), each name of a
    5-name cell a tenth of the time; seeded, so the same prompt draws the same name again."""
    cells = [[f"F{i}" for i in range(10)], [f"M{i}" for i in range(5)]]
    drawn = [draw_balanced(cells, "Prompt", 7, f"p{i}", "Black", "Black vs White", 0) for i in range(20_000)]
    male = sum(d.startswith("M") for d in drawn) / len(drawn)
    assert abs(male - 0.5) < 0.014
    assert all(abs(c / len(drawn) - 0.1) < 0.009 for n, c in Counter(drawn).items() if n.startswith("M"))
    assert drawn[:50] == [draw_balanced(cells, "Prompt", 7, f"p{i}", "Black", "Black vs White", 0) for i in range(50)]
    # a name the prompt mentions is not drawn for it (as draw_name)
    assert all(draw_balanced([["Anna", "Beth"], ["Carl"]], "A card for Anna", 1, f"p{i}", "g", "c", 0) != "Anna"
               for i in range(200))


def _audit(tmp_path, n_prompts: int):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                           "task": "write a story"}) + "\n" for i in range(n_prompts)))
    cfg = AuditConfig.model_validate(dict(
        name="race", prompts=str(prompts), names="names/race_gender.csv", prompts_per_task=0, seed=3,
        output_dir=str(tmp_path / "reports"), cache=":memory:", concurrency=16, judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False},
        groups=[{"name": "Black", "race": "Black", "wording": "Black"}, {"name": "White", "race": "White",
                                                                         "wording": "White"}],
        comparisons=[["Black", "White"]]))
    # a chatbot that treats women differently and race not at all: the phrase in every female user's answer
    target = ScriptedTarget(GENDER_OF, lambda gender, rng: PHRASE if gender == "female" else
                            f"Neutral answer {rng.random()}.")
    return Audit(cfg, target=target, judge=ScriptedJudge(phrase_verdict)).run()


def test_a_gender_effect_is_not_read_as_a_race_gap(tmp_path):
    """600 prompts of Black vs White: a pair scores +1 when only the Black user is a woman, −1 when
    only the White user is, so the net rating is P(Black f)·P(White m) − P(Black m)·P(White f) —
    (⅔·½ − ⅓·½) = +0.167 drawn from all names, 0 balanced (SE ≈ 0.029). Each group's share of
    women is ½ (SE 0.02)."""
    res = _audit(tmp_path, 600)
    responses = [json.loads(line) for line in open(res.run_dir / "responses.jsonl", encoding="utf-8")]
    for group in ("Black", "White"):
        drawn = [GENDER_OF[r["name"]] for r in responses if r["group"] == group]
        assert len(drawn) == 600 and abs(drawn.count("female") / 600 - 0.5) < 0.08, (group, drawn.count("female"))
    overall = res.summary["overall"][0]
    assert abs(overall["net_rating"]) < 0.1, overall["net_rating"]
    assert res.summary["balanced_draws"] == {"Black vs White": {"attribute": "gender", "values": ["female", "male"],
                                                                "left_out": {"Black": 0, "White": 0}}}

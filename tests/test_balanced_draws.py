"""Names of two groups that leave an attribute free are drawn balanced by it (methodology §1 step 2;
statistics break-it, s43): the shipped list has 10 female and 5 male Black names, 10 and 10 of every
other race, so race groups drawn from all their names made "Black" users ⅔ female and "White" ½, and
a chatbot treating women differently read as a race gap. Real audits on scripted doubles."""

from __future__ import annotations

import json
from pathlib import Path
from collections import Counter


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


def test_the_edges_of_balanced_draws_are_balanced_or_said():
    """Break-it round 2 (s43): Black names all female against White female and male were drawn 100%
    vs 50% female, unsaid; a race column filled for a few names of a gender list shrank the draw to
    those names; a one-name cell stood for half its group, unsaid; spellings were lower-cased."""
    from lmra.audit.inputs import strata_warnings

    def rec(name, gender, race):
        return NameRecord(name=name, gender=gender, race=race)

    groups = [Group(name="Black", race="Black"), Group(name="White", race="White")]
    pair = [("Black", "White")]
    women = [rec(f"Bf{i}", "Female", "Black") for i in range(6)] + [rec(f"W{g}{i}", g, "White") for g in ("Female", "male")
                                                                    for i in range(6)]
    names = {g.name: names_for_group(women, g) for g in groups}
    st = comparison_strata(women, groups, pair, names)["Black vs White"]
    assert st["values"] == ["Female"] and st["left_out"] == {"Black": 0, "White": 6}  # both draw women; as spelt
    assert any("6 of White's names have a gender the other group lacks" in w for w in strata_warnings("Black vs White", st))
    apart = [rec("Bf", "female", "Black"), rec("Bg", "female", "Black"), rec("Wm", "male", "White"),
             rec("Wn", "male", "White")]
    st = comparison_strata(apart, groups, pair, {g.name: names_for_group(apart, g) for g in groups})["Black vs White"]
    assert st["values"] == [] and "have no gender in common" in strata_warnings("Black vs White", st)[0]
    one = [rec(f"Bf{i}", "female", "Black") for i in range(5)] + [rec("Tyrone", "male", "Black")] + [
        rec(f"W{g}{i}", g, "White") for g in ("female", "male") for i in range(5)]
    st = comparison_strata(one, groups, pair, {g.name: names_for_group(one, g) for g in groups})["Black vs White"]
    [small] = [w for w in strata_warnings("Black vs White", st) if "Tyrone" in w]
    assert "Black's names of gender male are 1 (Tyrone): drawn balanced by gender, each stands for 50% of Black's" in small
    # a gender list with race filled for 2 names of 12: race is not an attribute of it, nothing balanced
    gender_groups = [Group(name="female", gender="female"), Group(name="male", gender="male")]
    part = [rec(f"F{i}", "female", "Black" if i < 2 else None) for i in range(6)] + [rec(f"M{i}", "male", None)
                                                                                    for i in range(6)]
    assert comparison_strata(part, gender_groups, [("female", "male")],
                             {g.name: names_for_group(part, g) for g in gender_groups}) == {}


def test_a_cell_the_prompt_names_entirely_is_passed_over():
    """Break-it round 2 (s43): a one-name cell drew the name the prompt is about ("[NAME]" on one side
    only). Another cell is drawn for that prompt; a prompt naming every name of every cell draws as before."""
    cells = [["Anna", "Beth"], ["Reginald"]]
    assert all(draw_balanced(cells, "Write a card for Reginald", 1, f"p{i}", "g", "c", 0) != "Reginald"
               for i in range(200))
    both = [draw_balanced([["Anna"], ["Reginald"]], "Anna and Reginald", 1, f"p{i}", "g", "c", 0) for i in range(200)]
    assert set(both) == {"Anna", "Reginald"}


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


def _audit(tmp_path, n_prompts: int, **extra):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                           "task": "write a story"}) + "\n" for i in range(n_prompts)))
    cfg = AuditConfig.model_validate(dict(
        name="race", prompts=str(prompts), names="names/race_gender.csv", prompts_per_task=0, seed=3,
        output_dir=str(tmp_path / "reports"), cache=":memory:", concurrency=16, judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False},
        groups=[{"name": "Black", "race": "Black", "wording": "Black"}, {"name": "White", "race": "White",
                                                                         "wording": "White"}],
        comparisons=[["Black", "White"]], **extra))
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


def test_the_placebo_halves_are_balanced_as_the_comparison(tmp_path):
    """Break-it round 2 (s43): the placebo split all of Black's names in two seeded halves, whose
    shares of women differed by 0.18 (median) — more than the gap balancing removed — and the
    gender-only chatbot flagged the placebo (judge "failed") in 2 of 4 seeds. Each cell is halved and
    the placebo drawn balanced: both halves ½ women (SE 0.03 on 300 prompts), its net rating ≈ 0."""
    res = _audit(tmp_path, 300, placebo={"share": 1.0})
    responses = [json.loads(line) for line in open(res.run_dir / "placebo_responses.jsonl", encoding="utf-8")]
    halves = {g: [GENDER_OF[r["name"]] for r in responses if r["group"] == g] for g in ("Black~1", "Black~2")}
    assert all(len(v) == 300 for v in halves.values())
    assert all(abs(v.count("female") / 300 - 0.5) < 0.1 for v in halves.values()), {
        g: v.count("female") for g, v in halves.items()}
    drawn = {g: {r["name"] for r in responses if r["group"] == g} for g in ("Black~1", "Black~2")}
    assert not drawn["Black~1"] & drawn["Black~2"]  # disjoint halves, each with women and men
    assert all({GENDER_OF[n] for n in v} == {"female", "male"} for v in drawn.values())
    [row] = res.summary["placebo"]
    assert row["placebo"] == "Black~1 vs Black~2" and abs(row["net_rating"]) < 0.12, row


def test_the_audit_says_which_comparisons_are_drawn_balanced(tmp_path, capsys):
    """Break-it round 2 (s43): the draws changed with nothing on the console to say so."""
    from lmra.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                           "task": "write a story"}) + "\n" for i in range(4)))
    from conftest import custom_audit_config

    race_groups = ('comparisons = [["Black", "White"]]\n[[groups]]\nname = "Black"\nrace = "Black"\n'
                   '[[groups]]\nname = "White"\nrace = "White"')
    cfg = custom_audit_config(tmp_path, Path("names/race_gender.csv"), prompts, target="test_balanced_draws:make_target",
                              judge="test_balanced_draws:make_judge", name="race", top=race_groups)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("Names drawn balanced: Black vs White by gender (female, male equally often in both groups) "
            "(methodology §1 step 2).") in out


def make_target(cfg):
    """Custom-provider factory: the gender-only chatbot of these tests."""
    return ScriptedTarget(GENDER_OF, lambda gender, rng: PHRASE if gender == "female" else f"Neutral {rng.random()}.")


def make_judge(cfg):
    return ScriptedJudge(phrase_verdict)


def test_a_check_across_the_upgrade_says_the_names_were_drawn_differently():
    """Upgrade trial (s43): after the upgrade every night's check read "the audit design differs: names
    (its content changed)" for a names file no one had touched. It says how each run drew its names,
    and what to do."""
    from types import SimpleNamespace

    from lmra.comparable import _design_change

    def run(run_id, balanced, version="0.2.0"):
        summary = {} if balanced is None else {"balanced_draws": balanced}
        return SimpleNamespace(run_id=run_id, config={"names": "names/race_gender.csv"}, summary=summary,
                               manifest={"versions": {"lmra": version}})

    bal = {"Black vs White": {"attribute": "gender", "values": ["female", "male"], "left_out": {}}}
    said = _design_change("names", run("old", None, "0.1.0"), run("new", bal))
    assert said == ("the names were drawn balanced: Black vs White by gender in the run, from all their names "
                    "(lmra 0.1.0, before balanced draws) in the baseline — methodology §1 step 2; the names file may "
                    "be unchanged: pin a night drawn as this one ('lmra pin new') to compare like with like")
    assert _design_change("names", run("a", bal), run("b", bal)) == "its content changed"  # drawn alike: the file
    moved = run("b", bal)
    moved.config = {"names": "other.csv"}
    assert "other.csv" in _design_change("names", run("a", bal), moved)


def test_runs_record_the_version_of_the_code_that_ran():
    """Upgrade trial (s43): manifests recorded the installed distribution's version, so a checkout run
    over an older installed copy, and shards of the old and new draw rules, all read 0.1.0 — and
    ``lmra merge`` mixed them. The code's own version is recorded; the draw rule's is 0.2.0 or later."""
    import lmra
    from lmra.runfolder import package_versions

    assert package_versions()["lmra"] == lmra.__version__
    assert tuple(int(x) for x in lmra.__version__.split(".")[:2]) >= (0, 2)


def test_the_final_line_says_the_design_differs():
    """Upgrade trial (s43): the first night after the upgrade read "exit status 0: no regression" in
    the cron mail, the design change only in a warning above; the final line now names it."""
    from types import SimpleNamespace

    import pandas as pd

    from lmra.cli.monitor import _design_words, check_exit_reasons, no_regression_reason

    warn = ("the audit design differs: names (the names were drawn balanced: Black vs White by gender in the run, "
            "from all their names (lmra 0.1.0, before balanced draws) in the baseline — …); prompts_per_task (2 → 3) "
            "— a change in the net ratings may be the design's, not the chatbot's")
    assert _design_words(SimpleNamespace(comparability=[warn])) == (
        "; the audit design differs from the baseline's (names, prompts_per_task: above)")
    assert _design_words(SimpleNamespace(comparability=["another warning"])) == ""
    regs = pd.DataFrame({"comparison": ["f vs m"], "domain": ["d"], "task": ["story"], "regressed": [True]})
    res = SimpleNamespace(baseline_id="b", n_tested=1, tests=regs, regressions=regs, comparability=[warn])
    assert check_exit_reasons(res)[3].endswith("; the audit design differs from the baseline's (names, "
                                               "prompts_per_task: above)")
    ok = SimpleNamespace(baseline_id="b", not_evidence="", quality_gap="", comparability=[warn], detectable=None,
                         tests=regs.iloc[0:0], overall=None)
    line = no_regression_reason(ok)
    assert line.startswith("no regression against baseline b") and line.endswith("; the audit design differs from the baseline's (names, prompts_per_task: above)")

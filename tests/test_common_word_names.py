"""Names that are everyday words (Hope, Joy, Mark, Will) in a user's own name list: the name
scrub replaces the word in the responses of users with that name ("I hope" → "I [NAME]"), a
difference between paired responses that is not the chatbot's (break-it finding: accepted
silently). The run says which drawn names are such words."""

from __future__ import annotations

from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.audit.finish import COMMON_WORD_NAMES_PREFIX
from lmra.config import AuditConfig

TEXT = "I hope this brings you joy. Mark the date; it will help."


def _run(tmp_path, names_rows, tag):
    names = tmp_path / f"{tag}.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},{g},,test\n" for n, g in names_rows))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"id": "p{i}", "text": "Prompt number {i}.", "domain": "d", "task": "t"}}\n'
                               for i in range(4)))
    cfg = AuditConfig.model_validate(dict(
        name=tag, prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / tag),
        cache=str(tmp_path / f"{tag}.sqlite"), judge_check={"enabled": False}, filter={"lmra": False},
        refusal={"enabled": False}))
    groups = {n: g for n, g in names_rows}
    return Audit(cfg, target=ScriptedTarget(groups, lambda g, rng: TEXT),
                 judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run()


def test_drawn_names_that_are_everyday_words_are_said(tmp_path):
    res = _run(tmp_path, [("Hope", "female"), ("Joy", "female"), ("Mark", "male"), ("Will", "male")], "words")
    s = res.summary
    assert s["names_common_words"] == ["Hope", "Joy", "Mark", "Will"]
    [w] = [w for w in s["warnings"] if w.startswith(COMMON_WORD_NAMES_PREFIX)]
    assert "Hope, Joy, Mark, Will" in w
    # the artefact it warns about: the same answer, scrubbed for two users, differs
    from lmra.generate import scrub_name
    assert scrub_name(TEXT, "Hope") == "I [NAME] this brings you joy. Mark the date; it will help."
    assert scrub_name(TEXT, "Mark") == "I hope this brings you joy. [NAME] the date; it will help."


def test_ordinary_names_give_no_such_warning(tmp_path):
    res = _run(tmp_path, [("Jennifer", "female"), ("Ashley", "female"), ("David", "male"), ("James", "male")],
               "plain")
    assert res.summary["names_common_words"] == []
    assert not any(w.startswith(COMMON_WORD_NAMES_PREFIX) for w in res.summary["warnings"])


def test_a_common_word_written_with_accents_is_named_too(tmp_path):
    """Docs-truth finding: the scrub matches "Jesús" as "Jesus" (a word the list names for the
    figure), but the check looked the name up as written."""
    res = _run(tmp_path, [("Jennifer", "female"), ("Ashley", "female"), ("Jesús", "male"), ("James", "male")],
               "accented")
    assert res.summary["names_common_words"] == ["Jesús"]


def test_validate_says_the_common_word_names_too(tmp_path, capsys):
    """Bad-input break-it (s43): only ``lmra audit`` warned of Will, Hope, Grace; ``lmra validate``,
    where a new name list is checked, said nothing."""
    from lmra.cli import main

    names = tmp_path / "words.csv"
    names.write_text("name,gender,race,source\nHope,female,,t\nAnna,female,,t\nWill,male,,t\nDavid,male,,t\n")
    cfg = tmp_path / "v.toml"
    cfg.write_text(f'name = "v"\nnames = "{names}"\n')
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: {COMMON_WORD_NAMES_PREFIX}Hope, Will — the name scrub replaces the word as well" in err
    names.write_text("name,gender,race,source\nAnna,female,,t\nDavid,male,,t\n")
    assert main(["validate", str(cfg)]) == 0
    assert COMMON_WORD_NAMES_PREFIX not in capsys.readouterr().err

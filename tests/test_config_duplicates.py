"""A quality criterion or an extra axis listed twice is an input error (exit 2 naming the field),
not a metric rated and counted twice per pair (break-it finding: ``criteria = ["clarity",
"clarity", "relevance"]`` validated, planned 144 instead of 120 LMRA calls, and quality.csv
reported 24 clarity pairs for 12 pairs)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("section, says", [
    ('[quality]\nenabled = true\ncriteria = ["clarity", "relevance", "clarity"]\n',
     "criteria listed more than once: ['clarity']"),
    ('[axes]\nextra_axes = ["uses simpler language", "Uses  simpler language"]\n',
     "listed more than once"),
    # break-it finding: an empty list validated, measured nothing, and a quality gate ended the
    # audit in a traceback after every call
    ('[quality]\nenabled = true\ncriteria = []\n', "no criterion listed: give at least one"),
])
def test_a_criterion_or_axis_listed_twice_is_refused(tmp_path, section, says):
    cfg = tmp_path / "dup.toml"
    cfg.write_text('name = "dup"\n' + section)
    p = subprocess.run([sys.executable, "-m", "lmra.cli", "validate", str(cfg)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and says in p.stderr and "dup.toml" in p.stderr and "Traceback" not in p.stderr
    field = "quality.criteria" if "quality" in section else "axes.extra_axes"
    assert field in p.stderr


def test_distinct_criteria_and_axes_are_fine(tmp_path):
    cfg = tmp_path / "ok.toml"
    cfg.write_text('name = "ok"\n[quality]\nenabled = true\ncriteria = ["clarity", "relevance"]\n'
                   '[axes]\nextra_axes = ["uses simpler language", "uses longer sentences"]\n')
    p = subprocess.run([sys.executable, "-m", "lmra.cli", "validate", str(cfg)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_an_empty_criteria_list_is_fine_with_quality_off(tmp_path):
    """Break-it finding: the check refused it with enabled = false too — which older configs (and
    run folders' config.toml, read back by `lmra axes --run`) hold."""
    cfg = tmp_path / "off.toml"
    cfg.write_text('name = "off"\n[quality]\nenabled = false\ncriteria = []\n')
    p = subprocess.run([sys.executable, "-m", "lmra.cli", "validate", str(cfg)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_a_comparison_and_its_reverse_are_refused(tmp_path):
    """Break-it finding: comparisons = [["female", "male"], ["male", "female"]] was accepted: both
    rated, at twice the cost, two net ratings for one question (-0.1111 and -0.0370)."""
    cfg = tmp_path / "rev.toml"
    cfg.write_text('name = "rev"\ncomparisons = [["female", "male"], ["male", "female"]]\n')
    p = subprocess.run([sys.executable, "-m", "lmra.cli", "validate", str(cfg)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    err = " ".join(p.stderr.split())
    assert p.returncode == 2 and "field 'comparisons'" in err and "one comparison in both directions" in err, err
    assert "Traceback" not in err


def test_a_repeated_group_name_is_named_with_its_places(tmp_path, capsys):
    """Fresh-user finding (s40): "group names must be unique" did not say which name (a sed had renamed
    every `name =` line of a copied config)."""
    from lmra.cli import main

    cfg = tmp_path / "dup.toml"
    cfg.write_text('comparisons = [["a", "b"]]\n[[groups]]\nname = "a"\ngender = "female"\n[[groups]]\nname = "b"\n'
                   'gender = "male"\n[[groups]]\nname = "a"\ngender = "male"\n')
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "group names must be unique: 'a' names groups 1 and 3" in err and "Traceback" not in err


def test_a_group_with_a_profile_and_gender_is_refused_and_a_mixed_comparison_is_warned(tmp_path, capsys):
    """Fresh-user finding (s40): `profile` beside `gender`/`race` ignored them without a word, and a name
    group compared with a profile group (two ways of telling the chatbot who the user is) passed validate."""
    from lmra.cli import main

    both = tmp_path / "both.toml"
    both.write_text('comparisons = [["a", "b"]]\n[[groups]]\nname = "a"\ngender = "female"\n[[groups]]\nname = "b"\n'
                    'gender = "male"\nprofile = "I am a man"\n')
    assert main(["validate", str(both)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "group 'b' sets both 'profile' and 'gender'/'race'" in err and "Traceback" not in err
    mixed = tmp_path / "mixed.toml"
    mixed.write_text('comparisons = [["a", "b"]]\n[[groups]]\nname = "a"\ngender = "female"\n[[groups]]\nname = "b"\n'
                     'profile = "I am a man"\n')
    assert main(["validate", str(mixed)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: comparison 'a vs b' compares a name group with a profile group (a: names; b: a profile sentence)" \
        in err
    from lmra.config import Group, mixed_comparisons

    groups = [Group(name="x", profile="I live in Canada."), Group(name="y", profile="I am a woman.")]
    assert mixed_comparisons(groups, [("x", "y")]) == []  # profiles with profiles (FPF App. C): nothing to say


def test_a_group_compared_with_its_superset_is_warned(tmp_path, capsys):
    """Scale break-it (s40): "Black female vs Black" ran without a word, and some pairs gave one name to
    both sides (a user compared with themself)."""
    from lmra.cli import main

    cfg = tmp_path / "sup.toml"
    cfg.write_text('names = "names/race_gender.csv"\ncomparisons = [["Bf", "B"]]\n[[groups]]\nname = "Bf"\n'
                   'gender = "female"\nrace = "Black"\n[[groups]]\nname = "B"\nrace = "Black"\n')
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: comparison 'Bf vs B':" in err and "name(s) belong to both groups" in err
    disjoint = tmp_path / "dis.toml"
    disjoint.write_text('names = "names/race_gender.csv"\ncomparisons = [["Bf", "Bm"]]\n[[groups]]\nname = "Bf"\n'
                        'gender = "female"\nrace = "Black"\n[[groups]]\nname = "Bm"\ngender = "male"\nrace = "Black"\n')
    assert main(["validate", str(disjoint)]) == 0
    assert "belong to both groups" not in capsys.readouterr().err


@pytest.mark.parametrize("text, line, says", [
    ('name = "x"\nconcurrency = 4\nseed = 2\nconcurrency = 5\n', 4,
     "field 'concurrency': not valid TOML: 'concurrency' is set twice (first on line 2)"),
    ('name = "x"\n[judge]\nprovider = "openai"\ntemperature = 0\n\n# again\ntemperature = 1\n', 7,
     "field 'judge.temperature': not valid TOML: 'judge.temperature' is set twice (first on line 4)"),
])
def test_a_key_set_twice_names_the_key_and_where_it_was_first_set(tmp_path, text, line, says):
    """Break-it finding, s41: ``concurrency`` given twice read "line 7: not valid TOML: Cannot overwrite
    a value (column 16)" — the line, not the key nor the line that set it first."""
    cfg = tmp_path / "twice.toml"
    cfg.write_text(text)
    p = subprocess.run([sys.executable, "-m", "lmra.cli", "validate", str(cfg)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    err = " ".join(p.stderr.split())
    assert p.returncode == 2 and f"twice.toml, line {line}: {says}" in err and "Traceback" not in err, err

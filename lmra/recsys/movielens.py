"""MovieLens-format data for CFaiRLLM (Deldjoo & Di Noia 2024, §3; methodology §6).

Reads the ML-1M files (``ratings.dat``, ``movies.dat``, ``users.dat``: ``::``-separated,
ISO-8859-1 text), splits every user's ratings 80/10/10 (seeded), samples user profiles
(random / top-rated / recent, N items), builds the short "passion profile" (favourite genres
and year range) and the true-preference sets (items the user liked in the test split).

The repository ships a tiny sample in ``examples/movielens_sample/`` made for the tests;
for real audits point ``cfairllm.data`` at the folder holding the real ML-1M files
(https://grouplens.org/datasets/movielens/1m/).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from lmra.errors import LmraInputError
from lmra.numbers import strict_int

Strategy = Literal["random", "top-rated", "recent"]
STRATEGIES: tuple[str, ...] = ("random", "top-rated", "recent")
SEP = "::"

#: ML-1M age codes → label (README of ML-1M).
AGE_GROUPS: dict[int, str] = {1: "under 18", 18: "18-24", 25: "25-34", 35: "35-44", 45: "45-49", 50: "50-55",
                              56: "56+"}
#: ML-1M gender codes → label.
GENDERS: dict[str, str] = {"F": "female", "M": "male"}
#: ML-1M occupation codes → label.
OCCUPATIONS: dict[int, str] = {
    0: "other", 1: "academic/educator", 2: "artist", 3: "clerical/admin", 4: "college/grad student",
    5: "customer service", 6: "doctor/health care", 7: "executive/managerial", 8: "farmer", 9: "homemaker",
    10: "K-12 student", 11: "lawyer", 12: "programmer", 13: "retired", 14: "sales/marketing", 15: "scientist",
    16: "self-employed", 17: "technician/engineer", 18: "tradesman/craftsman", 19: "unemployed", 20: "writer"}
_YEAR = re.compile(r"\((\d{4})\)\s*$", re.ASCII)


_BOM = b"\xef\xbb\xbf"


def _decode(data: bytes, encoding: str) -> str:
    """A .dat file's text: a file starting with a UTF-8 byte-order mark is UTF-8 whatever
    ``encoding`` says (the mark dropped; break-it finding: it was read as part of the first
    UserID, 'ï»¿1' is not an integer), any other in ``encoding``. Raises UnicodeDecodeError."""
    return data[len(_BOM):].decode("utf-8") if data.startswith(_BOM) else data.decode(encoding)


def _read_rows(path: Path, n_fields: int, what: str, encoding: str) -> Iterable[tuple[int, list[str]]]:
    try:
        if path.exists() and not path.is_file() and not path.is_dir():  # never block on a pipe or read a device
            raise LmraInputError(f"{what} is not a regular file (a device, pipe or socket)", file=path)
        text = _decode(path.read_bytes(), encoding)
    except FileNotFoundError:
        raise LmraInputError(f"{what} not found", file=path) from None
    except IsADirectoryError:
        raise LmraInputError(f"{what} is a folder, expected a file", file=path) from None
    except UnicodeDecodeError as exc:  # (the byte's offset in the file: after a mark, 3 more)
        at = exc.start + (len(_BOM) if exc.encoding == "utf-8" and path.read_bytes().startswith(_BOM) else 0)
        raise LmraInputError(f"{what} is not {exc.encoding} text ({exc.reason} at byte {at})", file=path) from None
    except OSError as exc:  # permission denied … (break-it finding: an I/O failure, exit 1)
        raise LmraInputError(f"cannot read {what} ({exc.strerror or exc})", file=path) from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(SEP)
        if len(parts) != n_fields:
            raise LmraInputError(f"expected {n_fields} '::'-separated fields, found {len(parts)}", file=path,
                                 line=lineno)
        yield lineno, parts


def _int(value: str, path: Path, line: int, field: str) -> int:
    """A field of a .dat file as a whole number in ASCII digits (:func:`lmra.numbers.strict_int`:
    ``1_0`` or ``١٠`` is not user 10)."""
    try:
        return strict_int(value)
    except ValueError as exc:
        raise LmraInputError(str(exc), file=path, line=line, field=field) from None


def split_genres(cell: str, *, file: str | Path, line: int | None, field: str = "genres") -> list[str]:
    """The genres of one ``|``-separated cell — of ``movies.dat``, an items CSV (``lmra recsys
    bias``) or a catalog CSV: each name stripped of surrounding whitespace (``X| Y`` is X and
    Y, never a genre ``' Y'`` beside ``Y``); an empty cell is no genre.

    Raises:
        LmraInputError: an empty name (``X||Y``, ``X|``) or a name twice (``X|X``, ``X| X``) —
            naming the file, line and field: dropped or counted twice, either would change
            the categories silently (break-it finding).
    """
    cell = cell.strip()
    if not cell:
        return []
    names = [g.strip() for g in cell.split("|")]
    if "" in names:
        raise LmraInputError(f"an empty genre name in '{cell}' (genres are separated by one '|', with a name on "
                             "each side)", file=file, line=line, field=field)
    twice = next((g for i, g in enumerate(names) if g in names[:i]), None)
    if twice is not None:
        raise LmraInputError(f"genre '{twice}' is given twice in '{cell}'", file=file, line=line, field=field)
    return names


def load_ratings(path: str | Path, *, encoding: str = "latin-1") -> pd.DataFrame:
    """Read ``ratings.dat`` (``UserID::MovieID::Rating::Timestamp``).

    Returns:
        DataFrame with int columns ``user_id``, ``item_id``, ``rating`` (1–5) and
        ``timestamp`` (Unix seconds), in file order.

    Raises:
        LmraInputError: missing file, wrong field count, non-integer field, rating outside
            1–5, a repeated (user, item) pair, or no rows — with file and line.
    """
    p = Path(path)
    rows = []
    seen: dict[tuple[int, int], int] = {}
    for line, (u, i, r, t) in _read_rows(p, 4, "ratings file", encoding):
        rec = (_int(u, p, line, "UserID"), _int(i, p, line, "MovieID"), _int(r, p, line, "Rating"),
               _int(t, p, line, "Timestamp"))
        if not 1 <= rec[2] <= 5:
            raise LmraInputError(f"rating {rec[2]} outside 1-5", file=p, line=line, field="Rating")
        if rec[:2] in seen:
            raise LmraInputError(f"user {rec[0]} rated movie {rec[1]} twice (first on line {seen[rec[:2]]})",
                                 file=p, line=line)
        seen[rec[:2]] = line
        rows.append(rec)
    if not rows:
        raise LmraInputError("no ratings in the file", file=p)
    return pd.DataFrame(rows, columns=["user_id", "item_id", "rating", "timestamp"])


def load_movies(path: str | Path, *, encoding: str = "latin-1") -> pd.DataFrame:
    """Read ``movies.dat`` (``MovieID::Title::Genres``, genres ``|``-separated).

    Returns:
        DataFrame indexed by nothing, columns ``item_id`` (int), ``title`` (as written, e.g.
        ``Matrix, The (1999)``), ``year`` (Int64, from the trailing ``(YYYY)``, <NA> if
        absent) and ``genres`` (list of str).

    Raises:
        LmraInputError: missing file, wrong field count, non-integer id, duplicate id, empty
            title, an empty genre name or a genre twice (:func:`split_genres`), or no rows — with
            file and line.
    """
    p = Path(path)
    rows = []
    seen: dict[int, int] = {}
    for line, (i, title, genres) in _read_rows(p, 3, "movies file", encoding):
        item = _int(i, p, line, "MovieID")
        if item in seen:
            raise LmraInputError(f"movie id {item} repeated (first on line {seen[item]})", file=p, line=line,
                                 field="MovieID")
        seen[item] = line
        if not title.strip():
            raise LmraInputError("empty title", file=p, line=line, field="Title")
        m = _YEAR.search(title)
        rows.append((item, title.strip(), int(m.group(1)) if m else None,
                     split_genres(genres, file=p, line=line, field="Genres")))
    if not rows:
        raise LmraInputError("no movies in the file", file=p)
    df = pd.DataFrame(rows, columns=["item_id", "title", "year", "genres"])
    df["year"] = df["year"].astype("Int64")
    return df


def load_users(path: str | Path, *, encoding: str = "latin-1") -> pd.DataFrame:
    """Read ``users.dat`` (``UserID::Gender::Age::Occupation::Zip-code``).

    Returns:
        DataFrame with ``user_id`` (int), ``gender`` (``female``/``male``), ``age`` (the
        ML-1M code), ``age_group`` (label, e.g. ``25-34``), ``occupation`` (code),
        ``occupation_label`` and ``zip``.

    Raises:
        LmraInputError: missing file, wrong field count, gender not F/M, unknown age code,
            non-integer field, duplicate user — with file and line.
    """
    p = Path(path)
    rows = []
    seen: dict[int, int] = {}
    for line, (u, g, a, o, z) in _read_rows(p, 5, "users file", encoding):
        user = _int(u, p, line, "UserID")
        if user in seen:
            raise LmraInputError(f"user id {user} repeated (first on line {seen[user]})", file=p, line=line,
                                 field="UserID")
        seen[user] = line
        if g.strip() not in GENDERS:
            raise LmraInputError(f"gender '{g}' is not F or M", file=p, line=line, field="Gender")
        age = _int(a, p, line, "Age")
        if age not in AGE_GROUPS:
            raise LmraInputError(f"age code {age} is not one of {sorted(AGE_GROUPS)}", file=p, line=line, field="Age")
        occ = _int(o, p, line, "Occupation")
        rows.append((user, GENDERS[g.strip()], age, AGE_GROUPS[age], occ, OCCUPATIONS.get(occ, "unknown"), z.strip()))
    if not rows:
        raise LmraInputError("no users in the file", file=p)
    return pd.DataFrame(rows, columns=["user_id", "gender", "age", "age_group", "occupation", "occupation_label",
                                       "zip"])


@dataclass
class MovieLens:
    """The three MovieLens tables (see the ``load_*`` functions for their columns)."""

    ratings: pd.DataFrame
    movies: pd.DataFrame
    users: pd.DataFrame
    folder: Path | None = None

    def titles(self) -> dict[int, str]:
        """item_id → title."""
        return dict(zip(self.movies["item_id"], self.movies["title"]))


def load_movielens(folder: str | Path, *, encoding: str = "latin-1") -> MovieLens:
    """Read ``ratings.dat``, ``movies.dat`` and ``users.dat`` from one folder and check that
    every rating refers to a known user and movie.

    Raises:
        LmraInputError: a missing/malformed file, or a rating of an unknown user or movie
            (naming the ratings file and line).
    """
    f = Path(folder)
    if not f.is_dir():
        raise LmraInputError("MovieLens folder not found (expected ratings.dat, movies.dat, users.dat)", file=f)
    ratings = load_ratings(f / "ratings.dat", encoding=encoding)
    movies = load_movies(f / "movies.dat", encoding=encoding)
    users = load_users(f / "users.dat", encoding=encoding)
    for col, known, what in (("item_id", set(movies["item_id"]), "movie"), ("user_id", set(users["user_id"]), "user")):
        bad = ~ratings[col].isin(known)
        if bad.any():
            first = int(np.flatnonzero(bad.to_numpy())[0])
            raise LmraInputError(f"rating of unknown {what} {ratings[col].iloc[first]}", file=f / "ratings.dat",
                                 line=_line_of(f / "ratings.dat", first, encoding))
    return MovieLens(ratings, movies, users, f)


def _line_of(path: Path, row: int, encoding: str) -> int:
    n = -1
    for lineno, line in enumerate(_decode(path.read_bytes(), encoding).splitlines(), start=1):
        if line.strip():
            n += 1
            if n == row:
                return lineno
    return row + 1


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5 + 1e-9))


def split_counts(n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> tuple[int, int, int]:
    """Sizes of the train/validation/test parts of ``n`` ratings.

    Boundaries are rounded half up: ``b1 = round(f_train·n)``, ``b2 = round((f_train+f_valid)·n)``;
    train = b1, valid = b2 − b1, test = n − b2 (10 → 8/1/1, 20 → 16/2/2, 7 → 6/0/1) — except that a
    held-out rating goes to test before validation, which lmra never reads: 3 → 2/0/1, 4 → 3/0/1,
    5 → 4/0/1 (rounded so, these users' one held-out rating went to validation, and their
    true-preference lists R′ were always empty: known-items trial, s49).

    Raises:
        ValueError: fractions that are negative or do not sum to 1.
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"split fractions must be three non-negative numbers summing to 1, got {list(fractions)}")
    b1 = _round_half_up(fractions[0] * n)
    b2 = max(b1, _round_half_up((fractions[0] + fractions[1]) * n))
    if n - b2 == 0 and b2 > b1 and fractions[2] > 0:  # the held-out rating to test first (validation is unused)
        b2 -= 1
    return b1, b2 - b1, n - b2


def split_ratings(ratings: pd.DataFrame, *, seed: int = 0, fractions: Sequence[float] = (0.8, 0.1, 0.1),
                  method: Literal["random", "temporal"] = "random") -> pd.DataFrame:
    """Per-user train/validation/test split (CFaiRLLM §4.1: 80/10/10 per user).

    Args:
        ratings: :func:`load_ratings` output.
        seed: the split seed; each user's shuffle uses its own stream derived from
            (seed, user_id), so adding users does not change existing users' splits.
        fractions: train, validation, test shares (see :func:`split_counts`).
        method: ``random`` (seeded shuffle per user) or ``temporal`` (oldest ratings to
            train, newest to test; ties by item id).

    Returns:
        A copy of ``ratings`` with a ``split`` column (``train``/``valid``/``test``).

    Raises:
        ValueError: bad fractions or method.
    """
    from lmra.generate import derive_seed

    if method not in ("random", "temporal"):
        raise ValueError(f"unknown split method '{method}' (random or temporal)")
    out = ratings.sort_values(["user_id", "timestamp", "item_id"], kind="stable").copy()
    labels = np.empty(len(out), dtype=object)
    for _, idx in out.groupby("user_id", sort=False).indices.items():
        n = len(idx)
        n_tr, n_va, _ = split_counts(n, fractions)
        if method == "random":
            uid = int(out["user_id"].iloc[idx[0]])
            order = np.random.default_rng(derive_seed(seed, "split", uid)).permutation(n)
        else:
            order = np.arange(n)
        lab = np.array(["test"] * n, dtype=object)
        lab[order[:n_tr]] = "train"
        lab[order[n_tr:n_tr + n_va]] = "valid"
        labels[idx] = lab
    out["split"] = labels
    return out.loc[ratings.index]


def sample_profile(user_ratings: pd.DataFrame, strategy: Strategy = "top-rated", n: int = 10, *,
                   seed: int = 0) -> pd.DataFrame:
    """Choose N rated items to describe a user in the prompt (CFaiRLLM §3.3).

    Args:
        user_ratings: one user's ratings (normally the train split), columns ``item_id``,
            ``rating``, ``timestamp``.
        strategy: ``random`` (seeded sample, kept in a random order), ``top-rated`` (highest
            rating first; ties: more recent first, then lower item id) or ``recent`` (latest
            timestamp first; ties: lower item id).
        n: profile size N ≥ 1 (default 10); users with fewer ratings give them all.
        seed: seed for ``random``.

    Returns:
        The chosen rows, in profile order.

    Raises:
        ValueError: unknown strategy or n < 1.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown profile strategy '{strategy}' (choose one of {', '.join(STRATEGIES)})")
    if n < 1:
        raise ValueError(f"profile size must be ≥ 1, got {n}")
    if strategy == "top-rated":
        return user_ratings.sort_values(["rating", "timestamp", "item_id"], ascending=[False, False, True],
                                        kind="stable").head(n)
    if strategy == "recent":
        return user_ratings.sort_values(["timestamp", "item_id"], ascending=[False, True], kind="stable").head(n)
    base = user_ratings.sort_values("item_id", kind="stable")
    rng = np.random.default_rng(seed)
    pick = rng.permutation(len(base))[:n]
    return base.iloc[pick]


@dataclass(frozen=True)
class PassionProfile:
    """Favourite genres and year range of a user (CFaiRLLM §3.3 "passion profile").

    Attributes:
        genres: up to ``n_genres`` genres, most frequent first (ties alphabetical).
        year_min, year_max: range of release years of the items it was built from (None if
            no year is known).
    """

    genres: tuple[str, ...]
    year_min: int | None
    year_max: int | None

    def text(self) -> str:
        """One sentence for the prompt, e.g. "My favourite genres are Drama, Crime and Action,
        mostly from 1972 to 1999." ("" when nothing is known)."""
        parts = []
        if self.genres:
            g = list(self.genres)
            joined = g[0] if len(g) == 1 else ", ".join(g[:-1]) + " and " + g[-1]
            parts.append(f"My favourite genre{'s are' if len(g) > 1 else ' is'} {joined}")
        if self.year_min is not None:
            span = (f"from {self.year_min}" if self.year_min == self.year_max
                    else f"from {self.year_min} to {self.year_max}")
            parts.append(("mostly " if parts else "I mostly watch movies ") + span)
        return (", ".join(parts) + ".") if parts else ""


def passion_profile(user_ratings: pd.DataFrame, movies: pd.DataFrame, *, like_threshold: int = 4,
                    n_genres: int = 3) -> PassionProfile:
    """Favourite genres and year range from the items a user liked.

    Args:
        user_ratings: one user's (training) ratings.
        movies: :func:`load_movies` output (genres, year).
        like_threshold: ratings ≥ this count as liked (default 4); when the user liked
            nothing, all their ratings are used.
        n_genres: how many genres to keep.

    Returns:
        :class:`PassionProfile` — genres counted once per liked item (an item with three genres
        counts for each), ties broken alphabetically; year range = min and max release year
        of the liked items.
    """
    liked = user_ratings[user_ratings["rating"] >= like_threshold]
    if liked.empty:
        liked = user_ratings
    info = movies.set_index("item_id").reindex(liked["item_id"])
    counts = Counter(g for gs in info["genres"].dropna() for g in gs)
    genres = tuple(g for g, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n_genres])
    years = info["year"].dropna()
    return PassionProfile(genres, int(years.min()) if len(years) else None, int(years.max()) if len(years) else None)


def profile_text(profile: pd.DataFrame, titles: dict[int, str]) -> str:
    """The profile as prompt lines ``- <title>: <rating>/5``."""
    return "\n".join(f"- {titles.get(int(i), str(i))}: {int(r)}/5"
                     for i, r in zip(profile["item_id"], profile["rating"]))


def liked_items(split_ratings_df: pd.DataFrame, *, part: str = "test", like_threshold: int = 4) -> dict[int, set[int]]:
    """Items each user liked (rating ≥ ``like_threshold``) in one split part (CFaiRLLM §3.4,
    true-preference alignment).

    Returns:
        user_id → set of item ids (users with none are absent).
    """
    d = split_ratings_df[(split_ratings_df["split"] == part) & (split_ratings_df["rating"] >= like_threshold)]
    return {int(u): set(map(int, g)) for u, g in d.groupby("user_id")["item_id"]}


def restrict_to(items: Sequence, allowed: set) -> list:
    """Keep the items of a ranked list that are in ``allowed``, in order (R → R′, CFaiRLLM §3.4)."""
    return [i for i in items if i in allowed]

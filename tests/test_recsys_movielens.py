"""CFaiRLLM inputs on the shipped MovieLens-format sample: loading, the per-user split,
profile sampling, the passion profile and true-preference filtering."""

from pathlib import Path

import pandas as pd
import pytest

from lmra.errors import LmraInputError
from lmra.recsys import movielens as ml

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "movielens_sample"


@pytest.fixture(scope="module")
def data():
    return ml.load_movielens(SAMPLE)


def user(d, uid):
    return d.ratings[d.ratings["user_id"] == uid]


def test_load_sample(data):
    assert len(data.ratings) == 50 and len(data.movies) == 20 and len(data.users) == 4
    movies = data.movies.set_index("item_id")
    assert movies.at[19, "title"].startswith("City of Lost Children, The (Cité")  # Latin-1 decoded
    assert movies.at[4, "year"] == 1999 and movies.at[4, "genres"] == ["Action", "Sci-Fi", "Thriller"]
    users = data.users.set_index("user_id")
    assert users.at[1, "gender"] == "female" and users.at[1, "age_group"] == "under 18"
    assert users.at[4, "age_group"] == "56+" and users.at[2, "occupation_label"] == "scientist"
    assert data.ratings.groupby("user_id").size().to_dict() == {1: 10, 2: 10, 3: 10, 4: 20}


def test_top_rated_profile_picks_highest_ratings(data):
    p = ml.sample_profile(user(data, 1), "top-rated", 3)
    assert p["item_id"].tolist() == [4, 1, 9]  # the three 5-star ratings, newest first
    assert (p["rating"] == 5).all()
    # ties on rating are broken by the newer timestamp
    assert ml.sample_profile(user(data, 2), "top-rated", 4)["item_id"].tolist() == [13, 11, 4, 10]
    assert len(ml.sample_profile(user(data, 1), "top-rated", 50)) == 10  # fewer ratings than N: all of them


def test_recent_profile_picks_latest_timestamps(data):
    p = ml.sample_profile(user(data, 1), "recent", 3)
    assert p["item_id"].tolist() == [10, 8, 6]
    assert p["timestamp"].min() >= user(data, 1)["timestamp"].nlargest(3).min()
    # equal timestamps: lower item id first
    assert ml.sample_profile(user(data, 2), "recent", 2)["item_id"].tolist() == [15, 16]


def test_random_profile_is_seeded(data):
    a = ml.sample_profile(user(data, 1), "random", 4, seed=3)
    b = ml.sample_profile(user(data, 1), "random", 4, seed=3)
    assert a["item_id"].tolist() == b["item_id"].tolist()
    assert len(set(a["item_id"])) == 4 and set(a["item_id"]) <= set(user(data, 1)["item_id"])
    others = {tuple(ml.sample_profile(user(data, 1), "random", 4, seed=s)["item_id"]) for s in range(10)}
    assert len(others) > 1
    with pytest.raises(ValueError, match="unknown profile strategy"):
        ml.sample_profile(user(data, 1), "popular", 3)


def test_split_counts_rounding():
    assert ml.split_counts(10) == (8, 1, 1)
    assert ml.split_counts(20) == (16, 2, 2)
    assert ml.split_counts(7) == (6, 0, 1)  # boundaries round(5.6) = 6 and round(6.3) = 6
    # a held-out rating goes to test before validation, which lmra never reads (known-items trial, s49: users
    # with 3–5 ratings got 2/1/0, 3/1/0, 4/1/0 — no test item, so an R′ always empty)
    assert [ml.split_counts(n) for n in (1, 2, 3, 4, 5, 6)] == [(1, 0, 0), (2, 0, 0), (2, 0, 1), (3, 0, 1), (4, 0, 1),
                                                                (5, 0, 1)]
    assert ml.split_counts(5, (0.8, 0.2, 0.0)) == (4, 1, 0)  # no test share asked: none given
    with pytest.raises(ValueError):
        ml.split_counts(10, (0.8, 0.3, 0.1))


def test_random_split_per_user(data):
    s = ml.split_ratings(data.ratings, seed=0)
    assert len(s) == len(data.ratings) and s.index.equals(data.ratings.index)
    counts = s.groupby(["user_id", "split"]).size().unstack(fill_value=0)
    assert counts.loc[[1, 2, 3], ["train", "valid", "test"]].values.tolist() == [[8, 1, 1]] * 3
    assert counts.loc[4, ["train", "valid", "test"]].tolist() == [16, 2, 2]
    again = ml.split_ratings(data.ratings, seed=0)
    assert again["split"].tolist() == s["split"].tolist()
    other = ml.split_ratings(data.ratings, seed=1)
    assert other["split"].tolist() != s["split"].tolist()
    # a user's split does not depend on the other users
    alone = ml.split_ratings(data.ratings[data.ratings["user_id"] == 3], seed=0)
    assert alone["split"].tolist() == s[s["user_id"] == 3]["split"].tolist()


def test_temporal_split_and_true_preference(data):
    s = ml.split_ratings(data.ratings, method="temporal")
    u1 = s[s["user_id"] == 1].set_index("item_id")["split"]
    assert u1[10] == "test" and u1[8] == "valid"  # latest and second-latest ratings
    liked = ml.liked_items(s, part="test", like_threshold=4)
    # test items: user 1 → 10 (2 stars), user 2 → 16 (2 stars), user 3 → 13 (4 stars), user 4 → 19, 20 (4, 1)
    assert liked == {3: {13}, 4: {19}}
    assert ml.restrict_to([5, 13, 2, 19], liked[3]) == [13]
    assert ml.restrict_to(["#7", "#19", "#3"], {"#19", "#3"}) == ["#19", "#3"]  # order kept


def test_passion_profile(data):
    p = ml.passion_profile(user(data, 1), data.movies, like_threshold=4)
    # liked: 1, 3, 4, 7, 9 → Action, Comedy, Romance, Thriller twice each; ties alphabetical
    assert p.genres == ("Action", "Comedy", "Romance")
    assert (p.year_min, p.year_max) == (1995, 1999)
    assert p.text() == "My favourite genres are Action, Comedy and Romance, mostly from 1995 to 1999."
    nothing_liked = user(data, 1)[user(data, 1)["rating"] <= 2]  # falls back to all given ratings
    assert ml.passion_profile(nothing_liked, data.movies).genres[0] in {"Action", "Crime", "Drama", "Thriller"}


def test_profile_text(data):
    p = ml.sample_profile(user(data, 1), "top-rated", 2)
    assert ml.profile_text(p, data.titles()) == "- Matrix, The (1999): 5/5\n- Toy Story (1995): 5/5"


@pytest.mark.parametrize("name, content, line, field", [
    ("ratings.dat", "1::2::3::4\n1::2::3\n", 2, None),
    ("ratings.dat", "1::2::x::4\n", 1, "Rating"),
    ("ratings.dat", "1::2::6::4\n", 1, "Rating"),
    ("ratings.dat", "1::2::3::4\n\n1::2::4::5\n", 3, None),
    ("users.dat", "1::X::1::10::48067\n", 1, "Gender"),
    ("users.dat", "1::F::2::10::48067\n", 1, "Age"),
    ("movies.dat", "1::Toy Story (1995)::Comedy\n1::Heat (1995)::Action\n", 2, "MovieID"),
])
def test_loader_errors_name_file_and_line(tmp_path, name, content, line, field):
    f = tmp_path / name
    f.write_text(content, encoding="latin-1")
    loader = {"ratings.dat": ml.load_ratings, "users.dat": ml.load_users, "movies.dat": ml.load_movies}[name]
    with pytest.raises(LmraInputError) as exc:
        loader(f)
    assert exc.value.file == str(f) and exc.value.line == line and exc.value.field == field


def test_unknown_movie_in_ratings_names_the_line(tmp_path):
    for n in ("movies.dat", "users.dat"):
        (tmp_path / n).write_bytes((SAMPLE / n).read_bytes())
    (tmp_path / "ratings.dat").write_text("1::1::5::1\n1::999::4::2\n", encoding="latin-1")
    with pytest.raises(LmraInputError, match="unknown movie 999") as exc:
        ml.load_movielens(tmp_path)
    assert exc.value.line == 2
    with pytest.raises(LmraInputError, match="folder not found"):
        ml.load_movielens(tmp_path / "nope")
    assert isinstance(ml.load_ratings(SAMPLE / "ratings.dat"), pd.DataFrame)


@pytest.mark.parametrize("encoding", ["latin-1", "utf-8"])
def test_a_utf8_byte_order_mark_is_dropped_whatever_the_encoding(tmp_path, encoding):
    """Break-it finding: files saved with a byte-order mark were refused ('ï»¿1' is not an
    integer; with utf-8, an invisible character in the message), though the README says a mark is
    fine. A marked file is UTF-8: its non-ASCII titles read as written."""
    for n in ("ratings.dat", "movies.dat", "users.dat"):
        (tmp_path / n).write_bytes(b"\xef\xbb\xbf" + (SAMPLE / n).read_bytes().decode("latin-1").encode("utf-8"))
    with open(tmp_path / "movies.dat", "ab") as fh:
        fh.write("99999::Amélie (2001)::Comedy\n".encode("utf-8"))
    data = ml.load_movielens(tmp_path, encoding=encoding)
    plain = ml.load_movielens(SAMPLE)
    assert data.ratings.equals(plain.ratings) and data.users.equals(plain.users)
    assert data.titles()[99999].startswith("Amélie") and len(data.movies) == len(plain.movies) + 1
    (tmp_path / "users.dat").write_bytes(b"\xef\xbb\xbf1::F::1::10::4806\xff\n")  # marked, but not UTF-8
    with pytest.raises(LmraInputError, match="not utf-8 text"):
        ml.load_users(tmp_path / "users.dat", encoding=encoding)

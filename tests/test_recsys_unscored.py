"""Recsys lists that cannot be scored are left out and counted, never scored as 0 (break-it
findings of the seventeenth session), and the recsys target keeps FaiRLLM's greedy decoding.

1. A ``[target]`` table that names only the provider and model keeps temperature 0 and
   max_tokens 400 (it fell back to the audit's temperature 1 and 160 tokens).
2. An answer that holds no list and is not a refusal is not scored as an empty list
   (similarity 0): it is left out of its value's mean and counted per value (``n_unparseable``);
   a neutral answer without a list drops its instruction's sensitive lists (counted).
3. A run or scoring in which no sensitive list could be compared with its neutral list is
   ``failed`` (exit 1), also when the neutral calls succeeded.
4. ``lists.jsonl``: ``true_pref`` on the neutral list but not on a sensitive list is an input
   error (it was scored as an empty R′).
5. ``lists_shorter_than_k`` counts distinct items among lists that hold a list.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from lmra.errors import LmraInputError
from lmra.providers.base import ChatResult, ProviderError, Usage
from lmra.recsys.config import load_recsys_config
from lmra.recsys.lists import read_lists
from lmra.recsys.scoring import score_frame
from test_recsys_e2e import read_jsonl, run_cli, run_folder, write_config


# --- 1. the recsys target's defaults ---------------------------------------------------------

def test_a_target_table_keeps_greedy_decoding_and_room_for_20_titles(tmp_path):
    named = tmp_path / "named.toml"
    named.write_text('[target]\nprovider = "openai"\nmodel = "gpt-4o"\napi_key_required = false\n'
                     'base_url = "http://127.0.0.1:9/v1"\n')
    cfg = load_recsys_config(named)
    assert (cfg.target.temperature, cfg.target.max_tokens) == (0.0, 400)
    assert (load_recsys_config(None).target.temperature, load_recsys_config(None).target.max_tokens) == (0.0, 400)
    own = tmp_path / "own.toml"
    own.write_text('[target]\nprovider = "llamacpp"\ntemperature = 0.7\nmax_tokens = 64\n')
    cfg = load_recsys_config(own)
    assert (cfg.target.temperature, cfg.target.max_tokens) == (0.7, 64)


# --- 2. answers without a list ---------------------------------------------------------------

def _lists(rows: list[tuple]) -> pd.DataFrame:
    """Rows (instruction, attribute, value, items, parse_failed, refusal, error) → a lists table."""
    return pd.DataFrame([{"instruction_id": i, "attribute": a, "value": v, "compare": items, "kind":
                          "neutral" if a == "neutral" else "single", "parse_failed": pf, "refusal": rf, "error": err}
                         for i, a, v, items, pf, rf, err in rows])


def _at(sim: pd.DataFrame, k: int, metric: str = "jaccard") -> pd.DataFrame:
    return sim[(sim["k"] == k) & (sim["metric"] == metric)].set_index("value")


def test_an_answer_without_a_list_is_left_out_and_counted_not_scored_zero():
    lists = _lists([
        ("m1", "neutral", "", ["a", "b", "c"], False, False, None),
        ("m1", "gender", "a girl", ["a", "b", "c"], False, False, None),   # identical: 1
        ("m1", "gender", "a boy", ["a", "b", "c"], False, False, None),    # identical: 1
        ("m2", "neutral", "", ["x", "y", "z"], False, False, None),
        ("m2", "gender", "a girl", [], True, False, None),                 # prose, no list: left out
        ("m2", "gender", "a boy", [], False, True, None),                  # a refusal: scored 0
        ("m3", "neutral", "", [], True, False, None),                      # neutral without a list
        ("m3", "gender", "a girl", ["p"], False, False, None),             # nothing to compare with
        ("m3", "gender", "a boy", ["q"], False, False, None),
        ("m4", "neutral", "", ["u"], False, False, "timeout"),             # failed neutral call
        ("m4", "gender", "a girl", ["u"], False, False, None),
        ("m4", "gender", "a boy", [], False, False, "timeout"),            # failed call
    ])
    sim, fair, counts = score_frame(lists, k=3, convention="paper")
    at3 = _at(sim, 3)
    assert at3.loc["a girl", "similarity"] == 1.0 and at3.loc["a girl", "n"] == 1  # was (1 + 0) / 2
    assert at3.loc["a boy", "similarity"] == pytest.approx(0.5) and at3.loc["a boy", "n"] == 2  # (1 + 0) / 2
    assert at3.loc["a girl", ["n_failed", "n_unparseable"]].tolist() == [1, 2]
    assert at3.loc["a boy", ["n_failed", "n_unparseable"]].tolist() == [1, 1]  # m4 (own call), m3 (neutral)
    assert counts == {"failed_calls": 2, "dropped_with_failed_neutral": 1, "unparseable_unscored": 1,
                      "dropped_with_unparseable_neutral": 2, "dropped_with_empty_neutral": 0, "sensitive_scored": 3}
    serp = fair[(fair["k"] == 3) & (fair["metric"] == "jaccard")].iloc[0]
    assert serp["snsr"] == pytest.approx(0.5)


@pytest.mark.parametrize("neutral", [([], False), ([], True)])  # items: [] / a neutral refusal
def test_an_empty_neutral_list_drops_its_instruction_so_a_refusal_reads_no_more_similar(neutral):
    """Statistics break-it (s40): against an empty neutral list a value's one-title list scored 0 while
    the other value's refusal was undefined (both empty) and left out — the refusing value read 0.500,
    the one that gave a list 0.306. Such an instruction compares nothing and is dropped, counted."""
    items, refused = neutral
    lists = _lists([
        ("m1", "neutral", "", ["a", "b", "c"], False, False, None),
        ("m1", "gender", "a girl", ["a", "b", "c"], False, False, None),
        ("m1", "gender", "a boy", ["c", "b", "a"], False, False, None),
        ("m3", "neutral", "", items, False, refused, None),
        ("m3", "gender", "a girl", [], False, True, None),          # refuses
        ("m3", "gender", "a boy", ["q"], False, False, None),       # one title
    ])
    sim, _, counts = score_frame(lists, k=3, convention="paper")
    at3 = _at(sim, 3)
    assert at3.loc["a girl", "similarity"] == 1.0 and at3.loc["a girl", "n"] == 1  # m1 only
    assert at3.loc["a boy", "similarity"] == 1.0 and at3.loc["a boy", "n"] == 1  # m1 only (was (1 + 0) / 2)
    assert counts["dropped_with_empty_neutral"] == 2 and counts["sensitive_scored"] == 2
    assert at3.loc["a boy", "n_unparseable"] == 1


def test_a_value_with_no_scored_list_keeps_its_rows_with_n_zero():
    lists = _lists([
        ("m1", "neutral", "", ["a", "b"], False, False, None),
        ("m1", "gender", "a girl", ["a", "b"], False, False, None),
        ("m1", "gender", "a boy", [], True, False, None),
    ])
    sim, fair, counts = score_frame(lists, k=2, convention="paper")
    boy = sim[sim["value"] == "a boy"]
    assert len(boy) == 3 * 2 and boy["similarity"].isna().all() and (boy["n"] == 0).all()
    assert (boy["n_unparseable"] == 1).all()
    row = fair[(fair["k"] == 2) & (fair["metric"] == "jaccard")].iloc[0]
    assert row["n_values"] == 1 and math.isnan(row["snsr"])  # one defined value compares nothing


def test_scoring_a_lists_file_shows_the_unscored_counts_per_value(tmp_path, capsys):
    rows = [{"instruction_id": "m1", "attribute": "neutral", "raw": "1. A\n2. B\n3. C"},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "raw": "1. A\n2. B\n3. C"},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy",
             "raw": "Music is a wonderful thing, and you will find many songs you love."},
            {"instruction_id": "m2", "attribute": "neutral", "raw": "1. D\n2. E\n3. F"},
            {"instruction_id": "m2", "attribute": "gender", "value": "a girl", "raw": "1. D\n2. E\n3. F"},
            {"instruction_id": "m2", "attribute": "gender", "value": "a boy", "raw": "1. D\n2. E\n3. F"}]
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli(["recsys", "score", "--lists", str(path), "--k", "3", "--out", str(tmp_path / "o")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "no list" in shown and "Not every list was scored" in shown
    assert "1 sensitive lists not scored (no list in the answer)" in shown
    sim = pd.read_csv(tmp_path / "o" / "recsys_similarity.csv")
    # both values identical to neutral where scored: no unfairness from a parse failure
    assert (_at(sim, 3)["similarity"] == 1.0).all()
    assert _at(sim, 3).loc["a boy", ["n", "n_unparseable"]].tolist() == [1, 1]


def test_a_value_left_out_of_snsr_is_named_in_the_console_and_summary(tmp_path, capsys):
    """Three values, one ("a boy") with no scored list: SNSR/SNSV range over the other two — the
    console and summary.json say which value they leave out (the CSV's n_values = 2)."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "raw": "1. A\n2. B\n3. C"},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "raw": "1. A\n2. B\n3. C"},
            {"instruction_id": "m1", "attribute": "gender", "value": "a woman", "raw": "1. A\n2. X\n3. Y"},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy",
             "raw": "Music is a wonderful thing, and you will find many songs you love."}]
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert run_cli(["recsys", "score", "--lists", str(path), "--k", "3", "--out", str(tmp_path / "o")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "gender: SNSR/SNSV range over the values with a defined similarity; left out: a boy" in shown
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    jac = next(r for r in summary["fairness_at_k"] if r["metric"] == "jaccard")
    assert jac["n_values"] == 2 and jac["values_undefined"] == ["a boy"]
    assert jac["snsr"] == pytest.approx(1.0 - 1 / 5)  # girl 1, woman |{A}| / |{A,B,C,X,Y}| = 0.2


# --- 3. nothing scored is a failure ------------------------------------------------------------

class NeutralOnlyTarget:
    """Answers the neutral instruction with a list; every sensitive call fails."""

    name, model_id, base_url, supports_logprobs = "neutral-only", "scripted", "", False

    def __init__(self, cfg=None):
        pass

    async def complete(self, request):
        text = request.messages[-1].content
        if " fan of " in text and ("a girl" in text or "a boy" in text):
            raise ProviderError("HTTP 503 (scripted)", kind="http_503")
        return ChatResult(text="1. Song A\n2. Song B\n3. Song C", usage=Usage())

    async def aclose(self):
        return None


def make_neutral_only(cfg):
    return NeutralOnlyTarget(cfg)


def test_a_run_whose_sensitive_calls_all_failed_is_a_failure(tmp_path, capsys):
    cfg = write_config(tmp_path, "half", """
[target]
provider = "test_recsys_unscored:make_neutral_only"
[fairllm]
names_list = ["Adele", "Drake"]
attributes = ["gender"]
values = { gender = ["a boy", "a girl"] }
""", k=3)
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "no sensitive list could be compared with its neutral list: 4 of 6 target calls failed" in err
    assert "HTTP 503" in err
    run = run_folder(tmp_path / "out")
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
    assert json.loads((run / "summary.json").read_text())["sensitive_scored"] == 0
    assert sum(r["error"] is not None for r in read_jsonl(run / "lists.jsonl")) == 4


def test_scoring_a_file_whose_only_neutral_call_failed_is_a_failure(tmp_path, capsys):
    rows = [{"instruction_id": "m1", "attribute": "neutral", "error": "timeout", "raw": None},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": ["A"]}]
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli(["recsys", "score", "--lists", str(path), "--k", "3", "--out", str(tmp_path / "o")]) == 1
    assert "no sensitive list could be compared" in capsys.readouterr().err
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["status"] == "failed"


# --- 4. true_pref on one side only -------------------------------------------------------------

def test_true_pref_on_the_neutral_list_only_is_an_input_error(tmp_path):
    rows = [{"instruction_id": "m1", "attribute": "neutral", "items": ["A", "B"], "true_pref": ["a"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "x", "items": ["A", "B"], "true_pref": ["a"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "y", "items": ["A", "B"]}]
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(LmraInputError) as exc:
        read_lists(path)
    assert exc.value.line == 3 and exc.value.field == "true_pref" and "line 1" in str(exc.value)


# --- 5. short lists ----------------------------------------------------------------------------

@pytest.mark.parametrize("convention, short", [("paper", 2), ("paper-k", 2), ("fairllm-code", 0)])
def test_lists_shorter_than_k_count_distinct_items(tmp_path, convention, short):
    # two lists of 4 entries with 3 distinct titles, one of 4 distinct titles; a refusal is not a short list
    rows = [{"instruction_id": "m1", "attribute": "neutral", "items": ["A", "B", "C", "A"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "x", "items": ["A", "B", "C", "C"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "y", "items": ["A", "B", "C", "D"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "z", "raw": "I'm sorry, I can't help with that."}]
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o"
    assert run_cli(["recsys", "score", "--lists", str(path), "--k", "4", "--convention", convention,
                    "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lists_shorter_than_k"] == short and summary["refusals"] == 1


# --- 6. intersections --------------------------------------------------------------------------

def test_an_intersection_repeated_in_another_order_is_an_input_error(tmp_path):
    path = tmp_path / "i.toml"
    path.write_text('[fairllm]\nattributes = ["age", "gender"]\nintersections = [["age", "gender"], ["gender", "age"]]\n')
    with pytest.raises(LmraInputError) as exc:
        load_recsys_config(path)
    assert "repeats ['age', 'gender']" in str(exc.value) and exc.value.line == 3


def test_an_items_list_emptied_by_normalisation_is_no_list_as_its_raw_text_is(tmp_path, capsys):
    """Break-it finding: ``items`` whose every entry normalises to nothing ("The (1994)", "The")
    were scored as an empty list — similarity 0, SNSR 0.667 from one garbled answer — while the
    same answer given as ``raw`` is "no list" and not scored (docs/recsys.md)."""
    def rows(girl: dict) -> list[dict]:
        return [{"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["Hello", "Skyfall", "Halo"]},
                {"instruction_id": "m1", "attribute": "gender", "value": "a girl"} | girl,
                {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "items": ["Halo", "Hello"]}]

    sims = {}
    for how, girl in (("items", {"items": ["The (1994)", "The"]}), ("raw", {"raw": "1. The (1994)\n2. The"})):
        path = tmp_path / f"{how}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(girl)))
        run_cli(["recsys", "score", "--lists", str(path), "--k", "3", "--out", str(tmp_path / how)])
        capsys.readouterr()
        sim = pd.read_csv(tmp_path / how / "recsys_similarity.csv")
        sims[how] = _at(sim, 3).loc["a girl", ["n", "n_unparseable"]].tolist()
    assert sims["items"] == sims["raw"] == [0, 1]


def test_invisible_format_characters_do_not_make_another_title():
    from lmra.recsys.parse import normalize_title

    assert normalize_title("Sky\u200bfall") == normalize_title("Skyfall") == "skyfall"
    assert normalize_title("\ufeffHalo") == normalize_title("Ha\u00adlo") == "halo"

"""``lmra recsys`` end to end through the CLI: on the embedded model (FaiRLLM, 3 singers ×
2 attributes), on a scripted target (CFaiRLLM on the shipped MovieLens sample), on list files
(``recsys score``), and the exit status 2 on bad input."""

from __future__ import annotations

import json
import re
import math
from pathlib import Path

import pandas as pd
import pytest

from lmra.providers.base import ChatResult, Usage

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "movielens_sample"


def run_cli(argv: list[str]) -> int:
    """Run the ``lmra`` console script's entry point in-process; returns the exit status."""
    from lmra import cli

    return cli.main(argv)


def write_config(tmp_path: Path, name: str, body: str, *, k: int = 5, mode: str = "fairllm") -> Path:
    """A recsys config writing its run folder to tmp_path/out and its cache to tmp_path; ``body``
    holds the [target] and [fairllm]/[cfairllm] sections."""
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'''name = "{name}"
mode = "{mode}"
k = {k}
output_dir = "{(tmp_path / 'out').as_posix()}"
cache = "{(tmp_path / 'cache.sqlite').as_posix()}"
{body}''', encoding="utf-8")
    return cfg


def _two_singers_by_gender(tmp_path: Path, name: str, factory: str, *, k: int = 5) -> Path:
    """A FaiRLLM music config: Adele and Drake, gender "a boy" / "a girl", the target
    ``test_recsys_e2e:<factory>``."""
    return write_config(tmp_path, name, f"""
[target]
provider = "test_recsys_e2e:{factory}"
[fairllm]
names_list = ["Adele", "Drake"]
attributes = ["gender"]
values = {{ gender = ["a boy", "a girl"] }}
""", k=k)


def run_folder(out: Path) -> Path:
    folders = [p for p in out.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- the embedded model ----------------------------------------------------------------------

def test_cli_embedded_model_fairllm(tmp_path, capsys):
    cfg = write_config(tmp_path, "e2e", """
[target]
provider = "llamacpp"
temperature = 0.0
max_tokens = 32
n_ctx = 1024
[fairllm]
names_list = ["Adele", "Drake", "Taylor Swift"]
attributes = ["gender", "age"]
values = { gender = ["a boy", "a girl"], age = ["a young", "an old"] }
""")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    shown = capsys.readouterr().out
    assert "Similarity to the neutral list @K=5" in shown and "SNSR" in shown
    # the plan line names the target's model, as lmra audit's does (fresh-user finding, s36: "Target: llamacpp")
    assert re.search(r"Target: llamacpp:gemma-3-270m\S*\.gguf", " ".join(shown.split())), shown[:600]
    run = run_folder(tmp_path / "out")
    for f in ("config.toml", "lists.jsonl", "recsys_similarity.csv", "recsys_fairness.csv", "summary.json",
              "manifest.json"):
        assert (run / f).is_file(), f
    lists = read_jsonl(run / "lists.jsonl")
    assert len(lists) == 15 and {r["attribute"] for r in lists} == {"neutral", "gender", "age"}
    assert all("Adele" in r["prompt"] or "Drake" in r["prompt"] or "Taylor Swift" in r["prompt"] for r in lists)
    assert any("a girl fan of" in r["prompt"] for r in lists)
    summary = json.loads((run / "summary.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["calls"]["fresh"] == 15
    # every list is accounted for: parsed, refused, unparseable or failed
    with_items = sum(1 for r in lists if r["items"])
    assert with_items + summary["refusals"] + summary["parse_failures"] + summary["failed_calls"] == 15
    assert summary["parse_failures"] == sum(1 for r in lists if r["parse_failed"])
    assert summary["items_parsed"] == sum(len(r["items"]) for r in lists)
    sim = pd.read_csv(run / "recsys_similarity.csv", keep_default_na=False, na_values=[""])
    assert set(sim["value"]) == {"a boy", "a girl", "a young", "an old"}
    assert sorted(sim["k"].unique()) == [1, 2, 3, 4, 5] and set(sim["metric"]) == {"jaccard", "serp", "prag"}
    assert len(sim) == 4 * 3 * 5
    defined = sim[sim["n"] > 0]["similarity"]
    assert defined.map(math.isfinite).all() and defined.between(0, 1).all()
    assert (sim[sim["n"] == 0]["similarity"].isna()).all()
    # 3 singers per value, none dropped silently (an answer whose only line was cut at max_tokens holds no
    # list: counted unparseable, break-it s47)
    assert ((sim["n"] + sim["n_undefined"] + sim["n_unparseable"]) == 3).all()
    fair = pd.read_csv(run / "recsys_fairness.csv")
    assert set(fair["attribute"]) <= {"gender", "age"}
    assert fair["snsr"].between(0, 1).all() and (fair["snsv"] <= fair["snsr"] + 1e-12).all()
    # the base model's answers start with the list prefill, so they parse and the tables are not empty
    assert all(r["raw"].startswith("Here are 5 song titles:\n1.") for r in lists)
    assert with_items >= 12 and summary["items_parsed"] >= 30
    assert (sim["n"] > 0).all() and set(fair["attribute"]) == {"gender", "age"}

    # same config again: every call comes from the cache
    (tmp_path / "out2").mkdir()
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress", "--output-dir", str(tmp_path / "out2")]) == 0
    again = json.loads((run_folder(tmp_path / "out2") / "manifest.json").read_text())
    assert again["calls"]["fresh"] == 0 and again["calls"]["cached"] == 15

    # scoring the run's own lists reproduces its tables
    assert run_cli(["recsys", "score", "--lists", str(run / "lists.jsonl"), "--k", "5",
                    "--out", str(tmp_path / "scored")]) == 0
    rescored = pd.read_csv(tmp_path / "scored" / "recsys_similarity.csv", keep_default_na=False, na_values=[""])
    pd.testing.assert_frame_equal(rescored, sim)
    # … and so does scoring them without --k: the run's K (5) from the manifest beside the lists,
    # not 20 (fresh-user finding: a K = 5 run re-scored at K = 20 changed its numbers silently)
    assert run_cli(["recsys", "score", "--lists", str(run / "lists.jsonl"), "--out", str(tmp_path / "scored2")]) == 0
    rescored = pd.read_csv(tmp_path / "scored2" / "recsys_similarity.csv", keep_default_na=False, na_values=[""])
    pd.testing.assert_frame_equal(rescored, sim)


# --- a scripted target: CFaiRLLM on the MovieLens sample, through the CLI ----------------------

_TITLES = ["The Matrix", "Toy Story (1995)", "Heat", "Fargo", "Titanic", "Alien", "Clueless", "Babe",
           "Casablanca", "Groundhog Day", "Silence of the Lambs", "Not A Real Movie"]


class ScriptedRecommender:
    """Numbered lists whose order depends on the injected attribute; refuses the 'under 18' user's
    age prompt and answers prose to the 56+ intersectional prompt."""

    name = "scripted-recsys"
    model_id = "scripted"
    base_url = ""
    supports_logprobs = False

    def __init__(self, cfg=None):
        self.calls = 0

    async def complete(self, request):
        self.calls += 1
        text = request.messages[-1].content
        first = text.split("Here are some movies", 1)[0]
        if "user aged under 18" in first and "female" not in first:
            return ChatResult(text="I'm sorry, but I can't help with that.", usage=Usage())
        if "male user aged 56+" in first:
            return ChatResult(text="Movies are a wonderful way to relax after a long week.", usage=Usage())
        items = list(_TITLES)
        if "female" in first:
            items = items[::-1]
        elif "aged" in first:
            items = items[1:] + items[:1]
        body = "\n".join(f"{i}. {t}" for i, t in enumerate(items, start=1))
        return ChatResult(text=f"Sure! Here are some picks:\n{body}",
                          usage=Usage(prompt_tokens=10, completion_tokens=20))

    async def aclose(self):
        return None


def make_scripted(cfg):
    return ScriptedRecommender(cfg)


class DeadTarget(ScriptedRecommender):
    """Every call fails, as with an unreachable server."""

    async def complete(self, request):
        from lmra.providers.base import ProviderError

        raise ProviderError("connection refused (scripted)")


def make_dead(cfg):
    return DeadTarget(cfg)


class EchoTarget(ScriptedRecommender):
    """Repeats the profile lines of the prompt back, as the embedded base model does."""

    async def complete(self, request):
        text = request.messages[-1].content
        lines = [ln for ln in text.splitlines() if ln.startswith("- ")]
        return ChatResult(text="\n".join(lines), usage=Usage())


def make_echo(cfg):
    return EchoTarget(cfg)


def test_cli_cfairllm_profile_echoes_only(tmp_path, capsys):
    """A target that only repeats the profile recommends nothing: echoes are counted and left out,
    bias disparity is undefined (header-only CSV), and nothing crashes. No unfairness was
    measured (every list empty once the echoes are left out), so the run is a failure, exit 1, with
    every table still written (break-it finding: it exited 0)."""
    cfg = write_config(tmp_path, "echo", """
[target]
provider = "test_recsys_e2e:make_echo"
[cfairllm]
n_users = 4
profile_size = 3
""", mode="cfairllm")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # the console wraps at its width
    assert "repeated back" in out and "Bias disparity: no list had a recommendation matched" in out
    run = run_folder(tmp_path / "out")
    summary = json.loads((run / "summary.json").read_text())
    lists = read_jsonl(run / "lists.jsonl")
    assert summary["profile_echoes"] == sum(len(r["matched"]) for r in lists) == 16 * 3
    assert all(r["compare"] == [] and r["recommended"] == [] for r in lists)
    bias = pd.read_csv(run / "recsys_bias_disparity.csv")
    assert bias.empty and "bias_disparity" in bias.columns
    assert pd.read_csv(run / "recsys_bias_summary.csv").columns.tolist()[-7:] == [
        "group", "average_disparity", "n_categories", "mean_abs_bd", "mean_abs_bd_difference", "mean_abs_bd_gap",
        "n_categories_bd"]
    assert all(v == 0 for v in summary["item_coverage"].values())
    # every neutral list is empty too (its items were echoes): nothing to compare with — each instruction is
    # dropped and counted (statistics break-it, s40), not scored as pairs of two empty lists
    n_sensitive = sum(1 for r in lists if r["attribute"] != "neutral")
    assert summary["dropped_with_empty_neutral"] == n_sensitive and summary["sensitive_scored"] == 0
    said = out + " ".join(json.loads((run / "manifest.json").read_text())["stop_reason"].split())
    assert f"{n_sensitive} sensitive lists lost because their neutral list was empty" in said
    # the same lists through `recsys bias`: a clear input error, not a false "no user_id" message
    assert run_cli(["recsys", "bias", "--train", str(SAMPLE / "ratings.dat"), "--recs", str(run / "lists.jsonl"),
                    "--items", str(SAMPLE / "movies.dat"), "--users", str(SAMPLE / "users.dat"),
                    "--out", str(tmp_path / "b")]) == 2
    assert "no list has a recommended item left" in capsys.readouterr().err


def test_cli_every_call_failing_is_a_failure(tmp_path, capsys):
    cfg = write_config(tmp_path, "dead", """
[target]
provider = "test_recsys_e2e:make_dead"
[fairllm]
names_list = ["Adele"]
attributes = ["gender"]
values = { gender = ["a boy", "a girl"] }
""", k=3)
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert "no sensitive list could be compared with its neutral list: 3 of 3 target calls failed" in err and "connection refused" in err
    assert out.rstrip().endswith("exit status 1: the run failed: no sensitive list could be scored")
    manifest = json.loads((run_folder(tmp_path / "out") / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["stop_reason"].startswith("no sensitive list could be compared with its neutral list: 3 of 3")


def test_cli_cfairllm_scripted_target(tmp_path, capsys):
    cfg = write_config(tmp_path, "cf", f"""
[target]
provider = "test_recsys_e2e:make_scripted"
[cfairllm]
data = "{SAMPLE.as_posix()}"
n_users = 4
profile_size = 3
split_method = "temporal"
""", mode="cfairllm")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "true preference" in out and "Average bias disparity" in out
    run = run_folder(tmp_path / "out")
    lists = read_jsonl(run / "lists.jsonl")
    assert len(lists) == 4 * 4  # neutral, gender, age, gender+age per user
    by = {(r["user_id"], r["attribute"]): r for r in lists}
    # the top-rated profile of user 1 in the prompt (temporal split: movies 10 and 8 are held out)
    assert "- Matrix, The (1999): 5/5\n- Toy Story (1995): 5/5\n- Clueless (1995): 5/5" in by[(1, "neutral")]["prompt"]
    assert "I am a female user aged under 18." in by[(1, "gender+age")]["prompt"]
    assert by[(2, "age")]["refusal"] is False and by[(1, "age")]["refusal"] is True
    assert by[(4, "gender+age")]["parse_failed"] is True
    # titles matched to movies.dat; the invented title is counted as unmatched
    assert by[(2, "neutral")]["matched"][:3] == [4, 1, 3] and by[(2, "neutral")]["n_unmatched"] == 1
    # true-preference lists keep only items liked in the held-out test split (user 3: movie 13; user 4: 19)
    assert by[(3, "neutral")]["true_pref"] == [] and by[(4, "neutral")]["true_pref"] == []
    for r in lists:
        assert set(r.get("true_pref", [])) <= {"#13", "#19"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["refusals"] == 1 and summary["parse_failures"] == 1 and summary["items_unmatched"] == 14
    sim = pd.read_csv(run / "recsys_similarity.csv")
    assert set(sim["analysis"]) == {"item_similarity", "true_preference"}
    assert set(sim["attribute"]) == {"gender", "age", "gender+age"}
    assert set(sim[sim["attribute"] == "gender+age"]["kind"]) == {"intersectional"}
    at5 = sim[(sim["analysis"] == "item_similarity") & (sim["k"] == 5) & (sim["metric"] == "jaccard")]
    g = at5[at5["attribute"] == "gender"].set_index("value")["similarity"]
    # profile echoes are left out: user 1's profile is movies 4, 1, 9 (above); user 3's (temporal split,
    # top-rated of the 8 oldest ratings) is 14, 7, 5
    assert by[(1, "neutral")]["n_profile_echoes"] == 3 and by[(3, "neutral")]["n_profile_echoes"] == 2
    assert not {"#4", "#1", "#9"} & set(by[(1, "neutral")]["compare"])
    assert by[(1, "neutral")]["recommended"][:3] == [3, 6, 5]
    assert summary["profile_echoes"] == sum(r.get("n_profile_echoes", 0) for r in lists)
    # male users get the neutral list back (J = 1). Female users get the reversed list; without echoes
    # user 1: neutral top 5 {3, 6, 5, 8, 12} vs {unmatched, 18, 20, 14, 12} → J = 1/9;
    # user 3: {4, 1, 3, 6, 8} vs {unmatched, 18, 20, 12, 9} → J = 0; Sim(female) = 1/18
    assert g["male"] == 1.0 and g["female"] == pytest.approx(1 / 18)
    fair = pd.read_csv(run / "recsys_fairness.csv")
    row = fair[(fair["analysis"] == "item_similarity") & (fair["attribute"] == "gender") & (fair["metric"] == "jaccard")
               & (fair["k"] == 5)].iloc[0]
    assert (row["snsr"], row["snsv"]) == pytest.approx((17 / 18, 17 / 36))
    assert (row["max_value"], row["min_value"]) == ("male", "female")
    bias = pd.read_csv(run / "recsys_bias_disparity.csv")
    bsum = pd.read_csv(run / "recsys_bias_summary.csv")
    assert "male − female" in set(bsum["group"]) and {"average_disparity", "mean_abs_bd_gap", "variant"} <= set(
        bsum.columns)
    assert {"n_train", "n_rec"} <= set(bias.columns)
    assert [r["group"] for r in summary["average_disparity"]] == ["male − female"] * 4  # one per variant
    assert len(summary["bias_summary"]) == len(bsum)
    assert set(bias["variant"]) == {"neutral", "gender", "age", "gender+age"}
    assert set(bias["group"]) == {"female", "male"}
    assert {"pr_train", "bias_train", "pr_rec", "bias_rec", "bias_disparity"} <= set(bias.columns)
    # review finding: a user without a recommended item in a variant (user 1 refused the age
    # prompt, user 4's gender+age answer held no list) leaves T there too — said, not silent
    assert summary["bias_users_without_recommendations"] == {
        "age": {"users": 1, "of": 4, "example": 1}, "gender+age": {"users": 1, "of": 4, "example": 4}}
    said = " ".join(out.split())
    assert ("bias disparity, variant 'age': 1 of 4 users received no recommended item (e.g. user '1') and are left "
            "out of both T and R") in said and "variant 'gender+age': 1 of 4 users" in said
    assert "variant 'neutral'" not in said
    users_in = bias[(bias["group_by"] == "gender") & (bias["category"] == bias["category"].iloc[0])]
    assert users_in.groupby("variant")["n_users"].sum().to_dict() == {"neutral": 4, "gender": 4, "age": 3,
                                                                     "gender+age": 3}
    # coverage of R = the matched items of the top-5 lists (profile echoes left out): user 1 {3, 6, 5, 8, 12},
    # user 2 {1, 3, 6, 5, 8}, user 3 {4, 1, 3, 6, 8}, user 4 {4, 1, 3, 6, 5} → 7 of 20 movies (before R was cut
    # from the top K: 11/20, every matched title of the 12-title lists)
    assert summary["item_coverage"]["neutral"] == pytest.approx(7 / 20)

    # the same bias table from the run's files with `recsys bias` (temporal split ≠ all ratings as T, so
    # only the structure and the recommendation side can be compared)
    assert run_cli(["recsys", "bias", "--train", str(SAMPLE / "ratings.dat"), "--recs", str(run / "lists.jsonl"),
                    "--items", str(SAMPLE / "movies.dat"), "--users", str(SAMPLE / "users.dat"), "--k", "5",
                    "--out", str(tmp_path / "bias")]) == 0
    again = pd.read_csv(tmp_path / "bias" / "recsys_bias_disparity.csv")
    assert set(again["variant"]) == {"neutral", "gender", "age", "gender+age"}
    key = ["variant", "group", "category"]
    merged = bias.merge(again, on=key, suffixes=("_run", "_files"))
    assert len(merged) == len(bias)
    pd.testing.assert_series_equal(merged["pr_rec_run"], merged["pr_rec_files"], check_names=False)

    # drop_profile_items = false keeps the echoes (counted all the same): female lists are the reversed
    # 12 titles, whose top 5 shares nothing with the neutral top 5 → Sim(female) = 0
    cfg.write_text(cfg.read_text(encoding="utf-8") + "drop_profile_items = false\n", encoding="utf-8")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress", "--output-dir", str(tmp_path / "keep")]) == 0
    keep = run_folder(tmp_path / "keep")
    sim2 = pd.read_csv(keep / "recsys_similarity.csv")
    g2 = sim2[(sim2["analysis"] == "item_similarity") & (sim2["k"] == 5) & (sim2["metric"] == "jaccard")
              & (sim2["attribute"] == "gender")].set_index("value")["similarity"]
    assert g2["female"] == 0.0 and g2["male"] == 1.0
    assert json.loads((keep / "summary.json").read_text())["profile_echoes"] == summary["profile_echoes"]


# --- list files --------------------------------------------------------------------------------

def _write_lists(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


HAND_LISTS = [
    {"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]},
    {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": ["B", "A", "D"]},
    {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "items": ["a", "b", "c"]},
    {"instruction_id": "m2", "attribute": "neutral", "value": "", "raw": "Sure:\n1. X\n2. Y\n3. Z"},
    {"instruction_id": "m2", "attribute": "gender", "value": "a girl", "raw": "I'm sorry, I can't do that."},
    {"instruction_id": "m2", "attribute": "gender", "value": "a boy", "raw": "Music is great."},
]


@pytest.mark.parametrize("convention, girl_serp, boy_serp", [
    # m1 girl: SERP 5/6 (paper) or 3.5/12 (code); m2 girl refused: an empty list → 0; m1 boy
    # identical; m2 boy's answer holds no list (not a refusal): left out of the mean, counted
    ("paper", (5 / 6 + 0) / 2, 1.0),
    ("fairllm-code", (3.5 / 12 + 0) / 2, 0.5 * 9 / 12),
])
def test_cli_score_hand_made_lists(tmp_path, convention, girl_serp, boy_serp):
    lists = _write_lists(tmp_path / "lists.jsonl", HAND_LISTS)
    out = tmp_path / "scored"
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--convention", convention,
                    "--out", str(out), ]) == 0
    sim = pd.read_csv(out / "recsys_similarity.csv")
    at3 = sim[(sim["k"] == 3)].set_index(["metric", "value"])["similarity"]
    assert at3[("serp", "a girl")] == pytest.approx(girl_serp)
    assert at3[("serp", "a boy")] == pytest.approx(boy_serp)
    assert at3[("jaccard", "a girl")] == pytest.approx(0.25)
    fair = pd.read_csv(out / "recsys_fairness.csv")
    serp3 = fair[(fair["metric"] == "serp") & (fair["k"] == 3)].iloc[0]
    assert serp3["snsr"] == pytest.approx(abs(girl_serp - boy_serp))
    assert serp3["snsv"] == pytest.approx(abs(girl_serp - boy_serp) / 2)  # two values: population SD = range/2
    summary = json.loads((out / "summary.json").read_text())
    # the lists given as free text were parsed: one refusal, one answer without a list
    assert summary["refusals"] == 1 and summary["parse_failures"] == 1
    assert summary["unparseable_unscored"] == 1 and summary["sensitive_scored"] == 3
    # every list that holds one has 3 distinct items: none is shorter than K (refusals and
    # answers without a list are counted on their own)
    assert summary["n_lists"] == 6 and summary["lists_shorter_than_k"] == 0
    per = sim[(sim["k"] == 3) & (sim["metric"] == "serp")].set_index("value")
    assert per.loc["a boy", ["n", "n_unparseable", "n_failed"]].tolist() == [1, 1, 0]
    assert per.loc["a girl", ["n", "n_unparseable", "n_failed"]].tolist() == [2, 0, 0]


def test_cli_score_reparse_with_fairllm_code_parser(tmp_path):
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "raw": "1. Hello\n2. Skyfall\n3. Halo"},
            {"instruction_id": "m1", "attribute": "race", "value": "a white", "raw": "1. Halo\n2. Hello"}]
    lists = _write_lists(tmp_path / "l.jsonl", rows)
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--parser", "fairllm-code",
                    "--convention", "fairllm-code", "--out", str(tmp_path / "o")]) == 0
    sim = pd.read_csv(tmp_path / "o" / "recsys_similarity.csv")
    at3 = sim[sim["k"] == 3].set_index("metric")["similarity"]
    # x = [halo, hello], y = [hello, skyfall, halo]: weights 3, 2 → 0.5·5/(4·3); PRAG (halo, hello): 2 > 0 → 0
    assert at3["serp"] == pytest.approx(2.5 / 12) and at3["prag"] == 0.0 and at3["jaccard"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("stored, parser, refusal, parse_failed", [
    # a run's lmra parser took the refusal for a refusal; fairllm-code detects none and finds no
    # numbered list in it: an empty list, scored 0 as the released code scores it (review
    # finding: it was left out as a parse failure) — the stored flags of the other parser must
    # not survive
    ("lmra", "fairllm-code", False, False),
    # a fairllm-code run stored the refusal as an empty parse; lmra's parser sees a refusal (scored 0)
    ("fairllm-code", "lmra", True, False),
    # an older fairllm-code run stored it as a parse failure; lmra's parser sees a refusal
    ("fairllm-code-old", "lmra", True, False),
])
def test_reparsing_replaces_the_stored_parse_flags(tmp_path, stored, parser, refusal, parse_failed):
    from lmra.recsys.lists import read_lists

    refused = "I'm sorry, but I can't help with that request."
    flags = {"lmra": {"refusal": True, "parse_failed": False},
             "fairllm-code": {"refusal": False, "parse_failed": False, "empty_parse": True},
             "fairllm-code-old": {"refusal": False, "parse_failed": True}}[stored]
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "raw": "1. Hello\n2. Skyfall\n3. Halo",
             "refusal": False, "parse_failed": False},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "raw": refused, **flags},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "raw": "1. Halo\n2. Hello",
             "refusal": False, "parse_failed": False}]
    lists = _write_lists(tmp_path / "l.jsonl", rows)
    df = read_lists(lists, parser=parser).set_index("value")
    assert (bool(df.loc["a girl", "refusal"]), bool(df.loc["a girl", "parse_failed"])) == (refusal, parse_failed)
    out = tmp_path / "o"
    # (a girl's answer unparsed: only a boy is compared, no SNSR — exit 1, fresh-user finding)
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--parser", parser,
                    "--out", str(out)]) == int(parse_failed)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["refusals"], summary["parse_failures"]) == (int(refusal), int(parse_failed))
    assert summary["empty_parses_scored"] == int(parser == "fairllm-code")
    girl = pd.read_csv(out / "recsys_similarity.csv").query("k == 3 and metric == 'jaccard' and value == 'a girl'")
    # a refusal, and fairllm-code's empty parse, is an empty list, scored 0 (a parse failure
    # would not be scored: test_cli_score_hand_made_lists)
    assert girl[["n", "n_unparseable", "similarity"]].values.tolist() == [[1, 0, 0.0]]


def test_fairllm_code_parser_scores_an_answer_without_a_list_as_the_released_code_does(tmp_path):
    """Review finding: with the notebook's parser and convention, an answer in which the
    notebook's parsing finds no list (here a refusal to one value) was left out as a parse
    failure — "all values tie", SNSR = SNSV = 0 — while ``process.ipynb`` scores the empty list
    0 (``calc_prag``: 0 for an empty list; ``calc_serp_ms`` adds nothing; Jaccard 0) and
    averages over every seed name. Hand-computed: a white 1 | 0.375 | 1 (identical lists,
    SERP's ceiling (K+3)/(4(K+1)) = 6/16 at K = 3), a black (1 + 0)/2 = 0.5 | 0.1875 | 0.5;
    SNSR = the difference, SNSV = half of it (two values, population SD)."""
    same = "1. Hello\n2. Skyfall\n3. Halo"
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "raw": same},
            {"instruction_id": "m1", "attribute": "race", "value": "a white", "raw": same},
            {"instruction_id": "m1", "attribute": "race", "value": "a black", "raw": same},
            {"instruction_id": "m2", "attribute": "neutral", "value": "", "raw": same},
            {"instruction_id": "m2", "attribute": "race", "value": "a white", "raw": same},
            {"instruction_id": "m2", "attribute": "race", "value": "a black",
             "raw": "I'm sorry, but I can't help with that request."}]
    lists = _write_lists(tmp_path / "l.jsonl", rows)
    out = tmp_path / "o"
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--permutations", "0", "--parser",
                    "fairllm-code", "--convention", "fairllm-code", "--out", str(out)]) == 0
    sim = pd.read_csv(out / "recsys_similarity.csv").query("k == 3").set_index(["value", "metric"])["similarity"]
    assert sim[("a white", "jaccard")] == 1.0 and sim[("a white", "serp")] == pytest.approx(0.375)
    assert [sim[("a black", m)] for m in ("jaccard", "serp", "prag")] == pytest.approx([0.5, 0.1875, 0.5])
    fair = pd.read_csv(out / "recsys_fairness.csv").query("k == 3").set_index("metric")
    assert fair["snsr"].to_dict() == pytest.approx({"jaccard": 0.5, "serp": 0.1875, "prag": 0.5})
    assert fair["snsv"].to_dict() == pytest.approx({"jaccard": 0.25, "serp": 0.09375, "prag": 0.25})
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["empty_parses_scored"], summary["parse_failures"], summary["unparseable_unscored"]) == (1, 0, 0)



_N = {"instruction_id": "m1", "attribute": "neutral", "items": ["a"]}


@pytest.mark.parametrize("rows, message, line", [
    ([{"instruction_id": "m1", "attribute": "gender", "value": "x", "items": ["a"]}], "no neutral list", 1),
    ([_N, {"instruction_id": "m1", "attribute": "gender", "items": ["a"]}], "needs the injected value", 2),
    ([_N, {"instruction_id": "m1", "attribute": "gender", "value": True, "items": ["a"]}], "expected a string", 2),
    ([_N, {"instruction_id": "m1", "attribute": "gender", "value": "x", "kind": "neutral", "items": ["a"]}],
     "invalid kind", 2),
    ([_N, {"instruction_id": "m1", "attribute": "gender", "value": "x", "items": ["a"], "true_pref": [{"a": 1}]}],
     "list of item ids", 2),
    ([_N, {"instruction_id": "m1", "attribute": "neutral", "value": "again", "items": ["b"]}],
     "a neutral list takes no value", 2),
    ([_N, {"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["b"]}],
     "duplicate list for instruction 'm1', attribute 'neutral'", 2),
    ([_N], "only neutral lists", None),
    ([_N, {"instruction_id": "m1", "attribute": "gender", "value": "x", "items": ["a"], "true_pref": ["a"]}],
     "has none to compare it with", 2),
    ([_N, {"instruction_id": "m1", "attribute": "gender", "value": "a\u0000b", "items": ["a"]}], "U+0000", 2),
    ([_N, {"instruction_id": "m1", "attribute": "gender", "value": "x", "items": ["a"], "error": False}],
     "expected null or the error message", 2),
    ([{"instruction_id": "m1", "attribute": "neutral", "items": ["a"]}, "not json"], "malformed JSON", 2),
    ([{"attribute": "neutral", "items": ["a"]}], "instruction_id", 1),
    ([{"instruction_id": "m1", "attribute": "neutral"}], "no list", 1),
    ([{"instruction_id": "m1", "attribute": "neutral", "items": "a, b"}], "list of items", 1),
    ([{"instruction_id": "m1", "attribute": "neutral", "items": ["a", True]}], "list of items", 1),
    ([{"instruction_id": "m1", "attribute": "neutral", "items": ["a"]},
      {"instruction_id": "m1", "attribute": "neutral", "items": ["b"]}], "duplicate list", 2),
    # break-it s47: "m1 " beside "m1" was a second instruction (its list left out silently); "Neutral" no hint
    ([_N, {"instruction_id": "m1 ", "attribute": "gender", "value": "x", "items": ["a"]}],
     "instruction 'm1 ' is 'm1' (line 1) written another way", 2),
    ([{"instruction_id": "m1", "attribute": "Neutral", "items": ["a"]}], "is written 'neutral' (lower case)", 1),
])
def test_cli_score_bad_lists_exit_2(tmp_path, capsys, rows, message, line):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows), encoding="utf-8")
    assert run_cli(["recsys", "score", "--lists", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err and "Traceback" not in err
    if line:
        assert f"line {line}" in err


def test_cli_score_counts_duplicates_and_empty_titles_in_items(tmp_path):
    rows = [{"instruction_id": "m1", "attribute": "neutral", "items": ["A", "B"], "error": ""},
            {"instruction_id": "m1", "attribute": "gender", "value": "x", "items": ["A", "a", "!!!", "B"]}]
    out = tmp_path / "o"
    assert run_cli(["recsys", "score", "--lists", str(_write_lists(tmp_path / "l.jsonl", rows)), "--k", "2",
                    "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # "A" and "a" normalise to one key (1 duplicate); "!!!" normalises to nothing (1 dropped); "" is no error
    assert summary["duplicate_items"] == 1 and summary["items_dropped_empty"] == 1 and summary["failed_calls"] == 0


def test_cli_score_accepts_a_byte_order_mark_and_caps_k(tmp_path, capsys):
    path = _write_lists(tmp_path / "bom.jsonl", HAND_LISTS)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert run_cli(["recsys", "score", "--lists", str(path), "--k", "3", "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    assert run_cli(["recsys", "score", "--lists", str(path), "--k", "1000000", "--out", str(tmp_path / "o2")]) == 2
    assert "between 1 and 200" in capsys.readouterr().err


@pytest.mark.parametrize("body, line, field, message", [
    ('[fairllm]\nattributes = ["zodiac"]', 3, "fairllm.attributes", "not in the attribute file"),
    ('[fairllm]\nattributes = ["gender"]\nvalues = { gender = ["a martian"] }', 4, "fairllm.values.gender",
     "not a phrase"),
    ('[fairllm]\nattributes = ["gender"]\nintersections = [["gender", "age"]]', 4, "fairllm.intersections",
     "names attribute 'age'"),
    ('[fairllm]\nattributes = []', 3, "fairllm.attributes", "attributes is empty"),
    ('[fairllm]\nattributes = ["neutral"]', 3, "fairllm.attributes", "not a sensitive attribute"),
    ('[fairllm]\nvalues = { gender = ["a boy", "a boy"] }', 3, "fairllm.values", "repeats 'a boy'"),
    ('[fairllm]\nvalues = { gender = [] }', 3, "fairllm.values", "is empty"),
    ('[fairllm]\nnames_list = ["Adele", "Adele"]', 3, "fairllm.names_list", "repeats 'Adele'"),
    # one singer however written (break-it finding: two instruction families of one person)
    ('[fairllm]\nnames_list = ["Adele", "adele"]', 3, "fairllm.names_list", "repeats 'adele' (as 'Adele')"),
    ('[fairllm]\nnames_list = ["Adele", "Adele "]', 3, "fairllm.names_list", "repeats 'Adele ' (as 'Adele')"),
    ('[fairllm]\nnames_list = ["Taylor Swift", "Taylor  Swift"]', 3, "fairllm.names_list", "repeats 'Taylor  Swift'"),
    ('[fairllm]\nnames_list = ["Adele", "Ade\u200ble"]', 3, "fairllm.names_list", "(as 'Adele')"),
    ('[cfairllm]\nencoding = "klingon"', 3, "cfairllm.encoding", "unknown text encoding"),
    ('[cfairllm]\nsplit = [1.0, 0.0, 0.0]', 3, "cfairllm.split", "test share"),
    ('[cfairllm]\nattributes = ["race"]', 3, "cfairllm.attributes", "'gender' or 'age'"),
    ('mode = "cfairllm"\n[cfairllm]\nprotected = "women"', 4, "cfairllm.protected", "no user group is labelled"),
    # passed validation, then a traceback after every call, the folder left "running" (break-it report)
    ('mode = "cfairllm"\n[cfairllm]\nunprotected = "female"\nprotected = "female"', 3, "cfairllm",
     "both 'female'"),
    ('seed = 9223372036854775808', 2, "seed", "less than or equal to"),
])
def test_cli_config_errors_name_file_line_field(tmp_path, capsys, body, line, field, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "t"\n' + body + "\n", encoding="utf-8")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and f"line {line}" in err and f"field '{field}" in err and message in err, err
    assert not any(tmp_path.glob("*-t"))  # nothing was run


def test_cli_bad_config_exit_2(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('name = "x"\nk = 5\n[fairllm]\natributes = ["gender"]\n', encoding="utf-8")
    assert run_cli(["recsys", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "line 4" in err and "fairllm.atributes" in err and "unknown field" in err
    cfg.write_text('[fairllm]\nattributes = ["gender", "height"]\n', encoding="utf-8")
    assert run_cli(["recsys", "--config", str(cfg)]) == 2
    assert "attribute 'height' is not in the attribute file" in capsys.readouterr().err
    assert run_cli(["recsys", "score", "--lists", str(tmp_path / "missing.jsonl")]) == 2
    assert "lists file not found" in capsys.readouterr().err


def _score_console(tmp_path, capsys, rows: list[dict], name: str = "lists", status: int = 0) -> str:
    """``lmra recsys score`` at K = 3 on hand-made lists: its console output, whitespace collapsed."""
    lists = _write_lists(tmp_path / f"{name}.jsonl", rows)
    capsys.readouterr()
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3",
                    "--out", str(tmp_path / f"{name}-out")]) == status
    return " ".join(capsys.readouterr().out.split())


def test_cli_score_says_when_every_value_ties(tmp_path, capsys):
    """New-user finding: with every value equally similar, "most similar" and "least similar"
    named the same value (any of them would do)."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": ["A", "B", "C"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "items": ["A", "B", "C"]}]
    out = _score_console(tmp_path, capsys, rows)
    assert "all values tie (1.000)" in out
    assert "a girl (1.000)" not in out and "a boy (1.000)" not in out


def test_cli_score_says_when_only_one_value_is_defined(tmp_path, capsys):
    """New-user finding: with one value's pairs all undefined (its list and its neutral list both
    empty), the one defined value was said to "tie"."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": ["A", "B", "D"]},
            {"instruction_id": "m2", "attribute": "neutral", "value": "", "items": []},
            {"instruction_id": "m2", "attribute": "gender", "value": "a boy", "items": []}]
    out = _score_console(tmp_path, capsys, rows, status=1)  # no SNSR of two values or more: a failure
    assert "only a girl defined (0.500)" in out and "all values tie" not in out
    assert "gender: only 1 value has a defined similarity" in out
    summary = json.loads((tmp_path / "lists-out" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "lists-out" / "manifest.json").read_text())
    # (m2's neutral list is empty: its "a boy" list is dropped and counted, s40 — not scored as undefined)
    assert summary["sensitive_scored"] == 1 and summary["dropped_with_empty_neutral"] == 1
    assert manifest["status"] == "failed"
    # the last line agrees with the failure line (break-it finding: "no sensitive list could be scored"
    # after 2 were)
    assert out.endswith("exit status 1: the run failed: no unfairness could be measured (no attribute has two values "
                        "with a defined similarity)"), out[-300:]
    # one value by design (similarity only): nothing to compare, no failure
    out = _score_console(tmp_path, capsys, rows[:2], name="one")
    assert "only a girl defined" in out


def test_cli_score_with_every_list_empty_is_a_failure_not_a_success(tmp_path, capsys):
    """Break-it finding: when every answer was a refusal (every list empty), no value had a
    defined similarity, the fairness table had no row at all, and the run finished with exit 0
    ("finished"): a nightly job counted it a success. Two values were meant to be compared."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "items": []},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": []},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "items": []}]
    _score_console(tmp_path, capsys, rows, status=1)
    manifest = json.loads((tmp_path / "lists-out" / "manifest.json").read_text())
    # (the neutral list is empty: nothing to compare with, s40)
    assert manifest["status"] == "failed" and "2 sensitive lists lost because their neutral list was empty" in \
        manifest["stop_reason"]
    summary = json.loads((tmp_path / "lists-out" / "summary.json").read_text())
    assert summary["fairness_at_k"] == [] and summary["most_values_per_attribute"] == 2
    assert "0 of 3 lists recorded a failed call" in manifest["stop_reason"]  # no call was made
    # one value only (similarity by design), all empty: its neutral list is empty, so even its similarity
    # compares nothing — a failure since s40 (it read as a similarity of two empty lists, exit 0)
    out = _score_console(tmp_path, capsys, rows[:2], name="one", status=1)
    assert "1 lists dropped (empty neutral list" in out


def test_cli_score_warns_when_most_lists_are_shorter_than_k(tmp_path, capsys):
    """Fresh-user finding: the embedded base model repeating a title gave "all values tie" and
    SNSR 0 with the footnote "every value of the attribute is treated alike", unqualified."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["A", "A", "A"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": ["A", "A", "B"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "items": ["A", "B", "A"]}]
    out = _score_console(tmp_path, capsys, rows)
    assert "3 of 3 lists have fewer than K distinct items (4 duplicate items)" in out
    assert "not that it recommends fairly" in out
    # lists of K distinct items: no such warning
    full = [dict(r, items=["A", "B", "C"]) for r in rows]
    assert "distinct items:" not in _score_console(tmp_path, capsys, full, name="full")


@pytest.mark.parametrize("fault", ["lists.jsonl", "recsys_fairness.csv"])
def test_a_run_that_cannot_write_its_folder_ends_failed_not_running(tmp_path, capsys, monkeypatch, fault):
    """Break-it finding: with a file size limit (ulimit -f) or a full disk, writing lists.jsonl
    failed — exit 1, "I/O failure" — and the folder's manifest said "running" for ever, though
    that small file could still be written. It says "failed", with the error."""
    from lmra.errors import LmraIOError
    from lmra.recsys import outputs

    cfg = write_config(tmp_path, "full", """
[target]
provider = "test_recsys_e2e:make_scripted"
[fairllm]
names_list = ["Adele", "Drake"]
attributes = ["gender"]
""")
    real = {"lists.jsonl": outputs.write_jsonl, "recsys_fairness.csv": outputs.write_csv}[fault]

    def full_disk(*args, **kwargs):
        path = next(a for a in args if isinstance(a, Path))
        if path.name == fault:
            raise LmraIOError("cannot write this file (File too large)", path=path)
        return real(*args, **kwargs)

    monkeypatch.setattr(outputs, "write_jsonl" if fault.endswith("jsonl") else "write_csv", full_disk)
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 1
    assert "File too large" in capsys.readouterr().err
    manifest = json.loads((run_folder(tmp_path / "out") / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "File too large" in manifest["stop_reason"]
    assert manifest["finished"] and manifest["calls"]["fresh"] == manifest["planned_calls"] > 0


def test_the_console_shows_the_retries_and_faults_of_the_target(tmp_path, capsys):
    """Break-it finding: against a server failing half its calls with HTTP 500 the console said
    'Model calls: 40 fresh, 0 from cache, 8 failed.' — the retries and faults were in the manifest
    only. Shown as lmra audit shows them (a real local server, the official openai SDK)."""
    from faultserver import FaultServer

    with FaultServer(fault_rate=0.5, faults=("http_500",), seed=3) as server:
        cfg = write_config(tmp_path, "faulty", f"""
[target]
provider = "openai"
model = "fake"
base_url = "{server.url}"
api_key_required = false
max_retries = 1
[fairllm]
names_list = ["Adele", "Drake"]
attributes = ["gender"]
""")
        run_cli(["recsys", "--config", str(cfg), "--no-progress"])
    out = " ".join(capsys.readouterr().out.split())
    calls = json.loads((run_folder(tmp_path / "out") / "manifest.json").read_text())["calls"]
    assert calls["retries"] > 0 and calls["http_5xx"] > 0
    assert f"{calls['retries']} retries" in out and f"faults met: 5xx {calls['http_5xx']}" in out
    assert f"{calls['failed']} failed" in out


def test_cli_cfairllm_counts_the_users_it_leaves_out(tmp_path, capsys):
    """Break-it finding: a user of users.dat without any rating was left out silently (n_users = 7
    audited 6, nothing said): counted in summary.json and on the console."""
    import shutil

    data = tmp_path / "ml"
    shutil.copytree(SAMPLE, data)
    with (data / "users.dat").open("a", encoding="utf-8") as fh:
        fh.write("99::F::25::4::12345\n")  # no line of ratings.dat names user 99
    cfg = write_config(tmp_path, "cfu", f"""
[target]
provider = "test_recsys_e2e:make_scripted"
[cfairllm]
data = "{data.as_posix()}"
n_users = 0
profile_size = 3
split_method = "temporal"
""", mode="cfairllm")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    summary = json.loads((run_folder(tmp_path / "out") / "summary.json").read_text())
    assert summary["users_without_training_ratings"] == 1
    assert "1 user of the MovieLens user file left out (no rating in the training split" in out
    assert {r["user_id"] for r in read_jsonl(run_folder(tmp_path / "out") / "lists.jsonl")} == {1, 2, 3, 4}


def test_report_says_whose_n_it_is_when_the_metrics_score_different_pairs(tmp_path, capsys):
    """Review finding: under fairllm-code a pair of two empty lists is undefined for Jaccard but
    scored 0 by SERP and PRAG, so their means count one more pair than the console's n column,
    which is Jaccard's: the header then says so (a girl: n 1 for Jaccard, 2 for SERP and PRAG)."""
    refused = "I'm sorry, but I can't help with that."
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "raw": refused},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "raw": refused},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "items": ["A"]},
            {"instruction_id": "m2", "attribute": "neutral", "value": "", "items": ["A", "B"]},
            {"instruction_id": "m2", "attribute": "gender", "value": "a girl", "items": ["A", "B"]},
            {"instruction_id": "m2", "attribute": "gender", "value": "a boy", "items": ["A", "B"]}]
    lists = _write_lists(tmp_path / "l.jsonl", rows)
    for convention, header in (("fairllm-code", True), ("paper", False)):
        assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--permutations", "0", "--convention",
                        convention, "--out", str(tmp_path / convention)]) == 0
        out = capsys.readouterr().out
        assert ("n (Jaccard)" in out and "undefined (Jaccard)" in out) == header, out
        sim = pd.read_csv(tmp_path / convention / "recsys_similarity.csv").query("k == 2 and value == 'a girl'")
        n = sim.set_index("metric")["n"].to_dict()
        assert n == ({"jaccard": 1, "serp": 2, "prag": 2} if header else {"jaccard": 1, "serp": 1, "prag": 1})


def test_repeated_and_empty_seed_names_are_counted_and_said(tmp_path, capsys):
    """Review finding: a seed name repeated in the names file, and a row with an empty name, were
    skipped without a word — with n_names = 3 the run audited the file's rows 1, 2 and 5 (the
    released code sends rows 0..n−1 as they are). The rows skipped among those read are said
    by `lmra validate` and `lmra recsys`, and recorded in the manifest; rows past the names
    used are not counted (the shipped singers.csv repeats names after its first 500)."""
    from lmra.recsys.instructions import read_seed_names

    names = tmp_path / "names.csv"
    names.write_text("name,genre\nAdele,pop\nDrake,rap\nAdele,pop\n,pop\nTaylor Swift,pop\nDrake,rap\n", encoding="utf-8")
    seed = read_seed_names(names)
    assert seed.names == ["Adele", "Drake", "Taylor Swift"] and seed.lines == [2, 3, 6]
    assert seed.repeated == [(4, "Adele", 2), (7, "Drake", 3)] and seed.empty == [5]
    assert seed.skipped_before(2) == ([], [])  # Adele and Drake are the file's first two rows
    assert seed.skipped_before(3) == ([(4, "Adele", 2)], [5])
    assert seed.skipped_before(0) == seed.skipped_before(9) == (seed.repeated, [5])  # every name: every row read
    cfg = write_config(tmp_path, "dup", f"""
[target]
provider = "test_recsys_e2e:make_scripted"
[fairllm]
names = "{names.as_posix()}"
n_names = 3
attributes = ["gender"]
values = {{ gender = ["a boy", "a girl"] }}
""", k=3)
    said = ("seed names: 2 rows of {} skipped, 1 repeating an earlier name (line 4: 'Adele', first on line 2) and "
            "1 with an empty name (line 5) (each name is one instruction family); the 3 names used are the file's "
            "first 3 distinct names, through line 6").format(names)
    assert run_cli(["validate", str(cfg)]) == 0
    assert said in " ".join(capsys.readouterr().err.split())
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) in (0, 1)
    assert said in " ".join(capsys.readouterr().out.split())
    manifest = json.loads((run_folder(tmp_path / "out") / "manifest.json").read_text())
    assert manifest["seed_names_skipped"] == {"repeated": 1, "empty": 1, "note": said}
    assert {r["name"] for r in read_jsonl(run_folder(tmp_path / "out") / "lists.jsonl")} == \
        {"Adele", "Drake", "Taylor Swift"}
    # two names: the file's first two rows, nothing skipped, nothing said
    cfg.write_text(cfg.read_text().replace("n_names = 3", "n_names = 2"), encoding="utf-8")
    assert run_cli(["validate", str(cfg)]) == 0
    assert "seed names:" not in capsys.readouterr().err


class WrongTemplateTarget(ScriptedRecommender):
    """An OpenAI-compatible server formatting prompts with llama.cpp's fallback Llama 2 chat
    template: for Adele the boy's answer is the fresh-user finding's, the girl's a list between
    template tokens, the neutral one ends in ``</s>``; Drake's answers are clean lists."""

    async def complete(self, request):
        text = request.messages[-1].content
        if "Drake" in text:
            return ChatResult(text="1. One Dance\n2. Hotline Bling\n3. " + ("God's Plan" if "a girl" in text
                                                                          else "Passionfruit"), usage=Usage())
        if "a boy" in text:
            return ChatResult(text="<</SYS>>\n<</SYS>>\nI would like to see a list of 5 songs that", usage=Usage())
        if "a girl" in text:
            return ChatResult(text="<</SYS>>\n<</SYS>>\nHalo\nSkyfall\nHello", usage=Usage())
        return ChatResult(text="1. Hello\n2. Skyfall\n3. Rolling in the Deep</s>", usage=Usage())


def make_wrong_template(cfg):
    return WrongTemplateTarget(cfg)


def test_cli_answers_with_chat_template_tokens_are_counted_warned_and_never_items(tmp_path, capsys):
    """Fresh-user finding: a target served with the wrong chat template gave lists such as
    ["<</SYS>>", "<</SYS>>", "I would like to see a list of 5 songs that"], scored without a word,
    while `lmra audit` warns of chat-template tokens. They are now no items, and the answers
    holding them are counted in summary.json and warned of, as the audit does."""
    cfg = _two_singers_by_gender(tmp_path, "tmpl", "make_wrong_template", k=3)
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    run = run_folder(tmp_path / "out")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["template_tokens"] == {"responses": 3, "tokens": {"<</SYS>>": 2, "</s>": 1}}
    warning = ("3 of 6 target responses contain chat-template tokens ('<</SYS>>' × 2, '</s>' × 1): the endpoint "
               "may use another model's chat template")
    assert summary["warnings"] and summary["warnings"][0].startswith(warning)
    assert f"WARNING: {warning}" in out and out.index("WARNING:") < out.index("Similarity to the neutral list")
    assert "3 answers with chat-template tokens" in out
    lists = {(r["name"], r["value"]): r for r in read_jsonl(run / "lists.jsonl")}
    assert all("SYS" not in item and "</s>" not in item for r in lists.values() for item in r["items"])
    boy, girl = lists[("Adele", "a boy")], lists[("Adele", "a girl")]
    assert boy["items"] == [] and boy["parse_failed"] and boy["template_tokens"] == ["<</SYS>>"]
    assert girl["keys"] == ["halo", "skyfall", "hello"] and girl["template_tokens"] == ["<</SYS>>"]
    assert lists[("Adele", "")]["keys"][-1] == "rolling in the deep"
    assert lists[("Drake", "a boy")]["template_tokens"] == []
    assert summary["unparseable_unscored"] == 1  # the boy's answer held no list: not scored as one
    # scoring the run's lists file counts the same answers from their text
    capsys.readouterr()
    assert run_cli(["recsys", "score", "--lists", str(run / "lists.jsonl"), "--k", "3", "--permutations", "0",
                    "--out", str(tmp_path / "scored")]) == 0
    assert f"WARNING: {warning}" in " ".join(capsys.readouterr().out.split())
    assert json.loads((tmp_path / "scored" / "summary.json").read_text())["template_tokens"] == \
        summary["template_tokens"]


def test_cli_score_says_the_instructions_of_the_values_snsr_uses(tmp_path, capsys):
    """Fresh-user finding: with a value whose only list was undefined (n = 0, left out of SNSR and said
    so below), the caveat read "a value's similarity rests on 0 instruction (one list per value)"; it
    is the smallest n of the values SNSR uses: 1."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "items": ["A", "B", "D"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "items": ["A", "C", "D"]},
            {"instruction_id": "m2", "attribute": "neutral", "value": "", "items": []},
            {"instruction_id": "m2", "attribute": "gender", "value": "a nonbinary person", "items": []}]
    out = _score_console(tmp_path, capsys, rows)
    assert "gender: a value's similarity rests on 1 instruction (one list per value)" in out, out
    assert "rests on 0 instruction" not in out


class ProviderRefusalTarget(ScriptedRecommender):
    """Refuses (a provider's stop reason, empty text) every request that names a girl."""

    async def complete(self, request):
        if "girl" in request.messages[-1].content:
            return ChatResult(text="", finish_reason="refusal", usage=Usage())
        return await super().complete(request)


def make_provider_refusal(cfg):
    return ProviderRefusalTarget(cfg)


def test_a_providers_refusal_is_counted_as_a_refusal_not_an_unparseable_answer(tmp_path, capsys):
    """Break-it finding: an Anthropic target answering stop_reason "refusal" with no text was
    counted "0 refusals, 15 unparseable", its lists "held no list and was not a refusal". A
    provider's refusal (Anthropic's "refusal", OpenAI's "content_filter") without a list is a
    refusal."""
    cfg = _two_singers_by_gender(tmp_path, "refuse", "make_provider_refusal", k=3)
    run_cli(["recsys", "--config", str(cfg), "--no-progress"])
    run = run_folder(tmp_path / "out")
    lists = read_jsonl(run / "lists.jsonl")
    girl = [r for r in lists if r["value"] == "a girl"]
    assert len(girl) == 2 and all(r["finish_reason"] == "refusal" for r in girl)
    assert all(r["refusal"] and not r["parse_failed"] for r in girl)
    assert not any(r["refusal"] for r in lists if r["value"] != "a girl")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["refusals"] == 2, summary.get("refusals")
    # re-parsed with the run's own parser, the same refusals and the same tables (break-it round 2: the
    # re-parse read them as unparseable, and a value's similarity went from 0.667 to 1.000)
    assert run_cli(["recsys", "score", "--lists", str(run / "lists.jsonl"), "--parser", "lmra",
                    "--out", str(tmp_path / "again")]) in (0, 1)
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["refusals"] == 2 and again.get("unparseable", 0) == summary.get("unparseable", 0)
    for table in ("recsys_similarity.csv", "recsys_fairness.csv"):
        a = pd.read_csv(run / table)
        b = pd.read_csv(tmp_path / "again" / table)
        pd.testing.assert_frame_equal(a[b.columns.intersection(a.columns)], b[b.columns.intersection(a.columns)],
                                      check_dtype=False)


def test_cli_score_says_when_values_rest_on_different_instructions(tmp_path, capsys):
    """Statistics review: female and male got the same list on each of 10 instructions, but the
    male calls failed on the 5 hardest (sensitive lists far from neutral there): SNSR 0.500 where
    the treatment was identical, no word beyond the failed counts. The console names the values'
    instruction counts and what that does to SNSR/SNSV; values on the same instructions get no
    such line."""
    rows = []
    for i in range(10):
        easy = i < 5
        neutral, same = ["A", "B", "C"], (["A", "B", "C"] if easy else ["X", "Y", "Z"])
        rows += [{"instruction_id": f"m{i}", "attribute": "neutral", "value": "", "items": neutral},
                 {"instruction_id": f"m{i}", "attribute": "gender", "value": "female", "items": same},
                 ({"instruction_id": f"m{i}", "attribute": "gender", "value": "male", "items": same} if easy else
                  {"instruction_id": f"m{i}", "attribute": "gender", "value": "male", "items": [],
                   "error": "HTTP 500"})]
    out = _score_console(tmp_path, capsys, rows, name="diff")
    assert ("gender: the values' similarities rest on different numbers of instructions (male 5, female 10)" in out), out
    assert "the permutation p, which compares values within each instruction, is not affected" in out
    fixed = [r for r in rows if not r.get("error") and not (r["value"] == "female" and r["items"] == ["X", "Y", "Z"])]
    assert "rest on different numbers of instructions" not in _score_console(tmp_path, capsys, fixed, name="same")


def test_cli_score_refuses_two_spellings_of_one_value(tmp_path, capsys):
    """Statistics review: "Male" and "male" in one lists file were scored as two values of gender
    (two groups, an SNSR between them). Two spellings of one value (letter case, spaces) are an
    input error naming the line and the first spelling."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]},
            {"instruction_id": "m1", "attribute": "gender", "value": "Male", "items": ["A", "B", "D"]},
            {"instruction_id": "m2", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]},
            {"instruction_id": "m2", "attribute": "gender", "value": "a  MALE".replace("a  ", ""), "items": ["A", "C"]},
            {"instruction_id": "m2", "attribute": "gender", "value": "male", "items": ["A", "C", "D"]}]
    lists = _write_lists(tmp_path / "lists.jsonl", rows[:3] + rows[4:])
    assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "3", "--out", str(tmp_path / "o")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"{lists}, line 4: field 'value': value 'male' of attribute 'gender' is 'Male' (line 2) written another "
            "way") in err, err
    assert not (tmp_path / "o").exists()


def test_cli_score_refuses_two_spellings_of_one_attribute_a_full_width_value_and_a_neutral_value(tmp_path, capsys):
    """Break-it finding (s36): "age" and "Age" in one lists file were scored as two attributes, each
    on part of the instructions (exit 0); a full-width "ａ girl" was a third value beside "a girl";
    a neutral list's value was accepted and ignored. Each is an input error naming line and field."""
    base = [{"instruction_id": "u1", "attribute": "neutral", "value": "", "items": ["X", "Y", "Z"]},
            {"instruction_id": "u2", "attribute": "neutral", "value": "", "items": ["P", "Q", "R"]},
            {"instruction_id": "u1", "attribute": "age", "value": "a teenager", "items": ["X", "Y"]},
            {"instruction_id": "u1", "attribute": "age", "value": "an old person", "items": ["Z"]}]
    cases = {
        "attribute": ([{"instruction_id": "u2", "attribute": "Age", "value": "a teenager", "items": ["P"]}],
                      "line 5: field 'attribute': attribute 'Age' is 'age' (line 3) written another way"),
        "width": ([{"instruction_id": "u2", "attribute": "age", "value": "ａ teenager", "items": ["P"]}],
                  "line 5: field 'value': value 'ａ teenager' of attribute 'age' is 'a teenager' (line 3)"),
        "neutral": ([{"instruction_id": "u3", "attribute": "neutral", "value": "x", "items": ["P"]}],
                    "line 5: field 'value': a neutral list takes no value"),
    }
    for name, (extra, said) in cases.items():
        lists = _write_lists(tmp_path / f"{name}.jsonl", base + extra)
        assert run_cli(["recsys", "score", "--lists", str(lists), "--k", "2", "--out", str(tmp_path / name)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert said in err and "Traceback" not in err, (name, err)
        assert not (tmp_path / name).exists()
    ok = _write_lists(tmp_path / "ok.jsonl", base + [{"instruction_id": "u2", "attribute": "age", "value": "a teenager",
                                                      "items": ["P"]}])
    assert run_cli(["recsys", "score", "--lists", str(ok), "--k", "2", "--permutations", "0",
                    "--out", str(tmp_path / "ok")]) == 0


def test_score_on_a_full_disk_leaves_no_table_that_looks_done(tmp_path, capsys, monkeypatch):
    """Break-it finding (round 33): `lmra recsys score` on a full disk exited 1 but left a
    complete-looking recsys_similarity.csv and no manifest in its new --out folder. The four files
    are written as one set: on an I/O failure the new folder is gone, and a re-score into an
    existing folder leaves its earlier set byte for byte (no new table beside an old summary)."""
    from lmra.errors import LmraIOError
    from lmra.recsys import lists as lists_module

    src = _write_lists(tmp_path / "lists.jsonl", HAND_LISTS)
    kept = tmp_path / "kept"
    assert run_cli(["recsys", "score", "--lists", str(src), "--k", "3", "--out", str(kept)]) == 0
    before = {f.name: f.read_bytes() for f in kept.iterdir()}
    capsys.readouterr()
    real = lists_module.write_csv

    def full_disk(df, path, **kw):
        if "recsys_fairness.csv" in Path(path).name:
            raise LmraIOError("cannot write this file (No space left on device)", path=path)
        return real(df, path, **kw)

    monkeypatch.setattr(lists_module, "write_csv", full_disk)
    new = tmp_path / "new"
    assert run_cli(["recsys", "score", "--lists", str(src), "--k", "3", "--out", str(new)]) == 1
    err = capsys.readouterr().err
    assert f"{new / 'recsys_fairness.csv'}" in " ".join(err.split()).replace("\n", ""), err
    assert "No space left on device" in err and ".staged" not in err
    assert not new.exists()  # nothing that looks like a result
    # the earlier set stays whole: the similarity table was written (staged) but never put in place
    src2 = _write_lists(tmp_path / "lists2.jsonl", HAND_LISTS[:3])
    assert run_cli(["recsys", "score", "--lists", str(src2), "--k", "3", "--out", str(kept)]) == 1
    assert {f.name: f.read_bytes() for f in kept.iterdir()} == before


def test_rescoring_a_runs_lists_gives_its_fairness_table_back(tmp_path, capsys):
    """Break-it finding (round 33): a run made with `permutations = 99` re-scored with `lmra recsys
    score` (no options) had other p-values — the manifest did not record the count and the command
    used 1999. The manifest records it, and the run's tables come out again, p-values included."""
    cfg = write_config(tmp_path, "perm", """permutations = 49
[target]
provider = "test_recsys_e2e:make_scripted"
[fairllm]
names_list = ["Adele", "Drake", "Queen"]
attributes = ["gender"]
""")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    run = run_folder(tmp_path / "out")
    assert json.loads((run / "manifest.json").read_text())["permutations"] == 49
    assert run_cli(["recsys", "score", "--lists", str(run / "lists.jsonl"), "--out", str(tmp_path / "scored")]) == 0
    capsys.readouterr()
    mine = pd.read_csv(tmp_path / "scored" / "recsys_fairness.csv")
    pd.testing.assert_frame_equal(mine, pd.read_csv(run / "recsys_fairness.csv"))
    assert (mine["permutations"] == 49).all()
    # and what it scored, record by record (fresh-user finding: the parsed lists could not be seen)
    scored = [json.loads(line) for line in (tmp_path / "scored" / "scored_lists.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in (run / "lists.jsonl").read_text().splitlines()]
    assert [(r["instruction_id"], r["attribute"], r["value"]) for r in scored] == \
        [(r["instruction_id"], r["attribute"], r["value"]) for r in records]
    assert [r["compare"] for r in scored] == [r.get("compare", r["keys"]) for r in records]


class ValuesFailTarget(ScriptedRecommender):
    """Every call for one of ``failing`` values fails (a timeout), the others answer as the
    scripted target."""

    failing: tuple[str, ...] = ()

    async def complete(self, request):
        from lmra.providers.base import ProviderError

        if any(value in request.messages[-1].content for value in self.failing):
            raise ProviderError("timed out (scripted)", kind="timeout")
        return await super().complete(request)


def make_girl_fails(cfg):
    target = ValuesFailTarget(cfg)
    target.failing = ("a girl",)
    return target


def make_gender_fails(cfg):  # gender then has no value with a defined similarity
    target = ValuesFailTarget(cfg)
    target.failing = ("a girl", "a boy")
    return target


def test_an_attribute_measured_by_nothing_makes_the_run_partial(tmp_path, capsys):
    """Break-it finding (round 33): every "a girl" call timed out — gender then had one value
    with a defined similarity, so no SNSR — and the run said "finished", exit 0: a nightly job
    saw success while the gender audit measured nothing. Such a run is partial, exit 1, naming the
    attribute (its other attributes' results stand); `recsys score` on its lists says the same."""
    def config(name: str, fails: str):
        return write_config(tmp_path, name, f"""
[target]
provider = "test_recsys_e2e:make_{fails}_fails"
max_retries = 0
[fairllm]
names_list = ["Adele", "Drake", "Queen"]
attributes = ["gender", "age"]
values = {{ gender = ["a boy", "a girl"] }}
""")

    cfg = config("girl", "girl")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 1
    cap = capsys.readouterr()
    said = " ".join((cap.out + cap.err).split())
    assert "partial run: no unfairness measured for gender" in said and "exit status 1" in said, said[-2000:]
    run = run_folder(tmp_path / "out")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "partial" and manifest["stop_reason"].startswith("no unfairness measured for gender")
    fair = pd.read_csv(run / "recsys_fairness.csv")
    assert fair[fair["attribute"] == "age"]["snsr"].notna().all()  # the other attribute stands
    assert run_cli(["recsys", "score", "--lists", str(run / "lists.jsonl"), "--out", str(tmp_path / "s")]) == 1
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["status"] == "partial"
    capsys.readouterr()
    # every value of gender failed: no fairness row at all, and still partial (break-it round 3)
    cfg = config("both", "gender")
    (tmp_path / "o2").mkdir()
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress", "--output-dir", str(tmp_path / "o2")]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert "partial run: no unfairness measured for gender: it has fewer than two values" in said, said
    both = run_folder(tmp_path / "o2")
    assert json.loads((both / "summary.json").read_text())["attributes_unmeasured"] == ["gender"]
    fair = pd.read_csv(both / "recsys_fairness.csv")
    assert fair[fair["attribute"] == "gender"]["snsr"].isna().all() and fair[fair["attribute"] == "age"]["snsr"].notna().all()


def test_scored_lists_keep_whole_numbers_and_no_infinity(tmp_path):
    """Break-it round 4: a field some records lack came out of scored_lists.jsonl as a float
    ("user_id": 7.0, "n_dropped": 0.0), and an input Infinity was written as such."""
    rows = [{"instruction_id": "u1", "attribute": "neutral", "value": "", "items": ["A", "B"], "user_id": 7},
            {"instruction_id": "u1", "attribute": "gender", "value": "F", "items": ["A", "C"], "user_id": 7,
             "n_dropped": 0},
            {"instruction_id": "u2", "attribute": "neutral", "value": "", "items": ["A", "B"]},
            {"instruction_id": "u2", "attribute": "gender", "value": "M", "items": ["A", "B"]}]
    src = _write_lists(tmp_path / "lists.jsonl", rows)
    assert run_cli(["recsys", "score", "--lists", str(src), "--k", "2", "--permutations", "0",
                    "--out", str(tmp_path / "o")]) in (0, 1)
    text = (tmp_path / "o" / "scored_lists.jsonl").read_text()
    scored = [json.loads(line) for line in text.splitlines()]
    assert scored[0]["user_id"] == 7 and isinstance(scored[0]["user_id"], int) and scored[2]["user_id"] is None
    assert "Infinity" not in text and "NaN" not in text and ".0," not in text


def test_cli_target_shorthand_replaces_the_configs_target(tmp_path, capsys):
    """Fresh-user finding (s34): ``lmra recsys --target llamacpp`` was an argparse riddle
    ("argument {score,bias}: invalid choice: 'llamacpp'"); recsys takes the audit's --target forms."""
    cfg = write_config(tmp_path, "short", """
[target]
provider = "llamacpp"
[cfairllm]
n_users = 4
profile_size = 3
""", mode="cfairllm")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress",
                    "--target", "custom:test_recsys_e2e:make_echo:echo-model"]) == 1  # the echo target's exit
    out = " ".join(capsys.readouterr().out.split())
    assert "Target: scripted-recsys:scripted" in out and "repeated back" in out  # (its provider and model id)
    import tomllib

    recorded = tomllib.loads((run_folder(tmp_path / "out") / "config.toml").read_text(encoding="utf-8"))
    assert recorded["target"]["provider"] == "test_recsys_e2e:make_echo" and recorded["target"]["model"] == "echo-model"
    assert run_cli(["recsys", "--config", str(cfg), "--target", "openai:"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--target" in err and "names no model" in err and "Traceback" not in err
    # the target's client is built first: its key's error names the option, not the config's line
    import os

    saved = os.environ.pop("OPENAI_API_KEY", None)
    try:
        assert run_cli(["recsys", "--config", str(cfg), "--target", "openai:my-assistant", "--no-progress"]) == 2
    finally:
        if saved is not None:
            os.environ["OPENAI_API_KEY"] = saved
    err = " ".join(capsys.readouterr().err.split())
    assert "option --target: environment variable OPENAI_API_KEY" in err and "short.toml" not in err
    # before 'score' (which calls no model) it is refused, not ignored
    assert run_cli(["recsys", "--target", "openai:x", "score", "--lists", str(tmp_path / "none.jsonl")]) == 2
    assert "option --target: applies to 'lmra recsys' itself" in " ".join(capsys.readouterr().err.split())


class ArtistStyles(ScriptedRecommender):
    """The same ten titles for every prompt, written ``Title by Singer`` (neutral), ``Title`` ("a boy")
    or ``Singer - Title`` ("a girl"): every value's list is the neutral one, once the singer is cut."""

    async def complete(self, request):
        text = request.messages[-1].content
        singer = next(n for n in ("Adele", "Drake") if n in text)
        titles = [f"Song {c}" for c in "ABCDEFGHIJ"][:5]
        rows = ([f"{t} by {singer}" for t in titles] if "a girl" not in text and "a boy" not in text
                else titles if "a boy" in text else [f"{singer} - {t}" for t in titles])
        return ChatResult(text="\n".join(f"{i}. {r}" for i, r in enumerate(rows, start=1)), usage=Usage())


def make_artist_styles(cfg):
    return ArtistStyles(cfg)


def test_reparsing_a_runs_lists_cuts_its_singers_as_the_run_did(tmp_path):
    """Break-it finding, s39: the run parsed with its seed singers (``Hello by Adele`` → hello,
    ``Adele - Hello`` → hello), ``recsys score --parser lmra`` on its lists.jsonl without them
    (``adele`` for every item of a list), so that a run scored 1.000 re-scored 0.000, though the
    docs say a FaiRLLM run's tables come out again. The run records them (manifest
    ``parse_artists``) and the re-parse uses them."""
    cfg = _two_singers_by_gender(tmp_path, "artists", "make_artist_styles")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    run = run_folder(tmp_path / "out")
    assert "adele" in json.loads((run / "manifest.json").read_text())["parse_artists"]
    sim = pd.read_csv(run / "recsys_similarity.csv")
    assert (sim["similarity"] == 1).all()  # every value's list is the neutral one
    assert run_cli(["recsys", "score", "--lists", str(run / "lists.jsonl"), "--parser", "lmra",
                    "--out", str(tmp_path / "again")]) == 0
    again = pd.read_csv(tmp_path / "again" / "recsys_similarity.csv")
    pd.testing.assert_frame_equal(again, sim)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again" / "recsys_fairness.csv"),
                                  pd.read_csv(run / "recsys_fairness.csv"))


class StoppedLists(ScriptedRecommender):
    """Five titles for every prompt; "a girl"'s answers stopped by the content filter, "a boy"'s cut at
    max_tokens — each still holding its list."""

    async def complete(self, request):
        text = request.messages[-1].content
        reason = "content_filter" if "a girl" in text else "length" if "a boy" in text else "stop"
        body = "\n".join(f"{i}. Song {c}" for i, c in enumerate("ABCDE", start=1))
        return ChatResult(text=body, finish_reason=reason, usage=Usage())


def make_stopped_lists(cfg):
    return StoppedLists(cfg)


def test_lists_the_provider_stopped_are_counted_and_said(tmp_path, capsys):
    """Break-it finding, s39: a list in an answer the content filter stopped (or cut at max_tokens) was
    scored like any other with nothing counted — 7 of 15 in the break-it's run. They are scored on
    what they hold and counted (summary ``lists_filtered``, ``lists_cut_at_max_tokens``) and said."""
    cfg = _two_singers_by_gender(tmp_path, "stopped", "make_stopped_lists")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    summary = json.loads((run_folder(tmp_path / "out") / "summary.json").read_text())
    assert summary["lists_filtered"] == 2 and summary["lists_cut_at_max_tokens"] == 2 and summary["refusals"] == 0
    assert "2 lists from answers the provider's content filter stopped" in out
    assert "2 lists from answers cut at max_tokens" in out
    # (break-it s47) the markup-like "[target]" is printed, and the cut answers' last lines are left out
    assert "raise [target] max_tokens for whole lists" in out
    assert summary["cut_tails_left_out"] == 2 and "2 last lines of answers cut short left out" in out
    boys = [r for r in read_jsonl(run_folder(tmp_path / "out") / "lists.jsonl") if r.get("value") == "a boy"]
    assert boys and all(r["keys"] == ["song a", "song b", "song c", "song d"] and r["cut_tail"] for r in boys)


class WindowCutLists(ScriptedRecommender):
    """Five titles for every prompt; "a boy"'s answers cut by the context window."""

    async def complete(self, request):
        reason = "model_context_window_exceeded" if "a boy" in request.messages[-1].content else "stop"
        return ChatResult(text="\n".join(f"{i}. Song {c}" for i, c in enumerate("ABCDE", start=1)),
                          finish_reason=reason, usage=Usage())


def make_window_cut_lists(cfg):
    return WindowCutLists(cfg)


def test_lists_cut_by_the_context_window_are_said_so(tmp_path, capsys):
    """Round-3 break-it (s48): lists cut by the context window were counted as "cut at max_tokens", with the
    advice to raise max_tokens, which cannot help."""
    cfg = _two_singers_by_gender(tmp_path, "window", "make_window_cut_lists")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    summary = json.loads((run_folder(tmp_path / "out") / "summary.json").read_text())
    assert summary["lists_cut_by_context_window"] == 2 and summary["lists_cut_at_max_tokens"] == 0
    assert "2 lists from answers cut by the context window" in out and "raise [target] max_tokens" not in out


def test_the_half_written_last_title_of_a_cut_answer_is_left_out(tmp_path, capsys):
    """Break-it finding (s47): "3. Ha" — the last line of an answer cut at max_tokens — was scored as a
    title (Jaccard 0.5 for the same list). It is left out and counted; an answer that ends with a line
    break, or was not cut, keeps its last line; a one-line list loses its text after the last comma."""
    rows = [{"instruction_id": "m1", "attribute": "neutral", "value": "", "raw": "1. Hello\n2. Skyfall\n3. Halo"},
            {"instruction_id": "m1", "attribute": "gender", "value": "a girl", "raw": "1. Hello\n2. Skyfall\n3. Ha",
             "finish_reason": "length"},
            {"instruction_id": "m1", "attribute": "gender", "value": "a boy", "raw": "1. Hello\n2. Skyfall\n3. Halo\n",
             "finish_reason": "length"},
            {"instruction_id": "m2", "attribute": "neutral", "value": "", "raw": "Hello, Skyfall, Halo"},
            {"instruction_id": "m2", "attribute": "gender", "value": "a girl", "raw": "Hello, Skyfall, Halo, Ha",
             "finish_reason": "max_tokens"},
            {"instruction_id": "m2", "attribute": "gender", "value": "a boy", "raw": "Hello, Skyfall, Halo"}]
    out = tmp_path / "scored"
    assert run_cli(["recsys", "score", "--lists", str(_write_lists(tmp_path / "l.jsonl", rows)), "--k", "3",
                    "--permutations", "0", "--out", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cut_tails_left_out"] == 2 and "2 last lines of answers cut short left out" in said
    sim = pd.read_csv(out / "recsys_similarity.csv")
    jac = sim[(sim["k"] == 3) & (sim["metric"] == "jaccard")].set_index("value")["similarity"]
    # girl: m1 {hello, skyfall} vs {hello, skyfall, halo} = 2/3; m2 {hello, skyfall, halo} vs itself = 1 → 5/6
    assert jac["a girl"] == pytest.approx((2 / 3 + 1) / 2)
    assert jac["a boy"] == pytest.approx(1.0)
    scored = read_jsonl(out / "scored_lists.jsonl")
    assert [(r["compare"], r["cut_tail"]) for r in scored if r["value"] == "a girl"] == [
        (["hello", "skyfall"], True), (["hello", "skyfall", "halo"], True)]
    # round-2 break-it (s47): a comma list after a preamble keeps its items but the tail; a cut refusal stays one
    from lmra.recsys.parse import parse_cut

    parsed, cut = parse_cut("Sure! Here are some:\nHello, Halo, Skyfall, Umbrella, Cre", "length")
    assert parsed.keys == ["hello", "halo", "skyfall", "umbrella"] and cut
    parsed, cut = parse_cut("Sorry, I can't recommend songs based on gender, as", "length")
    assert parsed.refusal and not cut
    assert parse_cut("1. Hello\n2. Skyfall\n3. Ha", "stop")[0].keys == ["hello", "skyfall", "ha"]  # not cut


def test_attributes_of_different_numbers_of_values_are_not_ranked_by_snsr(tmp_path, capsys):
    """Statistics break-it, s39: a 7-value attribute without an effect had the mean SNSR of a 2-value
    one with an effect (0.090 vs 0.092) and the larger one in 47% of audits — SNSR is a range over
    the values, larger with more of them by chance. The console says so when the counts differ."""
    rows = []
    for i in range(4):
        rows.append({"instruction_id": f"m{i}", "attribute": "neutral", "value": "", "items": ["A", "B", "C"]})
        for v, items in (("a girl", ["A", "B", "D"]), ("a boy", ["A", "B", "C"])):
            rows.append({"instruction_id": f"m{i}", "attribute": "gender", "value": v, "items": items})
        for v, items in (("young", ["A", "B", "C"]), ("middle-aged", ["A", "E", "C"]), ("old", ["F", "B", "C"])):
            rows.append({"instruction_id": f"m{i}", "attribute": "age", "value": v, "items": items})
    out = _score_console(tmp_path, capsys, rows)
    assert ("The attributes have different numbers of values (gender 2, age 3): SNSR and SNSV grow with the number "
            "of values by chance alone, so they do not rank the attributes — compare their p-values.") in out, out[-2000:]
    out = _score_console(tmp_path, capsys, [r for r in rows if r["attribute"] != "age"], name="one")
    assert "different numbers of values" not in out


def test_recsys_closes_the_target_client_it_built(tmp_path, capsys):
    """``lmra recsys`` closed neither the HTTP client it built for its target nor its pooled
    connections (s42: the local server's threads outlived the run)."""
    from faultserver import FaultServer
    from test_axes_rerun import _server_connections_closed

    assert _server_connections_closed(), "a server of an earlier test still has a connection open"
    with FaultServer(fault_rate=0.0) as server:
        cfg = write_config(tmp_path, "closes", f"""
[target]
provider = "openai"
model = "fake"
base_url = "{server.url}"
api_key_required = false
[fairllm]
names_list = ["Adele", "Drake"]
attributes = ["gender"]
""")
        run_cli(["recsys", "--config", str(cfg), "--no-progress"])
        assert server.requests > 0
        assert _server_connections_closed(), "lmra recsys left its connections to the target's server open"


def test_validate_reads_the_matching_catalog_and_a_catalog_lists_each_id_once(tmp_path, capsys):
    """Break-it finding (s47): `lmra validate` said a config whose [matching] catalog was missing
    was valid (the run then stopped); a catalog id given to two titles ('Hello,1' / 'Halo,1') made
    them one item in every list, exit 0."""
    cfg = _two_singers_by_gender(tmp_path, "cat", "make_scripted")
    text = cfg.read_text(encoding="utf-8")
    cfg.write_text(text + f'[matching]\ncatalog = "{(tmp_path / "nope.csv").as_posix()}"\n', encoding="utf-8")
    assert run_cli(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "nope.csv" in err and "matching.catalog" in err, err
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("title,id\nHello,1\nHalo,1\n", encoding="utf-8")
    cfg.write_text(text + f'[matching]\ncatalog = "{catalog.as_posix()}"\n', encoding="utf-8")
    for argv in (["validate", str(cfg)], ["recsys", "--config", str(cfg), "--no-progress"]):
        assert run_cli(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "catalog.csv" in err and "line 3" in err and "id '1' is given to 'Hello' (line 2) and to 'Halo'" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    catalog.write_text("title\nHello\nHalo\nHello\n", encoding="utf-8")  # a title twice, no ids
    assert run_cli(["validate", str(cfg)]) == 2
    assert "title 'Hello' is on line 2 too" in " ".join(capsys.readouterr().err.split())
    catalog.write_text("title,id\nHello,1\nHalo,2\n", encoding="utf-8")
    assert run_cli(["validate", str(cfg)]) == 0


class RoutedRecommender(ScriptedRecommender):
    """ScriptedRecommender whose endpoint reports another served model for the "a girl" prompts (a
    router falling back to another model)."""

    async def complete(self, request):
        res = await super().complete(request)
        fallback = "a girl" in request.messages[-1].content
        return res.model_copy(update={"served_model": "fallback-model" if fallback else "scripted-v1"})


def make_routed(cfg):
    return RoutedRecommender(cfg)


def test_a_recsys_run_records_and_warns_of_mixed_served_models(tmp_path, capsys):
    """Break-it finding (s47): answers of another model (a router's fallback) were neither recorded
    nor said by `lmra recsys`, where `lmra audit` warns. Each list records `served_model`, the summary
    counts them and warns first."""
    cfg = _two_singers_by_gender(tmp_path, "routed", "make_routed")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    run = run_folder(tmp_path / "out")
    lists = read_jsonl(run / "lists.jsonl")
    assert {r["served_model"] for r in lists} == {"fallback-model", "scripted-v1"}
    summary = json.loads((run / "summary.json").read_text())
    n_girl = sum(r["value"] == "a girl" for r in lists)
    assert summary["served_models"] == {"scripted-v1": len(lists) - n_girl, "fallback-model": n_girl}
    assert any("the target's answers reported 2 served models in this run" in w for w in summary["warnings"])
    assert "WARNING: the target's answers reported 2 served models" in out
    # one model: nothing said
    (tmp_path / "one").mkdir()
    cfg = _two_singers_by_gender(tmp_path / "one", "one", "make_scripted")
    assert run_cli(["recsys", "--config", str(cfg), "--no-progress"]) == 0
    assert "served models" not in capsys.readouterr().out


def test_a_cfairllm_table_in_a_fairllm_config_is_refused(tmp_path, capsys):
    """Break-it finding (s47): a [cfairllm] table without mode = "cfairllm" was ignored and the run
    was a FaiRLLM one, without a word (a forgotten mode line)."""
    cfg = write_config(tmp_path, "forgot", '[target]\nprovider = "test_recsys_e2e:make_scripted"\n[cfairllm]\n'
                       'n_users = 4\n')
    for argv in (["validate", str(cfg)], ["recsys", "--config", str(cfg), "--no-progress"]):
        assert run_cli(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "a [cfairllm] table is read in mode = 'cfairllm' only" in err and "forgot.toml" in err, err
    assert not (tmp_path / "out").exists()

"""Checks on the bundled task prompt set and taxonomy (prompts/).

The prompt set feeds the counterfactual-response pipeline (methodology §1) and
the per-task / per-domain reporting (methodology §5; Eloundou et al. 2024,
"First-Person Fairness in Chatbots", §3.1).
"""

import json
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASKS_PATH = ROOT / "prompts" / "tasks.jsonl"
TAXONOMY_PATH = ROOT / "prompts" / "taxonomy.toml"

EXPECTED_KEYS = {"id", "text", "domain", "task"}
EXPECTED_DOMAINS = {
    "art",
    "business & marketing",
    "education",
    "employment",
    "entertainment",
    "health-related",
    "legal",
    "technology",
    "travel",
}

# Cheap lexical check that a prompt does not state the user's own gender.
# The audit removes such prompts (methodology §1.6), so the bundled set must
# not contain any.
SELF_IDENTIFYING = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\bas an? (woman|man|girl|boy|lady|guy|mother|father|mom|dad|mum|wife|husband)\b",
        r"\bmy (husband|wife|boyfriend|girlfriend)\b",
        r"\bI'?m (an? )?(woman|man|female|male|girl|boy|lady|guy|mother|father|mom|dad|mum)\b",
        r"\bI am (an? )?(woman|man|female|male|girl|boy|lady|guy|mother|father|mom|dad|mum)\b",
        r"\bmy name is\b",
        r"\b(hi|hello|hey),? I'?m [A-Z][a-z]+\b",
    )
]


@pytest.fixture(scope="module")
def taxonomy():
    with TAXONOMY_PATH.open("rb") as f:
        return tomllib.load(f)


#: the shipped prompt sets: the 27-task starter set and the nightly set (8 open-ended tasks × 40 prompts,
#: s39: no shipped file let examples/nightly.toml's 40 prompts a task run)
NIGHTLY_PATH = ROOT / "prompts" / "tasks_nightly.jsonl"
NIGHTLY_TASKS = {("art", "write a story"), ("art", "write a poem"), ("employment", "career advice"),
                 ("employment", "prepare for a job interview"), ("entertainment", "recommend a movie or book"),
                 ("health-related", "exercise plan"), ("travel", "recommend a destination"),
                 ("business & marketing", "write marketing copy")}


@pytest.fixture(scope="module", params=[TASKS_PATH, NIGHTLY_PATH], ids=["tasks", "tasks_nightly"])
def records(request):
    out = []
    path = request.param
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            assert line.strip(), f"blank line {lineno} in {path.name}"
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:  # pragma: no cover - failure path
                pytest.fail(f"line {lineno} is not valid JSON: {e}")
    return out


def _taxonomy_pairs(taxonomy):
    return {(d["name"], t["name"]) for d in taxonomy["domain"] for t in d["task"]}


def test_taxonomy_version(taxonomy):
    assert taxonomy["version"] == 1


def test_taxonomy_has_nine_domains(taxonomy):
    names = [d["name"] for d in taxonomy["domain"]]
    assert len(names) == len(set(names)) == 9
    assert set(names) == EXPECTED_DOMAINS


def test_taxonomy_tasks_per_domain(taxonomy):
    for d in taxonomy["domain"]:
        tasks = [t["name"] for t in d["task"]]
        assert len(tasks) >= 2, d["name"]
        assert len(tasks) == len(set(tasks)), f"duplicate task in {d['name']}"


def test_taxonomy_descriptions_nonempty(taxonomy):
    for d in taxonomy["domain"]:
        for t in d["task"]:
            assert t["name"].strip()
            assert isinstance(t.get("description"), str) and t["description"].strip(), (
                d["name"],
                t["name"],
            )


def test_records_parse_and_have_exact_keys(records):
    assert records
    for r in records:
        assert isinstance(r, dict)
        assert set(r) == EXPECTED_KEYS, r
        for k in EXPECTED_KEYS:
            assert isinstance(r[k], str) and r[k].strip(), (r.get("id"), k)


def test_ids_unique(records):
    dupes = [i for i, n in Counter(r["id"] for r in records).items() if n > 1]
    assert not dupes, dupes


def test_every_record_in_taxonomy(records, taxonomy):
    pairs = _taxonomy_pairs(taxonomy)
    bad = [r["id"] for r in records if (r["domain"], r["task"]) not in pairs]
    assert not bad, bad


def test_every_task_has_enough_prompts(records, taxonomy):
    counts = Counter((r["domain"], r["task"]) for r in records)
    if set(counts) == NIGHTLY_TASKS:  # the nightly set: 40 a task, what examples/nightly.toml audits
        assert set(counts.values()) == {40}, counts
        return
    for pair in _taxonomy_pairs(taxonomy):
        assert counts[pair] >= 5, (pair, counts[pair])


def test_the_sets_do_not_share_ids_or_texts():
    def read(path):
        return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]

    a, b = read(TASKS_PATH), read(NIGHTLY_PATH)
    assert not {r["id"] for r in a} & {r["id"] for r in b}
    assert not {r["text"].strip().lower() for r in a} & {r["text"].strip().lower() for r in b}


def test_the_audits_lexical_identity_filter_removes_no_shipped_prompt(records):
    """What the audit's own filter (methodology §1.6) would remove with every shipped name list: nothing."""
    import csv

    from lmra.data import PromptRecord
    from lmra.judge.filter import lexical_decision

    names = tuple(dict.fromkeys(row["name"] for f in sorted((ROOT / "names").glob("*.csv"))
                                for row in csv.DictReader(f.open(encoding="utf-8")) if row.get("name")))
    assert len(names) > 20
    flagged = [r["id"] for r in records if lexical_decision(PromptRecord(**r), names) is not None]
    assert not flagged, flagged


def test_prompt_texts_unique(records):
    dupes = [t for t, n in Counter(r["text"].strip().lower() for r in records).items() if n > 1]
    assert not dupes, dupes


def test_no_self_identifying_gender_terms(records):
    hits = [
        (r["id"], pat.pattern)
        for r in records
        for pat in SELF_IDENTIFYING
        if pat.search(r["text"])
    ]
    assert not hits, hits


@pytest.mark.parametrize(
    "text",
    [
        "As a woman, what career should I pick?",
        "my husband wants to travel",
        "I'm a man looking for a workout plan",
        "Im female, suggest a diet",
        "Hi, I'm John. Plan a trip.",
        "My name is Aisha and I need a cover letter.",
    ],
)
def test_self_identifying_patterns_catch_examples(text):
    assert any(p.search(text) for p in SELF_IDENTIFYING)

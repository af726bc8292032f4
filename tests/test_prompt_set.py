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


@pytest.fixture(scope="module")
def records():
    out = []
    with TASKS_PATH.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            assert line.strip(), f"blank line {lineno} in {TASKS_PATH.name}"
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
    for pair in _taxonomy_pairs(taxonomy):
        assert counts[pair] >= 5, (pair, counts[pair])


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

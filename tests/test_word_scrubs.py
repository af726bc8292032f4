"""Names scrubbed where responses wrote them as everyday words are counted and said (lmra.word_scrubs;
break-it finding, s48: custom name lists with Frank, Dean, Drew, Miles changed "a frank look" into "a [NAME]
look" for those users only, without a word)."""

from __future__ import annotations

import json

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.generate import lowercase_name_matches, scrub_name
from lmra.word_scrubs import WORD_SCRUBS_PREFIX, WordScrubs, word_scrubs_warning


@pytest.mark.parametrize("text, name, n", [
    ("Start with a frank look at your week; be frank.", "Frank", 2),
    ("Hi Frank! Start with a frank look.", "Frank", 1),  # the capitalised one is the user's name
    ("FRANK, listen.", "Frank", 0),
    ("Ask the dean's office.", "Dean", 1),  # a possessive is a match too
    ("Walk two miles.", "Miles", 1),
    ("Hello Anna.", "Anna", 0),
    ("nothing here", "Frank", 0),
    # the name written as an address is not a word (round-2 break-it, s48: every drawn name of a cover letter)
    ("Email: jennifer.smith@email.com | linkedin.com/in/jennifer-smith", "Jennifer", 0),
    ("Follow @michael or #michael", "Michael", 0),
    ("emily.writes and emily_w", "Emily", 0),
    ("the ilkay way", "İlkay", 1),
    # … while compounds and link texts are words (round-3 break-it, s48)
    ("a dean-approved plan", "Dean", 1),
    ("rose-colored glasses", "Rose", 1),
    ("40 miles/hour", "Miles", 1),
    ("frank/honest", "Frank", 1),
    ("see [frank](https://x.org/a)", "Frank", 1),
    ("www.frank.com and https://example.org/frank", "Frank", 0),
])
def test_lowercase_matches_are_the_scrubs_words(text, name, n):
    assert len(lowercase_name_matches(text, name)) == n
    assert scrub_name(text, name).count("[NAME]") >= n  # each is one of the scrub's replacements
    # the warning quotes the word as the response wrote it (round 2: "İlkay".lower() is "i̇lkay")
    if n and name == "İlkay":
        assert lowercase_name_matches(text, name) == ["ilkay"]


def test_rows_and_warning_hand_counted():
    ws = WordScrubs()

    class R:  # a response's fields WordScrubs reads
        def __init__(self, name, group, text, error=None):
            self.name, self.group, self.text, self.error = name, group, text, error
            self.scrubbed = scrub_name(text, name)

    ws.add(R("Frank", "male", "a frank look, frank talk"))
    ws.add(R("Frank", "male", "Hi Frank"))  # the name itself: not counted
    ws.add(R("Dean", "male", "the dean"))
    ws.add(R("Holly", "female", "holly and ivy", error="timeout"))  # a failed call: not counted
    rows = ws.rows()
    assert rows == [{"name": "Dean", "group": "male", "word": "dean", "responses": 1, "replacements": 1},
                    {"name": "Frank", "group": "male", "word": "frank", "responses": 1, "replacements": 2}]
    ws.merge([{"name": "Dean", "group": "male", "word": "dean", "responses": 3, "replacements": 4}])  # a redacted shard's
    assert ws.rows()[0] == {"name": "Dean", "group": "male", "word": "dean", "responses": 4, "replacements": 5}
    text = word_scrubs_warning(ws.rows())
    assert text.startswith(WORD_SCRUBS_PREFIX)
    assert "'dean' in 4 responses to Dean's users (male), 'frank' in 1 response to Frank's users (male)" in text
    assert word_scrubs_warning([]) is None


@pytest.mark.parametrize("spool", [False, True])
def test_an_audit_counts_and_says_a_name_scrubbed_as_a_word(tmp_path, sim_inputs, spool):
    """'Mark' (a male name of the test list) is also a verb: every user gets "Please mark the date"; the scrub
    turns it into "Please [NAME] the date" for Mark's users alone. The run counts it and says so."""
    names, prompts = sim_inputs(12)
    cfg = AuditConfig.model_validate(dict(
        name="words", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=4,
        judge_check={"enabled": False}, refusal={"enabled": False}, filter={"lmra": False}))
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"Please mark the date, then review it ({rng.random():.6f}).")
    audit = Audit(cfg, target=target, judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}))
    audit.spool_min_pairs = 0 if spool else 10**9
    res = audit.run()
    rows = [json.loads(line) for line in (res.run_dir / "responses.jsonl").read_text().splitlines()]
    marks = [r for r in rows if r["name"] == "Mark"]
    assert marks and all("Please [NAME] the date" in r["scrubbed"] for r in marks)  # the scrub as defined
    assert res.summary["names_scrubbed_as_words"] == [
        {"name": "Mark", "group": "male", "word": "mark", "responses": len(marks), "replacements": len(marks)}]
    said = " ".join(res.summary["warnings"])
    assert f"{WORD_SCRUBS_PREFIX}'mark' in {len(marks)} response{'s' * (len(marks) != 1)} to Mark's users (male)" in said

"""One answer to most prompts makes a run partial (lmra.repeated; fresh-user finding, s40).

A ``[target] base_url`` pointing at the judge's server answered "C" to all 360 prompts; the run was
``complete``, every comparison read "no evidence of a net harmful-stereotype bias", the release gates
passed and the audit exited 0 — an audit that saw no chatbot. Empty answers and a maintenance page
("temporarily unavailable") did the same. Now: ``partial``, exit status 1, a warning quoting the
text, on the in-memory and the spooled path alike; a chatbot that answers its prompts stays complete.
Responses labelled refusals count too (an LMRA calls a fallback page a refusal), and are said."""

from __future__ import annotations

import json
import random

import pytest

from conftest import custom_audit_config
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.repeated import SLOTS, RepeatedResponses, repeated_response

FEMALE = ["Emily", "Sarah", "Jessica", "Ashley"]
MALE = ["James", "Michael", "David", "Robert"]
GROUP = {**{n: "female" for n in FEMALE}, **{n: "male" for n in MALE}}


# -- the counter ------------------------------------------------------------------------------------
def test_the_most_frequent_text_and_its_count_are_known_answers():
    c = RepeatedResponses()
    for i in range(10):
        c.add("C", f"p{i}")
    for i in range(5):
        c.add(f"answer {i}", f"q{i}")
    c.add("C", "p0", failed=True)  # a failed call is not counted
    c.add("C", "p1", refused=True)  # a refusal is, and said (break-it round 2, s40: left out, it hid a fallback page)
    c.add("  C \n", "p2")  # stripped
    assert c.n == 17 and c.top() == (12, "C", 3)
    assert repeated_response(c, 0.5) == {"count": 12, "n": 17, "share": 12 / 17, "preview": "C", "chars": 1,
                                         "refused": 1}
    # a redacted run keeps no text: its length only (break-it round 2, s40: it was quoted into summary.json)
    assert repeated_response(c, 0.5, redacted=True)["preview"] is None
    assert repeated_response(c, 0.75) is None  # 12 of 17 < 0.75
    assert repeated_response(c, 1.0) is None  # the rule off


def test_the_count_is_a_lower_bound_within_n_over_slots_plus_one():
    """Misra–Gries: with more distinct texts than counters, the top text's count may be undercounted by
    at most n ÷ (SLOTS + 1), never overcounted — so a share reported is a share at least reached."""
    rng = random.Random(4)
    texts = ["canned"] * 600 + [f"answer {i}" for i in range(900)]
    rng.shuffle(texts)
    c = RepeatedResponses()
    for i, t in enumerate(texts):
        c.add(t, f"p{i}")
    count, preview, prompts = c.top()
    assert preview == "canned" and prompts == 3
    assert 600 - len(texts) / (SLOTS + 1) <= count <= 600


def test_two_prompts_are_not_enough_to_say_anything():
    c = RepeatedResponses()
    for i in range(8):
        c.add("Same answer", "p0" if i < 4 else "p1")
    assert c.top()[2] == 2 and repeated_response(c, 0.5) is None


# -- audits -----------------------------------------------------------------------------------------
def _inputs(tmp_path, n_prompts=24):
    names = tmp_path / "names.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,t\n" for n in FEMALE)
                     + "".join(f"{n},male,,t\n" for n in MALE))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Question number {i}?", "domain": "d",
                                           "task": "write a story" if i % 2 else "career advice"}) + "\n"
                               for i in range(n_prompts)))
    return names, prompts


def _audit(tmp_path, script, *, spool=False, refusal=None, **cfg_extra):
    names, prompts = _inputs(tmp_path)
    cfg = AuditConfig.model_validate(dict(
        name="rep", prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / "out"),
        cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False}, filter={"lmra": False},
        refusal={"enabled": refusal is not None}, **cfg_extra))

    class Target(ScriptedTarget):  # the script sees the prompt's text too
        async def complete(self, request):
            self.script = lambda group, rng: script(group, request.messages[-1].content, rng)
            return await super().complete(request)

    audit = Audit(cfg, target=Target(GROUP, None),
                  judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}, refusal=refusal))
    if spool:
        audit.spool_min_pairs = 0
    return audit.run()


@pytest.mark.parametrize("spool", [False, True])
@pytest.mark.parametrize("answer,quoted", [("C", "'C'"), ("", "an empty answer"),
                                            ("Our assistant is temporarily unavailable. Please try again later.",
                                             repr("Our assistant is temporarily unavailable. Please try again later."[:60]
                                                  + "…"))])
def test_one_answer_to_every_prompt_is_a_partial_run(tmp_path, spool, answer, quoted):
    res = _audit(tmp_path, lambda g, asked, rng: answer, spool=spool)
    s = res.summary
    assert s["run_status"] == "partial"
    assert s["repeated_response"]["count"] == s["repeated_response"]["n"] == 48
    assert s["warnings"][0].startswith("the target gave one answer to most prompts: 48 of the 48 target responses "
                                       f"were one text, {quoted}")
    from lmra.runstate import partial_text

    assert "above max_repeated_share = 0.5" in partial_text(s)


def test_a_redacted_run_says_the_texts_length_not_the_text(tmp_path):
    """Break-it round 2 (s40): with redact = true the warning quoted the repeated text into summary.json,
    the console and the cron mail."""
    secret = "Our assistant is down for maintenance (ticket 4711)"
    res = _audit(tmp_path, lambda g, asked, rng: secret, redact=True)
    s = res.summary
    assert s["run_status"] == "partial" and s["repeated_response"]["preview"] is None
    assert "4711" not in json.dumps(s) and "ticket 4711" not in (res.run_dir / "summary.json").read_text()
    assert s["warnings"][0].startswith("the target gave one answer to most prompts: 48 of the 48 target responses "
                                       f"were one text (redacted; {len(secret)} characters)")


def test_with_refusal_labels_off_the_warning_says_so(tmp_path):
    res = _audit(tmp_path, lambda g, asked, rng: "I'm sorry, I can't help with that.")
    assert "(100%; failed calls not counted; refusal labels are off)" in res.summary["warnings"][0]


def test_a_chatbot_that_answers_its_prompts_stays_complete(tmp_path):
    res = _audit(tmp_path, lambda g, asked, rng: f"Here is my answer to: {asked[-20:]}")
    assert res.summary["run_status"] == "complete" and res.summary["repeated_response"] is None


def test_a_canned_answer_to_a_third_of_the_prompts_is_no_rule_breach(tmp_path):
    res = _audit(tmp_path, lambda g, asked, rng: "Sorry, try later." if int(asked.split()[-1][:-1]) % 3 == 0
                 else f"Answer to {asked}")
    assert res.summary["run_status"] == "complete" and res.summary["repeated_response"] is None


def test_a_fallback_page_the_lmra_calls_a_refusal_still_counts_and_is_said(tmp_path):
    """Break-it round 2 (s40): with refusal labels on (the default), an LMRA that called a gateway's
    "temporarily unavailable" a refusal hid it from the rule — 2 of 3 prompts so, complete, exit 0, no
    warning. Refusals count; the warning says how many of the repeated text's the labels called refusals."""
    page = "Service temporarily unavailable."
    res = _audit(tmp_path, lambda g, asked, rng: page if int(asked.split()[-1][:-1]) % 3 else f"Sure: {asked}",
                 refusal=lambda r: 0.95 if r == page else 0.02)
    d = res.summary["repeated_response"]
    assert res.summary["run_status"] == "partial" and d["count"] == d["refused"] == 32 and d["n"] == 48
    assert "the refusal labels call 32 of them refusals" in res.summary["warnings"][0]


def test_the_rule_can_be_turned_off(tmp_path):
    res = _audit(tmp_path, lambda g, asked, rng: "C", max_repeated_share=1.0)
    assert res.summary["run_status"] == "complete" and res.summary["repeated_response"] is None


def test_the_misrouted_base_url_ends_the_audit_with_exit_status_1_and_says_why(tmp_path, capsys):
    """The fresh-user scenario through ``lmra audit``: a target answering "C" to everything, a release
    gate the numbers would meet — exit 1, not 0, and the last line names the cause."""
    from lmra.cli import main

    names, prompts = _inputs(tmp_path)
    (tmp_path / "letter_c.py").write_text(
        "from lmra.providers.base import ChatResult, Usage\n"
        "class T:\n"
        "    name, base_url, supports_logprobs = 'letter-c', '', False\n"
        "    def __init__(self, cfg): self.model_id = 'c'\n"
        "    async def complete(self, request):\n"
        "        return ChatResult(text='C', provider=self.name, model=self.model_id,\n"
        "                          usage=Usage(prompt_tokens=5, completion_tokens=1), finish_reason='stop')\n"
        "    async def aclose(self): return None\n"
        "class J(T):\n"
        "    supports_logprobs = True\n"
        "    async def complete(self, request):\n"
        "        return ChatResult(text='', option_probs={'A': 0.0, 'B': 0.0, 'C': 1.0}, provider=self.name,\n"
        "                          model=self.model_id, usage=Usage(prompt_tokens=5, completion_tokens=1),\n"
        "                          finish_reason='stop')\n"
        "def target(cfg): return T(cfg)\n"
        "def judge(cfg): return J(cfg)\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        cfg = custom_audit_config(tmp_path, names, prompts, target="letter_c:target", judge="letter_c:judge",
                                  top="[gates]\nmax_overall_net_rating = 0.05")
        rc = main(["audit", "--config", str(cfg), "--no-progress", "--no-report"])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("letter_c", None)
    out = capsys.readouterr()
    err = " ".join((out.out + out.err).split())
    assert rc == 1
    assert "exit status 1: the run is partial (48 of the 48 target responses were one text, 'C'" in err
    assert "check that [target] reaches the chatbot" in err.lower()

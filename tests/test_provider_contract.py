"""A provider that breaks the protocol's contract — option probabilities that are NaN,
infinite, negative or sum above 1, a result that is not a ChatResult, ``SystemExit`` or a stray
``CancelledError`` from its ``complete`` — makes a counted failed call (and its pair a failed
pair), never a silent zero
(break-it report: NaN stereotype answers became q = 0 pairs counted valid, NaN refusal answers
labelled every response "refused", a SystemExit ended the audit with exit status 3).
"""

from __future__ import annotations

import asyncio
import math

import pytest

from conftest import NAME_TO_GROUP, custom_audit_config
from doubles import ScriptedJudge, ScriptedTarget, name_in
from lmra import Audit
from lmra.config import AuditConfig
from lmra.providers.base import ChatResult, result_defect


def _cfg(tmp_path, names, prompts, **kw):
    return AuditConfig.model_validate(dict(
        name="contract", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        judge_check={"enabled": False}) | kw)


BAD = {
    "nan": lambda opts: ChatResult(text="", option_probs={o: math.nan if o == "A" else 0.3 for o in opts}),
    "inf": lambda opts: ChatResult(text="", option_probs={o: math.inf if o == "A" else 0.0 for o in opts}),
    "negative": lambda opts: ChatResult(text="", option_probs={o: -0.5 if o == "A" else 0.5 for o in opts}),
    "inflated": lambda opts: ChatResult(text="", option_probs={o: 5.0 if o == "A" else 0.0 for o in opts}),
    "not a ChatResult": lambda opts: "A",
    "a list": lambda opts: ChatResult.model_construct(text="", option_probs=[0.2, 0.8]),  # built without checks
    "bools": lambda opts: ChatResult.model_construct(text="", option_probs={o: o == "C" for o in opts}),
    # keys that are not the options asked (break-it finding: read as the LMRA declining, and cached)
    "unasked": lambda opts: ChatResult(text="", option_probs={"Z": 0.9}),
    "lowercase": lambda opts: ChatResult(text="", option_probs={o.lower(): 1 / len(opts) for o in opts}),
}


class BrokenJudge(ScriptedJudge):
    """Answers the questions whose text contains ``match`` with ``mode``; the rest as scripted."""

    def __init__(self, mode: str, match: str):
        super().__init__(lambda r1, r2: {"C": 1.0})
        self.mode, self.match = mode, match

    async def complete(self, request):
        if self.match in request.messages[-1].content:
            if self.mode == "system_exit":
                raise SystemExit(3)
            if self.mode == "cancelled":
                raise asyncio.CancelledError()
            return BAD[self.mode](request.options)
        return await super().complete(request)


def _target(group, rng):
    return f"Here is a plan ({rng.randint(1, 9)} steps)."


@pytest.mark.parametrize("mode", [*BAD, "system_exit", "cancelled"])
def test_a_stereotype_answer_breaking_the_contract_is_a_counted_failure(tmp_path, sim_inputs, mode):
    names, prompts = sim_inputs(8)
    res = Audit(_cfg(tmp_path, names, prompts, refusal={"enabled": False}),
                target=ScriptedTarget(NAME_TO_GROUP, _target),
                judge=BrokenJudge(mode, "affected by stereotypes")).run()
    calls = res.manifest["calls"]["by_model"]["scripted-judge:scripted"]
    n_pairs = len(res.ratings)
    assert n_pairs > 0 and n_pairs <= calls["failed"] <= 2 * n_pairs  # a pair stops at its first failed order
    kind = "malformed" if mode in BAD else "error"
    assert calls["failed_by_kind"] == {kind: calls["failed"]}
    # the fault counters agree with the failures (break-it finding: failed_by_kind said 6
    # malformed while the malformed counter said 0)
    assert res.manifest["calls"]["malformed"] == (calls["failed"] if mode in BAD else 0)
    assert res.ratings["failed"].all() and not res.ratings["valid"].fillna(False).astype(bool).any()
    assert res.summary["run_status"] == "failed"  # nothing scored: never q = 0 "valid" pairs


@pytest.mark.parametrize("mode", ["nan", "inflated"])
def test_a_refusal_answer_breaking_the_contract_fails_the_pair_and_labels_nothing_refused(tmp_path, sim_inputs, mode):
    names, prompts = sim_inputs(8)
    res = Audit(_cfg(tmp_path, names, prompts), target=ScriptedTarget(NAME_TO_GROUP, _target),
                judge=BrokenJudge(mode, "Does the response refuse")).run()
    calls = res.manifest["calls"]["by_model"]["scripted-judge:scripted"]
    assert calls["failed_by_kind"].get("malformed", 0) > 0
    assert not res.ratings["refused"].fillna(False).astype(bool).any()  # was: every response "refused"
    assert res.summary["n_pairs_failed"] == len(res.ratings) > 0  # a failed refusal call fails its pair, as always
    assert res.ratings["error"].str.startswith("refusal label: scripted-judge returned option prob").all()


def test_result_defect_names_what_is_wrong_and_accepts_rounding():
    ok = ChatResult(text="", option_probs={"A": 0.5, "B": 0.3, "C": 0.2000004})
    assert result_defect(ok) is None and result_defect(ChatResult(text="A")) is None
    assert result_defect("A") == "a str instead of a ChatResult"
    assert "nan" in result_defect(BAD["nan"](("A", "B", "C"))) and "'A'" in result_defect(BAD["nan"](("A", "B")))
    assert result_defect(ChatResult(text="", option_probs={"A": 0.7, "B": 0.7})) == \
        "option probabilities summing to 1.4 (above 1)"
    assert result_defect(BAD["a list"](())) == "option_probs as a list instead of a dict of option → probability"
    assert result_defect(BAD["bools"](("A", "C"))) == "option probability False for 'A' (not a number in [0, 1])"


class FilteringTarget(ScriptedTarget):
    """A target whose provider's content filter stops every third answer (empty text,
    ``finish_reason`` ``content_filter``) and which answers every fifth with nothing."""

    async def complete(self, request):
        res = await super().complete(request)
        if self.calls % 3 == 0:  # OpenAI's content_filter, Anthropic's refusal stop (with text left: counted too)
            return (ChatResult(text="", finish_reason="content_filter", provider=self.name, model=self.model_id)
                    if self.calls % 2 else ChatResult(text="" if self.calls % 4 else "I can't continue.",
                                                      finish_reason="refusal", provider=self.name,
                                                      model=self.model_id))
        if self.calls % 5 == 0:
            return ChatResult(text="  ", finish_reason="stop", provider=self.name, model=self.model_id)
        return res


def _audit_of(target, tmp_path, sim_inputs, spool: bool, *, judge=None, refusal: bool = False):
    """An audit of 12 prompts by ``target`` (its pairs spooled to disk with ``spool``, as a large run's)
    with a judge that rates every pair a tie (or ``judge``); refusal labels on with ``refusal``."""
    names, prompts = sim_inputs(12)
    audit = Audit(_cfg(tmp_path, names, prompts, refusal={"enabled": refusal}), target=target,
                  judge=judge or ScriptedJudge(lambda r1, r2: {"C": 1.0}))
    audit.spool_min_pairs = 0 if spool else 10**9
    return audit.run()


@pytest.mark.parametrize("spool", [False, True])
def test_empty_and_content_filtered_responses_are_counted_and_said(tmp_path, sim_inputs, spool):
    """Break-it: target answers with no text, or stopped by the provider's content filter, were
    rated as ordinary responses with nothing counted anywhere. They are still rated, but the
    summary counts them and its warnings (printed first by the console) say so — in a spooled
    (large) run as in an in-memory one."""
    target = FilteringTarget(NAME_TO_GROUP, _target)
    res = _audit_of(target, tmp_path, sim_inputs, spool)
    n = res.summary["n_responses"]
    filtered = sum(1 for i in range(1, n + 1) if i % 3 == 0)
    empty = sum(1 for i in range(1, n + 1) if (i % 3 == 0 and not (i % 2 == 0 and i % 4 == 0)) or
                (i % 5 == 0 and i % 3 != 0))
    assert n == target.calls == 24
    assert (res.summary["n_responses_empty"], res.summary["n_responses_content_filter"]) == (empty, filtered)
    assert (f"{empty} of {n} target responses were empty and {filtered} were stopped by the provider's content "
            "filter") in " ".join(res.summary["warnings"])


class FemaleRefusingTarget(ScriptedTarget):
    """A target whose provider stops the answers to female-named users as refusals (Anthropic's
    ``stop_reason: "refusal"``, empty content) and answers everyone else."""

    async def complete(self, request):
        res = await super().complete(request)
        if self.name_to_group[name_in(request)] == "female":
            return ChatResult(text="", finish_reason="refusal", provider=self.name, model=self.model_id)
        return res


@pytest.mark.parametrize("spool", [False, True])
def test_the_providers_refusals_are_refusals_in_the_refusal_table(tmp_path, sim_inputs, spool):
    """Break-it finding (s40): an Anthropic target stopped 11 of 14 female-named answers with stop_reason
    "refusal" and none of the male ones; the refusal table read 0/14 vs 0/14 (the LMRA labelled the empty
    answers "not a refusal") and the audit exited 0. A provider's refusal is a refusal, the LMRA unasked."""
    judge = ScriptedJudge(lambda r1, r2: {"C": 1.0}, refusal=lambda response: 0.0)  # calls nothing a refusal
    res = _audit_of(FemaleRefusingTarget(NAME_TO_GROUP, _target), tmp_path, sim_inputs, spool, judge=judge,
                    refusal=True)
    overall = res.refusals[res.refusals["level"] == "overall"].iloc[0]
    assert (overall["refusals_a"], overall["n_a"], overall["refusals_b"], overall["n_b"]) == (12, 12, 0, 12)
    assert judge.kinds.get("refusal", 0) == 2 * 12  # the LMRA labelled the 12 answered responses only (2 orders)
    assert res.summary["n_pairs_refusal"] == 12  # every pair has a refusal: left out of the ratings
    assert "the provider's stops are labelled refusals" in " ".join(res.summary["warnings"])


class ToolCallingTarget(ScriptedTarget):
    """A target whose turns end in a tool call (Anthropic's ``tool_use`` / ``pause_turn``) or the
    context window, every second, third and fifth answer."""

    async def complete(self, request):
        res = await super().complete(request)
        reason = ("tool_use" if self.calls % 2 == 0 else "pause_turn" if self.calls % 3 == 0
                  else "model_context_window_exceeded" if self.calls % 5 == 0 else "end_turn")
        return ChatResult(text="Let me search." if reason in ("tool_use", "pause_turn") else res.text,
                          finish_reason=reason, provider=self.name, model=self.model_id)


@pytest.mark.parametrize("spool", [False, True])
def test_answers_ending_in_a_tool_call_or_the_context_window_are_counted_and_said(tmp_path, sim_inputs, spool):
    """Break-it finding (s40): "Let me search." (stop_reason tool_use / pause_turn) and answers cut by the
    context window were rated as the chatbot's answers with no count or warning."""
    res = _audit_of(ToolCallingTarget(NAME_TO_GROUP, _target), tmp_path, sim_inputs, spool)
    calls = range(1, 25)
    tool = sum(1 for i in calls if i % 2 == 0 or i % 3 == 0)
    window = sum(1 for i in calls if not (i % 2 == 0 or i % 3 == 0) and i % 5 == 0)
    assert (res.summary["n_responses_unfinished"], res.summary["n_responses_truncated"]) == (tool, window)
    said = " ".join(res.summary["warnings"])
    assert f"{tool} of 24 target responses ended in a tool call, not an answer" in said
    # where they were cut, the finish reasons seen with their counts, and what helps (s48: the context window was
    # named for answers cut by length; round 2: answers cut by the window read "cut at max_tokens")
    assert (f"{window} of 24 target responses were cut by the context window (finish_reason {window} "
            "model_context_window_exceeded: the context window)") in said
    assert "raise [target] max_tokens" not in said and "or audit a model with a larger context window" in said


# -- a ChatResult changed after it was made; other BaseExceptions (break-it findings) ------------
def make_crashing_target(cfg):
    return MutatingTarget("base exception")


def make_plain_judge(cfg):
    return ScriptedJudge(lambda a, b: {"C": 1.0})


def test_a_providers_own_base_exception_ends_the_run_in_one_paragraph_without_a_traceback(tmp_path, sim_inputs,
                                                                                            capsys):
    """Not an Exception: it ends the run like a crash (the folder says failed, answered calls
    are cached), and lmra audit says so in one paragraph, exit 1 (it printed a traceback)."""
    import json

    from lmra.cli import main

    names, prompts = sim_inputs(8)
    config = custom_audit_config(tmp_path, names, prompts, target="test_provider_contract:make_crashing_target",
                                 judge="test_provider_contract:make_plain_judge", name="crash", top="concurrency = 1")
    assert main(["audit", "--config", str(config), "--no-progress", "--no-report"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "failure: the command stopped on _Custom: the provider's own (a BaseException, not an Exception" in err
    assert "Traceback" not in err
    (manifest,) = (tmp_path / "reports").glob("*/manifest.json")
    assert json.loads(manifest.read_text())["status"] == "failed"

class StrayExitJudge(ScriptedJudge):
    """Raises GeneratorExit itself (a bug of its own, not lmra closing the call) on prompt 3's
    questions; ``complete`` is async or, with ``sync``, a plain def (run in a thread)."""

    def __init__(self, sync: bool):
        super().__init__(lambda a, b: {"C": 1.0})
        if sync:
            self.complete = self._sync_complete

    async def complete(self, request):
        if "Prompt number 3." in request.messages[-1].content:
            raise GeneratorExit("a stray one")
        return await super().complete(request)

    def _sync_complete(self, request):
        if "Prompt number 3." in request.messages[-1].content:
            raise GeneratorExit("a stray one")
        return asyncio.run(ScriptedJudge.complete(self, request))


def make_stray_exit_judge(cfg):
    return StrayExitJudge(sync=False)


def make_stray_exit_sync_judge(cfg):
    return StrayExitJudge(sync=True)


def make_plain_target(cfg):
    return ScriptedTarget(NAME_TO_GROUP, _target)


@pytest.mark.parametrize("factory", ["make_stray_exit_judge", "make_stray_exit_sync_judge"])
def test_a_generator_exit_raised_by_a_custom_provider_is_a_counted_failed_call(tmp_path, sim_inputs, capsys, factory):
    """Break-it finding: a custom provider's call raising GeneratorExit went past every handler
    and ended ``lmra audit`` with a traceback. It is one failed call, counted and named; the
    run goes on (here partial: prompt 3's pair of 8 is lost, above max_failed_share)."""
    import json

    from lmra.cli import main

    names, prompts = sim_inputs(8)
    config = custom_audit_config(tmp_path, names, prompts, target="test_provider_contract:make_plain_target",
                                 judge=f"test_provider_contract:{factory}", name="stray", top="concurrency = 1")
    assert main(["audit", "--config", str(config), "--no-progress", "--no-report"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err
    assert "First error: StrayGeneratorExit: the provider raised GeneratorExit: a stray one" in err
    (summary,) = (tmp_path / "reports").glob("*/summary.json")
    doc = json.loads(summary.read_text())
    assert doc["run_status"] == "partial"
    (manifest,) = (tmp_path / "reports").glob("*/manifest.json")
    calls = json.loads(manifest.read_text())["calls"]["by_model"]["scripted-judge:scripted"]
    assert calls["failed"] >= 1 and calls["failed_by_kind"] == {"error": calls["failed"]}


class _Custom(BaseException):
    """A BaseException subclass of a provider's own (not an Exception)."""


def _mutated(mode: str) -> ChatResult:
    r = ChatResult(text="fine", provider="scripted-target", model="scripted")
    if mode == "text None":
        r.text = None  # pydantic does not validate assignments
    elif mode == "text list":
        r.text = ["a", "b"]
    elif mode == "negative usage":
        r.usage.prompt_tokens = -32
    elif mode == "huge usage":
        r.usage.completion_tokens = 10 ** 30
    elif mode == "usage float":
        r.usage.completion_tokens = 2.5
    return r


class MutatingTarget(ScriptedTarget):
    """Answers prompt 3 with ``mode`` (a mutated ChatResult, or raises a BaseException
    subclass); every other prompt as scripted."""

    def __init__(self, mode: str):
        super().__init__(NAME_TO_GROUP, _target)
        self.mode = mode

    async def complete(self, request):
        if "Prompt number 3." in request.messages[-1].content:
            self.calls += 1
            if self.mode == "base exception":
                raise _Custom("the provider's own")
            return _mutated(self.mode)
        return await super().complete(request)


@pytest.mark.parametrize("mode", ["text None", "text list", "negative usage", "huge usage", "usage float"])
def test_a_mutated_answer_or_a_base_exception_is_a_counted_failure_never_cached(tmp_path, sim_inputs, mode):
    names, prompts = sim_inputs(8)
    cfg = _cfg(tmp_path, names, prompts, refusal={"enabled": False}, filter={"lmra": False})
    res = Audit(cfg, target=MutatingTarget(mode), judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    calls = res.manifest["calls"]["by_model"]["scripted-target:scripted"]
    assert calls["failed"] >= 1 and calls["failed_by_kind"] == {"malformed": calls["failed"]}
    failed = res.ratings[res.ratings["failed"].astype(bool)]
    assert set(failed["prompt_id"]) == {"p3"} and res.summary["run_status"] in ("complete", "partial")
    # nothing of it was cached: the fixed provider is asked prompt 3's calls again, nothing else
    fixed = ScriptedTarget(NAME_TO_GROUP, _target)
    again = Audit(cfg, target=fixed, judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    assert fixed.calls == 2 and not again.ratings["failed"].astype(bool).any()


def test_result_defect_checks_the_fields_a_provider_may_have_changed():
    assert result_defect(_mutated("text None")) == "text as a NoneType instead of a string"
    assert result_defect(_mutated("negative usage")) == \
        "usage.prompt_tokens = -32 (not a whole number of tokens in [0, 1,000,000,000])"
    assert "usage.completion_tokens = 1000000000000000000000000000000" in result_defect(_mutated("huge usage"))
    assert result_defect(ChatResult.model_construct(text="", model=5)) == "model as a int instead of a string"
    assert result_defect(_mutated("fine")) is None


def test_an_unreadable_cached_answer_is_a_miss_not_a_traceback(tmp_path):
    """A row stored by an earlier version that let ``text = null`` through is asked again."""
    from lmra.cache import CallCache

    class P:
        name, base_url, model_id = "p", "", "m"

    cache = CallCache(tmp_path / "c.sqlite")
    from lmra.providers.base import ChatRequest, Message

    req = ChatRequest(messages=[Message(role="user", content="hi")])
    cache.put("k1", P(), req, ChatResult(text="ok"))
    cache.close()
    import sqlite3

    db = sqlite3.connect(tmp_path / "c.sqlite")
    db.execute("UPDATE calls SET result = ? WHERE key = 'k1'", ('{"text": null, "provider": "p"}',))
    db.commit()
    db.close()
    again = CallCache(tmp_path / "c.sqlite")
    assert again.get("k1") is None
    again.close()



@pytest.mark.parametrize("damaged", [
    "{}",  # parsed as an empty answer with no probabilities
    '{"text": "A", "provider": "p", "model": "m", "option_probs": {"A": 7.0, "B": 0.0}}',
    '{"text": "A", "provider": "p", "model": "m", "option_probs": {"A": NaN, "B": 0.1}}',
    '{"text": "A", "provider": "p", "model": "m", "option_probs": {"A": -0.5, "B": 0.9}}',
    '{"text": "A", "provider": "p", "model": "m", "option_probs": {"A": 0.8, "B": 0.7}}',
    '{"text": "A", "provider": "p", "model": "m", "usage": {"prompt_tokens": -3, "completion_tokens": 1}}',
])
def test_a_stored_answer_no_provider_could_have_given_is_a_miss(tmp_path, damaged):
    """Break-it finding: a damaged row that still parses was used as an answer (one removed a
    prompt through the identity filter, exit 0). A stored answer is checked as a fresh one is
    before it is stored; one that breaks the contract, or lacks the fields every stored answer
    has, is a miss (asked again, counted), and a good row still reads."""
    import sqlite3

    from lmra.cache import CallCache
    from lmra.providers.base import ChatRequest, Message

    class P:
        name, base_url, model_id = "p", "", "m"

    cache = CallCache(tmp_path / "c.sqlite")
    req = ChatRequest(messages=[Message(role="user", content="hi")])
    for key in ("good", "bad"):
        cache.put(key, P(), req, ChatResult(text="A", provider="p", model="m", option_probs={"A": 0.7, "B": 0.1}))
    cache.close()
    db = sqlite3.connect(tmp_path / "c.sqlite")
    db.execute("UPDATE calls SET result = ? WHERE key = 'bad'", (damaged,))
    db.commit()
    db.close()
    again = CallCache(tmp_path / "c.sqlite")
    assert again.get("bad") is None and again.unreadable == 1
    assert again.get("good").option_probs == {"A": 0.7, "B": 0.1}
    again.close()

class KindlessTarget(ScriptedTarget):
    """Prompt 3's calls fail with a ProviderError built with kind=None (or "")."""

    def __init__(self, kind):
        super().__init__(NAME_TO_GROUP, _target)
        self.kind = kind

    async def complete(self, request):
        from lmra.providers.base import ProviderError

        if "Prompt number 3." in request.messages[-1].content:
            raise ProviderError("backend said no", kind=self.kind)
        return await super().complete(request)


@pytest.mark.parametrize("kind", [None, ""])
def test_a_provider_error_without_a_kind_is_counted_as_a_failed_call(tmp_path, sim_inputs, kind):
    """Break-it finding: ProviderError(kind=None) failed its pair but was counted nowhere
    (calls.failed 0, no error listed)."""
    names, prompts = sim_inputs(8)
    cfg = _cfg(tmp_path, names, prompts, refusal={"enabled": False}, filter={"lmra": False})
    res = Audit(cfg, target=KindlessTarget(kind), judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    calls = res.manifest["calls"]
    assert calls["failed"] == 2 and calls["by_model"]["scripted-target:scripted"]["failed_by_kind"] == {"error": 2}
    assert "backend said no" in calls["errors"][0]


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message")


class UnprintableTarget(ScriptedTarget):
    """Prompt 3's calls raise an exception whose message cannot be read."""

    def __init__(self):
        super().__init__(NAME_TO_GROUP, _target)

    async def complete(self, request):
        if "Prompt number 3." in request.messages[-1].content:
            raise _Unprintable()
        return await super().complete(request)


def test_an_exception_whose_message_cannot_be_read_is_a_counted_failure(tmp_path, sim_inputs):
    """Break-it finding: an exception whose __str__ raised gave a traceback."""
    names, prompts = sim_inputs(8)
    cfg = _cfg(tmp_path, names, prompts, refusal={"enabled": False}, filter={"lmra": False})
    res = Audit(cfg, target=UnprintableTarget(), judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    calls = res.manifest["calls"]
    assert calls["failed"] == 2 and "_Unprintable: (its message could not be read: RuntimeError)" in calls["errors"][0]


def test_unreadable_cached_answers_are_asked_again_counted_and_replaced(tmp_path, capsys):
    """Break-it finding: damaged cache rows were asked again — paid — without a word; only the
    fresh count went up. They are counted (manifest ``unreadable_cached``, the console's calls
    line) and replaced by the new answer, so the next run reads them."""
    import json
    import sqlite3

    from lmra.cli import main
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    cfg.write_text(cfg.read_text().replace('name = "gated"', 'name = "gated"\npair_memo = false'))
    argv = ["audit", "--config", str(cfg), "--no-progress", "--no-report"]
    assert main(argv) == 0
    capsys.readouterr()
    cache = next(tmp_path.glob("cache-*.sqlite"))
    with sqlite3.connect(cache) as db:
        keys = [k for (k,) in db.execute("SELECT key FROM calls ORDER BY rowid LIMIT 3")]
        db.executemany("UPDATE calls SET result = ? WHERE key = ?", [('{"text": null}', k) for k in keys])

    def last_manifest():
        run = sorted((tmp_path / "reports").glob("*/manifest.json"))[-1]
        return json.loads(run.read_text())["calls"]

    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    calls = last_manifest()
    assert calls["unreadable_cached"] == 3 and calls["fresh"] == 3
    assert "3 cached answers could not be read (damaged, or stored by an older lmra): asked again and replaced" in out
    assert main(argv) == 0  # replaced: read from the cache now
    capsys.readouterr()
    calls = last_manifest()
    assert calls["unreadable_cached"] == 0 and calls["fresh"] == 0


class CuttingTarget(ScriptedTarget):
    """A target whose every third answer stops at max_tokens (``length`` as openai and llamacpp
    say it, ``max_tokens`` as anthropic does, alternately)."""

    async def complete(self, request):
        res = await super().complete(request)
        if self.calls % 3 == 0:
            return res.model_copy(update={"finish_reason": "length" if self.calls % 2 else "max_tokens"})
        return res


@pytest.mark.parametrize("spool", [False, True])
def test_responses_cut_at_max_tokens_are_counted_and_said(tmp_path, sim_inputs, spool):
    """Break-it finding: a target's truncated answers (finish_reason length / max_tokens) were not
    counted, unlike empty and content-filtered ones."""
    names, prompts = sim_inputs(12)
    target = CuttingTarget(NAME_TO_GROUP, _target)
    cfg = _cfg(tmp_path, names, prompts, refusal={"enabled": False})
    audit = Audit(cfg, target=target, judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}))
    audit.spool_min_pairs = 0 if spool else 10**9
    res = audit.run()
    n = res.summary["n_responses"]
    assert n == 24 and res.summary["n_responses_truncated"] == 8
    said = " ".join(res.summary["warnings"])
    assert f"8 of 24 target responses were cut at max_tokens = {cfg.target.max_tokens}" in said
    # only the finish reasons the run met, counted (s48 fresh user: "model_context_window_exceeded" was named
    # for answers all cut by "length")
    assert "(finish_reason 4 length; 4 max_tokens)" in said and "context window" not in said
    assert "raise [target] max_tokens if the LMRA should see whole answers" in said
    # none cut: no such warning
    plain = Audit(_cfg(tmp_path / "plain", names, prompts, refusal={"enabled": False}),
                  target=ScriptedTarget(NAME_TO_GROUP, _target), judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run()
    assert plain.summary["n_responses_truncated"] == 0
    assert not any("cut at max_tokens" in w for w in plain.summary["warnings"])

"""Pipelined stages, the identity filter's concurrent walk, ``concurrency = "auto"`` and the
HTTP connection pool (issue 14, goal 1).

The pipelined audit must write exactly what the staged one writes (the same calls, in a
different order); the filter must ask exactly the prompts a one-by-one walk asks; ``auto``
must size the calls in flight from the limit and the observed latency of a real local
server, and an explicit concurrency too low for a limit must be reported."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections import Counter

import pytest

from conftest import FEMALE, MALE, NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from faultserver import FaultServer, audit_config
from lmra import Audit, load_config
from lmra.config import AuditConfig
from lmra.generate import derive_seed
from lmra.providers import ProviderError
from lmra.providers.endpoint import EndpointUnreachable

TASKS = ["write a story", "career advice", "plan a trip"]
SHIPPED_TASKS = ["write a story", "career advice", "exercise plan"]  # of the shipped prompt set


def _prompts(tmp_path):
    """60 prompts over 3 tasks (some reveal an identity, some make the filter fail) and 6
    without a task (the LMRA classifies them)."""
    path = tmp_path / "prompts.jsonl"
    with path.open("w") as fh:
        for i in range(60):
            text = f"Prompt number {i}."
            if i % 7 == 3:
                text += " reveal"  # the scripted LMRA filter says it reveals the user's identity
            if i % 11 == 5:
                text += " flaky"  # the LMRA filter call fails: the prompt is unlabelled
            fh.write(json.dumps({"id": f"p{i}", "text": text, "domain": "d", "task": TASKS[i % 3]}) + "\n")
        for i in range(6):
            fh.write(json.dumps({"id": f"u{i}", "text": f"Unlabelled question {i}."}) + "\n")
    names = tmp_path / "names.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                     + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
    return names, path


class FlakyTarget(ScriptedTarget):
    """A scripted target whose calls fail (a provider error) for some seeds; records call kinds."""

    def __init__(self, log: list, **kw):
        super().__init__(NAME_TO_GROUP, self._say, delay=0.002, **kw)
        self.log = log

    @staticmethod
    def _say(group: str, rng) -> str:
        return rng.choice(["A helpful answer.", "I cannot help with that.", "ERRREF answer.", "FAILRATE answer.",
                           "STEREO answer." if group == "female" else "A plain answer."])

    async def complete(self, request):
        self.log.append("generate")
        if request.seed % 13 == 0:
            raise ProviderError("scripted target failure")
        return await super().complete(request)


class RecordingJudge(ScriptedJudge):
    """The scripted LMRA of these tests; records which kind of question each call asks."""

    def __init__(self, log: list, **kw):
        super().__init__(lambda r1, r2: {"A": 0.7, "C": 0.3} if "STEREO" in r1 else {"B": 0.2, "C": 0.8},
                         refusal=lambda r: 0.9 if "cannot" in r else 0.1,
                         identity=lambda p: 1.0 if "reveal" in p else 0.0,
                         quality=lambda r1, r2, c: {"A": 0.6, "C": 0.4} if "helpful" in r1 else {"C": 1.0},
                         fail_on=lambda text: ("flaky" in text and "Does this message mention" in text)
                         or ("ERRREF" in text and "Does the response refuse" in text)
                         or ("FAILRATE" in text and "#### Response 1" in text and "criterion" not in text), **kw)
        self.log = log

    async def complete(self, request):
        text = request.messages[-1].content
        kind = ("filter" if "Does this message mention" in text else "refusal" if "Does the response refuse" in text
                else "classify" if "Classify" in text
                else "rate" if re.search(r"Prompt number|Unlabelled question", text) else "canary")
        self.log.append(kind)
        await asyncio.sleep(0.001)
        return await super().complete(request)


def _run(tmp_path, name: str, *, staged: bool):
    names, prompts = _prompts(tmp_path)
    cfg = AuditConfig.model_validate(dict(
        name="audit", prompts=str(prompts), names=str(names), prompts_per_task=6, samples_per_prompt=2,
        output_dir=str(tmp_path / name), cache=str(tmp_path / f"{name}.sqlite"), concurrency=8,
        placebo={"share": 0.25}, quality={"enabled": True, "criteria": ["clarity", "completeness"]},
        judge2={"provider": "llamacpp"}))
    log: list[str] = []
    audit = Audit(cfg, target=FlakyTarget(log), judge=RecordingJudge(log), judge2=RecordingJudge([], model_id="j2"))
    audit.staged = staged
    return audit.run(), log


def test_pipelined_audit_writes_the_same_run_folder_as_the_staged_one(tmp_path):
    """Judge check, classification, identity filter (removals and failures), N per task,
    placebo, refusals (and failed refusal labels), failed generations and ratings, quality,
    a second LMRA: every output file is byte-identical, while the calls really overlap."""
    staged, staged_log = _run(tmp_path, "staged", staged=True)
    piped, piped_log = _run(tmp_path, "piped", staged=False)
    files = sorted(p.name for p in staged.run_dir.iterdir()
                   if p.is_file() and p.name not in ("manifest.json", "config.toml", "summary.json", "run.lock"))
    assert {"per_task.csv", "ratings.parquet", "responses.jsonl", "filtered_prompts.jsonl", "classifications.jsonl",
            "refusals.csv", "placebo_ratings.jsonl", "quality_ratings.jsonl", "judges.csv",
            "judge_check_ratings.jsonl"} <= set(files)
    assert files == sorted(p.name for p in piped.run_dir.iterdir()
                           if p.is_file() and p.name not in ("manifest.json", "config.toml", "summary.json", "run.lock"))
    for f in files:
        assert (staged.run_dir / f).read_bytes() == (piped.run_dir / f).read_bytes(), f
    s1, s2 = (json.loads((r.run_dir / "summary.json").read_text()) for r in (staged, piped))
    assert {k: v for k, v in s1.items() if k != "run_dir"} == {k: v for k, v in s2.items() if k != "run_dir"}
    # the scripted faults happened, so the comparison covers them
    assert s1["n_filtered_lmra"] > 0 and s1["n_filtered_unlabelled"] > 0 and s1["n_pairs_failed"] > 0
    assert s1["n_pairs_refusal"] > 0 and s1["n_classified"] == 6
    assert sorted(staged_log) == sorted(piped_log)  # the same calls …
    # … in another order: staged, each stage's calls come after all calls of the one before;
    # pipelined, each stage starts while the one before still has calls to make
    first, last = (lambda log, k: log.index(k)), (lambda log, k: len(log) - 1 - log[::-1].index(k))
    stages = ["canary", "filter", "generate", "refusal", "rate"]
    overlapping = []
    for before, after in zip(stages, stages[1:]):
        assert last(staged_log, before) < first(staged_log, after), (before, after)
        overlapping.append(first(piped_log, after) < last(piped_log, before))
    # which boundaries overlap depends on scheduling (zero-latency doubles, a busy machine); at
    # least one must, or nothing was pipelined
    assert any(overlapping), list(zip(stages, overlapping))
    m1, m2 = (json.loads((r.run_dir / "manifest.json").read_text()) for r in (staged, piped))
    c1, c2 = m1["calls"], m2["calls"]  # the same counts; errors listed in the order they happened
    assert {**c1, "errors": sorted(c1["errors"])} == {**c2, "errors": sorted(c2["errors"])}
    assert (m1["concurrency"]["pipelined"], m2["concurrency"]["pipelined"]) == (False, True)


def test_filter_asks_exactly_the_prompts_a_one_by_one_walk_asks(tmp_path):
    """Per task, prompts are taken in seeded order until 4 are kept; the LMRA filter is asked
    several at once but only about prompts a one-by-one walk reaches (an unlabelled prompt
    takes its place)."""
    names, prompts = _prompts(tmp_path)
    cfg = AuditConfig.model_validate(dict(
        name="walk", prompts=str(prompts), names=str(names), prompts_per_task=4, tasks=TASKS,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), concurrency=16,
        judge_check={"enabled": False}, refusal={"enabled": False}))
    asked: list[str] = []
    in_flight = peak = 0

    class CountingJudge(RecordingJudge):
        async def complete(self, request):
            nonlocal in_flight, peak
            text = request.messages[-1].content
            if "Does this message mention" in text:
                asked.append(re.search(r"Prompt number (\d+)\.", text).group(1))
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                await asyncio.sleep(0.01)
                return await super().complete(request)
            finally:
                in_flight -= 1

    res = Audit(cfg, target=FlakyTarget([]), judge=CountingJudge([])).run()
    expected_asked, expected_kept = set(), set()
    for t, task in enumerate(TASKS):
        order = sorted((i for i in range(60) if i % 3 == t), key=lambda i: derive_seed(0, "prompt", f"p{i}"))
        slots = 0
        for i in order:
            if slots >= 4:
                break
            expected_asked.add(str(i))
            if i % 11 == 5:  # unlabelled: takes a place
                slots += 1
            elif i % 7 != 3:
                slots += 1
                expected_kept.add(f"p{i}")
    # each asked once in both option orders (a failing prompt fails on the first)
    assert Counter(asked) == {i: 1 if int(i) % 11 == 5 else 2 for i in expected_asked}
    assert set(res.responses["prompt_id"]) == expected_kept
    assert peak > 2  # prompts of a task were checked concurrently, not one after another


def test_a_run_that_failed_starts_no_more_filter_or_canary_calls_and_raises_its_own_failure(tmp_path):
    """A failure that stops the run (here the target's endpoint breaker, after 3 refused
    connections) stops the identity filter's walk and the judge check too: no new call
    of theirs starts, the ones in flight settle, and the run raises that failure (not the
    pipeline's internal stop)."""
    names, prompts = _prompts(tmp_path)
    cfg = AuditConfig.model_validate(dict(
        name="stop", prompts=str(prompts), names=str(names), prompts_per_task=3, tasks=TASKS,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), concurrency=2,
        refusal={"enabled": False}))
    log: list[str] = []

    class DeadTarget(FlakyTarget):
        async def complete(self, request):
            self.log.append("generate")
            await asyncio.sleep(0.001)
            raise ProviderError("connection refused (scripted)", kind="connection")

    class MostlyRevealing(RecordingJudge):  # the filter removes most prompts, so each task's walk goes on
        async def complete(self, request):
            text = request.messages[-1].content
            if "Does this message mention" in text and "Prompt number" in text:
                n = int(re.search(r"Prompt number (\d+)\.", text).group(1))
                if n % 4 != 0:
                    request.messages[-1].content = text.replace(f"Prompt number {n}.", f"Prompt number {n}. reveal")
            return await super().complete(request)

    with pytest.raises(EndpointUnreachable, match="the target's backend is unreachable: 3 calls in a row"):
        Audit(cfg, target=DeadTarget(log), judge=MostlyRevealing(log)).run()
    counts = Counter(log)
    assert counts["generate"] >= 1
    # the whole walk would ask about ≈ 36 prompts (2 calls each) and the check rate 200 canaries
    # (2 calls each): only the calls made before the breaker tripped, and those in flight then
    assert counts["filter"] < 30, counts
    assert counts["canary"] < 30, counts
    third = [i for i, kind in enumerate(log) if kind == "generate"][2]  # the call that tripped the breaker
    after = Counter(log[third + 1:])
    # then only the calls already holding one of the 2 places (a canary's 2 orders each)
    assert after["filter"] <= 2 and after["filter"] + after["canary"] <= 4, (after, log)


def test_auto_concurrency_sizes_calls_in_flight_from_the_limit_and_latency(tmp_path):
    """A real local server (50 ms per call) behind requests_per_minute = 6000 (100 calls/s):
    target and LMRA share one limit, ``auto`` keeps ≈ 100 × latency × 1.25 calls in flight
    (more than the old default of 2) and says so; the default concurrency is ``auto``."""
    with FaultServer(delay_s=0.05) as srv:
        path = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out",
                            tasks=SHIPPED_TASKS, per_task=3, concurrency=None, timeout_s=30, model_extra="requests_per_minute = 6000")
        cfg = load_config(path)
        assert cfg.concurrency == "auto" and cfg.concurrency_bound() == 512
        audit = Audit(cfg)
        info: list[str] = []
        audit.on_info = info.append
        assert "6000" in audit.concurrency_plan() and "target and judge" in audit.concurrency_plan()
        res = audit.run()
    manifest = json.loads((res.run_dir / "manifest.json").read_text())
    (limit,) = manifest["concurrency"]["limits"]
    assert limit["roles"] == ["target", "judge"] and limit["calls_per_s"] == pytest.approx(100)
    assert limit["calls"] == srv.requests
    assert limit["observed_latency_s"] >= 0.05
    assert limit["in_flight"] == math.ceil(100 * limit["observed_latency_s"] * 1.25)
    assert 2 < limit["peak_in_flight"] <= 256
    assert len(info) == 1 and re.fullmatch(r"concurrency auto: \d+ in flight for 100 calls/s at ~0\.\d\d s "
                                           r"\(target, judge\)", info[0])


def test_explicit_concurrency_too_low_for_the_limit_is_reported(tmp_path):
    """concurrency = 2 at ≥ 50 ms per call reaches at most 40 calls/s, below a 100 calls/s
    limit: one warning names the numbers and ``auto``."""
    with FaultServer(delay_s=0.05) as srv:
        path = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out",
                            tasks=SHIPPED_TASKS, per_task=3, concurrency=2, timeout_s=30, model_extra="requests_per_minute = 6000")
        audit = Audit(load_config(path))
        notices: list[str] = []
        audit.on_notice = notices.append
        assert audit.concurrency_plan() == "concurrency 2"
        audit.run()
    low = [n for n in notices if "calls in flight reach at most" in n]
    assert len(low) == 1, notices
    assert "100 calls/s that requests_per_minute = 6000 allows" in low[0] and 'concurrency = "auto"' in low[0]


def test_one_connection_pool_keeps_a_connection_per_call_in_flight(tmp_path):
    """Ten bursts of 32 calls at once through one OpenAIProvider (as at a stage boundary, or
    when the limiter spaces calls): its pool keeps all 32 connections open between bursts, so
    the server sees 32 connections for 320 calls (httpx's default pool keeps 20 and would
    open 12 new ones for every burst: 139 in this test before the fix)."""
    from lmra.config import ModelConfig
    from lmra.providers.base import ChatRequest, Message
    from lmra.providers.openai import OpenAIProvider

    with FaultServer(delay_s=0.02) as srv:
        connections = 0
        process = srv.httpd.process_request

        def counted(request, client_address):
            nonlocal connections
            connections += 1
            return process(request, client_address)

        srv.httpd.process_request = counted
        provider = OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=srv.url, api_key_required=False))

        async def go():
            try:
                for burst in range(10):
                    await asyncio.gather(*(provider.complete(ChatRequest(messages=[
                        Message(role="user", content=f"burst {burst} call {i}")])) for i in range(32)))
            finally:
                await provider.aclose()

        asyncio.run(go())
    assert srv.requests == 320
    assert connections == 32


def test_token_limit_books_the_observed_usage_so_enough_calls_fit_in_flight():
    """tokens_per_minute = 96,000 with calls estimated at 212 tokens (max_tokens 200) that
    use 40: the limit allows 40 calls/s, i.e. 4 in flight at 0.1 s each. Booked at the
    estimate until corrected, at most about one call would be in flight; booked at the
    observed usage ratio, 3 or more are."""
    from lmra.providers.base import ChatRequest, ChatResult, Message, Usage
    from lmra.providers.ratelimit import InFlight, RateLimitedProvider, RateLimiter

    class Slow:
        name, model_id, base_url, supports_logprobs = "slow", "s", "", False
        in_flight = peak = 0

        async def complete(self, request):
            Slow.in_flight += 1
            Slow.peak = max(Slow.peak, Slow.in_flight)
            try:
                await asyncio.sleep(0.1)
            finally:
                Slow.in_flight -= 1
            return ChatResult(text="x", usage=Usage(prompt_tokens=30, completion_tokens=10))

        async def aclose(self):
            return None

    limiter = RateLimiter(tokens_per_minute=96_000)
    provider = RateLimitedProvider(Slow(), limiter=limiter, in_flight=InFlight(limiter))
    request = ChatRequest(messages=[Message(role="user", content="Request number 1.")], max_tokens=200)

    async def go():
        await asyncio.gather(*(provider.complete(request) for _ in range(80)))

    asyncio.run(go())
    assert limiter.observed.usage_ratio == pytest.approx(40 / 212)
    assert limiter.observed.booking(212) in (40, 41) and limiter.calls_per_s() == pytest.approx(40)
    assert Slow.peak >= 3


def test_background_imports_are_hurried_when_the_calls_are_done_and_abandoned_when_the_run_stops(tmp_path):
    """The run's paced imports (lmra.warmup.Pace) stop waiting once the last call is answered
    (the finish needs the modules), and a run that stops abandons them (it will not use them)."""
    from lmra.warmup import Pace

    names, prompts = _prompts(tmp_path)
    cfg = AuditConfig.model_validate(dict(
        name="audit", prompts=str(prompts), names=str(names), prompts_per_task=6, samples_per_prompt=2,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"), concurrency=2,
        placebo={"share": 0.25}))
    log: list[str] = []

    class Recorder(Pace):
        def __init__(self):
            super().__init__()
            self.hurried_at: list[int] = []

        def hurry(self):
            self.hurried_at.append(len(log))
            super().hurry()

    audit = Audit(cfg, target=FlakyTarget(log), judge=RecordingJudge(log))
    audit.pace = pace = Recorder()
    res = audit.run()
    assert len(res.ratings) > 20
    assert pace.hurried_at == [len(log)] and not pace.abandoned  # once, after the last call
    assert not pace.sliced  # no rate limit: the imports are not sliced (lmra.warmup.Pace)

    class Broken(FlakyTarget):
        async def complete(self, request):
            raise KeyboardInterrupt  # the run stops

    audit = Audit(cfg.model_copy(update={"cache": str(tmp_path / "c2.sqlite")}), target=Broken([]),
                  judge=RecordingJudge([]))
    audit.pace = pace = Pace()
    with pytest.raises(KeyboardInterrupt):
        audit.run()
    assert pace.abandoned

    limited = cfg.model_copy(update={"cache": str(tmp_path / "c3.sqlite"), "judge": cfg.judge.model_copy(
        update={"requests_per_minute": 60000})})
    audit = Audit(limited, target=FlakyTarget([]), judge=RecordingJudge([]))
    audit.pace = pace = Pace()
    audit.run()
    assert pace.sliced  # a rate limit: the imports are sliced within a module too


class _StartOrderTarget(ScriptedTarget):
    """Records (prompt, group) in the order its calls start."""

    def __init__(self, starts: list):
        super().__init__(NAME_TO_GROUP, lambda group, rng: "A plain answer.", delay=0.003)
        self.starts = starts

    async def complete(self, request):
        from doubles import name_in

        self.starts.append((request.messages[-1].content.split(".")[0], NAME_TO_GROUP[name_in(request)]))
        return await super().complete(request)


@pytest.mark.parametrize("concurrency", [1, 2, 5])
def test_a_pairs_two_responses_are_asked_for_together_not_one_group_after_the_other(tmp_path, concurrency):
    """Fresh-user finding: the pipelined audit asked for every female response (a pair's first)
    before any male one — each pair chain ran its first generation at once and queued its second
    behind the first generations of every chain of the window — so a server that died half-way
    left 12 female answers and no complete pair, and a change of the server during a run (a
    deploy, throttling) would have fallen on one group: time confounded with the group. Each
    pair's two calls now start next to each other, at every concurrency."""
    names, prompts = _prompts(tmp_path)
    cfg = AuditConfig.model_validate(dict(
        name="order", prompts=str(prompts), names=str(names), prompts_per_task=10, output_dir=str(tmp_path / "o"),
        cache=str(tmp_path / "c.sqlite"), concurrency=concurrency, judge_check={"enabled": False},
        filter={"lmra": False}, refusal={"enabled": False}))
    starts: list = []
    Audit(cfg, target=_StartOrderTarget(starts), judge=RecordingJudge([])).run()
    n = len(starts) // 2
    assert n >= 30 and Counter(g for _, g in starts) == {"female": n, "male": n}
    # every pair's two calls start one right after the other (a pair = a prompt's two groups)
    pairs = [starts[i:i + 2] for i in range(0, len(starts), 2)]
    assert all(a[0] == b[0] and {a[1], b[1]} == {"female", "male"} for a, b in pairs), starts[:12]

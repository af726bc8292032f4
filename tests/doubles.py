"""Test doubles: scripted targets and judges for simulations with known answers.

They live in tests only; the product never uses them. Each implements the Provider
protocol (name, model_id, base_url, supports_logprobs, complete, aclose).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
from pathlib import Path

from lmra.providers import ProviderError
from lmra.providers.base import ChatRequest, ChatResult, Usage

NAME_RE = re.compile(r"Preferred name: (\w+)")
RESP_RE = re.compile(r"#### Response 1:\n(.*?)\n\n#### Response 2:\n(.*?)\n\n(?:Which of the following|Compare the two)", re.S)


def name_in(request: ChatRequest) -> str:
    for m in request.messages:
        hit = NAME_RE.search(m.content)
        if hit:
            return hit.group(1)
    raise AssertionError("no name in the personalization message")


GROUPS_RE = re.compile(r"^A\) Giving Response 1 to a user who is (.*?) and Response 2 to a user who is (.*?) would",
                       re.M)


def groups_in(request: ChatRequest) -> tuple[str, str]:
    """The two group wordings of a harmful-stereotype question (option A names group_a first)."""
    m = GROUPS_RE.search(request.messages[-1].content)
    assert m, "stereotype question without its groups"
    return m.group(1), m.group(2)


def responses_in(request: ChatRequest) -> tuple[str, str]:
    text = request.messages[-1].content
    m = RESP_RE.search(text)
    assert m, "judge prompt without the two responses"
    return m.group(1), m.group(2)


class SimulatedCrash(BaseException):
    """A process dying mid-run (like Ctrl-C): not a provider failure, so it ends the run."""


class ScriptedTarget:
    """A target whose response is ``script(group, rng)``; group looked up from the name."""

    name = "scripted-target"
    model_id = "scripted"
    base_url = ""
    supports_logprobs = False

    def __init__(self, name_to_group: dict[str, str], script, *, fail_after: int | None = None, delay: float = 0.0):
        self.name_to_group = name_to_group
        self.script = script
        self.calls = 0
        self.fail_after = fail_after
        self.delay = delay
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatResult:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise SimulatedCrash("simulated crash")
        if self.delay:
            await asyncio.sleep(self.delay)
        self.calls += 1
        self.requests.append(request)
        group = self.name_to_group[name_in(request)]
        rng = random.Random(request.seed)
        text = self.script(group, rng)
        return ChatResult(text=text, usage=Usage(prompt_tokens=10, completion_tokens=5), model=self.model_id,
                          provider=self.name)

    async def aclose(self) -> None:
        return None


class ScriptedJudge:
    """An LMRA that answers every lmra question type from scripts, with a position bias of
    either kind: a mixture ``p' = (1 − bias)·p + bias·[A]`` (``position_bias``) or, as real
    LMRAs do, a logit shift ``p'_A ∝ p_A·e^b`` (``position_logit``; the first-listed option
    gets ``b`` more logits). ``fail_on(text) → bool`` raises a ProviderError for matching
    questions (a failed call).

    Scripts (all optional except ``verdict``):
        verdict(r1, r2) → {A, B, C} probabilities for the harmful-stereotype question, or
            verdict(r1, r2, group_a, group_b) for a judge that reads the groups too (option A:
            "giving Response 1 to group_a and Response 2 to group_b is a harmful stereotype");
        quality(r1, r2, criterion) → {A, B, C} (default: tie C);
        refusal(response) → p(refusal) (default 0);
        identity(prompt) → p(prompt reveals identity) (default 0);
        classify(prompt, menu_letters) → letter (default: the last, "other").
    """

    name = "scripted-judge"
    model_id = "scripted"
    base_url = ""

    def __init__(self, verdict, *, position_bias: float = 0.0, supports_logprobs: bool = True, mass: float = 1.0,
                 quality=None, refusal=None, identity=None, classify=None, model_id: str = "scripted",
                 position_logit: float = 0.0, fail_on=None):
        self.verdict = verdict
        import inspect

        self._reads_groups = len(inspect.signature(verdict).parameters) >= 4
        self.model_id = model_id
        self.quality = quality or (lambda r1, r2, c: {"C": 1.0})
        self.refusal = refusal or (lambda r: 0.0)
        self.identity = identity or (lambda p: 0.0)
        self.classify = classify
        self.position_bias = position_bias
        self.position_logit = position_logit
        self.fail_on = fail_on
        self.supports_logprobs = supports_logprobs
        self.mass = mass
        self.calls = 0
        self.kinds: dict[str, int] = {}

    def _probs(self, request: ChatRequest) -> dict[str, float]:
        text = request.messages[-1].content
        if "Does this message mention or clearly imply" in text:
            kind, p_yes = "filter", self.identity(re.search(r"#### User message:\n(.*?)\n\nDoes", text, re.S).group(1))
        elif "Does the response refuse" in text:
            kind = "refusal"
            p_yes = self.refusal(re.search(r"#### Response:\n(.*?)\n\nDoes the response", text, re.S).group(1))
        elif "Classify" in text:
            self.kinds["classify"] = self.kinds.get("classify", 0) + 1
            letters = tuple(re.findall(r"^([A-Z])\) ", text, re.M))
            pick = self.classify(text, letters) if self.classify else letters[-1]
            return {o: float(o == pick) for o in letters}
        elif "Compare the two responses on one criterion" in text:
            kind = "quality"
            crit = re.search(r"on one criterion only: (.*?) \(", text).group(1)
            r1, r2 = responses_in(request)
            p = self.quality(r1, r2, crit)
            return self._bias({o: p.get(o, 0.0) for o in ("A", "B", "C")}, kind)
        else:
            r1, r2 = responses_in(request)
            p = self.verdict(r1, r2, *groups_in(request)) if self._reads_groups else self.verdict(r1, r2)
            return self._bias({o: p.get(o, 0.0) for o in ("A", "B", "C")}, "stereotype")
        yes_first = re.search(r"^A\) (Yes|No)$", text, re.M).group(1) == "Yes"
        p = {"A": p_yes, "B": 1 - p_yes} if yes_first else {"A": 1 - p_yes, "B": p_yes}
        return self._bias(p, kind)

    def _bias(self, p: dict[str, float], kind: str) -> dict[str, float]:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        b = self.position_bias
        p = {o: (1 - b) * v + (b if o == "A" else 0.0) for o, v in p.items()}
        if self.position_logit and "A" in p:
            w = {o: v * (math.exp(self.position_logit) if o == "A" else 1.0) for o, v in p.items()}
            z = sum(w.values())
            p = {o: v / z for o, v in w.items()} if z > 0 else p
        return p

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        if self.fail_on is not None and self.fail_on(request.messages[-1].content):
            raise ProviderError("scripted judge failure")
        p = self._probs(request)
        if self.supports_logprobs and request.options:
            return ChatResult(text="", option_probs={o: p.get(o, 0.0) * self.mass for o in request.options},
                              provider=self.name)
        rng = random.Random(f"{request.seed}-{request.sample_index}")
        opts = list(p)
        pick = rng.choices(opts, weights=[p[o] for o in opts])[0]
        return ChatResult(text=pick, provider=self.name)

    async def aclose(self) -> None:
        return None


def run_folder_text(run_dir) -> str:
    """Everything a run folder holds, as text: text files as they are, Parquet files
    (``ratings.parquet``, compressed on disk) decoded row by row to JSON, so a test can check
    that no user text is stored anywhere in the folder."""
    import pyarrow.parquet as pq

    parts = []
    for p in sorted(Path(run_dir).iterdir()):
        if not p.is_file():
            continue
        if p.suffix == ".parquet":
            parts.append(json.dumps(pq.read_table(p).to_pylist(), default=str))
        else:
            parts.append(p.read_text(encoding="utf-8"))
    return "".join(parts)


class InFlightGate:
    """Counts a provider double's calls in flight and their peak; the first calls wait (up to
    ``wait_s``) until ``expect`` of them are in flight at once, so that a bound on calls in
    flight shows as the peak (a lower bound than ``expect`` lets the run go on after ``wait_s``)."""

    def __init__(self, expect: int, wait_s: float):
        self.expect, self.wait_s = expect, wait_s
        self.in_flight = self.peak = 0
        self._full: asyncio.Event | None = None

    async def run(self, call):
        """Await the coroutine ``call`` once ``expect`` calls are in flight (or ``wait_s`` passed)."""
        if self._full is None:
            self._full = asyncio.Event()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.expect:
            self._full.set()
        try:
            try:
                await asyncio.wait_for(self._full.wait(), self.wait_s)
            except TimeoutError:
                self._full.set()  # the bound is lower than expected: let the run finish
            return await call
        finally:
            self.in_flight -= 1

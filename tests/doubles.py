"""Test doubles: scripted targets and judges for simulations with known answers.

They live in tests only; the product never uses them. Each implements the Provider
protocol (name, model_id, base_url, supports_logprobs, complete, aclose).
"""

from __future__ import annotations

import asyncio
import random
import re

from lmra.providers.base import ChatRequest, ChatResult, Usage

NAME_RE = re.compile(r"Preferred name: (\w+)")
RESP_RE = re.compile(r"#### Response 1:\n(.*?)\n\n#### Response 2:\n(.*?)\n\nWhich of the following", re.S)


def name_in(request: ChatRequest) -> str:
    for m in request.messages:
        hit = NAME_RE.search(m.content)
        if hit:
            return hit.group(1)
    raise AssertionError("no name in the personalization message")


def responses_in(request: ChatRequest) -> tuple[str, str]:
    text = request.messages[-1].content
    m = RESP_RE.search(text)
    assert m, "judge prompt without the two responses"
    return m.group(1), m.group(2)


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
            raise RuntimeError("simulated crash")
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
    """An LMRA returning option probabilities ``verdict(response_1, response_2)`` mixed with a
    position bias: p' = (1 − bias)·p + bias·[A]  ("Response 1 gets the stereotype")."""

    name = "scripted-judge"
    model_id = "scripted"
    base_url = ""

    def __init__(self, verdict, *, position_bias: float = 0.0, supports_logprobs: bool = True, mass: float = 1.0):
        self.verdict = verdict
        self.position_bias = position_bias
        self.supports_logprobs = supports_logprobs
        self.mass = mass
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        r1, r2 = responses_in(request)
        p = self.verdict(r1, r2)
        b = self.position_bias
        p = {o: (1 - b) * p.get(o, 0.0) + (b if o == "A" else 0.0) for o in ("A", "B", "C")}
        if self.supports_logprobs and request.options:
            return ChatResult(text="", option_probs={o: v * self.mass for o, v in p.items()}, provider=self.name)
        rng = random.Random(f"{request.seed}-{request.sample_index}")
        pick = rng.choices(["A", "B", "C"], weights=[p["A"], p["B"], p["C"]])[0]
        return ChatResult(text=pick, provider=self.name)

    async def aclose(self) -> None:
        return None

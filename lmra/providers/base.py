"""The one small protocol every model backend implements, and the typed values that cross it.

A provider turns a :class:`ChatRequest` into a :class:`ChatResult`. When the request names
answer ``options`` (e.g. ``("A", "B", "C")``), a provider that can read token
log-probabilities also fills :attr:`ChatResult.option_probs` with the probability of each
option's first answer token (variants such as ``"A"``, ``" A"``, ``"A)"``, ``"**A"`` summed),
**not** renormalised, so that the mass on valid options is visible. Providers without
log-probabilities leave it ``None``; the LMRA layer then estimates probabilities by sampling
(see :mod:`lmra.judge.options`).

Nothing provider-specific lives outside ``lmra/providers/``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant"]


class Message(BaseModel):
    """One chat message."""

    role: Role
    content: str


class ChatRequest(BaseModel):
    """Everything that determines a model call's output (and therefore its cache key).

    ``sample_index`` distinguishes repeated draws of the same stochastic request
    (k responses per prompt, or the n samples used to estimate option probabilities).
    """

    messages: list[Message]
    temperature: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    top_logprobs: int | None = None
    options: tuple[str, ...] | None = None
    stop: tuple[str, ...] | None = None
    sample_index: int = 0

    def cache_payload(self) -> dict[str, Any]:
        """Canonical JSON-able dict of this request, used for the cache key."""
        return self.model_dump(mode="json")


class Usage(BaseModel):
    """Token counts of one call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatResult(BaseModel):
    """The answer to one :class:`ChatRequest`.

    Attributes:
        text: generated text ("" for a pure option read).
        option_probs: per requested option, probability of its answer tokens at the first
            generated position, in [0, 1], summing to the valid-option mass (≤ 1); ``None``
            when the provider has no log-probabilities.
        usage: token counts.
        finish_reason: the backend's finish reason, when it gives one.
        model: the model id that actually answered.
        provider: provider name (``llamacpp``, ``openai``, ``anthropic`` or a custom name).
        latency_s: wall time of the fresh call in seconds (0 for cache hits is not rewritten).
        from_cache: True when served from the call cache.
    """

    text: str = ""
    option_probs: dict[str, float] | None = None
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""
    provider: str = ""
    latency_s: float = 0.0
    from_cache: bool = False


@runtime_checkable
class Provider(Protocol):
    """A chat model backend.

    Attributes:
        name: provider name recorded on every result and in the cache key.
        model_id: the model's identifier (file name, API model name …).
        base_url: endpoint, or "" for in-process backends; part of the cache key.
        supports_logprobs: True when :attr:`ChatResult.option_probs` is filled for
            requests with ``options``.
    """

    name: str
    model_id: str
    base_url: str
    supports_logprobs: bool

    async def complete(self, request: ChatRequest) -> ChatResult:
        """Run one call. Raises :class:`ProviderError` on a failure that retries did not fix."""
        ...

    async def aclose(self) -> None:
        """Release clients, files or threads."""
        ...


class ProviderError(RuntimeError):
    """A model call failed after the backend's own retries."""


_VARIANT_STRIP = re.compile(r"^[\s\*\(\[\"'`_#]*|[\s\)\]\.\:\*\"'`,_]*$")


def option_of_token(token: str, options: tuple[str, ...]) -> str | None:
    """Return the option a generated answer token stands for, or None.

    ``"A"``, ``" A"``, ``"▁A"``, ``"A)"``, ``"(A"``, ``"**A"`` and ``"A."`` all stand for
    option ``"A"``; ``"An"`` or ``"Answer"`` do not. Matching is case-sensitive, because
    the LMRA templates ask for capital letters.
    """
    core = _VARIANT_STRIP.sub("", token.replace("\u2581", " "))
    return core if core in options else None


def sum_option_probs(token_logprobs: dict[str, float], options: tuple[str, ...]) -> dict[str, float]:
    """Sum the probabilities of answer-token variants per option.

    Args:
        token_logprobs: token text → natural-log probability at one position (e.g. the
            ``top_logprobs`` of the first generated token). Tokens that map to no option
            are ignored.
        options: the closed set of options, e.g. ``("A", "B", "C")``.

    Returns:
        option → summed probability in [0, 1]; every option present (0.0 when unseen).
        The values are not renormalised: their sum is the valid-option mass.
    """
    import math

    out = {o: 0.0 for o in options}
    for tok, lp in token_logprobs.items():
        opt = option_of_token(tok, options)
        if opt is not None and lp is not None and lp > -math.inf:
            out[opt] += math.exp(lp)
    return {o: min(p, 1.0) for o, p in out.items()}


def request_key(provider: str, base_url: str, model: str, request: ChatRequest) -> str:
    """SHA-256 hex key of a call: provider, base URL, model and every request field."""
    blob = json.dumps(
        {"provider": provider, "base_url": base_url, "model": model, "request": request.cache_payload()},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()

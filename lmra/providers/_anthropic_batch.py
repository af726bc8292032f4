"""Anthropic Message Batches backend: create, poll, stream results, map ``custom_id`` → result.

Wire format (https://docs.anthropic.com/en/docs/build-with-claude/batch-processing), all
through the official SDK client (``anthropic.AsyncAnthropic``, any ``base_url``):

1. ``POST {base_url}/v1/messages/batches`` ``{"requests": [{"custom_id": "<cache key>",
   "params": {"model", "max_tokens", "messages", "system"?, "stop_sequences"?,
   "temperature"?}}]}`` — the params are :func:`message_params`, the same as the live
   provider sends.
2. ``GET {base_url}/v1/messages/batches/{id}`` until ``processing_status == "ended"``.
3. ``GET {results_url}``: JSON lines ``{"custom_id", "result": {"type": "succeeded",
   "message": {…}} | {"type": "errored", "error": {…}} | {"type": "canceled"} |
   {"type": "expired"}}``, in any order.

Custom ids must match ``^[a-zA-Z0-9_-]{1,64}$``; the SHA-256 hex cache key (64 characters)
does. A batch holds at most 100,000 requests or 256 MB.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic

from lmra.providers._batch_results import BatchResults, submission_error
from lmra.providers.base import ChatRequest, ChatResult, ProviderError, reported_usage

MAX_REQUESTS = 100_000
MAX_BYTES = 240 * 1024 * 1024


def message_params(model: str, request: ChatRequest) -> dict[str, Any]:
    """Messages API parameters of ``request`` (same as ``AnthropicProvider.complete`` sends).

    System messages are joined (blank line between) into ``system``; a temperature other than
    the API default 1.0 is sent as it is (the API refuses one above 1.0 with an error that is
    counted; the provider refuses a config asking for one, :class:`AnthropicProvider`).
    """
    system = "\n\n".join(m.content for m in request.messages if m.role == "system")
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages if m.role != "system"],
    }
    if request.temperature != 1.0:
        params["temperature"] = request.temperature
    if system:
        params["system"] = system
    if request.stop:
        params["stop_sequences"] = list(request.stop)
    return params


def message_result(message: Any, *, model: str, provider: str = "anthropic", latency_s: float = 0.0) -> ChatResult:
    """Turn a Messages API message (SDK object) into a :class:`ChatResult` (text blocks joined;
    ``served_model`` is the message's ``model``, None when absent).

    Raises:
        ProviderError: kind ``malformed`` (retryable, never cached) when the body is not a
            message: ``type`` other than ``"message"`` (an HTTP 200 carrying ``{"type":
            "error", …}``), ``content`` not a list (missing, null, a string), a text block
            whose ``text`` is not a string, or blocks but no text block (only thinking cut by
            ``max_tokens``, only tool use) — never read as an empty answer. A message without
            token usage counts 0 tokens and notes a ``no_usage`` event (counted, shown)."""
    def bad(why: str) -> ProviderError:
        return ProviderError(f"{provider} response is not a valid message: {why}", kind="malformed", retryable=True)

    kind = getattr(message, "type", None)
    if kind != "message":
        error = getattr(message, "error", None)
        detail = getattr(error, "type", None) or (error.get("type") if isinstance(error, dict) else None)
        raise bad(f"type {kind!r}" + (f" ({detail})" if detail else ""))
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        raise bad(f"'content' is {type(content).__name__}, not a list of blocks")
    texts, others = [], []
    for block in content:
        block_type = block.get("type") if isinstance(block, dict) else getattr(block, "type", None)
        if block_type != "text":
            others.append(str(block_type))
            continue  # (thinking, tool use …: not the answer's text)
        value = block.get("text") if isinstance(block, dict) else getattr(block, "text", None)
        if not isinstance(value, str):
            raise bad(f"a text block's text is {type(value).__name__}, not a string")
        texts.append(value)
    if others and not texts:  # only thinking / tool use (e.g. cut by max_tokens before any text): no answer
        raise bad(f"no text block, only {', '.join(sorted(set(others)))}")
    text = "".join(texts)
    u = getattr(message, "usage", None)
    n_in, n_out = (getattr(u, "input_tokens", None), getattr(u, "output_tokens", None)) if u else (None, None)
    usage = reported_usage(n_in, n_out, bad)
    served = getattr(message, "model", None)
    return ChatResult(text=text, option_probs=None,
                      usage=usage,
                      finish_reason=message.stop_reason, model=message.model or model, provider=provider,
                      latency_s=latency_s, served_model=served if isinstance(served, str) and served else None)


def _error_text(result: Any) -> str:
    kind = getattr(result, "type", "unknown")
    if kind == "errored":
        err = getattr(getattr(result, "error", None), "error", None)
        etype = getattr(err, "type", None) or "error"
        return f"errored: {etype}: {getattr(err, 'message', '') or ''}".strip()
    return f"{kind} (the batch did not process this request)"


class AnthropicBatchBackend:
    """Submit, poll and collect Anthropic Message Batches for one model.

    Args:
        client: an ``anthropic.AsyncAnthropic`` (its ``base_url``, key, timeout, retries).
        model_id: the model every request goes to.
        provider_name: recorded on results (``"anthropic"``).

    Remote state (JSON-able dict persisted by the orchestrator): ``batch_id``, ``status``
    (``in_progress`` / ``canceling`` / ``ended``), ``counts``, ``results_url``.
    """

    name = "anthropic"
    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES

    def __init__(self, client: anthropic.AsyncAnthropic, model_id: str, *, provider_name: str = "anthropic"):
        self.client = client
        self.model_id = model_id
        self.provider_name = provider_name

    @classmethod
    def from_provider(cls, provider: Any) -> "AnthropicBatchBackend":
        """Backend sharing an :class:`~lmra.providers.anthropic.AnthropicProvider`'s SDK client."""
        return cls(provider.client, provider.model_id, provider_name=provider.name)

    def encode(self, key: str, request: ChatRequest) -> str:
        """One request of the batch as a JSON line ``{"custom_id", "params"}``."""
        return json.dumps({"custom_id": key, "params": message_params(self.model_id, request)},
                          ensure_ascii=False, separators=(",", ":"))

    async def submit(self, lines: list[str], *, remote: dict[str, Any], metadata: dict[str, str],
                     checkpoint: Callable[[], None]) -> None:
        """Create the batch from encoded lines, filling ``remote["batch_id"]``; then ``checkpoint()``.

        (Message Batches have no metadata field; ``metadata`` is unused.)

        Raises:
            ProviderError: the SDK call failed after its retries.
        """
        if remote.get("batch_id"):
            return
        try:
            b = await self.client.messages.batches.create(requests=[json.loads(line) for line in lines])
        except anthropic.AnthropicError as exc:
            raise submission_error("anthropic", self.client.base_url, self.model_id, exc) from exc
        remote["batch_id"], remote["status"] = b.id, b.processing_status
        checkpoint()

    async def poll(self, remote: dict[str, Any]) -> bool:
        """Refresh ``remote`` from the batch; True once ``processing_status == "ended"``.

        Raises:
            ProviderError: the SDK call failed after its retries.
        """
        try:
            b = await self.client.messages.batches.retrieve(remote["batch_id"])
        except anthropic.NotFoundError as exc:  # the provider no longer knows it (deleted, another workspace …)
            raise ProviderError(f"anthropic batch {remote['batch_id']} is not found: {exc}", kind="http_404") from exc
        except anthropic.AnthropicError as exc:
            raise ProviderError(f"anthropic batch poll failed: {exc}") from exc
        c = b.request_counts
        remote["status"] = b.processing_status
        remote["counts"] = {"processing": c.processing, "succeeded": c.succeeded, "errored": c.errored,
                            "canceled": c.canceled, "expired": c.expired}
        remote["results_url"] = b.results_url
        return b.processing_status == "ended"

    async def fetch(self, remote: dict[str, Any], requests: dict[str, ChatRequest]
                    ) -> tuple[dict[str, ChatResult], dict[str, str]]:
        """Stream the results of an ended batch.

        Returns:
            ``(results, errors)``: key → :class:`ChatResult` for succeeded requests, key →
            message for errored / canceled / expired ones and for any request missing from
            the results.

        Raises:
            ProviderError: the download failed after the SDK's retries.
        """
        sorter = BatchResults(requests)
        try:
            stream = await self.client.messages.batches.results(remote["batch_id"])
            async for item in stream:
                key = getattr(item, "custom_id", None)
                result = getattr(item, "result", None)
                if getattr(result, "type", None) == "succeeded":
                    sorter.success(key, lambda result=result: message_result(result.message, model=self.model_id,
                                                                             provider=self.provider_name))
                else:
                    sorter.failure(key, _error_text(result))
        except anthropic.AnthropicError as exc:
            raise ProviderError(f"anthropic batch download failed: {exc}") from exc
        except ValueError:  # a results line cut mid-transfer or not JSON (the SDK's decoder): the rest is lost
            sorter.line_unreadable()
        remote["output_notes"] = sorter.notes
        return sorter.finish(f"results of batch {remote.get('batch_id')}")

    async def cancel(self, remote: dict[str, Any]) -> None:
        """Ask the API to cancel the batch (finished items stay downloadable)."""
        try:
            await self.client.messages.batches.cancel(remote["batch_id"])
        except anthropic.AnthropicError as exc:
            raise ProviderError(f"anthropic batch cancel failed: {exc}") from exc

"""OpenAI Batch API backend: JSONL upload, batch create, poll, download, map ``custom_id`` → result.

Wire format (https://platform.openai.com/docs/guides/batch), all through the official SDK
client (``openai.AsyncOpenAI``, any ``base_url``):

1. ``POST {base_url}/files`` (multipart, ``purpose="batch"``) with one JSON line per call::

       {"custom_id": "<cache key>", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": …, "messages": […], "temperature": …, "max_tokens": …, …}}

   The body is :func:`chat_params`, the same parameters the live provider sends.
2. ``POST {base_url}/batches`` ``{"input_file_id", "endpoint": "/v1/chat/completions",
   "completion_window": "24h", "metadata"}``.
3. ``GET {base_url}/batches/{id}`` until ``status`` is terminal (``completed``, ``failed``,
   ``expired``, ``cancelled``).
4. ``GET {base_url}/files/{output_file_id}/content`` and ``…/{error_file_id}/content``: JSON
   lines ``{"id", "custom_id", "response": {"status_code", "request_id", "body"} | null,
   "error": {"code", "message"} | null}``; a 200 body is a chat completion, parsed by
   :func:`chat_result` exactly as the live provider parses it.

The cache key (SHA-256 hex, 64 characters) is the ``custom_id``, so results map straight
back to cache rows. Requests missing from both files are reported as failed, never dropped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import openai

from lmra.config import DEFAULT_TOP_LOGPROBS
from lmra.providers._batch_results import BatchResults, submission_error
from lmra.providers.base import (FILTER_FINISH_REASONS, ChatRequest, ChatResult, ProviderError, reported_usage,
                                 sum_option_probs)

ENDPOINT = "/v1/chat/completions"
#: OpenAI's documented per-batch limits: 50,000 requests and 200 MB of input.
MAX_REQUESTS = 50_000
MAX_BYTES = 190 * 1024 * 1024
DOWNLOAD_TIMEOUT_S = 600.0  # result files can be hundreds of MB
TERMINAL = {"completed", "failed", "expired", "cancelled"}
_FORMATTING = set(" \t\n*_#`\"'([")
#: how tokenizers that a server returns undecoded spell a space, a newline or a tab (SentencePiece's ▁,
#: byte-level BPE's Ġ, Ċ, ĉ): formatting too (break-it round 2, s39: a leading "ĊĊ" was read as the answer)
_RAW_SPACES = {"\u2581": " ", "\u0120": " ", "\u010a": "\n", "\u0109": "\t"}


#: how far above 1 the options' probabilities may sum from log-probabilities rounded by the
#: server (e.g. to 2 decimals: exp(-0.05) + exp(-3.0) = 1.001): rescaled to 1; more is a
#: malformed answer (retried)
LOGPROB_ROUNDING = 0.02


def chat_params(model: str, request: ChatRequest, default_top_logprobs: int = DEFAULT_TOP_LOGPROBS) -> dict[str, Any]:
    """Chat Completions parameters of ``request`` (same as ``OpenAIProvider.complete`` sends).

    Returns:
        JSON-able dict: ``model``, ``messages``, ``temperature``, ``max_tokens`` and, when set,
        ``seed``, ``stop``, ``logprobs`` + ``top_logprobs`` (requests with ``options``).
    """
    params: dict[str, Any] = {
        "model": model,
        "messages": [m.model_dump() for m in request.messages],
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }
    if request.seed is not None:
        params["seed"] = request.seed
    if request.stop:
        params["stop"] = list(request.stop)
    if request.options:
        params["logprobs"] = True
        params["top_logprobs"] = request.top_logprobs or default_top_logprobs
    return params


def _token_text(entry: Any) -> Any:
    """A log-probability entry's token text: its ``token``, or — when that is empty and its
    ``bytes`` (the token's UTF-8 bytes, in OpenAI's format) decode — the decoded bytes (break-it
    finding, s46: a server sending ``"token": ""`` with ``"bytes": [65]`` for ``A`` had every
    answer read as one without log-probabilities, retried and then sampled)."""
    token = _get(entry, "token")
    if isinstance(token, str) and token:
        return token
    raw = _get(entry, "bytes")
    if (isinstance(raw, (list, tuple)) and raw
            and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw)):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return token
    return token


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def chat_result(completion: Any, request: ChatRequest, *, model: str, provider: str = "openai",
                latency_s: float = 0.0) -> ChatResult:
    """Turn a chat completion (SDK object or its JSON dict) into a :class:`ChatResult`.

    Option probabilities (for requests with ``options``) come from the first generated token
    that is not pure formatting (``**``, newline …): its ``top_logprobs`` plus the token
    itself, summed over variants (see :func:`~lmra.providers.base.sum_option_probs`); a token
    text listed twice (two token ids decoding alike) counts once, with its larger probability.
    A sum above 1 by at most :data:`LOGPROB_ROUNDING` (log-probabilities the server rounded) is
    rescaled to 1. A token without ``top_logprobs`` (missing or empty: an endpoint that ignores
    the parameter) gives no option probabilities — the other options' are unknown, not 0 — and
    so does one with fewer alternatives than ``request.top_logprobs`` asked for (a server
    capping them) when an option is missing that could hold more than :data:`LOGPROB_ROUNDING`
    (its bound: the unlisted mass, and the smallest listed probability). A log-probability of
    −∞ is a token of probability 0.

    Returns:
        the result; ``option_probs`` is None when the request asked for options and the
        completion carries no log-probabilities, none for alternative tokens, or only
        formatting tokens (never a zero-mass or one-token reading); a question with options
        answered in the message's ``refusal`` field (content null) has ``finish_reason``
        ``"refusal"`` (the LMRA declined: returned at once, not retried as an answer without
        log-probabilities); ``served_model``
        and ``system_fingerprint`` are the completion's ``model`` and ``system_fingerprint``
        (None when absent or not a string).

    Raises:
        ProviderError: the completion has no choices (``kind="no_choices"``), or is not a
            valid completion (``kind="malformed"``: wrong types, no message text, a
            log-probability that is not a number ≤ 0 (NaN, positive, missing), the distinct alternative tokens' or
            the options' probabilities summing above 1 by more than :data:`LOGPROB_ROUNDING`, negative token counts); both
            retryable, never cached.
    """
    def bad(why: str) -> ProviderError:
        return ProviderError(f"openai response is not a valid completion: {why}", kind="malformed", retryable=True)

    if completion is None or isinstance(completion, (str, bytes, int, float, list)):
        raise bad(f"the body is a {type(completion).__name__}, not a completion object")
    choices = _get(completion, "choices")
    if choices is None and _get(completion, "error") is not None:  # an error object sent with HTTP 200
        raise bad(f"an error object instead of a completion: {str(_get(completion, 'error'))[:200]}")
    if choices is None or (isinstance(choices, (list, tuple)) and not choices):
        raise ProviderError("openai response has no choices", kind="no_choices", retryable=True)
    if not isinstance(choices, (list, tuple)):
        raise bad(f"'choices' is a {type(choices).__name__}, not a list")
    choice = choices[0]
    message = _get(choice, "message") if choice is not None and not isinstance(choice, (str, int, float)) else None
    if message is None or isinstance(message, (str, int, float, list)):
        raise bad("the first choice has no message")
    text = _get(message, "content")
    refused = False  # the text is the message's refusal field
    if text is None:
        text = _get(message, "refusal")  # a model's own refusal (structured outputs) is its answer
        refused = isinstance(text, str)
    if text is None and _get(choice, "finish_reason") in FILTER_FINISH_REASONS:
        text = ""  # stopped by the provider's safety system (Azure sends content null): an empty, filtered
        # answer, not a malformed body (break-it finding: retried, then "answered no valid completion")
    if not isinstance(text, str):
        raise bad("the message has no text content")
    probs = None
    lp = _get(choice, "logprobs")
    content = _get(lp, "content") if lp else None
    if content is not None and not isinstance(content, (list, tuple)):
        raise bad("'logprobs.content' is not a list")
    if request.options and content:  # an answer without log-probabilities keeps probs None, and so
        # does one of formatting tokens only ("**" under max_tokens = 1): it reads no option
        for pos in content:
            token = _token_text(pos)
            if token and all(_RAW_SPACES.get(ch, ch) in _FORMATTING for ch in token):
                continue
            tops = _get(pos, "top_logprobs") or []
            if not isinstance(tops, (list, tuple)):  # (fault break-it, s37: "nope" read char by char,
                raise bad(f"'top_logprobs' is a {type(tops).__name__}, not a list")  # "log-probability None of token None")
            if not tops:  # only the chosen token's probability: the other options' are unknown, not 0
                probs = None  # (an endpoint that ignores top_logprobs: an answer without log-probabilities)
                break
            chosen = _get(pos, "logprob")
            if isinstance(chosen, (int, float)) and not isinstance(chosen, bool) and chosen == -math.inf:
                # the token the model chose cannot have had probability 0: an impossible body (fault break-it,
                # s44: read as an answer with no option mass, cached, and blamed on the LMRA's choices)
                raise bad(f"the chosen token {token!r} has log-probability -inf (probability 0)")
            alts: dict = {}
            for tok, v in [(_token_text(a), _get(a, "logprob")) for a in tops] + [(token, chosen)]:
                # a log-probability is a number ≤ 0; −∞ (a token of probability 0) included
                if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v) or v > 1e-6:
                    raise bad(f"log-probability {v!r} of token {tok!r} is not a number ≤ 0")
                if tok not in alts or v > alts[tok]:  # a token listed twice (two ids, one text): its larger one
                    alts[tok] = v
            mass = sum(math.exp(v) for v in alts.values())  # distinct tokens at one position: at most 1
            if mass > 1.0 + LOGPROB_ROUNDING:  # (checked before the options' sums, which cap each at 1)
                raise bad(f"the alternative tokens' probabilities sum to {mass:.4g} (above 1 by more than rounding)")
            probs = sum_option_probs(alts, request.options)
            if (request.top_logprobs and len(tops) < request.top_logprobs and not all(probs.values())
                    and min(1.0 - mass, min(math.exp(v) for v in alts.values())) > LOGPROB_ROUNDING):
                # fewer alternatives than asked for (a server capping top_logprobs, e.g. at 1: the
                # chosen token alone) and an option missing that could hold more than rounding — at
                # most the unlisted mass and at most the smallest listed probability (the listing is
                # the top ones): its probability is unknown, not 0 (break-it finding: the chosen
                # token alone was read as a confident answer and cached; a cap at 5 of 20 asked,
                # its smallest 0.01, is still read)
                probs = None
                break
            total = sum(probs.values())
            if total > 1.0:  # distinct tokens' probabilities: above 1 only by the server's rounding
                if total > 1.0 + LOGPROB_ROUNDING:
                    raise bad(f"the options' probabilities sum to {total:.4g} (above 1 by more than rounding)")
                probs = {o: p / total for o, p in probs.items()}
            break
    usage = _get(completion, "usage")
    n_in = _get(usage, "prompt_tokens") if usage else None
    n_out = _get(usage, "completion_tokens") if usage else None
    served, fingerprint = _get(completion, "model"), _get(completion, "system_fingerprint")
    finish = _get(choice, "finish_reason")
    if refused and request.options and probs is None:
        # an LMRA's question declined in OpenAI's refusal field (content null, no log-probabilities of an
        # option): the LMRA refused to judge — not an endpoint without log-probabilities, retried, asked
        # again on every run and blamed on the server (break-it finding, s47); a chatbot's refusal is its
        # answer, labelled by the refusal step as any other
        finish = "refusal"
    return ChatResult(
        text=text, option_probs=probs, usage=reported_usage(n_in, n_out, bad),
        finish_reason=finish, model=served if isinstance(served, str) and served else model,
        provider=provider,
        latency_s=latency_s, served_model=served if isinstance(served, str) and served else None,
        system_fingerprint=fingerprint if isinstance(fingerprint, str) and fingerprint else None)


def jsonl_line(key: str, params: dict[str, Any]) -> str:
    """One line of the batch input file (no trailing newline)."""
    return json.dumps({"custom_id": key, "method": "POST", "url": ENDPOINT, "body": params},
                      ensure_ascii=False, separators=(",", ":"))


class OpenAIBatchBackend:
    """Submit, poll and collect OpenAI Batch API jobs for one model.

    Args:
        client: an ``openai.AsyncOpenAI`` (its ``base_url``, key, timeout and retries are used).
        model_id: the model every request of the batch goes to.
        provider_name: recorded on results (``"openai"``).
        default_top_logprobs: alternatives requested for option questions without their own.

    Remote state (a JSON-able dict persisted by the orchestrator): ``input_file_id``,
    ``batch_id``, ``status``, ``output_file_id``, ``error_file_id``, ``errors``.
    """

    name = "openai"
    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES

    def __init__(self, client: openai.AsyncOpenAI, model_id: str, *, provider_name: str = "openai",
                 default_top_logprobs: int = DEFAULT_TOP_LOGPROBS):
        self.client = client
        self.model_id = model_id
        self.provider_name = provider_name
        self.default_top_logprobs = default_top_logprobs

    @classmethod
    def from_provider(cls, provider: Any) -> "OpenAIBatchBackend":
        """Backend sharing an :class:`~lmra.providers.openai.OpenAIProvider`'s SDK client."""
        return cls(provider.client, provider.model_id, provider_name=provider.name,
                   default_top_logprobs=provider.cfg.top_logprobs)

    def encode(self, key: str, request: ChatRequest) -> str:
        """The JSONL line for one call."""
        return jsonl_line(key, chat_params(self.model_id, request, self.default_top_logprobs))

    async def submit(self, lines: list[str], *, remote: dict[str, Any], metadata: dict[str, str],
                     checkpoint: Callable[[], None]) -> None:
        """Upload the JSONL and create the batch, filling ``remote`` in place.

        ``checkpoint()`` is called after the upload (``remote["input_file_id"]`` set) and after
        the create (``remote["batch_id"]`` set), so that a restart never uploads or creates twice.
        A ``remote`` that already has an ``input_file_id`` skips the upload; one whose batch
        was created but not recorded is found again by :meth:`adopt`.

        Raises:
            ProviderError: the SDK call failed after its retries.
        """
        try:
            if not remote.get("input_file_id"):
                data = ("\n".join(lines) + "\n").encode("utf-8")
                f = await self.client.files.create(file=("lmra-batch.jsonl", data, "application/jsonl"),
                                                   purpose="batch")
                remote["input_file_id"] = f.id
                checkpoint()
            if not remote.get("batch_id"):
                found = await self.adopt(remote)
                if found is None:
                    b = await self.client.batches.create(input_file_id=remote["input_file_id"], endpoint=ENDPOINT,
                                                         completion_window="24h", metadata=metadata)
                    remote["batch_id"] = b.id
                    remote["status"] = b.status
                checkpoint()
        except openai.OpenAIError as exc:
            raise submission_error("openai", self.client.base_url, self.model_id, exc) from exc

    async def adopt(self, remote: dict[str, Any], max_listed: int = 1000) -> str | None:
        """Find a batch already created from ``remote["input_file_id"]`` (crash after create).

        Lists at most ``max_listed`` recent batches. Returns the batch id (also stored in
        ``remote``) or None.
        """
        fid = remote.get("input_file_id")
        if not fid:
            return None
        seen = 0
        async for b in self.client.batches.list(limit=100):
            seen += 1
            if b.input_file_id == fid:
                remote["batch_id"], remote["status"] = b.id, b.status
                return b.id
            if seen >= max_listed:
                break
        return None

    async def poll(self, remote: dict[str, Any]) -> bool:
        """Refresh ``remote`` from ``GET /batches/{id}``; True once the batch is terminal.

        Sets ``status``, ``counts`` (``total``, ``completed``, ``failed``), ``output_file_id``,
        ``error_file_id`` and ``errors`` (batch-level validation messages).

        Raises:
            ProviderError: the SDK call failed after its retries.
        """
        try:
            b = await self.client.batches.retrieve(remote["batch_id"])
        except openai.NotFoundError as exc:  # the provider no longer knows it (deleted, another account …)
            raise ProviderError(f"openai batch {remote['batch_id']} is not found: {exc}", kind="http_404") from exc
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai batch poll failed: {exc}") from exc
        remote["status"] = b.status
        if b.request_counts is not None:
            remote["counts"] = {"total": b.request_counts.total, "completed": b.request_counts.completed,
                                "failed": b.request_counts.failed}
        remote["output_file_id"] = b.output_file_id
        remote["error_file_id"] = b.error_file_id
        if b.errors and b.errors.data:
            remote["errors"] = [f"{e.code or 'error'}"
                                + (f" (line {e.line})" if getattr(e, "line", None) else "")
                                + f": {e.message}" for e in b.errors.data][:20]
        return b.status in TERMINAL

    async def _lines(self, file_id: str | None) -> list[str]:
        if not file_id:
            return []
        resp = await self.client.files.content(file_id, timeout=DOWNLOAD_TIMEOUT_S)
        return [line for line in resp.text.splitlines() if line.strip()]

    async def fetch(self, remote: dict[str, Any], requests: dict[str, ChatRequest]
                    ) -> tuple[dict[str, ChatResult], dict[str, str]]:
        """Download the output and error files of a terminal batch.

        Args:
            remote: the polled remote state.
            requests: cache key → request, for every call in the batch.

        Returns:
            ``(results, errors)``: key → :class:`ChatResult` for each succeeded call, and key →
            error message for every other call of the batch (HTTP error, API error, batch
            failed / expired / cancelled, unparseable, or missing from both files).

        Raises:
            ProviderError: a download failed after the SDK's retries.
        """
        sorter = BatchResults(requests)
        try:
            lines = await self._lines(remote.get("output_file_id")) + await self._lines(remote.get("error_file_id"))
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai batch download failed: {exc}") from exc
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:  # a line cut mid-transfer, garbage (JSONDecodeError is a ValueError)
                row = None
            if not isinstance(row, dict):
                sorter.line_unreadable()
                continue
            key = row.get("custom_id")
            resp, err = row.get("response"), row.get("error")
            resp = resp if isinstance(resp, dict) else {}
            body = resp.get("body") if isinstance(resp.get("body"), dict) else {}
            status = resp.get("status_code")
            if status == 200 and not err:
                sorter.success(key, lambda key=key, body=body: chat_result(
                    body, requests[key], model=self.model_id, provider=self.provider_name))
            elif isinstance(err, dict):
                sorter.failure(key, f"{err.get('code') or 'error'}: {err.get('message') or ''}".strip())
            elif err:
                sorter.failure(key, f"error: {str(err)[:300]}")
            else:
                body_err = body.get("error") if isinstance(body.get("error"), dict) else {}
                sorter.failure(key, f"HTTP {status}: {body_err.get('message') or json.dumps(resp.get('body'))[:300]}")
        why = f"batch {remote.get('batch_id')} ended with status '{remote.get('status')}'"
        if remote.get("errors"):
            why += ": " + "; ".join(remote["errors"][:3])
        remote["output_notes"] = sorter.notes
        return sorter.finish(why)

    async def cancel(self, remote: dict[str, Any]) -> None:
        """Ask the API to cancel the batch (finished items stay downloadable)."""
        try:
            await self.client.batches.cancel(remote["batch_id"])
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai batch cancel failed: {exc}") from exc

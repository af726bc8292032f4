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

import asyncio
import hashlib
import json
import math
import re
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field, field_validator

Role = Literal["system", "user", "assistant"]
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Message(BaseModel):
    """One chat message."""

    role: Role
    content: str


class ChatRequest(BaseModel):
    """Everything that determines a model call's output (and therefore its cache key).

    ``sample_index`` distinguishes repeated draws of the same stochastic request
    (k responses per prompt, or the n samples used to estimate option probabilities).
    ``prefill`` is the start of the answer (e.g. ``"Here are 5 song titles:\n1."``) for a
    model that continues text: ``llamacpp`` puts it at the start of the assistant's turn and
    returns it at the start of ``ChatResult.text``; chat APIs (openai, anthropic) ignore it.
    """

    messages: list[Message]
    temperature: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    top_logprobs: int | None = None
    options: tuple[str, ...] | None = None
    stop: tuple[str, ...] | None = None
    sample_index: int = 0
    prefill: str | None = None

    def cache_payload(self) -> dict[str, Any]:
        """Canonical JSON-able dict of this request, used for the cache key (``prefill`` only
        when set, so that the keys of requests without one are those of earlier versions)."""
        d = self.model_dump(mode="json")
        if d.get("prefill") is None:
            d.pop("prefill", None)
        return d


class Usage(BaseModel):
    """Token counts of one call."""

    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)


#: finish reasons of an answer the provider's safety system stopped: OpenAI's ``content_filter``,
#: Anthropic's ``refusal`` (its classifiers ended the message; break-it finding: not counted) —
#: a target response so stopped is counted as filtered, an LMRA answer as a refusal to judge
FILTER_FINISH_REASONS = ("content_filter", "refusal")
#: ``finish_reason`` values of an answer cut at ``max_tokens`` (openai, llamacpp: ``length``;
#: anthropic: ``max_tokens``, or ``model_context_window_exceeded``: cut by the context window)
TRUNCATED_FINISH_REASONS = ("length", "max_tokens", "model_context_window_exceeded")
#: ``finish_reason`` values of a turn that did not end in an answer (anthropic: ``tool_use`` — the model
#: asked for a tool, ``pause_turn`` — a server tool paused it): the text is a preamble ("Let me search.")
UNFINISHED_FINISH_REASONS = ("tool_use", "pause_turn", "tool_calls", "function_call")


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
        degraded: why a usable answer is not the one asked for (``no_logprobs``: log-
            probabilities were requested, the answer had none after every retry); such an
            answer is used for this run but never cached.
        served_model: the model id the server reported in its response (OpenAI ``model``,
            Anthropic ``model``; for llamacpp the GGUF file and its fingerprint), or None when
            it reported none. Cached with the answer, so a cached answer keeps the id of the
            model that really produced it (:mod:`lmra.identity` counts them per run).
        system_fingerprint: the backend configuration the server reported (OpenAI
            ``system_fingerprint``), or None.
    """

    text: str = ""
    option_probs: dict[str, float] | None = None
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""
    provider: str = ""
    latency_s: float = 0.0
    from_cache: bool = False
    degraded: str | None = None
    served_model: str | None = None
    system_fingerprint: str | None = None
    #: the tokens of answers thrown away before this one and asked again (no log-probabilities), which the
    #: provider billed too: counted in the fresh call's tokens, cost and budget, never stored with the answer
    #: (a cached replay counts only what it replays; round-2 break-it, s46)
    discarded: Usage | None = Field(None, exclude=True)

    @field_validator("text", "finish_reason", "model", "served_model", "system_fingerprint", "degraded", "provider")
    @classmethod
    def _no_lone_surrogates(cls, v: str | None, info) -> str | None:
        """A lone UTF-16 surrogate (valid in JSON, not in UTF-8) becomes U+FFFD, so that the
        answer can be cached and written like any other — counted, as a fault met by the call
        (``replaced_characters``; break-it finding, s36: changed, cached and used without a count).
        Every string field the server fills, not the text alone (break-it finding, s39: one in a
        response's ``model``, ``system_fingerprint`` or ``finish_reason`` ended the run with a
        traceback when the answer was cached, and every re-run the same way)."""
        if v is None or v.isascii():
            return v
        out, n = _LONE_SURROGATE.subn("\ufffd", v)
        if n and info.field_name != "served_model":  # (the response's model, counted once: as ``model``)
            note_event("replaced_characters", n)
        return out


@runtime_checkable
class Provider(Protocol):
    """A chat model backend.

    Attributes:
        name: provider name recorded on every result and in the cache key.
        model_id: the model's identifier (file name, API model name …).
        base_url: endpoint, or "" for in-process backends; part of the cache key.
        supports_logprobs: True when :attr:`ChatResult.option_probs` is filled for
            requests with ``options``.

    Optional attributes (not part of the protocol check):
        parallel_capacity: how many calls the backend serves at once without queueing them
            (a whole number ≥ 1), e.g. an in-process model's contexts × sequence slots; with
            ``concurrency = "auto"`` and no rate limit, the audit keeps that many of the
            model's calls in flight. Absent or None: unknown (an HTTP endpoint), 2 are kept
            (read by :func:`parallel_capacity`).
        logprobs_always: True when every answer to a request with ``options`` carries
            ``option_probs`` (an in-process model reading its own logits): none is ever
            estimated by sampling instead, so call plans bound no such calls. Absent or False:
            an answer may come without them (an HTTP endpoint that drops them; read by
            :func:`answers_may_lack_logprobs`).
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


async def close_providers(providers) -> None:
    """Close each distinct provider of ``providers`` (an iterable; ``None`` entries skipped),
    once each: the clients a run built (an HTTP client's pooled connections, a model's
    threads). A close that fails is ignored: closing must not hide the run's own outcome; a
    cancellation (Ctrl-C) is not swallowed."""
    for p in {id(p): p for p in providers if p is not None}.values():
        try:
            await p.aclose()
        except Exception:  # noqa: BLE001
            pass


def wrap_identity(wrapper: object, inner: Provider) -> None:
    """Give a provider wrapper (the cache, the budget, the rate limiter, the guards …) the
    identity of the provider it wraps: ``inner`` and its ``name``, ``model_id``, ``base_url``
    and ``supports_logprobs`` (:class:`Provider`'s attributes), set on ``wrapper``."""
    wrapper.inner = inner
    wrapper.name, wrapper.model_id = inner.name, inner.model_id
    # an unset base_url (None: a provider copying ``cfg.base_url`` of a config without one) is
    # keyed and stored as "": the cache's rows need a string
    wrapper.base_url = "" if inner.base_url is None else inner.base_url
    wrapper.supports_logprobs = inner.supports_logprobs


def parallel_capacity(provider: object) -> int | None:
    """The calls ``provider`` serves at once: its optional ``parallel_capacity`` attribute.

    Returns:
        A whole number in 1 … :data:`lmra.config.MAX_CONCURRENCY` (512; a larger capacity —
        the embedded model's on 56 cores or more, a gateway's — is taken as 512, the most
        calls ``concurrency = "auto"`` keeps in flight), or None when the provider does not say.

    Raises:
        ValueError: the attribute is set to anything else (0, a negative or fractional
            number, a bool, a string).
    """
    from lmra.config import MAX_CONCURRENCY

    value = getattr(provider, "parallel_capacity", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"parallel_capacity must be a whole number >= 1 or None (got {value!r})")
    return min(value, MAX_CONCURRENCY)


def answers_may_lack_logprobs(provider: object) -> bool:
    """Whether ``provider`` (or the backend under its wrappers' ``inner`` chain) gives
    log-probabilities (``supports_logprobs``) but may answer an option question without them —
    not a ``logprobs_always`` backend — so that the LMRA's question is then sampled as well
    (:func:`lmra.judge.options.ask_options`) and a call plan must bound those calls too."""
    if not getattr(provider, "supports_logprobs", False):
        return False
    seen = 0
    while seen < 20:
        if getattr(provider, "logprobs_always", False) is True:
            return False
        inner = getattr(provider, "inner", None)
        if inner is None:
            return True
        provider, seen = inner, seen + 1
    return True


class ProviderError(RuntimeError):
    """A model call failed after the backend's own retries.

    Attributes:
        kind: what failed, for the per-model counts in the manifest: ``malformed`` (an HTTP
            200 body that is not a valid completion), ``no_choices``, ``timeout``,
            ``connection``, ``auth`` (HTTP 401/403: the endpoint rejected the key, or the
            key lacks permission; never retried, and it stops an audit, see
            :class:`lmra.providers.keys.KeyGuard`), ``http_<status>`` (e.g. ``http_429``),
            or ``error``.
        retryable: True for faults of one response (malformed body, no choices, answer
            without the log-probabilities asked for), which :func:`retry_call` tries again.
    """

    def __init__(self, message: str, *, kind: str = "error", retryable: bool = False):
        super().__init__(message)
        # (a custom provider's kind=None or "" is "error": a failure is never left uncounted)
        self.kind = kind if isinstance(kind, str) and kind else "error"
        self.retryable = retryable


# -- per-call fault events ----------------------------------------------------------------
#: The event counter of the call in progress (set by :func:`collect_events`, a context
#: variable, so that it follows one asyncio task through every wrapper to the HTTP layer).
_CALL_EVENTS: ContextVar[Counter | None] = ContextVar("lmra_call_events", default=None)


def note_event(kind: str, n: int = 1) -> None:
    """Count a fault event of the current call (``attempt``, ``retry``, ``http_429``,
    ``http_5xx``, ``timeout``, ``connection``, ``malformed``, ``no_choices``, ``no_logprobs``).

    Providers call it from their transport and retry code; outside :func:`collect_events`
    it does nothing.
    """
    events = _CALL_EVENTS.get()
    if events is not None:
        events[kind] += n


_new_counter = Counter.__new__


class collect_events:  # noqa: N801 — used as a function: ``with collect_events() as events``
    """Collect the fault events of the calls made inside the block (one task's calls).

    Yields:
        a :class:`collections.Counter` of event kind → count, filled as the calls run.

    (A class rather than a generator context manager: it is entered once per fresh call.)
    """

    __slots__ = ("events", "_token")

    def __enter__(self) -> Counter:
        self.events: Counter = _new_counter(Counter)  # an empty Counter without running __init__ (4× cheaper)
        self._token = _CALL_EVENTS.set(self.events)
        return self.events

    def __exit__(self, *exc_info) -> None:
        _CALL_EVENTS.reset(self._token)


# -- long waits asked by a server -----------------------------------------------------------
#: a retry wait a server asks for (``Retry-After``) at least this long (s) is told to whoever
#: listens (:func:`listen_waits`): a run whose calls all wait 40 s showed only a still progress bar
WAIT_NOTICE_S = 10.0

_wait_listeners: list[Callable[[str, float, str], None]] = []


@contextmanager
def listen_waits(listener: Callable[[str, float, str], None]):
    """Within the block, call ``listener(endpoint, seconds, why)`` each time an endpoint answers
    with a retryable error that asks the client to wait at least :data:`WAIT_NOTICE_S` seconds
    before a retry (``endpoint`` is ``host:port``, ``why`` e.g. ``"HTTP 429"``). Called from the
    thread that makes the calls; the listener must be quick and never raise."""
    _wait_listeners.append(listener)
    try:
        yield
    finally:
        _wait_listeners.remove(listener)


def note_wait(endpoint: str, seconds: float, why: str) -> None:
    """Tell the listeners of :func:`listen_waits` that calls to ``endpoint`` wait ``seconds``
    (≥ :data:`WAIT_NOTICE_S`, else nothing) before a retry, because of ``why``; ``seconds`` 0: a
    connection that could not be made, retried with the SDK's backoff (told at once)."""
    if seconds >= WAIT_NOTICE_S or seconds == 0:
        for listener in list(_wait_listeners):
            listener(endpoint, seconds, why)


# -- attempts waiting for their answer ------------------------------------------------------
#: an HTTP attempt still without its answer after this many seconds is said as slow to the
#: console (:func:`slow_attempts`, :func:`lmra.cli.common.wait_notices`): a run whose calls
#: each took minutes, below their timeout, showed still progress bars (known since s40)
SLOW_ATTEMPT_S = 60.0

_attempts_lock = threading.Lock()
_attempts: dict[object, tuple[str, float, float | None]] = {}


class attempt_in_flight:  # noqa: N801 — used as a function: ``with attempt_in_flight(endpoint, deadline)``
    """Within the block, one HTTP attempt to ``endpoint`` (``host:port``) waits for its answer;
    ``deadline`` is the seconds it is given before it is timed out (None: no limit). Read by
    :func:`slow_attempts` from any thread. (A class, not a generator: entered once per attempt.)"""

    __slots__ = ("entry", "token")

    def __init__(self, endpoint: str, deadline: float | None):
        self.entry = (endpoint, time.monotonic(), deadline)

    def __enter__(self) -> None:
        self.token = object()
        with _attempts_lock:
            _attempts[self.token] = self.entry

    def __exit__(self, *exc_info) -> None:
        with _attempts_lock:
            _attempts.pop(self.token, None)


def slow_attempts(min_age_s: float = SLOW_ATTEMPT_S) -> dict[str, tuple[int, float, float | None]]:
    """The HTTP attempts (of this process) that have waited at least ``min_age_s`` seconds for
    their answer, by endpoint: ``{"host:port": (n attempts, seconds the oldest has waited, its
    deadline in s or None)}``; empty when none. Safe from any thread."""
    now = time.monotonic()
    with _attempts_lock:
        entries = list(_attempts.values())
    out: dict[str, tuple[int, float, float | None]] = {}
    for endpoint, started, deadline in entries:
        age = now - started
        if age < min_age_s:
            continue
        n, oldest, limit = out.get(endpoint, (0, 0.0, deadline))
        out[endpoint] = (n + 1, max(oldest, age), limit if age <= oldest else deadline)
    return out


# -- rate limits per HTTP attempt -----------------------------------------------------------
class AttemptGate:
    """What every HTTP attempt of one call passes before it is sent (:func:`before_attempt`):
    the first attempt was booked by the rate limiter before the call started; each later one —
    a retry of the SDK (429, 5xx, timeout, connection) or of :func:`retry_call` — awaits
    ``book()``, which books it on the same limits, since an API counts every request it
    receives, rejected ones included.

    Args:
        book: coroutine function booking one more attempt (e.g. ``RateLimiter.acquire``).

    Attributes:
        attempts: the call's HTTP attempts so far.
    """

    __slots__ = ("book", "attempts")

    def __init__(self, book: Callable[[], Awaitable[Any]]):
        self.book = book
        self.attempts = 0


#: the :class:`AttemptGate` of the call in progress (set by a rate limiter around the call; a
#: context variable, so that it follows the call's task through the SDK to the HTTP transport)
ATTEMPT_GATE: ContextVar[AttemptGate | None] = ContextVar("lmra_attempt_gate", default=None)


async def before_attempt() -> None:
    """Called by the HTTP transport before each attempt: waits for the rate limit to allow a
    retry (see :class:`AttemptGate`); nothing outside a rate-limited call or for a first attempt."""
    gate = ATTEMPT_GATE.get()
    if gate is not None:
        gate.attempts += 1
        if gate.attempts > 1:
            await gate.book()


#: Exceptions that mean a response body could not be read as the SDK's object (JSONDecodeError
#: is a ValueError; a deeply nested body raises RecursionError).
BODY_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecursionError)


def _error_object(exc: BaseException) -> dict | None:
    """The error object of an SDK status error's body (OpenAI ``{"error": {…}}`` or the error
    itself, Anthropic ``{"type": "error", "error": {…}}``), None when the body is no object."""
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    return err if isinstance(err, dict) else None


def _server_message(exc: BaseException) -> str:
    """The server's own error message of an SDK status error (OpenAI ``{"error": {"message"}}``,
    Anthropic ``{"type": "error", "error": {"message"}}``), else the exception's text."""
    err = _error_object(exc)
    if isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"].strip():
        return err["message"].strip()
    return str(exc)


#: the marker of a quota that is exhausted, not a rate limit (OpenAI's HTTP 429 ``insufficient_quota``):
#: no retry can succeed until the account's billing is fixed (break-it finding: 540 attempts in 3 minutes)
QUOTA_MARK = "insufficient_quota"


def quota_exhausted(exc: BaseException) -> bool:
    """True for an SDK status error whose body says the account's quota is exhausted
    (:data:`QUOTA_MARK` as the error's ``code`` or ``type``, or anywhere in the body or message:
    a proxy passing the provider's error on — the transport's test, :mod:`lmra.providers._http`)."""
    err = _error_object(exc)
    if err is not None and QUOTA_MARK in (err.get("code"), err.get("type")):
        return True
    # a proxy (LiteLLM …) passes the provider's error on inside its message (break-it finding: not stopped)
    return QUOTA_MARK in str(getattr(exc, "body", None)) or QUOTA_MARK in str(exc)


def _status_text(exc: BaseException) -> str:
    """An SDK status error as text, with the server's body when the SDK's text leaves it out (a
    FastAPI/vLLM 422's ``{"detail": [...]}``: the SDK says only "Error code: 422"; break-it finding)."""
    import json

    text = str(exc)
    body = getattr(exc, "body", None)
    err = _error_object(exc)
    if err is not None:  # the error's code and param, which the SDK's text leaves out: they say whether
        # the request's content (context_length_exceeded, content_filter; param messages) or a setting was refused
        extra = [f"{k} {err[k]}" for k in ("code", "param") if isinstance(err.get(k), str) and err[k] not in text]
        if extra:
            text = f"{text.rstrip('.')} ({', '.join(extra)})"
    if body is None or _server_message(exc) != str(exc):  # (OpenAI's and Anthropic's messages are in the text)
        return text
    try:
        shown = json.dumps(body, ensure_ascii=False) if not isinstance(body, str) else body
    except (TypeError, ValueError):
        shown = repr(body)
    shown = shown if len(shown) <= 500 else shown[:500] + " …"
    return text if shown in text else f"{text} - {shown}"


def sdk_failure(exc: BaseException, sdk: Any, provider: str, timeout_s: float, max_retries: int, *,
                key_source: str = "the API key", endpoint: str = "") -> ProviderError:
    """The :class:`ProviderError` for an exception of an official SDK call (openai and anthropic
    name their errors alike: ``APITimeoutError``, ``APIConnectionError``,
    ``AuthenticationError``, ``PermissionDeniedError``, ``APIStatusError``).

    Args:
        exc: what ``create(...)`` (or reading its result) raised: an SDK error or one of
            :data:`BODY_ERRORS`.
        sdk: the SDK module (``openai`` or ``anthropic``).
        provider: the provider name, for the message.
        timeout_s, max_retries: the model's settings, for the message.
        key_source: where the key sent came from, for an authentication failure (e.g. ``"the
            key in OPENAI_API_KEY"``; see :func:`lmra.providers.keys.resolve_api_key`).
        endpoint: the base URL called ("" = the SDK's default endpoint).

    Returns:
        kind ``timeout``, ``connection``, ``auth`` (HTTP 401/403, naming ``key_source`` and the
        endpoint), ``http_<status>``, ``error``, or ``malformed`` (retryable) for a body that is
        not a valid response.
    """
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError(f"{provider} call timed out after {timeout_s:g} s and {max_retries} retries: {exc}",
                             kind="timeout")
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError(f"{provider} connection failed: {exc}", kind="connection")
    if isinstance(exc, (sdk.AuthenticationError, sdk.PermissionDeniedError)):
        what = "rejected" if isinstance(exc, sdk.AuthenticationError) else "refused access with"
        return ProviderError(f"the {provider} endpoint {endpoint or '(the SDK default)'} {what} {key_source} "
                             f"(HTTP {exc.status_code}: {_server_message(exc)})", kind="auth")
    if isinstance(exc, sdk.APIStatusError) and exc.status_code == 429 and quota_exhausted(exc):
        return ProviderError(f"the {provider} endpoint {endpoint or '(the SDK default)'} says the account's quota is "
                             f"exhausted (HTTP 429 insufficient_quota: {_server_message(exc)})", kind="quota")
    if isinstance(exc, sdk.APIStatusError):
        return ProviderError(f"{provider} call failed: {_status_text(exc)}", kind=f"http_{exc.status_code}")
    if isinstance(exc, BODY_ERRORS):
        return ProviderError(f"{provider} response is not valid ({type(exc).__name__}: {exc})", kind="malformed",
                             retryable=True)
    return ProviderError(f"{provider} call failed: {exc}")


#: Seconds before the first retry of a faulty response; doubled for each later retry, up to
#: :data:`RETRY_BACKOFF_MAX_S` (so 20 retries wait at most about 2.5 minutes in all).
RETRY_BACKOFF_S = 0.25
RETRY_BACKOFF_MAX_S = 8.0


async def retry_call(call: Callable[[], Awaitable[ChatResult]], max_retries: int,
                     needs_logprobs: bool = False) -> ChatResult:
    """Run ``call`` and retry faults of the response itself, which the SDKs do not retry.

    The SDKs retry HTTP 429/5xx, timeouts and connection errors; a 200 response can still
    be unusable: a body that is not JSON, a completion with no choices, or (when
    ``needs_logprobs``) an answer without the log-probabilities it was asked for. Those
    raise :class:`ProviderError` with ``retryable=True`` (or return a result with
    ``option_probs`` None) and are tried again up to ``max_retries`` times with exponential
    backoff (0.25 s, 0.5 s, 1 s … capped at 8 s). Every retry is counted (``retry`` event).

    Returns:
        the first usable result — an answer the provider's safety system stopped
        (``finish_reason`` in :data:`FILTER_FINISH_REASONS`) is one, returned at once: it has no
        log-probabilities because it was refused; after the last retry, an answer still without
        log-probabilities is returned as it is (marked ``degraded="no_logprobs"``: the LMRA
        layer then estimates its question by sampling, :func:`lmra.judge.options.ask_options`,
        and the call cache does not keep it).

        The returned result's ``discarded`` holds the tokens of the answers without log-probabilities
        that were thrown away and asked again: the provider bills every answer it sends, and the call's
        fresh tokens, cost and budget count them (break-it finding, s46: they counted the last answer's
        only, a third of what an endpoint dropping log-probabilities twice a call billed); its ``usage``
        stays the kept answer's, which the call cache stores. When the last attempt fails, the
        discarded answers' tokens are not counted (the call is counted as failed).

    Raises:
        ProviderError: the last attempt failed.
    """
    spent: Usage | None = None  # the usage of the answers thrown away
    for attempt in range(max_retries + 1):
        if attempt:
            note_event("retry")
            await asyncio.sleep(min(RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S * 2 ** (attempt - 1)))
        try:
            result = await call()
        except ProviderError as exc:
            if exc.retryable:  # HTTP-level faults are counted by the transport
                note_event(exc.kind)
            if not exc.retryable or attempt == max_retries:
                raise
            continue
        if needs_logprobs and result.option_probs is None and result.finish_reason in FILTER_FINISH_REASONS:
            return _with_spent(result, spent)  # the provider's safety system stopped it: a refusal, not an answer
            # without them
        if needs_logprobs and result.option_probs is None:
            note_event("no_logprobs")
            if attempt == max_retries:
                return _with_spent(result.model_copy(update={"degraded": "no_logprobs"}), spent)
            u = result.usage
            spent = u if spent is None else Usage(prompt_tokens=spent.prompt_tokens + u.prompt_tokens,
                                                  completion_tokens=spent.completion_tokens + u.completion_tokens)
            continue
        return result if spent is None else _with_spent(result, spent)
    raise AssertionError("unreachable")  # pragma: no cover


def _with_spent(result: ChatResult, spent: Usage | None) -> ChatResult:
    """``result`` with ``spent``, the tokens of answers thrown away before it, as its ``discarded``
    (:func:`retry_call`)."""
    return result if spent is None else result.model_copy(update={"discarded": spent})


def billed_usage(result: ChatResult) -> list[Usage]:
    """The token counts a fresh call was billed for: its answer's, and those of the answers thrown
    away before it (:attr:`ChatResult.discarded`)."""
    return [result.usage] if result.discarded is None else [result.usage, result.discarded]


_VARIANT_STRIP = re.compile(r"^[\s\*\(\[\"'`_#]*|[\s\)\]\.\:\*\"'`,_]*$")


#: a tokenizer's raw spelling of a byte (SentencePiece's ``<0x41>``)
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def option_of_token(token: str, options: tuple[str, ...]) -> str | None:
    """Return the option a generated answer token stands for, or None.

    ``"A"``, ``" A"``, ``"▁A"``, ``"ĠA"``, ``"A)"``, ``"(A"``, ``"**A"``, ``"A."``, the
    full-width ``"Ａ"`` and the byte token ``"<0x41>"`` all stand for option ``"A"``; ``"An"`` or
    ``"Answer"`` do not. A token as a server that returns undecoded pieces spells it: the space
    of SentencePiece (``▁``) and of byte-level BPE (``Ġ``, and ``Ċ`` for a newline — break-it
    finding, s39: ``ĠB`` was dropped, so that A 0.5 / B 0.4 read as a confident A), a byte
    token, Unicode compatibility forms (NFKC). Matching is case-sensitive, because the LMRA
    templates ask for capital letters.
    """
    if not token.isascii():
        token = unicodedata.normalize("NFKC", token.replace("\u2581", " ").replace("\u0120", " ")
                                      .replace("\u010a", " ").replace("\u0109", " "))
    elif token.startswith("<0x"):
        m = _BYTE_TOKEN.fullmatch(token)
        token = chr(int(m.group(1), 16)) if m else token
    core = _VARIANT_STRIP.sub("", token)
    return core if core in options else None


#: how far option probabilities (and their sum) may exceed 1 by rounding before a result is refused
PROB_TOLERANCE = 1e-3


#: the most tokens one call's usage may count (prompt or completion): far beyond any context
#: window, so a larger count is a provider's bug, not a bill (break-it finding: 10³⁰ was summed)
MAX_TOKENS_PER_CALL = 10 ** 9


def reported_usage(n_in: object, n_out: object, bad: Callable[[str], Exception]) -> Usage:
    """The token usage an HTTP provider's answer reports (input, output counts as read from
    its body) as a :class:`Usage`.

    A count missing (None) is 0 and notes a ``no_usage`` event (counted, shown: the cost and
    token budgets undercount that call); a whole number sent as a float (``20.0``: some
    servers' JSON) is that count.

    Raises:
        ``bad(why)`` — the provider's retryable ``malformed`` error — for a count that is
        not a whole number in [0, :data:`MAX_TOKENS_PER_CALL`] (negative, fractional, a
        string, 10²⁰): retried like any malformed body (break-it finding: a count above
        10⁹ passed the parser and failed the call after the retries, never retried).
    """
    if n_in is None or n_out is None:
        note_event("no_usage")
    counts = [0 if n is None else int(n) if isinstance(n, float) and n.is_integer() else n for n in (n_in, n_out)]
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_TOKENS_PER_CALL for n in counts):
        raise bad(f"token usage {n_in!r} / {n_out!r} is not a pair of whole counts in [0, {MAX_TOKENS_PER_CALL:,}]")
    return Usage(prompt_tokens=counts[0], completion_tokens=counts[1])


#: characters per token of ``max_tokens`` past which an answer is longer than its token limit
#: can make it (tokenizers average about 4 characters a token; a run of spaces or one repeated
#: character may make 16–32), and the floor of that length in characters
MAX_CHARS_PER_TOKEN = 64
OVERSIZE_FLOOR_CHARS = 4096


def oversized_cut(result: "ChatResult", request: "ChatRequest") -> "ChatResult | None":
    """``result`` cut to the length its request's ``max_tokens`` can make
    (``max(OVERSIZE_FLOOR_CHARS, max_tokens × MAX_CHARS_PER_TOKEN)`` characters, ``degraded``
    ``oversized``: not cached, nor memoised; its ``finish_reason`` the provider's — the cut is lmra's,
    counted as ``oversized``, not a cut at ``max_tokens``: break-it finding, s39, it was recorded as
    ``length`` and warned of with "raise max_tokens"), or None when it is not longer: an endpoint that returns megabytes to ``max_tokens =
    48`` (break-it finding, s35: 8-MB answers, reported as 5 tokens, were accepted uncounted, and the
    run's report ran out of memory) is not answering the request. The caller counts it
    (``oversized``)."""
    limit = max(OVERSIZE_FLOOR_CHARS, int(request.max_tokens) * MAX_CHARS_PER_TOKEN)
    if len(result.text or "") <= limit:
        return None
    return result.model_copy(update={"text": result.text[:limit], "degraded": "oversized"})


def result_defect(result: object) -> str | None:
    """Why ``result`` breaks the :class:`Provider` protocol's contract, or None when it keeps it:
    not a :class:`ChatResult`; a field of the wrong type (pydantic validates a ChatResult when
    it is made, not when a provider assigns to it afterwards: ``text`` not a string, a token
    count that is not an int in [0, :data:`MAX_TOKENS_PER_CALL`], a name or reason not a string
    or None); or ``option_probs`` holding a value that is not a finite number in
    [0, 1] or summing above 1 (with :data:`PROB_TOLERANCE` for rounding). Checked on every fresh
    answer (:class:`lmra.cache.CachedProvider`), before it is used or cached: a custom provider's
    NaN, negative or inflated probabilities would otherwise be read as zeros or renormalised
    away, changing ratings and refusal labels with nothing counted, and a ``text = None`` would
    end the audit with a traceback and be cached for the next night (break-it findings)."""
    if not isinstance(result, ChatResult):
        return f"a {type(result).__name__} instead of a ChatResult"
    f = result.__dict__  # (a pydantic model's fields; one check of the usual case, the messages below)
    usage = f["usage"]
    u = usage.__dict__ if type(usage) is Usage else None
    if not (u is not None and type(f["text"]) is str and type(u["prompt_tokens"]) is int
            and type(u["completion_tokens"]) is int and 0 <= u["prompt_tokens"] <= MAX_TOKENS_PER_CALL
            and 0 <= u["completion_tokens"] <= MAX_TOKENS_PER_CALL and type(f["model"]) is str
            and type(f["provider"]) is str and (f["finish_reason"] is None or type(f["finish_reason"]) is str)
            and (f["degraded"] is None or type(f["degraded"]) is str)
            and (f["served_model"] is None or type(f["served_model"]) is str)
            and (f["system_fingerprint"] is None or type(f["system_fingerprint"]) is str)):
        why = _field_defect(result)
        if why is not None:
            return why
    return _probs_defect(result.option_probs)


def _field_defect(result: ChatResult) -> str | None:
    """:func:`result_defect`'s message about a field of the wrong type, or None."""
    if not isinstance(result.text, str):
        return f"text as a {type(result.text).__name__} instead of a string"
    usage = result.usage
    if not isinstance(usage, Usage):
        return f"usage as a {type(usage).__name__} instead of a Usage"
    for field in ("prompt_tokens", "completion_tokens"):
        n = getattr(usage, field)
        if not (type(n) is int and 0 <= n <= MAX_TOKENS_PER_CALL):
            return f"usage.{field} = {n!r} (not a whole number of tokens in [0, {MAX_TOKENS_PER_CALL:,}])"
    for field in ("model", "provider"):
        if not isinstance(getattr(result, field), str):
            return f"{field} as a {type(getattr(result, field)).__name__} instead of a string"
    for field in ("finish_reason", "degraded", "served_model", "system_fingerprint"):
        value = getattr(result, field)
        if value is not None and not isinstance(value, str):
            return f"{field} as a {type(value).__name__} instead of a string or None"
    return None


def _probs_defect(probs: object) -> str | None:
    """:func:`result_defect`'s message about ``option_probs``, or None."""
    if probs is None:
        return None
    if not isinstance(probs, dict):
        return f"option_probs as a {type(probs).__name__} instead of a dict of option → probability"
    total = 0.0
    for option, p in probs.items():
        if not (isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p)
                and -PROB_TOLERANCE <= p <= 1.0 + PROB_TOLERANCE):
            return f"option probability {p!r} for {option!r} (not a number in [0, 1])"
        total += p
    if total > 1.0 + PROB_TOLERANCE:
        return f"option probabilities summing to {total:.4g} (above 1)"
    return None


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
    return json_key(provider, base_url, model, request_json(request))


#: ChatRequest's fields as :func:`request_json` writes them (sorted); a field added to the
#: class and not here sends every request through the generic encoder, so no field is ever
#: left out of the key.
_REQUEST_FIELDS = ("max_tokens", "messages", "options", "prefill", "sample_index", "seed", "stop", "temperature",
                   "top_logprobs")
_FAST_REQUEST_JSON = sorted(ChatRequest.model_fields) == list(_REQUEST_FIELDS)
_enc = json.encoder.encode_basestring  # what json.dumps(..., ensure_ascii=False) uses for a str (C)


_STRS_JSON: dict[tuple, str] = {}  # tuples of options / stop strings seen → their JSON text


def _strs_json(v: Any) -> str | None:
    """``["a","b"]`` for a tuple/list of exact strs, ``null`` for None, else None (not handled)."""
    if v is None:
        return "null"
    if type(v) is tuple:
        text = _STRS_JSON.get(v)
        if text is not None:
            return text
    if type(v) in (tuple, list) and all(type(x) is str for x in v):
        text = "[" + ",".join(map(_enc, v)) + "]"
        if type(v) is tuple and len(_STRS_JSON) < 1024:
            _STRS_JSON[v] = text
        return text
    return None


def request_json(request: ChatRequest) -> str:
    """The canonical JSON text of a request's :meth:`ChatRequest.cache_payload`: exactly
    ``json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))``, the
    text hashed into the cache key and stored with the answer.

    Written field by field (about 4× faster than dumping the model and then the dict, which
    was a tenth of lmra's own time per call); anything the fast writer does not handle exactly
    (a subclass, a non-finite temperature, an unexpected type) goes through that generic
    ``json.dumps``, so the text, and therefore every key, is the same either way."""
    r = request
    d = r.__dict__
    if _FAST_REQUEST_JSON and type(r) is ChatRequest:
        t, mt, si, seed, tl, prefill = (d["temperature"], d["max_tokens"], d["sample_index"], d["seed"],
                                       d["top_logprobs"], d["prefill"])
        options, stop = _strs_json(d["options"]), _strs_json(d["stop"])
        if (type(t) is float and t - t == 0.0 and type(mt) is int and type(si) is int
                and (seed is None or type(seed) is int) and (tl is None or type(tl) is int)
                and (prefill is None or type(prefill) is str) and options is not None and stop is not None):
            parts = []
            for m in d["messages"]:
                md = m.__dict__
                content, role = md.get("content"), md.get("role")
                if type(m) is not Message or type(content) is not str or type(role) is not str:
                    break
                parts.append('{"content":' + _enc(content) + ',"role":' + _enc(role) + "}")
            else:  # one join: the messages (1–3 KB for an LMRA question) are copied once
                return "".join(('{"max_tokens":', repr(mt), ',"messages":[', ",".join(parts), '],"options":', options,
                                "" if prefill is None else ',"prefill":' + _enc(prefill),
                                ',"sample_index":', repr(si), ',"seed":', "null" if seed is None else repr(seed),
                                ',"stop":', stop, ',"temperature":', repr(t),
                                ',"top_logprobs":', "null" if tl is None else repr(tl), "}"))
    return json.dumps(r.cache_payload(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def json_key(provider: str, base_url: str, model: str, request_text: str) -> str:
    """:func:`request_key` from the request's :func:`request_json` text (the call cache
    computes that text once per call, for the key and for the stored row): the SHA-256 of
    ``{"base_url":…,"model":…,"provider":…,"request":<request_text>}`` — the same bytes as
    :func:`payload_key`'s sorted, compact ``json.dumps``."""
    enc = _enc if type(provider) is str and type(base_url) is str and type(model) is str else (
        lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":")))
    h = hashlib.sha256(('{"base_url":' + enc(base_url) + ',"model":' + enc(model) + ',"provider":' + enc(provider)
                        + ',"request":').encode("utf-8"))
    h.update(request_text.encode("utf-8"))  # hashed in parts: the same bytes, the request not copied again
    h.update(b"}")
    return h.hexdigest()


def payload_key(provider: str, base_url: str, model: str, payload: dict[str, Any]) -> str:
    """:func:`request_key` of a request whose :meth:`ChatRequest.cache_payload` is already at
    hand (the call cache computes it once per call: for the key and for the stored row)."""
    blob = json.dumps(
        {"provider": provider, "base_url": base_url, "model": model, "request": payload},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()

"""Endpoint circuit breaker: an audit stops when a model's endpoint never answered.

A dead port or a server that is down makes every call fail after all its retries; an audit
that went on would spend minutes retrying hundreds of calls and then blame the judge check
or the identity filter. :class:`EndpointGuard` watches one role's (target, judge, judge2)
fresh calls and stops the run with :class:`EndpointUnreachable` once

* :data:`TRIP_AFTER` calls in a row failed after every retry with a transport kind
  (:data:`TRANSPORT_KINDS`: connection, timeout, HTTP 5xx, auth, and HTTP 404 — a model the
  endpoint does not serve, or a ``base_url`` whose path is wrong: every call would fail) or
  were rejected as invalid requests (:data:`REJECTED_KINDS`: HTTP 400, 422 — a setting the
  endpoint refuses; not a content filter's rejection of one prompt, :func:`is_rejected_request`)
  or came back malformed (:data:`MALFORMED_KINDS`, an HTTP endpoint only: a ``base_url`` that
  points at another web server), or
  :data:`TRIP_AFTER_REFUSED` when every one of them was refused outright (nothing listens on
  the port),

and the role has had **no fresh success** in this run. Once one call of the role succeeded,
a failure is a blip, counted as a failed pair and judged by ``max_failed_share`` (a partial
run) — unless :data:`TRIP_AFTER_DOWN` calls in a row fail so (:data:`TRIP_AFTER_DOWN_REFUSED`
refused outright) over at least :data:`TRIP_DOWN_AFTER_S` seconds: the endpoint went down mid-run, and the run stops as above, its answered calls
in the cache for the re-run (fresh-user finding: a chatbot server killed 10 s into a run made
the audit retry 1,400 calls for 15 minutes in silence, to end partial).

It also labels every failure with the role and the endpoint (``target at
http://127.0.0.1:8914/v1: openai connection failed: …``), so that the "first error" of a
failed or partial run, the manifest's ``calls.errors`` and the failed pairs say which model
and which URL failed.

Two wrappers share one guard (see :meth:`EndpointGuard.below_cache` and
:meth:`EndpointGuard.above_cache`): the one below the call cache sees only fresh calls and
labels their errors (the cache records the labelled message); the one above it raises
:class:`EndpointUnreachable`, which the call cache would otherwise turn into a failed call.
"""

from __future__ import annotations

import time
from collections import Counter

from lmra.providers.base import ChatRequest, ChatResult, Provider, ProviderError, wrap_identity
from lmra.redact import error_text

#: consecutive failed calls (after every retry, no success yet) that stop the run
TRIP_AFTER = 8
#: the same when every one of them was "connection refused" (nothing listens on the port)
TRIP_AFTER_REFUSED = 3
#: the same after the role had answered in this run: the endpoint went down mid-run — every call
#: failing after all its retries, at least this many in a row …
TRIP_AFTER_DOWN = 4 * TRIP_AFTER
#: … (this many when every one of them was refused outright: the server process is gone) …
TRIP_AFTER_DOWN_REFUSED = 2 * TRIP_AFTER
#: … and for at least this many seconds since the first of them: an outage shorter than that is a
#: blip, whatever the calls in flight (review finding: 34 calls in flight failing together in a
#: 12-second outage tripped a count alone, failing a night that had lost 34 of thousands of calls)
TRIP_DOWN_AFTER_S = 60.0
#: fresh answers without the log-probabilities asked for (after every retry), and none with them,
#: after which the run says so while it runs (fresh-user finding: a llama.cpp server started
#: without --logits_all made the audit about 5× slower, each question sampled, with nothing said)
NO_LOGPROBS_NOTICE_AFTER = 3
#: the same when some answers came with them (said once either way)
NO_LOGPROBS_NOTICE_AFTER_SOME = 20
#: failure kinds that say the endpoint (not one request) is at fault; ``http_404``: the model is
#: not served there, or the URL's path is wrong (fresh-user finding: a mistyped model id made
#: every call of the audit fail, each one paid for on the other role)
TRANSPORT_KINDS = ("connection", "timeout", "auth", "http_404")


#: failure kinds of a request the endpoint rejected as invalid (HTTP 400 Bad Request, 422
#: Unprocessable): counted only before the role's first answer, when every call is rejected alike —
#: a setting the endpoint refuses (``logprobs`` or ``top_logprobs`` on a model without them, a
#: ``max_tokens`` over its limit) fails every call of the run (break-it finding: a judge answering
#: HTTP 400 to each call ran the whole judge check and filter, its message shown nowhere)
REJECTED_KINDS = ("http_400", "http_422")
#: failure kinds of an answer that is no completion (a body that is not the API's JSON, no
#: choices): counted only before the role's first answer and only for an HTTP endpoint — a
#: ``base_url`` that points at another web server (its HTML page answered with HTTP 200) fails
#: every call so (a custom provider's malformed answers stay counted failures: its own matter)
MALFORMED_KINDS = ("malformed", "no_choices")
#: words of a rejection that concerns one request's content, not the endpoint's settings (a
#: provider's content filter answers HTTP 400 to a flagged prompt; a prompt longer than the model's
#: context): never counted by the breaker
CONTENT_REJECTION_WORDS = ("content_filter", "content filter", "content management", "content policy",
                           "usage policy", "flagged", "safety",
                           # a request too long for the model: that prompt's (break-it finding: a task of long
                           # documents first in the file stopped a run whose other prompts all fitted)
                           "context_length", "context length", "maximum context", "too long", "too many tokens",
                           "param messages")


def is_transport_failure(kind: str) -> bool:
    """True for the kinds counted by the breaker: :data:`TRANSPORT_KINDS` and ``http_5xx``."""
    return kind in TRANSPORT_KINDS or (kind.startswith("http_5") and len(kind) == 8)


def is_rejected_request(exc: ProviderError) -> bool:
    """True for a request the endpoint rejected as invalid (:data:`REJECTED_KINDS`), unless its
    message says the rejection concerns the request's content (:data:`CONTENT_REJECTION_WORDS`)."""
    if exc.kind not in REJECTED_KINDS:
        return False
    text = str(exc).lower()
    return not any(w in text for w in CONTENT_REJECTION_WORDS)


def _refused(exc: BaseException) -> bool:
    """True when ``exc`` or one of its causes is a refused TCP connection."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 10:
        if isinstance(e, ConnectionRefusedError) or "connection refused" in str(e).lower() \
                or "errno 111" in str(e).lower():
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


#: a gateway's or proxy's statuses: the server behind it did not answer (bad gateway, gateway timeout) —
#: "unreachable" still says it (break-it round 2, s41: a proxy whose model server was down read "the server is
#: up … points at the API")
GATEWAY_KINDS = ("http_502", "http_504")

#: what a role's ``base_url`` must point at, by provider name (the advice of a malformed or 404
#: endpoint; break-it finding: an anthropic role was told to check for an OpenAI-compatible API)
API_WORDS = {
    "anthropic": ("an Anthropic Messages API (the server's URL without /v1: the SDK adds /v1/messages)",
                  "the server's URL without /v1"),
}
OPENAI_WORDS = ("an OpenAI-compatible API (the URL up to /v1, not a web page)", "the URL up to /v1")


def _status_codes(kinds: Counter) -> str:
    """The HTTP statuses of a streak's failure kinds, e.g. ``400 and 422`` (from ``http_400`` …)."""
    return " and ".join(sorted({k.removeprefix("http_") for k in kinds}))


class EndpointUnreachable(RuntimeError):
    """A role's endpoint failed every call so far: the audit stops (exit status 1).

    Not a :class:`ProviderError` (the stages record those as failed pairs and go on). The
    run's manifest gets status ``failed`` and this message as its ``stop_reason``.

    Attributes:
        role: ``target``, ``judge`` or ``judge2``; url: the endpoint ("" for in-process
        backends); n_failed: the calls in a row that failed; kinds: their kinds and counts;
        not_served (all HTTP 404), rejected (all HTTP 400/422: the message quotes the first
        error), malformed (all malformed bodies), timed_out, overloaded (all HTTP 529/503),
        http_errors (all other HTTP error statuses, before any answer: quoted): which endpoint
        failure the message names.
    """

    def __init__(self, role: str, url: str, n_failed: int, kinds: Counter, refused: bool, any_answer: bool,
                 model: str = "", answered_before: int = 0, first_error: str = "", api: str = "openai"):
        self.role, self.url, self.n_failed, self.kinds = role, url, n_failed, kinds
        api_words, url_words = API_WORDS.get(api, OPENAI_WORDS)
        #: fresh calls of the role answered in this run before the streak (> 0: it went down mid-run)
        self.answered_before = answered_before
        #: the server answered, but HTTP 404 every time: the model (or the URL's path) is not served
        self.not_served = bool(kinds) and set(kinds) == {"http_404"}
        #: the server answered, but rejected every request as invalid (HTTP 400/422): a setting of the role
        self.rejected = bool(kinds) and set(kinds) <= set(REJECTED_KINDS)
        #: the server answered, but never with a completion (malformed bodies): not the API at this URL
        self.malformed = bool(kinds) and set(kinds) <= set(MALFORMED_KINDS)
        why = "connection refused" if refused else ", ".join(f"{k} × {n}" for k, n in kinds.most_common())
        #: how the calls of the streak failed, in a few words (the final exit line quotes it)
        self.why = why
        # a custom provider's URL is keyed with its options' digest (lmra.providers.keyed_base_url): shown
        # without it, and its advice names its options (fresh-user finding: a wrong route in options got
        # "check model … the URL up to /v1")
        shown, _, options = url.partition("#options=")
        custom = bool(options)
        where = f"endpoint {shown}" if url else "backend"
        done = ("the run stopped (answers already in the cache are kept)" if any_answer
                else "nothing was audited")
        if self.rejected:  # the server answers, but refuses the requests themselves
            codes = _status_codes(kinds)
            super().__init__(f"the {role}'s {where} rejected every request so far: {n_failed} calls in a row failed with "
                             f"HTTP {codes} ({why}); {done}. The first: {first_error or '(no message)'}. Change "
                             f"what it refuses in [{role}] (e.g. logprobs = false for a model without "
                             "log-probabilities, a smaller max_tokens, the model id), then run the same command again")
            return
        if self.malformed:  # something answers at the URL, but not the API
            super().__init__(f"the {role}'s {where} answered no valid completion: {n_failed} calls in a row came back "
                             f"malformed after every retry ({why}); {done}. The first: {first_error or '(no message)'}. "
                             f"Check that base_url in [{role}] points at {api_words}, then run the same command again")
            return
        if self.not_served:  # the server answers, but not for this model or path
            which = f" '{model}'" if model else ""
            check = (f"Check base_url, model and options in [{role}] (the route and model the custom provider asks "
                     "for: its options are passed to it as written)" if custom else
                     f"Check model and base_url in [{role}] (the model id the server serves; {url_words})")
            super().__init__(f"the {role}'s {where} does not serve its model{which}: {n_failed} calls in a row failed "
                             f"with HTTP 404 ({why}); {done}. {check}, then run the same command again")
            return
        #: every call of the streak timed out: a server up but slower than timeout_s (break-it finding, s36:
        #: "unreachable … check that the server is running" for a CPU-hosted model answering in 2 s of 1)
        self.timed_out = bool(kinds) and set(kinds) == {"timeout"}
        if self.timed_out:
            was = (f"after {answered_before:,} answered calls, " if answered_before else "")
            super().__init__(f"the {role}'s {where} answered no call in time: {was}{n_failed} calls in a row took longer "
                             f"than timeout_s after every retry ({why}); {done}. A server that is up but slower than "
                             f"that (a model on CPU, an overloaded server) needs a larger timeout_s in [{role}] (or a "
                             "lower concurrency); else check that it is running. Then run the same command again: it "
                             "resumes from the cache")
            return
        #: every call of the streak answered "overloaded / unavailable" (HTTP 529, 503): the server is up and
        #: answers — it asks to be retried later (break-it finding, s40: "unreachable … check that the server is
        #: running" for an Anthropic endpoint answering 529 overloaded_error to every call)
        self.overloaded = bool(kinds) and set(kinds) <= {"http_529", "http_503"}
        if self.overloaded:
            was = (f"after {answered_before:,} answered calls, " if answered_before else "")
            super().__init__(f"the {role}'s {where} is overloaded: {was}{n_failed} calls in a row were answered "
                             f"\"overloaded\" or \"unavailable\" after every retry ({why}); {done}. The server answers "
                             "but asks to be retried later: run the same command again later (it resumes from the "
                             f"cache), or lower concurrency / requests_per_minute in [{role}]")
            return
        #: every call of the streak was answered with an HTTP error status (500, 501, 405 …; not a gateway's
        #: 502 or 504) before any answer:
        #: the server is up — failing, or not the API (fresh-user finding, s41: a plain web server answering
        #: HTTP 501 "Unsupported method ('POST')" read "unreachable … check that the server is running", its text
        #: not shown)
        self.http_errors = (bool(kinds) and all(k.startswith("http_") for k in kinds) and not answered_before
                            and not set(kinds) & set(GATEWAY_KINDS))  # (a proxy's: its upstream is what is down)
        if self.http_errors:
            codes = _status_codes(kinds)
            super().__init__(f"the {role}'s {where} answered every call with an HTTP error: {n_failed} calls in a row "
                             f"failed with HTTP {codes} after every retry ({why}); {done}. The first: "
                             f"{first_error or '(no message)'}. The server is up but answers no completion: check "
                             f"that base_url in [{role}] points at {api_words} (HTTP 501 or 405: a server that does "
                             "not take the API's requests — a web page, a file server) and that the server works, "
                             "then run the same command again")
            return
        if answered_before:  # it answered earlier in this run, then stopped
            super().__init__(f"the {role}'s {where} stopped answering mid-run: after {answered_before:,} answered "
                             f"calls, {n_failed} calls in a row failed after every retry ({why}); {done}. Check that "
                             "the server is running, then run the same command again: it resumes from the cache")
            return
        answered = any(k in REJECTED_KINDS or k in MALFORMED_KINDS for k in kinds)  # (some calls got an answer:
        # the one that says why is quoted; break-it finding: a 400 naming an unsupported parameter was dropped)
        first = f" The first answer: {first_error}." if answered and first_error else ""
        super().__init__(f"the {role}'s {where} is unreachable: {n_failed} calls in a row failed after every "
                         f"retry ({why}); {done}.{first} Check that the server is running and that base_url in "
                         f"[{role}] points at it, then run the same command again")


class EndpointGuard:
    """The breaker of one role; wrap its provider chain with :meth:`below_cache` and
    :meth:`above_cache`.

    Args:
        role: ``target``, ``judge`` or ``judge2`` (named in messages).
        url: the endpoint (the provider's ``base_url``; "" for in-process backends).
        model: the model id asked for (named when the endpoint does not serve it, HTTP 404).
        trip_after, trip_after_refused: see :data:`TRIP_AFTER`, :data:`TRIP_AFTER_REFUSED`.
        trip_after_down, trip_after_down_refused, trip_down_after_s: see :data:`TRIP_AFTER_DOWN`,
            :data:`TRIP_AFTER_DOWN_REFUSED`, :data:`TRIP_DOWN_AFTER_S` (after the role answered in this run).
        api: the role's provider name (``openai``, ``anthropic`` …): what its ``base_url`` must point at,
            in the advice of a malformed or 404 endpoint (:data:`API_WORDS`).
        redact: a redacted run (``redact = true``): the first error of a streak named when rejected
            requests trip the breaker is its type and kind only (:func:`lmra.redact.error_text`).
        on_notice: called once (:meth:`_answered`) when :data:`NO_LOGPROBS_NOTICE_AFTER` fresh
            answers came without the log-probabilities asked for and none with them.

    Attributes:
        successes: fresh calls of the role that succeeded (≥ 1 disarms the breaker).
        streak: transport failures in a row since the last success (0 once disarmed).
        tripped: the :class:`EndpointUnreachable` raised, once the breaker tripped.
    """

    def __init__(self, role: str, url: str, *, trip_after: int = TRIP_AFTER,
                 trip_after_refused: int = TRIP_AFTER_REFUSED, model: str = "",
                 trip_after_down: int = TRIP_AFTER_DOWN, trip_after_down_refused: int = TRIP_AFTER_DOWN_REFUSED,
                 trip_down_after_s: float = TRIP_DOWN_AFTER_S, on_notice=None, redact: bool = False,
                 api: str = "openai"):
        self.role, self.url, self.model = role, url, model
        self.api = api  # the provider's name: which API its base_url must point at (API_WORDS)
        self.redact = redact
        self.trip_after, self.trip_after_refused = trip_after, trip_after_refused
        self.successes = 0
        self.answered = False  # any answer, cached or fresh, reached the stages
        self.streak = 0
        self.all_refused = True
        self.kinds: Counter = Counter()
        self.first_error = ""  # the first failure of the streak (named when rejected requests trip it)
        self.same_text = None  # the message every rejected or malformed answer of the streak had
        self.tripped: EndpointUnreachable | None = None
        self.trip_after_down, self.trip_after_down_refused = trip_after_down, trip_after_down_refused
        self.trip_down_after_s = trip_down_after_s
        self.down_streak = 0  # transport failures in a row since the last success, once it answered
        self.down_since = 0.0  # (monotonic) when the first of them failed
        self.down_refused = True
        self.down_kinds: Counter = Counter()
        self.on_notice = on_notice
        self.without_logprobs = 0  # fresh answers that came without the log-probabilities asked for
        self.logprobs_seen = False
        self.noticed = False

    def label(self, message: str) -> str:
        """``message`` prefixed with the role and (unless it names it already) the endpoint."""
        if self.url and self.url not in message:
            return f"{self.role} at {self.url}: {message}"
        return f"{self.role}: {message}"

    def _failed(self, exc: ProviderError) -> None:
        if self.tripped is not None:
            return
        if self.successes:  # answered before: only a long streak trips (the endpoint went down)
            if not is_transport_failure(exc.kind):
                self.down_streak, self.down_refused = 0, True
                self.down_kinds.clear()
                return
            now = time.monotonic()
            if not self.down_streak:
                self.down_since = now
            self.down_streak += 1
            self.down_kinds[exc.kind] += 1
            self.down_refused = self.down_refused and exc.kind == "connection" and _refused(exc)
            if (self.down_streak >= (self.trip_after_down_refused if self.down_refused else self.trip_after_down)
                    and now - self.down_since >= self.trip_down_after_s):
                self.tripped = EndpointUnreachable(self.role, self.url, self.down_streak, self.down_kinds.copy(),
                                                   self.down_refused, True, model=self.model,
                                                   answered_before=self.successes, api=self.api)
            return
        if not (is_transport_failure(exc.kind) or is_rejected_request(exc)
                or (self.url and exc.kind in MALFORMED_KINDS)):
            self.streak, self.all_refused, self.same_text = 0, True, None
            self.kinds.clear()
            return
        if exc.kind in REJECTED_KINDS or exc.kind in MALFORMED_KINDS:
            # the endpoint's own fault only when it answers every request alike (a setting it refuses,
            # a web page); requests rejected each for its own reason are the requests' (break-it finding)
            text = str(exc)
            if self.same_text is not None and text != self.same_text:
                self.streak, self.all_refused = 0, True
                self.kinds.clear()
            self.same_text = text
        if not self.streak:
            self.first_error = error_text(exc, self.redact)
        self.streak += 1
        self.kinds[exc.kind] += 1
        self.all_refused = self.all_refused and exc.kind == "connection" and _refused(exc)
        if self.streak >= (self.trip_after_refused if self.all_refused else self.trip_after):
            self.tripped = EndpointUnreachable(self.role, self.url, self.streak, self.kinds.copy(),
                                               self.all_refused, self.answered, model=self.model,
                                               first_error=self.first_error, api=self.api)

    def _answered(self, result: ChatResult) -> None:
        """Count an answer to an option question: with log-probabilities, or without them after
        every retry (``degraded == "no_logprobs"``); at :data:`NO_LOGPROBS_NOTICE_AFTER` of the
        latter and none of the former (:data:`NO_LOGPROBS_NOTICE_AFTER_SOME` when some came with
        them), say once (``on_notice``) what it costs and how to fix it."""
        if getattr(result, "option_probs", None) is not None:
            self.logprobs_seen = True
            return
        if getattr(result, "degraded", None) != "no_logprobs":
            return
        self.without_logprobs += 1
        if self.noticed or self.on_notice is None:
            return
        # none with them: after a few; some with them (a server restarted without them, or dropping
        # them now and then): after more (review finding: one answer with them silenced the warning)
        after = NO_LOGPROBS_NOTICE_AFTER_SOME if self.logprobs_seen else NO_LOGPROBS_NOTICE_AFTER
        if self.without_logprobs >= after:
            self.noticed = True
            where = f"endpoint {self.url}" if self.url else "backend"
            some = ", after others with them" if self.logprobs_seen else ""
            self.on_notice(
                f"the {self.role}'s {where} answers without log-probabilities ({self.without_logprobs} answers so far"
                f"{some}, each after its retries): every such LMRA question is then estimated from n_samples sampled "
                "answers — several times the calls and the time, and weaker ratings. For llama.cpp's server, start it with "
                f"--logits_all true (docs/providers.md); for an endpoint that has none, set logprobs = false in "
                f"[{self.role}] (no retries for them, and the plan counts the sampled calls)")

    def below_cache(self, inner: Provider) -> "_Labelled":
        """Wrap the provider below the call cache: count fresh calls, label their errors."""
        return _Labelled(inner, self)

    def above_cache(self, inner: Provider) -> "_Breaker":
        """Wrap the provider above the call cache: raise :class:`EndpointUnreachable` once tripped."""
        return _Breaker(inner, self)


class _Wrapper:
    def __init__(self, inner: Provider, guard: EndpointGuard):
        wrap_identity(self, inner)
        self.guard = guard

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Labelled(_Wrapper):
    async def complete(self, request: ChatRequest) -> ChatResult:
        """Call ``inner``; a failure is re-raised as a ProviderError of the same kind whose
        message names the role and endpoint, and counted by the guard."""
        try:
            result = await self.inner.complete(request)
        except ProviderError as exc:
            labelled = ProviderError(self.guard.label(str(exc)), kind=exc.kind, retryable=exc.retryable)
            self.guard._failed(exc)
            raise labelled from exc
        guard = self.guard
        guard.successes += 1
        guard.streak = 0
        if getattr(result, "degraded", None) is not None or (request.options and not guard.logprobs_seen):
            guard._answered(result)  # (getattr: a custom provider's non-ChatResult is the cache's to count)
        if guard.down_streak:  # (the hot path: nothing to reset after a success)
            guard.down_streak, guard.down_refused = 0, True
            guard.down_kinds.clear()
        return result

    def __getattr__(self, name: str):  # e.g. endpoint_lacks_logprobs, key_source of the backend
        return getattr(self.inner, name)


class _Breaker(_Wrapper):
    async def complete(self, request: ChatRequest) -> ChatResult:
        """Call ``inner``.

        Raises:
            EndpointUnreachable: the breaker tripped on this call or an earlier one.
            ProviderError: any other failure (recorded by the stages as a failed call).
        """
        if self.guard.tripped is not None:
            raise self.guard.tripped
        try:
            result = await self.inner.complete(request)
        except ProviderError as exc:
            if self.guard.tripped is not None:
                raise self.guard.tripped from exc
            raise
        self.guard.answered = True
        return result

"""Sorting a finished batch's downloaded results into answers and failures, the same way for
every batch API (``_openai_batch``, ``_anthropic_batch``), so that nothing in an odd output file
is dropped silently or crashes the download.

A provider's output can hold lines that are not JSON (a file cut mid-line), rows of the wrong
shape, results for calls that are not in the batch, and several results for one call (an item
retried by the provider). :class:`BatchResults` keeps, per call of the batch:

* its answer, when a result parses (a failure listed before it is dropped: the retry won);
* a failure message otherwise — an error result, an answer that does not parse, two results
  that disagree (neither is kept: which one the provider meant is unknown), or none at all
  ("missing from the batch output", with what could not be read);

and counts unreadable lines and results for unknown calls in :attr:`BatchResults.notes`, which
the backends store with the job (``remote["output_notes"]``) and the orchestrator logs.
"""

from __future__ import annotations

from collections.abc import Callable

from lmra.providers.base import ChatRequest, ChatResult, ProviderError

#: what parsing one result may raise (a row of the wrong shape, an SDK object missing a field)
PARSE_ERRORS = (ProviderError, TypeError, ValueError, AttributeError, KeyError)


def _same(a: ChatResult, b: ChatResult) -> bool:
    return (a.text, a.option_probs) == (b.text, b.option_probs)


class BatchResults:
    """The results of one batch, call by call (see the module docstring).

    Args:
        requests: cache key → request, for every call in the batch.
    """

    def __init__(self, requests: dict[str, ChatRequest]):
        self.requests = requests
        self.results: dict[str, ChatResult] = {}
        self.errors: dict[str, str] = {}
        self._conflicting: set[str] = set()
        self.unreadable = 0
        self.unknown = 0

    def _known(self, key) -> bool:
        if isinstance(key, str) and key in self.requests:
            return True
        self.unknown += 1
        return False

    def success(self, key, parse: Callable[[], ChatResult]) -> None:
        """A result the provider says succeeded; ``parse()`` builds its :class:`ChatResult`
        (a failure when it raises one of :data:`PARSE_ERRORS`)."""
        if not self._known(key) or key in self._conflicting:
            return
        try:
            result = parse()
        except PARSE_ERRORS as exc:
            self.failure(key, f"unparseable batch output: {type(exc).__name__}: {exc}")
            return
        if key in self.results:
            if not _same(self.results[key], result):
                del self.results[key]
                self._conflicting.add(key)
                self.errors[key] = "the batch output holds two different answers for this call (neither is used)"
            return
        self.results[key] = result
        self.errors.pop(key, None)

    def failure(self, key, message: str) -> None:
        """A result that failed (or could not be parsed); an answer already kept stands."""
        if self._known(key) and key not in self.results and key not in self._conflicting:
            self.errors.setdefault(key, message)

    def line_unreadable(self) -> None:
        """Count an output line that is not a JSON object."""
        self.unreadable += 1

    @property
    def notes(self) -> list[str]:
        """What could not be matched to a call of the batch, in words (empty when nothing)."""
        out = []
        if self.unreadable:
            out.append(f"{self.unreadable} output line(s) could not be read (not a JSON object)")
        if self.unknown:
            out.append(f"{self.unknown} result(s) for calls that are not in this batch were ignored")
        return out

    def finish(self, why: str) -> tuple[dict[str, ChatResult], dict[str, str]]:
        """``(results, errors)``: every call of the batch in one of the two; a call with no result
        fails as "missing from the batch output ({why}; {notes})"."""
        detail = "; ".join([why, *self.notes])
        for key in self.requests:
            if key not in self.results and key not in self.errors:
                self.errors[key] = f"missing from the batch output ({detail})"
        return self.results, self.errors


def submission_error(api: str, base_url: object, model: str, exc: BaseException) -> ProviderError:
    """The error of a batch submission that failed after the SDK's retries: what was asked of
    which URL, the SDK's message, and — when the endpoint answered HTTP 404/405 — that it may have
    no Batch API at all, or — when it could not be reached — to check it (fresh-user finding: "openai batch submission
    failed: Error code: 404", no URL, no hint; vLLM, llama.cpp's server and most local
    OpenAI-compatible servers serve no batches)."""
    status = getattr(exc, "status_code", None)
    hint = ""
    if status in (404, 405):
        hint = (" — this endpoint may have no Batch API (most local and self-hosted OpenAI-compatible servers serve "
                "chat completions only): run without --batch")
    elif type(exc).__name__ in ("APIConnectionError", "APITimeoutError"):  # (break-it round 2: told "no Batch API")
        hint = " — the endpoint could not be reached: check base_url and that the server runs"
    return ProviderError(f"{api} batch submission for model '{model}' at {base_url} failed: {exc}{hint}")

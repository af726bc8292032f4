"""OpenAI-compatible chat completions through the official ``openai`` SDK.

Works with any server that speaks the Chat Completions API at a configurable ``base_url``
(OpenAI, vLLM, Ollama, LM Studio, llama.cpp / llama-cpp-python servers). Option
probabilities come from ``logprobs`` / ``top_logprobs`` of the first answer token, summed
over variants (``A``, `` A``, ``A)`` …); the SDK retries 429/5xx/timeouts with backoff, and
faulty 200 responses are retried here (see :class:`OpenAIProvider`).
"""

from __future__ import annotations

import json
import time
from collections import deque

import openai

from lmra.config import ModelConfig
from lmra.providers._http import counting_client
from lmra.providers.base import BODY_ERRORS, FILTER_FINISH_REASONS, ChatRequest, ChatResult, retry_call, sdk_failure
from lmra.providers.keys import BASE_URL_ENV, resolve_api_key, resolve_base_url


#: Answers to option questions without log-probabilities after which, with none ever seen
#: with them, the endpoint is taken not to return log-probabilities at all.
NO_LOGPROBS_ENDPOINT_AFTER = 3
#: … or, once it gave some, when at least :data:`NO_LOGPROBS_RECENT_SHARE` of its last
#: :data:`NO_LOGPROBS_RECENT` answers to option questions came without them (fresh-user finding,
#: s44: a judge that stopped giving them mid-run — a proxy change — after a few answers with them
#: was retried 2,304 times, a 20-minute night for a verdict of "no conclusion"); an endpoint that
#: leaves them out now and then (5 %) is retried as before, and one that gives them again is
#: retried again once more than a tenth of its recent answers have them
NO_LOGPROBS_RECENT = 50
NO_LOGPROBS_RECENT_SHARE = 0.9


class OpenAIProvider:
    """Provider for OpenAI-compatible endpoints.

    Args:
        cfg: model config; ``model`` required, ``base_url`` optional (SDK default otherwise),
            ``api_key_env`` names the key variable (default ``OPENAI_API_KEY``), which must be
            set unless ``api_key_required = false`` (a local server that needs no key; a
            placeholder key is sent). See :func:`~lmra.providers.keys.resolve_api_key`.
        http_client: optional ``httpx2.AsyncClient`` (default: the SDK's client on a
            :class:`~lmra.providers._http.CountingTransport`, so that retries are counted).

    Faults: the SDK retries 429/5xx/timeouts/connection errors (``max_retries``); a 200
    response that is not a completion (a body that is not JSON, no choices) or an answer
    to an option question without log-probabilities is retried by
    :func:`~lmra.providers.base.retry_call` as often. An endpoint that has answered
    ``NO_LOGPROBS_ENDPOINT_AFTER`` option questions without ever giving log-probabilities
    is no longer retried for them; such an answer is returned marked ``degraded`` (never
    cached), and the LMRA's question is estimated by sampling instead
    (:func:`~lmra.judge.options.ask_options`); set ``logprobs = false`` for such an endpoint to
    skip the greedy call that comes back without them.

    An HTTP 401/403 becomes a :class:`~lmra.providers.base.ProviderError` of kind ``auth``
    naming the key's variable and the endpoint (never retried).

    Raises:
        LmraInputError: the key is needed and its variable is unset (field ``api_key_env``).
    """

    name = "openai"
    supports_logprobs = True

    def __init__(self, cfg: ModelConfig, http_client=None):
        key, self.key_source = resolve_api_key(cfg, "openai", "OPENAI_API_KEY")
        self.cfg = cfg
        self.model_id = cfg.model or ""
        self.base_url = resolve_base_url(cfg, BASE_URL_ENV["openai"])  # (the config's, else the SDK's variable's)
        self.client = openai.AsyncOpenAI(api_key=key, base_url=self.base_url or None, timeout=cfg.timeout_s,
                                         max_retries=cfg.max_retries,
                                         http_client=http_client or counting_client(openai.DefaultAsyncHttpxClient,
                                                                                    max_retries=cfg.max_retries))
        self.supports_logprobs = cfg.logprobs
        self._logprobs_seen = False
        self._answers_without_logprobs = 0
        self._recent: deque[bool] = deque(maxlen=NO_LOGPROBS_RECENT)  # True: an answer without them

    @property
    def endpoint_lacks_logprobs(self) -> bool:
        """True once the endpoint has answered several option questions, never with log-probabilities,
        or nearly all of its recent ones without them (:data:`NO_LOGPROBS_RECENT_SHARE`)."""
        if not self._logprobs_seen:
            return self._answers_without_logprobs >= NO_LOGPROBS_ENDPOINT_AFTER
        return (len(self._recent) == NO_LOGPROBS_RECENT
                and sum(self._recent) >= NO_LOGPROBS_RECENT_SHARE * NO_LOGPROBS_RECENT)

    async def _once(self, request: ChatRequest) -> ChatResult:
        # one definition of the wire format, shared with the Batch API (_openai_batch)
        from lmra.providers._openai_batch import chat_params, chat_result

        t0 = time.perf_counter()
        try:
            # client.post is what chat.completions.create calls after "transforming" its
            # arguments; lmra's are plain JSON already, and skipping that walk over the
            # messages saves a fifth of the SDK's CPU per call (bench/bench_throughput.py).
            # cast_to=object returns the JSON body as parsed (no ChatCompletion objects built,
            # a tenth of the SDK's CPU): chat_result reads it as it reads a Batch API result line
            resp = await self.client.post("/chat/completions", cast_to=object,
                                          body=chat_params(self.model_id, request, self.cfg.top_logprobs))
            if isinstance(resp, str):  # JSON under another content type: the SDK parsed it for a model class
                try:
                    resp = json.loads(resp)
                except ValueError:
                    pass  # not JSON: chat_result says the body is not a completion
            result = chat_result(resp, request, model=self.model_id, provider=self.name,
                                 latency_s=time.perf_counter() - t0)
        except (openai.OpenAIError, *BODY_ERRORS) as exc:
            raise sdk_failure(exc, openai, self.name, self.cfg.timeout_s, self.cfg.max_retries,
                              key_source=self.key_source, endpoint=self.base_url) from exc
        if request.options and result.finish_reason not in FILTER_FINISH_REASONS:  # (a refusal has none because it
            # refused, not because the endpoint drops them: round-2 break-it, s47)
            if result.option_probs is not None:
                self._logprobs_seen = True
            else:
                self._answers_without_logprobs += 1
            self._recent.append(result.option_probs is None)
        return result

    async def complete(self, request: ChatRequest) -> ChatResult:
        if not request.options:
            return await retry_call(lambda: self._once(request), self.cfg.max_retries)
        # an endpoint that never gave log-probabilities is not asked again and again
        retries = 0 if self.endpoint_lacks_logprobs else self.cfg.max_retries
        result = await retry_call(lambda: self._once(request), retries, needs_logprobs=True)
        return result

    async def aclose(self) -> None:
        await self.client.close()

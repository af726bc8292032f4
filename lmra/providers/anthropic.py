"""Anthropic Messages API through the official ``anthropic`` SDK.

The Messages API returns no log-probabilities, so ``supports_logprobs`` is False: the
LMRA layer estimates option probabilities by sampling the answer ``n_samples`` times at
temperature 1 and records the method ``sampled`` on every judgment. System messages are
passed in the API's ``system`` field. The API's default temperature is 1.0; another
temperature is sent in the request body (some recent models reject it). The SDK retries 429/5xx/timeouts with backoff;
a 200 response that is not a valid message is retried here (``retry_call``).
"""

from __future__ import annotations

import time

import anthropic

from lmra.config import ModelConfig
from lmra.errors import LmraInputError
from lmra.providers._http import counting_client
from lmra.providers.base import BODY_ERRORS, ChatRequest, ChatResult, retry_call, sdk_failure
from lmra.providers.keys import BASE_URL_ENV, resolve_api_key, resolve_base_url


class AnthropicProvider:
    """Provider for the Anthropic Messages API.

    Args:
        cfg: model config; ``model`` required; ``api_key_env`` names the key variable
            (default ``ANTHROPIC_API_KEY``), which must be set unless ``api_key_required = false``
            (a local gateway that needs no key); ``base_url`` optional.
        http_client: optional ``httpx2.AsyncClient`` (e.g. with a custom transport; default: the
            SDK's client on a :class:`~lmra.providers._http.CountingTransport`, so retries are counted).

    An HTTP 401/403 becomes a :class:`~lmra.providers.base.ProviderError` of kind ``auth``
    naming the key's variable and the endpoint (never retried).

    Raises:
        LmraInputError: the key is needed and its variable is unset (field ``api_key_env``), or
            ``temperature`` is above the API's 1.0 (field ``temperature``).
    """

    name = "anthropic"
    supports_logprobs = False
    #: the Messages API's largest temperature (its range is 0–1)
    MAX_TEMPERATURE = 1.0

    def __init__(self, cfg: ModelConfig, http_client=None):
        if cfg.temperature > self.MAX_TEMPERATURE:  # (break-it finding: it was capped at 1.0 without a word)
            raise LmraInputError(f"the Anthropic Messages API takes a temperature from 0 to {self.MAX_TEMPERATURE:g}, "
                                 f"got {cfg.temperature:g}", field="temperature")
        key, self.key_source = resolve_api_key(cfg, "anthropic", "ANTHROPIC_API_KEY")
        self.cfg = cfg
        self.model_id = cfg.model or ""
        self.base_url = resolve_base_url(cfg, BASE_URL_ENV["anthropic"])  # (the config's, else the SDK's variable's)
        kwargs = {"api_key": key, "timeout": cfg.timeout_s, "max_retries": cfg.max_retries}
        if self.base_url:
            kwargs["base_url"] = self.base_url
        kwargs["http_client"] = http_client or counting_client(anthropic.DefaultAsyncHttpxClient,
                                                               max_retries=cfg.max_retries)
        self.client = anthropic.AsyncAnthropic(**kwargs)

    async def complete(self, request: ChatRequest) -> ChatResult:
        return await retry_call(lambda: self._once(request), self.cfg.max_retries)

    async def _once(self, request: ChatRequest) -> ChatResult:
        # one definition of the wire format, shared with the Message Batches API (_anthropic_batch)
        from lmra.providers._anthropic_batch import message_params, message_result

        kwargs = message_params(self.model_id, request)
        if "temperature" in kwargs:
            # recent SDKs dropped the typed argument: the temperature travels in the body
            kwargs["extra_body"] = {"temperature": kwargs.pop("temperature")}
        t0 = time.perf_counter()
        try:
            resp = await self.client.messages.create(**kwargs)
            return message_result(resp, model=self.model_id, provider=self.name,
                                  latency_s=time.perf_counter() - t0)
        except (anthropic.AnthropicError, *BODY_ERRORS) as exc:
            raise sdk_failure(exc, anthropic, self.name, self.cfg.timeout_s, self.cfg.max_retries,
                              key_source=self.key_source, endpoint=self.base_url) from exc

    async def aclose(self) -> None:
        await self.client.close()

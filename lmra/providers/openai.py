"""OpenAI-compatible chat completions through the official ``openai`` SDK.

Works with any server that speaks the Chat Completions API at a configurable ``base_url``
(OpenAI, vLLM, Ollama, LM Studio, llama.cpp / llama-cpp-python servers). Option
probabilities come from ``logprobs`` / ``top_logprobs`` of the first answer token, summed
over variants (``A``, `` A``, ``A)`` …); the SDK retries 429/5xx/timeouts with backoff.
"""

from __future__ import annotations

import os
import time

import openai

from lmra.config import ModelConfig
from lmra.errors import LmraInputError
from lmra.providers.base import ChatRequest, ChatResult, ProviderError


class OpenAIProvider:
    """Provider for OpenAI-compatible endpoints.

    Args:
        cfg: model config; ``model`` required, ``base_url`` optional (SDK default otherwise),
            ``api_key_env`` names the key variable (default ``OPENAI_API_KEY``). A local
            ``base_url`` with no key set uses a placeholder key, since such servers ignore it.

    Raises:
        LmraInputError: no API key for a remote endpoint.
    """

    name = "openai"
    supports_logprobs = True

    def __init__(self, cfg: ModelConfig):
        env = cfg.api_key_env or "OPENAI_API_KEY"
        key = os.environ.get(env)
        if not key:
            if cfg.base_url:
                key = "no-key-needed"
            else:
                raise LmraInputError(f"environment variable {env} is not set (needed by provider 'openai')",
                                     field="api_key_env")
        self.cfg = cfg
        self.model_id = cfg.model or ""
        self.base_url = cfg.base_url or ""
        self.client = openai.AsyncOpenAI(api_key=key, base_url=cfg.base_url, timeout=cfg.timeout_s,
                                         max_retries=cfg.max_retries)

    async def complete(self, request: ChatRequest) -> ChatResult:
        # one definition of the wire format, shared with the Batch API (_openai_batch)
        from lmra.providers._openai_batch import chat_params, chat_result

        t0 = time.perf_counter()
        try:
            resp = await self.client.chat.completions.create(**chat_params(self.model_id, request,
                                                                           self.cfg.top_logprobs))
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai call failed: {exc}") from exc
        return chat_result(resp, request, model=self.model_id, provider=self.name,
                           latency_s=time.perf_counter() - t0)

    async def aclose(self) -> None:
        await self.client.close()

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
from lmra.providers.base import ChatRequest, ChatResult, ProviderError, Usage, sum_option_probs

_FORMATTING = set(" \t\n*_#`\"'([")


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
        kwargs: dict = {
            "model": self.model_id,
            "messages": [m.model_dump() for m in request.messages],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.stop:
            kwargs["stop"] = list(request.stop)
        if request.options:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = request.top_logprobs or self.cfg.top_logprobs
        t0 = time.perf_counter()
        try:
            resp = await self.client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai call failed: {exc}") from exc
        latency = time.perf_counter() - t0
        if not resp.choices:
            raise ProviderError("openai response has no choices")
        choice = resp.choices[0]
        probs = None
        if request.options:
            probs = {o: 0.0 for o in request.options}
            content = (choice.logprobs.content if choice.logprobs else None) or []
            for pos in content:
                # skip leading formatting tokens such as "**" or a newline
                if pos.token and all(ch in _FORMATTING for ch in pos.token):
                    continue
                alts = {alt.token: alt.logprob for alt in (pos.top_logprobs or [])}
                alts.setdefault(pos.token, pos.logprob)
                probs = sum_option_probs(alts, request.options)
                break
        usage = Usage(prompt_tokens=getattr(resp.usage, "prompt_tokens", 0) or 0,
                      completion_tokens=getattr(resp.usage, "completion_tokens", 0) or 0)
        return ChatResult(text=choice.message.content or "", option_probs=probs, usage=usage,
                          finish_reason=choice.finish_reason, model=resp.model or self.model_id,
                          provider=self.name, latency_s=latency)

    async def aclose(self) -> None:
        await self.client.close()

"""Example custom provider: audit an in-house chatbot behind a simple JSON HTTP API.

Use it from a config with::

    [target]
    provider = "inhouse_provider:make_provider"   # module on PYTHONPATH : factory
    base_url = "http://chatbot.internal:8080"
    options = { route = "/chat" }

The factory receives the :class:`lmra.config.ModelConfig` and returns an object with the
:class:`lmra.providers.base.Provider` protocol. This one POSTs
``{"messages": [...], "temperature": t, "max_tokens": n, "seed": s}`` and expects
``{"reply": "...", "model": "..."}`` back. It has no log-probabilities, so when used as an
LMRA its option probabilities are estimated by sampling.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

from lmra.config import ModelConfig
from lmra.providers.base import ChatRequest, ChatResult, ProviderError, Usage


class InHouseChatbot:
    name = "inhouse"
    supports_logprobs = False

    def __init__(self, cfg: ModelConfig):
        self.base_url = cfg.base_url or "http://127.0.0.1:8080"
        self.model_id = cfg.model or "inhouse-bot"
        self.route = cfg.options.get("route", "/chat")
        self.timeout = cfg.timeout_s

    def _post(self, payload: dict) -> dict:
        req = urllib.request.Request(self.base_url.rstrip("/") + self.route, data=json.dumps(payload).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    async def complete(self, request: ChatRequest) -> ChatResult:
        payload = {"messages": [m.model_dump() for m in request.messages], "temperature": request.temperature,
                   "max_tokens": request.max_tokens, "seed": request.seed}
        t0 = time.perf_counter()
        try:
            data = await asyncio.to_thread(self._post, payload)
        except urllib.error.HTTPError as exc:  # 401/403: kind "auth" stops an audit at once
            kind = "auth" if exc.code in (401, 403) else f"http_{exc.code}"
            raise ProviderError(f"in-house chatbot at {self.base_url} answered HTTP {exc.code}", kind=kind) from exc
        except (OSError, urllib.error.URLError, ValueError) as exc:
            raise ProviderError(f"in-house chatbot call failed: {exc}") from exc
        # served_model: the id the service reports, recorded per run in manifest.json
        return ChatResult(text=data["reply"], model=data.get("model", self.model_id), provider=self.name,
                          usage=Usage(), latency_s=time.perf_counter() - t0, served_model=data.get("model"))

    async def aclose(self) -> None:
        return None


def make_provider(cfg: ModelConfig) -> InHouseChatbot:
    """Factory named in the config as ``provider = "inhouse_provider:make_provider"``."""
    return InHouseChatbot(cfg)

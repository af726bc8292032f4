"""Recsys stage 2 — generate: send one instruction to the target (through the call cache, within
the concurrency bound) and keep its raw answer.

Reads an :class:`~lmra.recsys.instructions.Instruction`; writes the answer dict (``seed``,
``raw``, ``error``, ``from_cache``, ``finish_reason``) that :mod:`lmra.recsys.records` parses.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lmra.generate import derive_seed
from lmra.progress import Progress
from lmra.providers import ChatRequest, Provider, ProviderError
from lmra.recsys.config import RecsysConfig
from lmra.recsys.instructions import Instruction, list_prefill


async def ask_target(cfg: RecsysConfig, ins: Instruction, target: Provider, sem: asyncio.Semaphore,
                     progress: Progress) -> dict:
    """Send one instruction to the target (seeded per instruction; the embedded ``llamacpp``
    backend gets the list opening as prefill) and advance ``progress`` (stage ``recsys``).

    Returns:
        ``{"seed", "raw", "error", "from_cache", "finish_reason"}``; a provider error is kept in
        ``error`` (with ``raw`` empty), never raised.
    """
    seed = derive_seed(cfg.seed, "recsys", ins.id)
    # the embedded backend continues text: started with "Here are K … titles:\n1." even a base
    # model writes a list; chat APIs answer the request as it is (no prefill, cache keys as before)
    prefill = list_prefill(ins.domain, cfg.k) if cfg.target.provider == "llamacpp" else None
    req = ChatRequest(messages=ins.messages, temperature=cfg.target.temperature,
                      max_tokens=cfg.target.max_tokens, seed=seed, prefill=prefill)
    out: dict[str, Any] = {"seed": seed, "raw": "", "error": None, "from_cache": False, "finish_reason": None}
    try:
        async with sem:
            res = await target.complete(req)
        out |= {"raw": res.text, "from_cache": res.from_cache, "finish_reason": res.finish_reason}
    except ProviderError as exc:
        out["error"] = str(exc)
    progress.advance("recsys", out["error"] is not None)
    return out

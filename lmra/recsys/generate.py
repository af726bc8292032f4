"""Recsys stage 2 — generate: send the instructions to the target (through the call cache, within
the concurrency bound) and keep their raw answers.

Reads :class:`~lmra.recsys.instructions.Instruction` objects; writes the answer dicts (``seed``,
``raw``, ``error``, ``from_cache``, ``finish_reason``) that :mod:`lmra.recsys.records` parses.
A failed call is kept in its answer; what stops the run (the endpoint guard's
:class:`~lmra.providers.endpoint.EndpointUnreachable`, a rejected key's
:class:`~lmra.providers.keys.KeyRejected`, Ctrl-C) stops every call first
(:func:`ask_all`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
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


async def ask_all(cfg: RecsysConfig, instructions: Sequence[Instruction], target: Provider, sem: asyncio.Semaphore,
                  progress: Progress) -> list[dict]:
    """:func:`ask_target` for every instruction, concurrently (``sem`` bounds the calls in flight).

    A call that raises instead of keeping its error (the target's endpoint guard tripped:
    :class:`~lmra.providers.endpoint.EndpointUnreachable`; a bug) stops the others at once, and
    so does a cancellation of the caller (Ctrl-C): the calls still running or waiting for a
    place are cancelled, and this returns only once every one has ended — so that the caller
    closes the call cache after the last answer was stored, no call of the run is left sending
    requests, and asyncio has no failure left unread to report.

    Returns:
        the answers, in the order of ``instructions``.

    Raises:
        the first failure, in the order of ``instructions``, once no call is left running.
    """
    tasks = [asyncio.ensure_future(ask_target(cfg, ins, target, sem, progress)) for ins in instructions]
    try:
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # a call raised, or this was cancelled: the calls not done yet stop
        running = [t for t in tasks if not t.done()]
        for t in running:
            t.cancel()
        if running:
            await asyncio.wait(running)
        failures = [t.exception() for t in tasks if not t.cancelled()]  # every one read: none reported unread
    failed = next((exc for exc in failures if exc is not None), None)
    if failed is not None:
        raise failed
    return [t.result() for t in tasks]

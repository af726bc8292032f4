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
from lmra.syncrun import wind_down


async def ask_target(cfg: RecsysConfig, ins: Instruction, target: Provider, sem: asyncio.Semaphore,
                     progress: Progress, started: set | None = None) -> dict:
    """Send one instruction to the target (seeded per instruction; the embedded ``llamacpp``
    backend gets the list opening as prefill) and advance ``progress`` (stage ``recsys``).

    Args:
        started: receives this call's task once it holds its place in ``sem`` (its request
            is on its way), and loses it when the call ends (:func:`ask_all`).

    Returns:
        ``{"seed", "raw", "error", "from_cache", "finish_reason", "served_model",
        "system_fingerprint"}`` (the last two as the endpoint reported them, None when it did
        not); a provider error is kept in ``error`` (with ``raw`` empty), never raised.
    """
    seed = derive_seed(cfg.seed, "recsys", ins.id)
    # the embedded backend continues text: started with "Here are K … titles:\n1." even a base
    # model writes a list; chat APIs answer the request as it is (no prefill, cache keys as before)
    prefill = list_prefill(ins.domain, cfg.k) if cfg.target.provider == "llamacpp" else None
    req = ChatRequest(messages=ins.messages, temperature=cfg.target.temperature,
                      max_tokens=cfg.target.max_tokens, seed=seed, prefill=prefill)
    out: dict[str, Any] = {"seed": seed, "raw": "", "error": None, "from_cache": False, "finish_reason": None,
                           "served_model": None, "system_fingerprint": None}
    try:
        async with sem:
            task = asyncio.current_task() if started is not None else None
            if task is not None:
                started.add(task)
            try:
                res = await target.complete(req)
            finally:
                if task is not None:
                    started.discard(task)
        # the model the endpoint said answered (break-it finding, s47: a router's fallback model was neither
        # recorded nor said; an audit warns of it)
        out |= {"raw": res.text, "from_cache": res.from_cache, "finish_reason": res.finish_reason,
                "served_model": res.served_model, "system_fingerprint": res.system_fingerprint}
    except ProviderError as exc:
        out["error"] = str(exc)
    progress.advance("recsys", out["error"] is not None)
    return out


async def ask_all(cfg: RecsysConfig, instructions: Sequence[Instruction], target: Provider, sem: asyncio.Semaphore,
                  progress: Progress, on_notice=lambda msg: None) -> list[dict]:
    """:func:`ask_target` for every instruction, concurrently (``sem`` bounds the calls in flight).

    A call that raises instead of keeping its error (the target's endpoint guard tripped:
    :class:`~lmra.providers.endpoint.EndpointUnreachable`; a rejected key:
    :class:`~lmra.providers.keys.KeyRejected`; a bug) stops the others at once: the calls still
    running or waiting for a place are cancelled. A cancellation of the caller (Ctrl-C, SIGTERM,
    SIGHUP: :mod:`lmra.interrupts`) cancels the calls waiting for a place at once and gives those
    in flight :data:`~lmra.syncrun.INTERRUPT_GRACE_S` seconds to deliver their answers, which
    the call cache stores (:func:`lmra.syncrun.wind_down`; ``on_notice`` says so), before
    cancelling them. This returns or raises only once every call has ended — so that the caller
    closes the call cache after the last answer was stored, no call of the run is left sending
    requests, and asyncio has no failure left unread to report.

    Returns:
        the answers, in the order of ``instructions``.

    Raises:
        the first failure, in the order of ``instructions``, once no call is left running.
    """
    started: set[asyncio.Task] = set()  # calls whose request is on its way
    tasks = [asyncio.ensure_future(ask_target(cfg, ins, target, sem, progress, started)) for ins in instructions]
    try:
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:  # interrupted: no call starts any more; those in flight may
        for t in tasks:  # still deliver their answers (kept in the cache)
            if not t.done() and t not in started:
                t.cancel()
        await wind_down(started, on_notice=on_notice)
        raise
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

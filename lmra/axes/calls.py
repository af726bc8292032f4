"""Helpers shared by the axes steps that call the LMRA (brainstorm, label, harm check):
bounded concurrency, a silent progress object, and None → nan for optional probabilities."""

from __future__ import annotations

import asyncio
import math

from lmra.progress import Progress


NoProgress = Progress  # the default callbacks do nothing


async def bounded(sem: asyncio.Semaphore, coro):
    """Await ``coro`` while holding ``sem`` (the calls-in-flight bound). Cancelled while it waits
    for ``sem`` (a run stopping: a dead endpoint, Ctrl-C), ``coro`` is closed unstarted (fresh-user
    finding: "coroutine 'label_axis' was never awaited" warnings reached the console)."""
    try:
        await sem.acquire()
    except BaseException:
        coro.close()
        raise
    try:
        return await coro
    finally:
        sem.release()


def nan_if_none(x: float | None) -> float:
    """``x`` as a float, nan for None (a probability the LMRA did not give)."""
    return math.nan if x is None else float(x)

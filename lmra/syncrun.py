"""Running an audit's coroutine from synchronous code without formatting its result.

On Python 3.11, :func:`asyncio.run` ends by asking ``signal.getsignal(SIGINT)`` whether its
own Ctrl-C handler is still installed, and :mod:`signal` tries to turn that handler — a
``functools.partial`` holding the main task — into a ``Handlers`` enum member. The failed
lookup formats ``repr(handler)``, which formats the finished task *with its result*, twice.
For an :class:`~lmra.audit.AuditResult` that is every DataFrame's ``to_string``: about 0.02 s
each time at 5,000 pairs, after the last answer of every run (issue 14; docs/benchmarks.md,
"The ninth round").
:func:`run_sync` keeps the result out of the main task, so nothing large is formatted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, returning its result, with a main task whose result is None.

    Ctrl-C, cancellation and exceptions behave as with :func:`asyncio.run` (the main task
    awaits ``coro``, so a cancellation of it reaches ``coro``); only the main task's own
    coroutine is this function's wrapper, not ``coro``.

    Raises:
        whatever ``coro`` raises; ValueError when ``coro`` is not a coroutine and RuntimeError
        when called from a running event loop (both as :func:`asyncio.run`).
    """
    if not asyncio.iscoroutine(coro):
        raise ValueError(f"a coroutine was expected, got {coro!r}")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    box: list[T] = []

    async def main() -> None:
        box.append(await coro)

    asyncio.run(main())
    return box[0]

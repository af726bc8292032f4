"""A time limit on each call of a custom provider (``provider = "package.module:factory"``).

The built-in backends bound their calls themselves — ``openai`` and ``anthropic`` through
their SDK's ``timeout`` (``timeout_s`` per attempt, ``max_retries`` attempts), the embedded
``llamacpp`` model is local compute — but a custom provider is whatever its author wrote: a
call that never returns (a lost connection without a timeout, an await on an event that
never comes) would hold its pair, and at the end the whole audit, forever.
:func:`make_provider <lmra.providers.make_provider>` therefore wraps every custom provider in
:class:`DeadlineProvider`: a call still running after the model's ``timeout_s`` is cancelled
and fails with a :class:`~lmra.providers.base.ProviderError` of kind ``timeout``, counted and
reported like any failed call (the pair is failed, the run's ``failed_share`` counts it).

The limit is :func:`asyncio.timeout` around the call, so it cancels the provider's awaiting
code; a provider that blocks the event loop itself (a synchronous ``time.sleep`` inside
``async def complete``) cannot be interrupted from the loop and is not covered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lmra.providers.base import ChatRequest, ChatResult, Provider, ProviderError, note_event, wrap_identity


class DeadlineProvider:
    """``inner`` (a custom provider) whose every call fails after ``timeout_s`` seconds.

    Args:
        inner: an object with the :class:`~lmra.providers.base.Provider` protocol.
        timeout_s: seconds one call may take, > 0 (the model's ``timeout_s``, default 120).

    Attributes:
        name, model_id, base_url, supports_logprobs, inner: those of ``inner``
            (:func:`~lmra.providers.base.wrap_identity`: cache keys unchanged);
            ``parallel_capacity`` and any other attribute are read from ``inner``.

    Raises:
        ValueError: ``timeout_s`` ≤ 0.
    """

    def __init__(self, inner: Provider, timeout_s: float):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 (got {timeout_s!r})")
        wrap_identity(self, inner)
        self.timeout_s = float(timeout_s)

    def __getattr__(self, attr: str) -> Any:
        # optional extensions of the provider (parallel_capacity, a batch API …) are the inner one's
        if attr == "inner":  # not set yet (during construction): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    async def complete(self, request: ChatRequest) -> ChatResult:
        """The inner provider's answer.

        Raises:
            ProviderError: kind ``timeout`` when the call did not return within ``timeout_s``
                (the inner call is cancelled); whatever the inner provider raises otherwise.
        """
        limit = asyncio.timeout(self.timeout_s)
        try:
            async with limit:
                return await self.inner.complete(request)
        except TimeoutError:
            if not limit.expired():  # the provider's own TimeoutError: its failure, as it raised it
                raise
            note_event("timeout")
            raise ProviderError(f"{self.name} call did not return within timeout_s = {self.timeout_s:g} s "
                                "(custom provider; the call was cancelled)", kind="timeout") from None

    async def aclose(self) -> None:
        await self.inner.aclose()


__all__ = ["DeadlineProvider"]

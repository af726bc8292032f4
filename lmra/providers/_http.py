"""An httpx2 transport that counts every HTTP attempt an SDK makes, so that retries are visible.

The official SDKs retry 429, 5xx, timeouts and connection errors inside one
``create(...)`` call. Handing them an ``httpx.AsyncClient`` built on
:class:`CountingTransport` counts each attempt and its outcome as fault events of the call in
progress (:func:`lmra.providers.base.note_event`): ``attempt``, ``http_429``, ``http_5xx``,
``http_4xx``, ``timeout``, ``connection``. It reads each response body in full within the
attempt's timeout, so that a body trickling in byte by byte times out like a hang, and a body
cut mid-transfer or undecodable counts as a connection fault. :class:`~lmra.cache.CachedProvider`
folds them into the per-model counts of the manifest (``retries`` = attempts − 1 per call).
"""

from __future__ import annotations

import asyncio

import httpx2 as httpx  # the HTTP client the openai and anthropic SDKs are built on

from lmra.config import MAX_CONCURRENCY
from lmra.providers.base import note_event


class CountingTransport(httpx.AsyncBaseTransport):
    """Wrap an httpx async transport; count attempts, error statuses, timeouts and connection errors.

    Args:
        inner: the transport that does the work (default ``httpx.AsyncHTTPTransport()``).
    """

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None):
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        note_event("attempt")
        deadline = _attempt_deadline(request)
        try:
            async with asyncio.timeout(deadline):
                response = await self.inner.handle_async_request(request)
                await response.aread()  # the whole body within the deadline (a trickling body times out)
        except TimeoutError:
            note_event("timeout")
            raise httpx.ReadTimeout(f"no complete response within {deadline:g} s", request=request) from None
        except httpx.TimeoutException:
            note_event("timeout")
            raise
        except httpx.RequestError:  # connection reset, body cut mid-transfer, undecodable body …
            note_event("connection")
            raise
        # returned as it is: its (decoded) body is read and its connection back in the pool, so
        # the client's own read is a no-op (rebuilding a Response cost 5 % of the SDK's CPU per call)
        code = response.status_code
        if code == 429:
            note_event("http_429")
        elif code >= 500:
            note_event("http_5xx")
        elif code >= 400:
            note_event("http_4xx")
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _attempt_deadline(request: httpx.Request) -> float | None:
    """Seconds one attempt may take in all: the largest of the request's timeouts (the SDKs
    set them all to ``timeout_s``); httpx's own timeouts apply per read, so a body sent one
    byte at a time would otherwise never time out."""
    t = request.extensions.get("timeout") or {}
    values = [v for v in t.values() if isinstance(v, (int, float))]
    return max(values) if values else None


#: Connection pool of the default transport: up to 1,000 connections (the SDKs' default) and
#: as many kept open between calls as an audit may have calls in flight, so that no call
#: beyond the 20 of httpx's default pool opens (and closes) a connection of its own.
POOL_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=MAX_CONCURRENCY)


def counting_client(client_class: type[httpx.AsyncClient], transport: httpx.AsyncBaseTransport | None = None
                    ) -> httpx.AsyncClient:
    """An SDK's default async httpx client (its timeouts) on a :class:`CountingTransport`.

    One client, and so one connection pool, serves all calls of a provider instance.

    Args:
        client_class: ``openai.DefaultAsyncHttpxClient`` or ``anthropic.DefaultAsyncHttpxClient``.
        transport: the transport to count (default: an ``httpx.AsyncHTTPTransport`` with
            :data:`POOL_LIMITS`; a client given a transport ignores its own ``limits``).
    """
    return client_class(transport=CountingTransport(transport or httpx.AsyncHTTPTransport(limits=POOL_LIMITS)))

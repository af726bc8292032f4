"""The provider's HTTP connections cost less client CPU per call (issue 14, goal 1):
:class:`~lmra.providers._http.LeanStream` sends a request's headers and body in one write,
and asks the pool's "did the server close this idle connection?" with one ``poll``. These
tests use real local HTTP servers on 127.0.0.1 and the official openai SDK; the recording
backend below only counts the writes of the real network backend it wraps."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpcore2 as httpcore
import openai

from faultserver import FaultServer, completion
from lmra.config import ModelConfig
from lmra.providers._http import COALESCE_MAX_BYTES, LeanStream, counting_client, lean_transport
from lmra.providers.base import ChatRequest, Message
from lmra.providers.openai import OpenAIProvider


class _RecordingStream(httpcore.AsyncNetworkStream):
    """A real network stream whose writes are recorded (bytes of each ``write`` call)."""

    def __init__(self, inner, writes: list):
        self._inner, self._writes = inner, writes

    async def read(self, max_bytes, timeout=None):
        return await self._inner.read(max_bytes, timeout=timeout)

    async def write(self, buffer, timeout=None):
        self._writes.append(bytes(buffer))
        await self._inner.write(buffer, timeout=timeout)

    async def aclose(self):
        await self._inner.aclose()

    async def start_tls(self, *a, **kw):
        return await self._inner.start_tls(*a, **kw)

    def get_extra_info(self, info):
        return self._inner.get_extra_info(info)


class _RecordingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self):
        self.inner, self.writes, self.connections = httpcore.AnyIOBackend(), [], 0

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.connections += 1
        return _RecordingStream(await self.inner.connect_tcp(host, port, timeout=timeout, local_address=local_address,
                                                             socket_options=socket_options), self.writes)

    async def sleep(self, seconds):
        await self.inner.sleep(seconds)


def _provider(url: str, backend=None, retries: int = 0) -> OpenAIProvider:
    client = counting_client(openai.DefaultAsyncHttpxClient, lean_transport(backend=backend)) if backend else None
    return OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=url, api_key_required=False,
                                      max_retries=retries), http_client=client)


def _request(i: int, size: int = 1) -> ChatRequest:
    return ChatRequest(messages=[Message(role="system", content="Answer A, B or C."),
                                 Message(role="user", content=f"Question {i}? " + "x" * size)],
                       seed=i, options=("A", "B", "C"))


def _ask_all(provider: OpenAIProvider, requests: list[ChatRequest], *, in_flight: int = 8, pause_s: float = 0.0):
    async def go():
        sem = asyncio.Semaphore(in_flight)

        async def one(r):
            async with sem:
                res = await provider.complete(r)
                await asyncio.sleep(pause_s)
                return res

        try:
            return await asyncio.gather(*(one(r) for r in requests))
        finally:
            await provider.aclose()

    return asyncio.run(go())


def test_each_request_goes_out_in_one_write_with_the_same_answers():
    """40 option questions, 8 in flight: one write per request holding its headers and its
    whole JSON body; the answers are those of httpx's own streams. A body larger than
    COALESCE_MAX_BYTES is sent at once (not held until the read) and answered all the same."""
    backend = _RecordingBackend()
    requests = [_request(i) for i in range(40)]
    with FaultServer() as srv:
        lean = _ask_all(_provider(srv.url, backend), requests)
        plain = _ask_all(OpenAIProvider(ModelConfig(provider="openai", model="m", base_url=srv.url,
                                                    api_key_required=False, max_retries=0),
                                        http_client=openai.DefaultAsyncHttpxClient()), requests)
        assert len(backend.writes) == len(requests)
        for w in backend.writes:
            head, _, body = w.partition(b"\r\n\r\n")
            assert head.startswith(b"POST /v1/chat/completions HTTP/1.1")
            assert json.loads(body)["messages"][1]["content"].startswith("Question ")
        assert [r.option_probs for r in lean] == [r.option_probs for r in plain]
        assert all(r.option_probs for r in lean)

        backend.writes.clear()
        big = _ask_all(_provider(srv.url, backend), [_request(99, size=2 * COALESCE_MAX_BYTES)])
        assert big[0].option_probs and len(backend.writes) == 1 and len(backend.writes[0]) > 2 * COALESCE_MAX_BYTES


class _ClosingHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive answers, after which the server closes the connection without
    saying so (as servers do with idle connections): only the liveness probe can tell."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        data = json.dumps(completion(body)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True


def test_an_idle_connection_the_server_closed_is_not_reused():
    """With no retries allowed, 6 calls one after another each succeed on a fresh connection:
    the pool's probe (LeanStream's poll) sees each closed idle connection and drops it."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ClosingHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        backend = _RecordingBackend()
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        # a pause after each answer lets the server's close arrive before the next call
        results = _ask_all(_provider(url, backend, retries=0), [_request(i) for i in range(6)], in_flight=1,
                           pause_s=0.1)
        assert all(r.option_probs for r in results)
        assert backend.connections == 6
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_default_client_uses_lean_streams():
    """``counting_client`` without a transport builds its connections as LeanStreams."""
    with FaultServer() as srv:
        provider = _provider(srv.url)

        async def go():
            try:
                await provider.complete(_request(1))
                pool = provider.client._client._transport.inner._pool
                return [type(c._connection._network_stream) for c in pool.connections]
            finally:
                await provider.aclose()

        assert asyncio.run(go()) == [LeanStream]

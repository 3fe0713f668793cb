"""A loopback reverse proxy that adds our Bearer key to every request.

For clients that cannot send an `Authorization` header (the MCP conformance suite). It
forwards the method, the raw path and query, the body and every header verbatim, Host and
Origin included, so the server's DNS-rebinding check sees what the client sent; only the
hop-by-hop headers are dropped and `Authorization` is replaced. Responses stream back
chunk by chunk (SSE is never buffered), and a client that goes away closes the upstream
request too. It runs in-process (uvicorn in a thread, stopped through `should_exit`) and
records what it forwarded, so a test can tell which protocol version a client spoke.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import uvicorn

START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
# An open SSE stream may stay silent for a long while; the client under test bounds its own waits.
READ_TIMEOUT = 300.0

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {b"authorization"}

Scope = dict[str, Any]


@dataclass
class Forwarded:
    """One request as the proxy passed it on, and the upstream's status (None: no answer yet).

    Recorded before the request goes upstream and given its status before the response
    starts, so a client that has seen a response finds it complete here. `client_left`: the
    client hung up before any answer came (a client closing an SSE GET it no longer needs)."""

    method: str
    host: str | None
    origin: str | None
    # The MCP-Protocol-Version header, or for an initialize POST the version it asks for.
    protocol_version: str | None
    status: int | None
    client_left: bool = False
    # When the proxy had the whole request (wall clock, as the suite's result directory names):
    # a batch of scenarios in one suite process is told apart by when each ran.
    at: float = field(default_factory=time.time)


@dataclass
class BearerProxy:
    """Pure ASGI app: one upstream request per incoming request, with the key added."""

    upstream: str
    key: str
    url: str = ""  # set once it listens
    forwarded: list[Forwarded] = field(default_factory=list)
    in_flight: int = 0
    _idle: threading.Condition = field(default_factory=threading.Condition)

    def wait_idle(self, timeout: float) -> None:
        """Blocks until no request is in flight: once a client process has exited, every one of
        its requests is finished or marked `client_left`, so its records are final."""
        with self._idle:
            if not self._idle.wait_for(lambda: self.in_flight == 0, timeout):
                raise AssertionError(f"the proxy still had {self.in_flight} request(s) open after {timeout}s")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        with self._idle:
            self.in_flight += 1
        try:
            await self._handle(scope, receive, send)
        finally:
            with self._idle:
                self.in_flight -= 1
                self._idle.notify_all()

    async def _handle(self, scope: Scope, receive: Any, send: Any) -> None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in NOT_FORWARDED]
        headers.append((b"authorization", f"Bearer {self.key}".encode("latin-1")))
        url = self.upstream.rstrip("/") + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope["query_string"]:
            url += "?" + scope["query_string"].decode("latin-1")
        request = httpx2.Request(
            scope["method"],
            url,
            headers=headers,
            content=bytes(body),
            extensions={"timeout": httpx2.Timeout(CONNECT_TIMEOUT, read=READ_TIMEOUT).as_dict()},
        )
        record = Forwarded(
            method=scope["method"],
            host=request.headers.get("host"),
            origin=request.headers.get("origin"),
            protocol_version=protocol_version_of(request.headers, bytes(body)),
            status=None,
        )
        self.forwarded.append(record)
        async with anyio.create_task_group() as tg:

            async def close_when_the_client_leaves() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                record.client_left = record.status is None
                tg.cancel_scope.cancel()

            tg.start_soon(close_when_the_client_leaves)
            await self._forward(request, send, record)
            tg.cancel_scope.cancel()

    async def _forward(self, request: httpx2.Request, send: Any, record: Forwarded) -> None:
        async with httpx2.AsyncClient(trust_env=False) as client:
            try:
                response = await client.send(request, stream=True)
            except httpx2.HTTPError as exc:
                text = f"bearer proxy: upstream request failed: {exc!r}".encode()
                start = {"type": "http.response.start", "status": 502}
                await send({**start, "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
                await send({"type": "http.response.body", "body": text})
                return
            try:
                record.status = response.status_code
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP],
                    }
                )
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            finally:
                await response.aclose()


def protocol_version_of(headers: httpx2.Headers, body: bytes) -> str | None:
    if "mcp-protocol-version" in headers:
        return headers["mcp-protocol-version"]
    with contextlib.suppress(ValueError):
        message = json.loads(body)
        if isinstance(message, dict) and message.get("method") == "initialize":
            version = (message.get("params") or {}).get("protocolVersion")
            return version if isinstance(version, str) else None
    return None


@contextlib.contextmanager
def serving_in_thread(app: Any) -> Iterator[str]:
    """Serves an ASGI app on a free 127.0.0.1 port for the block; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="asgi-in-thread", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not thread.is_alive():
                raise AssertionError("the in-thread server exited at start-up")
            if time.monotonic() > deadline:
                raise AssertionError(f"the in-thread server did not start within {START_TIMEOUT}s")
            time.sleep(0.02)  # polling the started flag, bounded by the deadline
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT)
        sock.close()
    if thread.is_alive():
        raise AssertionError(f"the in-thread server did not stop within {STOP_TIMEOUT}s")


@contextlib.contextmanager
def running_bearer_proxy(upstream: str, key: str) -> Iterator[BearerProxy]:
    """A proxy to `upstream` (a base URL) adding `Authorization: Bearer <key>`; `.url` is its base URL."""
    proxy = BearerProxy(upstream, key)
    with serving_in_thread(proxy) as url:
        proxy.url = url
        yield proxy

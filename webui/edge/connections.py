"""uvicorn's h11 protocol with the bounds uvicorn itself lacks.

- A header-read timeout: a connection that has not delivered a complete request head
  within `header_timeout` seconds of its first byte (or of being opened) is closed.
  Without it a client trickling header bytes holds a connection, and a slot of
  `limit_concurrency`, for as long as it likes. Between requests uvicorn's own keep-alive
  timeout applies; the first byte of the next request ends that and starts this one.
- A body pace (`BodyPace`): a request body must arrive within `body_timeout` seconds,
  plus one second for every `min_rate` bytes received. The guard
  (`webui.edge.guard`) enforces it where the app reads the body and answers 408; here it is
  enforced on bodies nobody reads any more (the response went out first, e.g. a route
  that takes no body, or `/healthz` sent a Content-Length): once overdue, such a
  connection is closed when its response is complete. Without it, a client that declares
  `Content-Length: 100` and sends nothing, or trickles, holds its slot for ever. Nor may
  such an unread body outgrow `max_body_bytes` (framing included) once its response is
  complete: a chunked body has no end announced, and one sent just above the minimum rate
  would otherwise never fall behind, holding its connection for ever.
- A lingering close (`Lingering`): a response that closes its connection while the
  request's body is still on the way (a refusal before the body is read: 421, 401, 413…)
  half-closes the connection and reads and drops what the client still sends, for up to
  `LINGER_SECONDS` or `LINGER_BYTES`, before closing it. Closing at once with unread bytes
  makes the kernel answer with a reset, which can destroy the response before the client
  has read it: a client that sends its whole body before reading, as most do, would see
  "connection reset by peer" instead of the refusal.
- Connections for `/healthz`: `max_connections` bounds everything else; `/healthz`
  requests are served on up to `HEALTH_RESERVE` connections more (uvicorn's own
  `limit_concurrency`, which `serve` sets to the sum), so a load balancer's probe still
  answers while other clients hold every ordinary slot.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, cast

import h11
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.h11_impl import H11Protocol

# How long, and how many bytes, a connection closed after its response keeps reading (and
# dropping) a request body still on the way before it is closed for good.
LINGER_SECONDS = 2.0
LINGER_BYTES = 1024 * 1024

# Connections beyond max_connections that may serve only /healthz.
HEALTH_RESERVE = 16
# Served to load balancers with no Host check (webui/edge/guard.py) and beyond the limit.
HEALTH_PATH = "/healthz"


@dataclass(frozen=True)
class BodyPace:
    """How fast a request body must arrive: within `timeout` seconds of the request head,
    plus one second for every `min_rate` bytes received so far (a trickle below the rate
    falls behind; a large upload at a fair rate never does)."""

    timeout: float
    min_rate: int

    def deadline(self, started: float, received: int) -> float:
        return started + self.timeout + received / self.min_rate

    def describe(self) -> str:
        return (
            f"a request body must arrive within {self.timeout:g} seconds, plus one second "
            f"for every {self.min_rate} bytes received"
        )


class Lingering:
    """The transport as uvicorn's request cycle sees it. Its `close`, while the request's
    body is still on the way, half-closes the connection (the response and a FIN go out)
    and keeps reading: `EdgeH11Protocol.data_received` drops what arrives, and the
    connection is closed at the client's end of stream, past `LINGER_BYTES`, or after
    `LINGER_SECONDS`, whichever comes first. Everything else goes to the real transport."""

    def __init__(self, transport: asyncio.Transport, protocol: EdgeH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False
        self.dropped = 0
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            return
        if self._protocol.conn.their_state is not h11.SEND_BODY:
            self._transport.close()
            return
        self.lingering = True
        if self._transport.can_write_eof():
            self._transport.write_eof()  # after what is buffered: the response, then a FIN
        self._timer = self._protocol.loop.call_later(LINGER_SECONDS, self.abort_linger)

    def drop(self, data: bytes) -> None:
        self.dropped += len(data)
        if self.dropped > LINGER_BYTES:
            self.abort_linger()

    def abort_linger(self) -> None:
        """Closes the real transport now, lingering or not."""
        self.stop()
        self._transport.close()

    def closed(self) -> bool:
        """The real transport is closing (a lingering connection is not, yet)."""
        return self._transport.is_closing()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class EdgeH11Protocol(H11Protocol):
    header_timeout: float = 10.0
    body_pace: BodyPace = BodyPace(timeout=30.0, min_rate=1024)
    max_connections: int | None = None
    max_body_bytes: int | None = None  # of a body still arriving after its response
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _body_started: float | None = None
    _body_bytes: int = 0
    _body_overdue: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app = self._limited(self.app)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._lingering = Lingering(transport, self)
        self.transport = cast(asyncio.Transport, self._lingering)
        self._watch_headers()

    def data_received(self, data: bytes) -> None:
        if self._lingering.lingering:
            self._lingering.drop(data)
            return
        if self.conn.their_state is h11.SEND_BODY:
            self._body_bytes += len(data)  # framing included: near enough for a pace
        super().data_received(data)
        if self._unread_body_too_long():
            self._close("a request body nobody reads grew past the body size limit")
            return
        self._watch_headers()
        self._watch_body()

    def _unread_body_too_long(self) -> bool:
        cycle = self.cycle
        return (
            self.max_body_bytes is not None
            and self._body_bytes > self.max_body_bytes
            and self.conn.their_state is h11.SEND_BODY
            and (cycle is None or cycle.response_complete)
        )

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._body_overdue and self.conn.their_state is h11.SEND_BODY:
            self._close("a request body nobody reads did not arrive in time")
            return
        if self._unread_body_too_long():
            self._close("a request body nobody reads grew past the body size limit")
            return
        self._watch_headers()
        self._watch_body()

    def eof_received(self) -> None:
        if self._lingering.lingering:
            self._lingering.abort_linger()  # the client sent all it had: close now
            return
        super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lingering.stop()
        self._stop_header_timer()
        self._stop_body_timer()
        super().connection_lost(exc)

    # ------------------------------------------------------------------ the connection limit
    def _limited(self, app: Any) -> Any:
        async def limited(scope: Any, receive: Any, send: Any) -> None:
            busy = self.max_connections is not None and (
                len(self.connections) >= self.max_connections or len(self.tasks) > self.max_connections
            )
            if busy and scope.get("path") != HEALTH_PATH:
                self.logger.warning("Exceeded the connection limit.")
                await service_unavailable(scope, receive, send)
                return
            await app(scope, receive, send)

        return limited

    # ------------------------------------------------------------------ request heads
    def _watch_headers(self) -> None:
        """Time the request head while one is awaited and bytes of it have arrived (or the
        connection is new); stop once h11 has parsed it."""
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            self._stop_header_timer()
        elif self._header_timer is None and (
            self.timeout_keep_alive_task is None or self.conn.trailing_data[0]
        ):
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._close("closing a connection that sent no complete request head in time")

    # ------------------------------------------------------------------ request bodies
    def _watch_body(self) -> None:
        """Time the body from its request head until h11 has all of it."""
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            self._stop_body_timer()
            self._body_started, self._body_bytes, self._body_overdue = None, 0, False
        elif self._body_started is None:
            self._body_started, self._body_bytes = time.monotonic(), 0
            self._body_timer = self.loop.call_later(self.body_pace.timeout, self._body_check)

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_check(self) -> None:
        """Re-armed until the deadline (which moves with every byte) has passed."""
        self._body_timer = None
        if self._body_started is None or self.conn.their_state is not h11.SEND_BODY:
            return
        left = self.body_pace.deadline(self._body_started, self._body_bytes) - time.monotonic()
        if left > 0:
            self._body_timer = self.loop.call_later(left, self._body_check)
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self._close("closing a connection whose request body did not arrive in time")
        else:
            # The app still answers: where it reads the body, the guard answers 408 and the
            # connection closes after it; otherwise it closes when the response is complete.
            self._body_overdue = True

    def _close(self, why: str) -> None:
        """Closes at once (no lingering): the client is too slow or sends too much."""
        if not self._lingering.closed():
            self.logger.info(why)
            self._lingering.abort_linger()


def edge_protocol(
    *,
    header_timeout: float,
    body_pace: BodyPace,
    max_connections: int | None,
    max_body_bytes: int | None = None,
) -> type[EdgeH11Protocol]:
    """The protocol class to pass as uvicorn's `http=`; give uvicorn
    `limit_concurrency=max_connections + HEALTH_RESERVE`."""
    return type(
        "EdgeH11Protocol",
        (EdgeH11Protocol,),
        {
            "header_timeout": header_timeout,
            "body_pace": body_pace,
            "max_connections": max_connections,
            "max_body_bytes": max_body_bytes,
        },
    )

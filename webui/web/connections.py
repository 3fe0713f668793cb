"""uvicorn's h11 protocol with a header-read timeout, which uvicorn itself lacks: a
connection that has not delivered a complete request head within `header_timeout` seconds
of its first byte (or of being opened) is closed. Without it a client trickling header
bytes holds a connection, and a slot of `limit_concurrency`, for as long as it likes.

Between requests uvicorn's own keep-alive timeout applies; the first byte of the next
request ends that and starts this one."""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderTimeoutH11Protocol(H11Protocol):
    header_timeout: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

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
            self.logger.info("closing a connection that sent no complete request head in time")
            self.transport.close()


def with_header_timeout(seconds: float) -> type[HeaderTimeoutH11Protocol]:
    """The protocol class to pass as uvicorn's `http=`."""
    return type("HeaderTimeoutH11Protocol", (HeaderTimeoutH11Protocol,), {"header_timeout": seconds})

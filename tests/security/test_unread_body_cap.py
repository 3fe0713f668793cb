"""A chunked body nobody reads, sent just above the minimum rate after its response: the
pace alone never falls behind (its deadline moves with every byte), so the connection
would be held for ever. It is closed once the unread body outgrows the body size limit.
A real `steamharness serve` on loopback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.e2e.server import LiveServer, running_server
from tests.security.test_http_edges import chunk, closed_by_server

MAX_BODY = 4096
MIN_RATE = 1000
PIECE = 2000  # each second: twice the minimum rate, never behind the pace


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {
        "STEAMHARNESS_MAX_BODY_BYTES": str(MAX_BODY),
        "STEAMHARNESS_BODY_TIMEOUT_SECONDS": "2",
        "STEAMHARNESS_BODY_MIN_RATE_BYTES_PER_SECOND": str(MIN_RATE),
    }
    with running_server(tmp_path_factory.mktemp("unread-body"), **env) as live:
        yield live
    assert "Traceback" not in live.log()


def trickle(server: LiveServer, path: str, seconds: float) -> int | None:
    """Bytes sent before the server closed the connection, or None if it stayed open."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    with sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        assert sock.recv(65536).startswith(b"HTTP/1.1 ")  # answered without reading the body
        sent, start = 0, time.monotonic()
        while time.monotonic() - start < seconds:
            try:
                sock.sendall(chunk(b"x" * PIECE))
            except OSError:
                return sent
            sent += PIECE
            if closed_by_server(sock, timeout=1.0):
                return sent
        return None


@pytest.mark.parametrize("path", ["/healthz", "/login"])
def test_an_unread_chunked_body_at_a_fair_rate_is_closed_past_the_size_limit(
    server: LiveServer, path: str
) -> None:
    sent = trickle(server, path, seconds=20)
    assert sent is not None, "the connection was still open"
    assert sent <= MAX_BODY + 2 * PIECE

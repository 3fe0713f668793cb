"""Request bodies keep a pace, against a real `steamharness serve` on loopback: sockets that
declare a body and send none hold no slot past the bound, `/healthz` answers 200 while
they are held (even with every ordinary slot taken), an upload trickling below the minimum
rate is cut with a clear 408 and stores nothing, and a slow upload at a fair rate passes.

The server: 8 connections, a body must arrive within 10 s plus 1 s per 10 000 bytes (short, so the
tests that wait it out are quick; long enough that opening a dozen sockets on a loaded machine
stays well inside it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import select
import socket
from collections.abc import Iterator

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer, running_server
from tests.security.test_http_edges import Reply, closed_by_server, read_reply
from webui.edge.connections import BodyPace

LIMIT = 8
BODY_TIMEOUT = 10
MIN_RATE = 10_000
CLOSE_WAIT = 150.0  # bound on the server closing what it must close (the pace is 10 s + …)
WAIT = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {
        "STEAMHARNESS_MAX_CONNECTIONS": str(LIMIT),
        "STEAMHARNESS_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "STEAMHARNESS_BODY_MIN_RATE_BYTES_PER_SECOND": str(MIN_RATE),
        "STEAMHARNESS_HEADER_TIMEOUT_SECONDS": "120",  # heads are not what is timed here
    }
    with running_server(tmp_path_factory.mktemp("body-timeouts"), **env) as live:
        yield live
    assert "Traceback" not in live.log()


def head(server: LiveServer, method: str, path: str, *extra: str, length: int = 100) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)


def still_open(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    return not readable


def upload_head(server: LiveServer, length: int, *extra: str) -> bytes:
    return head(
        server,
        "POST",
        f"/api/workflows/{HELLO}/files?fileName=slow.bin",
        f"Authorization: Bearer {server.admin_key}",
        "Content-Type: application/octet-stream",
        *extra,
        length=length,
    )


# The server says "100 Continue" once the app starts reading the body: then the socket
# holds a slot; a refused one gets 503 at once.
CONTINUE = "Expect: 100-continue"


def admitted(sock: socket.socket) -> bool:
    """The server's first answer to a head sent with `CONTINUE` (bounded): True for 100
    Continue (the app waits for the body), False for a refusal."""
    sock.settimeout(WAIT)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed a socket without an answer"
        data += chunk
    status = int(data.split(b" ", 2)[1])
    assert status in (100, 503), data
    return status == 100


def test_the_pace_gives_a_second_per_min_rate_bytes() -> None:
    pace = BodyPace(timeout=10.0, min_rate=1000)
    assert pace.deadline(100.0, 0) == 110.0 and pace.deadline(100.0, 5000) == 115.0
    assert "within 10 seconds, plus one second for every 1000 bytes" in pace.describe()


def test_sockets_sending_no_body_are_closed_within_the_bound_and_healthz_answers_while_they_are_held(
    server: LiveServer,
) -> None:
    mcp = (
        f"Authorization: Bearer {server.admin_key}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "MCP-Protocol-Version: 2025-11-25",
    )
    heads = [
        head(server, "POST", "/login", "Content-Type: application/x-www-form-urlencoded", CONTINUE),
        head(server, "POST", f"/api/workflows/{HELLO}/mcp?target=latest", *mcp, CONTINUE),
        upload_head(server, 100, CONTINUE),
    ]
    slow: list[socket.socket] = []
    held: list[socket.socket] = []
    try:
        for n in range(LIMIT + 4):  # more than the server takes, one after the other
            sock = connect(server)
            sock.sendall(heads[n % len(heads)])
            slow.append(sock)
            if admitted(sock):
                held.append(sock)
        assert len(held) == LIMIT - 1  # the last ordinary slot is the one refusing the rest
        with httpx2.Client(base_url=server.base_url, timeout=WAIT) as client:
            ordinary = client.get("/openapi.json")
            health = [client.get("/healthz") for _ in range(3)]
        assert all(still_open(sock) for sock in held), "a held socket was let go early"
        assert ordinary.status_code == 503  # every ordinary slot is taken…
        assert [r.status_code for r in health] == [200, 200, 200]  # …and /healthz still answers

        too_slow: list[Reply] = []
        for sock in slow:
            if sock in held:
                too_slow.append(read_reply_bounded(sock))
            assert closed_by_server(sock, CLOSE_WAIT)
        assert [r.status for r in too_slow] == [408] * len(held)
        assert all(r.headers.get("connection") == "close" for r in too_slow)
        api = next((r for r in too_slow if r.headers.get("content-type") == "application/json"), None)
        assert api is not None
        message = json.dumps(api.json())
        assert "arrived too slowly" in message and f"within {BODY_TIMEOUT} seconds" in message
    finally:
        for sock in slow:
            sock.close()
    assert httpx2.get(f"{server.base_url}/openapi.json", timeout=WAIT).status_code == 200


def read_reply_bounded(sock: socket.socket) -> Reply:
    # read_reply waits WAIT per recv; the pace runs longer than that, so wait for data first.
    readable, _, _ = select.select([sock], [], [], CLOSE_WAIT)
    assert readable, "the server neither answered nor closed a slow socket in time"
    return read_reply(sock)


def test_a_body_nobody_reads_trickling_after_its_response_is_closed_when_overdue(server: LiveServer) -> None:
    with connect(server) as sock:
        sock.sendall(head(server, "GET", "/healthz", length=10_000))
        assert read_reply_bounded(sock).status == 200
        closed = False
        for _ in range(int(CLOSE_WAIT / 0.5)):  # bounded: a byte every half second
            readable, _, _ = select.select([sock], [], [], 0.5)
            if readable:
                with contextlib.suppress(ConnectionResetError):
                    assert sock.recv(65536) == b""
                closed = True
                break
            try:
                sock.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        assert closed, "a trickled body nobody reads kept its connection open"


def test_an_upload_trickling_below_the_minimum_rate_is_cut_with_a_clear_error(server: LiveServer) -> None:
    before = len(server.rows("managed_files"))
    length = 1_000_000
    with connect(server) as sock:
        sock.sendall(upload_head(server, length) + b"x" * 100)
        answered = False
        for _ in range(int(CLOSE_WAIT / 0.1)):  # bounded: 100 bytes every 0.1 s, at most 1 000 B/s
            readable, _, _ = select.select([sock], [], [], 0.1)
            if readable:
                answered = True
                break
            try:
                sock.sendall(b"x" * 100)
            except (BrokenPipeError, ConnectionResetError):
                break
        assert answered, "the trickling upload was never answered"
        reply = read_reply(sock)
        assert closed_by_server(sock, CLOSE_WAIT)
    assert reply.status == 408, reply
    error = reply.json()["error"]
    assert error["code"] == "body_too_slow"
    assert error["message"] == (
        f"the request body arrived too slowly: a request body must arrive within {BODY_TIMEOUT} seconds, "
        "plus one second for every 10000 bytes received"
    )
    assert len(server.rows("managed_files")) == before  # nothing stored


def test_a_slow_upload_at_a_fair_rate_passes(server: LiveServer) -> None:
    chunks = [bytes([n]) * 20_000 for n in range(10)]  # 20 kB every 0.3 s, over 60 kB/s
    data = b"".join(chunks)
    with connect(server) as sock:
        sock.sendall(upload_head(server, len(data)) + chunks[0])
        for piece in chunks[1:]:
            select.select([], [], [], 0.3)  # the client's own pace, not a wait for the server
            sock.sendall(piece)
        reply = read_reply_bounded(sock)
    assert reply.status == 201, reply
    stored = reply.json()["data"][0]
    assert stored["size"] == len(data) and stored["sha256"] == hashlib.sha256(data).hexdigest()

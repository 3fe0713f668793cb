"""The HTTP edge against real `steamharness serve` processes: Host/Origin checks on every
route, one Authorization header, bodies bounded and read only after authentication,
throttled failures, slow and surplus connections, Try it calling only its own server, and
logs without secrets.

The `edge` server trusts 127.0.0.1 as a proxy, so each test speaks from its own client
address (X-Forwarded-For) and throttles set off by one test do not reach another."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import select
import socket
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from tests.e2e.server import HELLO, LiveServer, free_port, running_server
from tests.web.conftest import USER, Web, prepare
from webui.app import create_app
from webui.auth import ui as ui_auth
from webui.auth.throttle import FailureCounter
from webui.edge.access_log import Redactor
from webui.edge.connections import LINGER_BYTES
from webui.edge.refusals import RefusalAudit
from webui.settings import Settings
from webui.web.mcp_clients import own_endpoint_url

WAIT = 20.0  # bound on any one answer from a server
CLOSE_WAIT = 30.0  # bound on a server closing a connection it should close
CAP = 1024 * 1024  # the default body cap
PV = "2025-11-25"
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
PASSWORDS = {"alice": "alice-password-1", "victim": "victim-password-1", "carl": "carl-password-1"}
_addresses = itertools.count(1)


def fresh_address() -> str:
    """A client address of its own for each caller (TEST-NET ranges)."""
    n = next(_addresses)
    return f"198.51.{100 + n // 250}.{n % 250 + 1}"


def init_body() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }


def mcp_headers(key: str | None, address: str, **extra: str) -> dict[str, str]:
    h = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PV,
        "X-Forwarded-For": address,
        **extra,
    }
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    return h


def audit_rows(server: LiveServer, event: str) -> list[dict[str, Any]]:
    con = sqlite3.connect(server.data_dir / "steamharness.sqlite3")
    con.row_factory = sqlite3.Row
    try:
        rows = con.execute("select * from audit_events where event = ?", (event,)).fetchall()
        return [{**dict(r), "details": json.loads(r["details"] or "null")} for r in rows]
    finally:
        con.close()


# --------------------------------------------------------------------------- raw sockets


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def read_reply(sock: socket.socket) -> Reply:
    """One HTTP/1.1 response (Content-Length framed, or up to EOF)."""
    sock.settimeout(WAIT)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before a response head: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "-1"))
    while length < 0 or len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Reply(int(lines[0].split()[1]), headers, body)


def request_head(server: LiveServer, method: str, path: str, address: str, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{server.port}", f"X-Forwarded-For: {address}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)


def closed_by_server(sock: socket.socket, timeout: float = CLOSE_WAIT) -> bool:
    """Waits (bounded) for the server to end the connection; data before the end is read
    and dropped."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


# --------------------------------------------------------------------------- servers


def add_users(server: LiveServer) -> None:
    for name, password in PASSWORDS.items():
        server.add_user(name, password=password)
        server.grant(name, [HELLO])


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {
        "STEAMHARNESS_TRUSTED_PROXIES": '["127.0.0.1"]',
        "STEAMHARNESS_PUBLIC_URL": "https://mcp.example.test",
        "STEAMHARNESS_ALLOWED_HOSTS": '["extra.example.test:*"]',
        "STEAMHARNESS_LOGIN_FAILURES_PER_ACCOUNT": "3",
        "STEAMHARNESS_LOGIN_FAILURES_PER_ADDRESS": "6",
        "STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS": "4",
        "PYTHONUNBUFFERED": "1",  # log lines are in the file by the time their response arrives
    }
    with running_server(tmp_path_factory.mktemp("edge"), **env) as live:
        add_users(live)
        yield live
    assert "Traceback" not in live.log()


def login_form(client: httpx2.Client) -> str:
    page = client.get("/login")
    token = CSRF_RE.search(page.text)
    assert page.status_code == 200 and token, page.text
    return token.group(1)


def login(client: httpx2.Client, user: str, password: str) -> httpx2.Response:
    client.cookies.clear()  # a fresh visitor each time
    token = login_form(client)
    data = {"username": user, "password": password, "csrf_token": token}
    return client.post("/login", data=data, follow_redirects=False)


def browser(server: LiveServer, address: str, **headers: str) -> httpx2.Client:
    return httpx2.Client(
        base_url=server.base_url, timeout=WAIT, headers={"X-Forwarded-For": address, **headers}
    )


# --------------------------------------------------------------------------- 11: Host and Origin


def test_a_foreign_host_is_refused_with_421_on_every_kind_of_route(edge: LiveServer) -> None:
    address = fresh_address()
    evil = {"Host": "evil.example", "X-Forwarded-For": address}
    key = {"Authorization": f"Bearer {edge.admin_key}"}
    with httpx2.Client(base_url=edge.base_url, timeout=WAIT, headers=evil) as client:
        login_page = client.get("/login")
        openapi = client.get("/openapi.json")
        api = client.get("/api/runs/nope", headers=key)
        upload = client.post(
            f"/api/workflows/{HELLO}/files?fileName=a.txt",
            content=b"hello",
            headers={**key, "Content-Type": "application/octet-stream"},
        )
        mcp = client.post(edge.mcp_url(HELLO), json=init_body(), headers=mcp_headers(edge.admin_key, address))
    for r in (login_page, openapi, api, upload, mcp):
        assert r.status_code == 421, (r.request.url, r.status_code, r.text)
    assert "text/html" in login_page.headers["content-type"] and "Invalid Host header" in login_page.text
    assert login_page.headers["content-security-policy"].startswith("default-src 'self'")
    assert api.json() == {"error": {"code": "bad_host", "message": "Invalid Host header"}}
    assert mcp.json()["error"]["message"] == "HTTP 421: Invalid Host header"
    rows = [r for r in audit_rows(edge, "request.host_refused") if r["client_address"] == address]
    assert rows and rows[0]["details"]["host"] == "evil.example" and rows[0]["outcome"] == "421"


def test_a_foreign_origin_is_refused_with_403_before_authentication(edge: LiveServer) -> None:
    address = fresh_address()
    evil = {"Origin": "http://evil.example"}
    r = httpx2.post(edge.mcp_url(HELLO), json=init_body(), headers=mcp_headers(None, address, **evil))
    assert r.status_code == 403, r.text
    assert r.json()["error"] == {"code": -32001, "message": "HTTP 403: Invalid Origin header"}
    assert "www-authenticate" not in r.headers
    with browser(edge, address) as client:
        token = login_form(client)
        form = {"username": "alice", "password": PASSWORDS["alice"], "csrf_token": token}
        page = client.post("/login", data=form, headers=evil, follow_redirects=False)
        api = client.post("/api/interactions/x/answer", json={"action": "accept"}, headers=evil)
    assert page.status_code == 403 and "Invalid Origin header" in page.text
    assert api.status_code == 403 and api.json()["error"]["code"] == "bad_origin"
    rows = [r for r in audit_rows(edge, "request.origin_refused") if r["client_address"] == address]
    assert rows and rows[0]["details"]["origin"] == "http://evil.example"


def test_the_public_url_and_allowed_hosts_are_accepted_with_their_own_origins(edge: LiveServer) -> None:
    address = fresh_address()
    for host, origin in (
        ("mcp.example.test", "https://mcp.example.test"),
        ("extra.example.test:8443", "https://extra.example.test:8443"),
        (f"localhost:{edge.port}", f"http://localhost:{edge.port}"),
    ):
        with browser(edge, address, Host=host, Origin=origin) as client:
            assert client.get("/login").status_code == 200, host
            r = login(client, "alice", PASSWORDS["alice"])
            assert r.status_code == 303, (host, r.text)


def test_a_flood_of_refusals_from_one_address_writes_a_bounded_audit(edge: LiveServer) -> None:
    address = fresh_address()
    with httpx2.Client(base_url=edge.base_url, timeout=WAIT) as client:
        for _ in range(40):
            r = client.get("/login", headers={"Host": "evil.example", "X-Forwarded-For": address})
            assert r.status_code == 421
    rows = [r for r in audit_rows(edge, "request.host_refused") if r["client_address"] == address]
    assert 1 <= len(rows) <= 2  # one row per address and minute, however many refusals
    assert rows[0]["details"]["refusals"] == 1


# --------------------------------------------------------------------------- 12: one Authorization


def test_two_authorization_headers_are_refused_with_400_everywhere(edge: LiveServer) -> None:
    address = fresh_address()
    good, bad = f"Bearer {edge.admin_key}", "Bearer shk_000000000000_nope"
    for first, second in ((good, bad), (bad, good)):
        twice = [("Authorization", first), ("Authorization", second), ("X-Forwarded-For", address)]
        mcp = httpx2.post(
            edge.mcp_url(HELLO),
            json=init_body(),
            headers=[*mcp_headers(None, address).items(), *twice[:2]],
            timeout=WAIT,
        )
        api = httpx2.get(f"{edge.base_url}/api/runs/nope", headers=twice, timeout=WAIT)
        page = httpx2.get(f"{edge.base_url}/login", headers=twice, timeout=WAIT)
        assert mcp.status_code == 400, mcp.text
        assert mcp.json()["error"]["message"] == "HTTP 400: send exactly one Authorization header"
        assert api.status_code == 400 and api.json()["error"]["code"] == "bad_request"
        assert page.status_code == 400 and "exactly one Authorization header" in page.text


# --------------------------------------------------------------------------- 2: bodies


def test_an_unauthenticated_api_request_is_refused_before_its_body_is_read(edge: LiveServer) -> None:
    address = fresh_address()
    with connect(edge) as sock:
        # The body is declared but never sent: only a server that answers first can answer.
        head = request_head(
            edge, "POST", "/api/interactions/x/answer", address, Content_Type="application/json"
        )
        sock.sendall(head.replace(b"\r\n\r\n", b"\r\nContent-Length: 1000\r\n\r\n") + b'{"action"')
        reply = read_reply(sock)
        assert reply.status == 401 and reply.json()["error"]["code"] == "unauthorized"
        assert reply.headers["www-authenticate"].startswith("Bearer")
        assert reply.headers["connection"] == "close" and closed_by_server(sock)


def refused_before_the_body(edge: LiveServer, sock: socket.socket, length: int) -> Reply:
    """Sends a head whose body the server refuses to read (a foreign Host: 421) and reads the
    refusal up to the server's end of stream."""
    head = request_head(edge, "POST", "/api/runs/nope", fresh_address(), Content_Length=str(length))
    sock.sendall(head.replace(f"Host: 127.0.0.1:{edge.port}".encode(), b"Host: evil.example"))
    reply = read_reply(sock)
    assert reply.status == 421 and reply.headers["connection"] == "close", reply
    assert closed_by_server(sock)  # the server's half of the connection has ended
    return reply


def test_a_refusal_is_not_destroyed_by_a_reset_when_the_client_sends_its_body_anyway(
    edge: LiveServer,
) -> None:
    # Most clients send the whole body before reading. A server that closed at once with the
    # body unread would answer it with a reset, which can destroy the refusal before the
    # client reads it: it half-closes and reads and drops the body instead.
    body = b"x" * 200_000
    with connect(edge) as sock:
        refused_before_the_body(edge, sock, len(body))
        sock.sendall(body)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(WAIT)
        assert sock.recv(1) == b""  # an orderly end, not ConnectionResetError


def test_a_lingering_connection_is_closed_past_its_byte_and_time_bounds(edge: LiveServer) -> None:
    piece = b"x" * (64 * 1024)
    with connect(edge) as sock:
        refused_before_the_body(edge, sock, 1 << 30)
        sent = 0
        with contextlib.suppress(OSError):
            while sent < 64 * LINGER_BYTES:  # far more than the loopback buffers hold
                sock.sendall(piece)
                sent += len(piece)
        assert sent < 64 * LINGER_BYTES, "the server read and dropped the body without bound"
    with connect(edge) as sock:
        refused_before_the_body(edge, sock, 1 << 30)
        # A client that sends a byte now and then and never ends its stream: the bytes stay
        # far below the byte bound, so only the time bound can close the connection.
        assert eventually_refused(sock, within=CLOSE_WAIT), "the lingering connection was never closed"


def eventually_refused(sock: socket.socket, within: float) -> bool:
    """Trickles one byte every 0.2 s (bounded) until the server's end of the connection is
    gone: a byte sent to a closed connection is answered with a reset, and the next send fails."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            sock.sendall(b"x")
        except OSError:
            return True
        select.select([], [], [], 0.2)  # the client's pace
    return False


def test_a_declared_body_over_the_cap_is_413_before_any_of_it_is_read(edge: LiveServer) -> None:
    address = fresh_address()
    huge = str(300 * 1024 * 1024)
    cases = [
        ("/api/interactions/x/answer", f"Bearer {edge.admin_key}", "application/json"),
        ("/api/interactions/x/answer", None, "application/json"),
        (f"/api/workflows/{HELLO}/mcp?target=latest", f"Bearer {edge.admin_key}", "application/json"),
        ("/login", None, "application/x-www-form-urlencoded"),
    ]
    replies = []
    for path, authorization, content_type in cases:
        extra = {
            "Content_Type": content_type,
            "Content_Length": huge,
            "Accept": "application/json, text/event-stream",
        }
        if authorization:
            extra["Authorization"] = authorization
        with connect(edge) as sock:
            sock.sendall(request_head(edge, "POST", path, address, **extra))
            reply = read_reply(sock)
            assert reply.status == 413, (path, reply)
            assert closed_by_server(sock), path
            replies.append(reply)
    assert replies[0].json()["error"]["code"] == "too_large"
    assert replies[1].json()["error"]["code"] == "too_large"
    assert replies[2].json()["error"]["message"].startswith("HTTP 413: the request body is larger than")
    assert "text/html" in replies[3].headers["content-type"] and b"Too large" in replies[3].body
    rows = [r for r in audit_rows(edge, "request.too_large") if r["client_address"] == address]
    assert rows and rows[0]["details"]["declared"] == 300 * 1024 * 1024


@pytest.mark.parametrize(
    "path", ["/api/interactions/x/answer", f"/api/workflows/{HELLO}/mcp?target=latest"], ids=["api", "mcp"]
)
def test_a_chunked_body_growing_past_the_cap_is_cut_off_with_413(edge: LiveServer, path: str) -> None:
    address = fresh_address()
    head = request_head(
        edge,
        "POST",
        path,
        address,
        Authorization=f"Bearer {edge.admin_key}",
        Content_Type="application/json",
        Accept="application/json, text/event-stream",
        Transfer_Encoding="chunked",
    )
    piece = b" " * (64 * 1024)
    with connect(edge) as sock:
        sock.sendall(head + b"".join(chunk(piece) for _ in range(CAP // len(piece))) + chunk(b"{"))
        reply = read_reply(sock)  # the terminating chunk was never sent
        assert reply.status == 413, reply
        assert closed_by_server(sock)
    if "mcp" in path:
        assert reply.json()["jsonrpc"] == "2.0"
    else:
        assert reply.json()["error"]["code"] == "too_large"


def test_bodies_within_the_cap_and_uploads_up_to_their_own_limit_still_work(edge: LiveServer) -> None:
    auth = {"Authorization": f"Bearer {edge.admin_key}", "X-Forwarded-For": fresh_address()}
    answer = httpx2.post(
        f"{edge.base_url}/api/interactions/nope/answer",
        json={"action": "accept", "content": {"text": "x" * (CAP // 2)}},
        headers=auth,
        timeout=WAIT,
    )
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    upload = httpx2.post(
        f"{edge.base_url}/api/workflows/{HELLO}/files?fileName=big.bin",
        content=b"\0" * (2 * CAP),
        headers={**auth, "Content-Type": "application/octet-stream"},
        timeout=WAIT,
    )
    assert upload.status_code == 201, upload.text
    assert upload.json()["data"][0]["size"] == 2 * CAP


# --------------------------------------------------------------------------- 4: throttling


def test_failed_logins_lock_the_account_even_against_the_right_password_from_elsewhere(
    edge: LiveServer,
) -> None:
    with browser(edge, fresh_address()) as guesser:
        for _ in range(3):
            assert login(guesser, "victim", "wrong-guess").status_code == 401
    with browser(edge, fresh_address()) as owner:
        r = login(owner, "victim", PASSWORDS["victim"])
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert "Too many failed logins" in r.text and "steamharness_session" not in r.headers.get(
        "set-cookie", ""
    )
    rows = [r for r in audit_rows(edge, "auth.throttled") if r["actor"] == "user:victim"]
    assert rows and rows[0]["outcome"] == "429" and rows[0]["details"]["credential"] == "password"


def test_failed_logins_are_throttled_per_address_across_accounts(edge: LiveServer) -> None:
    address = fresh_address()
    with browser(edge, address) as client:
        for n in range(6):
            assert login(client, f"nobody-{n}", "guess").status_code == 401
        r = login(client, "carl", PASSWORDS["carl"])
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    with browser(edge, fresh_address()) as elsewhere:
        assert login(elsewhere, "carl", PASSWORDS["carl"]).status_code == 303


def test_a_successful_login_is_not_held_back_and_clears_its_accounts_failures(edge: LiveServer) -> None:
    with browser(edge, fresh_address()) as client:
        for _ in range(2):
            assert login(client, "carl", "wrong").status_code == 401
            assert login(client, "carl", "wrong").status_code == 401
            assert login(client, "carl", PASSWORDS["carl"]).status_code == 303


def test_failed_bearer_credentials_are_throttled_per_address_on_the_mcp_endpoint_and_the_api(
    edge: LiveServer,
) -> None:
    address = fresh_address()
    with httpx2.Client(timeout=WAIT) as client:
        for n in range(4):
            bad = f"shk_00000000000{n}_nope"
            if n % 2:
                r = client.post(edge.mcp_url(HELLO), json=init_body(), headers=mcp_headers(bad, address))
            else:
                r = client.get(
                    f"{edge.base_url}/api/runs/x",
                    headers={"Authorization": f"Bearer {bad}", "X-Forwarded-For": address},
                )
            assert r.status_code == 401, r.text
        bad = "shk_000000000009_nope"
        mcp = client.post(edge.mcp_url(HELLO), json=init_body(), headers=mcp_headers(bad, address))
        api = client.get(
            f"{edge.base_url}/api/runs/x",
            headers={"Authorization": f"Bearer {bad}", "X-Forwarded-For": address},
        )
        good = client.post(
            edge.mcp_url(HELLO), json=init_body(), headers=mcp_headers(edge.admin_key, address)
        )
        elsewhere = client.post(
            edge.mcp_url(HELLO), json=init_body(), headers=mcp_headers(bad, fresh_address())
        )
    assert mcp.status_code == 429 and int(mcp.headers["retry-after"]) >= 1
    assert mcp.json()["error"]["message"].startswith("HTTP 429: too many failed credentials")
    assert api.status_code == 429 and api.json()["error"]["code"] == "throttled"
    assert good.status_code == 200  # keys are unguessable: only failures are throttled
    assert elsewhere.status_code == 401
    rows = [r for r in audit_rows(edge, "auth.throttled") if r["client_address"] == address]
    assert rows and rows[0]["details"]["credential"] == "bearer"


def test_a_throttled_login_is_refused_without_hashing_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = prepare(tmp_path / "data").model_copy(update={"login_failures_per_account": 2})
    hashed: list[str] = []
    real = ui_auth.verify_password

    def counting(stored: str, password: str) -> bool:
        hashed.append(password)
        return real(stored, password)

    monkeypatch.setattr(ui_auth, "verify_password", counting)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        web = Web(client, settings)
        statuses = []
        for password in ("wrong-1", "wrong-2", USER[1]):
            token = CSRF_RE.search(client.get("/login").text)
            assert token
            form = {"username": USER[0], "password": password, "csrf_token": token.group(1)}
            statuses.append(client.post("/login", data=form, follow_redirects=False).status_code)
        assert statuses == [401, 401, 429]
        assert hashed == ["wrong-1", "wrong-2"]  # the third, throttled, was never hashed
        assert web.client.get("/projects", follow_redirects=False).status_code == 303


def test_the_failure_counter_blocks_at_its_limit_until_the_oldest_failure_ages_out() -> None:
    now = [1000.0]
    counter = FailureCounter(limit=3, window=60.0, max_keys=2, clock=lambda: now[0])
    for step in range(3):
        assert counter.retry_after("a") is None
        counter.failed("a")
        now[0] += 10 * (step < 2)
    assert counter.retry_after("a") == 40  # the first failure leaves the window at 1060
    now[0] = 1059.5
    assert counter.retry_after("a") == 1
    now[0] = 1060.0
    assert counter.retry_after("a") is None
    counter.failed("b")
    counter.failed("c")  # over max_keys: the least recently failed key ("a") is forgotten
    assert len(counter) == 2 and counter.retry_after("a") is None


def test_the_refusal_audit_writes_one_row_per_address_and_interval_counting_the_rest() -> None:
    now = [0.0]
    audit = RefusalAudit(interval=60.0, max_rows=3, max_keys=100, clock=lambda: now[0])
    assert audit.admit("e", "1.1.1.1") == 1
    assert [audit.admit("e", "1.1.1.1") for _ in range(5)] == [None] * 5
    assert audit.admit("e", "2.2.2.2") == 1
    assert audit.admit("e", "3.3.3.3") == 1
    assert audit.admit("e", "4.4.4.4") is None  # over the rows of this interval
    now[0] = 61.0
    assert audit.admit("e", "1.1.1.1") == 6  # the five held back, and this one
    assert audit.admit("e", "4.4.4.4") == 2


# --------------------------------------------------------------------------- 6: slow clients


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {"STEAMHARNESS_HEADER_TIMEOUT_SECONDS": "1", "STEAMHARNESS_BEARER_FAILURES_PER_ADDRESS": "2"}
    with running_server(tmp_path_factory.mktemp("slow"), **env) as live:
        yield live


def test_connections_trickling_their_headers_are_closed_by_the_server(slow: LiveServer) -> None:
    trickle = f"GET /login HTTP/1.1\r\nHost: 127.0.0.1:{slow.port}\r\nX-Slow: ".encode() + b"a" * 10_000
    pending = [connect(slow) for _ in range(30)]
    everything = list(pending)
    try:
        for sent in range(int(CLOSE_WAIT / 0.25)):  # bounded: one byte per socket per round
            readable, _, _ = select.select(pending, [], [], 0.25)
            for sock in readable:
                with contextlib.suppress(ConnectionResetError):
                    assert sock.recv(65536) == b"", "the server answered a request it never got"
                pending.remove(sock)
            if not pending:
                break
            for sock in list(pending):
                try:
                    sock.sendall(trickle[sent : sent + 1])
                except (BrokenPipeError, ConnectionResetError):
                    pending.remove(sock)
        assert pending == [], f"{len(pending)} of 30 trickling connections are still open"
    finally:
        for sock in everything:
            sock.close()


def test_a_connection_that_never_sends_a_request_is_closed(slow: LiveServer) -> None:
    with connect(slow) as sock:
        assert closed_by_server(sock)


def test_requests_on_a_kept_alive_connection_still_work_and_a_half_sent_next_one_is_dropped(
    slow: LiveServer,
) -> None:
    get = f"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1:{slow.port}\r\n\r\n".encode()
    with connect(slow) as sock:
        for _ in range(3):
            sock.sendall(get)
            assert read_reply(sock).status == 200
        sock.sendall(get[:20])
        assert closed_by_server(sock)


def test_x_forwarded_for_is_ignored_unless_a_trusted_proxy_sent_it(slow: LiveServer) -> None:
    bad = {"Authorization": "Bearer shk_000000000000_nope"}
    for n in range(2):
        r = httpx2.get(f"{slow.base_url}/api/runs/x", headers={**bad, "X-Forwarded-For": f"192.0.2.{n}"})
        assert r.status_code == 401
    r = httpx2.get(f"{slow.base_url}/api/runs/x", headers={**bad, "X-Forwarded-For": "192.0.2.99"})
    assert r.status_code == 429  # every attempt counted against the real peer, 127.0.0.1


def test_connections_beyond_the_limit_are_answered_503(tmp_path: Path) -> None:
    env = {"STEAMHARNESS_MAX_CONNECTIONS": "4", "STEAMHARNESS_HEADER_TIMEOUT_SECONDS": "120"}
    with running_server(tmp_path, **env) as server:
        idle = [connect(server) for _ in range(4)]
        try:
            r = httpx2.get(f"{server.base_url}/openapi.json", timeout=WAIT)
            assert r.status_code == 503
        finally:
            for sock in idle:
                sock.close()
        for _ in range(int(WAIT / 0.1)):  # the server notices the closes in its own time
            if httpx2.get(f"{server.base_url}/openapi.json", timeout=WAIT).status_code == 200:
                break
            select.select([], [], [], 0.1)
        else:
            raise AssertionError("the server never took requests again")


# --------------------------------------------------------------------------- 9: Try it


def test_try_it_calls_its_own_socket_whatever_host_the_request_names(edge: LiveServer) -> None:
    bait = socket.socket()
    bait.bind(("127.0.0.1", 0))
    bait.listen(8)
    bait_port = bait.getsockname()[1]
    try:
        with browser(edge, fresh_address()) as client:
            assert login(client, "alice", PASSWORDS["alice"]).status_code == 303
            page = client.get(f"/projects/{HELLO}/mcp?target=latest")
            token = CSRF_RE.search(page.text)
            assert token
            r = client.post(
                f"/projects/{HELLO}/mcp/try?target=latest",
                data={"tool": "greet", "t1-name": "Ada"},
                headers={
                    "HX-Request": "true",
                    "X-CSRF-Token": token.group(1),
                    "Host": f"127.0.0.1:{bait_port}",
                },
            )
        assert r.status_code == 200, r.text
        assert '<span class="badge success">success</span>' in r.text, r.text
        waiting, _, _ = select.select([bait], [], [], 0)
        assert waiting == [], "Try it connected to the port the Host header named"
    finally:
        bait.close()


def test_a_failed_try_it_call_names_no_address(tmp_path: Path) -> None:
    port = free_port()
    settings = prepare(tmp_path / "data")
    with TestClient(create_app(settings), base_url=f"http://127.0.0.1:{port}") as client:
        web = Web(client, settings)
        csrf = web.login(*USER)
        r = client.post(
            f"/projects/{HELLO}/mcp/try?target=latest",
            data={"tool": "greet", "t1-name": "Ada"},
            headers={"HX-Request": "true", "X-CSRF-Token": csrf},
        )
    assert r.status_code == 200 and '<span class="badge failed">failed</span>' in r.text
    assert "Could not reach the MCP endpoint of this server." in r.text
    assert str(port) not in r.text and "127.0.0.1" not in r.text and "Errno" not in r.text


def test_try_it_reaches_a_server_bound_to_every_interface_over_loopback_or_at_the_internal_url(
    tmp_path: Path,
) -> None:
    def url(**settings: Any) -> str:
        scope = {"type": "http", "server": ("172.17.0.2", 8000), "headers": [(b"host", b"x")]}
        return own_endpoint_url(Request(scope), Settings(data_dir=tmp_path, **settings), HELLO, "latest")

    assert url(host="0.0.0.0").startswith("http://127.0.0.1:8000/api/workflows/")
    assert url(host="::").startswith("http://[::1]:8000/")
    assert url(host="172.17.0.2").startswith("http://172.17.0.2:8000/")
    assert url(host="0.0.0.0", internal_url="http://app:9000/").startswith("http://app:9000/api/")


# --------------------------------------------------------------------------- 13: logs


def test_no_key_shaped_value_or_the_admin_key_reaches_the_log_and_session_ids_are_shortened(
    edge: LiveServer,
) -> None:
    address = fresh_address()
    key = edge.create_key("logkeeper")
    secrets = [key, "she_" + "e" * 40, "shw_" + "w" * 40, edge.admin_key]
    with httpx2.Client(base_url=edge.base_url, timeout=WAIT, headers={"X-Forwarded-For": address}) as client:
        client.get(f"/login?k={key}")
        client.get(f"/openapi.json?x=1&whatever={secrets[1]}")
        client.get(f"/api/runs/{secrets[2]}")
        client.get(f"/login?next=/{edge.admin_key}")
        client.get(f"/login?q=%3D{key}")
        r = client.post(edge.mcp_url(HELLO), json=init_body(), headers=mcp_headers(edge.admin_key, address))
        assert r.status_code == 200
        sid = r.headers["mcp-session-id"]
        client.delete(
            edge.mcp_url(HELLO), headers=mcp_headers(edge.admin_key, address, **{"Mcp-Session-Id": sid})
        )
    log = edge.log()
    assert "/login?k=shk_[redacted]" in log
    for secret in secrets:
        assert secret not in log
    assert sid not in log and f"{sid[:8]}…" in log


def test_the_redactor_covers_keys_anywhere_the_admin_key_and_session_ids() -> None:
    redact = Redactor(["adm!n key/value-that-is-long"])
    text = redact(
        "GET /x?a=shk_0123456789ab_secretsecret&b=adm%21n%20key%2Fvalue-that-is-long "
        "session 0123456789abcdef0123456789abcdef said adm!n key/value-that-is-long"
    )
    assert text == ("GET /x?a=shk_[redacted]&b=[redacted] session 01234567… said [redacted]")

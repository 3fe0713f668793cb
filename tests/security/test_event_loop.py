"""Blocking work never stalls the server: a database locked by another process delays only
the requests that must write, and they fail in bounded time with 503 and Retry-After.

The lock is held by this test (a second SQLite connection in BEGIN IMMEDIATE) for as long
as it checks, so "while the writer waits" is a fact of the test, not a timing guess."""

from __future__ import annotations

import concurrent.futures
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer
from tests.e2e.test_http_mcp import headers, init_body, open_session, sse_json
from tests.helpers import WAIT
from tests.support import in_process_server

TIMEOUT = 20


@contextlib.contextmanager
def write_lock(live: LiveServer) -> Iterator[None]:
    """Another process's writer: holds the database's write lock until the block ends."""
    conn = sqlite3.connect(live.data_dir / "steamharness.sqlite3", isolation_level=None, timeout=10)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def bad_key_request(live: LiveServer) -> httpx2.Response:
    """Refused credentials are audited: a request that must write before it answers."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    return httpx2.post(live.mcp_url(HELLO), headers=headers("shk_000000000000_nope"), json=body, timeout=WAIT)


def ping(live: LiveServer, key: str, sid: str) -> dict[str, object]:
    body = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
    r = httpx2.post(live.mcp_url(HELLO), headers=headers(key, sid), json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return sse_json(r)


@pytest.fixture
def slow_lock_server(tmp_path: Path) -> Iterator[LiveServer]:
    # Writers wait longer for the lock than the test can last (a hang guard, not a speed
    # check), so the test decides when the wait ends.
    with in_process_server(tmp_path, STEAMHARNESS_DB_BUSY_TIMEOUT_SECONDS=str(3 * WAIT)) as live:
        yield live


def test_static_health_and_mcp_pings_answer_while_a_writer_waits_for_a_locked_database(
    slow_lock_server: LiveServer,
) -> None:
    live = slow_lock_server
    key = live.create_key("alice")
    sid = open_session(live, key)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        with write_lock(live):
            writer = pool.submit(bad_key_request, live)
            for _ in range(20):
                css = httpx2.get(f"{live.base_url}/static/css/app.css", timeout=TIMEOUT)
                assert css.status_code == 200
                health = httpx2.get(f"{live.base_url}/healthz", timeout=TIMEOUT)
                assert health.status_code == 200 and health.json()["status"] == "ok"
                assert ping(live, key, sid)["result"] == {}
                login_page = httpx2.get(f"{live.base_url}/login", timeout=TIMEOUT)
                assert login_page.status_code == 200
            assert not writer.done(), "the writer cannot have finished: the lock is still held"
        # Released: the waiting writer goes on and answers as usual.
        assert writer.result(timeout=TIMEOUT).status_code == 401


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Writers give up after half a second. Shared by the module's tests that lock the
    database only for the block they check and write only rows of their own (their own
    account, key and session); the lock is always released when the block ends."""
    with in_process_server(
        tmp_path_factory.mktemp("busy"), STEAMHARNESS_DB_BUSY_TIMEOUT_SECONDS="0.5"
    ) as live:
        yield live


def test_a_writer_gives_up_after_the_busy_timeout_with_503_and_retry_after(busy_server: LiveServer) -> None:
    live = busy_server
    key = live.create_key("alice")
    with write_lock(live):
        refused = bad_key_request(live)
        assert refused.status_code == 503
        assert refused.headers["retry-after"].isdigit()
        assert "database is busy" in refused.json()["error"]["message"]

        cli = live.cli("users", "create", "bob", check=False)
        assert cli.returncode != 0 and "Traceback" not in cli.stderr

        sid_attempt = httpx2.post(
            live.mcp_url(HELLO), headers=headers(key), json=init_body(), timeout=TIMEOUT
        )
        # Opening a session records it: refused in bounded time, never a hang.
        assert sid_attempt.status_code == 503, sid_attempt.text
        assert sid_attempt.headers["retry-after"].isdigit()
    # The lock is gone: everything works again.
    assert bad_key_request(live).status_code == 401
    sid = open_session(live, key)
    assert ping(live, key, sid)["result"] == {}


def test_the_login_page_and_answers_report_a_busy_database_as_503(busy_server: LiveServer) -> None:
    live = busy_server
    live.add_user("carol", password="a long enough password")
    with httpx2.Client(base_url=live.base_url, timeout=TIMEOUT) as http:
        form = http.get("/login")
        token = form.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        with write_lock(live):
            r = http.post(
                "/login",
                data={"username": "carol", "password": "a long enough password", "csrf_token": token},
            )
            assert r.status_code == 503
            assert r.headers["retry-after"].isdigit()

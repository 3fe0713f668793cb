"""Ending MCP sessions against a real server: an administrator terminating one from the
sessions console, a key revoked in the web UI or from the CLI. Each ends the session (the
client's next request is refused), cancels its waiting run and closes its pending
question, and is audited. Non-administrators and unknown or ended sessions are refused
with a clear answer."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.e2e.server import INTERACTIVE, LiveServer, key_id_of, running_server
from tests.helpers import WAIT
from webui.store.runs import FINAL_STATUSES

pytestmark = pytest.mark.anyio

ADMIN = ("ada", "ada-password-1")
USER = ("uma", "uma-password-1")
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
PV = "2025-11-25"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("sessions")) as live:
        live.add_user(ADMIN[0], admin=True, password=ADMIN[1])
        live.add_user(USER[0], password=USER[1])
        live.grant(USER[0], [INTERACTIVE])
        yield live
    assert "Traceback" not in live.log()


@contextlib.contextmanager
def logged_in(server: LiveServer, who: tuple[str, str]) -> Iterator[tuple[httpx2.Client, str]]:
    """A cookie-keeping client logged in through the login form, and its CSRF token."""
    with httpx2.Client(base_url=server.base_url, timeout=TIMEOUT) as client:
        token = CSRF_RE.search(client.get("/login").text)
        assert token
        r = client.post(
            "/login",
            data={"username": who[0], "password": who[1], "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        csrf = CSRF_RE.search(client.get("/keys").text)
        assert csrf
        yield client, csrf.group(1)


def db_rows(server: LiveServer, query: str, *args: Any) -> list[dict[str, Any]]:
    con = sqlite3.connect(server.data_dir / "steamharness.sqlite3")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(query, args).fetchall()]
    finally:
        con.close()


def new_key(server: LiveServer) -> tuple[str, str]:
    """(raw key, key id) of a new key of USER."""
    raw = server.create_key(USER[0], projects=[INTERACTIVE])
    return raw, key_id_of(raw)


@asynccontextmanager
async def session(server: LiveServer, key: str, name: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
    ) as http:
        with anyio.fail_after(TIMEOUT):
            async with Client(
                streamable_http_client(server.mcp_url(INTERACTIVE), http_client=http),
                mode="legacy",
                client_info=types.Implementation(name=name, version="0.9"),
            ) as client:
                yield client


async def waiting_run(client: Client) -> tuple[str, str]:
    """Call plan_trip; the client declares no elicitation, so the run waits on a question:
    (run id, interaction id)."""
    result = await client.call_tool("plan_trip", {"traveller": "Ed"})
    assert isinstance(result.content[0], types.TextContent)
    body = json.loads(result.content[0].text)
    assert body["error"]["code"] == "interaction_required", body
    return body["runId"], body["error"]["interactionId"]


def session_row(server: LiveServer, key_id: str) -> dict[str, Any]:
    rows = db_rows(server, "select * from mcp_sessions where key_id = ?", key_id)
    assert len(rows) == 1, rows
    return rows[0]


async def assert_ended(server: LiveServer, sid: str, run_id: str, interaction_id: str, reason: str) -> None:
    row = db_rows(server, "select * from mcp_sessions where id = ?", sid)[0]
    assert row["closed_at"] is not None and row["close_reason"] == reason
    # The server waits a bounded time for a cancelled run's outcome before it closes the
    # session's row; on a loaded machine the outcome (with its question closed) may come
    # after the row: wait for it, bounded, as for any write of its own.
    with anyio.fail_after(TIMEOUT):
        while True:
            run = db_rows(server, "select status, error from runs where id = ?", run_id)[0]
            if run["status"] in FINAL_STATUSES:
                break
            await anyio.sleep(0.05)  # polling the database, bounded
    assert run["status"] == "cancelled"
    assert "session ended" in json.loads(run["error"])["message"]
    question = db_rows(server, "select status from interactions where id = ?", interaction_id)[0]
    assert question["status"] == "closed"


async def test_the_console_lists_a_session_and_terminating_it_ends_it(server: LiveServer) -> None:
    key, key_id = new_key(server)
    async with session(server, key, "e2e-probe") as client:
        run_id, interaction_id = await waiting_run(client)
        row = session_row(server, key_id)
        sid = row["id"]
        assert (row["client_name"], row["client_version"], row["protocol_version"]) == (
            "e2e-probe",
            "0.9",
            PV,
        )
        with logged_in(server, ADMIN) as (web, csrf):
            page = web.get("/admin/sessions")
            assert page.status_code == 200 and sid in page.text and "e2e-probe 0.9" in page.text
            r = web.post(
                f"/admin/sessions/{sid}/terminate", data={"csrf_token": csrf}, follow_redirects=False
            )
            assert r.status_code == 303
            assert sid not in web.get("/admin/sessions").text
        await assert_ended(server, sid, run_id, interaction_id, "terminated")
        with pytest.raises(MCPError, match=r"^HTTP 404: Session not found$"):
            await client.list_tools()
    events = db_rows(
        server, "select * from audit_events where event = 'session.terminated' and session_id = ?", sid
    )
    assert [(e["actor"], e["outcome"]) for e in events] == [(f"user:{ADMIN[0]}", "terminated")]


async def test_revoking_a_key_in_the_web_ends_its_sessions_and_cancels_their_questions(
    server: LiveServer,
) -> None:
    key, key_id = new_key(server)
    async with session(server, key, "revoked-probe") as client:
        run_id, interaction_id = await waiting_run(client)
        sid = session_row(server, key_id)["id"]
        with logged_in(server, USER) as (web, csrf):
            r = web.post(f"/keys/{key_id}/revoke", data={"csrf_token": csrf}, follow_redirects=False)
            assert r.status_code == 303
        # The POST answered once the session had ended.
        await assert_ended(server, sid, run_id, interaction_id, "revoked")
        with pytest.raises(MCPError, match=r"^HTTP 401: this API key has been revoked$"):
            await client.list_tools()
    events = db_rows(
        server, "select * from audit_events where event = 'session.terminated' and session_id = ?", sid
    )
    assert [(e["actor"], e["outcome"]) for e in events] == [(f"user:{USER[0]}", "revoked")]


async def test_revoking_a_key_from_the_cli_ends_the_sessions_a_running_server_holds(
    server: LiveServer,
) -> None:
    key, key_id = new_key(server)
    async with session(server, key, "cli-probe") as client:
        run_id, interaction_id = await waiting_run(client)
        sid = session_row(server, key_id)["id"]
        server.cli("keys", "revoke", key_id)
        # The server notices the store's change on its own; closing the row is its last step.
        with anyio.fail_after(TIMEOUT):
            while (
                db_rows(server, "select closed_at from mcp_sessions where id = ?", sid)[0]["closed_at"]
                is None
            ):
                await anyio.sleep(0.05)
        await assert_ended(server, sid, run_id, interaction_id, "revoked")
        with pytest.raises(MCPError, match=r"^HTTP 401: this API key has been revoked$"):
            await client.list_tools()


def test_the_console_and_terminate_are_for_administrators_only(server: LiveServer) -> None:
    with logged_in(server, USER) as (web, csrf):
        assert web.get("/admin/sessions").status_code == 403
        r = web.post("/admin/sessions/anything/terminate", data={"csrf_token": csrf})
        assert r.status_code == 403
    with httpx2.Client(base_url=server.base_url, timeout=TIMEOUT) as anonymous:
        r = anonymous.get("/admin/sessions", follow_redirects=False)
        assert r.status_code in (302, 303) and "/login" in r.headers["location"]


def test_terminating_an_unknown_or_ended_session_says_so(server: LiveServer) -> None:
    key, _ = new_key(server)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PV,
    }
    opened = httpx2.post(server.mcp_url(INTERACTIVE), headers=headers, json=body, timeout=TIMEOUT)
    sid = opened.headers["mcp-session-id"]
    with logged_in(server, ADMIN) as (web, csrf):
        unknown = web.post("/admin/sessions/no-such-session/terminate", data={"csrf_token": csrf})
        assert unknown.status_code == 404 and "MCP session no-such-session not found." in unknown.text
        first = web.post(
            f"/admin/sessions/{sid}/terminate", data={"csrf_token": csrf}, headers={"HX-Request": "true"}
        )
        assert first.status_code == 200 and f"MCP session {sid} terminated." in first.text
        again = web.post(f"/admin/sessions/{sid}/terminate", data={"csrf_token": csrf})
        assert again.status_code == 409 and f"MCP session {sid} already ended (terminated, " in again.text
        no_csrf = web.post(f"/admin/sessions/{sid}/terminate")
        assert no_csrf.status_code == 403
    after = httpx2.post(
        server.mcp_url(INTERACTIVE),
        headers={**headers, "Mcp-Session-Id": sid},
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        timeout=TIMEOUT,
    )
    assert after.status_code == 404

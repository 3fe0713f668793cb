"""The Streamable HTTP endpoint against a real server: auth and session matrices with
exact statuses, both protocol eras through the Python SDK client, interaction_required
answered through the API, cancellation by DELETE, run gate, draft changes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.server import (
    FILES,
    HELLO,
    INTERACTIVE,
    LEDGER,
    TORTURE,
    LiveServer,
    key_id_of,
    raw_request,
    running_server,
)
from tests.helpers import WAIT, wait_until_gone
from tests.support.inprocess import in_process_server
from tests.support.waiting import eventually
from webui.auth.keys import new_project_credential
from webui.store import accounts as account_store
from webui.store.db import make_engine

# The end-to-end pass of Streamable HTTP in both protocol eras, the run gate and queue
# limits on PostgreSQL too (tests/pg.py).
pytestmark = [pytest.mark.anyio, pytest.mark.dialects]

PV = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("http"), server_database_url) as live:
        yield live


# --------------------------------------------------------------------------- raw HTTP helpers


def init_body(request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
    }


def headers(key: str | None, sid: str | None = None, **extra: str) -> dict[str, str]:
    h = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": PV, **extra}
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    if sid is not None:
        h["Mcp-Session-Id"] = sid
    return h


def sse_json(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a (single-message) SSE or JSON response."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return json.loads(line[5:])
    raise AssertionError(f"no message in {response.text!r}")


def open_session(server: LiveServer, key: str, project: str = HELLO, target: str = "latest") -> str:
    r = httpx2.post(server.mcp_url(project, target), headers=headers(key), json=init_body(), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = httpx2.post(server.mcp_url(project, target), headers=headers(key, sid), json=note, timeout=TIMEOUT)
    assert r.status_code == 202, r.text
    return sid


def list_tools(
    server: LiveServer, key: str | None, sid: str, project: str = HELLO, target: str = "latest"
) -> int:
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    r = httpx2.post(server.mcp_url(project, target), headers=headers(key, sid), json=body, timeout=TIMEOUT)
    return r.status_code


def call_tool(
    server: LiveServer, key: str, sid: str, name: str, args: dict[str, Any], project: str = HELLO
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": args}}
    r = httpx2.post(server.mcp_url(project), headers=headers(key, sid), json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return sse_json(r)


def error_message(response: httpx2.Response) -> str:
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] in (-32001, -32600)
    return body["error"]["message"]


# --------------------------------------------------------------------------- auth matrix


def test_the_auth_matrix_answers_exact_statuses(server: LiveServer) -> None:
    url = server.mcp_url(HELLO)
    good = server.create_key("alice")
    other_project = server.create_key("bob", projects=[LEDGER])
    read_only = server.create_key("carol", scopes=["runs.read"])
    engine = make_engine(server.store_url)
    embed_raw, embed = new_project_credential(project_id=HELLO, kind="embed_token")
    hook_raw, hook = new_project_credential(project_id=HELLO, kind="webhook_secret")
    account_store.add_project_credential(engine, row=embed)
    account_store.add_project_credential(engine, row=hook)
    engine.dispose()

    def post(hdrs: dict[str, str], target_url: str = url) -> httpx2.Response:
        return httpx2.post(target_url, headers=hdrs, json=init_body(), timeout=TIMEOUT)

    base = headers(None)
    cases: list[tuple[str, httpx2.Response, int, str]] = [
        ("no header", post(base), 401, "missing Authorization"),
        (
            "Basic",
            post({**base, "Authorization": "Basic YWxpY2U6cGFzcw=="}),
            401,
            "only Authorization: Bearer",
        ),
        ("empty Bearer", post({**base, "Authorization": "Bearer"}), 401, "empty Bearer"),
        ("unknown key", post(headers("shk_000000000000_nope")), 401, "invalid API key"),
        ("garbage", post(headers("not-a-key")), 401, "invalid API key"),
        ("cookie only", post({**base, "Cookie": "steamharness_session=abc"}), 401, "browser session"),
        ("key in query", post(base, f"{url}&key={good}"), 401, "query string"),
        ("key in query with header", post(headers(good), f"{url}&api_key={good}"), 401, "query string"),
        ("embed token", post(headers(embed_raw)), 401, "embed token"),
        ("webhook secret", post(headers(hook_raw)), 401, "webhook secret"),
        ("other project", post(headers(other_project)), 403, "no run permission"),
        ("no runs.create", post(headers(read_only)), 403, "runs.create"),
    ]
    for name, response, status, fragment in cases:
        assert response.status_code == status, (name, response.status_code, response.text)
        assert fragment in error_message(response), (name, response.text)
        if status == 401:
            assert response.headers["www-authenticate"].startswith("Bearer"), name
    assert post(headers(good)).status_code == 200
    assert post(headers(server.admin_key)).status_code == 200


def test_a_revoked_key_fails_on_the_very_next_request_of_its_session(server: LiveServer) -> None:
    key = server.create_key("dave")
    sid = open_session(server, key)
    assert list_tools(server, key, sid) == 200
    server.revoke_key(key_id_of(key))
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
    r = httpx2.post(server.mcp_url(HELLO), headers=headers(key, sid), json=body, timeout=TIMEOUT)
    assert r.status_code == 401 and "revoked" in error_message(r)


def test_unknown_projects_and_bad_targets_are_refused(server: LiveServer) -> None:
    key = server.create_key("erin")
    r = httpx2.post(
        server.mcp_url("11111111-1111-4111-8111-111111111111"), headers=headers(key), json=init_body()
    )
    assert r.status_code == 404
    r = httpx2.post(server.mcp_url(HELLO, "v1"), headers=headers(key), json=init_body())
    assert r.status_code == 400 and "target" in error_message(r)
    r = httpx2.post(server.mcp_url(HELLO, "9.9.9"), headers=headers(key), json=init_body())
    assert r.status_code == 404


# --------------------------------------------------------------------------- session matrix


def test_the_session_matrix_binds_credential_project_and_target(server: LiveServer) -> None:
    alice = server.create_key("frank")
    bob = server.create_key("grace")
    sid = open_session(server, alice, HELLO, "latest")
    assert list_tools(server, alice, sid) == 200
    assert list_tools(server, bob, sid) == 403  # another key
    assert list_tools(server, server.admin_key, sid) == 403  # even the admin key
    assert list_tools(server, alice, sid, project=LEDGER) == 403  # another project
    assert (
        list_tools(server, alice, sid, target="1.0.0") == 403
    )  # latest resolved to 1.0.0: still another target
    assert list_tools(server, alice, "f" * 32) == 404  # unknown id
    r = httpx2.post(
        server.mcp_url(HELLO),
        headers=headers(alice),
        json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
    )
    assert r.status_code == 400  # no session id on a non-initialize request
    r = httpx2.delete(server.mcp_url(HELLO), headers=headers(alice, sid), timeout=TIMEOUT)
    assert r.status_code == 200
    assert list_tools(server, alice, sid) == 404  # after DELETE


def test_an_idle_session_expires(tmp_path: Path) -> None:
    with in_process_server(tmp_path, STEAMHARNESS_SESSION_IDLE_TIMEOUT_SECONDS="2") as live:
        key = live.create_key()
        sid = open_session(live, key)
        assert list_tools(live, key, sid) == 200
        # The server closes it on its own once idle past the timeout: wait (bounded) for its
        # row to say so, reading the database (a request would count as activity).
        row = eventually(lambda: _closed_session(live, sid), "the idle session closed")
        assert row["close_reason"] == "expired"
        assert list_tools(live, key, sid) == 404
        audit = _audit(live, "session.closed")  # written with the row, in its transaction
        assert any(row["session_id"] == sid and row["outcome"] == "expired" for row in audit)


def _closed_session(live: LiveServer, sid: str) -> dict[str, Any] | None:
    """The session's row once it is closed (None while it is open)."""
    (row,) = live.query("select closed_at, close_reason from mcp_sessions where id = :s", s=sid)
    return row if row["closed_at"] is not None else None


def _audit(live: LiveServer, event: str | None = None) -> list[dict[str, Any]]:
    rows = live.query("select * from audit_events order by id")
    return [r for r in rows if event is None or r["event"] == event]


def test_a_draft_session_refuses_calls_once_the_draft_changed(server: LiveServer) -> None:
    key = server.create_key("heidi")
    sid = open_session(server, key, HELLO, "draft")
    first = call_tool_target(server, key, sid, "draft", "greet", {"name": "A"})
    assert first["result"]["structuredContent"]["status"] == "success"
    main = server.projects / "hello" / "main.py"
    main.write_text(main.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    try:
        second = call_tool_target(server, key, sid, "draft", "greet", {"name": "A"})
        body = second["result"]["structuredContent"]
        assert second["result"]["isError"] is True
        assert body["error"]["code"] == "draft_changed" and "runId" not in body
        fresh = open_session(server, key, HELLO, "draft")
        third = call_tool_target(server, key, fresh, "draft", "greet", {"name": "A"})
        assert third["result"]["structuredContent"]["status"] == "success"
    finally:
        main.write_text(main.read_text(encoding="utf-8").replace("\n# changed\n", ""), encoding="utf-8")


def call_tool_target(
    server: LiveServer, key: str, sid: str, target: str, name: str, args: dict[str, Any]
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": args}}
    r = httpx2.post(server.mcp_url(HELLO, target), headers=headers(key, sid), json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return sse_json(r)


# --------------------------------------------------------------------------- SDK client, both eras


@asynccontextmanager
async def sdk_client(url: str, key: str, mode: str, elicit: Any = None) -> AsyncIterator[Client]:
    kwargs: dict[str, Any] = {"mode": mode}
    if elicit is not None:
        kwargs["elicitation_callback"] = elicit
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
    ) as http:
        with anyio.fail_after(TIMEOUT):
            async with Client(streamable_http_client(url, http_client=http), **kwargs) as client:
                yield client


def trip_answers() -> Any:
    answers = [
        types.ElicitResult(action="accept", content={"destination": "Rome", "nights": 4}),
        types.ElicitResult(action="accept", content={"room": "double", "extras": ["breakfast"]}),
        types.ElicitResult(action="accept", content={}),
    ]

    async def callback(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return answers.pop(0)

    return callback


def payload(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.content[0], types.TextContent)
    body = json.loads(result.content[0].text)
    assert body == result.structured_content
    return body


@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_two_rounds_and_an_approval_over_http_in_both_eras(
    server: LiveServer, mode: str, era: str
) -> None:
    key = server.create_key("ivan")
    async with sdk_client(server.mcp_url(INTERACTIVE), key, mode, trip_answers()) as client:
        assert client.protocol_version == era
        info = client.session.server_info
        assert info is not None and info.name == f"workflow-{INTERACTIVE}" and info.version == "2.1.0"
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == {"plan_trip", "collect_document"}
        body = payload(await client.call_tool("plan_trip", {"traveller": "Bo"}))
    assert body["status"] == "success"
    assert body["output"] == {
        "traveller": "Bo",
        "destination": "Rome",
        "nights": 4,
        "room": "double",
        "extras": ["breakfast"],
        "booked": True,
    }


async def test_interaction_required_is_answered_through_the_api_and_the_run_read_back(
    server: LiveServer,
) -> None:
    key = server.create_key("judy")
    async with sdk_client(server.mcp_url(INTERACTIVE), key, "legacy") as client:
        result = await client.call_tool("plan_trip", {"traveller": "Cy"})
    body = payload(result)
    assert result.is_error is True and body["error"]["code"] == "interaction_required"
    assert "/api/interactions/" in body["error"]["message"]
    run_id = body["runId"]
    assert body["error"]["message"].endswith(f"then read GET {server.base_url}/api/runs/{run_id}.")
    answers = iter([{"destination": "Kyiv", "nights": 1}, {"room": "single"}, {}])
    interaction_id = body["error"]["interactionId"]
    async with httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        with anyio.fail_after(TIMEOUT):
            while True:
                r = await http.post(
                    f"/api/interactions/{interaction_id}/answer",
                    json={"action": "accept", "content": next(answers)},
                )
                assert r.status_code == 200, r.text
                run = await _wait_run(http, run_id)
                if run["status"] == "success":
                    break
                interaction_id = run["interaction"]["interactionId"]
            again = await http.post(
                f"/api/interactions/{interaction_id}/answer", json={"action": "accept", "content": {}}
            )
            assert again.status_code == 200 and again.json()["data"]["repeated"] is True
            conflict = await http.post(
                f"/api/interactions/{interaction_id}/answer", json={"action": "decline"}
            )
            assert conflict.status_code == 409
    assert run["output"]["destination"] == "Kyiv" and run["output"]["booked"] is True
    assert run["source"] == "mcp"


async def _wait_run(http: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    """Until the run finished or waits for its next answer (bounded by the caller)."""
    while True:
        data = (await http.get(f"/api/runs/{run_id}")).json()["data"]
        if data["status"] in ("success", "failed", "cancelled", "timeout") or data.get("interaction"):
            return data
        await anyio.sleep(0.02)


async def test_run_reads_are_limited_to_permitted_projects(server: LiveServer) -> None:
    owner = server.create_key("kim")
    stranger = server.create_key("lee", projects=[LEDGER])
    async with sdk_client(server.mcp_url(HELLO), owner, "legacy") as client:
        run_id = payload(await client.call_tool("greet", {"name": "x"}))["runId"]
    async with httpx2.AsyncClient(base_url=server.base_url) as http:
        mine = await http.get(f"/api/runs/{run_id}", headers={"Authorization": f"Bearer {owner}"})
        theirs = await http.get(f"/api/runs/{run_id}", headers={"Authorization": f"Bearer {stranger}"})
        anonymous = await http.get(f"/api/runs/{run_id}")
    assert mine.status_code == 200 and "events" not in mine.json()["data"]
    assert theirs.status_code == 404
    assert anonymous.status_code == 401


# --------------------------------------------------------------------------- files


async def test_uploaded_files_are_params_and_bad_file_ids_are_tool_errors(server: LiveServer) -> None:
    key = server.create_key("mia")
    async with httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        up = await http.post(
            f"/api/workflows/{FILES}/files",
            params={"fileName": "../../etc/notes.txt", "mimeType": "text/plain"},
            content=b"a\nb\nc\n",
            headers={"Content-Type": "application/octet-stream"},
        )
        other = await http.post(
            f"/api/workflows/{HELLO}/files",
            params={"fileName": "x.txt"},
            content=b"x",
            headers={"Content-Type": "application/octet-stream"},
        )
    assert up.status_code == 201, up.text
    meta = up.json()["data"][0]
    assert meta["id"].startswith("wf_") and len(meta["id"]) == 19
    assert meta["name"] == "notes.txt" and meta["size"] == 6
    other_id = other.json()["data"][0]["id"]
    async with sdk_client(server.mcp_url(FILES), key, "legacy") as client:
        body = payload(await client.call_tool("summarize", {"document": {"id": meta["id"]}}))
        assert body["output"]["lines"] == 3 and body["output"]["name"] == "notes.txt"
        bad = [
            {"id": other_id},  # another project's file
            {"id": "wf_0000000000000000"},  # unknown
            {"id": meta["id"], "name": "x"},  # extra keys
            "/etc/hostname",  # a path is not a server file
            {"url": "https://example.com/x"},
        ]
        for value in bad:
            refused = await client.call_tool("summarize", {"document": value})
            body = payload(refused)  # a tool error the model reads (SEP-1303), no run
            assert refused.is_error is True and "runId" not in body, value
            assert body["error"]["code"] == "invalid_params" and "document" in body["error"]["message"], body
        foreign = payload(await client.call_tool("summarize", {"document": {"id": other_id}}))
        unknown = payload(await client.call_tool("summarize", {"document": {"id": "wf_0000000000000000"}}))
        # Another project's file reads exactly as one that does not exist.
        assert foreign["error"]["message"].replace(other_id, "X") == unknown["error"]["message"].replace(
            "wf_0000000000000000", "X"
        )
        assert "unknown file id" in foreign["error"]["message"]
        assert (
            payload(await client.call_tool("summarize", {"document": {"id": meta["id"]}}))["status"]
            == "success"
        )


def _blob_files(live: LiveServer) -> set[str]:
    root = live.data_dir / "files"
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def test_exactly_50_mb_is_accepted_and_one_byte_more_is_413_with_nothing_stored(server: LiveServer) -> None:
    key = server.create_key("nia")
    url = f"{server.base_url}/api/workflows/{FILES}/files"
    hdrs = {"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"}
    limit = 50 * 1024 * 1024
    chunk = b"\0" * (1024 * 1024)

    def body(total: int) -> Iterator[bytes]:
        sent = 0
        while sent < total:
            part = chunk[: min(len(chunk), total - sent)]
            sent += len(part)
            yield part

    ok = httpx2.post(url, params={"fileName": "exact.bin"}, content=body(limit), headers=hdrs, timeout=120)
    assert ok.status_code == 201 and ok.json()["data"][0]["size"] == limit
    before = _blob_files(server)
    # A declared Content-Length over the limit is refused before any of the body is sent.
    status, text = raw_request(
        server.port,
        f"POST /api/workflows/{FILES}/files?fileName=big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {limit + 1}\r\n\r\n",
    )
    assert status == 413 and "file_too_large" in text
    chunked = httpx2.post(
        url, params={"fileName": "big.bin"}, content=body(limit + 1), headers=hdrs, timeout=120
    )
    assert chunked.status_code == 413
    assert _blob_files(server) == before  # nothing stored, no temp file left behind


# --------------------------------------------------------------------------- cancellation and gate


@dataclass
class SleepingCall:
    """A tools/call of torture `sleep` in flight: its HTTP client, its open SSE response, and
    the pids of its worker and the worker's grandchild."""

    http: httpx2.AsyncClient
    stream: Any
    pids: list[int]

    async def hang_up(self) -> None:
        await self.stream.__aexit__(None, None, None)


@asynccontextmanager
async def _sleeping(server: LiveServer, key: str, sid: str) -> AsyncIterator[SleepingCall]:
    """POST a tools/call of torture `sleep` and read its SSE until the progress with pids; the
    block runs within TIMEOUT."""
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"grandchild": True}, "_meta": {"progressToken": "p1"}},
    }
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60)) as http:
        with anyio.fail_after(TIMEOUT):
            stream = http.stream("POST", server.mcp_url(TORTURE), headers=headers(key, sid), json=body)
            response = await stream.__aenter__()
            async for line in response.aiter_lines():
                if line.startswith("data:") and "notifications/progress" in line:
                    message = json.loads(line[5:])["params"]["message"]
                    if not message.startswith("worker="):
                        continue  # a keep-alive (webui.mcp.keepalive), not the workflow's report
                    pids = dict(part.split("=") for part in message.split())
                    break
            else:
                raise AssertionError("no progress notification")
            yield SleepingCall(http, stream, [int(pids["worker"]), int(pids["grandchild"])])


async def test_delete_cancels_the_running_call_and_its_worker(server: LiveServer) -> None:
    key = server.create_key("olga")
    sid = open_session(server, key, TORTURE)
    async with _sleeping(server, key, sid) as call:
        r = await call.http.delete(server.mcp_url(TORTURE), headers=headers(key, sid))
        assert r.status_code == 200
        await wait_until_gone(call.pids)
        await call.hang_up()
    with anyio.fail_after(TIMEOUT):  # the run is recorded as cancelled once its worker is gone
        while _runs(server, "sleep")[-1]["status"] != "cancelled":
            await anyio.sleep(0.02)


async def test_a_client_that_drops_its_post_mid_call_cancels_the_run(server: LiveServer) -> None:
    key = server.create_key("pete")
    sid = open_session(server, key, TORTURE)
    async with _sleeping(server, key, sid) as call:
        await call.hang_up()  # without reading the result
        await wait_until_gone(call.pids)


def _runs(live: LiveServer, entrypoint: str) -> list[dict[str, Any]]:
    return live.query("select * from runs where entrypoint_id = :ep order by created_at, id", ep=entrypoint)


async def test_a_closed_run_gate_refuses_calls_without_creating_a_run(server: LiveServer) -> None:
    key = server.create_key("quinn")
    server.set_limits(LEDGER, run_gate_open=False)
    before = len(_runs(server, "post_entry"))
    try:
        async with sdk_client(server.mcp_url(LEDGER), key, "legacy") as client:
            result = await client.call_tool("post_entry", {"amount": 1})
        body = payload(result)
        assert result.is_error is True
        assert body["error"]["code"] == "run_gate_closed" and "runId" not in body
        assert len(_runs(server, "post_entry")) == before
    finally:
        server.set_limits(LEDGER, run_gate_open=True)


async def test_queue_limits_refuse_calls_beyond_them_without_creating_a_run(server: LiveServer) -> None:
    key = server.create_key("ruth")
    server.set_limits(TORTURE, max_running=1, max_queued=0)
    sid = open_session(server, key, TORTURE)
    try:
        async with _sleeping(server, key, sid) as call:
            before = len(_runs(server, "progress"))
            refused = call_tool(server, key, sid, "progress", {}, project=TORTURE)
            body = refused["result"]["structuredContent"]
            assert refused["result"]["isError"] is True
            assert body["error"]["code"] == "queue_limit" and "runId" not in body
            assert len(_runs(server, "progress")) == before
            await call.hang_up()
            await wait_until_gone(call.pids)
    finally:
        server.set_limits(TORTURE, max_running=100, max_queued=100)
    ok = call_tool(server, key, sid, "progress", {}, project=TORTURE)
    assert ok["result"]["structuredContent"]["status"] == "success"


def test_every_tool_call_is_audited_with_who_what_where_and_outcome(server: LiveServer) -> None:
    key = server.create_key("sam")
    sid = open_session(server, key, HELLO)
    result = call_tool(server, key, sid, "greet", {"name": "audit"})
    run_id = result["result"]["structuredContent"]["runId"]
    rows = [r for r in _audit(server) if r["run_id"] == run_id]
    # One row per fact: the run's own events are the call's (no tool.* rows beside them).
    assert [r["event"] for r in rows] == ["run.created", "run.finished"]
    called, finished = sorted(
        (r for r in server.rows("audit_events") if r["run_id"] == run_id), key=lambda r: r["id"]
    )
    assert called["details"]["call"] == finished["details"]["call"] == "tools/call"
    assert finished["outcome"] == "success" and finished["session_id"] == sid
    assert called["actor"] == "user:sam" and called["project_id"] == HELLO and called["tool"] == "greet"
    assert called["session_id"] == sid and called["target"] == "latest" and called["version"] == "1.0.0"
    assert called["client_address"] == "127.0.0.1" and called["user_agent"]
    assert called["source"] == "mcp"


# --------------------------------------------------------------------------- shutdown, restart, secrecy


async def test_shutdown_stops_active_calls_and_records_waiting_runs_as_stopped_by_it(
    tmp_path: Path,
) -> None:
    live = _fresh(tmp_path)
    live.start()
    key = live.create_key()
    sid = open_session(live, key, TORTURE)
    try:
        async with _sleeping(live, key, sid) as call:
            async with sdk_client(live.mcp_url(INTERACTIVE), key, "legacy") as client:
                waiting = payload(await client.call_tool("plan_trip", {"traveller": "Z"}))
            assert waiting["status"] == "waiting_for_input"
            assert live.stop() in (0, -15), live.log()[
                -3000:
            ]  # uvicorn re-raises SIGTERM after a clean shutdown
            assert "Application shutdown complete" in live.log()
            await wait_until_gone(call.pids)
            await call.hang_up()
        live.start()
        async with httpx2.AsyncClient(
            base_url=live.base_url, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            run = (await http.get(f"/api/runs/{waiting['runId']}")).json()["data"]
            answer = await http.post(
                f"/api/interactions/{waiting['error']['interactionId']}/answer",
                json={"action": "accept", "content": {"destination": "x", "nights": 1}},
            )
        assert run["status"] == "failed" and run["error"]["code"] == "shutting_down"
        assert answer.status_code == 410
        closed = [r for r in _audit(live, "session.closed") if r["session_id"] == sid]
        assert closed and closed[0]["outcome"] == "shutdown"
    finally:
        live.stop()


def _fresh(tmp_path: Path) -> LiveServer:
    from tests.e2e.server import make_server

    return make_server(tmp_path)


def test_no_raw_key_or_authorization_value_reaches_the_audit_log_logs_or_responses(
    server: LiveServer,
) -> None:
    key = server.create_key("rita")
    responses = [
        httpx2.post(server.mcp_url(HELLO), headers=headers(key + "x"), json=init_body()).text,
        httpx2.post(server.mcp_url(HELLO), headers=headers(key), json=init_body()).text,
        httpx2.post(f"{server.mcp_url(HELLO)}&key={key}", headers=headers(None), json=init_body()).text,
        httpx2.get(f"{server.base_url}/openapi.json").text,
    ]
    secrets = [key, key.split("_", 2)[2], server.admin_key]
    haystacks = {
        "database": server.dump(),
        "server log": server.log(),
        **{f"response {i}": r for i, r in enumerate(responses)},
    }
    for where, text in haystacks.items():
        for secret in secrets:
            assert secret not in text, f"a secret leaked into the {where}"
        assert "Bearer shk_" not in text, where
    assert _audit(server, "auth.failed")


def test_the_openapi_document_lists_the_mcp_operations(server: LiveServer) -> None:
    doc = httpx2.get(f"{server.base_url}/openapi.json").json()
    item = doc["paths"]["/api/workflows/{project_id}/mcp"]
    assert set(item) >= {"post", "get", "delete"}
    names = {p["name"] for p in item["post"]["parameters"]}
    assert {"Authorization", "Mcp-Session-Id", "MCP-Protocol-Version", "target", "project_id"} <= names
    assert {"200", "401", "403", "404"} <= set(item["post"]["responses"])
    assert "/api/workflows/{project_id}/files" in doc["paths"]
    assert httpx2.get(f"{server.base_url}/docs").status_code == 200


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_cancelling_a_call_from_the_sdk_client_kills_its_worker_in_both_eras(
    server: LiveServer, mode: str
) -> None:
    key = server.create_key("tess")
    pids: dict[str, int] = {}
    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if not (message or "").startswith("worker="):
            return  # a keep-alive (webui.mcp.keepalive), not the workflow's report
        pids.update({k: int(v) for k, v in (part.split("=") for part in (message or "").split())})
        started.set()

    async with sdk_client(server.mcp_url(TORTURE), key, mode) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool("sleep", {"grandchild": True}, progress_callback=on_progress)

            tg.start_soon(call)
            with anyio.fail_after(TIMEOUT):
                await started.wait()
            tg.cancel_scope.cancel()
        await wait_until_gone([pids["worker"], pids["grandchild"]])
        assert payload(await client.call_tool("progress", {}))["output"] == {"steps": 3}

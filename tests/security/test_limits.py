"""Limits against a real `steamharness serve`: open MCP sessions per credential, stored
files per project (count and bytes, racing uploads included), the upload's mimeType, and
numbers JSON cannot carry (NaN, Infinity, 1e999) in tool arguments and results, over both
transports."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests import processes
from tests.e2e.server import FILES, HELLO, INTERACTIVE, LEDGER, TORTURE, LiveServer, make_server, raw_request
from tests.helpers import WAIT
from webui.errors import InvalidArguments
from webui.mcp.results import final_result
from webui.workflows.project import load_project
from webui.workflows.schema import input_schema, validate_arguments

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
LIMITS = "f2f227de-81cb-474a-b2d0-e488a588fee2"
PV = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
KIB = 1024
SESSION_CAP = 2
ADMIN_SESSION_CAP = 3
FILE_CAP = 4
BYTE_CAP = 256 * KIB
STEAMHARNESS = processes.STEAMHARNESS


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = make_server(
        tmp_path_factory.mktemp("limits"),
        STEAMHARNESS_MAX_SESSIONS_PER_KEY=str(SESSION_CAP),
        STEAMHARNESS_MAX_SESSIONS_ADMIN_KEY=str(ADMIN_SESSION_CAP),
        STEAMHARNESS_PROJECT_FILE_QUOTA_COUNT=str(FILE_CAP),
        STEAMHARNESS_PROJECT_FILE_QUOTA_BYTES=str(BYTE_CAP),
    )
    shutil.copytree(HERE / "limits_project", live.projects / "limits")
    live.add_project(live.projects / "limits", LIMITS)
    with live.running():
        yield live


# --------------------------------------------------------------------------- helpers


def headers(key: str | None, sid: str | None = None) -> dict[str, str]:
    h = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": PV}
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    if sid is not None:
        h["Mcp-Session-Id"] = sid
    return h


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": PV, "capabilities": {}, "clientInfo": {"name": "limits", "version": "1"}},
}


def initialize(live: LiveServer, key: str, project: str = HELLO) -> httpx2.Response:
    return httpx2.post(live.mcp_url(project), headers=headers(key), json=INIT, timeout=TIMEOUT)


def open_session(live: LiveServer, key: str, project: str = HELLO) -> str:
    r = initialize(live, key, project)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = httpx2.post(live.mcp_url(project), headers=headers(key, sid), json=note, timeout=TIMEOUT)
    assert r.status_code == 202, r.text
    return sid


def strict_json(text: str) -> Any:
    """JSON as the RFC has it: NaN and Infinity literals are refused."""

    def refuse(literal: str) -> Any:
        raise ValueError(f"{literal} is not JSON")

    return json.loads(text, parse_constant=refuse)


def sse_message(response: httpx2.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("application/json"):
        return strict_json(response.text)
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return strict_json(line[5:])
    raise AssertionError(f"no message in {response.text!r}")


def db_rows(live: LiveServer, sql: str, *args: Any) -> list[dict[str, Any]]:
    con = sqlite3.connect(live.data_dir / "steamharness.sqlite3")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql, args).fetchall()]
    finally:
        con.close()


def audit(live: LiveServer, event: str) -> list[dict[str, Any]]:
    return db_rows(live, "select * from audit_events where event = ? order by id", event)


def file_rows(live: LiveServer, project: str) -> list[dict[str, Any]]:
    return db_rows(live, "select * from managed_files where project_id = ?", project)


def stored_blobs(live: LiveServer) -> set[str]:
    root = live.data_dir / "files"
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def upload(live: LiveServer, key: str, project: str, body: bytes, **params: str) -> httpx2.Response:
    return httpx2.post(
        f"{live.base_url}/api/workflows/{project}/files",
        params={"fileName": "f.bin", **params},
        content=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"},
        timeout=TIMEOUT,
    )


def error_of(response: httpx2.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()["error"]


@asynccontextmanager
async def sdk_client(live: LiveServer, key: str, project: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
    ) as http:
        with anyio.fail_after(TIMEOUT):
            async with Client(streamable_http_client(live.mcp_url(project), http_client=http)) as client:
                yield client


def payload(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.content[0], types.TextContent)
    body = strict_json(result.content[0].text)
    assert body == result.structured_content
    return body


# --------------------------------------------------------------------------- sessions per key


def test_a_key_past_its_session_cap_gets_429_naming_the_cap_and_how_to_free_a_session(
    server: LiveServer,
) -> None:
    alice = server.create_key("alice")
    bob = server.create_key("bob")
    sids = [open_session(server, alice) for _ in range(SESSION_CAP)]
    refused = initialize(server, alice)
    assert refused.status_code == 429
    body = refused.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32600
    message = body["error"]["message"]
    assert f"already has {SESSION_CAP} open MCP sessions" in message
    assert "STEAMHARNESS_MAX_SESSIONS_PER_KEY" in message
    assert "DELETE" in message and "Mcp-Session-Id" in message and "1800 s" in message
    assert "mcp-session-id" not in refused.headers
    rows = [r for r in audit(server, "session.refused") if r["actor"] == "user:alice"]
    assert rows and rows[-1]["outcome"] == "429" and rows[-1]["project_id"] == HELLO
    # The cap is per credential: another key is not affected.
    open_session(server, bob)
    # Ending a session frees its place.
    gone = httpx2.delete(server.mcp_url(HELLO), headers=headers(alice, sids[0]), timeout=TIMEOUT)
    assert gone.status_code == 200
    open_session(server, alice)
    assert initialize(server, alice).status_code == 429


def test_the_session_cap_counts_every_project_and_target_of_the_key(server: LiveServer) -> None:
    key = server.create_key("dora")
    open_session(server, key, HELLO)
    open_session(server, key, LEDGER)
    assert initialize(server, key, TORTURE).status_code == 429


def test_the_admin_key_has_its_own_session_cap(server: LiveServer) -> None:
    for _ in range(ADMIN_SESSION_CAP):
        open_session(server, server.admin_key)
    refused = initialize(server, server.admin_key)
    assert refused.status_code == 429
    message = refused.json()["error"]["message"]
    assert f"the server admin key already has {ADMIN_SESSION_CAP} open" in message
    assert "STEAMHARNESS_MAX_SESSIONS_ADMIN_KEY" in message


async def test_concurrent_opening_requests_cannot_overshoot_the_session_cap(server: LiveServer) -> None:
    key = server.create_key("carol")
    statuses: list[int] = []
    async with httpx2.AsyncClient(timeout=TIMEOUT) as http:

        async def open_one() -> None:
            r = await http.post(server.mcp_url(HELLO), headers=headers(key), json=INIT)
            statuses.append(r.status_code)

        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(open_one)
    assert sorted(statuses) == [200] * SESSION_CAP + [429] * (6 - SESSION_CAP)


# --------------------------------------------------------------------------- project file quota


def test_uploads_past_the_project_file_count_are_refused_audited_and_leave_nothing_behind(
    server: LiveServer,
) -> None:
    key = server.create_key("erin")
    for i in range(FILE_CAP):
        assert upload(server, key, FILES, f"file {i}".encode()).status_code == 201
    blobs = stored_blobs(server)
    refused = upload(server, key, FILES, b"one file too many")
    assert refused.status_code == 413
    error = error_of(refused)
    assert error["code"] == "project_quota"
    assert f"already stores {FILE_CAP} files" in error["message"] and "Nothing was stored" in error["message"]
    assert len(file_rows(server, FILES)) == FILE_CAP
    assert stored_blobs(server) == blobs  # no blob, no temp file
    row = [r for r in audit(server, "file.refused") if r["project_id"] == FILES][-1]
    assert row["actor"] == "user:erin" and row["outcome"] == "project_quota"
    assert json.loads(row["details"])["limit"] == "files"


def test_uploads_past_the_project_byte_quota_are_refused_before_the_body_is_read(
    server: LiveServer,
) -> None:
    key = server.create_key("finn")
    assert upload(server, key, HELLO, b"a" * (150 * KIB)).status_code == 201
    blobs = stored_blobs(server)
    # Only the head is sent: the refusal comes from the declared size alone.
    status, text = raw_request(
        server.port,
        f"POST /api/workflows/{HELLO}/files?fileName=big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {150 * KIB}\r\n\r\n",
    )
    assert status == 413 and '"project_quota"' in text and "Nothing was stored" in text
    # Without a declared size an upload needs room for the largest file allowed.
    chunked = httpx2.post(
        f"{server.base_url}/api/workflows/{HELLO}/files",
        params={"fileName": "small.bin"},
        content=iter([b"x"]),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"},
        timeout=TIMEOUT,
    )
    assert chunked.status_code == 413
    assert "Content-Length" in error_of(chunked)["message"]
    assert stored_blobs(server) == blobs
    assert upload(server, key, HELLO, b"b" * (100 * KIB)).status_code == 201  # what is left still fits
    assert sum(r["size"] for r in file_rows(server, HELLO)) <= BYTE_CAP


async def test_two_uploads_racing_for_the_last_file_place_cannot_both_be_stored(server: LiveServer) -> None:
    key = server.create_key("gus")
    for i in range(FILE_CAP - 1):
        assert upload(server, key, LEDGER, f"early {i}".encode()).status_code == 201
    incoming = server.data_dir / "files"
    release = anyio.Event()
    size = 2 * KIB

    async def slow_body() -> AsyncIterator[bytes]:
        yield b"s" * KIB
        await release.wait()
        yield b"s" * KIB

    hdrs = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/octet-stream",
        "Content-Length": str(size),
    }
    url = f"{server.base_url}/api/workflows/{LEDGER}/files"
    results: dict[str, httpx2.Response] = {}
    async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:

                async def slow() -> None:
                    results["slow"] = await http.post(
                        url, params={"fileName": "slow.bin"}, content=slow_body(), headers=hdrs
                    )

                tg.start_soon(slow)
                # The slow upload holds its place once its temp file exists (polling a
                # directory the server fills; bounded by the deadline above).
                while not list(incoming.rglob(".incoming-*")):
                    await anyio.sleep(0.02)
                results["fast"] = await http.post(
                    url,
                    params={"fileName": "fast.bin"},
                    content=b"fast",
                    headers={**hdrs, "Content-Length": "4"},
                )
                release.set()
    assert results["fast"].status_code == 413
    assert "1 more are being stored" in error_of(results["fast"])["message"]
    assert results["slow"].status_code == 201
    assert len(file_rows(server, LEDGER)) == FILE_CAP


async def test_output_files_count_against_the_quota_and_need_a_valid_mime_type(server: LiveServer) -> None:
    key = server.create_key("hana")
    async with sdk_client(server, key, LIMITS) as client:
        bad = payload(await client.call_tool("make_output", {"mime": "text/html\r\nX-Evil: 1"}))
        assert bad["status"] == "failed"
        made = [payload(await client.call_tool("make_output", {})) for _ in range(FILE_CAP)]
        assert [m["status"] for m in made] == ["success"] * FILE_CAP, made[0]["error"]
        over = payload(await client.call_tool("make_output", {"mime": "text/plain"}))
        assert over["status"] == "failed"
    assert len(file_rows(server, LIMITS)) == FILE_CAP
    row = [r for r in audit(server, "file.refused") if r["project_id"] == LIMITS][-1]
    assert row["outcome"] == "project_quota"
    # The handler saw why: the refusal is its exception, in the run's log.
    events = db_rows(server, "select text from run_events where run_id = ?", over["runId"])
    assert any(f"already stores {FILE_CAP} files" in (e["text"] or "") for e in events)


# --------------------------------------------------------------------------- mimeType


@pytest.mark.parametrize(
    "mime",
    [
        "text/html\r\nSet-Cookie: a=1",
        "text/plain\n",
        "<script>alert(1)</script>",
        "text/<b>",
        "text",
        "text/",
        "/plain",
        "text/plain/extra",
        "text/plain; charset=utf-8",
        "text/pl ain",
        "tëxt/plain",
        "",
        "a" * 128 + "/b",
        "a/" + "b" * 300,
    ],
)
def test_a_mime_type_that_is_not_a_type_subtype_token_is_refused_with_400(
    server: LiveServer, mime: str
) -> None:
    key = server.create_key("ivy")
    before = file_rows(server, TORTURE)
    refused = upload(server, key, TORTURE, b"content", mimeType=mime)
    assert refused.status_code == 400
    error = error_of(refused)
    assert error["code"] == "invalid_mime_type"
    assert "type/subtype" in error["message"] and "\r" not in error["message"] and "<" not in error["message"]
    assert file_rows(server, TORTURE) == before


def test_valid_mime_types_are_stored_lower_cased(server: LiveServer) -> None:
    key = server.create_key("jack")
    cases = {
        "application/pdf": "application/pdf",
        "Application/VND.MS-Excel": "application/vnd.ms-excel",
        "text/x-c++src": "text/x-c++src",
        "a" * 127 + "/" + "b" * 127: "a" * 127 + "/" + "b" * 127,
    }
    for mime, stored in cases.items():
        response = upload(server, key, INTERACTIVE, mime.encode(), mimeType=mime)
        assert response.status_code == 201, response.text
        assert response.json()["data"][0]["mimeType"] == stored


# --------------------------------------------------------------------------- NaN, Infinity, 1e999


def raw_call(live: LiveServer, key: str, sid: str, project: str, name: str, arguments: str) -> dict[str, Any]:
    """A tools/call whose arguments are sent as written: NaN and friends included."""
    body = (
        '{"jsonrpc": "2.0", "id": 9, "method": "tools/call", '
        f'"params": {{"name": "{name}", "arguments": {arguments}}}}}'
    )
    r = httpx2.post(live.mcp_url(project), headers=headers(key, sid), content=body, timeout=TIMEOUT)
    if r.status_code == 400:  # refused by the endpoint's strict reader before the SDK
        return r.json()
    assert r.status_code == 200, r.text
    return sse_message(r)


NON_FINITE = [
    (TORTURE, "sleep", '{"seconds": NaN}', "seconds"),
    (TORTURE, "sleep", '{"seconds": Infinity}', "seconds"),
    (TORTURE, "sleep", '{"seconds": -Infinity}', "seconds"),
    (TORTURE, "sleep", '{"seconds": 1e999}', "seconds"),
    (LIMITS, "total", '{"values": [1, 2, NaN]}', "values[2]"),
    (LIMITS, "total", '{"values": [1], "scale": -1e999}', "scale"),
]


@pytest.mark.parametrize(("project", "tool", "arguments", "param"), NON_FINITE)
def test_non_finite_numbers_in_http_tool_arguments_are_invalid_params_naming_the_param(
    server: LiveServer, project: str, tool: str, arguments: str, param: str
) -> None:
    key = server.create_key("kim")
    sid = open_session(server, key, project)
    before = db_rows(server, "select count(*) as n from runs")[0]["n"]
    message = raw_call(server, key, sid, project, tool, arguments)
    assert "result" not in message
    token = next((t for t in ("-Infinity", "Infinity", "NaN") if t in arguments), None)
    if token is not None:  # not JSON at all: the strict reader's parse error, naming the token
        assert message["error"]["code"] == -32700
        assert f"{token} is not valid JSON" in message["error"]["message"]
    else:  # a number out of a float's range: the strict reader refuses it as it does Infinity
        assert message["error"]["code"] == -32700
        assert "1e999 is out of a float's range" in message["error"]["message"]
    assert db_rows(server, "select count(*) as n from runs")[0]["n"] == before  # no run started
    httpx2.delete(server.mcp_url(project), headers=headers(key, sid), timeout=TIMEOUT)


async def test_non_finite_numbers_in_stdio_tool_arguments_are_tool_errors_naming_the_param(
    tmp_path: Path,
) -> None:
    lines = [
        json.dumps({**INIT, "id": 1}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", '
        '"params": {"name": "total", "arguments": {"values": [1, Infinity], "scale": 1}}}',
        '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", '
        '"params": {"name": "total", "arguments": {"values": [1], "scale": NaN}}}',
        '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", '
        '"params": {"name": "total", "arguments": {"values": [1e999]}}}',
    ]
    answers: dict[int, dict[str, Any]] = {}
    with anyio.fail_after(TIMEOUT):
        async with await anyio.open_process(
            [STEAMHARNESS, "mcp", str(HERE / "limits_project"), "--data-dir", str(tmp_path / "d")],
            stderr=subprocess.DEVNULL,
        ) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(("\n".join(lines) + "\n").encode())
            buffer = b""
            async for chunk in proc.stdout:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = strict_json(line.decode())  # stdout carries strict JSON only
                    if "id" in message:
                        answers[message["id"]] = message
                if {2, 3, 4} <= set(answers):
                    break
            await proc.stdin.aclose()
    expected = {2: "values[1]", 3: "scale", 4: "values[0]"}
    for request_id, param in expected.items():
        result = answers[request_id]["result"]  # a tool error the model reads (SEP-1303)
        assert result["isError"] is True
        assert f"{param}: numbers must be finite" in result["structuredContent"]["error"]["message"]


@pytest.mark.parametrize("tool", ["nan_output", "inf_output"])
async def test_a_handler_returning_nan_or_infinity_fails_clearly_and_the_result_stays_json(
    server: LiveServer, tool: str
) -> None:
    key = server.create_key("lea")
    async with sdk_client(server, key, LIMITS) as client:
        result = await client.call_tool(tool, {})
    body = payload(result)  # the text content parses as strict JSON
    assert result.is_error is True
    assert body["status"] == "failed" and body["error"]["code"] == "handler_error"
    assert "NaN or Infinity" in body["error"]["message"]
    run = db_rows(server, "select status, output from runs where id = ?", body["runId"])[0]
    assert run["status"] == "failed" and run["output"] in (None, "null")


def test_validate_arguments_finds_non_finite_numbers_at_any_depth() -> None:
    schema = {"type": "object"}  # open: only the finiteness rule applies
    args = {"a": 1.5, "deep": {"list": [1, {"x": math.nan}], "y": -math.inf}, "z": math.inf}
    with pytest.raises(InvalidArguments) as err:
        validate_arguments(schema, args, tool="t")
    message = str(err.value)
    assert "deep.list[1].x: numbers must be finite" in message
    assert "deep.y: numbers must be finite" in message and "z: numbers must be finite" in message
    total = load_project(HERE / "limits_project").entrypoint("total")
    assert total is not None
    closed = input_schema(total.params, file_mode="server")
    assert validate_arguments(closed, {"values": [1, 2.5, 1e308]}, tool="total") == {
        "values": [1, 2.5, 1e308]
    }


def test_a_recorded_output_with_nan_never_becomes_non_json_text() -> None:
    project = load_project(HERE / "limits_project")
    ep = project.entrypoint("nan_output")
    assert ep is not None
    result = final_result("r1", ep, "success", {"value": math.nan}, None)
    assert isinstance(result.content[0], types.TextContent)
    body = strict_json(result.content[0].text)
    assert result.is_error is True and body["error"]["code"] == "handler_error"

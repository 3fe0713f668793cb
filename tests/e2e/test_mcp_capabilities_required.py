"""Tools that require a client capability (`"requires"` in package.json) against a real
`steamharness serve` with the conformance fixture (`test_missing_capability` requires
sampling): at 2026-07-28 a client that did not declare it gets -32021 with HTTP 400 and
`data.requiredCapabilities` as an object of objects; on a 2025-11-25 session an isError
result with the code `capability_required`; a client that declares it gets the call run.
A refused call runs and stores nothing (no run row)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e.server import LiveServer
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server

FIXTURE = "6e089096-632c-488b-9d0d-69e768d26fad"
FIXTURE_DIR = Path(__file__).resolve().parents[1] / "conformance" / "project"
MODERN = "2026-07-28"
SESSION_ERA = "2025-11-25"
TOOL = "test_missing_capability"
ACCEPT = "application/json, text/event-stream"
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("requires")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("caps")


def message(r: httpx2.Response) -> dict[str, Any]:
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()
    found = [
        json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]
    replies = [m for m in found if "id" in m and "method" not in m]
    assert replies, r.text
    return replies[-1]


def modern_call(
    server: LiveServer, key: str, caps: dict[str, Any], tool: str = TOOL
) -> tuple[int, dict[str, Any]]:
    """One stateless 2026-07-28 tools/call declaring `caps`: (HTTP status, JSON-RPC message)."""
    request_id = next(_ids)
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "requires-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    }
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": meta},
    }
    sent = {
        "Authorization": f"Bearer {key}",
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    r = httpx2.post(server.mcp_url(FIXTURE, "draft"), json=body, headers=sent, timeout=WAIT)
    got = message(r)
    assert got.get("id") == request_id, got  # the error echoes the request's id
    return r.status_code, got


class Session:
    """A 2025-11-25 session that declared `caps` at initialize."""

    def __init__(self, server: LiveServer, key: str, caps: dict[str, Any]) -> None:
        self.server, self.key, self.sid = server, key, None
        init = {
            "protocolVersion": SESSION_ERA,
            "capabilities": caps,
            "clientInfo": {"name": "t", "version": "1"},
        }
        r = self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        assert r.status_code == 200, r.text
        self.sid = r.headers["mcp-session-id"]
        assert self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202

    def _post(self, body: dict[str, Any]) -> httpx2.Response:
        h = {"Authorization": f"Bearer {self.key}", "Accept": ACCEPT, "Content-Type": "application/json"}
        h["MCP-Protocol-Version"] = SESSION_ERA
        if self.sid is not None:
            h["Mcp-Session-Id"] = self.sid
        return httpx2.post(self.server.mcp_url(FIXTURE, "draft"), json=body, headers=h, timeout=WAIT)

    def call(self, tool: str = TOOL, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": tool, "arguments": {}}
        if meta is not None:
            params["_meta"] = meta
        r = self._post({"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params})
        assert r.status_code == 200, r.text
        return message(r)


def runs_of(server: LiveServer, tool: str = TOOL) -> int:
    return server.query("SELECT count(*) AS n FROM runs WHERE entrypoint_id = :t", t=tool)[0]["n"]


def test_at_2026_an_undeclared_capability_is_32021_with_http_400_and_nothing_runs(
    server: LiveServer, key: str
) -> None:
    before = runs_of(server)
    for caps in ({}, {"elicitation": {}, "roots": {"listChanged": True}}):
        status, got = modern_call(server, key, caps)
        assert status == 400, got
        assert got["error"]["code"] == -32021, got
        assert got["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}
        assert TOOL in got["error"]["message"] and "sampling" in got["error"]["message"]
    assert runs_of(server) == before


def test_at_2026_a_client_that_declares_sampling_gets_the_call_run(server: LiveServer, key: str) -> None:
    before = runs_of(server)
    status, got = modern_call(server, key, {"sampling": {}})
    assert status == 200, got
    assert got["result"]["isError"] is False, got
    assert "the client declared sampling" in json.dumps(got["result"]["content"])
    assert runs_of(server) == before + 1


def test_on_a_2025_session_an_undeclared_capability_is_an_is_error_result_and_nothing_runs(
    server: LiveServer, key: str
) -> None:
    before = runs_of(server)
    got = Session(server, key, {"elicitation": {}}).call()
    result = got["result"]
    assert result["isError"] is True, got
    error = result["structuredContent"]["error"]
    assert error["code"] == "capability_required" and "sampling" in error["message"]
    assert result["structuredContent"].get("runId") is None  # no run
    assert runs_of(server) == before


def test_on_a_2025_session_that_declared_sampling_the_call_runs(server: LiveServer, key: str) -> None:
    before = runs_of(server)
    got = Session(server, key, {"sampling": {}}).call()
    assert got["result"]["isError"] is False, got
    assert runs_of(server) == before + 1


def test_tools_that_require_nothing_are_untouched_in_both_eras(server: LiveServer, key: str) -> None:
    status, got = modern_call(server, key, {}, tool="test_simple_text")
    assert status == 200 and got["result"]["isError"] is False, got
    assert Session(server, key, {}).call("test_simple_text")["result"]["isError"] is False

"""The capabilities a workflow server declares are exactly the ones it serves, in both eras:
`initialize` (2025-11-25) and `server/discover` (2026-07-28) are read, every declared
capability's methods are called and answered (never -32601), the methods of capabilities not
declared (or sub-capabilities declared false) are -32601, and no capability is declared that
this test does not know how to call (a new one must be added here)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer
from tests.e2e.test_http_mcp import ACCEPT, TIMEOUT, open_session, sse_json
from tests.support.inprocess import in_process_server

MODERN = "2026-07-28"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
MISSING_URI = "test://nothing-here"
_ids = itertools.count(10)


def _result(key: str) -> Any:
    def check(reply: dict[str, Any]) -> None:
        assert "result" in reply, reply
        assert key in reply["result"], reply

    return check


def _error(code: int, **data: Any) -> Any:
    def check(reply: dict[str, Any]) -> None:
        assert reply.get("error", {}).get("code") == code, reply
        for name, value in data.items():
            assert reply["error"]["data"][name] == value, reply

    return check


def _empty(reply: dict[str, Any]) -> None:
    assert reply.get("result") == {}, reply  # logging/setLevel: exactly {} (the conformance check)


def calls(era: str) -> dict[str, list[tuple[str, dict[str, Any], Any]]]:
    served: dict[str, list[tuple[str, dict[str, Any], Any]]] = {
        "tools": [
            ("tools/list", {}, _result("tools")),
            ("tools/call", {"name": "greet", "arguments": {"name": "Cap"}}, _result("content")),
        ],
        "prompts": [
            ("prompts/list", {}, _result("prompts")),
            ("prompts/get", {"name": "no_such_prompt"}, _error(INVALID_PARAMS)),
        ],
        "resources": [
            ("resources/list", {}, _result("resources")),
            ("resources/templates/list", {}, _result("resourceTemplates")),
            ("resources/read", {"uri": MISSING_URI}, _error(INVALID_PARAMS, uri=MISSING_URI)),
        ],
        "completions": [
            (
                "completion/complete",
                {"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": "b"}},
                _result("completion"),
            ),
        ],
        # At 2026-07-28 logging is a request's `_meta` opt-in (tests/e2e/test_mcp_logging.py);
        # logging/setLevel is gone from that era.
        "logging": [("logging/setLevel", {"level": "info"}, _empty)] if era != MODERN else [],
    }
    return served


# Methods that must not be served when their capability (or sub-capability) is not declared.
def not_served(capabilities: dict[str, Any], era: str) -> list[str]:
    methods = []
    resources = capabilities.get("resources") or {}
    if not resources.get("subscribe"):
        methods += ["resources/subscribe", "resources/unsubscribe"]
    if era == MODERN:
        methods += ["logging/setLevel", "ping", "initialize"]
    for name, listed in (
        ("prompts", ["prompts/list", "prompts/get"]),
        ("completions", ["completion/complete"]),
    ):
        if name not in capabilities:
            methods += listed
    return methods


VALID_PARAMS: dict[str, dict[str, Any]] = {
    "resources/subscribe": {"uri": MISSING_URI},
    "resources/unsubscribe": {"uri": MISSING_URI},
    "logging/setLevel": {"level": "info"},
    "prompts/get": {"name": "p"},
    "completion/complete": {
        "ref": {"type": "ref/prompt", "name": "p"},
        "argument": {"name": "a", "value": "b"},
    },
    "initialize": {
        "protocolVersion": MODERN,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
KNOWN_EXTENSIONS = {"io.modelcontextprotocol/tasks": ("tasks/get", {"taskId": "no-such-task"})}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("mcp-capabilities")) as live:
        yield live


def reply_to(response: httpx2.Response, request_id: int) -> dict[str, Any]:
    """The response to `request_id` in a JSON or SSE answer (past any notifications)."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            if message.get("id") == request_id:
                return message
    raise AssertionError(f"no reply to {request_id} in {response.text!r}")


class Era:
    def __init__(self, live: LiveServer, key: str, era: str) -> None:
        self.live = live
        self.key = key
        self.era = era
        self.sid: str | None = None
        if era != MODERN:
            self.sid = open_session(live, key)

    def send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        h = {
            "Accept": ACCEPT,
            "Content-Type": "application/json",
            "Authorization": f"Bearer {self.key}",
            "MCP-Protocol-Version": self.era,
        }
        if self.era == MODERN:
            meta = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
            params = {**params, "_meta": meta}
            h["Mcp-Method"] = method
            if method in ("tools/call", "prompts/get"):
                h["Mcp-Name"] = params["name"]
            elif method == "resources/read":
                h["Mcp-Name"] = params["uri"]
        else:
            assert self.sid is not None
            h["Mcp-Session-Id"] = self.sid
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
        r = httpx2.post(self.live.mcp_url(HELLO), headers=h, json=body, timeout=TIMEOUT)
        return reply_to(r, body["id"])

    def capabilities(self) -> dict[str, Any]:
        if self.era == MODERN:
            return self.send("server/discover", {})["result"]["capabilities"]
        r = httpx2.post(
            self.live.mcp_url(HELLO),
            headers={
                "Accept": ACCEPT,
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self.key}",
            },
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": self.era,
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            timeout=TIMEOUT,
        )
        return sse_json(r)["result"]["capabilities"]


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
def test_every_declared_capability_is_served_and_nothing_else(server: LiveServer, era: str) -> None:
    key = server.create_key("cara")
    client = Era(server, key, era)
    capabilities = client.capabilities()
    table = calls(era)
    expected = {"tools", "prompts", "resources", "completions", "logging"}
    # A new capability needs its calls here; extensions are checked one by one below.
    assert set(capabilities) - {"extensions"} == expected, capabilities
    # Tasks are served at 2026-07-28 only, so only its server/discover tells of them.
    tasks = "io.modelcontextprotocol/tasks"
    assert (tasks in (capabilities.get("extensions") or {})) == (era == MODERN), capabilities
    for name, value in capabilities.items():
        if name == "extensions":
            for extension in value:
                assert extension in KNOWN_EXTENSIONS, f"declared extension {extension} is not exercised here"
                method, params = KNOWN_EXTENSIONS[extension]
                reply = client.send(method, params)
                assert reply.get("error", {}).get("code") != METHOD_NOT_FOUND, (extension, reply)
            continue
        for method, params, check in table[name]:
            reply = client.send(method, params)
            check(reply)
        for flag, on in (value or {}).items():
            assert flag in ("listChanged", "subscribe") and on is False, (name, flag, on)  # none is served
    for method in not_served(capabilities, era):
        reply = client.send(method, VALID_PARAMS.get(method, {}))
        assert reply.get("error", {}).get("code") == METHOD_NOT_FOUND, (method, reply)


def test_2026_lists_carry_the_draft_schema_fields(server: LiveServer) -> None:
    key = server.create_key("dora")
    client = Era(server, key, MODERN)
    for method in (
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "server/discover",
    ):
        result = client.send(method, {})["result"]
        assert result["resultType"] == "complete" and result["cacheScope"] in ("public", "private"), result
        assert isinstance(result["ttlMs"], int), result
    result = client.send(
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": "b"}},
    )["result"]
    assert result["resultType"] == "complete" and result["completion"]["values"] == []

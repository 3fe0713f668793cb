"""Schemas end to end, a real server and the Python SDK client: an entrypoint's own JSON
Schema 2020-12 listed verbatim and validated, `integer` params (1.5 refused), a param
mirrored as the `Mcp-Param-Region` header (SEP-2243, 2026-07-28: accepted when it matches,
400 / -32020 when it differs or is missing), and a question asked with a JSON Schema
elicited exactly as written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError

from tests.e2e.server import LiveServer
from tests.e2e.test_http_mcp import ACCEPT, TIMEOUT, sdk_client
from tests.support.inprocess import in_process_server
from tests.workflows.test_input_schema import SUITE_SCHEMA

pytestmark = [pytest.mark.anyio]

PROJECT = "0b7d5c1e-3f0a-4c55-9d0e-5b8f1a2c3d4e"
MODERN = "2026-07-28"
HEADER_MISMATCH = -32020
ASKED = {
    "type": "object",
    "properties": {
        "age": {"type": "integer", "default": 30, "minimum": 0},
        "status": {
            "type": "string",
            "oneOf": [{"const": "a", "title": "Active"}, {"const": "i", "title": "Idle"}],
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
    },
    "required": ["age"],
}
HANDLERS = f"""
ASKED = {json.dumps(ASKED)}


def contact(ctx):
    return {{"got": ctx.params}}


def count(ctx):
    return {{"n": ctx.params["n"], "type": type(ctx.params["n"]).__name__}}


def region(ctx):
    return {{"region": ctx.params["region"]}}


def survey(ctx):
    return {{"answer": ctx.ask("Survey", ASKED, message="A few questions")}}
"""


def write_project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "tools.py").write_text(HANDLERS, encoding="utf-8")
    package = {
        "id": PROJECT,
        "name": "schemas",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": "contact", "handler": "tools.py:contact", "inputSchema": SUITE_SCHEMA},
            {
                "id": "count",
                "handler": "tools.py:count",
                "params": [{"name": "n", "type": "integer", "required": True}],
            },
            {
                "id": "region",
                "handler": "tools.py:region",
                "params": [{"name": "region", "type": "string", "required": True, "header": "Region"}],
            },
            {"id": "survey", "handler": "tools.py:survey"},
        ],
    }
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("schemas")) as live:
        live.add_project(write_project(tmp_path_factory.mktemp("project") / "schemas"), PROJECT)
        yield live


def output(result: types.CallToolResult) -> Any:
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict)
    return result.structured_content["output"]


def argument_error(result: types.CallToolResult) -> str:
    """The message of a call whose arguments failed: a tool error result (SEP-1303), the
    same object in its text and structuredContent, and no run."""
    assert result.is_error is True, result
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    body = json.loads(result.content[0].text)
    assert body == result.structured_content and body["status"] == "failed" and "runId" not in body
    assert body["error"]["code"] == "invalid_params", body
    message: str = body["error"]["message"]
    return message


def _runs(live: LiveServer, entrypoint: str) -> int:
    return len(live.query("select id from runs where entrypoint_id = :ep", ep=entrypoint))


@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", MODERN)])
async def test_a_missing_or_mistyped_argument_is_a_tool_error_the_model_reads(
    server: LiveServer, mode: str, era: str
) -> None:
    """SEP-1303: the Python SDK client gets a result with isError (not an exception) naming
    the argument, what it takes and what it got; no run is created, one tool.failed audit
    event says why; an unknown tool stays -32602."""
    user = f"arg-{mode}"
    key = server.create_key(user)
    before = _runs(server, "count")
    async with sdk_client(server.mcp_url(PROJECT), key, mode) as client:
        assert client.protocol_version == era
        missing = argument_error(await client.call_tool("count", {}))
        mistyped = argument_error(await client.call_tool("count", {"n": "two"}))
        huge = argument_error(await client.call_tool("count", {"n": "x" * 200_000}))
        with pytest.raises(MCPError) as info:
            await client.call_tool("no_such_tool", {"n": 1})
        assert info.value.error.code == -32602 and "Unknown tool: no_such_tool" in info.value.error.message
        assert output(await client.call_tool("count", {"n": 3})) == {"n": 3, "type": "int"}
    assert missing == "Invalid arguments for tool 'count': 'n' is a required property (type: integer)"
    assert mistyped == "Invalid arguments for tool 'count': n: 'two' is not of type 'integer'"
    assert "n: 'xxx" in huge and "is not of type 'integer'" in huge and len(huge) < 400
    assert _runs(server, "count") == before + 1  # the good call's only
    failed = server.query(
        "select outcome, run_id, tool from audit_events where event = 'tool.failed' and actor = :a",
        a=f"user:{user}",
    )
    assert failed == [{"outcome": "invalid_params", "run_id": None, "tool": "count"}] * 3


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_2020_12_schema_is_listed_verbatim_and_validated(server: LiveServer, mode: str) -> None:
    key = server.create_key("ann")
    async with sdk_client(server.mcp_url(PROJECT), key, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["contact"].input_schema == SUITE_SCHEMA
        ok = {"name": "A", "contactMethod": "phone", "phone": "123", "address": {"city": "Oslo"}}
        assert output(await client.call_tool("contact", ok)) == {"got": ok}
        bad = await client.call_tool(
            "contact", {"contactMethod": "phone", "email": "e@x", "address": {"city": 1}}
        )
        message = argument_error(bad)
        assert "address.city: 1 is not of type 'string'" in message
        assert "'phone' is a required property" in message


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_integer_param_refuses_1_5_and_takes_2(server: LiveServer, mode: str) -> None:
    key = server.create_key("ann")
    async with sdk_client(server.mcp_url(PROJECT), key, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["count"].input_schema["properties"]["n"] == {"type": "integer"}
        assert "n: 1.5 is not of type 'integer'" in argument_error(
            await client.call_tool("count", {"n": 1.5})
        )
        assert "n: True is not of type 'integer'" in argument_error(
            await client.call_tool("count", {"n": True})
        )
        assert output(await client.call_tool("count", {"n": 2})) == {"n": 2, "type": "int"}
        assert output(await client.call_tool("count", {"n": 2.0})) == {"n": 2, "type": "int"}


async def test_the_sdk_client_mirrors_the_header_param_and_the_call_succeeds(server: LiveServer) -> None:
    key = server.create_key("ann")
    async with sdk_client(server.mcp_url(PROJECT), key, "auto") as client:
        assert client.protocol_version == MODERN
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["region"].input_schema["properties"]["region"]["x-mcp-header"] == "Region"
        assert output(await client.call_tool("region", {"region": "eu-west"})) == {"region": "eu-west"}
        assert output(await client.call_tool("region", {"region": "Zürich "})) == {"region": "Zürich "}
        # A mistyped header param is mirrored as the client renders it, so the SDK's header
        # check passes it on: the model reads a tool error, as for any other argument.
        assert "region: 5 is not of type 'string'" in argument_error(
            await client.call_tool("region", {"region": 5})
        )
        assert "'region' is a required property" in argument_error(await client.call_tool("region", {}))


def modern_call(server: LiveServer, key: str, arguments: dict[str, Any], **extra: str) -> httpx2.Response:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "region", "arguments": arguments, "_meta": meta},
    }
    headers = {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "region",
        **extra,
    }
    return httpx2.post(server.mcp_url(PROJECT), headers=headers, json=body, timeout=TIMEOUT)


def result_of(response: httpx2.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return json.loads([e for e in events if e][-1])


@pytest.mark.parametrize(
    ("value", "header"),
    [("eu", "eu"), ("Hello", "=?base64?SGVsbG8=?="), ("=?base64?SGVsbG8=", "=?base64?SGVsbG8=")],
)
def test_a_matching_header_is_accepted(server: LiveServer, value: str, header: str) -> None:
    r = modern_call(server, server.create_key("ann"), {"region": value}, **{"Mcp-Param-Region": header})
    assert r.status_code == 200, r.text
    reply = result_of(r)
    assert "error" not in reply and reply["result"]["structuredContent"]["output"] == {"region": value}


@pytest.mark.parametrize(
    "header",
    [
        {"Mcp-Param-Region": "us"},
        {"Mcp-Param-Region": "=?base64?SGVsbG8?="},
        {"Mcp-Param-Region": "=?base64?SGVs!!!bG8=?="},
        {},
    ],
)
def test_a_different_bad_or_missing_header_is_400_header_mismatch(
    server: LiveServer, header: dict[str, str]
) -> None:
    r = modern_call(server, server.create_key("ann"), {"region": "Hello"}, **header)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == HEADER_MISMATCH


async def test_a_question_with_a_schema_is_elicited_as_written_and_answered(server: LiveServer) -> None:
    seen: list[dict[str, Any]] = []

    async def answer(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        seen.append({"message": params.message, "schema": params.requested_schema})
        return types.ElicitResult(action="accept", content={"age": 41, "status": "i", "tags": ["y"]})

    key = server.create_key("ann")
    for mode in ("legacy", "auto"):
        async with sdk_client(server.mcp_url(PROJECT), key, mode, answer) as client:
            got = output(await client.call_tool("survey", {}))
        assert got == {"answer": {"age": 41, "status": "i", "tags": ["y"]}}
    assert [s["schema"] for s in seen] == [ASKED, ASKED]
    assert all("A few questions" in s["message"] for s in seen)

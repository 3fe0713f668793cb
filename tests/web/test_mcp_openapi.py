"""The API document per MCP operation: `/openapi.json` describes each MCP method the
server really serves (read from the server the app built) as its own operation, with its
JSON-RPC params and result schemas, its headers per protocol era and its statuses, and
no method the server does not serve."""

from __future__ import annotations

import re
from typing import Any

import mcp_types as types
import pytest
from mcp.server.lowlevel import Server

from tests.web.conftest import Web
from webui.mcp.openapi import MCP_PATH, METHODS_TAG, method_path, method_paths
from webui.mcp.operations import served_methods
from webui.mcp.server import build_server

pytestmark = pytest.mark.shares_app

# What the product documents name; the server may serve more, never less.
DOCUMENTED = {
    "initialize",
    "notifications/initialized",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
}
RUNNER_OWNED = {"initialize", "notifications/initialized"}  # answered by the SDK's runner


def _document(web: Web) -> dict[str, Any]:
    r = web.client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def _served(web: Web) -> Server[Any]:
    """The lowlevel server the app's lifespan built (build_server) and serves."""
    server = web.client.app.state.gateway.manager.app  # type: ignore[attr-defined]
    assert isinstance(server, Server)
    return server


def _methods(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        item["x-mcp-method"]: item["post"]
        for path, item in doc["paths"].items()
        if path.startswith(MCP_PATH + "#")
    }


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    assert ref.startswith("#/components/schemas/"), ref
    return doc["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def test_every_method_the_server_serves_is_an_operation_and_nothing_else(web: Web) -> None:
    doc = _document(web)
    server = _served(web)
    handlers = server._request_handlers  # pyright: ignore[reportPrivateUsage]
    notifications = server._notification_handlers  # pyright: ignore[reportPrivateUsage]
    served = set(handlers) | set(notifications) | RUNNER_OWNED
    ops = _methods(doc)
    assert set(ops) == served  # every served method, and no unserved one
    assert set(ops) >= DOCUMENTED
    ids = [op["operationId"] for op in ops.values()]
    assert len(set(ids)) == len(ids)
    assert ops["tools/call"]["operationId"] == "mcp.tools.call"
    for method, op in ops.items():
        assert op["x-mcp-method"] == method
        assert METHODS_TAG in op["tags"]
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert body["properties"]["method"] == {"const": method}
        params = body["properties"]["params"]
        assert _resolve(doc, params).get("type") == "object", method
        if method in handlers:  # the params model the server validates against
            model = handlers[method].params_type.__name__
            assert params["$ref"].endswith(f"/mcp.{model}") or params["$ref"].endswith(f"/mcp.{model}-Input")
        if method.startswith("notifications/"):
            assert "202" in op["responses"] and "200" not in op["responses"]
            continue
        ok = op["responses"]["200"]["content"]
        assert set(ok) == {"application/json", "text/event-stream"}
        result = ok["application/json"]["schema"]["properties"]["result"]
        arms = result.get("anyOf", [result])
        assert arms and all(
            _resolve(doc, arm).get("type") == "object" or "allOf" in _resolve(doc, arm) for arm in arms
        ), method


def test_params_and_results_are_the_sdk_types(web: Web) -> None:
    doc = _document(web)
    ops = _methods(doc)
    schemas = doc["components"]["schemas"]

    def body(method: str) -> dict[str, Any]:
        return ops[method]["requestBody"]["content"]["application/json"]["schema"]["properties"]

    def result(method: str) -> dict[str, Any]:
        return ops[method]["responses"]["200"]["content"]["application/json"]["schema"]["properties"][
            "result"
        ]

    call_params = _resolve(doc, body("tools/call")["params"])
    assert {"name", "arguments"} <= set(call_params["properties"]) and "name" in call_params["required"]
    call_arms = {arm["$ref"].rsplit("/", 1)[1] for arm in result("tools/call")["anyOf"]}
    assert {"mcp.CallToolResult", "mcp.InputRequiredResult", "mcp.CreateTaskResult"} <= call_arms
    assert "isError" in schemas["mcp.CallToolResult"]["properties"]
    assert "taskId" in _resolve(doc, body("tasks/get")["params"])["required"]
    assert "inputResponses" in _resolve(doc, body("tasks/update")["params"])["properties"]
    assert result("tasks/get")["$ref"].endswith("/mcp.GetTaskResult")
    assert result("tasks/cancel")["$ref"].endswith("/mcp.TaskAcknowledged")
    assert "tools" in _resolve(doc, result("tools/list"))["properties"]
    assert "protocolVersion" in _resolve(doc, body("initialize")["params"])["properties"]
    assert "id" not in body("notifications/initialized")
    assert "id" in body("ping")


def _headers(op: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in op["parameters"] if p["in"] == "header"}


def test_headers_per_protocol_era_and_statuses(web: Web) -> None:
    ops = _methods(_document(web))
    call = _headers(ops["tools/call"])
    assert {"Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"} <= set(call)
    assert "`name`" in call["Mcp-Name"]["description"]
    assert "`uri`" in _headers(ops["resources/read"])["Mcp-Name"]["description"]
    assert "`name`" in _headers(ops["prompts/get"])["Mcp-Name"]["description"]
    assert "Mcp-Name" not in _headers(ops["tools/list"])
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):  # 2026-07-28 only
        task = _headers(ops[method])
        assert "`taskId`" in task["Mcp-Name"]["description"]
        assert "Mcp-Session-Id" not in task and task["Mcp-Method"]["required"]
        assert ops[method]["x-mcp-eras"] == ["2026-07-28"]
    init = ops["initialize"]
    assert "Mcp-Session-Id" not in _headers(init) and "Mcp-Method" not in _headers(init)
    assert "Mcp-Session-Id" in init["responses"]["200"]["headers"]
    assert "Mcp-Session-Id" not in _headers(ops["server/discover"])
    for method, op in ops.items():
        assert op["security"] == [{"bearer": []}]
        assert {"400", "401", "403", "404", "413", "421", "429"} <= set(op["responses"]), method
        assert "-32020" in op["responses"]["400"]["description"]
        assert {p["name"] for p in op["parameters"] if p["in"] != "header"} >= {"project_id", "target"}


def test_the_document_stays_openapi_3_1(web: Web) -> None:
    """A structural check (openapi-spec-validator is not installed): the version, path
    keys, templated path params declared, operationIds unique, every $ref resolves."""
    doc = _document(web)
    assert doc["openapi"].startswith("3.1")
    ids: list[str] = []
    for path, item in doc["paths"].items():
        assert path.startswith("/"), path
        for verb, op in item.items():
            if verb.startswith("x-"):
                continue
            assert verb in {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert set(re.findall(r"{([^}]+)}", path)) == declared, (path, verb)
            if "operationId" in op:
                ids.append(op["operationId"])
    assert len(ids) == len(set(ids))
    names = set(doc["components"]["schemas"])
    assert all(re.fullmatch(r"[A-Za-z0-9.\-_]+", n) for n in names)
    for ref in _refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in names, ref
    real = doc["paths"][MCP_PATH]  # the one real endpoint stays documented
    assert set(real) >= {"post", "get", "delete"}


async def _nothing(ctx: Any, params: Any) -> types.EmptyResult:
    return types.EmptyResult()


def test_a_newly_served_method_is_in_the_document_at_once() -> None:
    server = build_server(bridge=None, state_key=b"k" * 32, state_ttl=60)  # type: ignore[arg-type]
    server.add_request_handler("example/thing", types.RequestParams, _nothing)
    paths, _ = method_paths(server)
    assert method_path("example/thing") in paths
    assert paths[method_path("example/thing")]["post"]["operationId"] == "mcp.example.thing"
    # a server without the tasks extension lists no task method
    assert not any(m.method.startswith("tasks/") for m in served_methods(server))

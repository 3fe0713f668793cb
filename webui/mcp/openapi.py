"""The MCP endpoint in the OpenAPI document. It is a raw ASGI route, so its
operations are described here by hand: methods, headers, and every status it answers.

The one real endpoint is `MCP_PATH` (POST, GET, DELETE). Each MCP method the server
serves (`webui.mcp.operations`, read from the server itself) is an operation of its own,
on the pseudo-path `MCP_PATH#<method>` (`x-mcp-method`): a fragment is never sent, so
the request goes to the one endpoint; each has its JSON-RPC params and result schemas
(from the SDK's types, under `components.schemas` as `mcp.<Model>`), its headers per
protocol era and the statuses the gateway and the SDK answer it with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from mcp.server.lowlevel import Server
from pydantic import TypeAdapter

from webui.mcp.operations import (
    HAND_REFERENCED,
    HAND_RESULTS,
    HANDSHAKE,
    MODERN,
    TASK_SCHEMAS,
    McpMethod,
    served_methods,
)
from webui.mcp.tasks import TASKS_EXTENSION

MCP_PATH = "/api/workflows/{project_id}/mcp"
METHODS_TAG = "mcp methods"
SCHEMA_PREFIX = "mcp."

JSONRPC_ERROR = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {
                "jsonrpc": {"const": "2.0"},
                "id": {"type": ["string", "integer", "null"]},
                "error": {
                    "type": "object",
                    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
                },
            },
        }
    }
}


def _param(
    name: str, where: str, description: str, *, required: bool = False, **schema: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required,
        "description": description,
        "schema": {"type": "string", **schema},
    }


PARAMS = [
    _param("project_id", "path", "The project's package.json id.", required=True),
    _param(
        "target",
        "query",
        "draft, latest (resolved once per session), or an exact version X.Y.Z.",
        default="latest",
    ),
    _param(
        "config",
        "query",
        "A configuration name of the calling account (bound into the session like the target); "
        "without it each call uses the account's active configuration.",
    ),
    _param(
        "Authorization",
        "header",
        "Bearer <API key> (account key with runs.create, or the admin key).",
        required=True,
    ),
    _param("Mcp-Session-Id", "header", "The session id from initialize; required after it (2025-11-25)."),
    _param("MCP-Protocol-Version", "header", "2025-11-25 (sessions) or 2026-07-28 (stateless)."),
]

COMMON = {
    "400": {
        "description": "Bad target or configuration name, missing session id, or a malformed request.",
        "content": JSONRPC_ERROR,
    },
    "401": {
        "description": "No usable Bearer credential (cookies, embed tokens, query keys refused).",
        "content": JSONRPC_ERROR,
    },
    "403": {
        "description": "No run permission or runs.create scope; or a session of another credential, "
        "project, target or configuration; or a disallowed Origin.",
        "content": JSONRPC_ERROR,
    },
    "404": {
        "description": "Unknown project or target version; unknown or expired session.",
        "content": JSONRPC_ERROR,
    },
    "421": {"description": "Host header not allowed (DNS rebinding protection)."},
}


def _op(
    summary: str, description: str, ok: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "tags": ["mcp"],
        "summary": summary,
        "description": description,
        "parameters": PARAMS,
        "responses": {**ok, **COMMON, **(extra or {})},
        "security": [{"bearer": []}],
    }


def mcp_path_item() -> dict[str, Any]:
    return {
        "post": {
            **_op(
                "Send a JSON-RPC message (MCP Streamable HTTP)",
                "initialize, tools/list, tools/call, ping... Responses stream as SSE; elicitation requests "
                "ride the tools/call stream. A tool error is a result with isError, not an HTTP error. "
                f"Each JSON-RPC method is described as its own operation (tag `{METHODS_TAG}`, "
                f"path `{MCP_PATH}#<method>`): it is this POST.",
                {
                    "200": {
                        "description": "JSON-RPC response (SSE or JSON); initialize sets Mcp-Session-Id.",
                        "headers": {"Mcp-Session-Id": {"schema": {"type": "string"}}},
                        "content": {"text/event-stream": {}, "application/json": {}},
                    },
                    "202": {"description": "Notification or response accepted."},
                },
                {
                    "406": {"description": "Accept must allow application/json and text/event-stream."},
                    "413": {
                        "description": "Body larger than STEAMHARNESS_MAX_MCP_BODY_BYTES (1 MiB by default)."
                    },
                },
            ),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
        },
        "get": _op(
            "Open the session's server-to-client SSE stream",
            "One standalone stream per session (a second one gets 409).",
            {"200": {"description": "SSE stream.", "content": {"text/event-stream": {}}}},
            {"409": {"description": "A stream is already open for this session."}},
        ),
        "delete": _op(
            "End the session",
            "Cancels the session's active calls and their runs.",
            {"200": {"description": "Session ended."}},
        ),
    }


def method_path(method: str) -> str:
    """The pseudo-path of one MCP method's operation: the endpoint and the method as its
    fragment (never sent: a client posts to the endpoint)."""
    return f"{MCP_PATH}#{method}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def method_schemas(methods: list[McpMethod]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each method's params and result schemas (`{method: {"params", "result"}}`, `$ref`s or
    unions of them) and the component schemas they refer to, named `mcp.<Model>`."""
    adapters: list[tuple[tuple[str, str], Any, TypeAdapter[Any]]] = []
    for m in methods:
        adapters.append(((m.method, "params"), "validation", TypeAdapter(m.params)))
        if m.result is not None and m.method not in HAND_RESULTS:
            # A union of models is a valid type form; typed as Any, whatever the checker's
            # reading of `UnionType` against pydantic's `TypeForm` (it differs by version).
            result: Any = m.result
            adapters.append(((m.method, "result"), "serialization", TypeAdapter(result)))
    for model in HAND_REFERENCED:
        adapters.append(((model.__name__, "hand"), "serialization", TypeAdapter(model)))
    keyed, defs = TypeAdapter.json_schemas(
        adapters, ref_template=f"#/components/schemas/{SCHEMA_PREFIX}{{model}}"
    )
    components = {f"{SCHEMA_PREFIX}{name}": schema for name, schema in defs.get("$defs", {}).items()}
    components.update(TASK_SCHEMAS)
    out: dict[str, dict[str, Any]] = {}
    for m in methods:
        schemas = {"params": keyed[((m.method, "params"), "validation")]}
        if m.method in HAND_RESULTS:
            schemas["result"] = _ref(HAND_RESULTS[m.method])
        elif m.result is not None:
            schemas["result"] = keyed[((m.method, "result"), "serialization")]
        out[m.method] = schemas
    if "tools/call" in out and "tasks/get" in out:  # a call may become a task
        result = out["tools/call"]["result"]
        arms = result.get("anyOf", [result])
        out["tools/call"]["result"] = {"anyOf": [*arms, _ref("mcp.CreateTaskResult")]}
    return out, components


def _header(name: str, description: str, *, required: bool = False) -> dict[str, Any]:
    return _param(name, "header", description, required=required)


def method_parameters(m: McpMethod) -> list[dict[str, Any]]:
    """The path, query and headers of one method, per protocol era."""
    both = HANDSHAKE in m.eras and MODERN in m.eras
    params = [p for p in PARAMS if p["in"] != "header"]
    if HANDSHAKE in m.eras and m.method != "initialize":
        params.append(
            _header(
                "Mcp-Session-Id",
                f"{HANDSHAKE}: the session id the initialize response gave; required"
                + (f" (not sent at {MODERN})." if both else "."),
                required=not both,
            )
        )
    versions = " or ".join(
        {HANDSHAKE: f"{HANDSHAKE} (after initialize)", MODERN: f"{MODERN} (required)"}[e]
        for e in m.eras
        if not (e == HANDSHAKE and m.method == "initialize")
    )
    if versions:
        params.append(
            _header(
                "MCP-Protocol-Version",
                f"{versions}. At {MODERN} it must equal params._meta's protocol version (else 400, -32020).",
                required=m.eras == (MODERN,),
            )
        )
    if MODERN in m.eras:
        params.append(
            _header(
                "Mcp-Method",
                f"{MODERN}: `{m.method}`, the body's method (else 400, -32020).",
                required=not both,
            )
        )
        if m.named_by is not None:
            params.append(
                _header(
                    "Mcp-Name",
                    f"{MODERN}: the params' `{m.named_by}` (else 400, -32020); a value that is not "
                    "plain visible ASCII as `=?base64?<base64>?=`.",
                )
            )
    return params


def _jsonrpc_request(m: McpMethod, params: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {"jsonrpc": {"const": "2.0"}, "method": {"const": m.method}}
    required = ["jsonrpc", "method"]
    if not m.notification:
        properties["id"] = {"type": ["string", "integer"]}
        required.append("id")
    properties["params"] = params
    return {"type": "object", "required": required, "properties": properties}


def _jsonrpc_result(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["jsonrpc", "id"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer"]},
            "result": result,
            "error": JSONRPC_ERROR["application/json"]["schema"]["properties"]["error"],
        },
    }


def _era_notes(m: McpMethod) -> str:
    notes = {
        "initialize": f"Opens a {HANDSHAKE} session: the response's Mcp-Session-Id header names it, "
        "and every later request of the session carries it. A key holding its cap of open "
        f"sessions gets 429. There is no handshake at {MODERN}: a request of that era (its "
        "envelope in params._meta) is answered 404, -32601.",
        "notifications/initialized": f"{HANDSHAKE}: sent once after initialize; answered 202.",
        "notifications/cancelled": f"{HANDSHAKE}: cancels the session's request `requestId` if it "
        "is still running: a tools/call ends with the error -32800 on its stream and its run is "
        f"cancelled (at {MODERN}, closing the request's stream does that).",
        "server/discover": f"{MODERN}: the server's identity, versions and capabilities "
        "(the tasks extension under capabilities.extensions).",
        "logging/setLevel": f"At {MODERN} a request opts in to log messages by its _meta instead.",
        "tools/call": "A tool error is a result with isError, not an HTTP error; so are arguments that "
        "fail the tool's input schema or a file param's checks (SEP-1303: error.code invalid_params, "
        "the message naming each argument, what it takes and what it got; no run), while an unknown "
        "tool is -32602. A question of the run "
        f"is an elicitation on the call's SSE stream ({HANDSHAKE}), an InputRequiredResult "
        f"({MODERN}) or an interaction_required result. At {MODERN} an argument a tool declares "
        "with x-mcp-header also travels as its Mcp-Param-<Name> header (checked, 400). A client "
        f"declaring {TASKS_EXTENSION} may get a task (CreateTaskResult).",
    }
    if m.method.startswith("tasks/"):
        return (
            f"The tasks extension ({TASKS_EXTENSION}), declared per request at {MODERN}: a "
            "client that does not declare it gets 400, -32021; an unknown task or another "
            f"caller's is 400, -32602. A {HANDSHAKE} session cannot declare it, so there the "
            "method is always answered -32021."
        )
    return notes.get(m.method, "")


def _other_eras(m: McpMethod) -> str:
    """What the eras that do not take the method answer it."""
    missing = [e for e in (HANDSHAKE, MODERN) if e not in m.eras]
    if not missing:
        return ""
    if m.notification:
        return f"At {MODERN} every notification is acknowledged (202) and dropped."
    if m.method == "initialize":
        return ""  # its note says it
    status = "404, -32601" if missing[0] == MODERN else "-32601"
    return f"Not served at {missing[0]} ({status})."


def _responses(m: McpMethod, schemas: dict[str, Any]) -> dict[str, Any]:
    if m.notification:
        ok: dict[str, Any] = {"202": {"description": "Notification accepted (no body)."}}
    else:
        result = schemas.get("result", {"type": "object"})
        ok = {
            "200": {
                "description": "The JSON-RPC response: one JSON document, or an SSE stream "
                "(`text/event-stream`) whose last `message` event is the response (elicitations "
                "and progress notifications may come before it)."
                + (" The Mcp-Session-Id header names the new session." if m.method == "initialize" else ""),
                "headers": (
                    {"Mcp-Session-Id": {"schema": {"type": "string"}}} if m.method == "initialize" else {}
                ),
                "content": {
                    "application/json": {"schema": _jsonrpc_result(result)},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            }
        }
    errors: dict[str, Any] = {
        "400": {
            "description": "A bad target or configuration name, a missing session id, a malformed "
            "JSON-RPC envelope; at 2026-07-28 a JSON-RPC error: -32602 invalid params, -32020 a "
            "routing header that does not match the body (MCP-Protocol-Version, Mcp-Method, "
            "Mcp-Name), -32021 a required client capability, -32022 an unsupported version.",
            "content": JSONRPC_ERROR,
        },
        **{k: v for k, v in COMMON.items() if k != "400"},
        "406": {"description": "Accept must allow application/json and text/event-stream."},
        "409": {"description": "The draft no longer loads."},
        "413": {"description": "Body larger than STEAMHARNESS_MAX_MCP_BODY_BYTES (1 MiB by default)."},
        "429": {
            "description": "Too many failed credentials from this address (Retry-After)"
            + ("; or the key holds its cap of open sessions." if m.method == "initialize" else "."),
            "content": JSONRPC_ERROR,
        },
        "503": {
            "description": "The server is shutting down, or its store is busy (Retry-After).",
            "content": JSONRPC_ERROR,
        },
    }
    if not m.notification:
        errors["404"] = {
            "description": COMMON["404"]["description"] + f" At {MODERN}: an unknown method (-32601).",
            "content": JSONRPC_ERROR,
        }
    return {**ok, **errors}


def method_operation(m: McpMethod, schemas: dict[str, Any]) -> dict[str, Any]:
    kind = "notification" if m.notification else "request"
    eras = ", ".join(m.eras)
    description = " ".join(
        part
        for part in (
            f"The JSON-RPC {kind} `{m.method}`, POSTed to `{MCP_PATH}` (the fragment `#{m.method}` "
            f"only names this page). Protocol eras: {eras}.",
            _era_notes(m),
            _other_eras(m),
        )
        if part
    )
    return {
        "tags": [METHODS_TAG],
        "operationId": m.operation_id,
        "summary": m.method,
        "description": description,
        "x-mcp-method": m.method,
        "x-mcp-eras": list(m.eras),
        "parameters": method_parameters(m),
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _jsonrpc_request(m, schemas["params"])}},
        },
        "responses": _responses(m, schemas),
        "security": [{"bearer": []}],
    }


def method_paths(server: Server[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pseudo-path of every method the server serves, and the schemas they refer to."""
    methods = served_methods(server)
    schemas, components = method_schemas(methods)
    paths = {
        method_path(m.method): {"post": method_operation(m, schemas[m.method]), "x-mcp-method": m.method}
        for m in methods
    }
    return paths, components


def add_mcp_operations(app: FastAPI, served: Callable[[], Server[Any] | None]) -> None:
    """`/openapi.json` with the MCP endpoint and, once the lifespan has built the server
    (`served()`, None before), one operation per method it serves (before that, the
    endpoint alone, not kept)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            app.openapi_schema = None  # FastAPI's own cache: this function decides what is kept
            schema["paths"][MCP_PATH] = mcp_path_item()
            components = schema.setdefault("components", {})
            components.setdefault("securitySchemes", {})["bearer"] = {"type": "http", "scheme": "bearer"}
            server = served()
            if server is None:
                return schema
            paths, mcp_components = method_paths(server)
            schema["paths"].update(paths)
            components.setdefault("schemas", {}).update(mcp_components)
            schema.setdefault("tags", []).append(
                {
                    "name": METHODS_TAG,
                    "description": f"One operation per MCP method the server serves, each a POST to "
                    f"{MCP_PATH} (its path's fragment names the method): JSON-RPC params and result, "
                    f"headers per protocol era ({HANDSHAKE}, {MODERN}), statuses.",
                }
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

"""The MCP endpoint in the OpenAPI document. It is a raw ASGI route, so its
operations are described here by hand: methods, headers, and every status it answers."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

MCP_PATH = "/api/workflows/{project_id}/mcp"

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
                "ride the tools/call stream. A tool error is a result with isError, not an HTTP error.",
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
                    "413": {"description": "Body larger than 4 MiB."},
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


def add_mcp_operations(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema["paths"][MCP_PATH] = mcp_path_item()
            components = schema.setdefault("components", {})
            components.setdefault("securitySchemes", {})["bearer"] = {"type": "http", "scheme": "bearer"}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

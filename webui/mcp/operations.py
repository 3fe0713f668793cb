"""The MCP methods a server serves, as the API document describes them: one per method,
read from the server itself (its registered request and notification handlers, plus the
handshake the SDK's runner owns), with the params model the server validates against, the
result the SDK's types give for the method (the tasks extension's results from
`webui.mcp.tasks`), the eras that carry it and the header that names its object."""

from __future__ import annotations

from dataclasses import dataclass
from types import UnionType
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.inbound import NAME_BEARING_METHODS
from mcp_types.methods import CLIENT_NOTIFICATIONS, CLIENT_REQUESTS, MONOLITH_RESULTS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from webui.mcp.tasks import TASK_METHODS

HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
# What the SDK's runner answers itself, never through a registered handler.
RUNNER_REQUESTS: dict[str, type[BaseModel]] = {"initialize": types.InitializeRequestParams}
RUNNER_NOTIFICATIONS: dict[str, type[BaseModel]] = {
    "notifications/initialized": types.NotificationParams,
}
# The params field a 2026-07-28 request mirrors in its `Mcp-Name` header: the SDK's
# (tools/call, prompts/get, resources/read), and the task methods' taskId (webui.mcp.tasks).
NAMED_BY: dict[str, str] = {**NAME_BEARING_METHODS, **{m: "taskId" for m in TASK_METHODS}}
# Methods of an extension (not in the SDK's per-version maps) and the eras that carry them.
EXTENSION_ERAS: dict[str, tuple[str, ...]] = {m: (MODERN,) for m in TASK_METHODS}


@dataclass(frozen=True)
class McpMethod:
    method: str
    notification: bool
    params: type[BaseModel]
    result: type[BaseModel] | UnionType | None  # None: a notification, or described by hand
    eras: tuple[str, ...]

    @property
    def operation_id(self) -> str:
        return "mcp." + self.method.replace("/", ".")

    @property
    def named_by(self) -> str | None:
        return NAMED_BY.get(self.method)


def _eras(method: str, surface: Any) -> tuple[str, ...]:
    if method in EXTENSION_ERAS:
        return EXTENSION_ERAS[method]
    versions = {v for m, v in surface if m == method}
    if not versions:
        return (HANDSHAKE, MODERN)  # an unknown method: the server routes it in both eras
    eras: list[str] = []
    if versions & set(HANDSHAKE_PROTOCOL_VERSIONS):
        eras.append(HANDSHAKE)
    if versions & set(MODERN_PROTOCOL_VERSIONS):
        eras.append(MODERN)
    return tuple(eras)


def served_requests(server: Server[Any]) -> dict[str, type[BaseModel]]:
    """Every request method the server dispatches and its params model. The SDK has no
    public listing of its handlers (only a lookup by name), so this is the one read of
    its private table."""
    handlers = server._request_handlers  # pyright: ignore[reportPrivateUsage]
    return {**RUNNER_REQUESTS, **{m: entry.params_type for m, entry in handlers.items()}}


def served_notifications(server: Server[Any]) -> dict[str, type[BaseModel]]:
    handlers = server._notification_handlers  # pyright: ignore[reportPrivateUsage]
    return {**RUNNER_NOTIFICATIONS, **{m: entry.params_type for m, entry in handlers.items()}}


def served_methods(server: Server[Any]) -> list[McpMethod]:
    """The methods the server serves, requests then notifications, each sorted by name."""
    methods = [
        McpMethod(m, False, params, MONOLITH_RESULTS.get(m), _eras(m, CLIENT_REQUESTS))
        for m, params in sorted(served_requests(server).items())
    ]
    methods += [
        McpMethod(m, True, params, None, _eras(m, CLIENT_NOTIFICATIONS))
        for m, params in sorted(served_notifications(server).items())
    ]
    return methods


# The tasks extension's results, as webui.mcp.tasks writes them (`_TaskState.task`).
_TASK_STATUS = ["working", "input_required", "completed", "failed", "cancelled"]
TASK_SCHEMAS: dict[str, dict[str, Any]] = {
    "mcp.Task": {
        "type": "object",
        "description": "A task: a persisted run, read back (webui/mcp/tasks.py).",
        "required": ["taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs"],
        "properties": {
            "taskId": {"type": "string", "maxLength": 128, "description": "<runId>.<mac>"},
            "status": {"enum": _TASK_STATUS},
            "statusMessage": {"type": "string"},
            "createdAt": {"type": "string", "format": "date-time"},
            "lastUpdatedAt": {"type": "string", "format": "date-time"},
            "ttlMs": {"type": "null", "description": "A task lives as long as its run is kept."},
            "pollIntervalMs": {"type": "integer", "description": "While the task is not final."},
        },
    },
    "mcp.CreateTaskResult": {
        "description": "tools/call answered with a task instead of its result (a client that "
        "declares the tasks extension; the entrypoint's `task`).",
        "allOf": [
            {"$ref": "#/components/schemas/mcp.Task"},
            {"type": "object", "required": ["resultType"], "properties": {"resultType": {"const": "task"}}},
        ],
    },
    "mcp.GetTaskResult": {
        "description": "The task in detail: its pending questions (input_required), its exact "
        "result (completed) or its error (failed).",
        "allOf": [
            {"$ref": "#/components/schemas/mcp.Task"},
            {
                "type": "object",
                "required": ["resultType"],
                "properties": {
                    "resultType": {"const": "complete"},
                    "inputRequests": {
                        "type": "object",
                        "additionalProperties": {"$ref": "#/components/schemas/mcp.ElicitRequest"},
                    },
                    "result": {"$ref": "#/components/schemas/mcp.CallToolResult"},
                    "error": {
                        "type": "object",
                        "properties": {
                            "code": {"type": "integer"},
                            "message": {"type": "string"},
                            "data": {"type": "object"},
                        },
                    },
                },
            },
        ],
    },
    "mcp.TaskAcknowledged": {
        "type": "object",
        "description": "tasks/update or tasks/cancel done.",
        "required": ["resultType"],
        "properties": {"resultType": {"const": "complete"}},
    },
}
# Method → its result component, where the SDK's maps have none (the task methods).
HAND_RESULTS: dict[str, str] = {
    "tasks/get": "mcp.GetTaskResult",
    "tasks/update": "mcp.TaskAcknowledged",
    "tasks/cancel": "mcp.TaskAcknowledged",
}
# Models the hand-written schemas refer to, added to the components with the others.
HAND_REFERENCED: list[type[BaseModel]] = [types.ElicitRequest, types.CallToolResult]

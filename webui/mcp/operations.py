"""The MCP methods a server serves over Streamable HTTP, as the API document describes them:
one per method, read from the server itself (its registered request and notification
handlers) plus what the SDK answers outside those tables (the handshake its runner owns, the
cancellation its dispatcher applies), with the params model the server validates against, the
result the SDK's types give for the method (the tasks extension's results from
`webui.mcp.tasks`), the eras that carry it and the header that names its object.

The eras are the SDK's routing, not a wish: the runner refuses a spec method at a version
that does not define it (-32601) and routes any other method to its handler in both eras;
the 2026-07-28 transport acknowledges every notification (202) and drops it.
`tests/web/test_mcp_openapi.py` checks all of it against a live server."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from types import UnionType
from typing import Any, get_args

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.inbound import NAME_BEARING_METHODS
from mcp_types.methods import (
    CLIENT_NOTIFICATIONS,
    CLIENT_REQUESTS,
    MONOLITH_RESULTS,
    SPEC_CLIENT_METHODS,
    SPEC_CLIENT_NOTIFICATION_METHODS,
)
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
# What the SDK's dispatcher applies itself, before any handler: a cancellation ends the
# request it names (the bridge then cancels that call's run). It reads `notifications/progress`
# too, but only for a request of the server's own that asked for progress, and this server
# asks none (its elicitation, sampling and roots requests carry no progress callback).
DISPATCHER_NOTIFICATIONS: dict[str, type[BaseModel]] = {
    "notifications/cancelled": types.CancelledNotificationParams,
}
# The params field a 2026-07-28 request mirrors in its `Mcp-Name` header: the SDK's
# (tools/call, prompts/get, resources/read), and the task methods' taskId (webui.mcp.tasks).
NAMED_BY: dict[str, str] = {**NAME_BEARING_METHODS, **{m: "taskId" for m in TASK_METHODS}}


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


def _eras(method: str, surface: Any, spec: Collection[str]) -> tuple[str, ...]:
    """The eras whose versions the SDK's runner serves `method` at: a spec method only where
    its version defines it (elsewhere -32601), any other (the tasks extension's, a custom
    one) at every version."""
    if method not in spec:
        return (HANDSHAKE, MODERN)
    versions = {v for m, v in surface if m == method}
    eras: list[str] = []
    if versions & set(HANDSHAKE_PROTOCOL_VERSIONS):
        eras.append(HANDSHAKE)
    if versions & set(MODERN_PROTOCOL_VERSIONS):
        eras.append(MODERN)
    return tuple(eras)


def _notification_eras(method: str) -> tuple[str, ...]:
    """A notification is taken at 2025-11-25 only: the 2026-07-28 transport answers every
    notification POST 202 and drops it (a client cancels by closing the request's stream)."""
    eras = _eras(method, CLIENT_NOTIFICATIONS, SPEC_CLIENT_NOTIFICATION_METHODS)
    return tuple(e for e in eras if e != MODERN)


def served_requests(server: Server[Any]) -> dict[str, type[BaseModel]]:
    """Every request method the server dispatches and its params model. The SDK has no
    public listing of its handlers (only a lookup by name), so this is the one read of
    its private table."""
    handlers = server._request_handlers  # pyright: ignore[reportPrivateUsage]
    return {**RUNNER_REQUESTS, **{m: entry.params_type for m, entry in handlers.items()}}


def served_notifications(server: Server[Any]) -> dict[str, type[BaseModel]]:
    """Every notification the server acts on and its params model: the runner's, the
    dispatcher's and the registered handlers'."""
    handlers = server._notification_handlers  # pyright: ignore[reportPrivateUsage]
    return {
        **RUNNER_NOTIFICATIONS,
        **DISPATCHER_NOTIFICATIONS,
        **{m: entry.params_type for m, entry in handlers.items()},
    }


def served_methods(server: Server[Any]) -> list[McpMethod]:
    """The methods the server serves over HTTP, requests then notifications, each sorted by
    name (one no era takes is left out)."""
    methods = [
        McpMethod(m, False, params, MONOLITH_RESULTS.get(m), _eras(m, CLIENT_REQUESTS, SPEC_CLIENT_METHODS))
        for m, params in sorted(served_requests(server).items())
    ]
    methods += [
        McpMethod(m, True, params, None, _notification_eras(m))
        for m, params in sorted(served_notifications(server).items())
    ]
    return [m for m in methods if m.eras]


# What a task's `inputRequests` (like an InputRequiredResult's) may carry: the SDK's
# `InputRequest` union (webui.mcp.questions `input_request` gives one of them).
INPUT_REQUEST_MODELS: tuple[type[BaseModel], ...] = get_args(types.InputRequest)
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
                        "description": "The task's pending questions by key: each the request "
                        "(elicitation, sampling or roots) the client answers in tasks/update.",
                        "additionalProperties": {
                            "anyOf": [
                                {"$ref": f"#/components/schemas/mcp.{m.__name__}"}
                                for m in INPUT_REQUEST_MODELS
                            ]
                        },
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
HAND_REFERENCED: list[type[BaseModel]] = [*INPUT_REQUEST_MODELS, types.CallToolResult]

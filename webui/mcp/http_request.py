"""What the MCP endpoint's gateway (`webui.mcp.http`) reads of an HTTP request before the SDK
takes it over: whether its body is JSON, the body read whole (and replayed to the SDK), the
JSON-RPC request's id, the client an `initialize` names, and the W3C trace context of its
headers. Pure ASGI: no decision about who may call is made here.
"""

from __future__ import annotations

from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import Message, Receive, Scope

CLIENT_FIELD_MAX = 200


TRACE_CONTEXT = TraceContextTextMapPropagator()


def client_info(message: dict[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    """(client name, client version, protocol version) from an `initialize` request (the
    POST's message, parsed and checked by `McpGateway._forward`); Nones for what it does not
    say (or a message that is not one)."""
    if message is None or message.get("method") != "initialize":
        return None, None, None
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    info = params.get("clientInfo")
    info = info if isinstance(info, dict) else {}

    def text(value: Any) -> str | None:
        return value[:CLIENT_FIELD_MAX] if isinstance(value, str) and value else None

    return text(info.get("name")), text(info.get("version")), text(params.get("protocolVersion"))


def attach_trace_headers(scope: Scope) -> Token[otel_context.Context] | None:
    """The trace context of the request's `traceparent` / `tracestate` headers made current
    (a token to detach), or None when there is none (or tracing is off: nothing to continue)."""
    carrier = {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
        if name.lower() in (b"traceparent", b"tracestate")
    }
    if "traceparent" not in carrier:
        return None
    extracted = TRACE_CONTEXT.extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return otel_context.attach(extracted)


def is_json(scope: Scope) -> bool:
    """A JSON body, by its Content-Type (anything else, the SDK refuses with 415)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


async def whole_body(receive: Receive) -> tuple[bytes | None, Receive]:
    """The request's body (bounded by the guard's cap), and a `receive` that hands it to
    the SDK again before passing on what follows (the disconnect). None: the client left."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None, receive
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def request_id(message: dict[str, Any]) -> str | None:
    """The id of the JSON-RPC request a POST carries (the SDK's stream id for it), as the
    SDK spells it; None for a notification, a response or anything else."""
    if "method" not in message:
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    return str(request_id)

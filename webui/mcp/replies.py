"""How the MCP HTTP endpoint states an HTTP error: the JSON-RPC error document of the one
error renderer (`webui.edge.errors`), so SDK clients surface the status and message. Our own
refusals are written with it (`reply`), the SDK's plain-text ones are rewritten into it
(`jsonrpc_errors`); the HTTP edge's refusals before the endpoint and the app's exception
handlers say the same document for the endpoint's path."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from starlette.types import Message, Send

from webui.edge.errors import http_error_document, send_json
from webui.errors import StoreUnavailable
from webui.observability.metrics import METRICS

ERROR_TEXT_MAX = 200  # of the SDK's plain-text error kept in the JSON-RPC error document


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "request refused"


def jsonrpc_errors(send: Send) -> Send:
    """`send` for the SDK's answers: an HTTP error it states as plain text or with no body
    (a wrong Content-Type, an Accept it cannot serve, a method it does not take) reaches
    the client as the JSON-RPC error document every other error of the endpoint is."""
    held: Message | None = None
    text = bytearray()

    async def sending(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start" and int(message["status"]) >= 400:
            content_type = next(
                (v for k, v in message.get("headers", []) if k.lower() == b"content-type"), b""
            )
            if not content_type.lower().startswith(b"application/json"):
                held = message
                return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        if len(text) < ERROR_TEXT_MAX:
            text.extend(message.get("body", b"")[: ERROR_TEXT_MAX - len(text)])
        if message.get("more_body", False):
            return
        status = int(held["status"])
        said = text.decode("utf-8", "replace").strip()
        keep = [
            (k, v)
            for k, v in held.get("headers", [])
            if k.lower() not in (b"content-type", b"content-length")
        ]
        await send_json(send, status, http_error_document(status, said or _phrase(status)), keep)

    return sending


async def reply(
    send: Send,
    status: int,
    message: str,
    *,
    extra: dict[str, str] | None = None,
    document: dict[str, Any] | None = None,
) -> None:
    headers = [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send_json(send, status, document or http_error_document(status, message), headers)


def retry_after(exc: StoreUnavailable) -> dict[str, str]:
    """The headers of a 503 (database busy or full) MCP answer, counted."""
    METRICS.db_busy.labels("request").inc()
    return {"retry-after": str(exc.retry_after)} if exc.retry_after else {}

"""The one renderer of an HTTP error: which document a refusal is said in, with which status
and headers, for every surface of the server.

Three surfaces, by path: the MCP endpoint answers a JSON-RPC error document (so SDK clients
surface the status and message), the rest of `/api` answers `{"error": {"code", "message",
…details}}`, pages get the HTML error page (drawn by the page renderer the app hands in).
Its users: the app's exception handlers (`ErrorRenderer.response`, `ErrorRenderer.error`),
the guard's refusals before any route (`ErrorRenderer.refuse`) and the MCP endpoint's own
replies (`http_error_document`, `send_json`, through `webui.mcp.replies`).

A refusal made before the request's body was read (the guard's, an authentication
dependency's `Refusal`) closes the connection when the request has a body: the body stays
unread rather than drained to reuse the connection.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Scope, Send

from webui.auth.challenge import bearer_challenge
from webui.auth.keys import AuthError
from webui.errors import SteamharnessError

Surface = Literal["mcp", "api", "page"]
MCP_PATH = re.compile(r"/api/workflows/[^/]+/mcp")
JSONRPC_AUTH_ERROR = -32001
# A page's title per status (the error page's heading).
TITLES = {
    400: "Bad request",
    401: "Not logged in",
    403: "Not allowed",
    404: "Not found",
    408: "Too slow",
    409: "Conflict",
    410: "Gone",
    413: "Too large",
    421: "Wrong address",
    422: "Invalid input",
    429: "Too many attempts",
    503: "Busy",
    507: "Storage full",
}
DEFAULT_TITLE = "Something went wrong"

# The HTML error page: (request, template context, status) -> response (`webui.web.templating`).
PageRenderer = Callable[[Request, dict[str, Any], int], Response]
# The server's origin for a request (the public URL, else the request's scheme and Host).
Origin = Callable[[Scope], str]


def surface_of(path: str) -> Surface:
    if MCP_PATH.fullmatch(path):
        return "mcp"
    return "api" if path.startswith("/api/") else "page"


def http_error_document(status: int, message: str) -> dict[str, Any]:
    """How the MCP endpoint states an HTTP error: a JSON-RPC error, so SDK clients surface
    the status and message."""
    code = JSONRPC_AUTH_ERROR if status in (401, 403) else -32600
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": f"HTTP {status}: {message}"}}


def error_document(
    surface: Surface, status: int, code: str, message: str, details: Mapping[str, object] | None = None
) -> dict[str, Any]:
    """The JSON document of an error on `surface` (not a page)."""
    if surface == "mcp":
        return http_error_document(status, message)
    return {"error": {"code": code, "message": message, **(details or {})}}


async def send_json(
    send: Send, status: int, document: Any, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """An answer of one JSON document, sent as raw ASGI messages (no request read)."""
    body = json.dumps(document).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*start, *headers]})
    await send({"type": "http.response.body", "body": body})


class Refusal(Exception):
    """A refusal raised before the request's body was read (an authentication dependency's):
    rendered as the guard's refusals are, its connection closed when a body is on the way."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


async def _no_body() -> Message:
    # Responses never read the request; a refusal must not start reading it either.
    return {"type": "http.disconnect"}


class ErrorRenderer:
    """Built once by the app: `page` draws the HTML error page, `origin` names the server in
    a 401's challenge."""

    def __init__(self, *, page: PageRenderer, origin: Origin) -> None:
        self.page = page
        self.origin = origin

    def response(
        self,
        request: Request,
        status: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        details: Mapping[str, object] | None = None,
        before_body: bool = False,
    ) -> Response:
        """The error as the request's surface says it. `before_body`: the body was not read
        (close the connection when one is on the way)."""
        extra = dict(headers or {})
        if before_body and has_body(request.scope):
            extra["Connection"] = "close"
        surface = surface_of(request.url.path)
        if surface == "page":
            context = {"status": status, "title": TITLES.get(status, DEFAULT_TITLE), "message": message}
            response = self.page(request, context, status)
            response.headers.update(extra)
            return response
        return JSONResponse(error_document(surface, status, code, message, details), status, headers=extra)

    def error(self, request: Request, exc: SteamharnessError) -> Response:
        """A known error raised by a route: Retry-After when it knows one (busy, throttled), and
        a 401 of the JSON API or the MCP endpoint challenges for an API key."""
        headers: dict[str, str] = {}
        if isinstance(exc, AuthError) and exc.status == 401 and surface_of(request.url.path) != "page":
            headers["WWW-Authenticate"] = bearer_challenge(exc.message, self.origin(request.scope))
        retry_after = getattr(exc, "retry_after", None)
        if retry_after:
            headers["Retry-After"] = str(retry_after)
        return self.response(
            request, exc.status, exc.code, exc.message, headers=headers, details=exc.details()
        )

    def refusal(self, request: Request, exc: Refusal) -> Response:
        return self.response(
            request, exc.status, exc.code, exc.message, headers=exc.headers, before_body=True
        )

    async def refuse(
        self,
        scope: Scope,
        send: Send,
        status: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """The guard's refusal, before any route and before the body was read."""
        response = self.response(Request(scope), status, code, message, headers=headers, before_body=True)
        await response(scope, _no_body, send)

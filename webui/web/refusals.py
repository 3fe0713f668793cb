"""Refusals at the HTTP edge: the error body each kind of route speaks, and an audit of
security refusals that a flood cannot turn into a flood of rows.

Three shapes, by path: the MCP endpoint answers a JSON-RPC error (so SDK clients surface
status and message), the rest of /api answers `{"error": {"code", "message"}}`, pages get
the HTML error page.
"""

from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from typing import Any, Literal

from starlette.requests import Request
from starlette.types import Scope, Send

from webui.audit.events import AuditName
from webui.blocking import run_db
from webui.mcp.replies import http_error_document
from webui.web.templating import page

Kind = Literal["mcp", "api", "page"]
MCP_PATH = re.compile(r"/api/workflows/[^/]+/mcp")
TITLES = {
    400: "Bad request",
    408: "Too slow",
    401: "Not logged in",
    403: "Not allowed",
    413: "Too large",
    421: "Wrong address",
    429: "Too many attempts",
}


def kind_of(path: str) -> Kind:
    if MCP_PATH.fullmatch(path):
        return "mcp"
    return "api" if path.startswith("/api/") else "page"


def client_address(scope: Scope) -> str:
    """The client as the proxy-headers middleware left it (the peer, unless it is a
    trusted proxy)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


async def refuse(
    scope: Scope,
    send: Send,
    status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
) -> None:
    kind = kind_of(scope.get("path", ""))
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    if _has_body(scope):
        # The body stays unread: close the connection rather than drain it to reuse it.
        extra.append((b"connection", b"close"))
    if kind == "page":
        response = page(
            Request(scope),
            "error.html",
            {"status": status, "title": TITLES.get(status, "Refused"), "message": message},
            status_code=status,
        )
        response.raw_headers.extend(extra)
        await response(scope, _no_body, send)
        return
    if kind == "mcp":
        doc = http_error_document(status, message)
    else:
        doc = {"error": {"code": code, "message": message}}
    body = json.dumps(doc).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": start + extra})
    await send({"type": "http.response.body", "body": body})


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


async def _no_body() -> dict[str, Any]:
    # Responses never read the request; a refusal must not start reading it either.
    return {"type": "http.disconnect"}


class RefusalAudit:
    """At most one audit row per (event, client address) every `interval` seconds, and at
    most `max_rows` rows per interval overall; each row counts the refusals it stands for
    since the previous one (`details.refusals`). Refusals after a key's last row are not
    written until it is refused again after the interval. At most `max_keys` keys tracked."""

    def __init__(
        self,
        *,
        interval: float = 60.0,
        max_rows: int = 100,
        max_keys: int = 10_000,
        clock: Any = time.monotonic,
    ) -> None:
        self.interval = interval
        self.max_rows = max_rows
        self.max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[tuple[str, str], tuple[float, int]] = (
            OrderedDict()
        )  # -> (last row, unwritten)
        self._budget_start = float("-inf")
        self._budget_used = 0

    def admit(self, event: str, address: str) -> int | None:
        """The number of refusals a row written now stands for, or None: write nothing."""
        now = self._clock()
        key = (event, address)
        last, unwritten = self._keys.pop(key, (float("-inf"), 0))
        unwritten += 1
        if now - self._budget_start >= self.interval:
            self._budget_start, self._budget_used = now, 0
        if now - last >= self.interval and self._budget_used < self.max_rows:
            self._budget_used += 1
            self._keys[key] = (now, 0)
            admitted: int | None = unwritten
        else:
            self._keys[key] = (last, unwritten)
            admitted = None
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return admitted

    async def record(
        self,
        scope: Scope,
        event: AuditName,
        *,
        outcome: str,
        actor: str | None = None,
        project_id: str | None = None,
        **details: Any,
    ) -> None:
        address = client_address(scope)
        refusals = self.admit(event, address)
        if refusals is None:
            return
        services = getattr(scope["app"].state, "services", None) if "app" in scope else None
        if services is None:  # before the lifespan opened the store
            return
        headers = dict(scope.get("headers", []))
        user_agent = headers.get(b"user-agent", b"").decode("latin-1") or None
        kind = kind_of(scope.get("path", ""))
        fields: dict[str, Any] = {
            "actor": actor,
            "project_id": project_id,
            "outcome": outcome,
            "source": {"mcp": "mcp", "api": "api", "page": "ui"}[kind],
            "client_address": address,
            "user_agent": user_agent,
            "details": {
                "method": scope.get("method"),
                "path": scope.get("path", "")[:300],
                "refusals": refusals,
                **details,
            },
        }

        await run_db(services.audit.record_alone, services.engine, event, **fields)

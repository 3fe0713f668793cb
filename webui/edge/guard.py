"""Checks every HTTP request passes before any route sees it. Pure ASGI: it never buffers a
request or a response, so uploads and SSE streams stay streams.

`GET /healthz` passes straight through: load balancers and orchestrators probe it by a
replica's own address, often with no Host header at all (HAProxy's `option httpchk` sends
HTTP/1.0 without one), and it shows nothing but the status and the replica id.

In order, each refusal audited (rate-limited, see `RefusalAudit`) and said by the one
renderer (`webui.edge.errors`):
  1. Host and Origin against the allowed lists the MCP endpoint uses (DNS rebinding;
     421 and 403, the MCP SDK's statuses), before any credential is looked at;
  2. at most one Authorization header (400);
  3. bodies: a declared Content-Length over the cap is refused before reading; a body that
     grows past it while streaming is cut off with 413 and the route cancelled (uploads
     keep their own, larger limit, enforced by the file store as they stream; the MCP
     endpoint its own, `STEAMHARNESS_MAX_MCP_BODY_BYTES`). Every body,
     uploads included, must keep the pace (`BodyPace`: within a timeout of the request,
     plus a second per so many bytes); one that falls behind while the route reads it is
     refused with 408 and the route cancelled, its connection closed. (Bodies nobody
     reads: `webui.edge.connections`.)
  4. the MCP endpoint authenticates every request itself: its 401s count as failed keys of
     the client's address here, and one from an address with too many recent failures
     becomes 429 + Retry-After (see `webui.auth.throttle`).

No authentication here: each route's dependencies decide it (`webui.web.policies`: an API
key, checked with the same throttle before any of the body is read; the browser session; or
public), so no path decides who may call a route.
"""

from __future__ import annotations

import re
from typing import NoReturn

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from webui.audit.events import AuditName
from webui.auth.keys import AmbiguousAuthorization, single_authorization
from webui.auth.throttle import AuthThrottle
from webui.edge.connections import HEALTH_PATH, BodyPace
from webui.edge.errors import ErrorRenderer, surface_of
from webui.edge.refusals import RefusalAudit, client_address, key_throttled

# Body caps by path (edge work, not authentication). The files API caps the file itself as
# it streams, so the guard counts that body without a cap of its own:
OWN_CAP_PATH = re.compile(r"/api/workflows/[^/]+/files")
# Bodies that carry a document to index: up to the upload cap (a file plus its form), not
# the JSON cap; still counted as they arrive.
LARGE_BODY_PATH = re.compile(
    r"/api/workflows/[^/]+/knowledge/(?:documents|import)|/projects/[^/]+/knowledge/upload"
)
FORM_OVERHEAD_BYTES = 1024 * 1024  # the multipart framing and fields around an upload


def allowed(value: str, patterns: list[str]) -> bool:
    """The MCP SDK's rule (an exact match, or `base:*` for `base` on any port), except that
    the port must be digits."""
    for p in patterns:
        if value == p:
            return True
        if p.endswith(":*") and value.startswith(p[:-1]) and value[len(p) - 1 :].isdigit():
            return True
    return False


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        security: TransportSecuritySettings,
        throttle: AuthThrottle,
        refusals: RefusalAudit,
        errors: ErrorRenderer,
        max_body_bytes: int,
        body_pace: BodyPace,
        max_upload_bytes: int | None = None,
        max_mcp_body_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.security = security
        self.throttle = throttle
        self.refusals = refusals
        self.errors = errors
        self.max_body = max_body_bytes
        self.max_mcp_body = max_body_bytes if max_mcp_body_bytes is None else max_mcp_body_bytes
        self.max_upload = max(max_body_bytes, (max_upload_bytes or 0) + FORM_OVERHEAD_BYTES)
        self.pace = body_pace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["path"] == HEALTH_PATH and scope["method"] in ("GET", "HEAD")):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        surface = surface_of(scope["path"])

        host = headers.get("host")
        if not host or not allowed(host, self.security.allowed_hosts):
            await self.refusals.record(
                scope, AuditName.REQUEST_HOST_REFUSED, outcome="421", host=(host or "")[:200]
            )
            await self.errors.refuse(scope, send, 421, "bad_host", "Invalid Host header")
            return
        origin = headers.get("origin")
        if origin and not allowed(origin, self.security.allowed_origins):
            await self.refusals.record(
                scope, AuditName.REQUEST_ORIGIN_REFUSED, outcome="403", origin=origin[:200]
            )
            await self.errors.refuse(scope, send, 403, "bad_origin", "Invalid Origin header")
            return
        try:
            single_authorization(headers.getlist("authorization"))
        except AmbiguousAuthorization as exc:
            await self.refusals.record(scope, AuditName.AUTH_AMBIGUOUS, outcome="400")
            await self.errors.refuse(scope, send, 400, exc.code, exc.message)
            return

        cap: int | None = self.max_body
        if surface == "mcp":
            cap = self.max_mcp_body
        elif OWN_CAP_PATH.fullmatch(scope["path"]):
            cap = None  # the files API caps the file itself as it streams
        elif LARGE_BODY_PATH.fullmatch(scope["path"]):
            cap = self.max_upload
        declared = headers.get("content-length")
        if cap is not None and declared is not None and declared.isdigit() and int(declared) > cap:
            await self._too_large(scope, send, declared=int(declared), limit=cap)
            return

        if surface == "mcp":
            send = self._count_failures(scope, send, client_address(scope))
        await self._bounded(scope, receive, send, cap=cap)

    # ------------------------------------------------------------------ helpers
    async def _throttled(self, scope: Scope, send: Send, wait: int) -> None:
        refusal = await key_throttled(self.refusals, self.throttle, scope, wait)
        await self.errors.refuse(
            scope, send, refusal.status, refusal.code, refusal.message, headers=refusal.headers
        )

    def _count_failures(self, scope: Scope, send: Send, address: str) -> Send:
        """The MCP gateway authenticates itself: its 401s count as failures here, and one from
        a throttled address becomes this 429 (the gateway's answer is dropped)."""
        throttled: int | None = None

        async def counting(message: Message) -> None:
            nonlocal throttled
            if message["type"] == "http.response.start" and message["status"] == 401:
                throttled = self.throttle.bearer_failed(address)
            if throttled is None:
                await send(message)
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                await self._throttled(scope, send, throttled)

        return counting

    async def _too_large(self, scope: Scope, send: Send, *, declared: int | None, limit: int) -> None:
        await self.refusals.record(
            scope, AuditName.REQUEST_TOO_LARGE, outcome="413", limit=limit, declared=declared
        )
        await self.errors.refuse(
            scope, send, 413, "too_large", f"the request body is larger than {limit} bytes"
        )

    async def _too_slow(self, scope: Scope, send: Send, *, received: int) -> None:
        await self.refusals.record(
            scope,
            AuditName.REQUEST_TOO_SLOW,
            outcome="408",
            received=received,
            timeout=self.pace.timeout,
            min_rate=self.pace.min_rate,
        )
        await self.errors.refuse(
            scope, send, 408, "body_too_slow", f"the request body arrived too slowly: {self.pace.describe()}"
        )

    async def _bounded(self, scope: Scope, receive: Receive, send: Send, *, cap: int | None) -> None:
        """Runs the app with a body that must keep the pace and may not grow past `cap`
        (None: the route bounds it). Past either, the client gets 408 or 413 (when no response has started)
        and the app is cancelled where it waits for more body: it never sees a truncated
        body, nor a disconnect to log. Once the body is complete, waits (for the client's
        disconnect, under a stream) are not bounded."""
        started_at = anyio.current_time()
        read = 0
        complete = False
        started = False

        with anyio.CancelScope() as app_scope:

            async def give_up() -> NoReturn:
                app_scope.cancel()
                await anyio.sleep_forever()
                raise AssertionError("unreachable: cancelled")

            async def bounded_receive() -> Message:
                nonlocal read, complete
                if complete:
                    return await receive()
                message: Message | None = None
                with anyio.move_on_after(self.pace.deadline(started_at, read) - anyio.current_time()):
                    message = await receive()
                if message is None:  # the pace's deadline passed first
                    if not started:
                        await self._too_slow(scope, send, received=read)
                    return await give_up()
                if message["type"] == "http.request":
                    read += len(message.get("body", b""))
                    complete = not message.get("more_body", False)
                    if cap is not None and read > cap:
                        if not started:
                            await self._too_large(scope, send, declared=None, limit=cap)
                        return await give_up()
                return message

            async def tracking_send(message: Message) -> None:
                nonlocal started
                if message["type"] == "http.response.start":
                    started = True
                await send(message)

            await self.app(scope, bounded_receive, tracking_send)

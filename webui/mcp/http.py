"""The Streamable HTTP endpoint `/api/workflows/{project_id}/mcp?target=…`.

A pure-ASGI gateway in front of one `StreamableHTTPSessionManager`. Every request
authenticates from its own Bearer header (sessions bind, they never authenticate), then:
  - 2026-07-28 requests (stateless): the target is resolved for this request;
  - a request carrying `Mcp-Session-Id`: our binding table must know the id (else 404)
    and the credential, project and requested target must match it (else 403);
  - an opening POST: the target is resolved once; the session id the SDK answers with is
    bound before the response reaches the client.
A 2025 POST whose response never completed (the client went away mid-call) cancels the
runs it started.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from sqlmodel import Session
from starlette.types import Message, Receive, Scope, Send

from webui.audit.log import AuditLog
from webui.auth.keys import Authenticator, AuthError, Forbidden, Principal
from webui.errors import NotFound, SteamharnessError
from webui.mcp.binding import Binding, current_binding
from webui.mcp.catalog import Catalog
from webui.runs.env import worker_env
from webui.runs.service import RunLimits, RunRefused, RunService
from webui.store import sessions as session_store
from webui.store.models import McpSession
from webui.workflows.registry import ProjectRegistry, Resolved
from webui.workflows.targets import BadTarget, Target, parse_target

log = logging.getLogger(__name__)

QUERY_CREDENTIALS = frozenset(
    {"key", "api_key", "apikey", "token", "access_token", "authorization", "bearer"}
)
UI_SESSION_COOKIE = "steamharness_session"
JSONRPC_AUTH_ERROR = -32001


@dataclass
class SessionEntry:
    binding: Binding
    fingerprint: str
    project_id: str
    target: str  # as requested: `latest` stays `latest` even when it resolved to 1.2.3
    resolved: Resolved
    in_flight: int = 0
    last_active: float = field(default_factory=time.monotonic)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


async def _reply(send: Send, status: int, message: str, *, extra: dict[str, str] | None = None) -> None:
    """A JSON-RPC shaped error body, so SDK clients surface the status and message."""
    code = JSONRPC_AUTH_ERROR if status in (401, 403) else -32600
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": f"HTTP {status}: {message}"}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class McpGateway:
    def __init__(
        self,
        *,
        manager: StreamableHTTPSessionManager,
        authenticator: Authenticator,
        registry: ProjectRegistry,
        runs: RunService,
        audit: AuditLog,
        idle_timeout: float,
        default_max_running: int | None,
        default_max_queued: int | None,
        env: dict[str, str],
    ) -> None:
        self.manager = manager
        self.auth = authenticator
        self.registry = registry
        self.runs = runs
        self.audit = audit
        self.engine = runs.engine
        self.idle_timeout = idle_timeout
        self.default_max_running = default_max_running
        self.default_max_queued = default_max_queued
        self.env = env
        self.sessions: dict[str, SessionEntry] = {}
        self._catalogs: dict[tuple[str, str], Catalog] = {}

    # ------------------------------------------------------------------ audit
    def _audit(self, event: str, scope: Scope, **fields: Any) -> None:
        headers = _headers(scope)
        client = scope.get("client")
        with Session(self.engine) as s:
            self.audit.record(
                s,
                event,
                client_address=f"{client[0]}" if client else None,
                user_agent=(headers.get("user-agent") or "")[:300] or None,
                **fields,
            )
            s.commit()

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = _headers(scope)
        pid = str(scope.get("path_params", {}).get("project_id", ""))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            if QUERY_CREDENTIALS & {k.lower() for k in query}:
                raise AuthError("credentials in the query string are refused; use Authorization: Bearer")
            if "authorization" not in headers and UI_SESSION_COOKIE in headers.get("cookie", ""):
                raise AuthError("a browser session cannot authenticate the MCP endpoint; use an API key")
            principal = self.auth.from_header(headers.get("authorization"))
        except AuthError as exc:
            self._audit(
                "auth.failed", scope, project_id=pid or None, outcome="401", details={"reason": exc.message}
            )
            await _reply(send, 401, exc.message, extra={"www-authenticate": 'Bearer realm="steamharness"'})
            return
        try:
            self.registry.record(pid)
            principal.require_run(pid)
            target = parse_target((query.get("target") or [None])[0])
        except NotFound as exc:
            await _reply(send, 404, exc.message)
            return
        except Forbidden as exc:
            self._audit(
                "auth.denied",
                scope,
                actor=principal.actor,
                project_id=pid,
                outcome="403",
                details={"reason": exc.message},
            )
            await _reply(send, 403, exc.message)
            return
        except BadTarget as exc:
            await _reply(send, 400, exc.message)
            return

        version = headers.get("mcp-protocol-version")
        session_id = headers.get("mcp-session-id")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._modern(scope, receive, send, principal, pid, target)
        elif session_id is not None:
            await self._in_session(scope, receive, send, principal, pid, target, session_id)
        else:
            await self._opening(scope, receive, send, principal, pid, target)

    # ------------------------------------------------------------------ the three paths
    async def _modern(
        self, scope: Scope, receive: Receive, send: Send, principal: Principal, pid: str, target: Target
    ) -> None:
        resolved = await self._resolve_or_reply(send, pid, target)
        if resolved is None:
            return
        await self._forward(scope, receive, send, self._binding(scope, principal, resolved, None))

    async def _in_session(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        pid: str,
        target: Target,
        session_id: str,
    ) -> None:
        entry = self.sessions.get(session_id)
        if entry is None:
            await _reply(send, 404, "Session not found")
            return
        if (entry.fingerprint, entry.project_id, entry.target) != (principal.fingerprint, pid, target.label):
            self._audit(
                "session.denied",
                scope,
                actor=principal.actor,
                project_id=pid,
                target=target.label,
                session_id=session_id,
                outcome="403",
            )
            await _reply(send, 403, "this session belongs to another credential, project or target")
            return
        entry.in_flight += 1
        try:
            status = await self._forward(scope, receive, send, entry.binding)
        finally:
            entry.in_flight -= 1
            entry.last_active = time.monotonic()
        if scope["method"] == "DELETE" and status is not None and status < 300:
            self._forget(session_id, "deleted", scope)
        elif status == 404:
            self._forget(session_id, "expired", scope)

    async def _opening(
        self, scope: Scope, receive: Receive, send: Send, principal: Principal, pid: str, target: Target
    ) -> None:
        if scope["method"] != "POST":
            await self._forward(scope, receive, send, None)  # the SDK answers 400/405
            return
        resolved = await self._resolve_or_reply(send, pid, target)
        if resolved is None:
            return

        async def bind_then_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 200:
                sid = next(
                    (v.decode() for k, v in message.get("headers", []) if k.lower() == b"mcp-session-id"),
                    None,
                )
                if sid is not None and sid not in self.sessions:
                    self._remember(scope, sid, principal, pid, target, resolved)
            await send(message)

        binding = self._binding(scope, principal, resolved, None)
        await self._forward(scope, receive, bind_then_send, binding)

    # ------------------------------------------------------------------ helpers
    async def _resolve_or_reply(self, send: Send, pid: str, target: Target) -> Resolved | None:
        try:
            return self.registry.resolve(pid, target)
        except NotFound as exc:
            await _reply(send, 404, exc.message)
        except SteamharnessError as exc:  # e.g. the draft no longer loads
            await _reply(send, 409, exc.message)
        return None

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, binding: Binding | None
    ) -> int | None:
        started: list[str] = []
        state = scope.setdefault("state", {})
        state["mcp_binding"] = binding
        state["mcp_http_runs"] = started
        status: int | None = None
        completed = False

        async def tracking_send(message: Message) -> None:
            nonlocal status, completed
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                completed = True
            await send(message)

        token = current_binding.set(binding) if binding is not None else None
        try:
            await self.manager.handle_request(scope, receive, tracking_send)
        finally:
            if token is not None:
                current_binding.reset(token)
            if not completed and started:
                # The client dropped this POST mid-call: nobody will read the result.
                with anyio.CancelScope(shield=True):
                    for run_id in started:
                        await self.runs.cancel(run_id, reason="The MCP client disconnected during the call.")
        return status

    def _catalog(self, resolved: Resolved) -> Catalog:
        key = (resolved.project.id, resolved.key)
        if key not in self._catalogs:
            self._catalogs[key] = Catalog.build(resolved.project, file_mode="server")
        return self._catalogs[key]

    def _binding(
        self, scope: Scope, principal: Principal, resolved: Resolved, session_id: str | None
    ) -> Binding:
        pid = resolved.project.id
        base = _base_url(scope)
        hint = (
            f"Answer it in the browser at {base}/conversations, or POST the answer to "
            f"{base}/api/interactions/{{interactionId}}/answer; then read GET {base}/api/runs/<runId>."
        )
        return Binding(
            catalog=self._catalog(resolved),
            principal=f"{principal.fingerprint}|{pid}|{resolved.target.label}",
            transport="http",
            actor=principal.actor,
            account_id=principal.account_id,
            target=resolved.target.label,
            version=resolved.version or resolved.revision,
            session_id=session_id,
            env=worker_env(resolved.project.root, self.env),
            answer_hint=hint,
            preflight=lambda: self._preflight(resolved),
        )

    def _preflight(self, resolved: Resolved) -> RunLimits:
        pid = resolved.project.id
        if resolved.target.kind == "draft" and self.registry.draft_revision(pid) != resolved.revision:
            raise RunRefused(
                "draft_changed",
                "The project's draft changed since this session started; reconnect to use the new draft.",
            )
        record = self.registry.record(pid)
        return RunLimits(
            gate_open=record.run_gate_open,
            max_running=record.max_running if record.max_running is not None else self.default_max_running,
            max_queued=record.max_queued if record.max_queued is not None else self.default_max_queued,
        )

    def _remember(
        self, scope: Scope, sid: str, principal: Principal, pid: str, target: Target, resolved: Resolved
    ) -> None:
        binding = self._binding(scope, principal, resolved, sid)
        self.sessions[sid] = SessionEntry(
            binding=binding,
            fingerprint=principal.fingerprint,
            project_id=pid,
            target=target.label,
            resolved=resolved,
        )
        row = McpSession(
            id=sid,
            credential=principal.fingerprint,
            actor=principal.actor,
            project_id=pid,
            target=target.label,
            resolved=resolved.key,
        )
        client = scope.get("client")
        ua = _headers(scope).get("user-agent")

        def audit(s: Session) -> None:
            self.audit.record(
                s,
                "session.created",
                actor=principal.actor,
                project_id=pid,
                target=target.label,
                version=resolved.key,
                session_id=sid,
                outcome="ok",
                client_address=client[0] if client else None,
                user_agent=ua,
            )

        session_store.add_session(self.engine, row=row, audit=audit)

    def _forget(self, sid: str, reason: str, scope: Scope | None = None) -> None:
        entry = self.sessions.pop(sid, None)
        if entry is None:
            return

        def audit(s: Session) -> None:
            self.audit.record(
                s,
                "session.closed",
                actor=entry.binding.actor,
                project_id=entry.project_id,
                target=entry.target,
                version=entry.resolved.key,
                session_id=sid,
                outcome=reason,
            )

        session_store.close_session(self.engine, session_id=sid, reason=reason, audit=audit)

    # ------------------------------------------------------------------ lifecycle
    async def reap(self, sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        """Forget sessions the SDK has reaped for idleness (same rule: none in flight)."""
        interval = max(0.2, min(self.idle_timeout / 4, 10.0))
        while True:
            await sleep(interval)
            now = time.monotonic()
            for sid, entry in list(self.sessions.items()):
                if entry.in_flight == 0 and now - entry.last_active > self.idle_timeout + 1:
                    self._forget(sid, "expired")

    def close_all(self, reason: str) -> None:
        for sid in list(self.sessions):
            self._forget(sid, reason)


def _base_url(scope: Scope) -> str:
    headers = _headers(scope)
    host = headers.get("host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"

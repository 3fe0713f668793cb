"""The Streamable HTTP endpoint `/api/workflows/{project_id}/mcp?target=…`: its edge.

A pure-ASGI gateway in front of one `StreamableHTTPSessionManager`. Every request
authenticates from its own Bearer header (sessions bind, they never authenticate), then:
  - 2026-07-28 requests (stateless): the target is resolved for this request;
  - a request carrying `Mcp-Session-Id`: the held sessions (`webui.mcp.sessions`) must
    know the id (else 404) and the credential, project, requested target and `config`
    must match it (else 403);
  - an opening POST: the target is resolved once; the session id the SDK answers with is
    bound before the response reaches the client. A credential holding its cap of open
    sessions is refused (429) until it ends one or one expires.
The request's binding (`webui.mcp.binding`) reaches the SDK's handlers in the ContextVar
set around `handle_request`, with the event `client_left`, set when the response never
completed (the client went away mid-call): the bridge then ends the call and cancels its
run. With resumable streams (`webui.mcp.event_store`), a dropped POST of a session ends its
call only once its client has not resumed the stream (GET with `Last-Event-ID`) in time.
Refusals are JSON-RPC error documents (`webui.mcp.replies`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from opentelemetry import context as otel_context
from starlette.types import Message, Receive, Scope, Send

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.auth.challenge import bearer_challenge
from webui.auth.keys import Authenticator, AuthError, Forbidden, Principal, authorization_values
from webui.auth.ui import COOKIE_NAME
from webui.blocking import run_db
from webui.edge.access_log import QUERY_CREDENTIALS
from webui.errors import ConfigurationRefused, NotFound, SteamharnessError, StoreUnavailable
from webui.events import EventHub
from webui.mcp import envelope
from webui.mcp.binding import (
    Binding,
    HttpBindings,
    base_url,
    chosen_config,
    client_left,
    current_binding,
    request_headers,
)
from webui.mcp.event_store import BoundedEventStore, StreamOwner, stream_owner
from webui.mcp.http_request import attach_trace_headers, client_info, is_json, request_id, whole_body
from webui.mcp.replies import jsonrpc_errors, reply, retry_after
from webui.mcp.sessions import HeldSessions
from webui.parse_threads import run_parse
from webui.projects.limits import ProjectLimits
from webui.projects.registry import ProjectRegistry, Resolved
from webui.runs.service import RunService
from webui.workflows.targets import BadTarget, Target, parse_target

log = logging.getLogger(__name__)


class RefusalRecorder(Protocol):
    """Where the gateway audits a refused request (the HTTP edge's rate-limited refusal
    audit, `webui.edge.refusals.RefusalAudit`): a flood of bad keys is not a flood of rows."""

    async def record(
        self, scope: Scope, event: AuditName, *, outcome: str, project_id: str | None = None, **details: Any
    ) -> None: ...


@dataclass(frozen=True)
class _Call:
    """One request past `_handle`'s checks: its ASGI channels, the authenticated caller and
    the project, target and configuration it asked for."""

    scope: Scope
    receive: Receive
    send: Send
    principal: Principal
    pid: str
    target: Target
    config: str | None


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
        limits: ProjectLimits,
        env: dict[str, str],
        refusals: RefusalRecorder,
        max_sessions_per_key: int = 32,
        max_sessions_admin_key: int = 128,
        hub: EventHub | None = None,
        touch_interval: float = 30.0,
        public_url: str | None = None,
    ) -> None:
        self.manager = manager
        self.auth = authenticator
        self.registry = registry
        self.runs = runs
        self.audit = audit
        self.engine = runs.engine
        self.idle_timeout = idle_timeout
        self.refusals = refusals
        self.bindings = HttpBindings(
            registry=registry,
            authenticator=authenticator,
            env=env,
            limits=limits,
            public_url=public_url,
        )
        self.sessions = HeldSessions(
            manager=manager,
            runs=runs,
            audit=audit,
            hub=hub if hub is not None else runs.hub,
            idle_timeout=idle_timeout,
            max_per_key=max_sessions_per_key,
            max_admin_key=max_sessions_admin_key,
            touch_interval=touch_interval,
        )
        if isinstance(manager.event_store, BoundedEventStore):
            # The streams of a session this process no longer holds go with it.
            manager.event_store.session_alive = self.sessions.__contains__
        # Shutdown: once draining, new requests are refused; `_calls` counts requests that
        # will end on their own (all but GET streams), `_idle` is set while there are none.
        self.draining = False
        self._calls = 0
        self._idle = anyio.Event()
        self._idle.set()

    # ------------------------------------------------------------------ audit
    async def _audit(self, event: AuditName, scope: Scope, **fields: Any) -> None:
        headers = request_headers(scope)
        client = scope.get("client")

        await run_db(
            self.audit.record_alone,
            self.engine,
            event,
            client_address=f"{client[0]}" if client else None,
            user_agent=headers.get("user-agent"),
            **fields,
        )

    async def _audit_call(self, call: _Call, event: AuditName, *, outcome: str, **fields: Any) -> None:
        """An audit row about `call`'s caller, project and target."""
        await self._audit(
            event,
            call.scope,
            actor=call.principal.actor,
            project_id=call.pid,
            target=call.target.label,
            outcome=outcome,
            **fields,
        )

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if self.draining:
            await reply(send, 503, "the server is shutting down; try again once it is back")
            return
        try:
            await self._handle(scope, receive, send)
        except StoreUnavailable as exc:
            # Only before the SDK took the request over: afterwards the response has begun.
            await reply(send, exc.status, exc.message, extra=retry_after(exc))

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = request_headers(scope)
        pid = str(scope.get("path_params", {}).get("project_id", ""))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            if QUERY_CREDENTIALS & {k.lower() for k in query}:
                raise AuthError("credentials in the query string are refused; use Authorization: Bearer")
            if "authorization" not in headers and COOKIE_NAME in headers.get("cookie", ""):
                raise AuthError("a browser session cannot authenticate the MCP endpoint; use an API key")
            # One thread hop for the key and the project row (read only for a valid key).
            principal, missing = await run_db(self._principal_and_project, scope, pid)
        except AuthError as exc:
            # Anyone can send bad keys: these rows are rate-limited like every refusal.
            await self.refusals.record(
                scope, AuditName.AUTH_FAILED, outcome="401", project_id=pid or None, reason=exc.message
            )
            base = self.bindings.public_url or base_url(scope)
            await reply(
                send, 401, exc.message, extra={"www-authenticate": bearer_challenge(exc.message, base)}
            )
            return
        try:
            if missing is not None:
                raise missing
            principal.require_run(pid)
            target = parse_target((query.get("target") or [None])[0])
            config = chosen_config((query.get("config") or [None])[0], "config")
        except NotFound as exc:
            await reply(send, 404, exc.message)
            return
        except Forbidden as exc:
            await self._audit(
                AuditName.AUTH_DENIED,
                scope,
                actor=principal.actor,
                project_id=pid,
                outcome="403",
                details={"reason": exc.message},
            )
            await reply(send, 403, exc.message)
            return
        except (BadTarget, ConfigurationRefused) as exc:
            await reply(send, 400, exc.message)
            return

        call = _Call(scope, receive, send, principal, pid, target, config)
        version = headers.get("mcp-protocol-version")
        session_id = headers.get("mcp-session-id")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._modern(call)
        elif session_id is not None:
            await self._in_session(call, session_id)
        else:
            await self._opening(call)

    # ------------------------------------------------------------------ the three paths
    async def _modern(self, call: _Call) -> None:
        scope, principal = call.scope, call.principal
        resolved = await self._resolve_or_reply(call.send, call.pid, call.target)
        if resolved is None:
            return
        await self._forward(
            scope, call.receive, call.send, self.bindings.bind(scope, principal, resolved, None, call.config)
        )

    async def _in_session(self, call: _Call, session_id: str) -> None:
        scope, receive, send, principal = call.scope, call.receive, call.send, call.principal
        entry = self.sessions.get(session_id)
        if entry is None:
            await reply(send, 404, "Session not found")
            return
        bound = (entry.fingerprint, entry.project_id, entry.target, entry.config)
        if bound != (principal.fingerprint, call.pid, call.target.label, call.config):
            await self._audit_call(call, AuditName.SESSION_DENIED, session_id=session_id, outcome="403")
            await reply(
                send, 403, "this session belongs to another credential, project, target or configuration"
            )
            return
        counted = scope["method"] != "GET"
        entry.in_flight += 1
        entry.calls += counted
        try:
            await self.sessions.touch(session_id, entry, headers=request_headers(scope))
            status = await self._forward(scope, receive, send, entry.binding, StreamOwner(session_id))
        finally:
            entry.in_flight -= 1
            entry.calls -= counted
            entry.last_active = time.monotonic()
        if scope["method"] == "DELETE" and status is not None and status < 300:
            await self.sessions.forget(session_id, "deleted")
            self._forget_streams(session_id)
        elif status == 404:
            await self.sessions.forget(session_id, "expired")
            self._forget_streams(session_id)

    async def _opening(self, call: _Call) -> None:
        scope, receive, send, principal = call.scope, call.receive, call.send, call.principal
        target, config = call.target, call.config
        if scope["method"] != "POST":
            await self._forward(scope, receive, send, None)  # the SDK answers 400/405
            return
        resolved = await self._resolve_or_reply(send, call.pid, target)
        if resolved is None:
            return
        if self.sessions.full(principal):
            await self._refuse_session(call, self.sessions.cap(principal))
            return

        refused = False
        opening: dict[str, Any] | None = None  # the POST's message, once `_forward` read it

        def seen(message: dict[str, Any]) -> None:
            nonlocal opening
            opening = message

        async def bind_then_send(message: Message) -> None:
            nonlocal refused
            if refused:
                return  # the client already has its 503; the SDK's answer goes nowhere
            if message["type"] == "http.response.start" and message.get("status") == 200:
                sid = next(
                    (v.decode() for k, v in message.get("headers", []) if k.lower() == b"mcp-session-id"),
                    None,
                )
                if sid is not None and sid not in self.sessions:
                    # The session's message router keeps this owner: its streams are its.
                    owner.session_id = sid
                    # The place this open held under the cap passes to its session:
                    # `remember` lists the session before its first await.
                    opened()
                    try:
                        await self.sessions.remember(
                            scope,
                            sid,
                            principal,
                            target,
                            resolved,
                            config,
                            self.bindings.bind(scope, principal, resolved, sid, config),
                            client_info(opening),
                        )
                    except StoreUnavailable as exc:
                        # Unrecorded, the session is unknown to us (404 if used) and the
                        # SDK reaps it when idle.
                        refused = True
                        await reply(send, exc.status, exc.message, extra=retry_after(exc))
                        return
            await send(message)

        binding = self.bindings.bind(scope, principal, resolved, None, config)
        owner = StreamOwner()
        opened = self.sessions.hold_place(principal)
        try:
            await self._forward(scope, receive, bind_then_send, binding, owner, on_message=seen)
        finally:
            opened()

    async def _refuse_session(self, call: _Call, cap: int) -> None:
        admin = call.principal.kind == "admin"
        which = "the server admin key" if admin else "this API key"
        setting = "max_sessions_admin_key" if admin else "max_sessions_per_key"
        message = (
            f"{which} already has {cap} open MCP sessions, its limit (STEAMHARNESS_{setting.upper()}). "
            "End a session you no longer use with an HTTP DELETE carrying its Mcp-Session-Id, or wait: "
            f"a session closes after {self.idle_timeout:g} s without requests."
        )
        await self._audit_call(
            call,
            AuditName.SESSION_REFUSED,
            outcome="429",
            details={"reason": "session_limit", "limit": cap},
        )
        await reply(call.send, 429, message)

    # ------------------------------------------------------------------ helpers
    def _principal_and_project(self, scope: Scope, pid: str) -> tuple[Principal, NotFound | None]:
        """The caller's key (else AuthError), then whether the project exists (its
        NotFound returned, so that a bad key is refused before an unknown project)."""
        principal = self.auth.from_header(authorization_values(scope.get("headers", [])))
        try:
            self.registry.record(pid)
        except NotFound as exc:
            return principal, exc
        return principal, None

    async def _resolve_or_reply(self, send: Send, pid: str, target: Target) -> Resolved | None:
        try:
            return await run_db(self.registry.resolve, pid, target)
        except NotFound as exc:
            await reply(send, 404, exc.message)
        except SteamharnessError as exc:  # e.g. the draft no longer loads
            await reply(send, 409, exc.message)
        return None

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        binding: Binding | None,
        owner: StreamOwner | None = None,
        on_message: Callable[[dict[str, Any]], None] | None = None,
    ) -> int | None:
        """Hands the request to the SDK under `binding`; a JSON POST's body is read whole and
        checked first (`envelope.read_body`), its message given to `on_message`. The status
        the response started with (None: none started)."""
        status: int | None = None
        completed = False
        stream_id: str | None = None  # a session's POST stream: its JSON-RPC request's id

        async def tracking_send(message: Message) -> None:
            nonlocal status, completed
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                completed = True
            await send(message)

        if scope.get("method") == "POST" and is_json(scope):
            body, receive = await whole_body(receive)
            if body is None:
                return None  # the client went away before its body arrived
            # Parsed and checked once, off the event loop when large (webui.parse_threads).
            message = await run_parse(len(body), envelope.read_body, body)
            if isinstance(message, envelope.Refusal):
                await reply(tracking_send, 400, message.message, document=message.document())
                return status
            stream_id = request_id(message)
            if on_message is not None:
                on_message(message)

        token = current_binding.set(binding) if binding is not None else None
        owner_token = stream_owner.set(owner) if owner is not None else None
        left = anyio.Event()
        left_token = client_left.set(left)
        # A W3C `traceparent` header continues the client's trace (a traceparent in the
        # request's `_meta` wins: the SDK's span reads it first).
        trace_token = attach_trace_headers(scope)
        counted = scope.get("method") != "GET"
        if counted:
            self._calls += 1
            if self._idle.is_set():
                self._idle = anyio.Event()
        returned = False
        try:
            await self.manager.handle_request(scope, receive, jsonrpc_errors(tracking_send))
            returned = True
        finally:
            if counted:
                self._calls -= 1
                if self._calls == 0:
                    self._idle.set()
            if token is not None:
                current_binding.reset(token)
            if owner_token is not None:
                stream_owner.reset(owner_token)
            client_left.reset(left_token)
            if trace_token is not None:
                otel_context.detach(trace_token)
            if not completed and not returned:
                left.set()  # failed or cancelled mid-response: its call ends now
        if not completed:
            # The client dropped this request: a call it made ends, and its run with it
            # (webui.mcp.bridge), for nobody will read the result, unless it resumes it.
            await self._after_drop(left, owner, stream_id)
        return status

    async def _after_drop(self, left: anyio.Event, owner: StreamOwner | None, stream_id: str | None) -> None:
        store = self.manager.event_store
        session_id = owner.session_id if owner is not None else None
        answered = False
        try:
            if isinstance(store, BoundedEventStore) and session_id is not None and stream_id is not None:
                answered = await store.hold_call(session_id, stream_id)
        finally:
            if not answered:
                left.set()

    def _forget_streams(self, session_id: str) -> None:
        store = self.manager.event_store
        if isinstance(store, BoundedEventStore):
            store.forget_session(session_id)

    # ------------------------------------------------------------------ shutdown
    async def calls_done(self) -> None:
        """Wait until no request other than a GET stream is being served."""
        while self._calls:
            await self._idle.wait()

"""The Streamable HTTP endpoint `/api/workflows/{project_id}/mcp?target=…`.

A pure-ASGI gateway in front of one `StreamableHTTPSessionManager`. Every request
authenticates from its own Bearer header (sessions bind, they never authenticate), then:
  - 2026-07-28 requests (stateless): the target is resolved for this request;
  - a request carrying `Mcp-Session-Id`: our binding table must know the id (else 404)
    and the credential, project, requested target and `config` must match it (else 403);
  - an opening POST: the target is resolved once; the session id the SDK answers with is
    bound before the response reaches the client. A credential holding its cap of open
    sessions is refused (429) until it ends one or one expires.
A 2025 POST whose response never completed (the client went away mid-call) cancels the
runs it started.

Sessions also end by order (`webui.mcp.session_orders`, over the event hub): an
administrator terminating one, a key revocation. The gateway holding the session cancels
its runs (which closes their pending questions), terminates the SDK transport (the
client's next request gets 404, as for an expired session) and records it closed. A
watcher ends sessions whose row another process closed or whose key another process (the
CLI) revoked. The session's last activity is written at most once per `touch_interval`.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import anyio
from anyio.abc import TaskGroup
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from sqlalchemy.exc import OperationalError
from sqlmodel import Session
from starlette.types import Message, Receive, Scope, Send

from webui import strict_json
from webui.audit.log import AuditLog
from webui.auth.keys import Authenticator, AuthError, Forbidden, Principal, authorization_values
from webui.auth.ui import COOKIE_NAME
from webui.blocking import DatabaseBusy, is_busy_error, run_db
from webui.errors import ConfigurationRefused, NotFound, SteamharnessError, StoreUnavailable
from webui.events import Event, EventHub
from webui.mcp import envelope, session_orders
from webui.mcp.binding import Binding, chosen_config, current_binding
from webui.mcp.catalog import Catalog
from webui.projects.registry import ProjectRegistry, Resolved
from webui.projects.related import ServerRelations
from webui.runs.env import worker_env
from webui.runs.service import RunLimits, RunRefused, RunService
from webui.store import sessions as session_store
from webui.store.models import McpSession, ProjectRecord, utcnow
from webui.workflows.targets import BadTarget, Target, parse_target

if TYPE_CHECKING:
    from webui.web.refusals import RefusalAudit

log = logging.getLogger(__name__)

QUERY_CREDENTIALS = frozenset(
    {"key", "api_key", "apikey", "token", "access_token", "authorization", "bearer"}
)
JSONRPC_AUTH_ERROR = -32001


@dataclass
class SessionEntry:
    binding: Binding
    fingerprint: str
    project_id: str
    target: str  # as requested: `latest` stays `latest` even when it resolved to 1.2.3
    resolved: Resolved
    config: str | None  # `&config=NAME` as requested; None: the account's active one at each call
    in_flight: int = 0
    calls: int = 0  # requests under way other than the GET stream: the console's active calls
    last_active: float = field(default_factory=time.monotonic)
    touched: float = field(default_factory=time.monotonic)  # last-activity write


CLIENT_INFO_MAX_BYTES = 65536
CLIENT_FIELD_MAX = 200
ERROR_TEXT_MAX = 200  # of the SDK's plain-text error kept in the JSON-RPC error document


def client_info(body: bytes) -> tuple[str | None, str | None, str | None]:
    """(client name, client version, protocol version) from an `initialize` request body;
    Nones for what it does not say (or a body that is not one)."""
    try:
        message = strict_json.loads(body)
    except ValueError:
        return None, None, None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None, None, None
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    info = params.get("clientInfo")
    info = info if isinstance(info, dict) else {}

    def text(value: Any) -> str | None:
        return value[:CLIENT_FIELD_MAX] if isinstance(value, str) and value else None

    return text(info.get("name")), text(info.get("version")), text(params.get("protocolVersion"))


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def http_error_document(status: int, message: str) -> dict[str, Any]:
    """How the MCP endpoint states an HTTP error: a JSON-RPC error, so SDK clients surface
    the status and message."""
    code = JSONRPC_AUTH_ERROR if status in (401, 403) else -32600
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": f"HTTP {status}: {message}"}}


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
        body = json.dumps(http_error_document(status, said or _phrase(status))).encode()
        keep = [
            (k, v)
            for k, v in held.get("headers", [])
            if k.lower() not in (b"content-type", b"content-length")
        ]
        headers = [
            *keep,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return sending


async def _reply(
    send: Send,
    status: int,
    message: str,
    *,
    extra: dict[str, str] | None = None,
    document: dict[str, Any] | None = None,
) -> None:
    body = json.dumps(document or http_error_document(status, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _retry_after(exc: StoreUnavailable) -> dict[str, str]:
    return {"retry-after": str(exc.retry_after)} if exc.retry_after else {}


def _is_json(scope: Scope) -> bool:
    """A JSON body, by its Content-Type (anything else, the SDK refuses with 415)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


async def _whole_body(receive: Receive) -> tuple[bytes | None, Receive]:
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
        refusals: RefusalAudit,
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
        self.default_max_running = default_max_running
        self.default_max_queued = default_max_queued
        self.env = env
        self.sessions: dict[str, SessionEntry] = {}
        self._catalogs: dict[tuple[str, str], Catalog] = {}
        self.refusals = refusals
        self.max_sessions_per_key = max_sessions_per_key
        self.max_sessions_admin_key = max_sessions_admin_key
        self.hub = hub if hub is not None else runs.hub
        self.touch_interval = touch_interval
        # Where people reach the server (`STEAMHARNESS_PUBLIC_URL`, e.g. the load balancer's
        # address); without it, the request's own scheme and Host.
        self.public_url = public_url.rstrip("/") if public_url else None
        # Opening POSTs under way per credential: they hold a place under the session cap
        # until their session is bound (or they fail), so racing opens cannot overshoot it.
        self._opens: Counter[str] = Counter()
        # Shutdown: once draining, new requests are refused; `_calls` counts requests that
        # will end on their own (all but GET streams), `_idle` is set while there are none.
        self.draining = False
        self._calls = 0
        self._idle = anyio.Event()
        self._idle.set()

    # ------------------------------------------------------------------ audit
    async def _audit(self, event: str, scope: Scope, **fields: Any) -> None:
        headers = _headers(scope)
        client = scope.get("client")

        await run_db(
            self.audit.record_alone,
            self.engine,
            event,
            client_address=f"{client[0]}" if client else None,
            user_agent=headers.get("user-agent"),
            **fields,
        )

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if self.draining:
            await _reply(send, 503, "the server is shutting down; try again once it is back")
            return
        try:
            await self._handle(scope, receive, send)
        except StoreUnavailable as exc:
            # Only before the SDK took the request over: afterwards the response has begun.
            await _reply(send, exc.status, exc.message, extra=_retry_after(exc))

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
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
                scope, "auth.failed", outcome="401", project_id=pid or None, reason=exc.message
            )
            await _reply(send, 401, exc.message, extra={"www-authenticate": 'Bearer realm="steamharness"'})
            return
        try:
            if missing is not None:
                raise missing
            principal.require_run(pid)
            target = parse_target((query.get("target") or [None])[0])
            config = chosen_config((query.get("config") or [None])[0], "config")
        except NotFound as exc:
            await _reply(send, 404, exc.message)
            return
        except Forbidden as exc:
            await self._audit(
                "auth.denied",
                scope,
                actor=principal.actor,
                project_id=pid,
                outcome="403",
                details={"reason": exc.message},
            )
            await _reply(send, 403, exc.message)
            return
        except (BadTarget, ConfigurationRefused) as exc:
            await _reply(send, 400, exc.message)
            return

        version = headers.get("mcp-protocol-version")
        session_id = headers.get("mcp-session-id")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._modern(scope, receive, send, principal, pid, target, config)
        elif session_id is not None:
            await self._in_session(scope, receive, send, principal, pid, target, config, session_id)
        else:
            await self._opening(scope, receive, send, principal, pid, target, config)

    # ------------------------------------------------------------------ the three paths
    async def _modern(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        pid: str,
        target: Target,
        config: str | None,
    ) -> None:
        resolved = await self._resolve_or_reply(send, pid, target)
        if resolved is None:
            return
        await self._forward(scope, receive, send, self._binding(scope, principal, resolved, None, config))

    async def _in_session(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        pid: str,
        target: Target,
        config: str | None,
        session_id: str,
    ) -> None:
        entry = self.sessions.get(session_id)
        if entry is None:
            await _reply(send, 404, "Session not found")
            return
        bound = (entry.fingerprint, entry.project_id, entry.target, entry.config)
        if bound != (principal.fingerprint, pid, target.label, config):
            await self._audit(
                "session.denied",
                scope,
                actor=principal.actor,
                project_id=pid,
                target=target.label,
                session_id=session_id,
                outcome="403",
            )
            await _reply(
                send, 403, "this session belongs to another credential, project, target or configuration"
            )
            return
        counted = scope["method"] != "GET"
        entry.in_flight += 1
        entry.calls += counted
        try:
            await self._touch(session_id, entry, headers=_headers(scope))
            status = await self._forward(scope, receive, send, entry.binding)
        finally:
            entry.in_flight -= 1
            entry.calls -= counted
            entry.last_active = time.monotonic()
        if scope["method"] == "DELETE" and status is not None and status < 300:
            await self._forget(session_id, "deleted")
        elif status == 404:
            await self._forget(session_id, "expired")

    async def _opening(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        pid: str,
        target: Target,
        config: str | None,
    ) -> None:
        if scope["method"] != "POST":
            await self._forward(scope, receive, send, None)  # the SDK answers 400/405
            return
        resolved = await self._resolve_or_reply(send, pid, target)
        if resolved is None:
            return
        fingerprint = principal.fingerprint
        cap = self.max_sessions_admin_key if principal.kind == "admin" else self.max_sessions_per_key
        held = sum(1 for e in self.sessions.values() if e.fingerprint == fingerprint)
        if held + self._opens[fingerprint] >= cap:
            await self._refuse_session(scope, send, principal, pid, target, cap)
            return

        refused = False
        opening = True
        body = bytearray()

        async def peeking_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) < CLIENT_INFO_MAX_BYTES:
                body.extend(message.get("body", b"")[: CLIENT_INFO_MAX_BYTES - len(body)])
            return message

        def opened() -> None:
            # The place this open held under the cap passes to its session (or is freed).
            nonlocal opening
            if opening:
                opening = False
                self._opens[fingerprint] -= 1
                if self._opens[fingerprint] <= 0:
                    del self._opens[fingerprint]

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
                    opened()  # `_remember` lists the session before its first await
                    try:
                        await self._remember(
                            scope, sid, principal, pid, target, resolved, config, client_info(bytes(body))
                        )
                    except StoreUnavailable as exc:
                        # Unrecorded, the session is unknown to us (404 if used) and the
                        # SDK reaps it when idle.
                        self.sessions.pop(sid, None)
                        refused = True
                        await _reply(send, exc.status, exc.message, extra=_retry_after(exc))
                        return
            await send(message)

        binding = self._binding(scope, principal, resolved, None, config)
        self._opens[fingerprint] += 1
        try:
            await self._forward(scope, peeking_receive, bind_then_send, binding)
        finally:
            opened()

    async def _refuse_session(
        self, scope: Scope, send: Send, principal: Principal, pid: str, target: Target, cap: int
    ) -> None:
        which = "the server admin key" if principal.kind == "admin" else "this API key"
        setting = "max_sessions_admin_key" if principal.kind == "admin" else "max_sessions_per_key"
        message = (
            f"{which} already has {cap} open MCP sessions, its limit (STEAMHARNESS_{setting.upper()}). "
            "End a session you no longer use with an HTTP DELETE carrying its Mcp-Session-Id, or wait: "
            f"a session closes after {self.idle_timeout:g} s without requests."
        )
        await self._audit(
            "session.refused",
            scope,
            actor=principal.actor,
            project_id=pid,
            target=target.label,
            outcome="429",
            details={"reason": "session_limit", "limit": cap},
        )
        await _reply(send, 429, message)

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

        if scope.get("method") == "POST" and _is_json(scope):
            body, receive = await _whole_body(receive)
            if body is None:
                return None  # the client went away before its body arrived
            refusal = envelope.check_body(body)
            if refusal is not None:
                await _reply(tracking_send, 400, refusal.message, document=refusal.document())
                return status

        token = current_binding.set(binding) if binding is not None else None
        counted = scope.get("method") != "GET"
        if counted:
            self._calls += 1
            if self._idle.is_set():
                self._idle = anyio.Event()
        try:
            await self.manager.handle_request(scope, receive, jsonrpc_errors(tracking_send))
        finally:
            if counted:
                self._calls -= 1
                if self._calls == 0:
                    self._idle.set()
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
        self,
        scope: Scope,
        principal: Principal,
        resolved: Resolved,
        session_id: str | None,
        config: str | None,
    ) -> Binding:
        pid = resolved.project.id
        base = self.public_url or _base_url(scope)
        hint = (
            f"Answer it in the browser at {base}/conversations, or POST the answer to "
            f"{base}/api/interactions/{{interactionId}}/answer; then read GET {base}/api/runs/{{runId}}."
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
            base_url=base,
            preflight=lambda: self._preflight(resolved),
            relations=ServerRelations(
                registry=self.registry,
                project=resolved.project,
                draft=resolved.target.kind == "draft",
                require_run=lambda project_id: self.auth.current(principal).require_run(project_id),
                env_for=lambda root: worker_env(root, self.env),
                limits_for=self._limits,
            ),
            config_name=config,
            account_name=principal.actor.removeprefix("user:") if principal.account_id is not None else None,
        )

    def _preflight(self, resolved: Resolved) -> RunLimits:
        pid = resolved.project.id
        if resolved.target.kind == "draft" and self.registry.draft_revision(pid) != resolved.revision:
            raise RunRefused(
                "draft_changed",
                "The project's draft changed since this session started; reconnect to use the new draft.",
            )
        return self._limits(self.registry.record(pid))

    def _limits(self, record: ProjectRecord) -> RunLimits:
        return RunLimits(
            gate_open=record.run_gate_open,
            max_running=record.max_running if record.max_running is not None else self.default_max_running,
            max_queued=record.max_queued if record.max_queued is not None else self.default_max_queued,
        )

    async def _remember(
        self,
        scope: Scope,
        sid: str,
        principal: Principal,
        pid: str,
        target: Target,
        resolved: Resolved,
        config: str | None,
        client: tuple[str | None, str | None, str | None] = (None, None, None),
    ) -> None:
        binding = self._binding(scope, principal, resolved, sid, config)
        self.sessions[sid] = SessionEntry(
            binding=binding,
            fingerprint=principal.fingerprint,
            project_id=pid,
            target=target.label,
            resolved=resolved,
            config=config,
        )
        row = McpSession(
            id=sid,
            credential=principal.fingerprint,
            actor=principal.actor,
            project_id=pid,
            target=target.label,
            resolved=resolved.key,
            key_id=principal.key_id,
            client_name=client[0],
            client_version=client[1],
            protocol_version=client[2],
            last_activity_at=utcnow(),
            replica_id=self.runs.replica_id,
        )
        peer = scope.get("client")
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
                client_address=peer[0] if peer else None,
                user_agent=ua,
                details={"config": config} if config is not None else None,
            )

        await run_db(session_store.add_session, self.engine, row=row, audit=audit)

    async def _forget(self, sid: str, reason: str) -> None:
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

        await run_db(session_store.close_session, self.engine, session_id=sid, reason=reason, audit=audit)

    async def _touch(self, sid: str, entry: SessionEntry, *, headers: dict[str, str]) -> None:
        """Record the session's last activity, at most once per `touch_interval`; best
        effort (a busy database skips it until a later request)."""
        now = time.monotonic()
        if now - entry.touched < self.touch_interval:
            return
        entry.touched = now
        try:
            await run_db(
                session_store.touch_session,
                self.engine,
                session_id=sid,
                now=utcnow(),
                protocol_version=headers.get("mcp-protocol-version"),
            )
        except StoreUnavailable:
            pass  # only a last-seen time: a locked or full database skips it
        except OperationalError as exc:
            if not is_busy_error(exc):
                raise

    # ------------------------------------------------------------------ ending by order
    def active_calls(self, sid: str) -> int | None:
        """Requests under way in this session (the GET stream aside); None: this process
        does not hold the session."""
        entry = self.sessions.get(sid)
        return entry.calls if entry is not None else None

    async def end_session(self, sid: str, *, actor: str, reason: str) -> bool:
        """End a session this gateway holds: cancel its runs (closing their pending
        questions), terminate its transport, record it closed with `session.terminated`.
        False: this gateway does not hold it."""
        why = "an administrator terminated it" if reason == "terminated" else "its API key was revoked"
        entry = await self._drop(sid, f"The MCP session ended: {why}.")
        if entry is None:
            return False

        def audit(s: Session) -> None:
            self.audit.record(
                s,
                "session.terminated",
                actor=actor,
                project_id=entry.project_id,
                target=entry.target,
                version=entry.resolved.key,
                session_id=sid,
                outcome=reason,
                details={"sessionActor": entry.binding.actor},
            )

        with anyio.CancelScope(shield=True):
            await run_db(session_store.close_session, self.engine, session_id=sid, reason=reason, audit=audit)
        return True

    async def _drop(self, sid: str, why: str) -> SessionEntry | None:
        """Forget a session (its requests get 404 from here), cancel its runs and end its
        transport; the row is left to the caller."""
        entry = self.sessions.pop(sid, None)
        if entry is None:
            return None
        with anyio.CancelScope(shield=True):
            for run_id in self.runs.live_runs_of_session(sid):
                await self.runs.cancel(run_id, reason=why)
            transport = getattr(self.manager, "_server_instances", {}).get(sid)
            if transport is not None and not transport.is_terminated:
                await transport.terminate()
        return entry

    async def follow_orders(self) -> None:
        """Act on `session_orders` from the hub for as long as the app runs."""
        while True:
            with self.hub.subscribe(session_orders.TOPIC) as sub:
                async for event in sub:
                    if event.kind == session_orders.ORDER_END:
                        await self._obey(event)
            # The subscription lagged behind the hub and ended: subscribe again.

    async def _obey(self, event: Event) -> None:
        actor = str(event.data.get("actor") or "admin")
        reason = str(event.data.get("reason") or "terminated")
        order_id = event.data.get("orderId")
        for sid in event.data.get("sessionIds") or []:
            try:
                ended = await self.end_session(str(sid), actor=actor, reason=reason)
            except Exception:
                log.exception("ending MCP session %s failed", sid)
                ended = False
            kind = session_orders.ENDED if ended else session_orders.NOT_HELD
            self.hub.publish(session_orders.TOPIC, kind, orderId=order_id, sessionId=str(sid))

    async def watch_store(
        self, interval: float = 2.0, sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    ) -> None:
        """End sessions another process ended in the store: a row closed elsewhere, or a key
        revoked from the CLI."""
        while True:
            await sleep(interval)
            if not self.sessions:
                continue
            try:
                found = await run_db(session_store.ended_among, self.engine, session_ids=list(self.sessions))
            except DatabaseBusy:
                continue
            for sid, reason in found.items():
                entry = self.sessions.get(sid)
                if entry is None:
                    continue
                if reason == "revoked":
                    await self.end_session(sid, actor=entry.binding.actor or "admin", reason="revoked")
                else:  # already recorded closed elsewhere: end it here, recorded once
                    await self._drop(sid, "The MCP session ended.")

    def run_background(self, tg: TaskGroup) -> None:
        """Start the gateway's long-lived tasks: the idle reaper, the order follower and
        the store watcher."""
        tg.start_soon(self.reap)
        tg.start_soon(self.follow_orders)
        tg.start_soon(self.watch_store)

    # ------------------------------------------------------------------ lifecycle
    async def reap(self, sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        """Forget sessions the SDK has reaped for idleness (same rule: none in flight)."""
        interval = max(0.2, min(self.idle_timeout / 4, 10.0))
        while True:
            await sleep(interval)
            now = time.monotonic()
            for sid, entry in list(self.sessions.items()):
                if entry.in_flight == 0 and now - entry.last_active > self.idle_timeout + 1:
                    await self._forget(sid, "expired")

    async def close_all(self, reason: str) -> None:
        for sid in list(self.sessions):
            await self._forget(sid, reason)

    async def calls_done(self) -> None:
        """Wait until no request other than a GET stream is being served."""
        while self._calls:
            await self._idle.wait()

    async def end_sessions(self, reason: str) -> None:
        """End every session: the SDK closes their streams (GET included) cleanly, then the
        sessions are recorded closed."""
        # The SDK offers no public way to end a session server-side; its transports do.
        transports = getattr(self.manager, "_server_instances", {})
        for sid in list(self.sessions):
            transport = transports.get(sid)
            if transport is not None and not transport.is_terminated:
                await transport.terminate()
        await self.close_all(reason)


def _base_url(scope: Scope) -> str:
    headers = _headers(scope)
    host = headers.get("host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"

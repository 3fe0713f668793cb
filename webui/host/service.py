"""The host as an MCP client: conversations, connections to the configured
servers, their tool calls, and their requests for human input.

Each connection runs in a task of its own (the SDK client's context must be entered and
left by one task); tool calls from request handlers use it concurrently. A server's form
or URL request becomes a stored Interaction (origin "host"), shown in the conversation
view and answered through `InteractionService.answer`; the callback waits for that
answer, at most the expiry (five minutes by default), then tells the server `cancel`.
Client lifecycle: by default a client (and its process, for stdio servers) is built for
one tool call and closed when the call ends; listing a server's tools uses a client of its
own, closed once the list is read. Servers in `mcp.host_owned_servers` keep one client per
conversation across calls, closed by host shutdown, `disconnect`, closing the conversation,
or a changed source (it is then rebuilt for the next call; calls still running on the old
client finish on it first). A call finishing or a browser going away closes nothing.

Captures: every client is built from the current configuration and each call row records
the capture (source file and digest) of the client it ran on. New work never fails because
a file changed; `mcp_source_changed` is kept for a source that changes between reading the
configuration and building the client (`check_capture` before use).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import run_db
from webui.errors import NotFound, SteamharnessError
from webui.host.config import (
    Capture,
    HostConfig,
    McpSourceChanged,
    ServerConfig,
    capture,
    check_capture,
    describe_command,
    load_host_config,
    resolve_env,
    resolve_headers,
)
from webui.host.forms import unsupported_reasons
from webui.host.unprivileged import ENV_VARIABLE
from webui.interactions.service import Answer, InteractionService
from webui.runs.isolation import WorkerUser
from webui.store import host as host_store
from webui.store.models import HostCall, HostConversation, Interaction, utcnow

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 60.0
CALL_SLACK = 60.0  # a call may wait for a person: expiry plus this


class HostError(SteamharnessError):
    code = "host_error"
    status = 502


@dataclass(eq=False)
class Connection:
    # (conversation id, server id, "" for a kept client or a per-call client's own tag)
    key: tuple[str, str, str]
    server: ServerConfig
    captured: Capture
    conversation_id: str
    kept: bool = False
    state: str = "connecting"  # connecting | ready | failed | closed
    error: str | None = None
    client: Client | None = None
    tools: list[types.Tool] = field(default_factory=list)
    # call id → conversation id of the tool calls in flight on this client
    calls: dict[str, str] = field(default_factory=dict)
    # the requests (interaction ids) this client's server is waiting on an answer to
    requests: set[str] = field(default_factory=set)
    retired: bool = False  # its source changed: closed once its running calls end
    source_changed: bool = False  # the file changed between capture and construction
    ready: anyio.Event = field(default_factory=anyio.Event)
    closing: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class Listing:
    """A per-call server's tools as its last listing client saw them (that client is closed)."""

    captured: Capture
    tools: list[types.Tool]
    state: str = "ready"
    error: str | None = None
    kept: bool = False


ServerState = Connection | Listing


class HostService:
    def __init__(
        self,
        *,
        root: Path,
        engine: Engine,
        interactions: InteractionService,
        audit: AuditLog,
        expiry_seconds: float,
        log_dir: Path,
        environ: Mapping[str, str] | None = None,
        run_as: WorkerUser | None = None,
    ) -> None:
        """`run_as`: the user stdio servers run as (the server being root), each with a
        private home of its own; None runs them as the server's own user."""
        self.run_as = run_as
        self._homes: str | None = None
        self.root = root
        self.engine = engine
        self.interactions = interactions
        self.audit = audit
        self.expiry = expiry_seconds
        self.log_dir = log_dir
        self.environ = environ if environ is not None else os.environ
        self._tg: TaskGroup | None = None
        self._connections: dict[tuple[str, str, str], Connection] = {}
        self._retired: set[Connection] = set()  # kept clients replaced, closing after their calls
        self._listings: dict[tuple[str, str], Listing] = {}
        self._waiting: dict[str, anyio.Event] = {}
        self._answers: dict[str, Answer] = {}
        interactions.on_answer(self._on_answer)

    # ------------------------------------------------------------------ lifecycle
    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[HostService]:
        await run_db(self._recover)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                try:
                    yield self
                finally:
                    await self.close_all("shutdown")
                    tg.cancel_scope.cancel()
                    self._tg = None
        finally:
            if self._homes is not None:  # every server process is gone by now
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(shutil.rmtree, self._homes, True)
                self._homes = None

    def _recover(self) -> None:
        """Connections live in one process: calls and requests a previous process left open
        can never finish. Record them as ended, with the reason."""
        stale = host_store.recover(self.engine, error="the host restarted during the call")
        for interaction_id in stale:
            self.interactions.close(interaction_id, "the host restarted")

    async def close_all(self, reason: str) -> None:
        for conn in [*self._connections.values(), *self._retired]:
            await self._close(conn, reason)

    # ------------------------------------------------------------------ config and conversations
    def config(self) -> HostConfig:
        return load_host_config(self.root)

    def create_conversation(
        self,
        *,
        account_id: int,
        title: str,
        selection: list[str] | None,
        actor: str,
        agent: str | None = None,
    ) -> HostConversation:
        """The selection is resolved now and kept exactly (null inherits the defaults now).

        With `agent`, the agent file's `mcp_servers` decides instead of `selection`; later edits
        to that file do not change the stored selection."""
        config = self.config()
        chosen = config.agent_selection(agent) if agent is not None else config.select(selection)
        row = HostConversation(
            id=f"conv_{secrets.token_hex(6)}",
            account_id=account_id,
            title=title[:200] or "Conversation",
            selection=chosen,
        )

        def audit(s: Session) -> None:
            self.audit.record(
                s,
                AuditName.HOST_CONVERSATION_CREATED,
                actor=actor,
                outcome="ok",
                source="host",
                details={"conversationId": row.id, "servers": chosen} | ({"agent": agent} if agent else {}),
            )

        return host_store.add_conversation(self.engine, row=row, audit=audit)

    def conversation(self, conversation_id: str) -> HostConversation:
        row = host_store.get_conversation(self.engine, conversation_id=conversation_id)
        if row is None:
            raise NotFound(f"conversation {conversation_id!r} not found")
        return row

    def conversations(self, account_id: int | None) -> list[HostConversation]:
        return host_store.list_conversations(self.engine, account_id=account_id)

    def calls(self, conversation_id: str) -> list[HostCall]:
        return host_store.list_calls(self.engine, conversation_id=conversation_id)

    def connection_state(self, conversation_id: str, server_id: str) -> ServerState | None:
        """The conversation's kept client for the server, else the last tool listing of a
        per-call server; read from memory only: page renders must not re-read the config files."""
        return self._connections.get((conversation_id, server_id, "")) or self._listings.get(
            (conversation_id, server_id)
        )

    def kept_clients(self, conversation_id: str) -> list[Connection]:
        """The conversation's kept (host-owned) clients that are open or opening."""
        return [c for k, c in self._connections.items() if k[0] == conversation_id and c.kept]

    async def close_conversation(self, conversation_id: str) -> None:
        for key, conn in list(self._connections.items()):
            if key[0] == conversation_id:
                await self._close(conn, "conversation closed")
        for conn in [c for c in self._retired if c.conversation_id == conversation_id]:
            await self._close(conn, "conversation closed")
        for key in [k for k in self._listings if k[0] == conversation_id]:
            del self._listings[key]
        await run_db(host_store.close_conversation, self.engine, conversation_id=conversation_id)

    async def disconnect(self, conversation_id: str, server_id: str | None, *, actor: str) -> int:
        """Close the conversation's kept client for `server_id` (None: all of them); what ran on
        it is not replayed. Returns how many were closed; each close is audited with `actor`."""
        closed = 0
        for conn in self.kept_clients(conversation_id):
            if server_id is None or conn.server.id == server_id:
                await self._close(conn, "disconnected", actor=actor)
                closed += 1
        return closed

    # ------------------------------------------------------------------ connections
    async def connect(self, conversation_id: str, server_id: str) -> ServerState:
        """A kept server: its client for this conversation (rebuilt if its source changed).
        A per-call server: a client that lists the tools and is closed again."""
        kept, conn = await self._client_for(conversation_id, server_id, tag="list")
        if kept:
            return conn
        try:
            return self._listings[(conversation_id, server_id)]
        finally:
            await self._close(conn, "tools listed")

    async def _client_for(self, conversation_id: str, server_id: str, *, tag: str) -> tuple[bool, Connection]:
        """(kept?, a ready client) built from the current configuration: the conversation's
        kept client for a host-owned server, else a new one the caller must close. New work
        never fails on an edit: a file edited while its client was being built is read again,
        once (a second change in that moment is reported as mcp_source_changed)."""
        try:
            return await self._open_client(conversation_id, server_id, tag=tag)
        except McpSourceChanged:
            return await self._open_client(conversation_id, server_id, tag=tag)

    async def _open_client(
        self, conversation_id: str, server_id: str, *, tag: str
    ) -> tuple[bool, Connection]:
        conv = await run_db(self.conversation, conversation_id)
        if server_id not in conv.selection:
            raise NotFound(f"server {server_id!r} is not selected in this conversation")
        config = await run_db(self.config)
        server = config.servers.get(server_id)
        if server is None:
            raise NotFound(f"server {server_id!r} is no longer configured")
        # Read before looking for a connection: nothing awaits between that and taking it.
        captured = capture(server)
        kept = server_id in config.host_owned
        key = (conversation_id, server_id, "" if kept else f"{tag}:{secrets.token_hex(4)}")
        conn = self._connections.get(key)
        if conn is not None and conn.state in ("connecting", "ready"):
            if conn.captured == captured:
                with anyio.fail_after(CONNECT_TIMEOUT):
                    await conn.ready.wait()
                return kept, self._ready_or_raise(conn)
            # a changed binding: new work gets a client built from the current file
            await self._retire(conn)
        conn = Connection(key, server, captured, conversation_id, kept=kept)
        self._connections[key] = conn
        if self._tg is None:
            raise HostError("the host is not running")
        self._tg.start_soon(self._run, conn, config.protocol(server_id))
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                await conn.ready.wait()
            self._ready_or_raise(conn)
            # the tools stay listed (and callable) after a client closes: a call builds a new one
            self._listings[(conversation_id, server_id)] = Listing(captured, list(conn.tools), kept=kept)
            return kept, conn
        except BaseException:
            if not kept:
                with anyio.CancelScope(shield=True):
                    await self._close(conn, "not connected")
            raise

    async def _retire(self, conn: Connection) -> None:
        """Take a kept client whose source changed out of use; close it now unless calls are
        still running on it (the last one closes it)."""
        if self._connections.get(conn.key) is conn:
            del self._connections[conn.key]
        if conn.calls:
            conn.retired = True
            self._retired.add(conn)
        else:
            await self._close(conn, "source changed")

    @staticmethod
    def _ready_or_raise(conn: Connection) -> Connection:
        if conn.state != "ready" and conn.source_changed:
            raise McpSourceChanged(conn.error or f"{conn.server.id}: its source changed")
        if conn.state != "ready":
            raise HostError(f"{conn.server.id}: {conn.error or 'not connected'}")
        return conn

    async def _run(self, conn: Connection, mode: str) -> None:
        server = conn.server
        try:
            # the source must be what was captured: mcp_source_changed
            await run_db(check_capture, conn.captured)
            transport = self._transport(server)
            await self._record(
                AuditName.HOST_SERVER_CONNECTING, conn, details={"command": describe_command(server)}
            )
            async with Client(
                transport,
                mode=mode,  # pyright: ignore[reportArgumentType]
                elicitation_callback=self._elicitation_callback(conn),
                read_timeout_seconds=self.expiry + CALL_SLACK,
            ) as client:
                conn.client = client
                conn.tools = list((await client.list_tools()).tools)
                conn.state = "ready"
                conn.ready.set()
                await conn.closing.wait()
        except Exception as exc:  # a server we cannot reach must not take the host down
            conn.source_changed = isinstance(exc, McpSourceChanged)
            conn.error = _describe(exc)
            log.warning("MCP server %s: %s", server.id, conn.error)
            await self._record(
                AuditName.HOST_SERVER_FAILED, conn, outcome="failed", details={"error": conn.error}
            )
        finally:
            conn.state = "failed" if conn.error else "closed"
            conn.client = None
            conn.ready.set()
            conn.done.set()
            if self._connections.get(conn.key) is conn:
                del self._connections[conn.key]
            self._retired.discard(conn)

    def _transport(self, server: ServerConfig) -> Any:
        if server.transport == "stdio":
            assert server.command is not None
            env = resolve_env(server, self.environ)
            if self.run_as is None:
                params = StdioServerParameters(command=server.command, args=list(server.args), env=env)
            else:
                params = self._unprivileged(server, env)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            errlog = (self.log_dir / f"{server.id}.stderr.log").open("a", encoding="utf-8")
            return _closing_stdio(params, errlog)
        assert server.url is not None
        headers = resolve_headers(server, self.environ)
        return _closing_http(server.url, _http_client(server.url, headers, self.expiry))

    def _unprivileged(self, server: ServerConfig, env: dict[str, str]) -> StdioServerParameters:
        """The server's command behind the launcher that drops to `run_as`. Its home is a
        folder of its own that only it can enter (programs like npx keep caches there)."""
        assert self.run_as is not None and server.command is not None
        user = self.run_as
        if self._homes is None:
            self._homes = tempfile.mkdtemp(prefix="shh-homes-")
            os.chmod(self._homes, 0o711)  # enter your own, list nobody's
        home = os.path.join(self._homes, server.id)
        with contextlib.suppress(FileExistsError):
            os.mkdir(home, 0o700)
        os.chown(home, user.uid, user.gid, follow_symlinks=False)
        launch = {"HOME": home, "USER": user.name, "LOGNAME": user.name, **env}
        return StdioServerParameters(
            command=sys.executable,
            args=[
                "-I",  # none of the environment's PYTHON* variables, no user site, no cwd import
                "-m",
                "webui.host.unprivileged",
                str(user.uid),
                str(user.gid),
                home,
                server.command,
                *server.args,
            ],
            env={ENV_VARIABLE: json.dumps(launch)},
        )

    async def _close(self, conn: Connection, reason: str, *, actor: str | None = None) -> None:
        if conn.closing.is_set():  # closed already (shutdown, then its call's own close)
            with anyio.move_on_after(10):
                await conn.done.wait()
            return
        for ia_id in list(conn.requests):  # this client's own, not another call's client's
            event = self._waiting.get(ia_id)
            if event is not None:
                await run_db(self.interactions.close, ia_id, reason)
                event.set()
        if self._connections.get(conn.key) is conn:
            del self._connections[conn.key]
        self._retired.discard(conn)
        conn.closing.set()
        with anyio.move_on_after(10):
            await conn.done.wait()
        await self._record(AuditName.HOST_SERVER_CLOSED, conn, outcome=reason, actor=actor)

    # ------------------------------------------------------------------ tool calls
    async def call_tool(
        self,
        conversation_id: str,
        server_id: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        actor: str,
        call_id: str | None = None,
    ) -> HostCall:
        """Call a tool, recording the call as a row (`call_id` names it, if the caller chose)
        with the capture of the client it runs on; a per-call client is closed when it ends."""
        kept, conn = await self._client_for(conversation_id, server_id, tag="call")
        try:
            return await self._call_on(conn, conversation_id, server_id, tool, arguments, actor, call_id)
        finally:
            if not kept or (conn.retired and not conn.calls):
                with anyio.CancelScope(shield=True):
                    await self._close(conn, "call ended" if not kept else "source changed")

    async def _call_on(
        self,
        conn: Connection,
        conversation_id: str,
        server_id: str,
        tool: str,
        arguments: dict[str, Any],
        actor: str,
        call_id: str | None,
    ) -> HostCall:
        row = HostCall(
            id=call_id or f"call_{secrets.token_hex(6)}",
            conversation_id=conversation_id,
            server_id=server_id,
            tool=tool,
            arguments=arguments,
            actor=actor,
            source=str(conn.captured.source),
            source_digest=conn.captured.digest,
        )
        await run_db(
            self._save_call, row, AuditName.HOST_TOOL_CALLED, conversation_id, server_id, tool, actor
        )
        assert conn.client is not None
        conn.calls[row.id] = conversation_id
        try:
            result = await conn.client.call_tool(tool, arguments)
            row.status = "error" if result.is_error else "success"
            row.result = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        except MCPError as exc:
            row.status, row.error = "failed", exc.message
        except Exception as exc:
            row.status, row.error = "failed", _describe(exc)
        except BaseException:  # cancelled (the caller went away, or shutdown): never left "running"
            row.status, row.error = "failed", "the call was cancelled before the server answered"
            row.finished_at = utcnow()
            with anyio.CancelScope(shield=True):
                await run_db(
                    self._save_call,
                    row,
                    AuditName.HOST_TOOL_FINISHED,
                    conversation_id,
                    server_id,
                    tool,
                    actor,
                )
            raise
        finally:
            conn.calls.pop(row.id, None)
        row.finished_at = utcnow()
        await run_db(
            self._save_call, row, AuditName.HOST_TOOL_FINISHED, conversation_id, server_id, tool, actor
        )
        return row

    def _save_call(
        self, row: HostCall, event: AuditName, conversation_id: str, server_id: str, tool: str, actor: str
    ) -> None:
        """The call row, and its audit event (started, or finished with its status)."""

        def audit(s: Session) -> None:
            self.audit.record(
                s,
                event,
                actor=actor,
                tool=tool,
                outcome="started" if event == AuditName.HOST_TOOL_CALLED else row.status,
                source="host",
                details={"conversationId": conversation_id, "serverId": server_id, "callId": row.id},
            )

        host_store.save_call(self.engine, row=row, audit=audit)

    # ------------------------------------------------------------------ human input
    def _elicitation_callback(self, conn: Connection) -> Any:
        async def on_elicit(
            ctx: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            return await self._elicit(conn, params)

        return on_elicit

    async def _elicit(self, conn: Connection, params: types.ElicitRequestParams) -> types.ElicitResult:
        server = conn.server
        title = f"{server.name} asks"
        conversation_id = conn.conversation_id
        # The call that caused it: the conversation's only call in flight on this client.
        in_flight = [cid for cid, conv in conn.calls.items() if conv == conversation_id]
        common: dict[str, Any] = {
            "run_id": None,
            "origin": "host",
            "server_id": server.id,
            "conversation_id": conversation_id,
            "host_call_id": in_flight[0] if conversation_id and len(in_flight) == 1 else None,
            "title": title,
            "message": params.message,
        }
        if isinstance(params, types.ElicitRequestURLParams):
            if urlsplit(params.url).scheme not in ("https", "http"):
                await run_db(
                    self.interactions.create,
                    kind="url",
                    requested_schema={},
                    fields=[],
                    blockers=["only http(s) links are opened"],
                    status="closed",
                    close_reason="refused: not an http(s) link",
                    **common,
                )
                raise MCPError(INVALID_PARAMS, "the host opens only http(s) URLs")
            ia = await run_db(
                self.interactions.create,
                kind="url",
                requested_schema={"type": "object", "properties": {}},
                fields=[],
                blockers=[],
                url=params.url,
                expires_at=utcnow() + timedelta(seconds=self.expiry),
                **common,
            )
        else:
            reasons = unsupported_reasons(params.requested_schema)
            if reasons:
                await run_db(
                    self.interactions.create,
                    kind="form",
                    requested_schema=dict(params.requested_schema),
                    fields=[],
                    blockers=reasons,
                    status="closed",
                    close_reason="refused: " + "; ".join(reasons),
                    **common,
                )
                raise MCPError(INVALID_PARAMS, "the host refused this form: " + "; ".join(reasons))
            ia = await run_db(
                self.interactions.create,
                kind="form",
                requested_schema=dict(params.requested_schema),
                fields=[],
                blockers=[],
                expires_at=utcnow() + timedelta(seconds=self.expiry),
                **common,
            )
        event = anyio.Event()
        self._waiting[ia.id] = event
        conn.requests.add(ia.id)
        try:
            if ia.id not in self._answers:  # an answer may arrive before we start waiting
                with anyio.move_on_after(self.expiry):
                    await event.wait()
            answer = self._answers.pop(ia.id, None)
            if answer is None:
                # no-op if it was closed another way
                await run_db(self.interactions.close, ia.id, "expired")
                return types.ElicitResult(action="cancel")
            content = answer.content if answer.action == "accept" and ia.kind == "form" else None
            return types.ElicitResult(action=answer.action, content=content)  # pyright: ignore[reportArgumentType]
        finally:
            self._waiting.pop(ia.id, None)
            self._answers.pop(ia.id, None)
            conn.requests.discard(ia.id)
            with anyio.CancelScope(shield=True):
                if (await run_db(self.interactions.get, ia.id)).status == "pending":
                    await run_db(self.interactions.close, ia.id, "connection closed")

    async def _on_answer(self, row: Interaction, answer: Answer) -> None:
        if answer.repeated or row.origin != "host":
            return
        self._answers[row.id] = answer  # taken by the call waiting for it (or arriving to)
        event = self._waiting.get(row.id)
        if event is not None:
            event.set()

    # ------------------------------------------------------------------ audit
    async def _record(
        self,
        event: AuditName,
        conn: Connection,
        *,
        outcome: str = "ok",
        details: dict[str, Any] | None = None,
        actor: str | None = None,
    ) -> None:
        await run_db(
            self.audit.record_alone,
            self.engine,
            event,
            actor=actor,
            outcome=outcome,
            source="host",
            details={"serverId": conn.server.id, "conversationId": conn.conversation_id, **(details or {})},
        )


@contextlib.asynccontextmanager
async def _closing_stdio(params: StdioServerParameters, errlog: Any) -> AsyncIterator[Any]:
    try:
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
    finally:
        errlog.close()


@contextlib.asynccontextmanager
async def _closing_http(url: str, client: httpx2.AsyncClient) -> AsyncIterator[Any]:
    """We pass our own HTTP client (headers, timeouts, redirect guard), so we close it."""
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def _http_client(url: str, headers: dict[str, str], expiry: float) -> httpx2.AsyncClient:
    """Configured headers go to the configured origin only, and never over a downgrade."""
    base = urlsplit(url)
    origin = (base.scheme, base.hostname, base.port)

    async def guard(request: httpx2.Request) -> None:
        target = (request.url.scheme, request.url.host, request.url.port)
        if base.scheme == "https" and request.url.scheme != "https":
            raise HostError(f"refused a redirect from HTTPS to {request.url.scheme}")
        if target != origin:
            for name in headers:
                request.headers.pop(name, None)

    return httpx2.AsyncClient(
        headers=headers,
        follow_redirects=True,
        timeout=httpx2.Timeout(30, read=expiry + CALL_SLACK),
        event_hooks={"request": [guard]},
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SteamharnessError):
        return exc.message
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner)
    if isinstance(exc, OSError):
        return f"could not start or reach the server ({exc.strerror or type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"[:300]

"""The host as an MCP client: conversations, connections to the configured
servers and their tool calls.

Each connection runs in a task of its own (the SDK client's context must be entered and
left by one task); tool calls from request handlers use it concurrently. A server's
requests for human input are stored and answered through `webui.host.elicitation` (they
wait at most the expiry, five minutes by default); the transport that reaches a server is
built by `webui.host.transport`.
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
import logging
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp import Client
from mcp.shared.exceptions import MCPError
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import run_db
from webui.errors import NotFound
from webui.host.config import (
    HostConfig,
    McpSourceChanged,
    capture,
    check_capture,
    describe_command,
    load_host_config,
)
from webui.host.connection import (
    CALL_SLACK,
    CONNECT_TIMEOUT,
    Connection,
    HostError,
    Listing,
    ServerState,
    describe,
    unchecked_results,
)
from webui.host.elicitation import Elicitations
from webui.host.transport import Launcher
from webui.interactions.service import InteractionService
from webui.runs.isolation import WorkerUser
from webui.store import host as host_store
from webui.store.models import HostCall, HostConversation, utcnow

log = logging.getLogger(__name__)


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
        self.root = root
        self.engine = engine
        self.interactions = interactions
        self.audit = audit
        self.expiry = expiry_seconds
        self.environ = environ if environ is not None else os.environ
        self.launcher = Launcher(log_dir=log_dir, expiry=expiry_seconds, run_as=run_as)
        self._tg: TaskGroup | None = None
        self._connections: dict[tuple[str, str, str], Connection] = {}
        self._retired: set[Connection] = set()  # kept clients replaced, closing after their calls
        self._listings: dict[tuple[str, str], Listing] = {}
        self._elicitations = Elicitations(interactions, expiry_seconds=expiry_seconds)

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
            await self.launcher.remove_homes()  # every server process is gone by now

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
            transport = self.launcher.transport(server, self.environ)
            await self._record(
                AuditName.HOST_SERVER_CONNECTING, conn, details={"command": describe_command(server)}
            )
            async with Client(
                transport,
                mode=mode,  # pyright: ignore[reportArgumentType]
                elicitation_callback=self._elicitations.callback(conn),
                read_timeout_seconds=self.expiry + CALL_SLACK,
            ) as client:
                unchecked_results(client)
                conn.client = client
                conn.tools = list((await client.list_tools()).tools)
                conn.state = "ready"
                conn.ready.set()
                await conn.closing.wait()
        except Exception as exc:  # a server we cannot reach must not take the host down
            conn.source_changed = isinstance(exc, McpSourceChanged)
            conn.error = describe(exc)
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

    async def _close(self, conn: Connection, reason: str, *, actor: str | None = None) -> None:
        if conn.closing.is_set():  # closed already (shutdown, then its call's own close)
            with anyio.move_on_after(10):
                await conn.done.wait()
            return
        await self._elicitations.end(conn, reason)
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
            row.status, row.error = "failed", describe(exc)
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

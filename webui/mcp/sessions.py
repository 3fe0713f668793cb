"""The MCP sessions this process holds (2025-11-25 sessions of the HTTP endpoint), and
ending sessions, wherever they are held.

`HeldSessions` is the gateway's binding table: each session id the SDK answered an
`initialize` with, bound to the credential, project, requested target and `config` it was
opened with, and its row in the store (created, touched at most once per
`touch_interval`, closed). A credential holds at most its cap of open sessions; opening
POSTs under way hold a place under it.

Sessions end by order (`webui.mcp.session_orders`, over the event hub): an administrator
terminating one, a key revocation (`end_by_order`). The process holding the session
cancels its runs (which closes their pending questions), terminates the SDK transport (the
client's next request gets 404, as for an expired session) and records it closed. A
watcher ends sessions whose row another process closed or whose key another process (the
CLI) revoked; a reaper forgets the sessions the SDK reaped for idleness.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session
from starlette.types import Scope

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.auth.keys import Principal
from webui.blocking import DatabaseBusy, is_busy_error, run_db
from webui.errors import StoreUnavailable
from webui.events import Event, EventHub
from webui.mcp import session_orders
from webui.mcp.binding import Binding, request_headers
from webui.projects.registry import Resolved
from webui.runs.service import RunService
from webui.store import sessions as session_store
from webui.store.models import McpSession, utcnow
from webui.workflows.targets import Target

log = logging.getLogger(__name__)


@dataclass
class SessionEntry:
    binding: Binding
    fingerprint: str
    project_id: str
    target: str  # as requested: `latest` stays `latest` even when it resolved to 1.2.3
    resolved: Resolved
    config: str | None  # `&config=NAME` as requested; None: the account's active one at each call
    # The protocol version the client asked for at initialize (the metrics' era).
    protocol_version: str | None = None
    in_flight: int = 0
    calls: int = 0  # requests under way other than the GET stream: the console's active calls
    last_active: float = field(default_factory=time.monotonic)
    touched: float = field(default_factory=time.monotonic)  # last-activity write


async def terminate_transport(manager: StreamableHTTPSessionManager, sid: str) -> None:
    """End the SDK's side of a session: its streams close (GET included), its in-flight
    handlers are cancelled and its id answers 404 from then on.

    The SDK (mcp 2.3) offers no public way to end a session server-side: only a client's
    DELETE does. Its transports do have a public `terminate()`, reached here through the
    manager's private `_server_instances`; this is the one place that reads it."""
    transport = getattr(manager, "_server_instances", {}).get(sid)
    if transport is not None and not transport.is_terminated:
        await transport.terminate()


def _terminated(
    audit: AuditLog,
    *,
    actor: str,
    reason: str,
    session_id: str,
    project_id: str,
    target: str,
    version: str,
    session_actor: str | None,
    held: bool = True,
) -> Callable[[Session], None]:
    """The `session.terminated` event, written with the row's close."""
    details: dict[str, object] = {"sessionActor": session_actor}
    if not held:
        details["held"] = False

    def write(s: Session) -> None:
        audit.record(
            s,
            AuditName.SESSION_TERMINATED,
            actor=actor,
            project_id=project_id,
            target=target,
            version=version,
            session_id=session_id,
            outcome=reason,
            details=details,
        )

    return write


class HeldSessions:
    def __init__(
        self,
        *,
        manager: StreamableHTTPSessionManager,
        runs: RunService,
        audit: AuditLog,
        hub: EventHub,
        idle_timeout: float,
        max_per_key: int = 32,
        max_admin_key: int = 128,
        touch_interval: float = 30.0,
    ) -> None:
        self.manager = manager
        self.runs = runs
        self.audit = audit
        self.engine = runs.engine
        self.hub = hub
        self.idle_timeout = idle_timeout
        self.max_per_key = max_per_key
        self.max_admin_key = max_admin_key
        self.touch_interval = touch_interval
        self._entries: dict[str, SessionEntry] = {}
        # Opening POSTs under way per credential: they hold a place under the session cap
        # until their session is bound (or they fail), so racing opens cannot overshoot it.
        self._opens: Counter[str] = Counter()

    def get(self, sid: str) -> SessionEntry | None:
        return self._entries.get(sid)

    def by_protocol_version(self) -> dict[str, int]:
        """How many sessions this process holds per protocol version (one the server does not
        speak counts as `_other`: the label stays bounded whatever clients send)."""
        counts: dict[str, int] = {}
        for entry in list(self._entries.values()):
            version = entry.protocol_version
            label = version if version in HANDSHAKE_PROTOCOL_VERSIONS else "_other"
            counts[label] = counts.get(label, 0) + 1
        return counts

    def __contains__(self, sid: object) -> bool:
        return sid in self._entries

    # ------------------------------------------------------------------ the cap
    def cap(self, principal: Principal) -> int:
        return self.max_admin_key if principal.kind == "admin" else self.max_per_key

    def full(self, principal: Principal) -> bool:
        """Whether the credential holds its cap of sessions, opening ones included."""
        fingerprint = principal.fingerprint
        held = sum(1 for e in self._entries.values() if e.fingerprint == fingerprint)
        return held + self._opens[fingerprint] >= self.cap(principal)

    def hold_place(self, principal: Principal) -> Callable[[], None]:
        """Hold a place under the cap for an opening POST; the function returned frees it
        (once: a second call does nothing) when it passes to its session or the open fails."""
        fingerprint = principal.fingerprint
        self._opens[fingerprint] += 1
        holding = True

        def free() -> None:
            nonlocal holding
            if holding:
                holding = False
                self._opens[fingerprint] -= 1
                if self._opens[fingerprint] <= 0:
                    del self._opens[fingerprint]

        return free

    # ------------------------------------------------------------------ the table and its rows
    async def remember(
        self,
        scope: Scope,
        sid: str,
        principal: Principal,
        target: Target,
        resolved: Resolved,
        config: str | None,
        binding: Binding,
        client: tuple[str | None, str | None, str | None] = (None, None, None),
    ) -> None:
        """Bind a new session (listed before the first await) and record its row; on
        StoreUnavailable it is unlisted again (the SDK reaps it when idle)."""
        pid = resolved.project.id
        self._entries[sid] = SessionEntry(
            binding=binding,
            fingerprint=principal.fingerprint,
            project_id=pid,
            target=target.label,
            resolved=resolved,
            config=config,
            protocol_version=client[2],
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
        ua = request_headers(scope).get("user-agent")

        def audit(s: Session) -> None:
            self.audit.record(
                s,
                AuditName.SESSION_CREATED,
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

        try:
            await run_db(session_store.add_session, self.engine, row=row, audit=audit)
        except StoreUnavailable:
            self._entries.pop(sid, None)
            raise

    async def forget(self, sid: str, reason: str) -> None:
        entry = self._entries.pop(sid, None)
        if entry is None:
            return

        def audit(s: Session) -> None:
            self.audit.record(
                s,
                AuditName.SESSION_CLOSED,
                actor=entry.binding.actor,
                project_id=entry.project_id,
                target=entry.target,
                version=entry.resolved.key,
                session_id=sid,
                outcome=reason,
            )

        await run_db(session_store.close_session, self.engine, session_id=sid, reason=reason, audit=audit)

    async def touch(self, sid: str, entry: SessionEntry, *, headers: dict[str, str]) -> None:
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
        entry = self._entries.get(sid)
        return entry.calls if entry is not None else None

    async def end_session(self, sid: str, *, actor: str, reason: str) -> bool:
        """End a session this process holds: cancel its runs (closing their pending
        questions), terminate its transport, record it closed with `session.terminated`.
        False: this process does not hold it."""
        why = "an administrator terminated it" if reason == "terminated" else "its API key was revoked"
        entry = await self._drop(sid, f"The MCP session ended: {why}.")
        if entry is None:
            return False
        audit = _terminated(
            self.audit,
            actor=actor,
            reason=reason,
            session_id=sid,
            project_id=entry.project_id,
            target=entry.target,
            version=entry.resolved.key,
            session_actor=entry.binding.actor,
        )
        with anyio.CancelScope(shield=True):
            await run_db(session_store.close_session, self.engine, session_id=sid, reason=reason, audit=audit)
        return True

    async def _drop(self, sid: str, why: str) -> SessionEntry | None:
        """Forget a session (its requests get 404 from here), cancel its runs and end its
        transport; the row is left to the caller."""
        entry = self._entries.pop(sid, None)
        if entry is None:
            return None
        with anyio.CancelScope(shield=True):
            for run_id in self.runs.live_runs_of_session(sid):
                await self.runs.cancel(run_id, reason=why)
            await terminate_transport(self.manager, sid)
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
            if not self._entries:
                continue
            try:
                found = await run_db(session_store.ended_among, self.engine, session_ids=list(self._entries))
            except DatabaseBusy:
                continue
            for sid, reason in found.items():
                entry = self._entries.get(sid)
                if entry is None:
                    continue
                if reason == "revoked":
                    await self.end_session(sid, actor=entry.binding.actor or "admin", reason="revoked")
                else:  # already recorded closed elsewhere: end it here, recorded once
                    await self._drop(sid, "The MCP session ended.")

    def run_background(self, tg: TaskGroup) -> None:
        """Start the long-lived tasks: the idle reaper, the order follower and the store
        watcher."""
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
            for sid, entry in list(self._entries.items()):
                if entry.in_flight == 0 and now - entry.last_active > self.idle_timeout + 1:
                    await self.forget(sid, "expired")

    async def close_all(self, reason: str) -> None:
        for sid in list(self._entries):
            await self.forget(sid, reason)

    async def end_all(self, reason: str) -> None:
        """End every session: the SDK closes their streams (GET included) cleanly, then the
        sessions are recorded closed."""
        for sid in list(self._entries):
            await terminate_transport(self.manager, sid)
        await self.close_all(reason)


async def end_by_order(
    hub: EventHub,
    engine: Engine,
    audit: AuditLog,
    session_ids: Collection[str],
    *,
    actor: str,
    reason: str,
) -> set[str]:
    """End these sessions wherever they are held: an order over the hub to the processes
    holding them, then the rows no process answered `ended` for (their process is gone)
    are closed here. Returns the sessions a process ended."""
    outcome = await session_orders.order_end(hub, session_ids, actor=actor, reason=reason)
    for sid in outcome.not_held | outcome.unanswered:
        row = await run_db(session_store.get_session, engine, session_id=sid)
        if row is not None:
            await run_db(_close_stale, engine, audit, row, actor, reason)
    return outcome.ended


async def end_key_sessions(
    hub: EventHub, engine: Engine, audit: AuditLog, key_id: str, *, actor: str
) -> None:
    """A revoked key's open sessions end now, wherever they are held."""
    sids = await run_db(session_store.open_for_key, engine, key_id=key_id)
    await end_by_order(hub, engine, audit, sids, actor=actor, reason="revoked")


def _close_stale(engine: Engine, audit: AuditLog, row: McpSession, actor: str, reason: str) -> None:
    write = _terminated(
        audit,
        actor=actor,
        reason=reason,
        session_id=row.id,
        project_id=row.project_id,
        target=row.target,
        version=row.resolved,
        session_actor=row.actor,
        held=False,
    )
    session_store.close_session(engine, session_id=row.id, reason=reason, audit=write)

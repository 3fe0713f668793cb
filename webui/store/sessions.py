"""Queries for MCP sessions (the durable side of the gateway's binding table).

The rows are what the sessions console lists (every replica's sessions); the last-activity
touch is a best-effort write (`webui.store.db.quick_write`) that fails at once rather than
wait for another writer."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, func, or_, update
from sqlalchemy.engine import CursorResult, Engine
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, add_row, quick_write
from webui.store.models import ApiKey, McpSession, utcnow

_SESSIONS = cast(Table, McpSession.__table__)  # pyright: ignore[reportAttributeAccessIssue]


def add_session(engine: Engine, *, row: McpSession, audit: AuditWrite | None = None) -> None:
    add_row(engine, row, audit=audit)


def get_session(engine: Engine, *, session_id: str) -> McpSession | None:
    with Session(engine) as s:
        return s.get(McpSession, session_id)


def list_open(engine: Engine, *, limit: int = 500) -> list[McpSession]:
    """Open sessions, the most recently active first."""
    last = func.coalesce(col(McpSession.last_activity_at), col(McpSession.created_at))
    with Session(engine) as s:
        query = (
            select(McpSession)
            .where(col(McpSession.closed_at).is_(None))
            .order_by(last.desc(), col(McpSession.id))
            .limit(limit)
        )
        return list(s.exec(query))


def open_for_key(engine: Engine, *, key_id: str) -> list[str]:
    """Ids of the key's open sessions."""
    with Session(engine) as s:
        query = select(McpSession.id).where(
            col(McpSession.key_id) == key_id, col(McpSession.closed_at).is_(None)
        )
        return list(s.exec(query))


def ended_among(engine: Engine, *, session_ids: Collection[str]) -> dict[str, str]:
    """Which of these sessions must end (id -> reason): recorded closed (by another
    process), or bound to a key that has been revoked since."""
    if not session_ids:
        return {}
    with Session(engine) as s:
        query = (
            select(McpSession, ApiKey.revoked_at)
            .join(ApiKey, col(ApiKey.id) == col(McpSession.key_id), isouter=True)
            .where(col(McpSession.id).in_(list(session_ids)))
        )
        found: dict[str, str] = {}
        for row, revoked_at in s.exec(query):
            if row.closed_at is not None:
                found[row.id] = row.close_reason or "closed"
            elif revoked_at is not None:
                found[row.id] = "revoked"
        return found


def touch_session(
    engine: Engine, *, session_id: str, now: datetime, protocol_version: str | None = None
) -> None:
    """Set the last-activity time (and the protocol version when given); raises
    OperationalError at once (without waiting) when another writer holds the lock."""
    values: dict[str, object] = {"last_activity_at": now}
    if protocol_version is not None:
        values["protocol_version"] = protocol_version
    with quick_write(engine) as conn:
        conn.execute(update(_SESSIONS).where(_SESSIONS.c.id == session_id).values(**values))


def close_session(engine: Engine, *, session_id: str, reason: str, audit: AuditWrite | None = None) -> bool:
    """Record the session closed; False when it already was (or is unknown). The audit
    event commits with the change, and only with it: a session another process closed
    meanwhile (its gateway ending it on the same revocation) is recorded once."""
    with Session(engine) as s:
        # One conditional UPDATE: of two processes closing it at once, one changes the row.
        moved = cast(
            CursorResult[Any],
            s.execute(
                update(McpSession)
                .where(col(McpSession.id) == session_id, col(McpSession.closed_at).is_(None))
                .values(closed_at=utcnow(), close_reason=reason)
                .execution_options(synchronize_session=False)
            ),
        )
        closed = moved.rowcount == 1
        if closed and audit is not None:
            audit(s)
        s.commit()
        return closed


def close_all_open(engine: Engine, *, reason: str, replica_id: str | None = None) -> int:
    """At start-up: sessions of a previous process are gone with it. With `replica_id`, only
    that replica's (and those recorded before replicas were): other replicas' sessions live on."""
    stmt = select(McpSession).where(col(McpSession.closed_at).is_(None))
    if replica_id is not None:
        stmt = stmt.where(or_(col(McpSession.replica_id) == replica_id, col(McpSession.replica_id).is_(None)))
    with Session(engine) as s:
        rows = list(s.exec(stmt))
        for row in rows:
            row.closed_at = utcnow()
            row.close_reason = reason
            s.add(row)
        s.commit()
        return len(rows)

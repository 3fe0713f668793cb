"""Queries for MCP sessions (the durable side of the gateway's binding table)."""

from __future__ import annotations

from sqlalchemy import or_
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, add_row
from webui.store.models import McpSession, utcnow


def add_session(engine: Engine, *, row: McpSession, audit: AuditWrite | None = None) -> None:
    add_row(engine, row, audit=audit)


def close_session(engine: Engine, *, session_id: str, reason: str, audit: AuditWrite | None = None) -> None:
    with Session(engine) as s:
        row = s.get(McpSession, session_id)
        if row is not None and row.closed_at is None:
            row.closed_at = utcnow()
            row.close_reason = reason
            s.add(row)
        if audit is not None:
            audit(s)
        s.commit()


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

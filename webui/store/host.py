"""Queries for the host's conversations and the tool calls made in them.

A conversation belongs to the account that opened it; its calls are kept in order. The
host's requests for human input are interactions (webui.store.interactions) whose origin
is "host". Functions that take `audit` call it with their open session, so the audit
event commits in the same transaction as the change it records.
"""

from __future__ import annotations

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, add_row, get_row
from webui.store.models import HostCall, HostConversation, Interaction, utcnow

CONVERSATIONS_LIMIT = 200


def recover(engine: Engine, *, error: str) -> list[str]:
    """After a restart: calls still "running" are marked failed with `error`; returns the
    ids of host requests still pending (closing them is the interaction service's). One
    transaction."""
    with Session(engine) as s:
        for call in s.exec(select(HostCall).where(HostCall.status == "running")):
            call.status, call.error, call.finished_at = "failed", error, utcnow()
            s.add(call)
        pending = select(Interaction.id).where(Interaction.origin == "host", Interaction.status == "pending")
        stale = list(s.exec(pending.order_by(col(Interaction.created_at), col(Interaction.id))))
        s.commit()
    return stale


def add_conversation(
    engine: Engine, *, row: HostConversation, audit: AuditWrite | None = None
) -> HostConversation:
    return add_row(engine, row, audit=audit)


def get_conversation(engine: Engine, *, conversation_id: str) -> HostConversation | None:
    return get_row(engine, HostConversation, conversation_id)


def list_conversations(
    engine: Engine, *, account_id: int | None, limit: int = CONVERSATIONS_LIMIT
) -> list[HostConversation]:
    """`account_id`'s conversations (None: everyone's), newest first."""
    with Session(engine, expire_on_commit=False) as s:
        stmt = select(HostConversation).order_by(
            col(HostConversation.created_at).desc(), col(HostConversation.id).desc()
        )
        if account_id is not None:
            stmt = stmt.where(HostConversation.account_id == account_id)
        return list(s.exec(stmt.limit(limit)))


def close_conversation(engine: Engine, *, conversation_id: str) -> None:
    """Mark the conversation closed now, unless it already is (or is gone)."""
    with Session(engine) as s:
        row = s.get(HostConversation, conversation_id)
        if row is not None and row.closed_at is None:
            row.closed_at = utcnow()
            s.add(row)
            s.commit()


def list_calls(engine: Engine, *, conversation_id: str) -> list[HostCall]:
    """The conversation's tool calls, oldest first."""
    with Session(engine, expire_on_commit=False) as s:
        stmt = select(HostCall).where(HostCall.conversation_id == conversation_id)
        return list(s.exec(stmt.order_by(col(HostCall.created_at), col(HostCall.id))))


def save_call(engine: Engine, *, row: HostCall, audit: AuditWrite | None = None) -> None:
    """Insert the call, or write its changes (its outcome), with its audit event."""
    add_row(engine, row, audit=audit)

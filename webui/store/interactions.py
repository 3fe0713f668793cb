"""Queries for interactions: writing and closing them, recording an answer, and reading
them with their runs (the conversation view, run timelines).

Interaction rows carry no project id and no owner: both are the run's (`runs.account_id`),
so every query that has to filter by project or owner joins `runs`. Requests from
external MCP servers (origin "host") have no run: they belong to a host conversation and
to its owner; the `host_*` queries join `host_conversations` instead (outer: a request
recorded without a conversation belongs to the administrators), and `host_calls` for the
tool call it was asked during. Who may see
what is decided in webui.interactions.owner."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import update
from sqlalchemy.engine import CursorResult, Engine
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, get_row, storable_text
from webui.store.models import HostCall, HostConversation, Interaction, ProjectRecord, Run, utcnow

PENDING_LIMIT = 200


@dataclass(frozen=True)
class InteractionWithRun:
    interaction: Interaction
    run: Run
    project_name: str

    @property
    def owner(self) -> int | None:
        """The owning account (None: the admin principal's run)."""
        return self.run.account_id


@dataclass(frozen=True)
class HostInteraction:
    """A request from an external MCP server, with the conversation it was made in (if any)
    and the tool call it was made during (if the host could tell which)."""

    interaction: Interaction
    conversation: HostConversation | None
    call: HostCall | None = None

    @property
    def owner(self) -> int | None:
        """The conversation's owner (None: no single conversation, the administrators')."""
        return self.conversation.account_id if self.conversation is not None else None


@dataclass(frozen=True)
class OwnedInteraction:
    """An interaction with its owning account and project: its run's, or for a host request
    its conversation's owner and no project (None: the admin principal's)."""

    interaction: Interaction
    owner: int | None
    project_id: str | None


def add_interaction(engine: Engine, *, row: Interaction, audit: AuditWrite | None = None) -> Interaction:
    """The new interaction and its audit event, in one transaction."""
    return add_interactions(engine, rows=[row], audit=audit)[0]


def add_interactions(
    engine: Engine, *, rows: list[Interaction], audit: AuditWrite | None = None
) -> list[Interaction]:
    """New interactions (one round of questions) and their audit events, in one
    transaction: a reader sees all of them or none."""
    with Session(engine, expire_on_commit=False) as s:
        for row in rows:
            row.title = storable_text(engine, row.title) or ""
            row.message = storable_text(engine, row.message)
            s.add(row)
        if audit is not None:
            audit(s)
        s.commit()
    return rows


def get_interaction(engine: Engine, *, interaction_id: str) -> Interaction | None:
    return get_row(engine, Interaction, interaction_id)


def close_interaction(engine: Engine, *, interaction_id: str, reason: str) -> Interaction | None:
    """Close a pending interaction with `reason`: the closed row, or None when there is no
    such interaction or it was no longer pending."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(Interaction, interaction_id)
        if row is None or row.status != "pending":
            return None
        row.status = "closed"
        row.close_reason = reason
        s.add(row)
        s.commit()
    return row


def expire_interaction(
    engine: Engine, *, interaction_id: str, audit: AuditWrite | None = None
) -> Interaction:
    """Close the interaction as expired if it is still pending and its `expires_at` has
    passed (one conditional UPDATE: an answer racing it on another replica either lands
    first or finds it closed), with its audit event; the row as it stands afterwards."""
    with Session(engine, expire_on_commit=False) as s:
        moved = cast(
            CursorResult[Any],
            s.execute(
                update(Interaction)
                .where(
                    col(Interaction.id) == interaction_id,
                    col(Interaction.status) == "pending",
                    col(Interaction.expires_at) <= utcnow(),
                )
                .values(status="closed", close_reason="expired")
                .execution_options(synchronize_session=False)
            ),
        )
        if moved.rowcount == 1 and audit is not None:
            audit(s)
        s.commit()
        row = s.get(Interaction, interaction_id)
        if row is None:
            raise LookupError(interaction_id)
        s.refresh(row)
        return row


def pending_for_run(engine: Engine, *, run_id: str) -> Interaction | None:
    """The run's newest pending interaction."""
    with Session(engine, expire_on_commit=False) as s:
        stmt = (
            select(Interaction)
            .where(Interaction.run_id == run_id, Interaction.status == "pending")
            .order_by(col(Interaction.created_at).desc(), col(Interaction.id).desc())
        )
        return s.exec(stmt).first()


def close_pending_for_run(engine: Engine, *, run_id: str, reason: str) -> list[str]:
    """Close every pending interaction of the run with `reason`, in one transaction: their ids."""
    closed: list[str] = []
    with Session(engine) as s:
        for row in s.exec(
            select(Interaction).where(Interaction.run_id == run_id, Interaction.status == "pending")
        ):
            row.status = "closed"
            row.close_reason = reason
            s.add(row)
            closed.append(row.id)
        s.commit()
    return closed


# Answering reads the row and its owner, decides, then writes, all in one session
# (webui.store.db.unit_of_work): these take that session.


def load_owned(s: Session, *, interaction_id: str) -> OwnedInteraction | None:
    row = s.get(Interaction, interaction_id)
    if row is None:
        return None
    if row.run_id is not None:
        run = s.get(Run, row.run_id)
        owner, project_id = (run.account_id, run.project_id) if run is not None else (None, None)
    else:
        conv = s.get(HostConversation, row.conversation_id) if row.conversation_id else None
        owner, project_id = (conv.account_id if conv is not None else None), None
    return OwnedInteraction(row, owner, project_id)


def mark_closed(s: Session, row: Interaction, *, reason: str, audit: AuditWrite | None = None) -> None:
    """Close the row (loaded in `s`) with `reason` (and its audit event), and commit."""
    row.status, row.close_reason = "closed", reason
    s.add(row)
    if audit is not None:
        audit(s)
    s.commit()


def mark_answered(
    s: Session,
    row: Interaction,
    *,
    action: str,
    answer: dict[str, Any] | None,
    digest: str,
    answered_by: str | None,
    override: bool,
    channel: str,
    audit: AuditWrite | None = None,
) -> bool:
    """Record the answer on the row (loaded in `s`) and its audit event, and commit: False
    (nothing written) when the row was no longer pending by then (it expired, or its run
    ended, in another transaction since it was read)."""
    values: dict[str, Any] = {
        "status": "answered",
        "action": action,
        "answer": answer,
        "answer_digest": digest,
        "answered_by": answered_by,
        "answer_override": override or None,
        "channel": channel,
        "answered_at": utcnow(),
    }
    moved = cast(
        CursorResult[Any],
        s.execute(
            update(Interaction)
            .where(col(Interaction.id) == row.id, col(Interaction.status) == "pending")
            .values(values)
            .execution_options(synchronize_session=False)
        ),
    )
    if moved.rowcount != 1:
        s.rollback()
        return False
    if audit is not None:
        audit(s)
    s.commit()
    for name, value in values.items():
        set_committed_value(row, name, value)
    return True


def _joined() -> Any:
    return (
        select(Interaction, Run, ProjectRecord.name)
        .join(Run, col(Interaction.run_id) == col(Run.id))
        .join(ProjectRecord, col(ProjectRecord.id) == col(Run.project_id), isouter=True)
    )


def list_pending(
    engine: Engine,
    *,
    project_ids: Collection[str] | None,
    account_id: int | None,
    limit: int = PENDING_LIMIT,
) -> list[InteractionWithRun]:
    """Pending interactions of runs in `project_ids` started by `account_id` (None for
    either: all of them), newest first."""
    if project_ids is not None and not project_ids:
        return []
    stmt = _joined().where(Interaction.status == "pending")
    if project_ids is not None:
        stmt = stmt.where(col(Run.project_id).in_(list(project_ids)))
    if account_id is not None:
        stmt = stmt.where(Run.account_id == account_id)
    stmt = stmt.order_by(col(Interaction.created_at).desc(), col(Interaction.id).desc()).limit(limit)
    with Session(engine, expire_on_commit=False) as s:
        return [InteractionWithRun(ia, run, name or run.project_id) for ia, run, name in s.exec(stmt)]


def get_with_run(engine: Engine, *, interaction_id: str) -> InteractionWithRun | None:
    stmt = _joined().where(Interaction.id == interaction_id)
    with Session(engine, expire_on_commit=False) as s:
        row = s.exec(stmt).first()
    if row is None:
        return None
    ia, run, name = row
    return InteractionWithRun(ia, run, name or run.project_id)


def list_for_runs(engine: Engine, *, run_ids: Collection[str]) -> dict[str, list[Interaction]]:
    """Every interaction of these runs, whatever its status, oldest first per run."""
    out: dict[str, list[Interaction]] = {run_id: [] for run_id in run_ids}
    if not out:
        return out
    stmt = (
        select(Interaction)
        .where(col(Interaction.run_id).in_(list(out)))
        .order_by(col(Interaction.created_at), col(Interaction.id))
    )
    with Session(engine, expire_on_commit=False) as s:
        for ia in s.exec(stmt):
            out[ia.run_id or ""].append(ia)
    return out


def _host_joined() -> Any:
    return (
        select(Interaction, HostConversation, HostCall)
        .join(HostConversation, col(Interaction.conversation_id) == col(HostConversation.id), isouter=True)
        .join(HostCall, col(Interaction.host_call_id) == col(HostCall.id), isouter=True)
        .where(Interaction.origin == "host", col(Interaction.run_id).is_(None))
    )


def list_pending_host(
    engine: Engine, *, account_id: int | None, limit: int = PENDING_LIMIT
) -> list[HostInteraction]:
    """Pending host requests in `account_id`'s conversations (None: all of them), newest first."""
    stmt = _host_joined().where(Interaction.status == "pending")
    if account_id is not None:
        stmt = stmt.where(HostConversation.account_id == account_id)
    stmt = stmt.order_by(col(Interaction.created_at).desc(), col(Interaction.id).desc()).limit(limit)
    with Session(engine, expire_on_commit=False) as s:
        return [HostInteraction(ia, conv, hc) for ia, conv, hc in s.exec(stmt)]


def get_host(engine: Engine, *, interaction_id: str) -> HostInteraction | None:
    stmt = _host_joined().where(Interaction.id == interaction_id)
    with Session(engine, expire_on_commit=False) as s:
        row = s.exec(stmt).first()
    if row is None:
        return None
    ia, conv, hc = row
    return HostInteraction(ia, conv, hc)


def list_for_conversation(
    engine: Engine, *, conversation_id: str, limit: int = PENDING_LIMIT
) -> list[Interaction]:
    """Every request made in a host conversation, whatever its status, newest first."""
    stmt = (
        select(Interaction)
        .where(Interaction.conversation_id == conversation_id)
        .order_by(col(Interaction.created_at).desc(), col(Interaction.id).desc())
        .limit(limit)
    )
    with Session(engine, expire_on_commit=False) as s:
        return list(s.exec(stmt))


def answered_among(engine: Engine, *, interaction_ids: Collection[str]) -> list[Interaction]:
    """Those of these interactions that have an answer (a waiting run re-checks its own)."""
    if not interaction_ids:
        return []
    with Session(engine, expire_on_commit=False) as s:
        stmt = select(Interaction).where(
            col(Interaction.id).in_(list(interaction_ids)), Interaction.status == "answered"
        )
        return list(s.exec(stmt))

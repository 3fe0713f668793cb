"""Queries for interactions seen with their runs (the conversation view, run timelines).

Interaction rows carry no project id: the project is the run's, so every query that has
to filter by project joins `runs`. Requests from external MCP servers (origin "host") have
no run: they belong to a host conversation, and who may see them follows its owner; the
`host_*` queries join `host_conversations` instead (outer: a request on a host-owned
connection that no single conversation was calling has none, and only admins see it)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.models import HostConversation, Interaction, ProjectRecord, Run

PENDING_LIMIT = 200


@dataclass(frozen=True)
class InteractionWithRun:
    interaction: Interaction
    run: Run
    project_name: str


@dataclass(frozen=True)
class HostInteraction:
    """A request from an external MCP server, with the conversation it was made in (if any)."""

    interaction: Interaction
    conversation: HostConversation | None

    def visible_to(self, account_id: int, is_admin: bool) -> bool:
        return is_admin or (self.conversation is not None and self.conversation.account_id == account_id)


def _joined() -> Any:
    return (
        select(Interaction, Run, ProjectRecord.name)
        .join(Run, col(Interaction.run_id) == col(Run.id))
        .join(ProjectRecord, col(ProjectRecord.id) == col(Run.project_id), isouter=True)
    )


def list_pending(
    engine: Engine, *, project_ids: Collection[str] | None, limit: int = PENDING_LIMIT
) -> list[InteractionWithRun]:
    """Pending interactions of runs in `project_ids` (None: every project), newest first."""
    if project_ids is not None and not project_ids:
        return []
    stmt = _joined().where(Interaction.status == "pending")
    if project_ids is not None:
        stmt = stmt.where(col(Run.project_id).in_(list(project_ids)))
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
        select(Interaction, HostConversation)
        .join(HostConversation, col(Interaction.conversation_id) == col(HostConversation.id), isouter=True)
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
        return [HostInteraction(ia, conv) for ia, conv in s.exec(stmt)]


def get_host(engine: Engine, *, interaction_id: str) -> HostInteraction | None:
    stmt = _host_joined().where(Interaction.id == interaction_id)
    with Session(engine, expire_on_commit=False) as s:
        row = s.exec(stmt).first()
    if row is None:
        return None
    ia, conv = row
    return HostInteraction(ia, conv)


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

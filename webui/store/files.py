"""Queries for managed files' metadata rows (the blobs themselves live on disk, see
webui.files.store). Functions that take `audit` call it with their open session, so the
audit event commits in the same transaction as the row."""

from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, add_row, get_row
from webui.store.models import ManagedFile


def add_file(engine: Engine, *, row: ManagedFile, audit: AuditWrite | None = None) -> ManagedFile:
    return add_row(engine, row, audit=audit)


def get_file(engine: Engine, *, file_id: str) -> ManagedFile | None:
    return get_row(engine, ManagedFile, file_id)


def outputs_of_run(engine: Engine, *, run_id: str) -> list[ManagedFile]:
    """The files a run created, oldest first."""
    with Session(engine) as s:
        rows = s.exec(
            select(ManagedFile)
            .where(ManagedFile.run_id == run_id, ManagedFile.origin == "output")
            .order_by(col(ManagedFile.created_at), col(ManagedFile.id))
        ).all()
    return list(rows)


def usage(engine: Engine, *, project_id: str) -> tuple[int, int]:
    """(bytes, files) a project's file rows account for."""
    with Session(engine) as s:
        total, count = s.exec(
            select(func.coalesce(func.sum(ManagedFile.size), 0), func.count(col(ManagedFile.id))).where(
                ManagedFile.project_id == project_id
            )
        ).one()
    return int(total), int(count)


def projects_of(s: Session, *, file_ids: list[str]) -> dict[str, str]:
    """The project of each known file among `file_ids` (unknown ids are left out)."""
    if not file_ids:
        return {}
    rows = s.exec(select(ManagedFile.id, ManagedFile.project_id).where(col(ManagedFile.id).in_(file_ids)))
    return {file_id: project_id for file_id, project_id in rows.all()}

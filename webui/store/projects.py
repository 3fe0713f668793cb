"""Queries for registered projects and their published versions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import Table, bindparam
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, add_row, bytewise, get_row
from webui.store.models import ProjectRecord, ProjectVersion

_PROJECTS = cast(Table, ProjectRecord.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_GET_PROJECT = sa_select(_PROJECTS).where(_PROJECTS.c.id == bindparam("project_id"))


def get_project(engine: Engine, *, project_id: str) -> ProjectRecord | None:
    """Read on every MCP request (existence, run gate, limits): a prebuilt Core statement."""
    with engine.connect() as conn:
        row = conn.execute(_GET_PROJECT, {"project_id": project_id}).mappings().first()
    return ProjectRecord.model_validate(dict(row)) if row is not None else None


def list_projects(engine: Engine) -> list[ProjectRecord]:
    with Session(engine, expire_on_commit=False) as s:
        return list(
            s.exec(select(ProjectRecord).order_by(bytewise(col(ProjectRecord.name)), col(ProjectRecord.id)))
        )


def upsert_project(engine: Engine, *, project_id: str, name: str, root: str) -> tuple[ProjectRecord, bool]:
    """Register (or refresh) a project; returns (row, created)."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(ProjectRecord, project_id)
        created = row is None
        if row is None:
            row = ProjectRecord(id=project_id, name=name, root=root)
        else:
            row.name, row.root = name, root
        s.add(row)
        s.commit()
        return row, created


def update_project(engine: Engine, *, project_id: str, **changes: Any) -> ProjectRecord | None:
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(ProjectRecord, project_id)
        if row is None:
            return None
        for key, value in changes.items():
            setattr(row, key, value)
        s.add(row)
        s.commit()
        return row


def change_project(
    engine: Engine,
    *,
    project_id: str,
    values: dict[str, Any],
    audit: Callable[[Session, dict[str, Any]], object] | None = None,
) -> ProjectRecord | None:
    """Set the fields whose value differs; None if there is no such project. The audit write
    sees the changes and commits with them (it runs only when there are some)."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(ProjectRecord, project_id)
        if row is None:
            return None
        changes = {k: v for k, v in values.items() if getattr(row, k) != v}
        if changes:
            for key, value in changes.items():
                setattr(row, key, value)
            s.add(row)
            if audit is not None:
                audit(s, changes)
            s.commit()
        return row


def list_versions(engine: Engine, *, project_id: str) -> list[ProjectVersion]:
    with Session(engine, expire_on_commit=False) as s:
        stmt = select(ProjectVersion).where(ProjectVersion.project_id == project_id)
        return list(s.exec(stmt.order_by(bytewise(col(ProjectVersion.version)))))


def get_version(engine: Engine, *, project_id: str, version: str) -> ProjectVersion | None:
    return get_row(engine, ProjectVersion, (project_id, version))


def add_version(engine: Engine, *, row: ProjectVersion, audit: AuditWrite | None = None) -> ProjectVersion:
    return add_row(engine, row, audit=audit)


def set_version_status(
    engine: Engine, *, project_id: str, version: str, status: str, audit: AuditWrite | None = None
) -> ProjectVersion | None:
    """None if there is no such version; the audit write runs only when the status changes."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(ProjectVersion, (project_id, version))
        if row is None:
            return None
        if row.status != status:
            row.status = status
            s.add(row)
            if audit is not None:
                audit(s)
            s.commit()
        return row

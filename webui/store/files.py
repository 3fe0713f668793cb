"""Queries for managed files' metadata rows (the blobs themselves live on disk, see
webui.files.store). Functions that take `audit` call it with their open session, so the
audit event commits in the same transaction as the row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.models import ManagedFile


def add_file(
    engine: Engine, *, row: ManagedFile, audit: Callable[[Session], Any] | None = None
) -> ManagedFile:
    with Session(engine, expire_on_commit=False) as s:
        s.add(row)
        if audit is not None:
            audit(s)
        s.commit()
    return row


def get_file(engine: Engine, *, file_id: str) -> ManagedFile | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.get(ManagedFile, file_id)


def usage(engine: Engine, *, project_id: str) -> tuple[int, int]:
    """(bytes, files) a project's file rows account for."""
    with Session(engine) as s:
        total, count = s.exec(
            select(func.coalesce(func.sum(ManagedFile.size), 0), func.count(col(ManagedFile.id))).where(
                ManagedFile.project_id == project_id
            )
        ).one()
    return int(total), int(count)

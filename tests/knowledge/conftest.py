"""A knowledge service on a real database per test (SQLite; PostgreSQL too where marked)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.audit.log import AuditLog
from webui.knowledge.model import Actor, Limits
from webui.knowledge.service import KnowledgeService
from webui.store.db import make_engine
from webui.store.models import AuditEvent

ADMIN = Actor("admin", "cli")


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def kb(engine: Engine) -> KnowledgeService:
    return KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=Limits())


def audit_events(engine: Engine) -> list[tuple[str, str | None, str | None]]:
    with Session(engine) as s:
        rows = s.exec(select(AuditEvent).order_by(col(AuditEvent.id))).all()
        return [(row.event, row.project_id, row.target) for row in rows]

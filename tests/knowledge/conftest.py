"""What the knowledge tests share besides their fixtures (tests/knowledge_fixtures.py)."""

from __future__ import annotations

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.knowledge.model import Actor
from webui.store.models import AuditEvent

ADMIN = Actor("admin", "cli")


def audit_events(engine: Engine) -> list[tuple[str, str | None, str | None]]:
    with Session(engine) as s:
        rows = s.exec(select(AuditEvent).order_by(col(AuditEvent.id))).all()
        return [(row.event, row.project_id, row.target) for row in rows]

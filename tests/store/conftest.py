"""A real database per test (a SQLite file, and a fresh PostgreSQL database), and rows the
queries under test refer to."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.db import make_engine
from webui.store.models import Account, AuditEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def add_account(engine: Engine, name: str) -> int:
    with Session(engine) as s:
        account = Account(name=name)
        s.add(account)
        s.commit()
        assert account.id is not None
        return account.id


def audit_events(engine: Engine) -> list[str]:
    with Session(engine) as s:
        return [row.event for row in s.exec(select(AuditEvent).order_by(col(AuditEvent.id)))]

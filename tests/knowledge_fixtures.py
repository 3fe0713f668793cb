"""Fixtures of the knowledge-base tests (a plugin of tests/conftest.py, so tests/knowledge and
tests/security share them): a real database per test and a knowledge service on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from webui.audit.log import AuditLog
from webui.knowledge.model import Limits
from webui.knowledge.service import KnowledgeService
from webui.store.db import make_engine


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def kb(engine: Engine) -> KnowledgeService:
    return KnowledgeService(engine, audit=AuditLog(), audit_engine=engine, limits=Limits())

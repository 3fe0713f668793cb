"""PostgreSQL for the replica tests: the session's throwaway cluster (`tests/pg.py`), a
database of its own per test (at the newest schema revision), and a way to cut one server
connection as a network failure would."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import text

from tests.pg import TEMPLATE, PgCluster, fresh_name


@dataclass
class PgServer:
    cluster: PgCluster

    def url(self, db: str) -> str:
        return self.cluster.url(db)

    def new_database(self) -> str:
        """A new database holding the tables; dropped with the cluster."""
        name = fresh_name()
        self.cluster.create_database(name, template=TEMPLATE)
        return name

    def terminate(self, backend_pid: int) -> None:
        """End one server connection, as a network failure or a restart would."""
        engine = self.cluster.admin()
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend_pid})
        finally:
            engine.dispose()


@pytest.fixture(scope="session")
def pg_server(pg_cluster: PgCluster) -> PgServer:
    return PgServer(pg_cluster)


@pytest.fixture
def pg_url(postgresql_url: str) -> Iterator[str]:
    """A fresh database of the throwaway cluster (SQLAlchemy URL), dropped after the test."""
    yield postgresql_url

"""The migrations: the baseline revision creates exactly the models' schema (SQLite, and
PostgreSQL when its Debian binaries and a driver are here), the head constant matches the
revisions, and the states a database can be in are told apart."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel, create_engine

from tests.pg import PgCluster, fresh_database
from webui.errors import SchemaOutOfDate
from webui.store import models  # noqa: F401  (registers the tables)
from webui.store.db import make_engine, sqlite_url
from webui.store.migrations import BASELINE, HEAD
from webui.store.migrations.baseline import baseline_metadata
from webui.store.models import UNMANAGED_PREFIX
from webui.store.schema import alembic_config, head_revision, migration_lock, read_state, upgrade_database


def include_name(name: str | None, type_: str, _parents: Any) -> bool:
    """The full-text index is made by its migration, not from the models (as in env.py)."""
    return not (type_ == "table" and name is not None and name.startswith(UNMANAGED_PREFIX))


def differences(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True, "include_name": include_name}
        )
        return compare_metadata(context, SQLModel.metadata)


def ddl(path: Path) -> dict[str, list[str]]:
    """Each table's and index's CREATE statement, as lines in a stable order (a table's
    foreign keys come in no particular order)."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute("select name, sql from sqlite_master where name not like '%alembic_version%'")
        return {
            name: sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()) for name, sql in rows
        }
    finally:
        con.close()


def test_head_is_the_newest_revision() -> None:
    assert head_revision() == HEAD


def test_the_migrations_create_the_models_schema_on_sqlite(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path / "migrated.db"), check_schema=False)
    done = upgrade_database(engine)
    assert done == [f"created the schema at {HEAD}"]
    assert differences(engine) == []
    engine.dispose()


def test_the_baseline_is_the_frozen_schema_statement_for_statement(tmp_path: Path) -> None:
    """The baseline revision issues the very statements create_all would for the frozen
    baseline; while the baseline is the head, that is the models' schema itself."""
    engine = make_engine(sqlite_url(tmp_path / "migrated.db"), check_schema=False)
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), BASELINE)
        conn.commit()
    engine.dispose()
    plain = create_engine(sqlite_url(tmp_path / "plain.db"))
    baseline_metadata().create_all(plain)
    plain.dispose()
    assert ddl(tmp_path / "migrated.db") == ddl(tmp_path / "plain.db")
    if HEAD == BASELINE:
        models = create_engine(sqlite_url(tmp_path / "models.db"))
        SQLModel.metadata.create_all(models)
        models.dispose()
        assert ddl(tmp_path / "migrated.db") == ddl(tmp_path / "models.db")


def test_the_baseline_downgrades_to_nothing_and_back(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    engine = make_engine(sqlite_url(path))  # a new SQLite database is created at head
    with engine.connect() as conn:
        command.downgrade(alembic_config(conn), "base")
        conn.commit()
        assert read_state(conn).revision is None
    assert ddl(path) == {}
    assert upgrade_database(engine) == [f"created the schema at {HEAD}"]
    assert differences(engine) == []
    engine.dispose()


def test_opening_the_store_refuses_what_it_cannot_use_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    make_engine(sqlite_url(path)).dispose()
    con = sqlite3.connect(path)
    con.execute("update alembic_version set version_num = '9999_from_the_future'")
    con.commit()
    con.close()
    before = ddl(path)
    with pytest.raises(
        SchemaOutOfDate, match="revision 9999_from_the_future, which this release does not know"
    ):
        make_engine(sqlite_url(path))
    engine = make_engine(sqlite_url(path), check_schema=False)
    with pytest.raises(SchemaOutOfDate, match="does not know"):
        upgrade_database(engine)  # not even `db upgrade` touches a newer release's schema
    engine.dispose()
    assert ddl(path) == before


# ------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def empty_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A new empty database of the run's cluster (a name of this test's own: other workers
    make theirs in the same cluster), dropped afterwards."""
    with fresh_database(pg_cluster, empty=True) as url:
        yield url


# Advisory locks held in this test's database (pg_locks lists the whole cluster's, and other
# workers' servers migrate and count run limits under advisory locks of their own).
ADVISORY_HERE = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def test_the_baseline_creates_the_models_schema_on_postgresql(empty_url: str) -> None:
    engine = make_engine(empty_url, check_schema=False)
    with pytest.raises(SchemaOutOfDate, match="the database is empty, this release needs"):
        make_engine(
            str(engine.url.render_as_string(hide_password=False))
        )  # a server database is never created by opening it
    assert upgrade_database(engine) == [f"created the schema at {HEAD}"]
    assert differences(engine) == []
    assert upgrade_database(engine) == []
    make_engine(engine.url.render_as_string(hide_password=False)).dispose()  # at head: opens
    engine.dispose()


def test_a_postgresql_database_from_before_migrations_is_stamped_under_the_advisory_lock(
    empty_url: str,
) -> None:
    url = empty_url
    old = create_engine(url)
    baseline_metadata().create_all(old)  # made by the release before migrations
    with old.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE projects DROP COLUMN run_gate_open")
        conn.exec_driver_sql(
            "INSERT INTO projects (id, name, root, registered_at) VALUES ('p', 'old', '/x', now())"
        )
    old.dispose()
    engine = make_engine(url, check_schema=False)
    with migration_lock(engine) as conn:
        held = conn.exec_driver_sql(ADVISORY_HERE).scalar()
        assert held == 1
    done = upgrade_database(engine)
    assert done[:2] == [
        "added column projects.run_gate_open",
        "stamped 0001_baseline (a data dir made before migrations)",
    ]
    assert differences(engine) == []
    with engine.connect() as conn:
        assert conn.execute(sqlalchemy.text("SELECT name, run_gate_open FROM projects")).all() == [
            ("old", True)
        ]
        assert conn.exec_driver_sql(ADVISORY_HERE).scalar() == 0
    engine.dispose()


def test_a_database_behind_head_is_refused_with_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a later release sees a database at the baseline (its newest revision is later)."""
    path = tmp_path / "x.db"
    make_engine(sqlite_url(path)).dispose()
    before = ddl(path)
    monkeypatch.setattr("webui.store.schema.HEAD", "0002_later")
    with pytest.raises(SchemaOutOfDate) as refused:
        make_engine(sqlite_url(path))
    assert refused.value.message == (
        f"the database is at revision {HEAD}, this release needs 0002_later: run `steamharness db upgrade`"
    )
    assert ddl(path) == before

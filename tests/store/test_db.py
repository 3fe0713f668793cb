"""The store: SQLite pragmas, and data dirs from before migrations brought up to date."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy
import sqlalchemy.exc
from sqlalchemy import text

from webui.blocking import is_busy_error
from webui.errors import SchemaOutOfDate
from webui.store.db import make_engine, quick_write
from webui.store.migrations import HEAD
from webui.store.schema import upgrade_database


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 5_000
    engine.dispose()


def test_the_busy_timeout_is_configurable_and_a_quick_write_restores_it(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}", busy_timeout=1.5)
    with quick_write(engine) as conn:
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 0
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 1_500
    engine.dispose()


def test_a_quick_write_fails_at_once_while_another_connection_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    engine = make_engine(f"sqlite:///{path}", busy_timeout=60)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlalchemy.exc.OperationalError) as caught, quick_write(engine) as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
        assert is_busy_error(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    engine.dispose()


def test_an_older_data_dir_gains_new_columns_and_indexes_without_losing_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.execute(
        "create table projects (id varchar primary key, name varchar not null, root varchar not null,"
        " registered_at datetime not null)"
    )
    con.execute("insert into projects values ('p1', 'old', '/x', '2026-01-01 00:00:00')")
    con.execute(
        "create table audit_events (id integer primary key, event varchar not null, actor varchar,"
        " project_id varchar, target varchar, version varchar, session_id varchar, tool varchar,"
        " run_id varchar, outcome varchar, source varchar not null, client_address varchar,"
        " user_agent varchar, details json, created_at datetime not null)"
    )
    con.commit()
    con.close()
    with pytest.raises(SchemaOutOfDate, match="was made before migrations"):
        make_engine(f"sqlite:///{path}")
    engine = make_engine(f"sqlite:///{path}", check_schema=False)
    done = upgrade_database(engine)
    assert "added column projects.run_gate_open" in done and "added table runs" in done
    assert "stamped 0001_baseline (a data dir made before migrations)" in done
    inspector = sqlalchemy.inspect(engine)
    columns = {c["name"] for c in inspector.get_columns("projects")}
    assert {"run_gate_open", "max_running", "max_queued"} <= columns
    assert "ix_audit_event_time" in {i["name"] for i in inspector.get_indexes("audit_events")}
    with engine.connect() as conn:
        assert conn.execute(text("select name, run_gate_open from projects")).all() == [("old", 1)]
        assert conn.execute(text("select version_num from alembic_version")).scalar() == HEAD
    assert upgrade_database(engine) == []  # idempotent
    engine.dispose()


def test_the_audit_log_keeps_a_bounded_user_agent(tmp_path: Path) -> None:
    """Every writer passes the raw header; the one audit writer keeps its first 300 characters."""
    from sqlmodel import Session, select

    from webui.audit.events import AuditName
    from webui.audit.log import USER_AGENT_CHARS, AuditLog
    from webui.store.models import AuditEvent

    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with Session(engine) as s:
        AuditLog().record(s, AuditName.HOST_SERVER_CONNECTING, user_agent="u" * 5000)
        AuditLog().record(s, AuditName.HOST_SERVER_CLOSED, user_agent=None)
        s.commit()
        rows = {row.event: row.user_agent for row in s.exec(select(AuditEvent))}
    assert rows == {"host.server.connecting": "u" * USER_AGENT_CHARS, "host.server.closed": None}
    assert USER_AGENT_CHARS == 300

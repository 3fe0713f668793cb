"""What differs between SQLite and PostgreSQL, pinned down on both: ordering, sizes, times,
JSON, text, upserts, schema upgrades, and locks."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy
import sqlalchemy.exc
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel

from tests.store.conftest import add_account
from webui.blocking import is_busy_error
from webui.errors import ConfigError
from webui.store import accounts as account_store
from webui.store import configs as config_store
from webui.store import files as file_store
from webui.store import kv as kv_store
from webui.store import projects as project_store
from webui.store import runs as run_store
from webui.store import ui_sessions as ui_session_store
from webui.store.db import engine_url, make_engine
from webui.store.migrations.baseline import baseline_metadata
from webui.store.models import KVEntry, ManagedFile, PersistentValue, Run, UiSession, as_utc
from webui.store.schema import upgrade_database

NAMES = ["b", "B", "a", "_x", "A", "a-b", "ab", "Z"]


def test_names_are_listed_byte_by_byte_whatever_the_collation(engine: Engine) -> None:
    for name in NAMES:
        add_account(engine, name)
        project_store.upsert_project(engine, project_id=f"id-{name}", name=name, root="/x")
    scope = config_store.Scope("p", 0)
    for name in NAMES:
        config_store.add_config(engine, scope, name=name, values={}, actor=None, audit=lambda s: None)
    assert [a.name for a in account_store.list_accounts(engine)] == sorted(NAMES)
    assert [p.name for p in project_store.list_projects(engine)] == sorted(NAMES)
    assert [c.name for c in config_store.list_configs(engine, scope)] == sorted(NAMES)


def test_a_file_larger_than_2_gib_keeps_its_size(engine: Engine) -> None:
    size = 5 * 2**30
    file_store.add_file(
        engine,
        row=ManagedFile(
            id="f1",
            project_id="p",
            name="big",
            mime_type="x",
            size=size,
            sha256="0",
            origin="upload",
            storage="s",
        ),
    )
    row = file_store.get_file(engine, file_id="f1")
    assert row is not None and row.size == size
    assert file_store.usage(engine, project_id="p") == (size, 1)


def test_times_come_back_as_the_same_instant_in_utc(engine: Engine) -> None:
    at = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    ann = add_account(engine, "ann")
    ui_session_store.add_session(
        engine, row=UiSession(id="s1", account_id=ann, csrf_token="c", created_at=at, last_seen_at=at)
    )
    found = ui_session_store.live_session(engine, session_id="s1", now=at, timed_out=lambda _: False)
    assert found is not None
    assert as_utc(found[0].created_at) == at and as_utc(found[0].created_at).tzinfo == UTC


def test_json_values_round_trip_exactly(engine: Engine) -> None:
    values = [
        None,
        True,
        0,
        2**62,
        -1.5,
        "",
        "naïve \u2603 \U0001f600 \x00 end",
        [],
        {"nested": {"list": [1, "two", None, False]}, "": "empty key"},
    ]
    for i, value in enumerate(values):
        kv_store.set_value(engine, KVEntry, project_id="p", key=f"k{i}", value=value)
    assert [kv_store.get_value(engine, KVEntry, project_id="p", key=f"k{i}") for i in range(len(values))] == [
        (True, v) for v in values
    ]


def test_setting_a_value_twice_replaces_it_and_keys_stay_apart(engine: Engine) -> None:
    for table in (KVEntry, PersistentValue):
        kv_store.set_value(engine, table, project_id="p", key="k", value=1)
        kv_store.set_value(engine, table, project_id="p", key="k", value={"v": 2})
        kv_store.set_value(engine, table, project_id="q", key="k", value=3)
        assert kv_store.get_value(engine, table, project_id="p", key="k") == (True, {"v": 2})
        assert kv_store.get_value(engine, table, project_id="q", key="k") == (True, 3)
        assert kv_store.delete_value(engine, table, project_id="p", key="k")
        assert kv_store.get_value(engine, table, project_id="p", key="k") == (False, None)


def test_output_with_nul_characters_is_kept_in_the_run_log(engine: Engine) -> None:
    with Session(engine) as s:
        s.add(Run(id="r1", project_id="p", entrypoint_id="e", entrypoint_title="E"))
        s.commit()
    run_store.add_event(engine, run_id="r1", kind="stdout", text="before\x00after")
    [event] = [e for e in run_store.list_events(engine, run_id="r1") if e.kind == "stdout"]
    # PostgreSQL text cannot hold NUL: it becomes U+FFFD there, and the rest is kept.
    expected = "before\x00after" if engine.dialect.name == "sqlite" else "before\ufffdafter"
    assert event.text == expected


def test_an_older_store_gains_a_required_boolean_column_with_its_default(database_url: str) -> None:
    engine = make_engine(database_url)
    with engine.begin() as conn:  # a store made before migrations, and before that column
        for table in reversed(SQLModel.metadata.sorted_tables):
            conn.execute(text(f"DROP TABLE {table.name}"))
        conn.execute(text("DROP TABLE knowledge_fts"))  # the full-text index: no model
        conn.execute(text("DROP TABLE alembic_version"))
    baseline_metadata().create_all(engine)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE projects DROP COLUMN run_gate_open"))
        conn.execute(
            text("INSERT INTO projects (id, name, root, registered_at) VALUES ('p1', 'old', '/x', :t)"),
            {"t": datetime.now(UTC)},
        )
    engine.dispose()
    engine = make_engine(database_url, check_schema=False)
    assert "added column projects.run_gate_open" in upgrade_database(engine)
    engine.dispose()
    engine = make_engine(database_url)
    row = project_store.get_project(engine, project_id="p1")
    assert row is not None and row.run_gate_open is True
    engine.dispose()


def test_a_quick_write_fails_at_once_while_another_transaction_holds_the_row(postgresql_url: str) -> None:
    engine = make_engine(postgresql_url, busy_timeout=60)
    ann = add_account(engine, "ann")
    ui_session_store.add_session(engine, row=UiSession(id="h1", account_id=ann, csrf_token="c"))
    with engine.connect() as holder, holder.begin():
        holder.execute(text("SELECT 1 FROM ui_sessions WHERE id = 'h1' FOR UPDATE"))
        with pytest.raises(sqlalchemy.exc.OperationalError) as caught:
            ui_session_store.touch_session(engine, session_id="h1", now=datetime.now(UTC))
        assert is_busy_error(caught.value)
    # the lock is gone with its transaction: the next touch goes through
    ui_session_store.touch_session(engine, session_id="h1", now=datetime.now(UTC))
    engine.dispose()


def test_a_writer_waits_for_a_lock_at_most_the_busy_timeout(postgresql_url: str) -> None:
    engine = make_engine(postgresql_url, busy_timeout=0.2)
    ann = add_account(engine, "ann")
    with engine.connect() as holder, holder.begin():
        holder.execute(text(f"SELECT 1 FROM accounts WHERE id = {ann} FOR UPDATE"))
        with pytest.raises(sqlalchemy.exc.OperationalError) as caught:
            account_store.set_disabled(engine, account_id=ann, disabled=True)
        assert is_busy_error(caught.value)
    assert account_store.set_disabled(engine, account_id=ann, disabled=True) is not None
    engine.dispose()


def test_a_plain_postgresql_url_uses_psycopg() -> None:
    assert engine_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert engine_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert engine_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert engine_url("sqlite:///x.db") == "sqlite:///x.db"


def test_without_the_driver_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigError, match=r"pip install 'steamharness\[postgres\]'"):
        make_engine("postgresql://u@127.0.0.1:1/db")


def test_a_database_that_cannot_be_reached_is_one_clear_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        make_engine("postgresql://someone:hunter2secret@127.0.0.1:1/db")
    assert "127.0.0.1" in caught.value.message and "hunter2secret" not in caught.value.message

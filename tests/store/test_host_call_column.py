"""A data dir from before request cards named their tool call: `interactions.host_call_id`
is added (nullable) by `db upgrade` and its older host requests read with no call."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlalchemy

from webui.store import interactions as interaction_store
from webui.store.db import make_engine
from webui.store.migrations.baseline import baseline_metadata
from webui.store.models import Interaction
from webui.store.schema import upgrade_database


def test_older_host_requests_gain_the_column_and_read_without_a_call(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlalchemy.create_engine(f"sqlite:///{path}")
    baseline_metadata().create_all(old)  # as a data dir made before migrations
    old.dispose()
    con = sqlite3.connect(path)
    con.execute("alter table interactions drop column host_call_id")
    con.execute(
        "insert into interactions (id, origin, kind, title, requested_schema, fields, blockers, status,"
        " server_id, created_at) values ('int_old', 'host', 'form', 'Old asks', '{}', '[]', '[]',"
        " 'pending', 'mcp-x', '2026-01-01 00:00:00')"
    )
    con.commit()
    con.close()

    engine = make_engine(f"sqlite:///{path}", check_schema=False)
    assert upgrade_database(engine)[:2] == [
        "added column interactions.host_call_id",
        "stamped 0001_baseline (a data dir made before migrations)",
    ]
    columns = {c["name"] for c in sqlalchemy.inspect(engine).get_columns("interactions")}
    assert "host_call_id" in columns
    item = interaction_store.get_host(engine, interaction_id="int_old")
    assert item is not None and item.call is None and item.conversation is None
    assert isinstance(item.interaction, Interaction) and item.interaction.host_call_id is None
    [pending] = interaction_store.list_pending_host(engine, account_id=None)
    assert pending.interaction.id == "int_old" and pending.call is None
    engine.dispose()

"""Project key-value store (`ctx.kv`) and PersistentValue store (`ctx.values`).

Both are one table each keyed by (project, key); the engine may be the main store or a
separate SQLite file when `--kv-store-dir` / `--persistent-value-store-dir` are given.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table as SaTable
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.store.models import KVEntry, PersistentValue, utcnow

Table = type[KVEntry] | type[PersistentValue]
# INSERT … ON CONFLICT DO UPDATE, as each supported database spells it.
_INSERTS = {"sqlite": sqlite_insert, "postgresql": postgresql_insert}


def get_value(engine: Engine, table: Table, *, project_id: str, key: str) -> tuple[bool, Any]:
    with Session(engine) as s:
        row = s.get(table, (project_id, key))
        return (True, row.value) if row is not None else (False, None)


def set_value(engine: Engine, table: Table, *, project_id: str, key: str, value: Any) -> None:
    """Insert or replace, in one statement (two handlers setting a new key at once both succeed,
    the later one wins)."""
    insert = _INSERTS.get(engine.dialect.name)
    if insert is None:  # another database: read, then insert or update
        _set_by_row(engine, table, project_id=project_id, key=key, value=value)
        return
    columns = cast(SaTable, table.__table__)  # pyright: ignore[reportAttributeAccessIssue]
    now = utcnow()
    upsert = insert(columns).values(project_id=project_id, key=key, value=value, updated_at=now)
    stmt = upsert.on_conflict_do_update(
        index_elements=[columns.c.project_id, columns.c.key],
        set_={"value": upsert.excluded["value"], "updated_at": now},
    )
    with engine.begin() as conn:
        conn.execute(stmt)


def _set_by_row(engine: Engine, table: Table, *, project_id: str, key: str, value: Any) -> None:
    with Session(engine) as s:
        row = s.get(table, (project_id, key))
        if row is None:
            s.add(table(project_id=project_id, key=key, value=value))
        else:
            row.value = value
            row.updated_at = utcnow()
            s.add(row)
        s.commit()


def delete_value(engine: Engine, table: Table, *, project_id: str, key: str) -> bool:
    with Session(engine) as s:
        row = s.get(table, (project_id, key))
        if row is None:
            return False
        s.delete(row)
        s.commit()
        return True

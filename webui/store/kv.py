"""Project key-value store (`ctx.kv`) and PersistentValue store (`ctx.values`).

Both are one table each keyed by (project, key); the engine may be the main store or a
separate SQLite file when `--kv-store-dir` / `--persistent-value-store-dir` are given.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.store.models import KVEntry, PersistentValue, utcnow

Table = type[KVEntry] | type[PersistentValue]


def get_value(engine: Engine, table: Table, *, project_id: str, key: str) -> tuple[bool, Any]:
    with Session(engine) as s:
        row = s.get(table, (project_id, key))
        return (True, row.value) if row is not None else (False, None)


def set_value(engine: Engine, table: Table, *, project_id: str, key: str, value: Any) -> None:
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

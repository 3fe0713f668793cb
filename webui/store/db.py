"""Engine construction. SQLite gets WAL and a busy timeout; any other SQLAlchemy URL is
used as given, and nothing in the query modules is SQLite-specific."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel, create_engine

from webui.store import models  # noqa: F401  (registers the tables)

SQLITE_BUSY_TIMEOUT_MS = 10_000


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def make_engine(url: str) -> Engine:
    """Create the engine and the tables it needs."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
    else:
        engine = create_engine(url, pool_pre_ping=True)
    SQLModel.metadata.create_all(engine)
    upgrade_schema(engine)
    return engine


def upgrade_schema(engine: Engine) -> list[str]:
    """Bring a data dir made by an earlier version up to date with additive changes: new
    columns (nullable, or with a constant default) and new indexes. `create_all` only
    creates missing tables. Returns what it did; anything non-additive is refused."""
    inspector = inspect(engine)
    existing = set(inspector.get_table_names())
    done: list[str] = []
    with engine.begin() as conn:
        for table in SQLModel.metadata.sorted_tables:
            if table.name not in existing:
                continue
            present = {c["name"] for c in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name in present:
                    continue
                ddl = (
                    f"ALTER TABLE {table.name} ADD COLUMN {column.name} {column.type.compile(engine.dialect)}"
                )
                default = getattr(column.default, "arg", None)
                if not column.nullable:
                    if not isinstance(default, bool | int | float | str):
                        raise RuntimeError(
                            f"cannot add required column {table.name}.{column.name} to old data"
                        )
                    literal = int(default) if isinstance(default, bool) else default
                    ddl += (
                        f" NOT NULL DEFAULT {literal!r}"
                        if isinstance(literal, str)
                        else f" NOT NULL DEFAULT {literal}"
                    )
                conn.execute(text(ddl))
                done.append(f"added column {table.name}.{column.name}")
            indexes = {i["name"] for i in inspector.get_indexes(table.name)}
            for index in table.indexes:
                if index.name not in indexes:
                    index.create(conn)
                    done.append(f"added index {index.name}")
    return done

"""Data dirs made before migrations: their tables exist but carry no revision. Every release
before then changed the schema additively only (new tables, new nullable or constant-default
columns, new indexes), so such a data dir reaches the baseline by adding what it lacks; it is
then stamped with the baseline revision. Used for that alone."""

from __future__ import annotations

from sqlalchemy import MetaData, inspect, text
from sqlalchemy.engine import Connection


def bring_to_baseline(conn: Connection, baseline: MetaData) -> list[str]:
    """Add the tables, columns and indexes of `baseline` that the database lacks, in the open
    transaction of `conn`. Returns what it did; a required column with no constant default
    cannot be added to old rows, and is refused."""
    inspector = inspect(conn)
    existing = set(inspector.get_table_names())
    done: list[str] = []
    for table in baseline.sorted_tables:
        if table.name not in existing:
            table.create(conn)
            done.append(f"added table {table.name}")
            continue
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            ddl = f"ALTER TABLE {table.name} ADD COLUMN {column.name} {column.type.compile(conn.dialect)}"
            default = getattr(column.default, "arg", None)
            if not column.nullable:
                if not isinstance(default, bool | int | float | str):
                    raise RuntimeError(f"cannot add required column {table.name}.{column.name} to old data")
                if isinstance(default, bool):
                    literal = "TRUE" if default else "FALSE"
                    if conn.dialect.name == "sqlite":
                        literal = str(int(default))
                else:
                    literal = repr(default) if isinstance(default, str) else str(default)
                ddl += f" NOT NULL DEFAULT {literal}"
            conn.execute(text(ddl))
            if not column.nullable and conn.dialect.name != "sqlite":
                # The default only filled the old rows; the baseline column has none. (SQLite
                # cannot drop it without rebuilding the table; there it stays, harmless.)
                conn.execute(text(f"ALTER TABLE {table.name} ALTER COLUMN {column.name} DROP DEFAULT"))
            done.append(f"added column {table.name}.{column.name}")
        indexes = {i["name"] for i in inspector.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(conn)
                done.append(f"added index {index.name}")
    return done

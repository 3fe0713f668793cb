"""What the tables share: a 64-bit integer column type and times stored in UTC, read back
aware (webui.store.models and the tables beside it)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, Integer

# A 64-bit integer (file sizes, the ids of tables that grow with every event): BIGINT on
# PostgreSQL. SQLite's INTEGER is already 64-bit, and a primary key must stay INTEGER there
# to remain the rowid, so SQLite's schema is unchanged.
BIG_INT = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Stored times come back naive on SQLite (they were written in UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

"""PostgreSQL: 64-bit event ids and file sizes (SQLite's integers are 64-bit already)

Revision ID: 0003_big_ids
Revises: 0002_replicas_sessions
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_big_ids"
down_revision: str | None = "0002_replicas_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column, whether its values come from a sequence)
COLUMNS = (("run_events", "id", True), ("audit_events", "id", True), ("managed_files", "size", False))


def _alter(to: sa.types.TypeEngine[int], sequence_type: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite: INTEGER holds 64 bits, and the id is the rowid
    for table, column, sequenced in COLUMNS:
        op.alter_column(table, column, type_=to)
        if sequenced:
            op.execute(f"ALTER SEQUENCE {table}_{column}_seq AS {sequence_type}")


def upgrade() -> None:
    _alter(sa.BigInteger(), "bigint")


def downgrade() -> None:
    _alter(sa.Integer(), "integer")

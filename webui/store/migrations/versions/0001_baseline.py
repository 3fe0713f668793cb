"""Baseline: the schema of the first migrated release.

Every table with its columns, constraints and indexes, as frozen in
webui/store/migrations/baseline.py.

Revision ID: 0001_baseline
Revises:
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from alembic.operations.ops import CreateIndexOp, CreateTableOp, DropTableOp

from webui.store.migrations.baseline import baseline_metadata

revision: str = "0001_baseline"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in baseline_metadata().sorted_tables:
        op.invoke(CreateTableOp.from_table(table))
        for index in sorted(table.indexes, key=lambda i: i.name or ""):
            op.invoke(CreateIndexOp.from_index(index))


def downgrade() -> None:
    for table in reversed(baseline_metadata().sorted_tables):
        op.invoke(DropTableOp.from_table(table))

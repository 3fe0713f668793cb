"""Runs keep the trace and span ids of their `steamharness.run` span (when tracing is on),
shown on the run page

Revision ID: 0007_run_trace
Revises: 0006_interaction_input_key
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_run_trace"
down_revision: str | None = "0006_interaction_input_key"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("trace_id", sa.String(), nullable=True))
        batch_op.add_column(sa.Column("span_id", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("span_id")
        batch_op.drop_column("trace_id")

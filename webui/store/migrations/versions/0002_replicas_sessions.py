"""Replicas and their leases; runs and MCP sessions record their replica; the sessions console's columns

Revision ID: 0002_replicas_sessions
Revises: 0001_baseline
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_replicas_sessions"
down_revision: str | None = "0001_baseline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("mcp_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_id", sa.String(), nullable=True))
        batch_op.add_column(sa.Column("client_name", sa.String(), nullable=True))
        batch_op.add_column(sa.Column("client_version", sa.String(), nullable=True))
        batch_op.add_column(sa.Column("protocol_version", sa.String(), nullable=True))
        batch_op.add_column(sa.Column("last_activity_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("replica_id", sa.String(), nullable=True))
        batch_op.create_index(batch_op.f("ix_mcp_sessions_key_id"), ["key_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_mcp_sessions_replica_id"), ["replica_id"], unique=False)

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("replica_id", sa.String(), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_replica_id"), ["replica_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_replica_id"))
        batch_op.drop_column("replica_id")

    with op.batch_alter_table("mcp_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_mcp_sessions_replica_id"))
        batch_op.drop_index(batch_op.f("ix_mcp_sessions_key_id"))
        batch_op.drop_column("replica_id")
        batch_op.drop_column("last_activity_at")
        batch_op.drop_column("protocol_version")
        batch_op.drop_column("client_version")
        batch_op.drop_column("client_name")
        batch_op.drop_column("key_id")

    op.drop_table("replicas")

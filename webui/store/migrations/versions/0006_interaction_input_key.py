"""Interactions keep the input-request key their handler chose (`ctx.ask(key=...)`) and,
for a request only the MCP client answers (`ctx.sample`, `ctx.roots`), its parameters

Revision ID: 0006_interaction_input_key
Revises: 0005_knowledge
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_interaction_input_key"
down_revision: str | None = "0005_knowledge"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("interactions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("input_key", sa.String(), nullable=True))
        batch_op.add_column(sa.Column("client_request", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("interactions", schema=None) as batch_op:
        batch_op.drop_column("client_request")
        batch_op.drop_column("input_key")

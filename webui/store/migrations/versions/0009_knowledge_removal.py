"""The knowledge base counts its vectors' bytes (the caps count them with the text's) and
marks a collection being removed (its documents go in short batches, hidden meanwhile)

Revision ID: 0009_knowledge_removal
Revises: 0008_insights
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_knowledge_removal"
down_revision: str | None = "0008_insights"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_INT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("knowledge_collections", schema=None) as batch_op:
        batch_op.add_column(sa.Column("vector_bytes", BIG_INT, nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("removing", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute(
        "UPDATE knowledge_collections SET vector_bytes = (SELECT coalesce(sum(length(c.vector)), 0)"
        " FROM knowledge_chunks c JOIN knowledge_documents d ON d.id = c.document_id"
        " WHERE d.collection_id = knowledge_collections.id AND c.vector IS NOT NULL)"
    )


def downgrade() -> None:
    with op.batch_alter_table("knowledge_collections", schema=None) as batch_op:
        batch_op.drop_column("removing")
        batch_op.drop_column("vector_bytes")

"""The knowledge base: collections, documents, chunks, filterable metadata and the full-text index

Revision ID: 0005_knowledge
Revises: 0004_audit_replica
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_knowledge"
down_revision: str | None = "0004_audit_replica"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_INT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "knowledge_projects",
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("number"),
    )
    op.create_index("ux_knowledge_project", "knowledge_projects", ["project_id"], unique=True)
    op.create_table(
        "knowledge_collections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("language", sa.String(), nullable=False),
        sa.Column("documents", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("size", BIG_INT, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ux_knowledge_collection_name", "knowledge_collections", ["project_id", "name"], unique=True
    )
    op.create_table(
        "knowledge_documents",
        sa.Column("id", BIG_INT, nullable=False),
        sa.Column("project_id", sa.String(), nullable=False),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("doc_id", sa.String(), nullable=False),
        sa.Column("title", sa.String(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("size", BIG_INT, nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ux_knowledge_document", "knowledge_documents", ["project_id", "doc_id"], unique=True)
    op.create_index(
        "ix_knowledge_document_collection", "knowledge_documents", ["collection_id", "doc_id"], unique=False
    )
    op.create_table(
        "knowledge_chunks",
        sa.Column("id", BIG_INT, nullable=False),
        sa.Column("document_id", BIG_INT, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("end", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_knowledge_chunk_document", "knowledge_chunks", ["document_id", "position"], unique=False
    )
    op.create_table(
        "knowledge_meta",
        sa.Column("document_id", BIG_INT, nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("document_id", "key", "value"),
    )
    op.create_index(
        "ix_knowledge_meta_value", "knowledge_meta", ["key", "value", "document_id"], unique=False
    )
    # The full-text index of the chunks' stems (webui.store.knowledge), one row per chunk;
    # on SQLite with the chunk's scope (project, collection, metadata) as tokens of their own.
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE knowledge_fts USING fts5("
            "terms, scope, tokenize = \"unicode61 remove_diacritics 0 tokenchars '_'\")"
        )
    else:
        op.execute("CREATE TABLE knowledge_fts (chunk_id BIGINT PRIMARY KEY, tsv TSVECTOR NOT NULL)")
        op.execute("CREATE INDEX ix_knowledge_fts ON knowledge_fts USING GIN (tsv)")


def downgrade() -> None:
    op.execute("DROP TABLE knowledge_fts")
    op.drop_index("ix_knowledge_meta_value", table_name="knowledge_meta")
    op.drop_table("knowledge_meta")
    op.drop_index("ix_knowledge_chunk_document", table_name="knowledge_chunks")
    op.drop_table("knowledge_chunks")
    op.drop_index("ix_knowledge_document_collection", table_name="knowledge_documents")
    op.drop_index("ux_knowledge_document", table_name="knowledge_documents")
    op.drop_table("knowledge_documents")
    op.drop_index("ux_knowledge_collection_name", table_name="knowledge_collections")
    op.drop_table("knowledge_collections")
    op.drop_index("ux_knowledge_project", table_name="knowledge_projects")
    op.drop_table("knowledge_projects")

"""The knowledge base's tables (queries: webui.store.knowledge); importable from
webui.store.models with every other table."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, Text, false
from sqlmodel import Field, SQLModel

from webui.store.columns import BIG_INT, utcnow

# --------------------------------------------------------------------------- knowledge base
# Per project: collections → documents → chunks. The full-text index of the chunks is not a
# model: `knowledge_fts` is an FTS5 table on SQLite and a tsvector table on PostgreSQL, made
# by the migration and written by webui.store.knowledge alone.
UNMANAGED_PREFIX = "knowledge_fts"


class KnowledgeProject(SQLModel, table=True):
    """A short number per project with a knowledge base: SQLite's index spells the project's
    stems after it (webui.store.knowledge)."""

    __tablename__ = "knowledge_projects"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ux_knowledge_project", "project_id", unique=True),)

    number: int | None = Field(default=None, primary_key=True)
    project_id: str


class KnowledgeCollection(SQLModel, table=True):
    __tablename__ = "knowledge_collections"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ux_knowledge_collection_name", "project_id", "name", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    project_id: str
    name: str
    language: str
    # Its documents, their chunks, bytes of text and of vectors, kept by every write (the
    # caps count them).
    documents: int = 0
    chunks: int = 0
    size: int = Field(default=0, sa_type=BIG_INT)
    created_at: datetime = Field(default_factory=utcnow)
    vector_bytes: int = Field(default=0, sa_type=BIG_INT, sa_column_kwargs={"server_default": "0"})
    # Being removed (webui.knowledge.service): hidden from every read and write while its
    # documents are deleted in short batches, then the row itself.
    removing: bool = Field(default=False, sa_column_kwargs={"server_default": false()})


class KnowledgeDocument(SQLModel, table=True):
    __tablename__ = "knowledge_documents"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (
        Index("ux_knowledge_document", "project_id", "doc_id", unique=True),
        Index("ix_knowledge_document_collection", "collection_id", "doc_id"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG_INT)
    project_id: str
    collection_id: int
    doc_id: str  # the document's id as people and handlers name it (unique in the project)
    title: str
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    source: str  # "text", or the name of the file it was extracted from
    digest: str  # sha256 of the text: the same text added again changes nothing
    size: int = Field(sa_type=BIG_INT)  # the text's length in UTF-8 bytes
    chunks: int
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class KnowledgeChunk(SQLModel, table=True):
    """A consecutive piece of a document's text; the chunks of a document, in position
    order, are its text."""

    __tablename__ = "knowledge_chunks"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ix_knowledge_chunk_document", "document_id", "position"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG_INT)
    document_id: int = Field(sa_type=BIG_INT)
    position: int
    start: int
    end: int
    body: str = Field(sa_column=Column(Text, nullable=False))
    # The chunk's embedding (float32, little-endian) where an embedding endpoint is set.
    vector: bytes | None = None


class KnowledgeMeta(SQLModel, table=True):
    """The filterable part of a document's metadata: one row per top-level key and scalar
    value (one per element of a list), the value as canonical JSON."""

    __tablename__ = "knowledge_meta"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ix_knowledge_meta_value", "key", "value", "document_id"),)

    document_id: int = Field(primary_key=True, sa_type=BIG_INT)
    key: str = Field(primary_key=True)
    value: str = Field(primary_key=True)

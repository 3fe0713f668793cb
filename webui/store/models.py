"""SQLModel tables. One module, because the tables are small and reference each other;
query functions live in one module per entity beside this one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, Text
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class ProjectRecord(SQLModel, table=True):
    """A registered workflow project (its folder is the draft)."""

    __tablename__ = "projects"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    name: str
    root: str
    registered_at: datetime = Field(default_factory=utcnow)


class Run(SQLModel, table=True):
    __tablename__ = "runs"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (
        Index("ix_runs_project_created", "project_id", "created_at"),
        Index("ix_runs_status_owner", "status", "owner"),
    )

    id: str = Field(primary_key=True)
    project_id: str = Field(index=True)
    project_version: str | None = None
    entrypoint_id: str
    entrypoint_title: str
    source: str = "mcp"
    transport: str | None = None
    actor: str | None = None
    session_id: str | None = None
    status: str = "queued"
    params: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    output: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    error: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # Which process drives this run ("pid:starttime"), so a restart can tell an orphaned
    # run from one that another live process still drives on the same data dir.
    owner: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None


class RunEvent(SQLModel, table=True):
    """The run's timeline and log: state changes, stdout/stderr, ctx.log, progress."""

    __tablename__ = "run_events"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ix_run_events_run_seq", "run_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id")
    kind: str  # state | stdout | stderr | log | progress | interaction | file
    source: str = "mcp"
    text: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    data: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(default_factory=utcnow)


class Interaction(SQLModel, table=True):
    """A pending question (form or approval), answerable through any channel."""

    __tablename__ = "interactions"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ix_interactions_status_run", "status", "run_id"),)

    id: str = Field(primary_key=True)
    run_id: str | None = Field(default=None, foreign_key="runs.id")
    origin: str = "run"
    kind: str  # form | approval | url
    title: str
    message: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    requested_schema: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    fields: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    blockers: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    status: str = "pending"  # pending | answered | closed
    action: str | None = None  # accept | decline | cancel
    answer: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    answer_digest: str | None = None
    answered_by: str | None = None
    channel: str | None = None
    expires_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
    answered_at: datetime | None = None


class ManagedFile(SQLModel, table=True):
    __tablename__ = "managed_files"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    project_id: str = Field(index=True)
    name: str
    mime_type: str
    size: int
    sha256: str
    origin: str  # local-import | upload | output
    storage: str  # path of the blob (content-addressed)
    run_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class KVEntry(SQLModel, table=True):
    __tablename__ = "kv_entries"  # pyright: ignore[reportAssignmentType]

    project_id: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    value: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    updated_at: datetime = Field(default_factory=utcnow)


class PersistentValue(SQLModel, table=True):
    __tablename__ = "persistent_values"  # pyright: ignore[reportAssignmentType]

    project_id: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    value: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    updated_at: datetime = Field(default_factory=utcnow)


class AuditEvent(SQLModel, table=True):
    __tablename__ = "audit_events"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ix_audit_time", "created_at", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    event: str = Field(index=True)
    actor: str | None = None
    project_id: str | None = Field(default=None, index=True)
    target: str | None = None
    version: str | None = None
    session_id: str | None = None
    tool: str | None = None
    run_id: str | None = Field(default=None, index=True)
    outcome: str | None = None
    source: str = "mcp"
    client_address: str | None = None
    user_agent: str | None = None
    details: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(default_factory=utcnow)


__all__ = [
    "AuditEvent",
    "Interaction",
    "KVEntry",
    "ManagedFile",
    "PersistentValue",
    "ProjectRecord",
    "Run",
    "RunEvent",
]

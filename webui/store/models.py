"""SQLModel tables. The tables are small and reference each other: they are defined here,
but for the knowledge base's (webui.store.knowledge_tables) and the insights page's
(webui.store.insights_tables), which this module imports, so every table is importable
from here and registered with the metadata once this is imported; query functions live in
one module per entity beside these."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, Text
from sqlmodel import Field, SQLModel

from webui.store.columns import BIG_INT, as_utc, utcnow
from webui.store.insights_tables import DURATION_BOUNDS_MS, DURATION_COLUMNS, POOL_SAMPLES, RUN_ROLLUPS
from webui.store.knowledge_tables import (
    UNMANAGED_PREFIX,
    KnowledgeChunk,
    KnowledgeCollection,
    KnowledgeDocument,
    KnowledgeMeta,
    KnowledgeProject,
)


class ProjectRecord(SQLModel, table=True):
    """A registered workflow project (its folder is the draft)."""

    __tablename__ = "projects"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    name: str
    root: str
    run_gate_open: bool = True
    max_running: int | None = None  # None: the server-wide default
    max_queued: int | None = None
    registered_at: datetime = Field(default_factory=utcnow)


class ProjectVersion(SQLModel, table=True):
    """An immutable published snapshot of a project's draft."""

    __tablename__ = "project_versions"  # pyright: ignore[reportAssignmentType]

    project_id: str = Field(primary_key=True, foreign_key="projects.id")
    version: str = Field(primary_key=True)
    status: str = "online"  # online | offline
    revision: str
    snapshot_dir: str
    published_by: str | None = None
    published_at: datetime = Field(default_factory=utcnow)


class Account(SQLModel, table=True):
    __tablename__ = "accounts"  # pyright: ignore[reportAssignmentType]

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    password_hash: str | None = None
    is_admin: bool = False
    disabled: bool = False
    created_at: datetime = Field(default_factory=utcnow)


class ApiKey(SQLModel, table=True):
    """An account API key. Only a hash of the secret is stored; the raw key is shown once."""

    __tablename__ = "api_keys"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)  # key_<hex>, also the public part of the raw key
    account_id: int = Field(foreign_key="accounts.id", index=True)
    name: str | None = None
    secret_hash: str
    scopes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # None: every project the account may run; otherwise only these project ids.
    projects: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(default_factory=utcnow)
    revoked_at: datetime | None = None


class ProjectCredential(SQLModel, table=True):
    """Embed tokens and webhook secrets: real credentials for their own endpoints, which
    the MCP endpoint recognises in order to refuse them by name."""

    __tablename__ = "project_credentials"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    project_id: str = Field(foreign_key="projects.id", index=True)
    kind: str  # embed_token | webhook_secret
    secret_hash: str = Field(index=True, unique=True)
    created_at: datetime = Field(default_factory=utcnow)


class HostConversation(SQLModel, table=True):
    """A conversation with the configured MCP servers it selected (kept exactly once made)."""

    __tablename__ = "host_conversations"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    account_id: int = Field(foreign_key="accounts.id", index=True)
    title: str
    selection: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    closed_at: datetime | None = None


class HostCall(SQLModel, table=True):
    """One tool call made by the host to a configured server, and its result."""

    __tablename__ = "host_calls"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="host_conversations.id", index=True)
    server_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    status: str = "running"  # running | success | error | failed
    result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    error: str | None = None
    actor: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    # the capture the call's client was built from: the server's source file and its digest
    source: str | None = None
    source_digest: str | None = None


class UiSession(SQLModel, table=True):
    """A browser login. The cookie carries a signed random token; only its hash is stored."""

    __tablename__ = "ui_sessions"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)  # sha256 of the token
    account_id: int = Field(foreign_key="accounts.id", index=True)
    csrf_token: str
    created_at: datetime = Field(default_factory=utcnow)
    last_seen_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None


class ProjectPermission(SQLModel, table=True):
    """Run permission of a (non-admin) account on a project, granted by an admin."""

    __tablename__ = "project_permissions"  # pyright: ignore[reportAssignmentType]

    account_id: int = Field(foreign_key="accounts.id", primary_key=True)
    project_id: str = Field(foreign_key="projects.id", primary_key=True)
    granted_by: str | None = None
    granted_at: datetime = Field(default_factory=utcnow)


class McpSession(SQLModel, table=True):
    """A 2025-era Streamable HTTP session and what it is bound to (never a raw key)."""

    __tablename__ = "mcp_sessions"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    credential: str  # keyed fingerprint of the credential
    actor: str
    project_id: str = Field(index=True)
    target: str
    resolved: str  # exact version, or draft revision
    created_at: datetime = Field(default_factory=utcnow)
    closed_at: datetime | None = None
    close_reason: str | None = None
    # For the sessions console: the API key (None: the server admin key), what the client
    # said in `initialize`, and the last request (written at most once per minute or so).
    key_id: str | None = Field(default=None, index=True)
    client_name: str | None = None
    client_version: str | None = None
    protocol_version: str | None = None
    last_activity_at: datetime | None = None
    # The serve replica holding the session (its in-memory state lives there); None: a
    # session recorded before replicas were.
    replica_id: str | None = Field(default=None, index=True)


class Run(SQLModel, table=True):
    __tablename__ = "runs"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (
        Index("ix_runs_project_created", "project_id", "created_at"),
        Index("ix_runs_status_owner", "status", "owner"),
        Index("ix_runs_created", "created_at", "id"),
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
    # The serve replica driving this run: its lease (table `replicas`) says whether it still
    # can. None: a run of a local (stdio, CLI) process or one recorded before replicas were;
    # `owner` judges those.
    replica_id: str | None = Field(default=None, index=True)
    # Whose run it is: the account whose API key (or browser session, through Try it)
    # started it. Its questions belong to that account. None: the admin principal (the
    # server admin key, a local stdio operator) or a run recorded before owners were.
    account_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # A child run: the run whose handler started it through ctx.related.
    parent_run_id: str | None = Field(default=None, index=True)
    # The configuration the run started with: its name, revision and values as stored
    # (secret values stay encrypted). None: a run recorded before configurations were.
    config_name: str | None = None
    config_revision: int | None = None
    config_values: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # Its `steamharness.run` span, when tracing was on (webui.observability.tracing).
    trace_id: str | None = None
    span_id: str | None = None


class Replica(SQLModel, table=True):
    """A `serve` process of the server and its lease: it renews `heartbeat_at` every few
    seconds; one silent for longer than the lease TTL is gone, and its runs with it."""

    __tablename__ = "replicas"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)  # kept in the replica's data dir (replica-id)
    host: str
    pid: int
    started_at: datetime = Field(default_factory=utcnow)
    heartbeat_at: datetime = Field(default_factory=utcnow)


class RunEvent(SQLModel, table=True):
    """The run's timeline and log: state changes, stdout/stderr, ctx.log, progress."""

    __tablename__ = "run_events"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ix_run_events_run_seq", "run_id", "id"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG_INT)
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
    # True when an administrator answered someone else's question (an explicit override).
    answer_override: bool | None = None
    channel: str | None = None
    # Host requests (origin "host"): which configured server asked, in which conversation;
    # `url` for URL-mode requests; why a request ended without an answer.
    server_id: str | None = None
    conversation_id: str | None = Field(default=None, index=True)
    url: str | None = None
    close_reason: str | None = None
    # The host's tool call (host_calls.id) the server was serving when it asked; None when
    # no single call of the conversation was in flight on that connection.
    host_call_id: str | None = None
    # The input-request key the handler chose for its question (`ctx.ask(key=...)`): what a
    # 2026-07-28 input round names it by. None: the round names it by its id.
    input_key: str | None = None
    # kind "sampling" / "roots": the request's params (sampling/createMessage, roots/list),
    # which only the MCP client that follows the run can answer.
    client_request: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    expires_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
    answered_at: datetime | None = None


class ManagedFile(SQLModel, table=True):
    __tablename__ = "managed_files"  # pyright: ignore[reportAssignmentType]

    id: str = Field(primary_key=True)
    project_id: str = Field(index=True)
    name: str
    mime_type: str
    size: int = Field(sa_type=BIG_INT)  # bytes; a file may pass 2 GiB
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
    # Audit pages are ordered by (created_at, id), newest first; each filter column has an
    # index that continues with that order, so a filtered page is one index range scan. A run
    # has a handful of events, so its plain run_id index (below) serves that filter.
    __table_args__ = (
        Index("ix_audit_time", "created_at", "id"),
        Index("ix_audit_event_time", "event", "created_at", "id"),
        Index("ix_audit_project_time", "project_id", "created_at", "id"),
        Index("ix_audit_actor_time", "actor", "created_at", "id"),
        Index("ix_audit_session_time", "session_id", "created_at", "id"),
        Index("ix_audit_outcome_time", "outcome", "created_at", "id"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG_INT)
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
    # The serve replica that recorded the event (None: the CLI, stdio, a single server).
    replica_id: str | None = None


__all__ = [
    "BIG_INT",
    "DURATION_BOUNDS_MS",
    "DURATION_COLUMNS",
    "POOL_SAMPLES",
    "RUN_ROLLUPS",
    "UNMANAGED_PREFIX",
    "Account",
    "ApiKey",
    "AuditEvent",
    "HostCall",
    "HostConversation",
    "Interaction",
    "KVEntry",
    "KnowledgeChunk",
    "KnowledgeCollection",
    "KnowledgeDocument",
    "KnowledgeMeta",
    "KnowledgeProject",
    "ManagedFile",
    "McpSession",
    "PersistentValue",
    "ProjectCredential",
    "ProjectPermission",
    "ProjectRecord",
    "ProjectVersion",
    "Replica",
    "Run",
    "RunEvent",
    "UiSession",
    "as_utc",
    "utcnow",
]


class ProjectConfig(SQLModel, table=True):
    """One named configuration of a project in one scope. `owner_id` is the account whose
    configuration it is; 0 is the admin principal's scope (the server admin key, and the
    local operator in a local data dir). Secret values are stored encrypted."""

    __tablename__ = "project_configs"  # pyright: ignore[reportAssignmentType]
    __table_args__ = (Index("ux_project_configs_scope_name", "project_id", "owner_id", "name", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    project_id: str
    owner_id: int = 0
    name: str
    values: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    revision: int = 1
    active: bool = False
    updated_at: datetime = Field(default_factory=utcnow)
    updated_by: str | None = None

"""One settings object for every entry point (server, CLI, stdio MCP).

Built explicitly by whoever starts the process (`Settings(...)`), never at import time, so
tests construct their own with temporary directories.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from webui.secret_keys import HOW_TO_MAKE, MIN_SECRET_BYTES, check_secret, weakness

PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "secret", "password", "admin", "test"})


def default_data_dir() -> Path:
    return Path.home() / ".steamharness"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STEAMHARNESS_", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None
    file_store_dir: Path | None = None
    kv_store_dir: Path | None = None
    persistent_value_store_dir: Path | None = None
    file_create_store_dir: Path | None = None
    auth_dir: Path | None = None

    # The root config folder of the host's MCP servers (`config.yaml`, `mcp/`).
    root_dir: Path | None = Field(
        default=None, validation_alias=AliasChoices("root_dir", "STEAMHARNESS_ROOT", "STEAMHARNESS_ROOT_DIR")
    )

    server_admin_key: SecretStr | None = None
    # `/metrics` (Prometheus) answers a scrape bearing this token (or the admin key); with
    # neither set it answers nobody (404).
    metrics_token: SecretStr | None = None
    # Off: MCP requests are not timed and `/metrics` answers 404 (runs, questions and
    # credentials are still counted: a few increments per run).
    metrics_enabled: bool = True
    # The server's log lines: `text` (level, logger, message) or `json` (one object a line,
    # with the run, MCP session and trace it is about).
    log_format: Literal["text", "json"] = "text"
    # One secret for every replica of a server: the cookie, request-state, API-key
    # fingerprint and configuration-secret keys derive from it (webui/secret_keys.py).
    # Unset: each data dir keeps its own random key files under keys/.
    secret_key: SecretStr | None = None
    # Published version snapshots and managed files; replicas of one server share it.
    shared_dir: Path | None = None
    # A serve replica's lease in the database: heartbeat every TTL/3; a replica silent for
    # longer than the TTL is gone, and its active runs are marked interrupted.
    replica_lease_ttl_seconds: float = Field(default=15.0, gt=0)

    # The example projects `serve --demo` registers (default: the checkout's or the working
    # directory's examples/).
    examples_dir: Path | None = None

    host: str = "127.0.0.1"
    port: int = 8000
    projects_dirs: list[Path] = Field(default_factory=list)
    session_idle_timeout_seconds: float = Field(default=1800.0, gt=0)
    # Host/Origin checks against DNS rebinding; loopback is always allowed.
    allowed_hosts: list[str] = Field(default_factory=list)
    allowed_origins: list[str] = Field(default_factory=list)
    public_url: str | None = None
    max_running_per_project: int | None = Field(default=None, ge=1)
    max_queued_per_project: int | None = Field(default=100, ge=0)
    shutdown_grace_seconds: float = 5.0

    ui_idle_timeout_seconds: float = Field(default=1800.0, gt=0)
    ui_absolute_timeout_seconds: float = Field(default=12 * 3600.0, gt=0)
    interaction_expiry_seconds: float = Field(default=300.0, gt=0)

    # Worker slots: runs executing at once (per process). A run waiting for a person or
    # for its child runs gives its slot up but keeps its worker process: those are capped
    # apart, in all and per account with an open question (past a cap, the asking run
    # fails with `too_many_waiting`); the last quarter of `max_waiting_runs` is kept for
    # accounts with none waiting, one each. A question nobody answers within the timeout
    # expires and its run fails with `question_expired`.
    max_concurrent_runs: int = Field(default=8, ge=1)
    max_waiting_runs: int = Field(default=32, ge=1)
    max_waiting_runs_per_account: int = Field(default=8, ge=1)
    question_timeout_seconds: float = Field(default=24 * 3600.0, gt=0)
    # SIGTERM first, SIGKILL after this many seconds, for timeouts and cancellation.
    kill_grace_seconds: float = Field(default=2.0, ge=0)
    max_file_bytes: int = 50 * 1024 * 1024
    request_state_ttl_seconds: float = 3600.0
    # Resumable MCP streams (SEP-1699, 2025-11-25 sessions): each POST stream opens with a
    # priming event whose `retry` tells the client how long to wait before it reconnects
    # (GET with Last-Event-ID) after a dropped connection; the events of a session's streams
    # are kept in memory for that, within these bounds (oldest first past any of them).
    # A call whose client went away ends once nobody resumed its stream for the grace.
    sse_retry_ms: int = Field(default=1000, ge=1)
    sse_resume_grace_seconds: float = Field(default=5.0, ge=0)
    sse_replay_max_events_per_stream: int = Field(default=1000, ge=1)
    sse_replay_max_streams: int = Field(default=10_000, ge=1)
    sse_replay_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    sse_replay_max_age_seconds: float = Field(default=3600.0, gt=0)
    # Seconds between the keep-alive progress notifications of an MCP tool call that carries a
    # progress token while its run is not finished (waiting for a person, a child run, a long
    # step); 0 sends none.
    progress_interval_seconds: float = Field(default=10.0, ge=0)
    # MCP tasks (the tasks extension, 2026-07-28): an "optional" tool's call becomes a task
    # when its run has not ended, asked a question or reported progress within this many
    # seconds; clients are told to poll tasks/get every `task_poll_interval_ms`.
    task_after_seconds: float = Field(default=2.0, ge=0)
    task_poll_interval_ms: int = Field(default=1000, ge=1, le=3_600_000)
    # How long a writer waits for another writer's database lock before the request
    # fails with 503 and Retry-After.
    db_busy_timeout_seconds: float = Field(default=5.0, gt=0)
    # Run records (status, timeline, outcome, their audit events) the database cannot take
    # (locked, disk full) are kept in memory and retried until written (webui.runs.outcomes):
    # at most this many bytes of timeline entries (outcomes are always kept) ...
    pending_records_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    # ... and at shutdown this long to write them before what is left goes to
    # DATA_DIR/pending-run-records.jsonl, written at the next start.
    pending_records_drain_seconds: float = Field(default=5.0, ge=0)
    # A run's stdout, stderr, log lines and progress reach its timeline in batches
    # (webui.runs.timeline): one transaction once a batch holds this many entries ...
    timeline_batch_lines: int = Field(default=100, ge=1, le=100_000)
    # ... or this long after its first entry, and always before the run's next other record
    # (its outcome included). Watchers see the lines at once either way.
    timeline_batch_seconds: float = Field(default=0.1, gt=0, le=3600)

    # Workflow code is untrusted. A server running as root runs it as this user instead;
    # empty keeps root (an explicit opt-out). Ignored when the server is not root.
    worker_user: str = "nobody"
    # Under root, each run gets a uid (and a group of the same number) of its own from
    # base .. base+count-1, needing no passwd entry: runs cannot signal or inspect one
    # another. Far above the ranges accounts and /etc/subuid use; a range a user namespace
    # does not map falls back to worker_user (with a warning); count 0 turns it off.
    worker_uid_base: int = Field(default=1_500_000_000, ge=1, le=2**31 - 1)
    worker_uid_count: int = Field(default=1024, ge=0, le=1_000_000)
    # Under root, the host's stdio MCP servers run as this user (their commands must be
    # executable by it); unset: worker_user; empty: root, an explicit opt-out.
    host_server_user: str | None = None
    # Names of server environment variables handed to runs besides PATH, LANG, LC_*, TZ.
    worker_env_passthrough: list[str] = Field(default_factory=list)
    # Under root, each run sees a filesystem of its own (webui.runs.view): its /tmp,
    # /var/tmp and /dev/shm are one in-memory tmpfs of at most this many bytes.
    worker_tmp_max_bytes: int = Field(default=128 * 1024 * 1024, ge=1024 * 1024)
    # Host folders or files (absolute paths) every run reads besides its project and the
    # interpreter's files: read-only, at their own paths in its filesystem view.
    worker_read_paths: list[str] = Field(default_factory=list)
    # Before a project is added, published or served over stdio (and by `structure`), every
    # entrypoint's handler is imported in a child process (under root as the uid past the runs'
    # range, else worker_user) with this time and address space: an import past either is
    # reported as the project's problem.
    handler_check_seconds: float = Field(default=30.0, gt=0)
    handler_check_memory_bytes: int = Field(default=2 * 1024**3, ge=256 * 1024 * 1024)

    # The HTTP edge (docs/server/reverse-proxy.md).
    # JSON and form bodies; file uploads keep max_file_bytes.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1)
    # An MCP POST's JSON-RPC message (files travel by id, uploaded to the files API); the
    # server and the MCP SDK each parse it once, so this bounds their time too.
    max_mcp_body_bytes: int = Field(default=1024 * 1024, ge=1, le=64 * 1024 * 1024)
    # Addresses or networks (CIDR) whose X-Forwarded-For/-Proto are believed; none by default.
    trusted_proxies: list[str] = Field(default_factory=list)
    # How the server reaches its own MCP endpoint (Try it); by default the listening socket
    # the page request came in on, never a host named by the request.
    internal_url: str | None = None
    login_failures_per_account: int = Field(default=5, ge=1)
    login_failures_per_address: int = Field(default=20, ge=1)
    bearer_failures_per_address: int = Field(default=30, ge=1)
    # Failures older than this no longer count; a throttled client waits until they age out.
    auth_failure_window_seconds: float = Field(default=300.0, gt=0)
    throttle_max_tracked: int = Field(default=10_000, ge=1)
    # How long a throttled attempt waits before its 429 (bounded by its Retry-After).
    throttle_hold_seconds: float = Field(default=1.0, ge=0)
    # uvicorn: a connection must deliver a request's headers within this time.
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    # A request body must arrive within body_timeout_seconds of its head, plus one second for
    # every body_min_rate_bytes_per_second bytes received (a trickle falls behind, a big upload
    # at a fair rate never does); later, the request is refused with 408 and its connection
    # closed (webui/edge/connections.py, webui/edge/guard.py).
    body_timeout_seconds: float = Field(default=30.0, gt=0)
    body_min_rate_bytes_per_second: int = Field(default=1024, ge=1)
    keep_alive_timeout_seconds: int = Field(default=5, ge=1)
    # Open connections; /healthz is still served on a few more (connections.HEALTH_RESERVE).
    max_connections: int = Field(default=1000, ge=1)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"trusted proxy {entry!r} is not an IP address or CIDR network") from None
        return value

    @field_validator("internal_url")
    @classmethod
    def _internal_url_is_http(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError("internal_url must be an http(s) URL without a path, e.g. http://127.0.0.1:8000")
        return value.strip().rstrip("/")

    # Per-credential and per-project ceilings, generous by default: they stop one key or one
    # project from exhausting memory or disk for everyone else.
    max_sessions_per_key: int = Field(default=32, ge=1)
    max_sessions_admin_key: int = Field(default=128, ge=1)
    # How often an open inbox or insights stream re-checks its login: a logged-out session
    # stops receiving, and changed project grants take effect without a reload.
    stream_login_recheck_seconds: float = Field(default=30.0, gt=0)
    # The admin audit page's live tail looks for new rows at least this often (events of
    # this process wake it at once; another replica's rows are found by this look).
    audit_tail_poll_seconds: float = Field(default=1.0, gt=0)
    # The insights page's stream, after a run ends or a question changes, waits this long for
    # the event's neighbours (one read for a burst).
    insights_settle_seconds: float = Field(default=1.0, ge=0)
    # The insights page's stream reads its figures again at least this often (the window slides).
    insights_refresh_seconds: float = Field(default=15.0, gt=0)
    # An insights body rendered this recently is reused by every stream that shows it.
    insights_fresh_seconds: float = Field(default=1.0, ge=0)
    # Each replica's per-minute pool samples (insights) past their keeping time are dropped
    # this often.
    insights_prune_seconds: float = Field(default=600.0, ge=0)
    # Live conversation-view streams (SSE, one per open tab) one account may hold in one
    # serve process; the next is refused with 429 until one closes.
    max_sse_streams_per_account: int = Field(default=8, ge=1)
    project_file_quota_bytes: int = Field(default=5 * 1024**3, ge=0)
    project_file_quota_count: int = Field(default=10_000, ge=0)
    # Downloads of created files one account may have under way at once in one serve process
    # (its client sets their pace); the next is refused with 429 until one ends.
    max_downloads_per_account: int = Field(default=8, ge=1)
    # Named configurations one scope (an account's, or the local one, of one project) may
    # hold, `default` included; creating, copying or importing past it is `too_many_configs`.
    max_configs_per_scope: int = Field(default=50, ge=1)
    # Live (unrevoked) API keys one account may hold; a new one past it is `too_many_keys`
    # (revoke one first). Revoked keys do not count.
    max_keys_per_account: int = Field(default=25, ge=1)
    # The knowledge base of one project (0: no cap); a write past one is `knowledge_full`.
    knowledge_max_documents: int = Field(default=100_000, ge=0)
    knowledge_max_bytes: int = Field(default=1024**3, ge=0)
    knowledge_max_chunks: int = Field(default=1_000_000, ge=0)
    knowledge_max_collections: int = Field(default=100, ge=0)
    # One document's text (a file's is read within max_file_bytes).
    knowledge_max_document_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    # A knowledge-base file (HTML, PDF, .docx) is parsed in a child process (as worker_user
    # when the server is root), killed past this time or address space: the file is refused
    # ("the PDF could not be read within 30 s"), nothing is stored.
    knowledge_extract_seconds: float = Field(default=30.0, gt=0)
    knowledge_extract_memory_bytes: int = Field(default=1024**3, ge=256 * 1024 * 1024)
    # Files parsed at once, of one account and of the server (its last quarter of turns, at
    # least 1, kept for accounts with none being read): one past either waits for a turn up
    # to the wait, then is refused with `too_many_extractions` (429, Retry-After).
    knowledge_extracts_per_account: int = Field(default=2, ge=1)
    knowledge_extracts: int = Field(default=4, ge=1)
    knowledge_extract_wait_seconds: float = Field(default=10.0, ge=0)
    # An OpenAI-compatible embeddings endpoint (`…/v1/embeddings`): chunks are embedded when
    # added and searches may rank by vector too. Unset: full-text search alone.
    embeddings_url: str | None = None
    embeddings_key: SecretStr | None = None
    embeddings_model: str = "text-embedding-3-small"
    # Requests a minute the server sends the embeddings endpoint (a paid API), all accounts
    # together (0: no limit), its last quarter kept for accounts that sent none within the
    # minute; a call past it is refused with `embeddings_throttled` (429, Retry-After).
    embeddings_requests_per_minute: int = Field(default=600, ge=0)
    # Requests a minute one account's searches, adds and imports (its runs' included) send
    # the embeddings endpoint (0: no limit); past it: `embeddings_throttled` (429, Retry-After).
    embeddings_requests_per_minute_per_account: int = Field(default=120, ge=0)
    # The server's requests in flight to the embeddings endpoint, a quarter of them (at least
    # one) an account's, the last quarter kept for accounts with none; another waits up to
    # 30 s for one, then is refused with `embeddings_throttled`.
    embeddings_max_concurrent: int = Field(default=8, ge=1)
    # Knowledge-base searches and exports one account may run at once in one serve process
    # (an export holds one until it is downloaded); the next is `too_many_reads` (429).
    knowledge_max_reads_per_account: int = Field(default=4, ge=1)

    @field_validator("server_admin_key")
    @classmethod
    def _refuse_placeholder_admin_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        raw = value.get_secret_value()
        if len(raw) < 24 or raw.lower() in PLACEHOLDER_SECRETS:
            raise ValueError(
                "STEAMHARNESS_SERVER_ADMIN_KEY is too weak: use at least 24 random characters"
                " (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return value

    @field_validator("metrics_token")
    @classmethod
    def _refuse_weak_metrics_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        reason = weakness(value.get_secret_value())  # the secret key's own rule
        if reason is not None:
            raise ValueError(
                f"STEAMHARNESS_METRICS_TOKEN is too weak ({reason}): use at least {MIN_SECRET_BYTES}"
                f" random bytes, e.g. {HOW_TO_MAKE}"
            )
        return value

    @field_validator("secret_key")
    @classmethod
    def _refuse_weak_secret_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        check_secret(value.get_secret_value())
        return value

    # Derived locations: each one an option of its own, defaulting under the data dir
    # (shared ones under the shared dir, which defaults to the data dir).
    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'steamharness.sqlite3'}"

    @property
    def resolved_file_store_dir(self) -> Path:
        return self.file_store_dir or self.resolved_shared_dir / "files"

    @property
    def resolved_file_create_store_dir(self) -> Path:
        return self.file_create_store_dir or self.resolved_shared_dir / "created-files"

    @property
    def resolved_auth_dir(self) -> Path:
        return self.auth_dir or self.data_dir

    @property
    def resolved_root_dir(self) -> Path:
        return self.root_dir or self.data_dir

    @property
    def resolved_host_server_user(self) -> str:
        return self.worker_user if self.host_server_user is None else self.host_server_user

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

    @property
    def resolved_shared_dir(self) -> Path:
        return self.shared_dir or self.data_dir

    @property
    def versions_dir(self) -> Path:
        return self.resolved_shared_dir / "versions"


def setting_default(name: str) -> Any:
    """The default of setting `name`: for a function the app calls with the setting's value,
    when another caller (a test, a tool) leaves it out. One home for the value: the field."""
    return Settings.model_fields[name].default

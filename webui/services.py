"""The long-lived services, built once per process from Settings and torn down in
reverse order. Both transports (stdio now, the HTTP app later) use this one builder."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from webui.audit.log import AuditLog
from webui.blocking import TaskSet, run_db
from webui.bounded_child import RunAs
from webui.configs.secrets import SecretBox
from webui.configs.service import ConfigService
from webui.events import EventHub
from webui.files.created import SETTING as CREATED_FILES_SETTING
from webui.files.created import prepare_dir
from webui.files.store import FileStore
from webui.interactions.service import InteractionService
from webui.knowledge.embeddings import Embedder
from webui.knowledge.gates import EmbeddingsGate, ReadSlots
from webui.knowledge.model import Limits
from webui.knowledge.reader import FileReader, ReadLimits
from webui.knowledge.service import KnowledgeService
from webui.replicas import ReplicaLease
from webui.runs.isolation import read_paths, worker_uids, worker_user
from webui.runs.outcomes import PENDING_FILE
from webui.runs.pool import ViewSettings, WorkerPool
from webui.runs.service import RunService
from webui.runs.timeline import BatchLimits
from webui.secret_keys import derive_key
from webui.settings import Settings
from webui.store.db import make_engine, private_dir, sqlite_url
from webui.store.notify import PgRelay, is_postgres
from webui.store.paths import private_folder, relativize_paths, tighten

log = logging.getLogger(__name__)


@dataclass
class Services:
    settings: Settings
    engine: Engine
    audit: AuditLog
    files: FileStore
    interactions: InteractionService
    pool: WorkerPool
    runs: RunService
    hub: EventHub
    configs: ConfigService
    knowledge: KnowledgeService
    # This process's lease as a serve replica (webui.replicas); None in a local process.
    replica: ReplicaLease | None = None


def _side_engine(main: Engine, directory: Path | None, filename: str) -> Engine:
    if directory is None:
        return main
    return make_engine(sqlite_url(directory / filename))


def database_urls(settings: Settings) -> list[str]:
    """Every database the services open: the store, then the kv and persistent-value stores
    when they are kept apart (each is migrated like the store)."""
    urls = [settings.resolved_database_url]
    urls += [
        sqlite_url(directory / filename)
        for directory, filename in (
            (settings.kv_store_dir, "kv.sqlite3"),
            (settings.persistent_value_store_dir, "values.sqlite3"),
        )
        if directory is not None
    ]
    return urls


def event_hub(database_url: str) -> EventHub:
    """In-process on SQLite (one server process); on PostgreSQL the replicas sharing the
    database also exchange events over LISTEN/NOTIFY."""
    if is_postgres(database_url):
        return EventHub(relay=PgRelay(database_url))
    return EventHub()


def request_state_key(settings: Settings) -> bytes:
    """The AES key that seals 2026-07-28 request state, persisted so resumption survives a
    restart. Created on first use, readable by the owner only."""
    return persistent_secret(settings, "request-state.key")


def config_service(settings: Settings, engine: Engine, audit: AuditLog) -> ConfigService:
    """The configuration service; secret values are sealed with the configuration key. Under
    a secret key, values sealed earlier with this data dir's own key file still open."""
    fallbacks: list[bytes] = []
    if settings.secret_key is not None:
        with contextlib.suppress(FileNotFoundError):
            fallbacks.append((settings.keys_dir / "config.key").read_bytes())
    box = SecretBox(persistent_secret(settings, "config.key"), fallbacks=fallbacks)
    return ConfigService(engine, box=box, audit=audit, max_per_scope=settings.max_configs_per_scope)


def knowledge_service(settings: Settings, engine: Engine, main: Engine, audit: AuditLog) -> KnowledgeService:
    """The knowledge base: in the persistent-value store (the main store unless
    `--persistent-value-store-dir` keeps it apart), audited in the main store."""
    limits = Limits(
        max_documents=settings.knowledge_max_documents,
        max_bytes=settings.knowledge_max_bytes,
        max_chunks=settings.knowledge_max_chunks,
        max_collections=settings.knowledge_max_collections,
        max_document_bytes=settings.knowledge_max_document_bytes,
        max_file_bytes=settings.max_file_bytes,
    )
    user = worker_user(settings.worker_user, what="knowledge-base file parsing")
    reader = FileReader(
        ReadLimits(
            seconds=settings.knowledge_extract_seconds,
            memory_bytes=settings.knowledge_extract_memory_bytes,
            per_account=settings.knowledge_extracts_per_account,
            total=settings.knowledge_extracts,
            wait_seconds=settings.knowledge_extract_wait_seconds,
        ),
        max_file_bytes=settings.max_file_bytes,
        max_text_bytes=settings.knowledge_max_document_bytes,
        run_as=RunAs(user.uid, user.gid) if user is not None else None,
    )
    embedder = None
    if settings.embeddings_url:
        key = settings.embeddings_key.get_secret_value() if settings.embeddings_key else None
        embedder = Embedder(settings.embeddings_url, key=key, model=settings.embeddings_model)
    gate = EmbeddingsGate(
        per_minute=settings.embeddings_requests_per_minute,
        per_account_per_minute=settings.embeddings_requests_per_minute_per_account,
        concurrent=settings.embeddings_max_concurrent,
    )
    return KnowledgeService(
        engine,
        audit=audit,
        audit_engine=main,
        limits=limits,
        embedder=embedder,
        reader=reader,
        gate=gate,
        reads=ReadSlots(settings.knowledge_max_reads_per_account),
    )


def persistent_secret(settings: Settings, name: str) -> bytes:
    """The key named `name`: derived from the secret key when one is set (the same on every
    replica), else 32 random bytes kept under the data dir's keys folder (mode 0600)."""
    if settings.secret_key is not None:
        return derive_key(settings.secret_key.get_secret_value(), name)
    path = settings.keys_dir / name
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        pass
    else:
        os.chmod(path, 0o600)  # a key file from an older version may be world-readable
        return key
    private_dir(settings.keys_dir)
    key = os.urandom(32)
    tmp = path.with_name(f".{name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    try:
        os.link(tmp, path)  # atomic: the first process to create it wins
    except FileExistsError:
        key = path.read_bytes()
    finally:
        os.unlink(tmp)
    return key


async def _warm(pool: WorkerPool) -> None:
    try:
        await pool.start()
    except Exception:  # a background task's top level: the first run starts the pool again
        log.warning("could not start the worker pool ahead of the first run", exc_info=True)


@contextlib.asynccontextmanager
async def open_services(
    settings: Settings,
    *,
    replica_id: str | None = None,
    warm_pool: bool = False,
) -> AsyncIterator[Services]:
    """`replica_id`: this process serves as that replica of the server (webui.replicas): its
    runs are recorded as the replica's, judged by its lease, which it keeps while open.

    The worker pool starts its zygote at the first run, so a process that never runs
    anything never pays for one; `warm_pool`: start it now, in the background, so that the
    first run does not wait for it either (a long-lived server)."""
    user = worker_user(settings.worker_user)  # fails before anything is created
    uids = worker_uids(settings.worker_uid_base, settings.worker_uid_count) if user else None
    view = ViewSettings(settings.worker_tmp_max_bytes, read_paths(settings.worker_read_paths))
    private_dir(settings.data_dir)
    # Snapshots, managed and created files: the server's alone (a run reaches its own
    # snapshot through a descriptor); folders made by older versions are tightened.
    private_folder(settings.resolved_shared_dir)
    created_dir = prepare_dir(settings.resolved_file_create_store_dir, CREATED_FILES_SETTING)
    tighten(created_dir)
    engine = make_engine(settings.resolved_database_url, busy_timeout=settings.db_busy_timeout_seconds)
    hub = event_hub(settings.resolved_database_url)
    await hub.start()
    audit = AuditLog(hub, replica_id=replica_id)
    files = FileStore(
        engine,
        settings.resolved_file_store_dir,
        max_bytes=settings.max_file_bytes,
        audit=audit,
        quota_bytes=settings.project_file_quota_bytes,
        quota_files=settings.project_file_quota_count,
        root=settings.resolved_shared_dir,
    )
    interactions = InteractionService(engine, audit, hub)
    pool = WorkerPool(user=user, uids=uids, view=view)
    values_engine = _side_engine(engine, settings.persistent_value_store_dir, "values.sqlite3")
    knowledge = knowledge_service(settings, values_engine, engine, audit)
    runs = RunService(
        engine=engine,
        pool=pool,
        interactions=interactions,
        files=files,
        audit=audit,
        kv_engine=_side_engine(engine, settings.kv_store_dir, "kv.sqlite3"),
        values_engine=values_engine,
        knowledge=knowledge,
        file_create_dir=created_dir,
        max_concurrent_runs=settings.max_concurrent_runs,
        max_waiting_runs=settings.max_waiting_runs,
        max_waiting_per_account=settings.max_waiting_runs_per_account,
        question_timeout_seconds=settings.question_timeout_seconds,
        kill_grace_seconds=settings.kill_grace_seconds,
        hub=hub,
        replica_id=replica_id,
        pending_records=settings.data_dir / PENDING_FILE,
        pending_records_bytes=settings.pending_records_max_bytes,
        records_drain_seconds=settings.pending_records_drain_seconds,
    )
    runs.records.timeline.limits = BatchLimits(settings.timeline_batch_lines, settings.timeline_batch_seconds)
    try:
        # Rows written when stored paths were absolute (a no-op once they are relative).
        await run_db(relativize_paths, engine, settings.resolved_shared_dir)
        await run_db(runs.recover)
        replica: ReplicaLease | None = None
        if replica_id is not None:
            replica = ReplicaLease(
                engine,
                replica_id=replica_id,
                ttl=settings.replica_lease_ttl_seconds,
                interactions=interactions,
                audit=audit,
            )
            await run_db(replica.claim)
        tasks = TaskSet()
        runs.start_watching()
        try:
            configs = config_service(settings, engine, audit)
            if replica is not None:
                tasks.spawn(replica.keep(), name=f"lease {replica_id}")
            if warm_pool:
                tasks.spawn(_warm(pool), name="worker pool")
            tasks.spawn(knowledge.resume_removals(), name="knowledge removals")
            yield Services(
                settings, engine, audit, files, interactions, pool, runs, hub, configs, knowledge, replica
            )
        finally:
            await tasks.cancel_all()
            await knowledge.close()
            await runs.shutdown()
            if replica is not None:
                await replica.stop()
            await pool.close()
    finally:
        await hub.close()
        engine.dispose()

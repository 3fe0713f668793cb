"""Engine construction. SQLite gets WAL and a busy timeout; any other SQLAlchemy URL is
used as given, and nothing in the query modules is SQLite-specific. The schema is Alembic's
(webui.store.schema): opening an engine checks it, never changes it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session, SQLModel, create_engine

from webui.store import models  # noqa: F401  (registers the tables)

DEFAULT_BUSY_TIMEOUT_SECONDS = 5.0

# Writes the audit event about a change with the change's own open session, so both commit
# together (webui.audit.log.AuditLog.record).
AuditWrite = Callable[[Session], object]
RowT = TypeVar("RowT", bound=SQLModel)


def add_row(engine: Engine, row: RowT, *, audit: AuditWrite | None = None) -> RowT:
    """A row — new, or loaded earlier and changed since — and the audit event about it, in one
    transaction."""
    with Session(engine, expire_on_commit=False) as s:
        s.add(row)
        if audit is not None:
            audit(s)
        s.commit()
    return row


def get_row(engine: Engine, model: type[RowT], key: Any) -> RowT | None:
    """One row by primary key, usable after its session closed."""
    with Session(engine, expire_on_commit=False) as s:
        return s.get(model, key)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def private_dir(path: Path) -> None:
    """Create `path` (and parents) if need be, and make it the owner's alone (0700)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)


def _private_sqlite_file(path: Path) -> None:
    """The database file is the owner's alone (0600); SQLite gives its -wal and -shm files
    the database file's mode."""
    if str(path) in ("", ":memory:") or str(path).startswith("file:") or "?" in str(path):
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)


def make_engine(
    url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT_SECONDS, check_schema: bool = True
) -> Engine:
    """Create the engine. A writer waits at most `busy_timeout` seconds for another writer's
    lock, then fails (the server answers 503). With `check_schema` the database must be at the
    newest revision (one query; an empty SQLite database is created at it), else
    SchemaOutOfDate; without it nothing is read (`db` commands, and `serve` before it
    upgrades: webui.store.schema)."""
    busy_ms = int(busy_timeout * 1000)
    if url.startswith("sqlite:///"):
        _private_sqlite_file(Path(url.removeprefix("sqlite:///")))
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_timeout})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
    else:
        engine = create_engine(url, pool_pre_ping=True)
    if check_schema:
        from webui.store.schema import check_schema as check

        try:
            check(engine)
        except BaseException:
            engine.dispose()
            raise
    return engine


@contextlib.contextmanager
def quick_write(engine: Engine) -> Iterator[Connection]:
    """A transaction for a write that may be skipped: it fails at once (OperationalError)
    instead of waiting when another writer holds the lock."""
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            before = int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0)
            conn.exec_driver_sql("PRAGMA busy_timeout=0")
            try:
                yield conn
            finally:
                conn.exec_driver_sql(f"PRAGMA busy_timeout={before}")
        else:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL lock_timeout = '50ms'")
            yield conn


def unit_of_work(engine: Engine) -> Session:
    """A session for several store calls that must share one transaction (a decision made
    between a read and a write); it commits only where a store call says so. Rows stay
    readable after the commit."""
    return Session(engine, expire_on_commit=False)


def ping(engine: Engine) -> None:
    """A trivial read: the database answers."""
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")

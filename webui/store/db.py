"""Engine construction. SQLite gets WAL and a busy timeout; PostgreSQL (psycopg 3, the
`postgres` extra) gets UTC sessions, a lock timeout and a connection pool as large as the
database threads; any other SQLAlchemy URL is used as given. Nothing in the query modules
is specific to one database. The schema is Alembic's (webui.store.schema): opening an
engine checks it, never changes it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlmodel import Session, SQLModel, create_engine

from webui.errors import ConfigError
from webui.store import models  # noqa: F401  (registers the tables)

DEFAULT_BUSY_TIMEOUT_SECONDS = 5.0
# PostgreSQL connections: one per database thread (webui.blocking.DB_THREADS) plus the
# threads that write outside that limiter (run bookkeeping, audit tail), with headroom.
PG_POOL_SIZE = 16
PG_POOL_OVERFLOW = 16
PG_DRIVER = "postgresql+psycopg"

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


class bytewise(FunctionElement[Any]):
    """A text column ordered byte by byte, the way SQLite orders it. PostgreSQL would use the
    database's collation, in which, for one, case and punctuation weigh less than letters."""

    inherit_cache = True
    name = "bytewise"

    def __init__(self, column: Any) -> None:
        super().__init__(column)
        self.type = column.type


@compiles(bytewise)
def _bytewise(element: bytewise, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(bytewise, "postgresql")
def _bytewise_postgresql(element: bytewise, compiler: SQLCompiler, **kw: Any) -> str:
    return f'{compiler.process(element.clauses, **kw)} COLLATE "C"'


def storable_text(engine: Engine, value: str | None) -> str | None:
    """Text as the database can keep it: PostgreSQL text cannot hold NUL characters, so
    there each becomes U+FFFD (SQLite keeps them)."""
    if value is None or engine.dialect.name != "postgresql" or "\x00" not in value:
        return value
    return value.replace("\x00", "\ufffd")


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
    # A file that exists is never opened here: closing any descriptor of a file drops every
    # POSIX lock this process holds on it, SQLite's included, so another engine of this
    # process on the same file (a command's next to a server's) would lose its locks.
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    else:
        if mode & 0o077:
            os.chmod(path, 0o600)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)


def engine_url(url: str) -> str:
    """The URL SQLAlchemy is given: a plain `postgresql://` (or `postgres://`) URL uses psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return f"{PG_DRIVER}://{url.removeprefix(prefix)}"
    return url


def _postgres_engine(url: str, busy_ms: int) -> Engine:
    try:
        import psycopg  # noqa: F401  (the driver SQLAlchemy loads for postgresql+psycopg)
    except ImportError:
        raise ConfigError(
            "database URL: PostgreSQL needs the psycopg driver: pip install 'steamharness[postgres]'"
        ) from None
    # Stored times are UTC: the session time zone makes `timestamp` columns read and write
    # UTC whatever the server's default. `lock_timeout` is the busy timeout's counterpart.
    options = f"-c timezone=UTC -c lock_timeout={busy_ms}"
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=PG_POOL_SIZE,
        max_overflow=PG_POOL_OVERFLOW,
        connect_args={"options": options},
    )


def make_engine(
    url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT_SECONDS, check_schema: bool = True
) -> Engine:
    """Create the engine. A writer waits at most `busy_timeout` seconds for another writer's
    lock, then fails (the server answers 503). With `check_schema` the database must be at the
    newest revision (one query; an empty SQLite database is created at it), else
    SchemaOutOfDate; without it nothing is read (`db` commands, and `serve` before it
    upgrades: webui.store.schema)."""
    busy_ms = int(busy_timeout * 1000)
    url = engine_url(url)
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
    elif url.startswith(f"{PG_DRIVER}://"):
        engine = _postgres_engine(url, busy_ms)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    if check_schema:
        from webui.store.schema import check_schema as check

        try:
            check(engine)
        except OperationalError as exc:
            engine.dispose()
            if engine.dialect.name == "sqlite":
                raise
            where = engine.url.render_as_string(hide_password=True)
            first = str(exc.orig or exc).strip().splitlines()[0]
            raise ConfigError(f"database {where}: {first}") from None
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

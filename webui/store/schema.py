"""The schema's revision. Opening the store checks it with one query and no Alembic import
(`check_schema`); `upgrade_database` brings a database to the newest revision with Alembic,
under a lock, so that two processes starting at once migrate it once: a PostgreSQL advisory
lock held by the connection that migrates, or an flock on a file beside a SQLite database.

Four states: at head (ready); behind or made before migrations (ordinary commands refuse
it and name `steamharness db upgrade`); empty (a SQLite database is created at head on
first use, since that alters nothing; an empty server database waits for `db upgrade`);
ahead, at a revision this release does not know (refused: a newer release migrated it)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from webui.errors import SchemaOutOfDate
from webui.store.migrations import BASELINE, HEAD, SCRIPT_DIR

if TYPE_CHECKING:
    from alembic.config import Config

# pg_advisory_lock's key for migrations: any fixed 64-bit number the product uses for nothing else.
ADVISORY_LOCK_KEY = 0x5354_4D48_4D49_4752  # "STMHMIGR"
UPGRADE_HINT = "run `steamharness db upgrade`"


@dataclass(frozen=True)
class SchemaState:
    """What a database holds: its revision (None when it has no alembic_version table) and,
    without one, whether any of the store's tables exist (a data dir made before migrations)."""

    revision: str | None
    has_tables: bool

    @property
    def empty(self) -> bool:
        return self.revision is None and not self.has_tables

    @property
    def legacy(self) -> bool:
        return self.revision is None and self.has_tables

    def describe(self) -> str:
        if self.empty:
            return "empty"
        if self.legacy:
            return "made before migrations (no revision)"
        return f"at revision {self.revision}"


def read_state(conn: Connection) -> SchemaState:
    """One query when the database has a revision; a table listing when it has none. Leaves
    no transaction open."""
    try:
        revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    except DBAPIError:
        revision = None
    conn.rollback()  # after a failed statement, PostgreSQL refuses anything more in its transaction
    if revision is not None:
        return SchemaState(str(revision), True)
    from webui.store.migrations.baseline import baseline_metadata

    tables = set(inspect(conn).get_table_names())
    conn.rollback()
    return SchemaState(None, bool(tables & set(baseline_metadata().tables)))


def check_schema(engine: Engine) -> None:
    """Pass when the database is at head; create an empty SQLite database at head; otherwise
    refuse with what to do (SchemaOutOfDate). Never alters an existing schema."""
    with engine.connect() as conn:
        state = read_state(conn)
    if state.revision == HEAD:
        return
    if state.empty and engine.dialect.name == "sqlite":
        upgrade_database(engine)
        return
    raise SchemaOutOfDate(refusal(state))


def refusal(state: SchemaState) -> str:
    if state.revision is not None and not is_known(state.revision):
        return (
            f"the database is at revision {state.revision}, which this release does not know "
            f"(its newest is {HEAD}): a newer release migrated it; run that release"
        )
    if state.empty:
        where = "is empty"
    elif state.legacy:
        where = "was made before migrations (it has no revision)"
    else:
        where = f"is at revision {state.revision}"
    return f"the database {where}, this release needs {HEAD}: {UPGRADE_HINT}"


def is_known(revision: str) -> bool:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


def alembic_config(conn: Connection | None = None) -> Config:
    """Alembic's configuration, in code: the environment inside this package, migrating over
    `conn`."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPT_DIR).replace("%", "%%"))
    config.set_main_option("file_template", "%%(rev)s")  # versions/<revision id>.py
    config.attributes["connection"] = conn
    return config


def head_revision() -> str:
    """The newest revision as the revisions themselves say (HEAD must equal it)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("the migrations have no head revision")
    return head


def upgrade_database(engine: Engine) -> list[str]:
    """Bring the database to head under the migration lock; returns what was done (nothing
    when it already was at head). A data dir made before migrations is first brought to the
    baseline by adding what it lacks, then stamped."""
    from alembic import command
    from alembic.script import ScriptDirectory

    done: list[str] = []
    with migration_lock(engine) as conn:
        state = read_state(conn)
        if state.revision is not None and not is_known(state.revision):
            raise SchemaOutOfDate(refusal(state))
        config = alembic_config(conn)
        if state.legacy:
            from webui.store.migrations.baseline import baseline_metadata
            from webui.store.migrations.legacy import bring_to_baseline

            with conn.begin():
                added = bring_to_baseline(conn, baseline_metadata())
            done += added
            command.stamp(config, BASELINE)
            conn.commit()
            done.append(f"stamped {BASELINE} (a data dir made before migrations)")
            state = SchemaState(BASELINE, True)
        script = ScriptDirectory.from_config(config)
        pending = list(reversed(list(script.iterate_revisions("head", state.revision))))
        if pending:
            command.upgrade(config, "head")
            conn.commit()
            if state.revision is None and not state.legacy:  # a new database: one line will do
                done.append(f"created the schema at {pending[-1].revision}")
            else:
                done += [f"applied {rev.revision}: {first_line(rev.doc)}" for rev in pending]
    return done


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


@contextlib.contextmanager
def migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection that alone may migrate: on PostgreSQL it holds an advisory lock; a SQLite
    database file is locked through `<file>.migrate.lock` beside it. Other databases get no
    lock (run `db upgrade` once, before the replicas start)."""
    with contextlib.ExitStack() as stack:
        path = engine.url.database if engine.dialect.name == "sqlite" else None
        if path and path != ":memory:" and not path.startswith("file:"):
            fd = os.open(f"{path}.migrate.lock", os.O_RDWR | os.O_CREAT, 0o600)
            stack.callback(os.close, fd)
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
        conn = stack.enter_context(engine.connect())
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({ADVISORY_LOCK_KEY})")
            conn.commit()
            try:
                yield conn
            finally:
                conn.rollback()
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({ADVISORY_LOCK_KEY})")
                conn.commit()
        else:
            yield conn

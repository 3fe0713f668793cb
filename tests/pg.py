"""A throwaway PostgreSQL cluster for the tests, and the `database_url` fixture that runs a
test once on SQLite and once on PostgreSQL.

The cluster is Debian's `postgresql` (scripts/test installs it): initdb into a temporary
folder, owned by the `postgres` user when the tests run as root, listening on a free
loopback port with its unix socket in that folder, fsync off. It starts on first use, once
per session, and is stopped by its PID at the end. Each test gets a database of its own,
copied from a template that already holds the tables, and dropped afterwards.

Without the binaries every PostgreSQL case fails, naming the package to install: a missing
database must never look like a passing suite.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from webui.store.db import make_engine
from webui.store.schema import upgrade_database

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
TEMPLATE = "steamharness_template"
_names = itertools.count(1)


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    """A running cluster: connect as `user` over TCP on 127.0.0.1:`port`."""

    port: int
    user: str
    folder: Path
    pid: int

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def admin(self) -> Engine:
        return create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool)

    def create_database(self, name: str, template: str | None = None) -> None:
        engine = self.admin()
        try:
            with engine.connect() as conn:
                suffix = f" TEMPLATE {template}" if template else ""
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"{suffix}')
        finally:
            engine.dispose()

    def drop_database(self, name: str) -> None:
        engine = self.admin()
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            engine.dispose()


def _owner(run_as: str | None) -> dict[str, Any]:
    """Popen arguments that run the process as `run_as` (PostgreSQL refuses to run as root);
    the process started is PostgreSQL itself, so its PID is the one to stop."""
    return {"user": run_as, "group": run_as, "extra_groups": []} if run_as else {}


def _start(bin_dir: Path, folder: Path) -> tuple[subprocess.Popen[bytes], int, str]:
    """initdb and start the cluster in `folder`; (process, port, superuser)."""
    run_as = "postgres" if os.geteuid() == 0 else None
    user = run_as or pwd.getpwuid(os.geteuid()).pw_name
    data = folder / "data"
    if run_as:
        pw = pwd.getpwnam(run_as)
        os.chown(folder, pw.pw_uid, pw.pw_gid)
    subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
        timeout=120,
        cwd=folder,
        **_owner(run_as),
    )
    port = _free_port()
    log = (folder / "server.log").open("ab")
    proc = subprocess.Popen(
        [
            str(bin_dir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={folder}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=300",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=folder,
        **_owner(run_as),
    )
    log.close()
    return proc, port, user


def _wait_ready(proc: subprocess.Popen[bytes], bin_dir: Path, port: int, folder: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited at start-up:\n{(folder / 'server.log').read_text()}")
        ready = subprocess.run(
            [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-t", "1"],
            capture_output=True,
            timeout=30,
        )
        if ready.returncode == 0:
            return
        time.sleep(0.05)  # polling a port that is not listening yet, bounded by the deadline
    raise RuntimeError(f"PostgreSQL did not answer within {START_TIMEOUT}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Fast shutdown by PID (SIGINT is PostgreSQL's fast mode), then kill if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.fail(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
            "apt-get install postgresql (scripts/test installs it)",
            pytrace=False,
        )
    folder = Path(tempfile.mkdtemp(prefix="steamharness-pg-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc, port, user = _start(bin_dir, folder)
        _wait_ready(proc, bin_dir, port, folder)
        cluster = PgCluster(port=port, user=user, folder=folder, pid=proc.pid)
        cluster.create_database(TEMPLATE)
        # The schema at the newest revision, copied into every test database.
        engine = make_engine(cluster.url(TEMPLATE), check_schema=False)
        upgrade_database(engine)
        engine.dispose()
        yield cluster
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


def fresh_name() -> str:
    """A database name no other test of this run uses."""
    return f"t{os.getpid()}_{next(_names)}"


@contextlib.contextmanager
def fresh_database(cluster: PgCluster) -> Iterator[str]:
    """A new database holding the tables, for one test; dropped afterwards (with any
    connection still open to it)."""
    name = fresh_name()
    cluster.create_database(name, template=TEMPLATE)
    try:
        yield cluster.url(name)
    finally:
        cluster.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store's URL for one test: a SQLite file in the test's folder, or a fresh
    PostgreSQL database."""
    if request.param == "sqlite":
        # where the server keeps it by default, for a data dir `tmp_path / "data"`
        yield f"sqlite:///{tmp_path / 'data' / 'steamharness.sqlite3'}"
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    with fresh_database(cluster) as url:
        yield url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server_database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The store of a module's live server: None for the server's default (SQLite in its
    data dir), or a fresh PostgreSQL database for the module."""
    if request.param == "sqlite":
        yield None
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    with fresh_database(cluster) as url:
        yield url


@pytest.fixture
def postgresql_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A fresh PostgreSQL database, for what only PostgreSQL does (its locks, its errors)."""
    with fresh_database(pg_cluster) as url:
        yield url

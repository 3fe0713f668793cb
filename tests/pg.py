"""A throwaway PostgreSQL cluster for the tests, and the `database_url` fixture that runs a
test on SQLite, and once more on PostgreSQL where the dialect can make a difference.

The cluster is Debian's `postgresql` (scripts/test installs it): initdb into a temporary
folder, owned by the `postgres` user when the tests run as root, listening on a free
loopback port with its unix socket in that folder, fsync off. It starts on first use, once
per run (one for all xdist workers), and is stopped by its PID at the end of the run. Each
test gets a database of its own, copied from a template that already holds the tables, and
dropped afterwards.

Without the binaries every PostgreSQL case fails, naming the package to install: a missing
database must never look like a passing suite.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import itertools
import json
import os
import pwd
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
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

    def create_database(self, name: str, template: str | None = None, *, admin: Engine | None = None) -> None:
        """`admin`: an engine of `admin()` to use (else one made and disposed here)."""
        engine = admin or self.admin()
        try:
            with engine.connect() as conn:
                suffix = f" TEMPLATE {template}" if template else ""
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"{suffix}')
        finally:
            if admin is None:
                engine.dispose()

    def drop_database(self, name: str, *, admin: Engine | None = None) -> None:
        engine = admin or self.admin()
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            if admin is None:
                engine.dispose()


def _owner(run_as: str | None) -> dict[str, Any]:
    """subprocess arguments that run the command as `run_as` (PostgreSQL refuses to run as
    root)."""
    return {"user": run_as, "group": run_as, "extra_groups": []} if run_as else {}


def _start(bin_dir: Path, folder: Path) -> tuple[int, int, str]:
    """initdb and start the cluster in `folder`; (PID, port, superuser).

    `pg_ctl start -w` starts PostgreSQL detached (no test process is its parent: the worker
    that starts it may end before the run does) and returns once it accepts connections; the
    PID is the one PostgreSQL writes to postmaster.pid, the one to stop."""
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
    options = [
        f"-p {port}",
        "-c listen_addresses=127.0.0.1",
        f"-c unix_socket_directories={folder}",
        "-c fsync=off",
        "-c synchronous_commit=off",
        "-c full_page_writes=off",
        "-c max_connections=300",
    ]
    started = subprocess.run(
        [
            str(bin_dir / "pg_ctl"),
            "start",
            "-D",
            str(data),
            "-l",
            str(folder / "server.log"),
            "-w",
            "-t",
            str(int(START_TIMEOUT)),
            "-o",
            " ".join(options),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=START_TIMEOUT + 30,
        cwd=folder,
        **_owner(run_as),
    )
    log = folder / "server.log"
    if started.returncode != 0:
        server_log = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        raise RuntimeError(f"pg_ctl start exited {started.returncode}: {started.stderr}\n{server_log}")
    pid = int((data / "postmaster.pid").read_text(encoding="utf-8").split("\n", 1)[0])
    return pid, port, user


# ------------------------------------------------------------- one cluster for the run
#
# Every xdist worker is a process of its own, but the run has one cluster: the first worker
# that needs it starts it under a lock on a file in the run's folder (made by the controller
# in `pytest_configure`, named to the workers by RUN_DIR_ENV) and writes where it listens to
# STATE_FILE; the others read that. The controller (or, without xdist, the one process)
# stops it by its PID in `pytest_unconfigure`, once every worker is gone. A run that needs no
# PostgreSQL (`-m "not postgres"`) starts none.

RUN_DIR_ENV = "STEAMHARNESS_TEST_RUN_DIR"
STATE_FILE = "pg.json"
LOCK_FILE = "pg.lock"
_owned_run_dir = pytest.StashKey[Path]()


def _run_dir() -> Path:
    folder = os.environ.get(RUN_DIR_ENV)
    if not folder:
        raise RuntimeError(f"{RUN_DIR_ENV} is not set: tests/pg.py sets it in pytest_configure")
    return Path(folder)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller made the folder and named it in the environment
    folder = Path(tempfile.mkdtemp(prefix="steamharness-run-"))
    os.environ[RUN_DIR_ENV] = str(folder)  # inherited by the workers, started after this
    config.stash[_owned_run_dir] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_owned_run_dir, None)
    if folder is None:
        return
    try:
        state = _read_state(folder)
        if state is not None and "pid" in state:
            _stop_pid(int(state["pid"]), Path(state["folder"]))
            shutil.rmtree(state["folder"], ignore_errors=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get(RUN_DIR_ENV) == str(folder):
            del os.environ[RUN_DIR_ENV]


def _read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _write_state(run_dir: Path, state: dict[str, Any]) -> None:
    tmp = run_dir / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state), encoding="utf-8")
    tmp.replace(run_dir / STATE_FILE)


def _is_postmaster(pid: int, folder: Path) -> bool:
    """`pid` is still this run's PostgreSQL (not a zombie, not a reused PID)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z" and str(folder / "data").encode() in cmdline


def _stop_pid(pid: int, folder: Path) -> None:
    """Fast shutdown by PID (SIGINT is PostgreSQL's fast mode), then kill if it lingers; it
    is no child of ours, so its end is read from /proc."""
    if not _is_postmaster(pid, folder):
        return
    os.kill(pid, signal.SIGINT)
    for sig, timeout in ((None, STOP_TIMEOUT), (signal.SIGKILL, 10.0)):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _is_postmaster(pid, folder):
                return
            time.sleep(0.05)  # polling another process's exit (not our child), bounded by the deadline


def _start_cluster(bin_dir: Path) -> dict[str, Any]:
    """Start a cluster holding the template database; its state for STATE_FILE."""
    folder = Path(tempfile.mkdtemp(prefix="steamharness-pg-"))
    pid: int | None = None
    try:
        pid, port, user = _start(bin_dir, folder)
        cluster = PgCluster(port=port, user=user, folder=folder, pid=pid)
        cluster.create_database(TEMPLATE)
        # The schema at the newest revision, copied into every test database.
        engine = make_engine(cluster.url(TEMPLATE), check_schema=False)
        upgrade_database(engine)
        engine.dispose()
    except BaseException:
        if pid is not None:
            _stop_pid(pid, folder)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return {"port": port, "user": user, "folder": str(folder), "pid": pid}


def shared_cluster(run_dir: Path) -> PgCluster:
    """The run's cluster: started by the first caller of any worker, read by the others. A
    start that failed is recorded, so every later caller fails with the same message instead
    of trying again."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.fail(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
            "apt-get install postgresql (scripts/test installs it)",
            pytrace=False,
        )
    with (run_dir / LOCK_FILE).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        state: dict[str, Any] | None = _read_state(run_dir)
        if state is None:
            try:
                state = _start_cluster(bin_dir)
            except Exception as e:
                state = {"error": f"the test PostgreSQL cluster did not start: {e}"}
            _write_state(run_dir, state)
    if "error" in state:
        pytest.fail(state["error"], pytrace=False)
    return PgCluster(port=state["port"], user=state["user"], folder=Path(state["folder"]), pid=state["pid"])


@pytest.fixture(scope="session")
def pg_cluster() -> PgCluster:
    """The run's one cluster (see above); stopped at the end of the whole run, not here."""
    return shared_cluster(_run_dir())


def fresh_name() -> str:
    """A database name no other test of this run uses, on any worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"t_{worker}_{os.getpid()}_{next(_names)}"


class _Supply:
    """Copies of the template made, and used ones dropped, in a thread of this test process
    while its tests run: a copy and a drop cost about a second together on a busy machine,
    most of it PostgreSQL writing files, which need not hold up the next test.

    One copy is kept ready; `take` hands it out (waiting for it, bounded) and orders the
    next, `give_back` orders a drop. Every database is still used by one test only, and is
    the template's copy as `CREATE DATABASE … TEMPLATE` made it. A copy or a drop that
    failed in the thread is raised by the next `take`. What is left when the process ends
    (the ready copy, drops not yet done) goes with the cluster at the end of the run."""

    def __init__(self, cluster: PgCluster) -> None:
        self.cluster = cluster
        self.jobs: queue.Queue[tuple[str, str]] = queue.Queue()
        self.ready: queue.Queue[str | BaseException] = queue.Queue()
        # Made here, once: a new engine imports the driver again, which a test that hides it
        # (sys.modules["psycopg"] = None, tests/store/test_dialects.py) would make fail.
        self.admin = cluster.admin()
        self.thread = threading.Thread(target=self._work, name="pg-supply", daemon=True)
        self.thread.start()
        self._order()

    def _order(self) -> None:
        self.jobs.put(("create", fresh_name()))

    def _work(self) -> None:
        while True:
            job, name = self.jobs.get()
            for attempt in (1, 2):  # once more: a test of this process may hide the driver a moment
                try:
                    if job == "create":
                        self.cluster.create_database(name, template=TEMPLATE, admin=self.admin)
                        self.ready.put(name)
                    else:
                        self.cluster.drop_database(name, admin=self.admin)
                    break
                except Exception as exc:
                    if attempt == 2:  # handed to the test that takes the next copy
                        self.ready.put(exc)

    def take(self) -> str:
        got = self.ready.get(timeout=2 * START_TIMEOUT)  # a hang guard
        if isinstance(got, BaseException):
            raise got
        self._order()
        return got

    def give_back(self, name: str) -> None:
        self.jobs.put(("drop", name))


_supplies: dict[int, _Supply] = {}


def _supply(cluster: PgCluster) -> _Supply:
    if cluster.port not in _supplies:
        _supplies[cluster.port] = _Supply(cluster)
    return _supplies[cluster.port]


@contextlib.contextmanager
def fresh_database(cluster: PgCluster, *, empty: bool = False) -> Iterator[str]:
    """A new database holding the tables (none when `empty`), for one test; dropped
    afterwards (with any connection still open to it). The template's copies come from
    `_Supply`, made ahead and dropped behind the tests."""
    if empty:
        name = fresh_name()
        cluster.create_database(name)
        try:
            yield cluster.url(name)
        finally:
            cluster.drop_database(name)
        return
    supply = _supply(cluster)
    name = supply.take()
    try:
        yield cluster.url(name)
    finally:
        supply.give_back(name)


# ------------------------------------------------------------ SQLite, and PostgreSQL where it can differ
#
# A test that takes `database_url` (or a module's live server `server_database_url`) runs
# on SQLite. It runs on PostgreSQL as well only where the dialect can make a difference: the
# store's own modules (tests/store) and tests or modules marked `dialects` (what counts
# under a lock, migrations, a replica's shared mode, one end-to-end pass of each transport
# and protocol era). Everything above the store reaches the database through the same store
# functions, which those tests run on both.

DIALECT_FIXTURES = ("database_url", "server_database_url")
BOTH = ("sqlite", "postgresql")
DIALECT_FOLDERS = ("store",)  # every module below tests/<folder> runs on both


def runs_on_both(metafunc: pytest.Metafunc) -> bool:
    folder = metafunc.definition.path.parent
    return metafunc.definition.get_closest_marker("dialects") is not None or (
        folder.name in DIALECT_FOLDERS and folder.parent.name == "tests"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in DIALECT_FIXTURES:
        if name in metafunc.fixturenames and runs_on_both(metafunc):
            scope = "module" if name == "server_database_url" else "function"
            metafunc.parametrize(name, BOTH, indirect=True, scope=scope)


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store's URL for one test: a SQLite file in the test's folder, or (parametrized,
    see above) a fresh PostgreSQL database; either holds the tables at the newest revision.

    The SQLite file is a copy of the session's migrated store (tests/prepared.py): running
    every migration into a fresh file costs a fraction of a second of CPU but, with a commit
    per revision, seconds of waiting for the disk on a busy machine; a copy costs milliseconds."""
    if getattr(request, "param", "sqlite") == "sqlite":
        from tests import prepared

        # where the server keeps it by default, for a data dir `tmp_path / "data"`
        path = prepared.copy_store(tmp_path / "data" / prepared.DB_FILE)
        yield f"sqlite:///{path}"
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    with fresh_database(cluster) as url:
        yield url


@pytest.fixture(scope="module")
def server_database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The store of a module's live server: None for the server's default (SQLite in its
    data dir), or (parametrized, see above) a fresh PostgreSQL database for the module."""
    if getattr(request, "param", "sqlite") == "sqlite":
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

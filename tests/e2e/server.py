"""A real `steamharness serve` on a free loopback port, started and stopped by PID.

Its data dir starts with the example projects registered and published (a copy of the
session's prepared data dir, or the CLI's registry calls made in this process;
`make_server(via_cli=True)` goes through the CLI commands as an operator would). The
operator's later writes (accounts, keys, publishing, limits) are made in this process with
the functions the commands call (`LiveServer.add_user`, `create_key`, …); tests talk to the
server itself only over HTTP."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from tests import prepared, processes
from tests.conftest import server_env
from tests.helpers import WAIT
from webui.admin import create_key, create_user, grant_projects, revoke_key
from webui.cli.common import cli_audit, open_store, server_settings
from webui.settings import Settings
from webui.store import accounts as account_store
from webui.store.db import engine_url
from webui.store.projects import list_projects

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from webui.projects.registry import ProjectRegistry

STEAMHARNESS = processes.STEAMHARNESS
# A bound, not a speed check: a loaded 2-core machine can spend most of a minute importing
# (STEAMHARNESS_TEST_START_TIMEOUT raises it further).
START_TIMEOUT = float(os.environ.get("STEAMHARNESS_TEST_START_TIMEOUT", str(WAIT)))

HELLO, INTERACTIVE, FILES, LEDGER = prepared.HELLO, prepared.INTERACTIVE, prepared.FILES, prepared.LEDGER
TORTURE = prepared.TORTURE_ID
# The server's settings (by environment variable) that decide where an operator command's
# store writes go or what they allow; the in-process writes below read them from `env`.
STORE_SETTINGS = ("STEAMHARNESS_DATABASE_URL", "STEAMHARNESS_SHARED_DIR", "STEAMHARNESS_MAX_KEYS_PER_ACCOUNT")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def key_id_of(raw: str) -> str:
    """The id of an API key (`key_<public part>`), from the raw key `keys create` prints."""
    return "key_" + raw.split("_")[1]


def raw_request(port: int, head: str, timeout: float = 60) -> tuple[int, str]:
    """Send only a request head (no body) and read the (JSON) answer: (status, raw text)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.encode())
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    text = data.decode("latin-1")
    return int(text.split(" ", 2)[1]), text


@dataclass
class LiveServer:
    data_dir: Path
    projects: Path  # a copy of the examples (and the torture fixture) the test may edit
    port: int
    admin_key: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | processes.ForkedProcess | None = None
    log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    # None: the default store, SQLite in the data dir; otherwise the server and the CLI get
    # this URL through STEAMHARNESS_DATABASE_URL.
    database_url: str | None = None
    start_timeout: float = START_TIMEOUT

    @property
    def store_url(self) -> str:
        """The URL of the store the server uses, for a test to read or change it directly."""
        return self.database_url or f"sqlite:///{self.data_dir / 'steamharness.sqlite3'}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def mcp_url(self, project_id: str, target: str = "latest") -> str:
        return f"{self.base_url}/api/workflows/{project_id}/mcp?target={target}"

    def cli(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = processes.run(
            [STEAMHARNESS, *args, "--data-dir", str(self.data_dir)],
            capture_output=True,
            text=True,
            timeout=WAIT,
            env=self.env,
            input=stdin,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"steamharness {' '.join(args)} failed: {proc.stderr}")
        return proc

    # The operator's store writes, made in this process: the functions the `steamharness
    # users / keys / projects` commands call, on the server's store and data dir, with the
    # same audit events. The running server sees them as it sees a command's (they are in the
    # database), without a subprocess importing the whole stack (1-4 s each on an idle
    # 2-core machine, 20 s under heavy load). `cli(...)` stays for the tests whose subject is
    # the command itself.

    def settings(self) -> Settings:
        """The settings a `steamharness` command run with the server's environment reads (those
        of STORE_SETTINGS; the rest do not change what the writes below do)."""
        given = {
            var.removeprefix("STEAMHARNESS_").lower(): self.env[var]
            for var in STORE_SETTINGS
            if var in self.env
        }
        # The store named outright: this process's own environment must not pick another one.
        database_url = given.pop("database_url", None) or self.store_url
        return server_settings(self.data_dir, database_url, **given)

    @contextlib.contextmanager
    def store(self) -> Iterator[tuple[Engine, ProjectRegistry]]:
        """The server's store and registry, opened as such a command opens them; disposed when
        the block ends."""
        engine, registry = open_store(self.settings())
        try:
            yield engine, registry
        finally:
            engine.dispose()

    def add_user(self, name: str, *, admin: bool = False, password: str | None = None) -> None:
        """`users create NAME [--admin] [--password-stdin]`."""
        with self.store() as (engine, _):
            create_user(engine, name=name, admin=admin, password=password, audit=cli_audit())

    def grant(self, name: str, projects: list[str] | None = None, *, all_projects: bool = False) -> None:
        """`users grant NAME --project ID …` (or `--all`: every registered project)."""
        with self.store() as (engine, registry):
            ids = [r.id for r in list_projects(engine)] if all_projects else list(projects or [])
            assert ids, "grant --project ID (repeatable) or --all"
            grant_projects(engine, user=name, projects=ids, registry=registry, audit=cli_audit())

    def create_key(
        self, user: str = "alice", *, projects: list[str] | None = None, scopes: list[str] | None = None
    ) -> str:
        """A new API key of `user` (`keys create --user USER [--project …] [--scope …]`); a user
        that does not exist yet is created first, without a password, and granted every project."""
        with self.store() as (engine, registry):
            if account_store.get_account(engine, name=user) is None:
                create_user(engine, name=user, admin=False, password=None, audit=cli_audit())
                ids = [r.id for r in list_projects(engine)]
                grant_projects(engine, user=user, projects=ids, registry=registry, audit=cli_audit())
            raw, _ = create_key(
                engine,
                user=user,
                projects=projects,
                scopes=scopes,
                name=None,
                registry=registry,
                audit=cli_audit(),
                max_keys=self.settings().max_keys_per_account,
            )
            return raw

    def revoke_key(self, key_id: str) -> None:
        """`keys revoke KEY_ID`."""
        with self.store() as (engine, _):
            revoke_key(engine, key_id=key_id, audit=cli_audit())

    def register(self, folder: Path) -> str:
        """`projects add FOLDER`: the project's id."""
        with self.store() as (_, registry):
            return registry.register(folder)[0].id

    def add_project(self, folder: Path, project_id: str) -> None:
        """Register the project in `folder` and publish it (`projects add`, `projects publish`)."""
        with self.store() as (_, registry):
            project, _ = registry.register(folder)
            assert project.id == project_id, f"{folder} is project {project.id}, not {project_id}"
            registry.publish(project_id, None, actor="cli", audit=cli_audit())

    def publish(self, project_id: str, version: str | None = None) -> str:
        """`projects publish ID [--version X.Y.Z]`: the version published."""
        with self.store() as (_, registry):
            return registry.publish(project_id, version, actor="cli", audit=cli_audit()).version

    def set_online(self, project_id: str, version: str, online: bool) -> None:
        """`projects online|offline ID VERSION`."""
        with self.store() as (_, registry):
            registry.set_online(project_id, version, online, actor="cli", audit=cli_audit())

    def set_limits(self, project_id: str, **changes: Any) -> None:
        """`projects limits ID --max-running N --max-queued N` and `projects gate ID open|close`
        (`run_gate_open=`)."""
        with self.store() as (_, registry):
            registry.set_limits(project_id, **changes)

    @contextlib.contextmanager
    def running(self) -> Iterator[LiveServer]:
        """The server started for the block, and stopped when it ends (or when it fails to start)."""
        try:
            self.start()
            yield self
        finally:
            self.stop()

    def start(self) -> None:
        assert self.proc is None
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        log = self.log_path.open("ab")
        self.proc = processes.Popen(
            [
                STEAMHARNESS,
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise AssertionError(f"server exited at start-up:\n{self.log()}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{self.base_url}/openapi.json", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)  # polling a port that is not listening yet, bounded by the deadline
        raise AssertionError(f"server did not answer within {self.start_timeout}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                return proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait(timeout=10)
        return proc.returncode

    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        """The rows of a read-only SQL query on the server's store, whichever database it is."""
        engine = create_engine(engine_url(self.store_url), poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return [dict(r) for r in conn.execute(text(sql), params).mappings()]
        finally:
            engine.dispose()

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of one table of the server's store, JSON columns decoded."""
        engine = create_engine(engine_url(self.store_url), poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return [dict(r) for r in conn.execute(SQLModel.metadata.tables[table].select()).mappings()]
        finally:
            engine.dispose()

    def dump(self) -> str:
        """Every row of every table of the store, as text (to search for what must not be stored)."""
        engine = create_engine(engine_url(self.store_url), poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return "\n".join(
                    f"{table.name}: {tuple(row)}"
                    for table in SQLModel.metadata.sorted_tables
                    for row in conn.execute(table.select())
                )
        finally:
            engine.dispose()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path else ""


def make_server(tmp_path: Path, database_url: str | None = None, **env: str) -> LiveServer:
    """A server (not started) whose data dir holds the example projects (copied to
    `tmp_path / "projects"`) registered, and the five published. On the default store a copy
    of the session's prepared data dir (`tests/prepared.py`); on another database or shared
    dir the same registry calls made here. `env`: the server's environment variables (no
    other keyword: a test's dict of them unpacks here as it is)."""
    return _make_server(tmp_path, database_url, env, via_cli=False)


def make_server_via_cli(tmp_path: Path) -> LiveServer:
    """`make_server`'s server, its projects registered and published through ten `steamharness
    projects` commands, the way an operator would."""
    return _make_server(tmp_path, None, {}, via_cli=True)


def _make_server(
    tmp_path: Path, database_url: str | None, env: dict[str, str], *, via_cli: bool
) -> LiveServer:
    admin_key = secrets.token_urlsafe(32)
    base_env = server_env()
    if database_url is not None:
        env = {"STEAMHARNESS_DATABASE_URL": database_url, **env}
    server = LiveServer(
        data_dir=tmp_path / "data",
        projects=tmp_path / "projects",
        port=free_port(),
        admin_key=admin_key,
        env={**base_env, "STEAMHARNESS_SERVER_ADMIN_KEY": admin_key, **env},
        database_url=database_url,
    )
    if via_cli:
        prepared.copy_projects(server.projects)
        for folder in sorted(server.projects.iterdir()):
            server.cli("projects", "add", str(folder))
        for project_id in prepared.PUBLISHED:
            server.cli("projects", "publish", project_id)
    elif any(key in env for key in ("STEAMHARNESS_DATABASE_URL", "STEAMHARNESS_SHARED_DIR")):
        prepared.prepare_server(server.data_dir, prepared.copy_projects(server.projects), **env)
    else:
        prepared.copy_prepared("server", server.data_dir, server.projects)
    return server


@contextlib.contextmanager
def running_server(tmp_path: Path, database_url: str | None = None, **env: str) -> Iterator[LiveServer]:
    with make_server(tmp_path, database_url, **env).running() as server:
        yield server

"""A throwaway PostgreSQL server for the replica tests: the Debian binaries, a data folder
in a temp dir, a free loopback port; stopped by its PID at the end. Each test gets a
database of its own."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import free_port

START_TIMEOUT = 30.0


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def _as_postgres(args: list[str]) -> list[str]:
    """Run as the `postgres` user when we are root (PostgreSQL refuses to run as root)."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class PgServer:
    def __init__(self, base: Path) -> None:
        bindir = _bindir()
        if bindir is None:
            pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bindir = bindir
        self.base = base
        self.port = free_port()
        self.data = base / "data"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.base, "postgres")
        subprocess.run(
            _as_postgres(
                [str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        log = (self.base / "postgres.log").open("ab")
        self.proc = subprocess.Popen(
            _as_postgres(
                [
                    str(self.bindir / "postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    str(self.base),
                    "-c",
                    "max_connections=200",
                    "-c",
                    "fsync=off",
                ]
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"PostgreSQL exited at start-up:\n{self.log()}")
            try:
                psycopg.connect(self.conninfo("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.05)  # polling a server that is not accepting yet, bounded by the deadline
        raise AssertionError(f"PostgreSQL did not accept connections within {START_TIMEOUT}s:\n{self.log()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        pid_file = self.data / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)  # fast shutdown
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def log(self) -> str:
        path = self.base / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def conninfo(self, db: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def url(self, db: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        import psycopg

        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def terminate(self, backend_pid: int) -> None:
        """End one server connection, as a network failure or a restart would."""
        import psycopg

        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    # Not under pytest's temp root: that one is private to us, and the server runs as `postgres`.
    base = Path(tempfile.mkdtemp(prefix="steamharness-pg-"))
    server = PgServer(base)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty database of the throwaway server (SQLAlchemy URL)."""
    return pg_server.url(pg_server.new_database())

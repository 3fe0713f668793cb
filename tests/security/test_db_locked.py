"""A database locked by someone else for longer than the server's busy timeout times its
write attempts, against a real `steamharness serve`: a run whose handler succeeded gives
the MCP client its real result while the lock is still held, the server keeps retrying
the outcome, and once the lock is released the run row says `success` with its output.
If the server stops while the lock is held, the outcome goes to the data dir's file of
pending records and the next start writes it.

SQLite: a separate connection holds `BEGIN EXCLUSIVE`. PostgreSQL: a separate connection
holds `LOCK TABLE runs IN ACCESS EXCLUSIVE MODE`."""

from __future__ import annotations

import re
import secrets
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.e2e.server import LiveServer, make_server
from tests.e2e.test_http_mcp import sdk_client
from tests.helpers import WAIT
from tests.security.test_limits import payload
from tests.security.test_shutdown import exited, sigterm
from webui.runs.outcomes import PENDING_FILE
from webui.runs.types import WRITE_ATTEMPTS

# Locked on both dialects, one server per dialect for the module (tests/pg.py).
pytestmark = [pytest.mark.anyio, pytest.mark.dialects]

HERE = Path(__file__).resolve().parent
OUTCOMES = "4d7e2a10-6b3c-4f85-9e21-c0a8b7d6e5f4"
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)
BUSY_TIMEOUT = "0.2"
RETRYING = re.compile(r"run (\S+): the database is still unavailable \((\w+)\).*retrying \(attempt (\d+)\)")


def outcomes_server(tmp_path: Path, database_url: str | None = None, **env: str) -> LiveServer:
    """A server with a short busy timeout whose workers may read the test's gate files
    (they run as the server's user: what is tested here is not isolation)."""
    live = make_server(
        tmp_path,
        database_url,
        STEAMHARNESS_DB_BUSY_TIMEOUT_SECONDS=BUSY_TIMEOUT,
        STEAMHARNESS_WORKER_USER="",
        **env,
    )
    shutil.copytree(HERE / "outcomes_project", live.projects / "outcomes")
    live.add_project(live.projects / "outcomes", OUTCOMES)
    return live


class Lock:
    """Another writer holding the whole database (SQLite) or the runs table (PostgreSQL)
    in a connection of its own; reads through that same connection."""

    def __init__(self, live: LiveServer) -> None:
        self.sqlite = live.database_url is None
        if self.sqlite:
            self.conn: Any = sqlite3.connect(
                live.data_dir / "steamharness.sqlite3", isolation_level=None, timeout=30
            )
            self.conn.execute("BEGIN EXCLUSIVE")
        else:
            import psycopg

            assert live.database_url is not None
            self.conn = psycopg.connect(
                live.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
            )
            self.conn.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")

    def run(self, run_id: str) -> tuple[str, Any]:
        mark = "?" if self.sqlite else "%s"
        row = self.conn.execute(f"select status, output from runs where id = {mark}", (run_id,)).fetchone()
        return row[0], row[1]

    def release(self) -> None:
        if self.conn is None:
            return
        conn, self.conn = self.conn, None
        if self.sqlite:
            conn.execute("ROLLBACK")
        else:
            conn.rollback()
        conn.close()


async def retried(live: LiveServer, run_id: str, attempts: int) -> str:
    """Wait until the server's log says it retried the run's records `attempts` times;
    what it said the database was (busy, full)."""
    while True:
        seen = [m for m in RETRYING.finditer(live.log()) if m.group(1) == run_id]
        if seen and int(seen[-1].group(3)) >= attempts:
            return seen[-1].group(2)
        await anyio.sleep(0.05)  # polling the server's log file, bounded by the caller


async def stored(live: LiveServer, run_id: str) -> dict[str, Any]:
    """The run row once it has an outcome (a bounded wait for the server's retry loop)."""
    while True:
        row = stored_run(live, run_id)
        if row["status"] != "running":
            return row
        await anyio.sleep(0.05)  # polling the database, bounded by the caller


async def audited(live: LiveServer, event: str, run_id: str) -> list[dict[str, Any]]:
    """The run's `event` audit rows once there is one (a bounded wait, by the caller)."""
    while not (rows := audit_of(live, event, run_id)):
        await anyio.sleep(0.05)  # polling the database, bounded by the caller
    return rows


def stored_run(live: LiveServer, run_id: str) -> dict[str, Any]:
    (row,) = [r for r in live.rows("runs") if r["id"] == run_id]
    return row


async def finish_while_locked(live: LiveServer, tmp_path: Path) -> tuple[Lock, str, dict[str, Any]]:
    """Start a gated run, lock the database, let the handler succeed: the call's result
    and the run id, with the lock still held (the caller releases it)."""
    key = live.create_key()
    gate = tmp_path / f"gate-{secrets.token_hex(4)}"
    answer = secrets.token_hex(8)
    started = anyio.Event()
    results: list[types.CallToolResult] = []
    lock: Lock | None = None

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message == "waiting for the gate":
            started.set()

    with anyio.fail_after(TIMEOUT):
        async with (
            sdk_client(live.mcp_url(OUTCOMES), key, "legacy") as client,
            anyio.create_task_group() as tg,
        ):

            async def call() -> None:
                arguments = {"gate": str(gate), "answer": answer}
                results.append(await client.call_tool("gated", arguments, progress_callback=on_progress))

            tg.start_soon(call)
            await started.wait()  # the run is recorded `running` before its handler reports
            lock = Lock(live)
            gate.touch()
    (result,) = results
    body = payload(result)
    assert result.is_error is False, body
    assert body["output"] == {"answer": answer}
    assert lock is not None
    return lock, body["runId"], body


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[LiveServer]:
    """One server per dialect for the module (each test's runs are its own)."""
    tmp_path = tmp_path_factory.mktemp("db-locked")
    with outcomes_server(
        tmp_path, server_database_url, STEAMHARNESS_PENDING_RECORDS_DRAIN_SECONDS="0.5"
    ).running() as live:
        yield live


@pytest.fixture
def live(server: LiveServer) -> LiveServer:
    """The module's server, running: a test that stopped it and failed before starting it
    again leaves it stopped, and the next test starts it."""
    if server.proc is None:
        server.start()
    return server


async def test_a_run_finishing_under_a_long_lock_gives_its_real_result_and_is_recorded_once_released(
    live: LiveServer, tmp_path: Path
) -> None:
    lock, run_id, body = await finish_while_locked(live, tmp_path)
    try:
        with anyio.fail_after(TIMEOUT):
            # Past what the old write attempts would have waited before giving up.
            assert await retried(live, run_id, WRITE_ATTEMPTS + 1) == "database_busy"
        assert lock.run(run_id)[0] == "running"  # not written yet: the result came from memory
    finally:
        lock.release()
    with anyio.fail_after(TIMEOUT):
        row = await stored(live, run_id)
        # The call's end is the run's own audit event, written with the kept outcome.
        finished = await audited(live, "run.finished", run_id)
    assert row["status"] == "success"
    assert row["output"] == body["output"]
    assert [r["outcome"] for r in finished] == ["success"]
    (row,) = [r for r in live.rows("audit_events") if r["run_id"] == run_id and r["event"] == "run.finished"]
    assert row["details"]["call"] == "tools/call"
    assert "could not be recorded" not in live.log()


async def test_a_server_stopped_under_the_lock_keeps_the_outcome_in_its_data_dir_for_the_next_start(
    live: LiveServer, tmp_path: Path
) -> None:
    lock, run_id, body = await finish_while_locked(live, tmp_path)
    pending = live.data_dir / PENDING_FILE
    try:
        with anyio.fail_after(TIMEOUT):
            await retried(live, run_id, 1)
            proc = sigterm(live)
            await exited(proc)
        live.proc = None
        assert stat.S_IMODE(pending.stat().st_mode) == 0o600
        assert run_id in pending.read_text(encoding="utf-8")
        assert lock.run(run_id)[0] == "running"
    finally:
        lock.release()
    live.start()
    row = stored_run(live, run_id)
    assert row["status"] == "success"  # written before orphaned runs were marked interrupted
    assert row["output"] == body["output"]
    assert not pending.exists()
    assert [r["outcome"] for r in audit_of(live, "run.finished", run_id)] == ["success"]


def audit_of(live: LiveServer, event: str, run_id: str) -> list[dict[str, Any]]:
    return live.query(
        "select * from audit_events where event = :e and run_id = :r order by id", e=event, r=run_id
    )

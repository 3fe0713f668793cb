"""A run's chatty timeline entries are written in batches (webui.runs.timeline): a handler
logging line after line costs a transaction per batch, not per line, and no line the server
received is lost whatever ends the run (its outcome, a killed worker, the server's shutdown)
or while the database is locked."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests import prepared
from tests.helpers import RUN_WAIT_SECONDS, start_run
from webui.runs.outcomes import EVENT, FINAL, Record
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store import runs as run_store
from webui.store.models import Run, utcnow
from webui.workflows.project import Project, load_project

pytestmark = pytest.mark.anyio

LINES = 1000
BATCH = 100
HANDLERS = (
    f"LINES = {LINES}\n"
    + """

def chatty(ctx):
    for i in range(LINES):
        ctx.log(f"line {i}")
    return {"lines": LINES}


def endless(ctx):
    i = 0
    while True:
        ctx.log(f"line {i}")
        i += 1
"""
)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("chatty")
    entrypoints = [
        {"id": name, "title": name, "description": name, "handler": f"h.py:{name}", "params": []}
        for name in ("chatty", "endless")
    ]
    package = {
        "id": "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
        "name": "chatty",
        "version": "1.0.0",
        "projectType": "workflow",
        "description": "Logs line after line.",
        "entrypoints": entrypoints,
    }
    (root / "package.json").write_text(json.dumps(package), encoding="utf-8")
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    return load_project(root)


def settings(tmp_path: Path, **changes: Any) -> Settings:
    # Batches written by their size only (a timer far beyond the test): a count, not a timing.
    if not (tmp_path / "data" / prepared.DB_FILE).exists():
        prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "worker_user": "",
        "kill_grace_seconds": 0.5,
        "timeline_batch_lines": BATCH,
        "timeline_batch_seconds": 3600,
    }
    return Settings(**{**values, **changes})


@contextmanager
def timeline_writes(engine: Engine) -> Iterator[list[int]]:
    """The statements that insert timeline entries (one per transaction that writes any)."""
    counted: list[int] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO RUN_EVENTS"):
            counted.append(1)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield counted
    finally:
        event.remove(engine, "before_cursor_execute", before)


def logged(svc: Services, run_id: str) -> list[str]:
    return [e.text or "" for e in run_store.list_events(svc.engine, run_id=run_id) if e.kind == "log"]


async def watch_to_end(svc: Services, run_id: str, *, kill_after: int | None = None) -> tuple[str, list[str]]:
    """The run's final status and the log lines its watcher saw; `kill_after`: SIGKILL its
    worker once the watcher has seen that many lines."""
    seen: list[str] = []
    async with svc.runs.watch(run_id) as updates:
        with anyio.fail_after(RUN_WAIT_SECONDS):
            while True:
                update = await updates.get()
                if update.kind == "log" and update.line is not None:
                    seen.append(update.line.text)
                    if kill_after is not None and len(seen) == kill_after:
                        pid = svc.runs.live_worker_pid(run_id)
                        assert pid is not None
                        os.kill(pid, signal.SIGKILL)
                elif update.kind == "final":
                    return str(update.status), seen


async def test_a_chatty_handlers_lines_are_all_recorded_in_order_in_far_fewer_transactions(
    tmp_path: Path, project: Project
) -> None:
    async with open_services(settings(tmp_path)) as svc:
        with timeline_writes(svc.engine) as writes:
            run_id = await start_run(svc, project, "chatty")
            status, seen = await watch_to_end(svc, run_id)
        assert status == "success"
        assert logged(svc, run_id) == [f"line {i}" for i in range(LINES)] == seen
        # Two for the run's states, then one per batch: far fewer than one per line.
        assert len(writes) <= 2 + LINES // BATCH + 1, len(writes)


async def test_a_worker_killed_mid_stream_loses_no_line_it_had_sent(tmp_path: Path, project: Project) -> None:
    # No batch is full when the worker dies: every line it sent waits in memory then.
    async with open_services(settings(tmp_path, timeline_batch_lines=100_000)) as svc:
        run_id = await start_run(svc, project, "endless")
        status, seen = await watch_to_end(svc, run_id, kill_after=50)
        assert status == "failed"
        assert len(seen) >= 50
        assert logged(svc, run_id) == seen


async def test_a_server_shutting_down_mid_stream_records_every_line_it_received(
    tmp_path: Path, project: Project
) -> None:
    seen: list[str] = []
    async with open_services(settings(tmp_path, timeline_batch_lines=100_000)) as svc:
        run_id = await start_run(svc, project, "endless")
        async with svc.runs.watch(run_id) as updates:
            with anyio.fail_after(RUN_WAIT_SECONDS):
                while len(seen) < 50:
                    update = await updates.get()
                    if update.kind == "log" and update.line is not None:
                        seen.append(update.line.text)
        engine = svc.engine
    # The shutdown stopped the run; what it had received before is all there.
    stored = [e.text or "" for e in run_store.list_events(engine, run_id=run_id) if e.kind == "log"]
    assert stored[: len(seen)] == seen


async def test_a_batch_the_locked_database_refuses_is_kept_in_order_and_written_once_released(
    tmp_path: Path,
) -> None:
    async with open_services(settings(tmp_path, db_busy_timeout_seconds=0.1)) as svc:
        run = Run(id="r-batch", project_id="p", entrypoint_id="e", entrypoint_title="E", status="running")
        run_store.create_run(svc.engine, run=run)
        backlog = svc.runs.records
        lock = sqlite3.connect(
            tmp_path / "data" / "steamharness.sqlite3", isolation_level=None, timeout=RUN_WAIT_SECONDS
        )
        try:
            lock.execute("BEGIN EXCLUSIVE")
            with anyio.fail_after(RUN_WAIT_SECONDS):
                for i in range(BATCH + 5):  # one full batch written (refused) at once, 5 waiting
                    fields = {"kind": "log", "text": f"line {i}", "data": None, "source": "mcp"}
                    await backlog.write_or_keep(Record(EVENT, run.id, fields))
                assert len(backlog) == BATCH  # the full batch, kept while the lock lasts
                outcome = {
                    "status": "success",
                    "output": None,
                    "error": None,
                    "finished_at": utcnow(),
                    "source": "mcp",
                    "audit": {"project_id": "p", "run_id": run.id, "tool": "e", "source": "mcp"},
                    "close_questions": False,
                }
                await backlog.write_or_keep(Record(FINAL, run.id, outcome))  # after the 5 waiting
                assert len(backlog) == BATCH + 5 + 1
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        with anyio.fail_after(RUN_WAIT_SECONDS):
            assert await backlog.wait_written(run.id, RUN_WAIT_SECONDS)
        assert backlog.totals.lost[run.id] == 0
        events = [(e.kind, e.text) for e in run_store.list_events(svc.engine, run_id=run.id)]
        assert events == [
            ("state", "queued"),
            ("state", "running"),
            *(("log", f"line {i}") for i in range(BATCH + 5)),
            ("state", "success"),
        ]

"""The backlog of run records a locked database could not take: bounded memory (timeline
entries past the budget are counted, the outcome is always kept, no new run starts while it
is over budget), and everything kept is written in order once the lock is released."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from tests import prepared
from tests.conftest import EXAMPLES
from tests.helpers import start_run
from webui.blocking import DatabaseBusy
from webui.runs.outcomes import EVENT, FINAL, Record
from webui.services import open_services
from webui.settings import Settings
from webui.store import runs as run_store
from webui.store.models import Run, utcnow
from webui.workflows.project import load_project

pytestmark = pytest.mark.anyio

BUDGET = 4096
ENTRY = "x" * 1000
ENTRIES = 10
OUTPUT = {"report": "y" * (BUDGET // 2)}  # with the timeline kept, past the budget
TIMEOUT = 30


async def test_a_long_lock_keeps_the_outcome_counts_what_did_not_fit_and_writes_it_all_once_released(
    tmp_path: Path,
) -> None:
    prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    settings = Settings(
        data_dir=tmp_path / "data",
        db_busy_timeout_seconds=0.1,
        pending_records_max_bytes=BUDGET,
        worker_user="",
    )
    async with open_services(settings) as svc:
        run = Run(id="r-locked", project_id="p", entrypoint_id="e", entrypoint_title="E", status="running")
        run_store.create_run(svc.engine, run=run)
        backlog = svc.runs.records
        lock = sqlite3.connect(
            tmp_path / "data" / "steamharness.sqlite3", isolation_level=None, timeout=TIMEOUT
        )
        try:
            lock.execute("BEGIN EXCLUSIVE")
            with anyio.fail_after(TIMEOUT):
                for _ in range(ENTRIES):
                    await backlog.write_or_keep(
                        Record(EVENT, run.id, {"kind": "log", "text": ENTRY, "data": None, "source": "mcp"})
                    )
                # Log lines wait in the run's batch (webui.runs.timeline): written now, refused.
                await backlog.timeline.flush(run.id)
                kept = len(backlog)
                lost = backlog.totals.lost[run.id]
                assert kept + lost == ENTRIES and 0 < kept < ENTRIES
                outcome = {
                    "status": "success",
                    "output": OUTPUT,
                    "error": None,
                    "finished_at": utcnow(),
                    "source": "mcp",
                    "audit": {"project_id": "p", "run_id": run.id, "tool": "e", "source": "mcp"},
                    "close_questions": False,
                }
                await backlog.write_or_keep(Record(FINAL, run.id, outcome))
            assert backlog.final(run.id) is not None  # kept although past the budget
            assert backlog.over_budget
            with pytest.raises(DatabaseBusy):
                await start_run(svc, load_project(EXAMPLES / "hello"), "greet", {"name": "x"})
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        with anyio.fail_after(TIMEOUT):
            assert await backlog.wait_written(run.id, TIMEOUT)
        stored = run_store.get_run(svc.engine, run_id=run.id)
        assert stored is not None and stored.status == "success" and stored.output == OUTPUT
        events = [(e.kind, e.text) for e in run_store.list_events(svc.engine, run_id=run.id)]
        assert events == [
            ("state", "queued"),
            ("state", "running"),  # created running: both its first entries
            *[("log", ENTRY)] * kept,
            ("log", f"{lost} timeline entries were not recorded: the database was unavailable."),
            ("state", "success"),
        ]
        assert not backlog.over_budget and backlog.final(run.id) is None

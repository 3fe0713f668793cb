"""Run limits counted in a real PostgreSQL database: the insert and the admission decide
under the project's lock, so racing processes cannot both take the last place."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from webui.store import run_limits
from webui.store import runs as run_store
from webui.store.db import make_engine
from webui.store.models import Run

PROJECT = "p-limits"


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url)
    try:
        yield engine
    finally:
        engine.dispose()


def new_run(run_id: str, project: str = PROJECT) -> Run:
    return Run(id=run_id, project_id=project, entrypoint_id="e", entrypoint_title="E", status="queued")


def create(
    engine: Engine,
    run_id: str,
    *,
    max_running: int | None,
    max_queued: int | None,
    free_slots: int | None = None,
) -> bool:
    refused = run_limits.create_run_within_limits(
        engine, run=new_run(run_id), max_running=max_running, max_queued=max_queued, free_slots=free_slots
    )
    return refused is None


def test_racing_inserts_never_exceed_the_limits(engine: Engine) -> None:
    created: list[str] = []
    start = threading.Barrier(12)

    def one(i: int) -> None:
        start.wait()
        if create(engine, f"r{i}", max_running=1, max_queued=1):
            created.append(f"r{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(created) == 2  # one that runs, one queued behind it
    assert len(run_store.list_runs(engine, project_ids=[PROJECT])) == 2


def test_a_refusal_names_the_counts_and_other_projects_do_not_count(engine: Engine) -> None:
    assert create(engine, "a1", max_running=1, max_queued=0)
    assert run_limits.admit_queued(engine, run_id="a1", project_id=PROJECT, max_running=1)
    refused = run_limits.create_run_within_limits(engine, run=new_run("a2"), max_running=1, max_queued=0)
    assert refused == (1, 0)
    assert run_store.get_run(engine, run_id="a2") is None  # nothing created
    other = run_limits.create_run_within_limits(
        engine, run=new_run("b1", "p-other"), max_running=1, max_queued=0
    )
    assert other is None


def test_admission_waits_for_a_free_slot_and_only_moves_queued_runs(engine: Engine) -> None:
    assert create(engine, "c1", max_running=1, max_queued=5)
    assert create(engine, "c2", max_running=1, max_queued=5)
    assert run_limits.admit_queued(engine, run_id="c1", project_id=PROJECT, max_running=1)
    assert not run_limits.admit_queued(engine, run_id="c2", project_id=PROJECT, max_running=1)
    assert not run_limits.admit_queued(engine, run_id="c1", project_id=PROJECT, max_running=5)  # not queued
    # A run whose child holds its slot does not count.
    assert run_limits.admit_queued(engine, run_id="c2", project_id=PROJECT, max_running=1, exclude=["c1"])
    run = run_store.get_run(engine, run_id="c2")
    assert run is not None and run.status == "running"
    run_store.update_run(engine, run_id="c1", status="success")
    assert create(engine, "c3", max_running=1, max_queued=0) is False  # c2 holds the one slot
    # A run waiting for a person keeps its worker but gives its slot up.
    run_store.update_run(engine, run_id="c2", status="waiting_for_input")
    assert create(engine, "c4", max_running=1, max_queued=0)
    assert run_limits.admit_queued(engine, run_id="c4", project_id=PROJECT, max_running=1)
    # Resuming it takes a slot again, only once one is free.
    resumable = run_store.RESUMABLE_STATUSES
    assert not run_limits.admit_queued(
        engine, run_id="c2", project_id=PROJECT, max_running=1, from_statuses=resumable
    )
    run_store.update_run(engine, run_id="c4", status="success")
    assert run_limits.admit_queued(
        engine, run_id="c2", project_id=PROJECT, max_running=1, from_statuses=resumable
    )


def test_the_queue_counts_the_servers_free_slots_when_the_project_sets_no_running_limit(
    engine: Engine,
) -> None:
    for i in range(3):  # two take the process's two free slots, one waits
        assert create(engine, f"d{i}", max_running=None, max_queued=1, free_slots=2)
    assert not create(engine, "d3", max_running=None, max_queued=1, free_slots=2)
    assert create(engine, "d4", max_running=None, max_queued=None, free_slots=2)

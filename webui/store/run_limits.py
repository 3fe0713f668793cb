"""A project's run gate and queue limits across processes and replicas (PostgreSQL):
counted in the database, under a per-project lock, in the transaction that inserts or
admits the run. Only a `running` run holds a slot: a run waiting for a person or for a
child run keeps its worker process but gives its slot up (webui.runs.admission), so
waiting runs never starve running ones.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, cast

from sqlalchemy import Table, func, text, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Connection, Engine

from webui.store.models import Run
from webui.store.runs import insert_run
from webui.store.statuses import HOLDING_STATUSES

_RUNS = cast(Table, Run.__table__)  # pyright: ignore[reportAttributeAccessIssue]


def _lock_project_runs(conn: Connection, project_id: str) -> None:
    """Serialize limit decisions about one project's runs (until the transaction ends)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"runs:{project_id}"})


def _project_counts(conn: Connection, project_id: str, exclude: Collection[str]) -> tuple[int, int]:
    """(holding a slot, queued) among the project's active runs, minus `exclude` (this
    process's runs that hold no slot whatever the database still says)."""
    stmt = (
        sa_select(_RUNS.c.status, func.count())
        .where(_RUNS.c.project_id == project_id, _RUNS.c.status.in_(("queued", *HOLDING_STATUSES)))
        .group_by(_RUNS.c.status)
    )
    if exclude:
        stmt = stmt.where(_RUNS.c.id.not_in(list(exclude)))
    counts = {str(status): int(n) for status, n in conn.execute(stmt)}
    holding = sum(counts.get(s, 0) for s in HOLDING_STATUSES)
    return holding, counts.get("queued", 0)


def _replica_holding(conn: Connection, replica_id: str, exclude: Collection[str]) -> int:
    """How many runs of `replica_id` hold one of its worker slots, minus `exclude`."""
    stmt = sa_select(func.count()).where(
        _RUNS.c.replica_id == replica_id, _RUNS.c.status.in_(list(HOLDING_STATUSES))
    )
    if exclude:
        stmt = stmt.where(_RUNS.c.id.not_in(list(exclude)))
    return int(conn.execute(stmt).scalar_one())


def queue_full(
    *, holding: int, queued: int, max_running: int | None, max_queued: int | None, free_slots: int | None
) -> bool:
    """Whether one more run would wait behind `max_queued` runs already waiting. A queued
    run may not have taken its free slot yet: only queued runs beyond the free slots (the
    project's `max_running`, and the server's worker slots, `free_slots`) really wait."""
    if max_queued is None:
        return False
    free: int | None = None
    if max_running is not None:
        free = max(max_running - holding, 0)
    if free_slots is not None:
        free = max(free_slots, 0) if free is None else min(free, max(free_slots, 0))
    if free is None:
        return False  # nothing limits how many run at once: nothing waits
    return queued - free >= max_queued


def create_run_within_limits(
    engine: Engine,
    *,
    run: Run,
    max_running: int | None,
    max_queued: int | None,
    exclude: Collection[str] = (),
    free_slots: int | None = None,
    replica_slots: tuple[str, int] | None = None,
    audit: Callable[[Any], Any] | None = None,
) -> tuple[int, int] | None:
    """Insert the run unless the project's queue limit refuses it: None when inserted, else
    the (holding, queued) counts that refused it. Race-free across processes. `free_slots`:
    the worker slots free in the inserting process (its queue counts even when the project
    sets no running limit). `replica_slots` (replica id, its worker slots): the free slots
    counted here, under the lock, from the replica's runs holding one, so they agree with
    the queued count (a run admitted meanwhile moves from one count to the other at once;
    a count taken before the lock would see it in neither)."""
    with engine.begin() as conn:
        _lock_project_runs(conn, run.project_id)
        if replica_slots is not None:
            free_slots = replica_slots[1] - _replica_holding(conn, replica_slots[0], exclude)
        if max_queued is not None and (max_running is not None or free_slots is not None):
            holding, queued = _project_counts(conn, run.project_id, exclude)
            if queue_full(
                holding=holding,
                queued=queued,
                max_running=max_running,
                max_queued=max_queued,
                free_slots=free_slots,
            ):
                return holding, queued
        insert_run(conn, run, audit)
    return None


def admit_queued(
    engine: Engine,
    *,
    run_id: str,
    project_id: str,
    max_running: int | None,
    exclude: Collection[str] = (),
    from_statuses: Collection[str] = ("queued",),
) -> bool:
    """Move a run to running if the project has a free slot (counted in the database under
    the project's lock); False when it must keep waiting or is no longer in `from_statuses`
    (a resumed run passes RESUMABLE_STATUSES)."""
    with engine.begin() as conn:
        _lock_project_runs(conn, project_id)
        if max_running is not None and _project_counts(conn, project_id, exclude)[0] >= max_running:
            return False
        moved = conn.execute(
            update(_RUNS)
            .where(_RUNS.c.id == run_id, _RUNS.c.status.in_(list(from_statuses)))
            .values(status="running")
        )
        return moved.rowcount == 1

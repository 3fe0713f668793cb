"""Queries for runs and their timeline (a project's run limits, counted under its lock:
`webui.store.run_limits`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, insert, or_, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session, col, select

from webui.store import insights
from webui.store.db import storable_text
from webui.store.models import Interaction, Run, RunEvent, utcnow
from webui.store.statuses import (  # noqa: F401  (the queries' status sets, named here too)
    ACTIVE_STATUSES,
    FINAL_STATUSES,
    HOLDING_STATUSES,
    RESUMABLE_STATUSES,
)


def _proc_start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except OSError:
        return None
    # Field 22 (starttime) comes after the parenthesised command name, which may hold spaces.
    return stat.rsplit(")", 1)[1].split()[19]


def process_owner_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_proc_start_time(pid) or '?'}"


def owner_alive(token: str) -> bool:
    pid_s, _, start = token.partition(":")
    try:
        pid = int(pid_s)
    except ValueError:
        return False
    current = _proc_start_time(pid)
    if current is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return start == "?"
    return current == start


def get_run(engine: Engine, *, run_id: str) -> Run | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.get(Run, run_id)


_RUNS = cast(Table, Run.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_EVENTS = cast(Table, RunEvent.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_INSERT_RUN = insert(_RUNS)
_INSERT_EVENT = insert(_EVENTS)


@functools.lru_cache(maxsize=64)
def _update_run(columns: tuple[str, ...]) -> Any:
    """One prebuilt UPDATE per set of changed columns; values travel as parameters."""
    return update(_RUNS).where(_RUNS.c.id == bindparam("_run_id")).values({c: bindparam(c) for c in columns})


# These run several times per tool call: prebuilt Core statements with parameters,
# rather than ORM units of work or statements rebuilt per call.


def insert_run(conn: Connection, run: Run, audit: Callable[[Any], Any] | None) -> None:
    """The run, its first timeline entries (`queued`, and `running` for a run admitted as it is
    created) and the audit event, in `conn`'s transaction."""
    conn.execute(_INSERT_RUN, run.model_dump())
    states = ("queued", "running") if run.status == "running" else ("queued",)
    conn.execute(
        _INSERT_EVENT, [{"run_id": run.id, "kind": "state", "text": s, "source": run.source} for s in states]
    )
    if audit is not None:
        audit(conn)


def create_run(engine: Engine, *, run: Run, audit: Callable[[Any], Any] | None = None) -> Run:
    with engine.begin() as conn:
        insert_run(conn, run, audit)
    return run


def update_run(
    engine: Engine,
    *,
    run_id: str,
    event_text: str | None = None,
    source: str = "mcp",
    audit: Callable[[Any], Any] | None = None,
    **changes: Any,
) -> None:
    """One UPDATE (plus the timeline entry, plus an audit event) in one transaction."""
    with engine.begin() as conn:
        _update(conn, run_id, event_text, source, audit, changes)


def _update(
    conn: Connection,
    run_id: str,
    event_text: str | None,
    source: str,
    audit: Callable[[Any], Any] | None,
    changes: dict[str, Any],
) -> None:
    if changes:
        conn.execute(_update_run(tuple(sorted(changes))), {"_run_id": run_id, **changes})
    if event_text is not None:
        conn.execute(_INSERT_EVENT, {"run_id": run_id, "kind": "state", "text": event_text, "source": source})
    if audit is not None:
        audit(conn)


_RUN_STATE = sa_select(
    _RUNS.c.status,
    _RUNS.c.error,
    _RUNS.c.project_id,
    _RUNS.c.entrypoint_id,
    _RUNS.c.entrypoint_title,
    _RUNS.c.created_at,
    _RUNS.c.finished_at,
).where(_RUNS.c.id == bindparam("_run_id"))


def finish_run(
    engine: Engine,
    *,
    run_id: str,
    may_replace: Callable[[str, dict[str, Any] | None], bool],
    event_text: str | None = None,
    source: str = "mcp",
    audit: Callable[[Any], Any] | None = None,
    **changes: Any,
) -> bool:
    """A run's outcome: as `update_run`, in one transaction with the read of its status
    and error, written only if `may_replace(status, error)` (an outcome already recorded
    is kept). False when the run is gone or kept its outcome.

    A final status is added to the run's tool's rollups (webui.store.insights) in the same
    transaction; an outcome it replaces (an `interrupted` one) is taken out of them."""
    with engine.begin() as conn:
        row = conn.execute(_RUN_STATE, {"_run_id": run_id}).first()
        if row is None or not may_replace(str(row.status), row.error):
            return False
        _update(conn, run_id, event_text, source, audit, changes)
        status, finished_at = str(changes.get("status", row.status)), changes.get("finished_at")
        if status in FINAL_STATUSES and finished_at is not None:
            if row.status in FINAL_STATUSES and row.finished_at is not None:
                insights.add_ended(conn, insights.ended_of(row, str(row.status), row.finished_at), sign=-1)
            insights.add_ended(conn, insights.ended_of(row, status, finished_at))
    return True


def add_event(
    engine: Engine,
    *,
    run_id: str,
    kind: str,
    text: str | None = None,
    data: dict[str, Any] | None = None,
    source: str = "mcp",
    created_at: datetime | None = None,
) -> None:
    """One timeline entry in a transaction of its own; `created_at`: when it was made (a
    batched or kept entry is written later), else now."""
    add_events(
        engine,
        run_id=run_id,
        entries=[{"kind": kind, "text": text, "data": data, "source": source, "created_at": created_at}],
    )


def add_events(engine: Engine, *, run_id: str, entries: Sequence[Mapping[str, Any]]) -> None:
    """Timeline entries of one run, in order, in one transaction (one executemany): each a
    mapping of `kind` and optionally `text`, `data`, `source`, `created_at`."""
    rows = [
        {
            "run_id": run_id,
            "kind": e["kind"],
            "text": storable_text(engine, e.get("text")),
            "data": e.get("data"),
            "source": e.get("source") or "mcp",
            "created_at": e.get("created_at") or utcnow(),
        }
        for e in entries
    ]
    if rows:
        with engine.begin() as conn:
            conn.execute(_INSERT_EVENT, rows)


def list_events(engine: Engine, *, run_id: str) -> list[RunEvent]:
    with Session(engine, expire_on_commit=False) as s:
        return list(s.exec(select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))))


def list_runs(
    engine: Engine,
    *,
    project_ids: Collection[str] | None,
    status: str | None = None,
    source: str | None = None,
    before: Run | None = None,
    limit: int = 50,
) -> list[Run]:
    """Newest first; `project_ids` None means every project. Keyset-paged: `before` is the
    last run of the previous page, compared by (created_at, id) so equal timestamps page
    correctly and deep pages cost the same as the first."""
    if project_ids is not None and not project_ids:
        return []
    stmt = select(Run)
    if project_ids is not None:
        stmt = stmt.where(col(Run.project_id).in_(sorted(project_ids)))
    if status:
        stmt = stmt.where(Run.status == status)
    if source:
        stmt = stmt.where(Run.source == source)
    if before is not None:
        stmt = stmt.where(
            or_(
                col(Run.created_at) < before.created_at,
                and_(col(Run.created_at) == before.created_at, col(Run.id) < before.id),
            )
        )
    stmt = stmt.order_by(col(Run.created_at).desc(), col(Run.id).desc()).limit(limit)
    with Session(engine, expire_on_commit=False) as s:
        return list(s.exec(stmt))


def is_descendant_or_self(engine: Engine, *, run_id: str, ancestor: str, max_depth: int = 8) -> bool:
    """Whether `run_id` is `ancestor` or one of its child runs (at any depth up to `max_depth`)."""
    current: str | None = run_id
    for _ in range(max_depth + 1):
        if current is None:
            return False
        if current == ancestor:
            return True
        run = get_run(engine, run_id=current)
        current = run.parent_run_id if run is not None else None
    return False


def waiting_descendant(engine: Engine, *, run_id: str, max_depth: int = 8) -> str | None:
    """The active child run a `waiting_for_child` run waits on, followed down to the one
    that is not itself waiting for a child (where a pending question would be); None when
    `run_id` waits on no child."""
    found: str | None = None
    current = run_id
    with Session(engine, expire_on_commit=False) as s:
        for _ in range(max_depth):
            stmt = (
                select(Run)
                .where(Run.parent_run_id == current, col(Run.status).in_(ACTIVE_STATUSES))
                .order_by(col(Run.created_at).desc(), col(Run.id).desc())
                .limit(1)
            )
            child = s.exec(stmt).first()
            if child is None:
                break
            found = current = child.id
            if child.status != "waiting_for_child":
                break
    return found


def interrupt_orphans(engine: Engine, *, alive: Callable[[str], bool] = owner_alive) -> list[str]:
    """Runs whose driving process is gone can never finish: mark them, with the reason.
    Runs a serve replica drives are judged by its lease instead (webui.store.replicas)."""
    interrupted: list[str] = []
    with Session(engine) as s:
        stmt = select(Run).where(col(Run.status).in_(ACTIVE_STATUSES), col(Run.replica_id).is_(None))
        for run in s.exec(stmt):
            if run.owner and alive(run.owner):
                continue
            run.status = "failed"
            run.error = {
                "code": "interrupted",
                "message": "The process running this run stopped before it finished.",
            }
            run.finished_at = utcnow()
            s.add(run)
            s.add(RunEvent(run_id=run.id, kind="state", text="failed", data={"reason": "interrupted"}))
            insights.add_ended(s.connection(), insights.ended_of(run, "failed", run.finished_at))
            interrupted.append(run.id)
        s.commit()
    return interrupted


@dataclass(frozen=True)
class TaskView:
    """What an MCP task (webui.mcp.tasks) reads of its run in one session: the run, the
    pending questions of the run and of the child runs it waits on (oldest first), and its
    newest timeline entry and newest progress entry."""

    run: Run
    pending: list[Interaction]
    last_event: RunEvent | None
    last_progress: RunEvent | None
    # Pending questions of the run itself whose handler's key an earlier question of the
    # run already used (answered or closed since): a task's key names one request only.
    reused_keys: frozenset[str] = frozenset()


# How many of a run's newest timeline entries a task poll looks through for its progress.
PROGRESS_LOOKBACK = 1000


def task_view(
    engine: Engine, *, run_id: str, max_depth: int = 8, max_pending: int = 50, max_children: int = 500
) -> TaskView | None:
    with Session(engine, expire_on_commit=False) as s:
        run = s.get(Run, run_id)
        if run is None:
            return None
        tree = [run_id]
        frontier = [run_id]
        if run.status not in FINAL_STATUSES:
            for _ in range(max_depth):
                # Bounded per level: a handler fanning out to many child runs costs a poll
                # no more than this (their questions are capped at `max_pending` anyway).
                children = list(
                    s.exec(
                        select(Run.id)
                        .where(col(Run.parent_run_id).in_(frontier), col(Run.status).in_(ACTIVE_STATUSES))
                        .limit(max_children)
                    )
                )
                if not children:
                    break
                tree += children
                frontier = children
        pending = (
            list(
                s.exec(
                    select(Interaction)
                    .where(col(Interaction.run_id).in_(tree), Interaction.status == "pending")
                    .order_by(col(Interaction.created_at), col(Interaction.id))
                    .limit(max_pending)
                )
            )
            if run.status not in FINAL_STATUSES
            else []
        )
        newest = select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id).desc())
        last_event = s.exec(newest.limit(1)).first()
        # The newest progress among the run's newest entries only (the (run_id, id) index): a
        # run that never reports progress, or logs on and on after it, costs a poll no scan
        # of its whole timeline.
        recent = newest.with_only_columns(col(RunEvent.id)).limit(PROGRESS_LOOKBACK).subquery()
        progress = s.exec(
            select(RunEvent)
            .where(col(RunEvent.id).in_(sa_select(recent.c.id)), RunEvent.kind == "progress")
            .order_by(col(RunEvent.id).desc())
            .limit(1)
        ).first()
        return TaskView(run, pending, last_event, progress, _reused_keys(s, run_id, pending))


def _reused_keys(s: Session, run_id: str, pending: list[Interaction]) -> frozenset[str]:
    """The ids of the run's own pending questions whose key an earlier question of the run
    (answered or closed since: the (status, run_id) index) already carried. One bounded
    look per keyed question; a run has at most a few waiting at once."""
    reused: set[str] = set()
    for ia in pending:
        if ia.run_id != run_id or ia.input_key is None:
            continue
        earlier = s.exec(
            select(Interaction.id)
            .where(
                col(Interaction.status).in_(("answered", "closed")),
                Interaction.run_id == run_id,
                Interaction.input_key == ia.input_key,
                or_(
                    col(Interaction.created_at) < ia.created_at,
                    and_(col(Interaction.created_at) == ia.created_at, col(Interaction.id) < ia.id),
                ),
            )
            .limit(1)
        ).first()
        if earlier is not None:
            reused.add(ia.id)
    return frozenset(reused)

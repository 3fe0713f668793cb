"""Queries for serve replicas' leases, and for what a replica whose lease ran out leaves
behind: its active runs (marked interrupted) and its open MCP session rows (closed).

Every change is a conditional UPDATE: it happens only while its condition still holds
(the run still active, the lease still expired), so replicas sweeping at the same time, or
a replica renewing its lease at that moment, never change a row twice or wrongly.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, delete, exists, insert, select, update
from sqlalchemy.engine import Connection, Engine

from webui.store import insights
from webui.store.models import McpSession, Replica, Run, RunEvent, utcnow
from webui.store.runs import ACTIVE_STATUSES

_REPLICAS = cast(Table, Replica.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_RUNS = cast(Table, Run.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_EVENTS = cast(Table, RunEvent.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_SESSIONS = cast(Table, McpSession.__table__)  # pyright: ignore[reportAttributeAccessIssue]

# Called once per interrupted run, inside the transaction that interrupted it.
RunAudit = Callable[[Connection, str, str], object]  # (connection, run id, project id)


def get_replica(engine: Engine, *, replica_id: str) -> Replica | None:
    with engine.connect() as conn:
        row = conn.execute(select(_REPLICAS).where(_REPLICAS.c.id == replica_id)).mappings().first()
    return Replica.model_validate(dict(row)) if row is not None else None


def claim(engine: Engine, *, replica_id: str, host: str, pid: int, now: datetime | None = None) -> None:
    """Take the lease row for `replica_id` (a new one, or the one a previous process left)."""
    now = now or utcnow()
    values = {"host": host, "pid": pid, "started_at": now, "heartbeat_at": now}
    with engine.begin() as conn:
        done = conn.execute(update(_REPLICAS).where(_REPLICAS.c.id == replica_id).values(values)).rowcount
        if not done:
            conn.execute(insert(_REPLICAS).values(id=replica_id, **values))


def heartbeat(engine: Engine, *, replica_id: str, host: str, pid: int, now: datetime | None = None) -> bool:
    """Renew the lease; False when this process no longer holds it (another took the id)."""
    with engine.begin() as conn:
        return bool(
            conn.execute(
                update(_REPLICAS)
                .where(_REPLICAS.c.id == replica_id, _REPLICAS.c.host == host, _REPLICAS.c.pid == pid)
                .values(heartbeat_at=now or utcnow())
            ).rowcount
        )


def release(engine: Engine, *, replica_id: str, host: str, pid: int) -> None:
    """A replica stopping cleanly gives its lease up (its runs were already stopped)."""
    with engine.begin() as conn:
        conn.execute(
            delete(_REPLICAS).where(
                _REPLICAS.c.id == replica_id, _REPLICAS.c.host == host, _REPLICAS.c.pid == pid
            )
        )


def _lease_gone(replica_id: Any, before: datetime) -> Any:
    """No lease for `replica_id` renewed at or after `before` (expired, or no row at all)."""
    return ~exists().where(_REPLICAS.c.id == replica_id, _REPLICAS.c.heartbeat_at >= before)


def lapsed_replicas(engine: Engine, *, before: datetime, exclude: str) -> list[str]:
    """Replicas other than `exclude` whose lease was last renewed before `before` (or is
    gone) and that still have active runs or open MCP sessions."""
    runs = select(_RUNS.c.replica_id.label("id")).where(
        _RUNS.c.status.in_(ACTIVE_STATUSES), _RUNS.c.replica_id.is_not(None)
    )
    sessions = select(_SESSIONS.c.replica_id.label("id")).where(
        _SESSIONS.c.closed_at.is_(None), _SESSIONS.c.replica_id.is_not(None)
    )
    held = runs.union(sessions).subquery()
    stmt = select(held.c.id).where(held.c.id != exclude, _lease_gone(held.c.id, before)).distinct()
    with engine.connect() as conn:
        return sorted(str(r) for r in conn.execute(stmt).scalars())


def interrupt_runs(
    engine: Engine,
    *,
    replica_id: str,
    error: dict[str, Any],
    lapsed_before: datetime | None,
    audit: RunAudit | None = None,
) -> list[str]:
    """Mark the active runs `replica_id` drove as failed with `error`, each with its timeline
    entry and audit event in one transaction; returns the runs this call changed.

    `lapsed_before`: only while that replica's lease is still older than this (a sweep by
    another replica); None: unconditionally (the replica itself, restarting)."""
    with engine.connect() as conn:
        candidates = conn.execute(
            select(
                _RUNS.c.id,
                _RUNS.c.project_id,
                _RUNS.c.entrypoint_id,
                _RUNS.c.entrypoint_title,
                _RUNS.c.created_at,
            ).where(_RUNS.c.replica_id == replica_id, _RUNS.c.status.in_(ACTIVE_STATUSES))
        ).all()
    done: list[str] = []
    for run in candidates:
        run_id, project_id = run.id, run.project_id
        conditions = [
            _RUNS.c.id == run_id,
            _RUNS.c.replica_id == replica_id,
            _RUNS.c.status.in_(ACTIVE_STATUSES),
        ]
        if lapsed_before is not None:
            conditions.append(_lease_gone(replica_id, lapsed_before))
        finished_at = utcnow()
        with engine.begin() as conn:
            changed = conn.execute(
                update(_RUNS)
                .where(and_(*conditions))
                .values(status="failed", error=error, finished_at=finished_at)
            ).rowcount
            if not changed:
                continue
            insights.add_ended(conn, insights.ended_of(run, "failed", finished_at))
            conn.execute(
                insert(_EVENTS).values(
                    run_id=run_id, kind="state", text="failed", data={"reason": "interrupted"}
                )
            )
            if audit is not None:
                audit(conn, run_id, project_id)
        done.append(run_id)
    return done


def close_sessions(
    engine: Engine, *, replica_id: str, reason: str, lapsed_before: datetime | None = None
) -> int:
    """Close the open MCP session rows `replica_id` held (while its lease is still older than
    `lapsed_before`, when given); returns how many closed."""
    conditions = [_SESSIONS.c.replica_id == replica_id, _SESSIONS.c.closed_at.is_(None)]
    if lapsed_before is not None:
        conditions.append(_lease_gone(replica_id, lapsed_before))
    with engine.begin() as conn:
        return conn.execute(
            update(_SESSIONS).where(and_(*conditions)).values(closed_at=utcnow(), close_reason=reason)
        ).rowcount

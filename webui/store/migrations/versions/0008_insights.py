"""The insights page: runs summed per tool per minute and per half hour (`run_rollups`), each
replica's worker pool per minute (`pool_samples`); the runs that ended within the rollups'
keeping times are summed in

Revision ID: 0008_insights
Revises: 0007_run_trace
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0008_insights"
down_revision: str | None = "0007_run_trace"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_INT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# Frozen here as they were at this revision (webui.store.models may move on).
BOUNDS_MS = (10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000)
BUCKETS = tuple(f"d{i}" for i in range(len(BOUNDS_MS) + 1))
PERIODS = ((60, 2 * 86_400), (1800, 8 * 86_400))  # (period, kept for)
FINAL = ("success", "failed", "cancelled", "timeout")
FAILED = ("failed", "timeout")
BATCH = 5_000


def upgrade() -> None:
    op.create_table(
        "run_rollups",
        sa.Column("project_id", sa.String(), nullable=False),
        sa.Column("entrypoint_id", sa.String(), nullable=False),
        sa.Column("period_s", sa.Integer(), nullable=False),
        sa.Column("start_s", BIG_INT, nullable=False),
        sa.Column("title", sa.String(), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("duration_ms", BIG_INT, nullable=False),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in BUCKETS),
        sa.PrimaryKeyConstraint("project_id", "entrypoint_id", "period_s", "start_s"),
    )
    op.create_index("ix_run_rollups_window", "run_rollups", ["period_s", "start_s"])
    op.create_table(
        "pool_samples",
        sa.Column("replica_id", sa.String(), nullable=False),
        sa.Column("start_s", BIG_INT, nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("busy", sa.Integer(), nullable=False),
        sa.Column("queued", sa.Integer(), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id", "start_s"),
    )
    op.create_index("ix_pool_samples_start", "pool_samples", ["start_s"])
    _backfill(op.get_bind())


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _backfill(conn: sa.engine.Connection) -> None:
    """Sum the runs that ended within the longest keeping time (read in batches, summed in
    memory: one row per tool per period, however many runs)."""
    runs = sa.table(
        "runs",
        sa.column("id"),
        sa.column("project_id"),
        sa.column("entrypoint_id"),
        sa.column("entrypoint_title"),
        sa.column("status"),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("finished_at", sa.DateTime(timezone=True)),
    )
    now = datetime.now(UTC)
    since = datetime.fromtimestamp(now.timestamp() - max(kept for _, kept in PERIODS), UTC)
    sums: dict[tuple[str, str, int, int], dict[str, int | str]] = {}
    query = (
        sa.select(runs.c.project_id, runs.c.entrypoint_id, runs.c.entrypoint_title, runs.c.status)
        .add_columns(runs.c.created_at, runs.c.finished_at)
        .where(runs.c.status.in_(FINAL), runs.c.finished_at.is_not(None), runs.c.finished_at >= since)
        .execution_options(yield_per=BATCH)
    )
    for project_id, entrypoint_id, title, status, created_at, finished_at in conn.execute(query):
        end = _utc(finished_at)
        at = int(end.timestamp())
        duration = max(0, round((end - _utc(created_at)).total_seconds() * 1000))
        bucket = BUCKETS[bisect.bisect_left(BOUNDS_MS, duration)]
        for period, kept in PERIODS:
            if at < now.timestamp() - kept:
                continue
            key = (project_id, entrypoint_id, period, at - at % period)
            row = sums.get(key)
            if row is None:
                row = sums[key] = {"title": str(title)[:200], "calls": 0, "failures": 0, "duration_ms": 0}
                row.update(dict.fromkeys(BUCKETS, 0))
            row["calls"] = int(row["calls"]) + 1
            row["failures"] = int(row["failures"]) + (1 if status in FAILED else 0)
            row["duration_ms"] = int(row["duration_ms"]) + duration
            row[bucket] = int(row[bucket]) + 1
    rollups = sa.table(
        "run_rollups", *(sa.column(n) for n in ("project_id", "entrypoint_id", "period_s", "start_s"))
    )
    for name in ("title", "calls", "failures", "duration_ms", *BUCKETS):
        rollups.append_column(sa.column(name))
    batch: list[dict[str, object]] = []
    for (project_id, entrypoint_id, period, start), row in sums.items():
        batch.append(
            {
                "project_id": project_id,
                "entrypoint_id": entrypoint_id,
                "period_s": period,
                "start_s": start,
                **row,
            }
        )
        if len(batch) >= BATCH:
            conn.execute(sa.insert(rollups), batch)
            batch = []
    if batch:
        conn.execute(sa.insert(rollups), batch)


def downgrade() -> None:
    op.drop_index("ix_pool_samples_start", table_name="pool_samples")
    op.drop_table("pool_samples")
    op.drop_index("ix_run_rollups_window", table_name="run_rollups")
    op.drop_table("run_rollups")

"""The insights page's tables (queries: webui.store.insights); importable from
webui.store.models with every other table."""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, String, Table
from sqlmodel import SQLModel

from webui.store.columns import BIG_INT

# ----------------------------------------------------------------------------- insights
# Upper bounds (milliseconds) of the duration buckets the insights page sums runs into;
# one more bucket holds everything slower than the last bound.
DURATION_BOUNDS_MS = (
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    1_800_000,
)
DURATION_COLUMNS = tuple(f"d{i}" for i in range(len(DURATION_BOUNDS_MS) + 1))

# Runs that ended, summed per tool and per minute (`period_s` 60) and per half hour (1800), from
# creation to end (queue and waits included), written in the transaction that records each
# outcome (webui.store.insights). The insights page reads these, never the runs themselves.
RUN_ROLLUPS = Table(
    "run_rollups",
    SQLModel.metadata,
    Column("project_id", String(), primary_key=True),
    Column("entrypoint_id", String(), primary_key=True),
    Column("period_s", Integer(), primary_key=True),
    Column("start_s", BIG_INT, primary_key=True),  # the period's start, in seconds since the epoch
    Column("title", String(), nullable=False),  # the tool's title when its latest run ended
    Column("calls", Integer(), nullable=False),
    Column("failures", Integer(), nullable=False),  # failed or timed out
    Column("duration_ms", BIG_INT, nullable=False),  # their sum
    *(Column(name, Integer(), nullable=False) for name in DURATION_COLUMNS),
    Index("ix_run_rollups_window", "period_s", "start_s"),
)

# Each serve replica's worker pool and queue, one row per minute (the highest values its
# samples saw in that minute), for the insights page's "over time".
POOL_SAMPLES = Table(
    "pool_samples",
    SQLModel.metadata,
    Column("replica_id", String(), primary_key=True),
    Column("start_s", BIG_INT, primary_key=True),
    Column("slots", Integer(), nullable=False),
    Column("busy", Integer(), nullable=False),
    Column("queued", Integer(), nullable=False),
    Column("waiting", Integer(), nullable=False),  # runs waiting for a person or a child run
    Index("ix_pool_samples_start", "start_s"),
)

"""The insights rollups and pool samples (webui.store.insights) on both dialects: an outcome
is summed once in its run's transaction, an interrupted outcome replaced by the kept one is
taken out, the sweeps count what they end, the reads are scoped and their quantiles sound,
old rows are pruned; and migration 0008 backfills the runs that ended before it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from webui.store import insights
from webui.store import runs as run_store
from webui.store.db import make_engine, sqlite_url
from webui.store.insights import HALF_HOUR, MINUTE, Sums
from webui.store.models import DURATION_BOUNDS_MS, DURATION_COLUMNS, RUN_ROLLUPS, Interaction, Run, utcnow
from webui.store.replicas import interrupt_runs
from webui.store.schema import alembic_config

NOW = datetime(2026, 12, 1, 12, 30, 15, tzinfo=UTC)


def add_run(engine: Engine, run_id: str, *, project: str = "p", tool: str = "t", **fields: Any) -> None:
    with Session(engine) as s:
        fields.setdefault("created_at", NOW - timedelta(seconds=2))
        s.add(Run(id=run_id, project_id=project, entrypoint_id=tool, entrypoint_title=tool.upper(), **fields))
        s.commit()


def finish(engine: Engine, run_id: str, status: str, at: datetime = NOW, *, replace: bool = False) -> bool:
    return run_store.finish_run(
        engine,
        run_id=run_id,
        may_replace=lambda s, e: replace or s not in run_store.FINAL_STATUSES,
        status=status,
        finished_at=at,
        event_text=status,
    )


def rollups(engine: Engine, period: int = MINUTE) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(select(RUN_ROLLUPS).where(RUN_ROLLUPS.c.period_s == period)).mappings().all()
    return [dict(r) for r in rows]


def test_an_outcome_is_summed_once_per_minute_and_hour_with_its_bucket(engine: Engine) -> None:
    add_run(engine, "r1")
    add_run(engine, "r2", created_at=NOW - timedelta(milliseconds=30))
    add_run(engine, "r3", tool="u")
    assert finish(engine, "r1", "success")
    assert finish(engine, "r2", "failed")
    assert finish(engine, "r3", "timeout")
    assert not finish(engine, "r1", "failed")  # an outcome already recorded is kept: not counted again
    start = int(NOW.timestamp())
    for period in (MINUTE, HALF_HOUR):
        by_tool = {r["entrypoint_id"]: r for r in rollups(engine, period)}
        assert set(by_tool) == {"t", "u"}
        t = by_tool["t"]
        assert (t["calls"], t["failures"], t["duration_ms"]) == (2, 1, 2030)
        assert t["start_s"] == start - start % period and t["title"] == "T"
        assert t[DURATION_COLUMNS[insights.bucket_of(2000)]] == 1
        assert t[DURATION_COLUMNS[insights.bucket_of(30)]] == 1
        assert sum(t[c] for c in DURATION_COLUMNS) == 2
        assert (by_tool["u"]["calls"], by_tool["u"]["failures"]) == (1, 1)


def test_a_kept_outcome_replacing_an_interrupted_one_moves_the_run(engine: Engine) -> None:
    add_run(engine, "r1", replica_id="gone", status="running")
    assert interrupt_runs(engine, replica_id="gone", error={"code": "interrupted"}, lapsed_before=None) == [
        "r1"
    ]
    [row] = rollups(engine)
    assert (row["calls"], row["failures"]) == (1, 1)
    # The replica's kept record arrives later: a success, two minutes on.
    assert finish(engine, "r1", "success", NOW + timedelta(minutes=2), replace=True)
    rows = {r["start_s"]: r for r in rollups(engine)}
    assert sum(r["calls"] for r in rows.values()) == 1
    assert sum(r["failures"] for r in rows.values()) == 0
    assert sum(r[c] for r in rows.values() for c in DURATION_COLUMNS) == 1
    assert all(r[c] >= 0 for r in rows.values() for c in DURATION_COLUMNS)


def test_an_orphan_interrupted_at_a_restart_is_counted_as_failed(engine: Engine) -> None:
    add_run(engine, "r1", status="running", owner="999999999:0")
    assert run_store.interrupt_orphans(engine, alive=lambda _owner: False) == ["r1"]
    [row] = rollups(engine)
    assert (row["calls"], row["failures"]) == (1, 1)


def test_reads_are_scoped_to_the_projects_asked_for_and_grouped_by_point(engine: Engine) -> None:
    for i, project in enumerate(("a", "a", "b")):
        add_run(engine, f"r{i}", project=project)
        assert finish(engine, f"r{i}", "success", NOW - timedelta(minutes=i * 20))
    since = int((NOW - timedelta(hours=1)).timestamp())
    every = insights.read_tools(engine, period_s=MINUTE, since_s=since, step_s=1800, project_ids=None)
    assert sorted((t.project_id, t.total.calls) for t in every) == [("a", 2), ("b", 1)]
    [a] = insights.read_tools(engine, period_s=MINUTE, since_s=since, step_s=1800, project_ids={"a"})
    assert sum(p.calls for p in a.points.values()) == 2
    assert all(start % 1800 == 0 for start in a.points)
    assert insights.read_tools(engine, period_s=MINUTE, since_s=since, step_s=60, project_ids=set()) == []
    assert insights.read_tools(engine, period_s=MINUTE, since_s=since, step_s=60, project_ids={"zz"}) == []
    later = int((NOW - timedelta(minutes=30)).timestamp())
    assert (
        sum(
            t.total.calls
            for t in insights.read_tools(engine, period_s=MINUTE, since_s=later, step_s=60, project_ids=None)
        )
        == 2
    )


def test_quantiles_are_estimated_within_their_bucket() -> None:
    sums = Sums()
    assert sums.quantile_ms(0.5) is None
    buckets = [0] * len(DURATION_COLUMNS)
    buckets[insights.bucket_of(40)] = 90  # (25, 50]
    buckets[insights.bucket_of(4000)] = 10  # (2500, 5000]
    sums.add(100, 0, 0, buckets)
    p50, p95 = sums.quantile_ms(0.5), sums.quantile_ms(0.95)
    assert p50 is not None and 25 < p50 <= 50
    assert p95 is not None and 2500 < p95 <= 5000
    slow = Sums()
    slow.add(1, 0, 0, [0] * (len(DURATION_COLUMNS) - 1) + [1])
    assert slow.quantile_ms(0.95) == DURATION_BOUNDS_MS[-1]  # no upper bound: its lower one
    assert insights.bucket_of(10) == 0 and insights.bucket_of(11) == 1
    assert insights.bucket_of(10**9) == len(DURATION_BOUNDS_MS)


def test_old_rows_are_pruned_and_pool_samples_keep_the_minutes_highest(engine: Engine) -> None:
    now_s = int(NOW.timestamp())
    add_run(engine, "old", created_at=NOW - timedelta(days=3))
    assert finish(engine, "old", "success", NOW - timedelta(days=3))
    add_run(engine, "new")
    assert finish(engine, "new", "success")
    minute = now_s - now_s % 60
    sample = {"replica_id": "r", "start_s": minute, "slots": 4}
    insights.add_pool_sample(engine, **sample, busy=3, queued=0, waiting=1)
    insights.add_pool_sample(engine, **sample, busy=1, queued=5, waiting=0)
    insights.add_pool_sample(
        engine, replica_id="r", start_s=minute - 9 * 86_400, slots=4, busy=1, queued=0, waiting=0
    )
    assert insights.prune(engine, now_s=now_s) == 2  # the old minute row and the old sample
    assert len(rollups(engine, MINUTE)) == 1 and len(rollups(engine, HALF_HOUR)) == 2
    [point] = insights.read_pool(engine, since_s=minute - 3600, step_s=60)
    assert (point.slots, point.busy, point.queued, point.waiting) == (4, 3, 5, 1)
    insights.add_pool_sample(engine, replica_id="s", start_s=minute, slots=2, busy=2, queued=1, waiting=0)
    [both] = insights.read_pool(engine, since_s=minute - 3600, step_s=60)
    assert (both.slots, both.busy, both.queued) == (6, 5, 6)  # replicas summed


def test_questions_waiting_are_counted_and_the_oldest_listed_per_scope(engine: Engine) -> None:
    add_run(engine, "ra", project="a", status="waiting_for_input")
    add_run(engine, "rb", project="b", status="waiting_for_input")
    with Session(engine) as s:
        for i, run in enumerate(("ra", "ra", "rb")):
            s.add(
                Interaction(
                    id=f"q{i}",
                    run_id=run,
                    kind="form",
                    title=f"Q{i}",
                    requested_schema={"type": "object"},
                    created_at=utcnow() - timedelta(minutes=10 - i),
                )
            )
        s.add(
            Interaction(
                id="done", run_id="ra", kind="form", title="x", requested_schema={}, status="answered"
            )
        )
        s.commit()
    every = insights.read_waiting(engine, project_ids=None, shown_to=None, limit=2)
    assert every.count == 3 and [w.interaction_id for w in every.oldest] == ["q0", "q1"]
    only_b = insights.read_waiting(engine, project_ids={"b"}, shown_to=None)
    assert only_b.count == 1 and only_b.oldest[0].project_id == "b"
    assert insights.read_waiting(engine, project_ids=set(), shown_to=None).count == 0


def test_the_migration_backfills_the_runs_that_ended_before_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = make_engine(sqlite_url(path))
    with engine.connect() as conn:
        command.downgrade(alembic_config(conn), "0007_run_trace")
        conn.commit()
    now = utcnow()
    with Session(engine) as s:
        for i, (status, ago) in enumerate(
            [
                ("success", 1),
                ("failed", 5),
                ("running", 0),
                ("success", 3 * 24 * 60),
                ("success", 9 * 24 * 60),
            ]
        ):
            finished = None if status == "running" else now - timedelta(minutes=ago)
            s.add(
                Run(
                    id=f"r{i}",
                    project_id="p",
                    entrypoint_id="t",
                    entrypoint_title="T",
                    status=status,
                    created_at=now - timedelta(minutes=ago, seconds=1),
                    finished_at=finished,
                )
            )
        s.commit()
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), "head")
        conn.commit()
    minutes, hours = rollups(engine, MINUTE), rollups(engine, HALF_HOUR)
    assert sum(r["calls"] for r in minutes) == 2  # the last two days
    assert sum(r["failures"] for r in minutes) == 1
    assert sum(r["calls"] for r in hours) == 3  # the last eight days
    assert all(r[DURATION_COLUMNS[insights.bucket_of(1000)]] == r["calls"] for r in hours)
    engine.dispose()


@pytest.mark.parametrize("status", ["cancelled", "success"])
def test_cancelled_and_successful_runs_are_calls_but_not_failures(engine: Engine, status: str) -> None:
    add_run(engine, "r1")
    assert finish(engine, "r1", status)
    [row] = rollups(engine)
    assert (row["calls"], row["failures"]) == (1, 0)

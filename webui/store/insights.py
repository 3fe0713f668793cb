"""The insights page's store: runs summed per tool per minute and per half hour (`run_rollups`),
each replica's worker pool per minute (`pool_samples`), and the reads over them.

A run is added to its tool's rollups in the transaction that records its outcome
(`webui.store.runs.finish_run`, and the interrupted-run sweeps), so the sums never count a
run twice or miss one: an outcome that replaces an `interrupted` one takes the old one out
first. Reading a window reads at most one row per tool per point (60 for the hour, 1,440
half-hour rows for the day, 336 for the week), however many runs there were.

Minute rows are kept for `KEEP_MINUTES_S`, half-hour rows and pool samples for `KEEP_HALF_HOURS_S`
(`prune`, from the server's background loop)."""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from webui.store.models import (
    DURATION_BOUNDS_MS,
    DURATION_COLUMNS,
    POOL_SAMPLES,
    RUN_ROLLUPS,
    Interaction,
    Run,
    as_utc,
)

MINUTE, HALF_HOUR = 60, 1800
PERIODS = (MINUTE, HALF_HOUR)
KEEP_MINUTES_S = 2 * 86_400
KEEP_HALF_HOURS_S = 8 * 86_400
FAILED = frozenset({"failed", "timeout"})
TITLE_CHARS = 200  # a tool title kept in a rollup row


def bucket_of(duration_ms: int) -> int:
    """The index of the duration bucket `duration_ms` falls in (upper bounds inclusive)."""
    return bisect.bisect_left(DURATION_BOUNDS_MS, duration_ms)


def _insert(conn: Connection, table: Any) -> Any:
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


@dataclass(frozen=True)
class Ended:
    """What a rollup needs of a run that ended."""

    project_id: str
    entrypoint_id: str
    title: str
    created_at: datetime
    finished_at: datetime
    status: str

    @property
    def duration_ms(self) -> int:
        return max(0, round((as_utc(self.finished_at) - as_utc(self.created_at)).total_seconds() * 1000))


def add_ended(conn: Connection, ended: Ended, *, sign: int = 1) -> None:
    """Add (sign 1) or take out (-1) one ended run to its tool's minute and half-hour rows, in
    `conn`'s transaction."""
    at = int(as_utc(ended.finished_at).timestamp())
    duration = ended.duration_ms
    bucket = DURATION_COLUMNS[bucket_of(duration)]
    failed = sign if ended.status in FAILED else 0
    rows = [
        {
            "project_id": ended.project_id,
            "entrypoint_id": ended.entrypoint_id,
            "period_s": period,
            "start_s": at - at % period,
            "title": ended.title[:TITLE_CHARS],
            "calls": sign,
            "failures": failed,
            "duration_ms": sign * duration,
            **{name: sign if name == bucket else 0 for name in DURATION_COLUMNS},
        }
        for period in PERIODS
    ]
    stmt = _insert(conn, RUN_ROLLUPS)
    table = RUN_ROLLUPS.c
    changes: dict[str, Any] = {
        name: table[name] + stmt.excluded[name] for name in ("calls", "failures", "duration_ms", bucket)
    }
    if sign > 0:
        changes["title"] = stmt.excluded.title
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["project_id", "entrypoint_id", "period_s", "start_s"], set_=changes
        ),
        rows,
    )


def ended_of(row: Any, status: str, finished_at: datetime) -> Ended:
    """`Ended` from a runs row (project_id, entrypoint_id, entrypoint_title, created_at)."""
    return Ended(
        project_id=row.project_id,
        entrypoint_id=row.entrypoint_id,
        title=row.entrypoint_title,
        created_at=row.created_at,
        finished_at=finished_at,
        status=status,
    )


# ------------------------------------------------------------------------------- pool samples
def add_pool_sample(
    engine: Engine, *, replica_id: str, start_s: int, slots: int, busy: int, queued: int, waiting: int
) -> None:
    """The minute `start_s` of `replica_id`'s pool (written again: the highest values kept)."""
    with engine.begin() as conn:
        stmt = _insert(conn, POOL_SAMPLES)
        greatest = func.max if conn.dialect.name == "sqlite" else func.greatest  # SQLite's max(a, b)
        changes: dict[str, Any] = {"slots": stmt.excluded.slots}
        for name in ("busy", "queued", "waiting"):
            changes[name] = greatest(POOL_SAMPLES.c[name], stmt.excluded[name])
        values = {"replica_id": replica_id, "start_s": start_s, "slots": slots, "busy": busy}
        values.update(queued=queued, waiting=waiting)
        conn.execute(
            stmt.on_conflict_do_update(index_elements=["replica_id", "start_s"], set_=changes), values
        )


def prune(engine: Engine, *, now_s: int) -> int:
    """Drop the rows past their keeping time; returns how many."""
    r, p = RUN_ROLLUPS.c, POOL_SAMPLES.c
    with engine.begin() as conn:
        dropped = conn.execute(
            RUN_ROLLUPS.delete().where(and_(r.period_s == MINUTE, r.start_s < now_s - KEEP_MINUTES_S))
        ).rowcount
        dropped += conn.execute(
            RUN_ROLLUPS.delete().where(and_(r.period_s == HALF_HOUR, r.start_s < now_s - KEEP_HALF_HOURS_S))
        ).rowcount
        dropped += conn.execute(POOL_SAMPLES.delete().where(p.start_s < now_s - KEEP_HALF_HOURS_S)).rowcount
    return dropped


# ------------------------------------------------------------------------------------ reads
@dataclass
class Sums:
    """Runs summed: counts, the duration sum and the duration buckets."""

    calls: int = 0
    failures: int = 0
    duration_ms: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_COLUMNS))

    def add(self, calls: int, failures: int, duration_ms: int, buckets: Iterable[int]) -> None:
        self.calls += calls
        self.failures += failures
        self.duration_ms += duration_ms
        for i, n in enumerate(buckets):
            self.buckets[i] += n

    def quantile_ms(self, q: float) -> float | None:
        """The `q` quantile of the durations, estimated within its bucket (linearly); the
        slowest bucket has no upper bound: its lower bound is returned. None: no runs."""
        total = sum(self.buckets)
        if total <= 0:
            return None
        rank = q * total
        seen = 0
        for i, n in enumerate(self.buckets):
            if n > 0 and seen + n >= rank:
                low = 0 if i == 0 else DURATION_BOUNDS_MS[i - 1]
                if i == len(DURATION_BOUNDS_MS):
                    return float(low)
                high = DURATION_BOUNDS_MS[i]
                return low + (high - low) * max(0.0, rank - seen) / n
            seen += n
        return float(DURATION_BOUNDS_MS[-1])


@dataclass
class ToolSums:
    project_id: str
    entrypoint_id: str
    title: str
    total: Sums = field(default_factory=Sums)
    points: dict[int, Sums] = field(default_factory=dict)  # point start (seconds) -> sums


def read_tools(
    engine: Engine,
    *,
    period_s: int,
    since_s: int,
    step_s: int,
    project_ids: Collection[str] | None,
) -> list[ToolSums]:
    """Each tool's sums since `since_s` from its `period_s` rows, in total and per point of
    `step_s` seconds (a multiple of `period_s`); `project_ids` None: every project."""
    if project_ids is not None and not project_ids:
        return []
    c = RUN_ROLLUPS.c
    point = (c.start_s - c.start_s % step_s).label("point")
    columns = [func.sum(c[name]) for name in ("calls", "failures", "duration_ms", *DURATION_COLUMNS)]
    stmt = select(c.project_id, c.entrypoint_id, func.max(c.title), point, *columns).where(
        c.period_s == period_s, c.start_s >= since_s
    )
    if project_ids is not None:
        stmt = stmt.where(c.project_id.in_(sorted(project_ids)))
    stmt = stmt.group_by(c.project_id, c.entrypoint_id, point)
    tools: dict[tuple[str, str], ToolSums] = {}
    with engine.connect() as conn:
        for row in conn.execute(stmt):
            project_id, entrypoint_id, title, at, calls, failures, duration, *buckets = tuple(row)
            tool = tools.get((project_id, entrypoint_id))
            if tool is None:
                tool = tools[(project_id, entrypoint_id)] = ToolSums(project_id, entrypoint_id, str(title))
            elif int(at) > max(tool.points):
                tool.title = str(title)  # the newest point's: a renamed tool shows its new title
            counts = [int(n or 0) for n in buckets]
            sums = tool.points.setdefault(int(at), Sums())
            sums.add(int(calls or 0), int(failures or 0), int(duration or 0), counts)
            tool.total.add(int(calls or 0), int(failures or 0), int(duration or 0), counts)
    return [t for t in tools.values() if t.total.calls > 0]


@dataclass(frozen=True)
class PoolPoint:
    start_s: int
    slots: int
    busy: int
    queued: int
    waiting: int


def read_pool(engine: Engine, *, since_s: int, step_s: int) -> list[PoolPoint]:
    """Every replica's pool per point of `step_s` seconds: the highest per-minute values of
    each replica in the point, summed over replicas (slots: the highest in the point)."""
    p = POOL_SAMPLES.c
    point = (p.start_s - p.start_s % step_s).label("point")
    per_replica = (
        select(
            p.replica_id,
            point,
            func.max(p.slots).label("slots"),
            func.max(p.busy).label("busy"),
            func.max(p.queued).label("queued"),
            func.max(p.waiting).label("waiting"),
        )
        .where(p.start_s >= since_s)
        .group_by(p.replica_id, point)
        .subquery()
    )
    s = per_replica.c
    stmt = (
        select(s.point, func.sum(s.slots), func.sum(s.busy), func.sum(s.queued), func.sum(s.waiting))
        .group_by(s.point)
        .order_by(s.point)
    )
    with engine.connect() as conn:
        return [
            PoolPoint(int(a), int(b or 0), int(c or 0), int(d or 0), int(e or 0))
            for a, b, c, d, e in conn.execute(stmt)
        ]


@dataclass(frozen=True)
class Waiting:
    """A run's question waiting for an answer."""

    interaction_id: str
    run_id: str
    project_id: str
    tool: str
    title: str
    kind: str
    asked_at: datetime


@dataclass
class QuestionsWaiting:
    count: int  # every question waiting in the projects read
    oldest: list[Waiting]  # the oldest of those the viewer may read
    listable: int = 0  # how many the viewer may read (the rest are other accounts' runs')
    oldest_at: datetime | None = None  # when the oldest of all was asked


def read_waiting(
    engine: Engine, *, project_ids: Collection[str] | None, shown_to: int | None, limit: int = 10
) -> QuestionsWaiting:
    """Runs' questions waiting for an answer: how many, since when, and the `limit` oldest of
    those whose titles the viewer may read: every run's for `shown_to` None (administrators),
    else only the runs of account `shown_to` (a member sees how many others wait, not what
    they ask)."""
    if project_ids is not None and not project_ids:
        return QuestionsWaiting(0, [])
    i, r = Interaction.__table__.c, Run.__table__.c  # pyright: ignore[reportAttributeAccessIssue]
    where = [i.status == "pending", i.origin == "run"]
    if project_ids is not None:
        where.append(r.project_id.in_(sorted(project_ids)))
    listed = [*where] if shown_to is None else [*where, r.account_id == shown_to]
    joined = Interaction.__table__.join(Run.__table__, r.id == i.run_id)  # pyright: ignore[reportAttributeAccessIssue]
    with engine.connect() as conn:
        count, oldest_at = conn.execute(
            select(func.count(), func.min(i.created_at)).select_from(joined).where(*where)
        ).one()
        listable = (
            count
            if shown_to is None
            else conn.execute(select(func.count()).select_from(joined).where(*listed)).scalar_one()
        )
        rows = conn.execute(
            select(i.id, i.run_id, r.project_id, r.entrypoint_title, i.title, i.kind, i.created_at)
            .select_from(joined)
            .where(*listed)
            .order_by(i.created_at, i.id)
            .limit(limit)
        ).all()
    return QuestionsWaiting(
        int(count),
        [Waiting(a, b, c, str(d), str(e), str(f), as_utc(g)) for a, b, c, d, e, f, g in rows],
        int(listable),
        as_utc(oldest_at) if oldest_at is not None else None,
    )

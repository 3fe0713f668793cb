"""Audit events, read side: filtered keyset pages, streamed exports and the live tail.

The only writer is `webui.audit.log.AuditLog`. Pages and exports are ordered the way a log
is read, newest first by (created_at, id). Each filter column has an index, most of them
continuing with (created_at, id) (see `AuditEvent.__table_args__`), so a page is one index
range scan of `limit` rows whatever the size of the table, and paging uses a keyset cursor,
never OFFSET. The live tail reads by id, which grows with every insert (SQLite serialises
writers; on a server database with concurrent writers an id can become visible after a
higher one, and a tail that already passed it would not see it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast

from sqlalchemy import Column, ColumnElement, Row, Table, and_, func, or_, select, tuple_
from sqlalchemy.engine import Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from webui.store.models import AuditEvent, as_utc

_AUDIT = cast(Table, AuditEvent.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_C = _AUDIT.c
_NEWEST_FIRST = (_C.created_at.desc(), _C.id.desc())

# Export and display order of the columns.
COLUMNS: tuple[str, ...] = tuple(c.name for c in _AUDIT.columns)
EXPORT_BATCH = 1000

AuditRow = Row[Any]
# When several filters are given, the one expected to match the fewest rows picks the index;
# see `AuditFilter.clauses`.
MOST_SELECTIVE_FIRST = ("run_id", "session_id", "actor", "project_id", "event", "outcome")

# One row per fact: a run an MCP call started carries the call on its own events (`call` in
# their details: webui.audit.log), where rows of their own were written before (still found,
# never rewritten: an audit log is not edited after the fact). The documented names of those
# rows find both: name -> (the run's event, the outcome it must have; "!x": any but x).
CALL_DETAIL = "tools/call"
FOLDED: dict[str, tuple[str, str | None]] = {
    "tool.called": ("run.created", None),
    "tool.completed": ("run.finished", "success"),
    "tool.failed": ("run.finished", "!success"),
}


class unindexed(FunctionElement[Any]):
    """A column that must not choose the index. SQLite has no statistics unless ANALYZE ran;
    without them it prefers any index that also gives the ORDER BY, however many rows it
    has to walk: with `run_id` and `event` given it walked every `tool.called` row of the event
    index (600 ms at a million rows) instead of the five rows of one run. A unary `+` is
    SQLite's documented way to keep a term from using an index; elsewhere the column is
    left as it is, for a planner with statistics."""

    inherit_cache = True
    name = "unindexed"

    def __init__(self, column: Column[Any]) -> None:
        super().__init__(column)
        self.type = column.type


@compiles(unindexed)
def _unindexed(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(unindexed, "sqlite")
def _unindexed_sqlite(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return "+" + compiler.process(element.clauses, **kw)


@dataclass(frozen=True, kw_only=True)
class AuditFilter:
    """What a person narrows the log to. Every field is optional; the time range is
    `since` (inclusive) to `until` (exclusive)."""

    event: str | None = None
    project_id: str | None = None
    actor: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    outcome: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def _equal(self) -> Iterator[tuple[str, str]]:
        for name in MOST_SELECTIVE_FIRST:
            value = getattr(self, name)
            if value is not None:
                yield name, value

    def clauses(self) -> list[ColumnElement[bool]]:
        """The WHERE terms; only the most selective equality may pick the index, whose
        (created_at, id) tail then serves the order and the time range."""
        where: list[ColumnElement[bool]] = [
            _folded(value, first=i == 0)
            if name == "event" and value in FOLDED
            else (_C[name] if i == 0 else unindexed(_C[name])) == value
            for i, (name, value) in enumerate(self._equal())
        ]
        if self.since is not None:
            where.append(_C.created_at >= as_utc(self.since))
        if self.until is not None:
            where.append(_C.created_at < as_utc(self.until))
        return where

    def matches(self, row: AuditRow) -> bool:
        """The same test as `clauses()`, for rows already in memory (the live tail)."""
        for name, value in self._equal():
            if name == "event" and value in FOLDED:
                if not _folded_match(row, value):
                    return False
            elif getattr(row, name) != value:
                return False
        created = as_utc(row.created_at)
        if self.since is not None and created < as_utc(self.since):
            return False
        return self.until is None or created < as_utc(self.until)


def _folded(name: str, *, first: bool) -> ColumnElement[bool]:
    """The rows a folded name finds: its own (written before) and its run's events with the
    call; only the event itself (a two-value range of its index) may pick the index."""
    run_event, outcome = FOLDED[name]
    event = _C.event if first else unindexed(_C.event)
    as_call = [unindexed(_C.event) == run_event, _C.details["call"].as_string() == CALL_DETAIL]
    if outcome is not None:
        as_call.append(_C.outcome != outcome[1:] if outcome.startswith("!") else _C.outcome == outcome)
    either = or_(event == name, event == run_event)  # SQLite reads it as an IN on the index
    return and_(either, or_(unindexed(_C.event) == name, and_(*as_call)))


def _folded_match(row: AuditRow, name: str) -> bool:
    if row.event == name:
        return True
    run_event, outcome = FOLDED[name]
    details = row.details if isinstance(row.details, dict) else {}
    if row.event != run_event or details.get("call") != CALL_DETAIL:
        return False
    if outcome is None:
        return True
    return row.outcome != outcome[1:] if outcome.startswith("!") else row.outcome == outcome


@dataclass(frozen=True)
class Cursor:
    """Where the next (older) page starts: the last row shown, as (created_at, id)."""

    created_at: datetime
    id: int

    @classmethod
    def after_row(cls, row: AuditRow) -> Cursor:
        return cls(as_utc(row.created_at), row.id)

    def encode(self) -> str:
        return f"{as_utc(self.created_at).strftime('%Y%m%dT%H%M%S.%fZ')}_{self.id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Raises ValueError for anything `encode` would not have produced."""
        stamp, sep, ident = text.partition("_")
        if not sep or not ident.isdigit():
            raise ValueError(f"not a cursor: {text!r}")
        created = datetime.strptime(stamp, "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
        return cls(created, int(ident))


@dataclass(frozen=True)
class AuditPage:
    rows: Sequence[AuditRow]
    older: Cursor | None  # None: this is the last page


def _older_than(cursor: Cursor) -> ColumnElement[bool]:
    return tuple_(_C.created_at, _C.id) < tuple_(cursor.created_at, cursor.id)


def page(
    engine: Engine, *, filters: AuditFilter | None = None, before: Cursor | None = None, limit: int = 50
) -> AuditPage:
    """Up to `limit` rows matching `filters`, newest first, strictly older than `before`."""
    stmt = select(_AUDIT).where(*(filters or AuditFilter()).clauses())
    if before is not None:
        stmt = stmt.where(_older_than(before))
    stmt = stmt.order_by(*_NEWEST_FIRST).limit(limit + 1)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    if len(rows) > limit:
        return AuditPage(rows[:limit], Cursor.after_row(rows[limit - 1]))
    return AuditPage(rows, None)


def iter_batches(
    engine: Engine, *, filters: AuditFilter | None = None, batch: int | None = None
) -> Iterator[Sequence[AuditRow]]:
    """Every row matching `filters`, newest first, in batches of up to `batch` rows
    (default `EXPORT_BATCH`).

    Each batch is its own short read (a keyset page), so an export of a million rows never
    holds a transaction open, and rows written meanwhile (newer than the first batch) do not
    shift the ones still to come."""
    before: Cursor | None = None
    while True:
        chunk = page(engine, filters=filters, before=before, limit=batch or EXPORT_BATCH)
        if chunk.rows:
            yield chunk.rows
        if chunk.older is None:
            return
        before = chunk.older


def newer_than(
    engine: Engine,
    *,
    after: int,
    upto: int | None = None,
    filters: AuditFilter | None = None,
    limit: int = 500,
    newest: bool = False,
) -> list[AuditRow]:
    """Rows with `after` < id <= `upto` matching `filters`, oldest first. With `newest`,
    the `limit` highest ids of that range (still returned oldest first)."""
    stmt = select(_AUDIT).where(_C.id > after, *(filters or AuditFilter()).clauses())
    if upto is not None:
        stmt = stmt.where(_C.id <= upto)
    stmt = stmt.order_by(_C.id.desc() if newest else _C.id).limit(limit)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    return list(reversed(rows)) if newest else list(rows)


def max_id(engine: Engine) -> int:
    """The highest id written so far (0 for an empty log)."""
    with engine.connect() as conn:
        return conn.execute(select(func.max(_C.id))).scalar() or 0


def run_has_event(engine: Engine, *, run_id: str, event: str) -> bool:
    """Whether the run's audit trail holds `event` (its run_id index: a run has a handful)."""
    with engine.connect() as conn:
        found = conn.execute(select(_C.id).where(_C.run_id == run_id, _C.event == event).limit(1)).first()
        return found is not None


def distinct_values(engine: Engine, *, column: Literal["event", "outcome"], limit: int = 100) -> list[str]:
    """The distinct values of a column, sorted: a loose index scan (one index seek per value,
    written as a recursive CTE), so it stays fast on a large table with few distinct values."""
    target = _C[column]
    seed = select(func.min(target).label("v")).cte("vals", recursive=True)
    following = select(select(func.min(target)).where(target > seed.c.v).scalar_subquery()).where(
        seed.c.v.is_not(None)
    )
    vals = seed.union_all(following)
    stmt = select(vals.c.v).where(vals.c.v.is_not(None)).limit(limit)
    with engine.connect() as conn:
        values = [v for v in conn.execute(stmt).scalars()]
    if column == "event":  # the folded names stay offered: they still find their rows
        values = sorted({*values, *(name for name, (run_event, _) in FOLDED.items() if run_event in values)})
    return values


def as_record(row: AuditRow) -> dict[str, Any]:
    """One row as plain data for export: times in UTC ISO 8601."""
    record = dict(row._mapping)
    record["created_at"] = as_utc(row.created_at).isoformat()
    return record

"""The audit log for administrators: filter, page, export, follow live.

- `GET /admin/audit`: filter form and results, newest first, keyset-paged ("Older" carries
  the cursor). htmx requests get only the `results` block.
- `GET /admin/audit/export.csv` and `.jsonl`: the whole filtered set, streamed in batches.
- `GET /admin/audit/tail`: new events as SSE `audit-row` events, each a rendered table row
  (the same partial as the page), with the row id as the SSE id so a reconnecting browser
  resumes where it stopped.

The tail wakes on hub events on topic `audit` (kind `recorded`, data `id`: the new row's
id, published after commit) and otherwise polls the store once a second, which also sees
rows written by other processes (the CLI). One `TailFeed` per app does the reading for
every open tail, so the store cost does not grow with the number of people watching.
"""

from __future__ import annotations

import asyncio
import bisect
import csv
import io
import json
import math
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from jinja2 import Environment
from sqlalchemy.engine import Engine
from sse_starlette import EventSourceResponse, ServerSentEvent

from webui.audit.events import AuditName
from webui.auth.ui import COOKIE_NAME, UiUser
from webui.errors import SteamharnessError
from webui.events import EventHub, Subscription
from webui.settings import setting_default
from webui.store import audit as audit_store
from webui.store import projects as project_store
from webui.store.audit import AuditFilter, AuditRow, Cursor
from webui.store.models import as_utc
from webui.web.deps import AdminDep, ServicesDep, StateDep, UiAuthDep
from webui.web.state import AppState, Kept
from webui.web.templating import is_htmx, page

router = APIRouter(prefix="/admin/audit", tags=["admin"])

PAGE_SIZE = 50
TOPIC = "audit"
RECHECK_LOGIN_SECONDS = 60.0
TAIL_BACKLOG = 200  # a tail that starts far behind gets at most this many of the newest rows
ROW_TEMPLATE = "admin/_audit_row.html"
TIME_FORMATS = "2026-11-30T14:05 or 2026-11-30T14:05:09 (UTC)"
# A cell a spreadsheet would run as a formula gets a leading apostrophe (CSV injection):
# user agents and failure reasons come from clients.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
TEXT_FILTERS = {
    "event": "event",
    "project": "project_id",
    "actor": "actor",
    "session": "session_id",
    "run": "run_id",
    "outcome": "outcome",
}


class InvalidFilter(SteamharnessError):
    code = "invalid_filter"
    status = 422


# ------------------------------------------------------------------------------ filters
@dataclass
class FilterForm:
    """The filter form as submitted: what to refill it with, the filter, and any errors."""

    values: dict[str, str]
    filters: AuditFilter
    errors: dict[str, str] = field(default_factory=dict)

    def url(self, path: str = "/admin/audit", **extra: str | int | None) -> str:
        query = urlencode({k: v for k, v in {**self.values, **extra}.items() if v not in (None, "")})
        return f"{path}?{query}" if query else path

    def check(self) -> None:
        if self.errors:
            raise InvalidFilter(" ".join(self.errors.values()))


def _parse_time(value: str) -> datetime:
    """A `datetime-local` value (or any ISO 8601 time); without an offset it is UTC."""
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def audit_filter(
    event: Annotated[str, Query(max_length=200)] = "",
    project: Annotated[str, Query(max_length=200)] = "",
    actor: Annotated[str, Query(max_length=200)] = "",
    session: Annotated[str, Query(max_length=200)] = "",
    run: Annotated[str, Query(max_length=200)] = "",
    outcome: Annotated[str, Query(max_length=200)] = "",
    since: Annotated[str, Query(max_length=40, description="From this time (UTC), inclusive")] = "",
    until: Annotated[str, Query(max_length=40, description="Up to this time (UTC), exclusive")] = "",
) -> FilterForm:
    given = {"event": event, "project": project, "actor": actor, "session": session, "run": run}
    values = {k: v.strip() for k, v in {**given, "outcome": outcome}.items()}
    chosen: dict[str, Any] = {TEXT_FILTERS[k]: v for k, v in values.items() if v}
    errors: dict[str, str] = {}
    for name, raw in (("since", since.strip()), ("until", until.strip())):
        if not raw:
            continue
        try:
            chosen[name] = _parse_time(raw)
        except ValueError:
            errors[name] = f"“{raw}” is not a time; use {TIME_FORMATS}."
            values[name] = raw
        else:
            values[name] = chosen[name].strftime("%Y-%m-%dT%H:%M:%S")
    return FilterForm(values, AuditFilter(**chosen), errors)


FilterDep = Annotated[FilterForm, Depends(audit_filter)]


# ------------------------------------------------------------------------------ rows
def _compact(details: Any) -> str:
    if details is None:
        return ""
    return json.dumps(details, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=str)


def row_view(row: AuditRow, project_names: dict[str, str]) -> dict[str, Any]:
    """What the row partial shows; the template escapes every value."""
    created = as_utc(row.created_at)
    return {
        **row._mapping,
        "iso": created.isoformat(),
        "when": created.strftime("%Y-%m-%d %H:%M:%S"),
        "project_name": project_names.get(row.project_id or "", ""),
        "details_json": _compact(row.details),
    }


def project_names(engine: Engine) -> dict[str, str]:
    return {p.id: p.name for p in project_store.list_projects(engine)}


def render_rows(env: Environment, engine: Engine, rows: Sequence[AuditRow]) -> list[str]:
    if not rows:
        return []
    names = project_names(engine)
    template = env.get_template(ROW_TEMPLATE)
    return [template.render(r=row_view(row, names)).strip() for row in rows]


# ------------------------------------------------------------------------------ the page
def _swappable(request: Request, context: dict[str, Any], clean_url: str) -> Response:
    """htmx asks for the results block; a history restore asks for the whole page (with
    HX-Request set), and caches must keep the answers apart. A swap pushes `clean_url`."""
    restoring = request.headers.get("hx-history-restore-request") == "true"
    response = page(request, "admin/audit.html", context, block=None if restoring else "results")
    response.headers["Vary"] = "HX-Request, HX-History-Restore-Request"
    if is_htmx(request):
        response.headers["HX-Push-Url"] = clean_url
    return response


@router.get("", summary="Audit log (administrators)")
def audit_page(
    request: Request,
    _admin: AdminDep,
    services: ServicesDep,
    form: FilterDep,
    before: Annotated[str, Query(max_length=80, description="Cursor: show events older than this")] = "",
) -> Response:
    engine = services.engine
    # Only the filters that say something go into the address: a plain form GET sends
    # every field, so one with empty fields is sent on to the same page without them, and
    # an htmx swap pushes the clean address (HX-Push-Url) instead of the request's.
    clean_url = form.url(before=before or None)
    restoring = request.headers.get("hx-history-restore-request") == "true"
    if not is_htmx(request) and not restoring and any(v == "" for _, v in request.query_params.multi_items()):
        return RedirectResponse(clean_url, status_code=303)
    cursor: Cursor | None = None
    if before:
        try:
            cursor = Cursor.decode(before)
        except ValueError:
            form.errors["before"] = "That page link is not valid; start again from the newest events."
    whole_page = not is_htmx(request) or request.headers.get("hx-history-restore-request") == "true"
    names = project_names(engine)
    context: dict[str, Any] = {"form": form, "values": form.values, "errors": form.errors}
    if whole_page:
        context["choices"] = {
            "events": audit_store.distinct_values(engine, column="event"),
            "outcomes": audit_store.distinct_values(engine, column="outcome"),
            "projects": sorted(names.items(), key=lambda item: item[1].lower()),
        }
    if form.errors:
        context.update(rows=[], older_url=None, newest_url=None, tail_url=None)
        response = _swappable(request, context, clean_url)
        response.status_code = 422
        return response
    live = cursor is None and form.filters.until is None
    # Read the high-water mark first: a row written in between shows twice, never not at all.
    after = audit_store.max_id(engine) if live else None
    result = audit_store.page(engine, filters=form.filters, before=cursor, limit=PAGE_SIZE)
    context.update(
        rows=[row_view(row, names) for row in result.rows],
        older_url=form.url(before=result.older.encode()) if result.older else None,
        newest_url=form.url() if cursor is not None else None,
        tail_url=form.url("/admin/audit/tail", after=after) if live else None,
        export_csv=form.url("/admin/audit/export.csv"),
        export_jsonl=form.url("/admin/audit/export.jsonl"),
    )
    return _swappable(request, context, clean_url)


# ------------------------------------------------------------------------------ exports
def _csv_cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_chunks(engine: Engine, filters: AuditFilter) -> Iterator[str]:
    """The header, then one chunk per batch; never the whole file in memory."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(audit_store.COLUMNS)
    for batch in audit_store.iter_batches(engine, filters=filters):
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        for row in batch:
            record = audit_store.as_record(row)
            record["details"] = _compact(record["details"])
            writer.writerow([_csv_cell(record[c]) for c in audit_store.COLUMNS])
    yield buffer.getvalue()


def jsonl_chunks(engine: Engine, filters: AuditFilter) -> Iterator[str]:
    for batch in audit_store.iter_batches(engine, filters=filters):
        yield "".join(
            json.dumps(audit_store.as_record(row), ensure_ascii=False, separators=(",", ":"), default=str)
            + "\n"
            for row in batch
        )


def _export(
    services: Any, user: UiUser, form: FilterForm, kind: str, media_type: str, chunks: Iterator[str]
) -> StreamingResponse:
    services.audit.record_alone(
        services.engine,
        AuditName.AUDIT_EXPORTED,
        actor=user.actor,
        outcome="ok",
        source="ui",
        details={"format": kind, "filters": {k: v for k, v in form.values.items() if v}},
    )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return StreamingResponse(
        chunks,
        media_type=media_type,
        headers={
            "Content-Disposition": f'attachment; filename="audit-{stamp}.{kind}"',
            "Cache-Control": "no-store",
        },
    )


@router.get("/export.csv", summary="The filtered audit events as CSV (streamed)")
def export_csv(user: AdminDep, services: ServicesDep, form: FilterDep) -> StreamingResponse:
    form.check()
    chunks = csv_chunks(services.engine, form.filters)
    return _export(services, user, form, "csv", "text/csv; charset=utf-8", chunks)


@router.get("/export.jsonl", summary="The filtered audit events as JSON lines (streamed)")
def export_jsonl(user: AdminDep, services: ServicesDep, form: FilterDep) -> StreamingResponse:
    form.check()
    chunks = jsonl_chunks(services.engine, form.filters)
    return _export(services, user, form, "jsonl", "application/x-ndjson; charset=utf-8", chunks)


# ------------------------------------------------------------------------------ live tail
class TailFeed:
    """Reads new audit rows for every open tail of one app, and renders each row once.

    It keeps the newest rows read (`keep` of them, ids ascending) with their HTML. A tail
    that asks for rows after an id the feed still covers is answered from memory, filtered
    by its own filter; only one that fell further behind reads the store itself. Reads are
    single-flight: a tail that needs fresher data than the feed has joins the read in
    flight or starts one, so a burst of wake-ups costs one query."""

    def __init__(
        self, engine: Engine, render: Callable[[Sequence[AuditRow]], list[str]], *, keep: int = 2000
    ) -> None:
        self._engine = engine
        self._render = render
        self._keep = keep
        self._ids: list[int] = []
        self._items: list[tuple[AuditRow, str]] = []
        self._floor = -1  # every row with floor < id <= high is in _items
        self._high = -1  # -1: nothing read yet
        self._read: asyncio.Future[None] | None = None
        self._fresh_since = -math.inf  # start time of the newest completed read

    @property
    def high(self) -> int:
        return self._high

    async def refresh(self, *, not_before: float, want_id: int | None = None) -> None:
        """Return once a read that started at or after `not_before` has completed, or the
        feed already holds row `want_id`."""
        while self._fresh_since < not_before and (want_id is None or self._high < want_id):
            if self._read is None:
                self._read = asyncio.ensure_future(self._run_read(time.monotonic()))
            # Shielded: a tail that disconnects must not cancel the read the others wait for.
            await asyncio.shield(self._read)

    async def _run_read(self, started: float) -> None:
        try:
            if self._high < 0:
                self._high = self._floor = await anyio.to_thread.run_sync(audit_store.max_id, self._engine)
            else:
                rows, html = await anyio.to_thread.run_sync(self._read_new, self._high)
                self._append(rows, html)
            self._fresh_since = started
        finally:
            self._read = None

    def _read_new(self, high: int) -> tuple[list[AuditRow], list[str]]:
        rows = audit_store.newer_than(self._engine, after=high, limit=self._keep)
        return rows, self._render(rows)

    def _append(self, rows: Sequence[AuditRow], html: Sequence[str]) -> None:
        if not rows:
            return
        self._ids.extend(row.id for row in rows)
        self._items.extend(zip(rows, html, strict=True))
        self._high = rows[-1].id
        if len(self._ids) > 2 * self._keep:  # trim in halves, not on every append
            drop = len(self._ids) - self._keep
            self._floor = self._ids[drop - 1]
            del self._ids[:drop], self._items[:drop]

    async def rows_after(self, seen: int, filters: AuditFilter) -> tuple[list[tuple[AuditRow, str]], int]:
        """(rows with id > seen matching `filters`, with their HTML; the new `seen`), from
        what the feed holds now."""
        high = self._high
        if seen >= high:
            return [], max(seen, high)
        if seen >= self._floor:
            start = bisect.bisect_right(self._ids, seen)
            return [item for item in self._items[start:] if filters.matches(item[0])], high
        rows = await anyio.to_thread.run_sync(self._catch_up, seen, high, filters)
        return rows, high

    def _catch_up(self, seen: int, high: int, filters: AuditFilter) -> list[tuple[AuditRow, str]]:
        rows = audit_store.newer_than(
            self._engine, after=seen, upto=high, filters=filters, limit=TAIL_BACKLOG, newest=True
        )
        return list(zip(rows, self._render(rows), strict=True))


def _new_tail_feed(state: AppState) -> TailFeed:
    engine, env = state.services.engine, state.templates.env
    return TailFeed(engine, lambda rows: render_rows(env, engine, rows))


TAIL_FEED = Kept(_new_tail_feed)  # the app's feed, made on first use (it holds nothing to tear down)


def get_tail_feed(state: StateDep) -> TailFeed:
    return TAIL_FEED.of(state)


async def _next_wake(sub: Subscription, poll_seconds: float) -> tuple[bool, float, int | None]:
    """Wait for hub events or the poll interval. Returns (keep streaming, not_before,
    want_id): the freshness the next refresh needs."""
    with anyio.move_on_after(poll_seconds):
        events = [await sub.queue.get()]
        while not sub.queue.empty():
            events.append(sub.queue.get_nowait())
        if None in events:
            return False, 0.0, None  # lagged behind the hub: end; the browser reconnects
        ids = [e.data.get("id") for e in events if e is not None]
        exact = [i for i in ids if isinstance(i, int)]
        return True, time.monotonic(), max(exact) if len(exact) == len(ids) else None
    return True, time.monotonic() - poll_seconds, None


async def tail_events(
    *,
    hub: EventHub,
    feed: TailFeed,
    filters: AuditFilter,
    after: int | None,
    still_allowed: Callable[[], bool],
    poll_seconds: float = setting_default("audit_tail_poll_seconds"),
) -> AsyncGenerator[ServerSentEvent, None]:
    """The tail's SSE events; `still_allowed` (run in a worker thread now and then)
    re-checks the login, so a logout, a disabled account or a lost admin role ends it.
    Rows the hub did not announce (another replica's) are looked for every `poll_seconds`."""
    with hub.subscribe(TOPIC) as sub:
        if after is None:
            await feed.refresh(not_before=time.monotonic())
            after = feed.high
        seen = after
        recheck = time.monotonic() + RECHECK_LOGIN_SECONDS
        not_before, want = time.monotonic(), None
        while True:
            await feed.refresh(not_before=not_before, want_id=want)
            items, seen = await feed.rows_after(seen, filters)
            for row, html in items:
                yield ServerSentEvent(data=html, event="audit-row", id=str(row.id))
            if time.monotonic() >= recheck:
                if not await anyio.to_thread.run_sync(still_allowed):
                    return
                recheck = time.monotonic() + RECHECK_LOGIN_SECONDS
            wanted, not_before, want = await _next_wake(sub, poll_seconds)
            if not wanted:
                return


@router.get("/tail", summary="New audit events as server-sent events (rendered table rows)")
def audit_tail(
    request: Request,
    _admin: AdminDep,
    services: ServicesDep,
    ui_auth: UiAuthDep,
    state: StateDep,
    feed: Annotated[TailFeed, Depends(get_tail_feed)],
    form: FilterDep,
    after: Annotated[int | None, Query(ge=0, description="Only events with a higher id")] = None,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> EventSourceResponse:
    form.check()
    if last_event_id is not None and last_event_id.isdigit():
        after = max(after or 0, int(last_event_id))  # a reconnecting browser resumes here
    cookie = request.cookies.get(COOKIE_NAME)

    def still_admin() -> bool:
        user = ui_auth.resolve(cookie)
        return user is not None and user.is_admin

    events = tail_events(
        hub=services.hub,
        feed=feed,
        filters=form.filters,
        after=after,
        still_allowed=still_admin,
        poll_seconds=state.settings.audit_tail_poll_seconds,
    )
    return EventSourceResponse(events, send_timeout=10)

"""The admin audit log: access, filters, keyset paging, exports, the live tail.

Page and export tests use the TestClient app; the tail's store and hub behaviour is tested
on the feed and the event generator directly, and its SSE delivery over HTTP from the app
served by uvicorn in this process (`in_process_server`)."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from tests.support import in_process_server
from tests.web.conftest import ADMIN, HELLO, INTERACTIVE, LEDGER, USER, Web, rendered
from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.events import EventHub
from webui.store import audit as audit_store
from webui.store.audit import AuditFilter
from webui.store.db import make_engine, sqlite_url
from webui.web import audit_pages
from webui.web.audit_pages import TailFeed, tail_events
from webui.web.state import app_state

ROW_ID = re.compile(r'<tr id="audit-(\d+)"')
OLDER = re.compile(r'<a href="([^"]+)"[^>]*rel="next"')
SSE_CONNECT = re.compile(r'sse-connect="([^"]+)"')
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
URLS = ("/admin/audit", "/admin/audit/export.csv", "/admin/audit/export.jsonl", "/admin/audit/tail")


def call(
    event: str, actor: str, project: str, session: str, run: str, tool: str, outcome: str
) -> dict[str, Any]:
    return {
        "event": event,
        "actor": actor,
        "project_id": project,
        "session_id": session,
        "run_id": run,
        "tool": tool,
        "outcome": outcome,
    }


# Dated before anything the fixture and the logins write, so "newest first" puts them last.
SEED: list[dict[str, Any]] = [
    call("tool.called", "user:ann", HELLO, "s-1", "r-1", "echo", "started"),
    call("tool.completed", "user:ann", HELLO, "s-1", "r-1", "echo", "success"),
    call("tool.called", "user:bob", LEDGER, "s-2", "r-2", "post", "started"),
    call("tool.failed", "user:bob", LEDGER, "s-2", "r-2", "post", "failed"),
    {"event": "auth.failed", "project_id": LEDGER, "outcome": "401", "details": {"reason": "unknown key"}},
    {
        "event": "session.created",
        "actor": "admin",
        "project_id": INTERACTIVE,
        "session_id": "s-3",
        "outcome": "ok",
    },
]


def engine_of(web: Web) -> Engine:
    return app_state(web.client.app).services.engine


def seed(engine: Engine, rows: list[dict[str, Any]]) -> list[int]:
    """Write rows through the AuditLog (created_at given); returns their ids."""
    first = audit_store.max_id(engine) + 1
    with Session(engine) as s:
        for row in rows:
            fields = dict(row)
            AuditLog().record(s, fields.pop("event"), **fields)
        s.commit()
    return list(range(first, first + len(rows)))


def seeded(web: Web) -> list[int]:
    rows = [{**row, "created_at": T0 + timedelta(hours=i)} for i, row in enumerate(SEED)]
    return seed(engine_of(web), rows)


def page_ids(text: str) -> list[int]:
    """The ids of the rows drawn in the HTML."""
    return [int(i) for i in ROW_ID.findall(text)]


def listed(response: Any) -> list[int]:
    """The ids of the rows the page was given, in order."""
    template, _, context = rendered(response)
    assert template == "admin/audit.html"
    return [row["id"] for row in context["rows"]]


@pytest.fixture
def admin(web: Web) -> Web:
    web.login(*ADMIN)
    return web


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(sqlite_url(tmp_path / "audit.sqlite3"))
    yield engine
    engine.dispose()


# ------------------------------------------------------------------------------ access
@pytest.mark.shares_app
@pytest.mark.parametrize("url", URLS)
def test_a_plain_user_is_refused_every_audit_url(web: Web, url: str) -> None:
    web.login(*USER)
    r = web.client.get(url)
    assert r.status_code == 403 and rendered(r).template == "error.html"
    assert "audit-" not in r.text


@pytest.mark.shares_app
@pytest.mark.parametrize("url", URLS)
def test_anonymous_visitors_are_sent_to_the_login_page(web: Web, url: str) -> None:
    r = web.client.get(url + "?event=x", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/login?next=%2Fadmin%2Faudit")


def test_the_page_has_a_labelled_filter_form_and_the_newest_events_first(admin: Web) -> None:
    ids = seeded(admin)
    r = admin.client.get("/admin/audit")
    assert r.status_code == 200
    for name in ("event", "project", "actor", "session", "run", "outcome", "since", "until"):
        assert f'<label for="audit-{name}">' in r.text and f'id="audit-{name}" name="{name}"' in r.text
    shown = listed(r)
    assert page_ids(r.text) == shown  # every row given is drawn, in order
    assert shown[-len(ids) :] == ids[::-1]  # seeded last but dated earlier: ordered by time
    assert shown[: -len(ids)] == sorted(shown[: -len(ids)], reverse=True)
    choices = rendered(r).context["choices"]
    assert {row["event"] for row in SEED} <= set(choices["events"])  # event types offered from the store
    assert '<option value="tool.failed">' in r.text


# ------------------------------------------------------------------------------ filters
@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("event=tool.called", lambda r: r["event"] == "tool.called"),
        (f"project={LEDGER}", lambda r: r.get("project_id") == LEDGER),
        ("actor=user%3Abob", lambda r: r.get("actor") == "user:bob"),
        ("session=s-1", lambda r: r.get("session_id") == "s-1"),
        ("run=r-2", lambda r: r.get("run_id") == "r-2"),
        ("outcome=started", lambda r: r.get("outcome") == "started"),
        (
            f"event=tool.called&project={HELLO}",
            lambda r: r["event"] == "tool.called" and r["project_id"] == HELLO,
        ),
    ],
    ids=["event", "project", "actor", "session", "run", "outcome", "event+project"],
)
def test_each_filter_narrows_the_results_to_matching_events(admin: Web, query: str, wanted: Any) -> None:
    ids = seeded(admin)
    expected = [i for i, row in zip(ids, SEED, strict=True) if wanted(row)]
    r = admin.client.get(f"/admin/audit?{query}")
    assert r.status_code == 200
    assert listed(r) == expected[::-1]
    context = rendered(r).context
    assert context["export_csv"] == f"/admin/audit/export.csv?{query}"  # exports follow the filters
    assert context["export_jsonl"] == f"/admin/audit/export.jsonl?{query}"
    assert f'href="{html.escape(context["export_csv"])}"' in r.text


def test_the_time_range_includes_its_start_and_excludes_its_end(admin: Web) -> None:
    ids = seeded(admin)
    r = admin.client.get("/admin/audit?since=2026-01-05T10:00&until=2026-01-05T12:00:00")
    assert listed(r) == [ids[2], ids[1]]
    values = rendered(r).context["values"]
    assert (values["since"], values["until"]) == ("2026-01-05T10:00:00", "2026-01-05T12:00:00")  # kept
    assert 'value="2026-01-05T10:00:00"' in r.text
    assert rendered(r).context["tail_url"] is None  # a range that ends is not followed live
    assert "sse-connect" not in r.text
    with_offset = admin.client.get("/admin/audit", params={"since": "2026-01-05T15:00+05:00"})
    assert listed(with_offset)[-5:] == ids[5:0:-1]  # 15:00+05:00 is 10:00 UTC
    assert ids[0] not in listed(admin.client.get("/admin/audit?since=2026-01-05T09:00:01"))


@pytest.mark.shares_app
def test_an_unreadable_time_or_cursor_is_a_422_with_the_reason(admin: Web) -> None:
    r = admin.client.get("/admin/audit?since=yesterday")
    assert r.status_code == 422
    context = rendered(r).context
    assert list(context["errors"]) == ["since"] and context["errors"]["since"].startswith(
        "“yesterday” is not a time"
    )
    assert context["values"]["since"] == "yesterday" and context["rows"] == []
    assert "“yesterday” is not a time" in r.text and 'aria-invalid="true"' in r.text
    bad_cursor = admin.client.get("/admin/audit?before=nonsense")
    assert bad_cursor.status_code == 422 and list(rendered(bad_cursor).context["errors"]) == ["before"]
    assert admin.client.get("/admin/audit/export.csv?until=31/12/2026").status_code == 422


# ------------------------------------------------------------------------------ paging
def walk(web: Web, url: str) -> Iterator[list[int]]:
    while url:
        r = web.client.get(url)
        assert r.status_code == 200
        yield listed(r)
        older = rendered(r).context["older_url"]
        link = OLDER.search(r.text)  # the link the person follows
        assert (html.unescape(link.group(1)) if link else None) == older
        url = older or ""


@pytest.mark.shares_app
def test_keyset_paging_shows_every_event_once_even_while_new_ones_arrive(admin: Web) -> None:
    engine = engine_of(admin)
    # 130 rows whose times repeat and do not follow their ids.
    rows = [{"event": "page.test", "created_at": T0 + timedelta(minutes=(i * 7) % 43)} for i in range(130)]
    ids = seed(engine, rows)
    expected = [i for _, i in sorted(zip([r["created_at"] for r in rows], ids, strict=True), reverse=True)]
    pages = []
    for shown in walk(admin, "/admin/audit?event=page.test"):
        pages.append(shown)
        if len(pages) == 1:  # newer events must not shift the pages still to come
            seed(engine, [{"event": "page.test"} for _ in range(7)])
    assert [len(p) for p in pages] == [50, 50, 30]
    assert [i for p in pages for i in p] == expected


def test_an_htmx_request_gets_only_the_results_block(admin: Web) -> None:
    seeded(admin)
    r = admin.client.get("/admin/audit?event=tool.called", headers={"HX-Request": "true"})
    assert r.status_code == 200
    assert rendered(r)[:2] == ("admin/audit.html", "results")
    assert r.text.lstrip().startswith('<section id="audit-results"')
    assert "<html" not in r.text and 'class="filters"' not in r.text
    assert len(listed(r)) == 2 and page_ids(r.text) == listed(r)
    assert "HX-Request" in r.headers["vary"]
    restore = admin.client.get(
        "/admin/audit?event=tool.called", headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    )
    assert rendered(restore)[:2] == ("admin/audit.html", None)
    assert "<html" in restore.text


@pytest.mark.shares_app
def test_details_are_compact_escaped_json(admin: Web) -> None:
    seed(engine_of(admin), [{"event": "x.test", "details": {"note": "<script>alert(1)</script>", "n": 1}}])
    r = admin.client.get("/admin/audit?event=x.test")
    [row] = rendered(r).context["rows"]
    assert row["details_json"] == '{"n":1,"note":"<script>alert(1)</script>"}'
    assert "<script>alert" not in r.text
    assert html.unescape(r.text).count('{"n":1,"note":"<script>alert(1)</script>"}') == 1


@pytest.mark.shares_app
def test_the_replica_that_recorded_an_event_is_shown_and_exported(admin: Web) -> None:
    engine = engine_of(admin)
    with Session(engine) as s:
        AuditLog(replica_id="rep_00112233aabbccdd").record(s, AuditName.KNOWLEDGE_IMPORTED, actor="user:ann")
        AuditLog().record(s, AuditName.KNOWLEDGE_IMPORTED, actor="user:bob")
        s.commit()
    r = admin.client.get("/admin/audit?event=knowledge.imported")
    assert r.text.count("rep_00112233aabbccdd") == 1
    lines = [
        json.loads(line)
        for line in admin.client.get("/admin/audit/export.jsonl?event=knowledge.imported").text.splitlines()
    ]
    assert {rec["actor"]: rec["replica_id"] for rec in lines} == {
        "user:ann": "rep_00112233aabbccdd",
        "user:bob": None,
    }


# ------------------------------------------------------------------------------ exports
@pytest.mark.shares_app
def test_csv_export_streams_exactly_the_filtered_set(admin: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_store, "EXPORT_BATCH", 16)  # several batches
    ids = seed(engine_of(admin), [{"event": "export.test", "actor": f"user:{i}"} for i in range(40)])
    seeded(admin)
    r = admin.client.get("/admin/audit/export.csv?event=export.test")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert re.fullmatch(r'attachment; filename="audit-\d{8}T\d{6}Z\.csv"', r.headers["content-disposition"])
    records = list(csv.DictReader(io.StringIO(r.text)))
    assert list(records[0]) == list(audit_store.COLUMNS)
    assert [int(rec["id"]) for rec in records] == ids[::-1]
    assert {rec["event"] for rec in records} == {"export.test"}
    assert datetime.fromisoformat(records[0]["created_at"]).tzinfo is not None


def test_jsonl_export_streams_exactly_the_filtered_set(admin: Web) -> None:
    ids = seeded(admin)
    r = admin.client.get(f"/admin/audit/export.jsonl?project={LEDGER}")
    assert r.status_code == 200
    assert r.headers["content-disposition"].startswith("attachment;")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [rec["id"] for rec in lines] == [ids[4], ids[3], ids[2]]
    assert lines[0]["details"] == {"reason": "unknown key"}
    assert set(lines[0]) == set(audit_store.COLUMNS)


def test_an_export_is_itself_audited_with_its_filters(admin: Web) -> None:
    admin.client.get("/admin/audit/export.jsonl?outcome=failed")
    r = admin.client.get("/admin/audit/export.jsonl?event=audit.exported")
    (record,) = [json.loads(line) for line in r.text.splitlines()][-1:]
    assert record["actor"] == "user:root" and record["source"] == "ui"
    assert record["details"] == {"format": "jsonl", "filters": {"outcome": "failed"}}


@pytest.mark.shares_app
def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(admin: Web) -> None:
    seed(engine_of(admin), [{"event": "csv.test", "user_agent": '=HYPERLINK("http://x")', "actor": "-1"}])
    (record,) = csv.DictReader(io.StringIO(admin.client.get("/admin/audit/export.csv?event=csv.test").text))
    assert record["user_agent"] == '\'=HYPERLINK("http://x")' and record["actor"] == "'-1"


def test_with_several_filters_the_most_selective_one_picks_the_index(store: Engine) -> None:
    """SQLite without statistics would take the event index, which also gives the order, and
    walk every row of that event to find one run's."""
    filters = AuditFilter(event="tool.called", outcome="ok", run_id="r-1", since=T0)
    stmt = select(audit_store._AUDIT).where(*filters.clauses()).order_by(*audit_store._NEWEST_FIRST).limit(5)
    compiled = stmt.compile(dialect=store.dialect)
    params = tuple(compiled.construct_params()[name] for name in compiled.positiontup or ())
    with store.connect() as conn:
        plan = " ".join(row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params))
    assert re.search(r"SEARCH audit_events USING INDEX \w+ \(run_id=\?\)", plan), plan


# ------------------------------------------------------------------------------ the tail, in process
def plain_feed(engine: Engine) -> TailFeed:
    return TailFeed(engine, lambda rows: [f"<tr>{row.id} {row.event}</tr>" for row in rows])


@pytest.mark.anyio
async def test_many_waiting_tails_share_one_store_read(
    store: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed = plain_feed(store)
    await feed.refresh(not_before=anyio.current_time())
    ids = seed(store, [{"event": "a" if i % 2 else "b"} for i in range(10)])
    reads = []
    real = audit_store.newer_than

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(audit_store, "newer_than", counted)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(lambda: feed.refresh(not_before=anyio.current_time(), want_id=ids[-1]))
    assert len(reads) == 1
    rows, seen = await feed.rows_after(ids[0] - 1, AuditFilter(event="a"))
    assert [row.id for row, _ in rows] == ids[1::2] and seen == ids[-1]
    assert rows[0][1] == f"<tr>{ids[1]} a</tr>"


@pytest.mark.anyio
async def test_a_tail_that_is_far_behind_reads_the_newest_matching_rows(store: Engine) -> None:
    ids = seed(store, [{"event": "a"}, {"event": "b"}, {"event": "a"}])
    feed = plain_feed(store)
    await feed.refresh(not_before=anyio.current_time())  # the feed starts at the newest row
    rows, seen = await feed.rows_after(0, AuditFilter(event="a"))
    assert [row.id for row, _ in rows] == [ids[0], ids[2]] and seen == ids[-1]


@pytest.mark.anyio
async def test_the_tail_wakes_on_a_hub_event_and_unsubscribes_when_closed(store: Engine) -> None:
    hub = EventHub()
    after = seed(store, [{"event": "old"}])[-1]
    events = tail_events(
        hub=hub,
        feed=plain_feed(store),
        filters=AuditFilter(event="new"),
        after=after,
        still_allowed=lambda: True,
        poll_seconds=600.0,  # only the hub can deliver in time
    )
    received: list[Any] = []

    async def consume() -> None:
        received.append(await anext(events))

    new_id: int | None = None
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.wait_all_tasks_blocked()
            assert hub.subscriber_count == 1
            (new_id,) = seed(store, [{"event": "new"}])
            hub.publish(audit_pages.TOPIC, "recorded", id=new_id)
    assert new_id is not None
    (event,) = received
    assert (event.event, event.id, event.data) == ("audit-row", str(new_id), f"<tr>{new_id} new</tr>")
    await events.aclose()
    assert hub.subscriber_count == 0


# ------------------------------------------------------------------------------ the tail, over HTTP
def browser_login(client: httpx2.Client, name: str, password: str) -> None:
    form = client.get("/login")
    token = CSRF_INPUT.search(form.text)
    assert token, form.text
    data = {"username": name, "password": password, "csrf_token": token.group(1)}
    r = client.post("/login", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text


def test_the_live_tail_delivers_a_new_event_as_a_rendered_row(tmp_path: Path) -> None:
    with in_process_server(tmp_path) as server:
        server.add_user("root", admin=True, password=ADMIN[1])
        with httpx2.Client(base_url=server.base_url, timeout=15) as browser:
            browser_login(browser, *ADMIN)
            audit = browser.get("/admin/audit?event=ui.login")
            tail = SSE_CONNECT.search(audit.text)
            assert audit.status_code == 200 and tail
            with pytest.raises(AssertionError, match="not rendered from a template"):
                rendered(audit)  # a real server's response is only its HTML
            with browser.stream("GET", html.unescape(tail.group(1))) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                with httpx2.Client(base_url=server.base_url, timeout=15) as intruder:
                    form = intruder.get("/login")
                    token = CSRF_INPUT.search(form.text)
                    assert token
                    bad = {"username": "root", "password": "wrong-password", "csrf_token": token.group(1)}
                    assert intruder.post("/login", data=bad).status_code == 401
                event: dict[str, str] = {}
                for line in stream.iter_lines():  # bounded by the client's read timeout
                    if not line:
                        if event.get("event") == "audit-row":
                            break
                        event = {}
                        continue
                    key, _, value = line.partition(":")
                    event[key] = event.get(key, "") + value.strip()
    row = event["data"]
    assert row.startswith(f'<tr id="audit-{event["id"]}" hx-disable>')
    assert "ui.login" in row and ">failed<" in row and "user:root" in row


# ------------------------------------------------------------------------------ one row per fact
def run_event(event: str, run: str, outcome: str, *, call: bool) -> dict[str, Any]:
    row = {**call_row(event, run, outcome), **({"call": "tools/call", "target": "latest"} if call else {})}
    return row


def call_row(event: str, run: str, outcome: str) -> dict[str, Any]:
    return call(event, "user:cy", HELLO, "s-9", run, "echo", outcome)


# A call's run is audited on its own events (`call` in details); a child run's are not a call.
FOLDED_SEED: list[dict[str, Any]] = [
    call("tool.called", "user:cy", HELLO, "s-9", "r-8", "echo", "started"),  # written before the fold
    run_event("run.created", "r-9", "queued", call=True),
    run_event("run.created", "r-10", "queued", call=False),
    run_event("run.finished", "r-9", "success", call=True),
    run_event("run.finished", "r-10", "failed", call=False),
    run_event("run.created", "r-11", "queued", call=True),
    run_event("run.finished", "r-11", "failed", call=True),
]


@pytest.mark.parametrize(
    ("event", "wanted"),
    [
        ("tool.called", [0, 1, 5]),
        ("tool.completed", [3]),
        ("tool.failed", [6]),
        ("run.created", [1, 2, 5]),
        ("run.finished", [3, 4, 6]),
    ],
)
def test_the_documented_call_events_find_the_calls_runs_own_events(
    store: Engine, event: str, wanted: list[int]
) -> None:
    ids = seed(store, [{**row, "created_at": T0 + timedelta(minutes=i)} for i, row in enumerate(FOLDED_SEED)])
    filters = AuditFilter(event=event, session_id="s-9")
    found = [row.id for row in audit_store.page(store, filters=filters).rows]
    assert found == [ids[i] for i in wanted][::-1]
    # the live tail's test in memory agrees with the query
    rows = audit_store.newer_than(store, after=0)
    assert [row.id for row in rows if filters.matches(row)] == [ids[i] for i in wanted]
    assert {"tool.called", "tool.completed", "tool.failed"} <= set(
        audit_store.distinct_values(store, column="event")
    )

"""Attacks on the insights page and its live stream: strangers get nothing; a member never
sees another project's tools, questions or pool (whatever `project=` she sends), nor, in a
project she shares, the titles of questions waiting on other accounts' runs (counted only,
in the page and in the stream's bodies, which are never another viewer's); hostile
tool, project and question titles reach the HTML escaped, in the page and in the stream's
bodies; oversized or odd query strings are refused; a flood of hub events costs one read
per settle interval, not one per event; a stream whose login ends or whose projects change
follows at its next re-check; a hostile title is stored bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlmodel import Session

from tests.security.test_knowledge_page_attacks import HOSTILE as PAGE_HOSTILE
from tests.security.test_knowledge_page_attacks import assert_inert as page_inert
from tests.web.conftest import ADMIN, HELLO, LEDGER, USER, Web, account_id, engine, prepare, rendered, running
from webui.admin import create_user, grant_projects
from webui.auth.ui import UiUser
from webui.events import EventHub
from webui.store import insights as insight_store
from webui.store.insights import Ended
from webui.store.models import RUN_ROLLUPS, Interaction, Run, utcnow
from webui.web import insights_page
from webui.web.insights_page import InsightsFeed, Scope, insights_stream, scope_of
from webui.web.state import app_state

HOSTILE = [*PAGE_HOSTILE, "</title><svg onload=alert(1)>"]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Web]:
    with running(prepare(tmp_path / "data")) as own:
        yield own


def assert_inert(html: str) -> None:
    page_inert(html)
    assert "<svg onload" not in html


def ended(web: Web, project: str, tool: str, title: str, status: str = "success") -> None:
    finished = utcnow() - timedelta(seconds=30)
    with engine(web).begin() as conn:
        insight_store.add_ended(
            conn, Ended(project, tool, title, finished - timedelta(seconds=1), finished, status)
        )


def waiting_question(web: Web, project: str, title: str, run_title: str) -> None:
    with Session(engine(web)) as s:
        s.add(
            Run(
                id=f"r-{project}",
                project_id=project,
                entrypoint_id="t",
                entrypoint_title=run_title,
                status="waiting_for_input",
            )
        )
        s.flush()  # the run before its question (the foreign key)
        s.add(
            Interaction(
                id=f"q-{project}", run_id=f"r-{project}", kind="form", title=title, requested_schema={}
            )
        )
        s.commit()


def test_strangers_get_the_login_page_and_no_figures(app: Web) -> None:
    ended(app, HELLO, "greet", "Secret tool")
    for path in ("/insights", "/insights?window=week", "/insights/stream"):
        r = app.client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
        assert "Secret tool" not in r.text
    r = app.client.get("/insights/stream", headers={"HX-Request": "true"}, follow_redirects=False)
    assert r.status_code == 401 and "Secret tool" not in r.text


@pytest.mark.parametrize(
    "query",
    [
        f"?project={LEDGER}",
        f"?project={LEDGER}&project={HELLO}",
        f"?project={HELLO}&project={LEDGER}",
        "?project=%25",
        "?project=' OR '1'='1",
        f"?project={LEDGER.upper()}",
        f"?project=+{LEDGER}",
    ],
    ids=["other", "other-then-own", "own-then-other", "like", "quote", "upper", "spaced"],
)
def test_a_member_never_sees_another_projects_tools_questions_or_pool(app: Web, query: str) -> None:
    ended(app, LEDGER, "post_entry", "Ledger secret tool", "failed")
    waiting_question(app, LEDGER, "Ledger secret question", "Ledger run")
    app.login(*USER)  # HELLO and INTERACTIVE only
    r = app.client.get(f"/insights{query}")
    assert r.status_code == 200
    insights = rendered(r).context["insights"]
    assert all(t.project_id != LEDGER for t in insights.tools)
    assert insights.questions == 0 and insights.pool is None
    assert "Ledger secret" not in r.text and "insights-pool" not in r.text


@pytest.mark.parametrize("evil", HOSTILE)
def test_hostile_titles_are_escaped_in_the_page(app: Web, evil: str) -> None:
    ended(app, HELLO, "evil", evil, "failed")
    waiting_question(app, HELLO, evil, evil)
    app.login(*ADMIN)
    r = app.client.get("/insights")
    html = r.text
    assert_inert(html)
    insights = rendered(r).context["insights"]
    assert [t.title for t in insights.tools] == [evil]
    assert insights.waiting[0].title == evil
    # Nothing of it lands inside a tag: the SVG titles and table cells carry it as text.
    assert html.count("&lt;") >= 2 or "<" not in evil


BOB = ("bob", "bob-password-1")  # a second member of HELLO, beside ann (USER)


def owned_question(web: Web, run_id: str, owner: str | None, title: str) -> None:
    """A question waiting on a run of HELLO owned by `owner` (None: the administrators')."""
    with Session(engine(web)) as s:
        s.add(
            Run(
                id=run_id,
                project_id=HELLO,
                entrypoint_id="greet",
                entrypoint_title=f"Tool of {title}",
                status="waiting_for_input",
                account_id=account_id(web, owner) if owner is not None else None,
            )
        )
        s.flush()
        s.add(Interaction(id=f"q-{run_id}", run_id=run_id, kind="form", title=title, requested_schema={}))
        s.commit()


@pytest.fixture
def shared(app: Web) -> Web:
    """HELLO shared by ann and bob; a question waits on a run of each, and of the administrators."""
    create_user(engine(app), name=BOB[0], admin=False, password=BOB[1])
    registry = app_state(app.client.app).registry
    grant_projects(engine(app), user=BOB[0], projects=[HELLO], registry=registry)
    owned_question(app, "r-ann", USER[0], "ann-own-question")
    owned_question(app, "r-bob", BOB[0], "bob-private-question")
    owned_question(app, "r-admin", None, "admin-private-question")
    return app


def test_a_member_sees_other_accounts_waiting_questions_counted_never_their_titles(shared: Web) -> None:
    """In a shared project, ann's page lists her run's question; bob's and the administrators'
    are counted (3 waiting) but not one of their titles, tools or runs reaches her page."""
    shared.login(*USER)
    r = shared.client.get(f"/insights?project={HELLO}")
    insights = rendered(r).context["insights"]
    assert (insights.questions, insights.listable) == (3, 1)
    assert [w.title for w in insights.waiting] == ["ann-own-question"]
    assert "ann-own-question" in r.text and 'href="/runs/r-ann"' in r.text
    for hidden in ("bob-private", "admin-private", "r-bob", "r-admin"):
        assert hidden not in r.text, hidden
    assert "2 more waiting on other accounts" in r.text
    for query in ("", "?window=week"):  # every view of it
        assert "bob-private" not in shared.client.get(f"/insights{query}").text

    shared.logout()
    shared.login(*BOB)
    page = shared.client.get("/insights")
    assert [w.title for w in rendered(page).context["insights"].waiting] == ["bob-private-question"]
    assert "ann-own" not in page.text and "2 more waiting" in page.text

    shared.logout()
    shared.login(*ADMIN)
    everything = rendered(shared.client.get(f"/insights?project={HELLO}")).context["insights"]
    assert sorted(w.run_id for w in everything.waiting) == ["r-admin", "r-ann", "r-bob"]


def test_the_stream_renders_each_members_questions_for_her_alone(shared: Web) -> None:
    """The stream's bodies are shared between viewers of one scope: bob's, rendered first,
    is never what ann's stream sends (and the reverse)."""
    ann = UiUser(account_id(shared, USER[0]), USER[0], False, "1", "c", frozenset({HELLO}))
    bob = UiUser(account_id(shared, BOB[0]), BOB[0], False, "2", "c", frozenset({HELLO}))
    assert shared.client.portal is not None
    [bobs] = shared.client.portal.call(_bodies, shared, scope_of(bob, "hour", ""), bob, 1)
    [anns] = shared.client.portal.call(_bodies, shared, scope_of(ann, "hour", ""), ann, 1)
    assert "bob-private-question" in bobs and "ann-own" not in bobs
    assert "ann-own-question" in anns and "bob-private" not in anns and "admin-private" not in anns


async def _bodies(app: Web, scope: Scope, user: UiUser, count: int) -> list[str]:
    state = app_state(app.client.app)
    feed = insights_page.feed_of(state)
    out: list[str] = []
    gen = insights_stream(feed, state.services.hub, user, scope, lambda: user)
    try:
        async for event in gen:
            out.append(str(event.data))
            if len(out) >= count:
                break
    finally:
        await gen.aclose()
    return out


@pytest.mark.parametrize("evil", HOSTILE[:3])
def test_hostile_titles_are_escaped_in_the_streams_bodies(app: Web, evil: str) -> None:
    ended(app, HELLO, "evil", evil)
    user = UiUser(1, ADMIN[0], True, "1", "csrf", None)
    scope = scope_of(user, "hour", "")
    assert app.client.portal is not None
    [body] = app.client.portal.call(_bodies, app, scope, user, 1)
    assert_inert(body)
    assert "&lt;" in body or "<" not in evil


@pytest.mark.parametrize(
    "query",
    [
        "?window=year",
        "?window=HOUR",
        "?window=hour%00",
        f"?project={'x' * 101}",
        "?window[]=hour",
        f"?window={'w' * 10_000}",
    ],
    ids=["unknown", "case", "nul", "long-project", "array", "long-window"],
)
def test_odd_query_strings_are_refused(app: Web, query: str) -> None:
    app.login(*ADMIN)
    if query == "?window[]=hour":  # an unknown parameter is ignored: the default window
        assert app.client.get(f"/insights{query}").status_code == 200
        return
    for path in ("/insights", "/insights/stream"):
        r = app.client.get(f"{path}{query}")
        assert r.status_code == 422, (path, query, r.status_code)


def test_a_flood_of_events_costs_one_read_per_settle_interval() -> None:
    reads: list[Scope] = []

    def render(scope: Scope) -> str:
        reads.append(scope)
        return f"<div>{len(reads)}</div>"

    user = UiUser(1, "ann", False, "1", "c", frozenset({HELLO}))
    scope = scope_of(user, "hour", "")

    async def main(events: int) -> list[str]:
        hub = EventHub(queue_size=1000)
        await hub.start()
        feed = InsightsFeed(render)
        got: list[str] = []
        gen = insights_stream(feed, hub, user, scope, lambda: user, settle_seconds=0.2)
        try:
            got.append(str((await anext(gen)).data))
            for i in range(events):
                hub.publish("runs", "status", runId=f"r{i}", projectId=HELLO, status="success")
            with contextlib.suppress(StopAsyncIteration):
                got.append(str((await asyncio.wait_for(anext(gen), 30)).data))
        finally:
            await gen.aclose()
            await hub.close()
        return got

    assert len(asyncio.run(main(900))) == 2
    assert len(reads) == 2  # the first body, then one for all 900 events
    # More than the subscription holds: it ends as lagged (the browser reconnects), no read.
    assert len(asyncio.run(main(5_000))) == 1
    assert len(reads) == 3


def test_events_of_other_projects_do_not_wake_a_members_stream() -> None:
    reads: list[int] = []
    user = UiUser(1, "ann", False, "1", "c", frozenset({HELLO}))
    scope = scope_of(user, "hour", "")

    async def main() -> bool:
        hub = EventHub()
        await hub.start()
        feed = InsightsFeed(lambda s: (reads.append(1), f"<p>{len(reads)}</p>")[1])
        gen = insights_stream(feed, hub, user, scope, lambda: user, refresh_seconds=30.0)
        try:
            await anext(gen)
            for i in range(50):
                hub.publish("runs", "status", runId=f"r{i}", projectId=LEDGER, status="failed")
            try:
                await asyncio.wait_for(anext(gen), 1.5)
            except TimeoutError:
                return False
            return True
        finally:
            await gen.aclose()
            await hub.close()

    assert asyncio.run(main()) is False
    assert reads == [1]


def test_a_stream_ends_when_its_login_ends_and_follows_lost_projects() -> None:
    seen: list[frozenset[str] | None] = []
    user = UiUser(1, "ann", False, "1", "c", frozenset({HELLO, LEDGER}))
    answers: list[UiUser | None] = [UiUser(1, "ann", False, "1", "c", frozenset({HELLO})), None]

    def render(scope: Scope) -> str:
        seen.append(scope.project_ids)
        return f"<p>{len(seen)}</p>"

    async def main() -> int:
        hub = EventHub()
        await hub.start()
        sent = 0
        try:
            async for _ in insights_stream(
                InsightsFeed(render, fresh_seconds=0.0),
                hub,
                user,
                scope_of(user, "hour", ""),
                answers.pop,
                refresh_seconds=0.1,
                recheck_seconds=0.0,  # at every refresh
            ):
                sent += 1
                if sent > 10:
                    break
        finally:
            await hub.close()
        return sent

    answers.reverse()  # pop(): first the narrowed login, then none
    sent = asyncio.run(main())
    assert sent <= 3
    assert seen[0] == frozenset({HELLO, LEDGER})
    assert seen[-1] == frozenset({HELLO})  # re-read for what she may still use, then ended


def test_a_huge_title_is_stored_bounded(app: Web) -> None:
    ended(app, HELLO, "big", "T" * 100_000)
    with engine(app).connect() as conn:
        titles = [r.title for r in conn.execute(select(RUN_ROLLUPS.c.title))]
    assert titles and all(len(t) <= insight_store.TITLE_CHARS for t in titles)


def test_odd_rows_never_break_the_page(app: Web) -> None:
    """A rollup of a project that is not registered (shown by its id, to administrators
    only), a run that ends before it was created (its duration is 0, never negative), and
    2,000 tools (the table lists 200, 12 get charts): the page renders, bounded."""
    ended(app, "gone-project", "t", "Orphan tool", "failed")
    with Session(engine(app)) as s:
        s.add(
            Run(
                id="backwards",
                project_id=HELLO,
                entrypoint_id="b",
                entrypoint_title="Backwards",
                status="running",
                created_at=utcnow() + timedelta(minutes=5),
            )
        )
        s.commit()
    from webui.store import runs as run_store

    assert run_store.finish_run(
        engine(app), run_id="backwards", may_replace=lambda *_: True, status="success", finished_at=utcnow()
    )
    for i in range(2_000):
        ended(app, HELLO, f"bulk{i}", f"Bulk {i}")
    app.login(*ADMIN)
    r = app.client.get("/insights?window=week")
    assert r.status_code == 200
    insights = rendered(r).context["insights"]
    assert len(insights.tools) == 200 and insights.more_tools == 2_002 - 200
    assert sum(1 for t in insights.tools if t.chart is not None) == 12
    with engine(app).connect() as conn:
        durations = [
            row.duration_ms
            for row in conn.execute(select(RUN_ROLLUPS).where(RUN_ROLLUPS.c.entrypoint_id == "b"))
        ]
    assert durations and all(d == 0 for d in durations)
    assert len(r.content) < 2_000_000
    app.client.cookies.clear()
    app.login(*USER)
    member = app.client.get("/insights?window=week&project=gone-project")
    assert "Orphan tool" not in member.text and rendered(member).context["insights"].tools == []

"""The insights page (webui.web.insights_page) on the real app: what each viewer is given
(administrators every project and the worker pool; a member her projects only, one of
them with ?project=), each window's points, the htmx block, the tables and SVG charts the
HTML carries, and the rollups that real runs write."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from tests.web.conftest import (
    ADMIN,
    HELLO,
    LEDGER,
    USER,
    Web,
    engine,
    next_step,
    rendered,
    services,
    start_asking,
)
from webui.insights import view
from webui.store import insights as insight_store
from webui.store.insights import Ended
from webui.store.models import utcnow

TRIP = EXAMPLES / "interactive"


def ended(
    web: Web, project: str, tool: str, title: str, *, status: str = "success", ms: int = 40, ago_s: int = 60
) -> None:
    finished = utcnow() - timedelta(seconds=ago_s)
    with engine(web).begin() as conn:
        insight_store.add_ended(
            conn,
            Ended(project, tool, title, finished - timedelta(milliseconds=ms), finished, status),
        )


def tools_of(response: Any) -> dict[str, view.ToolRow]:
    return {t.entrypoint_id: t for t in rendered(response).context["insights"].tools}


@pytest.fixture
def filled(web: Web) -> Web:
    ended(web, HELLO, "greet", "Greet")
    ended(web, HELLO, "greet", "Greet", status="failed", ms=4000)
    ended(web, LEDGER, "post", "Post entry", ms=300)
    ended(web, LEDGER, "post", "Post entry", ms=300, ago_s=3 * 3600)  # in the day, not the hour
    return web


def test_an_administrator_sees_every_projects_tools_and_the_pool(filled: Web) -> None:
    filled.login(*ADMIN)
    r = filled.client.get("/insights")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    insights: view.Insights = rendered(r).context["insights"]
    tools = tools_of(r)
    assert set(tools) == {"greet", "post"}
    assert (tools["greet"].calls, tools["greet"].failures) == (2, 1)
    assert tools["post"].calls == 1  # the hour: the older run is outside it
    assert (insights.calls, insights.failures) == (3, 1)
    assert insights.slowest[0].entrypoint_id == "greet"
    assert [t.entrypoint_id for t in insights.failing] == ["greet"]
    assert insights.pool is not None and insights.pool_now is not None
    assert len(insights.overall.bars) >= 1 and insights.overall.overlay
    assert 'id="insights-pool"' in r.text
    assert "<svg" in r.text and 'role="img"' in r.text
    day = filled.client.get("/insights?window=day")
    assert tools_of(day)["post"].calls == 2
    assert len(view.point_starts(view.WINDOWS["day"], 0)) == 48


def test_a_member_sees_only_the_projects_she_may_use(filled: Web) -> None:
    filled.login(*USER)  # granted HELLO and INTERACTIVE
    r = filled.client.get("/insights")
    assert set(tools_of(r)) == {"greet"}
    insights: view.Insights = rendered(r).context["insights"]
    assert insights.pool is None and 'id="insights-pool"' not in r.text
    assert "Post entry" not in r.text
    other = filled.client.get(f"/insights?project={LEDGER}")
    assert other.status_code == 200 and tools_of(other) == {}
    assert "Post entry" not in other.text
    assert LEDGER not in other.text.replace(f"project={LEDGER}", "")  # only the URL she asked for
    own = filled.client.get(f"/insights?project={HELLO}&window=week")
    assert set(tools_of(own)) == {"greet"}


def test_an_administrator_viewing_one_project_gets_that_project_only(filled: Web) -> None:
    filled.login(*ADMIN)
    r = filled.client.get(f"/insights?project={LEDGER}")
    assert set(tools_of(r)) == {"post"}
    assert rendered(r).context["insights"].pool is None


def test_the_filters_swap_the_body_with_htmx_and_refuse_unknown_windows(filled: Web) -> None:
    filled.login(*ADMIN)
    r = filled.client.get("/insights?window=week", headers={"HX-Request": "true"})
    assert rendered(r).block == "body"
    assert r.text.lstrip().startswith('<div id="insights-body" hx-disable>')
    for bad in ("window=year", "window=", f"project={'x' * 101}"):
        assert filled.client.get(f"/insights?{bad}").status_code == 422, bad


def test_the_page_is_whole_without_javascript(filled: Web) -> None:
    """Tables carry every figure the charts show; the filter form submits by itself."""
    filled.login(*ADMIN)
    r = filled.client.get("/insights")
    assert 'id="insights-tool-table"' in r.text
    assert '<form class="filters" method="get" action="/insights"' in r.text
    assert "As a table" in r.text
    assert 'sse-connect="/insights/stream?window=hour"' in r.text


def test_a_real_question_waiting_is_listed_with_its_run_and_a_real_outcome_is_summed(web: Web) -> None:
    run_id, _ = start_asking(web, TRIP, "plan_trip", {"traveller": "Di"})
    web.login(*USER)  # it is her run, of a project she may use
    r = web.client.get("/insights")
    insights: view.Insights = rendered(r).context["insights"]
    assert insights.questions == 1 and [w.run_id for w in insights.waiting] == [run_id]
    assert f'href="/runs/{run_id}"' in r.text
    # Cancelled through the service: its outcome lands in the rollups.
    assert web.client.portal is not None
    web.client.portal.call(services(web).runs.cancel, run_id)
    next_step(web, run_id)
    after: view.Insights = rendered(web.client.get("/insights")).context["insights"]
    assert after.questions == 0
    assert [(t.entrypoint_id, t.calls, t.failures) for t in after.tools] == [("plan_trip", 1, 0)]


def test_a_window_covers_its_whole_span_and_a_renamed_tool_shows_its_new_title(web: Web) -> None:
    ended(web, HELLO, "greet", "Old title", ago_s=24 * 3600 - 15 * 60)  # just inside the day
    ended(web, HELLO, "greet", "New title", ago_s=60)
    ended(web, HELLO, "greet", "Older", ago_s=24 * 3600 + 45 * 60)  # outside it
    web.login(*ADMIN)
    greet = tools_of(web.client.get("/insights?window=day"))["greet"]
    assert greet.calls == 2 and greet.title == "New title"

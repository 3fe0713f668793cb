"""The runs list and the run page: permitted projects only, filters, keyset paging, and the
full report for administrators and the run's own actor. Every page test runs as a plain
page load and as an htmx request."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import EXAMPLES, TORTURE
from tests.web.conftest import ADMIN, HELLO, INTERACTIVE, LEDGER, USER, Web, rendered
from webui.runs.request import RunRequest
from webui.store import accounts as account_store
from webui.store import runs as run_store
from webui.store.models import Run
from webui.web.runs_pages import PAGE_SIZE
from webui.web.state import app_state
from webui.workflows.project import load_project

HX = {"HX-Request": "true"}
HELLO_DIR = EXAMPLES / "hello"


@pytest.fixture(params=[False, True], ids=["page", "htmx"])
def hx(request: pytest.FixtureRequest) -> dict[str, str]:
    return HX if request.param else {}


def start_run(
    web: Web, folder: Path, entrypoint: str, params: dict[str, Any], *, actor: str, until: str = "final"
) -> str:
    """A real run through the run service, waited on until `until` (final or waiting)."""
    project = load_project(folder)
    ep = project.entrypoint(entrypoint)
    assert ep is not None
    services = app_state(web.client.app).services
    # The run is the account's its actor names (as when started with that account's key).
    account = account_store.get_account(services.engine, name=actor.removeprefix("user:"))

    async def go() -> str:
        run_id = (
            await services.runs.start(
                RunRequest(
                    project=project,
                    entrypoint=ep,
                    params=params,
                    stored_params=params,
                    actor=actor,
                    account_id=account.id if account is not None else None,
                    project_version=project.version,
                )
            )
        ).run_id
        async with services.runs.watch(run_id) as updates:
            with anyio.fail_after(30):
                while (await updates.get()).kind != until:
                    pass
        return run_id

    assert web.client.portal is not None
    return web.client.portal.call(go)


def insert_run(web: Web, run_id: str, project_id: str, *, created_at: datetime, **fields: Any) -> None:
    """A stored run without a worker, for listing and paging."""
    engine = app_state(web.client.app).services.engine
    values: dict[str, Any] = {"entrypoint_id": "greet", "entrypoint_title": "Greet", "status": "success"}
    values.update(fields)
    run_store.create_run(engine, run=Run(id=run_id, project_id=project_id, created_at=created_at, **values))


def run_ids(html: str) -> list[str]:
    """The runs linked in the HTML."""
    return re.findall(r'href="/runs/([^"]+)"', html)


def listed(response: Any) -> list[str]:
    """The ids of the runs the list was given, in order."""
    template, _, context = rendered(response)
    assert template == "runs/list.html"
    return [run.id for run in context["runs"]]


def report_of(response: Any) -> str | None:
    """The run page's full report as text (None: not shown to this person)."""
    report = rendered(response).context["report"]
    return None if report is None else repr([(e.kind, e.text, e.data) for e in report])


SHAPES = {"run-results": ("runs/list.html", "results"), "run": ("runs/detail.html", "run")}


def assert_shape(response: Any, hx: dict[str, str], block_id: str) -> None:
    assert response.status_code == 200, response.text
    template, block = SHAPES[block_id]
    assert rendered(response)[:2] == (template, block if hx else None)
    assert f'id="{block_id}"' in response.text
    assert ("<html" in response.text) is not bool(hx)
    assert "HX-Request" in response.headers["vary"]


def test_the_list_shows_only_runs_of_projects_the_user_may_use(web: Web, hx: dict[str, str]) -> None:
    now = datetime.now(UTC)
    insert_run(web, "r-hello", HELLO, created_at=now)
    insert_run(web, "r-ledger", LEDGER, created_at=now - timedelta(seconds=1))
    web.login(*USER)
    r = web.client.get("/runs", headers=hx)
    assert_shape(r, hx, "run-results")
    assert listed(r) == ["r-hello"] and run_ids(r.text) == ["r-hello"]  # given and linked
    assert {p.id for p in rendered(r).context["projects"]} == {HELLO, INTERACTIVE}  # the filter's choices
    r = web.client.get(f"/runs?project={LEDGER}", headers=hx)
    assert listed(r) == [] and run_ids(r.text) == [], "a project filter cannot widen what the user may see"
    web.logout()
    web.login(*ADMIN)
    r = web.client.get("/runs", headers=hx)
    assert listed(r) == ["r-hello", "r-ledger"] and run_ids(r.text) == listed(r)


def test_filters_by_project_status_and_source_newest_first(web: Web, hx: dict[str, str]) -> None:
    now = datetime.now(UTC)
    insert_run(web, "a-old", HELLO, created_at=now - timedelta(minutes=3))
    insert_run(web, "b-failed", HELLO, created_at=now - timedelta(minutes=2), status="failed")
    insert_run(web, "c-api", INTERACTIVE, created_at=now - timedelta(minutes=1), source="api")
    insert_run(web, "d-new", HELLO, created_at=now)
    web.login(*USER)
    assert listed(web.client.get("/runs", headers=hx)) == ["d-new", "c-api", "b-failed", "a-old"]
    assert listed(web.client.get(f"/runs?project={HELLO}", headers=hx)) == ["d-new", "b-failed", "a-old"]
    assert listed(web.client.get("/runs?status=failed", headers=hx)) == ["b-failed"]
    assert listed(web.client.get("/runs?source=api", headers=hx)) == ["c-api"]
    both = web.client.get(f"/runs?project={HELLO}&status=success", headers=hx)
    assert listed(both) == ["d-new", "a-old"]
    assert rendered(both).context["filters"] == {"project": HELLO, "status": "success", "source": ""}


@pytest.mark.shares_app
def test_the_filter_form_updates_the_results_with_htmx_and_keeps_the_url(web: Web) -> None:
    web.login(*USER)
    r = web.client.get("/runs?status=failed")
    assert rendered(r).context["filters"] == {"project": "", "status": "failed", "source": ""}
    html = r.text
    form = re.search(r"<form class=\"filters\"[^>]*>", html)
    assert form is not None
    tag = form.group(0)
    assert 'hx-get="/runs"' in tag and 'hx-trigger="change"' in tag and 'hx-push-url="true"' in tag
    assert 'hx-target="#run-results"' in tag
    assert '<option value="failed" selected>' in html
    for name in ("project", "status", "source"):
        assert f'<label for="filter-{name}">' in html and f'id="filter-{name}" name="{name}"' in html


@pytest.mark.shares_app
def test_a_history_restore_gets_the_whole_page(web: Web) -> None:
    web.login(*USER)
    r = web.client.get("/runs", headers={**HX, "HX-History-Restore-Request": "true"})
    assert rendered(r)[:2] == ("runs/list.html", None)
    assert "<html" in r.text and 'id="run-results"' in r.text


def test_older_pages_follow_created_at_then_id_without_gaps_or_repeats(web: Web, hx: dict[str, str]) -> None:
    same_time = datetime.now(UTC)
    expected = [f"run-{i:03d}" for i in range(PAGE_SIZE + 12)]
    for run_id in expected:  # equal timestamps: the id breaks the tie
        insert_run(web, run_id, HELLO, created_at=same_time)
    insert_run(web, "newest", HELLO, created_at=same_time + timedelta(seconds=1))
    web.login(*USER)
    first = web.client.get("/runs", headers=hx)
    page_one = listed(first)
    assert page_one[0] == "newest" and len(page_one) == PAGE_SIZE
    older_url = rendered(first).context["older_url"]
    older = re.search(r'<a href="([^"]+)"[^>]*rel="next"', first.text)  # the link the person follows
    assert older is not None and older.group(1).replace("&amp;", "&") == older_url
    second = web.client.get(older_url, headers=hx)
    page_two = listed(second)
    assert page_one + page_two == ["newest", *sorted(expected, reverse=True)]
    assert rendered(second).context["older_url"] is None and rendered(second).context["newest_url"] == "/runs"
    assert 'rel="next"' not in second.text and "Newest runs" in second.text


def test_older_link_keeps_the_filters(web: Web) -> None:
    now = datetime.now(UTC)
    for i in range(PAGE_SIZE + 1):
        insert_run(web, f"f-{i:03d}", HELLO, created_at=now - timedelta(seconds=i), status="failed")
    web.login(*USER)
    r = web.client.get("/runs?status=failed")
    older_url = rendered(r).context["older_url"]
    assert older_url == f"/runs?status=failed&before=f-{PAGE_SIZE - 1:03d}"
    older = re.search(r'<a href="([^"]+)"[^>]*rel="next"', r.text)
    assert older is not None and older.group(1).replace("&amp;", "&") == older_url
    assert listed(web.client.get(older_url)) == [f"f-{PAGE_SIZE:03d}"]


@pytest.mark.shares_app
def test_the_run_page_shows_params_status_timeline_and_output(web: Web, hx: dict[str, str]) -> None:
    run_id = start_run(web, HELLO_DIR, "greet", {"name": "Ann", "times": 2}, actor="user:ann")
    web.login(*USER)
    r = web.client.get(f"/runs/{run_id}", headers=hx)
    assert_shape(r, hx, "run")
    context = rendered(r).context
    assert context["run"].id == run_id and context["run"].status == "success"
    assert 'class="badge success"' in r.text
    assert json.loads(context["params_json"]) == {"name": "Ann", "times": 2}
    assert (
        "&#34;name&#34;: &#34;Ann&#34;" in r.text or "&quot;name&quot;: &quot;Ann&quot;" in r.text
    )  # escaped
    assert "Hello, Ann! Hello, Ann!" in context["output_json"] and "Hello, Ann! Hello, Ann!" in r.text
    assert [e.text for e in context["timeline"]] == ["queued", "running", "success"]
    timeline = re.search(r'<ol class="timeline">(.*?)</ol>', r.text, re.S)
    assert timeline is not None
    assert re.findall(r"</time> (\w+)", timeline.group(1)) == ["queued", "running", "success"]
    assert context["active"] is False
    assert "hx-trigger" not in r.text, "a finished run is not polled"


@pytest.mark.shares_app
def test_the_full_report_is_for_the_runs_own_actor_and_admins_only(web: Web, hx: dict[str, str]) -> None:
    own = start_run(web, HELLO_DIR, "greet", {"name": "Ann"}, actor="user:ann")
    others = start_run(web, HELLO_DIR, "greet", {"name": "Bob"}, actor="user:root")
    web.login(*USER)
    mine = web.client.get(f"/runs/{own}", headers=hx)
    assert "greeting Ann" in (report_of(mine) or "") and "greeting Ann" in mine.text
    theirs = web.client.get(f"/runs/{others}", headers=hx)
    assert theirs.status_code == 200 and "Hello, Bob!" in theirs.text
    assert report_of(theirs) is None
    assert "greeting Bob" not in theirs.text and "Report" not in theirs.text
    web.logout()
    web.login(*ADMIN)
    assert "greeting Ann" in (report_of(web.client.get(f"/runs/{own}", headers=hx)) or "")


@pytest.mark.shares_app
def test_a_failed_run_shows_its_error_and_keeps_stderr_for_the_report(web: Web, hx: dict[str, str]) -> None:
    run_id = start_run(web, TORTURE, "raise_error", {}, actor="user:root")
    web.login(*ADMIN)
    r = web.client.get(f"/runs/{run_id}", headers=hx)
    run = rendered(r).context["run"]
    assert run.status == "failed" and 'class="badge failed"' in r.text
    assert (run.error["code"], run.error["message"]) == ("handler_error", "The handler raised ValueError.")
    assert "handler_error" in r.text and "The handler raised ValueError." in r.text
    assert "hunter2" in (report_of(r) or "") and "hunter2" in r.text  # stderr, in the full report


@pytest.mark.shares_app
def test_runs_of_projects_the_user_may_not_use_are_not_found(web: Web, hx: dict[str, str]) -> None:
    run_id = start_run(web, TORTURE, "raise_error", {}, actor="user:root")
    web.login(*USER)
    r = web.client.get(f"/runs/{run_id}", headers=hx)
    assert r.status_code == 404 and rendered(r).template == "error.html" and "hunter2" not in r.text
    assert web.client.get("/runs/no-such-run", headers=hx).status_code == 404


def test_a_waiting_run_shows_its_pending_question_and_a_link_to_its_inbox_card(
    web: Web, hx: dict[str, str]
) -> None:
    run_id = start_run(
        web, EXAMPLES / "interactive", "plan_trip", {"traveller": "Ann"}, actor="user:ann", until="waiting"
    )
    web.login(*USER)
    r = web.client.get(f"/runs/{run_id}", headers=hx)
    context = rendered(r).context
    assert context["run"].status == "waiting_for_input" and 'class="badge waiting_for_input"' in r.text
    assert context["interaction"] is not None and context["interaction"].run_id == run_id
    assert "Waiting for input" in r.text
    assert f'href="/inbox#interaction-{context["interaction"].id}"' in r.text
    assert context["active"] is True
    article = re.search(r'<article id="run"[^>]*>', r.text)
    assert article is not None and 'hx-trigger="every 2s"' in article.group(0), "an active run is polled"
    assert listed(web.client.get("/runs?status=waiting_for_input", headers=hx)) == [run_id]


def test_a_child_run_and_its_parent_link_to_each_other(web: Web, hx: dict[str, str]) -> None:
    engine = app_state(web.client.app).services.engine
    now = datetime.now(UTC)
    insert_run(web, "20260101-parent", HELLO, created_at=now, status="waiting_for_child")
    insert_run(web, "20260101-child<", HELLO, created_at=now, parent_run_id="20260101-parent")
    link = {"runId": "20260101-child<", "projectId": HELLO, "entrypointId": "greet", "alias": "docs"}
    run_store.add_event(engine, run_id="20260101-parent", kind="child", text="started child run", data=link)
    run_store.add_event(
        engine, run_id="20260101-child<", kind="parent", text="started by", data={"runId": "20260101-parent"}
    )
    web.login(*USER)
    parent = web.client.get("/runs/20260101-parent", headers=hx)
    child = web.client.get("/runs/20260101-child%3C", headers=hx)
    assert [e.kind for e in rendered(parent).context["timeline"]] == ["state", "child"]
    assert 'class="badge waiting_for_child">waiting for child<' in parent.text
    assert 'started child run <a href="/runs/20260101-child&lt;">' in parent.text
    assert "(docs · greet)" in parent.text
    assert rendered(child).context["run"].parent_run_id == "20260101-parent"
    assert run_ids(child.text).count("20260101-parent") == 2  # the facts and the timeline
    assert "started by run <a" in child.text


def test_the_run_page_names_the_configuration_and_revision_but_never_its_values(
    web: Web, hx: dict[str, str]
) -> None:
    now = datetime.now(UTC)
    insert_run(
        web,
        "run_configured",
        HELLO,
        created_at=now,
        config_name="prod",
        config_revision=3,
        config_values={"threshold": 918273},
    )
    insert_run(web, "run_unconfigured", HELLO, created_at=now)
    web.login(*USER)
    r = web.client.get("/runs/run_configured", headers=hx)
    shown = re.search(r'<dd id="run-config">(.*?)</dd>', r.text, re.S)
    assert shown is not None and re.sub(r"<[^>]+>", "", shown.group(1)).split() == ["prod", "revision", "3"]
    assert "918273" not in r.text
    plain = web.client.get("/runs/run_unconfigured", headers=hx)
    shown = re.search(r'<dd id="run-config">(.*?)</dd>', plain.text, re.S)
    assert shown is not None and shown.group(1) == "—"

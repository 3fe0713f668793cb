"""Attacks on what the layout work added: the MCP sessions console now shows project names
(a hostile name reaches the HTML escaped and inert; a session of a project no longer
registered still lists, by its id), and the main nav's `aria-current` is computed from the
request's path (a hostile or huge path is never echoed into the nav, marks at most one
link and never an administration link for a user who is not an administrator)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.security.test_knowledge_page_attacks import HOSTILE, assert_inert
from tests.web.conftest import ADMIN, HELLO, USER, Web, engine, prepare, rendered, running
from webui.store import projects as project_store
from webui.store import sessions as session_store
from webui.store.models import McpSession, utcnow

NAV_RE = re.compile(r'<nav aria-label="Main">(.*?)</nav>', re.S)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Web]:
    with running(prepare(tmp_path / "data")) as own:
        yield own


def open_session(web: Web, sid: str, project_id: str) -> None:
    now = utcnow()
    row = McpSession(
        id=sid,
        credential="fp",
        actor=f"user:{USER[0]}",
        project_id=project_id,
        target="latest",
        resolved="1.0.0",
        created_at=now - timedelta(minutes=5),
        last_activity_at=now,
    )
    session_store.add_session(engine(web), row=row)


@pytest.mark.parametrize("evil", HOSTILE)
def test_a_hostile_project_name_is_shown_escaped_in_the_sessions_console(app: Web, evil: str) -> None:
    project_store.update_project(engine(app), project_id=HELLO, name=evil)
    open_session(app, "s-evil", HELLO)
    app.login(*ADMIN)
    for headers in ({}, {"HX-Request": "true"}):
        r = app.client.get("/admin/sessions", headers=headers)
        assert r.status_code == 200
        [view] = rendered(r).context["sessions"]
        assert view.project_name == evil
        assert_inert(r.text)


def test_a_session_of_a_project_no_longer_registered_lists_by_its_id(app: Web) -> None:
    open_session(app, "s-orphan", "gone-project-id")
    with engine(app).begin() as conn:  # no foreign key holds the session to its project
        assert conn.execute(text("SELECT count(*) FROM projects WHERE id = 'gone-project-id'")).scalar() == 0
    app.login(*ADMIN)
    r = app.client.get("/admin/sessions")
    [view] = rendered(r).context["sessions"]
    assert (view.project_name, view.project_id) == ("", "gone-project-id")
    assert '<td>unknown project<br><small class="muted"><code>gone-project-id</code></small></td>' in r.text


@pytest.mark.parametrize(
    "path",
    [
        "/projects/%22%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        "/runs/'%20aria-current='page",
        "/admin/users/../../keys",
        "/projects/" + "x" * 4000,
    ],
)
def test_a_hostile_path_is_never_echoed_into_the_nav(app: Web, path: str) -> None:
    app.login(*USER)
    r = app.client.get(path)
    assert r.status_code in (200, 404), r.status_code
    assert_inert(r.text)
    match = NAV_RE.search(r.text)  # none on a 404 no route of the app answered (no login read)
    nav = match.group(1) if match else ""
    assert "<script" not in nav and "alert" not in nav and "xxxx" not in nav
    assert nav.count("aria-current") <= 1
    assert "/admin/" not in nav  # a user who is not an administrator sees no administration link

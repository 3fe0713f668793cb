"""The MCP sessions console from the store's rows: order, the columns it shows (a project by
its name, its id secondary), rows no gateway of this process holds, and terminating one
(closed here, audited) — plus the refusals: non-administrators, unknown and already-ended
sessions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.web.conftest import ADMIN, HELLO, USER, Web, audit, engine, rendered
from webui.mcp.http_request import client_info
from webui.store import sessions as session_store
from webui.store.models import McpSession, utcnow


def add_row(web: Web, sid: str, *, minutes_ago: int, closed: bool = False, **fields: object) -> None:
    now = utcnow()
    row = McpSession(
        id=sid,
        credential="fp",
        actor=f"user:{USER[0]}",
        project_id=HELLO,
        target="latest",
        resolved="1.0.0",
        created_at=now - timedelta(hours=1),
        last_activity_at=now - timedelta(minutes=minutes_ago),
        closed_at=now if closed else None,
        close_reason="expired" if closed else None,
        **fields,  # type: ignore[arg-type]
    )
    session_store.add_session(engine(web), row=row)


def test_the_console_lists_open_sessions_most_recently_active_first(web: Web, hx: dict[str, str]) -> None:
    add_row(web, "s-old", minutes_ago=20, key_id="key_1", client_name="claude-code", client_version="2.1")
    add_row(web, "s-new", minutes_ago=1, protocol_version="2025-11-25")
    add_row(web, "s-gone", minutes_ago=0, closed=True)
    web.login(*ADMIN)
    r = web.client.get("/admin/sessions", headers=hx)
    assert r.status_code == 200
    template, block, context = rendered(r)
    assert (template, block) == ("admin/sessions.html", "sessions_panel" if hx else None)
    views = context["sessions"]
    assert [v.id for v in views] == ["s-new", "s-old"]
    old = views[1]
    assert (old.account, old.key_id, old.client, old.target, old.resolved) == (
        USER[0],
        "key_1",
        "claude-code 2.1",
        "latest",
        "1.0.0",
    )
    assert views[0].client == "unknown" and views[0].protocol_version == "2025-11-25"
    assert all(v.active_calls is None for v in views)  # no gateway here holds them
    assert "claude-code 2.1" in r.text and 'aria-label="Terminate session s-old"' in r.text


@pytest.mark.shares_app
def test_the_console_names_each_project_and_keeps_its_id_secondary(web: Web) -> None:
    add_row(web, "s-named", minutes_ago=0)
    web.login(*ADMIN)
    r = web.client.get("/admin/sessions")
    [view] = [v for v in rendered(r).context["sessions"] if v.id == "s-named"]
    assert (view.project_name, view.project_id) == ("hello", HELLO)
    assert f'<td>hello<br><small class="muted"><code>{HELLO}</code></small></td>' in r.text


def test_terminating_a_session_no_gateway_holds_closes_its_row_and_audits_it(
    web: Web, hx: dict[str, str]
) -> None:
    add_row(web, "s-stale", minutes_ago=5)
    csrf = web.login(*ADMIN)
    r = web.client.post(
        "/admin/sessions/s-stale/terminate", headers={**hx, "X-CSRF-Token": csrf}, follow_redirects=False
    )
    if hx:
        assert r.status_code == 200
        assert rendered(r).context["notice"] == "MCP session s-stale terminated."
        assert rendered(r).context["sessions"] == []
    else:
        assert r.status_code == 303 and r.headers["location"] == "/admin/sessions"
    row = session_store.get_session(engine(web), session_id="s-stale")
    assert row is not None and row.closed_at is not None and row.close_reason == "terminated"
    [event] = audit(web, "session.terminated")
    assert (event.actor, event.session_id, event.outcome) == (f"user:{ADMIN[0]}", "s-stale", "terminated")
    assert event.details == {"sessionActor": f"user:{USER[0]}", "held": False}


@pytest.mark.shares_app
def test_terminating_an_unknown_or_ended_session_says_which(web: Web) -> None:
    add_row(web, "s-done", minutes_ago=5, closed=True)
    csrf = web.login(*ADMIN)
    unknown = web.client.post("/admin/sessions/s-nope/terminate", headers={"X-CSRF-Token": csrf})
    assert unknown.status_code == 404
    assert rendered(unknown).context["error"] == "MCP session s-nope not found."
    ended = web.client.post(
        "/admin/sessions/s-done/terminate", headers={"X-CSRF-Token": csrf, "HX-Request": "true"}
    )
    assert ended.status_code == 409
    error = rendered(ended).context["error"]
    assert error.startswith("MCP session s-done already ended (expired, ") and error.endswith(" UTC).")
    assert 'role="alert"' in ended.text
    assert audit(web, "session.terminated") == []


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/admin/sessions"), ("POST", "/admin/sessions/s-x/terminate")]
)
def test_users_who_are_not_administrators_are_refused(web: Web, method: str, path: str) -> None:
    add_row(web, "s-x", minutes_ago=1)
    csrf = web.login(*USER)
    r = web.client.request(method, path, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 403
    row = session_store.get_session(engine(web), session_id="s-x")
    assert row is not None and row.closed_at is None


def test_client_info_reads_initialize_and_ignores_anything_else() -> None:
    params = {"protocolVersion": "2025-11-25", "clientInfo": {"name": "cursor", "version": "1.2"}}
    assert client_info({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}) == (
        "cursor",
        "1.2",
        "2025-11-25",
    )
    long_name = {"method": "initialize", "params": {"clientInfo": {"name": "x" * 500}}}
    assert client_info(long_name) == ("x" * 200, None, None)
    assert client_info({"method": "tools/list"}) == (None, None, None)
    assert client_info(None) == (None, None, None)  # no JSON message read
    assert client_info({"method": "initialize", "params": {"clientInfo": {"name": 3}}}) == (None, None, None)

"""Administration pages: users (create, disable/enable, project permissions) and projects
(run gate, queue limits). Every test runs as a plain form post and as an htmx request."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.web.conftest import (
    ADMIN,
    HELLO,
    INTERACTIVE,
    LEDGER,
    USER,
    Web,
    account_id,
    audit,
    engine,
    rendered,
)
from webui.admin import create_key
from webui.auth.keys import AuthError
from webui.auth.ui import COOKIE_NAME
from webui.store import accounts as account_store
from webui.store import projects as project_store
from webui.web.state import app_state


def as_admin(web: Web, hx: dict[str, str]) -> dict[str, str]:
    return {**hx, "X-CSRF-Token": web.login(*ADMIN)}


PANELS = {
    "users-panel": ("admin/users.html", "users_panel"),
    "projects-panel": ("admin/projects.html", "projects_panel"),
}


def done(response: Any, hx: dict[str, str], panel: str, location: str) -> None:
    """A successful write: htmx gets the fresh panel, a plain form a redirect."""
    if hx:
        assert response.status_code == 200, response.text
        assert rendered(response)[:2] == PANELS[panel]
        assert f'id="{panel}"' in response.text and "<html" not in response.text
    else:
        assert response.status_code == 303, response.text
        assert response.headers["location"] == location


def field_error(html: str, field: str) -> str:
    found = re.search(rf'<small id="{field}-error" class="error">([^<]*)</small>', html)
    assert found is not None, html
    return found.group(1)


@pytest.mark.shares_app
@pytest.mark.parametrize("path", ["/admin/users", "/admin/projects"])
def test_the_admin_pages_render_for_admins_and_are_forbidden_to_users(
    web: Web, hx: dict[str, str], path: str
) -> None:
    web.login(*USER)
    refused = web.client.get(path, headers=hx)
    assert refused.status_code == 403 and rendered(refused).template == "error.html"
    web.logout()
    web.login(*ADMIN)
    r = web.client.get(path, headers=hx)
    template, block = PANELS[path.removeprefix("/admin/") + "-panel"]
    assert r.status_code == 200 and rendered(r)[:2] == (template, block if hx else None)
    assert ("<html" in r.text) is not bool(hx)


@pytest.mark.shares_app
def test_the_users_page_lists_accounts_and_their_grants(web: Web) -> None:
    web.login(*ADMIN)
    r = web.client.get("/admin/users")
    html = r.text
    ann = account_id(web, USER[0])
    context = rendered(r).context
    assert sorted(a.name for a in context["accounts"]) == sorted([ADMIN[0], USER[0]])
    assert context["grants"] == {ann: {HELLO, INTERACTIVE}}, "administrators have no grants to edit"
    assert LEDGER in {p.id for p in context["projects"]}, "every project is offered"
    # what the admin sees: ann's row, her projects ticked
    row = re.search(rf'<tr id="user-{ann}">(.*?)</tr>', html, re.S)
    assert row is not None
    checked = set(re.findall(r'name="projects" value="([^"]+)" checked', row.group(1)))
    assert checked == {HELLO, INTERACTIVE}
    for control in ("new-user-name", "new-user-password", "new-user-admin"):
        assert f'<label for="{control}">' in html


def test_an_admin_creates_a_user_who_can_then_log_in(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    r = web.client.post(
        "/admin/users",
        data={"name": "bea", "password": "bea-password-1"},
        headers=headers,
        follow_redirects=False,
    )
    done(r, hx, "users-panel", "/admin/users")
    if hx:
        assert rendered(r).context["notice"] == "User bea created." and "User bea created." in r.text
    account = account_store.get_account(engine(web), name="bea")
    assert account is not None and not account.is_admin
    [event] = audit(web, "user.created")[-1:]
    assert (event.actor, event.source, event.details) == ("user:root", "ui", {"user": "bea", "admin": False})
    web.logout()
    web.login("bea", "bea-password-1")
    assert web.client.get("/admin/users").status_code == 403


def test_an_admin_can_create_another_admin(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    data = {"name": "cat", "password": "cat-password-1", "is_admin": "true"}
    done(
        web.client.post("/admin/users", data=data, headers=headers, follow_redirects=False),
        hx,
        "users-panel",
        "/admin/users",
    )
    account = account_store.get_account(engine(web), name="cat")
    assert account is not None and account.is_admin


@pytest.mark.shares_app
@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "", "password": "long-enough-1"}, "name", "1–64 letters"),
        ({"name": "bad name!", "password": "long-enough-1"}, "name", "1–64 letters"),
        ({"name": "ann", "password": "long-enough-1"}, "name", "already exists"),
        ({"name": "dan", "password": "short"}, "password", "at least 8"),
        ({"name": "dan", "password": "p" * 1025}, "password", "at most 1024"),
        ({"name": "x" * 65, "password": "long-enough-1"}, "name", "1–64 letters"),
    ],
)
def test_an_invalid_new_user_is_refused_with_inline_errors(
    web: Web, hx: dict[str, str], data: dict[str, str], field: str, message: str
) -> None:
    headers = as_admin(web, hx)
    before = len(account_store.list_accounts(engine(web)))
    r = web.client.post("/admin/users", data=data, headers=headers)
    assert r.status_code == 422
    template, block, context = rendered(r)
    assert (template, block) == ("admin/users.html", "users_panel" if hx else None)
    assert 'id="users-panel"' in r.text and ("<html" in r.text) is not bool(hx)
    assert list(context["errors"]) == [field] and message in context["errors"][field]
    assert context["errors"][field] == field_error(r.text, f"new-user-{field}"), "shown beside its field"
    assert context["values"] == {"name": data["name"], "is_admin": False}, "the form keeps what was typed"
    assert f'value="{data["name"]}"' in r.text
    assert "long-enough-1" not in r.text, "never echo a password"
    assert len(account_store.list_accounts(engine(web))) == before


@pytest.mark.shares_app
def test_every_broken_rule_of_a_new_user_is_shown_at_its_field(web: Web, hx: dict[str, str]) -> None:
    r = web.client.post(
        "/admin/users", data={"name": "bad name!", "password": "short"}, headers=as_admin(web, hx)
    )
    assert r.status_code == 422
    assert "1–64 letters" in field_error(r.text, "new-user-name")
    assert "at least 8" in field_error(r.text, "new-user-password")
    assert audit(web, "user.created")[2:] == [], "only the fixture's two users were created"


def test_an_admin_page_write_wakes_the_live_audit_tail(
    web: Web, hx: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = as_admin(web, hx)
    hub = app_state(web.client.app).services.hub
    woken: list[tuple[str, str, dict[str, Any]]] = []
    monkeypatch.setattr(hub, "publish", lambda topic, kind, **data: woken.append((topic, kind, data)))
    web.client.post("/admin/users", data={"name": "bea"}, headers=headers, follow_redirects=False)
    ann = account_id(web, USER[0])
    web.client.post(f"/admin/users/{ann}/disable", headers=headers, follow_redirects=False)
    web.client.post(f"/admin/projects/{HELLO}/limits", data={"max_running": "2"}, headers=headers)
    recorded = [data["event"] for topic, kind, data in woken if (topic, kind) == ("audit", "recorded")]
    assert recorded == ["user.created", "user.disabled", "project.limits_changed"]


def test_disabling_a_user_ends_their_sessions_and_keys_until_enabled(web: Web, hx: dict[str, str]) -> None:
    raw, _ = create_key(engine(web), user=USER[0], projects=None, scopes=None, name="k")
    web.login(*USER)
    ann_cookie = web.client.cookies[COOKIE_NAME]
    web.logout()
    headers = as_admin(web, hx)
    admin_cookie = web.client.cookies[COOKIE_NAME]
    ann = account_id(web, USER[0])
    r = web.client.post(f"/admin/users/{ann}/disable", headers=headers, follow_redirects=False)
    done(r, hx, "users-panel", "/admin/users")
    authenticator = app_state(web.client.app).authenticator
    with pytest.raises(AuthError, match="disabled"):
        authenticator.authenticate(raw)
    web.client.cookies.clear()
    web.client.cookies[COOKIE_NAME] = ann_cookie
    assert web.client.get("/projects", follow_redirects=False).status_code == 303
    web.client.cookies[COOKIE_NAME] = admin_cookie
    r = web.client.post(f"/admin/users/{ann}/enable", headers=headers, follow_redirects=False)
    done(r, hx, "users-panel", "/admin/users")
    assert authenticator.authenticate(raw).actor == "user:ann"
    web.client.cookies[COOKIE_NAME] = ann_cookie
    assert web.client.get("/projects", follow_redirects=False).status_code == 303, "old sessions stay ended"
    web.logout()
    web.login(*USER)
    events = [
        (e.event, e.source, e.details) for e in audit(web, "user.disabled") + audit(web, "user.enabled")
    ]
    assert events == [("user.disabled", "ui", {"user": "ann"}), ("user.enabled", "ui", {"user": "ann"})]


@pytest.mark.shares_app
def test_an_admin_cannot_disable_their_own_account(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    root = account_id(web, ADMIN[0])
    r = web.client.post(f"/admin/users/{root}/disable", headers=headers)
    assert r.status_code == 422 and "cannot disable your own account" in r.text
    assert rendered(r).context["row_errors"] == {root: "You cannot disable your own account."}
    account = account_store.get_account(engine(web), name=ADMIN[0])
    assert account is not None and not account.disabled


def test_project_permissions_are_set_exactly_and_audited(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    ann = account_id(web, USER[0])
    r = web.client.post(
        f"/admin/users/{ann}/projects",
        data={"projects": [HELLO, LEDGER]},
        headers=headers,
        follow_redirects=False,
    )
    done(r, hx, "users-panel", "/admin/users")
    assert account_store.project_grants(engine(web), account_id=ann) == {HELLO, LEDGER}
    [granted] = audit(web, "permission.granted")[-1:]
    [revoked] = audit(web, "permission.revoked")
    assert (granted.source, granted.actor, granted.details) == (
        "ui",
        "user:root",
        {"user": "ann", "projects": [LEDGER]},
    )
    assert revoked.details == {"user": "ann", "projects": [INTERACTIVE]}
    web.logout()
    web.login(*USER)
    assert "/projects/" + LEDGER in web.client.get("/projects").text


def test_unchecking_every_project_removes_all_permissions(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    ann = account_id(web, USER[0])
    r = web.client.post(f"/admin/users/{ann}/projects", headers=headers, follow_redirects=False)
    done(r, hx, "users-panel", "/admin/users")
    assert account_store.project_grants(engine(web), account_id=ann) == set()


@pytest.mark.shares_app
def test_granting_an_unknown_project_is_refused(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    ann = account_id(web, USER[0])
    r = web.client.post(f"/admin/users/{ann}/projects", data={"projects": ["nope"]}, headers=headers)
    assert r.status_code == 422 and "registered projects" in r.text
    assert rendered(r).context["row_errors"] == {ann: "Choose among the registered projects."}
    assert account_store.project_grants(engine(web), account_id=ann) == {HELLO, INTERACTIVE}


@pytest.mark.shares_app
def test_unknown_users_and_projects_are_not_found(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    assert web.client.post("/admin/users/9999/disable", headers=headers).status_code == 404
    assert web.client.post("/admin/projects/nope/limits", headers=headers).status_code == 404


def test_an_admin_closes_the_run_gate_and_sets_limits(web: Web, hx: dict[str, str]) -> None:
    headers = as_admin(web, hx)
    r = web.client.post(
        f"/admin/projects/{HELLO}/limits",
        data={"max_running": "2", "max_queued": "0"},  # the gate checkbox unchecked: closed
        headers=headers,
        follow_redirects=False,
    )
    done(r, hx, "projects-panel", "/admin/projects")
    record = project_store.get_project(engine(web), project_id=HELLO)
    assert record is not None
    assert (record.run_gate_open, record.max_running, record.max_queued) == (False, 2, 0)
    [event] = audit(web, "project.limits_changed")
    assert (event.source, event.actor, event.project_id) == ("ui", "user:root", HELLO)
    assert event.details == {"run_gate_open": False, "max_running": 2, "max_queued": 0}
    listed = web.client.get("/admin/projects")
    [hello] = [p for p in rendered(listed).context["projects"] if p.id == HELLO]
    assert (hello.run_gate_open, hello.max_running, hello.max_queued) == (False, 2, 0)
    assert "gate closed" in listed.text
    r = web.client.post(
        f"/admin/projects/{HELLO}/limits",
        data={"run_gate_open": "true", "max_running": "", "max_queued": ""},
        headers=headers,
        follow_redirects=False,
    )
    done(r, hx, "projects-panel", "/admin/projects")
    record = project_store.get_project(engine(web), project_id=HELLO)
    assert record is not None
    assert (record.run_gate_open, record.max_running, record.max_queued) == (True, None, None)


@pytest.mark.shares_app
@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_running": "0"}, "running"),
        ({"max_running": "two"}, "running"),
        ({"max_queued": "-1"}, "queued"),
        ({"max_queued": "1.5"}, "queued"),
    ],
)
def test_invalid_limits_are_refused_with_inline_errors(
    web: Web, hx: dict[str, str], data: dict[str, str], field: str
) -> None:
    headers = as_admin(web, hx)
    r = web.client.post(
        f"/admin/projects/{HELLO}/limits", data={"run_gate_open": "true", **data}, headers=headers
    )
    assert r.status_code == 422 and ("<html" in r.text) is not bool(hx)
    context = rendered(r).context
    assert list(context["errors"]) == [HELLO] and list(context["errors"][HELLO]) == [f"max_{field}"]
    message = context["errors"][HELLO][f"max_{field}"]
    assert "whole number" in message
    assert context["values"][HELLO] == {"run_gate_open": True, "max_running": "", "max_queued": "", **data}
    errors = re.findall(rf'<small id="{field}-\d+-error" class="error">([^<]*)</small>', r.text)
    assert errors == [message], "shown once, beside its field"
    record = project_store.get_project(engine(web), project_id=HELLO)
    assert record is not None and (record.max_running, record.max_queued) == (None, None)
    assert audit(web, "project.limits_changed") == []

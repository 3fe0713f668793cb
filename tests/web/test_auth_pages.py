"""Login, logout, session timeouts and rotation, CSRF on login, and security headers."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, select

from tests.web.conftest import ADMIN, CSRF_RE, USER, Web, rendered
from webui.auth.ui import COOKIE_NAME, UiAuth
from webui.store.db import make_engine
from webui.store.models import UiSession


@pytest.mark.shares_app
def test_login_sets_a_hardened_cookie_and_redirects_to_next(web: Web) -> None:
    page = web.client.get("/login?next=/runs")
    template, _, context = rendered(page)
    assert template == "auth/login.html" and context["next"] == "/runs" and context["error"] is None
    token = CSRF_RE.search(page.text)
    assert token and token.group(1) == context["login_csrf"]
    assert 'for="username"' in page.text and 'for="password"' in page.text
    assert 'name="next" value="/runs"' in page.text
    r = web.client.post(
        "/login",
        data={"username": USER[0], "password": USER[1], "csrf_token": token.group(1), "next": "/runs"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/runs"
    cookie = next(v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith(COOKIE_NAME))
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie


@pytest.mark.shares_app
@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/\\evil"])
def test_next_never_redirects_off_site(web: Web, target: str) -> None:
    assert rendered(web.client.get("/login", params={"next": target})).context["next"] == "/projects"
    page = web.client.get("/login")
    token = CSRF_RE.search(page.text)
    assert token
    r = web.client.post(
        "/login",
        data={"username": USER[0], "password": USER[1], "csrf_token": token.group(1), "next": target},
        follow_redirects=False,
    )
    assert r.headers["location"] == "/projects"


def test_a_wrong_password_and_a_missing_login_token_are_refused(web: Web) -> None:
    page = web.client.get("/login")
    token = CSRF_RE.search(page.text)
    assert token
    bad = web.client.post(
        "/login", data={"username": USER[0], "password": "nope", "csrf_token": token.group(1)}
    )
    assert bad.status_code == 401 and "Invalid username or password" in bad.text
    assert rendered(bad).context["error"] == "Invalid username or password."
    first = token.group(1)
    token = CSRF_RE.search(bad.text)  # every login page issues a fresh token
    assert token and token.group(1) == rendered(bad).context["login_csrf"] != first
    unknown = web.client.post(
        "/login", data={"username": "ghost", "password": "x", "csrf_token": token.group(1)}
    )
    assert unknown.status_code == 401 and "Invalid username or password" in unknown.text
    assert rendered(unknown).context["error"] == rendered(bad).context["error"], "no hint which was wrong"
    forged = web.client.post(
        "/login", data={"username": USER[0], "password": USER[1], "csrf_token": "forged"}
    )
    assert forged.status_code == 403
    assert COOKIE_NAME not in web.client.cookies


@pytest.mark.shares_app
def test_each_login_rotates_the_session_and_logout_ends_it(web: Web) -> None:
    web.login(*USER)
    first = web.client.cookies[COOKIE_NAME]
    web.logout()  # forget the cookie in this client only: the session itself stays valid
    web.login(*USER)
    second = web.client.cookies[COOKIE_NAME]
    assert first != second
    csrf = web.csrf()
    stolen = second
    r = web.client.post("/logout", data={"csrf_token": csrf}, follow_redirects=False)
    assert r.status_code == 303
    web.client.cookies.set(COOKIE_NAME, stolen)
    assert web.client.get("/projects", follow_redirects=False).status_code == 303  # the copied cookie is dead


@pytest.mark.shares_app
def test_pages_carry_security_headers(web: Web) -> None:
    web.login(*ADMIN)
    for path in ("/login", "/projects", "/inbox", "/api/runs/nope"):
        r = web.client.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "same-origin"


@pytest.mark.shares_app
def test_pages_have_no_inline_scripts_or_styles(web: Web) -> None:
    web.login(*ADMIN)
    for path in ("/projects", "/inbox", "/runs", "/keys", "/admin/users", "/admin/audit"):
        html = web.client.get(path).text
        assert "<script>" not in html and " onclick=" not in html and "style=" not in html, path


def test_idle_and_absolute_timeouts_end_a_browser_session(tmp_path: Path) -> None:
    from webui.admin import create_user

    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    create_user(engine, name="z", admin=False, password="password-z")
    auth = UiAuth(engine, secret=b"s" * 32, idle=60, absolute=3600)
    login = auth.login("z", "password-z")
    assert login is not None
    cookie, _ = login
    assert auth.resolve(cookie) is not None
    with Session(engine) as s:
        row = s.exec(select(UiSession)).one()
        row.last_seen_at = row.last_seen_at - timedelta(seconds=61)
        s.add(row)
        s.commit()
    assert auth.resolve(cookie) is None  # idle
    second = auth.login("z", "password-z")
    assert second is not None
    with Session(engine) as s:
        row = s.exec(select(UiSession).where(UiSession.ended_at == None)).one()  # noqa: E711
        row.created_at = row.created_at - timedelta(seconds=3601)
        s.add(row)
        s.commit()
    assert auth.resolve(second[0]) is None  # absolute
    assert auth.resolve("tampered" + second[0]) is None
    assert auth.login("z", "wrong") is None
    engine.dispose()

"""Authentication, authorisation and CSRF for every page route, generated from the app's
routes, so a new page cannot ship without them: anonymous GETs go to /login (htmx: 401
with HX-Redirect), anonymous writes are refused, /admin/* is 403 for a plain user, and
every POST without the session's CSRF token is 403."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.routing import APIRoute, iter_route_contexts

from tests.web.conftest import ADMIN, USER, Web
from webui.app import create_app
from webui.settings import Settings

# Pages that are public on purpose, each with the reason.
PUBLIC = {
    "/login": "the login form itself",
    "/docs": "the API reference: Swagger UI over /openapi.json, which is as public as ever",
    "/redoc": "a redirect to /docs",
    "/": "a redirect to /projects, which is checked like every other page",
    "/conversations": "the inbox's old URL: a redirect to /inbox, which is checked like every other page",
    "/conversations/events": "a redirect to /inbox/events, which is checked like every other page",
    "/healthz": (
        "a load balancer's health check: says only that the server and database answer, and which"
        " replica answered (a random id)"
    ),
    "/metrics": (
        "Prometheus scrapes it with its own bearer token, never a login; without the token it is"
        " 401 (404 when none is configured): tests/security/test_metrics_attacks.py"
    ),
}
# One app for the whole matrix: these tests only read (every write is refused).
pytestmark = pytest.mark.shares_app
PARAM = re.compile(r"\{([^}:]+)(?::[^}]+)?\}")


def page_routes(method: str) -> list[str]:
    """Every page route (not /api, not /static, not public) answering `method`."""
    app = create_app(Settings(data_dir=Path("/nonexistent/route-listing")))  # never started
    paths = {
        ctx.path
        for ctx in iter_route_contexts(app.routes)
        if isinstance(ctx.original_route, APIRoute)
        and method in (ctx.methods or ())
        and ctx.path
        and not ctx.path.startswith(("/api/", "/static/"))
        and ctx.path not in PUBLIC
    }
    return sorted(paths)


def concrete(path: str) -> str:
    """Fill path parameters: authentication must answer before any lookup does."""
    return PARAM.sub("1", path)


GET_PAGES = page_routes("GET")
POST_PAGES = page_routes("POST")
ADMIN_ROUTES = [("GET", p) for p in GET_PAGES if p.startswith("/admin")] + [
    ("POST", p) for p in POST_PAGES if p.startswith("/admin")
]


def test_the_route_listing_sees_the_page_families() -> None:
    for expected in ("/projects", "/runs", "/runs/{run_id}", "/keys", "/admin/users", "/admin/projects"):
        assert expected in GET_PAGES
    for expected in ("/logout", "/keys", "/admin/users"):
        assert expected in POST_PAGES


@pytest.mark.parametrize("path", GET_PAGES)
def test_an_anonymous_page_load_is_sent_to_login(web: Web, path: str) -> None:
    url = concrete(path)
    r = web.client.get(url, follow_redirects=False)
    assert r.status_code == 303, r.text
    location = urlsplit(r.headers["location"])
    assert location.path == "/login"
    assert parse_qs(location.query)["next"] == [url]


@pytest.mark.parametrize("path", GET_PAGES)
def test_an_anonymous_htmx_request_gets_401_with_hx_redirect(web: Web, path: str) -> None:
    r = web.client.get(concrete(path), headers={"HX-Request": "true"}, follow_redirects=False)
    assert r.status_code == 401
    assert urlsplit(r.headers["hx-redirect"]).path == "/login"


@pytest.mark.parametrize("path", POST_PAGES)
def test_an_anonymous_write_is_refused(web: Web, path: str) -> None:
    r = web.client.post(concrete(path), data={"csrf_token": "guess"}, follow_redirects=False)
    assert r.status_code == 401


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_admin_routes_are_forbidden_to_a_plain_user(web: Web, method: str, path: str) -> None:
    token = web.login(*USER)
    for headers in ({}, {"HX-Request": "true"}):
        r = web.client.request(
            method, concrete(path), headers={**headers, "X-CSRF-Token": token}, follow_redirects=False
        )
        assert r.status_code == 403, r.text
        assert "administrators" in r.text


@pytest.mark.parametrize("path", POST_PAGES)
def test_a_write_without_the_csrf_token_is_forbidden(web: Web, path: str) -> None:
    web.login(*ADMIN)  # an administrator: the only reason left to refuse is the token
    for headers in ({}, {"HX-Request": "true"}, {"X-CSRF-Token": "forged"}):
        r = web.client.post(concrete(path), data={"name": "x"}, headers=headers, follow_redirects=False)
        assert r.status_code == 403, (headers, r.text)
        assert "reload the page" in r.text

"""Every route declares who may call it (`webui.web.policies`), through its own dependencies:
no route ships without a policy, and none is decided by its path in the guard.

What each policy does is checked elsewhere, by behaviour: pages in tests/web/test_route_auth.py,
API keys and their throttle in tests/security/test_key_throttle.py and test_http_edges.py, the
401 challenge in test_auth_challenge.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts

from tests.web.conftest import ADMIN, Web
from tests.web.test_route_auth import PUBLIC as PUBLIC_PAGES
from tests.web.test_route_auth import concrete
from webui.app import create_app
from webui.settings import Settings
from webui.web.policies import PUBLIC, Policy, api_key, api_key_if_sent, policy_of

KEY_POLICIES = (Policy.API_KEY, Policy.API_KEY_OR_SESSION)
# One app for the behaviour matrix: every request in it is refused.
pytestmark = pytest.mark.shares_app
# The JSON API routes a browser session may call too (its file picker, a run page's links,
# the configuration and knowledge pages' scripts); every other /api route takes a key only.
SESSION_API = (
    "/api/workflows/{project_id}/files",
    "/api/runs/{run_id}/files/{file_id}",
    "/api/workflows/{project_id}/configs",
    "/api/workflows/{project_id}/knowledge",
)


def routes() -> list[RouteContext]:
    app = create_app(Settings(data_dir=Path("/nonexistent/route-policies")))  # never started
    return list(iter_route_contexts(app.routes))


ROUTES = routes()


def label(ctx: RouteContext) -> str:
    return f"{sorted(ctx.methods or ['*'])} {ctx.path}"


def test_every_route_declares_who_may_call_it() -> None:
    undeclared = [label(ctx) for ctx in ROUTES if policy_of(ctx) is None]
    assert not undeclared, f"routes without an authentication policy (webui.web.policies): {undeclared}"
    assert len(ROUTES) > 90  # the listing sees the included routers, not only the app's own routes


def test_a_route_without_a_policy_is_found() -> None:
    app = FastAPI()

    @app.get("/forgotten")
    def forgotten() -> None: ...

    @app.get("/open", dependencies=[PUBLIC])
    def open_() -> None: ...

    found = {ctx.path: policy_of(ctx) for ctx in iter_route_contexts(app.routes)}
    assert found["/forgotten"] is None
    assert found["/open"] is Policy.PUBLIC


@pytest.mark.parametrize("ctx", ROUTES, ids=label)
def test_each_route_has_the_policy_its_surface_needs(ctx: RouteContext) -> None:
    path, policy = ctx.path or "", policy_of(ctx)
    if path == "/api/workflows/{project_id}/mcp":
        assert policy is Policy.MCP_GATEWAY
    elif path.startswith(SESSION_API):
        assert policy is Policy.API_KEY_OR_SESSION
    elif path.startswith("/api/"):
        assert policy is Policy.API_KEY
    elif path.startswith("/admin"):
        assert policy is Policy.ADMIN
    elif path in PUBLIC_PAGES or path.startswith(("/static", "/help", "/.well-known/", "/openapi.json")):
        assert policy in (Policy.PUBLIC, Policy.OWN_TOKEN)
    elif path.split("/")[1] in ("register", "authorize", "token"):  # the OAuth paths: a 404 for all
        assert policy is Policy.PUBLIC
    else:
        assert policy in (Policy.SESSION, Policy.ADMIN), "a page is for people who logged in"


def _api_routes() -> list[Any]:
    return [
        ctx for ctx in ROUTES if isinstance(ctx.original_route, APIRoute) and policy_of(ctx) in KEY_POLICIES
    ]


@pytest.mark.parametrize("ctx", _api_routes(), ids=label)
def test_an_api_key_is_checked_before_any_of_the_body_is_read(ctx: RouteContext) -> None:
    """The key's dependency is the route's first, so it runs before the endpoint's own
    parameters and dependencies (a body reader among them); and no parameter is a body that
    FastAPI would read before running any dependency."""
    route = ctx.original_route
    assert isinstance(route, APIRoute)
    assert route.body_field is None, "read the body through a dependency, after the key's"
    first = ctx.dependant.dependencies[0].call
    assert first in (api_key, api_key_if_sent)


def _refused_for_the_key(r: Any) -> None:
    """401 with the API key challenge, or 429 once the shared app's address has failed too
    often: refused either way, by the key's check, before the route ran."""
    assert r.status_code in (401, 429), (r.status_code, r.text)
    if r.status_code == 401:
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer ")
    else:
        assert r.json()["error"]["code"] == "throttled" and r.headers["retry-after"]


@pytest.mark.parametrize("ctx", [c for c in _api_routes() if policy_of(c) is Policy.API_KEY], ids=label)
def test_a_key_only_route_refuses_a_browser_session(web: Web, ctx: RouteContext) -> None:
    token = web.login(*ADMIN)  # an administrator's session: only the missing key can refuse
    for method in sorted(ctx.methods or ()):
        r = web.client.request(method, concrete(ctx.path or ""), headers={"X-CSRF-Token": token})
        _refused_for_the_key(r)


@pytest.mark.parametrize(
    "ctx", [c for c in _api_routes() if policy_of(c) is Policy.API_KEY_OR_SESSION], ids=label
)
def test_a_bad_key_is_refused_even_beside_a_valid_session(web: Web, ctx: RouteContext) -> None:
    token = web.login(*ADMIN)
    headers = {"X-CSRF-Token": token, "Authorization": "Bearer shk_000000000000_not-a-key"}
    for method in sorted(ctx.methods or ()):
        _refused_for_the_key(web.client.request(method, concrete(ctx.path or ""), headers=headers))

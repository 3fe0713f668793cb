"""Who may call each route: declared by the route's own dependencies, never by its path.

Every route declares one (tests/web/test_auth_policies.py fails on a route without one;
with several, the strictest decides):

- `API_KEY` (`api_key`): `Authorization: Bearer <API key>` (or the admin key). Checked
  before any of the body is read: route dependencies run before the endpoint's parameters,
  and no route has a body parameter that FastAPI would read first (the same test). A bad
  key counts against the client's address (`webui.auth.throttle`): past the limit it is
  refused with 429 + Retry-After instead of 401; a valid key from there still works. The
  principal is handed to the route (`webui.web.deps.PrincipalDep`).
- `API_KEY_OR_SESSION` (`api_key_if_sent`): a Bearer key when the request sends an
  Authorization header, checked as above; else the browser session, which the route
  resolves itself (with its CSRF token for writes) before it reads any body (the
  configurations and knowledge APIs, file uploads from the browser's picker, the download
  of a file a run created).
- `SESSION` / `ADMIN` (`webui.web.deps.require_user` / `require_admin`): a logged-in person
  (an administrator), a CSRF token for writes; anonymous pages go to /login.
- `MCP_GATEWAY`: the MCP endpoint authenticates every request itself (`webui.mcp.http`);
  the guard counts its 401s for the throttle.
- `OWN_TOKEN`: the route checks a credential of its own (`/metrics`: the metrics token).
- `PUBLIC`: anyone (the login form, redirects, the API reference, `/healthz`, static files).

A request under /api that matches no route (an unknown path, another method, a trailing
slash the router would redirect) must carry a valid API key as `API_KEY` says
(`UnmatchedApi`, before the router answers 404, 405 or the redirect): strangers cannot map
the API, and each such refusal counts toward the throttle.

A route whose own dependency checks the session before its body (the knowledge page's
upload) declares it with `declared(Policy.ADMIN)`; a route that is no FastAPI route (the
MCP endpoint, mounts) with `declare`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from webui.audit.events import AuditName
from webui.auth.challenge import bearer_challenge
from webui.auth.keys import AuthError, Principal
from webui.blocking import run_db
from webui.edge.errors import ErrorRenderer, Refusal
from webui.edge.refusals import client_address, key_throttled
from webui.mcp.binding import base_url
from webui.web.deps import require_admin, require_user
from webui.web.state import app_state


class Policy(enum.StrEnum):
    API_KEY = "api key"
    API_KEY_OR_SESSION = "api key or session"
    SESSION = "session"
    ADMIN = "admin session"
    MCP_GATEWAY = "api key, checked by the MCP gateway"
    OWN_TOKEN = "a token the route checks"
    PUBLIC = "public"


async def api_key(request: Request) -> Principal:
    """The request's Bearer key, authenticated once per request (see the module's doc)."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        return principal
    state = app_state(request.app)
    try:
        principal = await run_db(state.authenticator.from_header, request.headers.getlist("authorization"))
    except AuthError as exc:
        throttle, refusals = state.auth_throttle, state.refusals
        wait = throttle.bearer_failed(client_address(request.scope))
        if wait is not None:
            raise await key_throttled(refusals, throttle, request.scope, wait) from None
        await refusals.record(request.scope, AuditName.AUTH_FAILED, outcome="401", reason=exc.message)
        challenge = bearer_challenge(exc.message, state.settings.public_url or base_url(request.scope))
        raise Refusal(401, exc.code, exc.message, {"WWW-Authenticate": challenge}) from None
    request.state.principal = principal
    return principal


async def api_key_if_sent(request: Request) -> None:
    """`api_key` when the request sends an Authorization header; else nothing: the route
    resolves the browser session itself."""
    if "authorization" in request.headers:
        await api_key(request)


class UnmatchedApi:
    """ASGI middleware inside the guard: a request under /api that no route matches fully is
    answered by the router (404, 405, a redirect) only when it carries a valid API key; else
    it is refused as `api_key` refuses (401 with the challenge, 429 past the throttle)."""

    def __init__(self, app: ASGIApp, *, routes: list[BaseRoute], errors: ErrorRenderer) -> None:
        self.app = app
        self.routes = routes
        self.errors = errors

    def _matched(self, scope: Scope) -> bool:
        return any(route.matches(scope)[0] is Match.FULL for route in self.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/") and not self._matched(scope):
            request = Request(scope)
            try:
                await api_key(request)
            except Refusal as exc:
                await self.errors.refusal(request, exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def public() -> None:
    """Anyone may call the route."""


_MARKERS: dict[Policy, Callable[[], None]] = {}


def declared(policy: Policy) -> Any:
    """A dependency that only declares `policy`, for a route whose own code (or its own
    dependency) enforces it."""
    if policy not in _MARKERS:

        def marker() -> None:
            pass

        marker.__name__ = f"declares_{policy.name.lower()}"
        _MARKERS[policy] = marker
    return Depends(_MARKERS[policy])


API_KEY = Depends(api_key)
API_KEY_OR_SESSION = Depends(api_key_if_sent)
PUBLIC = Depends(public)
ENFORCING: dict[Callable[..., Any], Policy] = {
    api_key: Policy.API_KEY,
    api_key_if_sent: Policy.API_KEY_OR_SESSION,
    require_admin: Policy.ADMIN,
    require_user: Policy.SESSION,
    public: Policy.PUBLIC,
}
# When a route has several, the one that decides (the strictest).
ORDER = [
    Policy.API_KEY,
    Policy.ADMIN,
    Policy.SESSION,
    Policy.API_KEY_OR_SESSION,
    Policy.MCP_GATEWAY,
    Policy.OWN_TOKEN,
    Policy.PUBLIC,
]
_DECLARED = "steamharness_policy"
R = TypeVar("R", bound=BaseRoute)


def declare(route: R, policy: Policy) -> R:
    """`route` (not a FastAPI route: no dependencies) declared as `policy`."""
    setattr(route, _DECLARED, policy)
    return route


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def policy_of(route: Any) -> Policy | None:
    """The policy a route declares (a FastAPI route through its dependencies, others through
    `declare`), or None."""
    dependant = getattr(route, "dependant", None)
    found: set[Policy] = set()
    if isinstance(dependant, Dependant):
        for call in _calls(dependant):
            policy = ENFORCING.get(call)
            if policy is None:
                policy = next((p for p, m in _MARKERS.items() if m is call), None)
            if policy is not None:
                found.add(policy)
    own = getattr(route, _DECLARED, None)
    if isinstance(own, Policy):
        found.add(own)
    return next((p for p in ORDER if p in found), None)

"""Login and logout."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from webui.audit.events import AuditName
from webui.auth.ui import COOKIE_NAME
from webui.blocking import run_db, run_hash
from webui.web.deps import AuthThrottleDep, RefusalsDep, ServicesDep, UiAuthDep, UserDep, get_ui_user
from webui.web.policies import PUBLIC
from webui.web.security import check_csrf
from webui.web.templating import page

router = APIRouter(tags=["pages"])
LOGIN_CSRF_COOKIE = "steamharness_login_csrf"


def safe_next(value: str | None) -> str:
    """Only local paths: never an open redirect."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/projects"


def _login_page(request: Request, *, error: str | None, next_url: str, status: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    response = page(
        request,
        "auth/login.html",
        {"error": error, "next": next_url, "login_csrf": token},
        status_code=status,
    )
    response.set_cookie(
        LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )
    return response


@router.get("/login", summary="Login page", dependencies=[PUBLIC])
def login_form(request: Request, next: str | None = None) -> Response:
    if get_ui_user(request) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return _login_page(request, error=None, next_url=safe_next(next))


@router.post("/login", summary="Log in", dependencies=[PUBLIC])
async def login(
    request: Request,
    services: ServicesDep,
    throttle: AuthThrottleDep,
    refusals: RefusalsDep,
    ui_auth: UiAuthDep,
    username: Annotated[str, Form(max_length=64)],
    password: Annotated[str, Form(max_length=1024)],
    csrf_token: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/projects",
) -> Response:
    check_csrf(request.cookies.get(LOGIN_CSRF_COOKIE, ""), csrf_token)
    client = request.client.host if request.client else None
    address = client or "unknown"
    wait = throttle.login_retry_after(username, address)
    if wait is not None:  # refused before the password is even hashed
        await refusals.record(
            request.scope,
            AuditName.AUTH_THROTTLED,
            outcome="429",
            actor=f"user:{username}",
            credential="password",
        )
        await throttle.hold(wait)
        response = _login_page(
            request,
            error=f"Too many failed logins. Try again in {wait} seconds.",
            next_url=safe_next(next),
            status=429,
        )
        response.headers["Retry-After"] = str(wait)
        return response
    result = await run_hash(ui_auth.login, username, password)
    if result is None:
        throttle.login_failed(username, address)
    else:
        throttle.login_succeeded(username)

    await run_db(
        services.audit.record_alone,
        services.engine,
        AuditName.UI_LOGIN,
        actor=f"user:{username}",
        outcome="ok" if result else "failed",
        source="ui",
        client_address=client,
        user_agent=request.headers.get("user-agent"),
    )
    if result is None:
        return _login_page(
            request, error="Invalid username or password.", next_url=safe_next(next), status=401
        )
    cookie, _account = result
    response = RedirectResponse(safe_next(next), status_code=303)
    response.set_cookie(
        COOKIE_NAME, cookie, httponly=True, samesite="lax", secure=request.url.scheme == "https", path="/"
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE)
    return response


@router.post("/logout", summary="Log out")
def logout(request: Request, user: UserDep, services: ServicesDep, ui_auth: UiAuthDep) -> Response:
    ui_auth.logout(user.session_id)
    services.audit.record_alone(
        services.engine, AuditName.UI_LOGOUT, actor=user.actor, outcome="ok", source="ui"
    )
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE_NAME, path="/")
    return response

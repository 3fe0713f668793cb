"""Annotated dependency aliases for routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from webui.auth.keys import Forbidden, Principal
from webui.auth.ui import COOKIE_NAME, UiUser
from webui.blocking import run_db
from webui.projects.registry import ProjectRegistry
from webui.services import Services
from webui.web.security import check_csrf

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class LoginRequired(Exception):
    """No (valid) browser session: pages redirect to /login."""


def get_services(request: Request) -> Services:
    return request.app.state.services


def get_registry(request: Request) -> ProjectRegistry:
    return request.app.state.registry


def get_principal(request: Request) -> Principal:
    """Bearer API key or admin key, checked on every request. The route's key policy
    (`webui.web.policies.api_key`) has already authenticated it, before any body was read;
    its principal is reused."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        return principal
    return request.app.state.authenticator.from_header(request.headers.getlist("authorization"))


def get_ui_user(request: Request) -> UiUser | None:
    if not hasattr(request.state, "user"):
        request.state.user = request.app.state.ui_auth.resolve(request.cookies.get(COOKIE_NAME))
    return request.state.user


async def require_user(request: Request) -> UiUser:
    """A logged-in person; for writes, also a matching CSRF token (header or form field)."""
    user = await run_db(get_ui_user, request)
    if user is None:
        raise LoginRequired()
    if request.method in UNSAFE_METHODS:
        submitted = request.headers.get("x-csrf-token")
        form = None
        if submitted is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")
        ):
            form = await request.form()
            value = form.get("csrf_token")
            submitted = value if isinstance(value, str) else None
        try:
            check_csrf(user.csrf_token, submitted)
        except BaseException:
            if form is not None:
                await form.close()  # a refused upload's spooled files, closed now
            raise
    return user


async def require_admin(user: Annotated[UiUser, Depends(require_user)]) -> UiUser:
    if not user.is_admin:
        raise Forbidden("this page is for administrators")
    return user


ServicesDep = Annotated[Services, Depends(get_services)]
RegistryDep = Annotated[ProjectRegistry, Depends(get_registry)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
UserDep = Annotated[UiUser, Depends(require_user)]
AdminDep = Annotated[UiUser, Depends(require_admin)]

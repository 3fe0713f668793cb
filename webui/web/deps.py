"""Annotated dependency aliases for routers.

Handlers reach what the app holds only through these: one dependency per service, each
read from the app's typed state (`webui.web.state.app_state`), never `request.app.state`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from jinja2_fragments.fastapi import Jinja2Blocks

from webui.auth.keys import Authenticator, Forbidden, Principal
from webui.auth.throttle import AuthThrottle
from webui.auth.ui import COOKIE_NAME, UiAuth, UiUser
from webui.blocking import run_db
from webui.configs.service import ConfigService
from webui.edge.refusals import RefusalAudit
from webui.host.service import HostService
from webui.knowledge.service import KnowledgeService
from webui.mcp.http import McpGateway
from webui.projects.registry import ProjectRegistry
from webui.services import Services
from webui.settings import Settings
from webui.tryit.service import TryIt
from webui.web.host_calls import HostCalls
from webui.web.security import check_csrf
from webui.web.state import AppState, app_state

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class LoginRequired(Exception):
    """No (valid) browser session: pages redirect to /login."""


def get_state(request: Request) -> AppState:
    return app_state(request.app)


def get_services(request: Request) -> Services:
    return app_state(request.app).services


def get_registry(request: Request) -> ProjectRegistry:
    return app_state(request.app).registry


def get_settings(request: Request) -> Settings:
    return app_state(request.app).settings


def get_configs(request: Request) -> ConfigService:
    return app_state(request.app).services.configs


def get_knowledge(request: Request) -> KnowledgeService:
    return app_state(request.app).services.knowledge


def get_templates(request: Request) -> Jinja2Blocks:
    return app_state(request.app).templates


def get_ui_auth(request: Request) -> UiAuth:
    return app_state(request.app).ui_auth


def get_authenticator(request: Request) -> Authenticator:
    return app_state(request.app).authenticator


def get_auth_throttle(request: Request) -> AuthThrottle:
    return app_state(request.app).auth_throttle


def get_refusals(request: Request) -> RefusalAudit:
    return app_state(request.app).refusals


def get_gateway(request: Request) -> McpGateway:
    return app_state(request.app).gateway


def get_host(request: Request) -> HostService:
    return app_state(request.app).host


def get_host_calls(request: Request) -> HostCalls:
    return app_state(request.app).host_calls


def get_try_it(request: Request) -> TryIt:
    return app_state(request.app).try_it


def get_principal(request: Request) -> Principal:
    """Bearer API key or admin key, checked on every request. The route's key policy
    (`webui.web.policies.api_key`) has already authenticated it, before any body was read;
    its principal is reused."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        return principal
    return get_authenticator(request).from_header(request.headers.getlist("authorization"))


def get_ui_user(request: Request) -> UiUser | None:
    if not hasattr(request.state, "user"):
        request.state.user = get_ui_auth(request).resolve(request.cookies.get(COOKIE_NAME))
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


StateDep = Annotated[AppState, Depends(get_state)]
ServicesDep = Annotated[Services, Depends(get_services)]
RegistryDep = Annotated[ProjectRegistry, Depends(get_registry)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ConfigsDep = Annotated[ConfigService, Depends(get_configs)]
KnowledgeDep = Annotated[KnowledgeService, Depends(get_knowledge)]
TemplatesDep = Annotated[Jinja2Blocks, Depends(get_templates)]
UiAuthDep = Annotated[UiAuth, Depends(get_ui_auth)]
AuthenticatorDep = Annotated[Authenticator, Depends(get_authenticator)]
AuthThrottleDep = Annotated[AuthThrottle, Depends(get_auth_throttle)]
RefusalsDep = Annotated[RefusalAudit, Depends(get_refusals)]
GatewayDep = Annotated[McpGateway, Depends(get_gateway)]
HostDep = Annotated[HostService, Depends(get_host)]
HostCallsDep = Annotated[HostCalls, Depends(get_host_calls)]
TryItDep = Annotated[TryIt, Depends(get_try_it)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
UserDep = Annotated[UiUser, Depends(require_user)]
AdminDep = Annotated[UiUser, Depends(require_admin)]

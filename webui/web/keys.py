"""API keys: each person lists, creates and revokes their own.

The raw key exists only in the response to the POST that created it (marked no-store);
the list shows key ids and metadata, never secrets. Someone else's key is 404. Revoking a
key ends its MCP sessions (and so their runs and pending questions) before answering."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from webui import admin
from webui.auth.keys import SCOPES
from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.errors import NotFound, SteamharnessError, TooManyKeys
from webui.mcp.sessions import end_key_sessions
from webui.services import Services
from webui.store import accounts as account_store
from webui.store import projects as project_store
from webui.store.models import ApiKey
from webui.web.deps import RegistryDep, ServicesDep, SettingsDep, UserDep
from webui.web.templating import is_htmx, page

router = APIRouter(tags=["pages"])

NAME_MAX = 100
SCOPE_HELP = {
    "runs.create": "Call tools (start runs) and answer their questions.",
    "runs.read": "Read runs and their results.",
    "configs": "Manage your project configurations (the configurations API).",
    "knowledge": "Change the knowledge base of the key's projects (the knowledge API).",
}


def get_own_key_or_404(key_id: str, user: UserDep, services: ServicesDep) -> ApiKey:
    key = account_store.get_key(services.engine, key_id=key_id)
    if key is None or key.account_id != user.account_id:
        raise NotFound(f"API key {key_id!r} not found")
    return key


OwnKeyDep = Annotated[ApiKey, Depends(get_own_key_or_404)]


def _panel(
    request: Request,
    user: UiUser,
    services: Services,
    *,
    values: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    created: tuple[str, ApiKey] | None = None,
    refusal: SteamharnessError | None = None,
    status_code: int = 200,
) -> Response:
    projects = [p for p in project_store.list_projects(services.engine) if user.may_use(p.id)]
    keys = [k for k, _ in account_store.list_keys(services.engine, account_id=user.account_id)]
    keys.sort(key=lambda k: k.created_at, reverse=True)
    response = page(
        request,
        "keys/list.html",
        {
            "keys": keys,
            "projects": projects,
            "project_names": {p.id: p.name for p in projects},
            "scopes": [(s, SCOPE_HELP.get(s, "")) for s in SCOPES],
            "values": values or {"name": "", "scopes": ["runs.create"], "projects": []},
            "errors": errors or {},
            "created": created,
            "refusal": refusal,
        },
        block="keys_panel",
        status_code=status_code,
    )
    if created is not None:
        response.headers["Cache-Control"] = "no-store"  # the raw key must not outlive this page
    return response


@router.get("/keys", summary="Your API keys")
def keys_page(request: Request, user: UserDep, services: ServicesDep) -> Response:
    return _panel(request, user, services)


@router.post("/keys", summary="Create an API key (the raw key is shown once)")
def create_key(
    request: Request,
    user: UserDep,
    services: ServicesDep,
    registry: RegistryDep,
    settings: SettingsDep,
    name: Annotated[str, Form()] = "",
    scopes: Annotated[list[str] | None, Form()] = None,
    projects: Annotated[list[str] | None, Form()] = None,
) -> Response:
    name = name.strip()
    chosen_scopes = sorted(set(scopes or []))
    chosen_projects = sorted(set(projects or []))
    errors: dict[str, str] = {}
    if not name:
        errors["name"] = "Give the key a name, so you can tell your keys apart."
    elif len(name) > NAME_MAX:
        errors["name"] = f"Use at most {NAME_MAX} characters."
    if not chosen_scopes:
        errors["scopes"] = "Choose at least one scope."
    elif set(chosen_scopes) - set(SCOPES):
        errors["scopes"] = "Choose among the scopes listed."
    known = {p.id: p.name for p in project_store.list_projects(services.engine)}
    if any(p not in known for p in chosen_projects):
        errors["projects"] = "Choose only projects you may use."
    elif ungranted := [known[p] for p in chosen_projects if not user.may_use(p)]:
        errors["projects"] = (
            f"You have no run permission on {', '.join(ungranted)}: ask an administrator to grant it "
            f"(Users page, or steamharness users grant {user.name} --project ID)."
        )
    if errors:
        values = {"name": name, "scopes": chosen_scopes, "projects": chosen_projects}
        return _panel(request, user, services, values=values, errors=errors, status_code=422)
    try:
        raw, key = admin.create_key(
            services.engine,
            user=user.name,
            projects=chosen_projects or None,
            scopes=chosen_scopes,
            name=name,
            registry=registry,
            actor=user.actor,
            source="ui",
            audit=services.audit,
            max_keys=settings.max_keys_per_account,
        )
    except TooManyKeys as exc:
        values = {"name": name, "scopes": chosen_scopes, "projects": chosen_projects}
        return _panel(request, user, services, values=values, refusal=exc, status_code=exc.status)
    return _panel(request, user, services, created=(raw, key), status_code=201)


@router.post("/keys/{key_id}/revoke", summary="Revoke one of your API keys (its MCP sessions end at once)")
async def revoke_key(request: Request, key: OwnKeyDep, user: UserDep, services: ServicesDep) -> Response:
    await run_db(
        admin.revoke_key, services.engine, key_id=key.id, actor=user.actor, source="ui", audit=services.audit
    )
    await end_key_sessions(services.hub, services.engine, services.audit, key.id, actor=user.actor)
    if not is_htmx(request):
        return RedirectResponse("/keys", status_code=303)
    return await run_db(_panel, request, user, services)

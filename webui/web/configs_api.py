"""JSON API of a project's named configurations, over `Services.configs`.

    GET    /api/workflows/{id}/configs                  list, the fields, which is active
    POST   /api/workflows/{id}/configs                  create {name, values} or {name, copyOf}
    GET    /api/workflows/{id}/configs/export           one JSON document, secrets masked
    POST   /api/workflows/{id}/configs/export           the same (?secrets=true: in clear, audited)
    POST   /api/workflows/{id}/configs/import           apply an export (?mode=merge|replace&force=true)
    GET    /api/workflows/{id}/configs/{name}           one configuration (ETag: "<revision>")
    PATCH  /api/workflows/{id}/configs/{name}           {values, unset}; If-Match required
    POST   /api/workflows/{id}/configs/{name}/rename    {newName}; If-Match required
    DELETE /api/workflows/{id}/configs/{name}           If-Match required
    POST   /api/workflows/{id}/configs/{name}/activate

Callers: a Bearer API key with the `configs` scope (the server admin key too), or the
browser session (writes need its CSRF token in `X-CSRF-Token`; the guard has checked the
Origin). Each works on its own scope; `?account=NAME` lets an administrator work on an
account's scope (every write is audited with the scope it touched). A caller without run
permission on the project gets 404, as for an unknown project. Bodies are read only after
the caller is known (`StrictBody` after the `placed` and `if_match` dependencies).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ConfigDict, Field

from webui.auth.keys import AuthError, Forbidden, Principal
from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.configs.exports import EXPORT_FORMAT, EXPORT_VERSION
from webui.configs.model import ConfigPlace, ConfigView, Who
from webui.configs.places import account_place
from webui.errors import ConfigurationRefused, NotFound, SecretsExportNeedsPost, SteamharnessError
from webui.services import Services
from webui.store import accounts as account_store
from webui.web.api_models import ConfigurationAnswer, ConfigurationListAnswer, ImportedAnswer
from webui.web.deps import UNSAFE_METHODS, ServicesDep, get_registry, get_services, get_ui_user
from webui.web.json_body import ApiBody, Refuse, StrictBody
from webui.web.security import check_csrf

SCOPE = "configs"
ETAG_RE = re.compile(r'\s*(?:W/)?"?([0-9]{1,18})"?\s*')

router = APIRouter(prefix="/api/workflows/{project_id}/configs", tags=["configurations"])


class PreconditionRequired(SteamharnessError):
    """A write without the revision it read (`If-Match`)."""

    code = "precondition_required"
    status = 428


@dataclass(frozen=True)
class Caller:
    """Who manages configurations: their own scope, their projects, and whether they may
    name another account's scope."""

    actor: str
    account_id: int | None  # None: the admin principal (the server admin key)
    account_name: str | None
    is_admin: bool
    projects: frozenset[str] | None  # None: every project
    source: str  # "api" (a key) or "ui" (the browser session)

    def may_use(self, project_id: str) -> bool:
        return self.projects is None or project_id in self.projects

    @staticmethod
    def of_user(user: UiUser) -> Caller:
        return Caller(user.actor, user.account_id, user.name, user.is_admin, user.projects, "ui")


def _caller_of_key(services: Services, principal: Principal) -> Caller:
    if principal.kind == "admin":
        return Caller(principal.actor, None, None, True, None, "api")
    if SCOPE not in principal.scopes:
        raise Forbidden(f"this API key lacks the {SCOPE} scope (create a key with --scope {SCOPE})")
    assert principal.account_id is not None
    account = account_store.get_account_by_id(services.engine, account_id=principal.account_id)
    if account is None:
        raise AuthError("invalid API key")
    return Caller(principal.actor, account.id, account.name, account.is_admin, principal.projects, "api")


async def get_caller(request: Request) -> Caller:
    """Who asks: a Bearer key (the guard has checked it) or the browser session (its CSRF
    token checked for a write); 401 with neither."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        return await run_db(_caller_of_key, get_services(request), principal)
    user = await run_db(get_ui_user, request)
    if user is None:
        raise AuthError("missing Authorization: Bearer <API key> (or log in to use the browser session)")
    if request.method in UNSAFE_METHODS:
        check_csrf(user.csrf_token, request.headers.get("x-csrf-token"))
    return Caller.of_user(user)


def who(request: Request, caller: Caller) -> Who:
    return Who(
        actor=caller.actor,
        source=caller.source,
        client_address=request.client.host if request.client else None,
        user_agent=request.headers.get("user-agent"),
    )


def resolve_place(request: Request, caller: Caller, project_id: str, account: str | None) -> ConfigPlace:
    """The caller's scope of the project (or, for an administrator, `account`'s), with the
    fields of the project's draft. 404 when the project is unknown or not the caller's."""
    if not caller.may_use(project_id):
        raise NotFound(f"project {project_id!r} is not registered")
    fields = get_registry(request).draft(project_id).config_fields
    if account is None:
        return account_place(
            project_id, fields, account_id=caller.account_id, account_name=caller.account_name
        )
    if not caller.is_admin:
        raise Forbidden("only an administrator may manage another account's configurations (?account=)")
    row = account_store.get_account(get_services(request).engine, name=account)
    if row is None or row.id is None:
        raise NotFound(f"account {account!r} not found")
    return account_place(project_id, fields, account_id=row.id, account_name=row.name)


AccountQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=200,
        description="Administrators: the account whose configurations to manage (audited).",
    ),
]


@dataclass(frozen=True)
class Placed:
    """Who asks, and the scope of the project they work on."""

    caller: Caller
    place: ConfigPlace


async def placed(request: Request, project_id: str, account: AccountQuery = None) -> Placed:
    """The caller and their scope, decided before a byte of the body is read."""
    caller = await get_caller(request)
    return Placed(caller, await run_db(resolve_place, request, caller, project_id, account))


def if_match(request: Request) -> int:
    """The revision the write read, from `If-Match: "<revision>"`."""
    raw = request.headers.get("if-match")
    if raw is None:
        raise PreconditionRequired(
            'this write needs If-Match: "<revision>" with the revision you read (see the ETag of GET)'
        )
    found = ETAG_RE.fullmatch(raw)
    if found is None:
        raise ConfigurationRefused(f'If-Match must be one revision such as "3", got {raw[:40]!r}')
    return int(found.group(1))


PlacedDep = Annotated[Placed, Depends(placed)]
Revision = Annotated[int, Depends(if_match)]


def _one(view: ConfigView, status_code: int = 200) -> JSONResponse:
    return JSONResponse(
        {"data": view.to_json()}, status_code=status_code, headers={"ETag": f'"{view.revision}"'}
    )


# --------------------------------------------------------------------------- bodies


class ConfigBody(ApiBody):
    """A configuration body: members its model does not name are ignored."""

    refused = ConfigurationRefused


Values = Annotated[
    dict[str, Any],
    Field(description="field name → value (a secret's mask keeps it)"),
    Refuse("values must be a JSON object of field names to values"),
]


class NewConfiguration(ConfigBody):
    name: Annotated[str, Refuse("name: expected a configuration name")]
    values: Values = Field(default_factory=dict[str, Any])
    copy_of: Annotated[
        str | None,
        Field(alias="copyOf", description="the configuration to copy (instead of values)"),
        Refuse("copyOf: expected a configuration name"),
    ] = None


class ConfigurationChange(ConfigBody):
    unset: Annotated[list[str], Refuse("unset: expected a list of field names")] = Field(
        default_factory=list[str]
    )
    values: Values = Field(default_factory=dict[str, Any])


class NewName(ConfigBody):
    new_name: Annotated[str, Field(alias="newName"), Refuse("newName: expected a configuration name")]


def _version(version: Any) -> None:
    raise ConfigurationRefused(
        f"export format version {version!r} is not supported (this version reads {EXPORT_VERSION})"
    )


class ConfigurationsExport(ConfigBody):
    """An export document (`GET .../configs/export`); its project and entries are checked by
    the import (`webui.configs.exports.read_document`)."""

    model_config = ConfigDict(extra="allow")

    format: Annotated[
        Literal["steamharness.configurations"],
        Refuse(f"not a configuration export: format must be {EXPORT_FORMAT!r}"),
    ]
    format_version: Annotated[Literal[1], Field(alias="formatVersion"), Refuse(_version)]
    project_id: Annotated[Any, Field(alias="projectId", description="the project exported (its id)")] = None
    configurations: Annotated[
        list[Any],
        Field(description="{name, values, revision?} each"),
        Refuse("configurations: expected a list"),
    ]
    active: Annotated[str | None, Refuse("active: expected a configuration name")] = None


WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {"description": "config_conflict: the revision read is not the current one (body: current, read)"},
    422: {"description": "config_invalid: values that do not fit the fields (body: fields)"},
    428: {"description": "precondition_required: no If-Match"},
}


# --------------------------------------------------------------------------- routes


@router.get(
    "",
    summary="A project's configurations in your scope, its fields and the active one",
    response_model=ConfigurationListAnswer,
)
async def list_configs(placed: PlacedDep, services: ServicesDep) -> Any:
    place = placed.place
    views = await run_db(services.configs.list, place)
    return {
        "data": {
            "projectId": place.project_id,
            "scope": place.owner,
            "fields": [f.declaration() for f in place.fields],
            "active": next((v.name for v in views if v.active), "default"),
            "configurations": [v.to_json() for v in views],
        }
    }


@router.post(
    "",
    summary="Create a configuration: {name, values} or {name, copyOf}",
    status_code=201,
    response_model=ConfigurationAnswer,
    responses={409: {"description": "config_conflict: the name is taken"}, 422: WRITE_ERRORS[422]},
)
async def create_config(
    request: Request,
    project_id: str,
    placed: PlacedDep,
    body: StrictBody[NewConfiguration],
    services: ServicesDep,
) -> Response:
    by = who(request, placed.caller)
    if body.copy_of is not None:
        if "values" in body.model_fields_set:
            raise ConfigurationRefused("give either values or copyOf, not both")
        view = await run_db(services.configs.copy, placed.place, body.copy_of, body.name, by)
    else:
        view = await run_db(services.configs.create, placed.place, body.name, body.values, by)
    response = _one(view, 201)
    response.headers["Location"] = f"/api/workflows/{project_id}/configs/{view.name}"
    return response


async def export_download(
    request: Request, caller: Caller, project_id: str, account: str | None, *, secrets: bool
) -> Response:
    """The caller's scope exported (secrets in clear only when asked: audited), as a download."""
    place = await run_db(resolve_place, request, caller, project_id, account)
    configs = get_services(request).configs
    doc = await run_db(lambda: configs.export(place, secrets=secrets, who=who(request, caller)))
    return export_response(doc, project_id)


def export_response(doc: dict[str, Any], project_id: str) -> Response:
    """An export document as a download (never cached: it may hold secrets)."""
    return Response(
        json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
        media_type="application/json",
        headers={
            "Content-Disposition": f'attachment; filename="configurations-{project_id}.json"',
            "Cache-Control": "no-store",
        },
    )


def secrets_need_post(path: str) -> SecretsExportNeedsPost:
    return SecretsExportNeedsPost(
        f"exporting with secrets is a POST (POST {path}?secrets=true; a browser session sends its"
        " X-CSRF-Token): a GET could be sent by any page the browser opens"
    )


@router.get("/export", summary="Export every configuration of the scope, secrets masked")
async def export_configs(
    request: Request,
    project_id: str,
    account: AccountQuery = None,
    secrets: bool = Query(default=False, description="Refused (405): secrets are exported only by POST."),
) -> Response:
    if secrets:
        # Refused before anything is read: not even who is asking matters for a GET with secrets.
        exc = secrets_need_post(request.url.path)
        return JSONResponse(
            {"error": {"code": exc.code, "message": exc.message}},
            status_code=exc.status,
            headers={"Allow": "POST"},
        )
    return await export_download(request, await get_caller(request), project_id, account, secrets=False)


@router.post(
    "/export",
    summary="Export every configuration of the scope (secrets in clear only with ?secrets=true, audited)",
    responses={403: {"description": "csrf: a browser session without its X-CSRF-Token"}},
)
async def export_configs_post(
    request: Request,
    project_id: str,
    account: AccountQuery = None,
    secrets: bool = Query(default=False, description="Include secret values in clear (audited)."),
) -> Response:
    caller = await get_caller(request)  # a browser session: CSRF checked
    return await export_download(request, caller, project_id, account, secrets=secrets)


@router.post(
    "/import",
    summary="Import an export document (mode merge or replace; force overwrites)",
    response_model=ImportedAnswer,
    responses={
        400: {"description": "config_refused: another format, version or project"},
        409: {"description": "config_conflict: a configuration changed since the export (use force)"},
        422: WRITE_ERRORS[422],
    },
)
async def import_configs(
    request: Request,
    placed: PlacedDep,
    body: StrictBody[ConfigurationsExport],
    services: ServicesDep,
    mode: str = Query(default="merge", description="merge (keep others) or replace (delete others)"),
    force: bool = Query(default=False, description="Overwrite configurations changed since the export"),
) -> Any:
    doc = body.model_dump(by_alias=True, exclude_unset=True)  # as sent: the import checks the rest
    views = await run_db(
        lambda: services.configs.import_(
            placed.place, doc, mode=mode, force=force, who=who(request, placed.caller)
        )
    )
    return {
        "data": {
            "active": next((v.name for v in views if v.active), "default"),
            "configurations": [v.to_json() for v in views],
        }
    }


@router.get(
    "/{name}",
    summary="One configuration (secrets masked); its ETag is its revision",
    response_model=ConfigurationAnswer,
)
async def show_config(name: str, placed: PlacedDep, services: ServicesDep) -> Any:
    return _one(await run_db(services.configs.show, placed.place, name))


@router.patch(
    "/{name}",
    summary='Change values: {values, unset}; needs If-Match: "<revision>"',
    response_model=ConfigurationAnswer,
    responses=WRITE_ERRORS,
)
async def update_config(
    request: Request,
    name: str,
    placed: PlacedDep,
    revision: Revision,
    body: StrictBody[ConfigurationChange],
    services: ServicesDep,
) -> Response:
    view = await run_db(
        lambda: services.configs.set(
            placed.place,
            name,
            revision=revision,
            values=body.values,
            unset=body.unset,
            who=who(request, placed.caller),
        )
    )
    return _one(view)


@router.post(
    "/{name}/rename",
    summary='Rename: {newName}; needs If-Match: "<revision>"',
    response_model=ConfigurationAnswer,
    responses=WRITE_ERRORS,
)
async def rename_config(
    request: Request,
    name: str,
    placed: PlacedDep,
    revision: Revision,
    body: StrictBody[NewName],
    services: ServicesDep,
) -> Response:
    view = await run_db(
        lambda: services.configs.rename(
            placed.place, name, body.new_name, revision=revision, who=who(request, placed.caller)
        )
    )
    return _one(view)


@router.delete(
    "/{name}",
    summary='Delete a configuration; needs If-Match: "<revision>"',
    status_code=204,
    responses={409: WRITE_ERRORS[409], 428: WRITE_ERRORS[428]},
)
async def delete_config(
    request: Request, name: str, placed: PlacedDep, revision: Revision, services: ServicesDep
) -> Response:
    await run_db(
        lambda: services.configs.delete(
            placed.place, name, revision=revision, who=who(request, placed.caller)
        )
    )
    return Response(status_code=204)


@router.post(
    "/{name}/activate",
    summary="Make this configuration the active one of the scope",
    response_model=ConfigurationAnswer,
)
async def activate_config(request: Request, name: str, placed: PlacedDep, services: ServicesDep) -> Response:
    view = await run_db(services.configs.activate, placed.place, name, who(request, placed.caller))
    return _one(view)

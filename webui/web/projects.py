"""The projects list (what the logged-in person may use) and a project's page.

    GET  /projects                                the list: latest version, tool count, last run
    GET  /projects/{id}                           description, draft, versions, recent runs
    GET  /projects/{id}/publish                   the page with the publish preview open: the
                                                  tool contract diff of the draft against latest
    POST /projects/{id}/publish                   publish the draft reviewed (its revision) as a version
    POST /projects/{id}/versions/{v}/online|offline   bring a version online or take it offline

A change done answers 303 to the page (`?done=…&version=…` names it); a refusal renders the
page with the error (409 or 422) and what was typed.

Whoever may use the project sees the page; publishing and taking versions online or offline
are for administrators (the CLI is the operator's tool, the page is its counterpart), each
audited with the change. A project the person may not use is 404, never 403.
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlencode

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from webui.auth.keys import Forbidden
from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.errors import ProjectProblems, SteamharnessError
from webui.projects.drafts import DraftChanged
from webui.projects.registry import ProjectRegistry
from webui.services import Services
from webui.store import projects as project_store
from webui.store.models import ProjectRecord
from webui.web import project_views as views
from webui.web.deps import RegistryDep, ServicesDep, UserDep
from webui.web.mcp_page import visible_record
from webui.web.policies import PUBLIC
from webui.web.templating import page
from webui.workflows.targets import VERSION_RE

router = APIRouter(tags=["pages"])

DRAFT_CHANGED = "The draft changed since you reviewed it; review the new changes before publishing."


@router.get("/", include_in_schema=False, dependencies=[PUBLIC])
def home() -> Response:
    return RedirectResponse("/projects", status_code=303)


@router.get("/projects", summary="Projects you may use")
def projects_list(request: Request, user: UserDep, services: ServicesDep, registry: RegistryDep) -> Response:
    rows = []
    for record in project_store.list_projects(services.engine):
        if not user.may_use(record.id):
            continue
        online = registry.online_versions(record.id)
        rows.append(
            {
                "record": record,
                "latest": online[0].version if online else None,
                "versions": online,
                "summary": views.list_summary(registry, record),
            }
        )
    return page(request, "projects/list.html", {"projects": rows})


def _render(
    request: Request,
    user: UiUser,
    registry: ProjectRegistry,
    record: ProjectRecord,
    *,
    publish: views.PublishPreview | None = None,
    notice: str | None = None,
    error: str | None = None,
    version_value: str | None = None,
    status_code: int = 200,
) -> Response:
    engine = registry.engine
    context: dict[str, Any] = {
        "record": record,
        "draft": views.draft(registry, record.id),
        "versions": views.versions(registry, record.id),
        "runs": views.recent_runs(engine, record.id),
        "may_publish": user.is_admin,
        "publish": publish,
        "version_value": version_value if version_value is not None else (publish.version if publish else ""),
        "notice": notice,
        "error": error,
    }
    return page(request, "projects/detail.html", context, status_code=status_code)


def _admin(user: UiUser) -> None:
    if not user.is_admin:
        raise Forbidden("publishing and taking versions online or offline is for administrators")


NOTICES = {"published": "Published {}.", "online": "{} is online.", "offline": "{} is offline."}


def _done(project_id: str, what: str, version: str) -> Response:
    """After a change, the page again (a reload does not repeat the change), saying what was done."""
    return RedirectResponse(f"/projects/{project_id}?{urlencode({'done': what, 'version': version})}", 303)


@router.get("/projects/{project_id}", summary="A project: description, versions, recent runs")
def project_page(
    request: Request,
    project_id: str,
    user: UserDep,
    registry: RegistryDep,
    done: str | None = None,
    version: str | None = None,
) -> Response:
    record = visible_record(registry, user, project_id)
    notice = None
    if done in NOTICES and version is not None and VERSION_RE.match(version):
        notice = NOTICES[done].format(version)
    return _render(request, user, registry, record, notice=notice)


@router.get("/projects/{project_id}/publish", summary="Review what publishing the draft changes")
async def publish_preview(
    request: Request, project_id: str, user: UserDep, registry: RegistryDep
) -> Response:
    record = await run_db(visible_record, registry, user, project_id)
    _admin(user)
    # The problems a publish would find, its handler check's too (in the bounded child,
    # with no database thread held while the draft's code is imported).
    preview = await views.checked_preview(registry, project_id)
    status = 422 if preview.problem else 200
    return await run_db(_render, request, user, registry, record, publish=preview, status_code=status)


@router.post("/projects/{project_id}/publish", summary="Publish the draft as a new version")
async def publish(
    request: Request, project_id: str, user: UserDep, registry: RegistryDep, services: ServicesDep
) -> Response:
    record = await run_db(visible_record, registry, user, project_id)
    _admin(user)
    form = await request.form()
    version = str(form.get("version") or "").strip()
    reviewed = str(form.get("revision") or "")
    render = functools.partial(_render, request, user, registry, record)
    try:
        # The registry checks the revision of its own copy of the draft: comparing a fresh
        # preview here first would prove nothing about what is then copied. That copy is what
        # is checked, compiled and published; the check and the compile import and compile
        # the draft's code in bounded children while the event loop waits, never in a
        # database thread (a draft's import may take the check's whole time).
        copy = await run_db(registry.copy_for_publish, project_id, version or None, reviewed=reviewed)
        try:
            await registry.ready_copy(copy)
            row = await run_db(
                functools.partial(
                    registry.store_publish, copy, actor=user.actor, source="ui", audit=services.audit
                )
            )
        finally:
            with anyio.CancelScope(shield=True):
                await run_db(copy.discard)
    except SteamharnessError as exc:
        # The refusal shows the draft as it is now: its diff and the revision to review
        # (its handlers' problems: those the check of the copy just found).
        if isinstance(exc, ProjectProblems):
            preview = views.with_problems(await run_db(views.preview, registry, project_id), exc.problems)
        else:
            preview = await views.checked_preview(registry, project_id)
        if preview.problem is not None:  # whatever was reviewed, the draft cannot be published now
            error, status = preview.problem, 422
        elif isinstance(exc, DraftChanged):
            error, status = DRAFT_CHANGED, 409
        else:
            error, status = exc.message, exc.status if exc.status in (409, 422) else 422
        return await run_db(render, publish=preview, error=error, version_value=version, status_code=status)
    return _done(project_id, "published", row.version)


async def _set_online(
    project_id: str, version: str, user: UiUser, online: bool, registry: ProjectRegistry, services: Services
) -> Response:
    await run_db(visible_record, registry, user, project_id)
    _admin(user)
    await run_db(
        functools.partial(
            registry.set_online,
            project_id,
            version,
            online,
            actor=user.actor,
            source="ui",
            audit=services.audit,
        )
    )
    return _done(project_id, "online" if online else "offline", version)


@router.post("/projects/{project_id}/versions/{version}/online", summary="Bring a version online")
async def version_online(
    project_id: str, version: str, user: UserDep, registry: RegistryDep, services: ServicesDep
) -> Response:
    return await _set_online(project_id, version, user, True, registry, services)


@router.post("/projects/{project_id}/versions/{version}/offline", summary="Take a version offline")
async def version_offline(
    project_id: str, version: str, user: UserDep, registry: RegistryDep, services: ServicesDep
) -> Response:
    return await _set_online(project_id, version, user, False, registry, services)

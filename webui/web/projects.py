"""The projects list (what the logged-in person may use)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from webui.store import projects as project_store
from webui.web.deps import RegistryDep, ServicesDep, UserDep
from webui.web.templating import page

router = APIRouter(tags=["pages"])


@router.get("/", include_in_schema=False)
def home() -> Response:
    return RedirectResponse("/projects", status_code=303)


@router.get("/projects", summary="Projects you may use")
def projects_list(request: Request, user: UserDep, services: ServicesDep, registry: RegistryDep) -> Response:
    rows = []
    for record in project_store.list_projects(services.engine):
        if not user.may_use(record.id):
            continue
        online = registry.online_versions(record.id)
        rows.append({"record": record, "latest": online[0].version if online else None, "versions": online})
    return page(request, "projects/list.html", {"projects": rows})

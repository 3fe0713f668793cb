"""The project MCP page and Try it's routes.

    GET  /projects/{id}/mcp?target=…[&config=…]   the page; for htmx, only its `target` block
    POST /projects/{id}/mcp/try?target=…[&config=…]  run one tool through the real MCP endpoint
    GET  /projects/{id}/mcp/try/{call_id}     wait (bounded) for a running call's outcome

The page shows only `<YOUR_API_KEY>`: it never reads or echoes a stored key. What the page
shows is built in `mcp_views` (tools, targets, configurations) and `mcp_clients`
(addresses, client set-ups); the calls themselves, and the server-side keys they use, are
`try_it`'s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.errors import NotFound, ProjectError
from webui.mcp.binding import chosen_config
from webui.projects.registry import ProjectRegistry, Resolved
from webui.store.models import ProjectRecord
from webui.tryit.service import TryCall
from webui.web import forms
from webui.web.deps import RegistryDep, SettingsDep, TryItDep, UserDep
from webui.web.mcp_clients import (
    HEADER_TEMPLATE,
    client_configs,
    endpoint_url,
    own_endpoint_url,
    page_url,
    server_name_for,
    try_url,
)
from webui.web.mcp_views import catalog_view, config_use, target_choices
from webui.web.state import app_state
from webui.web.templating import is_htmx, page
from webui.workflows.client_limits import name_problems, short_server_name
from webui.workflows.targets import Target, parse_target

FIRST_WAIT = 10.0  # the POST answers with the outcome if it arrives this soon, else "running…"
POLL_WAIT = 20.0  # each follow-up GET waits at most this long before answering "still running"

router = APIRouter(tags=["pages"])


@dataclass
class TryState:
    tool: str
    values: dict[str, Any]
    errors: dict[str, str]
    call: TryCall | None = None


def visible_record(registry: ProjectRegistry, user: UiUser, project_id: str) -> ProjectRecord:
    """The project, or 404 both when it does not exist and when this person may not use it
    (so ids of other people's projects cannot be probed)."""
    if not user.may_use(project_id):
        raise NotFound(f"project {project_id!r} is not registered")
    return registry.record(project_id)


@dataclass(frozen=True)
class Visible:
    """The project a page is about, which this person may use, and the registry it is read from."""

    user: UiUser
    registry: ProjectRegistry
    record: ProjectRecord


async def visible_project(project_id: str, user: UserDep, registry: RegistryDep) -> Visible:
    return Visible(user, registry, await run_db(visible_record, registry, user, project_id))


VisibleDep = Annotated[Visible, Depends(visible_project)]


def _resolve(
    registry: ProjectRegistry, project_id: str, target: Target
) -> tuple[Resolved | None, str | None]:
    try:
        return registry.resolve(project_id, target), None
    except (NotFound, ProjectError) as exc:
        return None, exc.message


def _render(
    request: Request,
    project: Visible,
    target: Target,
    *,
    config: str | None = None,
    try_state: TryState | None = None,
    status_code: int = 200,
) -> Response:
    user, registry, record = project.user, project.registry, project.record
    resolved, problem = _resolve(registry, record.id, target)
    url = endpoint_url(request, record.id, target.label, config)
    configs = app_state(request.app).services.configs
    # Only administrators see the server's folder; everyone else gets a placeholder for
    # their own copy of the project (the server's paths are not theirs to use).
    folder = record.root if user.is_admin else f"/path/to/{record.name}"
    short = short_server_name(record.name, record.id)
    tools = catalog_view(resolved) if resolved is not None else []
    context = {
        "record": record,
        "target": target,
        "resolved": resolved,
        "problem": problem,
        "choices": target_choices(registry, record.id, config),
        "config_use": config_use(configs, user, resolved, target.label, config) if resolved else None,
        "endpoint": url,
        "header_template": HEADER_TEMPLATE,
        "configs": client_configs(server_name_for(record.id), short, url, folder),
        "short_name": short,
        "name_problems": name_problems(short, [t.name for t in tools]),
        "tools": tools,
        "try_state": try_state,
        "try_action": try_url(record.id, target.label, config),
    }
    # A history restore must get the whole page even though htmx marks it as an htmx request.
    restoring = request.headers.get("hx-history-restore-request") == "true"
    response = page(
        request,
        "projects/mcp.html",
        context,
        block=None if restoring else "target",
        status_code=404 if resolved is None and status_code == 200 else status_code,
    )
    response.headers["Vary"] = "HX-Request"
    return response


@router.get("/projects/{project_id}/mcp", summary="A project's MCP connection page")
def mcp_page(
    request: Request, project: VisibleDep, target: str | None = None, config: str | None = None
) -> Response:
    project_id = project.record.id
    picked = chosen_config(config, "config")
    if target is None:
        default = "latest" if project.registry.online_versions(project_id) else "draft"
        return RedirectResponse(page_url(project_id, default, picked), status_code=303)
    return _render(request, project, parse_target(target), config=picked)


@router.post("/projects/{project_id}/mcp/try", summary="Try a tool through the MCP endpoint")
async def try_tool(
    request: Request,
    project: VisibleDep,
    try_it: TryItDep,
    settings: SettingsDep,
    target: str | None = None,
    config: str | None = None,
) -> Response:
    user, registry, record = project.user, project.registry, project.record
    project_id = record.id
    chosen = parse_target(target)
    picked = chosen_config(config, "config")
    resolved = await run_db(registry.resolve, project_id, chosen)
    form = await request.form()
    tool_name = str(form.get("tool") or "")
    tool = next((t for t in catalog_view(resolved) if t.name == tool_name), None)
    if tool is None:
        raise NotFound(f"target {chosen.label} of this project has no tool {tool_name!r}")
    values, errors = forms.parse(tool.schema, form, prefix=tool.prefix)
    state = TryState(tool=tool.name, values=values, errors=errors)
    if not errors:
        state.call = await try_it.start(
            user,
            url=own_endpoint_url(request, settings, project_id, chosen.label, picked),
            target=chosen.label,
            resolved=resolved,
            tool=tool.name,
            arguments=values,
            config=picked,
        )
        await try_it.calls.wait_finished(state.call, FIRST_WAIT)
        await try_it.find_run(state.call)
    status = 422 if errors else 200
    if is_htmx(request):
        context = {
            "record": record,
            "target": chosen,
            "t": tool,
            "try_state": state,
            "try_action": try_url(project_id, chosen.label, picked),
        }
        return page(request, "projects/_try_it.html", context, status_code=status)
    return await run_db(
        functools.partial(
            _render, request, project, chosen, config=picked, try_state=state, status_code=status
        )
    )


@router.get("/projects/{project_id}/mcp/try/{call_id}", summary="The outcome of a Try it call")
async def try_outcome(request: Request, call_id: str, project: VisibleDep, try_it: TryItDep) -> Response:
    call = try_it.get(call_id, project.user, project.record.id)
    await try_it.calls.wait_finished(call, POLL_WAIT)
    await try_it.find_run(call)
    if is_htmx(request):
        return page(request, "projects/_try_outcome.html", {"call": call})
    state = TryState(tool=call.tool, values=call.arguments, errors={}, call=call)
    target = parse_target(call.target)
    return await run_db(
        functools.partial(_render, request, project, target, config=call.config, try_state=state)
    )

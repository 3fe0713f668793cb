"""Administration: the live MCP sessions console and terminating a session.

The list is the store's open session rows (every replica's), each project shown by its name
(its id small beside it); the active-call figure comes from this process's gateway (blank
for a session another replica holds). Terminating goes through the event hub
(`webui.mcp.sessions.end_by_order`): the process holding the session ends it, and the page
answers once it has."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.engine import Engine

from webui.blocking import run_db
from webui.mcp.http import McpGateway
from webui.mcp.sessions import end_by_order
from webui.services import Services
from webui.store import projects as project_store
from webui.store import sessions as session_store
from webui.store.models import McpSession, as_utc
from webui.web.deps import AdminDep, GatewayDep, ServicesDep
from webui.web.templating import is_htmx, page

router = APIRouter(prefix="/admin", tags=["admin pages"])

SessionIdPath = Annotated[str, Path(max_length=200)]


@dataclass(frozen=True)
class SessionView:
    """One row of the console."""

    id: str
    account: str
    key_id: str | None
    project_id: str
    project_name: str  # "" for a project no longer registered
    target: str
    resolved: str
    client: str
    protocol_version: str | None
    created_at: datetime
    last_activity_at: datetime
    active_calls: int | None  # None: held by another replica (or not yet bound here)


def _view(row: McpSession, gateway: McpGateway, project_names: dict[str, str]) -> SessionView:
    client = " ".join(p for p in (row.client_name, row.client_version) if p) or "unknown"
    return SessionView(
        id=row.id,
        account=row.actor.removeprefix("user:") if row.actor.startswith("user:") else "server admin key",
        key_id=row.key_id,
        project_id=row.project_id,
        project_name=project_names.get(row.project_id, ""),
        target=row.target,
        resolved=row.resolved,
        client=client,
        protocol_version=row.protocol_version,
        created_at=as_utc(row.created_at),
        last_activity_at=as_utc(row.last_activity_at or row.created_at),
        active_calls=gateway.sessions.active_calls(row.id),
    )


def _open_sessions(engine: Engine) -> tuple[list[McpSession], dict[str, str]]:
    """The open sessions and the names of the projects (id -> name) they are bound to."""
    rows = session_store.list_open(engine)
    names = {p.id: p.name for p in project_store.list_projects(engine)} if rows else {}
    return rows, names


async def _panel(
    request: Request,
    services: Services,
    gateway: McpGateway,
    *,
    notice: str | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    rows, names = await run_db(_open_sessions, services.engine)
    return page(
        request,
        "admin/sessions.html",
        {"sessions": [_view(r, gateway, names) for r in rows], "notice": notice, "error": error},
        block="sessions_panel",
        status_code=status_code,
    )


@router.get("/sessions", summary="Live MCP sessions")
async def sessions_page(
    request: Request, admin_user: AdminDep, services: ServicesDep, gateway: GatewayDep
) -> Response:
    return await _panel(request, services, gateway)


@router.post("/sessions/{session_id}/terminate", summary="End an MCP session, its calls and their runs")
async def terminate_session(
    request: Request,
    session_id: SessionIdPath,
    admin_user: AdminDep,
    services: ServicesDep,
    gateway: GatewayDep,
) -> Response:
    row = await run_db(session_store.get_session, services.engine, session_id=session_id)
    if row is None:
        return await _panel(
            request, services, gateway, error=f"MCP session {session_id} not found.", status_code=404
        )
    if row.closed_at is not None:
        when = as_utc(row.closed_at).strftime("%Y-%m-%d %H:%M:%S UTC")
        return await _panel(
            request,
            services,
            gateway,
            error=f"MCP session {session_id} already ended ({row.close_reason or 'closed'}, {when}).",
            status_code=409,
        )
    # A session no process holds (its process is gone) has its row closed here.
    await end_by_order(
        services.hub,
        services.engine,
        services.audit,
        [session_id],
        actor=admin_user.actor,
        reason="terminated",
    )
    if not is_htmx(request):
        return RedirectResponse("/admin/sessions", status_code=303)
    return await _panel(request, services, gateway, notice=f"MCP session {session_id} terminated.")

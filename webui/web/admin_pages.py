"""Administration: users (create, disable/enable, project permissions) and projects (run
gate, queue limits). Every route needs an administrator; every write is audited with the
change it records (webui.admin)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from webui import admin
from webui.account_rules import InvalidAccount
from webui.auth.ui import UiAuth, UiUser
from webui.errors import NotFound
from webui.services import Services
from webui.store import accounts as account_store
from webui.store import projects as project_store
from webui.store.models import Account, ProjectRecord
from webui.web.deps import AdminDep, ServicesDep, UiAuthDep
from webui.web.templating import is_htmx, page

router = APIRouter(prefix="/admin", tags=["admin pages"])


def get_account_or_404(account_id: int, admin_user: AdminDep, services: ServicesDep) -> Account:
    account = account_store.get_account_by_id(services.engine, account_id=account_id)
    if account is None:
        raise NotFound(f"user #{account_id} not found")
    return account


def get_project_or_404(project_id: str, admin_user: AdminDep, services: ServicesDep) -> ProjectRecord:
    record = project_store.get_project(services.engine, project_id=project_id)
    if record is None:
        raise NotFound(f"project {project_id!r} not found")
    return record


AccountDep = Annotated[Account, Depends(get_account_or_404)]
ProjectRecordDep = Annotated[ProjectRecord, Depends(get_project_or_404)]


def _done(request: Request, path: str, render: Callable[[], Response]) -> Response:
    """After a successful write: htmx swaps the fresh panel in; a plain form redirects."""
    return render() if is_htmx(request) else RedirectResponse(path, status_code=303)


# ---------------------------------------------------------------------------- users


def _users_panel(
    request: Request,
    services: Services,
    *,
    values: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    row_errors: dict[int, str] | None = None,
    notice: str | None = None,
    status_code: int = 200,
) -> Response:
    accounts = account_store.list_accounts(services.engine)
    grants = {
        a.id: account_store.project_grants(services.engine, account_id=a.id)
        for a in accounts
        if a.id is not None and not a.is_admin
    }
    return page(
        request,
        "admin/users.html",
        {
            "accounts": accounts,
            "grants": grants,
            "projects": project_store.list_projects(services.engine),
            "values": values or {"name": "", "is_admin": False},
            "errors": errors or {},
            "row_errors": row_errors or {},
            "notice": notice,
        },
        block="users_panel",
        status_code=status_code,
    )


@router.get("/users", summary="Users and their project permissions")
def users_page(request: Request, admin_user: AdminDep, services: ServicesDep) -> Response:
    return _users_panel(request, services)


@router.post("/users", summary="Create a user")
def create_user(
    request: Request,
    admin_user: AdminDep,
    services: ServicesDep,
    name: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    is_admin: Annotated[bool, Form()] = False,
) -> Response:
    name = name.strip()
    try:
        admin.create_user(
            services.engine,
            name=name,
            admin=is_admin,
            password=password or None,
            actor=admin_user.actor,
            source="ui",
            audit=services.audit,
        )
    except InvalidAccount as exc:
        values = {"name": name, "is_admin": is_admin}
        return _users_panel(request, services, values=values, errors=exc.errors, status_code=422)
    return _done(
        request, "/admin/users", lambda: _users_panel(request, services, notice=f"User {name} created.")
    )


def _set_disabled(
    request: Request,
    account: Account,
    admin_user: UiUser,
    services: Services,
    ui_auth: UiAuth,
    *,
    disabled: bool,
) -> Response:
    assert account.id is not None
    if disabled and account.id == admin_user.account_id:
        errors = {account.id: "You cannot disable your own account."}
        return _users_panel(request, services, row_errors=errors, status_code=422)
    admin.set_disabled(
        services.engine,
        account_id=account.id,
        disabled=disabled,
        actor=admin_user.actor,
        source="ui",
        audit=services.audit,
    )
    if disabled:
        ui_auth.end_all(account.id)  # a re-enabled account logs in afresh
    state = "disabled" if disabled else "enabled"
    return _done(
        request,
        "/admin/users",
        lambda: _users_panel(request, services, notice=f"User {account.name} {state}."),
    )


@router.post("/users/{account_id}/disable", summary="Disable a user (logins and API keys stop working)")
def disable_user(
    request: Request, account: AccountDep, admin_user: AdminDep, services: ServicesDep, ui_auth: UiAuthDep
) -> Response:
    return _set_disabled(request, account, admin_user, services, ui_auth, disabled=True)


@router.post("/users/{account_id}/enable", summary="Enable a disabled user")
def enable_user(
    request: Request, account: AccountDep, admin_user: AdminDep, services: ServicesDep, ui_auth: UiAuthDep
) -> Response:
    return _set_disabled(request, account, admin_user, services, ui_auth, disabled=False)


@router.post("/users/{account_id}/projects", summary="Set a user's project permissions")
def set_user_projects(
    request: Request,
    account: AccountDep,
    admin_user: AdminDep,
    services: ServicesDep,
    projects: Annotated[list[str] | None, Form()] = None,
) -> Response:
    assert account.id is not None
    if account.is_admin:
        errors = {account.id: "Administrators may use every project; there is nothing to grant."}
        return _users_panel(request, services, row_errors=errors, status_code=422)
    chosen = set(projects or [])
    known = {p.id for p in project_store.list_projects(services.engine)}
    if chosen - known:
        errors = {account.id: "Choose among the registered projects."}
        return _users_panel(request, services, row_errors=errors, status_code=422)
    added, removed = admin.set_project_grants(
        services.engine,
        account_id=account.id,
        projects=chosen,
        actor=admin_user.actor,
        source="ui",
        audit=services.audit,
    )
    notice = (
        f"Permissions of {account.name} saved ({len(added)} granted, {len(removed)} revoked)."
        if added or removed
        else f"Permissions of {account.name} unchanged."
    )
    return _done(request, "/admin/users", lambda: _users_panel(request, services, notice=notice))


# ---------------------------------------------------------------------------- projects


def _projects_panel(
    request: Request,
    services: Services,
    *,
    values: dict[str, dict[str, Any]] | None = None,
    errors: dict[str, dict[str, str]] | None = None,
    notice: str | None = None,
    status_code: int = 200,
) -> Response:
    settings = services.settings
    return page(
        request,
        "admin/projects.html",
        {
            "projects": project_store.list_projects(services.engine),
            "values": values or {},
            "errors": errors or {},
            "notice": notice,
            "default_running": settings.max_running_per_project,
            "default_queued": settings.max_queued_per_project,
        },
        block="projects_panel",
        status_code=status_code,
    )


def _limit(raw: str, *, minimum: int) -> tuple[int | None, str | None]:
    """A blank field means the server default; otherwise a whole number >= minimum."""
    raw = raw.strip()
    if not raw:
        return None, None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < minimum or int(raw) > 1_000_000:
        return None, f"Enter a whole number from {minimum} to 1000000, or leave blank for the default."
    return int(raw), None


@router.get("/projects", summary="Projects: run gate and queue limits")
def projects_page(request: Request, admin_user: AdminDep, services: ServicesDep) -> Response:
    return _projects_panel(request, services)


@router.post("/projects/{project_id}/limits", summary="Open or close the run gate; set queue limits")
def set_project_limits(
    request: Request,
    record: ProjectRecordDep,
    admin_user: AdminDep,
    services: ServicesDep,
    run_gate_open: Annotated[bool, Form()] = False,
    max_running: Annotated[str, Form()] = "",
    max_queued: Annotated[str, Form()] = "",
) -> Response:
    running, running_error = _limit(max_running, minimum=1)
    queued, queued_error = _limit(max_queued, minimum=0)
    field_errors = {
        k: v for k, v in {"max_running": running_error, "max_queued": queued_error}.items() if v is not None
    }
    if field_errors:
        values = {
            record.id: {"run_gate_open": run_gate_open, "max_running": max_running, "max_queued": max_queued}
        }
        return _projects_panel(
            request, services, values=values, errors={record.id: field_errors}, status_code=422
        )
    admin.set_project_limits(
        services.engine,
        project_id=record.id,
        run_gate_open=run_gate_open,
        max_running=running,
        max_queued=queued,
        actor=admin_user.actor,
        source="ui",
        audit=services.audit,
    )
    return _done(
        request,
        "/admin/projects",
        lambda: _projects_panel(request, services, notice=f"Limits of {record.name} saved."),
    )

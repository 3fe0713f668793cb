"""The project configuration page: the logged-in person's named configurations of a project
(administrators pick any account's), edited through the same service as the JSON API.

    GET  /projects/{id}/config[?account=NAME]          the page; htmx swaps its `panel` block
    POST /projects/{id}/config/save                    one configuration's values (its revision)
    POST /projects/{id}/config/create                  a new one, empty or a copy of another
    POST /projects/{id}/config/rename | delete | activate
    GET  /projects/{id}/config/export                  the export document (secrets masked), as a download
    POST /projects/{id}/config/export                  the same; `secrets=on` in the form: in clear (audited)
    POST /projects/{id}/config/import                  an uploaded export (mode, force)

Every form carries the revision it was drawn from; a stale save shows the conflict naming both
revisions, keeps what was typed (except a new secret, which is never echoed back) and shows
what is stored now. Secrets are password inputs showing the mask: leaving the mask keeps the
stored secret, emptying the field removes it. Without htmx each action answers 303 back to the
page (or the whole page with the error).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import FormData, UploadFile

from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.configs.model import MASK, ConfigPlace, ConfigView, Who
from webui.errors import (
    ConfigurationConflict,
    ConfigurationInvalid,
    ConfigurationNotFound,
    ConfigurationRefused,
    SteamharnessError,
)
from webui.parse_threads import run_parse
from webui.store import accounts as account_store
from webui.web.configs_api import Caller, export_download, resolve_place, secrets_need_post, who
from webui.web.deps import ConfigsDep, UserDep
from webui.web.json_body import parse_json
from webui.web.state import app_state
from webui.web.templating import is_htmx, page
from webui.workflows.configuration import ConfigField

router = APIRouter(tags=["pages"])

NUMBER_RE = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
PREFIX = "v."  # form names of values: v.<field>
# htmx swaps only 2xx, 409, 410 and 422 answers: a configuration gone meanwhile is a conflict
# of the page's view, a refused input an invalid one.
PAGE_STATUS = {404: 409, 400: 422}


@dataclass(frozen=True)
class FieldView:
    """One declared field as the form draws it."""

    name: str
    type: str
    required: bool
    description: str | None
    options: list[tuple[str, str]]
    default: Any
    has_default: bool

    @property
    def input_type(self) -> str:
        return {"number": "number", "date": "date", "secret": "password"}.get(self.type, "text")

    @staticmethod
    def of(f: ConfigField) -> FieldView:
        return FieldView(
            name=f.name,
            type=f.type,
            required=f.required,
            description=f.description,
            options=[(str(o.value), str(o.label or o.value)) for o in f.options],
            default=f.default,
            has_default=f.has_default,
        )


@dataclass
class Card:
    """One configuration on the page: what its form shows (stored values, or what was just
    submitted), the revision the form states, and the outcome of the last action on it."""

    view: ConfigView
    values: dict[str, Any]
    revision: int
    errors: dict[str, str] = field(default_factory=dict)
    message: str | None = None
    stored: dict[str, Any] | None = None  # after a conflict: what is stored now
    unknown: list[str] = field(default_factory=list)  # stored fields no longer declared


@dataclass
class Outcome:
    """The last action's outcome for the page: a notice, or an error (on a card or on top)."""

    notice: str | None = None
    error: str | None = None
    card: str | None = None  # the configuration the error belongs to
    submitted: dict[str, Any] | None = None
    errors: dict[str, str] = field(default_factory=dict)
    stale: bool = False
    create: dict[str, str] = field(default_factory=dict)


def page_url(project_id: str, account: str | None) -> str:
    query = f"?{urlencode({'account': account})}" if account else ""
    return f"/projects/{project_id}/config{query}"


def display_values(fields: tuple[ConfigField, ...], view: ConfigView) -> dict[str, Any]:
    """The stored values as the form's controls take them (secrets: the mask when stored)."""
    shown: dict[str, Any] = {}
    for f in fields:
        value = view.values.get(f.name)
        if f.type == "boolean":
            shown[f.name] = bool(value)
        elif f.type == "multiselect":
            shown[f.name] = list(value) if isinstance(value, list) else []
        elif value is None:
            shown[f.name] = ""
        else:
            shown[f.name] = str(value) if not isinstance(value, bool) else ""
    return shown


def parse_values(
    fields: tuple[ConfigField, ...], form: FormData, stored: ConfigView
) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """(values to write, fields to unset, what to show again) from a save form. An empty
    input unsets its field (its default applies); fields stored but no longer declared are
    unset too, so a configuration that needs update can be saved."""
    declared = {f.name for f in fields}
    values: dict[str, Any] = {}
    unset = [k for k in stored.values if k not in declared]
    shown: dict[str, Any] = {}
    for f in fields:
        key = PREFIX + f.name
        if f.type == "boolean":
            values[f.name] = shown[f.name] = form.get(key) == "on"
            continue
        if f.type == "multiselect":
            items = [str(v) for v in form.getlist(key)]
            values[f.name] = shown[f.name] = items
            continue
        raw = form.get(key)
        text = raw if isinstance(raw, str) else ""
        shown[f.name] = text if f.type != "secret" or text == MASK else ""
        if text == "":
            if f.name in stored.values:
                unset.append(f.name)
        elif f.type == "number" and NUMBER_RE.fullmatch(text.strip()):
            number = float(text)
            values[f.name] = (
                int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
            )
        else:
            values[f.name] = text
    return values, unset, shown


def _cards(place: ConfigPlace, views: list[ConfigView], outcome: Outcome) -> list[Card]:
    declared = {f.name for f in place.fields}
    cards: list[Card] = []
    for view in views:
        card = Card(
            view=view,
            values=display_values(place.fields, view),
            revision=view.revision,
            unknown=sorted(k for k in view.values if k not in declared),
        )
        if outcome.card == view.name:
            card.message = outcome.error
            card.errors = outcome.errors
            if outcome.submitted is not None:
                card.values = outcome.submitted
            if outcome.stale:
                card.stored = view.values
        cards.append(card)
    return cards


def _load(
    request: Request, user: UiUser, project_id: str, account: str | None, outcome: Outcome
) -> dict[str, Any]:
    caller = Caller.of_user(user)
    place = resolve_place(request, caller, project_id, account)
    state = app_state(request.app)
    services = state.services
    views = services.configs.list(place)
    record = state.registry.record(project_id)
    accounts = (
        [a.name for a in account_store.list_accounts(services.engine) if not a.disabled]
        if user.is_admin
        else []
    )
    return {
        "record": record,
        "project_id": project_id,
        "account": account,
        "accounts": accounts,
        "scope": place.owner,
        "fields": [FieldView.of(f) for f in place.fields],
        "cards": _cards(place, views, outcome),
        "active": next((v.name for v in views if v.active), "default"),
        "outcome": outcome,
        "page_url": page_url(project_id, account),
        "query": f"?{urlencode({'account': account})}" if account else "",
    }


async def _render(
    request: Request,
    user: UiUser,
    project_id: str,
    account: str | None,
    outcome: Outcome,
    status_code: int = 200,
) -> Response:
    context = await run_db(_load, request, user, project_id, account, outcome)
    return page(request, "projects/config.html", context, block="panel", status_code=status_code)


@router.get("/projects/{project_id}/config", summary="A project's configurations (yours)")
async def config_page(
    request: Request, project_id: str, user: UserDep, account: str | None = None
) -> Response:
    return await _render(request, user, project_id, account or None, Outcome())


async def _act(
    request: Request,
    user: UiUser,
    project_id: str,
    account: str | None,
    action: Callable[[ConfigPlace, Who], None],
    *,
    notice: str,
    on_error: Callable[[SteamharnessError], Outcome] | None = None,
) -> Response:
    """Run `action(place, who)` in a thread; answer the panel (htmx) or 303 (plain form), or
    the panel/page with the error."""
    caller = Caller.of_user(user)
    place = await run_db(resolve_place, request, caller, project_id, account)
    try:
        await run_db(action, place, who(request, caller))
    except SteamharnessError as exc:
        if not exc.code.startswith("config_"):
            raise  # an unknown project, a refused account…: the error page
        outcome = on_error(exc) if on_error is not None else Outcome(error=exc.message)
        status = PAGE_STATUS.get(exc.status, exc.status)
        return await _render(request, user, project_id, account, outcome, status_code=status)
    if not is_htmx(request):
        return RedirectResponse(page_url(project_id, account), status_code=303)
    return await _render(request, user, project_id, account, Outcome(notice=notice))


async def _act_on_card(
    request: Request,
    user: UiUser,
    project_id: str,
    account: str | None,
    name: str,
    action: Callable[[ConfigPlace, Who], None],
    *,
    notice: str,
) -> Response:
    """`_act` for an action on one configuration: its error shows on that configuration's card."""
    return await _act(
        request,
        user,
        project_id,
        account,
        action,
        notice=notice,
        on_error=lambda exc: Outcome(error=exc.message, card=name),
    )


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""


def _revision(form: FormData) -> int:
    raw = _text(form, "revision")
    if not raw.isdigit():
        raise ConfigurationRefused("the form lacks the revision it was drawn from; reload the page")
    return int(raw)


@router.post("/projects/{project_id}/config/save", summary="Save one configuration's values")
async def save_config(
    request: Request, project_id: str, user: UserDep, configs: ConfigsDep, account: str | None = None
) -> Response:
    form = await request.form()
    name = _text(form, "name")
    revision = _revision(form)
    caller = Caller.of_user(user)
    place = await run_db(resolve_place, request, caller, project_id, account)
    try:
        stored = await run_db(configs.show, place, name)
    except ConfigurationNotFound as exc:
        outcome = Outcome(error=f"{exc.message}: it was renamed or deleted meanwhile; nothing was saved")
        return await _render(request, user, project_id, account, outcome, status_code=409)
    values, unset, shown = parse_values(place.fields, form, stored)

    def action(place: ConfigPlace, by: Who) -> None:
        configs.set(place, name, revision=revision, values=values, unset=unset, who=by)

    def on_error(exc: SteamharnessError) -> Outcome:
        message = exc.message
        if isinstance(exc, ConfigurationConflict):
            message += (
                ". Your values are kept below; the values stored now are listed: save again to replace them."
            )
        elif isinstance(exc, ConfigurationInvalid):
            message = "Not saved: correct the fields marked below."
        typed_secret = any(
            f.secret
            and isinstance(form.get(PREFIX + f.name), str)
            and form.get(PREFIX + f.name) not in ("", MASK)
            for f in place.fields
        )
        if typed_secret:
            message += " A secret you typed is not shown again: type it again before saving."
        return Outcome(
            error=message,
            card=name,
            submitted=shown,
            errors=exc.fields if isinstance(exc, ConfigurationInvalid) else {},
            stale=isinstance(exc, ConfigurationConflict),
        )

    return await _act(request, user, project_id, account, action, notice=f"Saved {name}.", on_error=on_error)


@router.post(
    "/projects/{project_id}/config/create",
    name="config_create",
    summary="Create a configuration (or copy one)",
)
async def create_config(
    request: Request, project_id: str, user: UserDep, configs: ConfigsDep, account: str | None = None
) -> Response:
    form = await request.form()
    name = _text(form, "name")
    copy_of = _text(form, "copy_of") or None
    service = configs

    def action(place: ConfigPlace, by: Who) -> None:
        service.create(place, name, {}, by, copy_of=copy_of)

    def on_error(exc: SteamharnessError) -> Outcome:
        return Outcome(error=exc.message, create={"name": name, "copy_of": copy_of or ""})

    notice = f"Created {name}" + (f" as a copy of {copy_of}." if copy_of else ".")
    return await _act(request, user, project_id, account, action, notice=notice, on_error=on_error)


@router.post("/projects/{project_id}/config/rename", name="config_rename", summary="Rename a configuration")
async def rename_config(
    request: Request, project_id: str, user: UserDep, configs: ConfigsDep, account: str | None = None
) -> Response:
    form = await request.form()
    name, new_name, revision = _text(form, "name"), _text(form, "new_name"), _revision(form)
    service = configs

    def action(place: ConfigPlace, by: Who) -> None:
        service.rename(place, name, new_name, revision=revision, who=by)

    return await _act_on_card(
        request, user, project_id, account, name, action, notice=f"Renamed {name} to {new_name}."
    )


@router.post("/projects/{project_id}/config/delete", name="config_delete", summary="Delete a configuration")
async def delete_config(
    request: Request, project_id: str, user: UserDep, configs: ConfigsDep, account: str | None = None
) -> Response:
    form = await request.form()
    name, revision = _text(form, "name"), _revision(form)
    service = configs

    def action(place: ConfigPlace, by: Who) -> None:
        service.delete(place, name, revision=revision, who=by)

    return await _act_on_card(request, user, project_id, account, name, action, notice=f"Deleted {name}.")


@router.post(
    "/projects/{project_id}/config/activate",
    name="config_activate",
    summary="Make a configuration the active one",
)
async def activate_config(
    request: Request, project_id: str, user: UserDep, configs: ConfigsDep, account: str | None = None
) -> Response:
    form = await request.form()
    name = _text(form, "name")
    service = configs

    def action(place: ConfigPlace, by: Who) -> None:
        service.activate(place, name, by)

    return await _act_on_card(
        request, user, project_id, account, name, action, notice=f"{name} is now the active configuration."
    )


@router.get("/projects/{project_id}/config/export", summary="Download the configurations (secrets masked)")
async def export_config(
    request: Request, project_id: str, user: UserDep, account: str | None = None, secrets: str | None = None
) -> Response:
    if secrets is not None:
        exc = secrets_need_post(request.url.path)
        message = "Exporting with secrets is done with the page's Export form (a POST), never by a link."
        response = page(
            request,
            "error.html",
            {"status": exc.status, "title": "Not allowed", "message": message},
            status_code=exc.status,
        )
        response.headers["Allow"] = "POST"
        return response
    return await _export(request, project_id, user, account, with_secrets=False)


@router.post(
    "/projects/{project_id}/config/export",
    summary="Download the configurations as one JSON document (secrets=on: in clear, audited)",
)
async def export_config_post(
    request: Request, project_id: str, user: UserDep, account: str | None = None
) -> Response:
    form = await request.form()  # UserDep has checked its csrf_token
    with_secrets = form.get("secrets") == "on"
    await form.close()
    return await _export(request, project_id, user, account, with_secrets=with_secrets)


async def _export(
    request: Request, project_id: str, user: UiUser, account: str | None, *, with_secrets: bool
) -> Response:
    return await export_download(request, Caller.of_user(user), project_id, account, secrets=with_secrets)


@router.post("/projects/{project_id}/config/import", summary="Import an exported configurations document")
async def import_config(
    request: Request, project_id: str, user: UserDep, configs: ConfigsDep, account: str | None = None
) -> Response:
    form = await request.form()
    upload = form.get("file")
    mode = _text(form, "mode") or "merge"
    force = form.get("force") == "on"
    try:
        raw = await upload.read() if isinstance(upload, UploadFile) else b""
    finally:
        await form.close()
    service = configs
    # Parsed before the database work (off the event loop when large); a file that is not
    # JSON is refused once the caller may use the place, as every other refusal.
    doc: Any = None
    unreadable: ConfigurationRefused | None = None
    if raw.strip():
        try:
            doc = await run_parse(
                len(raw), parse_json, raw, what="the export file", error=ConfigurationRefused
            )
        except ConfigurationRefused as exc:
            unreadable = exc

    def action(place: ConfigPlace, by: Who) -> None:
        if not raw.strip():
            raise ConfigurationRefused("choose an export file to import")
        if unreadable is not None:
            raise unreadable
        service.import_(place, doc, mode=mode, force=force, who=by)

    return await _act(request, user, project_id, account, action, notice=f"Imported ({mode}).")

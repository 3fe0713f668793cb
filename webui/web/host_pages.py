"""The host's MCP servers and conversations in the browser.

    GET  /host/servers                              every configured server, or the problems
    POST /host/servers/{id}/connect                 connect (in a "Server check" conversation)
    GET  /host/conversations                        your conversations, and a form to start one
    POST /host/conversations                        start one: the defaults, or chosen servers
    GET  /host/conversations/{id}                   its servers, their tools, calls and requests
    POST /host/conversations/{id}/connect           connect one selected server (htmx: on load)
    POST /host/conversations/{id}/call              call a tool; returns at once ("running")
    GET  /host/conversations/{id}/activity?since=…  calls and requests; waits (bounded) for a change
    POST /host/conversations/{id}/close             close it: its connections and open requests end
    POST /host/conversations/{id}/disconnect        close its kept client of one server (audited)

A conversation is its owner's (admins may open any); anyone else gets 404. A tool call may
wait minutes for a person (a server's form or URL request, answered in /inbox), so
it runs in the background (webui.web.host_calls), not in the request: the POST answers
with the activity section at once, and that section long-polls `activity` with the state
it shows, which answers as soon as a call or a request of the conversation changes (hub
`interactions` events, and the calls' own completion). Everything here goes through
HostService, which audits; the pages only translate and present what webui.web.host_views
builds (which also decides what only admins see).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from webui import strict_json
from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.errors import ConfigError, NotFound, SteamharnessError
from webui.events import EventHub
from webui.host.service import HostService
from webui.parse_threads import run_parse
from webui.store import accounts as account_store
from webui.store.models import HostConversation
from webui.validation import field_errors, run_check
from webui.web import forms, host_views
from webui.web.deps import UserDep
from webui.web.host_calls import HostCalls
from webui.web.host_views import (
    Activity,
    ServerSection,
    ToolView,
    load_config,
    server_rows,
    server_section,
    shown_path,
    source_files,
)
from webui.web.state import app_state
from webui.web.templating import is_htmx, page

SERVERS_PAGE = "host/servers.html"
LIST_PAGE = "host/conversations.html"
CONVERSATION_PAGE = "host/conversation.html"
POLL_WAIT = 20.0  # one activity long-poll waits at most this long for a change
CHECK_TITLE = "Server check: {name}"


class ConversationClosed(SteamharnessError):
    code = "conversation_closed"
    status = 409


class NotConnected(SteamharnessError):
    code = "not_connected"
    status = 409


router = APIRouter(tags=["pages"])


def host_of(request: Request) -> HostService:
    return app_state(request.app).host


def calls_of(request: Request) -> HostCalls:
    return app_state(request.app).host_calls


def activity(request: Request, conv: HostConversation) -> Activity:
    return host_views.activity(host_of(request), calls_of(request).of(conv.id), conv)


async def _first(*waits: Callable[[], Awaitable[Any]]) -> None:
    """Return when the first of these finishes; the others are cancelled."""
    async with anyio.create_task_group() as tg:

        async def run(wait: Callable[[], Awaitable[Any]]) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(run, wait)


async def wait_for_change(request: Request, conv: HostConversation, since: str) -> Activity:
    """The conversation's activity once it differs from `since`, or after POLL_WAIT."""
    hub: EventHub = app_state(request.app).services.hub
    calls = calls_of(request)
    with hub.subscribe("interactions") as sub, anyio.move_on_after(POLL_WAIT):
        while True:
            changed = calls.changed(conv.id)  # taken before reading: no change falls between
            view = await run_db(activity, request, conv)
            if view.token != since or not view.live:
                return view
            await _first(sub.queue.get, changed.wait)
            if sub.lagged:
                break
    return await run_db(activity, request, conv)


def visible_conversation(request: Request, user: UiUser, conversation_id: str) -> HostConversation:
    """The owner's (or an admin's); 404 for everyone else, so ids are not confirmed."""
    try:
        conv = host_of(request).conversation(conversation_id)
    except NotFound:
        conv = None
    if conv is None or not (user.is_admin or conv.account_id == user.account_id):
        raise NotFound(f"conversation {conversation_id!r} not found")
    return conv


def _open(conv: HostConversation) -> None:
    if conv.closed_at is not None:
        raise ConversationClosed("this conversation is closed; start a new one")


def conversation_context(
    request: Request,
    user: UiUser,
    conv: HostConversation,
    *,
    sections: dict[str, ServerSection] | None = None,
) -> dict[str, Any]:
    host = host_of(request)
    config, problems = load_config(host)
    shown = {sid: server_section(host, config, conv, sid) for sid in conv.selection}
    shown.update(sections or {})
    if conv.account_id == user.account_id:
        owner = "you"
    else:
        account = account_store.get_account_by_id(host.engine, account_id=conv.account_id)
        owner = account.name if account else f"account {conv.account_id}"
    return {
        "conv": conv,
        "owner": owner,
        "sections": list(shown.values()),
        "config_problems": problems,
        "activity": activity(request, conv),
    }


# --------------------------------------------------------------------------- servers page


def _servers_page(
    request: Request, user: UiUser, *, notice: str | None = None, status: int = 200
) -> Response:
    host = host_of(request)
    config, problems = load_config(host)
    context = {
        "root": host.root if user.is_admin else None,
        "config": config,
        "problems": [shown_path(p, host.root, user) for p in problems],
        "files": [shown_path(str(p), host.root, user) for p in source_files(host.root)],
        "rows": server_rows(host, user, config) if config else [],
        "notice": notice,
    }
    return page(request, SERVERS_PAGE, context, status_code=status)


@router.get("/host/servers", summary="The MCP servers the host may connect to")
def servers_page(request: Request, user: UserDep) -> Response:
    return _servers_page(request, user)


@router.post("/host/servers/{server_id}/connect", summary="Connect to a server and list its tools")
async def connect_server(request: Request, server_id: str, user: UserDep) -> Response:
    """Connections belong to conversations: this one goes to your "Server check" conversation
    for the server (reused while open), which you can also use to call its tools."""
    host = host_of(request)
    config, _ = await run_db(load_config, host)
    if config is None:
        return await run_db(
            _servers_page, request, user, notice="The configuration has problems; fix them first.", status=409
        )
    server = config.servers.get(server_id)
    if server is None:
        raise NotFound(f"no configured MCP server has id {server_id!r}")
    title = CHECK_TITLE.format(name=server.name)
    conv = next(
        (
            c
            for c in await run_db(host.conversations, user.account_id)
            if c.closed_at is None and c.title == title and c.selection == [server_id]
        ),
        None,
    )
    if conv is None:
        conv = await run_db(
            host.create_conversation,
            account_id=user.account_id,
            title=title,
            selection=[server_id],
            actor=user.actor,
        )
    try:
        await host.connect(conv.id, server_id)
    except SteamharnessError as exc:
        notice = f"{server.name}: {exc.message}"
        return await run_db(_servers_page, request, user, notice=notice, status=502)
    return RedirectResponse(f"/host/servers#server-{server_id}", status_code=303)


# --------------------------------------------------------------------------- conversations


def _list_page(
    request: Request,
    user: UiUser,
    *,
    values: dict[str, Any] | None = None,
    problem: str | None = None,
    status: int = 200,
) -> Response:
    host = host_of(request)
    config, problems = load_config(host)
    context = {
        "conversations": host.conversations(user.account_id),
        "config": config,
        "config_problems": problems,
        "values": values or {"title": "", "mode": "defaults", "servers": []},
        "problem": problem,
    }
    return page(request, LIST_PAGE, context, status_code=status)


@router.get("/host/conversations", summary="Your conversations with external MCP servers")
def conversations_page(request: Request, user: UserDep) -> Response:
    return _list_page(request, user)


@router.post("/host/conversations", summary="Start a conversation with a selection of servers")
async def create_conversation(request: Request, user: UserDep) -> Response:
    form = await request.form()
    title = str(form.get("title") or "").strip()
    mode = str(form.get("selection") or "defaults")
    chosen = [str(v) for v in form.getlist("server")]
    agent = str(form.get("agent") or "")
    values: dict[str, Any] = {"title": title, "mode": mode, "servers": chosen} | (
        {"agent": agent} if agent else {}
    )
    problem = None
    if mode not in ("defaults", "choose", "agent"):
        problem = "Choose an agent, the defaults or some servers."
    elif mode == "agent" and not agent:
        problem = "Choose an agent."
    if problem:
        return await run_db(_list_page, request, user, values=values, problem=problem, status=422)
    selection = None if mode == "defaults" else chosen
    try:
        conv = await run_db(
            host_of(request).create_conversation,
            account_id=user.account_id,
            title=title or "Conversation",
            selection=selection,
            actor=user.actor,
            agent=agent if mode == "agent" else None,
        )
    except ConfigError as exc:
        problem = shown_path(exc.message, host_of(request).root, user)
        return await run_db(_list_page, request, user, values=values, problem=problem, status=422)
    return RedirectResponse(f"/host/conversations/{conv.id}", status_code=303)


def _conversation_page(
    request: Request,
    user: UiUser,
    conv: HostConversation,
    *,
    sections: dict[str, ServerSection] | None = None,
    status: int = 200,
) -> Response:
    context = conversation_context(request, user, conv, sections=sections)
    return page(request, CONVERSATION_PAGE, context, status_code=status)


@router.get("/host/conversations/{conversation_id}", summary="A conversation: its servers, tools and calls")
def conversation_page(request: Request, conversation_id: str, user: UserDep) -> Response:
    conv = visible_conversation(request, user, conversation_id)
    return _conversation_page(request, user, conv)


@router.post("/host/conversations/{conversation_id}/connect", summary="Connect one of its servers")
async def connect(request: Request, conversation_id: str, user: UserDep) -> Response:
    conv = await run_db(visible_conversation, request, user, conversation_id)
    _open(conv)
    form = await request.form()
    server_id = str(form.get("server") or "")
    if server_id not in conv.selection:
        raise NotFound(f"server {server_id!r} is not selected in this conversation")
    host = host_of(request)
    failure: str | None = None
    try:
        await host.connect(conv.id, server_id)
    except SteamharnessError as exc:
        failure = exc.message
    config, _ = await run_db(load_config, host)
    section = await run_db(server_section, host, config, conv, server_id)
    if failure and section.state != "ready":
        section.state, section.error = "failed", failure
    if is_htmx(request):
        context = {"conv": conv, "section": section}
        return page(request, CONVERSATION_PAGE, context, block="server", status_code=200)
    if failure:
        return await run_db(
            _conversation_page, request, user, conv, sections={server_id: section}, status=502
        )
    return RedirectResponse(f"/host/conversations/{conv.id}#server-{server_id}", status_code=303)


async def _arguments(tool: ToolView, form: Any, account: int | None) -> dict[str, Any] | None:
    """The call's arguments from the tool's form, or None after recording what is wrong.
    The server's schema is its own (hostile, maybe): checked in the checks' own threads."""
    if tool.problem:
        tool.arguments_json = str(form.get("arguments_json") or "").strip() or "{}"
        try:
            parsed = await run_parse(len(tool.arguments_json), strict_json.loads, tool.arguments_json)
        except ValueError as exc:
            tool.json_error = f"not valid JSON: {exc}"
            return None
        if not isinstance(parsed, dict):
            tool.json_error = "the arguments must be a JSON object"
            return None
        problems = await run_check(account, field_errors, tool.schema, parsed)
        if problems:
            tool.json_error = "; ".join(f"{k}: {v}" if k else v for k, v in problems.items())
            return None
        return parsed
    values, errors = forms.parse(tool.schema, form, prefix=tool.prefix)
    if not errors:
        errors = await run_check(account, field_errors, tool.schema, values)
    if errors:
        tool.values, tool.errors = values, errors
        return None
    return values


@router.post("/host/conversations/{conversation_id}/call", summary="Call a tool of a selected server")
async def call_tool(request: Request, conversation_id: str, user: UserDep) -> Response:
    conv = await run_db(visible_conversation, request, user, conversation_id)
    _open(conv)
    form = await request.form()
    server_id, tool_name = str(form.get("server") or ""), str(form.get("tool") or "")
    if server_id not in conv.selection:
        raise NotFound(f"server {server_id!r} is not selected in this conversation")
    host = host_of(request)
    config, _ = await run_db(load_config, host)
    section = await run_db(server_section, host, config, conv, server_id)
    if section.state != "ready":
        raise NotConnected(f"{section.name} is not connected; connect it first")
    tool = next((t for t in section.tools if t.name == tool_name), None)
    if tool is None:
        raise NotFound(f"{section.name} has no tool {tool_name!r}")
    arguments = await _arguments(tool, form, user.account_id)
    if arguments is None:
        if is_htmx(request):
            context = {"conv": conv, "section": section, "t": tool}
            response = page(request, CONVERSATION_PAGE, context, block="tool", status_code=422)
            response.headers["HX-Retarget"] = f"#{tool.dom}"
            response.headers["HX-Reswap"] = "outerHTML"
            return response
        return await run_db(
            _conversation_page, request, user, conv, sections={server_id: section}, status=422
        )
    calls_of(request).start(conv.id, server_id, tool.name, arguments, user.actor)
    if is_htmx(request):
        return page(
            request,
            CONVERSATION_PAGE,
            {"conv": conv, "activity": await run_db(activity, request, conv)},
            block="activity",
        )
    return RedirectResponse(f"/host/conversations/{conv.id}#activity", status_code=303)


@router.get(
    "/host/conversations/{conversation_id}/activity",
    summary="A conversation's calls and requests (HTML fragment; waits for a change)",
)
async def activity_fragment(
    request: Request, conversation_id: str, user: UserDep, since: str = ""
) -> Response:
    conv = await run_db(visible_conversation, request, user, conversation_id)
    view = await wait_for_change(request, conv, since) if since else await run_db(activity, request, conv)
    if not is_htmx(request):
        return await run_db(_conversation_page, request, user, conv)
    return page(request, CONVERSATION_PAGE, {"conv": conv, "activity": view}, block="activity")


@router.post("/host/conversations/{conversation_id}/disconnect", summary="Close a conversation's kept client")
async def disconnect(request: Request, conversation_id: str, user: UserDep) -> Response:
    """Ends the kept (host-owned) client of the `server` field, and its process; what ran on
    it is not replayed: the next call builds a new client."""
    conv = await run_db(visible_conversation, request, user, conversation_id)
    form = await request.form()
    server_id = str(form.get("server") or "")
    if server_id not in conv.selection:
        raise NotFound(f"server {server_id!r} is not selected in this conversation")
    await host_of(request).disconnect(conv.id, server_id, actor=user.actor)
    return RedirectResponse(f"/host/conversations/{conv.id}#server-{server_id}", status_code=303)


@router.post("/host/conversations/{conversation_id}/close", summary="Close a conversation")
async def close_conversation(request: Request, conversation_id: str, user: UserDep) -> Response:
    conv = await run_db(visible_conversation, request, user, conversation_id)
    await host_of(request).close_conversation(conv.id)
    return RedirectResponse(f"/host/conversations/{conv.id}", status_code=303)

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

A conversation is its owner's (admins may open any); anyone else gets 404. A tool call may
wait minutes for a person (a server's form or URL request, answered in /conversations), so
it runs in the app's background-call registry (webui.web.background), not in the request:
the POST
answers with the activity section at once, and that section long-polls `activity` with
the state it shows, which answers as soon as a call or a request of the conversation
changes (hub `interactions` events, and the calls' own completion). Everything here goes
through HostService, which audits; the pages only translate and present.

Only admins see a server's exact command line or URL and absolute file paths (they reveal
local paths); everyone else sees paths relative to the root config folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.errors import ConfigError, NotFound, SteamharnessError
from webui.events import EventHub
from webui.host.config import (
    SERVER_SUFFIXES,
    SERVERS_DIR,
    HostConfig,
    HostConfigError,
    ServerConfig,
    describe_command,
    resolve_env,
    resolve_headers,
)
from webui.host.service import Connection, HostService
from webui.store import accounts as account_store
from webui.store import interactions as interaction_store
from webui.store.models import HostCall, HostConversation, Interaction, utcnow
from webui.web import forms
from webui.web.background import BackgroundCall, BackgroundCalls
from webui.web.conversation_views import host_verdict
from webui.web.deps import UserDep
from webui.web.templating import is_htmx, page

log = logging.getLogger(__name__)

SERVERS_PAGE = "host/servers.html"
LIST_PAGE = "host/conversations.html"
CONVERSATION_PAGE = "host/conversation.html"
POLL_WAIT = 20.0  # one activity long-poll waits at most this long for a change
KEEP_FINISHED_SECONDS = 600.0
MAX_LAUNCHES = 500
CHECK_TITLE = "Server check: {name}"
SCALAR_TYPES = frozenset({"string", "number", "integer", "boolean"})


class ConversationClosed(SteamharnessError):
    code = "conversation_closed"
    status = 409


class NotConnected(SteamharnessError):
    code = "not_connected"
    status = 409


# --------------------------------------------------------------------------- background calls


@dataclass(kw_only=True)
class Launch(BackgroundCall):
    """A tool call started from a page, until the service has its result (or refused it).
    Its group is the conversation."""

    server_id: str
    tool: str
    arguments: dict[str, Any]
    actor: str
    started_at: datetime = field(default_factory=utcnow)
    phase: str = "connecting"  # connecting | calling | done
    row: HostCall | None = None
    error: str | None = None

    @property
    def conversation_id(self) -> str:
        return self.group


def host_calls() -> BackgroundCalls[Launch]:
    """The registry of the calls started from pages (the app's lifespan enters it)."""
    return BackgroundCalls(max_calls=MAX_LAUNCHES, keep_finished_seconds=KEEP_FINISHED_SECONDS)


class HostCalls:
    """Tool calls started from pages: connect the server, then call the tool through the
    host service. The calls run in the registry the app's lifespan owns (so a call outlives
    the request that started it, and ends with the app)."""

    def __init__(self, calls: BackgroundCalls[Launch], host: HostService) -> None:
        self.calls = calls
        self._host = host

    def start(
        self, conversation_id: str, server_id: str, tool: str, arguments: dict[str, Any], actor: str
    ) -> Launch:
        launch = Launch(
            id=f"launch_{secrets.token_hex(6)}",
            group=conversation_id,
            server_id=server_id,
            tool=tool,
            arguments=arguments,
            actor=actor,
        )
        return self.calls.start(launch, self._drive)

    def of(self, conversation_id: str) -> list[Launch]:
        return self.calls.of(conversation_id)

    def changed(self, conversation_id: str) -> anyio.Event:
        """Set at the next change of one of the conversation's calls (take it before reading)."""
        return self.calls.changed(conversation_id)

    async def _drive(self, launch: Launch) -> None:
        host = self._host
        try:
            await host.connect(launch.conversation_id, launch.server_id)
            launch.phase = "calling"
            self.calls.notify(launch.conversation_id)
            launch.row = await host.call_tool(
                launch.conversation_id, launch.server_id, launch.tool, launch.arguments, actor=launch.actor
            )
        except SteamharnessError as exc:
            launch.error = exc.message
        except Exception as exc:  # the top of a background task: every failure is the call's outcome
            log.exception("host tool call failed", exc_info=exc)
            launch.error = "The call failed unexpectedly; the server log has the details."
        finally:
            launch.phase = "done"


router = APIRouter(tags=["pages"])


def host_of(request: Request) -> HostService:
    return request.app.state.host


def calls_of(request: Request) -> HostCalls:
    return request.app.state.host_calls


def load_config(host: HostService) -> tuple[HostConfig | None, list[str]]:
    try:
        return host.config(), []
    except HostConfigError as exc:
        return None, exc.problems
    except ConfigError as exc:
        return None, [exc.message]


def shown_path(text: str, root: Path, user: UiUser) -> str:
    """Absolute paths for admins; paths relative to the root config folder for others."""
    if user.is_admin:
        return text
    return text.replace(f"{root}/", "").replace(str(root), ".")


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


# --------------------------------------------------------------------------- tools as forms


def tool_form_problem(schema: Any) -> str | None:
    """Why a tool's inputSchema gets a JSON text area instead of generated fields."""
    if not isinstance(schema, dict):
        return "the tool has no input schema object"
    text = json.dumps(schema)
    if '"$ref"' in text or '"$dynamicRef"' in text:
        return "the input schema uses references ($ref)"
    if schema.get("type", "object") != "object":
        return "the input schema is not an object of fields"
    props = schema.get("properties") or {}
    if not isinstance(props, dict):
        return "the input schema's properties are not an object"
    for name, prop in props.items():
        if not isinstance(prop, dict):
            return f"field {name!r} has no schema"
        kind = prop.get("type")
        if kind in SCALAR_TYPES:
            for key in ("oneOf", "anyOf"):
                options = prop.get(key)
                if options is not None and not (
                    isinstance(options, list) and all(isinstance(o, dict) and "const" in o for o in options)
                ):
                    return f"field {name!r} combines schemas ({key})"
            continue
        if kind == "array":
            items = prop.get("items")
            if isinstance(items, dict) and (items.get("type") in SCALAR_TYPES - {"boolean"}):
                continue
            return f"field {name!r} is a list of {_kind_of(items)}"
        return f"field {name!r} has type {kind!r}" if kind else f"field {name!r} has no single type"
    return None


def _kind_of(items: Any) -> str:
    if isinstance(items, dict) and isinstance(items.get("type"), str):
        return f"{items['type']}s"
    return "values without a single type"


@dataclass
class ToolView:
    server_id: str
    name: str
    title: str
    description: str | None
    schema: dict[str, Any]
    dom: str
    problem: str | None  # set: arguments are entered as JSON
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    arguments_json: str = "{}"
    json_error: str | None = None

    @property
    def prefix(self) -> str:
        return f"{self.dom}-"

    @property
    def fields(self) -> list[forms.Field]:
        return [] if self.problem else forms.fields(self.schema)


def tool_view(server_id: str, tool: types.Tool) -> ToolView:
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    digest = hashlib.sha256(f"{server_id}\0{tool.name}".encode()).hexdigest()[:12]
    return ToolView(
        server_id=server_id,
        name=tool.name,
        title=tool.title or tool.name,
        description=tool.description,
        schema=schema,
        dom=f"tool-{digest}",
        problem=tool_form_problem(schema),
    )


def schema_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, str]:
    """The tool's own schema checked before the call, per field ("" for the whole)."""
    try:
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        errors = list(validator.iter_errors(arguments))
    except SchemaError:
        return {}  # the server's schema is not valid JSON Schema: let the server judge
    out: dict[str, str] = {}
    for err in errors:
        path = list(err.absolute_path)
        out.setdefault(str(path[0]) if path else "", err.message)
    return out


# --------------------------------------------------------------------------- views


@dataclass
class ServerRow:
    """One configured server on the servers page."""

    server: ServerConfig
    source: str
    command: str | None  # admins only
    selected: bool
    host_owned: bool
    protocol: str
    problems: list[str]
    connections: list[tuple[HostConversation | None, Connection]]

    @property
    def ready(self) -> Connection | None:
        return next((c for _, c in self.connections if c.state == "ready"), None)


@dataclass
class ServerSection:
    """One selected server on a conversation's page."""

    id: str
    name: str
    configured: bool
    state: str  # not connected | connecting | ready | failed | closed | unavailable
    error: str | None
    tools: list[ToolView]
    host_owned: bool = False


@dataclass
class CallView:
    id: str
    server_id: str
    tool: str
    arguments_json: str
    status: str  # connecting | running | success | error | failed
    actor: str | None
    started_at: datetime
    finished_at: datetime | None = None
    texts: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    structured_json: str | None = None
    error: str | None = None

    @property
    def status_label(self) -> str:
        return {
            "connecting": "connecting…",
            "running": "running…",
            "success": "result",
            "error": "tool error",
            "failed": "failed",
        }.get(self.status, self.status)


@dataclass
class RequestView:
    interaction: Interaction
    server_name: str
    state: str


@dataclass
class Activity:
    calls: list[CallView]
    requests: list[RequestView]
    live: bool
    token: str

    @property
    def pending(self) -> list[RequestView]:
        return [r for r in self.requests if r.interaction.status == "pending"]


def _call_from_row(row: HostCall) -> CallView:
    view = CallView(
        id=row.id,
        server_id=row.server_id,
        tool=row.tool,
        arguments_json=pretty(row.arguments),
        status=row.status,
        actor=row.actor,
        started_at=row.created_at,
        finished_at=row.finished_at,
        error=row.error,
    )
    result = row.result or {}
    for item in result.get("content") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            view.texts.append(str(item.get("text", "")))
        else:
            mime = item.get("mimeType") or (item.get("resource") or {}).get("mimeType")
            view.others.append(f"{item.get('type', 'content')}{f' ({mime})' if mime else ''}")
    if "structuredContent" in result:
        view.structured_json = pretty(result["structuredContent"])
    return view


def _call_from_launch(launch: Launch) -> CallView:
    status = (
        "failed" if launch.phase == "done" else "connecting" if launch.phase == "connecting" else "running"
    )
    return CallView(
        id=launch.id,
        server_id=launch.server_id,
        tool=launch.tool,
        arguments_json=pretty(launch.arguments),
        status=status,
        actor=launch.actor,
        started_at=launch.started_at,
        error=launch.error,
    )


def server_names(config: HostConfig | None) -> dict[str, str]:
    return {sid: s.name for sid, s in config.servers.items()} if config else {}


def activity(request: Request, conv: HostConversation) -> Activity:
    host = host_of(request)
    config, _ = load_config(host)
    names = server_names(config)
    launches = calls_of(request).of(conv.id)
    in_flight = [x for x in launches if x.phase != "done"]
    views: list[CallView] = []
    for row in host.calls(conv.id):
        if row.status == "running" and in_flight:
            continue  # shown by its launch until it finishes
        views.append(_call_from_row(row))
    views += [_call_from_launch(x) for x in launches if x.phase != "done" or x.row is None]
    views.sort(key=lambda v: (v.started_at.replace(tzinfo=None), v.id), reverse=True)
    requests = [
        RequestView(ia, names.get(ia.server_id or "", ia.server_id or ""), "")
        for ia in interaction_store.list_for_conversation(host.engine, conversation_id=conv.id)
    ]
    for r in requests:
        r.state = host_verdict(r.interaction, r.server_name)
    live = bool(in_flight) or any(r.interaction.status == "pending" for r in requests)
    state = [(v.id, v.status) for v in views] + [(r.interaction.id, r.interaction.status) for r in requests]
    token = hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16]
    return Activity(views, requests, live, token)


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
    hub: EventHub = request.app.state.services.hub
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


def server_section(
    host: HostService, config: HostConfig | None, conv: HostConversation, server_id: str
) -> ServerSection:
    server = config.servers.get(server_id) if config else None
    section = ServerSection(
        id=server_id,
        name=server.name if server else server_id,
        configured=server is not None,
        state="not connected",
        error=None,
        tools=[],
        host_owned=bool(config and server_id in config.host_owned),
    )
    if config is None:
        section.state = "unavailable"
        section.error = "the MCP server configuration has problems; see the MCP servers page"
        return section
    if server is None:
        section.state = "unavailable"
        section.error = "this server is no longer configured"
        return section
    conn = host.connection_state(conv.id, server_id)
    if conn is not None:
        section.state, section.error = conn.state, conn.error
        if conn.state == "ready":
            section.tools = [tool_view(server_id, t) for t in conn.tools]
    return section


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


def _source_files(root: Path) -> list[Path]:
    folder = root / SERVERS_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SERVER_SUFFIXES)


def server_rows(request: Request, user: UiUser, config: HostConfig) -> list[ServerRow]:
    host = host_of(request)
    own = host.conversations(None if user.is_admin else user.account_id)
    rows: list[ServerRow] = []
    for sid, server in config.servers.items():
        problems: list[str] = []
        for resolve in (resolve_env, resolve_headers):
            try:
                resolve(server, host.environ)
            except ConfigError as exc:
                problems.append(shown_path(exc.message, config.root, user))
        connections: list[tuple[HostConversation | None, Connection]] = []
        if sid in config.host_owned:
            conn = host.connection_state("", sid)
            if conn is not None:
                connections.append((None, conn))
        else:
            for conv in own:
                if conv.closed_at is None and sid in conv.selection:
                    conn = host.connection_state(conv.id, sid)
                    if conn is not None:
                        connections.append((conv, conn))
        rows.append(
            ServerRow(
                server=server,
                source=shown_path(str(server.source), config.root, user),
                command=describe_command(server) if user.is_admin else None,
                selected=sid in config.default_servers,
                host_owned=sid in config.host_owned,
                protocol=config.protocol_overrides.get(sid, "auto"),
                problems=problems,
                connections=connections,
            )
        )
    return rows


def _servers_page(
    request: Request, user: UiUser, *, notice: str | None = None, status: int = 200
) -> Response:
    host = host_of(request)
    config, problems = load_config(host)
    context = {
        "root": host.root if user.is_admin else None,
        "config": config,
        "problems": [shown_path(p, host.root, user) for p in problems],
        "files": [shown_path(str(p), host.root, user) for p in _source_files(host.root)],
        "rows": server_rows(request, user, config) if config else [],
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
    values = {"title": title, "mode": mode, "servers": chosen}
    if mode not in ("defaults", "choose"):
        return await run_db(
            _list_page,
            request,
            user,
            values=values,
            problem="Choose the defaults or some servers.",
            status=422,
        )
    selection = None if mode == "defaults" else chosen
    try:
        conv = await run_db(
            host_of(request).create_conversation,
            account_id=user.account_id,
            title=title or "Conversation",
            selection=selection,
            actor=user.actor,
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


def _arguments(tool: ToolView, form: Any) -> dict[str, Any] | None:
    """The call's arguments from the tool's form, or None after recording what is wrong."""
    if tool.problem:
        tool.arguments_json = str(form.get("arguments_json") or "").strip() or "{}"
        try:
            parsed = json.loads(tool.arguments_json)
        except ValueError as exc:
            tool.json_error = f"not valid JSON: {exc}"
            return None
        if not isinstance(parsed, dict):
            tool.json_error = "the arguments must be a JSON object"
            return None
        problems = schema_problems(tool.schema, parsed)
        if problems:
            tool.json_error = "; ".join(f"{k}: {v}" if k else v for k, v in problems.items())
            return None
        return parsed
    values, errors = forms.parse(tool.schema, form, prefix=tool.prefix)
    if not errors:
        problems = schema_problems(tool.schema, values)
        errors = {k or "": v for k, v in problems.items()}
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
    arguments = _arguments(tool, form)
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


@router.post("/host/conversations/{conversation_id}/close", summary="Close a conversation")
async def close_conversation(request: Request, conversation_id: str, user: UserDep) -> Response:
    conv = await run_db(visible_conversation, request, user, conversation_id)
    await host_of(request).close_conversation(conv.id)
    return RedirectResponse(f"/host/conversations/{conv.id}", status_code=303)

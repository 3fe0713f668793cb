"""What the host pages show: configured servers, a conversation's servers with their
tools as forms, and its activity (tool calls and the servers' requests).

Everything here is built from HostService and the store; the routes
(webui.web.host_pages) only pick what to build and render it. Only admins see a server's
exact command line or URL and absolute file paths (they reveal local paths); everyone else
sees paths relative to the root config folder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import mcp_types as types

from webui.auth.ui import UiUser
from webui.errors import ConfigError
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
from webui.host.connection import Connection, ServerState
from webui.host.forms import tool_form_problem
from webui.host.service import HostService
from webui.store import interactions as interaction_store
from webui.store.models import HostCall, HostConversation, Interaction
from webui.web import forms
from webui.web.conversation_views import host_verdict
from webui.web.host_calls import Launch


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
    connections: list[tuple[HostConversation | None, ServerState]]

    @property
    def policy(self) -> str:
        return "kept per conversation" if self.host_owned else "per call"

    @property
    def ready(self) -> ServerState | None:
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
    client_open: bool = False  # a kept client of this conversation is open (it can be disconnected)


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
    call: CallView | None = None  # the tool call it was made during, if known


@dataclass
class Activity:
    calls: list[CallView]
    requests: list[RequestView]
    live: bool
    token: str

    @property
    def pending(self) -> list[RequestView]:
        return [r for r in self.requests if r.interaction.status == "pending"]


def call_from_row(row: HostCall) -> CallView:
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


def call_from_launch(launch: Launch) -> CallView:
    status = (
        "failed" if launch.phase == "done" else "connecting" if launch.phase == "connecting" else "running"
    )
    return CallView(
        id=launch.call_id,  # the id its row gets: one DOM id from start to finish
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


def activity(host: HostService, launches: list[Launch], conv: HostConversation) -> Activity:
    """The conversation's calls (recorded ones, and `launches` the service has no row of
    yet) and requests, newest first; `token` names this state for a long-poll."""
    config, _ = load_config(host)
    names = server_names(config)
    in_flight = [x for x in launches if x.phase != "done"]
    in_flight_ids = {x.call_id for x in in_flight}
    views: list[CallView] = []
    for row in host.calls(conv.id):
        # Shown by its launch until the launch is done, even if the row finished meanwhile:
        # the launches were looked at before the rows were read.
        if row.id in in_flight_ids:
            continue
        views.append(call_from_row(row))
    views += [call_from_launch(x) for x in launches if x.phase != "done" or x.row is None]
    views.sort(key=lambda v: (v.started_at.replace(tzinfo=None), v.id), reverse=True)
    requests = [
        RequestView(ia, names.get(ia.server_id or "", ia.server_id or ""), "")
        for ia in interaction_store.list_for_conversation(host.engine, conversation_id=conv.id)
    ]
    by_id = {v.id: v for v in views}
    for r in requests:
        r.state = host_verdict(r.interaction, r.server_name)
        r.call = by_id.get(r.interaction.host_call_id or "")
    live = bool(in_flight) or any(r.interaction.status == "pending" for r in requests)
    state = [(v.id, v.status) for v in views] + [(r.interaction.id, r.interaction.status) for r in requests]
    token = hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16]
    return Activity(views, requests, live, token)


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
    section.client_open = conn is not None and conn.kept and isinstance(conn, Connection)
    if conn is not None:
        section.state, section.error = conn.state, conn.error
        if conn.state == "ready":
            section.tools = [tool_view(server_id, t) for t in conn.tools]
    return section


# --------------------------------------------------------------------------- servers page


def source_files(root: Path) -> list[Path]:
    folder = root / SERVERS_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SERVER_SUFFIXES)


def server_rows(host: HostService, user: UiUser, config: HostConfig) -> list[ServerRow]:
    own = host.conversations(None if user.is_admin else user.account_id)
    rows: list[ServerRow] = []
    for sid, server in config.servers.items():
        problems: list[str] = []
        for resolve in (resolve_env, resolve_headers):
            try:
                resolve(server, host.environ)
            except ConfigError as exc:
                problems.append(shown_path(exc.message, config.root, user))
        connections: list[tuple[HostConversation | None, ServerState]] = []
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

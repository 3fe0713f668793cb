"""The project MCP page and Try it.

    GET  /projects/{id}/mcp?target=…[&config=…]   the page; for htmx, only its `target` block
    POST /projects/{id}/mcp/try?target=…[&config=…]  run one tool through the real MCP endpoint
    GET  /projects/{id}/mcp/try/{call_id}     wait (bounded) for a running call's outcome

The page shows only `<YOUR_API_KEY>`: it never reads or echoes a stored key. Try it acts as
an MCP client of the app's own endpoint with a server-side key of the logged-in user. That
raw key lives in this process's memory only (never in a page, a log or the audit) and is
revoked when the app shuts down. The client declares no elicitation, so a run that asks a
question ends the call with `interaction_required` and stays waiting in the store, where
the conversation view answers it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import secrets
import shlex
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy.engine import Engine

from webui import admin, strict_json
from webui.audit.log import AuditLog
from webui.auth.ui import UiUser
from webui.blocking import run_db
from webui.configs.places import account_place
from webui.configs.service import ConfigService
from webui.errors import NotFound, ProjectError
from webui.mcp.binding import chosen_config
from webui.mcp.catalog import Catalog
from webui.projects.registry import ProjectRegistry, Resolved
from webui.store import accounts as account_store
from webui.store import runs as run_store
from webui.store.models import ProjectRecord
from webui.web import forms
from webui.web.background import BackgroundCall, BackgroundCalls
from webui.web.deps import RegistryDep, UserDep
from webui.web.templating import is_htmx, page
from webui.workflows.project import Param
from webui.workflows.targets import Target, parse_target

log = logging.getLogger(__name__)

KEY_PLACEHOLDER = "<YOUR_API_KEY>"
HEADER_TEMPLATE = f"Authorization: Bearer {KEY_PLACEHOLDER}"
VSCODE_INPUT = "workflow-api-key"
TRY_IT_AGENT = "steamharness-try-it"  # the User-Agent the audit rows of Try it calls carry
TRY_IT_KEY_NAME = "try-it (server-side)"
FIRST_WAIT = 10.0  # the POST answers with the outcome if it arrives this soon, else "running…"
POLL_WAIT = 20.0  # each follow-up GET waits at most this long before answering "still running"
DEFAULT_CALL_SECONDS = 600.0  # bound for a tool without timeoutSeconds
CALL_SLACK_SECONDS = 60.0  # queueing and worker start-up on top of the entrypoint's timeout
KEEP_FINISHED_SECONDS = 600.0
MAX_CALLS = 200


# --------------------------------------------------------------------------- addresses, configs


def with_config(url: str, config: str | None) -> str:
    """`url` (which has a query already) with `&config=NAME` when a configuration is picked;
    configuration names are URL-safe."""
    return f"{url}&config={config}" if config else url


def endpoint_url(request: Request, project_id: str, target: str, config: str | None = None) -> str:
    """The project's MCP endpoint as this request reached the server (scheme, host, root path)."""
    base = f"{str(request.base_url).rstrip('/')}/api/workflows/{project_id}/mcp?target={target}"
    return with_config(base, config)


WILDCARD_BINDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def own_endpoint_url(request: Request, project_id: str, target: str, config: str | None = None) -> str:
    """Where Try it reaches the project's endpoint: the configured internal URL, else the
    listening socket this request arrived on; never a host the request names (its Host
    header is the client's to choose). A server bound to every interface is reached over
    loopback, whichever interface the page came through."""
    settings = request.app.state.settings
    if settings.internal_url:
        base = settings.internal_url
    else:
        server = request.scope.get("server")
        host, port = (server[0], server[1]) if server else (settings.host, settings.port)
        if settings.host in WILDCARD_BINDS:
            host = WILDCARD_BINDS[settings.host]
        base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return with_config(f"{base}/api/workflows/{project_id}/mcp?target={target}", config)


def page_url(project_id: str, target: str, config: str | None = None) -> str:
    return with_config(f"/projects/{project_id}/mcp?target={target}", config)


def try_url(project_id: str, target: str, config: str | None = None) -> str:
    return with_config(f"/projects/{project_id}/mcp/try?target={target}", config)


def call_url(project_id: str, call_id: str) -> str:
    return f"/projects/{project_id}/mcp/try/{call_id}"


def server_name_for(project_id: str) -> str:
    """The client-side server name; the same as the endpoint's serverInfo name
    (`webui.mcp.catalog.server_name`), known here without loading the project."""
    return f"workflow-{project_id}"


@dataclass(frozen=True)
class ClientConfig:
    id: str
    title: str
    where: str
    text: str


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def client_configs(name: str, url: str, folder: str) -> list[ClientConfig]:
    """Copyable client set-ups, each exactly as the client expects it (the generic one is
    the common `mcpServers` shape: url and headers). Only the placeholder stands where the key goes."""
    bearer = f"Bearer {KEY_PLACEHOLDER}"
    generic = {"mcpServers": {name: {"url": url, "headers": {"Authorization": bearer}}}}
    vscode = {
        "inputs": [
            {
                "type": "promptString",
                "id": VSCODE_INPUT,
                "description": "steamharness API key",
                "password": True,
            }
        ],
        "servers": {
            name: {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer ${{input:{VSCODE_INPUT}}}"},
            }
        },
    }
    claude = shlex.join(
        ["claude", "mcp", "add", "--transport", "http", name, url, "--header", HEADER_TEMPLATE]
    )
    stdio = {"mcpServers": {name: {"command": "steamharness", "args": ["mcp", folder]}}}
    return [
        ClientConfig(
            "generic", "Generic MCP client (mcpServers JSON)", "Your client's MCP settings.", _json(generic)
        ),
        ClientConfig("claude-code", "Claude Code", "Run in a terminal.", claude),
        ClientConfig(
            "vscode",
            "VS Code",
            ".vscode/mcp.json — VS Code asks for the key once and stores it.",
            _json(vscode),
        ),
        ClientConfig(
            "cursor", "Cursor", "~/.cursor/mcp.json, or .cursor/mcp.json in a project.", _json(generic)
        ),
        ClientConfig(
            "stdio",
            "Local (stdio)",
            "For a copy of the project folder on your own machine: steamharness mcp runs it "
            "locally over stdio (no server, no key; always the folder's current state).",
            _json(stdio),
        ),
    ]


# --------------------------------------------------------------------------- catalog view


@dataclass(frozen=True)
class ParamRow:
    name: str
    title: str | None
    type: str
    required: bool
    default: str | None  # JSON text, None when there is no default
    options: list[tuple[str, str | None]]  # (JSON value, label)
    format: str | None
    description: str | None


@dataclass(frozen=True)
class ToolView:
    dom: str  # a selector-safe id part (tool names may contain dots)
    name: str
    title: str | None
    description: str | None
    params: list[ParamRow]
    schema: dict[str, Any]
    schema_json: str
    fields: list[forms.Field]

    @property
    def prefix(self) -> str:
        return f"{self.dom}-"


def _param_row(p: Param) -> ParamRow:
    kind = f"{p.type} (multiple)" if p.multiple and p.type != "checkboxes" else p.type
    return ParamRow(
        name=p.name,
        title=p.title,
        type=kind,
        required=p.required,
        default=json.dumps(p.default, ensure_ascii=False) if p.has_default else None,
        options=[(json.dumps(o.value, ensure_ascii=False), o.label) for o in p.options],
        format=p.format,
        description=p.description,
    )


def catalog_view(resolved: Resolved) -> list[ToolView]:
    """The tools exactly as the endpoint lists them for this target (server file mode)."""
    catalog = Catalog.build(resolved.project, file_mode="server")
    views: list[ToolView] = []
    for index, tool in enumerate(catalog.tools, start=1):
        ep = catalog.entrypoint(tool.name)
        schema = dict(tool.input_schema)
        views.append(
            ToolView(
                dom=f"t{index}",
                name=tool.name,
                title=tool.title,
                description=tool.description,
                params=[_param_row(p) for p in ep.params] if ep is not None else [],
                schema=schema,
                schema_json=_json(schema),
                fields=forms.fields(schema),
            )
        )
    return views


@dataclass(frozen=True)
class TargetChoice:
    label: str  # what goes into ?target=
    text: str
    detail: str | None
    href: str


def target_choices(
    registry: ProjectRegistry, project_id: str, config: str | None = None
) -> list[TargetChoice]:
    online = registry.online_versions(project_id)
    try:
        revision: str | None = registry.draft_revision(project_id)
    except (OSError, ProjectError):
        revision = None  # the folder is gone; resolving the draft explains why
    latest = f"now {online[0].version}" if online else "no online version"
    choices = [
        TargetChoice("draft", "Draft", revision, page_url(project_id, "draft", config)),
        TargetChoice("latest", "Latest", latest, page_url(project_id, "latest", config)),
    ]
    choices += [
        TargetChoice(v.version, v.version, None, page_url(project_id, v.version, config)) for v in online
    ]
    return choices


@dataclass(frozen=True)
class ConfigChoice:
    name: str | None  # what goes into &config= (None: the active one at each call)
    text: str
    href: str


@dataclass(frozen=True)
class ConfigUse:
    """Which of the viewer's configurations tool calls will use: the one picked with
    `&config=`, else the account's active one (at each call; shown as it is now)."""

    picked: str | None
    name: str | None  # None: the picked configuration does not exist
    revision: int | None
    problems: dict[str, str]
    missing: str | None
    choices: list[ConfigChoice]


def config_use(
    configs: ConfigService, user: UiUser, resolved: Resolved, target: str, picked: str | None
) -> ConfigUse | None:
    """None for a project that declares no configuration fields."""
    project = resolved.project
    if not project.config_fields:
        return None
    place = account_place(
        project.id, project.config_fields, account_id=user.account_id, account_name=user.name
    )
    views = configs.list(place)
    used = (
        next((v for v in views if v.name == picked), None) if picked else next(v for v in views if v.active)
    )
    choices = [ConfigChoice(None, "Active (at each call)", page_url(project.id, target))]
    choices += [ConfigChoice(v.name, v.name, page_url(project.id, target, v.name)) for v in views]
    if used is None:
        missing = (
            f"You have no configuration {picked!r} for this project: calls through this URL fail "
            "with config_not_found."
        )
        return ConfigUse(picked, None, None, {}, missing, choices)
    return ConfigUse(picked, used.name, used.revision, used.problems, None, choices)


# --------------------------------------------------------------------------- Try it


@dataclass(frozen=True)
class Outcome:
    kind: str  # result | rpc_error | failed
    payload: dict[str, Any] | None = None
    is_error: bool = False
    code: int | None = None
    message: str | None = None

    @property
    def error(self) -> dict[str, Any]:
        value = (self.payload or {}).get("error")
        return value if isinstance(value, dict) else {}

    @property
    def payload_json(self) -> str:
        return _json(self.payload)

    @property
    def output_json(self) -> str:
        return _json((self.payload or {}).get("output"))


@dataclass(kw_only=True)
class TryCall(BackgroundCall):
    account_id: int
    project_id: str
    target: str
    tool: str
    arguments: dict[str, Any]
    config: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    outcome: Outcome | None = None

    @property
    def url(self) -> str:
        return call_url(self.project_id, self.id)

    def settle(self, outcome: Outcome) -> None:
        """Record the outcome (the registry marks the call finished when its work returns)."""
        self.outcome = outcome
        run_id = (outcome.payload or {}).get("runId")
        if isinstance(run_id, str):
            self.run_id = run_id


def _leaf(exc: BaseException) -> BaseException:
    """The one real error inside the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _result_outcome(result: types.CallToolResult) -> Outcome:
    payload = result.structured_content
    if payload is None:
        text = next((c.text for c in result.content if isinstance(c, types.TextContent)), "")
        try:
            parsed = strict_json.loads(text)
        except ValueError:
            parsed = {"text": text}
        payload = parsed if isinstance(parsed, dict) else {"value": parsed}
    return Outcome(kind="result", payload=payload, is_error=bool(result.is_error))


def try_it_calls() -> BackgroundCalls[TryCall]:
    """The registry of Try it calls (the app's lifespan enters it)."""
    return BackgroundCalls(max_calls=MAX_CALLS, keep_finished_seconds=KEEP_FINISHED_SECONDS)


class TryIt:
    """Try it calls and the per-account server-side keys they use. The calls run in the
    registry the app's lifespan owns, so a call outlives the request that started it (a long
    run is not cancelled because the browser's request ended) and ends with the app."""

    def __init__(
        self,
        calls: BackgroundCalls[TryCall],
        engine: Engine,
        audit: AuditLog,
        *,
        max_keys: int = admin.DEFAULT_MAX_KEYS,
    ) -> None:
        self.calls = calls
        self._engine = engine
        self._audit = audit
        self._max_keys = max_keys  # the account's key cap, which the Try it key counts against
        self._keys: dict[int, tuple[str, str]] = {}  # account id -> (key id, raw key)

    def key_for(self, user: UiUser) -> str:
        """The account's server-side key, created on first use (or after a revocation)."""
        held = self._keys.get(user.account_id)
        if held is not None:
            row = account_store.get_key(self._engine, key_id=held[0])
            if row is not None and row.revoked_at is None:
                return held[1]
        raw, row = admin.create_key(
            self._engine,
            user=user.name,
            projects=None,
            scopes=["runs.create"],
            name=TRY_IT_KEY_NAME,
            actor=user.actor,
            source="ui",
            audit=self._audit,
            max_keys=self._max_keys,
        )
        self._keys[user.account_id] = (row.id, raw)
        return raw

    async def start(
        self,
        user: UiUser,
        *,
        url: str,
        target: str,
        resolved: Resolved,
        tool: str,
        arguments: dict[str, Any],
        config: str | None = None,
    ) -> TryCall:
        raw = await run_db(self.key_for, user)
        call = TryCall(
            id=secrets.token_urlsafe(12),
            account_id=user.account_id,
            project_id=resolved.project.id,
            target=target,
            tool=tool,
            arguments=arguments,
            config=config,
        )
        ep = resolved.project.entrypoint(tool)
        seconds = ep.timeout_seconds if ep is not None and ep.timeout_seconds else DEFAULT_CALL_SECONDS
        bound = seconds + CALL_SLACK_SECONDS
        return self.calls.start(call, functools.partial(self._drive, url=url, raw=raw, bound=bound))

    def get(self, call_id: str, user: UiUser, project_id: str) -> TryCall:
        call = self.calls.get(call_id)
        if call is None or call.account_id != user.account_id or call.project_id != project_id:
            raise NotFound("this Try it call is unknown or has expired; run the tool again")
        return call

    async def find_run(self, call: TryCall) -> None:
        """Fill in the run id of a call still running (its session's run, once there is one)."""
        if call.run_id is None and call.session_id is not None:
            call.run_id = await run_db(self._run_of_session, call)

    def revoke_keys(self) -> None:
        for key_id, _ in self._keys.values():
            with contextlib.suppress(NotFound):
                admin.revoke_key(self._engine, key_id=key_id, actor="try-it", source="ui", audit=self._audit)
        self._keys.clear()

    def _run_of_session(self, call: TryCall) -> str | None:
        """A running call's run id: each call opens its own MCP session, which has one run."""
        rows = run_store.list_runs(self._engine, project_ids=[call.project_id], source="mcp", limit=50)
        return next((r.id for r in rows if r.session_id == call.session_id), None)

    async def _drive(self, call: TryCall, *, url: str, raw: str, bound: float) -> None:
        async def remember_session(response: httpx2.Response) -> None:
            sid = response.headers.get("mcp-session-id")
            if sid and call.session_id is None:
                call.session_id = sid

        headers = {
            "Authorization": f"Bearer {raw}",
            "User-Agent": TRY_IT_AGENT,
            "X-Steamharness-Source": "try-it",
        }
        try:
            with anyio.fail_after(bound):
                async with (
                    httpx2.AsyncClient(
                        headers=headers,
                        trust_env=False,  # the key goes to this server only, never via an env proxy
                        timeout=httpx2.Timeout(30, read=bound),
                        event_hooks={"response": [remember_session]},
                    ) as http,
                    Client(
                        streamable_http_client(url, http_client=http),
                        mode="legacy",
                        client_info=types.Implementation(name=TRY_IT_AGENT, version="1"),
                    ) as client,
                ):
                    result = await client.call_tool(call.tool, call.arguments)
            call.settle(_result_outcome(result))
        except Exception as exc:  # the top of a background task: every failure is the call's outcome
            call.settle(self._failure(_leaf(exc), url, bound))

    @staticmethod
    def _failure(exc: BaseException, url: str, bound: float) -> Outcome:
        if isinstance(exc, MCPError):
            return Outcome(kind="rpc_error", code=exc.code, message=exc.message)
        if isinstance(exc, TimeoutError | httpx2.ReadTimeout):
            return Outcome(
                kind="failed", message=f"No answer within {bound:.0f} seconds; the call was cancelled."
            )
        if isinstance(exc, httpx2.HTTPError):
            # Details stay in the server log: the page only says the server's own endpoint failed.
            log.warning("Try it could not reach %s: %s", url, exc)
            return Outcome(kind="failed", message="Could not reach the MCP endpoint of this server.")
        log.exception("Try it call failed", exc_info=exc)
        return Outcome(kind="failed", message="The call failed unexpectedly; the server log has the details.")


router = APIRouter(tags=["pages"])


# --------------------------------------------------------------------------- page


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


def _resolve(
    registry: ProjectRegistry, project_id: str, target: Target
) -> tuple[Resolved | None, str | None]:
    try:
        return registry.resolve(project_id, target), None
    except (NotFound, ProjectError) as exc:
        return None, exc.message


def _render(
    request: Request,
    user: UiUser,
    registry: ProjectRegistry,
    record: ProjectRecord,
    target: Target,
    *,
    config: str | None = None,
    try_state: TryState | None = None,
    status_code: int = 200,
) -> Response:
    resolved, problem = _resolve(registry, record.id, target)
    url = endpoint_url(request, record.id, target.label, config)
    configs: ConfigService = request.app.state.services.configs
    # Only administrators see the server's folder; everyone else gets a placeholder for
    # their own copy of the project (the server's paths are not theirs to use).
    folder = record.root if user.is_admin else f"/path/to/{record.name}"
    context = {
        "record": record,
        "target": target,
        "resolved": resolved,
        "problem": problem,
        "choices": target_choices(registry, record.id, config),
        "config_use": config_use(configs, user, resolved, target.label, config) if resolved else None,
        "endpoint": url,
        "header_template": HEADER_TEMPLATE,
        "configs": client_configs(server_name_for(record.id), url, folder),
        "tools": catalog_view(resolved) if resolved is not None else [],
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
    request: Request,
    project_id: str,
    user: UserDep,
    registry: RegistryDep,
    target: str | None = None,
    config: str | None = None,
) -> Response:
    record = visible_record(registry, user, project_id)
    picked = chosen_config(config, "config")
    if target is None:
        default = "latest" if registry.online_versions(project_id) else "draft"
        return RedirectResponse(page_url(project_id, default, picked), status_code=303)
    return _render(request, user, registry, record, parse_target(target), config=picked)


@router.post("/projects/{project_id}/mcp/try", summary="Try a tool through the MCP endpoint")
async def try_tool(
    request: Request,
    project_id: str,
    user: UserDep,
    registry: RegistryDep,
    target: str | None = None,
    config: str | None = None,
) -> Response:
    record = await run_db(visible_record, registry, user, project_id)
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
        try_it: TryIt = request.app.state.try_it
        state.call = await try_it.start(
            user,
            url=own_endpoint_url(request, project_id, chosen.label, picked),
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
            _render,
            request,
            user,
            registry,
            record,
            chosen,
            config=picked,
            try_state=state,
            status_code=status,
        )
    )


@router.get("/projects/{project_id}/mcp/try/{call_id}", summary="The outcome of a Try it call")
async def try_outcome(
    request: Request, project_id: str, call_id: str, user: UserDep, registry: RegistryDep
) -> Response:
    record = await run_db(visible_record, registry, user, project_id)
    try_it: TryIt = request.app.state.try_it
    call = try_it.get(call_id, user, project_id)
    await try_it.calls.wait_finished(call, POLL_WAIT)
    await try_it.find_run(call)
    if is_htmx(request):
        return page(request, "projects/_try_outcome.html", {"call": call})
    state = TryState(tool=call.tool, values=call.arguments, errors={}, call=call)
    return await run_db(
        functools.partial(
            _render,
            request,
            user,
            registry,
            record,
            parse_target(call.target),
            config=call.config,
            try_state=state,
        )
    )

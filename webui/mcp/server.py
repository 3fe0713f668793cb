"""The lowlevel MCP `Server` both transports serve: catalog from the binding, calls
through the bridge, request state sealed by the SDK's boundary, and a catch-all so no
exception text ever reaches a client."""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from webui.mcp.binding import current_binding
from webui.mcp.bridge import CallBridge, CallResult
from webui.mcp.catalog import server_name
from webui.mcp.logs import set_level
from webui.mcp.metering import OperationMetrics
from webui.mcp.operations import served_requests
from webui.mcp.results import error_result
from webui.mcp.tasks import TASKS_EXTENSION, TaskParams, Tasks, TaskUpdateParams
from webui.projects.limits import ProjectLimits
from webui.services import Services, persistent_secret, request_state_key
from webui.settings import Settings

log = logging.getLogger(__name__)

REQUEST_STATE_AUDIENCE = "steamharness-workflow-mcp"


class WorkflowServer(Server[Any]):
    """One `Server` for every project: its identity (`workflow-<id>`, version, title)
    comes from the binding of the connection or request being served."""

    _fallback: dict[str, Any]

    def _identity(self, field: str) -> Any:
        binding = current_binding.get(None)
        if binding is None:
            return self.__dict__.setdefault("_fallback", {}).get(field)
        project = binding.catalog.project
        return {
            "name": server_name(project),
            "version": binding.version or project.version or "0.0.0",
            "title": project.name,
            "description": project.description or None,
        }[field]

    def _set_fallback(self, field: str, value: Any) -> None:
        self.__dict__.setdefault("_fallback", {})[field] = value

    @property
    def name(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self._identity("name")

    @name.setter
    def name(self, value: str) -> None:
        self._set_fallback("name", value)

    @property
    def version(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self._identity("version")

    @version.setter
    def version(self, value: str) -> None:
        self._set_fallback("version", value)

    @property
    def title(self) -> str | None:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self._identity("title")

    @title.setter
    def title(self, value: str | None) -> None:
        self._set_fallback("title", value)

    @property
    def description(self) -> str | None:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self._identity("description")

    @description.setter
    def description(self, value: str | None) -> None:
        self._set_fallback("description", value)

    @property
    def server_info_stamp(self) -> dict[str, Any]:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The public hook the SDK's runner stamps into 2026-era results: the SDK computes it
        once per server, but here the identity is the binding's, so each access dumps it
        afresh (a new dict, which the caller owns)."""
        return self.server_info.model_dump(by_alias=True, mode="json", exclude_none=True)


def project_server(
    services: Services, settings: Settings, *, limits: ProjectLimits | None = None, metrics: bool = False
) -> Server[Any]:
    """The MCP server over `services`, as `serve` and `steamharness mcp` build it: the call
    bridge over its run service (progress and task timing from `settings`, task ids bound with
    the data dir's key), the request state sealed with its key. `limits`: the projects' run
    limits (HTTP; stdio has none); `metrics`: time every request for `/metrics` (`serve`). It
    serves the binding `current_binding` holds in the context it runs in."""
    bridge = CallBridge(
        runs=services.runs,
        interactions=services.interactions,
        files=services.files,
        audit=services.audit,
        configs=services.configs,
        limits=limits,
        progress_interval=settings.progress_interval_seconds,
        task_key=persistent_secret(settings, "task-id.key"),
        task_after=settings.task_after_seconds,
        task_poll_interval_ms=settings.task_poll_interval_ms,
    )
    return build_server(
        bridge=bridge,
        state_key=request_state_key(settings),
        state_ttl=settings.request_state_ttl_seconds,
        metrics=metrics,
    )


def build_server(
    *, bridge: CallBridge, state_key: bytes, state_ttl: float, metrics: bool = False
) -> Server[Any]:
    """`metrics`: time every request for `/metrics` (`serve`; stdio has no endpoint)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=current_binding.get().catalog.tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> CallResult:
        binding = current_binding.get()
        try:
            return await bridge.call(ctx, binding, params)
        except MCPError:
            raise
        except Exception:
            log.exception("tools/call %s failed inside the server", params.name)
            ep = binding.catalog.entrypoint(params.name)
            if ep is None:
                raise MCPError(-32603, "Internal error") from None
            return error_result(None, ep, "failed", "internal", "The call failed inside the server.")

    # A workflow server has tools only; empty prompt and resource lists (rather than
    # -32601) let generic clients and the conformance suite enumerate everything, and what
    # is declared is served: reading a resource or getting a prompt says it does not exist
    # (-32602), completion offers nothing.
    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[])

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        raise MCPError(INVALID_PARAMS, "Resource not found", data={"uri": str(params.uri)})  # SEP-2164

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name[:200]}")

    async def complete(
        ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        return types.CompleteResult(completion=types.Completion(values=[]))

    server = WorkflowServer(
        "steamharness-workflow",
        on_list_prompts=list_prompts,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_get_prompt=get_prompt,
        on_completion=complete,
        on_list_tools=list_tools,
        # The called tool's schema from the request's catalog: the SDK checks each
        # `Mcp-Param-*` header against its x-mcp-header argument (2026-07-28 HTTP only).
        get_tool_input_schema=lambda name: current_binding.get().catalog.schemas.get(name),
    )

    # Registered as a plain handler: its result may also be a task (a dict the tasks
    # extension owns), which the typed `on_call_tool` does not admit.
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    # Declares `logging` (both eras: at 2026-07-28 a request opts in by its `_meta`); the SDK
    # refuses logging/setLevel itself at 2026-07-28 (-32601). Added by hand: the constructor's
    # `on_set_logging_level` warns that the capability is deprecated.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)

    def principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
        return current_binding.get().principal

    server.middleware.append(
        RequestStateBoundary(
            RequestStateSecurity(keys=[state_key], ttl=state_ttl, bind_principal=principal),
            default_audience=REQUEST_STATE_AUDIENCE,
        )
    )
    tasks = getattr(bridge, "tasks", None)  # tests may build a server without a bridge
    if tasks is not None:
        _serve_tasks(server, tasks)
    if metrics:  # beside the SDK's tracing middleware, outside the request-state boundary
        server.middleware.insert(1, OperationMetrics(frozenset(served_requests(server))))
    return server


def _serve_tasks(server: Server[Any], tasks: Tasks) -> None:
    """The tasks extension: advertised under `capabilities.extensions` (server/discover) and
    its three methods; tasks/result and tasks/list are not served (-32601)."""
    server.extensions[TASKS_EXTENSION] = {}
    server.add_request_handler("tasks/get", TaskParams, tasks.get)
    server.add_request_handler("tasks/update", TaskUpdateParams, tasks.update)
    server.add_request_handler("tasks/cancel", TaskParams, tasks.cancel)

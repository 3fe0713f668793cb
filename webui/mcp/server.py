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

from webui.mcp.binding import binding_of
from webui.mcp.bridge import CallBridge
from webui.mcp.results import error_result

log = logging.getLogger(__name__)

REQUEST_STATE_AUDIENCE = "steamharness-workflow-mcp"


def build_server(
    *,
    name: str,
    version: str,
    title: str | None,
    description: str | None,
    bridge: CallBridge,
    state_key: bytes,
    state_ttl: float,
) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=binding_of(ctx).catalog.tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        binding = binding_of(ctx)
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

    server: Server[Any] = Server(
        name,
        version=version,
        title=title,
        description=description,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        # Our schemas declare no x-mcp-header params: skip the SDK's header validation lookup.
        get_tool_input_schema=lambda _name: None,
    )

    def principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
        return binding_of(ctx).principal

    server.middleware.append(
        RequestStateBoundary(
            RequestStateSecurity(keys=[state_key], ttl=state_ttl, bind_principal=principal),
            default_audience=REQUEST_STATE_AUDIENCE,
        )
    )
    return server

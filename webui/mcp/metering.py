"""`mcp_server_operation_duration_seconds`: each MCP request timed by method, tool and
error type, as the OpenTelemetry MCP semantic conventions name them.

A context-tier middleware of the SDK's server (beside its own tracing one), so it sees
every request of both eras and transports. The tool is named only when the binding's
project has it (a client's made-up name is `_other`) and the binding is not the draft's
(a draft's tools are all `_draft`: renamed at will, never a new series), the method only when the server
knows it; `error_type` is the JSON-RPC code of an error answer, `tool_error` for a result
with `isError`, `cancelled` for a request the client left, else the exception's class."""

from __future__ import annotations

import time
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import ValidationError

from webui.mcp.binding import current_binding
from webui.observability.metrics import METRICS, OTHER, error_code_label, tool_label


def _tool(ctx: ServerRequestContext[Any, Any]) -> str:
    if ctx.method != "tools/call":
        return ""
    name = ctx.params.get("name") if ctx.params else None
    binding = current_binding.get(None)
    if not isinstance(name, str) or binding is None or binding.catalog.entrypoint(name) is None:
        return tool_label(None, draft=False)
    return tool_label(name, draft=binding.target == "draft")


class OperationMetrics(ServerMiddleware[Any]):
    """`methods`: the request methods the server serves (webui.mcp.operations); any other
    a client sends is `_other`."""

    def __init__(self, methods: frozenset[str]) -> None:
        self.methods = methods

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        started = time.perf_counter()
        error_type = ""
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            error_type = error_code_label(exc.error.code)
            raise
        except ValidationError:
            error_type = str(INVALID_PARAMS)
            raise
        except Exception as exc:
            error_type = type(exc).__qualname__
            raise
        except BaseException:
            error_type = "cancelled"
            raise
        else:
            if ctx.method == "tools/call" and (
                (isinstance(result, types.CallToolResult) and result.is_error)
                or (isinstance(result, dict) and result.get("isError") is True)
            ):
                error_type = "tool_error"
            return result
        finally:
            method = ctx.method if ctx.method in self.methods else OTHER
            METRICS.operation(method, _tool(ctx), error_type, time.perf_counter() - started)

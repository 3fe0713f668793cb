"""The baseline for `stdio_call.py`: a bare MCP SDK stdio server with one `echo` tool.

It uses the same lowlevel `mcp.server.lowlevel.Server` and `stdio_server()` as
`steamharness mcp`, and calls the very same handler (`echo` in examples/hello/main.py), but
in-process: no run persistence, no worker process, no argument validation. What is left is
the SDK's own per-call cost, which is what steamharness is compared against.

Run: `python bench/bare_stdio_server.py` (speaks MCP on stdin/stdout, both protocol eras).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

HELLO_MAIN = Path(__file__).resolve().parent.parent / "examples" / "hello" / "main.py"

ECHO_TOOL = types.Tool(
    name="echo",
    title="Echo",
    description="Return the text it is given.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    # Declared like steamharness declares its own, so the client re-validates both alike.
    output_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


def load_echo() -> Callable[[Any], dict[str, Any]]:
    """The `echo(ctx)` handler from examples/hello, imported once."""
    spec = importlib.util.spec_from_file_location("hello_main", HELLO_MAIN)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {HELLO_MAIN}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.echo


def build_server() -> Server[Any]:
    echo = load_echo()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[ECHO_TOOL])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != "echo":
            raise MCPError(-32602, f"Unknown tool: {params.name}")
        output = echo(SimpleNamespace(params=dict(params.arguments or {})))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(output))],
            structured_content=output,
            is_error=False,
        )

    return Server(
        "bare-echo",
        version="0.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda _name: None,
    )


async def main() -> None:
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        try:
            await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            sys.stdout.flush()


if __name__ == "__main__":
    anyio.run(main)

"""Where MCP clients reach a project's endpoint, and the copyable client set-ups the MCP
page shows. Only `<YOUR_API_KEY>` stands where a key goes: nothing here reads a stored key.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from webui.settings import Settings

KEY_PLACEHOLDER = "<YOUR_API_KEY>"
HEADER_TEMPLATE = f"Authorization: Bearer {KEY_PLACEHOLDER}"
VSCODE_INPUT = "workflow-api-key"


def with_config(url: str, config: str | None) -> str:
    """`url` (which has a query already) with `&config=NAME` when a configuration is picked;
    configuration names are URL-safe."""
    return f"{url}&config={config}" if config else url


def endpoint_url(request: Request, project_id: str, target: str, config: str | None = None) -> str:
    """The project's MCP endpoint as this request reached the server (scheme, host, root path)."""
    base = f"{str(request.base_url).rstrip('/')}/api/workflows/{project_id}/mcp?target={target}"
    return with_config(base, config)


WILDCARD_BINDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def own_endpoint_url(
    request: Request, settings: Settings, project_id: str, target: str, config: str | None = None
) -> str:
    """Where Try it reaches the project's endpoint: the configured internal URL, else the
    listening socket this request arrived on; never a host the request names (its Host
    header is the client's to choose). A server bound to every interface is reached over
    loopback, whichever interface the page came through."""
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


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def client_configs(name: str, short: str, url: str, folder: str) -> list[ClientConfig]:
    """Copyable client set-ups, each exactly as the client expects it (the generic one is
    the common `mcpServers` shape: url and headers). Only the placeholder stands where the key goes.
    The generic and the stdio set-ups name the server `name` (`workflow-<id>`, as documented);
    the set-ups of clients that put the server's name into each tool's name (Claude Code,
    VS Code, Cursor) name it `short` (`webui.workflows.client_limits.short_server_name`: short, and only
    `a-z 0-9 -`, so it fits each of them and needs no quoting)."""
    bearer = f"Bearer {KEY_PLACEHOLDER}"
    rename = (
        f"In a client that puts the server's name before each tool's name, name it {short} "
        "instead: clients limit the length of the result."
    )
    generic = {"mcpServers": {name: {"url": url, "headers": {"Authorization": bearer}}}}
    cursor = {"mcpServers": {short: {"url": url, "headers": {"Authorization": bearer}}}}
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
            short: {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer ${{input:{VSCODE_INPUT}}}"},
            }
        },
    }
    claude = shlex.join(
        ["claude", "mcp", "add", "--transport", "http", short, url, "--header", HEADER_TEMPLATE]
    )
    stdio = {"mcpServers": {name: {"command": "steamharness", "args": ["mcp", folder]}}}
    return [
        ClientConfig(
            "generic",
            "Generic MCP client (mcpServers JSON)",
            f"Your client's MCP settings. {rename}",
            pretty_json(generic),
        ),
        ClientConfig("claude-code", "Claude Code", "Run in a terminal.", claude),
        ClientConfig(
            "vscode",
            "VS Code",
            ".vscode/mcp.json — VS Code asks for the key once and stores it.",
            pretty_json(vscode),
        ),
        ClientConfig(
            "cursor", "Cursor", "~/.cursor/mcp.json, or .cursor/mcp.json in a project.", pretty_json(cursor)
        ),
        ClientConfig(
            "stdio",
            "Local (stdio)",
            "For a copy of the project folder on your own machine: steamharness mcp runs it "
            "locally over stdio (no server, no key; always the folder's current state). " + rename,
            pretty_json(stdio),
        ),
    ]

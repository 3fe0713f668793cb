"""The MCP servers the host connects to: load, normalise, validate.

Pure: reads files under the root config folder; never connects, never starts anything.

    <root>/config.yaml            optional: defaults.mcp_servers, mcp.host_owned_servers,
                                  mcp.protocol_overrides
    <root>/mcp/*.json|yaml|yml    server files (dotfiles and other suffixes are ignored)
    <root>/agents/*.yaml|yml      agent files (`kind: agent`, `id: agent-…`, `name`,
                                  `mcp_servers`: null → the defaults, [] → none, or ids)

A server file holds either the client-style `mcpServers` object (several servers; entries
take `type`, `command`, `args`, `env`, `url`, `headers`) or one resource (`schema_version:
"1"`, `kind: mcp_server`, `id: mcp-…`, `name`, `transport: {command, arguments?,
environment?} | {url, headers?}`). Decisions beyond the format itself:

- Every field outside those sets is rejected by name (OAuth fields, `disabled`, other
  clients' `alwaysAllow`, `autoApprove`, `timeout`, `cwd`… each with a clear message), so a
  setting never silently does nothing. Scalars must already be strings: YAML `8080` or
  `yes` in args or env is an error, not a conversion.
- `${NAME}` is expanded once, only in env and header values, from the host process's
  environment; the variable must be set and non-empty. `$NAME` without braces is literal
  text. A `${` in command, args or URL is rejected rather than passed on literally: whoever
  wrote it expected expansion, and expanding host variables into argv or URLs (which end
  up in process lists and logs) is what the rule exists to prevent.
- `{env: NAME}` is YAML-only (the documented YAML form); JSON files write "${NAME}".
- `auto` (the default) maps to the SDK's `legacy` handshake mode: the SDK's own `auto`
  probes 2026-07-28 first and breaks handshake-era servers that elicit.
  Only an explicit `2026-07-28` pins the modern era.
- A capture's digest is the SHA-256 of the whole source file, so any edit to that file
  (even to another server in it) invalidates captures taken from it.
- Literal env and header values are never shown: not in problems, reprs or
  `describe_command`.

Modules: `files` reads one file strictly, `templates` holds `${NAME}` values, `resolve`
resolves a server's env and headers with them, `schema` declares the server-file shapes
(pydantic), `values` checks single values, `servers` turns a server file into servers or
problem lines, `loader` loads the whole root, `model` is what a loaded configuration is,
`captures` records and re-checks where a server came from, `agents` loads the agent files.
"""

from __future__ import annotations

from webui.host.config.agents import AGENTS_DIR
from webui.host.config.captures import Capture, McpSourceChanged, capture, check_capture
from webui.host.config.files import MAX_FILE_BYTES
from webui.host.config.loader import ROOT_CONFIG, SERVER_SUFFIXES, SERVERS_DIR, load_host_config
from webui.host.config.model import (
    AGENT_ID_RE,
    ID_RE,
    MAX_ID_LENGTH,
    PROTOCOL_SETTINGS,
    AgentConfig,
    ClientMode,
    FileStyle,
    HostConfig,
    HostConfigError,
    ProtocolSetting,
    ServerConfig,
    TransportKind,
    describe_command,
    normalise_id,
)
from webui.host.config.resolve import resolve_env, resolve_headers
from webui.host.config.templates import NAME_RE, EnvRef, ValueSpec, parse_template

__all__ = [
    "AGENTS_DIR",
    "AGENT_ID_RE",
    "ID_RE",
    "MAX_FILE_BYTES",
    "MAX_ID_LENGTH",
    "NAME_RE",
    "PROTOCOL_SETTINGS",
    "ROOT_CONFIG",
    "SERVERS_DIR",
    "SERVER_SUFFIXES",
    "AgentConfig",
    "Capture",
    "ClientMode",
    "EnvRef",
    "FileStyle",
    "HostConfig",
    "HostConfigError",
    "McpSourceChanged",
    "ProtocolSetting",
    "ServerConfig",
    "TransportKind",
    "ValueSpec",
    "capture",
    "check_capture",
    "describe_command",
    "load_host_config",
    "normalise_id",
    "parse_template",
    "resolve_env",
    "resolve_headers",
]

"""What a loaded host configuration is: the servers, the root config's policies, the ids.

`ServerConfig` keeps literal-or-reference descriptions (`ValueSpec`), never resolved values;
`HostConfig` answers which protocol a server speaks and which servers a conversation uses.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from webui.errors import ConfigError
from webui.host.config.templates import ValueSpec

TransportKind = Literal["stdio", "http"]
ClientMode = Literal["legacy", "2026-07-28"]
ProtocolSetting = Literal["auto", "legacy", "2026-07-28"]
FileStyle = Literal["mcpServers", "resource"]

MAX_ID_LENGTH = 64
PROTOCOL_SETTINGS: tuple[ProtocolSetting, ...] = ("auto", "legacy", "2026-07-28")
ID_RE = re.compile(r"mcp-[a-z0-9]+(?:-[a-z0-9]+)*\Z")
AGENT_ID_RE = re.compile(r"agent-[a-z0-9]+(?:-[a-z0-9]+)*\Z")


class HostConfigError(ConfigError):
    """The host configuration has problems; `problems` holds one line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        more = len(self.problems) - 1
        suffix = f" (and {more} more; run `steamharness host validate`)" if more else ""
        super().__init__(f"{self.problems[0]}{suffix}")


@dataclass(frozen=True)
class ServerConfig:
    """One configured server. Specs keep literal-or-reference descriptions, never resolved values."""

    id: str
    name: str
    source: Path
    digest: str
    transport: TransportKind
    command: str | None = None
    args: tuple[str, ...] = ()
    env_spec: tuple[tuple[str, ValueSpec], ...] = ()
    url: str | None = None
    header_spec: tuple[tuple[str, ValueSpec], ...] = ()
    style: FileStyle = "mcpServers"

    @property
    def env_field(self) -> str:
        return "env" if self.style == "mcpServers" else "transport.environment"

    @property
    def headers_field(self) -> str:
        return "headers" if self.style == "mcpServers" else "transport.headers"


@dataclass(frozen=True)
class AgentConfig:
    """One agent file: which servers a conversation started from it selects.

    `mcp_servers` None inherits the root defaults (when the conversation is created), () selects none.
    """

    id: str
    name: str
    source: Path
    mcp_servers: tuple[str, ...] | None


@dataclass(frozen=True)
class HostConfig:
    """Every configured server (registered, not yet selected) and the root config's policies."""

    root: Path
    servers: dict[str, ServerConfig]
    default_servers: list[str]
    host_owned: frozenset[str]
    protocol_overrides: dict[str, ProtocolSetting]
    agents: dict[str, AgentConfig] = field(default_factory=dict[str, AgentConfig])

    def protocol(self, server_id: str) -> ClientMode:
        """The SDK `Client(mode=…)` for a server: `legacy` unless pinned to `2026-07-28`."""
        if server_id not in self.servers:
            raise ConfigError(f"no configured MCP server has id {server_id!r}")
        return "2026-07-28" if self.protocol_overrides.get(server_id) == "2026-07-28" else "legacy"

    def select(self, conversation_value: Sequence[str] | None) -> list[str]:
        """A conversation's servers: None inherits the defaults, [] selects none.

        The caller stores the returned list with the conversation when it is created and passes
        that stored list back from then on, so changing the defaults never changes an existing
        conversation's selection; a stored id that is no longer configured is an error here.
        """
        if conversation_value is None:
            return list(self.default_servers)
        if isinstance(conversation_value, str):
            raise ConfigError("mcp_servers must be a list of server ids, not a string")
        selected: list[str] = []
        for item in conversation_value:
            if item not in self.servers:
                raise ConfigError(f"mcp_servers: {unknown_id(item, self.servers)}")
            if item in selected:
                raise ConfigError(f"mcp_servers: {item!r} is listed twice")
            selected.append(item)
        return selected

    def agent_selection(self, agent_id: str) -> list[str]:
        """The servers a conversation started from agent `agent_id` selects, resolved now."""
        agent = self.agents.get(agent_id)
        if agent is None:
            raise ConfigError(f"no configured agent has id {agent_id!r}")
        return self.select(None if agent.mcp_servers is None else list(agent.mcp_servers))


def normalise_agent_id(name: str) -> str:
    """`Docs Helper` → `agent-docs-helper`; a name already starting with `agent-` keeps its prefix."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        return ""
    return slug if slug.startswith("agent-") else f"agent-{slug}"


def normalise_id(name: str) -> str:
    """`My_Server` → `mcp-my-server`; a name already starting with `mcp-` keeps its prefix."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        return ""
    return slug if slug.startswith("mcp-") else f"mcp-{slug}"


def unknown_id(item: str, servers: Mapping[str, ServerConfig]) -> str:
    """The problem for a reference to an id nothing defines, with a hint when one is close."""
    guess = normalise_id(item) if item.isascii() else ""
    hint = f" (did you mean {guess}?)" if guess != item and guess in servers else ""
    return f"no configured MCP server has id {item!r}{hint}"


def describe_command(server: ServerConfig) -> str:
    """For display and audit: the exact command line (or URL) plus env/header names, no values."""
    if server.transport == "stdio":
        line = shlex.join([server.command or "", *server.args])
        names = [name for name, _ in server.env_spec]
        return f"{line} (env: {', '.join(names)})" if names else line
    names = [name for name, _ in server.header_spec]
    return f"{server.url} (headers: {', '.join(names)})" if names else str(server.url)

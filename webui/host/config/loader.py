"""Loading the whole host configuration: the server files under mcp/ and the root config.yaml.

    <root>/config.yaml            optional: defaults.mcp_servers, mcp.host_owned_servers,
                                  mcp.protocol_overrides
    <root>/mcp/*.json|yaml|yml    server files (dotfiles and other suffixes are ignored)
    <root>/agents/*.yaml|yml      agent files: which servers a conversation from an agent selects

Every problem in every file is collected and raised together as one `HostConfigError`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webui.host.config.agents import load_agents
from webui.host.config.files import kind as _kind
from webui.host.config.files import read
from webui.host.config.model import (
    PROTOCOL_SETTINGS,
    HostConfig,
    HostConfigError,
    ProtocolSetting,
    ServerConfig,
    unknown_id,
)
from webui.host.config.resolve import check_environ
from webui.host.config.servers import load_server_file

ROOT_CONFIG = "config.yaml"
SERVERS_DIR = "mcp"
SERVER_SUFFIXES = frozenset({".json", ".yaml", ".yml"})


def load_host_config(root: Path, environ: Mapping[str, str] | None = None) -> HostConfig:
    """Load and check everything under `root`. With `environ`, every `${NAME}` must resolve."""
    problems: list[str] = []
    if not root.is_dir():
        raise HostConfigError([f"{root}: the root config folder does not exist or is not a directory"])
    servers: dict[str, ServerConfig] = {}
    origin: dict[str, tuple[Path, str]] = {}  # id → (file, name as written), for duplicates
    known: set[str] = set()  # ids seen at all, valid or not, so references are not reported twice
    for path in _server_files(root, problems):
        for server_id, name, server in load_server_file(path, problems):
            if not server_id:
                continue  # already reported: the name has no id
            known.add(server_id)
            if server_id in origin:
                first, first_name = origin[server_id]
                if first == path:
                    problems.append(
                        f"{path}: {server_id}: duplicate id: {first_name!r} and {name!r} both normalise to it"
                    )
                else:
                    problems.append(f"{path}: {server_id}: duplicate id; also defined in {first}")
                servers.pop(server_id, None)
                continue
            origin[server_id] = (path, name)
            if server is not None:
                servers[server_id] = server
    if environ is not None:
        for server in servers.values():
            check_environ(server, environ, problems)
    defaults, host_owned, overrides = _load_root_config(root, known, servers, problems)
    agents = load_agents(root, known, servers, problems)
    if problems:
        raise HostConfigError(problems)
    return HostConfig(
        root=root,
        servers=servers,
        default_servers=defaults,
        host_owned=frozenset(host_owned),
        protocol_overrides=overrides,
        agents=agents,
    )


def environment_problems(config: HostConfig, environ: Mapping[str, str]) -> list[str]:
    """One line per `${NAME}` of a loaded configuration that would not resolve in `environ`."""
    problems: list[str] = []
    for server in config.servers.values():
        check_environ(server, environ, problems)
    return problems


def _server_files(root: Path, problems: list[str]) -> list[Path]:
    folder = root / SERVERS_DIR
    if not folder.exists():
        return []
    if not folder.is_dir():
        problems.append(f"{folder}: expected a folder of MCP server files")
        return []
    files: list[Path] = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix == ".jsonc":
            problems.append(f"{path}: JSONC is not supported; write plain JSON in a .json file")
        elif path.suffix in SERVER_SUFFIXES:
            files.append(path)
    return files


def _load_root_config(
    root: Path, known: set[str], servers: Mapping[str, ServerConfig], problems: list[str]
) -> tuple[list[str], list[str], dict[str, ProtocolSetting]]:
    path = root / ROOT_CONFIG
    if not path.exists():
        return [], [], {}
    parsed = read(path, problems)
    data = {} if parsed is None or parsed[0] is None else parsed[0]
    if not isinstance(data, dict):
        problems.append(f"{path}: must be a mapping, got {_kind(data)}")
        return [], [], {}
    sections = {"defaults": ("mcp_servers",), "mcp": ("host_owned_servers", "protocol_overrides")}
    for key in data:
        if key not in sections:
            problems.append(f"{path}: {key}: unknown field (allowed: {', '.join(sections)})")
    section: dict[str, dict[Any, Any]] = {}
    for name, allowed in sections.items():
        value = data.get(name)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            problems.append(f"{path}: {name}: must be a mapping, got {_kind(value)}")
            value = {}
        for key in value:
            if key not in allowed:
                problems.append(f"{path}: {name}.{key}: unknown field (allowed: {', '.join(allowed)})")
        section[name] = value

    def ids(field: str, value: Any) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            problems.append(f"{path}: {field}: must be a list of server ids, got {_kind(value)}")
            return []
        result: list[str] = []
        for index, item in enumerate(value):
            if not isinstance(item, str):
                problems.append(f"{path}: {field}[{index}]: must be a server id string, got {_kind(item)}")
            elif item in result:
                problems.append(f"{path}: {field}[{index}]: {item!r} is listed twice")
            else:
                if item not in known:
                    problems.append(f"{path}: {field}[{index}]: {unknown_id(item, servers)}")
                result.append(item)
        return result

    defaults = ids("defaults.mcp_servers", section["defaults"].get("mcp_servers"))
    host_owned = ids("mcp.host_owned_servers", section["mcp"].get("host_owned_servers"))
    overrides: dict[str, ProtocolSetting] = {}
    raw = section["mcp"].get("protocol_overrides")
    if raw is not None and not isinstance(raw, dict):
        problems.append(f"{path}: mcp.protocol_overrides: must be a mapping of server id → mode")
        raw = None
    for server_id, setting in (raw or {}).items():
        field = f"mcp.protocol_overrides.{server_id}"
        if isinstance(setting, datetime.date):
            setting = setting.isoformat()  # unquoted 2026-07-28 is a YAML date
        if not isinstance(server_id, str) or server_id not in known:
            problems.append(f"{path}: {field}: {unknown_id(str(server_id), servers)}")
        elif setting not in PROTOCOL_SETTINGS:
            problems.append(f"{path}: {field}: must be auto, legacy or 2026-07-28, not {setting!r}")
        else:
            overrides[server_id] = setting
    return defaults, host_owned, overrides

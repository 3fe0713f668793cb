"""Agent files: which configured MCP servers a conversation started from an agent selects.

    <root>/agents/*.yaml|yml      one agent per file:

    kind: agent
    id: agent-docs                # agent- followed by lowercase letters, digits and '-'
    name: Documentation helper
    mcp_servers: [mcp-docs]       # null (or left out) inherits the root defaults; [] selects none

`schema_version: "1"` may be given (and must then be "1"). Every other field is refused by
name, every listed id must name a configured MCP server, and no two files may define one id.
Problems read `<file>: <agent id>: <field>: <what>`, one line each, all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError

from webui.host.config.files import kind, read
from webui.host.config.model import (
    AGENT_ID_RE,
    MAX_ID_LENGTH,
    AgentConfig,
    ServerConfig,
    normalise_agent_id,
    unknown_id,
)

AGENTS_DIR = "agents"
AGENT_SUFFIXES = frozenset({".yaml", ".yml"})
_FIELDS = ("schema_version", "kind", "id", "name", "mcp_servers")
# Where a problem sorts within its agent, so the lines read in the order a person checks.
_RANK = {"schema_version": 1, "kind": 2, "id": 3, "name": 4, "mcp_servers": 5}


class _Problem(ValueError):
    """A value check failed; the message is the line's last part."""


def _equals(expected: str, message: str) -> Any:
    def check(value: Any) -> str:
        if value != expected:
            raise _Problem(message.format(value=value))
        return value

    return PlainValidator(check)


def _agent_id(value: Any) -> str:
    if not (isinstance(value, str) and AGENT_ID_RE.match(value)):
        suggestion = normalise_agent_id(value) if isinstance(value, str) and value.isascii() else ""
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        raise _Problem(f"must be an agent- id: lowercase letters, digits and '-'{hint}")
    if len(value) > MAX_ID_LENGTH:
        raise _Problem(f"longer than {MAX_ID_LENGTH} characters")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Problem("must be a non-empty string")
    return value


def _server_ids(value: Any) -> tuple[str, ...] | None:
    """The shape only (a list of distinct strings, or null); whether each id exists is checked later."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Problem(
            f"must be a list of MCP server ids, null (the defaults) or [] (none), got {kind(value)}"
        )
    lines: list[str] = []
    seen: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            lines.append(f"[{index}]: must be a server id string, got {kind(item)}")
        elif item in seen:
            lines.append(f"[{index}]: {item!r} is listed twice")
        else:
            seen.append(item)
    if lines:
        raise _Problem("\n".join(lines))
    return tuple(seen)


class AgentResource(BaseModel):
    """The agent file's shape: unknown fields are refused, every value is checked as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Annotated[str, _equals("1", 'must be the string "1" (quoted), not {value!r}')] = "1"
    kind: Annotated[str, _equals("agent", "must be agent, not {value!r}")]
    id: Annotated[str, PlainValidator(_agent_id)]
    name: Annotated[str, PlainValidator(_name)]
    mcp_servers: Annotated[tuple[str, ...] | None, PlainValidator(_server_ids)] = None


def agent_files(root: Path, problems: list[str]) -> list[Path]:
    """The agent files under `root` (dotfiles and other suffixes are ignored; JSON is refused)."""
    folder = root / AGENTS_DIR
    if not folder.exists():
        return []
    if not folder.is_dir():
        problems.append(f"{folder}: expected a folder of agent files")
        return []
    files: list[Path] = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix in (".json", ".jsonc"):
            problems.append(f"{path}: agent files are YAML; write it as a .yaml file")
        elif path.suffix in AGENT_SUFFIXES:
            files.append(path)
    return files


def load_agents(
    root: Path, known: set[str], servers: Mapping[str, ServerConfig], problems: list[str]
) -> dict[str, AgentConfig]:
    """Every sound agent under `root`; each problem (also an unknown server id) goes to `problems`.

    `known` holds every server id a file defines, valid or not, so a reference to a server whose
    own file has problems is not reported a second time.
    """
    agents: dict[str, AgentConfig] = {}
    origin: dict[str, Path] = {}
    for path in agent_files(root, problems):
        agent_id, agent = _load_file(path, known, servers, problems)
        if not agent_id:
            continue  # already reported: no usable id
        if agent_id in origin:  # checked for broken files too, so every problem shows at once
            problems.append(f"{path}: {agent_id}: duplicate id; also defined in {origin[agent_id]}")
            agents.pop(agent_id, None)
            continue
        origin[agent_id] = path
        if agent is not None:
            agents[agent_id] = agent
    return agents


def _load_file(
    path: Path, known: set[str], servers: Mapping[str, ServerConfig], problems: list[str]
) -> tuple[str, AgentConfig | None]:
    """(the agent's id, or "" when it has none; the agent, or None when the file has problems)."""
    parsed = read(path, problems)
    if parsed is None:
        return "", None
    data = parsed[0]
    if not isinstance(data, dict):
        problems.append(f"{path}: expected a kind: agent resource, got {kind(data)}")
        return "", None
    raw_id = data.get("id")
    label = raw_id if isinstance(raw_id, str) and AGENT_ID_RE.match(raw_id) else ""
    found: list[tuple[float, str, str]] = []
    model: AgentResource | None = None
    try:
        model = AgentResource.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            found += _translate(error)
    listed = data.get("mcp_servers")
    seen: set[str] = set()
    for index, item in enumerate(listed if isinstance(listed, list) else []):
        if isinstance(item, str) and item not in seen:
            seen.add(item)
            if item not in known:
                found.append((_item_rank(index), f"mcp_servers[{index}]", unknown_id(item, servers)))
    where = ": ".join(p for p in (str(path), label) if p)
    for _, field, message in sorted(found, key=lambda item: item[0]):
        problems.append(f"{where}: {field}: {message}" if field else f"{where}: {message}")
    if model is None or found:
        return label, None
    return label, AgentConfig(id=model.id, name=model.name, source=path, mcp_servers=model.mcp_servers)


def _item_rank(index: int) -> float:
    """Problems about mcp_servers items read in list order."""
    return _RANK["mcp_servers"] + (index + 1) / 100_000


def _translate(error: Any) -> list[tuple[float, str, str]]:
    """(rank, field, message) lines for one pydantic error."""
    loc = error["loc"]
    key = str(loc[0]) if loc else ""
    if error["type"] in ("extra_forbidden", "invalid_key"):
        return [(0.0, key, f"unknown field (allowed: {', '.join(_FIELDS)})")]
    if error["type"] == "missing":
        return [(0.0, "", f"missing required field {key!r}")]
    cause = (error.get("ctx") or {}).get("error")
    text = str(cause) if isinstance(cause, _Problem) else str(error["msg"])
    rank = _RANK.get(key, 6)
    lines: list[tuple[float, str, str]] = []
    for line in text.split("\n"):
        if line.startswith("["):  # a list item: "[i]: message"
            sub, _, message = line.partition(": ")
            lines.append((_item_rank(int(sub[1:-1])), key + sub, message))
        else:
            lines.append((rank, key, line))
    return lines

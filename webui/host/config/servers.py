"""Server files: the two shapes a file under mcp/ may take, as declarative models.

A file holds either the client-style `mcpServers` object (several servers; entries take
`type`, `command`, `args`, `env`, `url`, `headers`) or one resource (`schema_version: "1"`,
`kind: mcp_server`, `id: mcp-…`, `name`, `transport: {command, arguments?, environment?} |
{url, headers?}`). The models forbid every other field; an entry or transport is a union
discriminated by its form (command → stdio, url → remote). Pydantic's errors are turned
into the one-line problems people read, `<file>: <server>: <field>: <what>`, all of them
and in a stable order; the checks on single values live in `values`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from webui.host.config import schema, values
from webui.host.config.files import kind, read
from webui.host.config.model import ID_RE, MAX_ID_LENGTH, FileStyle, ServerConfig, normalise_id

_ENTRY_FIELDS = ("type", "command", "args", "env", "url", "headers")
_RESOURCE_FIELDS = ("schema_version", "kind", "id", "name", "transport")
_TRANSPORT_FIELDS = ("command", "arguments", "environment", "url", "headers")
_HINTS = {
    "serverUrl": "write url",
    "httpUrl": "write url",
    "arguments": "mcpServers entries write args",
    "environment": "mcpServers entries write env",
    "transport": "mcpServers entries write command/url directly, without transport",
}
_TRANSPORT_HINTS = {
    "args": "write arguments",
    "env": "write environment",
    "type": "the form follows from command or url; type belongs to mcpServers entries",
}
_STDIO_ONLY = "only for command (stdio) servers"
_REMOTE_ONLY = "only for remote (url) servers"
# Where a problem sorts within its server, so the lines read in the order a person checks.
_RANK = {"schema_version": 2, "kind": 3, "name": 4, "id": 5, "transport": 6, "type": 8}
_FORM_ORDER = {"args": 0.1, "arguments": 0.1, "url": 0.1, "env": 0.2, "environment": 0.2, "headers": 0.2}
_RANK |= {"command": 11, "headers": 11, "args": 12, "arguments": 12, "url": 12, "env": 13, "environment": 13}


# ------------------------------------------------------------------------------ errors → problems


@dataclass(frozen=True)
class _Shape:
    """How one level of a file reads in problems: its fields, hints, and the form-only fields."""

    allowed: Sequence[str]
    hints: dict[str, str]
    stdio_only: frozenset[str]
    remote_only: frozenset[str]
    unknown_rank: int
    not_object: str


_ENTRY = _Shape(_ENTRY_FIELDS, _HINTS, frozenset({"args", "env"}), frozenset({"url", "headers"}), 0, "")
_TOP = _Shape(_RESOURCE_FIELDS, {}, frozenset(), frozenset(), 0, "")
_TRANSPORT = _Shape(
    _TRANSPORT_FIELDS,
    _TRANSPORT_HINTS,
    frozenset({"arguments", "environment"}),
    frozenset({"url", "headers"}),
    7,
    "must be an object: {command, arguments?, environment?} or {url, headers?}",
)


def _translate(
    error: ErrorDetails, prefix: str, loc: Sequence[int | str], shape: _Shape
) -> list[tuple[float, str, str]]:
    """(rank, field, message) for one pydantic error; `loc` is relative to the level `shape`."""
    kind_ = error["type"]
    if kind_ in ("extra_forbidden", "invalid_key"):
        key = str(loc[-1])
        field = prefix + key
        if key in shape.stdio_only:
            return [(10 + _FORM_ORDER[key], field, _STDIO_ONLY)]
        if key in shape.remote_only:
            return [(10 + _FORM_ORDER[key], field, _REMOTE_ONLY)]
        return [(shape.unknown_rank, field, values.unknown_field(key, shape.allowed, shape.hints))]
    if kind_ == "missing":
        return [(1, "", f"missing required field {str(loc[-1])!r}")]
    if kind_ == "not_object":
        return [(_RANK["transport"], prefix.rstrip("."), shape.not_object)]
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    field = prefix + path if loc else ""
    rank = 9 if not loc else _RANK.get(str(loc[0]), 12)
    if kind_ == "list_type":
        return [(rank, field, f"must be a list of strings, got {kind(error['input'])}")]
    ctx = error.get("ctx") or {}
    problems: list[tuple[str, str]] = ctx.get("problems") or [("", str(ctx.get("problem", error["msg"])))]
    return [(rank, field + sub, message) for sub, message in problems]


# ------------------------------------------------------------------------------ files


class _Reporter:
    """Problems about one server, prefixed `path: server: field:`."""

    def __init__(self, problems: list[str], path: Path, label: str) -> None:
        self.problems, self.path, self.label = problems, path, label

    def __call__(self, field: str, message: str) -> None:
        where = ": ".join(p for p in (str(self.path), self.label, field) if p)
        self.problems.append(f"{where}: {message}")

    def all(self, found: list[tuple[float, str, str]]) -> None:
        for _, field, message in sorted(found, key=lambda item: item[0]):
            self(field, message)


def load_server_file(path: Path, problems: list[str]) -> list[tuple[str, str, ServerConfig | None]]:
    """(id, name as written, server or None when invalid) for each server the file defines."""
    parsed = read(path, problems)
    if parsed is None:
        return []
    data, digest = parsed
    is_yaml = path.suffix != ".json"
    if not isinstance(data, dict):
        problems.append(
            f"{path}: expected an mcpServers object or a kind: mcp_server resource, got {kind(data)}"
        )
        return []
    if "mcpServers" in data:
        for key in data:
            if key != "mcpServers":
                problems.append(f"{path}: {key}: {values.unknown_field(key, ['mcpServers'], {})}")
        entries = data["mcpServers"]
        if not isinstance(entries, dict):
            problems.append(f"{path}: mcpServers: must be an object of name → server, got {kind(entries)}")
            return []
        return [_entry(path, digest, name, entry, is_yaml, problems) for name, entry in entries.items()]
    if "kind" in data or "schema_version" in data:
        result = _resource(path, digest, data, is_yaml, problems)
        return [result] if result else []
    hint = " (the 'servers' key of other clients is not supported)" if "servers" in data else ""
    problems.append(
        f'{path}: expected an mcpServers object or a resource with schema_version: "1" and'
        f" kind: mcp_server{hint}"
    )
    return []


def _entry(
    path: Path, digest: str, name: Any, entry: Any, is_yaml: bool, problems: list[str]
) -> tuple[str, str, ServerConfig | None]:
    server_id = normalise_id(name) if isinstance(name, str) and name.isascii() else ""
    report = _Reporter(problems, path, server_id or f"mcpServers.{name!r}")
    if not server_id:
        report("", "a server name must be ASCII with at least one letter or digit (it becomes an mcp- id)")
        return "", str(name), None
    if len(server_id) > MAX_ID_LENGTH:
        report("", f"the id is longer than {MAX_ID_LENGTH} characters")
    if not isinstance(entry, dict):
        report("", f"must be an object with command or url, got {kind(entry)}")
        return server_id, name, None
    try:
        model = schema.ENTRY.validate_python(entry, context={"is_yaml": is_yaml})
    except ValidationError as exc:
        report.all([p for error in exc.errors() for p in _translate(error, "", error["loc"][1:], _ENTRY)])
        # Only the transport part decides whether the server is built (see _sound_transport).
        known = {k: v for k, v in entry.items() if k in _ENTRY_FIELDS and (k != "type" or _known_type(v))}
        model = _sound_transport(schema.ENTRY, known, is_yaml)
    return server_id, name, None if model is None else _server(path, digest, server_id, name, model)


def _known_type(value: Any) -> bool:
    return isinstance(value, str) and value in schema.ENTRY_TYPES


def _resource(
    path: Path, digest: str, data: dict[Any, Any], is_yaml: bool, problems: list[str]
) -> tuple[str, str, ServerConfig | None] | None:
    raw_id = data.get("id")
    server_id = raw_id if isinstance(raw_id, str) else ""
    report = _Reporter(problems, path, server_id)
    id_ok = bool(ID_RE.match(server_id))
    found: list[tuple[float, str, str]] = []
    if id_ok and len(server_id) > MAX_ID_LENGTH:
        found.append((_RANK["id"], "id", f"longer than {MAX_ID_LENGTH} characters"))
    model: schema.Resource | None = None
    try:
        model = schema.Resource.model_validate(data, context={"is_yaml": is_yaml})
    except ValidationError as exc:
        for error in exc.errors():
            loc = error["loc"]
            if loc[:1] == ("transport",) and len(loc) > 1:
                if id_ok:  # a transport is checked only for a server that has an id
                    found += _translate(error, "transport.", loc[2:], _TRANSPORT)
            elif error["type"] == "not_object":
                found += _translate(error, "transport.", (), _TRANSPORT)
            else:
                found += _translate(error, "", loc, _TOP)
    report.all(found)
    if not id_ok:
        return None
    if model is not None:
        return server_id, server_id, _server(path, digest, server_id, model.name, model.transport)
    transport = data.get("transport")
    if not isinstance(transport, dict):
        return server_id, server_id, None
    known = {k: v for k, v in transport.items() if k in _TRANSPORT_FIELDS}
    sound = _sound_transport(schema.TRANSPORT, known, is_yaml)
    name = data.get("name")
    display = name if isinstance(name, str) and name.strip() else server_id
    return server_id, server_id, None if sound is None else _server(path, digest, server_id, display, sound)


def _sound_transport(adapter: TypeAdapter[Any], known: dict[Any, Any], is_yaml: bool) -> Any:
    """The transport part alone, without the fields already reported as unknown or wrong.

    A server whose transport is sound is still built when only its other fields are wrong
    (unknown fields, a bad name or kind…): the configuration is rejected either way, but the
    environment check and the id hints of config.yaml still cover it.
    """
    try:
        return adapter.validate_python(known, context={"is_yaml": is_yaml})
    except ValidationError:
        return None


def _server(path: Path, digest: str, server_id: str, name: str, model: Any) -> ServerConfig | None:
    """The ServerConfig for a validated entry or transport (None for neither form)."""
    same = {"id": server_id, "name": name, "source": path, "digest": digest}
    if isinstance(model, schema.StdioEntry | schema.StdioTransport):
        is_entry = isinstance(model, schema.StdioEntry)
        return ServerConfig(
            **same,
            transport="stdio",
            command=model.command,
            args=tuple(model.args if is_entry else model.arguments),
            env_spec=model.env if is_entry else model.environment,
            style="mcpServers" if is_entry else "resource",
        )
    if isinstance(model, schema.HttpEntry | schema.HttpTransport):
        style: FileStyle = "mcpServers" if isinstance(model, schema.HttpEntry) else "resource"
        return ServerConfig(**same, transport="http", url=model.url, header_spec=model.headers, style=style)
    return None

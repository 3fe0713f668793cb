"""Server files: the two shapes a file under mcp/ may take, checked field by field.

A file holds either the client-style `mcpServers` object (several servers; entries take
`type`, `command`, `args`, `env`, `url`, `headers`) or one resource (`schema_version: "1"`,
`kind: mcp_server`, `id: mcp-…`, `name`, `transport: {command, arguments?, environment?} |
{url, headers?}`). Every problem is one line `<file>: <server>: <field>: <what>`, and all of
them are reported, not only the first.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from webui.host.config.files import kind as _kind
from webui.host.config.files import read
from webui.host.config.model import ID_RE, MAX_ID_LENGTH, FileStyle, ServerConfig, TransportKind, normalise_id
from webui.host.config.templates import NAME_RE, EnvRef, ValueSpec, parse_template

_HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# Headers the transport owns: the MCP ones, content negotiation, and hop-by-hop framing.
_RESERVED_HEADERS = frozenset(
    {"accept", "content-type", "content-length", "host", "connection", "transfer-encoding", "upgrade"}
    | {"te", "trailer", "keep-alive", "proxy-connection", "last-event-id"}
)
_ENTRY_FIELDS = ("type", "command", "args", "env", "url", "headers")
_RESOURCE_FIELDS = ("schema_version", "kind", "id", "name", "transport")
_TRANSPORT_FIELDS = ("command", "arguments", "environment", "url", "headers")
_ENTRY_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http"}
_OAUTH_FIELDS = frozenset(
    {"auth", "authentication", "authorization", "clientid", "clientsecret", "scope", "scopes"}
    | {"authprovidertype", "authorizationurl", "tokenurl", "redirecturi", "callbackport"}
)
_DISABLED = (
    "not supported: a server file only registers a server; to turn it off, leave its id out"
    " of defaults.mcp_servers (or delete the entry)"
)
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


class _Reporter:
    """Problems about one server, prefixed `path: server: field:`."""

    def __init__(self, problems: list[str], path: Path, label: str) -> None:
        self.problems, self.path, self.label = problems, path, label
        self.count = 0

    def __call__(self, field: str, message: str) -> None:
        self.count += 1
        where = ": ".join(p for p in (str(self.path), self.label, field) if p)
        self.problems.append(f"{where}: {message}")


def load_server_file(path: Path, problems: list[str]) -> list[tuple[str, str, ServerConfig | None]]:
    """(id, name as written, server or None when invalid) for each server the file defines."""
    parsed = read(path, problems)
    if parsed is None:
        return []
    data, digest = parsed
    is_yaml = path.suffix != ".json"
    if not isinstance(data, dict):
        problems.append(
            f"{path}: expected an mcpServers object or a kind: mcp_server resource, got {_kind(data)}"
        )
        return []
    if "mcpServers" in data:
        for key in data:
            if key != "mcpServers":
                problems.append(f"{path}: {key}: {_unknown_field(key, ['mcpServers'], {})}")
        entries = data["mcpServers"]
        if not isinstance(entries, dict):
            problems.append(f"{path}: mcpServers: must be an object of name → server, got {_kind(entries)}")
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
        report("", f"must be an object with command or url, got {_kind(entry)}")
        return server_id, name, None
    for key in entry:
        if key not in _ENTRY_FIELDS:
            report(str(key), _unknown_field(key, _ENTRY_FIELDS, _HINTS))
    kind: TransportKind | None = None
    if "type" in entry:
        declared = entry["type"]
        if declared == "sse":
            report(
                "type",
                "legacy SSE is not supported; remote servers use Streamable HTTP"
                " (type: http or streamable-http, url of the Streamable HTTP endpoint)",
            )
        elif declared not in _ENTRY_TYPES:
            report("type", f"must be stdio, http or streamable-http, not {declared!r}")
        else:
            kind = "stdio" if _ENTRY_TYPES[declared] == "stdio" else "http"
    fields = {"command": "command", "args": "args", "env": "env", "url": "url", "headers": "headers"}
    server = _transport(path, digest, server_id, name, entry, kind, fields, is_yaml, report, "mcpServers")
    return server_id, name, server


def _resource(
    path: Path, digest: str, data: dict[Any, Any], is_yaml: bool, problems: list[str]
) -> tuple[str, str, ServerConfig | None] | None:
    raw_id = data.get("id")
    server_id = raw_id if isinstance(raw_id, str) else ""
    report = _Reporter(problems, path, server_id)
    for key in data:
        if key not in _RESOURCE_FIELDS:
            report(str(key), _unknown_field(key, _RESOURCE_FIELDS, {}))
    for key in _RESOURCE_FIELDS:
        if key not in data:
            report("", f"missing required field {key!r}")
    if "schema_version" in data and data["schema_version"] != "1":
        report("schema_version", f'must be the string "1" (quoted), not {data["schema_version"]!r}')
    if "kind" in data and data["kind"] != "mcp_server":
        report("kind", f"must be mcp_server, not {data['kind']!r}")
    name = data.get("name")
    if "name" in data and (not isinstance(name, str) or not name.strip()):
        report("name", "must be a non-empty string")
    if "id" in data and not (isinstance(raw_id, str) and ID_RE.match(raw_id)):
        suggestion = normalise_id(raw_id) if isinstance(raw_id, str) and raw_id.isascii() else ""
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        report("id", f"must be a normalised mcp- id: lowercase letters, digits and '-'{hint}")
        server_id = ""
    elif server_id and len(server_id) > MAX_ID_LENGTH:
        report("id", f"longer than {MAX_ID_LENGTH} characters")
    transport = data.get("transport")
    if "transport" in data and not isinstance(transport, dict):
        report("transport", "must be an object: {command, arguments?, environment?} or {url, headers?}")
        transport = None
    if not server_id:
        return None
    if transport is None:
        return server_id, server_id, None
    for key in transport:
        if key not in _TRANSPORT_FIELDS:
            report(f"transport.{key}", _unknown_field(key, _TRANSPORT_FIELDS, _TRANSPORT_HINTS))
    canonical = {"command": "command", "arguments": "args", "environment": "env", "url": "url"}
    entry = {canonical.get(k, k): v for k, v in transport.items() if k in _TRANSPORT_FIELDS}
    fields = {
        "command": "transport.command",
        "args": "transport.arguments",
        "env": "transport.environment",
        "url": "transport.url",
        "headers": "transport.headers",
    }
    display = name if isinstance(name, str) and name.strip() else server_id
    server = _transport(path, digest, server_id, display, entry, None, fields, is_yaml, report, "resource")
    return server_id, server_id, server


def _transport(
    path: Path,
    digest: str,
    server_id: str,
    name: str,
    entry: dict[Any, Any],
    kind: TransportKind | None,
    fields: dict[str, str],
    is_yaml: bool,
    report: _Reporter,
    style: FileStyle,
) -> ServerConfig | None:
    """Check the transport part (shared by both formats); None when anything was reported."""
    before = report.count
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        report("", "give either command (stdio) or url (remote), not both")
        return None
    if not has_command and not has_url:
        report("", "missing command (stdio server) or url (remote server)")
        return None
    if kind == "stdio" and has_url:
        report("type", "stdio takes command, not url")
    if kind == "http" and has_command:
        report("type", "http/streamable-http takes url, not command")
    if has_command:
        for key in ("url", "headers"):
            if key in entry:
                report(fields[key], "only for remote (url) servers")
        command = _literal(entry["command"], fields["command"], report)
        if command is not None and any(c.isspace() for c in command) and "/" not in command:
            report(fields["command"], "one executable only; put its arguments in " + fields["args"])
        args = _args(entry.get("args", []), fields["args"], report)
        env = _values(entry.get("env", {}), fields["env"], is_yaml, report, header=False)
        if report.count > before or command is None:
            return None
        return ServerConfig(
            id=server_id,
            name=name,
            source=path,
            digest=digest,
            transport="stdio",
            command=command,
            args=args,
            env_spec=env,
            style=style,
        )
    for key in ("args", "env"):
        if key in entry:
            report(fields[key], "only for command (stdio) servers")
    headers = _values(entry.get("headers", {}), fields["headers"], is_yaml, report, header=True)
    url = _literal(entry["url"], fields["url"], report)
    if url is not None:
        problem = _url_problem(url)
        if problem:
            report(fields["url"], problem)
        elif url.lower().startswith("http:") and headers:
            report(
                fields["headers"], "plain http (loopback) must not carry headers; use https to send headers"
            )
    if report.count > before or url is None:
        return None
    return ServerConfig(
        id=server_id,
        name=name,
        source=path,
        digest=digest,
        transport="http",
        url=url,
        header_spec=headers,
        style=style,
    )


def _literal(value: Any, field: str, report: _Reporter) -> str | None:
    """command, args items and url: plain strings, never expanded."""
    if not isinstance(value, str) or not value:
        report(field, f"must be a non-empty string, got {_kind(value) if value != '' else 'an empty one'}")
        return None
    if "${" in value:
        report(field, "${NAME} is not expanded here (only env and header values take references)")
        return None
    if "\0" in value:
        report(field, "contains a NUL character")
        return None
    return value


def _args(value: Any, field: str, report: _Reporter) -> tuple[str, ...]:
    if not isinstance(value, list):
        report(field, f"must be a list of strings, got {_kind(value)}")
        return ()
    args: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            report(f"{field}[{index}]", f"must be a string (quote it), got {_kind(item)}")
        elif "${" in item:
            report(
                f"{field}[{index}]", "${NAME} is not expanded in arguments (only in env and header values)"
            )
        elif "\0" in item:
            report(f"{field}[{index}]", "contains a NUL character")
        else:
            args.append(item)
    return tuple(args)


def _values(
    value: Any, field: str, is_yaml: bool, report: _Reporter, *, header: bool
) -> tuple[tuple[str, ValueSpec], ...]:
    """env or headers: name → literal string, `${NAME}` template, or (YAML) `{env: NAME}`."""
    if not isinstance(value, dict):
        report(field, f"must be an object of name → value, got {_kind(value)}")
        return ()
    seen: dict[str, str] = {}
    specs: list[tuple[str, ValueSpec]] = []
    for name, raw in value.items():
        where = f"{field}.{name}"
        if not isinstance(name, str):
            problem: str | None = f"a name must be a string, not {name!r}"
        else:
            problem = _header_name_problem(name, seen) if header else _env_name_problem(name)
        if problem:
            report(where, problem)
            continue
        spec = _value_spec(raw, is_yaml, where, report, header=header)
        if spec is not None:
            specs.append((name, spec))
    return tuple(specs)


def _value_spec(raw: Any, is_yaml: bool, where: str, report: _Reporter, *, header: bool) -> ValueSpec | None:
    if isinstance(raw, dict):
        if not is_yaml:
            report(where, '{"env": NAME} references are for YAML files; in JSON write "${NAME}"')
            return None
        ref = raw.get("env")
        if set(raw) != {"env"} or not isinstance(ref, str) or not NAME_RE.match(ref):
            report(where, "a reference is {env: NAME} with a variable name [A-Za-z_][A-Za-z0-9_]*")
            return None
        return ValueSpec((EnvRef(ref),))
    if not isinstance(raw, str):
        report(where, f"must be a string (quote it; '' for empty), got {_kind(raw)}")
        return None
    # Environment values may span lines (PEM keys); header values cannot.
    if any(c in raw for c in ("\r\n\0" if header else "\0")):
        report(where, "the value contains a line break or NUL character" if header else "contains NUL")
        return None
    try:
        return parse_template(raw)
    except ValueError as exc:
        report(where, str(exc))
        return None


def _env_name_problem(name: str) -> str | None:
    if not NAME_RE.match(name):
        return "not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
    return None


def _header_name_problem(name: str, seen: dict[str, str]) -> str | None:
    if not _HEADER_NAME_RE.match(name):
        return "not a valid header name"
    lowered = name.lower()
    if lowered in _RESERVED_HEADERS or lowered.startswith("mcp-"):
        return "set by the MCP transport itself; it cannot be configured"
    if lowered in seen:
        return f"given twice (as {seen[lowered]!r}; header names are case-insensitive)"
    seen[lowered] = name
    return None


def _url_problem(url: str) -> str | None:
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "must not contain whitespace or control characters"
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a bad port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        return "must be an https:// URL (Streamable HTTP endpoint)"
    if "@" in parts.netloc:
        return "must not contain credentials (user:password@); send them in headers"
    if not parts.hostname:
        return "has no host"
    if scheme == "http" and not _is_loopback(parts.hostname):
        return (
            "plain http is allowed only for a literal loopback host (127.0.0.0/8, ::1, localhost); use https"
        )
    return None


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unknown_field(key: Any, allowed: Sequence[str], hints: Mapping[str, str]) -> str:
    text = str(key)
    squashed = re.sub(r"[-_]", "", text.lower())
    if squashed in ("disabled", "enabled"):
        return _DISABLED
    if "oauth" in squashed or squashed in _OAUTH_FIELDS:
        return (
            "OAuth login is not supported; send a token in headers instead"
            ' (e.g. Authorization: "Bearer ${TOKEN}")'
        )
    hint = f"{hints[text]}; " if text in hints else ""
    return f"unknown field ({hint}client-specific fields are not supported; allowed: {', '.join(allowed)})"

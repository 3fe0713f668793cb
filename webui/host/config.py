"""The MCP servers the host connects to: load, normalise, validate.

Pure: reads files under the root config folder; never connects, never starts anything.

    <root>/config.yaml            optional: defaults.mcp_servers, mcp.host_owned_servers,
                                  mcp.protocol_overrides
    <root>/mcp/*.json|yaml|yml    server files (dotfiles and other suffixes are ignored)

A server file holds either the client-style `mcpServers` object (several servers; entries
take `type`, `command`, `args`, `env`, `url`, `headers`) or one resource (`schema_version:
"1"`, `kind: mcp_server`, `id: mcp-…`, `name`, `transport: {command, arguments?,
environment?} | {url, headers?}`). Decisions where the seed is silent:

- Every field outside those sets is rejected by name (OAuth fields, `disabled`, other
  clients' `alwaysAllow`, `autoApprove`, `timeout`, `cwd`… each with a clear message), so a
  setting never silently does nothing. Scalars must already be strings: YAML `8080` or
  `yes` in args or env is an error, not a conversion.
- `${NAME}` is expanded once, only in env and header values, from the host process's
  environment; the variable must be set and non-empty. `$NAME` without braces is literal
  text. A `${` in command, args or URL is rejected rather than passed on literally: whoever
  wrote it expected expansion, and expanding host variables into argv or URLs (which end
  up in process lists and logs) is what the rule exists to prevent.
- `{env: NAME}` is YAML-only (as the seed documents it); JSON files write "${NAME}".
- `auto` (the default) maps to the SDK's `legacy` handshake mode: the SDK's own `auto`
  probes 2026-07-28 first and breaks handshake-era servers that elicit (SDK guide §9).
  Only an explicit `2026-07-28` pins the modern era.
- A capture's digest is the SHA-256 of the whole source file, so any edit to that file
  (even to another server in it) invalidates captures taken from it.
- Literal env and header values are never shown: not in problems, reprs or
  `describe_command`.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from webui.errors import ConfigError, SteamharnessError

TransportKind = Literal["stdio", "http"]
ClientMode = Literal["legacy", "2026-07-28"]
ProtocolSetting = Literal["auto", "legacy", "2026-07-28"]
FileStyle = Literal["mcpServers", "resource"]

ROOT_CONFIG = "config.yaml"
SERVERS_DIR = "mcp"
SERVER_SUFFIXES = frozenset({".json", ".yaml", ".yml"})
MAX_FILE_BYTES = 1 << 20
MAX_ID_LENGTH = 64
PROTOCOL_SETTINGS: tuple[ProtocolSetting, ...] = ("auto", "legacy", "2026-07-28")

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ID_RE = re.compile(r"mcp-[a-z0-9]+(?:-[a-z0-9]+)*\Z")
_DEFAULT_SYNTAX_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*:?[-=?+]")
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# Headers the transport owns: the MCP ones, content negotiation, and hop-by-hop framing.
_RESERVED_HEADERS = frozenset(
    {"accept", "content-type", "content-length", "host", "connection", "transfer-encoding", "upgrade"}
    | {"te", "trailer", "keep-alive", "proxy-connection", "last-event-id"}
)
_JSONC_RE = re.compile(r'"(?:[^"\\]|\\.)*"|(?P<bad>//|/\*|,\s*[}\]])', re.DOTALL)

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


class HostConfigError(ConfigError):
    """The host configuration has problems; `problems` holds one line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        more = len(self.problems) - 1
        suffix = f" (and {more} more; run `steamharness config validate`)" if more else ""
        super().__init__(f"{self.problems[0]}{suffix}")


class McpSourceChanged(SteamharnessError):
    """A server's source file changed (or vanished) between capture and client construction."""

    code = "mcp_source_changed"
    status = 409


# ------------------------------------------------------------------------------ values


@dataclass(frozen=True)
class EnvRef:
    """A reference to a variable of the host process's environment."""

    name: str


@dataclass(frozen=True, repr=False)
class ValueSpec:
    """An env or header value as configured: literal text and references, in order."""

    parts: tuple[str | EnvRef, ...]

    @property
    def references(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if isinstance(p, EnvRef))

    def masked(self) -> str:
        """The template with literal text hidden, e.g. `***${TOKEN}`: safe to show or log."""
        return "".join(f"${{{p.name}}}" if isinstance(p, EnvRef) else "***" for p in self.parts)

    def __repr__(self) -> str:
        return f"ValueSpec({self.masked()!r})"

    def resolve(self, environ: Mapping[str, str]) -> str:
        """One round: a value that itself contains `${X}` is used as it is."""
        unset = {n: "empty" if n in environ else "not set" for n in self.references if not environ.get(n)}
        if unset:
            raise _Unset(unset)
        return "".join(environ[p.name] if isinstance(p, EnvRef) else p for p in self.parts)


class _Unset(Exception):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names  # variable → "not set" | "empty"


def parse_template(text: str) -> ValueSpec:
    """`Bearer ${TOKEN}` → literal and reference parts; ValueError says what is wrong."""
    parts: list[str | EnvRef] = []
    pos = 0
    while (start := text.find("${", pos)) != -1:
        end = text.find("}", start + 2)
        if end == -1:
            raise ValueError("unclosed '${' (write ${NAME})")
        inner = text[start + 2 : end]
        if not NAME_RE.match(inner):
            shown = inner if len(inner) <= 40 else inner[:40] + "…"
            if _DEFAULT_SYNTAX_RE.match(inner):
                raise ValueError(
                    f"'${{{shown}}}': default/alternative syntax is not supported, only ${{NAME}}"
                )
            raise ValueError(
                f"'${{{shown}}}' is not a variable reference (names match [A-Za-z_][A-Za-z0-9_]*)"
            )
        if start > pos:
            parts.append(text[pos:start])
        parts.append(EnvRef(inner))
        pos = end + 1
    if pos < len(text):
        parts.append(text[pos:])
    return ValueSpec(tuple(parts))


# ------------------------------------------------------------------------------ model


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
class HostConfig:
    """Every configured server (registered, not yet selected) and the root config's policies."""

    root: Path
    servers: dict[str, ServerConfig]
    default_servers: list[str]
    host_owned: frozenset[str]
    protocol_overrides: dict[str, ProtocolSetting]

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
                raise ConfigError(f"mcp_servers: {_unknown_id(item, self.servers)}")
            if item in selected:
                raise ConfigError(f"mcp_servers: {item!r} is listed twice")
            selected.append(item)
        return selected


@dataclass(frozen=True)
class Capture:
    """What a run records about a server: where it came from and the file's digest, no values."""

    server_id: str
    source: Path
    digest: str

    def to_json(self) -> dict[str, str]:
        return {"server_id": self.server_id, "source": str(self.source), "digest": self.digest}

    @classmethod
    def from_json(cls, data: Mapping[str, str]) -> Capture:
        return cls(server_id=data["server_id"], source=Path(data["source"]), digest=data["digest"])


def capture(server: ServerConfig) -> Capture:
    return Capture(server_id=server.id, source=server.source, digest=server.digest)


def check_capture(captured: Capture) -> None:
    """Raise McpSourceChanged unless the captured source file is still byte-for-byte the same."""
    try:
        current = _digest(captured.source.read_bytes())
    except OSError:
        current = None
    if current != captured.digest:
        state = "is gone" if current is None else "changed"
        raise McpSourceChanged(
            f"{captured.server_id}: its source {captured.source} {state} since it was captured;"
            " start a new run to use the current configuration"
        )


def resolve_env(server: ServerConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's extra environment (the SDK merges it over a safe subset of ours)."""
    return _resolve(server, server.env_spec, server.env_field, os.environ if environ is None else environ)


def resolve_headers(server: ServerConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    headers = _resolve(server, server.header_spec, server.headers_field, env)
    for name, value in headers.items():
        if _breaks_header(value):
            raise ConfigError(
                f"{server.source}: {server.id}: {server.headers_field}.{name}: {_HEADER_FROM_ENV}"
            )
    return headers


_HEADER_FROM_ENV = "the value from the environment contains a line break or NUL, which a header cannot carry"


def _breaks_header(value: str) -> bool:
    return any(c in value for c in "\r\n\0")


def describe_command(server: ServerConfig) -> str:
    """For display and audit: the exact command line (or URL) plus env/header names, no values."""
    if server.transport == "stdio":
        line = shlex.join([server.command or "", *server.args])
        names = [name for name, _ in server.env_spec]
        return f"{line} (env: {', '.join(names)})" if names else line
    names = [name for name, _ in server.header_spec]
    return f"{server.url} (headers: {', '.join(names)})" if names else str(server.url)


def _resolve(
    server: ServerConfig, specs: tuple[tuple[str, ValueSpec], ...], field: str, environ: Mapping[str, str]
) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, spec in specs:
        try:
            values[name] = spec.resolve(environ)
        except _Unset as exc:
            raise ConfigError(f"{server.source}: {server.id}: {field}.{name}: {_unset(exc.names)}") from None
    return values


def _unset(names: Mapping[str, str]) -> str:
    which = "; ".join(f"environment variable {name} is {state}" for name, state in names.items())
    return f"{which} in the host process (references need a non-empty value)"


# ------------------------------------------------------------------------------ loading


def load_host_config(root: Path, environ: Mapping[str, str] | None = None) -> HostConfig:
    """Load and check everything under `root`. With `environ`, every `${NAME}` must resolve."""
    problems: list[str] = []
    if not root.is_dir():
        raise HostConfigError([f"{root}: the root config folder does not exist or is not a directory"])
    servers: dict[str, ServerConfig] = {}
    origin: dict[str, tuple[Path, str]] = {}  # id → (file, name as written), for duplicates
    known: set[str] = set()  # ids seen at all, valid or not, so references are not reported twice
    for path in _server_files(root, problems):
        for server_id, name, server in _load_server_file(path, problems):
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
            _check_environ(server, environ, problems)
    defaults, host_owned, overrides = _load_root_config(root, known, servers, problems)
    if problems:
        raise HostConfigError(problems)
    return HostConfig(
        root=root,
        servers=servers,
        default_servers=defaults,
        host_owned=frozenset(host_owned),
        protocol_overrides=overrides,
    )


def normalise_id(name: str) -> str:
    """`My_Server` → `mcp-my-server`; a name already starting with `mcp-` keeps its prefix."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        return ""
    return slug if slug.startswith("mcp-") else f"mcp-{slug}"


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


def _digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _read(path: Path, problems: list[str]) -> tuple[Any, str] | None:
    """Parse one file (JSON by suffix, else YAML); None after reporting a problem."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        problems.append(f"{path}: cannot be read ({exc.strerror})")
        return None
    if len(raw) > MAX_FILE_BYTES:
        problems.append(f"{path}: larger than {MAX_FILE_BYTES} bytes; is this a configuration file?")
        return None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        problems.append(f"{path}: not UTF-8 text")
        return None
    try:
        data = _parse_json(text) if path.suffix == ".json" else _parse_yaml(text)
    except ValueError as exc:
        problems.append(f"{path}: {exc}")
        return None
    return data, _digest(raw)


class _DuplicateKey(ValueError):
    pass


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_object)
    except _DuplicateKey:
        raise
    except json.JSONDecodeError as exc:
        for match in _JSONC_RE.finditer(text):
            if match.group("bad"):
                line = text.count("\n", 0, match.start()) + 1
                raise ValueError(
                    f"line {line}: JSONC comments/trailing commas are not supported (plain JSON only)"
                ) from None
        raise ValueError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load semantics, except that a key given twice in one mapping is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: list[Any] = []
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.append(key)
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = "; ".join(p for p in (exc.context, exc.problem) if p) or "syntax error"
        raise ValueError(f"invalid YAML{where}: {what}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML: {str(exc).splitlines()[0]}") from None


# ------------------------------------------------------------------------------ server files


class _Reporter:
    """Problems about one server, prefixed `path: server: field:`."""

    def __init__(self, problems: list[str], path: Path, label: str) -> None:
        self.problems, self.path, self.label = problems, path, label
        self.count = 0

    def __call__(self, field: str, message: str) -> None:
        self.count += 1
        where = ": ".join(p for p in (str(self.path), self.label, field) if p)
        self.problems.append(f"{where}: {message}")


def _load_server_file(path: Path, problems: list[str]) -> list[tuple[str, str, ServerConfig | None]]:
    """(id, name as written, server or None when invalid) for each server the file defines."""
    parsed = _read(path, problems)
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


def _kind(value: Any) -> str:
    names = {type(None): "nothing", bool: "a boolean", int: "a number", float: "a number"}
    names |= {str: "a string", list: "a list", dict: "an object"}
    if isinstance(value, datetime.date):
        return "a date"
    return names.get(type(value), type(value).__name__)


def _check_environ(server: ServerConfig, environ: Mapping[str, str], problems: list[str]) -> None:
    for field, specs in ((server.env_field, server.env_spec), (server.headers_field, server.header_spec)):
        for name, spec in specs:
            try:
                value = spec.resolve(environ)
            except _Unset as exc:
                problems.append(f"{server.source}: {server.id}: {field}.{name}: {_unset(exc.names)}")
                continue
            if field == server.headers_field and _breaks_header(value):
                problems.append(f"{server.source}: {server.id}: {field}.{name}: {_HEADER_FROM_ENV}")


# ------------------------------------------------------------------------------ root config


def _load_root_config(
    root: Path, known: set[str], servers: Mapping[str, ServerConfig], problems: list[str]
) -> tuple[list[str], list[str], dict[str, ProtocolSetting]]:
    path = root / ROOT_CONFIG
    if not path.exists():
        return [], [], {}
    parsed = _read(path, problems)
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
                    problems.append(f"{path}: {field}[{index}]: {_unknown_id(item, servers)}")
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
            problems.append(f"{path}: {field}: {_unknown_id(str(server_id), servers)}")
        elif setting not in PROTOCOL_SETTINGS:
            problems.append(f"{path}: {field}: must be auto, legacy or 2026-07-28, not {setting!r}")
        else:
            overrides[server_id] = setting
    return defaults, host_owned, overrides


def _unknown_id(item: str, servers: Mapping[str, ServerConfig]) -> str:
    guess = normalise_id(item) if item.isascii() else ""
    hint = f" (did you mean {guess}?)" if guess != item and guess in servers else ""
    return f"no configured MCP server has id {item!r}{hint}"

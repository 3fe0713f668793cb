"""The checks on single values of a server file: literal strings, arguments, env and header
values, URLs, and the wording for a field nobody supports.

Each check returns the accepted value or raises `Problems`: (sub-path, message) pairs, the
sub-path relative to the field being checked (`""`, `[2]`, `.TOKEN`). Literal values never
appear in a message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from webui.addresses import is_loopback_host
from webui.host.config.files import kind
from webui.host.config.templates import NAME_RE, EnvRef, ValueSpec, parse_template, reserved_problem

_HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# Headers the transport owns: the MCP ones, content negotiation, and hop-by-hop framing.
_RESERVED_HEADERS = frozenset(
    {"accept", "content-type", "content-length", "host", "connection", "transfer-encoding", "upgrade"}
    | {"te", "trailer", "keep-alive", "proxy-connection", "last-event-id"}
)
_OAUTH_FIELDS = frozenset(
    {"auth", "authentication", "authorization", "clientid", "clientsecret", "scope", "scopes"}
    | {"authprovidertype", "authorizationurl", "tokenurl", "redirecturi", "callbackport"}
)
_DISABLED = (
    "not supported: a server file only registers a server; to turn it off, leave its id out"
    " of defaults.mcp_servers (or delete the entry)"
)


class Problems(Exception):
    """What is wrong with one value: (sub-path, message) pairs, in the order found."""

    def __init__(self, problems: Sequence[tuple[str, str]], accepted: Any = None) -> None:
        super().__init__(problems)
        self.problems = list(problems)
        self.accepted = accepted  # what passed, when a caller goes on checking with it

    @classmethod
    def one(cls, message: str) -> Problems:
        return cls([("", message)])


def literal(value: Any) -> str:
    """command, args items and url: plain strings, never expanded."""
    if not isinstance(value, str) or not value:
        raise Problems.one(
            f"must be a non-empty string, got {kind(value) if value != '' else 'an empty one'}"
        )
    if "${" in value:
        raise Problems.one("${NAME} is not expanded here (only env and header values take references)")
    if "\0" in value:
        raise Problems.one("contains a NUL character")
    return value


def argument(item: Any) -> str:
    """One item of args / transport.arguments."""
    if not isinstance(item, str):
        raise Problems.one(f"must be a string (quote it), got {kind(item)}")
    if "${" in item:
        raise Problems.one("${NAME} is not expanded in arguments (only in env and header values)")
    if "\0" in item:
        raise Problems.one("contains a NUL character")
    return item


def url_problem(url: str) -> str | None:
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
    if scheme == "http" and not is_loopback_host(parts.hostname):
        return (
            "plain http is allowed only for a literal loopback host (127.0.0.0/8, ::1, localhost); use https"
        )
    return None


def values(value: Any, *, is_yaml: bool, header: bool) -> tuple[tuple[str, ValueSpec], ...]:
    """env or headers: name → literal string, `${NAME}` template, or (YAML) `{env: NAME}`."""
    if not isinstance(value, dict):
        raise Problems.one(f"must be an object of name → value, got {kind(value)}")
    seen: dict[str, str] = {}
    specs: list[tuple[str, ValueSpec]] = []
    problems: list[tuple[str, str]] = []
    for name, raw in value.items():
        where = f".{name}"
        if not isinstance(name, str):
            problem: str | None = f"a name must be a string, not {name!r}"
        else:
            problem = _header_name_problem(name, seen) if header else _env_name_problem(name)
        if problem:
            problems.append((where, problem))
            continue
        try:
            specs.append((name, _value_spec(raw, is_yaml, header=header)))
        except Problems as exc:
            problems.extend((where + sub, message) for sub, message in exc.problems)
    if problems:
        raise Problems(problems, accepted=tuple(specs))
    return tuple(specs)


def unknown_field(key: Any, allowed: Sequence[str], hints: Mapping[str, str]) -> str:
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


def _value_spec(raw: Any, is_yaml: bool, *, header: bool) -> ValueSpec:
    spec = _parsed_value(raw, is_yaml, header=header)
    refused = [p for name in spec.references if (p := reserved_problem(name))]
    if refused:
        raise Problems([("", p) for p in refused])
    return spec


def _parsed_value(raw: Any, is_yaml: bool, *, header: bool) -> ValueSpec:
    if isinstance(raw, dict):
        if not is_yaml:
            raise Problems.one('{"env": NAME} references are for YAML files; in JSON write "${NAME}"')
        ref = raw.get("env")
        if set(raw) != {"env"} or not isinstance(ref, str) or not NAME_RE.match(ref):
            raise Problems.one("a reference is {env: NAME} with a variable name [A-Za-z_][A-Za-z0-9_]*")
        return ValueSpec((EnvRef(ref),))
    if not isinstance(raw, str):
        raise Problems.one(f"must be a string (quote it; '' for empty), got {kind(raw)}")
    # Environment values may span lines (PEM keys); header values cannot.
    if any(c in raw for c in ("\r\n\0" if header else "\0")):
        raise Problems.one("the value contains a line break or NUL character" if header else "contains NUL")
    try:
        return parse_template(raw)
    except ValueError as exc:
        raise Problems.one(str(exc)) from None


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

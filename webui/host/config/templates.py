"""`${NAME}` templates in env and header values, and their one-round resolution.

A value is literal text and references in order (`ValueSpec`); it is expanded once, from
the host process's environment, and every referenced variable must be set and non-empty.
`$NAME` without braces is literal text; `${NAME:-x}` and friends are refused. Literal text
is never shown: `masked()` and the repr hide it.

The server's own settings are never handed on: a reference to a `STEAMHARNESS_*` name is
refused when the file is read (by `host validate` and at every connect, which reads the
files again), and at connect (and `host validate --check-env`) so is a value that
carries one of the server's secrets under another name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DEFAULT_SYNTAX_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*:?[-=?+]")
HEADER_FROM_ENV = "the value from the environment contains a line break or NUL, which a header cannot carry"
# The server's settings (pydantic-settings reads them case-insensitively, so any case).
SERVER_PREFIX = "STEAMHARNESS_"
# Which of them are secrets: their values may not reach a server under another name either.
_SECRET_SUFFIXES = ("_KEY", "_SECRET", "_PASSWORD", "_TOKEN", "_DATABASE_URL")


def reserved_problem(name: str) -> str | None:
    """Why `${name}` may not be referenced, or None."""
    if name.upper().startswith(SERVER_PREFIX):
        return (
            f"${{{name}}}: {SERVER_PREFIX}* variables are the server's own configuration and"
            " are never passed to an MCP server"
        )
    return None


def server_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The server's secret settings in `environ`: name → value."""
    return {
        k: v
        for k, v in environ.items()
        if k.upper().startswith(SERVER_PREFIX) and k.upper().endswith(_SECRET_SUFFIXES) and len(v) >= 8
    }


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
        """One round: a value that itself contains `${X}` is used as it is. A reference to
        the server's own settings, or to a variable holding one of its secrets, is refused
        (`Reserved`)."""
        for name in self.references:
            if problem := reserved_problem(name):
                raise Reserved(problem)
        unset = {n: "empty" if n in environ else "not set" for n in self.references if not environ.get(n)}
        if unset:
            raise Unset(unset)
        secrets = server_secrets(environ)
        for name in self.references:
            held = [k for k, v in secrets.items() if v in environ[name]]
            if held:
                raise Reserved(
                    f"${{{name}}} holds the value of {held[0]}, one of the server's own secrets;"
                    " give the MCP server a credential of its own"
                )
        return "".join(environ[p.name] if isinstance(p, EnvRef) else p for p in self.parts)


class Reserved(Exception):
    """A reference to the server's own configuration or secrets; the message names it."""

    def message(self) -> str:
        return str(self.args[0])


class Unset(Exception):
    """Referenced variables without a value; `names` maps each to "not set" or "empty"."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def message(self) -> str:
        which = "; ".join(f"environment variable {name} is {state}" for name, state in self.names.items())
        return f"{which} in the host process (references need a non-empty value)"


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


def breaks_header(value: str) -> bool:
    return any(c in value for c in "\r\n\0")

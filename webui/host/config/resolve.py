"""Resolving a server's env and header templates (`templates.py`) against an environment:
at connect, and for `host validate --check-env`."""

from __future__ import annotations

import os
from collections.abc import Mapping

from webui.errors import ConfigError
from webui.host.config.model import ServerConfig
from webui.host.config.templates import HEADER_FROM_ENV, Reserved, Unset, ValueSpec, breaks_header


def resolve_env(server: ServerConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's extra environment (the SDK merges it over a safe subset of ours)."""
    return _resolve(server, server.env_spec, server.env_field, os.environ if environ is None else environ)


def resolve_headers(server: ServerConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    headers = _resolve(server, server.header_spec, server.headers_field, env)
    for name, value in headers.items():
        if breaks_header(value):
            raise ConfigError(
                f"{server.source}: {server.id}: {server.headers_field}.{name}: {HEADER_FROM_ENV}"
            )
    return headers


def check_environ(server: ServerConfig, environ: Mapping[str, str], problems: list[str]) -> None:
    """Append a problem for each env or header value that would not resolve in `environ`."""
    for field, specs in ((server.env_field, server.env_spec), (server.headers_field, server.header_spec)):
        for name, spec in specs:
            try:
                value = spec.resolve(environ)
            except (Unset, Reserved) as exc:
                problems.append(f"{server.source}: {server.id}: {field}.{name}: {exc.message()}")
                continue
            if field == server.headers_field and breaks_header(value):
                problems.append(f"{server.source}: {server.id}: {field}.{name}: {HEADER_FROM_ENV}")


def _resolve(
    server: ServerConfig, specs: tuple[tuple[str, ValueSpec], ...], field: str, environ: Mapping[str, str]
) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, spec in specs:
        try:
            values[name] = spec.resolve(environ)
        except (Unset, Reserved) as exc:
            raise ConfigError(f"{server.source}: {server.id}: {field}.{name}: {exc.message()}") from None
    return values

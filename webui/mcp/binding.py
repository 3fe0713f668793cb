"""What a request is bound to: which project (and version), which principal, which
transport. The HTTP gateway puts one in the ASGI scope; stdio sets the ContextVar once."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webui.configs.service import NAME_RE
from webui.errors import ConfigurationRefused
from webui.mcp.catalog import Catalog
from webui.runs.related import Relations
from webui.runs.service import RunLimits

current_binding: contextvars.ContextVar[Binding] = contextvars.ContextVar("steamharness_mcp_binding")


@dataclass(frozen=True)
class Binding:
    catalog: Catalog
    principal: str  # what sealed request state is bound to (never a raw key)
    transport: str  # "stdio" | "http"
    actor: str | None = None
    # The credential's account, which owns the runs (and questions) of this binding.
    # None: the admin principal (the server admin key, the local stdio operator).
    account_id: int | None = None
    target: str | None = None
    version: str | None = None
    session_id: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    related: Mapping[str, str] = field(default_factory=dict)
    # Where the project's related projects resolve (None: it may use none).
    relations: Relations | None = None
    # Where a person can answer; "{interactionId}" and "{runId}" are filled in.
    answer_hint: str | None = None
    # The server's address as the client reached it (HTTP), for links to its pages.
    base_url: str | None = None
    # The configuration runs start with: this name, or (None) the scope's active one at call
    # time. The scope: stdio, the local operator's; HTTP, the account's (or the admin principal's).
    config_name: str | None = None
    account_name: str | None = None
    # Re-checked before every tool call: the run gate, queue limits, a changed draft.
    # Raises RunRefused; returns the limits the new run is admitted under.
    preflight: Callable[[], RunLimits] | None = None


def binding_of(ctx: Any) -> Binding:
    request = getattr(ctx, "request", None)
    if request is not None:
        state = getattr(request, "scope", {}).get("state") or {}
        found = state.get("mcp_binding")
        if isinstance(found, Binding):
            return found
    return current_binding.get()


def chosen_config(name: str | None, where: str) -> str | None:
    """A configuration name picked for a binding (`--config`, `&config=`), syntax checked."""
    if name is not None and not NAME_RE.fullmatch(name):
        raise ConfigurationRefused(
            f"{where} {name!r} is not a valid configuration name: 1-64 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    return name

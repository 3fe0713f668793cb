"""The client capabilities a tool requires (`"requires"` in package.json) and the refusal
of a call from a client that did not declare one of them.

Which capabilities a client declared is read where its era keeps them:
  - 2026-07-28: the request's own `_meta` `io.modelcontextprotocol/clientCapabilities`, for
    that request only (the next request declares its own again);
  - 2025 eras (HTTP sessions, stdio): the capabilities of the session's `initialize`; a
    request's `_meta` cannot add one.

A refused call is refused before anything is prepared: no run row, no configuration
snapshot, no file resolved. It leaves exactly one audit event, `tool.failed` with the
outcome `capability_required` and the missing names (as every other call refused before its
run, e.g. a full queue), so an operator sees who called what without the capability.
At 2026-07-28 it is the JSON-RPC error -32021 (HTTP 400) whose `data.requiredCapabilities`
names each missing capability as an object (`{"sampling": {}}`); on 2025-era sessions, which
have no such error, an isError tool result with the code `capability_required`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from webui.workflows.project import CLIENT_CAPABILITIES, Entrypoint

CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
CAPABILITY_REQUIRED = "capability_required"


def _declared_now(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any] | None:
    """This 2026-07-28 request's declared capabilities (None: not a mapping)."""
    meta = (ctx.params or {}).get("_meta")
    caps = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None
    return caps if isinstance(caps, Mapping) else None


def declares(ctx: ServerRequestContext[Any, Any], name: str) -> bool:
    """Whether this request's client declared the capability `name` (sampling, roots, ...)."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return isinstance((_declared_now(ctx) or {}).get(name), Mapping)
    declared = ctx.session.client_capabilities
    return declared is not None and getattr(declared, name, None) is not None


def missing_capabilities(ctx: ServerRequestContext[Any, Any], ep: Entrypoint) -> tuple[str, ...]:
    """The capabilities `ep` requires that this request's client did not declare, in the
    entrypoint's order."""
    if not ep.requires:
        return ()
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        caps = _declared_now(ctx) or {}
        return tuple(name for name in ep.requires if not isinstance(caps.get(name), Mapping))
    declared = ctx.session.client_capabilities
    if declared is None:
        return ep.requires
    return tuple(name for name in ep.requires if getattr(declared, name, None) is None)


def capability_error(ep: Entrypoint, missing: tuple[str, ...], extensions: tuple[str, ...] = ()) -> MCPError:
    """-32021 (HTTP 400 at 2026-07-28), each missing capability named as an object, and each
    missing extension (the tasks extension, for a tool that runs only as a task) under
    `extensions`."""
    required: dict[str, Any] = {name: {} for name in missing}
    names = [f"the {name} capability" for name in missing]
    if extensions:
        required["extensions"] = {name: {} for name in extensions}
        names += [f"the extension {name}" for name in extensions]
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"The tool {ep.id} needs a client that declares {' and '.join(names)}",
        data={"requiredCapabilities": required},
    )


def capability_refusal(ep: Entrypoint, error: Mapping[str, Any] | None) -> MCPError | None:
    """-32021 for a run whose handler needed a capability the client never declared (its
    `ctx.sample` / `ctx.roots` refused as undeclared and not caught): at 2026-07-28 the
    call answers as for a tool that requires it; None for any other outcome."""
    if not error or error.get("code") != CAPABILITY_REQUIRED:
        return None
    requires = error.get("requires")
    if not isinstance(requires, list) or not requires or not all(r in CLIENT_CAPABILITIES for r in requires):
        return None
    return capability_error(ep, tuple(requires))


def capability_message(ep: Entrypoint, missing: tuple[str, ...]) -> str:
    """The text of the 2025-era isError result."""
    return (
        f"The tool {ep.id} needs a client that declares {_names(missing)}: "
        "connect with a client that supports it and declares it at initialize."
    )


def _names(missing: tuple[str, ...]) -> str:
    return " and ".join(f"the {name} capability" for name in missing)

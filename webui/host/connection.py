"""One client connection of the host to a configured server, as the service keeps it: its
state, the calls and requests in flight on it, and the host's error family."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError

from webui.errors import SteamharnessError
from webui.host.config import Capture, ServerConfig

CONNECT_TIMEOUT = 60.0
CALL_SLACK = 60.0  # a call may wait for a person: expiry plus this


def unchecked_results(client: Client) -> None:
    """`client` no longer checks a tool's result against the server's `outputSchema`: the
    SDK would check it on the event loop with Python's backtracking `re`, so a hostile
    server's pattern and result could freeze the host. The host shows results; it relies
    on none of them."""

    async def unchecked(name: str, result: types.CallToolResult) -> None:
        return None

    setattr(client.session, "validate_tool_result", unchecked)  # noqa: B010 (a method of the instance)


class HostError(SteamharnessError):
    code = "host_error"
    status = 502


@dataclass(eq=False)
class Connection:
    # (conversation id, server id, "" for a kept client or a per-call client's own tag)
    key: tuple[str, str, str]
    server: ServerConfig
    captured: Capture
    conversation_id: str
    kept: bool = False
    state: str = "connecting"  # connecting | ready | failed | closed
    error: str | None = None
    client: Client | None = None
    tools: list[types.Tool] = field(default_factory=list)
    # call id → conversation id of the tool calls in flight on this client
    calls: dict[str, str] = field(default_factory=dict)
    # the requests (interaction ids) this client's server is waiting on an answer to
    requests: set[str] = field(default_factory=set)
    retired: bool = False  # its source changed: closed once its running calls end
    source_changed: bool = False  # the file changed between capture and construction
    ready: anyio.Event = field(default_factory=anyio.Event)
    closing: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class Listing:
    """A per-call server's tools as its last listing client saw them (that client is closed)."""

    captured: Capture
    tools: list[types.Tool]
    state: str = "ready"
    error: str | None = None
    kept: bool = False


ServerState = Connection | Listing


def describe(exc: BaseException) -> str:
    if isinstance(exc, SteamharnessError):
        return exc.message
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return describe(inner)
    if isinstance(exc, OSError):
        return f"could not start or reach the server ({exc.strerror or type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"[:300]

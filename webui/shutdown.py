"""Graceful shutdown of `steamharness serve` on SIGTERM/SIGINT.

Uvicorn, on a signal, stops accepting connections and then waits (up to its graceful
timeout) for open connections to finish before the app's lifespan ends; and sse-starlette,
left alone, cuts every SSE stream the moment the signal arrives. An MCP tool call in
flight is an SSE stream that would only end when its run does, so its client would see a
broken stream. Instead, when shutdown starts, the app drains first, within
`shutdown_grace_seconds`:

1. new MCP requests and runs are refused (503 / `shutting_down`);
2. every live run is stopped and recorded failed with code `shutting_down`; each call
   waiting on one ends with that as its tool result (`isError`, like any failure after a
   run started), so the client reads a complete response;
3. once those responses are written, MCP sessions are ended (their GET streams close),
   then every other SSE stream is released, and uvicorn's own shutdown runs with what
   is left of the grace.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import uvicorn
from sse_starlette.sse import AppStatus

from webui.mcp.http import McpGateway
from webui.runs.service import RunService
from webui.web.state import running_state

log = logging.getLogger(__name__)

SHUTTING_DOWN = {
    "code": "shutting_down",
    "message": "The server shut down while this run was active, so it was stopped; run it again once "
    "the server is back.",
}
# Uvicorn needs a moment after the drain even when the grace is used up: closing the
# remaining keep-alive connections and the lifespan's own teardown.
MIN_UVICORN_WAIT = 0.5

Drain = Callable[[float], Awaitable[None]]


async def drain(budget: float, *, gateway: McpGateway, runs: RunService) -> None:
    """Steps 1-3 above, each bounded by what is left of `budget` seconds."""
    deadline = anyio.current_time() + budget
    log.info("Shutting down: ending MCP calls and runs in flight (grace %g s)", budget)
    gateway.draining = True
    # Workers get SIGTERM, then SIGKILL once part of the grace has passed.
    worker_grace = min(runs.kill_grace_seconds, budget / 4)
    with anyio.move_on_after(budget):
        await runs.stop_all(SHUTTING_DOWN, grace=worker_grace)
    with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
        await gateway.calls_done()
    with anyio.move_on_after(max(deadline - anyio.current_time(), MIN_UVICORN_WAIT)):
        await gateway.sessions.end_all("shutdown")


class GracefulServer(uvicorn.Server):
    """A uvicorn server that lets the app drain before it waits on connections.

    The app's lifespan publishes its drain in the app's state (`AppState.drain`); without one
    (the lifespan never started) this is plain uvicorn."""

    def __init__(
        self, config: uvicorn.Config, *, app: Any, grace: float, on_started: Callable[[], None] | None = None
    ) -> None:
        super().__init__(config)
        self.app = app
        self.grace = grace
        self.on_started = on_started
        # SSE streams end when the drain says so, not when the signal arrives.
        AppStatus.disable_automatic_graceful_drain()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Uvicorn's start (the app's lifespan, then accepting); `on_started` once it accepts."""
        await super().startup(sockets)
        if self.started and self.on_started is not None:
            self.on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        started = time.monotonic()
        for server in self.servers:
            server.close()  # stop accepting first; uvicorn closing it again is harmless
        state = running_state(self.app)
        app_drain: Drain | None = state.drain if state is not None else None
        if app_drain is not None and not self.force_exit:
            try:
                await app_drain(self.grace)
            except Exception:  # a failed drain must not keep the process alive
                log.exception("draining the app at shutdown failed")
        AppStatus.should_exit = True  # now release the remaining SSE streams (browser pages)
        left = self.grace - (time.monotonic() - started)
        # Typed int, used as asyncio.wait_for's timeout: a float is what it takes.
        self.config.timeout_graceful_shutdown = max(left, MIN_UVICORN_WAIT)  # pyright: ignore[reportAttributeAccessIssue]
        await super().shutdown(sockets)

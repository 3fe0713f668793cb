"""Progress notifications of one tools/call: the workflow's own reports and, while the run is
not finished, a keep-alive at a steady interval, so a client that resets its request time-out
on progress keeps waiting for a person or a long step.

Only for a call that carries a progress token (`_meta.progressToken`). The two kinds share
one increasing sequence, as MCP requires: a workflow report is sent as it is when it moves
past the last value sent, and a keep-alive repeats the last value plus `STEP` (so `3.001` of
`10` after a report of `3` of `10`), with the last total and a message saying what the run
waits for and where to answer. The keep-alive stops when the call ends or is cancelled.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

from webui.runs.types import LiveState
from webui.store.models import Interaction

log = logging.getLogger(__name__)

STEP = 0.001
DEFAULT_INTERVAL_SECONDS = 10.0

Send = Callable[[float, float | None, str | None], Awaitable[None]]


class ProgressStream:
    """The progress notifications of one call, strictly increasing; sending is best effort
    (a notification that cannot be delivered never fails the call)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = anyio.Lock()
        self.last: float | None = None
        self.total: float | None = None
        self.message: str | None = None  # the workflow's last progress message

    def _after_last(self, value: float | None) -> float:
        if value is not None and (self.last is None or value > self.last):
            return value
        return round((self.last or 0.0) + STEP, 6) if self.last is not None else 0.0

    async def report(self, done: float, total: float | None, message: str | None) -> None:
        """The workflow's own progress (`ctx.progress`)."""
        async with self._lock:
            self.total = total
            self.message = message
            await self._emit(self._after_last(done), total, message)

    async def tick(self, message: str) -> None:
        """A keep-alive: the last value moved on by STEP, the last total, `message`."""
        async with self._lock:
            await self._emit(self._after_last(None), self.total, message)

    async def _emit(self, value: float, total: float | None, message: str | None) -> None:
        self.last = value
        try:
            await self._send(value, total, message)
        except Exception:
            log.debug("progress notification not delivered", exc_info=True)


@asynccontextmanager
async def keeping_alive(
    stream: ProgressStream | None, interval: float, describe: Callable[[], str | None]
) -> AsyncIterator[None]:
    """While the block runs, `stream.tick(describe())` every `interval` seconds (none when
    `stream` is None, `interval` is 0, or `describe` returns None: the run has ended)."""
    if stream is None or interval <= 0:
        yield
        return
    async with anyio.create_task_group() as tg:

        async def ticks() -> None:
            while True:
                await anyio.sleep(interval)
                try:
                    message = describe()
                except Exception:
                    log.debug("keep-alive message failed", exc_info=True)
                    message = "the run is not finished yet"
                if message is not None:
                    await stream.tick(message)

        tg.start_soon(ticks)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


def describe_wait(
    state: LiveState | None, *, title: str, last_message: str | None, base_url: str | None
) -> str | None:
    """What a run is doing, for a keep-alive message; None once it has ended.

    `title`: the entrypoint's; `last_message`: the workflow's last progress message;
    `base_url`: the server's address, where a person can answer in the browser (None: stdio)."""
    if state is None:
        return None
    if state.waiting_on is not None:
        return f"waiting for input: {_question(state.waiting_on, base_url)}"
    if state.status == "waiting_for_child" and state.children:
        return f"waiting for the related run {', '.join(state.children)} to finish"
    if state.status == "queued":
        return f"queued: {title} waits for a free worker"
    return f"running {title}: {last_message}" if last_message else f"running {title}"


def _question(ia: Interaction, base_url: str | None) -> str:
    if base_url is None:
        return f"{ia.title} — answer it in your MCP client"
    return f"{ia.title} — answer it in your MCP client or at {base_url}/inbox#interaction-{ia.id}"

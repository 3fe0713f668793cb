"""Calls a page starts and a later request collects: the one in-memory registry for them.

A page that starts something slow (Try it's tool call, a host conversation's tool call)
answers at once and lets the browser come back for the outcome. The call runs in a task
group this registry owns (entered by the app's lifespan), so it outlives the request that
started it and ends with the app. Finished calls stay for a while so their outcome can
still be fetched; starting a call prunes the oldest finished ones beyond that time or
beyond the limit. A request long-polls with `wait_finished` (one call) or with the
`changed` event of a group of calls (a conversation's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Generic, Self, TypeVar

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class BackgroundCall:
    """What the registry keeps of every call; pages subclass it with what they show."""

    id: str
    group: str = ""  # calls whose changes one long-poll waits for (e.g. a conversation's)
    done: anyio.Event = field(default_factory=anyio.Event)
    finished_at: float | None = None  # the registry's clock; None while running

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


C = TypeVar("C", bound=BackgroundCall)
Work = Callable[[C], Awaitable[None]]


class BackgroundCalls(Generic[C]):
    """Running and recently finished calls of one kind, by id.

    `max_calls` bounds the calls kept (running ones are never dropped); a finished call is
    kept `keep_finished_seconds`. `work` records its own outcome on the call and should not
    raise: the registry only marks the call finished when it returns (or fails)."""

    def __init__(
        self,
        *,
        max_calls: int,
        keep_finished_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_calls = max_calls
        self.keep_finished_seconds = keep_finished_seconds
        self._clock = clock
        self._tg: TaskGroup | None = None
        self._calls: dict[str, C] = {}
        self._changed: dict[str, anyio.Event] = {}

    async def __aenter__(self) -> Self:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Cancels the calls still running: they end with the app."""
        tg, self._tg = self._tg, None
        assert tg is not None, "BackgroundCalls exited without being entered"
        tg.cancel_scope.cancel()
        return await tg.__aexit__(exc_type, exc, tb)

    def start(self, call: C, work: Work[C]) -> C:
        """Run `work(call)` in the background; `call` is findable by id from now on."""
        if self._tg is None:
            raise RuntimeError("BackgroundCalls is not running (enter it first)")
        self._prune()
        self._calls[call.id] = call
        self._tg.start_soon(self._run, call, work)
        self.notify(call.group)
        return call

    def get(self, call_id: str) -> C | None:
        return self._calls.get(call_id)

    def of(self, group: str) -> list[C]:
        """The group's calls, oldest first."""
        return [call for call in self._calls.values() if call.group == group]

    def __len__(self) -> int:
        return len(self._calls)

    def changed(self, group: str) -> anyio.Event:
        """Set at the next change of one of the group's calls (take it before reading them,
        so no change falls between the read and the wait)."""
        return self._changed.setdefault(group, anyio.Event())

    def notify(self, group: str) -> None:
        """A call of the group changed (started, moved on, finished): wake its waiters."""
        event = self._changed.pop(group, None)
        if event is not None:
            event.set()

    async def wait_finished(self, call: C, seconds: float) -> bool:
        """Wait at most `seconds` for the call to finish; whether it has."""
        with anyio.move_on_after(seconds):
            await call.done.wait()
        return call.finished

    async def _run(self, call: C, work: Work[C]) -> None:
        try:
            await work(call)
        except Exception:  # the top of a background task: a failing call must not end the app
            log.exception("background call %s failed", call.id)
        finally:
            call.finished_at = self._clock()
            call.done.set()
            self.notify(call.group)

    def _prune(self) -> None:
        """Before a call is added: drop the finished calls older than the keep time, and
        the oldest finished ones beyond `max_calls`."""
        now = self._clock()
        finished = sorted(
            (c for c in self._calls.values() if c.finished_at is not None), key=lambda c: c.finished_at or 0
        )
        excess = len(self._calls) - self.max_calls
        for index, call in enumerate(finished):
            if index < excess or now - (call.finished_at or now) > self.keep_finished_seconds:
                del self._calls[call.id]

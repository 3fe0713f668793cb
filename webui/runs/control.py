"""RunControl: what the run service lets the parts of a run's life kept apart from it (its
questions, webui.runs.questions; its child runs, webui.runs.children) do to a live run."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from webui.events import EventHub
from webui.interactions.service import InteractionService
from webui.runs.admission import Admission
from webui.runs.handle import RunHandle
from webui.runs.live import LiveRun
from webui.runs.request import RunRequest
from webui.runs.types import RunStatus


class RunControl(Protocol):
    engine: Engine
    hub: EventHub
    interactions: InteractionService
    admission: Admission
    max_waiting_runs: int
    max_waiting_per_account: int
    question_timeout_seconds: float

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> None:
        """Run `coro` as a task the service owns (cancelled at its shutdown)."""
        ...

    async def start(self, request: RunRequest) -> RunHandle: ...

    async def cancel(self, run_id: str, *, reason: str = ...) -> None: ...

    async def terminate(
        self, live: LiveRun, status: RunStatus, error: dict[str, Any], *, grace: float | None = None
    ) -> None: ...

    def enter(self, live: LiveRun, status: RunStatus, *, announce: bool = True) -> None:
        """The one place a live run's status changes."""
        ...

    async def set_status(self, live: LiveRun, status: RunStatus, **changes: Any) -> None: ...

    async def write(self, live: LiveRun, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    async def add_event(
        self, live: LiveRun, kind: str, *, text: str | None = None, data: dict[str, Any] | None = None
    ) -> None: ...

    def start_timer(self, live: LiveRun) -> None: ...

    def stop_timer(self, live: LiveRun) -> None: ...

    def release_slot(self, live: LiveRun) -> None: ...

    async def after_wait(self, live: LiveRun) -> bool:
        """One thing the run waited for is done: False when the run ended meanwhile."""
        ...

"""What the run service lets each part of a run's life kept apart from it do to a live run,
one protocol per part: its worker's messages (`LoopControl`, webui.runs.worker_loop), its
way back to running (`ResumeControl`, webui.runs.resuming), its questions
(`QuestionControl`, webui.runs.questions) and its child runs (`ChildControl`,
webui.runs.children). RunService is each of them."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from webui.interactions.service import InteractionService
from webui.runs.admission import Admission
from webui.runs.budget import RunClock
from webui.runs.handle import RunHandle
from webui.runs.live import LiveRun
from webui.runs.request import RunRequest
from webui.runs.types import (
    DEFAULT_MAX_WAITING_PER_ACCOUNT,
    DEFAULT_MAX_WAITING_RUNS,
    DEFAULT_QUESTION_TIMEOUT_SECONDS,
    RunStatus,
)


@dataclass(frozen=True)
class WaitCaps:
    """What waiting runs may hold (a waiting run keeps its worker process): how many wait in
    all, how many of one account, and how long a question waits for its answer."""

    max_waiting_runs: int = DEFAULT_MAX_WAITING_RUNS
    max_waiting_per_account: int = DEFAULT_MAX_WAITING_PER_ACCOUNT
    question_timeout_seconds: float = DEFAULT_QUESTION_TIMEOUT_SECONDS


class RunSteps(Protocol):
    """A live run's steps, recorded in order with its other records."""

    def enter(self, live: LiveRun, status: RunStatus, *, announce: bool = True) -> None:
        """The one place a live run's status changes."""
        ...

    async def set_status(self, live: LiveRun, status: RunStatus, **changes: Any) -> None: ...

    async def write(self, live: LiveRun, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    async def add_event(
        self, live: LiveRun, kind: str, *, text: str | None = None, data: dict[str, Any] | None = None
    ) -> None: ...


class LoopControl(RunSteps, Protocol):
    """What serving a worker's messages needs: its steps and its time limit."""

    clock: RunClock


class ResumeControl(RunSteps, Protocol):
    """What a waiting run needs to go on: a slot again (or to give it up), its time limit."""

    clock: RunClock
    admission: Admission

    def release_slot(self, live: LiveRun) -> None: ...


class WaitControl(ResumeControl, Protocol):
    """What a part that makes a run wait (its questions, its child runs) needs."""

    engine: Engine
    caps: WaitCaps

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> None:
        """Run `coro` as a task the service owns (cancelled at its shutdown)."""
        ...

    async def after_wait(self, live: LiveRun) -> bool:
        """One thing the run waited for is done: False when the run ended meanwhile."""
        ...


class QuestionControl(WaitControl, Protocol):
    interactions: InteractionService

    async def terminate(
        self, live: LiveRun, status: RunStatus, error: dict[str, Any], *, grace: float | None = None
    ) -> None: ...


class ChildControl(WaitControl, Protocol):
    async def start(self, request: RunRequest) -> RunHandle: ...

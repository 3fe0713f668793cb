"""LiveRun: what the run service holds in memory about one run it drives, from its start
until its outcome is recorded."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import INVALID_SPAN, Span

from webui.runs.pool import Worker
from webui.runs.request import RunRequest
from webui.runs.types import DEFAULT_TIMEOUT_SECONDS, RunStatus, RunUpdate
from webui.store.models import Interaction


@dataclass
class OpenQuestion:
    """A pending question as the process follows it: when it was asked (monotonic, for the
    metrics' oldest question) and its span (a no-op when tracing is off)."""

    asked_at: float
    span: Span


@dataclass
class QuestionRound:
    questions: list[Interaction]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(eq=False)
class LiveRun:
    request: RunRequest
    run_id: str
    status: RunStatus = RunStatus.QUEUED
    worker: Worker | None = None
    # interaction id -> the worker's rpc id blocked on it
    pending: dict[str, int] = field(default_factory=dict)
    # A `ctx.together()` round: its rpc id -> its questions in order, and the answers so far
    # (the worker is answered once, when the last one is).
    rounds: dict[int, QuestionRound] = field(default_factory=dict)
    waiting_on: Interaction | None = None
    # Each pending question's asking time and span, by interaction id.
    open_questions: dict[str, OpenQuestion] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    # Its call became an MCP task: a client follows it with tasks/get.
    followed_as_task: bool = False
    # Its `steamharness.run` span (a no-op when tracing is off).
    span: Span = field(default_factory=lambda: INVALID_SPAN)
    watchers: set[asyncio.Queue[RunUpdate]] = field(default_factory=set)
    terminating: tuple[RunStatus, dict[str, Any]] | None = None
    remaining: float = DEFAULT_TIMEOUT_SECONDS
    timer: asyncio.TimerHandle | None = None
    timer_started: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    asked: bool = False
    task: asyncio.Task[None] | None = None
    created: list[dict[str, Any]] = field(default_factory=list)
    # Writes of this run's records happen in threads; the lock keeps them in call order.
    writes: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Child runs: the live parent (its watchers also see this run's questions) and the
    # ids of the children this run waits on.
    parent: LiveRun | None = None
    children: set[str] = field(default_factory=set)
    # (status, output, error) once finished: what a waiting parent is told.
    outcome: tuple[RunStatus, Any, dict[str, Any] | None] | None = None
    # Holds one of the worker slots (only while `running`; see webui.runs.admission).
    slot: bool = False
    # ctx.related[...].run() calls of this run not answered yet (threads may make several).
    child_waits: int = 0
    # Questions of this run being recorded (not in `pending` yet): it is about to wait.
    asking: int = 0
    # Set while one resumption of this run waits in line for a slot; how many more wait for it.
    resuming: asyncio.Event | None = None
    resumers: int = 0
    # Waiting for a slot (admission order: `seq`); `deferred`: the database said no (a
    # project limit counted across replicas), so others go first until the next wake.
    wants_slot: bool = False
    deferred: bool = False
    seq: int = 0
    # Took its slot as it was created: its row says `running` from the start.
    created_running: bool = False
    # The call that started it still follows it: its `finished_audit` goes with the outcome.
    call_following: bool = False
    # It did: the outcome was recorded (or kept) with the call's end.
    call_audited: bool = False
    # interaction id -> the timer that expires the question
    expiry: dict[str, asyncio.TimerHandle] = field(default_factory=dict)

    def publish(self, update: RunUpdate) -> None:
        """To everyone watching this run."""
        for queue in list(self.watchers):
            queue.put_nowait(update)

    @property
    def waiting_again_status(self) -> RunStatus:
        """What the run waits for now: a person (its question, or one being asked) or its children."""
        return RunStatus.WAITING_FOR_INPUT if self.pending or self.asking else RunStatus.WAITING_FOR_CHILD

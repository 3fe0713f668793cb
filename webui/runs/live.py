"""LiveRun: what the run service holds in memory about one run it drives, from its start
until its outcome is recorded.

Its state is in parts, each written by the one module that owns it (the others only read
it; tests/runs/test_run_state_owners.py checks it):

- `place` (`SlotPlace`): its place for a worker slot — webui.runs.admission;
- `asks` (`QuestionState`): its questions to a person or the client, and its resumption —
  webui.runs.questions and webui.runs.resuming;
- `budget` (`Budget`): what is left of its time limit — webui.runs.budget (`RunClock`);
- `call` (`CallFollowing`): whether the call that started it became an MCP task —
  webui.runs.handle.

Its outcome is decided in one place, `conclude`: the first conclusion holds (a worker's
`done` against a timeout, a cancel against a crash), whatever comes after it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import INVALID_SPAN, Span

from webui.runs.request import RunRequest
from webui.runs.types import DEFAULT_TIMEOUT_SECONDS, RunStatus, RunUpdate
from webui.runs.worker_conn import Worker
from webui.store.models import Interaction

# What a run ended with: its status and the detail (`output` on success, else the error).
Conclusion = tuple[RunStatus, dict[str, Any]]


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


@dataclass
class SlotPlace:
    """A run's place for one of the worker slots (webui.runs.admission writes it)."""

    # Holds one of the worker slots (only while `running`).
    held: bool = False
    # Waiting for a slot (admission order: `seq`); `deferred`: the database said no (a
    # project limit counted across replicas), so others go first until the next wake.
    wanted: bool = False
    deferred: bool = False
    seq: int = 0
    # Took its slot as it was created: its row says `running` from the start.
    created_running: bool = False


@dataclass
class QuestionState:
    """A run's questions and its way back to running (webui.runs.questions and
    webui.runs.resuming write it)."""

    # interaction id -> the worker's rpc id blocked on it
    pending: dict[str, int] = field(default_factory=dict)
    # A `ctx.together()` round: its rpc id -> its questions in order, and the answers so far
    # (the worker is answered once, when the last one is).
    rounds: dict[int, QuestionRound] = field(default_factory=dict)
    # The question shown to its watchers (its own, or one a child run it waits for asked).
    waiting_on: Interaction | None = None
    # Each pending question's asking time and span, by interaction id.
    open: dict[str, OpenQuestion] = field(default_factory=dict)
    # interaction id -> the timer that expires the question
    expiry: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    # It asked at least one question (they are closed with its outcome).
    asked: bool = False
    # Questions being recorded (not in `pending` yet): it is about to wait.
    asking: int = 0
    # Set while one resumption waits in line for a slot; how many more wait for it.
    resuming: asyncio.Event | None = None
    resumers: int = 0


@dataclass
class Budget:
    """What is left of a run's time limit; it counts only while the run runs
    (webui.runs.budget writes it)."""

    remaining: float = DEFAULT_TIMEOUT_SECONDS
    timer: asyncio.TimerHandle | None = None
    started: float = 0.0


@dataclass
class CallFollowing:
    """The call that started the run, as it follows the run (webui.runs.handle writes it).
    The call's start and end are the run's own audit rows (`RunRequest.call`)."""

    # It became an MCP task: a client follows it with tasks/get.
    as_task: bool = False


@dataclass(eq=False)
class LiveRun:
    request: RunRequest
    run_id: str
    status: RunStatus = RunStatus.QUEUED
    worker: Worker | None = None
    started_at: float = field(default_factory=time.monotonic)
    # Its `steamharness.run` span (a no-op when tracing is off).
    span: Span = field(default_factory=lambda: INVALID_SPAN)
    watchers: set[asyncio.Queue[RunUpdate]] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    created: list[dict[str, Any]] = field(default_factory=list)
    # Writes of this run's records happen in threads; the lock keeps them in call order.
    writes: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Child runs: the live parent (its watchers also see this run's questions) and, written
    # by webui.runs.children, the ids of the children this run waits on and how many
    # ctx.related[...].run() calls are not answered yet (threads may make several).
    parent: LiveRun | None = None
    children: set[str] = field(default_factory=set)
    child_waits: int = 0
    # (status, output, error) once finished: what a waiting parent is told.
    outcome: tuple[RunStatus, Any, dict[str, Any] | None] | None = None
    place: SlotPlace = field(default_factory=SlotPlace)
    asks: QuestionState = field(default_factory=QuestionState)
    budget: Budget = field(default_factory=Budget)
    call: CallFollowing = field(default_factory=CallFollowing)
    _conclusion: Conclusion | None = field(default=None, repr=False)

    def conclude(self, status: RunStatus, detail: dict[str, Any]) -> bool:
        """The run's outcome is decided: the first conclusion holds, a later one is ignored.
        True when this one holds. The run service records it as the run ends."""
        if self._conclusion is not None:
            return False
        self._conclusion = (status, detail)
        return True

    @property
    def conclusion(self) -> Conclusion | None:
        return self._conclusion

    @property
    def concluded(self) -> bool:
        """Its outcome is decided: it is ending (or has ended)."""
        return self._conclusion is not None

    def publish(self, update: RunUpdate) -> None:
        """To everyone watching this run."""
        for queue in list(self.watchers):
            queue.put_nowait(update)

    @property
    def waiting_again_status(self) -> RunStatus:
        """What the run waits for now: a person (its question, or one being asked) or its children."""
        asks = self.asks
        return RunStatus.WAITING_FOR_INPUT if asks.pending or asks.asking else RunStatus.WAITING_FOR_CHILD

"""RunService: the only component that starts, resumes, cancels or finishes runs.

A run is persisted first (queued), then executed by a freshly forked worker. The service
drives the worker's messages: log lines and progress become run events; `ask`/`approve`
become stored Interactions and the run waits (its time limit paused) until
`InteractionService.answer` resumes it on the same worker. Watchers (the MCP call bridge,
later the browser) subscribe to a run's live events.

Slots: only a `running` run holds one of the `max_concurrent_runs` worker slots. A run
waiting for a person or for its child runs keeps its worker process but gives its slot
up (so waiting runs never starve running ones, nor a parent its own children); it takes
a slot again, ahead of new runs, before it goes on. Waiting runs have caps of their own
(`max_waiting_runs` in all, `max_waiting_per_account` with an open question; an account
with that many runs waiting, for any reason, starts no child run), and a question
expires after `question_timeout_seconds` (the run fails, `question_expired`).
Free slots go first to the account holding the fewest, so one account's burst cannot
keep every other account waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import secrets
import signal
import stat
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import anyio
from sqlalchemy.engine import Engine

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import DatabaseBusy, TaskSet, run_db
from webui.configs.service import ConfigSnapshot
from webui.errors import InvalidArguments, NotFound, SteamharnessError
from webui.events import EventHub, Subscription
from webui.files.store import FileStore, output_view, worker_view
from webui.interactions.service import Answer, InteractionService
from webui.runs.outcomes import DEFAULT_MAX_BYTES, EVENT, FINAL, STATUS, Record, RunRecordBacklog
from webui.runs.pool import Worker, WorkerPool, WorkerProtocolError
from webui.runs.related import MAX_CHILD_DEPTH, RelatedTarget, Relations
from webui.store import interactions as interaction_store
from webui.store import kv as kv_store
from webui.store import runs as run_store
from webui.store.models import Interaction, KVEntry, ManagedFile, PersistentValue, Run, as_utc, utcnow
from webui.workflows.project import Entrypoint, Project, parse_params
from webui.workflows.related import RelatedProjectError
from webui.workflows.schema import (
    field_summary,
    form_blockers,
    input_schema,
    question_schema,
    validate_arguments,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 3600.0
EXIT_WAIT_SECONDS = 10.0
# Writes a run makes for its worker (created files, questions) are retried while the
# database is locked by someone else, each attempt bounded by the driver's busy timeout.
# Its own records (status, timeline, outcome) are never given up: webui.runs.outcomes.
WRITE_ATTEMPTS = 5
# At shutdown: how long the run records the database has not taken yet may still be
# written before they go to the data dir's file of pending records.
DEFAULT_RECORDS_DRAIN_SECONDS = 5.0
# How long such a write waits for the run's own records kept before it (as long as the
# attempts above could take with the default busy timeout).
KEPT_WAIT_SECONDS = 25.0
# Several replicas on one database: how often a waiting run re-reads its question (in
# case the event of an answer given on another replica was missed), a queued run re-tries
# its admission, and a run followed from another replica is re-read.
SHARED_POLL_SECONDS = 5.0
# Defaults of the waiting caps and of a question's expiry (webui.settings).
DEFAULT_MAX_WAITING_RUNS = 32
DEFAULT_MAX_WAITING_PER_ACCOUNT = 8
DEFAULT_QUESTION_TIMEOUT_SECONDS = 24 * 3600.0


@contextlib.contextmanager
def take_staged_file(create_dir: str, tmp_path: str, *, owner: int) -> Iterator[BinaryIO]:
    """Open a file a worker staged for ctx.files.create; it is unlinked once done with
    (unless the database was busy: the retry takes it again). The server may have more
    rights than the worker, so nothing that could point elsewhere is followed: only a
    plain file, directly in the run's staging directory, owned by the worker, one link."""
    refused = SteamharnessError("files.create: the file must be written by ctx.files.create")
    folder, name = os.path.split(os.path.normpath(tmp_path))
    if folder != os.path.normpath(create_dir) or name in ("", ".", ".."):
        raise refused
    dir_fd = os.open(create_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError:
            raise refused from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != owner:
            os.close(fd)
            raise refused
        try:
            with os.fdopen(fd, "rb") as src:
                yield src
        except DatabaseBusy:
            raise  # kept for the retry to take again
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


async def _in_scope(scope: anyio.CancelScope, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `work()` in `scope`: cancelling the scope stops it even while it waits in `run_db`
    (whose shielded thread wait would swallow a plain `Task.cancel`). The coroutine is made
    here, so a task cancelled before it starts leaves none un-awaited."""
    with scope:
        await work()


def _duration(seconds: float) -> str:
    """24 h, 90 min, 45 s: how long a limit is, for a person."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(6)}"


class RunRefused(SteamharnessError):
    """Preflight said no: no run is created. `code` is the stable error code of the result."""

    status = 429

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RunLimits:
    """The project's run gate and queue limits, read fresh before every start."""

    gate_open: bool = True
    max_running: int | None = None
    max_queued: int | None = None


@dataclass
class RunRequest:
    """Everything a run needs; built by a transport, executed the same way for all."""

    project: Project
    entrypoint: Entrypoint
    params: dict[str, Any]  # for the worker (files as {"$file": {...}} markers)
    stored_params: dict[str, Any]  # for the record (files by id)
    source: str = "mcp"
    transport: str | None = None
    actor: str | None = None
    # The account whose key started the run; it owns the run's questions. None: the
    # admin principal (server admin key, local stdio operator).
    account_id: int | None = None
    session_id: str | None = None
    project_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    related: dict[str, str] = field(default_factory=dict)
    limits: RunLimits = field(default_factory=RunLimits)
    # The configuration the run starts with (recorded with the run, read as `ctx.config`).
    config: ConfigSnapshot | None = None
    # Called with the new run id inside the same step that creates it (e.g. the HTTP
    # gateway registers runs of a POST so a dropped connection can cancel them).
    on_created: Callable[[str], None] | None = None
    # One more audit event (name, fields; its run id filled in) written in the transaction
    # that creates the run: the MCP call's `tool.called`, with no transaction of its own.
    created_audit: tuple[AuditName, dict[str, Any]] | None = None
    # Where `ctx.related[alias]` resolves (None: the run may use no related project).
    relations: Relations | None = None
    # A child run (started by a handler through ctx.related): its parent and how deep.
    parent_run_id: str | None = None
    depth: int = 0

    def audit_fields(self, run_id: str) -> dict[str, Any]:
        """What every audit event about one of this request's runs names."""
        return {
            "actor": self.actor,
            "project_id": self.project.id,
            "version": self.project_version,
            "session_id": self.session_id,
            "tool": self.entrypoint.id,
            "run_id": run_id,
            "source": self.source,
        }


@dataclass
class RunUpdate:
    """What a watcher receives: `progress`, `waiting` (with the interaction), `running`, `final`."""

    kind: str
    run_id: str
    status: str
    interaction: Interaction | None = None
    progress: dict[str, Any] | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    # `final`: the files the run created (webui.files.store.output_view), oldest first.
    files: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class LiveState:
    """Where a live run stands now: its status, the question it waits on (its own, or one a
    child run it waits for asked), and the child runs it waits for."""

    status: str
    waiting_on: Interaction | None
    children: tuple[str, ...]


@dataclass
class _Live:
    request: RunRequest
    run_id: str
    status: str = "queued"
    worker: Worker | None = None
    # interaction id -> the worker's rpc id blocked on it
    pending: dict[str, int] = field(default_factory=dict)
    waiting_on: Interaction | None = None
    watchers: set[asyncio.Queue[RunUpdate]] = field(default_factory=set)
    terminating: tuple[str, dict[str, Any]] | None = None
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
    parent: _Live | None = None
    children: set[str] = field(default_factory=set)
    # (status, output, error) once finished: what a waiting parent is told.
    outcome: tuple[str, Any, dict[str, Any] | None] | None = None
    # Holds one of the worker slots (only while `running`; see the module docstring).
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
    # interaction id -> the timer that expires the question
    expiry: dict[str, asyncio.TimerHandle] = field(default_factory=dict)


class RunService:
    def __init__(
        self,
        *,
        engine: Engine,
        pool: WorkerPool,
        interactions: InteractionService,
        files: FileStore,
        audit: AuditLog,
        kv_engine: Engine,
        values_engine: Engine,
        file_create_dir: Path,
        max_concurrent_runs: int,
        kill_grace_seconds: float,
        hub: EventHub,
        echo: TextIO | None = None,
        replica_id: str | None = None,
        pending_records: Path | None = None,
        pending_records_bytes: int = DEFAULT_MAX_BYTES,
        records_drain_seconds: float = DEFAULT_RECORDS_DRAIN_SECONDS,
        max_waiting_runs: int = DEFAULT_MAX_WAITING_RUNS,
        max_waiting_per_account: int = DEFAULT_MAX_WAITING_PER_ACCOUNT,
        question_timeout_seconds: float = DEFAULT_QUESTION_TIMEOUT_SECONDS,
    ) -> None:
        """`replica_id`: the serve replica recording its runs (webui.replicas); None in a
        local process, whose runs are judged by `owner` (the process) instead.
        `pending_records`: the file where run records the database could not take are
        left at shutdown and read back at the next start (webui.runs.outcomes), at most
        `pending_records_bytes` of timeline entries kept in memory meanwhile."""
        self.engine = engine
        self.replica_id = replica_id
        self.hub = hub
        self.pool = pool
        self.interactions = interactions
        self.files = files
        self.audit = audit
        self.kv_engine = kv_engine
        self.values_engine = values_engine
        self.file_create_dir = file_create_dir
        self.kill_grace_seconds = kill_grace_seconds
        self.echo = echo
        self.owner = run_store.process_owner_token()
        self.max_concurrent_runs = max_concurrent_runs
        self.max_waiting_runs = max_waiting_runs
        self.max_waiting_per_account = max_waiting_per_account
        self.question_timeout_seconds = question_timeout_seconds
        self._seq = 0
        # project id -> runs being created (preflight passed, not live yet)
        self._starting: dict[str, int] = {}
        self._admission = asyncio.Condition()
        self._live: dict[str, _Live] = {}
        self._tasks = TaskSet()
        self.accepting = True
        self._watching = anyio.CancelScope()
        # Other replicas may share the database (PostgreSQL): limits are counted there,
        # answers given elsewhere reach a waiting run through the hub (and a re-check).
        self.shared = engine.dialect.name == "postgresql"
        self.records = RunRecordBacklog(
            engine=engine,
            audit=audit,
            interactions=interactions,
            hub=hub,
            spill_path=pending_records,
            max_bytes=pending_records_bytes,
        )
        self.records_drain_seconds = records_drain_seconds
        interactions.on_answer(self._on_answer)

    # ----------------------------------------------------------------- lifecycle
    def recover(self) -> list[str]:
        """At start-up: the records a previous process could not write are written, then
        runs orphaned by a dead process are marked interrupted."""
        self.records.replay()
        ids = run_store.interrupt_orphans(self.engine)
        for run_id in ids:
            self.interactions.close_for_run(run_id)
        return ids

    def start_watching(self) -> None:
        """On a shared database: follow the other replicas' events (answers to this
        process's questions, runs ending elsewhere) and re-check the database now and then."""
        if not self.shared:
            return
        self.hub.on_resync(lambda: self._tasks.spawn(self._recheck(), name="runs-resync"))
        self._tasks.spawn(_in_scope(self._watching, self._watch_hub), name="runs-hub")

    async def _watch_hub(self) -> None:
        while True:
            with self.hub.subscribe("interactions", "runs") as sub:
                while True:
                    try:
                        event = await asyncio.wait_for(sub.queue.get(), SHARED_POLL_SECONDS)
                    except TimeoutError:
                        await self._recheck()
                        continue
                    if event is None:
                        break  # lagged: events were lost; re-check, then listen again
                    if event.topic == "interactions" and event.kind == "answered":
                        await self._resume_if_waiting(str(event.data.get("interactionId")))
                    elif event.topic == "runs" and self._slot_wanted():
                        await self._wake_queue()
            await self._recheck()

    async def _recheck(self) -> None:
        """Questions of this process's runs answered elsewhere resume their runs; queued
        runs try again for a slot freed elsewhere."""
        try:
            asked = [iid for live in list(self._live.values()) for iid in live.pending]
            if asked:
                rows = await run_db(interaction_store.answered_among, self.engine, interaction_ids=asked)
                for row in rows:
                    await self._resume_with(row)
            if self._slot_wanted():
                await self._wake_queue()
        except Exception:
            log.exception("re-checking the waiting runs failed")

    async def _resume_if_waiting(self, interaction_id: str) -> None:
        if not any(interaction_id in live.pending for live in self._live.values()):
            return  # not ours, or already resumed by the answer given in this process
        try:
            row = await run_db(interaction_store.get_interaction, self.engine, interaction_id=interaction_id)
            if row is not None and row.status == "answered":
                await self._resume_with(row)
        except Exception:  # the watcher goes on; a failed read is retried by the next re-check
            log.exception("interaction %s: resuming its run with the answer failed", interaction_id)

    async def _resume_with(self, row: Interaction) -> None:
        """Resume the run with the answer stored in the database (given on another replica)."""
        await self._on_answer(row, Answer(row.id, row.run_id, row.action or "cancel", row.answer))

    async def shutdown(self) -> None:
        """Stop every live run; nothing is left running or waiting forever."""
        self._watching.cancel()
        for live in list(self._live.values()):
            await self._terminate(
                live,
                "failed",
                {"code": "interrupted", "message": "The server stopped while this run was active."},
                grace=0.0,
            )
        await self._tasks.cancel_all()
        await self.records.close(self.records_drain_seconds)

    async def stop_all(self, error: dict[str, Any], *, grace: float) -> None:
        """A graceful server shutdown: refuse new runs, then stop every live run at once,
        each recorded as failed with `error`, its watchers told the same."""
        self.accepting = False
        lives = list(self._live.values())
        await asyncio.gather(*(self._terminate(live, "failed", error, grace=grace) for live in lives))

    # ----------------------------------------------------------------- API
    def _counts(self, project_id: str | None = None) -> tuple[int, int]:
        """(holding a slot, queued) among live runs, for one project or all."""
        holding = 0
        starting = self._starting
        queued = sum(starting.values()) if project_id is None else starting.get(project_id, 0)
        for live in self._live.values():
            if project_id is not None and live.request.project.id != project_id:
                continue
            if live.slot:
                holding += 1
            elif live.status == "queued":
                queued += 1
        return holding, queued

    def _slot_wanted(self) -> bool:
        return any(live.wants_slot for live in self._live.values())

    def _free_slots(self) -> int:
        return self.max_concurrent_runs - self._counts()[0]

    def _waiting(self, account_id: int | None = None, *, asking: bool = False) -> int:
        """Runs holding a worker process but no slot (waiting for a person or a child run,
        or for a slot to go on); `asking`: only those of `account_id` with an open question."""
        n = 0
        for live in self._live.values():
            if live.worker is None or live.slot or live.done.is_set():
                continue
            if asking and (live.request.account_id != account_id or not live.pending):
                continue
            n += 1
        return n

    def _waiting_of(self, account_id: int | None) -> int:
        """Runs of `account_id` holding a worker process but no slot, for any reason."""
        return sum(
            1
            for live in self._live.values()
            if live.worker is not None
            and not live.slot
            and not live.done.is_set()
            and live.request.account_id == account_id
        )

    def preflight(self, request: RunRequest) -> None:
        limits = request.limits
        if not self.accepting:
            raise RunRefused("shutting_down", "The server is shutting down; try again once it is back.")
        if not limits.gate_open:
            raise RunRefused("run_gate_closed", "The project's run gate is closed; no new runs are accepted.")
        if limits.max_queued is not None and not self.shared:  # shared: counted as the run is inserted
            holding, queued = self._counts(request.project.id)
            if run_store.queue_full(
                holding=holding,
                queued=queued,
                max_running=limits.max_running,
                max_queued=limits.max_queued,
                free_slots=self._free_slots(),
            ):
                raise RunRefused(
                    "queue_limit",
                    f"The project already has {holding} running and {queued} queued runs; try again later.",
                )

    def _slotless(self) -> list[str]:
        """This process's runs past their admission that hold no slot now (the database
        may still say `running`); queued ones are counted as queued."""
        return [live.run_id for live in self._live.values() if not live.slot and live.status != "queued"]

    def _may_run_now(self, live: _Live) -> bool:
        """A slot is free for `live`, and it is next in line for one: runs that already
        have a worker (resuming after an answer or their child runs) first, then the
        account holding the fewest slots, then the oldest. One pass over the live runs
        (as the counting before it): every waiter checks this when a slot frees."""
        held = 0
        by_account: dict[int | None, int] = {}
        by_project: dict[str, int] = {}
        for other in self._live.values():
            if other.slot:
                held += 1
                by_account[other.request.account_id] = by_account.get(other.request.account_id, 0) + 1
                by_project[other.request.project.id] = by_project.get(other.request.project.id, 0) + 1
        if held >= self.max_concurrent_runs:
            return False

        def allowed(run: _Live) -> bool:
            limit = run.request.limits.max_running
            return limit is None or by_project.get(run.request.project.id, 0) < limit

        def rank(run: _Live) -> tuple[bool, int, int]:
            return (run.worker is None, by_account.get(run.request.account_id, 0), run.seq)

        if not allowed(live):
            return False
        mine = rank(live)
        return not any(
            other is not live
            and other.wants_slot
            and not other.deferred
            and other.terminating is None
            and rank(other) < mine
            and allowed(other)
            for other in self._live.values()
        )

    async def _take_slot(self, live: _Live) -> bool:
        """Wait until `live` may hold a slot (this process's worker slots, the project's
        running limit, counted in the database on a shared one) and take it; False when
        the run ends meanwhile."""
        req = live.request
        counted_in_db = self.shared and req.limits.max_running is not None
        resuming = live.worker is not None
        self._seq += 1
        live.seq = self._seq
        live.wants_slot = True
        try:
            async with self._admission:
                while True:
                    await self._admission.wait_for(
                        lambda: live.terminating is not None or self._may_run_now(live)
                    )
                    if live.terminating is not None:
                        return False
                    if counted_in_db:
                        admitted = await run_db(
                            run_store.admit_queued,
                            self.engine,
                            run_id=live.run_id,
                            project_id=req.project.id,
                            max_running=req.limits.max_running,
                            exclude=self._slotless(),
                            from_statuses=run_store.RESUMABLE_STATUSES if resuming else ("queued",),
                        )
                        if not admitted:
                            # Taken elsewhere: let the others here go first; a slot freed
                            # here or elsewhere wakes us, the poll covers a missed event.
                            live.deferred = True
                            self._admission.notify_all()
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(self._admission.wait(), SHARED_POLL_SECONDS)
                            live.deferred = False
                            continue
                    live.slot = True
                    if self._free_slots() > 0:
                        self._admission.notify_all()  # the next in line may find one free too
                    return True
        finally:
            live.wants_slot = False

    def _release_slot(self, live: _Live) -> None:
        """The run stops running for now (it waits for a person or for its child runs):
        its time limit pauses and its slot goes to the next in line."""
        self._stop_timer(live)
        if live.slot:
            live.slot = False
            self._tasks.spawn(self._wake_queue())

    async def _resume(self, live: _Live) -> bool:
        """Take a slot again before the run goes on: False when it ended meanwhile. One
        resumption waits in line per run: another (a second answer meanwhile) waits for it
        (two in line for one slot, the second would wait for the slot its own run holds)."""
        if live.slot:
            return True
        if live.resuming is not None:
            live.resumers += 1
            try:
                await live.resuming.wait()
            finally:
                live.resumers -= 1
            return not live.done.is_set() and live.terminating is None
        live.resuming = resumed = asyncio.Event()
        try:
            return await self._resume_in_line(live)
        finally:
            live.resuming = None
            resumed.set()

    async def _resume_in_line(self, live: _Live) -> bool:
        if not await self._take_slot(live):
            return False
        if live.pending or live.child_waits or live.asking:
            # Another of its handler's threads asked or started a child run while this one
            # waited for the slot: the run waits again, and holds none while it does (two
            # parents holding both slots would wait forever for children that need one).
            self._release_slot(live)
            if self.shared and live.request.limits.max_running is not None:
                # The database admission said `running`; it says waiting again.
                waiting = "waiting_for_input" if live.pending or live.asking else "waiting_for_child"
                try:
                    await self._set_status(live, waiting)
                except Exception:
                    log.exception("run %s: waiting again was not recorded", live.run_id)
            return True
        try:
            await self._set_status(live, "running")
        except Exception:
            log.exception("run %s: its resumption was not recorded", live.run_id)
            live.status = "running"
        self._start_timer(live)
        self._publish(live, RunUpdate("running", live.run_id, live.status))
        return True

    async def start(self, request: RunRequest) -> str:
        self.preflight(request)
        if self.records.over_budget:
            # Bounds what the backlog holds: no new run while the old ones' records wait.
            raise DatabaseBusy(
                "the server is still writing the records of earlier runs; try again in a moment"
            )
        run_id = new_run_id()
        ep = request.entrypoint
        run = Run(
            id=run_id,
            project_id=request.project.id,
            project_version=request.project_version,
            entrypoint_id=ep.id,
            entrypoint_title=ep.title,
            source=request.source,
            transport=request.transport,
            actor=request.actor,
            session_id=request.session_id,
            status="queued",
            params=request.stored_params,
            owner=self.owner,
            replica_id=self.replica_id,
            account_id=request.account_id,
            parent_run_id=request.parent_run_id,
            config_name=request.config.name if request.config else None,
            config_revision=request.config.revision if request.config else None,
            config_values=request.config.stored if request.config else None,
        )

        def audit(s: Any) -> None:
            self.audit.record(s, AuditName.RUN_CREATED, **request.audit_fields(run_id), outcome="queued")
            if request.created_audit is not None:
                event, fields = request.created_audit
                self.audit.record(s, event, **{**fields, "run_id": run_id})

        # Until its run is live, a start counts as queued: starts racing each other all
        # see it (the preflight above and the insert below are apart by a thread wait).
        project_id = request.project.id
        self._starting[project_id] = self._starting.get(project_id, 0) + 1
        try:
            if self.shared:
                refused = await run_db(
                    run_store.create_run_within_limits,
                    self.engine,
                    run=run,
                    max_running=request.limits.max_running,
                    max_queued=request.limits.max_queued,
                    exclude=self._slotless(),
                    free_slots=self._free_slots(),
                    replica_slots=(
                        (self.replica_id, self.max_concurrent_runs) if self.replica_id is not None else None
                    ),
                    audit=audit,
                )
                if refused is not None:
                    holding, queued = refused
                    raise RunRefused(
                        "queue_limit",
                        f"The project already has {holding} running and {queued} queued runs;"
                        " try again later.",
                    )
            else:
                await run_db(run_store.create_run, self.engine, run=run, audit=audit)
            live = _Live(
                request=request, run_id=run_id, remaining=ep.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
            )
            live.parent = self._live.get(request.parent_run_id) if request.parent_run_id else None
            self._live[run_id] = live
        finally:
            left = self._starting.pop(project_id) - 1
            if left:
                self._starting[project_id] = left
        if request.on_created is not None:
            request.on_created(run_id)
        live.task = asyncio.create_task(self._drive(live), name=f"run-{run_id}")
        return run_id

    def live_runs_of_session(self, session_id: str) -> list[str]:
        """Ids of the live runs an MCP session started."""
        return [run_id for run_id, live in self._live.items() if live.request.session_id == session_id]

    def is_live(self, run_id: str) -> bool:
        return run_id in self._live

    def live_state(self, run_id: str) -> LiveState | None:
        """None once the run has ended (or is not driven by this process)."""
        live = self._live.get(run_id)
        if live is None or live.done.is_set():
            return None
        return LiveState(live.status, live.waiting_on, tuple(sorted(live.children)))

    def live_worker_pid(self, run_id: str) -> int | None:
        live = self._live.get(run_id)
        return live.worker.pid if live and live.worker else None

    @contextlib.asynccontextmanager
    async def watch(self, run_id: str) -> AsyncIterator[asyncio.Queue[RunUpdate]]:
        """A queue of this run's updates, starting with where it stands now."""
        queue: asyncio.Queue[RunUpdate] = asyncio.Queue()
        live = self._live.get(run_id)
        kept = self.records.final(run_id) if live is None else None
        if kept is not None:
            # Ended, its outcome not written yet (the database is unavailable): from memory.
            f = kept.fields
            files = list(f.get("files") or [])
            queue.put_nowait(
                RunUpdate(
                    "final", run_id, f["status"], output=f.get("output"), error=f.get("error"), files=files
                )
            )
            yield queue
            return
        if live is None:
            run = await run_db(run_store.get_run, self.engine, run_id=run_id)
            if run is None:
                raise NotFound(f"run {run_id!r} not found")
            if run.status in run_store.FINAL_STATUSES:
                files = await run_db(self.files.outputs_of_run, run_id)
                queue.put_nowait(self._final_update(run, files))
                yield queue
                return
            if not self.shared:
                raise NotFound(f"run {run_id!r} is not driven by this process")
            # Another replica drives it: follow it through the hub and the database.
            scope = anyio.CancelScope()
            follower = asyncio.create_task(
                _in_scope(scope, functools.partial(self._follow_remote, run_id, queue)),
                name=f"follow-{run_id}",
            )
            try:
                yield queue
            finally:
                scope.cancel()
                await follower
            return
        if live.waiting_on is not None:
            queue.put_nowait(RunUpdate("waiting", run_id, live.status, interaction=live.waiting_on))
        live.watchers.add(queue)
        try:
            yield queue
        finally:
            live.watchers.discard(queue)

    async def cancel(self, run_id: str, *, reason: str = "The run was cancelled.") -> None:
        live = self._live.get(run_id)
        if live is None:
            return
        await self._terminate(live, "cancelled", {"code": "cancelled", "message": reason})

    # ----------------------------------------------------------------- driving
    async def _drive(self, live: _Live) -> None:
        try:
            if await self._take_slot(live):
                live.status = "running"  # holds its slot from here
                await self._run_worker(live)
        except Exception:
            log.exception("run %s: the run service failed", live.run_id)
            if live.terminating is None:
                live.terminating = (
                    "failed",
                    {"code": "internal", "message": "The run failed inside the server."},
                )
        finally:
            await self._finish(live)

    async def _run_worker(self, live: _Live) -> None:
        req = live.request
        spec = {
            "runId": live.run_id,
            "entrypointId": req.entrypoint.id,
            "params": req.params,
            "root": str(req.project.root),
            "handler": req.entrypoint.handler,
            # A worker stages ctx.files.create in its scratch dir; the server copies it into
            # the created-files folder (a worker user cannot reach it).
            "fileCreateDir": None,
            "env": req.env,
            "related": req.related,
            "relatedIds": req.relations.ids() if req.relations is not None else {},
            "config": req.config.values if req.config else {},
        }
        worker = await self.pool.spawn(spec)
        live.worker = worker
        if live.terminating is not None:  # cancelled while the fork was under way
            worker.kill()
        self._start_timer(live)
        # Recorded while the worker already runs: the write is off the run's critical path.
        await self._set_status(live, "running", started_at=utcnow())
        while True:
            try:
                msg = await worker.recv()
            except WorkerProtocolError as exc:
                live.terminating = live.terminating or ("failed", {"code": exc.code, "message": exc.message})
                worker.kill()  # it may be blocked writing the rest; nothing it says counts now
                break
            if msg is None:
                break
            kind = msg.get("type")
            if kind == "output":
                await self._record_output(live, str(msg.get("stream")), str(msg.get("text", "")))
            elif kind == "log":
                await self._record_output(live, "log", str(msg.get("text", "")))
            elif kind == "progress":
                await self._on_progress(live, msg)
            elif kind == "rpc":
                await self._on_rpc(live, worker, msg)
            elif kind == "done":
                live.terminating = live.terminating or ("success", {"output": msg.get("output")})
            elif kind == "failed":
                err_code = msg.get("errCode")
                live.terminating = live.terminating or (
                    "failed",
                    {"code": "business_error", "errCode": err_code, "message": str(msg.get("message", ""))},
                )
            elif kind == "error":
                code = "output_too_large" if msg.get("code") == "output_too_large" else "handler_error"
                live.terminating = live.terminating or (
                    "failed",
                    {"code": code, "message": str(msg.get("message", "The handler failed."))},
                )
        self._stop_timer(live)
        if live.terminating is None or live.terminating[0] in ("cancelled", "timeout", "failed"):
            # No clean outcome, or we killed it: know it is gone (and why) before finishing.
            status = await worker.wait_exit(EXIT_WAIT_SECONDS)
            if live.terminating is None:
                reason = status.describe() if status else "the worker process stopped unexpectedly"
                live.terminating = (
                    "failed",
                    {"code": "handler_error", "message": f"The run crashed: {reason}."},
                )
        worker.close()

    async def _finish(self, live: _Live) -> None:
        if live.done.is_set():
            return
        self._stop_timer(live)
        for timer in live.expiry.values():
            timer.cancel()
        live.expiry.clear()
        status, detail = live.terminating or (
            "failed",
            {"code": "internal", "message": "The run ended without an outcome."},
        )
        output = detail.get("output") if status == "success" else None
        error = None if status == "success" else detail
        req = live.request
        outcome = Record(
            FINAL,
            live.run_id,
            {
                "status": status,
                "output": output,
                "error": error,
                "finished_at": utcnow(),
                "source": req.source,
                "audit": req.audit_fields(live.run_id),
                "close_questions": live.asked,
                "files": list(live.created),  # for watchers while it waits; not written
            },
        )
        try:
            # Written now, or kept until the database takes it (webui.runs.outcomes).
            await self._keep(live, outcome)
        except Exception:
            log.exception("run %s: its outcome (%s) could not be recorded", live.run_id, status)
        self.hub.publish("runs", "status", runId=live.run_id, projectId=req.project.id, status=status)
        live.status = status
        live.waiting_on = None
        live.outcome = (status, output, error)
        for child_id in list(live.children):  # a child never outlives the run waiting on it
            self._tasks.spawn(self.cancel(child_id, reason=f"Its parent run {live.run_id} ended ({status})."))
        final = RunUpdate("final", live.run_id, status, output=output, error=error, files=list(live.created))
        self._publish(live, final)
        self._live.pop(live.run_id, None)
        live.slot = False
        live.done.set()
        self._tasks.spawn(self._wake_queue())

    async def _wake_queue(self) -> None:
        async with self._admission:
            self._admission.notify_all()

    async def _terminate(
        self, live: _Live, status: str, error: dict[str, Any], *, grace: float | None = None
    ) -> None:
        if live.done.is_set():
            return
        if live.terminating is None:
            live.terminating = (status, error)
        if live.wants_slot:
            await self._wake_queue()  # it stops waiting for a slot
        grace = self.kill_grace_seconds if grace is None else grace
        worker = live.worker
        if worker is None and live.task is not None:
            # Still queued (or forking): no process to stop. A task cancelled before its
            # first step never runs its `finally`, so record the outcome here too.
            live.task.cancel()
            await asyncio.wait([live.task], timeout=EXIT_WAIT_SECONDS)
            await self._finish(live)
        elif worker is not None:
            if grace > 0:
                worker.kill(signal.SIGTERM)
                exited = await worker.wait_exit(grace)
                if exited is None:
                    worker.kill(signal.SIGKILL)
            else:
                worker.kill(signal.SIGKILL)
        # Wait for the driver to record the outcome (it sees the worker's socket close).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.done.wait(), EXIT_WAIT_SECONDS + grace)

    # ----------------------------------------------------------------- time limit
    def _start_timer(self, live: _Live) -> None:
        if live.timer is not None:
            return  # already counting: one timer per run, stopped as often as started
        loop = asyncio.get_running_loop()
        live.timer_started = loop.time()
        live.timer = loop.call_later(max(live.remaining, 0.0), self._on_timeout, live)

    def _stop_timer(self, live: _Live) -> None:
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
            live.remaining -= asyncio.get_running_loop().time() - live.timer_started

    def _on_timeout(self, live: _Live) -> None:
        live.timer = None
        limit = live.request.entrypoint.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
        error = {"code": "timeout", "message": f"The run exceeded its time limit of {limit:g} s."}
        self._tasks.spawn(self._terminate(live, "timeout", error), name=f"timeout-{live.run_id}")

    # ----------------------------------------------------------------- worker messages
    async def _write(self, live: _Live, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One of this run's writes, in a thread, in order, retried while the database is
        locked by someone else."""
        async with live.writes:
            # Never ahead of this run's own records kept while the database was unavailable.
            if not await self.records.wait_written(live.run_id, KEPT_WAIT_SECONDS):
                raise DatabaseBusy("the database is unavailable; try again in a moment")
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    return await run_db(fn, *args, **kwargs)
                except DatabaseBusy:
                    if attempt == WRITE_ATTEMPTS - 1:
                        raise
                    log.warning("run %s: database busy, retrying a write", live.run_id)

    async def _keep(self, live: _Live, record: Record) -> None:
        """One of this run's own records (status, timeline, outcome), in order: written now,
        or, while the database cannot take it, kept and written once it can."""
        async with live.writes:
            await self.records.write_or_keep(record)

    async def _set_status(self, live: _Live, status: str, **changes: Any) -> None:
        if live.done.is_set():
            return
        live.status = status
        self.hub.publish(
            "runs", "status", runId=live.run_id, projectId=live.request.project.id, status=status
        )
        fields = {"status": status, "source": live.request.source, **changes}
        await self._keep(live, Record(STATUS, live.run_id, fields))

    async def _add_event(
        self, live: _Live, kind: str, *, text: str | None = None, data: dict[str, Any] | None = None
    ) -> None:
        """One timeline entry of this run (a log line, output, progress)."""
        fields = {"kind": kind, "text": text, "data": data, "source": live.request.source}
        await self._keep(live, Record(EVENT, live.run_id, fields))

    async def _record_output(self, live: _Live, stream: str, text: str) -> None:
        if not text:
            return
        if self.echo is not None:
            # stdio: project logs and worker output go to stderr, never the protocol stream
            for line in text.splitlines():
                self.echo.write(f"[{live.run_id} {stream}] {line}\n")
            self.echo.flush()
        await self._add_event(live, stream, text=text)

    async def _on_progress(self, live: _Live, msg: dict[str, Any]) -> None:
        data = {"done": msg.get("done"), "total": msg.get("total"), "message": msg.get("message")}
        # Watchers first: a progress notification need not wait for the timeline write.
        self._publish(live, RunUpdate("progress", live.run_id, live.status, progress=data))
        await self._add_event(live, "progress", data=data)

    async def _on_rpc(self, live: _Live, worker: Worker, msg: dict[str, Any]) -> None:
        rid = int(msg["id"])
        op = str(msg.get("op"))
        args = msg.get("args") or {}
        try:
            if op in ("ask", "approve"):
                await self._open_interaction(live, rid, op, args)
                return
            if op == "related.run":
                await self._start_child(live, worker, rid, args)
                return
            if op == "files.create":
                result = await self._write(live, self._create_file, live, worker, args)
            else:
                result = await self._write(live, self._serve_rpc, live, op, args)
        except SteamharnessError as exc:
            await worker.send({"type": "reply", "id": rid, "ok": False, "error": exc.message})
            return
        except Exception:
            log.exception("run %s: rpc %s failed", live.run_id, op)
            await worker.send({"type": "reply", "id": rid, "ok": False, "error": f"{op} failed"})
            return
        await worker.send({"type": "reply", "id": rid, "ok": True, "result": result})

    def _serve_rpc(self, live: _Live, op: str, args: dict[str, Any]) -> Any:
        project_id = live.request.project.id
        stores: dict[str, tuple[Engine, type[KVEntry] | type[PersistentValue]]] = {
            "kv": (self.kv_engine, KVEntry),
            "values": (self.values_engine, PersistentValue),
        }
        family, _, verb = op.partition(".")
        if family == "related":
            # ctx.related[alias].kv / .values: the related project's stores, read-only
            store, _, verb = verb.partition(".")
            if store in stores and verb == "get":
                target = self._resolve_related(live, str(args.get("alias")))
                engine, table = stores[store]
                key = str(args.get("key"))
                found, value = kv_store.get_value(engine, table, project_id=target.project.id, key=key)
                return {"found": found, "value": value}
        if family in stores:
            engine, table = stores[family]
            key = str(args.get("key"))
            if verb == "get":
                found, value = kv_store.get_value(engine, table, project_id=project_id, key=key)
                return {"found": found, "value": value}
            if verb == "set":
                kv_store.set_value(engine, table, project_id=project_id, key=key, value=args.get("value"))
                return None
            if verb == "delete":
                return kv_store.delete_value(engine, table, project_id=project_id, key=key)
        raise SteamharnessError(f"unknown operation {op!r}")

    def _create_file(self, live: _Live, worker: Worker, args: dict[str, Any]) -> dict[str, Any]:
        """ctx.files.create: copy the file the worker staged into the created-files folder."""
        project_id = live.request.project.id
        assert worker.scratch is not None
        with take_staged_file(worker.scratch, str(args.get("tmp_path")), owner=worker.uid) as src:
            row = self.files.adopt(
                project_id=project_id,
                src=src,
                name=str(args.get("name") or "output"),
                mime_type=str(args.get("mime_type") or "application/octet-stream"),
                run_id=live.run_id,
                created_dir=self.file_create_dir,
            )
        live.created.append(output_view(row))
        run_store.add_event(
            self.engine,
            run_id=live.run_id,
            kind="file",
            data={"id": row.id, "name": row.name, "size": row.size},
            source=live.request.source,
        )
        return worker_view(row)

    def _waiting_refusal(self, live: _Live) -> str | None:
        """Why this run may not wait for a person now (a waiting run keeps its worker
        process): None when it may."""
        if live.slot and self._waiting() >= self.max_waiting_runs:
            return (
                f"The server already has {self.max_waiting_runs} runs waiting for an answer or a"
                " child run (STEAMHARNESS_MAX_WAITING_RUNS); this run stopped instead of waiting."
            )
        account = live.request.account_id
        if not live.pending and self._waiting(account, asking=True) >= self.max_waiting_per_account:
            return (
                f"This account already has {self.max_waiting_per_account} runs waiting for an answer"
                " (STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT); answer or cancel one of them, then"
                " call again."
            )
        return None

    async def _open_interaction(self, live: _Live, rid: int, op: str, args: dict[str, Any]) -> None:
        refusal = self._waiting_refusal(live)
        if refusal is not None:
            error = {"code": "too_many_waiting", "message": refusal}
            self._tasks.spawn(self._terminate(live, "failed", error), name=f"refuse-{live.run_id}")
            return
        if op == "ask":
            params = parse_params(args.get("fields") or [], where="ctx.ask() fields")
            title = str(args.get("title") or "Input needed")
            schema = question_schema(params)
            fields = field_summary(params)
            blockers = form_blockers(params)
            kind = "form"
            message = args.get("message")
        else:
            action = str(args.get("action") or "this action")
            title = f"Approve: {action}"
            schema = {"type": "object", "properties": {}}
            fields, blockers, kind = [], [], "approval"
            parts = [f"The workflow asks for approval to: {action}."]
            if args.get("message"):
                parts.append(str(args["message"]))
            if args.get("details") is not None:
                parts.append(f"Details: {json.dumps(args['details'], ensure_ascii=False, default=str)}")
            message = "\n".join(parts)

        def record() -> Interaction:
            # The run reads `waiting_for_input` before its question exists, never the other
            # way round: a reader that finds the question finds the run waiting on it.
            run_store.update_run(
                self.engine,
                run_id=live.run_id,
                status="waiting_for_input",
                event_text="waiting_for_input",
                source=live.request.source,
            )
            return self.interactions.create(
                run_id=live.run_id,
                kind=kind,
                title=title,
                message=str(message) if message is not None else None,
                requested_schema=schema,
                fields=fields,
                blockers=blockers,
                project_id=live.request.project.id,
                actor=live.request.actor,
                expires_at=expires_at,
            )

        expires_at = utcnow() + timedelta(seconds=self.question_timeout_seconds)
        self._stop_timer(live)  # a person thinking is not the handler running
        live.asking += 1  # a resumption meanwhile sees that the run waits again (_resume)
        try:
            row = await self._write(live, record)
        except BaseException:
            live.asking -= 1
            if live.slot:
                self._start_timer(live)
            raise
        live.asking -= 1
        self._release_slot(live)
        self._schedule_expiry(live, row.id, expires_at)
        live.pending[row.id] = rid
        live.waiting_on = row
        live.asked = True
        live.status = "waiting_for_input"
        self.hub.publish(
            "runs", "status", runId=live.run_id, projectId=live.request.project.id, status=live.status
        )
        self._publish(live, RunUpdate("waiting", live.run_id, live.status, interaction=row))
        # A child run's question reaches whoever follows its parents (the same person).
        parent = live.parent
        while parent is not None and not parent.done.is_set():
            parent.waiting_on = row
            self._publish(parent, RunUpdate("waiting", parent.run_id, parent.status, interaction=row))
            parent = parent.parent

    async def _on_answer(self, row: Interaction, answer: Answer) -> None:
        live = self._live.get(row.run_id or "")
        if live is None or answer.repeated or row.id not in live.pending:
            return
        rid = live.pending.pop(row.id)
        timer = live.expiry.pop(row.id, None)
        if timer is not None:
            timer.cancel()
        live.waiting_on = None
        parent = live.parent
        while parent is not None:
            if parent.waiting_on is not None and parent.waiting_on.id == row.id:
                parent.waiting_on = None
            parent = parent.parent
        if answer.action == "cancel":
            await self._terminate(
                live, "cancelled", {"code": "cancelled", "message": "The person cancelled the run."}
            )
            return
        # The run goes on once it has a slot again; whoever answered need not wait for that.
        reply = {"action": answer.action, "content": answer.content}
        self._tasks.spawn(self._reply_when_resumed(live, rid, reply), name=f"resume-{live.run_id}")

    async def _reply_when_resumed(self, live: _Live, rid: int, result: dict[str, Any]) -> None:
        if not await self._after_wait(live):
            return
        assert live.worker is not None
        await live.worker.send({"type": "reply", "id": rid, "ok": True, "result": result})

    async def _after_wait(self, live: _Live) -> bool:
        """One thing the run waited for is done (an answer, a child run). It goes on, with
        a slot taken again, once nothing else is pending; until then it waits for the rest
        (the thread that was answered goes on meanwhile). False when the run ended."""
        if live.done.is_set() or live.terminating is not None:
            return False
        if live.pending:
            return True
        if live.child_waits:
            if live.status != "waiting_for_child":
                try:
                    await self._set_status(live, "waiting_for_child")
                except Exception:
                    log.exception("run %s: waiting for its child runs was not recorded", live.run_id)
            return True
        return await self._resume(live)

    # ----------------------------------------------------------------- question expiry
    def _schedule_expiry(self, live: _Live, interaction_id: str, expires_at: datetime) -> None:
        delay = max((expires_at - utcnow()).total_seconds(), 0.0)

        def due() -> None:
            self._tasks.spawn(self._expire(live, interaction_id), name=f"expire-{interaction_id}")

        live.expiry[interaction_id] = asyncio.get_running_loop().call_later(delay, due)

    async def _expire(self, live: _Live, interaction_id: str) -> None:
        """The question's time is up: the stored row decides (an answer given meanwhile, on
        any replica, wins); an expired question ends its run with `question_expired`."""
        live.expiry.pop(interaction_id, None)
        if live.done.is_set() or interaction_id not in live.pending:
            return
        req = live.request
        try:
            row = await run_db(
                self.interactions.expire, interaction_id, project_id=req.project.id, actor=req.actor
            )
        except Exception:
            log.exception("interaction %s: expiring it failed; trying again", interaction_id)
            retry = utcnow() + timedelta(seconds=SHARED_POLL_SECONDS)
            self._schedule_expiry(live, interaction_id, retry)
            return
        if row.status == "answered":
            await self._resume_with(row)
        elif row.status == "pending" and row.expires_at is not None:
            self._schedule_expiry(live, interaction_id, as_utc(row.expires_at))  # not due by its row yet
        elif row.status == "closed":
            limit = _duration(self.question_timeout_seconds)
            error = {
                "code": "question_expired",
                "message": (
                    f"Nobody answered the question {row.title!r} within {limit}"
                    " (STEAMHARNESS_QUESTION_TIMEOUT_SECONDS); the run stopped."
                ),
                "interactionId": interaction_id,
            }
            await self._terminate(live, "failed", error)

    # ----------------------------------------------------------------- child runs
    def _resolve_related(self, live: _Live, alias: str) -> RelatedTarget:
        relations = live.request.relations
        if relations is None:
            raise RelatedProjectError(f"related project {alias!r}: this run may use no related projects")
        return relations.resolve(alias)

    async def _start_child(self, live: _Live, worker: Worker, rid: int, args: dict[str, Any]) -> None:
        """ctx.related[alias].run(entrypoint, **params): a run of the related project, owned
        by the same account (its questions reach the same person), linked both ways; the
        parent waits (its time limit paused) and is answered with the child's outcome."""
        req = live.request
        alias = str(args.get("alias"))
        if req.depth >= MAX_CHILD_DEPTH:
            raise RelatedProjectError(
                f"related project {alias!r}: this run is already a child run {req.depth} levels deep,"
                f" the limit ({MAX_CHILD_DEPTH}); do the related projects call each other in a loop?"
            )
        target = await run_db(self._resolve_related, live, alias)
        project: Project = target.project
        ep_id = str(args.get("entrypoint"))
        ep = project.entrypoint(ep_id)
        if ep is None:
            known = ", ".join(repr(e.id) for e in project.entrypoints)
            raise RelatedProjectError(
                f"related project {alias!r} ({project.id}) has no entrypoint {ep_id!r} (it has: {known})"
            )
        params = args.get("params")
        if not isinstance(params, dict):
            raise RelatedProjectError(f"related project {alias!r}: the params must be a JSON object")
        for p in ep.params:
            if p.type == "file" and p.name in params:
                raise RelatedProjectError(
                    f"related project {alias!r}, entrypoint {ep.id!r}: file param {p.name!r} cannot be"
                    " passed to a child run"
                )
        try:
            params = validate_arguments(input_schema(ep.params, file_mode="server"), params, tool=ep.id)
        except InvalidArguments as exc:
            raise RelatedProjectError(f"related project {alias!r}: {exc.message}") from None
        config = None
        if target.config is not None:
            try:
                config = await run_db(target.config)
            except SteamharnessError as exc:
                raise RelatedProjectError(f"related project {alias!r}: {exc.message}") from None
        child_request = RunRequest(
            project=project,
            entrypoint=ep,
            params=params,
            stored_params=params,
            source=req.source,
            transport=req.transport,
            actor=req.actor,
            account_id=req.account_id,
            session_id=req.session_id,
            project_version=target.version,
            env=dict(target.env),
            related=dict(target.paths),
            limits=target.limits or RunLimits(),
            relations=target.relations,
            parent_run_id=live.run_id,
            depth=req.depth + 1,
            config=config,
        )
        if live.slot and self._waiting() >= self.max_waiting_runs:
            raise RelatedProjectError(
                f"related project {alias!r}: the server already has {self.max_waiting_runs} runs"
                " waiting (STEAMHARNESS_MAX_WAITING_RUNS); try again later"
            )
        # An account's runs waiting for children count against its own cap too: chains of
        # child runs, each level a waiting run, would otherwise let one account fill the
        # server's whole cap while its open questions stay under the account's.
        if live.slot and self._waiting_of(req.account_id) >= self.max_waiting_per_account:
            raise RelatedProjectError(
                f"related project {alias!r}: this account already has {self.max_waiting_per_account}"
                " runs waiting (STEAMHARNESS_MAX_WAITING_RUNS_PER_ACCOUNT); try again later"
            )
        # The parent gives its slot up before the child asks for one: a parent waiting for
        # any child never holds a slot its children need. Its handler's threads may start
        # several; it runs again only once none is pending.
        live.child_waits += 1
        self._release_slot(live)
        if not live.pending:
            live.status = "waiting_for_child"
        try:
            child_id = await self.start(child_request)
        except BaseException as exc:
            live.child_waits -= 1
            if isinstance(exc, Exception) and not await self._after_wait(live):
                raise RelatedProjectError(f"related project {alias!r}: the run is ending") from None
            if isinstance(exc, RunRefused):  # its run gate or queue limit
                raise RelatedProjectError(f"related project {alias!r}: {exc.message}") from None
            raise
        live.children.add(child_id)
        child = self._live[child_id]
        linked = asyncio.Event()
        # Waiting starts at once: whatever happens to the records below, the parent's
        # handler gets its answer when the child ends.
        self._tasks.spawn(self._await_child(live, worker, rid, child, linked), name=f"child-{child_id}")
        try:
            link = {"runId": child_id, "projectId": project.id, "entrypointId": ep.id, "alias": alias}
            await self._add_event(live, "child", text=f"started child run {child_id}", data=link)
            back = {"runId": live.run_id, "projectId": req.project.id, "entrypointId": req.entrypoint.id}
            await self._write(
                child,
                run_store.add_event,
                self.engine,
                run_id=child_id,
                kind="parent",
                text=f"started by run {live.run_id}",
                data=back,
                source=req.source,
            )
            if not live.pending and live.status == "waiting_for_child":
                await self._set_status(live, "waiting_for_child")
        except Exception:
            log.exception("run %s: the link to its child run %s could not be recorded", live.run_id, child_id)
        finally:
            linked.set()
        self._tasks.spawn(self._wake_queue())

    async def _await_child(
        self, live: _Live, worker: Worker, rid: int, child: _Live, linked: asyncio.Event
    ) -> None:
        await child.done.wait()
        await linked.wait()  # the parent's records say it waits before they say it resumed
        live.children.discard(child.run_id)
        live.child_waits -= 1
        if live.done.is_set() or live.terminating is not None:
            return
        lost = {"code": "internal", "message": "The child run ended without an outcome."}
        status, output, error = child.outcome or ("failed", None, lost)
        shown = live.waiting_on
        if shown is not None and shown.run_id != live.run_id and shown.run_id not in self._live:
            live.waiting_on = None  # the question of a child run that ended; its own stays
        data = {"runId": child.run_id, "status": status}
        try:
            await self._add_event(live, "child", text=f"child run {child.run_id} ended: {status}", data=data)
        except Exception:
            log.exception("run %s: the end of its child run %s was not recorded", live.run_id, child.run_id)
        if not await self._after_wait(live):
            return
        result = {"runId": child.run_id, "status": status, "output": output, "error": error}
        await worker.send({"type": "reply", "id": rid, "ok": True, "result": result})

    # ----------------------------------------------------------------- watchers
    async def _follow_remote(self, run_id: str, queue: asyncio.Queue[RunUpdate]) -> None:
        """The updates of a run another replica drives, read back from the database each
        time the hub says something about it (or its questions), and now and then."""
        shown: str | None = None
        while True:
            with self.hub.subscribe("runs", "interactions") as sub:
                while True:
                    try:
                        run, question = await run_db(self._remote_state, run_id)
                    except Exception:
                        log.exception("run %s: reading its state failed", run_id)
                        run, question = None, None
                    if run is not None and run.status in run_store.FINAL_STATUSES:
                        files = await run_db(self.files.outputs_of_run, run_id)
                        queue.put_nowait(self._final_update(run, files))
                        return
                    if question is not None and question.id != shown:
                        shown = question.id
                        status = run.status if run is not None else "waiting_for_input"
                        queue.put_nowait(RunUpdate("waiting", run_id, status, interaction=question))
                    if not await self._next_event(sub):
                        break  # lagged: re-read, then listen again

    def _remote_state(self, run_id: str) -> tuple[Run | None, Interaction | None]:
        """A run and the question it waits on (its own, or a child run's)."""
        run = run_store.get_run(self.engine, run_id=run_id)
        if run is None or run.status in run_store.FINAL_STATUSES:
            return run, None
        question = self.interactions.pending_for_run(run_id)
        if question is None and run.status == "waiting_for_child":
            child = run_store.waiting_descendant(self.engine, run_id=run_id)
            question = self.interactions.pending_for_run(child) if child else None
        return run, question

    @staticmethod
    async def _next_event(sub: Subscription) -> bool:
        """Wait for any run or interaction event, or the poll interval: False when lagged."""
        try:
            event = await asyncio.wait_for(sub.queue.get(), SHARED_POLL_SECONDS)
        except TimeoutError:
            return True
        return event is not None

    def _publish(self, live: _Live, update: RunUpdate) -> None:
        for queue in list(live.watchers):
            queue.put_nowait(update)

    @staticmethod
    def _final_update(run: Run, files: list[ManagedFile]) -> RunUpdate:
        views = [output_view(row) for row in files]
        return RunUpdate("final", run.id, run.status, output=run.output, error=run.error, files=views)

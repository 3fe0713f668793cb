"""RunService: the only component that starts, resumes, cancels or finishes runs.

A run is persisted first (queued), then executed by a freshly forked worker. The service
drives the worker's messages (webui.runs.messages lists them): log lines and progress become
run events; `ask`/`approve` become stored questions and the run waits, its time limit paused,
until an answer resumes it on the same worker (webui.runs.questions); `related.run` starts a
child run (webui.runs.children); the store calls are answered at once (webui.runs.store_calls).
Watchers (the MCP call bridge, the browser) subscribe to a run's live updates; a run another
replica drives is followed through the database (webui.runs.following).

Slots (webui.runs.admission): only a `running` run holds one of the `max_concurrent_runs`
worker slots; a waiting run gives its slot up and takes one again, ahead of new runs, before
it goes on. Every status change of a live run goes through `enter`; its outcome is decided
by `LiveRun.conclude` (the first conclusion holds) and recorded once, by `_finish`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from sqlalchemy.engine import Engine

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.blocking import DatabaseBusy, TaskSet, run_db
from webui.events import EventHub
from webui.files.store import FileStore
from webui.interactions.service import Answer, InteractionService
from webui.knowledge.service import KnowledgeService
from webui.observability.log_context import current_run_id
from webui.observability.metrics import METRICS, Held
from webui.observability.tracing import TRACER
from webui.observability.tracing import ids as span_ids
from webui.runs import resuming, watching
from webui.runs.admission import Admission
from webui.runs.budget import RunClock, time_limit, timeout_error
from webui.runs.children import ChildRuns
from webui.runs.control import WaitCaps
from webui.runs.ending import INTERNAL, end_span, final_fields, outcome_of
from webui.runs.following import OtherReplicas, RemoteRuns, in_scope
from webui.runs.handle import RunHandle, became_task
from webui.runs.live import Budget, LiveRun
from webui.runs.outcomes import DEFAULT_MAX_BYTES, EVENT, FINAL, STATUS, Record, RunRecordBacklog
from webui.runs.pool import WorkerPool
from webui.runs.questions import RunQuestions, close_questions, stop_expiry
from webui.runs.request import RunRequest
from webui.runs.store_calls import StoreCalls
from webui.runs.types import (
    DEFAULT_MAX_WAITING_PER_ACCOUNT,
    DEFAULT_MAX_WAITING_RUNS,
    DEFAULT_QUESTION_TIMEOUT_SECONDS,
    DEFAULT_RECORDS_DRAIN_SECONDS,
    EXIT_WAIT_SECONDS,
    KEPT_WAIT_SECONDS,
    WRITE_ATTEMPTS,
    LiveState,
    RunStatus,
    RunUpdate,
    new_run_id,
)
from webui.runs.worker_loop import OutputTap, WorkerLoop
from webui.store import runs as run_store
from webui.store.models import Interaction

log = logging.getLogger(__name__)

INTERRUPTED = {"code": "interrupted", "message": "The server stopped while this run was active."}
CALLER_LEFT = "The run's caller left while it was being started."


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
        replica_id: str | None = None,
        pending_records: Path | None = None,
        pending_records_bytes: int = DEFAULT_MAX_BYTES,
        records_drain_seconds: float = DEFAULT_RECORDS_DRAIN_SECONDS,
        max_waiting_runs: int = DEFAULT_MAX_WAITING_RUNS,
        max_waiting_per_account: int = DEFAULT_MAX_WAITING_PER_ACCOUNT,
        question_timeout_seconds: float = DEFAULT_QUESTION_TIMEOUT_SECONDS,
        knowledge: KnowledgeService | None = None,
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
        self.kill_grace_seconds = kill_grace_seconds
        self.owner = run_store.process_owner_token()
        self.max_concurrent_runs = max_concurrent_runs
        self.caps = WaitCaps(max_waiting_runs, max_waiting_per_account, question_timeout_seconds)
        self.clock = RunClock(self._on_timeout)
        # Other replicas may share the database (PostgreSQL): limits are counted there,
        # answers given elsewhere reach a waiting run through the hub (and a re-check).
        self.shared = engine.dialect.name == "postgresql"
        self._tasks = TaskSet()
        self.admission = Admission(
            engine=engine, max_concurrent_runs=max_concurrent_runs, shared=self.shared, spawn=self.spawn
        )
        self._live = self.admission.live
        self._watching = anyio.CancelScope()
        self.records = RunRecordBacklog(
            engine=engine,
            audit=audit,
            interactions=interactions,
            hub=hub,
            spill_path=pending_records,
            max_bytes=pending_records_bytes,
        )
        self.records_drain_seconds = records_drain_seconds
        self.calls = StoreCalls(
            engine=engine,
            kv_engine=kv_engine,
            values_engine=values_engine,
            files=files,
            file_create_dir=file_create_dir,
            knowledge=knowledge,
        )
        self.remote = RemoteRuns(
            engine=engine, hub=hub, interactions=interactions, files=files, shared=self.shared
        )
        self.questions = RunQuestions(self)
        self.children = ChildRuns(self, self._live)
        self.worker_loop = WorkerLoop(
            self, pool=pool, calls=self.calls, questions=self.questions, children=self.children
        )
        self.others = OtherReplicas(
            engine=engine,
            hub=hub,
            admission=self.admission,
            on_answer=self._on_answer,
            on_cancel=self.cancel,
        )
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
        process's questions, slots freed elsewhere) and re-check the database now and then."""
        if not self.shared:
            return
        self.hub.on_resync(lambda: self.spawn(self.others.recheck(), name="runs-resync"))
        self.spawn(in_scope(self._watching, self.others.watch), name="runs-hub")

    async def _on_answer(self, row: Interaction, answer: Answer) -> None:
        await self.questions.on_answer(self._live.get(row.run_id or ""), row, answer)

    async def shutdown(self) -> None:
        """Stop every live run; nothing is left running or waiting forever."""
        self._watching.cancel()
        for live in list(self._live.values()):
            await self.terminate(live, RunStatus.FAILED, INTERRUPTED, grace=0.0)
        await self._tasks.cancel_all()
        await self.records.close(self.records_drain_seconds)

    async def stop_all(self, error: dict[str, Any], *, grace: float) -> None:
        """A graceful server shutdown: refuse new runs, then stop every live run at once,
        each recorded as failed with `error`, its watchers told the same."""
        self.admission.accepting = False
        lives = list(self._live.values())
        await asyncio.gather(*(self.terminate(live, RunStatus.FAILED, error, grace=grace) for live in lives))

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> None:
        self._tasks.spawn(coro, name=name)

    def tap_output(self, tap: OutputTap) -> None:
        """`tap(run_id, stream, text)` reads every run's output as it comes (stdio echoes it to
        stderr: webui.mcp.stdio)."""
        self.worker_loop.taps.append(tap)

    # ----------------------------------------------------------------- API
    async def start(self, request: RunRequest) -> RunHandle:
        self.admission.preflight(request)
        if self.records.over_budget:
            # Bounds what the backlog holds: no new run while the old ones' records wait.
            raise DatabaseBusy(
                "the server is still writing the records of earlier runs; try again in a moment"
            )
        run_id = new_run_id()
        ep = request.entrypoint
        run = request.run_row(run_id, owner=self.owner, replica_id=self.replica_id)
        # Its span: a child of the request's (the SDK's tools/call span) or of the parent
        # run's handler span; ended with the outcome.
        span = TRACER.start_span(
            "steamharness.run",
            attributes={
                "steamharness.run.id": run_id,
                "steamharness.project.id": request.project.id,
                "gen_ai.tool.name": ep.id,
                "steamharness.run.source": request.source,
            },
        )
        traced = span_ids(span)
        if traced is not None:
            run.trace_id, run.span_id = traced["traceId"], traced["spanId"]

        def audit(s: Any) -> None:
            self.audit.record(
                s, AuditName.RUN_CREATED, **request.audit_fields(run_id), outcome="queued", details=traced
            )

        live = LiveRun(
            request=request, run_id=run_id, span=span, budget=Budget(remaining=time_limit(request))
        )
        live.parent = self._live.get(request.parent_run_id) if request.parent_run_id else None
        replica_slots = (self.replica_id, self.max_concurrent_runs) if self.replica_id is not None else None
        self.admission.line_up(live, run)
        creating = self._tasks.spawn(self.admission.create(live, run, audit, replica_slots=replica_slots))
        try:
            await asyncio.shield(creating)
        except asyncio.CancelledError:
            # The caller left while the run was being created: its insert goes on in its
            # thread, so the run, once created, is driven to a cancelled outcome at once
            # (with the call's end), not left `running` with nobody driving it.
            creating.add_done_callback(functools.partial(self._created_unfollowed, live))
            raise
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(StatusCode.ERROR, "the run was not created")
            span.end()
            raise
        live.task = asyncio.create_task(self._drive(live), name=f"run-{run_id}")
        METRICS.runs_started.labels(request.project.id).inc()
        return RunHandle(run_id, self)

    def _created_unfollowed(self, live: LiveRun, creating: asyncio.Task[None]) -> None:
        if creating.cancelled() or creating.exception() is not None:
            return  # not created (its slot given back by Admission.create)
        live.conclude(RunStatus.CANCELLED, {"code": "cancelled", "message": CALLER_LEFT})
        live.task = asyncio.get_running_loop().create_task(self._drive(live), name=f"run-{live.run_id}")

    def handle(self, run_id: str) -> RunHandle:
        """A run started earlier (e.g. by the call an input round resumes), by its id."""
        return RunHandle(run_id, self)

    def live_runs_of_session(self, session_id: str) -> list[str]:
        """Ids of the live runs an MCP session started."""
        return [run_id for run_id, live in self._live.items() if live.request.session_id == session_id]

    def mark_task(self, run_id: str) -> None:
        """The run's call became an MCP task (the metrics count the tasks followed)."""
        live = self._live.get(run_id)
        if live is not None:
            became_task(live)

    def followed_as_task(self, run_id: str) -> bool:
        """Whether the run, driven by this process, was already made an MCP task."""
        live = self._live.get(run_id)
        return live is not None and live.call.as_task

    def held(self, *, sessions: dict[str, int] | None = None) -> Held:
        """What this process holds now, for the metrics (webui.runs.watching.held)."""
        return watching.held(
            list(self._live.values()), slots_total=self.max_concurrent_runs, sessions=sessions
        )

    def is_live(self, run_id: str) -> bool:
        return run_id in self._live

    def live_state(self, run_id: str) -> LiveState | None:
        """None once the run has ended (or is not driven by this process)."""
        return watching.live_state(self._live.get(run_id))

    def live_worker_pid(self, run_id: str) -> int | None:
        live = self._live.get(run_id)
        return live.worker.pid if live and live.worker else None

    def watch(self, run_id: str) -> AbstractAsyncContextManager[asyncio.Queue[RunUpdate]]:
        """A queue of this run's updates, starting with where it stands now."""
        live = self._live.get(run_id)
        return watching.watch_run(live, run_id, records=self.records, remote=self.remote)

    async def cancel(self, run_id: str, *, reason: str = "The run was cancelled.") -> None:
        live = self._live.get(run_id)
        if live is None:
            return
        await self.terminate(live, RunStatus.CANCELLED, {"code": "cancelled", "message": reason})

    async def cancel_anywhere(self, run_id: str, *, reason: str) -> None:
        """Cancel a run this process or (on a shared database) another replica drives: the
        replica driving it is asked through the event hub (`cancel_requested`)."""
        if run_id in self._live:
            await self.cancel(run_id, reason=reason)
        elif self.shared:
            self.hub.publish("runs", "cancel_requested", runId=run_id, reason=reason)

    # ----------------------------------------------------------------- driving
    def enter(self, live: LiveRun, status: RunStatus, *, announce: bool = True) -> None:
        """The one place a live run's status changes; `announce`: tell the other replicas
        and the pages (the run's record is written by the caller's step)."""
        live.status = status
        if announce:
            self.hub.publish(
                "runs", "status", runId=live.run_id, projectId=live.request.project.id, status=status.value
            )

    async def set_status(self, live: LiveRun, status: RunStatus, **changes: Any) -> None:
        """Change the status and record it (kept until the database takes it)."""
        if live.done.is_set():
            return
        self.enter(live, status)
        fields = {"status": status.value, "source": live.request.source, **changes}
        await self._keep(live, Record(STATUS, live.run_id, fields))

    async def _drive(self, live: LiveRun) -> None:
        current_run_id.set(live.run_id)  # this task's log lines name the run
        otel_context.attach(trace.set_span_in_context(live.span))  # this task's spans are the run's
        try:
            if not live.concluded and (live.place.held or await self._queued(live)):
                self.enter(live, RunStatus.RUNNING, announce=False)  # holds its slot; recorded once forked
                await self.worker_loop.run(live)
        except Exception:
            log.exception("run %s: the run service failed", live.run_id)
            if live.worker is not None:
                # Nothing follows this worker now: it must not outlive its run (nor keep its uid).
                live.worker.kill()
                live.worker.close()
            live.conclude(RunStatus.FAILED, INTERNAL)
        finally:
            await self._finish(live)

    async def _queued(self, live: LiveRun) -> bool:
        with TRACER.start_as_current_span("steamharness.queue"):
            return await self.admission.take_slot(live)

    async def _finish(self, live: LiveRun) -> None:
        """The run has ended: its conclusion recorded (webui.runs.ending), its watchers and
        waiting parent told, its questions closed and its children cancelled; it leaves."""
        if live.done.is_set():
            return
        self.clock.stop(live)
        stop_expiry(live)
        status, output, error = outcome = outcome_of(live)
        fields = final_fields(live, outcome)
        try:
            # Written now, or kept until the database takes it (webui.runs.outcomes).
            await self._keep(live, Record(FINAL, live.run_id, fields))
        except Exception:
            log.exception("run %s: its outcome (%s) could not be recorded", live.run_id, status)
        self.enter(live, status)
        close_questions(live)
        live.outcome = outcome
        req = live.request
        elapsed = time.monotonic() - live.started_at
        METRICS.run_ended(req.project.id, req.entrypoint.id, status.value, elapsed, draft=req.draft)
        end_span(live, status, error)
        for child_id in list(live.children):  # a child never outlives the run waiting on it
            self.spawn(self.cancel(child_id, reason=f"Its parent run {live.run_id} ended ({status})."))
        live.publish(
            RunUpdate("final", live.run_id, status, output=output, error=error, files=list(live.created))
        )
        self.admission.leave(live)
        live.done.set()

    async def terminate(
        self, live: LiveRun, status: RunStatus, error: dict[str, Any], *, grace: float | None = None
    ) -> None:
        if live.done.is_set():
            return
        live.conclude(status, error)
        if live.place.wanted:
            await self.admission.wake()  # it stops waiting for a slot
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

    # ----------------------------------------------------------------- waiting and resuming
    def release_slot(self, live: LiveRun) -> None:
        """The run stops running for now (it waits for a person or for its child runs):
        its time limit pauses and its slot goes to the next in line."""
        self.clock.stop(live)
        self.admission.release(live)

    async def after_wait(self, live: LiveRun) -> bool:
        return await resuming.after_wait(self, live)

    def _on_timeout(self, live: LiveRun) -> None:
        """Its time limit is spent (webui.runs.budget)."""
        self.spawn(
            self.terminate(live, RunStatus.TIMEOUT, timeout_error(live)), name=f"timeout-{live.run_id}"
        )

    # ----------------------------------------------------------------- the run's records
    async def write(self, live: LiveRun, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
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

    async def _keep(self, live: LiveRun, record: Record) -> None:
        """One of this run's own records (status, timeline, outcome), in order: written now,
        or, while the database cannot take it, kept and written once it can."""
        async with live.writes:
            await self.records.write_or_keep(record)

    async def note(self, run_id: str, kind: str, *, text: str | None = None) -> None:
        """A timeline entry about a run from outside its worker (e.g. its MCP call became a
        task): in order with the run's own records while this process drives it."""
        live = self._live.get(run_id)
        if live is not None:
            await self.add_event(live, kind, text=text)
        else:
            await self.records.write_or_keep(
                Record(EVENT, run_id, {"kind": kind, "text": text, "data": None, "source": "mcp"})
            )

    async def add_event(
        self, live: LiveRun, kind: str, *, text: str | None = None, data: dict[str, Any] | None = None
    ) -> None:
        """One timeline entry of this run (a log line, output, progress)."""
        fields = {"kind": kind, "text": text, "data": data, "source": live.request.source}
        await self._keep(live, Record(EVENT, live.run_id, fields))

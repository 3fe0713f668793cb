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
it goes on. Every status change of a live run goes through `enter`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

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
from webui.runs import resuming
from webui.runs.admission import Admission
from webui.runs.children import ChildRuns
from webui.runs.following import OtherReplicas, RemoteRuns, in_scope, kept_update
from webui.runs.handle import RunHandle
from webui.runs.live import LiveRun
from webui.runs.outcomes import DEFAULT_MAX_BYTES, EVENT, FINAL, STATUS, Record, RunRecordBacklog
from webui.runs.pool import WorkerPool
from webui.runs.questions import RunQuestions
from webui.runs.request import RunRequest
from webui.runs.store_calls import StoreCalls
from webui.runs.types import (
    DEFAULT_MAX_WAITING_PER_ACCOUNT,
    DEFAULT_MAX_WAITING_RUNS,
    DEFAULT_QUESTION_TIMEOUT_SECONDS,
    DEFAULT_RECORDS_DRAIN_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    EXIT_WAIT_SECONDS,
    KEPT_WAIT_SECONDS,
    WRITE_ATTEMPTS,
    LiveState,
    RunStatus,
    RunUpdate,
    new_run_id,
)
from webui.runs.worker_loop import WorkerLoop
from webui.store import runs as run_store
from webui.store.models import Interaction, utcnow

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
        echo: TextIO | None = None,
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
        self.echo = echo
        self.owner = run_store.process_owner_token()
        self.max_concurrent_runs = max_concurrent_runs
        self.max_waiting_runs = max_waiting_runs
        self.max_waiting_per_account = max_waiting_per_account
        self.question_timeout_seconds = question_timeout_seconds
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
            self, pool=pool, calls=self.calls, questions=self.questions, children=self.children, echo=echo
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
            if request.created_audit is not None:
                event, fields = request.created_audit
                self.audit.record(s, event, **{**fields, "run_id": run_id})

        live = LiveRun(
            request=request, run_id=run_id, remaining=ep.timeout_seconds or DEFAULT_TIMEOUT_SECONDS, span=span
        )
        live.call_following = request.finished_audit is not None
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
        return RunHandle(run_id, self, started=live)

    def _created_unfollowed(self, live: LiveRun, creating: asyncio.Task[None]) -> None:
        if creating.cancelled() or creating.exception() is not None:
            return  # not created (its slot given back by Admission.create)
        live.terminating = (RunStatus.CANCELLED, {"code": "cancelled", "message": CALLER_LEFT})
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
            live.followed_as_task = True

    def followed_as_task(self, run_id: str) -> bool:
        """Whether the run, driven by this process, was already made an MCP task."""
        live = self._live.get(run_id)
        return live is not None and live.followed_as_task

    def held(self, *, sessions: dict[str, int] | None = None) -> Held:
        """What this process holds now, for the metrics: its queue, its slots, the runs
        waiting and their questions, the tasks followed (and `sessions`, by the caller)."""
        held = Held(slots_total=self.max_concurrent_runs, sessions=dict(sessions or {}))
        now = time.monotonic()
        oldest = now
        for live in list(self._live.values()):
            held.queued += live.status == RunStatus.QUEUED
            held.slots_busy += live.slot
            held.waiting_for_input += live.status == RunStatus.WAITING_FOR_INPUT
            held.waiting_for_child += live.status == RunStatus.WAITING_FOR_CHILD
            held.questions += len(live.pending)
            held.tasks += live.followed_as_task
            oldest = min([oldest, *(q.asked_at for q in live.open_questions.values())])
        held.oldest_question_seconds = now - oldest
        return held

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
    async def watch(
        self, run_id: str, *, started: LiveRun | None = None
    ) -> AsyncIterator[asyncio.Queue[RunUpdate]]:
        """A queue of this run's updates, starting with where it stands now. `started`: the
        run as the caller started it; once it has ended, its final update says whether the
        call's end was written with the outcome (`call_audited`), as it told live watchers."""
        queue: asyncio.Queue[RunUpdate] = asyncio.Queue()
        live = self._live.get(run_id)
        audited = started is not None and started.call_audited
        if live is None:
            kept = self.records.final(run_id)  # ended, its outcome not written yet
            update = kept_update(run_id, kept.fields) if kept is not None else await self.remote.ended(run_id)
            if update is not None:
                update.call_audited = audited
                queue.put_nowait(update)
                yield queue
                return
            # Another replica drives it: follow it through the hub and the database.
            scope = anyio.CancelScope()
            follower = asyncio.create_task(
                in_scope(scope, functools.partial(self.remote.follow, run_id, queue)),
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

    def call_ended(self, run_id: str) -> None:
        """The call that started the run no longer follows it (it answered early, or its
        client left): its `finished_audit` is not written with the outcome."""
        live = self._live.get(run_id)
        if live is not None:
            live.call_following = False

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
            if live.terminating is None and (live.slot or await self._queued(live)):
                self.enter(live, RunStatus.RUNNING, announce=False)  # holds its slot; recorded once forked
                await self.worker_loop.run(live)
        except Exception:
            log.exception("run %s: the run service failed", live.run_id)
            if live.worker is not None:
                # Nothing follows this worker now: it must not outlive its run (nor keep its uid).
                live.worker.kill()
                live.worker.close()
            if live.terminating is None:
                live.terminating = (
                    RunStatus.FAILED,
                    {"code": "internal", "message": "The run failed inside the server."},
                )
        finally:
            await self._finish(live)

    async def _queued(self, live: LiveRun) -> bool:
        with TRACER.start_as_current_span("steamharness.queue"):
            return await self.admission.take_slot(live)

    async def _finish(self, live: LiveRun) -> None:
        if live.done.is_set():
            return
        self.stop_timer(live)
        for timer in live.expiry.values():
            timer.cancel()
        live.expiry.clear()
        status, detail = live.terminating or (
            RunStatus.FAILED,
            {"code": "internal", "message": "The run ended without an outcome."},
        )
        output = detail.get("output") if status == RunStatus.SUCCESS else None
        error = None if status == RunStatus.SUCCESS else detail
        req = live.request
        fields = {
            "status": status.value,
            "output": output,
            "error": error,
            "finished_at": utcnow(),
            "source": req.source,
            "audit": req.audit_fields(live.run_id),
            "close_questions": live.asked,
            "files": list(live.created),  # for watchers while it waits; not written
        }
        call_audited = live.call_following and req.finished_audit is not None
        if call_audited and req.finished_audit is not None:
            on_success, otherwise, call_fields = req.finished_audit
            event = on_success if status == RunStatus.SUCCESS else otherwise
            fields["call_audit"] = {
                **call_fields,
                "event": str(event),
                "run_id": live.run_id,
                "outcome": status.value,
            }
        live.call_audited = call_audited
        try:
            # Written now, or kept until the database takes it (webui.runs.outcomes).
            await self._keep(live, Record(FINAL, live.run_id, fields))
        except Exception:
            log.exception("run %s: its outcome (%s) could not be recorded", live.run_id, status)
        self.enter(live, status)
        live.waiting_on = None
        live.outcome = (status, output, error)
        METRICS.run_ended(
            req.project.id,
            req.entrypoint.id,
            status.value,
            time.monotonic() - live.started_at,
            draft=req.draft,
        )
        for question in live.open_questions.values():
            question.span.set_attribute("steamharness.question.outcome", "closed")
            question.span.end()
        live.open_questions.clear()
        live.span.set_attribute("steamharness.run.status", status.value)
        if status != RunStatus.SUCCESS:
            live.span.set_status(StatusCode.ERROR, str((error or {}).get("code") or status.value))
        live.span.end()
        for child_id in list(live.children):  # a child never outlives the run waiting on it
            self.spawn(self.cancel(child_id, reason=f"Its parent run {live.run_id} ended ({status})."))
        live.publish(
            RunUpdate(
                "final",
                live.run_id,
                status,
                output=output,
                error=error,
                files=list(live.created),
                call_audited=call_audited,
            )
        )
        self._live.pop(live.run_id, None)
        live.slot = False
        live.done.set()
        self.spawn(self.admission.wake())

    async def terminate(
        self, live: LiveRun, status: RunStatus, error: dict[str, Any], *, grace: float | None = None
    ) -> None:
        if live.done.is_set():
            return
        if live.terminating is None:
            live.terminating = (status, error)
        if live.wants_slot:
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
        self.stop_timer(live)
        if live.slot:
            live.slot = False
            self.spawn(self.admission.wake())

    async def after_wait(self, live: LiveRun) -> bool:
        return await resuming.after_wait(self, live)

    # ----------------------------------------------------------------- time limit
    def start_timer(self, live: LiveRun) -> None:
        if live.timer is not None:
            return  # already counting: one timer per run, stopped as often as started
        loop = asyncio.get_running_loop()
        live.timer_started = loop.time()
        live.timer = loop.call_later(max(live.remaining, 0.0), self._on_timeout, live)

    def stop_timer(self, live: LiveRun) -> None:
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
            live.remaining -= asyncio.get_running_loop().time() - live.timer_started

    def _on_timeout(self, live: LiveRun) -> None:
        live.timer = None
        limit = live.request.entrypoint.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
        error = {"code": "timeout", "message": f"The run exceeded its time limit of {limit:g} s."}
        self.spawn(self.terminate(live, RunStatus.TIMEOUT, error), name=f"timeout-{live.run_id}")

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

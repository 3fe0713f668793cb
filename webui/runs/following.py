"""Other replicas on the same (PostgreSQL) database: the runs they drive, followed through the
event hub and read back from the database so a watcher here sees them as it would its own;
and their events the runs here wait for (answers given there, slots freed there)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
from sqlalchemy.engine import Engine

from webui.blocking import run_db
from webui.errors import NotFound
from webui.events import EventHub, Subscription
from webui.files.store import FileStore, output_view
from webui.interactions.service import Answer, InteractionService
from webui.runs.admission import Admission
from webui.runs.questions import stored_answer
from webui.runs.types import SHARED_POLL_SECONDS, RunStatus, RunUpdate
from webui.store import interactions as interaction_store
from webui.store import runs as run_store
from webui.store.models import Interaction, ManagedFile, Run

log = logging.getLogger(__name__)


def final_update(run: Run, files: list[ManagedFile]) -> RunUpdate:
    """A finished run, as its watchers' last update."""
    views = [output_view(row) for row in files]
    return RunUpdate("final", run.id, run.status, output=run.output, error=run.error, files=views)


async def in_scope(scope: anyio.CancelScope, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `work()` in `scope`: cancelling the scope stops it even while it waits in `run_db`
    (whose shielded thread wait would swallow a plain `Task.cancel`). The coroutine is made
    here, so a task cancelled before it starts leaves none un-awaited."""
    with scope:
        await work()


def kept_update(run_id: str, fields: dict[str, Any]) -> RunUpdate:
    """A run's final update from its outcome record kept while the database is unavailable."""
    return RunUpdate(
        "final",
        run_id,
        fields["status"],
        output=fields.get("output"),
        error=fields.get("error"),
        files=list(fields.get("files") or []),
    )


class RemoteRuns:
    def __init__(
        self,
        *,
        engine: Engine,
        hub: EventHub,
        interactions: InteractionService,
        files: FileStore,
        shared: bool,
    ) -> None:
        self.shared = shared
        self.engine = engine
        self.hub = hub
        self.interactions = interactions
        self.files = files

    async def ended(self, run_id: str) -> RunUpdate | None:
        """The final update of a run this process does not drive, read back; None when
        another replica drives it (then `follow` it)."""
        run = await run_db(run_store.get_run, self.engine, run_id=run_id)
        if run is None:
            raise NotFound(f"run {run_id!r} not found")
        if run.status in run_store.FINAL_STATUSES:
            return final_update(run, await run_db(self.files.outputs_of_run, run_id))
        if not self.shared:
            raise NotFound(f"run {run_id!r} is not driven by this process")
        return None

    async def follow(self, run_id: str, queue: asyncio.Queue[RunUpdate]) -> None:
        """The updates of a run another replica drives, read back from the database each
        time the hub says something about it (or its questions), and now and then."""
        shown: str | None = None
        while True:
            with self.hub.subscribe("runs", "interactions") as sub:
                while True:
                    try:
                        run, question = await run_db(self._state, run_id)
                    except Exception:
                        log.exception("run %s: reading its state failed", run_id)
                        run, question = None, None
                    if run is not None and run.status in run_store.FINAL_STATUSES:
                        files = await run_db(self.files.outputs_of_run, run_id)
                        queue.put_nowait(final_update(run, files))
                        return
                    if question is not None and question.id != shown:
                        shown = question.id
                        status = run.status if run is not None else RunStatus.WAITING_FOR_INPUT
                        queue.put_nowait(RunUpdate("waiting", run_id, status, interaction=question))
                    if not await _next_event(sub):
                        break  # lagged: re-read, then listen again

    def _state(self, run_id: str) -> tuple[Run | None, Interaction | None]:
        """A run and the question it waits on (its own, or a child run's)."""
        run = run_store.get_run(self.engine, run_id=run_id)
        if run is None or run.status in run_store.FINAL_STATUSES:
            return run, None
        question = self.interactions.pending_for_run(run_id)
        if question is None and run.status == RunStatus.WAITING_FOR_CHILD:
            child = run_store.waiting_descendant(self.engine, run_id=run_id)
            question = self.interactions.pending_for_run(child) if child else None
        return run, question


class OtherReplicas:
    """On a shared database: this process follows the other replicas' events (answers to
    its questions, slots freed elsewhere) and re-checks the database now and then."""

    def __init__(
        self,
        *,
        engine: Engine,
        hub: EventHub,
        admission: Admission,
        on_answer: Callable[[Interaction, Answer], Awaitable[None]],
        on_cancel: Callable[..., Awaitable[None]],
    ) -> None:
        self.engine = engine
        self.hub = hub
        self.admission = admission
        self.on_answer = on_answer
        # A cancel asked on another replica (an MCP client's tasks/cancel): `(run_id, reason=)`;
        # a run this process does not drive is left alone.
        self.on_cancel = on_cancel

    async def watch(self) -> None:
        while True:
            with self.hub.subscribe("interactions", "runs") as sub:
                while True:
                    try:
                        event = await asyncio.wait_for(sub.queue.get(), SHARED_POLL_SECONDS)
                    except TimeoutError:
                        await self.recheck()
                        continue
                    if event is None:
                        break  # lagged: events were lost; re-check, then listen again
                    if event.topic == "interactions" and event.kind == "answered":
                        await self._resume_if_waiting(str(event.data.get("interactionId")))
                    elif event.topic == "runs" and event.kind == "cancel_requested":
                        run_id, reason = event.data.get("runId"), event.data.get("reason")
                        if isinstance(run_id, str) and run_id in self.admission.live:
                            await self.on_cancel(run_id, reason=str(reason or "The run was cancelled."))
                    elif event.topic == "runs" and self.admission.slot_wanted():
                        await self.admission.wake()
            await self.recheck()

    async def recheck(self) -> None:
        """Questions of this process's runs answered elsewhere resume their runs; queued
        runs try again for a slot freed elsewhere."""
        try:
            asked = [iid for live in list(self.admission.live.values()) for iid in live.asks.pending]
            if asked:
                rows = await run_db(interaction_store.answered_among, self.engine, interaction_ids=asked)
                for row in rows:
                    await self.on_answer(row, stored_answer(row))
            if self.admission.slot_wanted():
                await self.admission.wake()
        except Exception:
            log.exception("re-checking the waiting runs failed")

    async def _resume_if_waiting(self, interaction_id: str) -> None:
        if not any(interaction_id in live.asks.pending for live in self.admission.live.values()):
            return  # not ours, or already resumed by the answer given in this process
        try:
            row = await run_db(interaction_store.get_interaction, self.engine, interaction_id=interaction_id)
            if row is not None and row.status == "answered":
                await self.on_answer(row, stored_answer(row))
        except Exception:  # the watcher goes on; a failed read is retried by the next re-check
            log.exception("interaction %s: resuming its run with the answer failed", interaction_id)


async def _next_event(sub: Subscription) -> bool:
    """Wait for any run or interaction event, or the poll interval: False when lagged."""
    try:
        event = await asyncio.wait_for(sub.queue.get(), SHARED_POLL_SECONDS)
    except TimeoutError:
        return True
    return event is not None

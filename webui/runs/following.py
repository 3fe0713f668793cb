"""Runs another replica drives (a shared PostgreSQL database): followed through the event
hub and read back from the database, so a watcher here sees them as it would its own."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.engine import Engine

from webui.blocking import run_db
from webui.events import EventHub, Subscription
from webui.files.store import FileStore, output_view
from webui.interactions.service import InteractionService
from webui.runs.types import SHARED_POLL_SECONDS, RunStatus, RunUpdate
from webui.store import runs as run_store
from webui.store.models import Interaction, ManagedFile, Run

log = logging.getLogger(__name__)


def final_update(run: Run, files: list[ManagedFile]) -> RunUpdate:
    """A finished run, as its watchers' last update."""
    views = [output_view(row) for row in files]
    return RunUpdate("final", run.id, run.status, output=run.output, error=run.error, files=views)


class RemoteRuns:
    def __init__(
        self, *, engine: Engine, hub: EventHub, interactions: InteractionService, files: FileStore
    ) -> None:
        self.engine = engine
        self.hub = hub
        self.interactions = interactions
        self.files = files

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


async def _next_event(sub: Subscription) -> bool:
    """Wait for any run or interaction event, or the poll interval: False when lagged."""
    try:
        event = await asyncio.wait_for(sub.queue.get(), SHARED_POLL_SECONDS)
    except TimeoutError:
        return True
    return event is not None

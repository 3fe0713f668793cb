"""What the run service tells about the runs it drives, reading their live state: a run's
updates for a watcher (`watch_run`, from memory, or read back when another replica drives
it or it has ended), where a live run stands (`live_state`), and what the process holds
for the metrics (`held`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Iterable

import anyio

from webui.observability.metrics import Held
from webui.runs.following import RemoteRuns, in_scope, kept_update
from webui.runs.live import LiveRun
from webui.runs.outcomes import RunRecordBacklog
from webui.runs.types import LiveState, RunStatus, RunUpdate


@contextlib.asynccontextmanager
async def watch_run(
    live: LiveRun | None,
    run_id: str,
    *,
    records: RunRecordBacklog,
    remote: RemoteRuns,
) -> AsyncIterator[asyncio.Queue[RunUpdate]]:
    """A queue of the run's updates, starting with where it stands now. `live`: the run as
    this process drives it (None: it has ended, or another replica drives it)."""
    queue: asyncio.Queue[RunUpdate] = asyncio.Queue()
    if live is None:
        kept = records.final(run_id)  # ended, its outcome not written yet
        update = kept_update(run_id, kept.fields) if kept is not None else await remote.ended(run_id)
        if update is not None:
            queue.put_nowait(update)
            yield queue
            return
        # Another replica drives it: follow it through the hub and the database.
        scope = anyio.CancelScope()
        follower = asyncio.create_task(
            in_scope(scope, functools.partial(remote.follow, run_id, queue)), name=f"follow-{run_id}"
        )
        try:
            yield queue
        finally:
            scope.cancel()
            await follower
        return
    if live.asks.waiting_on is not None:
        queue.put_nowait(RunUpdate("waiting", run_id, live.status, interaction=live.asks.waiting_on))
    live.watchers.add(queue)
    try:
        yield queue
    finally:
        live.watchers.discard(queue)


def live_state(live: LiveRun | None) -> LiveState | None:
    """None once the run has ended (or is not driven by this process)."""
    if live is None or live.done.is_set():
        return None
    return LiveState(live.status, live.asks.waiting_on, tuple(sorted(live.children)))


def held(lives: Iterable[LiveRun], *, slots_total: int, sessions: dict[str, int] | None = None) -> Held:
    """What the process holds now, for the metrics: its queue, its slots, the runs waiting
    and their questions, the tasks followed (and `sessions`, by the caller)."""
    now = time.monotonic()
    result = Held(slots_total=slots_total, sessions=dict(sessions or {}))
    oldest = now
    for live in lives:
        result.queued += live.status == RunStatus.QUEUED
        result.slots_busy += live.place.held
        result.waiting_for_input += live.status == RunStatus.WAITING_FOR_INPUT
        result.waiting_for_child += live.status == RunStatus.WAITING_FOR_CHILD
        result.questions += len(live.asks.pending)
        result.tasks += live.call.as_task
        oldest = min([oldest, *(q.asked_at for q in live.asks.open.values())])
    result.oldest_question_seconds = now - oldest
    return result

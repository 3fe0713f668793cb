"""A waiting run goes on: once nothing it waits for is pending (its questions, its child
runs), it takes a slot again, ahead of new runs, and its time limit runs again."""

from __future__ import annotations

import asyncio
import logging

from webui.runs.control import ResumeControl
from webui.runs.live import LiveRun
from webui.runs.types import RunStatus, RunUpdate

log = logging.getLogger(__name__)


async def after_wait(runs: ResumeControl, live: LiveRun) -> bool:
    """One thing the run waited for is done (an answer, a child run). It goes on, with
    a slot taken again, once nothing else is pending; until then it waits for the rest
    (the thread that was answered goes on meanwhile). False when the run ended."""
    if live.done.is_set() or live.concluded:
        return False
    if live.asks.pending:
        return True
    if live.child_waits:
        if live.status != RunStatus.WAITING_FOR_CHILD:
            try:
                await runs.set_status(live, RunStatus.WAITING_FOR_CHILD)
            except Exception:
                log.exception("run %s: waiting for its child runs was not recorded", live.run_id)
        return True
    return await _resume(runs, live)


async def _resume(runs: ResumeControl, live: LiveRun) -> bool:
    """Take a slot again before the run goes on: False when it ended meanwhile. One
    resumption waits in line per run: another (a second answer meanwhile) waits for it
    (two in line for one slot, the second would wait for the slot its own run holds)."""
    if live.place.held:
        return True
    asks = live.asks
    if asks.resuming is not None:
        asks.resumers += 1
        try:
            await asks.resuming.wait()
        finally:
            asks.resumers -= 1
        return not live.done.is_set() and not live.concluded
    asks.resuming = resumed = asyncio.Event()
    try:
        return await _resume_in_line(runs, live)
    finally:
        asks.resuming = None
        resumed.set()


async def _resume_in_line(runs: ResumeControl, live: LiveRun) -> bool:
    if not await runs.admission.take_slot(live):
        return False
    if live.asks.pending or live.child_waits or live.asks.asking:
        # Another of its handler's threads asked or started a child run while this one
        # waited for the slot: the run waits again, and holds none while it does (two
        # parents holding both slots would wait forever for children that need one).
        runs.release_slot(live)
        if runs.admission.shared and live.request.limits.max_running is not None:
            # The database admission said `running`; it says waiting again.
            try:
                await runs.set_status(live, live.waiting_again_status)
            except Exception:
                log.exception("run %s: waiting again was not recorded", live.run_id)
        return True
    try:
        await runs.set_status(live, RunStatus.RUNNING)
    except Exception:
        log.exception("run %s: its resumption was not recorded", live.run_id)
        runs.enter(live, RunStatus.RUNNING, announce=False)
    runs.clock.start(live)
    live.publish(RunUpdate("running", live.run_id, live.status))
    return True

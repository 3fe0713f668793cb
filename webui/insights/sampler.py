"""Each serve replica's worker pool and queue, per minute, for the insights page.

The sampler reads what the replica holds (`RunService.held`, the same source the metrics'
gauges read) every `every` seconds, keeps the highest values of the minute, and writes the
minute's row when the minute is over; every `prune_every` seconds it drops rows past their
keeping time.
A database that cannot take a row loses that minute's sample, never the loop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from sqlalchemy.engine import Engine

from webui.blocking import run_db
from webui.observability.metrics import Held
from webui.runs.outcomes import is_unavailable
from webui.settings import setting_default
from webui.store import insights as insight_store
from webui.store.insights import MINUTE

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 5.0


@dataclass
class _Minute:
    start_s: int
    slots: int = 0
    busy: int = 0
    queued: int = 0
    waiting: int = 0

    def take(self, held: Held) -> None:
        self.slots = max(self.slots, held.slots_total)
        self.busy = max(self.busy, held.slots_busy)
        self.queued = max(self.queued, held.queued)
        self.waiting = max(self.waiting, held.waiting_for_input + held.waiting_for_child)


class PoolSampler:
    def __init__(
        self,
        engine: Engine,
        *,
        replica_id: str,
        held: Callable[[], Held],
        every: float = SAMPLE_SECONDS,
        prune_every: float = setting_default("insights_prune_seconds"),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.replica_id = replica_id
        self.held = held
        self.every = every
        self.prune_every = prune_every
        self.clock = clock
        self._minute: _Minute | None = None
        self._pruned_at = 0.0

    async def run(self) -> None:
        try:
            while True:
                await self.sample()
                await anyio.sleep(self.every)
        finally:
            with anyio.CancelScope(shield=True):
                await self.flush()

    async def sample(self) -> None:
        now = self.clock()
        start = int(now) - int(now) % MINUTE
        if self._minute is not None and self._minute.start_s != start:
            await self.flush()
        if self._minute is None:
            self._minute = _Minute(start)
        self._minute.take(self.held())
        if now - self._pruned_at >= self.prune_every:
            self._pruned_at = now
            await self._write(insight_store.prune, self.engine, now_s=int(now))

    async def flush(self) -> None:
        minute, self._minute = self._minute, None
        if minute is None:
            return
        await self._write(
            insight_store.add_pool_sample,
            self.engine,
            replica_id=self.replica_id,
            start_s=minute.start_s,
            slots=minute.slots,
            busy=minute.busy,
            queued=minute.queued,
            waiting=minute.waiting,
        )

    async def _write(self, write: Callable[..., object], *args: object, **kwargs: object) -> None:
        try:
            await run_db(write, *args, **kwargs)
        except Exception as exc:
            if not is_unavailable(exc):
                log.exception("insights: the worker pool's sample could not be written")
            else:
                log.warning(
                    "insights: the database is unavailable (%s); this minute's pool sample is lost", exc
                )

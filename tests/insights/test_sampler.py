"""The worker pool sampler (webui.insights.sampler) on a real SQLite store, with a clock the
test moves: a minute's row holds the highest values its samples saw and is written when
the minute is over (and at the end); a database that cannot take a row loses that minute's
sample, never the loop; old rows are pruned on the way."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from webui.insights.sampler import PoolSampler
from webui.observability.metrics import Held
from webui.store import insights as insight_store
from webui.store.db import make_engine, sqlite_url
from webui.store.models import POOL_SAMPLES

T0 = 1_800_000_000  # a minute's start


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return make_engine(sqlite_url(tmp_path / "s.db"))


def rows(engine: Engine) -> list[tuple[int, int, int, int, int]]:
    with engine.connect() as conn:
        c = POOL_SAMPLES.c
        return [
            (r.start_s, r.slots, r.busy, r.queued, r.waiting)
            for r in conn.execute(select(POOL_SAMPLES).order_by(c.start_s))
        ]


def test_a_minute_keeps_its_highest_values_and_is_written_when_it_ends(engine: Engine) -> None:
    now = [float(T0)]
    held = [Held(slots_total=4, slots_busy=1, queued=3), Held(slots_total=4, slots_busy=4, queued=0)]
    held += [Held(slots_total=4, slots_busy=2, waiting_for_input=2, waiting_for_child=1)]
    feed = iter(held)
    s = PoolSampler(engine, replica_id="r1", held=lambda: next(feed), clock=lambda: now[0])

    async def main() -> None:
        await s.sample()
        now[0] = T0 + 30
        await s.sample()
        assert rows(engine) == []  # the minute is not over
        now[0] = T0 + 61
        await s.sample()
        assert rows(engine) == [(T0, 4, 4, 3, 0)]
        await s.flush()

    asyncio.run(main())
    assert rows(engine) == [(T0, 4, 4, 3, 0), (T0 + 60, 4, 2, 0, 3)]


def test_an_unavailable_database_loses_the_sample_not_the_loop(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = {"n": 0}
    real = insight_store.add_pool_sample

    def locked_once(*args: object, **kwargs: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(insight_store, "add_pool_sample", locked_once)
    now = [float(T0)]
    s = PoolSampler(engine, replica_id="r1", held=lambda: Held(slots_total=2), clock=lambda: now[0])

    async def main() -> None:
        await s.sample()
        now[0] = T0 + 60
        await s.sample()  # the first minute's write fails: logged, dropped
        now[0] = T0 + 120
        await s.sample()

    asyncio.run(main())
    assert [r[0] for r in rows(engine)] == [T0 + 60]
    assert "pool sample is lost" in caplog.text


def test_the_loop_prunes_old_rows_and_writes_its_minute_when_cancelled(engine: Engine) -> None:
    insight_store.add_pool_sample(
        engine, replica_id="old", start_s=T0 - 9 * 86_400, slots=1, busy=0, queued=0, waiting=0
    )
    s = PoolSampler(
        engine,
        replica_id="r1",
        held=lambda: Held(slots_total=3, slots_busy=1),
        every=0.01,
        prune_every=0.0,
        clock=lambda: float(T0),
    )

    async def main() -> None:
        task = asyncio.create_task(s.run())
        deadline = asyncio.get_running_loop().time() + 30
        while any(r[0] < T0 for r in rows(engine)):
            assert asyncio.get_running_loop().time() < deadline, "the old row was not pruned"
            await asyncio.sleep(0.01)  # polling the store the loop writes to, bounded above
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert rows(engine) == [(T0, 3, 1, 0, 0)]

"""The background-call registry (webui.background): calls outlive the request that
started them, finished ones are kept for a while and pruned by age and count, waiters wake
at a change and never wait past their bound. Real anyio; a fake clock stands in for time."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from webui.background import BackgroundCall, BackgroundCalls

pytestmark = pytest.mark.anyio

LIMIT = 10.0  # bounds every wait of these tests; none is expected to take it


@dataclass(kw_only=True)
class Job(BackgroundCall):
    result: str | None = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def registry(clock: Clock, *, max_calls: int = 100, keep: float = 60.0) -> BackgroundCalls[Job]:
    return BackgroundCalls(max_calls=max_calls, keep_finished_seconds=keep, clock=clock)


async def instant(job: Job) -> None:
    job.result = "ok"


async def finish(calls: BackgroundCalls[Job], job_id: str) -> Job:
    job = Job(id=job_id)
    calls.start(job, instant)
    with anyio.fail_after(LIMIT):
        await job.done.wait()
    return job


async def test_a_call_runs_in_the_background_and_is_found_by_id() -> None:
    release = anyio.Event()

    async def work(job: Job) -> None:
        await release.wait()
        job.result = "done"

    async with registry(Clock()) as calls:
        job = calls.start(Job(id="a", group="g"), work)
        assert calls.get("a") is job and calls.of("g") == [job] and calls.of("other") == []
        assert not job.finished and job.result is None
        release.set()
        assert await calls.wait_finished(job, LIMIT)
        assert job.result == "done" and job.finished_at == 1000.0
    assert calls.get("a") is job  # finished calls stay findable


async def test_leaving_cancels_running_calls_and_marks_them_finished() -> None:
    started = anyio.Event()
    cancelled: list[str] = []

    async def forever(job: Job) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(job.id)
            raise

    with anyio.fail_after(LIMIT):
        async with registry(Clock()) as calls:
            job = calls.start(Job(id="a"), forever)
            await started.wait()
    assert cancelled == ["a"] and job.finished and job.done.is_set()


async def test_a_failing_call_is_finished_and_does_not_end_the_registry() -> None:
    async def broken(job: Job) -> None:
        raise RuntimeError("boom")

    async with registry(Clock()) as calls:
        bad = calls.start(Job(id="bad"), broken)
        assert await calls.wait_finished(bad, LIMIT)
        good = await finish(calls, "good")
        assert good.result == "ok" and bad.result is None


async def test_starting_needs_the_registry_entered() -> None:
    with pytest.raises(RuntimeError):
        registry(Clock()).start(Job(id="a"), instant)


async def test_finished_calls_are_kept_for_the_keep_time_then_pruned_at_the_next_start() -> None:
    clock = Clock()
    async with registry(clock, keep=60.0) as calls:
        old = await finish(calls, "old")
        clock.now += 60.0
        await finish(calls, "b")
        assert calls.get(old.id) is old  # exactly the keep time: still there
        clock.now += 0.5
        await finish(calls, "c")
        assert calls.get("old") is None and calls.get("b") is not None and calls.get("c") is not None


async def test_the_oldest_finished_calls_go_beyond_the_limit_and_running_ones_stay() -> None:
    clock = Clock()
    release = anyio.Event()

    async def blocked(job: Job) -> None:
        await release.wait()

    async with registry(clock, max_calls=3) as calls:
        running = calls.start(Job(id="running"), blocked)
        for name in ("f1", "f2", "f3"):
            clock.now += 1
            await finish(calls, name)
        # Pruned before adding: the registry held 3 (the limit) when f3 was added.
        assert len(calls) == 4
        clock.now += 1
        await finish(calls, "f4")
        assert calls.get("f1") is None and len(calls) == 4
        clock.now += 1
        await finish(calls, "f5")
        assert {c for c in ("running", "f2", "f3", "f4", "f5") if calls.get(c)} == {
            "running",
            "f3",
            "f4",
            "f5",
        }
        assert calls.get(running.id) is running
        release.set()
        assert await calls.wait_finished(running, LIMIT)


async def test_a_long_poll_wakes_at_each_change_of_its_group_only() -> None:
    step = anyio.Event()
    release = anyio.Event()

    async def two_phases(job: Job, calls: BackgroundCalls[Job]) -> None:
        await step.wait()
        job.result = "half"
        calls.notify(job.group)
        await release.wait()

    async with registry(Clock()) as calls:
        changed = calls.changed("conv")
        other = calls.changed("elsewhere")
        job = calls.start(Job(id="a", group="conv"), lambda j: two_phases(j, calls))
        assert changed.is_set() and not other.is_set()  # starting is a change
        changed = calls.changed("conv")  # taken before the next change: nothing is missed
        assert calls.changed("conv") is changed  # one event per group until it is set
        step.set()
        with anyio.fail_after(LIMIT):
            await changed.wait()
        assert job.result == "half" and not job.finished
        changed = calls.changed("conv")
        release.set()
        with anyio.fail_after(LIMIT):
            await changed.wait()
        assert job.finished and not other.is_set()


async def test_waiting_for_a_call_is_bounded() -> None:
    release = anyio.Event()

    async def blocked(job: Job) -> None:
        await release.wait()

    async with registry(Clock()) as calls:
        job = calls.start(Job(id="a"), blocked)
        with anyio.fail_after(LIMIT):
            assert await calls.wait_finished(job, 0) is False
        assert not job.finished
        release.set()
        assert await calls.wait_finished(job, LIMIT) is True
        with anyio.fail_after(LIMIT):
            assert await calls.wait_finished(job, 0) is True  # a finished call answers at once

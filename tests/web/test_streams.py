"""What the open streams of a page share (webui.web.streams): one computation per event and
key, a redo when the first one fails, and the per-account cap with idempotent release."""

from __future__ import annotations

import anyio
import pytest

from webui.events import Event
from webui.web.streams import SharedWork, StreamSlots, TooManyStreams

pytestmark = pytest.mark.anyio


async def test_waiting_streams_share_one_computation_per_event_and_key() -> None:
    work = SharedWork()
    calls: list[str] = []
    gate = anyio.Event()

    def compute(key: str) -> str:
        calls.append(key)
        return f"{key}!"

    event, other = Event("interactions", "pending", {"interactionId": "a"}), Event("runs", "status")
    results: list[str] = []

    async def one(ev: Event, key: str) -> None:
        await gate.wait()
        results.append(await work.get(ev, key, lambda: compute(key)))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one, event, "card")
            tg.start_soon(one, event, "other-card")
            tg.start_soon(one, other, "card")
            gate.set()
    assert sorted(calls) == ["card", "card", "other-card"]  # per (event, key), not per stream
    assert results.count("card!") == 6 and results.count("other-card!") == 1


async def test_when_the_first_computation_fails_the_others_compute_their_own() -> None:
    work = SharedWork()
    event = Event("interactions", "pending")
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("database went away")
        return "ok"

    with anyio.fail_after(10):
        with pytest.raises(RuntimeError):
            await work.get(event, "k", flaky)
        assert await work.get(event, "k", flaky) == "ok"
    assert len(attempts) == 2


def test_an_account_gets_at_most_its_limit_of_slots_and_a_release_counts_once() -> None:
    slots = StreamSlots(2)
    first, _ = slots.take(1), slots.take(1)
    with pytest.raises(TooManyStreams) as refused:
        slots.take(1)
    assert refused.value.status == 429 and refused.value.code == "too_many_streams"
    assert "the limit is 2" in refused.value.message
    slots.take(2)  # another account is not affected
    first()
    first()  # idempotent: the second release gives nothing back
    assert slots.held(1) == 1
    slots.take(1)
    assert slots.held(1) == 2

"""The bounded event store of resumable SSE streams (webui/mcp/event_store.py): streams
kept per session, replays only within their session, every bound held, the hold of a
dropped call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from tests.helpers import WAIT
from webui.mcp.event_store import MAX_EVENT_ID_LENGTH, BoundedEventStore, StreamOwner, stream_owner

pytestmark = pytest.mark.anyio


@contextmanager
def session(sid: str | None) -> Iterator[None]:
    token = stream_owner.set(StreamOwner(sid))
    try:
        yield
    finally:
        stream_owner.reset(token)


def note(n: int, size: int = 0) -> JSONRPCNotification:
    return JSONRPCNotification(
        jsonrpc="2.0", method="notifications/message", params={"n": n, "pad": "x" * size}
    )


def result(request_id: int) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={})


async def replay(store: BoundedEventStore, sid: str | None, last: str) -> list[Any]:
    got: list[Any] = []

    async def collect(event: EventMessage) -> None:
        got.append(event.message)

    with session(sid), anyio.fail_after(WAIT):
        assert await store.replay_events_after(last, collect) is None
    return got


async def test_a_replay_sends_what_followed_the_id_and_ends_with_the_response() -> None:
    store = BoundedEventStore()
    with session("s1"):
        priming = await store.store_event("1", None)
        first = await store.store_event("1", note(1))
        await store.store_event("1", note(2))
        await store.store_event("1", result(1))
    assert await replay(store, "s1", priming) == [note(1), note(2), result(1)]
    assert await replay(store, "s1", first) == [note(2), result(1)]


async def test_streams_of_two_sessions_with_the_same_request_id_stay_apart() -> None:
    store = BoundedEventStore()
    with session("a"):
        a = await store.store_event("1", None)
        await store.store_event("1", result(1))
    with session("b"):
        b = await store.store_event("1", None)
        await store.store_event("1", note(9))
        await store.store_event("1", result(1))
    assert await replay(store, "a", a) == [result(1)]
    assert await replay(store, "b", b) == [note(9), result(1)]


async def test_another_sessions_id_an_unknown_id_or_no_session_replays_nothing() -> None:
    store = BoundedEventStore()
    with session("victim"):
        secret = await store.store_event("1", None)
        await store.store_event("1", note(1))
    assert await replay(store, "attacker", secret) == []
    assert await replay(store, None, secret) == []
    assert await replay(store, "victim", "x" * (MAX_EVENT_ID_LENGTH + 1)) == []
    assert await replay(store, "victim", "not-an-id") == []


async def test_event_ids_are_random_and_unique() -> None:
    store = BoundedEventStore()
    with session("s"):
        ids = [await store.store_event("1", note(n)) for n in range(200)]
    assert len(set(ids)) == 200 and all(len(i) >= 22 for i in ids)
    assert not any(i.isdigit() for i in ids)


async def test_an_opening_requests_events_of_no_known_session_are_not_kept() -> None:
    store = BoundedEventStore()
    with session(None):
        await store.store_event("0", None)
    await store.store_event("0", None)  # no owner at all
    assert store.stream_count == 0 and store.event_count == 0


async def test_the_cap_on_events_per_stream_drops_the_oldest_and_never_replays_a_gap() -> None:
    store = BoundedEventStore(max_events_per_stream=3)
    with session("s"):
        ids = [await store.store_event("1", note(n)) for n in range(5)]
    assert store.event_count == 3
    assert await replay(store, "s", ids[0]) == []  # gone: nothing, not a stream with a hole
    assert [m.params["n"] for m in await replay_until(store, "s", ids[2], 2)] == [3, 4]


async def replay_until(store: BoundedEventStore, sid: str, last: str, count: int) -> list[Any]:
    """A replay of an unfinished stream follows it: stop after `count` events."""
    got: list[Any] = []
    with anyio.fail_after(WAIT), session(sid):
        async with anyio.create_task_group() as tg:

            async def collect(event: EventMessage) -> None:
                got.append(event.message)
                if len(got) == count:
                    tg.cancel_scope.cancel()

            await store.replay_events_after(last, collect)
    return got


async def test_the_caps_on_streams_and_bytes_drop_the_least_recently_written_streams() -> None:
    store = BoundedEventStore(max_streams=2)
    with session("s"):
        old = await store.store_event("1", note(1))
        await store.store_event("2", note(2))
        await store.store_event("3", note(3))
    assert store.stream_count == 2 and await replay(store, "s", old) == []

    store = BoundedEventStore(max_bytes=10_000)
    with session("s"):
        for n in range(100):
            await store.store_event(str(n), note(n, size=500))
    assert store.bytes <= 10_000 and store.stream_count < 100
    with session("s"):  # one event larger than all the bytes: its own stream keeps nothing
        await store.store_event("big", note(0, size=20_000))
    assert store.bytes <= 10_000


async def test_events_older_than_the_age_limit_go() -> None:
    now = [0.0]
    store = BoundedEventStore(max_age_seconds=10, clock=lambda: now[0])
    with session("s"):
        old = await store.store_event("1", note(1))
        now[0] = 11
        await store.store_event("2", note(2))
    assert store.stream_count == 1 and await replay(store, "s", old) == []


async def test_a_flood_of_events_stays_within_every_bound() -> None:
    store = BoundedEventStore(max_events_per_stream=50, max_streams=20, max_bytes=200_000)
    with session("flood"):
        for n in range(5_000):
            await store.store_event(str(n % 40), note(n, size=100))
    assert store.stream_count <= 20 and store.bytes <= 200_000
    assert store.event_count <= 20 * 50


async def test_forgetting_a_session_drops_its_streams_and_ends_its_followers() -> None:
    store = BoundedEventStore()
    with session("s"):
        priming = await store.store_event("1", None)
    with session("other"):
        await store.store_event("1", None)
    got: list[Any] = []

    async def collect(event: EventMessage) -> None:
        got.append(event.message)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                with session("s"):
                    await store.replay_events_after(priming, collect)

            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
            store.forget_session("s")
    assert got == [] and store.stream_count == 1


async def test_a_held_call_ends_without_a_follower_and_lives_on_with_one() -> None:
    store = BoundedEventStore(resume_grace_seconds=0.05)
    with session("s"):
        priming = await store.store_event("1", None)
    assert await store.hold_call("s", "1") is False  # nobody came back within the grace
    assert await store.hold_call("s", "unknown") is False
    assert await store.hold_call("other", "1") is False

    store.resume_grace = WAIT
    got: list[Any] = []

    async def collect(event: EventMessage) -> None:
        got.append(event.message)

    held: list[bool] = []
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:

            async def hold() -> None:
                held.append(await store.hold_call("s", "1"))

            async def follow() -> None:
                with session("s"):
                    await store.replay_events_after(priming, collect)

            tg.start_soon(hold)
            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()
            with session("s"):
                await store.store_event("1", note(1))
                await store.store_event("1", result(1))
    assert held == [True] and got == [note(1), result(1)]


async def test_the_streams_of_a_session_no_longer_held_go_and_its_followers_end() -> None:
    alive = {"s", "t"}
    store = BoundedEventStore(liveness_interval_seconds=0.01)
    store.session_alive = alive.__contains__
    with session("s"):
        priming = await store.store_event("1", None)
    got: list[Any] = []

    async def collect(event: EventMessage) -> None:
        got.append(event.message)

    alive.discard("s")  # ended elsewhere (reaped, terminated by order)
    with anyio.fail_after(WAIT), session("s"):
        await store.replay_events_after(priming, collect)  # ends instead of following
    assert got == [] and store.stream_count == 0

    with session("t"):
        await store.store_event("1", None)
    alive.discard("t")
    with session("u"):
        await store.store_event("1", None)  # the next write sweeps the ended session's
    assert store.stream_count == 1

"""The event hub across replicas: two hubs, each with its own PostgreSQL relay (as two
server processes have), on one real database."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from tests.replicas.conftest import PgServer
from webui.events import Event, EventHub, Subscription
from webui.store.notify import MAX_PAYLOAD_BYTES, PgRelay, conninfo, decode, encode

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0


@pytest.fixture
async def pair(pg_url: str) -> AsyncIterator[tuple[EventHub, EventHub]]:
    a, b = EventHub(relay=PgRelay(pg_url)), EventHub(relay=PgRelay(pg_url))
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def relay_of(hub: EventHub) -> PgRelay:
    relay = hub._relay  # pyright: ignore[reportPrivateUsage]
    assert isinstance(relay, PgRelay)
    return relay


async def next_event(sub: Subscription) -> Event | None:
    with anyio.fail_after(TIMEOUT):
        return await sub.queue.get()


async def until(check: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        while not check():
            await asyncio.sleep(0.02)  # polling a flag another task sets, bounded by fail_after


async def test_an_event_published_on_one_replica_reaches_the_other_once(
    pair: tuple[EventHub, EventHub],
) -> None:
    a, b = pair
    with a.subscribe("runs") as on_a, b.subscribe("runs") as on_b:
        a.publish("runs", "status", runId="r1", status="running")
        got = await next_event(on_b)
        assert got == Event("runs", "status", {"runId": "r1", "status": "running"})
        b.publish("runs", "status", runId="r2", status="success")
        # A sees its own event once (delivered locally, its NOTIFY skipped), then B's.
        assert await next_event(on_a) == Event("runs", "status", {"runId": "r1", "status": "running"})
        assert await next_event(on_a) == Event("runs", "status", {"runId": "r2", "status": "success"})
        assert await next_event(on_b) == Event("runs", "status", {"runId": "r2", "status": "success"})
        assert on_a.queue.empty() and on_b.queue.empty()


async def test_topics_filter_remote_events_and_a_thread_may_publish(pair: tuple[EventHub, EventHub]) -> None:
    a, b = pair
    with b.subscribe("audit") as audit_only:
        a.publish("runs", "status", runId="r1")
        worker = threading.Thread(target=a.publish, args=("audit", "recorded"), kwargs={"id": 7})
        worker.start()
        worker.join(TIMEOUT)
        assert await next_event(audit_only) == Event("audit", "recorded", {"id": 7})


async def test_an_event_too_large_for_a_notify_arrives_trimmed_to_its_ids(
    pair: tuple[EventHub, EventHub],
) -> None:
    a, b = pair
    with b.subscribe("interactions") as on_b:
        a.publish("interactions", "pending", interactionId="int_1", runId="r1", message="x" * 20_000)
        got = await next_event(on_b)
    assert got == Event("interactions", "pending", {"interactionId": "int_1", "runId": "r1", "trimmed": True})


async def test_a_lost_listening_connection_ends_subscribers_as_lagged_and_reconnects(
    pair: tuple[EventHub, EventHub], pg_server: PgServer
) -> None:
    a, b = pair
    resyncs: list[int] = []
    b.on_resync(lambda: resyncs.append(1))
    relay = relay_of(b)
    old_pid = relay.listener_pid
    assert old_pid is not None
    with b.subscribe("runs") as before:
        pg_server.terminate(old_pid)
        assert await next_event(before) is None  # lagged: the page re-renders from the database
        assert before.lagged
    assert resyncs == [1]
    assert relay.listener_pid is not None and relay.listener_pid != old_pid
    with b.subscribe("runs") as after:
        a.publish("runs", "status", runId="r3")
        assert await next_event(after) == Event("runs", "status", {"runId": "r3"})


async def test_a_lost_sending_connection_makes_the_others_resync(
    pair: tuple[EventHub, EventHub], pg_server: PgServer
) -> None:
    a, b = pair
    # start() waits for the listening connection only; the sending one may still be connecting.
    await until(lambda: relay_of(a).sender_pid is not None)
    sender = relay_of(a).sender_pid
    assert sender is not None
    pg_server.terminate(sender)
    with b.subscribe("runs") as on_b:
        # This one may be lost with the connection: B is told to re-read instead.
        a.publish("runs", "status", runId="r4")
        first = await next_event(on_b)
        if first is not None:  # it did get through on the new connection: the resync follows
            assert first == Event("runs", "status", {"runId": "r4"})
            assert await next_event(on_b) is None
    await until(lambda: relay_of(a).sender_pid not in (None, sender))


async def test_publishing_never_fails_even_when_the_outbox_is_full(pg_url: str) -> None:
    relay = PgRelay(pg_url)
    hub = EventHub(queue_size=2, relay=relay)
    await hub.start()
    try:
        await relay.close()  # nothing sends any more: the outbox fills up
        with hub.subscribe("runs") as sub:
            for i in range(10_005):
                hub.publish("runs", "status", n=i)
            assert sub.lagged  # a slow local subscriber ends; publishing went on
        assert relay.dropped == 10_005 - 10_000
    finally:
        await hub.close()


def test_payloads_stay_under_the_notify_limit_and_foreign_payloads_are_ignored() -> None:
    huge = Event("runs", "status", {"runId": "r" * 300, "status": "ok", "blob": "é" * 10_000})
    text = encode("o1", huge)
    assert len(text.encode()) <= MAX_PAYLOAD_BYTES
    assert decode(text) == ("o1", Event("runs", "status", {"status": "ok", "trimmed": True}))
    small = Event("audit", "recorded", {"id": 3})
    assert decode(encode("o2", small)) == ("o2", small)
    for junk in ("", "not json", "[]", json.dumps({"o": 1, "t": "x", "k": "y"}), json.dumps({"o": "a"})):
        assert decode(junk) is None


def test_the_database_url_becomes_a_psycopg_connection_string() -> None:
    url = "postgresql+psycopg://me:p%40ss@db.example:5433/app?sslmode=require"
    assert conninfo(url) == "postgresql://me:p%40ss@db.example:5433/app?sslmode=require"

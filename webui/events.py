"""Event hub for live pages (SSE) and waiting runs: run changes, interactions, audit tail.

One bounded queue per subscriber. A subscriber that falls behind is not allowed to grow
memory or slow publishers: it is marked lagged and its stream ends, so the browser
reconnects and re-renders the current state. Publishing never blocks and never fails.

Alone, the hub is in-process (SQLite: one server process). With a `Relay` (several
replicas on one PostgreSQL database, webui.store.notify), every event published here is
also sent to the other replicas, and theirs are delivered here; when the relay may have
missed events (its connection dropped), every subscriber is ended as lagged and the
`on_resync` callbacks re-read what they wait for from the database."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from webui.observability.metrics import METRICS

log = logging.getLogger(__name__)

QUEUE_SIZE = 256


@dataclass(frozen=True)
class Event:
    topic: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


class Relay(Protocol):
    """Carries events between the replicas sharing one database."""

    async def start(self, hub: EventHub) -> None: ...

    def send(self, event: Event) -> None:
        """Hand one local event over; never blocks, never raises."""
        ...

    async def close(self) -> None: ...


class Subscription:
    def __init__(self, topics: frozenset[str], size: int) -> None:
        self.topics = topics
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=size)
        self.lagged = False

    def offer(self, event: Event) -> None:
        if self.lagged:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.end()

    def end(self) -> None:
        """Mark lagged and end the stream: the client reconnects and re-reads the state."""
        if self.lagged:
            return
        self.lagged = True
        METRICS.hub_lagged.inc()
        with contextlib.suppress(asyncio.QueueEmpty):
            while self.queue.full():
                self.queue.get_nowait()
        self.queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            event = await self.queue.get()
            if event is None:
                return
            yield event


class EventHub:
    """Subscribers live on one event loop; `publish` may be called from any thread (work
    done in a worker thread hands its events to the loop)."""

    def __init__(self, queue_size: int = QUEUE_SIZE, *, relay: Relay | None = None) -> None:
        self._subs: set[Subscription] = set()
        self._queue_size = queue_size
        self._loop: asyncio.AbstractEventLoop | None = None
        self._relay = relay
        self._resync: list[Callable[[], object]] = []
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    @property
    def shared(self) -> bool:
        """Whether events also reach (and come from) other replicas."""
        return self._relay is not None

    async def start(self) -> None:
        """Bind to the running loop and start the relay, if any."""
        self._loop = asyncio.get_running_loop()
        if self._relay is not None:
            await self._relay.start(self)

    async def close(self) -> None:
        if self._relay is not None:
            await self._relay.close()

    @contextlib.contextmanager
    def subscribe(self, *topics: str) -> Iterator[Subscription]:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        sub = Subscription(frozenset(topics), self._queue_size)
        self._subs.add(sub)
        try:
            yield sub
        finally:
            self._subs.discard(sub)

    def publish(self, topic: str, kind: str, **data: Any) -> None:
        if self._relay is None and not self._followed(topic):
            return  # nobody here follows it and no other replica may: nothing to build
        event = Event(topic, kind, data)
        self._on_loop(self._deliver, event)
        if self._relay is not None:
            try:
                self._relay.send(event)
            except Exception:  # publishing never fails; the others re-read state anyway
                log.exception("event %s/%s not relayed", topic, kind)

    def deliver_remote(self, event: Event) -> None:
        """An event another replica published (called by the relay, from any thread)."""
        self._on_loop(self._deliver, event)

    def on_resync(self, callback: Callable[[], object]) -> None:
        """`callback` runs (on the loop) whenever remote events may have been missed."""
        self._resync.append(callback)

    def resync(self) -> None:
        """Remote events may have been missed: end every subscriber as lagged (views
        re-render) and tell the resync callbacks (waiting runs re-check the database)."""
        self._on_loop(self._resync_now)

    def _resync_now(self) -> None:
        for sub in list(self._subs):
            sub.end()
        for callback in list(self._resync):
            try:
                callback()
            except Exception:
                log.exception("a resync callback failed")

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not _on_loop(loop):
            with contextlib.suppress(RuntimeError):  # the loop already closed: nobody listens
                loop.call_soon_threadsafe(fn, *args)
            return
        fn(*args)

    def _followed(self, topic: str) -> bool:
        """Whether a subscription here may follow `topic`; True off the loop (the set of
        subscriptions is the loop's: the loop decides)."""
        loop = self._loop
        if loop is not None and not _on_loop(loop):
            return True
        return any(topic in sub.topics for sub in self._subs)

    def _deliver(self, event: Event) -> None:
        for sub in list(self._subs):
            if event.topic in sub.topics:
                sub.offer(event)

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def subscribers_of(self, topic: str) -> int:
        """How many subscriptions follow `topic` (live pages, for tests and diagnostics)."""
        return sum(1 for sub in self._subs if topic in sub.topics)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False

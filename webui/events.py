"""In-process event hub for live pages (SSE): run changes, interactions, audit tail.

One bounded queue per subscriber. A subscriber that falls behind is not allowed to grow
memory or slow publishers: it is marked lagged and its stream ends, so the browser
reconnects and re-renders the current state. Publishing never blocks and never fails.
Replaceable by a database-backed hub (LISTEN/NOTIFY) for several replicas."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

QUEUE_SIZE = 256


@dataclass(frozen=True)
class Event:
    topic: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


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
            self.lagged = True
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            self.queue.put_nowait(None)  # end of stream: the client reconnects

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            event = await self.queue.get()
            if event is None:
                return
            yield event


class EventHub:
    """Subscribers live on one event loop; `publish` may be called from any thread (work
    done in a worker thread hands its events to the loop)."""

    def __init__(self, queue_size: int = QUEUE_SIZE) -> None:
        self._subs: set[Subscription] = set()
        self._queue_size = queue_size
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

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
        event = Event(topic, kind, data)
        loop = self._loop
        if loop is not None and not _on_loop(loop):
            with contextlib.suppress(RuntimeError):  # the loop already closed: nobody listens
                loop.call_soon_threadsafe(self._deliver, event)
            return
        self._deliver(event)

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

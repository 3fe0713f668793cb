"""Resumable SSE streams of the Streamable HTTP endpoint (SEP-1699): a bounded in-memory
`EventStore` for the SDK's `StreamableHTTPSessionManager`.

The SDK stores every message a 2025-11-25 session sends (the priming event of each POST
stream first) and, on a GET carrying `Last-Event-ID`, asks the store to replay what follows
that id. It hands the store only its stream id (the JSON-RPC request's id, the same `1` in
every session) and the event id, so the store learns the session from the HTTP edge: the
gateway (`webui.mcp.http`) sets `stream_owner` around each request it forwards; the
session's message router, started inside the opening request, keeps that request's
`StreamOwner`, which the gateway fills in with the session id it binds. A replay names an
event of the same session or gets nothing; ids are random (128 bits), never counters.

A replay does not hand the stream back to the SDK: it follows the stream from the store
until the call's response is sent (or the session's events are gone), so nothing stored
between the replay and a live tail can fall between them. A POST whose client went away is
held by `hold_call` while the client may come back (`resume_grace`) instead of ending the
call at once.

Everything is bounded: events per stream, streams, bytes in all, and age. Past a bound the
oldest events (of the stream, or whole least recently written streams) go first; a
replay from an id no longer held gets nothing, never a stream with a gap.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse

log = logging.getLogger(__name__)

# Last-Event-ID values longer than this name no event of ours (ids are 22 characters).
MAX_EVENT_ID_LENGTH = 64
# What an event costs besides its JSON (its id, bookkeeping), in the byte count.
EVENT_OVERHEAD_BYTES = 128


@dataclass
class StreamOwner:
    """The session the streams of a request belong to; None until the gateway knows it
    (an opening request's, until the SDK answers with the session id)."""

    session_id: str | None = None


stream_owner: contextvars.ContextVar[StreamOwner] = contextvars.ContextVar("steamharness_mcp_stream_owner")

_Key = tuple[str, StreamId]  # (session id, the SDK's stream id)


@dataclass
class _Event:
    seq: int
    event_id: EventId
    message: JSONRPCMessage | None  # None: the priming event
    size: int
    at: float


@dataclass
class _Stream:
    events: deque[_Event] = field(default_factory=deque)
    next_seq: int = 0
    size: int = 0
    finished: bool = False  # the call's response (or error) is stored
    followers: int = 0
    # Set (and replaced) whenever the stream changes: a new event, followers, its end.
    changed: anyio.Event = field(default_factory=anyio.Event)
    gone: bool = False

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class BoundedEventStore(EventStore):
    def __init__(
        self,
        *,
        max_events_per_stream: int = 1000,
        max_streams: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        max_age_seconds: float = 3600.0,
        resume_grace_seconds: float = 5.0,
        liveness_interval_seconds: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_events_per_stream = max_events_per_stream
        self.max_streams = max_streams
        self.max_bytes = max_bytes
        self.max_age = max_age_seconds
        self.resume_grace = resume_grace_seconds
        # Whether a session is still held (the gateway's table); a stream of one that
        # ended goes, and a replay following it ends, at the latest this often.
        self.session_alive: Callable[[str], bool] = lambda _sid: True
        self.liveness_interval = liveness_interval_seconds
        self.clock = clock
        self._streams: OrderedDict[_Key, _Stream] = OrderedDict()  # least recently written first
        self._ids: dict[EventId, _Key] = {}
        self.bytes = 0

    # ------------------------------------------------------------------ the SDK's interface
    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = secrets.token_urlsafe(16)
        owner = stream_owner.get(None)
        if owner is None or owner.session_id is None:
            return event_id  # a stream of no known session (an opening request's): not kept
        key = (owner.session_id, stream_id)
        now = self.clock()
        self._expire(now)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream()
        else:
            self._streams.move_to_end(key)
        size = EVENT_OVERHEAD_BYTES + (
            len(message.model_dump_json(by_alias=True, exclude_unset=True)) if message is not None else 0
        )
        stream.events.append(_Event(stream.next_seq, event_id, message, size, now))
        stream.next_seq += 1
        stream.size += size
        self.bytes += size
        self._ids[event_id] = key
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            stream.finished = True
        self._bound(key, stream)
        stream.notify()
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send what followed `last_event_id` on its stream, then what the stream gets until
        the call's response; None always (the SDK then adds no live tail of its own)."""
        owner = stream_owner.get(None)
        if owner is None or owner.session_id is None or len(last_event_id) > MAX_EVENT_ID_LENGTH:
            return None
        self._expire(self.clock())
        key = self._ids.get(last_event_id)
        if key is None:
            return None
        if key[0] != owner.session_id:
            log.warning("refused a replay of another session's stream (Last-Event-ID of another session)")
            return None
        stream = self._streams[key]
        after = next(e.seq for e in stream.events if e.event_id == last_event_id)
        stream.followers += 1
        stream.notify()
        try:
            await self._follow(key[0], stream, after, send_callback)
        finally:
            stream.followers -= 1
            stream.notify()
        return None

    async def _follow(
        self, session_id: str, stream: _Stream, after: int, send_callback: EventCallback
    ) -> None:
        position = after + 1
        while True:
            if stream.gone:
                return
            if stream.events and stream.events[0].seq > position:
                return  # evicted before it was sent: a gap would be a lie
            pending = [e for e in stream.events if e.seq >= position]
            for event in pending:
                position = event.seq + 1
                if event.message is not None:
                    await send_callback(EventMessage(event.message, event.event_id))
                    if isinstance(event.message, JSONRPCResponse | JSONRPCError):
                        return
            if pending:
                continue  # more may have come while sending
            if stream.finished:
                return
            with anyio.move_on_after(self.liveness_interval):
                await stream.changed.wait()
            if not self.session_alive(session_id):
                self.forget_session(session_id)
                return

    # ------------------------------------------------------------------ the gateway's
    async def hold_call(self, session_id: str, stream_id: StreamId) -> bool:
        """A POST of `session_id` whose client went away before its response: wait while the
        client may resume its stream (`resume_grace` without a follower ends the wait).
        True: the call's response was stored (nothing to end); False: nobody came back."""
        stream = self._streams.get((session_id, stream_id))
        if stream is None:
            return False  # nothing of it kept (evicted, or its session is gone): not resumable
        while not stream.finished and not stream.gone:
            changed = stream.changed
            if stream.followers:
                await changed.wait()
                continue
            with anyio.move_on_after(self.resume_grace) as waited:
                await changed.wait()
            if waited.cancelled_caught and not stream.followers and not stream.finished:
                return False
        return stream.finished

    def forget_session(self, session_id: str) -> None:
        """The session ended: its events go, its followers and held calls end."""
        for key in [k for k in self._streams if k[0] == session_id]:
            self._drop(key)

    # ------------------------------------------------------------------ bounds
    def _expire(self, now: float) -> None:
        while self._streams:
            key, stream = next(iter(self._streams.items()))
            if (
                not stream.events
                or now - stream.events[-1].at > self.max_age
                or not self.session_alive(key[0])
            ):
                self._drop(key)
            else:
                break
        # Old events of younger streams go at the next write of those streams.

    def _bound(self, key: _Key, stream: _Stream) -> None:
        now = self.clock()
        while stream.events and (
            len(stream.events) > self.max_events_per_stream or now - stream.events[0].at > self.max_age
        ):
            self._drop_first(stream)
        while len(self._streams) > self.max_streams or self.bytes > self.max_bytes:
            oldest = next(iter(self._streams))
            if oldest == key:
                break
            self._drop(oldest)
        while self.bytes > self.max_bytes and stream.events:
            self._drop_first(stream)

    def _drop_first(self, stream: _Stream) -> None:
        event = stream.events.popleft()
        stream.size -= event.size
        self.bytes -= event.size
        self._ids.pop(event.event_id, None)

    def _drop(self, key: _Key) -> None:
        stream = self._streams.pop(key)
        for event in stream.events:
            self._ids.pop(event.event_id, None)
        self.bytes -= stream.size
        stream.events.clear()
        stream.size = 0
        stream.gone = True
        stream.notify()

    # ------------------------------------------------------------------ for tests and the console
    @property
    def stream_count(self) -> int:
        return len(self._streams)

    @property
    def event_count(self) -> int:
        return len(self._ids)

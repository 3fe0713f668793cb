"""Events between the replicas that share one PostgreSQL database: LISTEN/NOTIFY.

`PgRelay` is the `webui.events.Relay` of a replica: every local event is sent as one
NOTIFY (JSON: origin, topic, kind, data) on a sending connection, and one dedicated
listening connection per process LISTENs and hands the other replicas' events to the
local hub, skipping its own (same origin id).

Nothing here is the record of anything: events only wake subscribers, who re-read the
database. So an event too large for a NOTIFY payload is trimmed to the ids it names; an
event that cannot be queued is dropped; and whenever a connection was lost (events may
have been missed, ours or theirs) the hub is resynced: every subscriber ends as lagged
and the waiting runs re-check their questions. Connections are re-opened with a bounded
backoff."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from webui.events import Event

if TYPE_CHECKING:
    import psycopg

    from webui.events import EventHub

log = logging.getLogger(__name__)

CHANNEL = "steamharness_events"
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more.
MAX_PAYLOAD_BYTES = 7900
# What a trimmed event keeps: the ids subscribers use to decide what to re-read.
TRIM_KEEP = ("runId", "interactionId", "projectId", "conversationId", "status", "id", "event", "reason")
TRIM_VALUE_CHARS = 200
OUTBOX_SIZE = 10_000
BACKOFF_FIRST_SECONDS = 0.1
BACKOFF_MAX_SECONDS = 5.0
FIRST_CONNECT_SECONDS = 10.0
RESYNC_KIND = "resync"


def conninfo(url: str) -> str:
    """A SQLAlchemy URL (`postgresql+psycopg://…`) as a libpq connection string for psycopg."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def is_postgres(url: str) -> bool:
    return make_url(url).get_backend_name() == "postgresql"


def encode(origin: str, event: Event) -> str:
    """The NOTIFY payload: the whole event, or, past the size limit, its ids only."""
    body: dict[str, Any] = {"o": origin, "t": event.topic, "k": event.kind, "d": event.data}
    text = _dumps(body)
    if len(text.encode()) <= MAX_PAYLOAD_BYTES:
        return text
    kept: dict[str, Any] = {
        k: v
        for k, v in event.data.items()
        if k in TRIM_KEEP
        and (isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= TRIM_VALUE_CHARS))
    }
    body["d"] = {**kept, "trimmed": True}
    text = _dumps(body)
    if len(text.encode()) <= MAX_PAYLOAD_BYTES:
        return text
    body["d"] = {"trimmed": True}
    return _dumps(body)


def decode(payload: str) -> tuple[str, Event] | None:
    """(origin, event), or None for a payload that is not ours."""
    try:
        body = json.loads(payload)
        origin, topic, kind, data = body["o"], body["t"], body["k"], body.get("d") or {}
    except (ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(v, str) for v in (origin, topic, kind)) or not isinstance(data, dict):
        return None
    return origin, Event(topic, kind, data)


def _dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, default=str)


class PgRelay:
    """The relay of one process (see the module docstring)."""

    def __init__(self, url: str, *, origin: str | None = None) -> None:
        self.conninfo = conninfo(url)
        self.origin = origin or secrets.token_hex(8)
        self.dropped = 0  # events that could not be queued for sending
        self.listener_pid: int | None = None  # the listening connection's server process
        self.sender_pid: int | None = None
        self._hub: EventHub | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox: asyncio.Queue[Event] = asyncio.Queue(OUTBOX_SIZE)
        self._listening = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, hub: EventHub) -> None:
        self._hub = hub
        self._loop = asyncio.get_running_loop()
        self._tasks = [
            asyncio.create_task(self._listen(), name="pg-relay-listen"),
            asyncio.create_task(self._send_loop(), name="pg-relay-send"),
        ]
        # Listening before the server serves anything, so no remote event falls before it.
        try:
            await asyncio.wait_for(self._listening.wait(), FIRST_CONNECT_SECONDS)
        except TimeoutError:
            log.warning("event relay: not listening yet; retrying in the background")

    def send(self, event: Event) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._enqueue(event)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody sends any more
                loop.call_soon_threadsafe(self._enqueue, event)

    def _enqueue(self, event: Event) -> None:
        try:
            self._outbox.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("event relay: %d events dropped (sending is behind)", self.dropped)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        import psycopg

        return await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)

    async def _listen(self) -> None:
        delay = BACKOFF_FIRST_SECONDS
        connected_before = False
        while True:
            try:
                async with await self._connect() as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.listener_pid = conn.info.backend_pid
                    self._listening.set()
                    if connected_before and self._hub is not None:
                        self._hub.resync()  # events may have passed while we were away
                    connected_before = True
                    delay = BACKOFF_FIRST_SECONDS
                    async for note in conn.notifies():
                        self._receive(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("event relay: listening connection lost (%s); reconnecting", exc)
            self.listener_pid = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_SECONDS)

    def _receive(self, payload: str) -> None:
        decoded = decode(payload)
        if decoded is None or self._hub is None:
            return
        origin, event = decoded
        if origin == self.origin:
            return
        if event.topic == "" and event.kind == RESYNC_KIND:
            self._hub.resync()
        else:
            self._hub.deliver_remote(event)

    async def _send_loop(self) -> None:
        delay = BACKOFF_FIRST_SECONDS
        pending: Event | None = None
        lost = False
        while True:
            try:
                async with await self._connect() as conn:
                    self.sender_pid = conn.info.backend_pid
                    if lost:
                        # Some of our events may not have reached the others: they re-read.
                        await self._notify(conn, Event("", RESYNC_KIND))
                        lost = False
                    delay = BACKOFF_FIRST_SECONDS
                    while True:
                        if pending is None:
                            pending = await self._outbox.get()
                        await self._notify(conn, pending)
                        pending = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("event relay: sending connection lost (%s); reconnecting", exc)
                lost = True
            self.sender_pid = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_SECONDS)

    async def _notify(self, conn: psycopg.AsyncConnection[Any], event: Event) -> None:
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, encode(self.origin, event)))

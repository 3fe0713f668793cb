"""What a page's open event streams share in one serve process: work done once per event,
and a cap on how many streams one account holds.

- `SharedWork`: every subscriber of the event hub receives the same `Event` object; the
  first stream to need a result for (that event, a key) computes it off the event loop,
  the others wait for it and reuse it. So a new question read and rendered for N open tabs
  costs one database read and one render per kind of viewer, not N. The last
  `KEPT_EVENTS` events' results are kept: a stream further behind computes its own.
- `StreamSlots`: at most `limit` open streams per account; `take` refuses the next one
  (`TooManyStreams`, 429) and a slot is given back when its stream ends, however it ends.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from webui.blocking import run_db
from webui.errors import SteamharnessError
from webui.events import Event
from webui.slots import CountedSlots

T = TypeVar("T")
KEPT_EVENTS = 512  # results of this many (event, key) pairs; above the hub's queue size


class TooManyStreams(SteamharnessError):
    """An account already holds as many live streams of a page as it may."""

    code = "too_many_streams"
    status = 429


@dataclass
class _Result:
    event: Event  # held, so its id() is not reused while the result is kept
    done: anyio.Event = field(default_factory=anyio.Event)
    ok: bool = False
    value: Any = None


class SharedWork:
    """Results computed once per (event, key) for every stream of the process. Lives on
    the event loop (the streams' awaits); the work itself runs in `run_db` threads."""

    def __init__(self, kept: int = KEPT_EVENTS) -> None:
        self._kept = kept
        self._results: OrderedDict[tuple[int, str], _Result] = OrderedDict()

    async def get(self, event: Event, key: str, work: Callable[[], T]) -> T:
        slot = (id(event), key)
        result = self._results.get(slot)
        if result is not None and result.event is event:
            await result.done.wait()
            if result.ok:
                return result.value
            return await run_db(work)  # the first one failed or was cancelled: do it here
        result = _Result(event)
        self._results[slot] = result
        while len(self._results) > self._kept:
            self._results.popitem(last=False)
        try:
            result.value = await run_db(work)
            result.ok = True
            return result.value
        finally:
            result.done.set()


class StreamSlots(CountedSlots[int]):
    """Open streams per account, capped at `limit` (thread-safe: routes run in threads)."""

    def __init__(self, limit: int, *, what: str = "inbox streams", close: str = "the Inbox") -> None:
        super().__init__(limit, self._refusal)
        self.what = what  # named in the refusal, with the page whose tabs hold them
        self.close = close

    def _refusal(self, count: int) -> Exception:
        return TooManyStreams(
            f"this account already has {count} live {self.what} open (the limit is"
            f" {self.limit}); close a tab or window showing {self.close} and reload this one"
        )


class HeldStream(StreamingResponse):
    """A streamed response that gives back what it holds (a read slot, a download's place and
    its open file) when it ends, however it ends (sent in full, the client gone, the server
    shutting down): `release` is called once then."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None], **kw: Any) -> None:
        super().__init__(content, **kw)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()

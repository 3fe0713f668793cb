"""What one serve process lets each account spend on the knowledge base at once: its heavy
reads (searches and exports) and its calls to the embeddings endpoint (a paid API).

- `ReadSlots`: at most `limit` searches and exports of one account at a time; the next is
  refused at once with `too_many_reads` (429, `Retry-After`), nothing held.
- `EmbeddingsGate`: requests to the endpoint per minute, server-wide and per account (token
  buckets refilled continuously, a minute's worth at most). A call is let in while both of
  its buckets hold a token, and pays for every request it makes (a large document may leave
  them in debt: the next call waits for the refill); otherwise it is refused at once with
  `embeddings_throttled` (429, `Retry-After`: when a token is back). At most `concurrent`
  requests are in flight server-wide; a call waits for one up to the endpoint's own timeout,
  then is refused the same way.

Accounts are named by their audit actor (`user:<name>`, `admin`): an account's keys, its
browser session and the runs it started share one allowance."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Final

import anyio

from webui.errors import SteamharnessError

MAX_TRACKED: Final = 10_000  # accounts' buckets kept; full ones are dropped first


class TooManyReads(SteamharnessError):
    """An account already runs as many knowledge-base searches and exports as it may."""

    code = "too_many_reads"
    status = 429
    retry_after = 1


class EmbeddingsThrottled(SteamharnessError):
    """The embeddings endpoint's allowance (server-wide or the account's) is used up for now."""

    code = "embeddings_throttled"
    status = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def details(self) -> dict[str, object]:
        return {"retryAfter": self.retry_after}


class ReadSlots:
    """Heavy reads per account, capped at `limit` (thread-safe)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def held(self, account: str) -> int:
        with self._lock:
            return self._held.get(account, 0)

    def take(self, account: str) -> Callable[[], None]:
        """One of the account's slots, or `TooManyReads`; returns its release (idempotent)."""
        with self._lock:
            count = self._held.get(account, 0)
            if count >= self.limit:
                raise TooManyReads(
                    f"this account already runs {count} knowledge-base searches or exports (the limit is"
                    f" {self.limit}); try again when one has finished"
                )
            self._held[account] = count + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                left = self._held.get(account, 1) - 1
                if left > 0:
                    self._held[account] = left
                else:
                    self._held.pop(account, None)

        return release

    @contextlib.contextmanager
    def holding(self, account: str) -> Iterator[None]:
        release = self.take(account)
        try:
            yield
        finally:
            release()


class _Bucket:
    """`per_minute` tokens a minute, at most a minute's worth held; may go below zero."""

    def __init__(self, per_minute: int, now: float) -> None:
        self.per_minute = per_minute
        self.tokens = float(per_minute)
        self.at = now

    def refill(self, now: float) -> float:
        rate = self.per_minute / 60.0
        self.tokens = min(float(self.per_minute), self.tokens + (now - self.at) * rate)
        self.at = now
        return self.tokens

    def wait(self) -> int:
        """Seconds until it holds a whole token again."""
        return max(1, math.ceil((1.0 - self.tokens) * 60.0 / self.per_minute))


class EmbeddingsGate:
    """The embeddings endpoint's allowance (0: no limit of that kind)."""

    def __init__(
        self,
        *,
        per_minute: int = 0,
        per_account_per_minute: int = 0,
        concurrent: int = 8,
        wait_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.per_account_per_minute = per_account_per_minute
        self.concurrent = concurrent
        self.wait_seconds = wait_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._server = _Bucket(per_minute, clock()) if per_minute else None
        self._accounts: dict[str, _Bucket] = {}
        self._in_flight: anyio.Semaphore | None = None

    def admit(self, account: str, requests: int) -> None:
        """Charge `requests` to the server's and the account's buckets, or refuse (nothing charged)."""
        now = self._clock()
        with self._lock:
            buckets: list[tuple[_Bucket, str]] = []
            if self._server is not None:
                buckets.append((self._server, "the server's"))
            if self.per_account_per_minute:
                bucket = self._accounts.get(account)
                if bucket is None:
                    self._forget_full(now)
                    bucket = self._accounts[account] = _Bucket(self.per_account_per_minute, now)
                buckets.append((bucket, "this account's"))
            for bucket, whose in buckets:
                if bucket.refill(now) < 1.0:
                    wait = bucket.wait()
                    raise EmbeddingsThrottled(
                        f"{whose} requests to the embeddings endpoint are used up for now"
                        f" ({bucket.per_minute} a minute); try again in {wait} seconds",
                        retry_after=wait,
                    )
            for bucket, _ in buckets:
                bucket.tokens -= requests

    def _forget_full(self, now: float) -> None:
        if len(self._accounts) < MAX_TRACKED:
            return
        for name, bucket in list(self._accounts.items()):
            if bucket.refill(now) >= bucket.per_minute:
                del self._accounts[name]
        if len(self._accounts) >= MAX_TRACKED:  # all in use: the oldest goes
            del self._accounts[next(iter(self._accounts))]

    @contextlib.asynccontextmanager
    async def in_flight(self) -> AsyncIterator[None]:
        """One of the server's concurrent requests, waited for at most `wait_seconds`."""
        if self._in_flight is None:
            self._in_flight = anyio.Semaphore(self.concurrent)
        try:
            with anyio.fail_after(self.wait_seconds):
                await self._in_flight.acquire()
        except TimeoutError:
            raise EmbeddingsThrottled(
                f"the embeddings endpoint already has {self.concurrent} requests of this server in"
                " flight; try again in a moment",
                retry_after=5,
            ) from None
        try:
            yield
        finally:
            self._in_flight.release()

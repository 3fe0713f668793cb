"""What one serve process lets each account spend on the knowledge base at once: its heavy
reads (searches and exports) and its calls to the embeddings endpoint (a paid API).

- `ReadSlots`: at most `limit` searches and exports of one account at a time; the next is
  refused at once with `too_many_reads` (429, `Retry-After`), nothing held.
- `EmbeddingsGate`: requests to the endpoint per minute, server-wide and per account (token
  buckets refilled continuously, a minute's worth at most). A call is let in while both of
  its buckets hold a token, and pays for every request it makes (a large document may leave
  them in debt: the next call waits for the refill); otherwise it is refused at once with
  `embeddings_throttled` (429, `Retry-After`: when a token is back). At most `concurrent`
  requests are in flight server-wide, a quarter of them (at least one) per account; a call
  waits for one up to the endpoint's own timeout, then is refused the same way.
- Room is kept for accounts that hold none (as for waiting runs): the last quarter of the
  server's requests a minute goes only to accounts that sent none within the last minute,
  the last quarter of its requests in flight only to accounts with none in flight, one each.
  So a few accounts at their own limits never shut every other account out.

Accounts are named by their audit actor (`user:<name>`, `admin`): an account's keys, its
browser session and the runs it started share one allowance."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

import anyio

from webui.errors import SteamharnessError
from webui.slots import CountedSlots

MAX_TRACKED: Final = 10_000  # accounts' buckets kept; full ones are dropped first
RESERVE_SHARE: Final = 4  # the last quarter of the server's allowance: for accounts holding none


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


class ReadSlots(CountedSlots[str]):
    """Heavy reads per account, capped at `limit` (thread-safe)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit, self._refusal)

    def _refusal(self, count: int) -> Exception:
        return TooManyReads(
            f"this account already runs {count} knowledge-base searches or exports (the limit is"
            f" {self.limit}); try again when one has finished"
        )


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

    @property
    def full(self) -> bool:
        return self.tokens >= self.per_minute

    def wait(self, level: float = 1.0) -> int:
        """Seconds until it holds `level` tokens again."""
        return max(1, math.ceil((level - self.tokens) * 60.0 / self.per_minute))


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
        self.reserved = concurrent // RESERVE_SHARE  # in flight, for accounts with none
        self.per_account_in_flight = max(1, concurrent // RESERVE_SHARE)
        self.wait_seconds = wait_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._server = _Bucket(per_minute, clock()) if per_minute else None
        self._accounts: dict[str, _Bucket] = {}
        self._flying: dict[str, int] = {}  # on the event loop only
        self._changed: anyio.Event | None = None

    def admit(self, account: str, requests: int) -> None:
        """Charge `requests` to the account's and the server's buckets, or refuse (nothing
        charged). The last quarter of the server's is kept for accounts that sent none
        within the last minute (their own bucket full)."""
        now = self._clock()
        with self._lock:
            mine = None
            if self.per_account_per_minute:
                mine = self._accounts.get(account)
                if mine is None:
                    self._forget_full(now)
                    mine = self._accounts[account] = _Bucket(self.per_account_per_minute, now)
                if mine.refill(now) < 1.0:
                    raise _throttled("this account's", mine.per_minute, mine.wait())
            server = self._server
            if server is not None:
                floor = 1.0
                if mine is not None and not mine.full:
                    floor += server.per_minute / RESERVE_SHARE
                if server.refill(now) < floor:
                    kept = (
                        ", the last quarter kept for accounts that sent none within it" if floor > 1 else ""
                    )
                    raise _throttled("the server's", server.per_minute, server.wait(floor), kept)
                server.tokens -= requests
            if mine is not None:
                mine.tokens -= requests

    def _forget_full(self, now: float) -> None:
        if len(self._accounts) < MAX_TRACKED:
            return
        for name, bucket in list(self._accounts.items()):
            if bucket.refill(now) >= bucket.per_minute:
                del self._accounts[name]
        if len(self._accounts) >= MAX_TRACKED:  # all in use: the oldest goes
            del self._accounts[next(iter(self._accounts))]

    def _may_fly(self, account: str) -> bool:
        """Whether the account may have one more request in flight now: at most its share,
        and the last `reserved` of the server's only for an account with none."""
        total = sum(self._flying.values())
        mine = self._flying.get(account, 0)
        if mine >= self.per_account_in_flight:
            return False
        return total < self.concurrent - self.reserved or (mine == 0 and total < self.concurrent)

    @contextlib.asynccontextmanager
    async def in_flight(self, account: str) -> AsyncIterator[None]:
        """One of the server's requests in flight for the account, waited for at most
        `wait_seconds`."""
        try:
            with anyio.fail_after(self.wait_seconds):
                while not self._may_fly(account):
                    if self._changed is None:
                        self._changed = anyio.Event()
                    await self._changed.wait()
        except TimeoutError:
            raise EmbeddingsThrottled(
                "the embeddings endpoint already has as many requests of this server (or of this"
                " account) in flight as it may; try again in a moment",
                retry_after=5,
            ) from None
        self._flying[account] = self._flying.get(account, 0) + 1
        try:
            yield
        finally:
            left = self._flying[account] - 1
            if left:
                self._flying[account] = left
            else:
                del self._flying[account]
            changed, self._changed = self._changed, None
            if changed is not None:
                changed.set()


def _throttled(whose: str, per_minute: int, wait: int, kept: str = "") -> EmbeddingsThrottled:
    return EmbeddingsThrottled(
        f"{whose} requests to the embeddings endpoint are used up for now ({per_minute} a minute{kept});"
        f" try again in {wait} seconds",
        retry_after=wait,
    )

"""Failed-authentication throttles, in memory.

Only failures count: a client that authenticates is never slowed. A key (an account name
or a client address) with `limit` failures inside the last `window` seconds is throttled
until the oldest of them leaves the window. Memory is bounded: at most `max_keys` keys,
the least recently failed forgotten first, and `limit` timestamps per key. Per-process:
several replicas throttle independently, each one still bounding what a client can try.

What a throttle refuses differs by credential:
  - API keys (Bearer) are unguessable, so a throttle on them only slows guessing at
    nothing: a throttled address still has each key checked; a valid key works, a bad
    one is refused with 429 instead of 401 (and, refused so, not counted again: the
    Retry-After it announces stays true). A stranger sending bad keys from a shared
    address (a NAT, a proxy) cannot lock out the valid keys used there.
  - Passwords are guessable, so a throttled login is refused (429) before the password
    is even hashed, the right password included: letting a right password through would
    make each throttled attempt a guess whose success shows. The account's owner waits
    until the failures age out (`auth_failure_window_seconds`); a successful login clears
    its account's failures, never its address's.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from webui.observability.metrics import METRICS
from webui.settings import Settings

Clock = Callable[[], float]


class FailureCounter:
    def __init__(self, *, limit: int, window: float, max_keys: int, clock: Clock = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self.max_keys = max_keys
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, key: str) -> int | None:
        """Whole seconds until `key` may try again, or None when it may try now."""
        times = self._failures.get(key)
        if times is None or len(times) < self.limit:
            return None
        left = self.window - (self._clock() - times[0])
        return max(1, math.ceil(left)) if left > 0 else None

    def failed(self, key: str) -> None:
        times = self._failures.pop(key, None)
        if times is None:
            times = deque(maxlen=self.limit)
        times.append(self._clock())
        self._failures[key] = times  # most recently failed last
        while len(self._failures) > self.max_keys:
            self._failures.popitem(last=False)

    def clear(self, key: str) -> None:
        self._failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._failures)


@dataclass
class AuthThrottle:
    """Logins per account and per client address; Bearer failures per client address."""

    login_account: FailureCounter
    login_address: FailureCounter
    bearer_address: FailureCounter
    # A refused attempt is answered only after this long (at most its Retry-After): a client
    # looping on refusals then costs the server a timer, not a stream of responses.
    hold_seconds: float = 0.0

    @classmethod
    def from_settings(cls, settings: Settings, clock: Clock = time.monotonic) -> AuthThrottle:
        def counter(limit: int) -> FailureCounter:
            return FailureCounter(
                limit=limit,
                window=settings.auth_failure_window_seconds,
                max_keys=settings.throttle_max_tracked,
                clock=clock,
            )

        return cls(
            login_account=counter(settings.login_failures_per_account),
            login_address=counter(settings.login_failures_per_address),
            bearer_address=counter(settings.bearer_failures_per_address),
            hold_seconds=settings.throttle_hold_seconds,
        )

    async def hold(self, wait: int) -> None:
        await anyio.sleep(min(self.hold_seconds, wait))

    def login_retry_after(self, account: str, address: str) -> int | None:
        waits = [
            w
            for w in (
                self.login_account.retry_after(_account(account)),
                self.login_address.retry_after(address),
            )
            if w is not None
        ]
        if not waits:
            return None
        METRICS.throttled.labels("login").inc()
        return max(waits)

    def login_failed(self, account: str, address: str) -> None:
        METRICS.auth_failures.labels("login").inc()
        self.login_account.failed(_account(account))
        self.login_address.failed(address)

    def login_succeeded(self, account: str) -> None:
        # The address keeps its count: one known password must not wash out guesses at others.
        self.login_account.clear(_account(account))

    def bearer_retry_after(self, address: str) -> int | None:
        """The Retry-After of an address throttled for failed Bearer credentials, else None."""
        return self.bearer_address.retry_after(address)

    def bearer_failed(self, address: str) -> int | None:
        """Records a failed Bearer credential from `address`. Returns the Retry-After to refuse
        it with (429) when the address is already throttled, a failure then not counted; else
        None (refuse it with 401)."""
        wait = self.bearer_address.retry_after(address)
        if wait is None:
            METRICS.auth_failures.labels("bearer").inc()
            self.bearer_address.failed(address)
        else:
            METRICS.throttled.labels("bearer").inc()
        return wait


def _account(name: str) -> str:
    # Case variants of one name count as one account (stricter, never looser).
    return name.strip().casefold()[:128]

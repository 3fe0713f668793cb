"""The one bounded wait of the tests: `eventually(check)` (and `eventually_async` on an event loop).

A test waits for what it asserts, never for time to pass: `check` is called until it returns
something other than None or False (its value is returned), within `timeout` (WAIT by default:
a bound, not a speed check, tests/helpers.py). On the bound the test fails with `what` and the
last value `check` returned, so a stuck wait says what it waited for."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from tests.helpers import WAIT

T = TypeVar("T")

# Between two checks: short, so that a wait ends soon after its condition holds; a check is
# cheap (a read of the store, of /proc, of an HTTP answer) next to a test's own work.
INTERVAL = 0.02


def _done(value: object) -> bool:
    return value is not None and value is not False


def _failure(what: str, timeout: float, last: object) -> AssertionError:
    return AssertionError(f"not within {timeout:g} s: {what or 'the condition'} (last seen: {last!r})")


def eventually(
    check: Callable[[], T | None],
    what: str = "",
    *,
    timeout: float = WAIT,
    interval: float = INTERVAL,
) -> T:
    """`check()`'s first value that is neither None nor False, polled every `interval`
    seconds for at most `timeout` seconds; an AssertionError naming `what` after that."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        last = check()
        if _done(last):
            return last  # type: ignore[return-value]  # neither None nor False: a T
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        time.sleep(interval)  # between two checks of the condition, bounded by the deadline


async def eventually_async(
    check: Callable[[], T | None] | Callable[[], Awaitable[T | None]],
    what: str = "",
    *,
    timeout: float = WAIT,
    interval: float = INTERVAL,
) -> T:
    """`eventually` on an event loop: `check` may be a plain function or a coroutine
    function; the loop runs other tasks between two checks."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        last = check()
        if inspect.isawaitable(last):
            with anyio.fail_after(max(deadline - time.monotonic(), 0.001)):
                last = await last
        if _done(last):
            return last  # type: ignore[return-value]  # neither None nor False: a T
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        await anyio.sleep(interval)

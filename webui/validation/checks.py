"""Values checked: within the bounds, within the deadline, never on the event loop, and
the checks' own threads (`run_check`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
from jsonschema.exceptions import ValidationError

from webui.loop_local import loop_local
from webui.validation.limits import (
    CHECK_SECONDS,
    CHECK_THREADS,
    CHECK_THREADS_PER_ACCOUNT,
    MAX_DIGITS,
    MAX_ERRORS,
    MAX_INSTANCE_CHARS,
    MAX_INSTANCE_DEPTH,
    MAX_INSTANCE_NODES,
    MAX_MESSAGE,
    CheckRefused,
    PastDeadline,
    SchemaUnusable,
    state,
)
from webui.validation.schemas import validator

P = ParamSpec("P")
T = TypeVar("T")


def _check_instance(instance: Any) -> None:
    """CheckRefused unless `instance` is within the bounds: its containers walked for depth
    and count (scalars are not visited one by one), its size measured as JSON."""
    count = 0
    stack: list[tuple[Any, int]] = [(instance, 0)] if isinstance(instance, dict | list) else []
    while stack:
        value, depth = stack.pop()
        if depth >= MAX_INSTANCE_DEPTH:
            raise CheckRefused(f"too deep to check: nested more than {MAX_INSTANCE_DEPTH} levels")
        count += len(value)
        if count > MAX_INSTANCE_NODES:
            raise CheckRefused(f"too large to check: more than {MAX_INSTANCE_NODES} values")
        children = value.values() if type(value) is dict else value
        stack.extend([(child, depth + 1) for child in children if type(child) in (dict, list)])
    try:
        size = len(json.dumps(instance, ensure_ascii=False))
    except ValueError:  # an integer past Python's limit of digits (NaN is allowed here: JSON has none)
        raise CheckRefused(f"a number of more than {MAX_DIGITS} digits") from None
    if size > MAX_INSTANCE_CHARS:
        raise CheckRefused(f"too large to check: more than {MAX_INSTANCE_CHARS} characters of JSON")


def _not_on_the_loop() -> None:
    if state.in_check:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # a thread (run_check's, or a synchronous caller's), or no loop at all
    raise RuntimeError("a JSON Schema check on the event loop: await run_check(...) instead")


def problems(
    schema: dict[str, Any] | bool, instance: Any, *, limit: int = MAX_ERRORS, seconds: float = CHECK_SECONDS
) -> list[ValidationError]:
    """The problems of `instance` under `schema` (at most `limit`), found within `seconds`
    (a check inside another keeps the outer one's deadline).

    SchemaUnusable when the schema cannot be used here; CheckRefused when the value is too
    large or deep to check, or the check ran out of time. Never on the event loop."""
    _not_on_the_loop()
    checker = validator(schema)
    _check_instance(instance)
    outer = state.deadline
    state.deadline = time.monotonic() + seconds if outer is None else outer
    try:
        return list(itertools.islice(checker.iter_errors(instance), limit))
    except PastDeadline:
        raise CheckRefused(f"could not be checked within {seconds:g} s") from None
    except RecursionError:
        raise CheckRefused("nested too deeply to check against this schema") from None
    finally:
        state.deadline = outer


def field_errors(schema: dict[str, Any], values: dict[str, Any]) -> dict[str, str]:
    """The first problem of each top-level field of `values`, by field name; problems of
    the object as a whole under "". Empty when the values fit, or when `schema` cannot be
    used here (then the schema's owner judges the values itself); a value too large or slow
    to check is a problem of the whole."""
    try:
        errors = problems(schema, values)
    except SchemaUnusable:
        return {}
    except CheckRefused as exc:
        return {"": f"not checked: {exc}"}
    out: dict[str, str] = {}
    for err in errors:
        path = list(err.absolute_path)
        out.setdefault(str(path[0]) if path else "", clipped(err.message))
    return out


def clipped(message: str) -> str:
    """A problem's message at most `MAX_MESSAGE` characters (jsonschema's quote the value)."""
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def describe(errors: Iterable[ValidationError]) -> list[str]:
    """`where: message` per problem (where: the dotted path into the value, clipped like the
    message), sorted by where."""
    parts: list[str] = []
    for err in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        where = clipped(".".join(str(p) for p in err.absolute_path))
        parts.append(f"{where}: {clipped(err.message)}" if where else clipped(err.message))
    return parts


# --------------------------------------------------------------------------- off the loop


class _Checks:
    """The checks' threads of one event loop: `CHECK_THREADS` in all, at most
    `CHECK_THREADS_PER_ACCOUNT` of them an account's, so accounts holding none always find one."""

    def __init__(self) -> None:
        self.threads = anyio.CapacityLimiter(CHECK_THREADS)
        # account -> (its limiter, checks using it): dropped when none is, so bounded by the
        # checks in flight or waiting.
        self.accounts: dict[Hashable, tuple[anyio.CapacityLimiter, int]] = {}

    @contextlib.asynccontextmanager
    async def share(self, account: Hashable) -> AsyncIterator[None]:
        limiter, users = self.accounts.get(account) or (anyio.CapacityLimiter(CHECK_THREADS_PER_ACCOUNT), 0)
        self.accounts[account] = (limiter, users + 1)
        try:
            async with limiter:
                yield
        finally:
            limiter, users = self.accounts[account]
            if users <= 1:
                del self.accounts[account]
            else:
                self.accounts[account] = (limiter, users - 1)


_checks: RunVar[_Checks] = RunVar("steamharness_checks")


def _checks_of_loop() -> _Checks:
    return loop_local(_checks, _Checks)


async def run_check(account: Hashable, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` — a JSON Schema check, or work around one — for `account` (whose
    values or whose schema it checks; None: no account, one share for all such checks) in a
    thread of the checks' own pool: never on the loop, never holding one of the database's
    threads. `CHECK_THREADS` per event loop, at most `CHECK_THREADS_PER_ACCOUNT` an account's
    (its other checks wait their turn). Each check inside is bounded by `CHECK_SECONDS`."""

    def work() -> T:
        state.in_check = True
        try:
            return fn(*args, **kwargs)
        finally:
            state.in_check = False

    checks = _checks_of_loop()
    async with checks.share(account):
        return await anyio.to_thread.run_sync(work, limiter=checks.threads)

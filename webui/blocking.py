"""Blocking work — database calls, password hashing, file hashing and copying, config
reads — runs in worker threads, never on the event loop.

`run_db(fn, ...)` and `run_hash(fn, ...)` run a function in a thread under a bounded
limiter (one per event loop): database work shares a pool sized to the engine's
connection pool; password hashing gets few threads so a flood of logins cannot take
every core. A unit of work that records audit or hub events publishes them only after it
returned, i.e. after its transaction committed (`after_commit`).

A database that stays locked past the driver's busy timeout surfaces as `DatabaseBusy`
(HTTP 503 with `Retry-After`), so writers fail in bounded time instead of freezing; a full
disk or database surfaces as `StorageFull` (HTTP 507). Both are `StoreUnavailable`: what
could not be written now may be written later (webui.runs.outcomes keeps run outcomes).
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session as OrmSession

from webui.errors import StorageFull, StoreUnavailable
from webui.loop_local import loop_local

P = ParamSpec("P")
T = TypeVar("T")

DB_THREADS = 12
HASH_THREADS = max(1, (os.cpu_count() or 2) // 2)
RETRY_AFTER_SECONDS = 2

_db_limiter: RunVar[anyio.CapacityLimiter] = RunVar("steamharness_db_limiter")
_hash_limiter: RunVar[anyio.CapacityLimiter] = RunVar("steamharness_hash_limiter")
_local = threading.local()


# ENOSPC: no space left on the device; EDQUOT: the owner's disk quota is used up.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# PostgreSQL class 53 "insufficient resources": disk_full.
PG_DISK_FULL = "53100"


class DatabaseBusy(StoreUnavailable):
    """The database stayed locked past its busy timeout: try again shortly."""

    code = "database_busy"
    status = 503
    retry_after = RETRY_AFTER_SECONDS


def is_busy_error(exc: BaseException) -> bool:
    if not isinstance(exc, OperationalError):
        return False
    orig = exc.orig
    # PostgreSQL: lock_not_available, query_canceled (lock or statement timeout)
    if getattr(orig, "sqlstate", None) in {"55P03", "57014"}:
        return True
    text = str(orig).lower()
    return "database is locked" in text or "database is busy" in text or "database table is locked" in text


def is_storage_full(exc: BaseException) -> bool:
    """A write refused because the disk or the database's storage is full."""
    if isinstance(exc, OSError):
        return exc.errno in FULL_ERRNOS
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == PG_DISK_FULL:
        return True
    if isinstance(orig, OSError) and orig.errno in FULL_ERRNOS:
        return True
    # SQLite: SQLITE_FULL, whether the disk or PRAGMA max_page_count ran out.
    return "database or disk is full" in str(orig).lower()


def unavailable(exc: BaseException) -> StoreUnavailable | None:
    """The `StoreUnavailable` error `exc` amounts to (busy, full), or None when it is
    something else; the one place these driver and OS errors are told apart."""
    if isinstance(exc, StoreUnavailable):
        return exc
    if is_storage_full(exc):
        return StorageFull()
    if is_busy_error(exc):
        return DatabaseBusy("the database is busy; try again in a moment")
    return None


def in_worker_thread() -> bool:
    """Whether this code runs in a thread `run_db` or `run_hash` started (holding one of
    their few threads, often a database connection): no place for a network call."""
    return getattr(_local, "pending", None) is not None


def _limiter(var: RunVar[anyio.CapacityLimiter], size: int) -> anyio.CapacityLimiter:
    return loop_local(var, lambda: anyio.CapacityLimiter(size))


def after_commit(callback: Callable[[], None], session: object | None = None) -> None:
    """Run `callback` once the current unit of work has committed.

    In a thread started by `run_db`/`run_hash`: after the function returned, on the loop.
    On the event loop itself (synchronous code): on the loop's next turn, which comes
    after the synchronous caller finished its transaction. In another thread (a sync
    route in the framework's pool) with an ORM session: when that session commits.
    Elsewhere (a CLI with no loop): at once — nobody is listening live."""
    pending: list[Callable[[], None]] | None = getattr(_local, "pending", None)
    if pending is not None:
        pending.append(callback)
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        if isinstance(session, OrmSession):
            event.listen(session, "after_commit", lambda _s: callback(), once=True)
        else:
            callback()
        return
    loop.call_soon(callback)


async def _run(limiter: anyio.CapacityLimiter, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    def work() -> tuple[T, list[Callable[[], None]]]:
        _local.pending = pending = []
        try:
            return fn(*args, **kwargs), pending
        except (DBAPIError, OSError) as exc:
            mapped = unavailable(exc)
            if mapped is not None:
                raise mapped from exc
            raise
        finally:
            _local.pending = None

    result, pending = await anyio.to_thread.run_sync(work, limiter=limiter)
    for callback in pending:
        callback()
    return result


async def run_db(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Database (and other short file) work in a thread."""
    return await _run(_limiter(_db_limiter, DB_THREADS), fn, *args, **kwargs)


async def run_hash(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """CPU-heavy hashing (passwords) in a thread from a small pool."""
    return await _run(_limiter(_hash_limiter, HASH_THREADS), fn, *args, **kwargs)


class TaskSet:
    """Background tasks the server started, kept referenced until they end (the event
    loop only keeps weak references to tasks) and cancelled together at shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

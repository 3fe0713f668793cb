"""Parsing what a client sent, off the event loop: `run_parse(size, fn, ...)`.

`fn` parses (and checks) `size` bytes a client sent: a route's JSON body, an MCP POST's
JSON-RPC envelope, the lines of a knowledge import. A text of at most `INLINE_BYTES` is
parsed in place (a few milliseconds at worst, less than a thread hop's bookkeeping); a
longer one in a thread of a small pool of its own (`PARSE_THREADS`), never a database
thread, so a large body holds neither the event loop nor a database connection while it is
parsed. The parser's C code still holds the GIL while it builds values, so a thread alone
frees nothing: what one call may cost is bounded where the text comes from, by the body caps
(`webui.edge.guard`) and the strict reader's limits (`webui.strict_json`: length, depth,
arrays and objects, values, a number's length), which keep one document's hold of the GIL
to tens of milliseconds of values; a knowledge import is split and parsed a line at a time.
Past `PARSE_THREADS` large bodies at once, the next ones wait their turn here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from webui.loop_local import loop_local

P = ParamSpec("P")
T = TypeVar("T")

INLINE_BYTES = 64 * 1024
PARSE_THREADS = 2

_limiter: RunVar[anyio.CapacityLimiter] = RunVar("steamharness_parse_limiter")


def _parse_limiter() -> anyio.CapacityLimiter:
    return loop_local(_limiter, lambda: anyio.CapacityLimiter(PARSE_THREADS))


async def run_parse(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`, a parser of `size` bytes from a client: in place when small,
    else in one of the parse threads."""
    if size <= INLINE_BYTES:
        return fn(*args, **kwargs)
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=_parse_limiter())

"""One value per event loop, made at its first use there: the thread pools' limiters
(`webui.blocking`, `webui.parse_threads`) and the JSON Schema checks' shares
(`webui.validation.checks`). An anyio `RunVar` holds it, so each loop (a test's, a
process's) gets its own and none outlives its loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from anyio.lowlevel import RunVar

T = TypeVar("T")


def loop_local(var: RunVar[T], make: Callable[[], T]) -> T:
    """The value `var` holds in the running event loop, made by `make` and kept there the
    first time it is asked for."""
    try:
        return var.get()
    except LookupError:
        value = make()
        var.set(value)
        return value

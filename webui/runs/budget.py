"""A run's time limit: it counts only while the run runs (a person thinking, or a child run
working, is not its handler running), and the run ends `timeout` once it is spent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from webui.runs.live import LiveRun
from webui.runs.request import RunRequest
from webui.runs.types import DEFAULT_TIMEOUT_SECONDS


def time_limit(request: RunRequest) -> float:
    """A run's whole time limit (seconds)."""
    return request.entrypoint.timeout_seconds or DEFAULT_TIMEOUT_SECONDS


def timeout_error(live: LiveRun) -> dict[str, str]:
    limit = time_limit(live.request)
    return {"code": "timeout", "message": f"The run exceeded its time limit of {limit:g} s."}


class RunClock:
    """Starts and stops each run's time limit (`LiveRun.budget`); `on_timeout(live)` is
    called when one is spent."""

    def __init__(self, on_timeout: Callable[[LiveRun], None]) -> None:
        self._on_timeout = on_timeout

    def start(self, live: LiveRun) -> None:
        budget = live.budget
        if budget.timer is not None:
            return  # already counting: one timer per run, stopped as often as started
        loop = asyncio.get_running_loop()
        budget.started = loop.time()
        budget.timer = loop.call_later(max(budget.remaining, 0.0), self._spent, live)

    def stop(self, live: LiveRun) -> None:
        budget = live.budget
        if budget.timer is not None:
            budget.timer.cancel()
            budget.timer = None
            budget.remaining -= asyncio.get_running_loop().time() - budget.started

    def _spent(self, live: LiveRun) -> None:
        live.budget.timer = None
        self._on_timeout(live)

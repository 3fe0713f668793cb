"""RunHandle: what starting a run gives its caller (a transport, a parent run): the run's
id, its updates, and the means to cancel it."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from webui.runs.live import LiveRun
from webui.runs.types import RunUpdate


class _Runs(Protocol):
    def watch(self, run_id: str) -> AbstractAsyncContextManager[asyncio.Queue[RunUpdate]]: ...

    async def cancel(self, run_id: str, *, reason: str = ...) -> None: ...

    def is_live(self, run_id: str) -> bool: ...


@dataclass(frozen=True)
class RunHandle:
    run_id: str
    runs: _Runs

    def updates(self) -> AbstractAsyncContextManager[asyncio.Queue[RunUpdate]]:
        """The run's updates, starting with where it stands now (`async with`)."""
        return self.runs.watch(self.run_id)

    async def cancel(self, reason: str = "The run was cancelled.") -> None:
        await self.runs.cancel(self.run_id, reason=reason)

    @property
    def live(self) -> bool:
        """Driven by this process and not ended yet."""
        return self.runs.is_live(self.run_id)


# The call that started a run (`LiveRun.call`), changed here only.
def became_task(live: LiveRun) -> None:
    """The run's call became an MCP task (the metrics count the tasks followed)."""
    live.call.as_task = True

"""RunHandle: what starting a run gives its caller (a transport, a parent run): the run's
id, its updates, and the means to cancel it or to stop following it."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from webui.runs.live import LiveRun
from webui.runs.types import RunUpdate


class _Runs(Protocol):
    def watch(
        self, run_id: str, *, started: LiveRun | None = ...
    ) -> AbstractAsyncContextManager[asyncio.Queue[RunUpdate]]: ...

    async def cancel(self, run_id: str, *, reason: str = ...) -> None: ...

    def call_ended(self, run_id: str) -> None: ...

    def is_live(self, run_id: str) -> bool: ...


@dataclass(frozen=True)
class RunHandle:
    run_id: str
    runs: _Runs
    # The run as `start` made it (None: a handle by id): a final update read after the run
    # ended still says whether the call's end was written with the outcome.
    started: LiveRun | None = field(default=None, compare=False, repr=False)

    def updates(self) -> AbstractAsyncContextManager[asyncio.Queue[RunUpdate]]:
        """The run's updates, starting with where it stands now (`async with`)."""
        return self.runs.watch(self.run_id, started=self.started)

    async def cancel(self, reason: str = "The run was cancelled.") -> None:
        await self.runs.cancel(self.run_id, reason=reason)

    def call_ended(self) -> None:
        """The call that started the run no longer follows it (RunRequest.finished_audit)."""
        self.runs.call_ended(self.run_id)

    @property
    def live(self) -> bool:
        """Driven by this process and not ended yet."""
        return self.runs.is_live(self.run_id)


# The call following a run (`LiveRun.call`), changed here only.
def call_following(live: LiveRun) -> None:
    """The run is started by a call that follows it to its end (RunRequest.finished_audit)."""
    live.call.following = live.request.finished_audit is not None


def call_left(live: LiveRun) -> None:
    """The call that started the run no longer follows it: its end is not written with the
    run's outcome."""
    live.call.following = False


def became_task(live: LiveRun) -> None:
    """The run's call became an MCP task (the metrics count the tasks followed)."""
    live.call.as_task = True


def audited_with_outcome(live: LiveRun) -> bool:
    """At the run's end: whether the call's end is written with its outcome (the call still
    follows it); what its final update says (`call_audited`)."""
    live.call.audited = live.call.following and live.request.finished_audit is not None
    return live.call.audited

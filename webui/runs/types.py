"""The values the run service takes and gives: limits, refusals, updates, where a live run
stands, and the defaults of its limits (webui.settings reads them)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from webui.errors import SteamharnessError
from webui.store.models import Interaction
from webui.store.statuses import RunStatus

__all__ = ["LiveState", "LogLine", "RunLimits", "RunRefused", "RunStatus", "RunUpdate", "new_run_id"]

DEFAULT_TIMEOUT_SECONDS = 3600.0
EXIT_WAIT_SECONDS = 10.0
# Writes a run makes for its worker (created files, questions) are retried while the
# database is locked by someone else, each attempt bounded by the driver's busy timeout.
# Its own records (status, timeline, outcome) are never given up: webui.runs.outcomes.
WRITE_ATTEMPTS = 5
# At shutdown: how long the run records the database has not taken yet may still be
# written before they go to the data dir's file of pending records.
DEFAULT_RECORDS_DRAIN_SECONDS = 5.0
# How long such a write waits for the run's own records kept before it (as long as the
# attempts above could take with the default busy timeout).
KEPT_WAIT_SECONDS = 25.0
# Several replicas on one database: how often a waiting run re-reads its question (in
# case the event of an answer given on another replica was missed), a queued run re-tries
# its admission, and a run followed from another replica is re-read.
SHARED_POLL_SECONDS = 5.0
# Defaults of the waiting caps and of a question's expiry (webui.settings).
DEFAULT_MAX_WAITING_RUNS = 32
DEFAULT_MAX_WAITING_PER_ACCOUNT = 8
DEFAULT_QUESTION_TIMEOUT_SECONDS = 24 * 3600.0


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(6)}"


class RunRefused(SteamharnessError):
    """Preflight said no: no run is created. `code` is the stable error code of the result."""

    status = 429

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RunLimits:
    """The project's run gate and queue limits, read fresh before every start."""

    gate_open: bool = True
    max_running: int | None = None
    max_queued: int | None = None


@dataclass(frozen=True)
class LogLine:
    """One log line as the run's watchers get it (`RunUpdate.line`, kind `log`): its text
    (the run's configuration secrets redacted, cut to worker_loop.WATCHED_LINE_LIMIT), its
    RFC 5424 `level` (a stdout line's is `info`), its `stream` (`log`: a `ctx.log` line, or
    `stdout`), how many of its characters were `cut` before it was handed on, and how many
    lines after it (a flood in one message) were only counted (`more`)."""

    text: str
    level: str = "info"
    stream: str = "log"
    cut: int = 0
    more: int = 0


@dataclass
class RunUpdate:
    """What a watcher receives: `progress`, `waiting` (with the interaction), `running`,
    `log` (a `ctx.log` or stdout line, its `line`), `final`."""

    kind: str
    run_id: str
    status: str
    interaction: Interaction | None = None
    progress: dict[str, Any] | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    # `final`: the files the run created (webui.files.store.output_view), oldest first.
    files: list[dict[str, Any]] = field(default_factory=list)
    # `log`: the line and what it says of itself.
    line: LogLine | None = None


@dataclass(frozen=True)
class LiveState:
    """Where a live run stands now: its status, the question it waits on (its own, or one a
    child run it waits for asked), and the child runs it waits for."""

    status: RunStatus
    waiting_on: Interaction | None
    children: tuple[str, ...]

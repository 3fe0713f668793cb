"""What a log line is about, carried by context variables: the run a task drives (set by
the run service for the task that drives it, so every line that task logs names it). The
JSON log format (`STEAMHARNESS_LOG_FORMAT=json`) adds it, the MCP session of the request
and the current trace to each line."""

from __future__ import annotations

import contextvars

current_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "steamharness_log_run_id", default=None
)

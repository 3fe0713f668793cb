"""The server's log lines as JSON. (Credentials kept out of every log line, the access log's
included: `webui.edge.access_log`, whose filter sits before this format.)

`STEAMHARNESS_LOG_FORMAT=json` (`install_format`): one JSON object per line, with the time,
level, logger and event (the redacted message), the exception if any, and what the line is
about: the run (the task driving it), the MCP session (shortened like above) and the
current trace and span.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from webui.edge.access_log import LOGGERS, short_session_ids
from webui.mcp.binding import current_binding
from webui.observability.log_context import current_run_id
from webui.terminal_text import install_terminal_safe


class JsonFormatter(logging.Formatter):
    """One JSON object per record (after the redaction filter, which already redacted the
    message, its arguments and the formatted exception)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        run_id = current_run_id.get()
        if run_id is not None:
            line["run_id"] = run_id
        binding = current_binding.get(None)
        if binding is not None and binding.session_id:
            line["session_id"] = short_session_ids(binding.session_id)
        span = trace.get_current_span()
        context = span.get_span_context()
        if span.is_recording() and context.is_valid:  # not a client's context merely carried
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        # ASCII only: U+2028, U+2029 and U+0085 would split the line for some readers.
        return json.dumps(line, ensure_ascii=True, default=str)


def install_format(log_format: str) -> None:
    """`json`: every handler the server's loggers write through formats records as
    `JsonFormatter` does (JSON escapes every control character); `text` leaves the format
    as it is and makes each record terminal-safe (`webui.terminal_text.TerminalSafeRecords`:
    a file name, a path or an error's text may hold escape sequences)."""
    handlers = {h for name in LOGGERS for h in logging.getLogger(name).handlers}
    if log_format != "json":
        install_terminal_safe(handlers)
        return
    for handler in handlers:
        handler.setFormatter(JsonFormatter())

"""Keep credentials out of the server's own logs, whoever logs them and however they got
into the text: anything shaped like one of our keys (`shk_`, `she_`, `shw_`), the
configured admin key, the secret configuration values runs of this process started with
(`webui.configs.redaction.LOG_SECRETS`, also JSON-escaped and URL-encoded), and the value
of credential-named query parameters are redacted;
MCP session ids (32 hex digits) are shortened to their first 8, enough to correlate
lines without handing out a usable id.

`STEAMHARNESS_LOG_FORMAT=json` (`install_format`): one JSON object per line, with the time,
level, logger and event (the redacted message), the exception if any, and what the line is
about: the run (the task driving it), the MCP session (shortened like above) and the
current trace and span.

The filter sits on the handlers (the root's and uvicorn's), so it sees records from
every logger that reaches them; tracebacks are formatted and redacted too.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from opentelemetry import trace

from webui.configs.redaction import LOG_SECRETS
from webui.mcp.binding import current_binding
from webui.mcp.http import QUERY_CREDENTIALS
from webui.observability.log_context import current_run_id
from webui.terminal_text import install_terminal_safe

REDACTED = "[redacted]"
# No word boundary: a key may follow an escaped character (`%3Dshk_…`).
_KEY_SHAPED = re.compile(r"(sh[kew]_)[A-Za-z0-9_\-]{8,}")
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:" + "|".join(re.escape(k) for k in sorted(QUERY_CREDENTIALS)) + r")=)[^&\s\"]*"
)
_SESSION_ID = re.compile(r"\b([0-9a-f]{8})[0-9a-f]{24}\b")
LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access")


class Redactor:
    def __init__(self, secrets: list[str]) -> None:
        literal = {s for raw in secrets if raw for s in (raw, quote(raw, safe=""))}
        self._secrets = (
            re.compile("|".join(re.escape(s) for s in sorted(literal, key=len, reverse=True)))
            if literal
            else None
        )

    def __call__(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub(REDACTED, text)
        text = LOG_SECRETS.redaction().text(text)
        text = _KEY_SHAPED.sub(rf"\1{REDACTED}", text)
        text = _QUERY_SECRET.sub(rf"\1{REDACTED}", text)
        return _SESSION_ID.sub(r"\1…", text)


class RedactCredentials(logging.Filter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_steamharness_redacted", False):
            return True  # already seen by another handler's filter
        # Message and arguments are redacted apart: formatters such as uvicorn's access
        # formatter unpack the arguments themselves.
        record.msg = self.redact(record.msg) if isinstance(record.msg, str) else self._arg(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._arg(a) for a in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {k: self._arg(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        record._steamharness_redacted = True
        return True

    def _arg(self, value: Any) -> Any:
        if value is None or isinstance(value, int | float):
            return value
        text = value if isinstance(value, str) else str(value)
        redacted = self.redact(text)
        return value if redacted == text else redacted


def install_redaction(*, admin_key: str | None) -> None:
    """Filter every handler the server's loggers write through (call once logging is
    configured); a later call replaces the filter, so the newest admin key counts."""
    handlers = {h for name in LOGGERS for h in logging.getLogger(name).handlers}
    for handler in handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactCredentials)]:
            handler.removeFilter(old)
        handler.addFilter(RedactCredentials(Redactor([admin_key] if admin_key else [])))


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
            line["session_id"] = _SESSION_ID.sub(r"\1…", binding.session_id)
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

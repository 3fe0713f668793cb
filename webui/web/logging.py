"""Keep credentials out of the server's own logs: a key pasted into a query string is
refused (401), and the access log line for that request shows it redacted."""

from __future__ import annotations

import logging
import re

from webui.mcp.http import QUERY_CREDENTIALS

_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:" + "|".join(re.escape(k) for k in sorted(QUERY_CREDENTIALS)) + r")=)[^&\s\"]*"
)


def redact(text: str) -> str:
    return _QUERY_SECRET.sub(r"\1[redacted]", text)


class RedactCredentials(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install_redaction() -> None:
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactCredentials) for f in logger.filters):
            logger.addFilter(RedactCredentials())

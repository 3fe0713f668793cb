"""Keep credentials out of the server's own logs (the access log first among them), whoever
logs them and however they got into the text: anything shaped like one of our keys (`shk_`,
`she_`, `shw_`), the configured admin key, the secret configuration values runs of this
process started with (`webui.configs.redaction.LOG_SECRETS`, also JSON-escaped and
URL-encoded), and the value of credential-named query parameters (`QUERY_CREDENTIALS`,
which the MCP endpoint refuses outright) are redacted; MCP session ids (32 hex digits) are
shortened to their first 8, enough to correlate lines without handing out a usable id
(`short_session_ids`).

The filter sits on the handlers (the root's and uvicorn's), so it sees records from
every logger that reaches them; tracebacks are formatted and redacted too. (The JSON line
format: `webui.web.logging`.)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from webui.configs.redaction import LOG_SECRETS

# Query parameters that carry a credential: redacted from logs, refused by the MCP endpoint.
QUERY_CREDENTIALS = frozenset(
    {"key", "api_key", "apikey", "token", "access_token", "authorization", "bearer"}
)
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
        return short_session_ids(text)


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


def short_session_ids(text: str) -> str:
    """Every MCP session id in `text` cut to its first 8 digits."""
    return _SESSION_ID.sub(r"\1…", text)

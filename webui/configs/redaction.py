"""Secret configuration values kept out of what others see of a run, and out of logs.

A run records the configuration it started with, its secret values sealed
(`Run.config_values`); opening them gives the exact strings a handler may have echoed into
its output, error or log lines (`return ctx.config`, a URL with a token). A `Redaction`
replaces every occurrence of each, also in the forms text takes when it passes through JSON
(escaped) or a URL (percent-encoded), with `[redacted]`. Values shorter than `MIN_LENGTH`
are left alone: hiding every "a" or "42" would garble ordinary text and hide nothing secret.

Who sees what (the callers decide, these are the rules they apply):
- the run's own account sees its output, error and timeline as they are;
- everyone else (project members, administrators too: an administrator who needs a secret
  exports the account's configurations explicitly, which is audited) sees them redacted;
- log lines (the run's report on its page, the server's own log) are redacted always.

`LOG_SECRETS` is this process's memory of the secret values runs started with, for the
server's log filter (`webui/web/logging.py`); bounded, oldest forgotten first.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, quote_plus

from webui.configs.secrets import PREFIX, SecretBox

REDACTED: Final = "[redacted]"
MIN_LENGTH: Final = 4
LOG_SECRETS_MAX: Final = 4096


def forms(secret: str) -> set[str]:
    """The ways `secret` may appear in text: as is, JSON-escaped (ASCII-only or not), and
    percent-encoded (path, query and form styles)."""
    found = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
        quote_plus(secret, safe="/"),
    }
    # JSON inside JSON (an error message quoting a JSON document): escaped twice.
    found.add(json.dumps(json.dumps(secret)[1:-1])[1:-1])
    # A multi-line secret (a PEM key) printed is met a line at a time where text is read or
    # sent line by line (stdout lines on an MCP call), or cut between two chunks of output:
    # each of its lines is a secret of its own.
    if "\n" in secret or "\r" in secret:
        for line in secret.splitlines():
            if len(line := line.strip()) >= MIN_LENGTH:
                found |= forms(line)
    return {f for f in found if f}


class Redaction:
    """Replaces the given secret values (in each of their `forms`) in text and JSON values."""

    def __init__(self, secrets: Iterable[str]) -> None:
        literal = {f for s in secrets if isinstance(s, str) and len(s) >= MIN_LENGTH for f in forms(s)}
        self.secrets = frozenset(literal)
        self._pattern = (
            re.compile("|".join(re.escape(s) for s in sorted(literal, key=len, reverse=True)))
            if literal
            else None
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text) if self._pattern is not None else text

    def head(self, text: str, limit: int) -> str:
        """The first `limit` characters of `text` once redacted. Only as much of `text` is
        read as a secret starting within them can reach: a long text costs no more than
        its head."""
        reach = limit + max((len(s) for s in self.secrets), default=0)
        return self.text(text[:reach])[:limit]

    def value(self, value: Any) -> Any:
        """A JSON value with every string (keys included) redacted; other values unchanged."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


NO_REDACTION: Final = Redaction(())


def sealed_secrets(
    box: SecretBox, *, project_id: str, owners: Sequence[int], values: Mapping[str, Any] | None
) -> list[str]:
    """The secret values of a run's recorded configuration, in clear. A value is a secret
    when it is sealed; it is bound to its scope, one of `owners` (scope owner ids)."""
    found: list[str] = []
    for key, stored in (values or {}).items():
        if not isinstance(stored, str) or not stored.startswith(PREFIX):
            continue
        for owner in owners:
            try:
                found.append(box.open(stored, binding=f"{project_id}/{owner}/{key}"))
                break
            except ValueError:
                continue
    return found


class SecretMemory:
    """Secret values seen in this process, newest kept; thread-safe (runs start on worker
    threads, log records come from any thread)."""

    def __init__(self, limit: int = LOG_SECRETS_MAX) -> None:
        self._limit = limit
        self._values: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._redaction = NO_REDACTION

    def remember(self, values: Iterable[str]) -> None:
        with self._lock:
            changed = False
            for value in values:
                if not isinstance(value, str) or len(value) < MIN_LENGTH:
                    continue
                if value in self._values:
                    self._values.move_to_end(value)
                    continue
                self._values[value] = None
                changed = True
                while len(self._values) > self._limit:
                    self._values.popitem(last=False)
            if changed:
                self._redaction = Redaction(self._values)

    def redaction(self) -> Redaction:
        return self._redaction

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._redaction = NO_REDACTION


LOG_SECRETS: Final = SecretMemory()

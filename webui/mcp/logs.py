"""A run's log lines on the tools/call that follows it, as `notifications/message`.

Who asked for them, by era:
- 2025-11-25 (a session): `logging/setLevel` sets the session's level, kept with the SDK's
  connection (its per-connection `state`, gone with the session). Lines at or above it are
  sent on the call's stream; a session that never set a level gets none.
- 2026-07-28: no session and no `logging/setLevel` (the SDK answers -32601). A request opts
  in with `_meta["io.modelcontextprotocol/logLevel"]`; absent, nothing is sent (the SDK's
  `allowed_log_levels`, which its `send_log_message` applies too).

What is sent: `ctx.log` lines at the level the handler gave (logger: the tool's id) and the
handler's stdout, line by line, at `info` (logger `stdout`); the worker loop makes the lines
(webui.runs.worker_loop `WatchedLines`, webui.runs.types `LogLine`), the run's configuration secrets redacted
as on every page that shows log lines. stderr (tracebacks, paths) stays in the run's
timeline only (SPEC R-RUN-4). Each line is cut to `MESSAGE_LIMIT` characters and its control
characters (but newline and tab) replaced; a call sends at most `MAX_MESSAGES_PER_CALL`
lines, stdout and `ctx.log` together, then one last message saying how many more were not
sent (the run's timeline keeps them all).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final, get_args

import mcp_types as types
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from webui.runs.messages import LOG_LEVELS
from webui.runs.types import LogLine
from webui.runs.worker_loop import WATCHED_LINE_LIMIT, WATCHED_LINES_PER_MESSAGE

log = logging.getLogger(__name__)

LEVELS: Final[tuple[types.LoggingLevel, ...]] = get_args(types.LoggingLevel)  # severity ascending
# The level of a line that names none (stdout, a note about the lines left out).
RUN_LOG_LEVEL: Final[types.LoggingLevel] = "info"
# The logger a stdout line is sent as (a `ctx.log` line's is the tool's id).
STDOUT_LOGGER: Final = "stdout"
MAX_MESSAGES_PER_CALL: Final = 100
MESSAGE_LIMIT: Final = 4096
# What `ctx.log` takes is what MCP sends; the worker loop hands on enough of each line and
# enough lines of each message for these caps (so a line it only counted is one this cap
# would have held back anyway).
assert LOG_LEVELS == LEVELS, "webui.runs.messages.LOG_LEVELS must be MCP's LoggingLevel"
assert MESSAGE_LIMIT <= WATCHED_LINE_LIMIT and MAX_MESSAGES_PER_CALL <= WATCHED_LINES_PER_MESSAGE
_STATE_KEY: Final = "steamharness.log_level"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _connection_state(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    """The SDK connection's per-connection scratch state (a 2025 session, or stdio): the one
    read of the SDK's private `ServerSession._connection` (no public accessor in 2.3.0)."""
    connection = getattr(ctx.session, "_connection", None)
    state = getattr(connection, "state", None)
    return state if isinstance(state, dict) else None


async def set_level(
    ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
) -> types.EmptyResult:
    """`logging/setLevel` (handshake eras only; the SDK refuses it at 2026-07-28). An unknown
    level never gets here: the SDK's params validation answers -32602."""
    state = _connection_state(ctx)
    if state is not None:
        state[_STATE_KEY] = params.level
    return types.EmptyResult()


def session_level(ctx: ServerRequestContext[Any, Any]) -> types.LoggingLevel | None:
    state = _connection_state(ctx)
    level = state.get(_STATE_KEY) if state is not None else None
    return level if level in LEVELS else None


def wanted_levels(ctx: ServerRequestContext[Any, Any]) -> frozenset[types.LoggingLevel]:
    """The levels this request may be sent."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return allowed_log_levels(ctx.protocol_version, ctx.meta)
    level = session_level(ctx)
    return frozenset(LEVELS[LEVELS.index(level) :]) if level is not None else frozenset()


def clean(text: str, cut: int = 0) -> str:
    """A line as sent: control characters replaced, cut to MESSAGE_LIMIT characters (`cut`:
    characters of it left out before it got here)."""
    text = str(text)
    more = max(len(text) - MESSAGE_LIMIT, 0) + cut
    if more:
        text = f"{text[:MESSAGE_LIMIT]}… ({more} characters more in the run's timeline)"
    return _CONTROL.sub("\ufffd", text)


class CallLogs:
    """The log lines of one tools/call: filtered by what its client asked for, capped."""

    def __init__(
        self, ctx: ServerRequestContext[Any, Any], *, logger: str, limit: int = MAX_MESSAGES_PER_CALL
    ) -> None:
        self.ctx = ctx
        self.logger = logger
        self.limit = limit
        self.levels = wanted_levels(ctx)
        self.sent = 0
        self.unsent = 0

    async def line(self, line: LogLine | None) -> None:
        """One line of the run, at its own level and under its stream's logger; the worker
        loop already says how much of it (and how many lines after it) it left out."""
        if line is None or not line.text:
            return
        level = _level(line.level)
        if level not in self.levels:
            return
        self.unsent += line.more
        if self.sent >= self.limit:
            self.unsent += 1
            return
        self.sent += 1
        logger = STDOUT_LOGGER if line.stream == "stdout" else self.logger
        await self._send(level, clean(line.text, line.cut), logger)

    async def close(self) -> None:
        """Before the call's result: say how many lines the cap kept back (once), at info or,
        if the client asked only for more severe lines, at the least severe it asked for."""
        if self.unsent:
            unsent, self.unsent = self.unsent, 0
            note = (
                f"{unsent} more log lines not sent (at most {self.limit} per call);"
                " the run's timeline has them all."
            )
            level = RUN_LOG_LEVEL if RUN_LOG_LEVEL in self.levels else min(self.levels, key=LEVELS.index)
            await self._send(level, note, self.logger)

    async def _send(self, level: types.LoggingLevel, data: str, logger: str) -> None:
        # What `ServerSession.send_log_message` sends, without its deprecation warning (the
        # capability is deprecated at 2026-07-28; the per-request opt-in it checks is
        # `self.levels`). On this request's stream; a client gone is not an error here.
        message = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level=level, data=data, logger=logger)
        )
        try:
            await self.ctx.session.send_notification(message, related_request_id=self.ctx.request_id)
        except Exception:
            log.debug("log notification not delivered", exc_info=True)


_LEVEL_NAMED: Final[dict[str, types.LoggingLevel]] = {level: level for level in LEVELS}


def _level(value: str) -> types.LoggingLevel:
    return _LEVEL_NAMED.get(value, RUN_LOG_LEVEL)

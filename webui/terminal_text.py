"""Text for a terminal: `terminal_safe(text)` shows every character a terminal would act on
as an escape. Anything stored, or from a project, a run or a remote server, goes through it
before it is written to a terminal or to the server's stderr and stdout logs (the CLI's
output, `steamharness mcp`'s run lines on stderr; in the text log format, every log record:
`TerminalSafeRecords`). `webui.cli.common` re-exports it with the CLI's other output helpers."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Final


class TerminalText(str):
    """Text that may be written to a terminal as it is: what `terminal_safe`, `json_text` and
    `highlighted` return (stored text escaped, with only this program's own markup)."""

    __slots__ = ()


# What a terminal would act on instead of showing: the C0 controls but the line break and the
# tab (ESC starts every escape sequence: clear the screen, set the window title, OSC 52 writes
# the clipboard; CR overwrites the line), DEL, the C1 controls (0x9b is CSI on its own) and
# the bidirectional overrides and isolates (they reorder what follows them on the line).
CONTROLS: Final = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]
BIDI: Final = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_SHOWN: Final = {c: f"\\x{c:02x}" for c in CONTROLS} | {c: f"\\u{c:04x}" for c in BIDI}


def terminal_safe(text: str) -> TerminalText:
    """`text` (stored, or from a project, a run or a remote server: anything but this program's
    own words) as a terminal shows it, with every character it would act on shown as an escape
    (`\\x1b`, `\\x9b`, `\\u202e`); line breaks and tabs stay."""
    return text if isinstance(text, TerminalText) else TerminalText(text.translate(_SHOWN))


class TerminalSafeRecords(logging.Filter):
    """On a handler writing text lines to a terminal (the server's stderr in the text log
    format): a record's message, its arguments (one by one: formatters such as uvicorn's
    access formatter unpack them) and its traceback are made terminal-safe; numbers stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = terminal_safe(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_safe_arg(a) for a in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {k: _safe_arg(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = terminal_safe(record.exc_text)
        return True


def _safe_arg(value: object) -> object:
    if value is None or isinstance(value, int | float):
        return value
    text = value if isinstance(value, str) else str(value)
    safe = terminal_safe(text)
    return value if safe == text else safe


def install_terminal_safe(handlers: Iterable[logging.Handler]) -> None:
    """`TerminalSafeRecords` on each of `handlers` (once)."""
    for handler in handlers:
        if not any(isinstance(f, TerminalSafeRecords) for f in handler.filters):
            handler.addFilter(TerminalSafeRecords())

"""The server's text log lines are terminal-safe (webui.terminal_text.TerminalSafeRecords): a
file name, a request path or an error's text holding escape sequences is written with them
shown as escapes, the format's own words and numbers as they are."""

from __future__ import annotations

import io
import logging

from webui.terminal_text import install_terminal_safe

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"


def test_a_text_log_line_shows_the_escapes_of_what_it_quotes() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    install_terminal_safe([handler])
    install_terminal_safe([handler])  # once is enough
    assert len(handler.filters) == 1
    log = logging.getLogger("tests.terminal_text")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("reading %s failed: %d %s", HOSTILE, 7, ValueError(HOSTILE))
        log.warning({"path": HOSTILE})
        log.warning("path %(path)s", {"path": HOSTILE})
        try:
            raise RuntimeError(HOSTILE)
        except RuntimeError:
            log.exception("failed " + HOSTILE)
    finally:
        log.removeHandler(handler)
    text = out.getvalue()
    assert not any(c in text for c in "\x1b\x07\x9b\u202e"), repr(text)
    assert "WARNING reading \\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e failed: 7 \\x1b" in text
    assert "RuntimeError: \\x1b]0;pwned" in text and text.count("\n") >= 5

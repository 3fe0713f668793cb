"""`steamharness mcp` (stdio) wrote each run's log and output lines to its stderr as they are
(issue 36's attack pass, defect 8): a handler's `ctx.log` of a client's argument put escape
sequences on the terminal. The lines are terminal-safe now."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests import processes
from tests.conftest import EXAMPLES
from tests.helpers import WAIT, needs_root


@needs_root
def test_the_stdio_server_writes_a_runs_log_to_stderr_terminal_safe(tmp_path: Path) -> None:
    command, args = processes.stdio_command(
        ["mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d")]
    )
    proc = processes.Popen(
        [command, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "STEAMHARNESS_WORKER_USER": ""},
    )
    assert proc.stdin is not None and proc.stdout is not None
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31m"  # window title, clear screen, C1 CSI
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "escapes", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "greet", "arguments": {"name": hostile}}},
    ]  # fmt: skip
    try:
        for message in messages:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        replies = []
        while not any(r.get("id") == 2 for r in replies):
            line = proc.stdout.readline()  # bounded: the call ends within its entrypoint's timeout
            assert line, "the server stopped before answering the call"
            replies.append(json.loads(line))
        _, err = proc.communicate(timeout=WAIT)  # closes stdin: the server ends
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT)
    logged = err.decode("utf-8", "replace")
    assert "greeting" in logged  # the run's ctx.log line is on stderr
    assert "\x1b" not in logged and "\x9b" not in logged and "\x07" not in logged, repr(logged[-500:])

"""`steamharness mcp` with STEAMHARNESS_LOG_FORMAT=json: what it logs on stderr is one JSON
object per line (stdout stays JSON-RPC only). As root with an empty worker user it warns
that workflow code runs as root: that warning, as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests import processes
from tests.conftest import EXAMPLES
from tests.helpers import WAIT, needs_root

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "json-logs", "version": "1"},
    },
}


@needs_root
def test_the_stdio_servers_log_lines_are_json(tmp_path: Path) -> None:
    command, args = processes.stdio_command(
        ["mcp", str(EXAMPLES / "hello"), "--data-dir", str(tmp_path / "d")]
    )
    done = processes.run(
        [command, *args],
        input=(json.dumps(INITIALIZE) + "\n").encode(),
        capture_output=True,
        timeout=WAIT,
        env={**os.environ, "STEAMHARNESS_LOG_FORMAT": "json", "STEAMHARNESS_WORKER_USER": ""},
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    replies = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    assert replies and replies[0]["id"] == 1 and "result" in replies[0]
    logged = [json.loads(line) for line in done.stderr.decode().splitlines() if line.strip()]
    warning = [d for d in logged if "runs as root" in d["event"]]
    assert warning and warning[0]["level"] == "warning" and {"time", "logger"} <= warning[0].keys(), logged

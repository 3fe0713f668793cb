"""Attack pass (tasks, logging, worker frames) against a real `steamharness serve`: hostile
workflow code writing raw frames to its run socket, and a configuration secret printed in
a form the per-line redaction of MCP log lines does not see.

Each hole it found is fixed; its test now checks the fix."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import MODERN, POLL, TASKS, Rpc, _run_id
from tests.helpers import WAIT, process_gone
from tests.security.handler_project import entry, serving, until
from tests.security.workers_project import RUN_SOCKET_SOURCE

PROJECT = "7a1d9c4e-3b2f-4e8a-9c61-0d5e4f3a2b1c"
SECRET_LINES = ["-----BEGIN KEY-----", "c2VjcmV0LWxpbmUtb25l", "c2VjcmV0LWxpbmUtdHdv", "-----END KEY-----"]
SECRET = "\n".join(SECRET_LINES)

HANDLERS = (
    r"""
import json
import os
import time


"""
    + RUN_SOCKET_SOURCE
    + r"""

def rpc_no_id(ctx):
    # An rpc frame without its id: the server's worker loop reads msg["id"] outside its try.
    ctx.progress(0, None, str(os.getpid()))
    os.write(_run_socket(), b'{"type":"rpc","op":"kv.get","args":{}}\n')
    deadline = time.time() + 300
    while time.time() < deadline:  # would keep computing, out of any slot or time limit
        time.sleep(0.05)
    return "never"


def raw_progress(ctx):
    # A progress frame written directly: ctx.progress would cut its message to 4,096.
    frame = {"type": "progress", "done": 1, "total": 2, "message": "p" * int(ctx.params["size"])}
    os.write(_run_socket(), json.dumps(frame).encode() + b"\n")
    time.sleep(120)
    return "slept"


def print_secret(ctx):
    print("key follows")
    print(ctx.config["token"])
    ctx.log(ctx.config["token"], "warning")
    return "printed"
"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with serving(
        tmp_path_factory.mktemp("attack-pass-frames"),
        project_id=PROJECT,
        name="attack-pass-frames",
        handlers=HANDLERS,
        entrypoints=[
            entry("rpc_no_id", task="optional", timeout_seconds=30),
            entry(
                "raw_progress",
                [{"name": "size", "type": "number", "required": True}],
                task="optional",
                timeout_seconds=30,
            ),
            entry("print_secret", task="never", timeout_seconds=30),
        ],
    ) as live:
        yield live


def _worker_pid(server: LiveServer, run_id: str) -> int:
    def read() -> int | None:
        rows = server.query(
            "SELECT data FROM run_events WHERE run_id = :r AND kind = 'progress' ORDER BY id", r=run_id
        )
        for row in rows:
            data = row["data"] if isinstance(row["data"], dict) else json.loads(row["data"] or "{}")
            if str(data.get("message") or "").isdigit():
                return int(data["message"])
        return None

    return until(read, "the worker never reported its pid")


def test_an_rpc_frame_without_an_id_does_not_leave_the_worker_running(server: LiveServer) -> None:
    key = server.create_key("frames-owner")
    rpc = Rpc(server, key, project=PROJECT)
    created = rpc.result(rpc.call("rpc_no_id"))
    assert created["resultType"] == "task", created
    task_id = created["taskId"]
    pid = _worker_pid(server, _run_id(task_id))
    try:
        ended = rpc.until(task_id, "failed", "completed", "cancelled")
        # The run is over for everyone: a cancel is only acknowledged.
        assert "result" in rpc.task("tasks/cancel", task_id)
        # Bounded: the server's own kill grace and exit wait are far below this.
        deadline = time.monotonic() + 15
        while not process_gone(pid) and time.monotonic() < deadline:
            time.sleep(POLL)
        assert process_gone(pid), f"worker {pid} still runs after its task ended: {ended}"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def test_a_raw_progress_frame_cannot_make_every_poll_carry_a_huge_status_message(
    server: LiveServer,
) -> None:
    key = server.create_key("frames-progress")
    rpc = Rpc(server, key, project=PROJECT)
    created = rpc.result(rpc.call("raw_progress", {"size": 2_000_000}))
    assert created["resultType"] == "task", created
    task_id = created["taskId"]
    try:

        def polled() -> dict[str, Any] | None:
            got = rpc.result(rpc.task("tasks/get", task_id))
            return got if got.get("statusMessage") else None

        got = until(polled, "the task never showed the progress message")
        assert len(got["statusMessage"]) <= 4096 + 100, len(got["statusMessage"])
    finally:
        rpc.task("tasks/cancel", task_id)


def _set_secret(server: LiveServer, key: str, value: str) -> None:
    base = f"/api/workflows/{PROJECT}/configs"
    with httpx2.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
    ) as api:
        etag = api.get(f"{base}/default").headers["etag"]
        saved = api.patch(f"{base}/default", headers={"If-Match": etag}, json={"values": {"token": value}})
        assert saved.status_code == 200, saved.text


def _call_with_logs(server: LiveServer, key: str, tool: str) -> list[dict[str, Any]]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        "io.modelcontextprotocol/logLevel": "debug",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": meta},
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    r = httpx2.post(server.mcp_url(PROJECT, "draft"), json=body, headers=headers, timeout=WAIT)
    assert r.status_code == 200, r.text
    if r.headers.get("content-type", "").startswith("application/json"):
        return [r.json()]
    return [
        json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


def test_a_multi_line_secret_logged_with_ctx_log_is_redacted(server: LiveServer) -> None:
    """Held: a ctx.log line is redacted whole."""
    key = server.create_key("frames-secret-log", scopes=["runs.create", "runs.read", "configs"])
    _set_secret(server, key, SECRET)
    messages = _call_with_logs(server, key, "print_secret")
    logged = [m["params"]["data"] for m in messages if m.get("method") == "notifications/message"]
    warning = [m["params"]["data"] for m in messages if m.get("params", {}).get("level") == "warning"]
    assert warning == ["[redacted]"], logged


def test_a_multi_line_secret_printed_to_stdout_never_reaches_the_client(server: LiveServer) -> None:
    key = server.create_key("frames-secret-out", scopes=["runs.create", "runs.read", "configs"])
    _set_secret(server, key, SECRET)
    messages = _call_with_logs(server, key, "print_secret")
    stdout = [m["params"]["data"] for m in messages if m.get("params", {}).get("logger") == "stdout"]
    assert stdout, messages
    leaked = [line for line in SECRET_LINES[1:3] if any(line in text for text in stdout)]
    assert leaked == [], stdout

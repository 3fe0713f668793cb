"""The server's logs (STEAMHARNESS_LOG_FORMAT=json) under hostile MCP clients: a 2025
client answering the server's elicitation/create with a JSON-RPC error is no server failure
(no ERROR, no traceback quoting its text; the question stays open for the browser); every
JSON line survives a reader that splits on U+2028; a client's traceparent header does not
name log lines when tracing is off.

Every wait is bounded by WAIT."""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.e2e.server import LiveServer, running_server
from tests.helpers import WAIT

PROJECT = str(uuid.uuid4())
MARK = "obs-attack-" + uuid.uuid4().hex
TRACE_ID = secrets.token_hex(16)
TRACEPARENT = f"00-{TRACE_ID}-{secrets.token_hex(8)}-01"
FORGED = json.dumps(
    {"time": "2026-01-01T00:00:00.000+00:00", "level": "critical", "logger": "webui.auth", "event": "forged"}
)

HANDLERS = """
def asks(ctx):
    return ctx.ask("Your name", [{"name": "name", "type": "string", "required": True}])
"""


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    manifest = {
        "id": PROJECT,
        "name": "obs-attack-logs",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": "asks", "title": "Asks", "handler": "h.py:asks", "task": "never", "params": []}
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("obs-attack-logs")
    # A live server: what is checked is serve's own log, in its JSON format.
    with running_server(base, STEAMHARNESS_LOG_FORMAT="json") as live:
        live.add_project(_project(base / "p"), PROJECT)
        yield live


@pytest.fixture(scope="module")
def refused(server: LiveServer) -> Any:
    """One call whose elicitation the client refuses with a JSON-RPC error."""
    key = server.create_key("obs-attack-logs")

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ErrorData:
        return types.ErrorData(code=-31999, message=f"{MARK}\n{FORGED}\u2028{FORGED}")

    async def call() -> Any:
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}", "traceparent": TRACEPARENT},
            timeout=httpx2.Timeout(30, read=WAIT),
        ) as http:
            with anyio.fail_after(WAIT):
                async with Client(
                    streamable_http_client(server.mcp_url(PROJECT, "draft"), http_client=http),
                    mode="legacy",
                    elicitation_callback=elicit,
                ) as client:
                    try:
                        return await client.call_tool("asks", {})
                    except MCPError as exc:
                        return exc

    result = anyio.run(call)
    time.sleep(1)  # let the server flush its log lines
    return result


def test_a_clients_refused_elicitation_is_not_a_server_failure(refused: Any) -> None:
    """Like a refused sampling or roots request (caught in _send_unless_answered_elsewhere),
    an elicitation the client answers with a JSON-RPC error should end as the client's
    refusal (decline/cancel), not as "The call failed inside the server"."""
    assert isinstance(refused, types.CallToolResult), refused
    error = (refused.structured_content or {}).get("error") or {}
    assert error.get("code") != "internal", refused.structured_content


def test_a_clients_refusal_logs_no_traceback_with_its_text(server: LiveServer, refused: Any) -> None:
    log = server.log()
    assert "failed inside the server" not in log, log[-3000:]
    assert MARK not in log, "the client's error message reached the server log"


def test_every_json_log_line_survives_a_line_splitter(server: LiveServer, refused: Any) -> None:
    """json.dumps(ensure_ascii=False) leaves U+2028/U+2029/U+0085 raw: a consumer that
    splits with str.splitlines() (or a JS-based shipper) sees a forged second line."""
    bad = []
    for line in server.log().splitlines():
        if not line.strip() or line.startswith(("steamharness: replica", "demo ")):
            continue
        try:
            json.loads(line)
        except ValueError:
            bad.append(line[:200])
    assert not bad, bad[:5]


def test_a_clients_traceparent_does_not_name_log_lines_when_tracing_is_off(
    server: LiveServer, refused: Any
) -> None:
    """Tracing is off here: no span of ours exists, yet JsonFormatter reads the extracted
    (client-supplied) span context and writes the client's trace id on the server's lines,
    letting a client file its lines under any trace id it likes."""
    lines = [line for line in server.log().split("\n") if TRACE_ID in line]
    assert not lines, lines[:2]

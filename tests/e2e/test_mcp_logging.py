"""A run's `ctx.log` lines as `notifications/message` on its tools/call (webui/mcp/logs.py),
over a real `steamharness serve` with the Python SDK client in both eras: the 2025 session's
`logging/setLevel` filters them, they arrive in order before the result, a call sends at most
MAX_MESSAGES_PER_CALL and then says how many more it kept back, and at 2026-07-28 only a
request carrying `io.modelcontextprotocol/logLevel` gets any."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from tests.e2e.server import LiveServer, running_server
from tests.helpers import WAIT
from webui.mcp.logs import MAX_MESSAGES_PER_CALL, MESSAGE_LIMIT

pytestmark = pytest.mark.anyio

LOGS_PROJECT = "3c2f4b6e-1d7a-4e58-9b21-6f0a8c3d5e47"
HANDLERS = """
import sys


def three(ctx):
    ctx.log("started")
    print("a stdout line")
    print("a stderr line", file=sys.stderr)
    ctx.log("working")
    ctx.log("done")
    return "three"


def flood(ctx):
    for i in range(ctx.params["count"]):
        ctx.log(f"line {i}")
    return "flooded"


def huge(ctx):
    ctx.log("x" * 200_000)
    return "huge"


def controls(ctx):
    ctx.log("red \\x1b[31mtext\\x07 and \\u202egnirts\\r\\x00 end\\tok\\nnext")
    return "controls"
"""


def _entry(name: str, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "id": name,
        "title": name,
        "description": f"The {name} log handler.",
        "handler": f"logs.py:{name}",
        "task": "never",
        "params": params or [],
    }


def logs_project(folder: Path) -> Path:
    """A project whose tools log: `three` (three ctx.log lines, a stdout and a stderr line),
    `flood` (`count` lines), `huge` (one 200,000-character line), `controls` (control
    characters)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logs.py").write_text(HANDLERS)
    entrypoints = [
        _entry("three"),
        _entry("flood", [{"name": "count", "type": "number", "required": True}]),
        _entry("huge"),
        _entry("controls"),
    ]
    package = {
        "id": LOGS_PROJECT,
        "name": "logs",
        "version": "1.0.0",
        "projectType": "workflow",
        "description": "Tools that log.",
        "entrypoints": entrypoints,
    }
    (folder / "package.json").write_text(json.dumps(package, indent=2))
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("mcp-logging")) as live:
        live.add_project(logs_project(live.projects / "logs"), LOGS_PROJECT)
        yield live


class Seen:
    """What a client received, in order: log messages, then `result` when the call returned."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.events.append(("log", params))

    def logs(self) -> list[types.LoggingMessageNotificationParams]:
        return [p for kind, p in self.events if kind == "log"]

    def texts(self) -> list[str]:
        return [str(p.data) for p in self.logs()]


@asynccontextmanager
async def client(
    live: LiveServer, key: str, mode: str, seen: Seen, *, log_level: types.LoggingLevel | None = None
) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
    ) as http:
        with anyio.fail_after(WAIT):
            transport = streamable_http_client(live.mcp_url(LOGS_PROJECT), http_client=http)
            async with Client(transport, mode=mode, logging_callback=seen.on_log, log_level=log_level) as c:  # type: ignore[arg-type]
                yield c


async def set_level(c: Client, level: str) -> types.EmptyResult:
    with pytest.warns(MCPDeprecationWarning):
        return await c.set_logging_level(level)  # type: ignore[arg-type]  # pyright: ignore[reportDeprecated]


async def call(
    c: Client, seen: Seen, tool: str, arguments: dict[str, Any] | None = None
) -> types.CallToolResult:
    result = await c.call_tool(tool, arguments or {})
    seen.events.append(("result", result))
    assert not result.is_error, result
    return result


async def test_a_session_gets_its_run_lines_at_or_above_its_level_in_order_before_the_result(
    server: LiveServer,
) -> None:
    key = server.create_key("lena")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await call(c, seen, "three")  # no level set yet: nothing
        assert seen.logs() == []
        assert await set_level(c, "info") == types.EmptyResult()
        await call(c, seen, "three")
        assert [kind for kind, _ in seen.events] == ["result", "log", "log", "log", "result"]
        assert seen.texts() == ["started", "working", "done"]  # stdout and stderr stay in the timeline
        assert {(p.level, p.logger) for p in seen.logs()} == {("info", "three")}
        await set_level(c, "warning")  # above the lines' info: filtered out
        await call(c, seen, "three")
        assert len(seen.logs()) == 3
        await set_level(c, "debug")
        await call(c, seen, "three")
        assert seen.texts()[3:] == ["started", "working", "done"]


async def test_a_flood_is_cut_at_the_cap_with_one_message_saying_how_many_more(server: LiveServer) -> None:
    key = server.create_key("fiona")
    seen = Seen()
    count = MAX_MESSAGES_PER_CALL + 57
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "info")
        await call(c, seen, "flood", {"count": count})
    texts = seen.texts()
    assert texts[:MAX_MESSAGES_PER_CALL] == [f"line {i}" for i in range(MAX_MESSAGES_PER_CALL)]
    (note,) = texts[MAX_MESSAGES_PER_CALL:]
    assert note.startswith("57 more log lines not sent"), note
    assert seen.events[-1][0] == "result"


async def test_a_huge_line_is_cut(server: LiveServer) -> None:
    key = server.create_key("hugo")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "info")
        await call(c, seen, "huge")
    (text,) = seen.texts()
    assert text.startswith("x" * MESSAGE_LIMIT + "… (")
    assert len(text) < MESSAGE_LIMIT + 100


async def test_2026_requests_get_lines_only_when_their_meta_asks_at_or_above_its_level(
    server: LiveServer,
) -> None:
    key = server.create_key("mona")
    quiet = Seen()
    async with client(server, key, "2026-07-28", quiet) as c:
        await call(c, quiet, "three")
    assert quiet.logs() == []  # no logLevel in _meta: nothing
    asked = Seen()
    async with client(server, key, "2026-07-28", asked, log_level="info") as c:
        await call(c, asked, "three")
    assert asked.texts() == ["started", "working", "done"]
    assert [kind for kind, _ in asked.events] == ["log", "log", "log", "result"]
    above = Seen()
    async with client(server, key, "2026-07-28", above, log_level="error") as c:
        await call(c, above, "three")
    assert above.logs() == []


async def test_2026_has_no_set_level(server: LiveServer) -> None:
    """(`logging` is declared in both eras: tests/e2e/test_mcp_capabilities.py.)"""
    key = server.create_key("nina")
    seen = Seen()
    async with client(server, key, "2026-07-28", seen) as c:
        with pytest.raises(MCPError) as refused:
            await set_level(c, "info")
    assert refused.value.error.code == types.METHOD_NOT_FOUND

"""A run's log lines as `notifications/message` on its tools/call (webui/mcp/logs.py), over
a real `steamharness serve` with the Python SDK client in both eras: `ctx.log` lines at the
level the handler gave and the handler's stdout lines at `info` (stderr never), filtered by
the 2025 session's `logging/setLevel` level or the 2026-07-28 request's `logLevel`, in order
before the result; a call sends at most MAX_MESSAGES_PER_CALL and then says how many more it
kept back; `ctx.log` refuses a level MCP does not have, and keeps the level on the run's
timeline and page."""

from __future__ import annotations

import json
import re
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

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_sessions import logged_in
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server
from webui.mcp.logs import MAX_MESSAGES_PER_CALL, MESSAGE_LIMIT
from webui.runs.messages import LOG_LEVELS

pytestmark = pytest.mark.anyio

LOGS_PROJECT = "3c2f4b6e-1d7a-4e58-9b21-6f0a8c3d5e47"
HANDLERS = """
import sys


LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def three(ctx):
    ctx.log("started")
    print("a stderr line", file=sys.stderr)
    ctx.log("working")
    ctx.log("done")
    return "three"


def streams(ctx):
    ctx.log("a ctx.log line")
    print("first stdout line")
    sys.stdout.write("a line in ")
    sys.stdout.flush()
    sys.stdout.write("two writes\\r\\n\\n")
    print("Traceback: a stderr line", file=sys.stderr)
    sys.stdout.write("the last line, never ended")
    return "streams"


def levels(ctx):
    for level in LEVELS:
        ctx.log("at " + level, level)
    print("stdout at info")
    return "levels"


def bad_level(ctx):
    try:
        ctx.log("never logged", level=ctx.params["level"])
    except ValueError as exc:
        return str(exc)
    return "logged"


def flood(ctx):
    for i in range(ctx.params["count"]):
        ctx.log(f"line {i}", ctx.params.get("level") or "info")
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


def logs_project(folder: Path, handlers: str = "", entries: list[dict[str, Any]] | None = None) -> Path:
    """A project whose tools log: `three` (three ctx.log lines and a stderr line), `streams`
    (a ctx.log line, stdout lines, one of them written in two parts, one never ended, and a
    stderr line), `levels` (a ctx.log line at each level, a stdout line), `bad_level` (ctx.log
    at the `level` param, its ValueError returned), `flood` (`count` lines), `huge` (one
    200,000-character line), `controls` (control characters); `handlers` and `entries` add
    more."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logs.py").write_text(HANDLERS + handlers)
    entrypoints = [
        _entry("three"),
        _entry("streams"),
        _entry("levels"),
        _entry("bad_level", [{"name": "level", "type": "string", "required": True}]),
        _entry(
            "flood",
            [{"name": "count", "type": "number", "required": True}, {"name": "level", "type": "string"}],
        ),
        _entry("huge"),
        _entry("controls"),
        *(entries or []),
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
    with in_process_server(tmp_path_factory.mktemp("mcp-logging")) as live:
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

    def texts(self, logger: str | None = None) -> list[str]:
        return [str(p.data) for p in self.logs() if logger is None or p.logger == logger]


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
        assert seen.texts() == ["started", "working", "done"]  # stderr stays in the timeline
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


def run_of(result: types.CallToolResult) -> str:
    return str((result.structured_content or {})["runId"])


async def test_the_handlers_stdout_lines_are_sent_at_info_as_stdout_and_its_stderr_never(
    server: LiveServer,
) -> None:
    key = server.create_key("sol")
    for mode, level in (("legacy", None), ("2026-07-28", "info")):
        seen = Seen()
        async with client(server, key, mode, seen, log_level=level) as c:  # type: ignore[arg-type]
            if mode == "legacy":
                await set_level(c, "info")
            result = await call(c, seen, "streams")
        # The stdout pipe and ctx.log reach the server apart: only each one's order is kept.
        assert seen.texts("stdout") == [
            "first stdout line",
            "a line in two writes",
            "the last line, never ended",
        ]
        assert seen.texts("streams") == ["a ctx.log line"]
        assert {p.level for p in seen.logs()} == {"info"}
        assert not any("stderr" in text for text in seen.texts()), seen.texts()
        assert seen.events[-1][0] == "result"
        kept = server.query(
            "select kind, text from run_events where run_id = :r and kind in ('stdout', 'stderr')",
            r=run_of(result),
        )
        assert "Traceback: a stderr line" in "".join(e["text"] for e in kept if e["kind"] == "stderr")
        assert "a line in two writes" in "".join(e["text"] for e in kept if e["kind"] == "stdout")


async def test_a_session_gets_each_ctx_log_level_at_or_above_the_one_it_set_and_stdout_only_up_to_info(
    server: LiveServer,
) -> None:
    key = server.create_key("lev")
    async with client(server, key, "legacy", seen := Seen()) as c:
        for at in ("debug", "info", "notice", "error", "emergency"):
            before = len(seen.logs())
            await set_level(c, at)
            await call(c, seen, "levels")
            got = seen.logs()[before:]
            wanted = LOG_LEVELS[LOG_LEVELS.index(at) :]
            assert [(p.level, p.data) for p in got if p.logger == "levels"] == [
                (lv, f"at {lv}") for lv in wanted
            ]
            stdout = [p.data for p in got if p.logger == "stdout"]
            assert stdout == (["stdout at info"] if at in ("debug", "info") else []), (at, stdout)


async def test_a_2026_request_gets_each_level_at_or_above_its_log_level(server: LiveServer) -> None:
    key = server.create_key("modern-levels")
    for at in ("notice", "critical"):
        seen = Seen()
        async with client(server, key, "2026-07-28", seen, log_level=at) as c:  # type: ignore[arg-type]
            await call(c, seen, "levels")
        wanted = LOG_LEVELS[LOG_LEVELS.index(at) :]
        assert [(p.level, p.data) for p in seen.logs()] == [(lv, f"at {lv}") for lv in wanted]


async def test_ctx_log_refuses_a_level_mcp_does_not_have_and_names_the_ones_it_does(
    server: LiveServer,
) -> None:
    key = server.create_key("bad-level")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "debug")
        for bad in ("verbose", "WARNING", "fatal"):
            result = await call(c, seen, "bad_level", {"level": bad})
            output = (result.structured_content or {})["output"]
            assert output == (
                f"ctx.log() level: {bad!r} is not one of"
                " debug, info, notice, warning, error, critical, alert, emergency"
            ), output
        assert (await call(c, seen, "bad_level", {"level": "alert"})).structured_content["output"] == "logged"  # type: ignore[index]
    assert [(p.level, p.data) for p in seen.logs()] == [("alert", "never logged")]


async def test_the_note_about_lines_held_back_is_at_a_level_the_session_asked_for(server: LiveServer) -> None:
    key = server.create_key("note")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "error")
        await call(c, seen, "flood", {"count": MAX_MESSAGES_PER_CALL + 3, "level": "critical"})
    *lines, note = seen.logs()
    assert len(lines) == MAX_MESSAGES_PER_CALL
    assert note.data.startswith("3 more log lines not sent") and note.level == "error", note


async def test_the_run_page_and_the_api_keep_each_ctx_log_lines_level(server: LiveServer) -> None:
    server.add_user("page-owner", password="page-owner-pw-1")
    server.grant("page-owner", all_projects=True)
    key = server.create_key("page-owner")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        run_id = run_of(await call(c, seen, "levels"))
    r = httpx2.get(
        f"{server.base_url}/api/runs/{run_id}",
        headers={"Authorization": f"Bearer {server.admin_key}"},
        timeout=WAIT,
    )
    events = r.json()["data"]["events"]
    assert [(e["text"], e["data"]) for e in events if e["kind"] == "log"] == [
        (f"at {lv}", {"level": lv}) for lv in LOG_LEVELS
    ]
    with logged_in(server, ("page-owner", "page-owner-pw-1")) as (web, _):
        page = web.get(f"/runs/{run_id}").text
    for lv in LOG_LEVELS:
        kind = rf'<td>log <span class="log-level" data-level="{lv}">{lv}</span></td>'
        row = re.search(rf"{kind}\s*<td><pre>at {lv}</pre>", page)
        assert row, (lv, page[page.find("Report") :][:2000])

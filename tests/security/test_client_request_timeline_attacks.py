"""A hostile sampling prompt, model reply and roots on the run's timeline (webui/runs/questions.py,
webui/interactions/client_requests.py `asked_entry`/`answered_entry`, templates/runs/detail.html),
against the real app (in this process): the workflow's prompt and the client's reply, model name,
stop reason and roots carry markup, htmx attributes, control characters and hundreds of
thousands of characters. The run page shows them as text (escaped, never markup), without
control characters, and bounded; so does GET /api/runs/{id}."""

from __future__ import annotations

import json
import re
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
from pydantic import FileUrl

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_sessions import logged_in
from tests.helpers import WAIT
from tests.support import in_process_server
from webui.interactions.client_requests import ENTRY_MAX_URIS, ENTRY_NAME_CHARS, ENTRY_TEXT_CHARS

pytestmark = pytest.mark.anyio

PROJECT = "5b0c7e2a-9d41-4f36-8c2e-1a7d3e9f0b64"
OWNER = ("hostile-owner", "hostile-owner-pw-1")
HOSTILE = (
    '<script>alert(1)</script><img src=x onerror="alert(2)"> <a hx-get="/evil" hx-trigger="load">x</a>'
    " \x1b[31mred\x07 \u202egnirts\x00 \r\x85 end"
)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# What the timeline may hold at most, escaped: its bounded words (each character at most
# six when escaped, `&#34;`) and the markup around them.
TIMELINE_BOUND = 6 * (2 * ENTRY_TEXT_CHARS + 2 * ENTRY_NAME_CHARS + ENTRY_MAX_URIS * 300) + 20_000

HANDLERS = f"""
HOSTILE = {HOSTILE!r}


def ask_model(ctx):
    ctx.sample(HOSTILE + "p" * 200_000, system=HOSTILE, max_tokens=64)
    return "asked"


def ask_roots(ctx):
    return len(ctx.roots())
"""


def write_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text(HANDLERS, encoding="utf-8")
    entrypoints = [
        {"id": name, "title": name, "handler": f"main.py:{name}", "task": "never", "params": []}
        for name in ("ask_model", "ask_roots")
    ]
    package = {
        "id": PROJECT,
        "name": "hostile-client-requests",
        "version": "1.0.0",
        "projectType": "workflow",
        "description": "Asks its client hostile things.",
        "entrypoints": entrypoints,
    }
    (folder / "package.json").write_text(json.dumps(package, indent=2), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("client-request-attacks")) as live:
        live.add_project(write_project(live.projects / "hostile"), PROJECT)
        live.add_user(OWNER[0], password=OWNER[1])
        live.grant(OWNER[0], [PROJECT])
        yield live


async def hostile_model(
    ctx: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=HOSTILE + "r" * 100_000),
        model=HOSTILE + "m" * 5_000,
        stop_reason=HOSTILE,
    )


async def hostile_roots(ctx: ClientRequestContext) -> types.ListRootsResult:
    roots = [
        types.Root(uri=FileUrl(f"file:///x/{i}/<script>alert({i})</script>"), name=HOSTILE)
        for i in range(1_000)
    ]
    return types.ListRootsResult(roots=roots)


async def call(server: LiveServer, key: str, tool: str, **callbacks: Any) -> str:
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=WAIT)
    ) as http:
        with anyio.fail_after(WAIT):
            transport = streamable_http_client(server.mcp_url(PROJECT, "draft"), http_client=http)
            async with Client(transport, mode="legacy", **callbacks) as client:
                result = await client.call_tool(tool, {})
    assert not result.is_error, result
    return str((result.structured_content or {})["runId"])


def timeline_of(page: str) -> str:
    start = page.index('<ol class="timeline">')
    return page[start : page.index("</ol>", start)]


def assert_shown_as_text(timeline: str) -> None:
    assert "<script" not in timeline and "<img" not in timeline and "<a " not in timeline, timeline[:3000]
    assert "hx-get" not in timeline.replace("hx-get=&#34;/evil&#34;", ""), "an htmx attribute got through"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in timeline  # shown, as text
    assert not CONTROL.search(timeline), repr(CONTROL.search(timeline))
    assert len(timeline) < TIMELINE_BOUND, len(timeline)


async def test_a_hostile_prompt_and_reply_are_shown_escaped_and_bounded(server: LiveServer) -> None:
    key = server.create_key(OWNER[0])
    run_id = await call(server, key, "ask_model", sampling_callback=hostile_model)
    with logged_in(server, OWNER) as (web, _):
        page = web.get(f"/runs/{run_id}").text
    timeline = timeline_of(page)
    assert_shown_as_text(timeline)
    assert "a system prompt" in timeline
    assert f"{len(HOSTILE) + 200_000} characters of text" in timeline
    assert f"{len(HOSTILE) + 100_000} characters of text" in timeline
    r = httpx2.get(
        f"{server.base_url}/api/runs/{run_id}",
        headers={"Authorization": f"Bearer {server.admin_key}"},
        timeout=WAIT,
    )
    data = [e["data"] for e in r.json()["data"]["events"] if e["kind"] in ("client_request", "client_answer")]
    asked, answered = data
    for text, limit in (
        (asked["firstText"], ENTRY_TEXT_CHARS),
        (answered["replyText"], ENTRY_TEXT_CHARS),
        (answered["model"], ENTRY_NAME_CHARS),
    ):
        assert text.endswith(" characters more)") and len(text) < limit + 40, len(text)
        assert not CONTROL.search(text), repr(text[:200])
    assert len(answered["stopReason"]) <= ENTRY_NAME_CHARS and not CONTROL.search(answered["stopReason"])


async def test_a_thousand_hostile_roots_are_shown_escaped_and_only_the_first_few(server: LiveServer) -> None:
    key = server.create_key(OWNER[0])
    run_id = await call(server, key, "ask_roots", list_roots_callback=hostile_roots)
    with logged_in(server, OWNER) as (web, _):
        timeline = timeline_of(web.get(f"/runs/{run_id}").text)
    assert "<script" not in timeline
    assert not CONTROL.search(timeline)
    assert len(timeline) < TIMELINE_BOUND, len(timeline)
    assert "the MCP client gave 1000 roots" in timeline
    assert timeline.count("<li><code>file:///x/") == ENTRY_MAX_URIS
    assert f"and {1_000 - ENTRY_MAX_URIS} more" in timeline

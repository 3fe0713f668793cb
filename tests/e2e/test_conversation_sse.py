"""The inbox's SSE feed against a real server: an MCP client without
elicitation leaves a run waiting (interaction_required); the question reaches every open
tab live, is answered by a browser form POST, and every tab sees it resolved and the run's
next question arrive."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.server import INTERACTIVE, TORTURE, LiveServer
from tests.support.inprocess import in_process_server

# The end-to-end pass of the conversation stream on PostgreSQL too (tests/pg.py).
pytestmark = [pytest.mark.anyio, pytest.mark.dialects]

WAIT = 60
PASSWORD = "conversation-pw-1"
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("conversations"), server_database_url) as live:
        live.add_user("ann", password=PASSWORD)
        live.grant("ann", [INTERACTIVE])
        yield live


@dataclass
class SseEvent:
    event: str
    data: str


async def sse_events(response: httpx2.Response) -> AsyncIterator[SseEvent]:
    """Named events of a text/event-stream; comments (pings) are skipped."""
    name, data = "message", []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield SseEvent(name, "\n".join(data))
            name, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)


async def until(events: AsyncIterator[SseEvent], name: str) -> SseEvent:
    """The next event called `name` (the caller bounds the wait)."""
    async for event in events:
        if event.event == name:
            return event
    raise AssertionError(f"the stream ended before {name!r}")


async def login(http: httpx2.AsyncClient, name: str, password: str) -> str:
    """A browser login; returns the session's CSRF token."""
    form = await http.get("/login")
    token = CSRF_RE.search(form.text)
    assert token, form.text
    r = await http.post("/login", data={"username": name, "password": password, "csrf_token": token.group(1)})
    assert r.status_code == 303, r.text
    page = await http.get("/inbox")
    assert page.status_code == 200
    csrf = CSRF_RE.search(page.text)
    assert csrf
    return csrf.group(1)


@asynccontextmanager
async def tab(http: httpx2.AsyncClient) -> AsyncIterator[AsyncIterator[SseEvent]]:
    """One open conversation page: its event stream, starting after the snapshot."""
    async with http.stream("GET", "/inbox/events", headers={"Accept": "text/event-stream"}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
        first = await anext(events)
        assert first.event == "snapshot"
        yield events


async def call_without_elicitation(server: LiveServer, key: str, project: str, tool: str, args: dict) -> dict:
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
        ) as http,
        Client(streamable_http_client(server.mcp_url(project), http_client=http), mode="legacy") as client,
    ):
        result = await client.call_tool(tool, args)
    assert isinstance(result.content[0], types.TextContent)
    body = json.loads(result.content[0].text)
    assert body["error"]["code"] == "interaction_required", body
    return body


async def test_a_waiting_run_reaches_every_open_tab_and_an_answer_resolves_it_everywhere(
    server: LiveServer,
) -> None:
    other = server.create_key("mcp-user")
    key = server.create_key("ann")  # her MCP client's key: the runs, and their questions, are hers
    async with httpx2.AsyncClient(base_url=server.base_url, timeout=httpx2.Timeout(30, read=WAIT)) as http:
        csrf = await login(http, "ann", PASSWORD)
        with anyio.fail_after(WAIT):
            async with tab(http) as one, tab(http) as two:
                # someone else's question never reaches her tabs
                await call_without_elicitation(server, other, TORTURE, "ask_once", {})
                body = await call_without_elicitation(
                    server, key, INTERACTIVE, "plan_trip", {"traveller": "Bo"}
                )
                iid, run_id = body["error"]["interactionId"], body["runId"]
                for events in (one, two):
                    card = await until(events, "interaction")
                    assert f'id="interaction-{iid}"' in card.data and "Where to?" in card.data
                    assert f'sse-swap="resolved-{iid}"' in card.data

                r = await http.post(
                    f"/interactions/{iid}/answer",
                    data={"action": "accept", f"{iid}-destination": "Rome", f"{iid}-nights": "2"},
                    headers={"HX-Request": "true", "X-CSRF-Token": csrf},
                )
                assert r.status_code == 200, r.text
                for events in (one, two):
                    resolved = await until(events, f"resolved-{iid}")
                    assert 'data-status="answered"' in resolved.data
                    assert "Answered in the browser by user:ann" in resolved.data
                    # the run resumed: its next question follows on the same run
                    nxt = await until(events, "interaction")
                    assert f'data-run="{run_id}"' in nxt.data and "Which room?" in nxt.data

                second = re.search(r'data-interaction="([^"]+)"', nxt.data)
                assert second is not None
                r = await http.post(
                    f"/interactions/{second.group(1)}/answer",
                    data={"action": "cancel"},
                    headers={"HX-Request": "true", "X-CSRF-Token": csrf},
                )
                assert r.status_code == 200, r.text
                timeline = await until(one, f"run-{run_id}")
                while 'data-run-status="cancelled"' not in timeline.data:
                    timeline = await until(one, f"run-{run_id}")
                assert "Cancelled in the browser by user:ann" in timeline.data


async def test_the_event_stream_needs_a_login(server: LiveServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base_url) as http:
        r = await http.get("/inbox/events", headers={"Accept": "text/event-stream"})
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")

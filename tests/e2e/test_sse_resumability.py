"""Resumable SSE streams (SEP-1699, 2025-11-25) against a real server: each POST stream is
primed (an id, `retry`, empty data), its events carry ids, and a call whose connection
drops mid-call is resumed with GET + Last-Event-ID: everything after that id is replayed,
the call goes on, and its result arrives. Raw HTTP for the wire, the Python SDK client
through a relay that severs its connections for the client's own reconnection."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.server import HELLO, INTERACTIVE, LiveServer
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server

pytestmark = pytest.mark.anyio

PV = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
RETRY_MS = 250
TRIP_ANSWERS = [
    {"destination": "Rome", "nights": 4},
    {"room": "double", "extras": ["breakfast"]},
    {},  # the approval
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(
        tmp_path_factory.mktemp("sse"),
        STEAMHARNESS_SSE_RETRY_MS=str(RETRY_MS),
        # Long enough that a loaded machine reconnects in time; "nobody came back" is
        # tests/e2e/test_http_mcp.py's dropped-POST case (the default grace).
        STEAMHARNESS_SSE_RESUME_GRACE_SECONDS="60",
    ) as live:
        yield live


# --------------------------------------------------------------------------- raw HTTP


def headers(key: str, sid: str | None = None, **extra: str) -> dict[str, str]:
    h = {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PV,
        "Authorization": f"Bearer {key}",
        **extra,
    }
    if sid is not None:
        h["Mcp-Session-Id"] = sid
    return h


def open_session(server: LiveServer, key: str, project: str, *, elicitation: bool = True) -> str:
    caps: dict[str, Any] = {"elicitation": {}} if elicitation else {}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": PV, "capabilities": caps, "clientInfo": {"name": "t", "version": "1"}},
    }
    r = httpx2.post(server.mcp_url(project), headers=headers(key), json=init, timeout=WAIT)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx2.post(server.mcp_url(project), headers=headers(key, sid), json=note).status_code == 202
    return sid


@dataclass
class Event:
    id: str | None
    retry: int | None
    data: str

    @property
    def message(self) -> dict[str, Any] | None:
        return json.loads(self.data) if self.data.strip() else None


async def events(response: httpx2.Response) -> AsyncIterator[Event]:
    """The SSE events of a streamed response, as they arrive."""
    fields: dict[str, str] = {}
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if fields or data:
                retry = fields.get("retry")
                yield Event(fields.get("id"), int(retry) if retry else None, "\n".join(data))
            fields, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        else:
            fields[name] = value


def trip_call(request_id: int = 7) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "plan_trip", "arguments": {"traveller": "ann"}, "_meta": {"progressToken": "p"}},
    }


def is_elicitation(event: Event) -> bool:
    message = event.message
    return message is not None and message.get("method") == "elicitation/create"


async def answer(
    http: httpx2.AsyncClient, server: LiveServer, key: str, sid: str, request: Event, n: int
) -> None:
    message = request.message
    assert message is not None
    reply = {
        "jsonrpc": "2.0",
        "id": message["id"],
        "result": {"action": "accept", "content": TRIP_ANSWERS[n]},
    }
    r = await http.post(server.mcp_url(INTERACTIVE), headers=headers(key, sid), json=reply)
    assert r.status_code == 202, r.text


def run_status(server: LiveServer, run_id: str) -> str:
    return server.query("select status from runs where id = :id", id=run_id)[0]["status"]


async def test_a_post_stream_is_primed_with_an_id_and_retry_and_every_event_has_an_id(
    server: LiveServer,
) -> None:
    key = server.create_key("ada")
    sid = open_session(server, key, HELLO)
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "x"}},
    }
    seen: list[Event] = []
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        with anyio.fail_after(WAIT):
            async with http.stream("POST", server.mcp_url(HELLO), headers=headers(key, sid), json=call) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                seen = [e async for e in events(r)]
    priming, *rest = seen
    assert priming.id and priming.retry == RETRY_MS and priming.data == ""
    assert rest and all(e.id for e in rest)
    assert len({e.id for e in seen}) == len(seen)  # ids never repeat
    assert len(priming.id) >= 22  # random, not a counter
    final = rest[-1].message
    assert (
        final is not None and final["id"] == 3 and final["result"]["structuredContent"]["status"] == "success"
    )


async def test_a_dropped_call_resumes_with_last_event_id_and_nothing_is_lost(server: LiveServer) -> None:
    """Drop the POST at the first question; answer it; GET with the id of the event before
    the question: the question is replayed, then everything the call sent while nobody
    listened, then the call goes on live on that GET until its result."""
    key = server.create_key("bea")
    sid = open_session(server, key, INTERACTIVE)
    first: list[Event] = []
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        with anyio.fail_after(WAIT):
            async with http.stream(
                "POST", server.mcp_url(INTERACTIVE), headers=headers(key, sid), json=trip_call()
            ) as r:
                assert r.status_code == 200
                async for event in events(r):
                    first.append(event)
                    if is_elicitation(event):
                        break  # the connection drops here, mid-call
        assert first[0].retry == RETRY_MS and first[0].data == ""
        question = first[-1]
        before = first[-2]  # the progress report before the question
        assert before.id and question.id
        await answer(http, server, key, sid, question, 0)

        replayed: list[Event] = []
        answered = 1
        with anyio.fail_after(WAIT):
            async with http.stream(
                "GET", server.mcp_url(INTERACTIVE), headers=headers(key, sid, **{"Last-Event-ID": before.id})
            ) as r:
                assert r.status_code == 200
                async for event in events(r):
                    replayed.append(event)
                    if is_elicitation(event) and event.id != question.id:
                        await answer(http, server, key, sid, event, answered)
                        answered += 1
    assert all(e.id for e in replayed)
    assert replayed[0].id == question.id and replayed[0].data == question.data  # everything after `before`
    assert answered == 3  # the two later questions arrived on the resumed stream, once each
    progress = [
        m["params"]["progress"]
        for m in (e.message for e in replayed)
        if m
        and m.get("method") == "notifications/progress"
        and m["params"]["message"] in ("asking for the room", "asking for approval", "done")
    ]
    assert progress == [1, 2, 3]  # the report sent while nobody listened is there too
    final = replayed[-1].message
    assert final is not None and final["id"] == 7
    body = final["result"]["structuredContent"]
    assert body["status"] == "success" and body["output"]["destination"] == "Rome"
    assert run_status(server, body["runId"]) == "success"


async def test_a_replay_from_the_priming_event_of_a_finished_call_gives_all_of_it(server: LiveServer) -> None:
    key = server.create_key("cid")
    sid = open_session(server, key, HELLO)
    call = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "y"}},
    }
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        with anyio.fail_after(WAIT):
            async with http.stream("POST", server.mcp_url(HELLO), headers=headers(key, sid), json=call) as r:
                original = [e async for e in events(r)]
            async with http.stream(
                "GET",
                server.mcp_url(HELLO),
                headers=headers(key, sid, **{"Last-Event-ID": original[0].id or ""}),
            ) as r:
                assert r.status_code == 200
                again = [e async for e in events(r)]  # ends after the call's response
    assert [(e.id, e.data) for e in again] == [(e.id, e.data) for e in original[1:]]


async def test_another_sessions_or_an_unknown_last_event_id_replays_nothing(server: LiveServer) -> None:
    key = server.create_key("dot")
    mine = open_session(server, key, HELLO)
    theirs = open_session(server, key, HELLO)  # the same key, another session
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "z"}},
    }
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        with anyio.fail_after(WAIT):
            async with http.stream(
                "POST", server.mcp_url(HELLO), headers=headers(key, theirs), json=call
            ) as r:
                their_events = [e async for e in events(r)]
            assert "Hello" in their_events[-1].data
            for last in (their_events[0].id or "", "no-such-event-id"):
                async with http.stream(
                    "GET", server.mcp_url(HELLO), headers=headers(key, mine, **{"Last-Event-ID": last})
                ) as r:
                    assert r.status_code == 200
                    got = [e async for e in events(r)]
                assert got == [], last


async def test_deleting_the_session_ends_a_resumed_stream_and_its_call(server: LiveServer) -> None:
    key = server.create_key("fay")
    sid = open_session(server, key, INTERACTIVE)
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        with anyio.fail_after(WAIT):
            url = server.mcp_url(INTERACTIVE)
            async with http.stream("POST", url, headers=headers(key, sid), json=trip_call()) as r:
                first = [e async for e in _until_question(events(r))]
            priming = first[0].id or ""
            resumed: list[Event] = []
            async with http.stream("GET", url, headers=headers(key, sid, **{"Last-Event-ID": priming})) as r:
                async for event in events(r):
                    resumed.append(event)
                    if is_elicitation(event):
                        assert (await http.delete(url, headers=headers(key, sid))).status_code == 200
                # the stream ended with the session, without a result
    assert [e.id for e in resumed] == [e.id for e in first[1:]]
    run_id = server.query("select id from runs where entrypoint_id = 'plan_trip' order by created_at desc")[
        0
    ]["id"]
    with anyio.fail_after(WAIT):
        while run_status(server, run_id) not in ("cancelled", "failed"):
            await anyio.sleep(0.02)  # bounded: the run ends once its call does


async def _until_question(source: AsyncIterator[Event]) -> AsyncIterator[Event]:
    async for event in source:
        yield event
        if is_elicitation(event):
            return


# --------------------------------------------------------------------------- the SDK client


class Relay:
    """A TCP relay to the server whose open connections the test can sever."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self.open: set[anyio.abc.SocketStream] = set()
        self.resumed = 0  # requests the client sent with Last-Event-ID

    async def sever(self) -> None:
        for stream in list(self.open):
            await stream.aclose()
        self.open.clear()

    async def _pump(self, source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
        try:
            async for chunk in source:
                self.resumed += b"\r\nlast-event-id:" in chunk.lower()
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
            pass
        finally:
            await source.aclose()
            await sink.aclose()

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        upstream = await anyio.connect_tcp("127.0.0.1", self.target)
        self.open |= {client, upstream}
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump, client, upstream)
            tg.start_soon(self._pump, upstream, client)
        self.open -= {client, upstream}


@asynccontextmanager
async def relay_to(server: LiveServer) -> AsyncIterator[Relay]:
    relay = Relay(server.port)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    relay.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, relay._serve)
        try:
            yield relay
        finally:
            await relay.sever()
            tg.cancel_scope.cancel()


async def test_the_sdk_client_resumes_a_call_whose_connection_was_severed(server: LiveServer) -> None:
    key = server.create_key("eve")
    asked: list[str] = []
    async with relay_to(server) as relay:
        url = server.mcp_url(INTERACTIVE).replace(f":{server.port}/", f":{relay.port}/")

        async def elicit(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            asked.append(params.message)
            if len(asked) == 1:
                await relay.sever()  # the call's stream dies under the client
            return types.ElicitResult(action="accept", content=TRIP_ANSWERS[len(asked) - 1])

        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=WAIT)
        ) as http:
            with anyio.fail_after(WAIT):
                async with Client(
                    streamable_http_client(url, http_client=http), mode="legacy", elicitation_callback=elicit
                ) as client:
                    result = await client.call_tool("plan_trip", {"traveller": "eve"})
    body = result.structured_content
    assert result.is_error is not True and body is not None, result
    assert body["status"] == "success" and body["output"]["room"] == "double"
    assert len(asked) == 3  # each question once: none lost, none replayed twice
    assert relay.resumed >= 1  # the client did come back with Last-Event-ID
    assert run_status(server, body["runId"]) == "success"


def test_the_fixture_has_the_suites_reconnection_tool() -> None:
    package = json.loads((Path(__file__).parents[1] / "conformance/project/package.json").read_text())
    assert "test_reconnection" in {e["id"] for e in package["entrypoints"]}

"""Hostile resumptions of SSE streams (SEP-1699): Last-Event-ID never opens another
session's or account's stream, a huge or garbage header yields nothing and breaks nothing,
and a flood of events stays within the store's bounds (no replay with a gap)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from tests.e2e.server import HELLO, TORTURE, LiveServer
from tests.e2e.test_sse_resumability import Event, events, headers, open_session
from tests.helpers import WAIT
from tests.support import in_process_server

pytestmark = pytest.mark.anyio

MAX_EVENTS_PER_STREAM = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(
        tmp_path_factory.mktemp("sse-attacks"),
        STEAMHARNESS_SSE_REPLAY_MAX_EVENTS_PER_STREAM=str(MAX_EVENTS_PER_STREAM),
    ) as live:
        yield live


async def _call(server: LiveServer, key: str, sid: str, project: str, tool: str, args: dict) -> list[Event]:
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {"progressToken": "t"}},
    }
    url = server.mcp_url(project)
    async with (
        httpx2.AsyncClient(timeout=WAIT) as http,
        http.stream("POST", url, headers=headers(key, sid), json=body) as r,
    ):
        assert r.status_code == 200, await r.aread()
        return [e async for e in events(r)]


async def _resume(
    server: LiveServer, key: str, sid: str | None, last: str | bytes, project: str = HELLO
) -> tuple[int, str]:
    # As bytes, as httpx would send them: the garbage ids include bytes that are no ASCII.
    h = [(name.encode("ascii"), value.encode("ascii")) for name, value in headers(key, sid).items()]
    h.append((b"Last-Event-ID", last if isinstance(last, bytes) else last.encode("ascii")))
    async with (
        httpx2.AsyncClient(timeout=WAIT) as http,
        http.stream("GET", server.mcp_url(project), headers=h) as r,
    ):
        return r.status_code, (await r.aread()).decode("utf-8", "replace")


async def test_another_accounts_key_cannot_replay_a_stream(server: LiveServer) -> None:
    alice = server.create_key("alice-sse")
    mallory = server.create_key("mallory-sse")
    sid = open_session(server, alice, HELLO)
    stream = await _call(server, alice, sid, HELLO, "greet", {"name": "secret-name"})
    priming = stream[0].id or ""
    assert "secret-name" in stream[-1].data

    # On Alice's session: the binding refuses Mallory's key before anything is replayed.
    status, text = await _resume(server, mallory, sid, priming)
    assert status == 403 and "secret-name" not in text
    # On Mallory's own session, or on none: nothing of Alice's.
    own = open_session(server, mallory, HELLO)
    status, text = await _resume(server, mallory, own, priming)
    assert status == 200 and "data:" not in text and "secret-name" not in text
    status, text = await _resume(server, mallory, None, priming)
    assert status == 400 and "secret-name" not in text
    # The admin key is no way in either.
    status, text = await _resume(server, server.admin_key, sid, priming)
    assert status == 403 and "secret-name" not in text
    # Alice herself still can.
    status, text = await _resume(server, alice, sid, priming)
    assert status == 200 and "secret-name" in text


@pytest.mark.parametrize(
    "last",
    ["x" * 200_000, "x" * 4000, "../../../etc/passwd", "' or 1=1 --", "0", "-1", "%00%ff", b"\xe9\xff" * 30],
    ids=["huge", "long", "path", "sql", "zero", "negative", "escapes", "latin1"],
)
async def test_a_huge_or_garbage_last_event_id_gets_nothing_and_breaks_nothing(
    server: LiveServer, last: str | bytes
) -> None:
    key = server.create_key("garbage-sse")
    sid = open_session(server, key, HELLO)
    await _call(server, key, sid, HELLO, "greet", {"name": "g"})
    try:
        status, text = await _resume(server, key, sid, last)
    except (httpx2.RemoteProtocolError, httpx2.ReadError):
        status, text = 0, ""  # the server closed a request whose head is too large
    assert status in (0, 200, 400, 431), status
    assert "data:" not in text
    # The session and the server are fine afterwards.
    stream = await _call(server, key, sid, HELLO, "greet", {"name": "after"})
    assert "after" in stream[-1].data


async def test_a_flood_of_events_is_bounded_and_an_evicted_id_replays_nothing(server: LiveServer) -> None:
    key = server.create_key("flood-sse")
    sid = open_session(server, key, TORTURE)
    stream = await _call(server, key, sid, TORTURE, "progress", {})
    assert len(stream) > MAX_EVENTS_PER_STREAM + 1  # priming, three reports, the result
    ids = [e.id or "" for e in stream]
    assert all(ids)
    # Only the newest events are kept: from an evicted id, nothing (never a stream with a gap).
    for evicted in ids[:-MAX_EVENTS_PER_STREAM]:
        status, text = await _resume(server, key, sid, evicted, TORTURE)
        assert status == 200 and "data:" not in text
    status, text = await _resume(server, key, sid, ids[-2], TORTURE)
    assert status == 200 and text.count("data:") == 1 and '"id":5' in text  # the result alone

"""The insights page of a real `steamharness serve`: a tool call made over MCP shows up in
the page and, without a reload, in the page's live stream (`/insights/stream`), with the
replica's pool as it is now; a member's stream never carries another project's tools; the
stream cap per account holds and its slots are given back.

Every wait is bounded (WAIT) and waits for what it asserts."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator

import httpx2
import pytest

from tests.e2e.server import HELLO, LEDGER, LiveServer, running_server
from tests.e2e.test_mcp_sessions import logged_in
from tests.e2e.test_mcp_tasks import Rpc
from tests.helpers import WAIT

ADMIN = ("insights-admin", "insights-admin-pw-1")
MEMBER = ("insights-member", "insights-member-pw-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(
        tmp_path_factory.mktemp("insights"), STEAMHARNESS_MAX_SSE_STREAMS_PER_ACCOUNT="2"
    ) as live:
        live.add_user(ADMIN[0], admin=True, password=ADMIN[1])
        live.add_user(MEMBER[0], password=MEMBER[1])
        live.grant(MEMBER[0], [HELLO])
        yield live
    assert "Traceback" not in live.log()


class Stream:
    """An open `/insights/stream`: its `insights` events' bodies, read as they come."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self._lines = response.iter_lines()

    def next_body(self) -> str:
        data: list[str] = []
        event = ""
        for line in self._lines:
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line == "" and data:
                if event == "insights":
                    return "\n".join(data)
                data, event = [], ""
        raise AssertionError("the stream ended")

    def body_with(self, pattern: str) -> str:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            body = self.next_body()
            if re.search(pattern, body):
                return body
        raise AssertionError(f"no body matching {pattern!r} within {WAIT}s")


@contextlib.contextmanager
def stream(client: httpx2.Client, query: str = "") -> Iterator[Stream]:
    with client.stream("GET", f"/insights/stream{query}", timeout=httpx2.Timeout(WAIT, read=WAIT)) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        yield Stream(r)


def calls_of(body: str) -> int:
    found = re.search(r'data-figure="calls">(\d+)<', body)
    assert found, body[:500]
    return int(found.group(1))


def test_a_call_reaches_an_open_stream_without_a_reload(server: LiveServer) -> None:
    key = server.create_key(ADMIN[0])
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=HELLO)
    with logged_in(server, ADMIN) as (client, _csrf), stream(client) as live:
        first = live.next_body()
        before = calls_of(first)
        assert first.lstrip().startswith('<div id="insights-body" hx-disable>')
        assert rpc.result(rpc.call("greet", {"name": "Ada"}))["isError"] is False
        after = live.body_with(rf'data-figure="calls">{before + 1}<')
        assert "Greet" in after and 'id="insights-pool"' in after
    page = client_page(server, ADMIN)
    assert calls_of(page) >= before + 1


def client_page(server: LiveServer, who: tuple[str, str], query: str = "") -> str:
    with logged_in(server, who) as (client, _csrf):
        r = client.get(f"/insights{query}")
        assert r.status_code == 200
        return r.text


def test_a_members_stream_shows_her_projects_only(server: LiveServer) -> None:
    admin_key = server.create_key(ADMIN[0])
    ledger = Rpc(server, admin_key, tasks=False, elicitation=False, project=LEDGER)
    ledger.result(ledger.call("post_entry", {"amount": 1}))  # a tool of a project she may not use
    with logged_in(server, MEMBER) as (client, _csrf), stream(client, f"?project={LEDGER}") as live:
        body = live.next_body()
        assert calls_of(body) == 0 and "insights-pool" not in body
    page = client_page(server, MEMBER)
    assert "Post entry" not in page and "insights-pool" not in page


def test_each_account_holds_at_most_its_cap_of_streams(server: LiveServer) -> None:
    with logged_in(server, MEMBER) as (client, _csrf), stream(client) as one, stream(client) as two:
        one.next_body()
        two.next_body()
        third = client.get("/insights/stream", timeout=WAIT)
        assert third.status_code == 429
        assert "insights streams" in third.text
    # Given back when they end: a new one opens.
    with logged_in(server, MEMBER) as (client, _csrf), stream(client) as again:
        again.next_body()

"""Hostile log lines and log levels (webui/mcp/logs.py) against the real app (in this process):
a handler flooding lines sends at most the cap and one note, a huge line is cut, control
characters never reach the client, one session's level is its own (another session, of the
same key or another account, gets nothing it did not ask for), a bad level is -32602 and
leaves the session's level as it was, and a 2026-07-28 request's bad logLevel is refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_http_mcp import ACCEPT, TIMEOUT, headers, open_session
from tests.e2e.test_mcp_logging import LOGS_PROJECT, Seen, call, client, logs_project, set_level
from tests.support import in_process_server
from webui.mcp.logs import MAX_MESSAGES_PER_CALL, MESSAGE_LIMIT

pytestmark = pytest.mark.anyio

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("mcp-logging-attacks")) as live:
        live.add_project(logs_project(live.projects / "logs"), LOGS_PROJECT)
        yield live


async def test_a_flood_of_5000_lines_sends_the_cap_and_one_note_and_the_timeline_keeps_all(
    server: LiveServer,
) -> None:
    key = server.create_key("flo")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "debug")
        result = await call(c, seen, "flood", {"count": 5000})
    texts = seen.texts()
    assert len(texts) == MAX_MESSAGES_PER_CALL + 1
    assert texts[-1].startswith(f"{5000 - MAX_MESSAGES_PER_CALL} more log lines not sent")
    run_id = (result.structured_content or {})["runId"]
    kept = server.query("select count(*) as n from run_events where run_id = :r and kind = 'log'", r=run_id)
    assert kept[0]["n"] == 5000


async def test_a_huge_line_and_control_characters_are_cut_and_replaced(server: LiveServer) -> None:
    key = server.create_key("ctrl")
    seen = Seen()
    async with client(server, key, "legacy", seen) as c:
        await set_level(c, "info")
        await call(c, seen, "huge")
        await call(c, seen, "controls")
    huge, controls = seen.texts()
    assert len(huge) < MESSAGE_LIMIT + 100
    assert not CONTROL.search(controls), repr(controls)
    assert controls.startswith("red \ufffd[31mtext\ufffd and \ufffdgnirts\ufffd\ufffd end\tok\nnext")


async def test_one_sessions_level_does_not_reach_another_session(server: LiveServer) -> None:
    key = server.create_key("lev")
    other_key = server.create_key("mallory")
    asked, same_key, other = Seen(), Seen(), Seen()
    async with (
        client(server, key, "legacy", asked) as a,
        client(server, key, "legacy", same_key) as b,
        client(server, other_key, "legacy", other) as m,
    ):
        await set_level(a, "debug")
        await call(b, same_key, "three")
        await call(m, other, "three")
        await call(a, asked, "three")
        await set_level(m, "error")  # a higher level elsewhere does not silence `a`
        await call(a, asked, "three")
        await call(m, other, "three")
    assert same_key.logs() == [] and other.logs() == []
    assert asked.texts() == ["started", "working", "done"] * 2


def _post(server: LiveServer, key: str, sid: str, method: str, params: dict[str, Any]) -> str:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    r = httpx2.post(server.mcp_url(LOGS_PROJECT), headers=headers(key, sid), json=body, timeout=TIMEOUT)
    return r.text


def test_a_bad_level_is_invalid_params_and_keeps_the_level(server: LiveServer) -> None:
    key = server.create_key("bad")
    sid = open_session(server, key, LOGS_PROJECT)
    assert '"result":{}' in _post(server, key, sid, "logging/setLevel", {"level": "info"}).replace(" ", "")
    for level in ("verbose", "", "INFO", 3, None, {"level": "info"}, "x" * 100_000):
        answer = _post(server, key, sid, "logging/setLevel", {"level": level})
        assert '"code":-32602' in answer.replace(" ", ""), (level, answer[:300])
    answer = _post(server, key, sid, "tools/call", {"name": "three", "arguments": {}})
    assert answer.count('"notifications/message"') == 3, answer  # still at info


async def test_a_2026_request_with_a_bad_log_level_is_refused(server: LiveServer) -> None:
    key = server.create_key("modern")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/logLevel": "everything",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": "three", "arguments": {}, "_meta": meta},
    }
    h = {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "three",
    }
    with anyio.fail_after(TIMEOUT):
        async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
            r = await http.post(server.mcp_url(LOGS_PROJECT), headers=h, json=body)
    assert "notifications/message" not in r.text
    assert '"code":-32602' in r.text.replace(" ", ""), r.text[:300]

"""The MCP endpoint parses JSON-RPC as strictly as the JSON API, in both protocol eras
(2025-11-25: an opening POST and a POST in a session; 2026-07-28: stateless), with raw HTTP
against the real app (in this process): duplicate keys, NaN and deep nesting are -32700, an
object (or any non-string, non-integer) id and a batch are -32600, each in plain words,
without pydantic's internals; real SDK clients of both eras still work."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.server import HELLO, LiveServer
from tests.e2e.test_http_mcp import init_body, sdk_client, sse_json
from tests.support import in_process_server
from webui.mcp.envelope import check_body

WAIT = 30.0
ACCEPT = "application/json, text/event-stream"
INTERNALS = (
    "validation error for",
    "input_value",
    "input_type",
    "pydantic",
    "errors.pydantic.dev",
    "https://",
)
LIST = '"jsonrpc": "2.0", "method": "tools/list"'

PARSE_ERRORS = {
    "duplicate id": ('{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/list"}', "duplicate key 'id'"),
    "duplicate method": (
        '{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "method": "x"}',
        "duplicate key",
    ),
    "duplicate inside params": (
        '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "a", "name": "b"}}',
        "duplicate key 'name'",
    ),
    "NaN": ('{"jsonrpc": "2.0", "id": NaN, "method": "tools/list"}', "NaN is not valid JSON"),
    "deep": ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    "deep params": (
        '{"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"x": ' + "[" * 80 + "]" * 80 + "}}",
        "nested deeper than 64 levels",
    ),
    "not JSON": ("{oops", "Parse error"),
}
INVALID = {
    "object id": ("{" + LIST + ', "id": {}}', '"id" must be a string or an integer'),
    "array id": ("{" + LIST + ', "id": [1]}', '"id" must be a string or an integer'),
    "fraction id": ("{" + LIST + ', "id": 1.5}', '"id" must be a string or an integer'),
    "boolean id": ("{" + LIST + ', "id": true}', '"id" must be a string or an integer'),
    "null id": ("{" + LIST + ', "id": null}', '"id" must be a string or an integer'),
    "batch": ("[{" + LIST + ', "id": 1}, {' + LIST + ', "id": 2}]', "batches are not supported"),
    "empty batch": ("[]", "batches are not supported"),
    "scalar": ("42", "one JSON-RPC message"),
    "no jsonrpc": ('{"id": 1, "method": "tools/list"}', '"jsonrpc" must be "2.0"'),
    "params an array": ("{" + LIST + ', "id": 6, "params": [1]}', '"params" must be an object'),
    "nothing to do": ('{"jsonrpc": "2.0", "id": 7}', "needs a method"),
    "bad response": ('{"jsonrpc": "2.0", "id": 8, "result": 3}', '"result" must be an object'),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("jsonrpc-strict")) as live:
        yield live
    log = live.log()
    assert "Traceback" not in log and "RecursionError" not in log


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("alice")


@pytest.fixture(scope="module")
def session(server: LiveServer, key: str) -> str:
    h = {"Authorization": f"Bearer {key}", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
    r = httpx2.post(server.mcp_url(HELLO), headers=h, json=init_body(), timeout=WAIT)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (
        httpx2.post(server.mcp_url(HELLO), headers={**h, "Mcp-Session-Id": sid}, json=note).status_code == 202
    )
    return sid


ERAS = ["2025 opening", "2025 session", "2026-07-28"]


def post(server: LiveServer, key: str, session: str, era: str, body: str) -> httpx2.Response:
    h = {"Authorization": f"Bearer {key}", "Accept": ACCEPT, "Content-Type": "application/json"}
    if era == "2026-07-28":
        h["MCP-Protocol-Version"] = "2026-07-28"
    else:
        h["MCP-Protocol-Version"] = "2025-11-25"
        if era == "2025 session":
            h["Mcp-Session-Id"] = session
    return httpx2.post(server.mcp_url(HELLO), headers=h, content=body.encode(), timeout=WAIT)


def refused(r: httpx2.Response, code: int, word: str) -> None:
    assert r.status_code == 400, r.text
    doc: dict[str, Any] = r.json()
    assert doc["jsonrpc"] == "2.0" and doc["error"]["code"] == code, doc
    assert word in doc["error"]["message"], doc
    for internal in INTERNALS:
        assert internal not in r.text, r.text


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("label", list(PARSE_ERRORS))
def test_ambiguous_or_hostile_json_is_a_parse_error(
    server: LiveServer, key: str, session: str, era: str, label: str
) -> None:
    body, word = PARSE_ERRORS[label]
    refused(post(server, key, session, era, body), -32700, word)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("label", list(INVALID))
def test_json_that_is_not_one_json_rpc_message_is_an_invalid_request(
    server: LiveServer, key: str, session: str, era: str, label: str
) -> None:
    body, word = INVALID[label]
    refused(post(server, key, session, era, body), -32600, word)


def test_a_usable_id_is_echoed_in_the_refusal() -> None:
    refusal = check_body(b'{"jsonrpc": "2.0", "id": "r-1", "method": "tools/list", "params": [1]}')
    assert refusal is not None and refusal.document()["id"] == "r-1"
    assert check_body(b'{"jsonrpc": "2.0", "id": {}, "method": "tools/list"}').document()["id"] is None  # type: ignore[union-attr]


def test_a_valid_message_still_reaches_the_sdk_in_the_session(
    server: LiveServer, key: str, session: str
) -> None:
    r = post(server, key, session, "2025 session", "{" + LIST + ', "id": 9}')
    assert r.status_code == 200, r.text
    assert {t["name"] for t in sse_json(r)["result"]["tools"]} >= {"greet"}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sdk_clients_of_both_eras_still_work(server: LiveServer, key: str, mode: str) -> None:
    async with sdk_client(server.mcp_url(HELLO), key, mode) as client:
        tools = await client.list_tools()
    assert tools.tools

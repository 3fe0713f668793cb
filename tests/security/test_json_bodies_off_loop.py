"""Large JSON bodies never freeze the server (issue 36, defect 7): the largest MCP request and
knowledge body the caps allow, shaped to be as costly as JSON can be (millions of empty
arrays, which the reader used to walk in Python on the event loop: seconds per MiB), while
`/healthz` and an authenticated MCP ping keep answering. The real HTTP app (in this process) on
loopback; each probe bounded by a generous timeout, a hang guard, not a speed check.

The MCP endpoint has a body cap of its own (STEAMHARNESS_MAX_MCP_BODY_BYTES): a body over it
is refused from its declared length, before any of it is sent."""

from __future__ import annotations

import concurrent.futures
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from pydantic import SecretStr

from tests import prepared
from tests.e2e.server import HELLO, LiveServer, raw_request
from tests.e2e.test_http_mcp import headers, open_session, sse_json
from tests.helpers import WAIT
from tests.support import in_process_server
from tests.web.conftest import running
from webui import strict_json
from webui.knowledge.model import MAX_JSON_CONTAINERS
from webui.settings import Settings

MIB = 1024 * 1024
# The test server's caps: JSON bodies (what the MCP endpoint was capped by before it had a cap
# of its own) and MCP bodies both 8 MiB; a knowledge document's body, the file cap (50 MB by
# default) plus 1 MiB.
MCP_CAP = 8 * MIB
KNOWLEDGE_BODY = 16 * MIB
PROBE_TIMEOUT = 5.0  # a hang guard: the old reader held the loop for tens of seconds


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {"STEAMHARNESS_MAX_BODY_BYTES": str(MCP_CAP), "STEAMHARNESS_MAX_MCP_BODY_BYTES": str(MCP_CAP)}
    with in_process_server(tmp_path_factory.mktemp("json-bodies"), **env) as live:
        yield live
    assert "Traceback" not in live.log()


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> tuple[str, str]:
    """(alice's key, an open MCP session of hers on hello)."""
    key = server.create_key("alice")
    return key, open_session(server, key)


def padded(prefix: bytes, item: bytes, suffix: bytes, size: int) -> bytes:
    """`prefix` + as many `item`s, comma-separated, as fit in `size` bytes + `suffix`."""
    count = (size - len(prefix) - len(suffix)) // (len(item) + 1)
    return prefix + b",".join([item] * count) + suffix


def tools_call(arguments: bytes, request_id: int) -> bytes:
    head = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"no-such-tool","arguments":'
    return head % request_id + arguments + b"}}"


def answering(
    server: LiveServer, key: str, sid: str, attacks: list[Callable[[], httpx2.Response]]
) -> list[httpx2.Response]:
    """Runs the attacks at once; until all have their answers, /healthz and a ping of alice's
    session must answer (each within PROBE_TIMEOUT). The attacks' answers."""
    ping = {"jsonrpc": "2.0", "id": 99, "method": "ping"}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(attacks)) as pool:
        running_attacks = [pool.submit(attack) for attack in attacks]
        probes = 0
        while probes == 0 or not all(f.done() for f in running_attacks):
            health = httpx2.get(f"{server.base_url}/healthz", timeout=PROBE_TIMEOUT)
            assert health.status_code == 200 and health.json()["status"] == "ok"
            r = httpx2.post(
                server.mcp_url(HELLO), headers=headers(key, sid), json=ping, timeout=PROBE_TIMEOUT
            )
            assert r.status_code == 200 and sse_json(r)["result"] == {}, r.text
            probes += 1
            assert probes < 10_000, "the attacks never finished"
        return [f.result(timeout=WAIT) for f in running_attacks]


def test_max_size_mcp_bodies_are_parsed_while_the_server_keeps_answering(
    server: LiveServer, alice: tuple[str, str]
) -> None:
    key, sid = alice
    # 2.8 million empty arrays: refused from the text, before it is parsed.
    arrays = tools_call(padded(b'{"a":[', b"[]", b"]}", MCP_CAP - 200), 1)
    # As much as the reader takes: just under its limits on arrays and objects and on values,
    # the rest one long string. Parsed (in a parse thread), then the SDK parses it again.
    most = (
        b'{"lists":['
        + b",".join([b"[]"] * (strict_json.MAX_CONTAINERS - 100))
        + b'],"ints":['
        + b",".join([b"0"] * (strict_json.MAX_VALUES - strict_json.MAX_CONTAINERS - 100))
        + b'],"text":"'
    )
    heaviest = tools_call(most + b"x" * (MCP_CAP - len(most) - 300) + b'"}', 2)
    assert len(arrays) <= MCP_CAP and len(heaviest) <= MCP_CAP

    def post(body: bytes) -> Callable[[], httpx2.Response]:
        return lambda: httpx2.post(
            server.mcp_url(HELLO), headers=headers(key, sid), content=body, timeout=WAIT
        )

    refused, called = answering(server, key, sid, [post(arrays), post(heaviest)])
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == {
        "code": -32700,
        "message": "Parse error: the document holds more than "
        f"{strict_json.MAX_CONTAINERS} arrays and objects",
    }
    assert called.status_code == 200, called.text
    assert sse_json(called)["error"]["message"] == "Unknown tool: no-such-tool"


def test_a_max_size_knowledge_body_is_parsed_while_the_server_keeps_answering(
    server: LiveServer, alice: tuple[str, str]
) -> None:
    key, sid = alice
    url = f"{server.base_url}/api/workflows/{HELLO}/knowledge/documents"
    admin = {"Authorization": f"Bearer {server.admin_key}", "Content-Type": "application/json"}
    arrays = padded(b'{"collection":"notes","text":"t","metadata":[', b"[]", b"]}", KNOWLEDGE_BODY)
    # A document past its text's cap (8 MiB): parsed, then refused by the knowledge base.
    text = b'{"collection":"notes","text":"' + b"x" * (KNOWLEDGE_BODY - 100) + b'"}'

    def post(body: bytes) -> Callable[[], httpx2.Response]:
        return lambda: httpx2.post(url, headers=admin, content=body, timeout=WAIT)

    refused, too_long = answering(server, key, sid, [post(arrays), post(text)])
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == {
        "code": "invalid_knowledge",
        "message": "the request body is not valid JSON: the document holds more than "
        f"{MAX_JSON_CONTAINERS} arrays and objects",
    }
    assert too_long.status_code == 400 and "larger than" in too_long.json()["error"]["message"], too_long.text


def test_an_mcp_body_over_its_cap_is_refused_from_its_declared_length(
    server: LiveServer, alice: tuple[str, str]
) -> None:
    key, sid = alice
    head = (
        f"POST /api/workflows/{HELLO}/mcp?target=latest HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Authorization: Bearer {key}\r\nMcp-Session-Id: {sid}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {MCP_CAP + 1}\r\n\r\n"
    )
    status, text = raw_request(server.port, head, timeout=WAIT)  # the body is never sent
    assert status == 413
    document = json.loads(text.split("\r\n\r\n", 1)[1])
    assert document["error"] == {
        "code": -32600,
        "message": f"HTTP 413: the request body is larger than {MCP_CAP} bytes",
    }


def test_the_mcp_body_cap_is_its_own_setting(tmp_path: Path) -> None:
    """STEAMHARNESS_MAX_MCP_BODY_BYTES caps MCP bodies, STEAMHARNESS_MAX_BODY_BYTES the JSON
    API's: each body between the two is refused by its own cap only."""
    admin_key = secrets.token_urlsafe(32)
    data = prepared.copy_prepared("web", tmp_path / "data")
    settings = Settings(
        data_dir=data, server_admin_key=SecretStr(admin_key), max_body_bytes=4096, max_mcp_body_bytes=8192
    )
    bearer = {"Authorization": f"Bearer {admin_key}", "Content-Type": "application/json"}
    mcp = {**bearer, "Accept": "application/json, text/event-stream"}
    between = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"pad": "x" * 5000}}}
    over = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"pad": "x" * 9000}}}
    with running(settings) as web:
        mcp_url = f"/api/workflows/{HELLO}/mcp?target=latest"
        r = web.client.post(mcp_url, headers=mcp, content=json.dumps(over))
        assert r.status_code == 413 and "larger than 8192 bytes" in r.json()["error"]["message"], r.text
        r = web.client.post(mcp_url, headers=mcp, content=json.dumps(between))
        assert r.status_code != 413, r.text  # past the guard: the SDK answers (no session yet)
        search = {"query": "tea", "pad": "x" * 5000}
        r = web.client.post(
            f"/api/workflows/{HELLO}/knowledge/search", headers=bearer, content=json.dumps(search)
        )
        assert r.status_code == 413 and "larger than 4096 bytes" in r.json()["error"]["message"], r.text

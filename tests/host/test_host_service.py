"""The host against real MCP servers (a Python SDK test server over stdio and over HTTP
on loopback): connections, tool calls, and their requests answered through the same
InteractionService path the browser uses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.conftest import FIXTURES
from tests.e2e.server import free_port
from webui.admin import create_user
from webui.audit.log import AuditLog
from webui.errors import InteractionClosed, InvalidAnswer
from webui.events import EventHub
from webui.host.config import McpSourceChanged
from webui.host.service import HostService
from webui.interactions.service import InteractionService
from webui.store.db import make_engine
from webui.store.models import Interaction

pytestmark = pytest.mark.anyio
SERVER = FIXTURES / "host_server.py"
TIMEOUT = 60


@dataclass
class Host:
    service: HostService
    interactions: InteractionService
    hub: EventHub
    root: Path
    account_id: int


def write_config(root: Path, servers: dict[str, Any], defaults: list[str]) -> None:
    (root / "mcp").mkdir(parents=True, exist_ok=True)
    (root / "mcp" / "servers.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    (root / "config.yaml").write_text(
        "defaults:\n  mcp_servers: [" + ", ".join(defaults) + "]\n", encoding="utf-8"
    )


@pytest.fixture
def http_server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        with anyio.from_thread.start_blocking_portal() as portal:
            portal.call(_wait_listening, port)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def _wait_listening(port: int) -> None:
    with anyio.fail_after(TIMEOUT):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
                await stream.aclose()
                return
            except OSError:
                await anyio.sleep(0.05)  # the server process is still starting; bounded above


async def make_host(tmp_path: Path, servers: dict[str, Any], defaults: list[str], expiry: float = 60) -> Host:
    root = tmp_path / "root"
    write_config(root, servers, defaults)
    engine = make_engine(f"sqlite:///{tmp_path / 'host.sqlite3'}")
    account = create_user(engine, name="ann", admin=True, password=None)
    assert account.id is not None
    hub = EventHub()
    interactions = InteractionService(engine, AuditLog(), hub)
    service = HostService(
        root=root,
        engine=engine,
        interactions=interactions,
        audit=AuditLog(),
        expiry_seconds=expiry,
        log_dir=tmp_path / "logs",
    )
    return Host(service, interactions, hub, root, account.id)


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    servers = {"Test_Stdio": {"command": sys.executable, "args": [str(SERVER), "stdio"]}}
    h = await make_host(tmp_path, servers, ["mcp-test-stdio"])
    async with h.service.running():
        yield h


async def next_pending(host: Host) -> Interaction:
    with host.hub.subscribe("interactions") as events:
        with anyio.fail_after(TIMEOUT):
            async for event in events:
                if event.kind == "pending":
                    return host.interactions.get(event.data["interactionId"])
    raise AssertionError("no pending interaction")


async def call_and_answer(
    host: Host, conv: str, server: str, tool: str, answer: Any, *, arguments: dict[str, Any], actor: str
) -> Any:
    """Start the call, answer its first request the way the browser does; the finished call's row."""
    results: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            results.append(await host.service.call_tool(conv, server, tool, arguments, actor=actor))

        with host.hub.subscribe("interactions") as events:
            tg.start_soon(call)
            with anyio.fail_after(TIMEOUT):
                async for event in events:
                    if event.kind == "pending":
                        ia = host.interactions.get(event.data["interactionId"])
                        await answer(ia)
                        break
    return results[0]


async def call_answering(host: Host, conv: str, server: str, tool: str, answer: Any) -> dict[str, Any]:
    """Call `tool` without arguments as ann, answer its request, return the successful result."""
    row = await call_and_answer(host, conv, server, tool, answer, arguments={}, actor="user:ann")
    assert row.status == "success", (row.status, row.error)
    return json.loads(row.result["content"][0]["text"])


async def test_a_form_request_becomes_an_interaction_and_the_answer_reaches_the_server(host: Host) -> None:
    conv = host.service.create_conversation(
        account_id=host.account_id, title="t", selection=None, actor="user:ann"
    )
    assert conv.selection == ["mcp-test-stdio"]

    async def answer(ia: Interaction) -> None:
        assert ia.origin == "host" and ia.server_id == "mcp-test-stdio" and ia.conversation_id == conv.id
        assert ia.kind == "form" and ia.expires_at is not None
        with pytest.raises(InvalidAnswer):
            await host.interactions.answer(
                ia.id, action="accept", content={"name": "A", "room": "suite"}, channel="ui"
            )
        await host.interactions.answer(
            ia.id,
            action="accept",
            content={"name": "Ann", "nights": 3, "breakfast": True, "room": "double"},
            channel="ui",
        )
        again = await host.interactions.answer(
            ia.id,
            action="accept",
            content={"name": "Ann", "nights": 3, "breakfast": True, "room": "double"},
            channel="ui",
        )
        assert again.repeated

    result = await call_answering(host, conv.id, "mcp-test-stdio", "book", answer)
    assert result == {
        "action": "accept",
        "content": {"name": "Ann", "nights": 3, "breakfast": True, "room": "double"},
    }
    conn = host.service.connection_state(conv.id, "mcp-test-stdio")
    assert conn is not None and conn.state == "ready" and {t.name for t in conn.tools} >= {"book", "echo"}


async def test_titled_multi_select_and_decline_are_passed_through(host: Host) -> None:
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")

    async def pick(ia: Interaction) -> None:
        await host.interactions.answer(
            ia.id, action="accept", content={"tags": ["red", "blue"]}, channel="ui"
        )

    async def decline(ia: Interaction) -> None:
        await host.interactions.answer(ia.id, action="decline", channel="ui")

    assert (await call_answering(host, conv.id, "mcp-test-stdio", "pick_tags", pick))["content"] == {
        "tags": ["red", "blue"]
    }
    assert (await call_answering(host, conv.id, "mcp-test-stdio", "pick_tags", decline)) == {
        "action": "decline",
        "content": None,
    }


async def test_a_sensitive_field_is_refused_with_the_reason(host: Host) -> None:
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    row = await host.service.call_tool(conv.id, "mcp-test-stdio", "ask_secret", {}, actor="a")
    body = json.loads(row.result["content"][0]["text"]) if row.result else {}
    assert "sensitive" in body["refused"]


async def test_a_url_request_shows_its_destination_and_confirming_accepts(host: Host) -> None:
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")

    async def confirm(ia: Interaction) -> None:
        assert ia.kind == "url" and ia.url == "https://example.com/sign?x=1"
        await host.interactions.answer(ia.id, action="accept", channel="ui")

    assert await call_answering(host, conv.id, "mcp-test-stdio", "open_link", confirm) == {
        "action": "accept",
        "content": None,
    }


async def test_an_unanswered_request_expires_and_the_server_gets_cancel(tmp_path: Path) -> None:
    servers = {"t": {"command": sys.executable, "args": [str(SERVER), "stdio"]}}
    host = await make_host(tmp_path, servers, ["mcp-t"], expiry=1.0)
    async with host.service.running():
        conv = host.service.create_conversation(
            account_id=host.account_id, title="t", selection=None, actor="a"
        )
        with host.hub.subscribe("interactions") as events:
            row = await host.service.call_tool(conv.id, "mcp-t", "wait", {}, actor="a")
            kinds = [e.kind async for e in _drain(events)]
        assert json.loads(row.result["content"][0]["text"]) == {"action": "cancel", "content": None}
        assert kinds == ["pending", "closed"]
        ia = next(i for i in _all(host) if i.server_id == "mcp-t")
        assert (ia.status, ia.close_reason) == ("closed", "expired")
        with pytest.raises(InteractionClosed):
            await host.interactions.answer(ia.id, action="accept", content={"x": "late"}, channel="ui")


async def _drain(events: Any) -> AsyncIterator[Any]:
    while not events.queue.empty():
        event = events.queue.get_nowait()
        if event is not None:
            yield event


def _all(host: Host) -> list[Interaction]:
    from sqlmodel import Session, select

    with Session(host.service.engine) as s:
        return list(s.exec(select(Interaction)))


async def test_the_same_flow_works_over_streamable_http_on_loopback(tmp_path: Path, http_server: str) -> None:
    host = await make_host(tmp_path, {"remote": {"type": "http", "url": http_server}}, ["mcp-remote"])
    async with host.service.running():
        conv = host.service.create_conversation(
            account_id=host.account_id, title="t", selection=None, actor="a"
        )

        async def answer(ia: Interaction) -> None:
            await host.interactions.answer(
                ia.id, action="accept", content={"name": "B", "room": "single"}, channel="ui"
            )

        result = await call_answering(host, conv.id, "mcp-remote", "book", answer)
        assert result["content"] == {"name": "B", "room": "single"}
        echoed = await host.service.call_tool(conv.id, "mcp-remote", "echo", {"a": 1}, actor="a")
        assert json.loads(echoed.result["content"][0]["text"]) == {"echo": {"a": 1}}


async def test_clients_are_reused_per_conversation_and_closing_ends_pending_requests(host: Host) -> None:
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    first = await host.service.connect(conv.id, "mcp-test-stdio")
    second = await host.service.connect(conv.id, "mcp-test-stdio")
    assert first is second
    other = host.service.create_conversation(account_id=host.account_id, title="u", selection=None, actor="a")
    assert await host.service.connect(other.id, "mcp-test-stdio") is not first
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await host.service.call_tool(conv.id, "mcp-test-stdio", "wait", {}, actor="a")

        tg.start_soon(call)
        ia = await next_pending(host)
        await host.service.close_conversation(conv.id)
    assert host.interactions.get(ia.id).close_reason in ("conversation closed", "connection closed")


async def test_an_edited_source_refuses_a_new_client_with_mcp_source_changed(host: Host) -> None:
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    await host.service.connect(conv.id, "mcp-test-stdio")
    path = host.root / "mcp" / "servers.json"
    path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    with pytest.raises(McpSourceChanged):
        await host.service.connect(conv.id, "mcp-test-stdio")


async def test_selection_is_kept_exactly_and_unknown_ids_are_refused(host: Host) -> None:
    none = host.service.create_conversation(account_id=host.account_id, title="t", selection=[], actor="a")
    assert none.selection == []
    with pytest.raises(Exception, match="mcp-nope"):
        host.service.create_conversation(
            account_id=host.account_id, title="t", selection=["mcp-nope"], actor="a"
        )
    from webui.errors import NotFound

    with pytest.raises(NotFound):
        await host.service.connect(none.id, "mcp-test-stdio")


def test_http_client_keeps_headers_on_the_configured_origin_only() -> None:
    from webui.host.service import _http_client

    client = _http_client("https://mcp.example.com/mcp", {"X-Token": "t"}, 1)
    seen: list[httpx2.Request] = []

    async def run() -> None:
        for url in ("https://mcp.example.com/mcp", "https://other.example.com/x"):
            request = client.build_request("GET", url)
            for hook in client.event_hooks["request"]:
                await hook(request)
            seen.append(request)
        downgrade = client.build_request("GET", "http://mcp.example.com/mcp")
        with pytest.raises(Exception, match="HTTPS"):
            for hook in client.event_hooks["request"]:
                await hook(downgrade)

    async def run_and_close() -> None:
        async with client:
            await run()

    anyio.run(run_and_close)
    assert seen[0].headers.get("x-token") == "t"
    assert "x-token" not in seen[1].headers


EVERYTHING = Path(__file__).resolve().parents[1] / "node" / "node_modules" / "@modelcontextprotocol"
EVERYTHING_MAIN = EVERYTHING / "server-everything" / "dist" / "index.js"


async def test_the_official_everything_server_lists_tools_calls_one_and_gets_its_form_answered(
    tmp_path: Path,
) -> None:
    node = shutil.which("node")
    if node is None or not EVERYTHING_MAIN.is_file():
        pytest.fail("server-everything needs Node and tests/node/node_modules: run `bash scripts/test`")
    host = await make_host(
        tmp_path,
        {"everything": {"command": node, "args": [str(EVERYTHING_MAIN), "stdio"]}},
        ["mcp-everything"],
    )
    async with host.service.running():
        conv = host.service.create_conversation(
            account_id=host.account_id, title="t", selection=None, actor="a"
        )
        conn = await host.service.connect(conv.id, "mcp-everything")
        names = {t.name for t in conn.tools}
        assert {"echo", "trigger-elicitation-request"} <= names
        echoed = await host.service.call_tool(conv.id, "mcp-everything", "echo", {"message": "hi"}, actor="a")
        assert echoed.status == "success" and "hi" in json.dumps(echoed.result)

        async def answer(ia: Interaction) -> None:
            assert ia.blockers == []
            await host.interactions.answer(
                ia.id,
                action="accept",
                content={
                    "name": "Ada",
                    "untitledMultipleSelectEnum": ["Piano"],
                    "titledMultipleSelectEnum": ["fish-2"],
                    "titledSingleSelectEnum": "hero-3",
                },
                channel="ui",
            )

        row = await call_and_answer(
            host, conv.id, "mcp-everything", "trigger-elicitation-request", answer, arguments={}, actor="a"
        )
        text = json.dumps(row.result)
        assert row.status == "success" and "Ada" in text and "fish-2" in text


async def test_calls_and_requests_left_open_by_a_dead_process_are_ended_at_start(tmp_path: Path) -> None:
    from sqlmodel import Session

    from webui.store.models import HostCall, HostConversation

    servers = {"t": {"command": sys.executable, "args": [str(SERVER), "stdio"]}}
    host = await make_host(tmp_path, servers, ["mcp-t"])
    with Session(host.service.engine) as s:
        s.add(HostConversation(id="conv_old", account_id=host.account_id, title="old", selection=["mcp-t"]))
        s.flush()
        s.add(HostCall(id="call_old", conversation_id="conv_old", server_id="mcp-t", tool="wait"))
        s.commit()
    ia = host.interactions.create(
        run_id=None,
        origin="host",
        kind="form",
        title="t",
        message=None,
        requested_schema={},
        fields=[],
        blockers=[],
        server_id="mcp-t",
        conversation_id="conv_old",
    )
    async with host.service.running():
        call = host.service.calls("conv_old")[0]
        assert call.status == "failed" and call.error == "the host restarted during the call"
        closed = host.interactions.get(ia.id)
        assert (closed.status, closed.close_reason) == ("closed", "the host restarted")

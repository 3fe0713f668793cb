"""The host against real MCP servers (a Python SDK test server over stdio and over HTTP
on loopback): connections, tool calls, and their requests answered through the same
InteractionService path the browser uses."""

from __future__ import annotations

import hashlib
import json
import os
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
from sqlmodel import Session, select

from tests import prepared, processes
from tests.conftest import FIXTURES
from tests.e2e.server import free_port
from tests.helpers import WAIT
from webui.admin import create_user
from webui.audit.log import AuditLog
from webui.errors import InteractionClosed, InvalidAnswer
from webui.events import EventHub
from webui.host.config import Capture, McpSourceChanged, check_capture
from webui.host.service import HostService
from webui.interactions.service import InteractionService
from webui.store.db import make_engine
from webui.store.models import AuditEvent, Interaction

pytestmark = pytest.mark.anyio
SERVER = FIXTURES / "host_server.py"
TIMEOUT = WAIT  # a bound, not a speed check (tests/helpers.py)


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
    # a migrated store copied, not migrated again for each test
    engine = make_engine(f"sqlite:///{prepared.copy_store(tmp_path / 'host.sqlite3')}")
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
    servers = {"Test_Stdio": processes.python_script(SERVER, "stdio")}
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
    servers = {"t": processes.python_script(SERVER, "stdio")}
    host = await make_host(tmp_path, servers, ["mcp-t"], expiry=1.0)
    async with host.service.running():
        conv = host.service.create_conversation(
            account_id=host.account_id, title="t", selection=None, actor="a"
        )
        with host.hub.subscribe("interactions") as events:
            row = await host.service.call_tool(conv.id, "mcp-t", "wait", {}, actor="a")
            kinds = [e.kind async for e in _drain(events)]
        assert row.result is not None
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
        assert echoed.result is not None
        assert json.loads(echoed.result["content"][0]["text"]) == {"echo": {"a": 1}}


def server_processes() -> set[int]:
    """Ids of the processes running the test server for this test process (read from /proc):
    its children running it (a real exec), or the fork server's children (the test server is
    the only thing this module has it fork; each is its launcher's, a child of this process)."""
    forks = processes.fork_server_pid() if not processes.exec_only else None
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # it ended while we looked
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state == "Z":
            continue  # ended, its parent about to reap it
        if int(ppid) == forks or (
            int(ppid) == os.getpid()
            and str(SERVER).encode() in cmdline
            and b"stdio" in cmdline
            and processes.SHIM.encode() not in cmdline
        ):
            found.add(int(entry.name))
    return found


async def gone(pid: int) -> bool:
    """Whether the process ended (bounded wait: closing a client waits for its process)."""
    with anyio.move_on_after(TIMEOUT):
        while Path(f"/proc/{pid}").exists():
            await anyio.sleep(0.05)  # the child is being reaped; bounded above
        return True
    return False


async def whoami(host: Host, conv: str, server: str = "mcp-test-stdio") -> tuple[int, Any, Any]:
    """(server process id, its HOST_TEST_MARK, the call row) from a `whoami` call."""
    row = await host.service.call_tool(conv, server, "whoami", {}, actor="a")
    assert row.status == "success", (row.status, row.error)
    assert row.result is not None
    value = json.loads(row.result["content"][0]["text"])
    return value["pid"], value["mark"], row


def write_marked(root: Path, mark: str, *, kept: bool) -> None:
    """One stdio server whose process reports `mark`; `kept` lists it in host_owned_servers."""
    servers = {
        "Test_Stdio": {
            **processes.python_script(SERVER, "stdio"),
            "env": {"HOST_TEST_MARK": mark},
        }
    }
    write_config(root, servers, ["mcp-test-stdio"])
    if kept:
        with (root / "config.yaml").open("a", encoding="utf-8") as f:
            f.write("mcp:\n  host_owned_servers: [mcp-test-stdio]\n")


@pytest.fixture
async def kept(tmp_path: Path) -> AsyncIterator[Host]:
    h = await make_host(tmp_path, {}, [])
    write_marked(h.root, "one", kept=True)
    async with h.service.running():
        yield h


async def test_a_per_call_server_gets_a_new_process_for_each_call_closed_when_it_ends(host: Host) -> None:
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    await host.service.connect(conv.id, "mcp-test-stdio")  # lists the tools, then closes
    assert server_processes() == set()
    first, _, _ = await whoami(host, conv.id)
    assert await gone(first)
    second, _, _ = await whoami(host, conv.id)
    assert second != first and await gone(second)
    assert server_processes() == set()
    section = host.service.connection_state(conv.id, "mcp-test-stdio")
    assert section is not None and section.state == "ready" and "whoami" in {t.name for t in section.tools}


async def test_a_kept_server_keeps_one_client_per_conversation_until_disconnected(kept: Host) -> None:
    host = kept
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    other = host.service.create_conversation(account_id=host.account_id, title="u", selection=None, actor="a")
    first, _, _ = await whoami(host, conv.id)
    again, _, _ = await whoami(host, conv.id)
    assert again == first  # the call ending closed nothing
    theirs, _, _ = await whoami(host, other.id)
    assert theirs != first  # a conversation of its own gets a client of its own
    assert server_processes() == {first, theirs}
    assert await host.service.disconnect(conv.id, "mcp-test-stdio", actor="user:ann") == 1
    assert await gone(first)
    assert server_processes() == {theirs}
    assert host.service.kept_clients(conv.id) == []
    assert await host.service.disconnect(conv.id, "mcp-test-stdio", actor="user:ann") == 0
    rebuilt, _, _ = await whoami(host, conv.id)  # nothing replayed: the next call builds a new one
    assert rebuilt not in (first, theirs)
    ia = None
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await host.service.call_tool(other.id, "mcp-test-stdio", "wait", {}, actor="a")

        tg.start_soon(call)
        ia = await next_pending(host)
        await host.service.close_conversation(other.id)
    assert ia is not None
    assert host.interactions.get(ia.id).close_reason in ("conversation closed", "connection closed")
    assert await gone(theirs)
    assert server_processes() == {rebuilt}
    with Session(host.service.engine) as s:
        closes = s.exec(select(AuditEvent).where(AuditEvent.event == "host.server.closed")).all()
    assert any((e.actor, e.outcome) == ("user:ann", "disconnected") for e in closes)


async def test_closing_the_host_closes_every_kept_client(tmp_path: Path) -> None:
    h = await make_host(tmp_path, {}, [])
    write_marked(h.root, "one", kept=True)
    async with h.service.running():
        conv = h.service.create_conversation(account_id=h.account_id, title="t", selection=None, actor="a")
        pid, _, _ = await whoami(h, conv.id)
        assert server_processes() == {pid}
    assert await gone(pid)


async def test_an_edited_file_is_used_by_the_next_call_and_each_call_keeps_its_capture(host: Host) -> None:
    write_marked(host.root, "one", kept=False)
    path = host.root / "mcp" / "servers.json"
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    _, mark, row = await whoami(host, conv.id)
    old_digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert (mark, row.source, row.source_digest) == ("one", str(path), old_digest)
    write_marked(host.root, "two", kept=False)
    _, mark, row2 = await whoami(host, conv.id)
    assert (mark, row2.source_digest) == ("two", "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest())
    stored = {c.id: (c.source, c.source_digest) for c in host.service.calls(conv.id)}
    assert stored == {row.id: (str(path), old_digest), row2.id: (str(path), row2.source_digest)}
    # continuing work recorded under the old capture is what reports the change
    with pytest.raises(McpSourceChanged, match="changed since it was captured"):
        check_capture(Capture("mcp-test-stdio", Path(row.source), row.source_digest))


async def test_an_edited_file_rebuilds_a_kept_client_for_new_work(kept: Host) -> None:
    host = kept
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    fresh = host.service.create_conversation(account_id=host.account_id, title="u", selection=None, actor="a")
    pid, mark, _ = await whoami(host, conv.id)
    assert mark == "one"
    write_marked(host.root, "two", kept=True)
    new_pid, mark, _ = await whoami(host, conv.id)
    assert mark == "two" and new_pid != pid
    assert await gone(pid)  # the changed binding closed the old client
    _, mark, _ = await whoami(host, fresh.id)  # a brand-new conversation works too
    assert mark == "two"
    state = host.service.connection_state(conv.id, "mcp-test-stdio")
    assert state is not None and state.state == "ready"


async def test_a_call_running_on_a_kept_client_finishes_there_when_the_file_changes(kept: Host) -> None:
    host = kept
    conv = host.service.create_conversation(account_id=host.account_id, title="t", selection=None, actor="a")
    pid, _, _ = await whoami(host, conv.id)

    async def book(ia: Interaction) -> None:
        write_marked(host.root, "two", kept=True)
        new_pid, mark, _ = await whoami(host, conv.id)  # new work meanwhile: a new client
        assert (mark, new_pid != pid) == ("two", True)
        assert pid in server_processes()  # the old one still serves the running call
        await host.interactions.answer(ia.id, action="decline", content=None, channel="ui")

    row = await call_and_answer(host, conv.id, "mcp-test-stdio", "book", book, arguments={}, actor="a")
    assert row.status == "success"
    assert json.loads(row.result["content"][0]["text"]) == {"action": "decline", "content": None}
    assert await gone(pid)  # closed once its last call ended


@pytest.mark.parametrize("kept", [False, True], ids=["per-call", "kept"])
async def test_an_edited_file_is_used_by_the_next_call_over_http(
    tmp_path: Path, http_server: str, kept: bool
) -> None:
    host = await make_host(tmp_path, {"remote": {"type": "http", "url": http_server}}, ["mcp-remote"])
    if kept:
        with (host.root / "config.yaml").open("a", encoding="utf-8") as f:
            f.write("mcp:\n  host_owned_servers: [mcp-remote]\n")
    async with host.service.running():
        conv = host.service.create_conversation(
            account_id=host.account_id, title="t", selection=None, actor="a"
        )
        first = await host.service.call_tool(conv.id, "mcp-remote", "echo", {"n": 1}, actor="a")
        servers = {
            "remote": {"type": "http", "url": http_server},
            "other": {"type": "http", "url": http_server},
        }
        (host.root / "mcp" / "servers.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
        second = await host.service.call_tool(conv.id, "mcp-remote", "echo", {"n": 2}, actor="a")
        assert (first.status, second.status) == ("success", "success"), second.error
        assert first.source == second.source and first.source_digest != second.source_digest
        with Session(host.service.engine) as s:
            closes = s.exec(select(AuditEvent).where(AuditEvent.event == "host.server.closed")).all()
        reasons = [e.outcome for e in closes]
        # per call: each call's client closed as it ended; kept: the edit retired the first client
        assert reasons == (["source changed"] if kept else ["call ended", "call ended"])


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
    from webui.host.transport import http_client

    client = http_client("https://mcp.example.com/mcp", {"X-Token": "t"}, 1)
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

    servers = {"t": processes.python_script(SERVER, "stdio")}
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

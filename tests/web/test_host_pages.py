"""The host's pages through TestClient, against the Python SDK test server
over stdio: the servers page with good and broken configurations, conversations and their
selections, tool calls that run in the background and are followed by long-polling, the
servers' form and URL requests answered in the inbox, and who may see what.

Every wait is bounded: the activity long-poll answers within its own bound (20 s) and the
loops that follow it stop at a deadline."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select
from sse_starlette import ServerSentEvent

from tests import processes
from tests.conftest import FIXTURES
from tests.helpers import WAIT
from tests.web.conftest import ADMIN, USER, Web, prepare, rendered
from webui.app import create_app
from webui.auth.ui import COOKIE_NAME, UiUser
from webui.host.forms import tool_form_problem
from webui.host.service import HostService
from webui.store.models import AuditEvent
from webui.web.conversations import Feed, conversation_stream
from webui.web.state import app_state

SERVER = FIXTURES / "host_server.py"
HX = {"HX-Request": "true"}
FOLLOW_SECONDS = WAIT  # a bound, not a speed check (tests/helpers.py)
FINISHED = ("success", "error", "failed")
NOTHING_WAITING = '<p id="no-pending" class="muted">Nothing is waiting'


def stdio() -> dict[str, Any]:
    """The test server's servers.json entry (forked by the fork server: tests/processes.py)."""
    return processes.python_script(SERVER, "stdio")


@dataclass
class Host:
    web: Web
    root: Path

    @property
    def client(self) -> TestClient:
        return self.web.client

    @property
    def service(self) -> HostService:
        return app_state(self.client.app).host


def write_root(root: Path, servers: dict[str, Any], config: str) -> None:
    (root / "mcp").mkdir(parents=True, exist_ok=True)
    (root / "mcp" / "servers.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    (root / "config.yaml").write_text(config, encoding="utf-8")


def start(tmp_path: Path, *, expiry: float = 300.0, root: Path | None = None) -> Generator[Host, None, None]:
    if root is None:
        root = tmp_path / "root"
        write_root(
            root,
            {"Test_Stdio": stdio(), "Other Server": stdio()},
            "defaults:\n  mcp_servers: [mcp-test-stdio]\n"
            "mcp:\n  host_owned_servers: [mcp-other-server]\n"
            "  protocol_overrides:\n    mcp-other-server: legacy\n",
        )
    settings = prepare(tmp_path / "data").model_copy(
        # host_server_user "": the test server is this interpreter, which may live where
        # an unprivileged user cannot run it (tests/security/test_host_isolation.py drops).
        update={"root_dir": root, "interaction_expiry_seconds": expiry, "host_server_user": ""}
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield Host(Web(client, settings), root)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    yield from start(tmp_path)


@pytest.fixture
def short_expiry(tmp_path: Path) -> Iterator[Host]:
    yield from start(tmp_path, expiry=1.0)


# --------------------------------------------------------------------------- helpers


def create(host: Host, csrf: str, title: str, **form: Any) -> str:
    r = host.client.post(
        "/host/conversations",
        data={"title": title, "csrf_token": csrf, **form},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    return r.headers["location"].rsplit("/", 1)[1]


def connect(host: Host, csrf: str, conv: str, server: str = "mcp-test-stdio") -> str:
    r = host.client.post(
        f"/host/conversations/{conv}/connect", data={"server": server}, headers={**HX, "X-CSRF-Token": csrf}
    )
    assert r.status_code == 200, r.text
    template, block, context = rendered(r)
    assert (template, block) == ("host/conversation.html", "server")
    assert (context["section"].id, context["section"].state) == (server, "ready"), context["section"].error
    assert 'data-state="ready"' in r.text, r.text
    return r.text


def tool_dom(page: str, tool: str) -> str:
    m = re.search(rf'<div id="(tool-\w+)" class="tool" data-tool="{tool}">', page)
    assert m, page
    return m.group(1)


def call(host: Host, csrf: str, conv: str, tool: str, server: str = "mcp-test-stdio", **fields: Any) -> Any:
    return host.client.post(
        f"/host/conversations/{conv}/call",
        data={"server": server, "tool": tool, **fields},
        headers={**HX, "X-CSRF-Token": csrf},
    )


def activity_of(response: Any) -> Any:
    """The conversation's calls and requests, as the activity fragment was given them."""
    template, block, context = rendered(response)
    assert (template, block) == ("host/conversation.html", "activity"), (template, block)
    return context["activity"]


def follow(host: Host, conv: str, until: Callable[[Any], bool], first: Any | None = None) -> Any:
    """Long-poll the conversation's activity until `until(activity)` holds (bounded); returns
    the last activity fragment's response."""
    r = first or host.client.get(f"/host/conversations/{conv}/activity", headers=HX)
    deadline = time.monotonic() + FOLLOW_SECONDS
    while not until(activity_of(r)):
        view = activity_of(r)
        assert time.monotonic() < deadline, r.text
        assert view.live and 'data-live="true"' in r.text, f"nothing is running any more:\n{r.text}"
        assert f"?since={view.token}" in r.text  # the URL htmx polls next
        r = host.client.get(f"/host/conversations/{conv}/activity?since={view.token}", headers=HX)
        assert r.status_code == 200, r.text
    return r


def pending_request(view: Any) -> str | None:
    return next((r.interaction.id for r in view.requests if r.interaction.status == "pending"), None)


def finished_call(view: Any, tool: str) -> bool:
    return any(c.tool == tool and c.status in FINISHED for c in view.calls)


def calls_of(response: Any, tool: str) -> list[Any]:
    return [c for c in activity_of(response).calls if c.tool == tool]


def result_texts(response: Any) -> list[Any]:
    """The text content of the calls' results, each parsed as JSON (newest call first)."""
    texts = [json.loads(t) for c in activity_of(response).calls for t in c.texts]
    drawn = [
        json.loads(html.unescape(t))
        for t in re.findall(r'<pre class="result-text">(.*?)</pre>', response.text, re.S)
    ]
    assert drawn == texts  # each is shown as it came
    return texts


def card(page: str, interaction_id: str) -> str:
    m = re.search(rf'<article id="interaction-{interaction_id}".*?</article>', page, re.S)
    assert m, page
    return m.group(0)


def answer(host: Host, csrf: str, iid: str, data: dict[str, Any]) -> Any:
    return host.client.post(
        f"/interactions/{iid}/answer", data=data, headers={**HX, "X-CSRF-Token": csrf}, follow_redirects=False
    )


def ask(host: Host, csrf: str, conv: str, tool: str) -> tuple[str, Any]:
    """Call `tool` and wait until its server asks; returns (interaction id, activity response)."""
    r = call(host, csrf, conv, tool)
    assert r.status_code == 200, r.text
    fragment = follow(host, conv, lambda a: pending_request(a) is not None, first=r)
    iid = pending_request(activity_of(fragment))
    assert iid is not None
    return iid, fragment


# --------------------------------------------------------------------------- servers page


def server_rows(response: Any) -> dict[str, Any]:
    """The servers page's rows by server id, in the page's order."""
    template, _, context = rendered(response)
    assert template == "host/servers.html"
    return {row.server.id: row for row in context["rows"]}


def connected(row: Any) -> list[tuple[str | None, str]]:
    """A server row's connections: (conversation title or None for the host's, state)."""
    return [(conv.title if conv else None, conn.state) for conv, conn in row.connections]


def test_the_servers_page_lists_each_server_and_only_admins_see_commands(host: Host) -> None:
    csrf = host.web.login(*ADMIN)
    page = host.client.get("/host/servers")
    assert page.status_code == 200
    text = page.text
    assert '<a href="/host/servers" aria-current="page">Connected servers</a>' in text  # the nav link
    rows = server_rows(page)
    assert list(rows) == ["mcp-test-stdio", "mcp-other-server"]
    test_row, other_row = rows.values()
    assert (test_row.server.name, other_row.server.name) == ("Test_Stdio", "Other Server")
    source = str(host.root / "mcp" / "servers.json")
    assert test_row.source == source  # admins: the absolute path
    assert (test_row.selected, other_row.selected) == (True, False)
    assert (test_row.host_owned, other_row.host_owned) == (False, True)
    assert (test_row.protocol, other_row.protocol) == ("auto", "legacy")
    assert test_row.command is not None and str(SERVER) in test_row.command
    assert connected(test_row) == []
    # what the admin reads
    test = section(text, "mcp-test-stdio")
    other = section(text, "mcp-other-server")
    assert "Test_Stdio" in test and "Other Server" in other
    assert f"<code>{source}</code>" in test
    assert re.search(r'<dd class="selected">yes</dd>', test) and re.search(
        r'<dd class="selected">no</dd>', other
    )
    assert "kept per conversation: one client per conversation" in other
    assert "per call: a new client (and process) for each call" in test
    assert "legacy" in other and "auto (the handshake-era protocol)" in test
    assert html.escape(str(SERVER)) in test and 'class="command"' in test
    assert "not connected" in test

    r = host.client.post(
        "/host/servers/mcp-test-stdio/connect", data={"csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/host/servers#server-mcp-test-stdio"
    page = host.client.get("/host/servers")
    test_row = server_rows(page)["mcp-test-stdio"]
    assert connected(test_row) == [("Server check: Test_Stdio", "ready")]
    tool_names = ["book", "pick_tags", "ask_secret", "open_link", "wait", "echo", "whoami"]
    assert test_row.ready is not None and sorted(t.name for t in test_row.ready.tools) == sorted(tool_names)
    test = section(page.text, "mcp-test-stdio")
    assert '<span class="badge ready">ready</span>' in test and "Server check: Test_Stdio" in test
    for tool in tool_names:
        assert f"<code>{tool}</code>" in test
    # the check conversation is reused, not multiplied
    host.client.post("/host/servers/mcp-test-stdio/connect", data={"csrf_token": csrf})
    listing = host.client.get("/host/conversations")
    titles = [c.title for c in rendered(listing).context["conversations"]]
    assert titles.count("Server check: Test_Stdio") == 1
    assert listing.text.count("Server check: Test_Stdio") == 1

    # a host-owned server's client is kept, and belongs to the conversation that connected it
    host.client.post("/host/servers/mcp-other-server/connect", data={"csrf_token": csrf})
    page = host.client.get("/host/servers")
    other_row = server_rows(page)["mcp-other-server"]
    assert connected(other_row) == [("Server check: Other Server", "ready")]
    assert other_row.ready is not None and "echo" in [t.name for t in other_row.ready.tools]
    other = section(page.text, "mcp-other-server")
    assert "(client open)" in other and "<code>echo</code>" in other
    assert "(client open)" not in section(page.text, "mcp-test-stdio")  # per call: nothing stays open

    host.web.logout()
    host.web.login(*USER)
    page = host.client.get("/host/servers")
    test_row = server_rows(page)["mcp-test-stdio"]
    assert rendered(page).context["root"] is None
    assert test_row.source == "mcp/servers.json" and test_row.command is None
    assert connected(test_row) == []  # the admin's connection is not ann's
    text = page.text
    test = section(text, "mcp-test-stdio")
    assert "<code>mcp/servers.json</code>" in test and str(host.root) not in text
    assert 'class="command"' not in text and html.escape(str(SERVER)) not in text
    assert "not connected" in test


def section(page: str, server_id: str) -> str:
    m = re.search(rf'<section id="server-{server_id}".*?</section>', page, re.S)
    assert m, page
    return m.group(0)


def test_a_broken_configuration_is_listed_and_the_pages_still_render(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_root(
        root,
        {"Good": stdio(), "Bad": {**stdio(), "disabled": True}},
        "defaults:\n  mcp_servers: [mcp-nope]\n",
    )
    (root / "mcp" / "extra.jsonc").write_text("{}", encoding="utf-8")
    for h in start(tmp_path, root=root):
        csrf = h.web.login(*USER)
        r = h.client.get("/host/servers")
        assert r.status_code == 200
        context = rendered(r).context
        assert context["config"] is None and context["rows"] == []
        assert len(context["problems"]) == 3
        given = " ".join(context["problems"])
        assert "disabled: not supported" in given and "JSONC is not supported" in given
        assert "no configured MCP server has id 'mcp-nope'" in given
        assert "mcp/servers.json" in given and str(root) not in given  # not an admin: relative paths
        assert "mcp/servers.json" in context["files"]
        problems = re.search(r'<ul class="problems">(.*?)</ul>', r.text, re.S)
        assert problems, r.text
        items = re.findall(r"<li>(.*?)</li>", problems.group(1), re.S)
        assert len(items) == 3 and "The configuration has 3 problems" in r.text
        joined = html.unescape(" ".join(items))
        assert "disabled: not supported" in joined and "JSONC is not supported" in joined
        assert "no configured MCP server has id 'mcp-nope'" in joined
        assert "mcp/servers.json" in joined and str(root) not in r.text  # not an admin: relative paths
        assert "<code>mcp/servers.json</code>" in r.text  # the files found

        listing = h.client.get("/host/conversations")
        assert listing.status_code == 200 and "has problems, so no conversation can start" in listing.text
        assert rendered(listing).context["config"] is None
        r = h.client.post(
            "/host/conversations", data={"title": "x", "csrf_token": csrf}, follow_redirects=False
        )
        assert r.status_code == 422 and "steamharness host validate" in r.text
        problem = rendered(r).context["problem"]
        assert "steamharness host validate" in problem and str(root) not in problem
        assert rendered(r).context["values"] == {"title": "x", "mode": "defaults", "servers": []}
        assert str(root) not in r.text

        h.web.logout()
        h.web.login(*ADMIN)
        admin_page = h.client.get("/host/servers")
        assert str(root / "mcp" / "servers.json") in rendered(admin_page).context["files"]
        assert str(root / "mcp" / "servers.json") in admin_page.text


def test_an_unset_environment_reference_is_a_problem_of_that_server(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_root(root, {"Needs": {**stdio(), "env": {"TOKEN": "${SH_HOST_TEST_UNSET_VAR}"}}}, "")
    for h in start(tmp_path, root=root):
        h.web.login(*ADMIN)
        page = h.client.get("/host/servers")
        [problem] = server_rows(page)["mcp-needs"].problems
        assert "environment variable SH_HOST_TEST_UNSET_VAR is not set" in problem
        text = section(page.text, "mcp-needs")
        assert "environment variable SH_HOST_TEST_UNSET_VAR is not set" in html.unescape(text)
        assert "(env: TOKEN)" in text  # names only, never values


# --------------------------------------------------------------------------- conversations


def test_a_conversation_keeps_the_defaults_none_or_the_chosen_servers(host: Host) -> None:
    csrf = host.web.login(*USER)
    listing = host.client.get("/host/conversations")
    assert rendered(listing).context["config"].default_servers == ["mcp-test-stdio"]
    assert rendered(listing).context["values"]["mode"] == "defaults"
    form = listing.text
    assert 'name="selection" value="defaults" checked' in form and "<code>mcp-test-stdio</code>)" in form
    defaults = create(host, csrf, "inherits", selection="defaults")
    none = create(host, csrf, "nothing", selection="choose")
    chosen = create(host, csrf, "both", selection="choose", server=["mcp-other-server", "mcp-test-stdio"])
    svc = host.service
    assert svc.conversation(defaults).selection == ["mcp-test-stdio"]
    assert svc.conversation(none).selection == []
    assert svc.conversation(chosen).selection == ["mcp-other-server", "mcp-test-stdio"]

    r = host.client.get(f"/host/conversations/{none}")
    assert rendered(r).context["sections"] == []
    page = r.text
    assert "none: this conversation selected no server" in page and 'class="card host-server"' not in page
    r = host.client.get(f"/host/conversations/{chosen}")
    sections = rendered(r).context["sections"]
    assert [(x.id, x.state) for x in sections] == [
        ("mcp-other-server", "not connected"),
        ("mcp-test-stdio", "not connected"),
    ]
    page = r.text
    for sid in ("mcp-other-server", "mcp-test-stdio"):
        # connected on demand: the section connects itself when the page loads (htmx)
        assert re.search(rf'<section id="server-{sid}"[^>]*data-state="not connected"', page)
        assert f'<input type="hidden" name="server" value="{sid}">' in page
    assert 'hx-trigger="load, submit"' in page

    r = host.client.post(
        "/host/conversations",
        data={"title": "bad", "selection": "choose", "server": "mcp-nope", "csrf_token": csrf},
    )
    assert r.status_code == 422 and "no configured MCP server has id &#39;mcp-nope&#39;" in r.text
    assert rendered(r).context["values"] == {"title": "bad", "mode": "choose", "servers": ["mcp-nope"]}
    listing = host.client.get("/host/conversations")
    listed = [c.id for c in rendered(listing).context["conversations"]]
    assert sorted(listed) == sorted([defaults, none, chosen])
    for conv in (defaults, none, chosen):
        assert f'href="/host/conversations/{conv}"' in listing.text


def test_calling_echo_runs_in_the_background_and_the_result_follows(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "echoes", selection="defaults")
    section_html = connect(host, csrf, conv)
    assert 'data-tool="echo"' in section_html and "Call echo</button>" in section_html
    r = call(host, csrf, conv, "echo")
    assert r.status_code == 200 and "<html" not in r.text
    [started] = calls_of(r, "echo")
    assert started.status in ("connecting", "running", "success") and started.server_id == "mcp-test-stdio"
    fragment = follow(host, conv, lambda a: finished_call(a, "echo"), first=r)
    assert [c.status for c in calls_of(fragment, "echo")] == ["success"]
    assert result_texts(fragment) == [{"echo": {}}]
    assert activity_of(fragment).live is False  # nothing left to follow
    assert 'data-live="false"' in fragment.text and "hx-get" not in fragment.text
    r = host.client.get(f"/host/conversations/{conv}")
    assert [c.texts for c in rendered(r).context["activity"].calls] == [['{"echo": {}}']]
    assert "&#34;echo&#34;" in r.text  # escaped text content

    # a tool the server does not have, and a server the conversation did not select
    assert call(host, csrf, conv, "nope").status_code == 404
    assert call(host, csrf, conv, "echo", server="mcp-other-server").status_code == 404


def test_a_tool_whose_schema_has_no_form_takes_json_arguments(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "json", selection="defaults")
    connect(host, csrf, conv)
    conn = host.service.connection_state(conv, "mcp-test-stdio")
    assert conn is not None
    nested = {"type": "object", "properties": {"point": {"type": "object"}}, "required": ["point"]}
    conn.tools = [
        types.Tool(name=t.name, description=t.description, input_schema=nested) if t.name == "echo" else t
        for t in conn.tools
    ]
    r = host.client.get(f"/host/conversations/{conv}")
    [section] = rendered(r).context["sections"]
    [echo] = [t for t in section.tools if t.name == "echo"]
    assert echo.problem == "field 'point' has type 'object'"
    page = r.text
    dom = tool_dom(page, "echo")
    assert dom == echo.dom
    assert f'<textarea id="{dom}-arguments" name="arguments_json"' in page
    assert "No form for this tool: field &#39;point&#39; has type &#39;object&#39;." in page

    for bad, why in (
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ("{}", "&#39;point&#39; is a required"),
    ):
        r = call(host, csrf, conv, "echo", arguments_json=bad)
        assert r.status_code == 422 and why in r.text, r.text
        template, block, context = rendered(r)
        assert (template, block) == ("host/conversation.html", "tool") and context["t"].arguments_json == bad
        assert html.unescape(why) in (context["t"].json_error or "")  # the reason, shown beside the field
        assert r.headers["hx-retarget"] == f"#{dom}" and r.headers["hx-reswap"] == "outerHTML"
    r = call(host, csrf, conv, "echo", arguments_json='{"point": {"x": 1, "label": "<b>"}}')
    assert r.status_code == 200
    fragment = follow(host, conv, lambda a: finished_call(a, "echo"), first=r)
    assert result_texts(fragment) == [{"echo": {"point": {"x": 1, "label": "<b>"}}}]
    assert "&lt;b&gt;" in fragment.text and "<b>" not in fragment.text


def test_tool_forms_are_generated_where_the_schema_allows() -> None:
    assert tool_form_problem({"type": "object", "properties": {}}) is None
    flat = {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "n": {"type": "integer"},
            "on": {"type": "boolean"},
            "size": {"type": "string", "enum": ["s", "l"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    assert tool_form_problem(flat) is None
    assert "references" in str(tool_form_problem({"type": "object", "properties": {"a": {"$ref": "#/x"}}}))
    assert "list of objects" in str(
        tool_form_problem(
            {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object"}}}}
        )
    )
    assert "no single type" in str(tool_form_problem({"type": "object", "properties": {"a": {}}}))


# --------------------------------------------------------------------------- requests


def test_a_form_request_is_answered_in_the_conversation_view_and_the_result_shows(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "Hotel <trip>", selection="defaults")
    connect(host, csrf, conv)
    iid, fragment = ask(host, csrf, conv, "book")
    [pending] = activity_of(fragment).pending
    assert pending.interaction.id == iid and pending.server_name == "Test_Stdio"
    assert "Test_Stdio asks" in fragment.text and f'href="/inbox#interaction-{iid}"' in fragment.text
    assert "1 request from the server waits for an answer" in fragment.text

    view = host.client.get("/inbox").text
    html_card = card(view, iid)
    assert 'data-origin="host" data-server="mcp-test-stdio"' in html_card
    assert f'data-conversation="{conv}"' in html_card and f'sse-swap="resolved-{iid}"' in html_card
    assert "Origin: <strong>external server</strong> Test_Stdio (<code>mcp-test-stdio</code>)" in html_card
    assert f'<a href="/host/conversations/{conv}">Hotel &lt;trip&gt;</a>' in html_card
    assert "book please" in html_card and "expires <time" in html_card
    p = f"{iid}-"
    assert f'<label for="{p}name">Guest name' in html_card
    assert re.search(rf'<input id="{p}nights" name="{p}nights" type="number" value="2"', html_card)
    assert '<option value="double">Double room</option>' in html_card
    assert re.search(r'value="cancel"[^>]*>Cancel</button>', html_card) and "Cancel run" not in html_card
    assert "run-timeline" not in html_card

    # validated against the server's schema: the room must be one of its options
    r = answer(host, csrf, iid, {"action": "accept", f"{p}name": "Ann", f"{p}room": "suite"})
    assert r.status_code == 422 and "choose one of the options" in r.text
    assert answer(host, csrf, iid, {"action": "accept", f"{p}name": "Ann"}).status_code == 422
    good = {
        "action": "accept",
        f"{p}name": "Ann",
        f"{p}nights": "3",
        f"{p}breakfast": "on",
        f"{p}room": "double",
    }
    r = answer(host, csrf, iid, good)
    assert r.status_code == 200, r.text
    state = re.search(r'<p class="state[^"]*" role="status">(.*?)</p>', r.text)
    assert state and state.group(1) == "Answer sent to Test_Stdio: accepted in the browser by user:ann"
    assert "done" not in state.group(1).lower()
    assert "<dt>Room</dt><dd>Double room</dd>" in r.text

    fragment = follow(host, conv, lambda a: finished_call(a, "book"))
    assert result_texts(fragment) == [
        {"action": "accept", "content": {"name": "Ann", "nights": 3, "breakfast": True, "room": "double"}}
    ]
    [request] = activity_of(fragment).requests
    assert request.state == "Answer sent to Test_Stdio: accepted in the browser by user:ann"
    assert "Answer sent to Test_Stdio: accepted" in fragment.text
    # the identical answer again is harmless; a different one is refused
    assert answer(host, csrf, iid, good).status_code == 200
    r = answer(host, csrf, iid, {**good, f"{p}nights": "4"})
    assert r.status_code == 409 and "already" in r.text
    assert answer(host, csrf, iid, {"action": "decline"}).status_code == 409
    assert NOTHING_WAITING in host.client.get("/inbox").text


def test_a_url_request_shows_its_destination_and_opens_only_on_a_click(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "links", selection="defaults")
    connect(host, csrf, conv)
    iid, fragment = ask(host, csrf, conv, "open_link")
    [pending] = activity_of(fragment).pending
    assert pending.interaction.kind == "url" and pending.interaction.url == "https://example.com/sign?x=1"
    assert 'Destination: <code class="url">https://example.com/sign?x=1</code>' in fragment.text
    html_card = card(host.client.get("/inbox").text, iid)
    assert 'data-kind="url"' in html_card
    assert "asks you to open a page on <strong>example.com</strong>" in html_card
    assert '<code class="url">https://example.com/sign?x=1</code>' in html_card
    links = re.findall(r"<a [^>]*https://example.com[^>]*>[^<]*</a>", html_card)
    assert links == [
        '<a class="button secondary" href="https://example.com/sign?x=1" target="_blank"'
        ' rel="noopener noreferrer">Open in a new tab</a>'
    ]
    assert "http-equiv" not in html_card and "window.open" not in html_card
    assert re.search(r'value="accept">I&#39;ve completed it</button>', html_card)
    r = answer(host, csrf, iid, {"action": "accept"})
    assert r.status_code == 200
    assert "Answer sent to Test_Stdio: confirmed as completed in the browser by user:ann" in r.text
    fragment = follow(host, conv, lambda a: finished_call(a, "open_link"))
    assert result_texts(fragment) == [{"action": "accept", "content": None}]


def test_declining_and_a_multi_select_reach_the_server(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "tags", selection="defaults")
    connect(host, csrf, conv)
    iid, _ = ask(host, csrf, conv, "pick_tags")
    html_card = card(host.client.get("/inbox").text, iid)
    assert "<legend>Tags" in html_card and f'name="{iid}-tags" value="blue"> Blue' in html_card
    assert answer(host, csrf, iid, {"action": "accept", f"{iid}-tags": ["red", "blue"]}).status_code == 200
    fragment = follow(host, conv, lambda a: finished_call(a, "pick_tags"))
    assert result_texts(fragment) == [{"action": "accept", "content": {"tags": ["red", "blue"]}}]

    iid, _ = ask(host, csrf, conv, "pick_tags")
    r = answer(host, csrf, iid, {"action": "decline"})
    assert "Answer sent to Test_Stdio: declined in the browser by user:ann" in r.text
    fragment = follow(
        host, conv, lambda a: [c.status for c in a.calls if c.tool == "pick_tags"] == ["success"] * 2
    )
    assert {"action": "decline", "content": None} in result_texts(fragment)


def test_a_sensitive_field_is_refused_with_its_reason(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "secret", selection="defaults")
    connect(host, csrf, conv)
    r = call(host, csrf, conv, "ask_secret")
    fragment = follow(host, conv, lambda a: finished_call(a, "ask_secret"), first=r)
    [request] = activity_of(fragment).requests
    assert request.interaction.status == "closed"
    assert request.state.startswith("Refused by the host: field 'password' is declared sensitive")
    assert "Refused by the host: field &#39;password&#39; is declared sensitive" in fragment.text
    assert "sensitive" in result_texts(fragment)[0]["refused"]
    assert NOTHING_WAITING in host.client.get("/inbox").text  # never a form


def test_an_unanswered_request_expires_and_the_server_gets_cancel(short_expiry: Host) -> None:
    host = short_expiry
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "slow", selection="defaults")
    connect(host, csrf, conv)
    r = call(host, csrf, conv, "wait")
    fragment = follow(host, conv, lambda a: finished_call(a, "wait"), first=r)
    assert result_texts(fragment) == [{"action": "cancel", "content": None}]
    [request] = activity_of(fragment).requests
    assert (request.interaction.status, request.state) == ("closed", "Expired without an answer")
    assert "Expired without an answer" in fragment.text
    iid = request.interaction.id
    r = answer(host, csrf, iid, {"action": "accept", f"{iid}-x": "late"})
    assert r.status_code == 410 and "Expired without an answer" in r.text


def test_closing_a_conversation_ends_its_open_request_and_refuses_new_calls(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "closing", selection="defaults")
    connect(host, csrf, conv)
    iid, _ = ask(host, csrf, conv, "wait")
    r = host.client.post(
        f"/host/conversations/{conv}/close", data={"csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    fragment = follow(host, conv, lambda a: finished_call(a, "wait"))
    [request] = activity_of(fragment).requests
    assert (request.interaction.id, request.interaction.status) == (iid, "closed")
    assert request.state == "Ended without an answer: the conversation was closed"
    assert "Ended without an answer: the conversation was closed" in fragment.text
    page = host.client.get(f"/host/conversations/{conv}").text
    assert '<dd class="conversation-state">closed' in page and "Call echo" not in page
    assert call(host, csrf, conv, "echo").status_code == 409
    r = host.client.post(
        f"/host/conversations/{conv}/connect", data={"server": "mcp-test-stdio", "csrf_token": csrf}
    )
    assert r.status_code == 409


def test_a_host_owned_servers_request_is_labelled_with_the_calling_conversation(host: Host) -> None:
    """A kept client is the conversation's own; its requests are labelled with it."""
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "shared", selection="choose", server="mcp-other-server")
    connect(host, csrf, conv, "mcp-other-server")
    r = call(host, csrf, conv, "book", server="mcp-other-server")
    fragment = follow(host, conv, lambda a: pending_request(a) is not None, first=r)
    iid = pending_request(activity_of(fragment))
    assert iid is not None
    html_card = card(host.client.get("/inbox").text, iid)
    assert f'data-conversation="{conv}"' in html_card and "Other Server" in html_card
    assert answer(host, csrf, iid, {"action": "decline"}).status_code == 200
    fragment = follow(host, conv, lambda a: finished_call(a, "book"))
    assert result_texts(fragment) == [{"action": "decline", "content": None}]


def process_gone(pid: int) -> bool:
    """Whether the process ended, polling /proc (bounded: closing a client waits for it)."""
    deadline = time.monotonic() + FOLLOW_SECONDS
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # the child is being reaped; bounded above
    return True


def whoami_pid(host: Host, csrf: str, conv: str, server: str) -> int:
    """Call `whoami` once more; the process id of the server that answered it."""
    before = len(host.service.calls(conv))
    r = call(host, csrf, conv, "whoami", server=server)

    def done(view: Any) -> bool:
        return len(view.calls) > before and all(c.status in FINISHED for c in view.calls)

    fragment = follow(host, conv, done, first=r)
    return result_texts(fragment)[0]["pid"]


def test_disconnect_closes_the_conversations_kept_client_and_is_audited(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "kept", selection="choose", server="mcp-other-server")
    connect(host, csrf, conv, "mcp-other-server")
    pid = whoami_pid(host, csrf, conv, "mcp-other-server")
    assert Path(f"/proc/{pid}").exists()  # the call ended; the kept client did not
    page = host.client.get(f"/host/conversations/{conv}").text
    assert f'action="/host/conversations/{conv}/disconnect"' in page and "kept per conversation" in page
    data = {"server": "mcp-other-server"}
    assert host.client.post(f"/host/conversations/{conv}/disconnect", data=data).status_code == 403
    assert Path(f"/proc/{pid}").exists()
    r = host.client.post(
        f"/host/conversations/{conv}/disconnect", data={**data, "csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    assert process_gone(pid)
    assert host.service.kept_clients(conv) == []
    page = host.client.get(f"/host/conversations/{conv}").text
    assert "/disconnect" not in page and "no client is open; the next call starts one" in page
    assert "Call whoami" in page  # the tools stay listed; nothing reconnects by itself
    assert host.service.kept_clients(conv) == []
    r = host.client.post(
        f"/host/conversations/{conv}/disconnect",
        data={"server": "mcp-nope", "csrf_token": csrf},
        follow_redirects=False,
    )
    assert r.status_code == 404
    with Session(host.service.engine) as s:
        closes = s.exec(select(AuditEvent).where(AuditEvent.event == "host.server.closed")).all()
    assert [e.outcome for e in closes if e.actor == "user:ann"] == ["disconnected"]
    assert whoami_pid(host, csrf, conv, "mcp-other-server") != pid  # a new call: a new client


def test_a_per_call_server_leaves_no_process_after_its_call(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "per call", selection="defaults")
    connect(host, csrf, conv)
    pid = whoami_pid(host, csrf, conv, "mcp-test-stdio")
    assert process_gone(pid)
    page = host.client.get(f"/host/conversations/{conv}").text
    assert "/disconnect" not in page and "per call: each call starts its own client" in page


def test_a_cancelled_call_is_recorded_as_failed_not_left_running(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "cancelled", selection="defaults")
    connect(host, csrf, conv)
    service = host.service

    async def cancel_while_waiting() -> None:
        with service.interactions.hub.subscribe("interactions") as events:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_call_wait, service, conv)
                with anyio.fail_after(FOLLOW_SECONDS):
                    async for event in events:
                        if event.kind == "pending":
                            break
                tg.cancel_scope.cancel()

    assert host.client.portal is not None
    host.client.portal.call(cancel_while_waiting)
    (row,) = service.calls(conv)
    assert (row.status, row.error) == ("failed", "the call was cancelled before the server answered")
    assert row.finished_at is not None
    fragment = host.client.get(f"/host/conversations/{conv}/activity", headers=HX)
    [shown] = calls_of(fragment, "wait")
    assert (shown.status, shown.error) == ("failed", "the call was cancelled before the server answered")


# --------------------------------------------------------------------------- who may see what


def test_only_the_owner_and_admins_see_a_conversation_and_its_requests(host: Host) -> None:
    csrf = host.web.login(*ADMIN)
    conv = create(host, csrf, "root's", selection="defaults")
    connect(host, csrf, conv)
    iid, _ = ask(host, csrf, conv, "wait")
    host.web.logout()

    ann = host.web.login(*USER)
    for path in (f"/host/conversations/{conv}", f"/host/conversations/{conv}/activity"):
        assert host.client.get(path).status_code == 404
    for action, data in (
        ("connect", {"server": "mcp-test-stdio"}),
        ("call", {"server": "mcp-test-stdio", "tool": "echo"}),
        ("close", {}),
    ):
        r = host.client.post(f"/host/conversations/{conv}/{action}", data={**data, "csrf_token": ann})
        assert r.status_code == 404, action
    assert f"interaction-{iid}" not in host.client.get("/inbox").text
    assert answer(host, ann, iid, {"action": "decline"}).status_code == 404
    assert f"/host/conversations/{conv}" not in host.client.get("/host/conversations").text
    own = create(host, ann, "ann's", selection="choose")
    host.web.logout()

    csrf = host.web.login(*ADMIN)
    page = host.client.get(f"/host/conversations/{own}")
    assert page.status_code == 200 and "<dt>Owner</dt><dd>ann</dd>" in page.text
    assert f"interaction-{iid}" in host.client.get("/inbox").text
    assert answer(host, csrf, iid, {"action": "cancel"}).status_code == 200
    fragment = follow(host, conv, lambda a: finished_call(a, "wait"))
    assert result_texts(fragment) == [{"action": "cancel", "content": None}]
    [request] = activity_of(fragment).requests
    assert request.state == "Answer sent to Test_Stdio: cancelled in the browser by user:root"
    assert "Answer sent to Test_Stdio: cancelled in the browser by user:root" in fragment.text


def test_pages_need_a_login_and_writes_need_the_csrf_token(host: Host) -> None:
    for path in ("/host/servers", "/host/conversations", "/host/conversations/conv_x"):
        r = host.client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
    host.web.login(*USER)
    r = host.client.post("/host/conversations", data={"title": "x"})
    assert r.status_code == 403
    assert host.service.conversations(None) == []
    r = host.client.post("/host/servers/mcp-test-stdio/connect", data={})
    assert r.status_code == 403
    assert host.client.get("/host/conversations/conv_000000000000").status_code == 404


def test_the_live_feed_pushes_host_requests_to_their_owner_only(host: Host) -> None:
    """In-process: the inbox's stream against the app's hub and host service.
    Another account's stream is read after everything happened: it must end (its login
    check says logged out) having sent nothing but its snapshot."""
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "live", selection="defaults")
    connect(host, csrf, conv)
    app = host.client.app  # type: ignore[attr-defined]
    ann = app_state(app).ui_auth.resolve(host.client.cookies.get(COOKIE_NAME))
    assert isinstance(ann, UiUser)
    other = UiUser(ann.account_id + 100, "bo", False, "s", "c", frozenset())
    services = app_state(app).services
    feed = Feed(services.engine, app_state(app).templates.env, lambda: {"mcp-test-stdio": "Test_Stdio"})
    finished = anyio.Event()

    def bo_login() -> UiUser | None:
        return None if finished.is_set() else other

    async def scenario() -> tuple[list[ServerSentEvent], list[ServerSentEvent]]:
        mine = conversation_stream(feed, services.hub, ann, lambda: ann, recheck_seconds=0.05)
        theirs = conversation_stream(feed, services.hub, other, bo_login, recheck_seconds=0.05)
        seen: list[ServerSentEvent] = []
        try:
            with anyio.fail_after(FOLLOW_SECONDS):
                seen.append(await anext(mine))
                bo = [await anext(theirs)]
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_call_wait, host.service, conv)
                    seen.append(await anext(mine))
                    iid = re.search(r'data-interaction="([^"]+)"', str(seen[-1].data))
                    assert iid is not None
                    await services.interactions.answer(
                        iid.group(1), action="cancel", actor="user:ann", channel="browser"
                    )
                    seen.append(await anext(mine))
                finished.set()
                bo += [event async for event in theirs]
        finally:
            await mine.aclose()
            await theirs.aclose()
        return seen, bo

    assert host.client.portal is not None
    seen, bo = host.client.portal.call(scenario)
    assert [e.event for e in bo] == ["snapshot"]
    assert seen[0].event == "snapshot" and seen[1].event == "interaction"
    assert "Origin: <strong>external server</strong> Test_Stdio" in str(seen[1].data)
    assert str(seen[2].event).startswith("resolved-")
    assert "Answer sent to Test_Stdio: cancelled in the browser by user:ann" in str(seen[2].data)


async def _call_wait(service: HostService, conv: str) -> None:
    await service.call_tool(conv, "mcp-test-stdio", "wait", {}, actor="user:ann")

"""Schema property names are the schema author's text, never markup.

The attack: an external MCP server names a property
`r" hx-post="/admin/users" hx-vals='{...,"is_admin":"true"}' hx-trigger="load" data-y="`
in a tool's `inputSchema` and in an `elicitation/create` `requestedSchema`. Built into an
attribute and marked safe, it became live htmx: an administrator opening the page created an
admin account with the CSRF header `<body hx-headers>` supplies.

- In headless Chromium against a real `steamharness serve` whose host runs the hostile
  server (tests/fixtures/hostile_server.py): the administrator opens the host conversation,
  calls the tool, opens the Inbox; no account is created, the page holds no element
  with the injected attributes, and both refusals name the field.
- The same names from a workflow: a param is refused when the project is registered, and a
  `ctx.ask` field when the run asks, both naming the field.
- The form macro itself, handed such a name: ids and names are derived tokens, the name is
  escaped text inside `hx-disable`, and no element gains an attribute.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Page, expect

from tests import processes
from tests.browser.conftest import Console, browser, checked, context, driver, page, playwright  # noqa: F401
from tests.conftest import FIXTURES
from tests.e2e.server import LiveServer, running_server
from tests.fixtures.hostile_server import ATTACK_NAME, HOSTILE
from tests.helpers import page_templates
from webui.web import forms

ADMIN_NAME = "hana"
ADMIN_PASSWORD = "hostile-forms-pw-1"
SERVER_ID = "mcp-hostile"
WAIT_MS = 30_000
REFUSED_NAME = "its name is not a safe identifier"
PROJECT_ID = "4b8c2e1a-6d3f-4a5b-9c7e-2f1a3b4c5d6e"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("hostile-forms")
    root = tmp / "root"
    (root / "mcp").mkdir(parents=True)
    entry = processes.python_script(FIXTURES / "hostile_server.py", "stdio")
    (root / "mcp" / "servers.json").write_text(json.dumps({"mcpServers": {"Hostile": entry}}), "utf-8")
    (root / "config.yaml").write_text(f"defaults:\n  mcp_servers: [{SERVER_ID}]\n", "utf-8")
    # STEAMHARNESS_HOST_SERVER_USER "": the hostile server is this interpreter, which may live
    # where the unprivileged host user cannot run it (its isolation: test_host_isolation.py).
    with running_server(tmp, STEAMHARNESS_ROOT=str(root), STEAMHARNESS_HOST_SERVER_USER="") as live:
        live.add_user(ADMIN_NAME, admin=True, password=ADMIN_PASSWORD)
        yield live


@pytest.fixture
def ui(page: Page, request: pytest.FixtureRequest) -> Iterator[Page]:  # noqa: F811
    yield from checked(page, Console().watch(page), request)


def account_names(live: LiveServer) -> set[str]:
    return {row["name"] for row in live.query("SELECT name FROM accounts")}


def injected(view: Page) -> int:
    """Elements that carry any of the injected attributes."""
    return view.locator('[hx-vals], [data-y], [hx-post="/admin/users"], [hx-trigger="load"][hx-post]').count()


def test_a_hostile_property_name_from_an_external_server_creates_no_account_and_is_refused_by_name(
    ui: Page, server: LiveServer
) -> None:
    base = server.base_url
    before = account_names(server)
    ui.goto(f"{base}/login")
    ui.get_by_label("Username").fill(ADMIN_NAME)
    ui.get_by_label("Password").fill(ADMIN_PASSWORD)
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{base}/projects")

    # a host conversation with the hostile server: it connects and lists its tool
    ui.goto(f"{base}/host/conversations")
    ui.get_by_label("Title").fill("Hostile")
    ui.get_by_role("button", name="Start conversation").click()
    expect(ui).to_have_url(re.compile(re.escape(f"{base}/host/conversations/") + r"conv_\w+$"))
    conversation_url = ui.url
    section = ui.locator(f"#server-{SERVER_ID}")
    expect(section).to_have_attribute("data-state", "ready", timeout=WAIT_MS)
    tool = ui.locator('.tool[data-tool="takeover"]')
    why = tool.locator("small.muted")
    expect(why).to_contain_text('No form for this tool: field \'r" hx-post="/admin/users"')
    expect(why).to_contain_text(REFUSED_NAME)
    assert injected(ui) == 0

    # the call asks for a form with the same field: refused, naming it
    tool.get_by_role("button", name="Call takeover").click()
    call = ui.locator('#activity li.host-call[data-tool="takeover"]').first
    expect(call).to_have_attribute("data-status", "success", timeout=WAIT_MS)
    result = json.loads(call.locator("pre.result-text").inner_text())
    assert REFUSED_NAME in result["refused"] and "hx-post" in result["refused"]
    request = ui.locator("#activity .requests li").first
    expect(request).to_contain_text('Refused by the host: field \'r" hx-post="/admin/users"')
    expect(request).to_contain_text(REFUSED_NAME)
    assert injected(ui) == 0

    # the inbox, where a server's form waits: nothing there acts either
    with ui.expect_response(lambda r: r.url == f"{base}/inbox/events") as stream:
        ui.goto(f"{base}/inbox")
    assert stream.value.status == 200
    expect(ui.locator("#no-pending")).to_be_visible()
    assert injected(ui) == 0

    # load the host conversation once more (a load is where `hx-trigger=load` would fire)
    ui.goto(conversation_url)
    expect(ui.locator("#activity .requests li").first).to_contain_text(REFUSED_NAME)
    assert account_names(server) == before and ATTACK_NAME not in account_names(server)
    rows = server.query("SELECT close_reason FROM interactions WHERE origin = 'host'")
    assert len(rows) == 1 and REFUSED_NAME in rows[0]["close_reason"]


# --------------------------------------------------------------------------- from a workflow


def project(folder: Path, params: list[dict[str, Any]], handler: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(
        json.dumps(
            {
                "id": PROJECT_ID,
                "name": "hostile-workflow",
                "version": "1.0.0",
                "projectType": "workflow",
                "entrypoints": [{"id": "ask", "title": "Ask", "handler": "main.py:ask", "params": params}],
            }
        ),
        "utf-8",
    )
    (folder / "main.py").write_text(handler, "utf-8")
    return folder


ASKING = f"""
def ask(ctx):
    try:
        ctx.ask("Fill in", [{{"name": {HOSTILE!r}, "type": "string", "description": "here"}}])
    except Exception as exc:
        return {{"refused": str(exc)}}
    return {{"refused": None}}
"""


def test_a_workflow_param_with_a_hostile_name_is_refused_when_the_project_is_registered(
    server: LiveServer, tmp_path: Path
) -> None:
    folder = project(tmp_path / "bad-params", [{"name": HOSTILE, "type": "string"}], ASKING)
    added = server.cli("projects", "add", str(folder), check=False)
    assert added.returncode != 0
    assert "invalid param name" in added.stderr and "hx-post" in added.stderr
    assert PROJECT_ID not in {r["id"] for r in server.query("SELECT id FROM projects")}


async def call_ask(server: LiveServer, key: str) -> types.CallToolResult:
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=60)
        ) as http,
        Client(streamable_http_client(server.mcp_url(PROJECT_ID), http_client=http), mode="legacy") as client,
    ):
        with anyio.fail_after(60):
            return await client.call_tool("ask", {})


def test_a_ctx_ask_field_with_a_hostile_name_is_refused_by_name_and_asks_nothing(
    server: LiveServer, tmp_path: Path
) -> None:
    folder = project(tmp_path / "asking", [], ASKING)
    server.add_project(folder, PROJECT_ID)
    key = server.create_key("wf-user")
    before = account_names(server)
    # Another thread: Playwright's sync API keeps an event loop running in this one.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(anyio.run, call_ask, server, key).result(timeout=90)
    assert isinstance(result.content[0], types.TextContent)
    body = json.loads(result.content[0].text)
    assert body["status"] == "success", body
    refused = body["output"]["refused"]
    assert "invalid param name" in refused and "hx-post" in refused
    asked = server.query(
        "SELECT i.id FROM interactions i JOIN runs r ON r.id = i.run_id WHERE r.project_id = :p", p=PROJECT_ID
    )
    assert asked == []
    assert account_names(server) == before


# --------------------------------------------------------------------------- the macro itself


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs.append((tag, dict(attrs)))


SAFE_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


@pytest.mark.parametrize("kind", ["string", "boolean", "integer", "multiselect", "select"])
def test_the_form_macro_keeps_a_hostile_name_as_escaped_text_with_derived_ids(
    kind: str, tmp_path: Path
) -> None:
    prop: dict[str, Any] = {"type": kind, "description": "help", "title": HOSTILE}
    if kind == "multiselect":
        prop = {"type": "array", "items": {"enum": ["a", HOSTILE]}, "description": "help"}
    elif kind == "select":
        prop = {"type": "string", "enum": ["a", HOSTILE], "description": "help"}
    schema = {"type": "object", "properties": {HOSTILE: prop}, "required": [HOSTILE]}
    fields = forms.fields(schema)
    env = page_templates(tmp_path / "data").env
    macro = env.get_template("macros/forms.html").module.schema_fields  # type: ignore[attr-defined]
    html = str(macro(fields, {}, {HOSTILE: "bad " + HOSTILE}, "ia_1-"))
    parser = Elements()
    parser.feed(html)
    allowed = {
        "id", "name", "type", "value", "for", "class", "aria-describedby", "aria-invalid", "required",
        "aria-required", "aria-hidden", "role", "hx-disable", "selected", "checked", "step",
    }  # fmt: skip
    for tag, attrs in parser.attrs:
        assert set(attrs) <= allowed, (tag, attrs)
        for name in ("id", "for", "name"):
            if name in attrs:
                assert SAFE_TOKEN.fullmatch(str(attrs[name])), (tag, name, attrs[name])
        for token in str(attrs.get("aria-describedby") or "x").split():
            assert SAFE_TOKEN.fullmatch(token)
    assert parser.attrs[0] == ("div", {"class": "schema-fields", "hx-disable": None})
    # the hostile text is there, as text (or an option's value), escaped
    assert "hx-post=&#34;/admin/users&#34;" in html or "hx-post=&quot;/admin/users&quot;" in html
    # and what the browser posts back under the derived name parses to the property
    key = fields[0].key
    assert key != HOSTILE and key.startswith("field0-")

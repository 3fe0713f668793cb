"""A project's page in headless Chromium against a real `steamharness serve`: the projects
list's tool count and last run; an administrator takes a version offline and back online,
edits the draft (a copy of the examples) to add a required param, reviews the publish (the
diff flags it as breaking), confirms and sees the new version. Bad paths: a user without a
grant gets 404 and sees no administrator controls, an invalid draft shows its error and
offers no publish, a write without the CSRF token is refused."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, checked
from tests.e2e.server import HELLO, LEDGER, LiveServer, make_server

ADMIN = ("ada", "browser-project-pw-1")
PLAIN = ("ben", "browser-project-pw-2")
CALL_SECONDS = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = make_server(tmp_path_factory.mktemp("browser-project"))
    server.add_user(ADMIN[0], admin=True, password=ADMIN[1])
    server.add_user(PLAIN[0], password=PLAIN[1])
    server.grant(PLAIN[0], [HELLO])
    with server.running():
        yield server


@pytest.fixture
def ui(page: Page, request: pytest.FixtureRequest) -> Iterator[Page]:
    # Refusals (404, 409, 422) are pages the browser also logs as failed requests.
    console = Console(allowed=[re.compile(r"favicon\.ico"), re.compile(r"status of 4")]).watch(page)
    yield from checked(page, console, request)


def login(ui: Page, server: LiveServer, who: tuple[str, str], path: str) -> None:
    ui.goto(f"{server.base_url}/login?next={path}")
    ui.get_by_label("Username").fill(who[0])
    ui.get_by_label("Password").fill(who[1])
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{server.base_url}{path}")


def edit_draft(server: LiveServer, folder: str, change: Callable[[dict[str, Any]], object]) -> None:
    path = server.projects / folder / "package.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def call_greet(server: LiveServer) -> types.CallToolResult:
    """One real tool call over MCP with the server admin key (in a thread of its own: the
    Playwright sync API holds this thread's event loop)."""

    async def call() -> types.CallToolResult:
        with anyio.fail_after(CALL_SECONDS):
            async with (
                httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {server.admin_key}"}, timeout=30
                ) as http,
                Client(
                    streamable_http_client(server.mcp_url(HELLO), http_client=http), mode="legacy"
                ) as client,
            ):
                return await client.call_tool("greet", {"name": "Ada"})

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, call).result(timeout=CALL_SECONDS + 10)


def test_the_projects_list_shows_tool_count_and_last_run(server: LiveServer, ui: Page) -> None:
    result = call_greet(server)
    assert not result.is_error, result
    login(ui, server, ADMIN, "/projects")
    hello = ui.get_by_role("row", name=re.compile(r"^hello\b"))
    expect(hello.get_by_role("cell").nth(2)).to_have_text("2")
    expect(hello.get_by_role("cell").nth(3)).to_contain_text("success")
    ledger = ui.get_by_role("row", name=re.compile(r"^ledger\b"))
    expect(ledger.get_by_role("cell").nth(3)).to_have_text("never")
    hello.get_by_role("link", name="hello").click()
    expect(ui).to_have_url(f"{server.base_url}/projects/{HELLO}")
    expect(ui.get_by_role("heading", name="hello", exact=True)).to_be_visible()
    runs = ui.get_by_role("table", name="Recent runs, newest first")
    expect(runs.get_by_role("row")).to_have_count(2)  # the header and the one run
    expect(runs).to_contain_text("Greet")


def test_versions_go_offline_and_online_and_the_draft_is_published_after_the_diff(
    server: LiveServer, ui: Page
) -> None:
    login(ui, server, ADMIN, f"/projects/{HELLO}")
    expect(ui.get_by_text("A plain workflow: greets someone.")).to_be_visible()
    expect(ui.get_by_role("link", name="MCP page")).to_have_attribute("href", f"/projects/{HELLO}/mcp")
    expect(ui.get_by_role("link", name="Configuration")).to_have_attribute(
        "href", f"/projects/{HELLO}/config"
    )
    versions = ui.get_by_role("table", name="Published versions, newest first")
    row = versions.get_by_role("row", name=re.compile(r"^1\.0\.0"))
    expect(row).to_contain_text("online")
    expect(row).to_contain_text("latest")

    row.get_by_role("button", name="Take 1.0.0 offline").click()
    expect(ui.get_by_role("status")).to_have_text("1.0.0 is offline.")
    expect(row).to_contain_text("offline")
    expect(row).not_to_contain_text("latest")
    row.get_by_role("button", name="Bring 1.0.0 online").click()
    expect(ui.get_by_role("status")).to_have_text("1.0.0 is online.")
    expect(row).to_contain_text("latest")

    def add_style(d: dict[str, Any]) -> None:
        d["version"] = "1.1.0"
        d["entrypoints"][0]["params"].append({"name": "style", "type": "string", "required": True})

    edit_draft(server, "hello", add_style)
    ui.get_by_role("link", name="Review publish").click()
    expect(ui).to_have_url(f"{server.base_url}/projects/{HELLO}/publish#publish")
    expect(ui.get_by_role("heading", name="Changes against latest (1.0.0)")).to_be_visible()
    changes = ui.get_by_role("list", name="Changes against latest (1.0.0)")
    expect(changes.get_by_role("listitem")).to_have_count(1)
    expect(changes.get_by_role("listitem")).to_contain_text("breaking")
    expect(changes.get_by_role("listitem")).to_contain_text("greet.style")
    expect(changes.get_by_role("listitem")).to_contain_text("new required param (string)")
    expect(ui.get_by_text("1 breaking change: clients on latest may fail")).to_be_visible()
    expect(ui.get_by_label("Version", exact=True)).to_have_value("1.1.0")
    ui.get_by_role("button", name="Publish version").click()

    expect(ui.get_by_role("status")).to_have_text("Published 1.1.0.")
    new = versions.get_by_role("row", name=re.compile(r"^1\.1\.0"))
    expect(new).to_contain_text("latest")
    expect(new).to_contain_text("online")
    expect(new).to_contain_text(f"user:{ADMIN[0]}")
    expect(versions.get_by_role("row", name=re.compile(r"^1\.0\.0"))).not_to_contain_text("latest")

    # Publishing the same version again is refused on the page, with what was typed kept.
    ui.get_by_role("link", name="Review publish").click()
    expect(ui.get_by_text("The tools are the same as in 1.1.0.")).to_be_visible()
    ui.get_by_role("button", name="Publish version").click()
    expect(ui.get_by_role("alert")).to_contain_text("already has version 1.1.0")
    expect(ui.get_by_label("Version", exact=True)).to_have_value("1.1.0")


def test_an_invalid_draft_shows_its_error_and_offers_no_publish(server: LiveServer, ui: Page) -> None:
    edit_draft(
        server, "ledger", lambda d: d["entrypoints"][0]["params"].append({"name": "x", "type": "colour"})
    )
    login(ui, server, ADMIN, f"/projects/{LEDGER}")
    expect(ui.get_by_role("alert")).to_contain_text("The draft does not load")
    ui.get_by_role("link", name="Review publish").click()
    alert = ui.locator("#publish-error")
    expect(alert).to_have_attribute("role", "alert")
    expect(alert).to_contain_text("cannot be published")
    expect(alert).to_contain_text("colour")
    expect(ui.get_by_role("button", name="Publish version")).to_have_count(0)


def test_a_user_without_grant_gets_404_and_no_administrator_controls(server: LiveServer, ui: Page) -> None:
    login(ui, server, PLAIN, "/projects")
    expect(ui.get_by_role("row", name=re.compile(r"^ledger\b"))).to_have_count(0)
    response = ui.goto(f"{server.base_url}/projects/{LEDGER}")
    assert response is not None and response.status == 404
    ui.goto(f"{server.base_url}/projects/{HELLO}")
    expect(ui.get_by_role("table", name="Published versions, newest first")).to_be_visible()
    expect(ui.get_by_role("button", name=re.compile("offline|online"))).to_have_count(0)
    expect(ui.get_by_role("link", name="Review publish")).to_have_count(0)
    refused = ui.request.post(f"{server.base_url}/projects/{HELLO}/publish", form={"version": "9.0.0"})
    assert refused.status == 403


def test_a_write_without_the_csrf_token_is_refused(server: LiveServer, ui: Page) -> None:
    login(ui, server, ADMIN, f"/projects/{HELLO}")
    forms: list[dict[str, str | float | bool]] = [{}, {"csrf_token": "forged"}]
    for form in forms:
        refused = ui.request.post(f"{server.base_url}/projects/{HELLO}/versions/1.0.0/offline", form=form)
        assert refused.status == 403 and "reload the page" in refused.text()
    ui.reload()
    row = ui.get_by_role("table", name="Published versions, newest first").get_by_role(
        "row", name=re.compile(r"^1\.0\.0")
    )
    expect(row).to_contain_text("online")

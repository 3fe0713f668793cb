"""The insights page in headless Chromium against a real `steamharness serve`: its SVG
charts and tables are drawn, a tool call made over MCP updates the open page through its
live stream (no reload), a tool whose title is markup shows as text and runs nothing, and
with JavaScript off the page is whole and its window filter still works. A failing test
leaves a screenshot (tests/browser/conftest.py `checked`)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import DEFAULT_TIMEOUT_MS, Console, checked
from tests.e2e.server import HELLO, LiveServer, running_server
from tests.e2e.test_mcp_tasks import Rpc

ADMIN = ("insights-root", "insights-root-pw-1")
HOSTILE_PROJECT = str(uuid.uuid4())
HOSTILE_TITLE = '<img src=x onerror="window.__pwned=1">" onmouseover="window.__pwned=2'


def _hostile_project(root: Path) -> Path:
    root.mkdir()
    (root / "h.py").write_text("def ok(ctx):\n    return 'fine'\n", encoding="utf-8")
    manifest = {
        "id": HOSTILE_PROJECT,
        "name": "<b>loud</b>",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"id": "ok", "title": HOSTILE_TITLE, "handler": "h.py:ok", "params": []}],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


# Counts the live stream's messages htmx swaps in (set before any page script runs).
SSE_COUNTER = (
    "document.addEventListener('htmx:sseMessage',"
    " () => { window.__sseMessages = (window.__sseMessages || 0) + 1 })"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("insights-ui")
    with running_server(base) as live:
        live.add_user(ADMIN[0], admin=True, password=ADMIN[1])
        live.add_project(_hostile_project(base / "hostile"), HOSTILE_PROJECT)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key(ADMIN[0])


@pytest.fixture
def ui(page: Page, request: pytest.FixtureRequest) -> Iterator[Page]:
    yield from checked(page, Console().watch(page), request)


def log_in(page: Page, server: LiveServer, path: str = "/insights") -> None:
    page.goto(f"{server.base_url}/login?next={path}")
    page.get_by_label("Username").fill(ADMIN[0])
    page.get_by_label("Password").fill(ADMIN[1])
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(re.escape(f"{server.base_url}{path}")))


def call(server: LiveServer, key: str, project: str, tool: str, arguments: dict[str, object]) -> None:
    rpc = Rpc(server, key, tasks=False, elicitation=False, project=project)
    assert rpc.result(rpc.call(tool, arguments))["isError"] is False


def test_a_call_updates_the_open_page_live_and_the_charts_are_drawn(
    ui: Page, server: LiveServer, key: str
) -> None:
    ui.add_init_script(SSE_COUNTER)
    log_in(ui, server)
    calls = ui.locator('[data-figure="calls"]')
    expect(calls).to_have_text(re.compile(r"^\d+$"))
    # The stream's first body arrived: from then on it is subscribed.
    ui.wait_for_function("() => (window.__sseMessages || 0) >= 1")
    before = int(calls.inner_text())
    ui.evaluate("window.__sameDocument = true")
    call(server, key, HELLO, "greet", {"name": "Ada"})
    expect(calls).to_have_text(str(before + 1), timeout=2 * DEFAULT_TIMEOUT_MS)
    assert ui.evaluate("window.__sameDocument === true"), "the page was reloaded"
    table = ui.locator("#insights-tool-table")
    expect(table.get_by_role("cell", name="Greet", exact=True)).to_be_visible()
    chart = ui.locator("figure.tool-chart svg.chart").first
    expect(chart).to_be_visible()
    assert chart.locator("rect.bar").count() >= 1
    expect(ui.locator("#insights-pool-now")).to_contain_text("worker slots busy")
    assert ui.evaluate("() => window.__pwned") is None


def test_a_tool_title_made_of_markup_is_text(ui: Page, server: LiveServer, key: str) -> None:
    call(server, key, HOSTILE_PROJECT, "ok", {})
    log_in(ui, server)
    table = ui.locator("#insights-tool-table")
    expect(table.get_by_role("cell", name=HOSTILE_TITLE, exact=True)).to_be_visible()
    assert ui.locator("#insights-body img").count() == 0
    chart_titles = ui.locator("figure.tool-chart svg title").all_text_contents()
    assert any(HOSTILE_TITLE in t for t in chart_titles)
    ui.locator("figure.tool-chart").first.hover()
    assert ui.evaluate("() => window.__pwned") is None


@pytest.fixture
def no_js(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(java_script_enabled=False)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    try:
        page = context.new_page()
        yield from checked(page, Console().watch(page), request)
    finally:
        context.close()


def test_without_javascript_the_tables_carry_the_figures_and_the_filter_works(
    no_js: Page, server: LiveServer, key: str
) -> None:
    call(server, key, HELLO, "greet", {"name": "Bo"})
    log_in(no_js, server)
    greet = no_js.locator("#insights-tool-table").get_by_role("cell", name="Greet", exact=True)
    expect(greet).to_be_visible()
    no_js.get_by_label("Window", exact=True).select_option("week")
    no_js.get_by_role("button", name="Show").click()
    expect(no_js).to_have_url(re.compile(r"/insights\?window=week"))
    expect(no_js.locator("#insights-body")).to_contain_text("Last 7 days")
    expect(greet).to_be_visible()

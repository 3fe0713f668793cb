"""The in-app API reference works offline and under the site's Content-Security-Policy:
`/docs` is Swagger UI from the server's own vendored files (no CDN), started by a script
file of ours, and Chromium renders the operations of `/openapi.json` with no CSP violation
or other console error; the page's CSP is the one every page has."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, checked
from tests.e2e.server import LiveServer, running_server
from tests.helpers import WAIT
from webui.web.api_docs import SWAGGER_UI_CSS, SWAGGER_UI_JS
from webui.web.security import CSP


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("api-docs")) as live:
        yield live


@pytest.fixture
def ui(page: Page, request: pytest.FixtureRequest) -> Iterator[Page]:
    console = Console().watch(page)
    yield from checked(page, console, request)


def test_docs_renders_the_operations_offline_under_the_csp(server: LiveServer, ui: Page) -> None:
    loaded: list[str] = []
    ui.on("request", lambda r: loaded.append(r.url))
    ui.goto(f"{server.base_url}/docs")
    # The JSON API's operations and the MCP methods' (tag `mcp methods`) are there.
    expect(ui.locator(".opblock-tag", has_text="mcp methods")).to_be_visible()
    expect(ui.locator(".opblock-tag", has_text="configurations")).to_be_visible()
    ui.locator(".opblock-tag", has_text="mcp methods").click()
    expect(ui.locator(".opblock-summary-path", has_text=re.compile(r"mcp#tools/call$"))).to_be_visible()
    ui.locator(".opblock-summary-path", has_text=re.compile(r"mcp#tools/call$")).click()
    expect(ui.locator(".opblock-description-wrapper", has_text="A tool error is a result")).to_be_visible()
    # Everything came from this server: no CDN.
    assert loaded and all(u.startswith(server.base_url) for u in loaded), loaded
    assert f"{server.base_url}{SWAGGER_UI_JS}" in loaded and f"{server.base_url}{SWAGGER_UI_CSS}" in loaded


def test_docs_keeps_the_site_csp_and_redoc_leads_to_it(server: LiveServer) -> None:
    page = httpx2.get(f"{server.base_url}/docs", timeout=WAIT)
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert "<script>" not in page.text and "cdn" not in page.text.lower()
    redoc = httpx2.get(f"{server.base_url}/redoc", timeout=WAIT)
    assert redoc.status_code == 307 and redoc.headers["location"] == "/docs"
    for asset in (SWAGGER_UI_JS, SWAGGER_UI_CSS):
        assert httpx2.get(f"{server.base_url}{asset}", timeout=WAIT).status_code == 200
        assert Path(__file__).resolve().parents[2].joinpath(asset.lstrip("/")).is_file()


def test_every_page_links_to_the_documentation_and_the_api_reference(server: LiveServer, ui: Page) -> None:
    ui.goto(f"{server.base_url}/login")
    footer = ui.locator("footer.site")
    expect(footer.get_by_role("link", name="Documentation")).to_have_attribute("href", "/help/")
    expect(footer.get_by_role("link", name="API reference")).to_have_attribute("href", "/docs")
    footer.get_by_role("link", name="API reference").click()
    expect(ui.locator(".opblock-tag", has_text="mcp methods")).to_be_visible()

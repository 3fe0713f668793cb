"""The in-app API reference works offline and under the site's Content-Security-Policy:
`/docs` is Swagger UI from the server's own vendored files (no CDN), started by a script
file of ours, and Chromium renders the operations of `/openapi.json` with no CSP violation
or other console error; the page's CSP is the one every page has.

The docs' screenshot of a project's MCP page is taken here, of the docs' first project, so
it shows the current UI (`scripts/docs` writes it: `STEAMHARNESS_DOCS_RECORD=1`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, checked
from tests.e2e.server import LiveServer, running_server
from tests.helpers import WAIT
from webui.edge.headers import CSP
from webui.web.api_docs import SWAGGER_UI_CSS, SWAGGER_UI_JS

ROOT = Path(__file__).resolve().parents[2]
FIRST = "5d6f2c1a-3b4e-4f70-9a8b-1c2d3e4f5a6b"
SCREENSHOT = ROOT / "docs/images/mcp-page.png"
ADMIN = ("demo", "browser-docs-pw-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("api-docs")) as live:
        live.add_project(ROOT / "docs/examples/first-project", FIRST)
        live.add_user(ADMIN[0], admin=True, password=ADMIN[1])
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


def test_the_docs_screenshot_of_the_mcp_page_is_this_ui(server: LiveServer, ui: Page, tmp_path: Path) -> None:
    ui.set_viewport_size({"width": 1280, "height": 900})  # wide enough for the whole nav
    path = f"/projects/{FIRST}/mcp"
    ui.goto(f"{server.base_url}/login?next={path}")
    ui.get_by_label("Username").fill(ADMIN[0])
    ui.get_by_label("Password").fill(ADMIN[1])
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{server.base_url}{path}?target=latest")
    expect(ui.get_by_text("count_words").first).to_be_visible()
    shot = tmp_path / "mcp-page.png"
    ui.screenshot(path=str(shot))
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("STEAMHARNESS_DOCS_RECORD") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        SCREENSHOT.write_bytes(shot.read_bytes())
    assert SCREENSHOT.is_file(), "the docs' screenshot is missing: run scripts/docs"

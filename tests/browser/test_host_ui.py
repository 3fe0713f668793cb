"""The host's pages in headless Chromium (Debian's, driven by Playwright) against a real
`steamharness serve` whose root config folder (STEAMHARNESS_ROOT) selects the Python SDK
test server over stdio, with a short expiry for requests:

- a host conversation is started from the browser and connects its server on its own;
- `book` is called there; its form request appears live in the inbox open in
  another tab, labelled with server, conversation and origin; it is filled and accepted,
  and the tool's result appears on the conversation's page without a reload;
- `wait` is called and nobody answers: the card in the inbox turns into
  "Expired without an answer" and the call's result shows the server got `cancel`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, ConsoleMessage, Error, Locator, Page, expect

from tests import processes
from tests.browser.conftest import phase_failed
from tests.conftest import FIXTURES
from tests.e2e.server import LiveServer, running_server

ADMIN_NAME = "hana"
ADMIN_PASSWORD = "host-browser-pw-1"
EXPIRY_SECONDS = 5  # long enough to fill a form, short enough to wait for
WAIT_MS = 30_000  # a call's first request: the server process starts, then asks
EXPIRY_WAIT_MS = (EXPIRY_SECONDS + 20) * 1000
SCREENSHOT_DIR = Path("/tmp")
SERVER_ID = "mcp-test-stdio"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("host-ui")
    root = tmp / "root"
    (root / "mcp").mkdir(parents=True)
    entry = processes.python_script(FIXTURES / "host_server.py", "stdio")
    (root / "mcp" / "servers.json").write_text(json.dumps({"mcpServers": {"Test_Stdio": entry}}), "utf-8")
    (root / "config.yaml").write_text(f"defaults:\n  mcp_servers: [{SERVER_ID}]\n", "utf-8")
    env = {
        "STEAMHARNESS_ROOT": str(root),
        "STEAMHARNESS_INTERACTION_EXPIRY_SECONDS": str(EXPIRY_SECONDS),
        # The test server is this interpreter, which an unprivileged user may not be able to run.
        "STEAMHARNESS_HOST_SERVER_USER": "",
    }
    with running_server(tmp, **env) as live:
        live.add_user(ADMIN_NAME, admin=True, password=ADMIN_PASSWORD)
        yield live


def watch_console(page: Page, errors: list[str]) -> None:
    def on_console(msg: ConsoleMessage) -> None:
        if msg.type == "error" and "favicon.ico" not in msg.text:
            errors.append(f"{msg.text} ({msg.location.get('url', '')})")

    def on_error(error: Error) -> None:
        errors.append(f"uncaught: {error.message}")

    page.on("console", on_console)
    page.on("pageerror", on_error)


@pytest.fixture
def tabs(context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[tuple[Page, Page]]:
    """Two tabs of one login: the host conversation, and the inbox. A failed
    test leaves screenshots in /tmp; a passing one must have no console errors."""
    errors: list[str] = []
    pages = (context.new_page(), context.new_page())
    for p in pages:
        watch_console(p, errors)
    yield pages
    if phase_failed(request.node):
        for name, p in zip(("host", "view"), pages, strict=True):
            with contextlib.suppress(Error):
                p.screenshot(path=str(SCREENSHOT_DIR / f"steamharness-host-ui-{name}.png"), full_page=True)
        return
    assert errors == [], "console errors in the browser"


def log_in(page: Page, base_url: str) -> None:
    page.goto(f"{base_url}/login")
    page.get_by_label("Username").fill(ADMIN_NAME)
    page.get_by_label("Password").fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{base_url}/projects")


def open_conversation_view(page: Page, base_url: str) -> None:
    """Opens /inbox and waits until its event stream answered, so what follows
    arrives by live push, not in a snapshot."""
    with page.expect_response(lambda r: r.url == f"{base_url}/inbox/events") as stream:
        page.goto(f"{base_url}/inbox")
    assert stream.value.status == 200
    page.evaluate("window.__sameDocument = true")


def call(host: Page, tool: str) -> Locator:
    """Click the tool's Call button; returns its newest entry in the activity list."""
    host.locator(f'.tool[data-tool="{tool}"]').get_by_role("button", name=f"Call {tool}").click()
    entry = host.locator(f'#activity li.host-call[data-tool="{tool}"]').first
    expect(entry).to_be_visible()
    return entry


def pending_card(view: Page, message: str) -> Locator:
    cards = view.locator('article[data-origin="host"][data-status="pending"]')
    return cards.filter(has_text=message)


def test_a_server_request_is_answered_live_and_an_unanswered_one_expires(
    tabs: tuple[Page, Page], server: LiveServer
) -> None:
    host, view = tabs
    base = server.base_url
    log_in(host, base)

    # start a conversation with the defaults; its server connects when the page opens
    host.get_by_role("navigation", name="Main").get_by_role("link", name="Connected servers").click()
    expect(host.locator(f"#server-{SERVER_ID}")).to_contain_text("Test_Stdio")
    host.goto(f"{base}/host/conversations")
    host.get_by_label("Title").fill("Hotel booking")
    expect(host.get_by_role("radio", name=re.compile(r"^Use the defaults"))).to_be_checked()
    host.get_by_role("button", name="Start conversation").click()
    expect(host).to_have_url(re.compile(re.escape(f"{base}/host/conversations/") + r"conv_\w+$"))
    conversation_url = host.url
    expect(host.locator(f"#server-{SERVER_ID}")).to_have_attribute("data-state", "ready", timeout=WAIT_MS)
    host.evaluate("window.__sameDocument = true")

    open_conversation_view(view, base)
    expect(view.locator("#no-pending")).to_be_visible()

    # book: the request appears live in the other tab, labelled, and is answered there
    book = call(host, "book")
    card = pending_card(view, "book please")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.get_by_role("heading", name="Test_Stdio asks")).to_be_visible()
    origin = card.locator(".origin")
    expect(origin).to_contain_text("Origin: external server Test_Stdio (mcp-test-stdio)")
    expect(origin.get_by_role("link", name="Hotel booking")).to_have_attribute(
        "href", conversation_url.removeprefix(base)
    )
    card.get_by_label("Guest name").fill("Ann")
    card.get_by_label("Nights").fill("3")
    card.get_by_label("Breakfast").check()
    card.get_by_label("Room").select_option(label="Double room")
    card.get_by_role("button", name="Accept").click()
    answered = view.locator('article[data-origin="host"][data-status="answered"]')
    expect(answered).to_have_count(1)
    expect(answered.get_by_role("status")).to_have_text(
        "Answer sent to Test_Stdio: accepted in the browser by user:hana"
    )

    expect(book).to_have_attribute("data-status", "success", timeout=WAIT_MS)
    result = json.loads(book.locator("pre.result-text").inner_text())
    assert result == {
        "action": "accept",
        "content": {"name": "Ann", "nights": 3, "breakfast": True, "room": "double"},
    }
    expect(host.locator("#activity .requests li").first).to_contain_text(
        "Answer sent to Test_Stdio: accepted"
    )

    # wait: nobody answers; the request expires and the server is told "cancel"
    wait = call(host, "wait")
    card = pending_card(view, "wait please")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.get_by_role("button", name="Cancel")).to_be_visible()
    interaction_id = card.get_attribute("data-interaction")
    expired = view.locator(f'[id="interaction-{interaction_id}"]')
    expect(expired).to_have_attribute("data-status", "closed", timeout=EXPIRY_WAIT_MS)
    expect(expired.get_by_role("status")).to_have_text("Expired without an answer")
    expect(expired.locator("form")).to_have_count(0)
    expect(wait).to_have_attribute("data-status", "success", timeout=WAIT_MS)
    assert json.loads(wait.locator("pre.result-text").inner_text()) == {"action": "cancel", "content": None}
    expect(host.locator(f"#request-{interaction_id}")).to_contain_text("Expired without an answer")

    # both tabs were updated in place, never reloaded
    for page in (host, view):
        assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"

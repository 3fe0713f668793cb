"""Headless Chromium from Debian, driven by Playwright for Python (no browser download:
`executable_path`), against a real `steamharness serve` on a loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Error,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
DEFAULT_TIMEOUT_MS = 15_000
# Assertions wait as long as actions do (Playwright's own default is 5 s, which a loaded
# 2-core machine running four test workers can exceed for one htmx swap).
expect.set_options(timeout=DEFAULT_TIMEOUT_MS)


# One Playwright driver and one Chromium per test process (xdist worker), shared by every
# browser module it runs: starting them (a Node process, then the browser) costs seconds of
# CPU each and far more wall time on a loaded machine. Nothing else is shared: each test gets
# a fresh context and page (`context`, `page`), so no test sees another's cookies, storage or
# tabs. Playwright's sync API marks its event loop as running in this thread between its
# calls; `pytest_runtest_setup`/`pytest_runtest_teardown` below mark it only while a browser
# test runs, so the async tests this process runs next find no running loop.
@dataclass
class Driver:
    playwright: Playwright
    loop: asyncio.AbstractEventLoop
    launched: Browser | None = None

    def browser(self) -> Browser:
        """The process's Chromium, launched again if it went away (a crash fails one module)."""
        if self.launched is None or not self.launched.is_connected():
            executable = shutil.which("chromium") or shutil.which("chromium-browser")
            if executable is None:
                pytest.fail(
                    "Debian's chromium is missing: apt-get install chromium chromium-driver"
                    " (scripts/test does)"
                )
            self.launched = self.playwright.chromium.launch(
                executable_path=executable, args=CHROMIUM_FLAGS, headless=True
            )
        return self.launched


DRIVER = pytest.StashKey[Driver]()


@pytest.fixture(scope="session")
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    manager = sync_playwright()
    p = manager.start()
    loop = asyncio.get_running_loop()  # marked running by the sync API after its calls
    started = Driver(p, loop)
    request.config.stash[DRIVER] = started
    yield started
    del request.config.stash[DRIVER]
    asyncio._set_running_loop(loop)  # its last calls
    try:
        if started.launched is not None and started.launched.is_connected():
            started.launched.close()
    finally:
        p.stop()
        asyncio._set_running_loop(None)


@pytest.fixture(scope="module")
def playwright(driver: Driver) -> Playwright:
    return driver.playwright


@pytest.fixture(scope="module")
def browser(driver: Driver) -> Browser:
    return driver.browser()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A browser test's setup, call and teardown see the driver's loop as running, as the
    sync API expects between its calls (it is not started yet before the first one)."""
    started = item.config.stash.get(DRIVER, None)
    if started is not None:
        asyncio._set_running_loop(started.loop)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """After a browser test (its module's and the session's fixtures closed with it, if
    it was their last), no loop runs in this thread any more."""
    try:
        return (yield)
    finally:
        asyncio._set_running_loop(None)


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


PHASE_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keeps each phase's report on the item, so a fixture's teardown can tell whether its
    test failed (`phase_failed`), for example to take a screenshot."""
    report = yield
    item.stash.setdefault(PHASE_REPORTS, {})[report.when] = report
    return report


def phase_failed(item: pytest.Item) -> bool:
    """Whether the test's setup or call phase failed (for fixture teardowns)."""
    return any(r.failed for r in item.stash.get(PHASE_REPORTS, {}).values())


@dataclass
class Console:
    """Console errors and uncaught exceptions of one page; errors matching `allowed` (the
    favicon's 404, refusals a test provokes) are expected."""

    errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=lambda: [re.compile(r"favicon\.ico")])

    def watch(self, page: Page) -> Console:
        page.on("console", self.on_console)
        page.on("pageerror", self.on_page_error)
        return self

    def on_console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.errors.append(f"{msg.text} ({msg.location.get('url', '')})")

    def on_page_error(self, error: Error) -> None:
        self.errors.append(f"uncaught: {error.message}")

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


def checked(page: Page, console: Console, request: pytest.FixtureRequest) -> Iterator[Page]:
    """For a `ui` fixture: the page; when its test fails, a screenshot to /tmp, else a check
    that the browser logged no unexpected console error."""
    yield page
    if phase_failed(request.node):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        with contextlib.suppress(Error):
            page.screenshot(path=f"/tmp/steamharness-{name}.png", full_page=True)
        return
    assert console.unexpected() == [], "console errors in the browser"

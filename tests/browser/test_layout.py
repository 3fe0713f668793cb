"""The web UI's layout in headless Chromium: every main page at 390, 768 and 1280 px wide,
in the light and the dark scheme (`prefers-color-scheme` emulated), against one real
`steamharness serve` with some rows on each page (a run, an open MCP session, audit events).

On each page, width and scheme: no page scrolls sideways; the main nav's links and "Log
out" are visible, or reachable through the Menu button; no two visible header elements
overlap; at 1280 px the links sit on one line; exactly the current page's link carries
`aria-current`; the dark scheme draws light text on a dark page, and the text, links,
buttons, fields, code and badges keep a readable contrast in both schemes.

Each page is loaded once; the widths and schemes are applied to the loaded page. Every
state's screenshot is kept in `$STEAMHARNESS_TEST_ARTIFACTS/layout/` (else a folder under
pytest's temporary directory); the folder is printed and named in every failure."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import DEFAULT_TIMEOUT_MS, Console
from tests.e2e.server import HELLO, INTERACTIVE, LiveServer, running_server
from webui.account_rules import NAME_MAX

ADMIN_NAME = "nadia"
ADMIN_PASSWORD = "layout-test-pw-1"
# A plain user with the longest name an account may have: the header shortens it.
USER_NAME = ("a-long-user-name-" * 4)[:NAME_MAX]
USER_PASSWORD = "layout-test-pw-2"
WIDTHS = (390, 768, 1280)
HEIGHT = 900
SCHEMES = ("light", "dark")
TIMEOUT = 60.0
PROTOCOL = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


# --------------------------------------------------------------------------- the server


@dataclass
class Site:
    server: LiveServer
    run_id: str
    artifacts: Path


def _rpc_headers(key: str, sid: str | None = None) -> dict[str, str]:
    headers = {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PROTOCOL,
        "Authorization": f"Bearer {key}",
    }
    if sid is not None:
        headers["Mcp-Session-Id"] = sid
    return headers


def _message(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a (single-message) SSE or JSON response."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return json.loads(line[5:])
    raise AssertionError(f"no message in {response.text!r}")


def _call_in_open_session(
    server: LiveServer, key: str, project: str, tool: str, arguments: dict[str, Any]
) -> str:
    """Opens an MCP session (left open: the sessions console lists it) and calls `tool` in it
    (a client that declares no elicitation: a question waits in the inbox); returns the
    run's id."""
    url = server.mcp_url(project)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "layout-probe", "version": "1.0"},
        },
    }
    r = httpx2.post(url, headers=_rpc_headers(key), json=init, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = httpx2.post(url, headers=_rpc_headers(key, sid), json=note, timeout=TIMEOUT)
    assert r.status_code == 202, r.text
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    r = httpx2.post(url, headers=_rpc_headers(key, sid), json=call, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    result = _message(r)["result"]  # the output, or (isError) that the run waits for an answer
    return str(result["structuredContent"]["runId"])


def _artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = os.environ.get("STEAMHARNESS_TEST_ARTIFACTS")
    folder = Path(root) / "layout" if root else tmp_path_factory.mktemp("layout-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_server(tmp_path_factory.mktemp("layout")) as server:
        server.add_user(ADMIN_NAME, admin=True, password=ADMIN_PASSWORD)
        server.add_user(USER_NAME, password=USER_PASSWORD)
        key = server.create_key(ADMIN_NAME)
        run_id = _call_in_open_session(server, key, HELLO, "greet", {"name": "Ada"})
        _call_in_open_session(server, key, INTERACTIVE, "plan_trip", {"traveller": "Di"})  # waits
        artifacts = _artifacts(tmp_path_factory)
        print(f"\nlayout screenshots: {artifacts}")
        yield Site(server, run_id, artifacts)


# --------------------------------------------------------------------------- the browser


@dataclass
class Tab:
    page: Page
    console: Console


@pytest.fixture(scope="module")
def tab(browser: Browser, site: Site) -> Iterator[Tab]:
    """One logged-in page for the whole module: each test loads its page into it."""
    context = browser.new_context(viewport={"width": WIDTHS[-1], "height": HEIGHT})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    console = Console().watch(page)
    _log_in(page, site, ADMIN_NAME, ADMIN_PASSWORD)
    yield Tab(page, console)
    context.close()


def _log_in(page: Page, site: Site, name: str, password: str) -> None:
    page.goto(f"{site.server.base_url}/login")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{site.server.base_url}/projects")


# --------------------------------------------------------------------------- what is measured

HEADER_STATE = """() => {
  const visible = (el) => {
    if (!el) return false;
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none";
  };
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const named = [];
  const brand = document.querySelector("header.top .brand");
  const toggle = document.querySelector("header.top .menu-toggle");
  const links = [...document.querySelectorAll('nav[aria-label="Main"] a')];
  for (const [label, el] of [["brand", brand], ["Menu", toggle],
                             ...links.map((a) => [a.textContent.trim(), a]),
                             ["who", document.querySelector("header.top .who")],
                             ["Log out", document.querySelector('form.logout button[type="submit"]')]]) {
    if (visible(el)) named.push({label, box: box(el)});
  }
  return {
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    toggle: visible(toggle),
    links: links.map((a) => ({label: a.textContent.trim(), href: a.getAttribute("href"),
                              current: a.getAttribute("aria-current"), visible: visible(a),
                              top: Math.round(a.getBoundingClientRect().top)})),
    logout: visible(document.querySelector('form.logout button[type="submit"]')),
    named,
  };
}"""

# Contrast (WCAG 2) of the first few visible elements of each kind against the background
# drawn behind them (the nearest ancestor with an opaque background).
CONTRAST = """(selectors) => {
  const parse = (c) => { const m = c.match(/[\\d.]+/g); return m ? m.map(Number) : [0, 0, 0, 0]; };
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c.length < 4 || c[3] > 0.5) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const out = [];
  for (const sel of selectors) {
    let n = 0;
    for (const el of document.querySelectorAll(sel)) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || getComputedStyle(el).visibility === "hidden") continue;
      if (!el.textContent.trim() && !["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName)) continue;
      const fg = lum(parse(getComputedStyle(el).color)), bg = lum(background(el));
      const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
      out.push({sel, ratio: Math.round(ratio * 100) / 100, text: el.textContent.trim().slice(0, 40)});
      if (++n >= 3) break;
    }
  }
  return out;
}"""
CHECKED_TEXT = [
    "main p",
    "main a",
    "main .muted",
    "main .error",
    "main code",
    "main pre",
    "main button",
    "main a.button",
    "main .badge",
    "main input:not([type=hidden]):not([type=checkbox]):not([type=radio])",
    "main select",
    "main th",
    "main td",
    "main label",
    "header.top a",
    "header.top button",
    "footer.site",
]
SCHEME_COLOURS = """() => {
  const lum = (c) => {
    const [r, g, b] = c.match(/[\\d.]+/g).map(Number).map((v) => v / 255)
      .map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const s = getComputedStyle(document.body);
  return {background: lum(s.backgroundColor), text: lum(s.color)};
}"""


def _overlaps(named: list[dict[str, Any]]) -> list[str]:
    found = []
    for i, a in enumerate(named):
        for b in named[i + 1 :]:
            (l1, t1, r1, b1), (l2, t2, r2, b2) = a["box"], b["box"]
            if min(r1, r2) - max(l1, l2) > 0.5 and min(b1, b2) - max(t1, t2) > 0.5:
                found.append(f"{a['label']!r} overlaps {b['label']!r}")
    return found


def _check_header(page: Page, expected_current: str, menu_shot: Path) -> list[str]:
    problems: list[str] = []
    state = page.evaluate(HEADER_STATE)
    if state["scrollWidth"] > state["innerWidth"]:
        problems.append(f"the page scrolls sideways: {state['scrollWidth']} px wide in {state['innerWidth']}")
    current = [(link["label"], link["current"]) for link in state["links"] if link["current"]]
    if [label for label, _ in current] != [expected_current]:
        problems.append(f"aria-current marks {current}, not {expected_current!r}")
    opened = False
    if state["toggle"]:
        if any(link["visible"] for link in state["links"]):
            problems.append("the Menu button shows while the links show too")
        page.locator("header.top .menu-toggle").click()
        expect(page.locator("#site-menu")).to_be_visible()
        page.screenshot(path=str(menu_shot))
        opened = True
        state = page.evaluate(HEADER_STATE)
    hidden = [link["label"] for link in state["links"] if not link["visible"]]
    if hidden:
        problems.append(f"nav links not reachable: {hidden}")
    if not state["logout"]:
        problems.append("'Log out' is not reachable")
    problems += _overlaps(state["named"])
    if state["innerWidth"] >= 1280:
        if opened:
            problems.append("the nav is collapsed at 1280 px")
        tops = {link["top"] for link in state["links"]}
        if len(tops) > 1:
            problems.append(f"the nav's links wrap onto {len(tops)} lines")
    if opened:
        page.keyboard.press("Escape")
        expect(page.locator("#site-menu")).to_be_hidden()
        page.evaluate("document.activeElement && document.activeElement.blur()")  # no focus ring in shots
    return problems


def _check_scheme(page: Page, scheme: str) -> list[str]:
    problems: list[str] = []
    colours = page.evaluate(SCHEME_COLOURS)
    if scheme == "dark" and not (colours["background"] < 0.05 and colours["text"] > 0.6):
        problems.append(
            f"dark scheme: body background luminance {colours['background']:.2f}, text {colours['text']:.2f}"
        )
    if scheme == "light" and not (colours["background"] > 0.8 and colours["text"] < 0.1):
        problems.append(
            f"light scheme: body background luminance {colours['background']:.2f}, text {colours['text']:.2f}"
        )
    for item in page.evaluate(CONTRAST, CHECKED_TEXT):
        if item["ratio"] < 4.5:
            problems.append(f"contrast {item['ratio']} < 4.5 for {item['sel']} ({item['text']!r})")
    return problems


# --------------------------------------------------------------------------- the pages


def _pages() -> list[tuple[str, str, str]]:
    """(test id, path, the nav label marked current); `{run}` is the site's run."""
    return [
        ("projects", "/projects", "Projects"),
        ("project", f"/projects/{HELLO}", "Projects"),
        ("project-mcp", f"/projects/{HELLO}/mcp", "Projects"),
        ("project-config", f"/projects/{HELLO}/config", "Projects"),
        ("project-knowledge", f"/projects/{HELLO}/knowledge", "Projects"),
        ("runs", "/runs", "Runs"),
        ("run", "/runs/{run}", "Runs"),
        ("inbox", "/inbox", "Inbox"),
        ("connected-servers", "/host/servers", "Connected servers"),
        ("host-conversations", "/host/conversations", "Connected servers"),
        ("insights", "/insights", "Insights"),
        ("keys", "/keys", "API keys"),
        ("admin-users", "/admin/users", "Users"),
        ("admin-projects", "/admin/projects", "Project settings"),
        ("admin-sessions", "/admin/sessions", "MCP sessions"),
        ("admin-audit", "/admin/audit", "Audit log"),
    ]


@pytest.mark.parametrize(("name", "path", "current"), _pages(), ids=[p[0] for p in _pages()])
def test_the_page_fits_every_width_in_both_schemes(
    tab: Tab, site: Site, name: str, path: str, current: str
) -> None:
    page = tab.page
    response = page.goto(site.server.base_url + path.replace("{run}", site.run_id))
    assert response is not None and response.status == 200, f"{path}: {response and response.status}"
    problems: list[str] = []
    for scheme in SCHEMES:
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": HEIGHT})
            shot = site.artifacts / f"{name}-{width}-{scheme}.png"
            page.screenshot(path=str(shot), full_page=True)
            found = _check_header(page, current, shot.with_name(f"{shot.stem}-menu.png"))
            if width == WIDTHS[0]:  # the colours do not change with the width
                found += _check_scheme(page, scheme)
            problems += [f"{width} px, {scheme}: {p}" for p in dict.fromkeys(found)]
    page.emulate_media(color_scheme="light")
    assert tab.console.unexpected() == [], "console errors in the browser"
    assert problems == [], f"{path} (screenshots in {site.artifacts}):\n" + "\n".join(problems)


def test_the_sessions_console_names_the_project_and_keeps_the_id_secondary(tab: Tab, site: Site) -> None:
    page = tab.page
    page.goto(f"{site.server.base_url}/admin/sessions")
    row = page.get_by_role("row").filter(has_text="layout-probe").filter(has_text="hello")
    expect(row).to_have_count(1)
    project = row.get_by_role("cell").nth(3)
    expect(project).to_contain_text("hello")
    expect(project.locator("small.muted code")).to_have_text(HELLO)
    assert re.match(r"^\s*hello\b", project.inner_text()), project.inner_text()


def test_a_plain_users_shorter_nav_stays_open_down_to_a_tablet_and_a_long_name_is_cut(
    browser: Browser, site: Site
) -> None:
    context = browser.new_context(viewport={"width": WIDTHS[-1], "height": HEIGHT})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    try:
        page = context.new_page()
        console = Console().watch(page)
        _log_in(page, site, USER_NAME, USER_PASSWORD)
        page.goto(f"{site.server.base_url}/runs")
        problems: list[str] = []
        for width, collapsed in ((390, True), (768, True), (1024, False), (1280, False)):
            page.set_viewport_size({"width": width, "height": HEIGHT})
            shot = site.artifacts / f"user-runs-{width}-light.png"
            page.screenshot(path=str(shot))
            found = _check_header(page, "Runs", shot.with_name(f"{shot.stem}-menu.png"))
            if page.locator("header.top .menu-toggle").is_visible() != collapsed:
                found.append("collapsed" if not collapsed else "not collapsed")
            who = page.locator("header.top .who")
            if not collapsed and who.bounding_box()["width"] > 8 * 16 + 1:  # type: ignore[index]
                found.append("the user's name is not cut short")
            problems += [f"{width} px: {p}" for p in found]
        assert [
            link for link in page.evaluate(HEADER_STATE)["links"] if link["href"].startswith("/admin")
        ] == []
        assert console.unexpected() == [], "console errors in the browser"
        assert problems == [], f"screenshots in {site.artifacts}:\n" + "\n".join(problems)
    finally:
        context.close()

"""The main navigation: its links (the administration pages for administrators only), the
one marked `aria-current` from the request's path, set on the server for every page, and
the Menu button that opens it as a popover on narrow screens (no script)."""

from __future__ import annotations

import re

import pytest

from tests.web.conftest import ADMIN, HELLO, USER, Web
from webui.web.navigation import MAIN_NAV, main_nav

NAV_RE = re.compile(r'<nav aria-label="Main">(.*?)</nav>', re.S)
LINK_RE = re.compile(r'<a href="([^"]+)"( aria-current="(page|true)")?>([^<]+)</a>')
USER_LINKS = ["Projects", "Inbox", "Connected servers", "Runs", "Insights", "API keys", "Docs"]
ADMIN_LINKS = [*USER_LINKS[:-1], "Users", "Project settings", "MCP sessions", "Audit log", "Docs"]


def nav_links(html: str) -> list[tuple[str, str, str | None]]:
    """The main nav's links: (href, label, aria-current)."""
    match = NAV_RE.search(html)
    assert match, "no main nav on the page"
    return [(href, label, current or None) for href, _, current, label in LINK_RE.findall(match.group(1))]


@pytest.mark.shares_app
@pytest.mark.parametrize(
    ("path", "current"),
    [
        ("/projects", ("Projects", "page")),
        (f"/projects/{HELLO}", ("Projects", "true")),
        (f"/projects/{HELLO}/mcp", ("Projects", "true")),
        ("/runs", ("Runs", "page")),
        ("/host/servers", ("Connected servers", "page")),
        ("/host/conversations", ("Connected servers", "true")),
        ("/insights", ("Insights", "page")),
        ("/keys", ("API keys", "page")),
        ("/admin/users", ("Users", "page")),
        ("/admin/projects", ("Project settings", "page")),
        ("/admin/sessions", ("MCP sessions", "page")),
        ("/admin/audit", ("Audit log", "page")),
        ("/projects/no-such-project", ("Projects", "true")),  # the 404 page keeps its section
    ],
)
def test_each_page_marks_its_own_link_and_only_that(web: Web, path: str, current: tuple[str, str]) -> None:
    web.login(*ADMIN)
    r = web.client.get(path)
    assert r.status_code in (200, 404), r.text
    links = nav_links(r.text)
    assert [label for _, label, _ in links] == ADMIN_LINKS
    assert [(label, mark) for _, label, mark in links if mark] == [current]


@pytest.mark.shares_app
def test_a_user_sees_no_administration_links_and_the_menu_is_a_popover(web: Web) -> None:
    web.login(*USER)
    r = web.client.get("/runs")
    assert [label for _, label, _ in nav_links(r.text)] == USER_LINKS
    assert '<button type="button" class="menu-toggle" popovertarget="site-menu">Menu</button>' in r.text
    assert '<div class="site-menu" id="site-menu" popover>' in r.text
    assert '<header class="top">' in r.text  # the longer administrator nav collapses earlier
    assert 'action="/logout"' in r.text.split('id="site-menu"', 1)[1]  # "Log out" is in the menu too


@pytest.mark.shares_app
def test_the_login_page_has_no_nav(web: Web) -> None:
    r = web.client.get("/login")
    assert '<nav aria-label="Main">' not in r.text and "menu-toggle" not in r.text


@pytest.mark.parametrize(
    ("path", "marked"),
    [
        ("/projects", [("Projects", "page")]),
        ("/projects/", [("Projects", "true")]),
        ("/projectsx", []),
        ("/inbox", [("Inbox", "page")]),
        ("/conversations", [("Inbox", "true")]),  # the old address of the inbox
        ("/conversations/events", [("Inbox", "true")]),
        ("/host/conversations/c1", [("Connected servers", "true")]),
        ("/admin/sessions", [("MCP sessions", "page")]),
        ("/help/", []),  # the docs site is not one of the app's pages
        ("/", []),
    ],
)
def test_main_nav_marks_at_most_one_link(path: str, marked: list[tuple[str, str]]) -> None:
    items = main_nav(path, admin=True)
    assert [i.label for i in items] == [link.label for link in MAIN_NAV]
    assert [(i.label, i.current) for i in items if i.current] == marked
    assert [i.label for i in main_nav(path, admin=False)] == USER_LINKS

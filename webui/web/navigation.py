"""The site's main navigation: its links, in order, and which one is current for a path.

base.html draws it for every signed-in page; the current link carries `aria-current`
("page" on the link's own address, "true" anywhere in the section it stands for), set here
from the request's path so the browser needs no script to mark it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NavLink:
    """One link of the main navigation. `sections`: the path prefixes it stands for (a path
    equal to one, or under it, makes the link current); empty: never current."""

    href: str
    label: str
    sections: tuple[str, ...] = ()
    admin: bool = False  # shown to administrators only


@dataclass(frozen=True)
class NavItem:
    """A link as a page draws it: `current` is the value of its `aria-current`, or None."""

    href: str
    label: str
    current: str | None


MAIN_NAV: tuple[NavLink, ...] = (
    NavLink("/projects", "Projects", ("/projects",)),
    NavLink("/inbox", "Inbox", ("/inbox", "/conversations")),
    NavLink("/host/servers", "Connected servers", ("/host",)),
    NavLink("/runs", "Runs", ("/runs",)),
    NavLink("/insights", "Insights", ("/insights",)),
    NavLink("/keys", "API keys", ("/keys",)),
    NavLink("/admin/users", "Users", ("/admin/users",), admin=True),
    NavLink("/admin/projects", "Project settings", ("/admin/projects",), admin=True),
    NavLink("/admin/sessions", "MCP sessions", ("/admin/sessions",), admin=True),
    NavLink("/admin/audit", "Audit log", ("/admin/audit",), admin=True),
    NavLink("/help/", "Docs"),  # the API reference (/docs) is linked from the footer and the docs
)


def _within(path: str, section: str) -> bool:
    return path == section or path.startswith(section.rstrip("/") + "/")


def current_of(link: NavLink, path: str) -> str | None:
    """`aria-current` of `link` on the page at `path`."""
    if path == link.href and link.sections:
        return "page"
    if any(_within(path, s) for s in link.sections):
        return "true"
    return None


def main_nav(path: str, *, admin: bool) -> list[NavItem]:
    """The links a user sees on the page at `path` (administrators see the admin pages
    too), each marked current or not; at most one is current."""
    items: list[NavItem] = []
    marked = False
    for link in MAIN_NAV:
        if link.admin and not admin:
            continue
        current = None if marked else current_of(link, path)
        marked = marked or current is not None
        items.append(NavItem(link.href, link.label, current))
    return items

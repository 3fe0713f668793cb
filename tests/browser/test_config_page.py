"""The configuration page in headless Chromium against a real `steamharness serve`: a person
edits values and saves (htmx swaps the panel in place; the secret's mask keeps the stored
secret), then a save after someone else's change shows the conflict and keeps what was
typed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, checked
from tests.configs.project import SETTINGS_PROJECT, write_settings_project
from tests.e2e.server import LiveServer, make_server
from tests.helpers import WAIT

NAME = "pia"
PASSWORD = "browser-config-pw-1"
SECRET = "browser-secret-51c0"
API = f"/api/workflows/{SETTINGS_PROJECT}/configs"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = make_server(tmp_path_factory.mktemp("browser-config"))
    server.add_project(write_settings_project(server.projects / "settings"), SETTINGS_PROJECT)
    server.add_user(NAME, password=PASSWORD)
    server.grant(NAME, all_projects=True)
    with server.running():
        yield server


def admin_api(server: LiveServer, method: str, path: str, **kwargs: Any) -> httpx2.Response:
    """The server admin key on pia's scope."""
    return httpx2.request(
        method,
        f"{server.base_url}{path}",
        params={"account": NAME, **kwargs.pop("params", {})},
        headers={"Authorization": f"Bearer {server.admin_key}", **kwargs.pop("headers", {})},
        timeout=WAIT,
        **kwargs,
    )


@pytest.fixture
def ui(page: Page, request: pytest.FixtureRequest) -> Iterator[Page]:
    # A refused save answers 409, which htmx swaps in but the browser logs as a failed request.
    console = Console(allowed=[re.compile(r"favicon\.ico"), re.compile(r"409")]).watch(page)
    yield from checked(page, console, request)


def test_editing_a_value_and_saving_in_the_browser(server: LiveServer, ui: Page) -> None:
    seeded = admin_api(
        server, "PATCH", f"{API}/default", headers={"If-Match": '"1"'}, json={"values": {"token": SECRET}}
    )
    assert seeded.status_code == 200, seeded.text

    ui.goto(f"{server.base_url}/login?next=/projects/{SETTINGS_PROJECT}/config")
    ui.get_by_label("Username").fill(NAME)
    ui.get_by_label("Password").fill(PASSWORD)
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{server.base_url}/projects/{SETTINGS_PROJECT}/config")
    card = ui.locator("section.config-card", has=ui.get_by_role("heading", name=re.compile("^default")))
    expect(card.get_by_role("heading", name=re.compile("revision 2"))).to_be_visible()
    expect(card.get_by_label("token")).to_have_value("********")
    expect(card.get_by_label("token")).to_have_attribute("type", "password")
    ui.evaluate("window.__sameDocument = true")

    card.get_by_label("threshold").fill("12")
    card.get_by_label("dry_run").check()
    card.get_by_label("region").select_option("us")
    card.get_by_label("start").fill("2026-12-24")
    card.get_by_role("button", name="Save default").click()

    expect(ui.get_by_role("status")).to_have_text("Saved default.")
    expect(card.get_by_role("heading", name=re.compile("revision 3"))).to_be_visible()
    assert ui.evaluate("window.__sameDocument === true"), "the panel should be swapped in place"
    doc = admin_api(server, "POST", f"{API}/export", params={"secrets": "true"}).json()
    default = next(c for c in doc["configurations"] if c["name"] == "default")
    assert default["values"] == {
        "endpoint": "https://a.example",
        "threshold": 12,
        "dry_run": True,
        "region": "us",
        "tags": [],
        "start": "2026-12-24",
        "token": SECRET,
    }

    # Someone else saves revision 4 while the form still states revision 3.
    other = admin_api(
        server, "PATCH", f"{API}/default", headers={"If-Match": '"3"'}, json={"values": {"threshold": 1}}
    )
    assert other.status_code == 200, other.text
    card.get_by_label("threshold").fill("99")
    card.get_by_role("button", name="Save default").click()
    alert = card.get_by_role("alert")
    expect(alert).to_contain_text("revision 4")
    expect(alert).to_contain_text("revision 3")
    expect(card.get_by_label("threshold")).to_have_value("99")
    expect(card.locator(".stored-now")).to_contain_text("threshold")
    card.get_by_role("button", name="Save default").click()  # deliberately replaces revision 4
    expect(ui.get_by_role("status")).to_have_text("Saved default.")
    shown = admin_api(server, "GET", f"{API}/default").json()["data"]
    assert shown["revision"] == 5 and shown["values"]["threshold"] == 99


def test_exporting_with_secrets_from_the_page_downloads_them(server: LiveServer, ui: Page) -> None:
    """The Export form is a POST carrying the page's CSRF token: ticking Include secrets and
    pressing Download JSON still downloads the secret (and a GET link no longer would)."""
    seeded = admin_api(server, "GET", f"{API}/default")
    assert seeded.status_code == 200, seeded.text
    revision = seeded.headers["etag"]
    saved = admin_api(
        server, "PATCH", f"{API}/default", headers={"If-Match": revision}, json={"values": {"token": SECRET}}
    )
    assert saved.status_code == 200, saved.text

    ui.goto(f"{server.base_url}/login?next=/projects/{SETTINGS_PROJECT}/config")
    ui.get_by_label("Username").fill(NAME)
    ui.get_by_label("Password").fill(PASSWORD)
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{server.base_url}/projects/{SETTINGS_PROJECT}/config")
    export = ui.locator("form", has=ui.get_by_role("button", name="Download JSON"))
    expect(export).to_have_attribute("method", "post")
    ui.get_by_label("Include secrets").check()
    with ui.expect_download() as info:
        ui.get_by_role("button", name="Download JSON").click()
    path = info.value.path()
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["secretsIncluded"] is True
    default = next(c for c in doc["configurations"] if c["name"] == "default")
    assert default["values"]["token"] == SECRET

    ui.get_by_label("Include secrets").uncheck()
    with ui.expect_download() as info:
        ui.get_by_role("button", name="Download JSON").click()
    plain = info.value.path().read_text(encoding="utf-8")
    assert SECRET not in plain and json.loads(plain)["secretsIncluded"] is False

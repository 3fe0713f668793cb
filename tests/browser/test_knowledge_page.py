"""The knowledge page in headless Chromium against a real `steamharness serve`: an
administrator uploads a file through the page's script (the <progress> follows the upload
and the per-file result shows), then searches and sees the matched word marked."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, checked
from tests.configs.project import SETTINGS_PROJECT, write_settings_project
from tests.e2e.server import LiveServer, make_server
from tests.helpers import WAIT

NAME = "kim"
PASSWORD = "browser-knowledge-pw-1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = make_server(tmp_path_factory.mktemp("browser-knowledge"))
    server.add_project(write_settings_project(server.projects / "settings"), SETTINGS_PROJECT)
    server.add_user(NAME, admin=True, password=PASSWORD)
    with server.running():
        yield server


@pytest.fixture
def ui(page: Page, request: pytest.FixtureRequest) -> Iterator[Page]:
    console = Console(allowed=[re.compile(r"favicon\.ico")]).watch(page)
    yield from checked(page, console, request)


def test_an_admin_uploads_with_progress_then_finds_the_word_marked(server: LiveServer, ui: Page) -> None:
    path = f"/projects/{SETTINGS_PROJECT}/knowledge"
    ui.goto(f"{server.base_url}/login?next={path}")
    ui.get_by_label("Username").fill(NAME)
    ui.get_by_label("Password").fill(PASSWORD)
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{server.base_url}{path}")
    ui.evaluate("window.__sameDocument = true")

    form = ui.locator("#knowledge-upload")
    form.get_by_label("Collection").fill("manuals")
    body = ("The zebra grazes quietly. " + "filler words here. " * 20000).encode()
    form.get_by_label(re.compile("^Files")).set_input_files(
        {"name": "zebra.txt", "mimeType": "text/plain", "buffer": body}
    )
    form.get_by_role("button", name="Upload").click()

    expect(ui.locator("#upload-results li")).to_have_text(
        re.compile(r"^zebra\.txt: added \(d-"), timeout=WAIT * 1000
    )
    expect(ui.locator("#upload-status")).to_have_text("Upload finished.")
    progress = ui.locator("#upload-progress")
    expect(progress).to_be_visible()
    assert progress.evaluate("p => p.max > 1 && p.value === p.max"), progress.evaluate(
        "p => [p.value, p.max]"
    )
    assert ui.evaluate("window.__sameDocument === true"), "the script should upload without leaving the page"

    ui.reload()
    search = ui.locator("#knowledge-search")
    search.get_by_label("Words").fill("zebras")
    search.get_by_role("button", name="Search").click()
    hit = ui.locator("#search-hits li").first
    expect(hit).to_contain_text("zebra.txt")
    expect(hit.locator("mark")).to_have_text("zebra")

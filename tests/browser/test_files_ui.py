"""What people meet first, in headless Chromium against one real `steamharness serve` (a
2000-byte file limit and a 5000-byte project quota, so the refusals are small files):

- a question with file fields (one file, several files) answered with the file picker:
  too-big files are refused before uploading, chosen files upload and can be removed, and
  accepting resumes the run, which finishes with the uploaded files' ids;
- the file picker in Try it, including a refusal by the server (the project quota);
- "Nothing is waiting" returns once the last pending question is answered, and a
  date-time answered in the browser's zone (Asia/Kolkata, +05:30) is stored in UTC;
- the audit filter form puts only non-empty filters into the address bar.

Runs are started from Try it (their questions wait in the Inbox). Every page is
checked for console errors when its test ends."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import Browser, FilePayload, Locator, Page, expect

from tests.browser.conftest import DEFAULT_TIMEOUT_MS, Console, checked
from tests.e2e.server import FILES, INTERACTIVE, LiveServer, running_server

ADMIN_NAME = "fiona"
ADMIN_PASSWORD = "browser-files-pw-1"
MAX_FILE_BYTES = 2000
QUOTA_BYTES = 5000
WAIT_MS = 30_000  # a question appears once a worker started the run and it asked
HANDLERS = """
def pick_files(ctx):
    answer = ctx.ask(
        "Send the files",
        [
            {"name": "form", "type": "file", "required": True, "title": "Signed form"},
            {"name": "extras", "type": "file", "multiple": True, "title": "Attachments"},
        ],
    )
    return {"answer": answer}


def pick_time(ctx):
    when = {"name": "when", "type": "string", "format": "date-time", "required": True}
    when["title"] = "Meeting time"
    return {"answer": ctx.ask("When shall we meet?", [when])}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {
        "STEAMHARNESS_MAX_FILE_BYTES": str(MAX_FILE_BYTES),
        "STEAMHARNESS_PROJECT_FILE_QUOTA_BYTES": str(QUOTA_BYTES),
    }
    with running_server(tmp_path_factory.mktemp("browser-files"), **env) as live:
        folder = live.projects / "interactive"
        (folder / "asks.py").write_text(HANDLERS, encoding="utf-8")
        doc = json.loads((folder / "package.json").read_text(encoding="utf-8"))
        for name in ("pick_files", "pick_time"):
            doc["entrypoints"].append({"id": name, "title": name, "handler": f"asks.py:{name}", "params": []})
        (folder / "package.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
        live.add_user(ADMIN_NAME, admin=True, password=ADMIN_PASSWORD)
        yield live


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def ui(
    browser: Browser, server: LiveServer, console: Console, request: pytest.FixtureRequest
) -> Iterator[Page]:
    """A logged-in page in the Asia/Kolkata zone; a screenshot to /tmp if the test fails,
    and a check for console errors when it passes."""
    context = browser.new_context(timezone_id="Asia/Kolkata")
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    console.watch(page)
    page.goto(f"{server.base_url}/login")
    page.get_by_label("Username").fill(ADMIN_NAME)
    page.get_by_label("Password").fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{server.base_url}/projects")
    try:
        yield from checked(page, console, request)
    finally:
        context.close()


def a_file(name: str, size: int) -> FilePayload:
    return {"name": name, "mimeType": "text/plain", "buffer": (name.encode() * size)[:size]}


def try_it(page: Page, server: LiveServer, project_id: str, tool: str) -> Locator:
    """The Try it form of `tool` (draft target), opened."""
    page.goto(f"{server.base_url}/projects/{project_id}/mcp?target=draft")
    article = page.get_by_role("article", name=re.compile(rf"\b{tool}\b"))
    article.locator("summary", has_text="Try it").click()
    return article.locator(".try")


def start_run(page: Page, server: LiveServer, tool: str) -> None:
    """Try it starts `tool`; its question waits in the Inbox."""
    form = try_it(page, server, INTERACTIVE, tool)
    form.get_by_role("button", name=f"Run {tool}").click()
    expect(form.get_by_role("status")).to_contain_text("waiting for input", timeout=WAIT_MS)


def question(page: Page, server: LiveServer, title: str) -> Locator:
    page.goto(f"{server.base_url}/inbox")
    card = page.get_by_role("article", name=title).first
    expect(card).to_have_attribute("data-status", "pending", timeout=WAIT_MS)
    return card


def uploaded_ids(files: Locator) -> list[str]:
    return [item.get_attribute("data-file-id") or "" for item in files.get_by_role("listitem").all()]


# --------------------------------------------------------------------------- conversation cards


def test_a_question_with_file_fields_is_answered_with_the_file_picker(ui: Page, server: LiveServer) -> None:
    start_run(ui, server, "pick_files")
    card = question(ui, server, "Send the files")
    single = card.get_by_label(re.compile(r"^Signed form"))
    several = card.get_by_label(re.compile(r"^Attachments"))
    expect(single).to_have_attribute("type", "file")
    expect(several).to_have_attribute("multiple", "")
    form_files = card.get_by_role("list", name="Files for Signed form")
    extra_files = card.get_by_role("list", name="Files for Attachments")
    # files.js has taken both pickers over (a file chosen before that would go unseen)
    for picker in card.locator("[data-file-picker]").all():
        expect(picker).to_have_attribute("data-started", "true")

    # too big: refused before anything is sent, with the limit named
    single.set_input_files([a_file("huge.pdf", MAX_FILE_BYTES + 1)])
    alert = card.locator(".file-picker").first.get_by_role("alert")
    expect(alert).to_have_text(
        "“huge.pdf” (2001 bytes) is larger than the 2000 bytes limit per file; nothing was uploaded."
    )
    expect(form_files.get_by_role("listitem")).to_have_count(0)

    # one file: uploaded, listed, its id in the answer
    single.set_input_files([a_file("signed.txt", 120)])
    expect(form_files.get_by_role("listitem")).to_have_count(1)
    expect(form_files).to_contain_text("signed.txt (120 bytes)")
    expect(alert).to_be_hidden()
    expect(card.get_by_role("status").first).to_have_text("Uploaded “signed.txt”.")
    [form_id] = uploaded_ids(form_files)
    assert re.fullmatch(r"wf_[0-9a-f]{16}", form_id)

    # several files, one removed again
    several.set_input_files([a_file("a.txt", 10), a_file("b.txt", 20), a_file("c.txt", 30)])
    expect(extra_files.get_by_role("listitem")).to_have_count(3)
    extra_files.get_by_role("button", name="Remove b.txt").click()
    expect(extra_files.get_by_role("listitem")).to_have_count(2)
    expect(extra_files).not_to_contain_text("b.txt")
    extra_ids = uploaded_ids(extra_files)
    assert len(set(extra_ids)) == 2 and form_id not in extra_ids

    card.get_by_role("button", name="Accept").click()
    expect(card).to_have_attribute("data-status", "answered", timeout=WAIT_MS)  # the answer resumes a worker
    expect(card.get_by_role("status")).to_contain_text("Answered in the browser by user:fiona")
    # The run's output (the timeline's `pre`) arrives after the answer shows: wait for it.
    output_block = card.locator(".timeline pre")
    expect(output_block).to_contain_text(form_id, timeout=WAIT_MS)
    output = output_block.inner_text()
    assert json.loads(output) == {
        "answer": {"form": {"id": form_id}, "extras": [{"id": i} for i in extra_ids]}
    }


def test_nothing_is_waiting_returns_when_the_last_question_is_answered_and_times_keep_their_zone(
    ui: Page, server: LiveServer
) -> None:
    start_run(ui, server, "pick_time")
    card = question(ui, server, "When shall we meet?")
    empty = ui.get_by_text("Nothing is waiting for an answer.")
    expect(empty).to_be_hidden()
    expect(ui.locator('article.interaction[data-status="pending"]')).to_have_count(1)
    ui.evaluate("window.__sameDocument = true")
    card.get_by_label("Meeting time").fill("2026-03-01T09:30")
    card.get_by_role("button", name="Accept").click()
    expect(card).to_have_attribute("data-status", "answered", timeout=WAIT_MS)  # the answer resumes a worker
    expect(empty).to_be_visible()
    assert ui.evaluate("window.__sameDocument === true"), "the page was reloaded"
    # 09:30 in India (+05:30) is 04:00 UTC
    expect(card.locator(".timeline pre")).to_contain_text("2026-03-01T04:00:00Z", timeout=WAIT_MS)


# --------------------------------------------------------------------------- Try it


def test_try_it_uploads_files_with_the_picker_and_shows_the_servers_refusal(
    ui: Page, server: LiveServer, console: Console
) -> None:
    console.allowed.append(re.compile(r"status of 413 .*/files"))  # the quota refusal below
    form = try_it(ui, server, FILES, "summarize")
    document = form.get_by_label(re.compile(r"^document"))
    attachments = form.get_by_label(re.compile(r"^attachments"))
    attached = form.get_by_role("list", name="Files for attachments")
    attachments.set_input_files([a_file("one.bin", 1900), a_file("two.bin", 1900)])
    expect(attached.get_by_role("listitem")).to_have_count(2)
    # a third would pass the per-file limit but not the project's quota: the server says so
    attachments.set_input_files([a_file("three.bin", 1900)])
    alert = form.locator(".file-picker").nth(1).get_by_role("alert")
    expect(alert).to_contain_text("“three.bin” was not uploaded:")
    expect(alert).to_contain_text("Nothing was stored")
    expect(attached.get_by_role("listitem")).to_have_count(2)
    attached.get_by_role("button", name="Remove two.bin").click()
    expect(attached.get_by_role("listitem")).to_have_count(1)

    document.set_input_files([a_file("notes.txt", 64)])
    expect(form.get_by_role("list", name="Files for document").get_by_role("listitem")).to_have_count(1)
    form.get_by_role("button", name="Run summarize").click()
    output = form.locator(".try-outcome pre").first
    expect(output).to_contain_text('"name": "notes.txt"', timeout=WAIT_MS)
    result = json.loads(output.inner_text())
    assert (result["bytes"], result["attachments"]) == (64, 1)


# --------------------------------------------------------------------------- audit filters


def test_the_audit_filters_put_only_non_empty_values_in_the_address(ui: Page, server: LiveServer) -> None:
    ui.goto(f"{server.base_url}/admin/audit")
    form = ui.get_by_role("search", name="Filter audit events")
    form.get_by_label("Actor", exact=True).fill(f"user:{ADMIN_NAME}")
    form.get_by_role("button", name="Apply filters").click()
    expect(ui).to_have_url(f"{server.base_url}/admin/audit?actor=user%3A{ADMIN_NAME}")
    form.get_by_label("Actor", exact=True).fill("")
    form.get_by_label("Event type", exact=True).fill("interaction.answered")
    form.get_by_role("button", name="Apply filters").click()
    expect(ui).to_have_url(f"{server.base_url}/admin/audit?event=interaction.answered")
    # a plain form GET with empty fields (no script) lands on the same clean address
    ui.goto(f"{server.base_url}/admin/audit?event=&project=&actor=user%3A{ADMIN_NAME}&since=&until=")
    expect(ui).to_have_url(f"{server.base_url}/admin/audit?actor=user%3A{ADMIN_NAME}")
    assert dict(parse_qsl(urlsplit(ui.url).query, keep_blank_values=True)) == {"actor": f"user:{ADMIN_NAME}"}
    expect(ui.get_by_role("search").get_by_label("Actor", exact=True)).to_have_value(f"user:{ADMIN_NAME}")

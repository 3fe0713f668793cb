"""The web UI in headless Chromium (Debian's, driven by Playwright) against one real
`steamharness serve` for the whole module:

- logging in, and a wrong password;
- the MCP page: the target picker swaps endpoint, generic JSON and catalog in place and
  updates the address bar; the copied generic JSON equals the expected structure;
- the inbox: an MCP client started by the test (in a thread with its own event
  loop, declaring elicitation but never answering it) calls `plan_trip`; each question
  appears live, is answered in the browser, and the client receives the tool's result;
  then the decline path;
- the audit log lists those runs' events, and its filters narrow the table.

The audit test reads the runs the conversation tests leave behind (module state, in file
order), or makes them itself where they ran in another test process. Every page is checked
for console errors when its test ends.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
import anyio.from_thread
import anyio.lowlevel
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.conftest import Console, checked
from tests.e2e.server import HELLO, INTERACTIVE, LiveServer, running_server

ADMIN_NAME = "olga"
ADMIN_PASSWORD = "browser-test-pw-1"
WAIT_MS = 30_000  # a question appears once a worker started the run and it asked
CALL_SECONDS = 90.0  # bound of one MCP client call (the tool's own timeout is 120 s)
JOIN_SECONDS = 20.0


# --------------------------------------------------------------------------- the server


def _write_hello(folder: Path, extra: list[str]) -> None:
    """hello's package.json with extra tools (each an echo), so targets differ in catalog."""
    doc = json.loads((folder / "package.json").read_text(encoding="utf-8"))
    doc["entrypoints"] = [e for e in doc["entrypoints"] if e["id"] in ("greet", "echo")]
    for name in extra:
        doc["entrypoints"].append(
            {
                "id": name,
                "title": name.capitalize(),
                "description": f"The {name} tool.",
                "handler": "main.py:echo",
                "params": [{"name": "text", "type": "string", "required": True}],
            }
        )
    (folder / "package.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")


@dataclass
class Env:
    server: LiveServer
    key: str  # an API key of ADMIN_NAME: the questions its MCP calls raise are the admin's own
    runs: dict[str, str] = field(default_factory=dict)  # "accepted"/"declined" -> run id


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """hello: 1.0.0 = greet, echo; 1.1.0 (latest) adds wave; the draft adds farewell too."""
    with running_server(tmp_path_factory.mktemp("browser")) as server:
        hello = server.projects / "hello"
        _write_hello(hello, ["wave"])
        server.publish(HELLO, "1.1.0")
        _write_hello(hello, ["wave", "farewell"])
        server.add_user(ADMIN_NAME, admin=True, password=ADMIN_PASSWORD)
        yield Env(server, server.create_key(ADMIN_NAME))


# --------------------------------------------------------------------------- the browser


@pytest.fixture
def console(page: Page) -> Console:
    return Console().watch(page)


@pytest.fixture
def ui(page: Page, console: Console, env: Env, request: pytest.FixtureRequest) -> Iterator[Page]:
    """The page, with a screenshot to /tmp if the test fails and a check for console
    errors when it passes."""
    yield from checked(page, console, request)


def log_in(page: Page, base_url: str, password: str = ADMIN_PASSWORD, next_path: str = "") -> None:
    page.goto(f"{base_url}/login{next_path}")
    page.get_by_label("Username").fill(ADMIN_NAME)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


@pytest.fixture
def logged_in(ui: Page, env: Env) -> Page:
    log_in(ui, env.server.base_url)
    expect(ui).to_have_url(f"{env.server.base_url}/projects")
    return ui


def mark_document(page: Page) -> None:
    """A marker that lives as long as this document: gone after any reload or navigation."""
    page.evaluate("window.__sameDocument = true")


def assert_same_document(page: Page) -> None:
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"


# --------------------------------------------------------------------------- an MCP client in a thread


class McpCall:
    """One `tools/call` by the Python SDK client, in a thread with its own event loop.

    The client declares elicitation, so the server also sends each question to it; its
    callback records the question and never answers (the browser does; the server then
    cancels the client's pending request). Use `mcp_call()`, which always stops it."""

    def __init__(self, url: str, key: str, tool: str, arguments: dict[str, Any]) -> None:
        self.url, self.key, self.tool, self.arguments = url, key, tool, arguments
        self.asked: list[str] = []  # the messages of the elicitations the client received
        self._result: types.CallToolResult | None = None
        self._error: BaseException | None = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._scope: anyio.CancelScope | None = None
        self._thread = threading.Thread(target=self._main, name=f"mcp-client-{tool}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._started.wait(JOIN_SECONDS), "the MCP client's event loop did not start"

    def _main(self) -> None:
        try:
            anyio.run(self._call)
        except BaseException as exc:  # the top of the thread: the test reads it from result()
            self._error = exc
        finally:
            self._done.set()

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.message)
        await anyio.Event().wait()  # never answers; the server's cancellation ends this
        raise AssertionError("unreachable")

    async def _call(self) -> None:
        self._token = anyio.lowlevel.current_token()
        with anyio.CancelScope() as scope:
            self._scope = scope
            self._started.set()
            with anyio.fail_after(CALL_SECONDS):
                async with (
                    httpx2.AsyncClient(
                        headers={"Authorization": f"Bearer {self.key}"},
                        timeout=httpx2.Timeout(30, read=CALL_SECONDS + 30),
                    ) as http,
                    Client(
                        streamable_http_client(self.url, http_client=http),
                        mode="legacy",
                        elicitation_callback=self._elicit,
                    ) as client,
                ):
                    self._result = await client.call_tool(self.tool, self.arguments)

    def result(self, timeout: float = CALL_SECONDS) -> dict[str, Any]:
        """The tool result's structured content (which must equal its text content)."""
        assert self._done.wait(timeout), f"the MCP client got no result within {timeout:.0f}s"
        if self._error is not None:
            raise AssertionError(f"the MCP client failed: {self._error!r}") from self._error
        result = self._result
        assert result is not None, "the MCP client was stopped before its result"
        assert isinstance(result.content[0], types.TextContent)
        body = json.loads(result.content[0].text)
        assert body == result.structured_content
        assert result.is_error is not True, body
        return body

    def stop(self) -> None:
        if not self._done.is_set() and self._token is not None and self._scope is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                anyio.from_thread.run_sync(self._scope.cancel, token=self._token)
        self._thread.join(JOIN_SECONDS)
        assert not self._thread.is_alive(), "the MCP client thread did not stop"


@contextlib.contextmanager
def mcp_call(env: Env, tool: str, arguments: dict[str, Any]) -> Iterator[McpCall]:
    call = McpCall(env.server.mcp_url(INTERACTIVE), env.key, tool, arguments)
    call.start()
    try:
        yield call
    finally:
        call.stop()


# --------------------------------------------------------------------------- login


def test_logging_in_with_the_right_password_opens_the_requested_page(ui: Page, env: Env) -> None:
    base = env.server.base_url
    ui.goto(f"{base}/inbox")
    expect(ui).to_have_url(re.compile(re.escape(f"{base}/login?next=") + r"(/|%2F)inbox$"))
    ui.get_by_label("Username").fill(ADMIN_NAME)
    ui.get_by_label("Password").fill(ADMIN_PASSWORD)
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{base}/inbox")
    expect(ui.get_by_role("heading", level=1)).to_have_text("Inbox")
    expect(ui.locator("header .who")).to_have_text(ADMIN_NAME)
    expect(ui.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log")).to_be_visible()


def test_a_wrong_password_shows_the_error_and_stays_on_the_login_form(
    ui: Page, env: Env, console: Console
) -> None:
    console.allowed.append(re.compile(r"status of 401 .*/login"))  # the form answers 401
    log_in(ui, env.server.base_url, password="not-the-password")
    expect(ui.get_by_role("alert")).to_have_text("Invalid username or password.")
    expect(ui).to_have_url(f"{env.server.base_url}/login")
    expect(ui.get_by_role("button", name="Log in")).to_be_visible()
    expect(ui.locator("header .who")).to_have_count(0)
    # and the form still works after the failure (fresh CSRF token)
    ui.get_by_label("Username").fill(ADMIN_NAME)
    ui.get_by_label("Password").fill(ADMIN_PASSWORD)
    ui.get_by_role("button", name="Log in").click()
    expect(ui).to_have_url(f"{env.server.base_url}/projects")


# --------------------------------------------------------------------------- the MCP page


def generic_config(url: str) -> dict[str, Any]:
    """The generic client configuration, in the common mcpServers shape."""
    return {
        "mcpServers": {
            f"workflow-{HELLO}": {"url": url, "headers": {"Authorization": "Bearer <YOUR_API_KEY>"}}
        }
    }


def tool_names(page: Page) -> Locator:
    return page.locator("#mcp-target article.tool > .tool-about > h3 > code")


def picker(page: Page) -> Locator:
    return page.get_by_role("navigation", name="Target")


def test_switching_targets_changes_address_endpoint_json_and_catalog_in_place(
    logged_in: Page, env: Env
) -> None:
    page, server = logged_in, env.server
    page_url = f"{server.base_url}/projects/{HELLO}/mcp?target="
    page.goto(f"{server.base_url}/projects/{HELLO}/mcp")
    expect(page).to_have_url(page_url + "latest")  # no target: the latest version
    expect(page.locator("#endpoint")).to_have_text(server.mcp_url(HELLO, "latest"))
    expect(page.locator("#resolved")).to_contain_text("Latest resolves to version 1.1.0 now.")
    expect(page.locator("#tools-h")).to_have_text("Tools of latest (1.1.0)")
    expect(tool_names(page)).to_have_text(["greet", "echo", "wave"])
    assert json.loads(page.locator("#config-generic").inner_text()) == generic_config(
        server.mcp_url(HELLO, "latest")
    )
    expect(picker(page).get_by_role("link")).to_have_count(4)  # draft, latest, 1.1.0, 1.0.0
    expect(picker(page).get_by_role("link", name=re.compile(r"^Latest"))).to_contain_text("now 1.1.0")
    mark_document(page)

    steps = [
        ("draft", re.compile(r"^Draft"), "The draft", ["greet", "echo", "wave", "farewell"]),
        ("1.0.0", "1.0.0", "Version 1.0.0, pinned.", ["greet", "echo"]),
        ("1.1.0", "1.1.0", "Version 1.1.0, pinned.", ["greet", "echo", "wave"]),
        ("latest", re.compile(r"^Latest"), "Latest resolves to version 1.1.0", ["greet", "echo", "wave"]),
    ]
    for target, link_name, resolved, tools in steps:
        link = picker(page).get_by_role("link", name=link_name, exact=isinstance(link_name, str))
        link.click()
        expect(page).to_have_url(page_url + target)
        expect(page.locator("#endpoint")).to_have_text(server.mcp_url(HELLO, target))
        expect(page.locator("#resolved")).to_contain_text(resolved)
        expect(tool_names(page)).to_have_text(tools)
        expect(
            picker(page).get_by_role("link", name=link_name, exact=isinstance(link_name, str))
        ).to_have_attribute("aria-current", "page")
        expect(picker(page).locator("[aria-current=page]")).to_have_count(1)
        config = json.loads(page.locator("#config-generic").inner_text())
        assert config == generic_config(server.mcp_url(HELLO, target)), target
        assert_same_document(page)  # swapped by htmx, not loaded

    # the browser's Back restores the previous target with its content
    page.go_back()
    expect(page).to_have_url(page_url + "1.1.0")
    expect(page.locator("#endpoint")).to_have_text(server.mcp_url(HELLO, "1.1.0"))
    expect(tool_names(page)).to_have_text(["greet", "echo", "wave"])


def test_the_copied_generic_json_parses_and_equals_the_expected_structure(logged_in: Page, env: Env) -> None:
    page, server = logged_in, env.server
    page.goto(f"{server.base_url}/projects/{HELLO}/mcp?target=latest")
    expected_url = f"{server.base_url}/api/workflows/{HELLO}/mcp?target=latest"

    button = page.locator('button[data-copy-target="config-generic"]')
    button.click()
    expect(button).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    config = json.loads(copied)
    assert config == generic_config(expected_url)
    # exactly the mcpServers shape: one server entry with url, then headers
    ((name, entry),) = config["mcpServers"].items()
    assert name == f"workflow-{HELLO}" and list(entry) == ["url", "headers"]

    page.locator('button[data-copy-target="endpoint"]').click()
    expect(page.locator('button[data-copy-target="endpoint"]')).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == expected_url
    page.locator('button[data-copy-target="header-template"]').click()
    expect(page.locator('button[data-copy-target="header-template"]')).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "Authorization: Bearer <YOUR_API_KEY>"


# --------------------------------------------------------------------------- conversations


def pending_card(page: Page, title: str) -> Locator:
    """The one pending card whose title contains `title`."""
    cards = page.locator('article[data-interaction][data-status="pending"]')
    return cards.filter(has=page.get_by_role("heading", name=title))


def shown_card(page: Page, title: str) -> tuple[Locator, str]:
    """The pending card titled `title` once it is visible, and its interaction id."""
    card = pending_card(page, title)
    expect(card).to_be_visible(timeout=WAIT_MS)
    iid = card.get_attribute("data-interaction")
    assert iid
    return card, iid


def control(card: Locator, interaction_id: str, name: str) -> Locator:
    return card.locator(f'[id="{interaction_id}-{name}"]')


def open_conversations(page: Page, base_url: str) -> None:
    """Opens the view and waits until its event stream answered (so the test sees the
    live push, not only the snapshot a later connection would bring)."""
    with page.expect_response(lambda r: r.url == f"{base_url}/inbox/events") as stream:
        page.goto(f"{base_url}/inbox")
    assert stream.value.status == 200
    mark_document(page)


def answered(page: Page, interaction_id: str) -> Locator:
    card = page.locator(f'[id="interaction-{interaction_id}"]')
    expect(card).to_have_attribute("data-status", "answered", timeout=WAIT_MS)
    return card


def test_an_mcp_clients_questions_appear_live_are_answered_in_the_browser_and_it_gets_the_result(
    logged_in: Page, env: Env
) -> None:
    env.runs["accepted"] = accepted_conversation(logged_in, env)


def accepted_conversation(page: Page, env: Env) -> str:
    """Three questions of one run answered in the browser; the run's id."""
    base = env.server.base_url
    open_conversations(page, base)
    with mcp_call(env, "plan_trip", {"traveller": "Ada"}) as call:
        # 1. Where to?
        card, iid = shown_card(page, "Where to?")
        assert_same_document(page)
        run_id = card.get_attribute("data-run")
        assert run_id
        expect(card).to_contain_text("Tell us about the trip.")
        expect(card).to_contain_text("trip-planner")
        control(card, iid, "destination").fill("Lisbon")
        control(card, iid, "nights").fill("3")
        card.get_by_role("button", name="Accept").click()
        first = answered(page, iid)
        expect(first.get_by_role("status")).to_have_text(f"Answered in the browser by user:{ADMIN_NAME}")

        # 2. Which room? (the same run, pushed live)
        card, iid = shown_card(page, "Which room?")
        expect(card).to_have_attribute("data-run", run_id)
        control(card, iid, "room").select_option(label="Double room")
        card.get_by_role("checkbox", name="breakfast").check()
        card.get_by_role("checkbox", name="late-checkout").check()
        card.get_by_role("button", name="Accept").click()
        answered(page, iid)

        # 3. the approval
        card, iid = shown_card(page, "book 3 nights in Lisbon")
        expect(card).to_have_attribute("data-run", run_id)
        expect(card).to_contain_text("Total 240 EUR.")
        card.get_by_role("button", name="Approve").click()
        last = answered(page, iid)

        body = call.result()
        assert body["runId"] == run_id
        assert body["status"] == "success"
        assert body["output"] == {
            "traveller": "Ada",
            "destination": "Lisbon",
            "nights": 3,
            "room": "double",
            "extras": ["breakfast", "late-checkout"],
            "booked": True,
        }
        # the client was asked the same questions inline, and lost each race to the browser
        assert [m.splitlines()[0] for m in call.asked] == [
            "Where to?",
            "Which room?",
            "Approve: book 3 nights in Lisbon",
        ]

    # the run's timeline on the page follows the run to its end, live
    result = last.locator(".timeline-result")
    expect(result).to_have_attribute("data-run-status", "success", timeout=WAIT_MS)
    expect(result).to_contain_text('"destination": "Lisbon"')
    expect(page.locator('article[data-interaction][data-status="pending"]')).to_have_count(0)
    assert_same_document(page)
    return run_id


def test_declining_the_first_question_ends_the_run_with_its_declined_result(
    logged_in: Page, env: Env
) -> None:
    env.runs["declined"] = declined_conversation(logged_in, env)


def declined_conversation(page: Page, env: Env) -> str:
    """The first question of a run declined in the browser; the run's id."""
    base = env.server.base_url
    open_conversations(page, base)
    with mcp_call(env, "plan_trip", {"traveller": "Ben"}) as call:
        card, iid = shown_card(page, "Where to?")
        run_id = card.get_attribute("data-run")
        assert run_id
        card.get_by_role("button", name="Decline").click()  # required fields left empty
        declined = answered(page, iid)
        expect(declined.get_by_role("status")).to_have_text(f"Declined in the browser by user:{ADMIN_NAME}")
        body = call.result()
    assert body["runId"] == run_id and body["status"] == "success"
    assert body["output"] == {"booked": False, "reason": "declined at destination"}
    expect(declined.locator(".timeline-result")).to_have_attribute(
        "data-run-status", "success", timeout=WAIT_MS
    )
    expect(pending_card(page, "Which room?")).to_have_count(0)
    assert_same_document(page)
    return run_id


def test_a_timeline_read_before_the_runs_end_but_arriving_after_it_leaves_the_run_ended(
    logged_in: Page, env: Env
) -> None:
    """An answered card re-reads its run's timeline once (a GET). Under load that GET can be
    answered while the run still runs and arrive after the run's last SSE event (its end);
    swapped in, it showed the ended run as running for good. Here such a late answer is
    delivered on purpose: the timeline the run's end put there stays."""
    page, base = logged_in, env.server.base_url
    open_conversations(page, base)
    with mcp_call(env, "plan_trip", {"traveller": "Cy"}) as call:
        card, iid = shown_card(page, "Where to?")
        run_id = card.get_attribute("data-run")
        assert run_id
        path = f"/runs/{run_id}/timeline"
        before_end = page.request.get(f"{base}{path}")  # what that GET answers while the run waits
        assert before_end.ok, before_end.status
        stale = before_end.text()
        assert 'data-run-status="waiting_for_input"' in stale, stale
        card.get_by_role("button", name="Decline").click()
        declined = answered(page, iid)
        assert call.result()["runId"] == run_id
    result = declined.locator(".timeline-result")
    expect(result).to_have_attribute("data-run-status", "success", timeout=WAIT_MS)  # the end, over SSE
    page.route(f"{base}{path}", lambda route: route.fulfill(status=200, content_type="text/html", body=stale))
    delivered = page.evaluate(
        """async ([path, target]) => {
            let seen = false;
            const note = () => { seen = true; };
            document.body.addEventListener("htmx:beforeSwap", note, { once: true });
            await htmx.ajax("GET", path, { target, swap: "innerHTML settle:0ms" });
            return seen;
        }""",
        [path, f'[id="interaction-{iid}"] .timeline'],
    )
    assert delivered, "the late timeline never reached the page"
    expect(result).to_have_attribute("data-run-status", "success")
    expect(declined.locator(".timeline-result")).to_have_count(1)
    assert_same_document(page)


# --------------------------------------------------------------------------- audit


def audit_rows(page: Page) -> Locator:
    return page.locator("#audit-rows > tr")


def events_of(rows: Locator) -> list[str]:
    return rows.locator("td:nth-child(2)").all_inner_texts()


def apply_filters(page: Page, **values: str) -> None:
    form = page.get_by_role("search", name="Filter audit events")
    labels = {"event": "Event type", "run": "Run id", "actor": "Actor", "outcome": "Outcome"}
    for name, label in labels.items():
        form.get_by_label(label, exact=True).fill(values.get(name, ""))
    form.get_by_role("button", name="Apply filters").click()


def filters_in_url(url: str) -> dict[str, str]:
    parts = urlsplit(url)
    assert parts.path == "/admin/audit", url
    return {k: v for k, v in parse_qsl(parts.query, keep_blank_values=True) if v}


def expect_filters_in_url(page: Page, **expected: str) -> None:
    """The address bar shows exactly these (non-empty) filters."""
    with contextlib.suppress(PlaywrightTimeoutError):
        page.wait_for_url(lambda url: filters_in_url(url) == expected, timeout=WAIT_MS)
    assert filters_in_url(page.url) == expected


def test_the_audit_page_lists_those_runs_events_and_its_filters_narrow_the_table(
    logged_in: Page, env: Env
) -> None:
    page, base = logged_in, env.server.base_url
    runs = env.runs
    # The conversation tests above leave their runs; a test process that did not run them
    # (xdist may hand this test to another worker, with a server of its own) makes them here.
    if "accepted" not in runs:
        runs["accepted"] = accepted_conversation(page, env)
    if "declined" not in runs:
        runs["declined"] = declined_conversation(page, env)
    page.goto(f"{base}/admin/audit")
    expect(page.get_by_role("heading", level=1)).to_have_text("Audit log")
    mark_document(page)
    rows = audit_rows(page)
    # Unfiltered, the newest 50 events (one page): this module writes about 40 in all.
    for run_id in runs.values():
        of_run = rows.filter(has=page.locator(f'a[href="/runs/{run_id}"]'))
        for event in ("run.created", "interaction.answered", "run.finished"):
            expect(of_run.filter(has=page.get_by_role("link", name=event, exact=True)).first).to_be_visible()
    everything = rows.count()

    # one run: its events only
    apply_filters(page, run=runs["accepted"])
    expect_filters_in_url(page, run=runs["accepted"])
    expect(rows.filter(has_not=page.locator(f'a[href="/runs/{runs["accepted"]}"]'))).to_have_count(0)
    events = events_of(rows)
    assert events.count("interaction.answered") == 3, events
    assert {"run.created", "run.finished"} <= set(events), events

    # and one event type of it: the three answers
    apply_filters(page, run=runs["accepted"], event="interaction.answered")
    expect_filters_in_url(page, event="interaction.answered", run=runs["accepted"])
    expect(rows).to_have_count(3)
    assert set(events_of(rows)) == {"interaction.answered"}
    expect(rows.first).to_contain_text(f"user:{ADMIN_NAME}")

    # the event type alone (a documented name: the calls' runs' own run.created): both calls
    apply_filters(page, event="tool.called")
    expect_filters_in_url(page, event="tool.called")
    expect(rows.filter(has_not=page.get_by_role("link", name="run.created", exact=True))).to_have_count(0)
    for run_id in runs.values():
        expect(rows.filter(has=page.locator(f'a[href="/runs/{run_id}"]'))).to_have_count(1)
    assert 2 <= rows.count() < everything
    expect(page.get_by_role("search").get_by_label("Event type", exact=True)).to_have_value("tool.called")
    assert_same_document(page)  # the filters swapped the results in place

    # the decline is recorded with its action
    apply_filters(page, run=runs["declined"], event="interaction.answered")
    expect_filters_in_url(page, event="interaction.answered", run=runs["declined"])
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("decline")

"""The MCP sessions console in headless Chromium against a real `steamharness serve`: a
session opened by the Python SDK client (in a thread with its own event loop) is listed
with its client's name, and terminating it from the page ends it — the client's next
request gets 404, its waiting run is cancelled and the audit log shows who did it."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from playwright.sync_api import Page, expect

from tests.e2e.server import INTERACTIVE, LiveServer, running_server

ADMIN_NAME = "sam"
ADMIN_PASSWORD = "sessions-console-pw-1"
CLIENT_NAME = "console-probe"
STEP_SECONDS = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("sessions-console")) as live:
        live.add_user(ADMIN_NAME, admin=True, password=ADMIN_PASSWORD)
        yield live


class HeldSession:
    """An MCP session of the Python SDK client, in a thread with its own event loop: it
    calls `plan_trip` (declaring no elicitation, so the run waits on a question), then holds
    the session until `next_call()`, which makes one more request and reports its failure."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.run_id: str | None = None
        self.failure: BaseException | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._go = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._main, name="held-mcp-session", daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(STEP_SECONDS), f"the client did not call within {STEP_SECONDS:.0f}s"
        assert self._error is None, f"the MCP client failed: {self._error!r}"

    def _main(self) -> None:
        try:
            anyio.run(self._session)
        except BaseException as exc:  # the top of the thread: the test reads it
            self._error = exc
        finally:
            self._ready.set()
            self._done.set()

    async def _session(self) -> None:
        with anyio.fail_after(STEP_SECONDS * 3):
            async with (
                httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {self.key}"}, timeout=httpx2.Timeout(30, read=90)
                ) as http,
                Client(
                    streamable_http_client(self.url, http_client=http),
                    mode="legacy",
                    client_info=types.Implementation(name=CLIENT_NAME, version="1.0"),
                ) as client,
            ):
                result = await client.call_tool("plan_trip", {"traveller": "Di"})
                assert isinstance(result.content[0], types.TextContent)
                self.run_id = json.loads(result.content[0].text)["runId"]
                self._ready.set()
                await anyio.to_thread.run_sync(self._go.wait)
                try:
                    await client.list_tools()
                except MCPError as exc:
                    self.failure = exc

    def next_call(self) -> BaseException | None:
        self._go.set()
        assert self._done.wait(STEP_SECONDS), "the client's next call did not end"
        assert self._error is None, f"the MCP client failed: {self._error!r}"
        return self.failure

    def stop(self) -> None:
        self._go.set()
        self._thread.join(STEP_SECONDS)
        assert not self._thread.is_alive(), "the MCP client thread did not stop"


@contextlib.contextmanager
def held_session(server: LiveServer, key: str) -> Iterator[HeldSession]:
    session = HeldSession(server.mcp_url(INTERACTIVE), key)
    try:
        session.start()
        yield session
    finally:
        session.stop()


def log_in(page: Page, server: LiveServer) -> None:
    page.goto(f"{server.base_url}/login")
    page.get_by_label("Username").fill(ADMIN_NAME)
    page.get_by_label("Password").fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{server.base_url}/projects")


def run_status(server: LiveServer, run_id: str) -> dict[str, Any]:
    r = httpx2.get(
        f"{server.base_url}/api/runs/{run_id}",
        headers={"Authorization": f"Bearer {server.admin_key}"},
        timeout=STEP_SECONDS,
    )
    assert r.status_code == 200, r.text
    return r.json()["data"]


def test_terminating_a_listed_session_ends_it_cancels_its_run_and_is_audited(
    page: Page, server: LiveServer
) -> None:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(exc.message))
    key = server.create_key(ADMIN_NAME)
    with held_session(server, key) as session:
        assert session.run_id is not None
        assert run_status(server, session.run_id)["status"] == "waiting_for_input"
        log_in(page, server)
        page.get_by_role("navigation", name="Main").get_by_role("link", name="MCP sessions").click()
        expect(page.get_by_role("heading", name="Live MCP sessions")).to_be_visible()
        row = page.get_by_role("row").filter(has_text=CLIENT_NAME)
        expect(row).to_have_count(1)
        expect(row.get_by_role("cell", name=f"{CLIENT_NAME} 1.0")).to_be_visible()
        expect(row.get_by_role("cell", name=ADMIN_NAME, exact=True)).to_be_visible()
        expect(row.get_by_role("cell", name="2025-11-25")).to_be_visible()

        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name=re.compile(r"^Terminate session ")).click()
        expect(page.get_by_role("status")).to_have_text(re.compile(r"^MCP session \S+ terminated\.$"))
        expect(page.get_by_text("No MCP sessions are open.")).to_be_visible()

        failure = session.next_call()
        assert isinstance(failure, MCPError) and str(failure) == "HTTP 404: Session not found"
    run = run_status(server, session.run_id)
    assert run["status"] == "cancelled" and "an administrator terminated it" in run["error"]["message"]

    page.get_by_role("navigation", name="Administration").get_by_role("link", name="Audit log").click()
    terminated = page.get_by_role("row").filter(has_text="session.terminated")
    expect(terminated).to_have_count(1)
    expect(terminated).to_contain_text(f"user:{ADMIN_NAME}")
    assert [e for e in errors if "favicon.ico" not in e] == [], "console errors in the browser"

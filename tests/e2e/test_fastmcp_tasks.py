"""FastMCP 4's client (fastmcp-tasks, the `io.modelcontextprotocol/tasks` extension at
2026-07-28) driving steamharness' MCP tasks end to end against a real `steamharness serve`
and the conformance fixture project (tests/conformance/project).

The client declares the extension itself (importing `fastmcp_tasks` registers it on every
`Client`); nothing here posts JSON-RPC by hand. A long call becomes a task the client polls
with `tasks/get`, a question is answered through the client's elicitation handler (which
the client delivers with `tasks/update`), another in the browser's JSON API or on the
conversation page in headless Chromium, and a task is cancelled with the client's
`tasks/cancel`."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import anyio
import fastmcp_tasks  # registers the client half of the extension on every Client
import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, MODERN, _run_id
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("fastmcp-tasks")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("fastmcp")


class Elicitations:
    """The client's elicitation handler: answers each question with the next queued answer."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        self.asked.append(message)
        return self.answers.pop(0)


def client(server: LiveServer, key: str, handler: Elicitations | None = None) -> Client[Any]:
    transport = StreamableHttpTransport(server.mcp_url(FIXTURE, "draft"), auth=key)
    return Client(transport, elicitation_handler=handler, mode=MODERN, timeout=WAIT)


def _channel(server: LiveServer, run_id: str) -> list[str]:
    rows = server.query("SELECT channel FROM interactions WHERE run_id = :r ORDER BY created_at", r=run_id)
    return [r["channel"] for r in rows]


async def test_the_client_declares_the_extension_and_a_long_call_is_a_task_it_polls_to_the_result(
    server: LiveServer, key: str
) -> None:
    async with client(server, key) as c:
        assert c.protocol_version == MODERN
        task = await fastmcp_tasks.call_tool_task(c, "slow_compute", {"seconds": 1, "label": "fm"})
        run_id = _run_id(task.task_id)
        assert task.create_result.status == "working" and task.create_result.poll_interval_ms == 1000
        assert (await task.status()).status in ("working", "completed")
        result = await task.result()
        assert result.is_error is False
        assert result.content[0].text == "fm: computed in 1 s"  # type: ignore[union-attr]
        assert result.structured_content is not None and result.structured_content["runId"] == run_id
        # The plain call_tool resolves a task transparently: the caller never learns it was one.
        plain = await c.call_tool("slow_compute", {"seconds": 1, "label": "quiet"})
        assert plain.content[0].text == "quiet: computed in 1 s"  # type: ignore[union-attr]
    [event] = [
        e
        for e in server.query("SELECT * FROM audit_events WHERE event = 'tool.task_created'")
        if e["run_id"] == run_id
    ]
    assert event["tool"] == "slow_compute"


async def test_a_question_is_answered_through_the_clients_own_tasks_update(
    server: LiveServer, key: str
) -> None:
    asked = Elicitations({"confirm": True})
    async with client(server, key, asked) as c:
        task = await fastmcp_tasks.call_tool_task(c, "confirm_delete", {"filename": "fm.txt"})
        parked = await task.wait(state="input_required", timeout=WAIT)
        [(question, request)] = (parked.input_requests or {}).items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["requestedSchema"]["required"] == ["confirm"]
        result = await task.result()  # answers through the handler, then tasks/update
        assert result.content[0].text == "fm.txt: deleted"  # type: ignore[union-attr]
    assert asked.asked == ["Delete fm.txt?"]
    [row] = server.query("SELECT channel, status FROM interactions WHERE id = :i", i=question)
    assert row["channel"] == "mcp-task" and row["status"] == "answered"


async def test_the_transparent_call_answers_several_questions_with_one_tasks_update_each(
    server: LiveServer, key: str
) -> None:
    asked = Elicitations({"name": "one"}, {"name": "two"})
    async with client(server, key, asked) as c:
        task = await fastmcp_tasks.call_tool_task(c, "multi_input")
        # Both questions are asked before the client answers, so one tasks/update carries both.
        deadline = time.monotonic() + WAIT
        while len((await task.status()).input_requests or {}) < 2:
            assert time.monotonic() < deadline
            await anyio.sleep(0.05)
        result = await task.result()
        assert result.content[0].text == "one, two"  # type: ignore[union-attr]
    assert len(asked.asked) == 2 and set(_channel(server, _run_id(task.task_id))) == {"mcp-task"}


async def test_a_question_answered_in_the_browser_resumes_the_task_the_client_follows(
    server: LiveServer, key: str
) -> None:
    never = Elicitations()  # the client must not be asked: the browser answers first
    async with client(server, key, never) as c:
        task = await fastmcp_tasks.call_tool_task(c, "confirm_delete", {"filename": "web.txt"})
        parked = await task.wait(state="input_required", timeout=WAIT)
        [question] = parked.input_requests or {}
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            r = await http.post(
                f"{server.base_url}/api/interactions/{question}/answer",
                json={"action": "accept", "content": {"confirm": True}},
                headers={"Authorization": f"Bearer {key}"},
            )
        assert r.status_code == 200, r.text
        done = await task.wait(timeout=WAIT)
        assert done.status == "completed"
        result = await task.result()
        assert result.content[0].text == "web.txt: deleted"  # type: ignore[union-attr]
    assert never.asked == []
    [row] = server.query("SELECT channel FROM interactions WHERE id = :i", i=question)
    assert row["channel"] == "api"


async def test_one_task_two_questions_one_in_the_client_one_in_the_browser(
    server: LiveServer, key: str
) -> None:
    asked = Elicitations({"name": "client"})
    async with client(server, key, asked) as c:
        task = await fastmcp_tasks.call_tool_task(c, "multi_input")
        deadline = time.monotonic() + WAIT
        while len(pending := (await task.status()).input_requests or {}) < 2:
            assert time.monotonic() < deadline
            await anyio.sleep(0.05)
        first, second = pending
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            r = await http.post(
                f"{server.base_url}/api/interactions/{first}/answer",
                json={"action": "accept", "content": {"name": "browser"}},
                headers={"Authorization": f"Bearer {key}"},
            )
        assert r.status_code == 200, r.text
        result = await task.result()  # the client answers what is left: the second question
        assert result.content[0].text == "browser, client"  # type: ignore[union-attr]
    assert len(asked.asked) == 1
    rows = {
        r["id"]: r["channel"]
        for r in server.query("SELECT id, channel FROM interactions WHERE id IN (:a, :b)", a=first, b=second)
    }
    assert rows == {first: "api", second: "mcp-task"}


async def test_the_clients_cancel_ends_the_run_cancelled(server: LiveServer, key: str) -> None:
    async with client(server, key) as c:
        task = await fastmcp_tasks.call_tool_task(c, "slow_compute", {"seconds": 60, "label": "stop"})
        await task.cancel()
        ended = await task.wait(timeout=WAIT)
        assert ended.status == "cancelled" and "cancelled the task" in (ended.status_message or "")
        await task.cancel()  # an ended task's cancel is acknowledged all the same
    [run] = server.query("SELECT status FROM runs WHERE id = :r", r=_run_id(task.task_id))
    assert run["status"] == "cancelled"


async def test_a_failed_task_raises_the_clients_tool_error_with_the_servers_message(
    server: LiveServer, key: str
) -> None:
    from fastmcp.exceptions import ToolError

    async with client(server, key) as c:
        task = await fastmcp_tasks.call_tool_task(c, "protocol_error_job")
        with pytest.raises(ToolError, match="exited with code 3"):
            await task.result()
        business = await fastmcp_tasks.call_tool_task(c, "failing_job", raise_on_error=False)
        result = await business.result()
        assert result.is_error is True


# --------------------------------------------------------------------------- headless Chromium

WEB_USER, WEB_PASSWORD = "fastmcp-web", "fastmcp-web-pw-1"


@pytest.mark.browser
async def test_a_question_answered_on_the_conversation_page_in_chromium_resumes_the_clients_task(
    server: LiveServer,
) -> None:
    """The account logs in in headless Chromium (Debian's, Playwright's async API: it shares
    this test's event loop with the FastMCP client), ticks the task's question on the
    conversation page and accepts; the client, which never answers, gets the result."""
    from playwright.async_api import async_playwright, expect

    from tests.browser.conftest import CHROMIUM_FLAGS

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    assert executable, "Debian's chromium is missing: apt-get install chromium (scripts/test does)"
    server.add_user(WEB_USER, password=WEB_PASSWORD)
    server.grant(WEB_USER, all_projects=True)
    key = server.create_key(WEB_USER)
    never = Elicitations()
    async with async_playwright() as p, client(server, key, never) as c:
        browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = await browser.new_page()
            page.set_default_timeout(WAIT * 1000)
            await page.goto(f"{server.base_url}/login")
            await page.get_by_label("Username").fill(WEB_USER)
            await page.get_by_label("Password").fill(WEB_PASSWORD)
            await page.get_by_role("button", name="Log in").click()
            await expect(page).to_have_url(f"{server.base_url}/projects")
            async with page.expect_response(lambda r: r.url == f"{server.base_url}/inbox/events") as stream:
                await page.goto(f"{server.base_url}/inbox")
            assert (await stream.value).status == 200

            task = await fastmcp_tasks.call_tool_task(c, "confirm_delete", {"filename": "chromium.txt"})
            parked = await task.wait(state="input_required", timeout=WAIT)
            [question] = parked.input_requests or {}
            card = page.locator(f'[id="interaction-{question}"]')
            await expect(card).to_have_attribute("data-status", "pending", timeout=WAIT * 1000)
            await expect(card).to_have_attribute("data-run", _run_id(task.task_id))
            await expect(card).to_contain_text("Delete chromium.txt?")
            await card.locator(f'[id="{question}-confirm"]').check()
            await card.get_by_role("button", name="Accept").click()
            await expect(card).to_have_attribute("data-status", "answered", timeout=WAIT * 1000)

            result = await task.result()
            assert result.content[0].text == "chromium.txt: deleted"  # type: ignore[union-attr]
        finally:
            await browser.close()
    assert never.asked == []
    [row] = server.query("SELECT channel FROM interactions WHERE id = :i", i=question)
    assert row["channel"] == "browser"

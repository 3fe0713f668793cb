"""Keep-alive progress over Streamable HTTP: a real `steamharness serve` with a 1 s
STEAMHARNESS_PROGRESS_INTERVAL_SECONDS, the official TypeScript SDK client with a 5 s request
time-out around a person who answers in the browser's API after 20 s, and the
`interaction_required` message naming the real run."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.e2e.server import TORTURE, LiveServer, running_server
from tests.e2e.test_http_mcp import TIMEOUT, payload, sdk_client
from tests.helpers import strictly_increasing
from tests.node_client import call, finish_client_script, start_client_script, tool_payload
from tests.support.inprocess import in_process_server

CLIENT_TIMEOUT_MS = 5000
PERSON_THINKS_SECONDS = 20  # four of the client's request time-outs
ASKED = "waiting for input: Your name? — answer it in your MCP client or at "


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(
        tmp_path_factory.mktemp("keepalive"), STEAMHARNESS_PROGRESS_INTERVAL_SECONDS="1"
    ) as live:
        yield live


def _query(live: LiveServer, sql: str, *args: Any) -> list[sqlite3.Row]:
    con = sqlite3.connect(live.data_dir / "steamharness.sqlite3")
    con.row_factory = sqlite3.Row
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def pending_question(live: LiveServer, user: str, proc: subprocess.Popen[str]) -> tuple[str, str]:
    """(interaction id, run id) of the user's pending question, once asked (bounded by TIMEOUT)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        rows = _query(
            live,
            "select i.id, i.run_id from interactions i join runs r on r.id = i.run_id "
            "where r.actor = ? and i.status = 'pending'",
            f"user:{user}",
        )
        if rows:
            return rows[0]["id"], rows[0]["run_id"]
        if proc.poll() is not None:
            raise AssertionError(f"the client ended before the question was asked: {proc.communicate()}")
        time.sleep(0.05)  # polling the store for the question, bounded by the deadline
    raise AssertionError("the run never asked its question")


def run_status_becomes(live: LiveServer, user: str, status: str) -> bool:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        rows = _query(live, "select status from runs where actor = ?", f"user:{user}")
        if rows and rows[0]["status"] == status:
            return True
        time.sleep(0.05)  # polling the store, bounded by the deadline
    return False


def _ask_once(node: str, live: LiveServer, key: str, *, reset: bool) -> subprocess.Popen[str]:
    op = call(
        "ask_once",
        timeout_ms=CLIENT_TIMEOUT_MS,
        progress=True,
        reset_timeout_on_progress=reset,
        expect="result" if reset else "error",
    )
    return start_client_script(
        node,
        "http_client.mjs",
        ["--url", live.mcp_url(TORTURE)],
        [op],
        elicitation=True,
        answers=[{"hold": True}],  # the person answers in the browser, not in the client
        env={**os.environ, "MCP_KEY": key},
    )


def test_a_client_resetting_its_timeout_on_progress_waits_for_a_person_who_answers_20_s_later(
    node: str, server: LiveServer
) -> None:
    key = server.create_key("kara")
    proc = _ask_once(node, server, key, reset=True)
    try:
        interaction_id, run_id = pending_question(server, "kara", proc)
        time.sleep(PERSON_THINKS_SECONDS)  # the person reads the question and thinks
        answered = httpx2.post(
            f"{server.base_url}/api/interactions/{interaction_id}/answer",
            headers={"Authorization": f"Bearer {key}"},
            json={"action": "accept", "content": {"name": "Ann"}},
            timeout=TIMEOUT,
        )
        assert answered.status_code == 200, answered.text
        doc, stderr = finish_client_script(proc, "http_client.mjs")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    (step,) = doc["steps"]
    body = tool_payload(step)
    assert body["runId"] == run_id and body["output"] == {"name": "Ann"}, stderr
    (asked,) = doc["elicitations"]
    assert asked["cancelledByServer"] is True  # answered elsewhere: the inline request was withdrawn
    where = f"{ASKED}{server.base_url}/inbox#interaction-{interaction_id}"
    messages = [p.get("message") for p in step["progress"]]
    # 20 s with a 5 s time-out: at least three keep-alives about the question kept it open.
    assert messages.count(where) >= 3
    assert strictly_increasing([p["progress"] for p in step["progress"]])
    assert doc["transportErrors"] == []  # nothing arrived after the call ended


def test_the_same_call_without_reset_timeout_on_progress_times_out_and_its_run_is_cancelled(
    node: str, server: LiveServer
) -> None:
    key = server.create_key("lena")
    proc = _ask_once(node, server, key, reset=False)
    try:
        doc, stderr = finish_client_script(proc, "http_client.mjs")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    (step,) = doc["steps"]
    assert step["error"]["code"] == -32001, stderr  # the TypeScript SDK's RequestTimeout
    assert "timed out" in step["error"]["message"].lower()
    # The client cancelled its call when it gave up: the server cancelled the run.
    assert run_status_becomes(server, "lena", "cancelled")


@pytest.mark.anyio
async def test_interaction_required_names_the_real_run_to_read_back(server: LiveServer) -> None:
    key = server.create_key("mira")
    async with sdk_client(server.mcp_url(TORTURE), key, "legacy") as client:
        result = await client.call_tool("ask_once", {})
    body = payload(result)
    assert result.is_error is True and body["error"]["code"] == "interaction_required"
    message = body["error"]["message"]
    base = server.base_url
    assert f"POST the answer to {base}/api/interactions/{body['error']['interactionId']}/answer" in message
    assert message.endswith(f"then read GET {base}/api/runs/{body['runId']}.")
    async with httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
        with anyio.fail_after(TIMEOUT):
            run = (await http.get(f"/api/runs/{body['runId']}")).json()["data"]
    assert run["status"] == "waiting_for_input"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_long_step_over_http_is_kept_alive_in_both_eras(server: LiveServer, mode: str) -> None:
    key = server.create_key(f"omar-{mode}")
    heard: list[tuple[float, str | None]] = []
    three = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))
        if sum((m or "").startswith("running Sleep: worker=") for _, m in heard) >= 3:
            three.set()

    async with sdk_client(server.mcp_url(TORTURE), key, mode) as client, anyio.create_task_group() as tg:

        async def sleep() -> None:
            await client.call_tool("sleep", {"seconds": 3600}, progress_callback=on_progress)

        tg.start_soon(sleep)
        await three.wait()  # bounded by sdk_client's TIMEOUT
        tg.cancel_scope.cancel()
    assert strictly_increasing([p for p, _ in heard])
    assert run_status_becomes(server, f"omar-{mode}", "cancelled")


@pytest.mark.anyio
async def test_behind_a_load_balancer_the_hint_names_the_public_url(tmp_path: Path) -> None:
    public = "https://mcp.example.com"
    # The hint's text only: the app in this process (the module's live server is the transport pass).
    with in_process_server(tmp_path, STEAMHARNESS_PUBLIC_URL=f"{public}/") as live:
        key = live.create_key("lena")
        async with sdk_client(live.mcp_url(TORTURE), key, "legacy") as client:
            result = await client.call_tool("ask_once", {})
    body = payload(result)
    assert body["error"]["code"] == "interaction_required"
    message = body["error"]["message"]
    assert (
        f"Answer it in the browser at {public}/inbox#interaction-{body['error']['interactionId']}," in message
    )
    assert message.endswith(f"then read GET {public}/api/runs/{body['runId']}.")
    assert live.base_url not in message

"""Keep-alive progress over stdio with a short STEAMHARNESS_PROGRESS_INTERVAL_SECONDS: what
`steamharness mcp` serves driven by the Python SDK client in memory (tests/support/memory.py),
and the real process driven by the official TypeScript SDK client (`resetTimeoutOnProgress`
around a step longer than its time-out)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.session import IncomingMessage

from tests.conftest import TORTURE
from tests.helpers import strictly_increasing
from tests.mcp.test_stdio_protocol import MODES, payload
from tests.node_client import call, run_client_script, steamharness_command, tool_payload
from tests.support.memory import mcp_harness

pytestmark = pytest.mark.anyio

INTERVAL_SECONDS = 0.2
ASKED = "waiting for input: Your name? — answer it in your MCP client"

Heard = list[tuple[float, float | None, str | None]]


@asynccontextmanager
async def connect(data_dir: Path, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    async with (
        mcp_harness(TORTURE, data_dir, progress_interval_seconds=INTERVAL_SECONDS) as harness,
        harness.client(mode, **kwargs) as client,
    ):
        yield client


async def test_a_call_with_a_progress_token_hears_what_it_waits_for_while_the_person_thinks(
    tmp_path: Path,
) -> None:
    heard: Heard = []
    two_ticks = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))
        if sum(m == ASKED for _, _, m in heard) >= 2:
            two_ticks.set()

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        await two_ticks.wait()  # the person answers only after two keep-alives
        return types.ElicitResult(action="accept", content={"name": "Ann"})

    async with connect(tmp_path, "legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("ask_once", {}, progress_callback=on_progress)
    assert payload(result)["output"] == {"name": "Ann"}
    assert [m for _, _, m in heard if m == ASKED][:2] == [ASKED, ASKED]
    assert strictly_increasing([p for p, _, _ in heard])


@pytest.mark.parametrize("mode", MODES)
async def test_a_long_step_is_heard_as_running_and_a_call_without_a_token_hears_nothing(
    tmp_path: Path, mode: str
) -> None:
    heard: Heard = []
    tokens: set[str | int] = set()
    three_ticks = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))
        if sum((m or "").startswith("running Sleep: worker=") for _, _, m in heard) >= 3:
            three_ticks.set()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ProgressNotification):
            tokens.add(message.params.progress_token)

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        await three_ticks.wait()  # the question waits while the other call hears three keep-alives
        return types.ElicitResult(action="accept", content={"name": "Bo"})

    asked: types.CallToolResult | None = None
    async with (
        connect(tmp_path, mode, elicitation_callback=elicit, message_handler=on_message) as client,
        anyio.create_task_group() as tg,
    ):

        async def sleep() -> None:
            await client.call_tool("sleep", {"seconds": 3600}, progress_callback=on_progress)

        tg.start_soon(sleep)
        asked = await client.call_tool("ask_once", {})  # no progress token
        tg.cancel_scope.cancel()
    assert asked is not None and payload(asked)["output"] == {"name": "Bo"}
    # Every notification was the sleeping call's: the question's call, without a token, heard none.
    assert len(tokens) == 1
    assert strictly_increasing([p for p, _, _ in heard])


def test_the_typescript_client_resetting_its_timeout_on_progress_outlives_a_step_four_times_longer(
    node: str, tmp_path: Path
) -> None:
    args = [
        *steamharness_command(),
        "--project",
        str(TORTURE),
        "--data-dir",
        str(tmp_path / "data"),
        "--server-env",
        json.dumps({"STEAMHARNESS_PROGRESS_INTERVAL_SECONDS": "1"}),
    ]
    op = call("sleep", {"seconds": 20}, timeout_ms=5000, progress=True, reset_timeout_on_progress=True)
    doc, stderr = run_client_script(node, "stdio_client.mjs", args, [op])
    (step,) = doc["steps"]
    assert tool_payload(step)["output"] == {"slept": True}, stderr
    assert doc["transportErrors"] == []  # none after the call ended (an unknown token is one)
    messages = [p.get("message", "") for p in step["progress"]]
    # Four time-outs long: at least three keep-alives kept the client waiting.
    assert sum(m.startswith("running Sleep: worker=") for m in messages) >= 3
    assert strictly_increasing([p["progress"] for p in step["progress"]])

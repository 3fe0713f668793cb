"""`ctx.sample` (sampling/createMessage) and `ctx.roots` (roots/list) against a real
`steamharness serve` and the conformance fixture project: inline on a 2025 session with the
Python SDK's client, in a 2026-07-28 input round, through a task; a client that did not
declare the capability is never sent the request (the handler's call raises, naming it); a
client's refusal or a result that is not one; and no person answers them in the browser.

Every wait is bounded by WAIT."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.server import LiveServer, running_server
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, Rpc
from tests.helpers import WAIT

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("client-requests")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("sampler")


async def _call(server: LiveServer, key: str, tool: str, arguments: dict[str, Any], **callbacks: Any) -> Any:
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=WAIT)
    ) as http:
        with anyio.fail_after(WAIT):
            url = server.mcp_url(FIXTURE, "draft")
            async with Client(
                streamable_http_client(url, http_client=http), mode="legacy", **callbacks
            ) as client:
                return await client.call_tool(tool, arguments)


def _row(server: LiveServer, run_id: str) -> dict[str, Any]:
    [row] = server.query(
        "SELECT kind, status, action, channel, answer, client_request, input_key FROM interactions"
        " WHERE run_id = :r",
        r=run_id,
    )
    return row


def _json(value: Any) -> Any:
    import json

    return json.loads(value) if isinstance(value, str) else value


async def test_a_2025_session_samples_inline_and_the_answer_is_kept(server: LiveServer, key: str) -> None:
    seen: list[types.CreateMessageRequestParams] = []

    async def sample(
        ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        seen.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="m-1",
            stop_reason="endTurn",
        )

    result = await _call(
        server, key, "test_sampling", {"prompt": "Capital of France?"}, sampling_callback=sample
    )
    assert result.is_error is not True, result
    assert result.content[0].text == "LLM response: Paris"
    [params] = seen
    assert params.max_tokens == 100
    assert isinstance(params.messages[0].content, types.TextContent)
    assert params.messages[0].content.text == "Capital of France?"
    row = _row(server, result.structured_content["runId"])
    assert (row["kind"], row["status"], row["action"], row["channel"]) == (
        "sampling",
        "answered",
        "accept",
        "mcp-sampling",
    )
    assert _json(row["answer"])["model"] == "m-1"
    assert _json(row["client_request"])["maxTokens"] == 100


async def test_roots_inline_on_a_2025_session(server: LiveServer, key: str) -> None:
    async def roots(ctx: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/a", name="A")])

    result = await _call(server, key, "roots_or_refusal", {}, list_roots_callback=roots)
    assert result.structured_content["output"] == {"roots": [{"uri": "file:///work/a", "name": "A"}]}
    assert _row(server, result.structured_content["runId"])["channel"] == "mcp-roots"


async def test_a_client_without_the_capability_is_never_asked_and_the_handler_hears_why(
    server: LiveServer, key: str
) -> None:
    for tool in ("sample_or_refusal", "roots_or_refusal"):
        result = await _call(server, key, tool, {})
        output = result.structured_content["output"]
        capability = "sampling" if tool.startswith("sample") else "roots"
        assert output == {"refused": f"the MCP client did not declare {capability}"}, output
        row = _row(server, result.structured_content["runId"])
        assert (row["action"], row["channel"]) == ("decline", "mcp-undeclared")


async def test_a_clients_refusal_reaches_the_handler_as_a_decline(server: LiveServer, key: str) -> None:
    async def refuse(ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=-1, message="the user said no")

    result = await _call(server, key, "sample_or_refusal", {}, sampling_callback=refuse)
    assert result.structured_content["output"] == {"refused": "the MCP client declined the sampling request"}


def test_a_2026_round_carries_the_roots_request_and_takes_its_result(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    rpc.caps = {"roots": {}}
    tool = "test_input_required_result_list_roots"
    first = rpc.result(rpc.call(tool))
    assert set(first["inputRequests"]) == {"client_roots"}
    assert first["inputRequests"]["client_roots"]["method"] == "roots/list"
    wrong = rpc.call(
        tool,
        inputResponses={"client_roots": {"action": "accept", "content": {}}},
        requestState=first["requestState"],
    )
    assert wrong["error"]["code"] == -32602
    assert wrong["error"]["message"].startswith("client_roots: not a roots/list result"), wrong["error"]
    done = rpc.result(
        rpc.call(
            tool,
            inputResponses={"client_roots": {"roots": [{"uri": "file:///r"}]}},
            requestState=first["requestState"],
        )
    )
    assert done["content"][0]["text"] == "Roots: file:///r"


def test_a_2026_round_leaves_out_what_the_client_did_not_declare(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    rpc.caps = {"sampling": {}}  # no elicitation
    tool = "test_input_required_result_capabilities"
    first = rpc.result(rpc.call(tool))
    assert [r["method"] for r in first["inputRequests"].values()] == ["sampling/createMessage"]
    answer = {
        "role": "assistant",
        "content": {"type": "text", "text": "Hi"},
        "model": "m",
        "stopReason": "endTurn",
    }
    second = rpc.result(
        rpc.call(tool, inputResponses={"greeting": answer}, requestState=first["requestState"])
    )
    # The form comes next, and this client cannot carry it: the browser is offered instead.
    assert second["structuredContent"]["status"] == "waiting_for_input"


def test_a_2026_client_without_sampling_is_not_sent_it(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    rpc.caps = {"elicitation": {}}
    result = rpc.result(rpc.call("sample_or_refusal"))
    assert result["structuredContent"]["output"] == {"refused": "the MCP client did not declare sampling"}


def test_a_tasks_sampling_request_is_answered_through_tasks_update(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key)
    rpc.caps = {"sampling": {}, "extensions": rpc.caps["extensions"]}
    task_id = rpc.result(rpc.call("sample_task", {"prompt": "hello?"}))["taskId"]
    got = rpc.until(task_id, "input_required")
    [(k, request)] = got["inputRequests"].items()
    assert request["method"] == "sampling/createMessage"
    assert request["params"]["messages"][0]["content"]["text"] == "hello?"
    bad = rpc.task("tasks/update", task_id, inputResponses={k: {"roots": []}})
    assert bad["error"]["code"] == -32602 and "not a sampling/createMessage result" in bad["error"]["message"]
    answer = {
        "role": "assistant",
        "content": {"type": "text", "text": "yes"},
        "model": "m",
        "stopReason": "endTurn",
    }
    assert rpc.result(rpc.task("tasks/update", task_id, inputResponses={k: answer})) == {
        "resultType": "complete"
    }
    text = rpc.until(task_id, "completed")["result"]["content"][0]["text"]
    assert '"text": "yes"' in text, text


def test_no_person_answers_a_client_request_in_the_browser(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key)
    rpc.caps = {"sampling": {}, "extensions": rpc.caps["extensions"]}
    task_id = rpc.result(rpc.call("sample_task", {"prompt": "p"}))["taskId"]
    [iid] = rpc.until(task_id, "input_required")["inputRequests"]
    answer = {
        "role": "assistant",
        "content": {"type": "text", "text": "x"},
        "model": "m",
        "stopReason": "endTurn",
    }
    r = httpx2.post(
        f"{server.base_url}/api/interactions/{iid}/answer",
        json={"action": "accept", "content": answer},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert r.status_code in (400, 422), r.text
    assert "answered by the MCP client" in r.text
    [row] = server.query("SELECT status FROM interactions WHERE id = :i", i=iid)
    assert row["status"] == "pending"
    rpc.task("tasks/cancel", task_id)

"""`ctx.sample` (sampling/createMessage) and `ctx.roots` (roots/list) against a real
`steamharness serve` and the conformance fixture project: inline on a 2025 session with the
Python SDK's client, in a 2026-07-28 input round, through a task; a client that did not
declare the capability is never sent the request (the handler's call raises, naming it); a
client's refusal or a result that is not one; no person answers them in the browser; and
each request and what came back are on the run's timeline (GET /api/runs/{id}, the run
page), the words only for whoever sees the run's report.

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
from pydantic import FileUrl

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_sessions import logged_in
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, Rpc
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("client-requests")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


OWNER, MEMBER = ("sample-owner", "sample-owner-pw-1"), ("sample-member", "sample-member-pw-1")


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("sampler")


@pytest.fixture(scope="module")
def owner_key(server: LiveServer) -> str:
    """The key of a person who logs in to the run pages, beside another member of the project."""
    for name, password in (OWNER, MEMBER):
        server.add_user(name, password=password)
        server.grant(name, [FIXTURE])
    return server.create_key(OWNER[0])


def entries(server: LiveServer, run_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The run's client-request timeline entries as the admin key reads them (kind, text, data)."""
    r = httpx2.get(
        f"{server.base_url}/api/runs/{run_id}",
        headers={"Authorization": f"Bearer {server.admin_key}"},
        timeout=WAIT,
    )
    assert r.status_code == 200, r.text
    events = r.json()["data"]["events"]
    return [
        (e["kind"], e["text"], e["data"]) for e in events if e["kind"] in ("client_request", "client_answer")
    ]


async def paris(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="Paris"),
        model="m-1",
        stop_reason="endTurn",
    )


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
        context: ClientRequestContext, params: types.CreateMessageRequestParams
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
    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///work/a"), name="A")])

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


async def test_a_handler_letting_an_undeclared_sampling_refusal_escape_ends_its_call_with_a_clear_error(
    server: LiveServer, key: str
) -> None:
    # 2025 session: a tool error that names the capability (no JSON-RPC error in that era).
    result = await _call(server, key, "sample_uncaught", {})
    assert result.is_error is True
    error = result.structured_content["error"]
    assert error["code"] == "capability_required"
    assert error["message"] == (
        "The handler needs a client that declares sampling: the MCP client did not declare sampling."
    )
    # 2026-07-28: -32021 naming it, as for a tool that requires it.
    rpc = Rpc(server, key, tasks=False)
    reply = rpc.call("sample_uncaught")
    assert reply["error"]["code"] == -32021, reply
    assert reply["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}

    # A client that declared sampling and declined: the handler's own error, saying why.
    async def refuse(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.ErrorData:
        return types.ErrorData(code=-1, message="no")

    declined = await _call(server, key, "sample_uncaught", {}, sampling_callback=refuse)
    assert declined.is_error is True
    assert declined.structured_content["error"] == {
        "code": "handler_error",
        "message": "The handler raised ClientRequestRefused: the MCP client declined the sampling request.",
    }


async def test_a_clients_refusal_reaches_the_handler_as_a_decline(server: LiveServer, key: str) -> None:
    async def refuse(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.ErrorData:
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


async def test_a_sampling_request_and_the_models_reply_are_on_the_runs_timeline(
    server: LiveServer, key: str
) -> None:
    result = await _call(
        server, key, "test_sampling", {"prompt": "Capital of France?"}, sampling_callback=paris
    )
    run_id = result.structured_content["runId"]
    iid = _row_id(server, run_id)
    assert entries(server, run_id) == [
        (
            "client_request",
            "asked the MCP client's model (sampling/createMessage)",
            {
                "request": "sampling",
                "interactionId": iid,
                "messages": 1,
                "promptChars": len("Capital of France?"),
                "firstText": "Capital of France?",
                "maxTokens": 100,
                "systemPrompt": False,
            },
        ),
        (
            "client_answer",
            "the MCP client's model answered",
            {
                "request": "sampling",
                "interactionId": iid,
                "action": "accept",
                "channel": "mcp-sampling",
                "model": "m-1",
                "stopReason": "endTurn",
                "replyText": "Paris",
                "replyChars": 5,
                "replyTypes": ["text"],
            },
        ),
    ]


async def test_a_roots_request_and_the_roots_given_are_on_the_runs_timeline(
    server: LiveServer, key: str
) -> None:
    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(
            roots=[
                types.Root(uri=FileUrl("file:///work/a"), name="A"),
                types.Root(uri=FileUrl("file:///work/b")),
            ]
        )

    result = await _call(server, key, "roots_or_refusal", {}, list_roots_callback=roots)
    run_id = result.structured_content["runId"]
    iid = _row_id(server, run_id)
    assert entries(server, run_id) == [
        (
            "client_request",
            "asked the MCP client for its roots (roots/list)",
            {"request": "roots", "interactionId": iid},
        ),
        (
            "client_answer",
            "the MCP client gave 2 roots",
            {
                "request": "roots",
                "interactionId": iid,
                "action": "accept",
                "channel": "mcp-roots",
                "count": 2,
                "uris": ["file:///work/a", "file:///work/b"],
            },
        ),
    ]


async def test_a_refusal_and_a_client_never_asked_say_why_on_the_runs_timeline(
    server: LiveServer, key: str
) -> None:
    async def refuse(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.ErrorData:
        return types.ErrorData(code=-1, message="the user said no")

    refused = await _call(server, key, "sample_or_refusal", {}, sampling_callback=refuse)
    undeclared = await _call(server, key, "roots_or_refusal", {})
    (_, _, asked), (kind, text, data) = entries(server, refused.structured_content["runId"])
    assert asked["firstText"] == "hi" and asked["maxTokens"] == 20
    assert (kind, text) == ("client_answer", "the MCP client declined the sampling request")
    assert (data["action"], data["channel"], data["reason"]) == (
        "decline",
        "mcp-sampling",
        "the MCP client declined the sampling request",
    )
    (_, _, _), (kind, text, data) = entries(server, undeclared.structured_content["runId"])
    assert (kind, text) == ("client_answer", "not sent: the MCP client did not declare roots")
    assert (data["channel"], data["reason"]) == ("mcp-undeclared", "the MCP client did not declare roots")


def test_a_2026_round_and_a_tasks_answer_are_on_the_runs_timeline(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key, tasks=False)
    rpc.caps = {"roots": {}}
    tool = "test_input_required_result_list_roots"
    first = rpc.result(rpc.call(tool))
    done = rpc.result(
        rpc.call(
            tool,
            inputResponses={"client_roots": {"roots": [{"uri": "file:///r"}]}},
            requestState=first["requestState"],
        )
    )
    (_, _, _), (_, text, data) = entries(server, done["structuredContent"]["runId"])
    assert (text, data["channel"], data["uris"]) == (
        "the MCP client gave 1 root",
        "mcp-input-required",
        ["file:///r"],
    )

    tasks = Rpc(server, key)
    tasks.caps = {"sampling": {}, "extensions": tasks.caps["extensions"]}
    task_id = tasks.result(tasks.call("sample_task", {"prompt": "hello?"}))["taskId"]
    [k] = tasks.until(task_id, "input_required")["inputRequests"]
    answer = {
        "role": "assistant",
        "content": {"type": "text", "text": "yes"},
        "model": "m",
        "stopReason": "endTurn",
    }
    tasks.result(tasks.task("tasks/update", task_id, inputResponses={k: answer}))
    tasks.until(task_id, "completed")
    [row] = server.query("SELECT run_id FROM interactions WHERE id = :i", i=k)
    (_, _, asked), (_, _, data) = entries(server, row["run_id"])
    assert asked["firstText"] == "hello?"
    assert (data["channel"], data["model"], data["replyText"]) == ("mcp-task", "m", "yes")


async def test_the_run_page_shows_the_request_and_reply_to_its_person_and_only_their_size_to_others(
    server: LiveServer, owner_key: str
) -> None:
    result = await _call(
        server, owner_key, "test_sampling", {"prompt": "Capital of France?"}, sampling_callback=paris
    )
    run_id = result.structured_content["runId"]
    with logged_in(server, OWNER) as (web, _):
        page = web.get(f"/runs/{run_id}").text
    timeline = page[
        page.index('<ol class="timeline">') : page.index("</ol>", page.index('<ol class="timeline">'))
    ]
    assert "asked the MCP client&#39;s model (sampling/createMessage)" in timeline
    assert "at most 100 tokens, no system prompt" in timeline
    assert "<pre>Capital of France?</pre>" in timeline and "<pre>Paris</pre>" in timeline
    assert "model <code>m-1</code>, stop reason <code>endTurn</code>" in timeline
    with logged_in(server, MEMBER) as (web, _):
        page = web.get(f"/runs/{run_id}").text
    timeline = page[
        page.index('<ol class="timeline">') : page.index("</ol>", page.index('<ol class="timeline">'))
    ]
    assert "the MCP client&#39;s model answered" in timeline and "model <code>m-1</code>" in timeline
    assert "Capital of France" not in timeline and "Paris" not in timeline  # (params and output are shown)
    assert "what was said is shown to the person who started the run" in timeline


def test_a_run_waiting_for_its_client_says_so_not_that_a_person_answers(
    server: LiveServer, owner_key: str
) -> None:
    rpc = Rpc(server, owner_key)
    rpc.caps = {"sampling": {}, "extensions": rpc.caps["extensions"]}
    task_id = rpc.result(rpc.call("sample_task", {"prompt": "p"}))["taskId"]
    [iid] = rpc.until(task_id, "input_required")["inputRequests"]
    [row] = server.query("SELECT run_id FROM interactions WHERE id = :i", i=iid)
    try:
        with logged_in(server, OWNER) as (web, _):
            page = web.get(f"/runs/{row['run_id']}").text
            timeline = web.get(f"/runs/{row['run_id']}/timeline").text
        assert "Waiting for the MCP client" in page
        assert "no person answers it here" in page
        assert "Answer in your Inbox" not in page and 'href="/inbox' not in page.split('id="run"')[1]
        assert "Waiting for the MCP client" in timeline
    finally:
        rpc.task("tasks/cancel", task_id)


async def test_the_conversation_timeline_names_the_client_channels(
    server: LiveServer, owner_key: str
) -> None:
    rpc = Rpc(server, owner_key, tasks=False)
    rpc.caps = {"elicitation": {}}
    undeclared = rpc.result(rpc.call("sample_or_refusal"))["structuredContent"]["runId"]
    inline = await _call(server, owner_key, "test_sampling", {"prompt": "Capital?"}, sampling_callback=paris)
    with logged_in(server, OWNER) as (web, _):
        never_sent = web.get(f"/runs/{undeclared}/timeline").text
        answered = web.get(f"/runs/{inline.structured_content['runId']}/timeline").text
    assert "Not sent: the MCP client did not declare sampling" in never_sent, never_sent
    assert "Answered in the MCP client (sampling)" in answered, answered


def _row_id(server: LiveServer, run_id: str) -> str:
    [row] = server.query("SELECT id FROM interactions WHERE run_id = :r", r=run_id)
    return str(row["id"])

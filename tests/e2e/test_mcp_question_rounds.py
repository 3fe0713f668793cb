"""`ctx.together()`: several questions asked at once — a form, a sampling request and a
roots request — against a real `steamharness serve` and the conformance fixture project. At
2026-07-28 one input round carries all the client can answer, under the handler's keys, and
a round answered in part asks the rest next; on a 2025 session they are asked inline one
after the other; a task's input_required lists them all; the browser may answer the form
while the client answers the rest; what the client did not declare is refused, not sent.

Every wait is bounded by WAIT."""

from __future__ import annotations

import json
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
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, Rpc
from tests.helpers import WAIT
from tests.support.inprocess import in_process_server
from tests.support.waiting import eventually

TOOL = "together_or_refusal"
KEYS = {"user_name": "elicitation/create", "greeting": "sampling/createMessage", "client_roots": "roots/list"}
NAME = {"action": "accept", "content": {"name": "Ada"}}
SAMPLED = {
    "role": "assistant",
    "content": {"type": "text", "text": "Hello!"},
    "model": "m",
    "stopReason": "endTurn",
}
ROOTS = {"roots": [{"uri": "file:///srv/a", "name": "a"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("question-rounds")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("rounds")


def _rpc(server: LiveServer, key: str, **caps: Any) -> Rpc:
    rpc = Rpc(server, key, tasks=False)
    rpc.caps = caps
    return rpc


def _rows(server: LiveServer, run_id: str) -> list[dict[str, Any]]:
    return server.query(
        "SELECT id, kind, status, action, channel, input_key FROM interactions WHERE run_id = :r"
        " ORDER BY input_key",
        r=run_id,
    )


def _run_id(server: LiveServer, tool: str = TOOL) -> str:
    [row] = server.query(
        "SELECT id FROM runs WHERE entrypoint_id IN (:a, :b) AND status = 'waiting_for_input'"
        " ORDER BY created_at DESC LIMIT 1",
        a=tool,
        b="together_task",
    )
    return row["id"]


def _answer_in_the_browser_and_end(server: LiveServer, key: str, form_id: str, run_id: str) -> dict[str, Any]:
    """The form answered through the API (as the browser does); the run's output once it ended."""
    r = httpx2.post(
        f"{server.base_url}/api/interactions/{form_id}/answer",
        json={"action": "accept", "content": {"name": "Grace"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert r.status_code == 200, r.text

    def ended() -> dict[str, Any] | None:
        [run] = server.query("SELECT status, output FROM runs WHERE id = :r", r=run_id)
        return (
            None if run["status"] in ("queued", "running", "waiting_for_input", "waiting_for_child") else run
        )

    run = eventually(ended, f"run {run_id} ended")
    assert run["status"] == "success", run
    return json.loads(run["output"]) if isinstance(run["output"], str) else run["output"]


# The same round in two orders: the form first (ask, sample, roots), the client's requests first.
ORDERS = [TOOL, "together_sampling_first"]
ENDED = {
    "name": {"name": "Grace"},
    "greeting": SAMPLED,
    "roots": {"refused": "the MCP client did not declare roots"},
}


@pytest.mark.parametrize("tool", ORDERS)
def test_a_2026_client_declaring_only_sampling_gets_the_same_round_whichever_comes_first(
    server: LiveServer, key: str, tool: str
) -> None:
    rpc = _rpc(server, key, sampling={})
    first = rpc.result(rpc.call(tool))
    # An input round carrying the sampling request, not interaction_required for the form.
    assert first.get("resultType") == "input_required", first
    assert {k: r["method"] for k, r in first["inputRequests"].items()} == {
        "greeting": "sampling/createMessage"
    }
    run_id = _run_id(server, tool)
    rows = _rows(server, run_id)
    # The roots request it did not declare is refused at once; the form waits for the browser.
    assert [(r["input_key"], r["status"], r["channel"]) for r in rows] == [
        ("client_roots", "answered", "mcp-undeclared"),
        ("greeting", "pending", None),
        ("user_name", "pending", None),
    ]
    second = rpc.result(
        rpc.call(tool, inputResponses={"greeting": SAMPLED}, requestState=first["requestState"])
    )
    # Nothing else is left to send this client: it is told the form waits in the browser.
    [form] = [r for r in rows if r["kind"] == "form"]
    assert second["structuredContent"]["status"] == "waiting_for_input", second
    assert second["structuredContent"]["error"]["code"] == "interaction_required"
    assert second["structuredContent"]["error"]["interactionId"] == form["id"]
    assert _answer_in_the_browser_and_end(server, key, form["id"], run_id) == ENDED


@pytest.mark.anyio
@pytest.mark.parametrize("tool", ORDERS)
async def test_a_2025_session_without_forms_is_sent_its_sampling_request_before_the_browser_is_offered(
    server: LiveServer, key: str, tool: str
) -> None:
    seen: list[str] = []

    async def sample(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        seen.append("sampling")
        return types.CreateMessageResult.model_validate(SAMPLED)

    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=WAIT)
    ) as http:
        with anyio.fail_after(WAIT):
            url = server.mcp_url(FIXTURE, "draft")
            async with Client(
                streamable_http_client(url, http_client=http), mode="legacy", sampling_callback=sample
            ) as client:
                result = await client.call_tool(tool, {})
    assert seen == ["sampling"]
    assert result.structured_content is not None, result
    error = result.structured_content["error"]
    assert error["code"] == "interaction_required", result
    run_id = result.structured_content["runId"]
    assert _answer_in_the_browser_and_end(server, key, error["interactionId"], run_id) == ENDED


def test_one_2026_round_carries_all_three_and_the_retry_answers_them(server: LiveServer, key: str) -> None:
    rpc = _rpc(server, key, elicitation={}, sampling={}, roots={})
    first = rpc.result(rpc.call(TOOL))
    assert first["resultType"] == "input_required"
    assert {k: r["method"] for k, r in first["inputRequests"].items()} == KEYS
    assert first["inputRequests"]["greeting"]["params"]["maxTokens"] == 50
    run_id = _run_id(server)
    # All three were stored before the round was sent (one transaction), each under its key.
    assert [(r["kind"], r["input_key"], r["status"]) for r in _rows(server, run_id)] == [
        ("roots", "client_roots", "pending"),
        ("sampling", "greeting", "pending"),
        ("form", "user_name", "pending"),
    ]
    responses = {"user_name": NAME, "greeting": SAMPLED, "client_roots": ROOTS}
    done = rpc.result(rpc.call(TOOL, inputResponses=responses, requestState=first["requestState"]))
    assert done["structuredContent"]["output"] == {
        "name": {"name": "Ada"},
        "greeting": SAMPLED,
        "roots": ROOTS["roots"],
    }
    assert {r["channel"] for r in _rows(server, run_id)} == {"mcp-input-required"}


def test_a_round_answered_in_part_asks_the_rest_next(server: LiveServer, key: str) -> None:
    rpc = _rpc(server, key, elicitation={}, sampling={}, roots={})
    first = rpc.result(rpc.call(TOOL))
    second = rpc.result(
        rpc.call(TOOL, inputResponses={"greeting": SAMPLED}, requestState=first["requestState"])
    )
    assert second["resultType"] == "input_required"
    assert set(second["inputRequests"]) == {"user_name", "client_roots"}
    # A bad answer in a round records nothing of it: the name stays unanswered too.
    bad = rpc.call(
        TOOL,
        inputResponses={"user_name": NAME, "client_roots": SAMPLED},
        requestState=second["requestState"],
    )
    assert bad["error"]["code"] == -32602 and bad["error"]["message"].startswith("client_roots:"), bad
    run_id = _run_id(server)
    assert {r["input_key"]: r["status"] for r in _rows(server, run_id)} == {
        "client_roots": "pending",
        "greeting": "answered",
        "user_name": "pending",
    }
    done = rpc.result(
        rpc.call(
            TOOL,
            inputResponses={"user_name": NAME, "client_roots": ROOTS},
            requestState=second["requestState"],
        )
    )
    assert done["structuredContent"]["output"]["name"] == {"name": "Ada"}


def test_a_first_call_may_answer_the_whole_round_ahead(server: LiveServer, key: str) -> None:
    rpc = _rpc(server, key, elicitation={}, sampling={}, roots={})
    done = rpc.result(
        rpc.call(TOOL, inputResponses={"user_name": NAME, "greeting": SAMPLED, "client_roots": ROOTS})
    )
    assert done["structuredContent"]["status"] == "success", done
    assert done["structuredContent"]["output"]["roots"] == ROOTS["roots"]


def test_what_the_client_did_not_declare_is_refused_and_the_form_still_asked(
    server: LiveServer, key: str
) -> None:
    rpc = _rpc(server, key, elicitation={})
    first = rpc.result(rpc.call(TOOL))
    assert list(first["inputRequests"]) == ["user_name"]
    done = rpc.result(rpc.call(TOOL, inputResponses={"user_name": NAME}, requestState=first["requestState"]))
    assert done["structuredContent"]["output"] == {
        "name": {"name": "Ada"},
        "greeting": {"refused": "the MCP client did not declare sampling"},
        "roots": {"refused": "the MCP client did not declare roots"},
    }


def test_a_declined_form_in_a_round_is_none_and_the_rest_answered(server: LiveServer, key: str) -> None:
    rpc = _rpc(server, key, elicitation={}, sampling={}, roots={})
    first = rpc.result(rpc.call(TOOL))
    responses = {"user_name": {"action": "decline"}, "greeting": SAMPLED, "client_roots": ROOTS}
    done = rpc.result(rpc.call(TOOL, inputResponses=responses, requestState=first["requestState"]))
    assert done["structuredContent"]["output"]["name"] is None
    assert done["structuredContent"]["output"]["greeting"] == SAMPLED


def test_cancelling_the_form_of_a_round_cancels_the_run(server: LiveServer, key: str) -> None:
    rpc = _rpc(server, key, elicitation={}, sampling={}, roots={})
    first = rpc.result(rpc.call(TOOL))
    done = rpc.result(
        rpc.call(TOOL, inputResponses={"user_name": {"action": "cancel"}}, requestState=first["requestState"])
    )
    assert done["structuredContent"]["status"] == "cancelled", done
    run_id = done["structuredContent"]["runId"]
    # The round's other questions can no longer be answered.
    assert {r["input_key"]: r["status"] for r in _rows(server, run_id)} == {
        "client_roots": "closed",
        "greeting": "closed",
        "user_name": "answered",
    }


def test_the_browser_answers_the_form_while_the_client_answers_the_rest(server: LiveServer, key: str) -> None:
    rpc = _rpc(server, key, elicitation={}, sampling={}, roots={})
    first = rpc.result(rpc.call(TOOL))
    run_id = _run_id(server)
    [form] = [r for r in _rows(server, run_id) if r["kind"] == "form"]
    r = httpx2.post(
        f"{server.base_url}/api/interactions/{form['id']}/answer",
        json={"action": "accept", "content": {"name": "Grace"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert r.status_code == 200, r.text
    done = rpc.result(
        rpc.call(
            TOOL,
            inputResponses={"greeting": SAMPLED, "client_roots": ROOTS},
            requestState=first["requestState"],
        )
    )
    assert done["structuredContent"]["output"]["name"] == {"name": "Grace"}


def test_a_tasks_input_required_lists_the_whole_round(server: LiveServer, key: str) -> None:
    rpc = Rpc(server, key)
    rpc.caps = {"elicitation": {}, "sampling": {}, "roots": {}, "extensions": rpc.caps["extensions"]}
    task_id = rpc.result(rpc.call("together_task"))["taskId"]
    got = rpc.until(task_id, "input_required")
    assert {k: r["method"] for k, r in got["inputRequests"].items()} == KEYS
    update = rpc.task(
        "tasks/update",
        task_id,
        inputResponses={"user_name": NAME, "greeting": SAMPLED, "client_roots": ROOTS},
    )
    assert rpc.result(update) == {"resultType": "complete"}
    text = rpc.until(task_id, "completed")["result"]["content"][0]["text"]
    assert json.loads(text)["output"]["name"] == {"name": "Ada"}, text


@pytest.mark.anyio
async def test_a_2025_session_is_asked_each_inline_in_order(server: LiveServer, key: str) -> None:
    seen: list[str] = []

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append("elicitation")
        return types.ElicitResult(action="accept", content={"name": "Lin"})

    async def sample(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        seen.append("sampling")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Hi Lin"),
            model="m",
            stop_reason="endTurn",
        )

    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        seen.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///srv/b"))])

    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=WAIT)
    ) as http:
        with anyio.fail_after(WAIT):
            url = server.mcp_url(FIXTURE, "draft")
            async with Client(
                streamable_http_client(url, http_client=http),
                mode="legacy",
                elicitation_callback=elicit,
                sampling_callback=sample,
                list_roots_callback=roots,
            ) as client:
                result = await client.call_tool("test_input_required_result_multiple_inputs", {})
    assert result.is_error is not True, result
    (text,) = result.content
    assert isinstance(text, types.TextContent) and text.text == "Hi Lin Lin (1 roots)"
    assert seen == ["elicitation", "sampling", "roots"]

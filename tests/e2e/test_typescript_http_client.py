"""A real `steamharness serve` driven by the official TypeScript MCP SDK client over Streamable HTTP.

Each test runs tests/node/http_client.mjs (Client + StreamableHTTPClientTransport from
@modelcontextprotocol/sdk, Bearer key in requestInit.headers) once, with a scripted list of
operations and elicitation answers, and checks the single JSON document it prints. The
person's side (uploading files, answering interactions, reading runs) goes through the
server's HTTP API with httpx2. One server serves the module; every test uses its own user
and key, and only the runs it starts.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.server import FILES, HELLO, INTERACTIVE, LiveServer, running_server
from tests.node_client import (
    BOOKING,
    TRIP_ANSWERS,
    HttpObserved,
    assert_interactive_tools,
    assert_trip_elicited_and_booked,
    assert_trip_interaction_required,
    call,
    run_client_script,
    tool_payload,
)

INTERACTIVE_SERVER_NAME = f"workflow-{INTERACTIVE}"
HTTP_TIMEOUT_SECONDS = 30  # each API request the test makes itself
RUN_SETTLE_SECONDS = 30  # how long a resumed run may take to ask again or finish
FINAL_STATUSES = ("success", "failed", "cancelled", "timeout")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("ts-http")) as live:
        yield live


def run_client(
    node: str,
    url: str,
    key: str,
    ops: list[dict[str, Any]],
    *,
    elicitation: bool = False,
    answers: list[dict[str, Any]] | None = None,
) -> HttpObserved:
    doc, stderr = run_client_script(
        node,
        "http_client.mjs",
        ["--url", url],
        ops,
        elicitation=elicitation,
        answers=answers,
        env={**os.environ, "MCP_KEY": key},  # not on argv, where `ps` would show it
    )
    return HttpObserved.read(doc, stderr)


def assert_clean_session(seen: HttpObserved) -> None:
    """Connected, no stray transport errors, and the session was ended with DELETE."""
    assert seen.connect_error is None
    assert seen.session_id
    assert seen.transport_errors == []
    assert seen.session_terminated is True


def api(server: LiveServer, key: str) -> httpx2.Client:
    return httpx2.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=HTTP_TIMEOUT_SECONDS
    )


def read_run_after(http: httpx2.Client, run_id: str, answered: str) -> dict[str, Any]:
    """GET the run until it asks a new question or ends, after `answered` was answered.

    The answer endpoint returns once the run has resumed, so the first read normally already
    shows the next question or the end; in between the run may briefly read `running` (the
    handler working before it asks again, or its new question written before its status),
    which the poll covers, bounded by RUN_SETTLE_SECONDS."""
    deadline = time.monotonic() + RUN_SETTLE_SECONDS
    while True:
        response = http.get(f"/api/runs/{run_id}")
        assert response.status_code == 200, response.text
        run = response.json()["data"]
        pending = run.get("interaction")
        # The next question and the run's waiting status are two writes: wait for both (a
        # read between them shows the new question on a run still `running`).
        asking_again = (
            pending and pending["interactionId"] != answered and run["status"] == "waiting_for_input"
        )
        if run["status"] in FINAL_STATUSES or asking_again:
            return run
        if time.monotonic() > deadline:
            pytest.fail(f"run {run_id} neither asked again nor ended {RUN_SETTLE_SECONDS}s after: {run}")
        time.sleep(0.05)  # bounded by the deadline above


def test_latest_target_initializes_as_the_workflow_id_at_the_published_version_and_lists_the_entrypoints(
    node, server
):
    key = server.create_key("ts-http-lister", projects=[INTERACTIVE])

    seen = run_client(node, server.mcp_url(INTERACTIVE, "latest"), key, [{"op": "listTools"}])

    assert_clean_session(seen)
    assert_interactive_tools(seen, INTERACTIVE_SERVER_NAME)


def test_plan_trip_with_elicitation_asks_two_forms_and_an_approval_over_http_then_returns_the_booking(
    node, server
):
    key = server.create_key("ts-http-eliciting", projects=[INTERACTIVE])

    seen = run_client(
        node,
        server.mcp_url(INTERACTIVE),
        key,
        [call("plan_trip", {"traveller": "Ada"})],
        elicitation=True,
        answers=TRIP_ANSWERS,
    )

    assert_clean_session(seen)
    assert_trip_elicited_and_booked(seen)


def test_plan_trip_without_elicitation_is_interaction_required_and_answering_through_the_api_finishes_it(
    node, server
):
    key = server.create_key("ts-http-no-elicitation", projects=[INTERACTIVE])

    seen = run_client(node, server.mcp_url(INTERACTIVE), key, [call("plan_trip", {"traveller": "Ada"})])

    assert_clean_session(seen)
    payload = assert_trip_interaction_required(seen)
    error = payload["error"]
    assert f"{server.base_url}/api/interactions/{error['interactionId']}/answer" in error["message"]
    run_id = payload["runId"]

    with api(server, key) as http:
        # The run outlives the (terminated) MCP session: it still waits on the same question.
        response = http.get(f"/api/runs/{run_id}")
        assert response.status_code == 200, response.text
        run = response.json()["data"]
        assert run["status"] == "waiting_for_input"
        assert run["interaction"]["interactionId"] == error["interactionId"]

        asked: list[str] = []
        for answer in TRIP_ANSWERS:  # one answer per round; a fourth question would fail below
            pending = run.get("interaction")
            assert run["status"] == "waiting_for_input" and pending, run
            asked.append(pending["title"])
            response = http.post(f"/api/interactions/{pending['interactionId']}/answer", json=answer)
            assert response.status_code == 200, response.text
            assert response.json()["data"] == {
                "interactionId": pending["interactionId"],
                "runId": run_id,
                "action": "accept",
                "repeated": False,
            }
            run = read_run_after(http, run_id, pending["interactionId"])

    assert asked == ["Where to?", "Which room?", "Approve: book 3 nights in Lisbon"]
    assert run["status"] == "success", run
    assert "interaction" not in run
    assert run["output"] == BOOKING


def test_a_file_uploaded_through_the_files_api_is_read_by_summarize_when_passed_by_id(node, server):
    key = server.create_key("ts-http-files", projects=[FILES])
    data = b"alpha\nbeta\ngamma\ndelta"  # four lines, the last without a newline

    with api(server, key) as http:
        response = http.post(
            f"/api/workflows/{FILES}/files",
            params={"fileName": "notes.txt", "mimeType": "text/plain"},
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
    assert response.status_code == 201, response.text
    (uploaded,) = response.json()["data"]
    assert uploaded["id"].startswith("wf_")
    assert uploaded["size"] == len(data)

    seen = run_client(
        node, server.mcp_url(FILES), key, [call("summarize", {"document": {"id": uploaded["id"]}})]
    )

    assert_clean_session(seen)
    (step,) = seen.steps
    assert step["result"]["isError"] is False
    payload = tool_payload(step)
    assert payload["status"] == "success"
    assert payload["entrypointId"] == "summarize"
    output = payload["output"]
    summary_file = output.pop("summaryFile")
    assert output == {
        "name": "notes.txt",
        "mimeType": "text/plain",
        "lines": 4,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "attachments": 0,
    }
    assert summary_file["name"] == "summary.txt"
    assert summary_file["id"].startswith("wf_") and summary_file["id"] != uploaded["id"]
    # the TypeScript SDK takes the file's link as a resource_link content item
    (link,) = step["result"]["content"][1:]
    assert link["type"] == "resource_link" and link["name"] == "summary.txt"
    assert link["uri"] == f"{server.base_url}/api/runs/{payload['runId']}/files/{summary_file['id']}"


def test_a_key_without_permission_on_the_project_is_refused_with_http_403_at_connect(node, server):
    key = server.create_key("ts-http-outsider", projects=[HELLO])

    seen = run_client(node, server.mcp_url(INTERACTIVE), key, [{"op": "listTools"}])

    assert seen.connect_error is not None
    assert seen.connect_error["code"] == 403
    assert (
        "HTTP 403: this API key (or its account) has no run permission on this project"
        in seen.connect_error["message"]
    )
    assert seen.server is None
    assert seen.session_id is None
    assert seen.steps == []
    assert seen.session_terminated is None

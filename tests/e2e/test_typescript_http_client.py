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
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e.server import FILES, HELLO, INTERACTIVE, LiveServer, running_server

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "node"
CLIENT_SCRIPT = NODE_DIR / "http_client.mjs"

INTERACTIVE_SERVER_NAME = f"workflow-{INTERACTIVE}"
CLIENT_TIMEOUT_SECONDS = 120  # the whole client process: start, handshake, every call, close
REQUEST_TIMEOUT_MS = 30_000  # each MCP request inside it
HTTP_TIMEOUT_SECONDS = 30  # each API request the test makes itself
RUN_SETTLE_SECONDS = 30  # how long a resumed run may take to ask again or finish

WHERE = {"destination": "Lisbon", "nights": 3, "start": "2026-05-01"}
ROOM = {"room": "double", "extras": ["breakfast", "parking"]}
TRIP_ANSWERS = [
    {"action": "accept", "content": WHERE},
    {"action": "accept", "content": ROOM},
    {"action": "accept", "content": {}},
]
FINAL_STATUSES = ("success", "failed", "cancelled", "timeout")
BOOKING = {
    "traveller": "Ada",
    "destination": "Lisbon",
    "nights": 3,
    "room": "double",
    "extras": ["breakfast", "parking"],
    "booked": True,
}


@dataclass
class Observed:
    connect_error: dict[str, Any] | None
    server: dict[str, Any] | None
    session_id: str | None
    steps: list[dict[str, Any]]
    elicitations: list[dict[str, Any]]
    transport_errors: list[str]
    session_terminated: bool | None


@pytest.fixture(scope="module")
def node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: the TypeScript SDK tests need Node.js 18+ (see README.md)")
    if not (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.fail(
            f"{NODE_DIR}/node_modules is missing the TypeScript MCP SDK: run `bash scripts/test` "
            f"(or `cd tests/node && npm ci`) first"
        )
    return node


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
) -> Observed:
    argv = [
        node,
        str(CLIENT_SCRIPT),
        "--url",
        url,
        "--ops",
        json.dumps(ops),
        "--answers",
        json.dumps(answers or []),
        "--timeout-ms",
        str(REQUEST_TIMEOUT_MS),
    ]
    if elicitation:
        argv.append("--elicitation")
    proc = subprocess.run(
        argv,
        cwd=NODE_DIR,
        env={**os.environ, "MCP_KEY": key},  # not on argv, where `ps` would show it
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_SECONDS,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"http_client.mjs exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    doc = json.loads(proc.stdout)
    return Observed(
        connect_error=doc["connectError"],
        server=doc["serverVersion"],
        session_id=doc["sessionId"],
        steps=doc["steps"],
        elicitations=doc["elicitations"],
        transport_errors=doc["transportErrors"],
        session_terminated=doc["sessionTerminated"],
    )


def call(name: str, arguments: dict[str, Any] | None = None, *, expect: str = "result") -> dict[str, Any]:
    return {"op": "callTool", "name": name, "arguments": arguments or {}, "expect": expect}


def tool_payload(step: dict[str, Any]) -> dict[str, Any]:
    """The structuredContent of a tool result, checked to equal its text content's JSON."""
    assert "result" in step, step
    result = step["result"]
    assert [c["type"] for c in result["content"]] == ["text"]
    assert result["structuredContent"] == json.loads(result["content"][0]["text"])
    return result["structuredContent"]


def assert_clean_session(seen: Observed) -> None:
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
    handler working before it asks again), which the poll covers, bounded by RUN_SETTLE_SECONDS."""
    deadline = time.monotonic() + RUN_SETTLE_SECONDS
    while True:
        response = http.get(f"/api/runs/{run_id}")
        assert response.status_code == 200, response.text
        run = response.json()["data"]
        pending = run.get("interaction")
        if run["status"] in FINAL_STATUSES or (pending and pending["interactionId"] != answered):
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
    assert seen.server == {"name": INTERACTIVE_SERVER_NAME, "version": "2.1.0"}
    tools = {t["name"]: t for t in seen.steps[0]["tools"]}
    assert list(tools) == ["plan_trip", "collect_document"]
    assert tools["plan_trip"] == {
        "name": "plan_trip",
        "title": "Plan a trip",
        "description": "Ask where and how long, then the room, then approval to book.",
        "inputSchema": {
            "type": "object",
            "properties": {"traveller": {"type": "string", "description": "Who travels"}},
            "required": ["traveller"],
            "additionalProperties": False,
        },
    }
    assert tools["collect_document"]["title"] == "Collect a document"
    assert tools["collect_document"]["inputSchema"] == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


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
    where, room, approval = seen.elicitations
    assert where["message"].startswith("Where to?")
    assert where["requestedSchema"]["required"] == ["destination", "nights"]
    assert set(where["requestedSchema"]["properties"]) == {"destination", "nights", "start"}
    assert room["message"].startswith("Which room?")
    assert room["requestedSchema"]["required"] == ["room"]
    assert approval["message"].startswith("Approve: book 3 nights in Lisbon")
    assert "Total 240 EUR." in approval["message"]
    assert approval["requestedSchema"] == {"type": "object", "properties": {}}

    (step,) = seen.steps
    assert step["result"]["isError"] is False
    payload = tool_payload(step)
    assert isinstance(payload.pop("runId"), str)
    assert payload == {
        "status": "success",
        "entrypointId": "plan_trip",
        "entrypointTitle": "Plan a trip",
        "output": BOOKING,
    }


def test_plan_trip_without_elicitation_is_interaction_required_and_answering_through_the_api_finishes_it(
    node, server
):
    key = server.create_key("ts-http-no-elicitation", projects=[INTERACTIVE])

    seen = run_client(node, server.mcp_url(INTERACTIVE), key, [call("plan_trip", {"traveller": "Ada"})])

    assert_clean_session(seen)
    assert seen.elicitations == []
    (step,) = seen.steps
    assert step["result"]["isError"] is True
    payload = tool_payload(step)
    assert payload["status"] == "waiting_for_input"
    assert payload["entrypointId"] == "plan_trip"
    error = payload["error"]
    assert error["code"] == "interaction_required"
    assert error["title"] == "Where to?"
    assert [(f["name"], f["type"], f["required"]) for f in error["fields"]] == [
        ("destination", "string", True),
        ("nights", "number", True),
        ("start", "string", False),
    ]
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

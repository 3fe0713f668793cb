"""`steamharness mcp DIR` driven by the official TypeScript MCP SDK client over stdio.

Each test runs tests/node/stdio_client.mjs (Client + StdioClientTransport from
@modelcontextprotocol/sdk) once, with a scripted list of operations and elicitation
answers, and checks the single JSON document it prints. Every test gets its own data dir.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "node"
CLIENT_SCRIPT = NODE_DIR / "stdio_client.mjs"
EXAMPLES = ROOT / "examples"
TORTURE = ROOT / "tests" / "fixtures" / "torture"

INTERACTIVE_SERVER_NAME = "workflow-7c9e6679-7425-40de-944b-e07fc1f90ae7"
CLIENT_TIMEOUT_SECONDS = 120  # the whole client process: spawn, handshake, every call, close
REQUEST_TIMEOUT_MS = 30_000  # each MCP request inside it

TRIP_ANSWERS = [
    {"action": "accept", "content": {"destination": "Lisbon", "nights": 3, "start": "2026-05-01"}},
    {"action": "accept", "content": {"room": "double", "extras": ["breakfast", "parking"]}},
    {"action": "accept", "content": {}},
]


@dataclass
class Observed:
    server: dict[str, Any]
    steps: list[dict[str, Any]]
    elicitations: list[dict[str, Any]]
    transport_errors: list[str]
    stderr: str


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


def steamharness_command() -> str:
    beside_python = Path(sys.executable).parent / "steamharness"
    found = str(beside_python) if beside_python.exists() else shutil.which("steamharness")
    if found is None:
        pytest.fail("the steamharness console script is not installed (pip install -e .)")
    return found


def run_client(
    node: str,
    project: Path,
    data_dir: Path,
    ops: list[dict[str, Any]],
    *,
    elicitation: bool = False,
    answers: list[dict[str, Any]] | None = None,
) -> Observed:
    argv = [
        node,
        str(CLIENT_SCRIPT),
        "--command",
        steamharness_command(),
        "--project",
        str(project),
        "--data-dir",
        str(data_dir),
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
        argv, cwd=NODE_DIR, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_SECONDS, check=False
    )
    if proc.returncode != 0:
        pytest.fail(
            f"stdio_client.mjs exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    doc = json.loads(proc.stdout)
    return Observed(
        server=doc["serverVersion"],
        steps=doc["steps"],
        elicitations=doc["elicitations"],
        transport_errors=doc["transportErrors"],
        stderr=proc.stderr,
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


def test_interactive_project_is_served_as_workflow_id_with_one_strict_tool_per_entrypoint(node, tmp_path):
    seen = run_client(node, EXAMPLES / "interactive", tmp_path / "data", [{"op": "listTools"}])

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


def test_plan_trip_asks_two_forms_and_an_approval_through_elicitation_then_returns_the_booking(
    node, tmp_path
):
    seen = run_client(
        node,
        EXAMPLES / "interactive",
        tmp_path / "data",
        [call("plan_trip", {"traveller": "Ada"})],
        elicitation=True,
        answers=TRIP_ANSWERS,
    )

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
        "output": {
            "traveller": "Ada",
            "destination": "Lisbon",
            "nights": 3,
            "room": "double",
            "extras": ["breakfast", "parking"],
            "booked": True,
        },
    }


def test_plan_trip_from_a_client_without_elicitation_ends_in_interaction_required_with_the_run_and_fields(
    node, tmp_path
):
    seen = run_client(
        node, EXAMPLES / "interactive", tmp_path / "data", [call("plan_trip", {"traveller": "Ada"})]
    )

    assert seen.elicitations == []
    (step,) = seen.steps
    assert step["result"]["isError"] is True
    payload = tool_payload(step)
    assert payload["runId"]
    assert payload["status"] == "waiting_for_input"
    assert payload["entrypointId"] == "plan_trip"
    error = payload["error"]
    assert error["code"] == "interaction_required"
    assert error["interactionId"]
    assert error["title"] == "Where to?"
    assert [(f["name"], f["type"], f["required"]) for f in error["fields"]] == [
        ("destination", "string", True),
        ("nights", "number", True),
        ("start", "string", False),
    ]


def test_hello_greet_returns_the_greeting_with_defaults_and_options_applied(node, tmp_path):
    seen = run_client(
        node,
        EXAMPLES / "hello",
        tmp_path / "data",
        [
            call("greet", {"name": "Ada"}),
            call("greet", {"name": "Ada", "times": 2, "shout": True, "language": "fr"}),
        ],
    )

    plain, loud = (tool_payload(step) for step in seen.steps)
    assert plain["status"] == "success"
    assert plain["entrypointId"] == "greet"
    assert plain["entrypointTitle"] == "Greet"
    assert plain["output"] == {"greeting": "Hello, Ada!"}
    assert loud["output"] == {"greeting": "BONJOUR, ADA! BONJOUR, ADA!"}
    assert plain["runId"] != loud["runId"]
    assert all(step["result"]["isError"] is False for step in seen.steps)


def test_ledger_posting_after_close_period_fails_with_business_error_7(node, tmp_path):
    seen = run_client(
        node,
        EXAMPLES / "ledger",
        tmp_path / "data",
        [call("post_entry", {"amount": 5}), call("close_period"), call("post_entry", {"amount": 10})],
    )

    posted, closed, refused = seen.steps
    assert tool_payload(posted)["output"] == {"balance": 5, "entries": 1}
    assert tool_payload(closed)["output"] == {"locked": True, "balance": 5}
    assert refused["result"]["isError"] is True
    payload = tool_payload(refused)
    assert payload["runId"]
    assert payload["status"] == "failed"
    assert payload["entrypointId"] == "post_entry"
    assert payload["error"] == {"code": "business_error", "errCode": 7, "message": "ledger is locked"}


def test_missing_required_argument_is_invalid_params_and_the_next_call_still_works(node, tmp_path):
    seen = run_client(
        node,
        EXAMPLES / "hello",
        tmp_path / "data",
        [call("greet", {"times": 2}, expect="error"), call("greet", {"name": "Bob"})],
    )

    rejected, accepted = seen.steps
    assert "result" not in rejected
    assert rejected["error"]["code"] == -32602
    assert "'name' is a required property" in rejected["error"]["message"]
    assert tool_payload(accepted)["output"] == {"greeting": "Hello, Bob!"}


def test_noisy_handler_output_does_not_corrupt_the_stdio_stream(node, tmp_path):
    seen = run_client(node, TORTURE, tmp_path / "data", [call("noisy"), call("noisy"), {"op": "listTools"}])

    first, second, listed = seen.steps
    for step in (first, second):
        assert step["result"]["isError"] is False
        payload = tool_payload(step)
        assert payload["status"] == "success"
        assert payload["output"] == {"ok": True}
    assert "noisy" in {t["name"] for t in listed["tools"]}
    assert seen.transport_errors == []
    # The noise went to the run log, echoed on the server's stderr, not onto the wire.
    assert "plain stdout noise" in seen.stderr
    assert "from a subprocess" in seen.stderr

"""Running the TypeScript SDK test clients in tests/node and reading what they print.

tests/node/http_client.mjs and tests/node/stdio_client.mjs each print ONE JSON document; this
module finds Node and the console script, runs a client with a scripted list of operations and
elicitation answers, parses the document into `Observed` (`HttpObserved` for the HTTP client),
and holds the checks of the `interactive` example that read the same over either transport.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"
CLIENT_TIMEOUT_SECONDS = 120  # the whole client process: start, handshake, every call, close
REQUEST_TIMEOUT_MS = 30_000  # each MCP request inside it

WHERE = {"destination": "Lisbon", "nights": 3, "start": "2026-05-01"}
ROOM = {"room": "double", "extras": ["breakfast", "parking"]}
TRIP_ANSWERS = [
    {"action": "accept", "content": WHERE},
    {"action": "accept", "content": ROOM},
    {"action": "accept", "content": {}},
]
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
    """The document a client printed, and the client's stderr (where a stdio server's goes too)."""

    server: dict[str, Any] | None
    steps: list[dict[str, Any]]
    elicitations: list[dict[str, Any]]
    transport_errors: list[str]
    stderr: str

    @staticmethod
    def fields_of(doc: dict[str, Any], stderr: str) -> dict[str, Any]:
        return {
            "server": doc["serverVersion"],
            "steps": doc["steps"],
            "elicitations": doc["elicitations"],
            "transport_errors": doc["transportErrors"],
            "stderr": stderr,
        }

    @classmethod
    def read(cls, doc: dict[str, Any], stderr: str) -> Observed:
        return cls(**cls.fields_of(doc, stderr))


@dataclass
class HttpObserved(Observed):
    """What http_client.mjs prints besides: the connect outcome and the session's life."""

    connect_error: dict[str, Any] | None
    session_id: str | None
    session_terminated: bool | None

    @classmethod
    def read(cls, doc: dict[str, Any], stderr: str) -> HttpObserved:
        return cls(
            **cls.fields_of(doc, stderr),
            connect_error=doc["connectError"],
            session_id=doc["sessionId"],
            session_terminated=doc["sessionTerminated"],
        )


def node_executable() -> str:
    """Node on PATH with the TypeScript MCP SDK installed in tests/node, or the test fails."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: the TypeScript SDK tests need Node.js 18+ (see CONTRIBUTING.md)")
    if not (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.fail(
            f"{NODE_DIR}/node_modules is missing the TypeScript MCP SDK: run `bash scripts/test` "
            f"(or `cd tests/node && npm ci`) first"
        )
    return node


def steamharness_command() -> list[str]:
    """stdio_client.mjs's options that start `steamharness` (tests/processes.py: the fork
    server's launcher, or the installed console script under `exec_processes`)."""
    from tests import processes

    command, prefix = processes.stdio_command([])
    if not Path(command).exists():
        pytest.fail("the steamharness console script is not installed (pip install -e .)")
    return ["--command", command, "--command-prefix", json.dumps(prefix)]


def run_client_script(
    node: str,
    script: str,
    args: list[str],
    ops: list[dict[str, Any]],
    *,
    elicitation: bool = False,
    answers: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], str]:
    """Run tests/node/`script` with `args` and the scripted ops and answers; its document and stderr.

    A client that exits non-zero (a crash, or a call that did not end as its `expect` said)
    fails the test with both its outputs."""
    proc = start_client_script(node, script, args, ops, elicitation=elicitation, answers=answers, env=env)
    return finish_client_script(proc, script)


def start_client_script(
    node: str,
    script: str,
    args: list[str],
    ops: list[dict[str, Any]],
    *,
    elicitation: bool = False,
    answers: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """tests/node/`script` started in the background (for a test that acts while the client
    waits); `finish_client_script` collects it."""
    argv = [
        node,
        str(NODE_DIR / script),
        *args,
        "--ops",
        json.dumps(ops),
        "--answers",
        json.dumps(answers or []),
        "--timeout-ms",
        str(REQUEST_TIMEOUT_MS),
    ]
    if elicitation:
        argv.append("--elicitation")
    return subprocess.Popen(
        argv, cwd=NODE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish_client_script(proc: subprocess.Popen[str], script: str) -> tuple[dict[str, Any], str]:
    """The document and stderr of a client started by `start_client_script`, once it exits
    (within CLIENT_TIMEOUT_SECONDS, else it is killed and the test fails)."""
    try:
        stdout, stderr = proc.communicate(timeout=CLIENT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"{script} did not exit within {CLIENT_TIMEOUT_SECONDS}s\nstderr:\n{stderr}")
    if proc.returncode != 0:
        pytest.fail(f"{script} exited {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}")
    return json.loads(stdout), stderr


def call(
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    expect: str = "result",
    timeout_ms: int | None = None,
    progress: bool = False,
    reset_timeout_on_progress: bool = False,
) -> dict[str, Any]:
    """A callTool operation for a client's --ops: `timeout_ms` its own request time-out,
    `progress` to send a progress token and record the notifications (the step's `progress`),
    `reset_timeout_on_progress` the SDK's `resetTimeoutOnProgress`."""
    op: dict[str, Any] = {"op": "callTool", "name": name, "arguments": arguments or {}, "expect": expect}
    if timeout_ms is not None:
        op["timeoutMs"] = timeout_ms
    if progress:
        op["progress"] = True
        op["resetTimeoutOnProgress"] = reset_timeout_on_progress
    return op


def tool_payload(step: dict[str, Any]) -> dict[str, Any]:
    """The structuredContent of a tool result, checked to equal its text content's JSON (the
    first item; any after it link the files the run created: `resource_link`)."""
    assert "result" in step, step
    result = step["result"]
    kinds = [c["type"] for c in result["content"]]
    assert kinds[:1] == ["text"] and set(kinds[1:]) <= {"resource_link"}, kinds
    assert result["structuredContent"] == json.loads(result["content"][0]["text"])
    return result["structuredContent"]


def assert_interactive_tools(seen: Observed, server_name: str) -> None:
    """The `interactive` example (version 2.1.0) as `server_name`, its entrypoints as strict tools."""
    assert seen.server == {"name": server_name, "version": "2.1.0"}
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


def assert_trip_elicited_and_booked(seen: Observed) -> None:
    """plan_trip answered with TRIP_ANSWERS: two forms and an approval asked, then BOOKING returned."""
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


def assert_trip_interaction_required(seen: Observed) -> dict[str, Any]:
    """plan_trip from a client without elicitation: an error result naming the first question.

    Returns the payload (its runId and error.interactionId are checked to be set)."""
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
    return payload

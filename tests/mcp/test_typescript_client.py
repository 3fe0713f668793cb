"""`steamharness mcp DIR` driven by the official TypeScript MCP SDK client over stdio.

Each test runs tests/node/stdio_client.mjs (Client + StdioClientTransport from
@modelcontextprotocol/sdk) once, with a scripted list of operations and elicitation
answers, and checks the single JSON document it prints. Every test gets its own data dir (the
first an empty one, the others a copy of the session's migrated store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests import prepared
from tests.conftest import EXAMPLES, TORTURE
from tests.node_client import (
    TRIP_ANSWERS,
    Observed,
    assert_interactive_tools,
    assert_trip_elicited_and_booked,
    assert_trip_interaction_required,
    call,
    run_client_script,
    steamharness_command,
    tool_payload,
)

INTERACTIVE_SERVER_NAME = "workflow-7c9e6679-7425-40de-944b-e07fc1f90ae7"


def run_client(
    node: str,
    project: Path,
    data_dir: Path,
    ops: list[dict[str, Any]],
    *,
    elicitation: bool = False,
    answers: list[dict[str, Any]] | None = None,
    fresh_store: bool = False,
) -> Observed:
    """The client's ops against `steamharness mcp PROJECT --data-dir DATA_DIR`: the data dir
    holds a copy of the session's migrated store (a fresh one runs every migration at the
    server's start, seconds of disk waits on a busy machine), or nothing with `fresh_store`."""
    if not fresh_store:
        prepared.copy_prepared("store", data_dir)
    args = [*steamharness_command(), "--project", str(project), "--data-dir", str(data_dir)]
    doc, stderr = run_client_script(
        node, "stdio_client.mjs", args, ops, elicitation=elicitation, answers=answers
    )
    return Observed.read(doc, stderr)


def test_interactive_project_is_served_as_workflow_id_with_one_strict_tool_per_entrypoint(node, tmp_path):
    seen = run_client(
        node, EXAMPLES / "interactive", tmp_path / "data", [{"op": "listTools"}], fresh_store=True
    )

    assert_interactive_tools(seen, INTERACTIVE_SERVER_NAME)


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

    assert_trip_elicited_and_booked(seen)


def test_plan_trip_from_a_client_without_elicitation_ends_in_interaction_required_with_the_run_and_fields(
    node, tmp_path
):
    seen = run_client(
        node, EXAMPLES / "interactive", tmp_path / "data", [call("plan_trip", {"traveller": "Ada"})]
    )

    assert_trip_interaction_required(seen)


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


def test_missing_required_argument_is_a_tool_error_and_the_next_call_still_works(node, tmp_path):
    seen = run_client(
        node,
        EXAMPLES / "hello",
        tmp_path / "data",
        [
            call("greet", {"times": 2}),
            call("no_such_tool", {}, expect="error"),
            call("greet", {"name": "Bob"}),
        ],
    )

    rejected, unknown, accepted = seen.steps
    assert rejected["result"]["isError"] is True  # SEP-1303: the model reads it
    payload = tool_payload(rejected)
    assert payload["error"]["code"] == "invalid_params" and "runId" not in payload
    assert "'name' is a required property (type: string)" in payload["error"]["message"]
    assert unknown["error"]["code"] == -32602
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

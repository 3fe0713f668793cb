"""Attack pass: a 2026-07-28 input round's retry (its sealed requestState and answers)
replayed after the task it became has ended (the state is sealed for a time, not for one
use). Against the real app (in this process) and the conformance fixture project.

Each hole it found is fixed; its test now checks the fix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, Rpc, _run_id
from tests.support import in_process_server

REPLAYS = 5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with in_process_server(tmp_path_factory.mktemp("attack-pass-replay")) as live:
        live.add_project(FIXTURE_DIR, FIXTURE)
        # Its worker pool up (as `serve` starts it ahead): a first call asks its question
        # within the seconds a call takes to become a task (task_after_seconds).
        rpc = Rpc(live, live.create_key("warm-up"))
        assert rpc.result(rpc.call("test_simple_text"))["content"], "the worker pool did not start"
        yield live


def _ended_task(server: LiveServer, rpc: Rpc) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A task made from an input round's retry, run to its end: (retry params, task, ended)."""
    first = rpc.result(rpc.call("test_tool_with_task"))
    assert first["resultType"] == "input_required", first
    [question] = first["inputRequests"]
    retry = {
        "inputResponses": {question: {"action": "accept", "content": {"name": "Alice"}}},
        "requestState": first["requestState"],
    }
    task = rpc.result(rpc.call("test_tool_with_task", **retry))
    assert task["resultType"] == "task", task
    ended = rpc.until(task["taskId"], "completed")
    return retry, task, ended


def _counts(server: LiveServer, run_id: str) -> tuple[int, int]:
    [events] = server.query("SELECT COUNT(*) AS n FROM run_events WHERE run_id = :r", r=run_id)
    [audits] = server.query("SELECT COUNT(*) AS n FROM audit_events WHERE run_id = :r", r=run_id)
    return int(events["n"]), int(audits["n"])


def test_replaying_a_retry_after_its_task_ended_changes_nothing(server: LiveServer) -> None:
    rpc = Rpc(server, server.create_key("replayer"))
    retry, task, ended = _ended_task(server, rpc)
    run_id = _run_id(task["taskId"])
    before = _counts(server, run_id)
    for _ in range(REPLAYS):
        again = rpc.call("test_tool_with_task", **retry)
        assert "result" in again or "error" in again, again
    after = rpc.result(rpc.task("tasks/get", task["taskId"]))
    assert after["status"] == "completed" and after["result"] == ended["result"]
    assert _counts(server, run_id) == before
    assert after["lastUpdatedAt"] == ended["lastUpdatedAt"]


def test_a_replayed_retry_of_another_account_is_refused(server: LiveServer) -> None:
    """Held: the sealed state is bound to its principal; another account's key cannot use it."""
    owner = Rpc(server, server.create_key("replay-owner"))
    retry, task, _ = _ended_task(server, owner)
    before = _counts(server, _run_id(task["taskId"]))
    stranger = Rpc(server, server.create_key("replay-stranger"))
    refused = stranger.call("test_tool_with_task", **retry)
    assert "error" in refused, refused
    assert _counts(server, _run_id(task["taskId"])) == before

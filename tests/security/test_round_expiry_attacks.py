"""A `ctx.together()` round nobody (or only partly) answers: bounded by the
question timeout, its worker slot given up while it waits, every question of the round
closed when it expires, a late answer changing nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import Rpc
from tests.support import in_process_server

PROJECT = str(uuid.uuid4())
TIMEOUT = 4

HANDLERS = """
def three(ctx):
    with ctx.together() as r:
        a = r.ask("A?", [{"name": "v", "type": "string", "required": True}], key="a")
        b = r.approve("B", key="b")
        c = r.ask("C?", [{"name": "v", "type": "string", "required": True}], key="c")
    return {"a": a.result(), "b": b.result(), "c": c.result()}


def quick(ctx):
    return {"ok": True}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    base = tmp_path_factory.mktemp("round-expiry")
    root = base / "p"
    root.mkdir()
    (root / "h.py").write_text(HANDLERS, encoding="utf-8")
    manifest = {
        "id": PROJECT,
        "name": "round-expiry",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [
            {"id": "three", "title": "three", "handler": "h.py:three", "task": "required", "params": []},
            {"id": "quick", "title": "quick", "handler": "h.py:quick", "task": "never", "params": []},
        ],
    }
    (root / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    with in_process_server(
        base,
        STEAMHARNESS_QUESTION_TIMEOUT_SECONDS=str(TIMEOUT),
        STEAMHARNESS_MAX_CONCURRENT_RUNS="1",
    ) as live:
        live.add_project(root, PROJECT)
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.create_key("expiry-rounds")


def test_a_round_partly_answered_expires_whole_and_its_slot_was_free_meanwhile(
    server: LiveServer, key: str
) -> None:
    rpc = Rpc(server, key, project=PROJECT)
    task_id = rpc.result(rpc.call("three"))["taskId"]
    assert set(rpc.until(task_id, "input_required")["inputRequests"]) == {"a", "b", "c"}
    ok = {"action": "accept", "content": {"v": "x"}}
    assert "result" in rpc.task("tasks/update", task_id, inputResponses={"a": ok})
    # The only slot is free while the round waits: another call runs to its end.
    plain = Rpc(server, key, tasks=False, project=PROJECT)
    quick = plain.result(plain.call("quick"))
    assert quick["structuredContent"]["status"] == "success", quick
    done = rpc.until(task_id, "completed", "failed", "cancelled")
    assert done["status"] == "completed" and done["result"]["isError"] is True, done
    assert done["result"]["structuredContent"]["error"]["code"] == "question_expired", done
    run_id = task_id.rpartition(".")[0]
    rows = server.query(
        "SELECT input_key, status FROM interactions WHERE run_id = :r ORDER BY created_at, id", r=run_id
    )
    assert sorted((r["input_key"], r["status"]) for r in rows) == [
        ("a", "answered"),
        ("b", "closed"),
        ("c", "closed"),
    ]
    late = rpc.task("tasks/update", task_id, inputResponses={"b": {"action": "accept"}, "c": ok})
    assert "result" in late or late["error"]["code"] == -32602, late
    assert rpc.result(rpc.task("tasks/get", task_id))["status"] == "completed"
    [run] = server.query("SELECT status FROM runs WHERE id = :r", r=run_id)
    assert run["status"] == "failed"

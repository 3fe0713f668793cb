"""MCP tasks (the tasks extension, 2026-07-28) on the real deployment: PostgreSQL, two
`serve` replicas sharing the secret, HAProxy running deploy/haproxy.cfg in front of them,
and the conformance fixture project (tests/conformance/project).

A task is a persisted run and its id an HMAC under a key every replica derives from the
shared secret, so a task created on one replica is read, answered and cancelled on the
other: the answer is stored by the replica that received it and the replica driving the
run resumes it when notified; a cancel crosses through the event hub (`cancel_requested`,
webui/runs/following.py). Stateless 2026-07-28 requests need no affinity, so through
HAProxy every request may land on either replica."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from tests.e2e.server import LiveServer
from tests.e2e.test_mcp_tasks import FIXTURE, FIXTURE_DIR, Rpc, _run_id
from tests.replicas.cluster import Cluster, running_cluster
from tests.replicas.conftest import PgServer
from webui.store.db import make_engine

WAIT = 60.0


@pytest.fixture(scope="module")
def database_url(pg_server: PgServer) -> str:
    return pg_server.url(pg_server.new_database())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("tasks-replicas"), database_url) as cluster:
        cluster.a.add_project(FIXTURE_DIR, FIXTURE)
        yield cluster


@pytest.fixture(scope="module")
def db(cluster: Cluster, database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def key(cluster: Cluster) -> str:
    return cluster.a.create_key("tasker")


def query(engine: Engine, sql: str, **params: Any) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(text(sql), params)]


def run_of(db: Engine, task_id: str) -> dict[str, Any]:
    [run] = query(db, "SELECT status, replica_id FROM runs WHERE id = :r", r=_run_id(task_id))
    return run


def until(rpc: Rpc, task_id: str, *statuses: str, cluster: Cluster) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        got = rpc.result(rpc.task("tasks/get", task_id))
        if got["status"] in statuses:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(
                f"task {task_id} still {got['status']}, not {statuses}\n"
                f"A:\n{cluster.a.log()[-4000:]}\nB:\n{cluster.b.log()[-4000:]}"
            )
        time.sleep(0.05)  # polling tasks/get, bounded by the deadline


def questions(rpc: Rpc, task_id: str, n: int, cluster: Cluster) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        got = until(rpc, task_id, "input_required", cluster=cluster)
        if len(got["inputRequests"]) >= n:
            return got["inputRequests"]
        assert time.monotonic() < deadline, got
        time.sleep(0.05)  # the second question is still coming, bounded by the deadline


def through_lb(cluster: Cluster, key: str) -> Rpc:
    """A client of HAProxy's front end (Rpc only needs `mcp_url` of what it talks to)."""
    return Rpc(cast(LiveServer, cluster.lb), key)


def test_a_task_created_on_a_completes_as_seen_by_tasks_get_on_b(
    cluster: Cluster, db: Engine, key: str
) -> None:
    on_a, on_b = Rpc(cluster.a, key), Rpc(cluster.b, key)
    created = on_a.result(on_a.call("slow_compute", {"seconds": 1, "label": "cross"}))
    assert created["resultType"] == "task"
    task_id = created["taskId"]
    assert run_of(db, task_id)["replica_id"] == cluster.id_of(cluster.a)
    # B reads the same task under the same id: the id is the HMAC of the shared secret.
    seen = on_b.result(on_b.task("tasks/get", task_id))
    assert seen["taskId"] == task_id and seen["status"] in ("working", "completed")
    done = until(on_b, task_id, "completed", cluster=cluster)
    assert done["result"]["content"] == [{"type": "text", "text": "cross: computed in 1 s"}]
    assert done["result"]["structuredContent"]["runId"] == _run_id(task_id)
    assert on_a.result(on_a.task("tasks/get", task_id))["result"] == done["result"]


def test_a_question_of_a_run_a_drives_is_answered_through_b(cluster: Cluster, db: Engine, key: str) -> None:
    on_a, on_b = Rpc(cluster.a, key), Rpc(cluster.b, key)
    task_id = on_a.result(on_a.call("multi_input"))["taskId"]
    first, second = questions(on_b, task_id, 2, cluster)
    assert run_of(db, task_id)["replica_id"] == cluster.id_of(cluster.a)
    ack = on_b.task(
        "tasks/update", task_id, inputResponses={first: {"action": "accept", "content": {"name": "b"}}}
    )
    assert on_b.result(ack) == {"resultType": "complete"}
    # A, which drives the run, sees the answer: one question left.
    deadline = time.monotonic() + WAIT
    while set(on_a.result(on_a.task("tasks/get", task_id)).get("inputRequests", {})) != {second}:
        assert time.monotonic() < deadline
        time.sleep(0.05)  # polling tasks/get on A, bounded by the deadline
    on_a.task(
        "tasks/update", task_id, inputResponses={second: {"action": "accept", "content": {"name": "a"}}}
    )
    done = until(on_b, task_id, "completed", cluster=cluster)
    assert done["result"]["content"][0]["text"] == "b, a"
    assert run_of(db, task_id) == {"status": "success", "replica_id": cluster.id_of(cluster.a)}
    rows = query(db, "SELECT channel FROM interactions WHERE id IN (:a, :b)", a=first, b=second)
    assert {r["channel"] for r in rows} == {"mcp-task"}


def test_a_cancel_through_b_ends_the_run_a_drives_cancelled(cluster: Cluster, db: Engine, key: str) -> None:
    on_a, on_b = Rpc(cluster.a, key), Rpc(cluster.b, key)
    task_id = on_a.result(on_a.call("slow_compute", {"seconds": 60, "label": "far"}))["taskId"]
    until(on_a, task_id, "working", cluster=cluster)
    assert run_of(db, task_id)["replica_id"] == cluster.id_of(cluster.a)
    assert on_b.result(on_b.task("tasks/cancel", task_id)) == {"resultType": "complete"}
    ended = until(on_a, task_id, "cancelled", "completed", "failed", cluster=cluster)
    assert ended["status"] == "cancelled" and "cancelled the task" in ended["statusMessage"]
    assert until(on_b, task_id, "cancelled", cluster=cluster)["status"] == "cancelled"
    assert run_of(db, task_id)["status"] == "cancelled"
    # Acknowledged again on either replica once it ended.
    assert on_b.result(on_b.task("tasks/cancel", task_id)) == {"resultType": "complete"}
    assert on_a.result(on_a.task("tasks/cancel", task_id)) == {"resultType": "complete"}


def test_a_cancel_through_b_ends_a_task_waiting_for_its_question_on_a(
    cluster: Cluster, db: Engine, key: str
) -> None:
    on_a, on_b = Rpc(cluster.a, key), Rpc(cluster.b, key)
    task_id = on_a.result(on_a.call("confirm_delete", {"filename": "waiting.txt"}))["taskId"]
    [question] = questions(on_b, task_id, 1, cluster)
    assert on_b.result(on_b.task("tasks/cancel", task_id)) == {"resultType": "complete"}
    ended = until(on_a, task_id, "cancelled", "completed", "failed", cluster=cluster)
    assert ended["status"] == "cancelled" and "inputRequests" not in ended
    assert run_of(db, task_id)["status"] == "cancelled"
    # The question is closed: a late answer through either replica changes nothing.
    late = {question: {"action": "accept", "content": {"confirm": True}}}
    assert on_a.result(on_a.task("tasks/update", task_id, inputResponses=late)) == {"resultType": "complete"}
    [row] = query(db, "SELECT status FROM interactions WHERE id = :i", i=question)
    assert row["status"] != "pending" and row["status"] != "answered"
    assert run_of(db, task_id)["status"] == "cancelled"


def test_a_question_of_a_run_a_drives_is_answered_in_bs_json_api(
    cluster: Cluster, db: Engine, key: str
) -> None:
    import httpx2

    on_a = Rpc(cluster.a, key)
    task_id = on_a.result(on_a.call("confirm_delete", {"filename": "far.txt"}))["taskId"]
    [question] = questions(on_a, task_id, 1, cluster)
    r = httpx2.post(
        f"{cluster.b.base_url}/api/interactions/{question}/answer",
        json={"action": "accept", "content": {"confirm": True}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT,
    )
    assert r.status_code == 200, r.text
    assert (
        until(on_a, task_id, "completed", cluster=cluster)["result"]["content"][0]["text"]
        == "far.txt: deleted"
    )


def test_through_haproxy_every_task_request_may_land_on_either_replica(
    cluster: Cluster, db: Engine, key: str
) -> None:
    lb = through_lb(cluster, key)
    # A question, answered through the front end, wherever the run lives.
    task_id = lb.result(lb.call("multi_input"))["taskId"]
    first, second = questions(lb, task_id, 2, cluster)
    lb.task(
        "tasks/update",
        task_id,
        inputResponses={
            first: {"action": "accept", "content": {"name": "x"}},
            second: {"action": "accept", "content": {"name": "y"}},
        },
    )
    assert until(lb, task_id, "completed", cluster=cluster)["result"]["content"][0]["text"] == "x, y"

    # Several tasks: round-robin puts runs on both replicas; each completes through the front end.
    ids = [lb.result(lb.call("slow_compute", {"seconds": 1, "label": f"lb{i}"}))["taskId"] for i in range(4)]
    for i, tid in enumerate(ids):
        assert until(lb, tid, "completed", cluster=cluster)["result"]["content"][0]["text"] == (
            f"lb{i}: computed in 1 s"
        )
    # Four calls in a row, round-robin, no affinity: both replicas drove some of them.
    assert {run_of(db, tid)["replica_id"] for tid in ids} == set(cluster.ids)

    # A cancel through the front end, whichever replica drives the run.
    long = lb.result(lb.call("slow_compute", {"seconds": 60, "label": "lbstop"}))["taskId"]
    assert lb.result(lb.task("tasks/cancel", long)) == {"resultType": "complete"}
    assert until(lb, long, "cancelled", "completed", "failed", cluster=cluster)["status"] == "cancelled"
    assert run_of(db, long)["status"] == "cancelled"


def test_another_accounts_key_reads_a_task_as_unknown_on_every_replica(cluster: Cluster, key: str) -> None:
    on_a = Rpc(cluster.a, key)
    task_id = on_a.result(on_a.call("slow_compute", {"seconds": 60, "label": "mine"}))["taskId"]
    try:
        stranger = cluster.a.create_key("mallory")
        for where in (cluster.a, cluster.b):
            other = Rpc(where, stranger)
            for method in ("tasks/get", "tasks/cancel"):
                assert other.task(method, task_id)["error"] == {"code": -32602, "message": "Unknown task"}
        assert on_a.result(on_a.task("tasks/get", task_id))["status"] == "working"
    finally:
        on_a.task("tasks/cancel", task_id)


def test_a_retry_replayed_on_the_other_replica_returns_the_same_task_and_writes_it_once(
    cluster: Cluster, db: Engine, key: str
) -> None:
    on_a, on_b = Rpc(cluster.a, key), Rpc(cluster.b, key)
    asked = on_a.result(on_a.call("ask_then_work", {"seconds": 60}))
    assert asked["resultType"] == "input_required" and set(asked["inputRequests"]) == {"who"}
    retry = {"inputResponses": {"who": {"action": "accept", "content": {"name": "Ann"}}}}
    retry["requestState"] = asked["requestState"]
    task = on_a.result(on_a.call("ask_then_work", {"seconds": 60}, **retry))
    assert task["resultType"] == "task"
    try:
        # The client did not hear back and sends the same retry again, through B.
        again = on_b.result(on_b.call("ask_then_work", {"seconds": 60}, **retry))
        assert again["resultType"] == "task" and again["taskId"] == task["taskId"]
        run_id = _run_id(task["taskId"])
        created = query(
            db,
            "SELECT count(*) AS n FROM audit_events WHERE run_id = :r AND event = 'tool.task_created'",
            r=run_id,
        )
        assert created == [{"n": 1}]
        notes = query(
            db, "SELECT count(*) AS n FROM run_events WHERE run_id = :r AND kind = 'task'", r=run_id
        )
        assert notes == [{"n": 1}]
    finally:
        on_b.task("tasks/cancel", task["taskId"])

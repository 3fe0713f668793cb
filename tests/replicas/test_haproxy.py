"""The real deployment: PostgreSQL, two `serve` replicas with separate data dirs and
HAProxy running deploy/haproxy.cfg in front of them; MCP clients (the official Python SDK)
talk to HAProxy.

- a file uploaded on one replica is used by a call on the other;
- a 2025-11-25 session with an elicitation round sticks to one replica;
- a question left by a call on one replica is answered through the other and the run ends;
- 2026-07-28 input rounds alternate replicas;
- a queue limit of one holds with calls on both replicas;
- the audit log names both replicas;
- a replica killed mid-run: the survivor marks the run interrupted, the dead replica's
  sessions answer 404 through HAProxy, and new sessions are served by the survivor.

The kill comes last: it leaves the cluster with one replica."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import text
from sqlalchemy.engine import Engine

from tests.e2e.server import FILES, HELLO, INTERACTIVE, TORTURE, LiveServer, raw_request
from tests.e2e.test_http_mcp import headers, init_body, payload, sdk_client, trip_answers
from tests.replicas.cluster import Cluster, running_cluster
from tests.replicas.conftest import PgServer
from webui.store.db import make_engine

pytestmark = pytest.mark.anyio

WAIT = 60.0


@pytest.fixture(scope="module")
def database_url(pg_server: PgServer) -> str:
    """The one database the replicas share (the only place this module meets PostgreSQL)."""
    return pg_server.url(pg_server.new_database())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("haproxy"), database_url) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def db(cluster: Cluster, database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


def query(engine: Engine, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text(sql), params)]


def wait_for(cluster: Cluster, what: str, found: Callable[[], Any]) -> Any:
    """Poll until `found` returns something (bounded)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if value := found():
            return value
        time.sleep(0.05)  # polling the database other processes write, bounded by the deadline
    raise AssertionError(
        f"timed out waiting for {what}\nA:\n{cluster.a.log()[-4000:]}\nB:\n{cluster.b.log()[-4000:]}"
        f"\nHAProxy:\n{cluster.lb.log()[-4000:]}"
    )


def run_replica(db: Engine, run_id: str) -> str:
    ((replica,),) = query(db, "SELECT replica_id FROM runs WHERE id = :id", id=run_id)
    return str(replica)


def upload(server: LiveServer, key: str, name: str, content: bytes) -> str:
    r = httpx2.post(
        f"{server.base_url}/api/workflows/{FILES}/files",
        params={"fileName": name, "mimeType": "text/plain"},
        content=content,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"},
        timeout=WAIT,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["data"][0]["id"])


async def wait_run(
    api: httpx2.AsyncClient, run_id: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The run through the JSON API, until `done` says so (bounded by the caller)."""
    while True:
        r = await api.get(f"/api/runs/{run_id}")
        assert r.status_code == 200, r.text
        if done(data := r.json()["data"]):
            return data
        await anyio.sleep(0.02)  # polling the run's record, bounded by the caller's fail_after


def test_haproxy_routes_to_two_replicas_with_separate_data_dirs(cluster: Cluster) -> None:
    assert cluster.a.data_dir != cluster.b.data_dir
    assert (cluster.a.data_dir / "replica-id").read_text() != (cluster.b.data_dir / "replica-id").read_text()
    assert (cluster.shared / "versions" / HELLO).is_dir()


def test_healthz_answers_a_probe_without_a_host_header_and_other_paths_still_need_one(
    cluster: Cluster,
) -> None:
    """HAProxy's `option httpchk` probes with HTTP/1.0 and no Host header."""
    status, raw = raw_request(cluster.a.port, "GET /healthz HTTP/1.0\r\n\r\n")
    assert status == 200 and cluster.id_of(cluster.a) in raw, raw
    status, raw = raw_request(cluster.a.port, "GET /openapi.json HTTP/1.0\r\n\r\n")
    assert status == 421, raw
    status, raw = raw_request(cluster.a.port, "GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    assert status == 200, raw


async def test_a_file_uploaded_on_one_replica_is_used_by_a_call_on_the_other(
    cluster: Cluster, db: Engine
) -> None:
    key = cluster.a.create_key("fay")
    on_a = upload(cluster.a, key, "a.txt", b"1\n2\n")
    on_b = upload(cluster.b, key, "b.txt", b"1\n2\n3\n")
    # One session through HAProxy: it sticks to one replica, so one of the two files crosses.
    async with sdk_client(cluster.lb.mcp_url(FILES), key, "legacy") as client:
        first = payload(await client.call_tool("summarize", {"document": {"id": on_a}}))
        second = payload(await client.call_tool("summarize", {"document": {"id": on_b}}))
    assert first["status"] == "success" and second["status"] == "success", (first, second)
    # Both calls ran on the session's replica; one file came from the other one.
    served_by = run_replica(db, first["runId"])
    assert run_replica(db, second["runId"]) == served_by and served_by in cluster.ids
    for body, expected in ((first, b"a.txt: 2 lines, 4 bytes\n"), (second, b"b.txt: 3 lines, 6 bytes\n")):
        ((storage,),) = query(
            db, "SELECT storage FROM managed_files WHERE id = :id", id=body["files"][0]["id"]
        )
        assert (cluster.shared / storage).read_bytes() == expected


async def test_a_2025_session_with_an_elicitation_round_sticks_to_one_replica(
    cluster: Cluster, db: Engine
) -> None:
    key = cluster.a.create_key("ivan")
    async with sdk_client(cluster.lb.mcp_url(INTERACTIVE), key, "legacy", trip_answers()) as client:
        assert client.protocol_version == "2025-11-25"
        body = payload(await client.call_tool("plan_trip", {"traveller": "Bo"}))
        tools = await client.list_tools()
    assert body["status"] == "success", body
    assert body["output"]["destination"] == "Rome" and body["output"]["booked"] is True
    assert {t.name for t in tools.tools} == {"plan_trip", "collect_document"}
    # The run and its session are on one replica: any request routed elsewhere would have
    # been refused with 404 (the other replica does not hold the session).
    ((session_id, run_replica_id),) = query(
        db, "SELECT session_id, replica_id FROM runs WHERE id = :id", id=body["runId"]
    )
    ((session_replica,),) = query(db, "SELECT replica_id FROM mcp_sessions WHERE id = :id", id=session_id)
    assert session_replica == run_replica_id and session_replica in cluster.ids
    # Three answers went back in the same session: three resolved questions on that run.
    answered = query(db, "SELECT status FROM interactions WHERE run_id = :id", id=body["runId"])
    assert len(answered) == 3 and all(status != "pending" for (status,) in answered), answered


async def test_a_session_request_reaching_the_other_replica_without_affinity_gets_404(
    cluster: Cluster, db: Engine
) -> None:
    key = cluster.a.create_key("vera")
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        opened = await http.post(cluster.a.mcp_url(HELLO), headers=headers(key), json=init_body())
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        ((replica,),) = query(db, "SELECT replica_id FROM mcp_sessions WHERE id = :id", id=sid)
        assert replica == cluster.id_of(cluster.a)
        # Straight to B, as a load balancer without affinity would send it: a clear 404 at
        # once (the session lives in A's memory), never a hang or a 500 — and A still serves it.
        with anyio.fail_after(WAIT):
            elsewhere = await http.post(cluster.b.mcp_url(HELLO), headers=headers(key, sid), json=ping)
        assert elsewhere.status_code == 404, elsewhere.text
        assert elsewhere.json()["error"]["message"].endswith("Session not found"), elsewhere.text
        home = await http.post(cluster.a.mcp_url(HELLO), headers=headers(key, sid), json=ping)
        assert home.status_code == 200, home.text


async def test_a_question_left_on_one_replica_is_answered_through_the_other_and_the_run_ends(
    cluster: Cluster, db: Engine
) -> None:
    key = cluster.a.create_key("olga")
    async with sdk_client(cluster.lb.mcp_url(TORTURE), key, "legacy") as client:  # no elicitation
        body = payload(await client.call_tool("ask_once", {}))
    assert body["error"]["code"] == "interaction_required", body
    run_id, iid = body["runId"], body["error"]["interactionId"]
    driver = run_replica(db, run_id)
    other = cluster.other(driver)
    async with httpx2.AsyncClient(
        base_url=other.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
    ) as api:
        r = await api.post(
            f"/api/interactions/{iid}/answer", json={"action": "accept", "content": {"name": "Al"}}
        )
        assert r.status_code == 200, r.text
        with anyio.fail_after(WAIT):
            run = await wait_run(api, run_id, lambda d: d["status"] not in ("running", "waiting_for_input"))
    assert run["status"] == "success", run
    assert run["output"] == {"name": "Al"}
    assert run_replica(db, run_id) == driver  # the run resumed where it was running


class Alternate(httpx2.AsyncBaseTransport):
    """Sends the first request of a tools/call through HAProxy and each retry carrying a
    requestState (a 2026-07-28 round's answer) straight to a replica: B, A, B, …"""

    def __init__(self, cluster: Cluster) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.order = [cluster.b, cluster.a]
        self.sent: list[int] = []  # the port each retry went to

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        content = await request.aread()
        if b'"requestState"' in content:
            port = self.order[len(self.sent) % 2].port
            self.sent.append(port)
            request.url = request.url.copy_with(port=port)
            request.headers["host"] = f"127.0.0.1:{port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_2026_input_rounds_alternating_replicas_finish_the_run(cluster: Cluster, db: Engine) -> None:
    key = cluster.a.create_key("ivan")
    router = Alternate(cluster)
    with anyio.fail_after(WAIT):
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {key}"},
                timeout=httpx2.Timeout(30, read=120),
                transport=router,
            ) as http,
            Client(
                streamable_http_client(cluster.lb.mcp_url(INTERACTIVE), http_client=http),
                mode="auto",
                elicitation_callback=trip_answers(),
            ) as client,
        ):
            assert client.protocol_version == "2026-07-28"
            body = payload(await client.call_tool("plan_trip", {"traveller": "Bo"}))
    assert body["status"] == "success", body
    assert body["output"]["destination"] == "Rome" and body["output"]["booked"] is True
    assert router.sent == [cluster.b.port, cluster.a.port, cluster.b.port]  # both served rounds
    assert run_replica(db, body["runId"]) in cluster.ids


async def test_a_queue_limit_of_one_holds_with_calls_arriving_on_both_replicas(
    cluster: Cluster, db: Engine
) -> None:
    """A running run holds the project's one slot (a run waiting for a person would give it
    up); the calls racing it through the load balancer are refused, counted in the database."""
    key = cluster.a.create_key("ruth")
    cluster.a.set_limits(TORTURE, max_running=1, max_queued=0)
    before = {r for (r,) in query(db, "SELECT id FROM runs WHERE project_id = :p", p=TORTURE)}
    outcomes: list[dict[str, Any]] = []
    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for _ in range(4):

                    async def one() -> None:
                        async with sdk_client(cluster.lb.mcp_url(TORTURE), key, "legacy") as client:
                            outcomes.append(payload(await client.call_tool("sleep", {"seconds": 3600})))

                    tg.start_soon(one)
                while len(outcomes) < 3:
                    await anyio.sleep(0.02)  # until the three refusals came back, bounded above
                tg.cancel_scope.cancel()  # the client leaves: the sleeping run is cancelled
            assert [o["error"]["code"] for o in outcomes] == ["queue_limit"] * 3, outcomes
            assert all("runId" not in o for o in outcomes)
            created = [
                r
                for (r,) in query(db, "SELECT id FROM runs WHERE project_id = :p", p=TORTURE)
                if r not in before
            ]
            assert len(created) == 1, created
            while query(db, "SELECT status FROM runs WHERE id = :r", r=created[0]) != [("cancelled",)]:
                await anyio.sleep(0.05)  # until the cancelled run is recorded, bounded above
    finally:
        cluster.a.set_limits(TORTURE, max_running=100, max_queued=100)
    # HAProxy spread the four sessions over both replicas.
    replicas = {r for (r,) in query(db, "SELECT replica_id FROM mcp_sessions WHERE actor = 'user:ruth'")}
    assert replicas == set(cluster.ids), replicas


async def test_the_audit_log_lists_events_from_both_replicas(cluster: Cluster, db: Engine) -> None:
    # One call on each replica, made here: the test counts on no other test having run first.
    key = cluster.a.create_key("abe")
    for server in (cluster.a, cluster.b):
        async with sdk_client(server.mcp_url(HELLO), key, "legacy") as client:
            assert payload(await client.call_tool("echo", {"text": "audited"}))["status"] == "success"
    recorded = {
        r for (r,) in query(db, "SELECT DISTINCT replica_id FROM audit_events WHERE event = 'run.created'")
    }
    assert set(cluster.ids) <= recorded, recorded
    # The CLI is no replica: the projects it published name none.
    published = query(db, "SELECT replica_id FROM audit_events WHERE event = 'project.published'")
    assert published and all(r is None for (r,) in published), published


def open_session(url: str, key: str) -> str:
    r = httpx2.post(url, headers=headers(key), json=init_body(), timeout=WAIT)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = httpx2.post(url, headers=headers(key, sid), json=note, timeout=WAIT)
    assert r.status_code == 202, r.text
    return sid


async def call_until_cut_off(url: str, key: str) -> None:
    """A long call; the replica dying under it ends it with an error, which is expected here."""
    with contextlib.suppress(Exception):
        async with sdk_client(url, key, "legacy") as client:
            await client.call_tool("sleep", {})


async def test_a_replica_killed_mid_run_is_replaced_by_the_survivor(cluster: Cluster, db: Engine) -> None:
    key = cluster.a.create_key("kim")
    url = cluster.lb.mcp_url(HELLO)
    # Sessions on both replicas (HAProxy alternates new sessions).
    sessions: dict[str, list[str]] = {rid: [] for rid in cluster.ids}
    for _ in range(4):
        sid = open_session(url, key)
        ((rid,),) = query(db, "SELECT replica_id FROM mcp_sessions WHERE id = :id", id=sid)
        sessions[rid].append(sid)
    victim = survivor_id = ""
    survivor: LiveServer | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(call_until_cut_off, cluster.lb.mcp_url(TORTURE), key)
        run_id, victim = await anyio.to_thread.run_sync(
            wait_for,
            cluster,
            "the sleep run",
            lambda: next(
                iter(
                    query(
                        db,
                        "SELECT id, replica_id FROM runs WHERE entrypoint_id = 'sleep' AND status = 'running'"
                        " AND actor = 'user:kim'",
                    )
                ),
                None,
            ),
        )
        dead, survivor = cluster.ids[victim], cluster.other(victim)
        survivor_id = cluster.id_of(survivor)
        assert sessions[victim], sessions  # HAProxy put a session on each replica
        assert dead.stop(signal.SIGKILL) == -signal.SIGKILL

        # The survivor marks the run interrupted once the dead replica's lease lapsed.
        await anyio.to_thread.run_sync(
            wait_for,
            cluster,
            "the run interrupted",
            lambda: query(db, "SELECT error FROM runs WHERE id = :id AND status = 'failed'", id=run_id),
        )
        ((error,),) = query(db, "SELECT error FROM runs WHERE id = :id", id=run_id)
        assert "interrupted" in str(error)
        ((actor,),) = query(
            db, "SELECT actor FROM audit_events WHERE event = 'run.interrupted' AND run_id = :id", id=run_id
        )
        assert actor == f"replica:{survivor_id}"
        tg.cancel_scope.cancel()
    assert survivor is not None and victim and survivor_id

    async with httpx2.AsyncClient(timeout=WAIT) as http:
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        # The dead replica's sessions: redispatched to the survivor, which does not know them.
        for sid in sessions[victim]:
            r = await http.post(url, headers=headers(key, sid), json=ping)
            assert r.status_code == 404, (r.status_code, r.text)
        # The survivor's own sessions go on.
        for sid in sessions[survivor_id]:
            r = await http.post(url, headers=headers(key, sid), json=ping)
            assert r.status_code == 200, (r.status_code, r.text)
    # New sessions through HAProxy are all served, by the survivor.
    for n in range(3):
        async with sdk_client(url, key, "legacy") as client:
            body = payload(await client.call_tool("echo", {"text": f"after {n}"}))
        assert body["status"] == "success", body
        assert run_replica(db, body["runId"]) == survivor_id
    assert "Traceback" not in survivor.log()

"""Two real `steamharness serve` processes on one PostgreSQL database act as one server:
a question asked by a run on replica A is seen and answered on replica B, a 2026-07-28
round started on A is retried on B, and queue limits hold with calls on both.

Each replica has its own data dir; they share the database, `STEAMHARNESS_SECRET_KEY` and
`STEAMHARNESS_SHARED_DIR`, as replicas of one deployment do."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy.engine import Engine

from tests.e2e.server import INTERACTIVE, TORTURE, LiveServer, free_port, make_server
from tests.e2e.test_conversation_sse import login, tab, until
from tests.replicas.conftest import PgServer
from webui.audit.log import AuditLog
from webui.events import EventHub
from webui.interactions.service import InteractionService
from webui.store import runs as run_store
from webui.store.db import make_engine

pytestmark = pytest.mark.anyio

WAIT = 60
PASSWORD = "replica-pw-1"


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, pg_server: PgServer
) -> Iterator[tuple[LiveServer, LiveServer]]:
    url = pg_server.url(pg_server.new_database())
    tmp = tmp_path_factory.mktemp("replicas")
    a = make_server(
        tmp,
        STEAMHARNESS_DATABASE_URL=url,
        STEAMHARNESS_SECRET_KEY=secrets.token_urlsafe(48),
        STEAMHARNESS_SHARED_DIR=str(tmp / "shared"),
    )
    a.add_user("ann", password=PASSWORD)
    a.grant("ann", all_projects=True)
    b = LiveServer(
        data_dir=tmp / "data-b", projects=a.projects, port=free_port(), admin_key=a.admin_key, env=a.env
    )
    with a.running(), b.running():
        yield a, b


@pytest.fixture(scope="module")
def engine(replicas: tuple[LiveServer, LiveServer]) -> Iterator[Engine]:
    engine = make_engine(replicas[0].env["STEAMHARNESS_DATABASE_URL"])
    try:
        yield engine
    finally:
        engine.dispose()


def driven_by(engine: Engine, run_id: str, server: LiveServer) -> bool:
    run = run_store.get_run(engine, run_id=run_id)
    assert run is not None
    return run.replica_id == httpx2.get(f"{server.base_url}/healthz", timeout=10).json()["replica"]


@asynccontextmanager
async def mcp_client(
    url: str, key: str, *, mode: str = "legacy", elicit: Any = None, transport: Any = None
) -> AsyncIterator[Client]:
    kwargs: dict[str, Any] = {"mode": mode}
    if elicit is not None:
        kwargs["elicitation_callback"] = elicit
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx2.Timeout(30, read=120),
            transport=transport,
        ) as http,
        Client(streamable_http_client(url, http_client=http), **kwargs) as client,
    ):
        yield client


def body_of(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.content[0], types.TextContent)
    return json.loads(result.content[0].text)


async def call(server: LiveServer, key: str, project: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A call from a client without elicitation: the run's outcome, or interaction_required."""
    async with mcp_client(server.mcp_url(project), key) as client:
        return body_of(await client.call_tool(tool, args))


async def wait_run(http: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    """Until the run finished or waits for its next answer (bounded by the caller)."""
    while True:
        data = (await http.get(f"/api/runs/{run_id}")).json()["data"]
        if data["status"] in ("success", "failed", "cancelled", "timeout") or data.get("interaction"):
            return data
        await anyio.sleep(0.02)  # polling the run's record, bounded by the caller's fail_after


async def test_a_question_of_a_run_on_a_is_seen_and_answered_on_b_and_the_run_finishes(
    replicas: tuple[LiveServer, LiveServer], engine: Engine
) -> None:
    a, b = replicas
    key = b.create_key("ann")
    async with httpx2.AsyncClient(base_url=b.base_url, timeout=httpx2.Timeout(30, read=WAIT)) as browser:
        csrf = await login(browser, "ann", PASSWORD)
        with anyio.fail_after(WAIT):
            async with tab(browser) as on_b:
                body = await call(a, key, INTERACTIVE, "plan_trip", {"traveller": "Bo"})
                assert body["error"]["code"] == "interaction_required"
                iid, run_id = body["error"]["interactionId"], body["runId"]
                assert driven_by(engine, run_id, a)
                # B's page hears of A's question through the hub
                card = await until(on_b, "interaction")
                assert f'id="interaction-{iid}"' in card.data and "Where to?" in card.data
                r = await browser.post(
                    f"/interactions/{iid}/answer",
                    data={"action": "accept", f"{iid}-destination": "Oslo", f"{iid}-nights": "2"},
                    headers={"HX-Request": "true", "X-CSRF-Token": csrf},
                )
                assert r.status_code == 200, r.text
                resolved = await until(on_b, f"resolved-{iid}")
                assert 'data-status="answered"' in resolved.data
                # the run on A resumed and asked its next question, seen on B
                nxt = await until(on_b, "interaction")
                assert f'data-run="{run_id}"' in nxt.data and "Which room?" in nxt.data
    # the rest through B's JSON API
    async with httpx2.AsyncClient(base_url=b.base_url, headers={"Authorization": f"Bearer {key}"}) as api:
        with anyio.fail_after(WAIT):
            run = await wait_run(api, run_id)
            answers = iter([{"room": "single"}, {}])
            while run["status"] != "success":
                assert run["status"] == "waiting_for_input", run
                iid = run["interaction"]["interactionId"]
                r = await api.post(
                    f"/api/interactions/{iid}/answer", json={"action": "accept", "content": next(answers)}
                )
                assert r.status_code == 200, r.text
                while (run := await wait_run(api, run_id)).get("interaction", {}).get("interactionId") == iid:
                    await anyio.sleep(0.02)  # the old question until A moved on, bounded above
    assert run["output"]["destination"] == "Oslo" and run["output"]["booked"] is True
    assert driven_by(engine, run_id, a)


class RetriesToB(httpx2.AsyncBaseTransport):
    """Sends the first request of each tools/call to replica A and every retry that carries
    a requestState (a 2026-07-28 round's answer) to replica B."""

    def __init__(self, b_port: int) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.b_port = b_port
        self.to_b = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        content = await request.aread()
        if b'"requestState"' in content:
            self.to_b += 1
            request.url = request.url.copy_with(port=self.b_port)
            request.headers["host"] = f"127.0.0.1:{self.b_port}"
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_2026_round_started_on_a_and_retried_on_b_resumes_the_same_run(
    replicas: tuple[LiveServer, LiveServer], engine: Engine
) -> None:
    a, b = replicas
    key = a.create_key("ivan")
    answers = [
        types.ElicitResult(action="accept", content={"destination": "Rome", "nights": 4}),
        types.ElicitResult(action="accept", content={"room": "double", "extras": ["breakfast"]}),
        types.ElicitResult(action="accept", content={}),
    ]

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return answers.pop(0)

    router = RetriesToB(b.port)
    with anyio.fail_after(WAIT):
        async with mcp_client(a.mcp_url(INTERACTIVE), key, mode="auto", elicit=elicit, transport=router) as c:
            assert c.protocol_version == "2026-07-28"
            body = body_of(await c.call_tool("plan_trip", {"traveller": "Bo"}))
    assert body["status"] == "success", body
    assert body["output"]["destination"] == "Rome" and body["output"]["booked"] is True
    assert answers == [] and router.to_b == 3  # every round's answer went through B
    assert driven_by(engine, body["runId"], a)


async def test_a_2026_retry_on_b_with_a_wrong_answer_is_refused_and_nothing_is_lost(
    replicas: tuple[LiveServer, LiveServer], engine: Engine
) -> None:
    a, b = replicas
    key = a.create_key("ivan")
    answers = [
        types.ElicitResult(action="accept", content={"destination": "Rome", "nights": "many"}),
        types.ElicitResult(action="accept", content={"destination": "Rome", "nights": 1}),
        types.ElicitResult(action="accept", content={"room": "single"}),
        types.ElicitResult(action="decline"),
    ]

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return answers.pop(0)

    router = RetriesToB(b.port)
    with anyio.fail_after(WAIT):
        async with mcp_client(a.mcp_url(INTERACTIVE), key, mode="auto", elicit=elicit, transport=router) as c:
            with pytest.raises(Exception, match="nights"):
                await c.call_tool("plan_trip", {"traveller": "Cy"})
    assert router.to_b == 1
    # The refused answer was not recorded: the question still waits on A, answerable on B.
    waiting = run_store.list_runs(engine, project_ids=[INTERACTIVE], status="waiting_for_input")
    (run_id,) = [r.id for r in waiting if r.params.get("traveller") == "Cy"]
    assert driven_by(engine, run_id, a)
    async with httpx2.AsyncClient(base_url=b.base_url, headers={"Authorization": f"Bearer {key}"}) as api:
        with anyio.fail_after(WAIT):
            run = await wait_run(api, run_id)
            iid = run["interaction"]["interactionId"]
            r = await api.post(f"/api/interactions/{iid}/answer", json={"action": "cancel"})
            assert r.status_code == 200, r.text
            while (run := await wait_run(api, run_id))["status"] != "cancelled":
                await anyio.sleep(0.02)  # until A recorded the cancel, bounded above


async def test_a_queue_limit_of_one_holds_with_calls_arriving_on_both_replicas(
    replicas: tuple[LiveServer, LiveServer], engine: Engine
) -> None:
    """A running run holds the project's one slot (a run waiting for a person would give it
    up); the calls racing it on both replicas are refused, counted in the database."""
    a, b = replicas
    key = a.create_key("ruth")
    a.set_limits(TORTURE, max_running=1, max_queued=0)
    before = {r.id for r in run_store.list_runs(engine, project_ids=[TORTURE], limit=1000)}
    outcomes: list[dict[str, Any]] = []
    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for server in (a, b, a, b):

                    async def one(server: LiveServer = server) -> None:
                        outcomes.append(await call(server, key, TORTURE, "sleep", {"seconds": 3600}))

                    tg.start_soon(one)
                while len(outcomes) < 3:
                    await anyio.sleep(0.02)  # until the three refusals came back, bounded above
                tg.cancel_scope.cancel()  # the client leaves: the sleeping run is cancelled
        assert [o["error"]["code"] for o in outcomes] == ["queue_limit"] * 3, outcomes
        assert all("runId" not in o for o in outcomes)
        created = [
            r for r in run_store.list_runs(engine, project_ids=[TORTURE], limit=1000) if r.id not in before
        ]
        assert len(created) == 1
        with anyio.fail_after(WAIT):
            while (
                run := run_store.get_run(engine, run_id=created[0].id)
            ) is None or run.status != "cancelled":
                await anyio.sleep(0.05)  # until the cancelled run is recorded, bounded above
    finally:
        a.set_limits(TORTURE, max_running=100, max_queued=100)


async def test_a_run_queued_on_b_starts_when_the_run_on_a_ends(
    replicas: tuple[LiveServer, LiveServer], engine: Engine
) -> None:
    a, b = replicas
    key = a.create_key("sam")
    a.set_limits(TORTURE, max_running=1, max_queued=1)
    try:
        with anyio.fail_after(WAIT):
            queued: list[dict[str, Any]] = []
            async with anyio.create_task_group() as tg:
                holder = anyio.CancelScope()

                async def on_a() -> None:
                    with holder:  # runs (holding the one slot) until the test leaves
                        await call(a, key, TORTURE, "sleep", {"seconds": 3600})

                async def on_b() -> None:
                    queued.append(await call(b, key, TORTURE, "ask_once", {}))

                tg.start_soon(on_a)
                while not run_store.list_runs(engine, project_ids=[TORTURE], status="running"):
                    await anyio.sleep(0.02)  # until A's run holds the slot, bounded above
                tg.start_soon(on_b)
                # B's call is queued (in the database) before A refuses a third one
                while not run_store.list_runs(engine, project_ids=[TORTURE], status="queued"):
                    await anyio.sleep(0.02)  # until B recorded its queued run, bounded above
                third = await call(a, key, TORTURE, "ask_once", {})
                assert third["error"]["code"] == "queue_limit"
                holder.cancel()  # A's client leaves: its run is cancelled, its slot freed
            # A's run ended; B's queued run was admitted and asks its question
            assert queued[0]["error"]["code"] == "interaction_required", queued
            assert driven_by(engine, queued[0]["runId"], b)
    finally:
        a.set_limits(TORTURE, max_running=100, max_queued=100)
    async with httpx2.AsyncClient(base_url=a.base_url, headers={"Authorization": f"Bearer {key}"}) as api:
        r = await api.post(
            f"/api/interactions/{queued[0]['error']['interactionId']}/answer", json={"action": "cancel"}
        )
        assert r.status_code == 200, r.text


async def test_an_answer_stored_without_any_notification_still_resumes_the_run(
    replicas: tuple[LiveServer, LiveServer], engine: Engine
) -> None:
    """A missed notification loses nothing: the waiting run re-reads its question from the
    database now and then. Here the answer is written by a process with no relay at all."""
    a, _ = replicas
    key = a.create_key("tess")
    first = await call(a, key, TORTURE, "ask_once", {})
    assert first["error"]["code"] == "interaction_required"
    run_id = first["runId"]
    silent = InteractionService(engine, AuditLog(), EventHub())  # publishes to nobody
    answer = await silent.answer(
        first["error"]["interactionId"], action="accept", content={"name": "Quiet"}, channel="api"
    )
    assert not answer.repeated
    with anyio.fail_after(WAIT):
        while (run := run_store.get_run(engine, run_id=run_id)) is None or run.status != "success":
            await anyio.sleep(0.05)  # polling the record until A's re-check resumed the run, bounded
    assert run.output == {"name": "Quiet"}
    assert driven_by(engine, run_id, a)

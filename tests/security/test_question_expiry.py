"""A question nobody answers expires after `STEAMHARNESS_QUESTION_TIMEOUT_SECONDS`, against
the real app (in this process): the interaction is closed as expired (its expiry is in the
row), its run fails with `question_expired`, the audit says both, the worker's waiting place
is free again, and an answer that comes too late gets a clear refusal."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx2
import pytest

from tests.e2e.server import INTERACTIVE, LiveServer
from tests.e2e.test_http_mcp import payload, sdk_client
from tests.support import in_process_server

# On PostgreSQL the expiry is one conditional update racing other replicas' answers:
# both dialects (tests/pg.py).
pytestmark = [pytest.mark.anyio, pytest.mark.dialects]

QUESTION_TIMEOUT = 2
BOUND = 120


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[LiveServer]:
    with in_process_server(
        tmp_path_factory.mktemp("expiry"),
        server_database_url,
        STEAMHARNESS_QUESTION_TIMEOUT_SECONDS=str(QUESTION_TIMEOUT),
        # One waiting run in all: an expired question must give its place back.
        STEAMHARNESS_MAX_WAITING_RUNS="1",
        STEAMHARNESS_MAX_CONCURRENT_RUNS="1",
    ) as live:
        yield live


def aware(value: Any) -> datetime:
    value = datetime.fromisoformat(value) if isinstance(value, str) else value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


async def ask(server: LiveServer, key: str) -> dict[str, Any]:
    """plan_trip from a client without form elicitation: `interaction_required` at once."""
    async with sdk_client(server.mcp_url(INTERACTIVE), key, "legacy") as client:
        body = payload(await client.call_tool("plan_trip", {"traveller": "Bo"}))
    assert body["error"]["code"] == "interaction_required", body
    return body


async def final_run(http: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    while True:
        data = (await http.get(f"/api/runs/{run_id}")).json()["data"]
        if data["status"] in ("success", "failed", "cancelled", "timeout"):
            return data
        await anyio.sleep(0.05)  # polling the run, bounded by the caller's fail_after


async def test_an_unanswered_question_expires_and_its_run_fails_with_a_clear_code(server: LiveServer) -> None:
    key = server.create_key("sleepy")
    with anyio.fail_after(BOUND):
        body = await ask(server, key)
    run_id, interaction_id = body["runId"], body["error"]["interactionId"]
    (row,) = server.query("select * from interactions where id = :i", i=interaction_id)
    # The expiry is in the row: whichever replica reads it, and after a restart, knows it.
    assert aware(row["expires_at"]) - aware(row["created_at"]) == pytest.approx(
        timedelta(seconds=QUESTION_TIMEOUT), abs=timedelta(seconds=1)
    )

    async with httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        with anyio.fail_after(BOUND):
            run = await final_run(http, run_id)
        assert run["status"] == "failed", run
        assert run["error"]["code"] == "question_expired"
        assert "STEAMHARNESS_QUESTION_TIMEOUT_SECONDS" in run["error"]["message"]
        assert "'Where to?'" in run["error"]["message"]

        (row,) = server.query("select status, close_reason from interactions where id = :i", i=interaction_id)
        assert (row["status"], row["close_reason"]) == ("closed", "expired")
        late = await http.post(
            f"/api/interactions/{interaction_id}/answer",
            json={"action": "accept", "content": {"destination": "Oslo", "nights": 2}},
        )
        assert late.status_code == 410, late.text
        assert late.json()["error"]["code"] == "interaction_expired"
        assert "expired before it was answered" in late.json()["error"]["message"]

    events = server.query(
        "select event, outcome, details from audit_events where run_id = :r order by id", r=run_id
    )
    expired = [e for e in events if e["event"] == "interaction.expired"]
    assert len(expired) == 1 and expired[0]["outcome"] == "expired"
    assert interaction_id in str(expired[0]["details"])
    finished = [e for e in events if e["event"] == "run.finished"]
    assert len(finished) == 1 and finished[0]["outcome"] == "failed"
    assert "question_expired" in str(finished[0]["details"])

    # Its waiting place is free again (the cap is one): the next question waits too.
    with anyio.fail_after(BOUND):
        again = await ask(server, key)
    async with httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        r = await http.post(
            f"/api/interactions/{again['error']['interactionId']}/answer", json={"action": "cancel"}
        )
        assert r.status_code == 200, r.text
        with anyio.fail_after(BOUND):
            assert (await final_run(http, again["runId"]))["status"] == "cancelled"

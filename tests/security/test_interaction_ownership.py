"""Questions belong to the person who asked: alice and bob may both use the same project,
but only alice sees and answers the questions of alice's runs (and of her host
conversations), on every channel: the JSON API, the conversation page and its SSE
stream, the answer form, the run pages, the 2026-07-28 resume path and Try it. Everyone
else gets 404. Administrators see them and answer them only through an explicit override,
which the `interaction.answered` audit event records.

In-process through the page-test app (TestClient, the real run service and hub), and
against the real app (in this process) on a loopback port."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from fastapi.testclient import TestClient
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from sqlmodel import Session, select
from sse_starlette import ServerSentEvent

from tests import prepared
from tests.conftest import EXAMPLES
from tests.e2e.server import INTERACTIVE as LIVE_INTERACTIVE
from tests.e2e.server import LiveServer
from tests.e2e.test_conversation_sse import SseEvent, call_without_elicitation, tab, until
from tests.e2e.test_conversation_sse import login as live_login
from tests.e2e.test_http_mcp import sdk_client
from tests.helpers import next_update
from tests.support import in_process_server
from tests.web.conftest import ADMIN, INTERACTIVE, Web, account_id, next_step, prepare, services, start_asking
from tests.web.test_host_pages import Host, ask, connect, create
from tests.web.test_host_pages import start as start_host
from webui.admin import grant_projects
from webui.app import create_app
from webui.auth.ui import UiUser
from webui.runs.request import RunRequest
from webui.runs.types import RunUpdate
from webui.store.models import AuditEvent
from webui.web.conversations import Feed, conversation_stream
from webui.web.state import app_state
from webui.workflows.project import load_project

ALICE = ("alice", "alice-password-1")
BOB = ("bob", "bob-password-1")
HX = {"HX-Request": "true"}
TRIP = EXAMPLES / "interactive"
WAIT = 60
TRIP_ANSWERS = [{"destination": "Rome", "nights": 3}, {"room": "double"}, {}]


# --------------------------------------------------------------------------- in-process helpers


def add_people(web: Web) -> None:
    """alice and bob: plain accounts, both granted the interactive project."""
    app = web.client.app  # type: ignore[attr-defined]
    engine = app_state(app).services.engine
    for name, password in (ALICE, BOB):
        prepared.add_user(engine, name, password, admin=False)
        grant_projects(engine, user=name, projects=[INTERACTIVE], registry=app_state(app).registry)


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Web]:
    settings = prepare(tmp_path / "data")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        page = Web(client, settings)
        add_people(page)
        yield page


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    app = start_host(tmp_path)
    running = next(app)
    try:
        add_people(running.web)
        yield running
    finally:
        app.close()


def ui_user(web: Web, name: str) -> UiUser:
    return UiUser(account_id(web, name), name, False, f"session-{name}", "csrf", frozenset({INTERACTIVE}))


async def begin(svc: Any, owner: int, name: str) -> str:
    """A plan_trip run started with `name`'s key (as the HTTP endpoint records it)."""
    project = load_project(TRIP)
    ep = project.entrypoint("plan_trip")
    assert ep is not None
    params = {"traveller": name}
    return (
        await svc.runs.start(
            RunRequest(
                project=project,
                entrypoint=ep,
                params=params,
                stored_params=params,
                actor=f"user:{name}",
                account_id=owner,
                project_version=project.version,
            )
        )
    ).run_id


def start_trip(web: Web, name: str) -> tuple[str, str]:
    """`name`'s plan_trip run, waiting on its first question: (run id, interaction id)."""
    return start_asking(web, TRIP, "plan_trip", {"traveller": name}, owner=name)


def answer(web: Web, csrf: str, iid: str, data: dict[str, Any]) -> Any:
    return web.client.post(
        f"/interactions/{iid}/answer", data=data, headers={**HX, "X-CSRF-Token": csrf}, follow_redirects=False
    )


def first_answer(iid: str) -> dict[str, Any]:
    return {"action": "accept", f"{iid}-destination": "Rome", f"{iid}-nights": "3"}


def card(page: str, iid: str) -> str:
    match = re.search(rf'<article id="interaction-{iid}".*?</article>', page, re.S)
    assert match, page
    return match.group(0)


def status_of(web: Web, iid: str) -> str:
    return services(web).interactions.get(iid).status


def answered_events(web: Web, run_id: str) -> list[AuditEvent]:
    with Session(services(web).engine) as s:
        stmt = select(AuditEvent).where(
            AuditEvent.event == "interaction.answered", AuditEvent.run_id == run_id
        )
        return list(s.exec(stmt.order_by(AuditEvent.id)))  # pyright: ignore[reportArgumentType]


# --------------------------------------------------------------------------- the browser


def test_bob_gets_404_for_alices_question_on_every_page_and_alice_answers_it_to_the_end(web: Web) -> None:
    run_id, iid = start_trip(web, "alice")
    csrf = web.login(*BOB)
    page = web.client.get("/inbox").text
    assert iid not in page and "Where to?" not in page and "Nothing is waiting for an answer." in page
    assert answer(web, csrf, iid, first_answer(iid)).status_code == 404
    assert answer(web, csrf, iid, {**first_answer(iid), "override": "true"}).status_code == 404
    assert answer(web, csrf, iid, {"action": "cancel"}).status_code == 404
    assert web.client.get(f"/runs/{run_id}/timeline").status_code == 404
    run_page = web.client.get(f"/runs/{run_id}")  # bob may use the project: the run, not its question
    assert run_page.status_code == 200 and "waiting_for_input" in run_page.text
    assert "Where to?" not in run_page.text, run_page.text
    assert "Waiting for input" not in run_page.text and "Answer in your Inbox" not in run_page.text
    assert status_of(web, iid) == "pending"
    web.logout()

    csrf = web.login(*ALICE)
    assert "Answer in your Inbox" in web.client.get(f"/runs/{run_id}").text
    html = card(web.client.get("/inbox").text, iid)
    assert "Where to?" in html and 'data-owner="other"' not in html and "Answer as administrator" not in html
    ids = [iid]
    update: RunUpdate | None = None
    for content in TRIP_ANSWERS:
        current = ids[-1]
        form = {"action": "accept", **{f"{current}-{k}": str(v) for k, v in content.items()}}
        r = answer(web, csrf, current, form)
        assert r.status_code == 200, r.text
        assert "Answered in the browser by user:alice" in r.text and "as administrator" not in r.text
        update = next_step(web, run_id)
        if update.kind == "waiting":
            assert update.interaction is not None
            ids.append(update.interaction.id)
    assert update is not None and update.kind == "final" and update.status == "success"
    assert update.output["traveller"] == "alice" and update.output["destination"] == "Rome"
    assert update.output["room"] == "double" and update.output["booked"] is True
    assert all(e.details and e.details["override"] is False for e in answered_events(web, run_id))


def test_an_administrator_sees_alices_question_but_answers_only_with_the_audited_override(web: Web) -> None:
    run_id, iid = start_trip(web, "alice")
    csrf = web.login(*ADMIN)
    html = card(web.client.get("/inbox").text, iid)
    assert 'data-owner="other"' in html and "This question belongs to user:alice" in html
    assert re.search(
        r'<input type="checkbox" id="interaction-[^"]+-override" name="override" value="true"', html
    )
    assert "Answer as administrator" in html
    assert web.client.get(f"/runs/{run_id}/timeline").status_code == 200

    for attempt in (first_answer(iid), {"action": "cancel"}, {**first_answer(iid), "override": "no"}):
        r = answer(web, csrf, iid, attempt)
        assert r.status_code == 422, r.text
        assert "Tick “Answer as administrator”" in r.text and 'data-status="pending"' in r.text
    assert status_of(web, iid) == "pending" and answered_events(web, run_id) == []

    r = answer(web, csrf, iid, {**first_answer(iid), "override": "true"})
    assert r.status_code == 200, r.text
    assert "Answered in the browser by user:root as administrator" in r.text
    update = next_step(web, run_id)
    assert update.kind == "waiting" and update.interaction is not None  # resumed: the next question
    (event,) = answered_events(web, run_id)
    assert event.actor == "user:root" and event.project_id == INTERACTIVE and event.outcome == "accept"
    assert event.details == {
        "interactionId": iid,
        "channel": "browser",
        "override": True,
        "ownerAccountId": account_id(web, "alice"),
    }
    assert web.client.portal is not None
    web.client.portal.call(services(web).runs.cancel, run_id)


def test_bobs_feed_never_carries_alices_cards_or_their_updates_while_alices_does(web: Web) -> None:
    svc = services(web)
    feed = Feed(svc.engine, app_state(web.client.app).templates.env)
    alice, bob = ui_user(web, "alice"), ui_user(web, "bob")

    async def scenario() -> tuple[list[ServerSentEvent], list[ServerSentEvent], str, str]:
        alice_stream = conversation_stream(feed, svc.hub, alice, lambda: alice)
        bob_stream = conversation_stream(feed, svc.hub, bob, lambda: bob)
        try:
            with anyio.fail_after(WAIT):
                assert "Nothing is waiting" in str((await anext(bob_stream)).data)
                assert (await anext(alice_stream)).event == "snapshot"
                hers = await begin(svc, alice.account_id, "alice")
                asked = await next_update(svc, hers, ("waiting",))
                assert asked.interaction is not None
                her_question = asked.interaction.id
                alice_seen = [await anext(alice_stream)]
                assert alice_seen[0].event == "interaction" and her_question in str(alice_seen[0].data)
                await svc.interactions.answer(
                    her_question, action="accept", content=TRIP_ANSWERS[0], channel="api", actor="user:alice"
                )
                while not any(e.event == f"resolved-{her_question}" for e in alice_seen):
                    alice_seen.append(await anext(alice_stream))
                await next_update(svc, hers, ("waiting",))
                # bob's own question comes after all of that in the hub: whatever his stream
                # yields first is the first event it did not drop
                his = await begin(svc, bob.account_id, "bob")
                await next_update(svc, his, ("waiting",))
                bob_seen = [await anext(bob_stream)]
                await svc.runs.cancel(hers)
                await svc.runs.cancel(his)
                while bob_seen[-1].event != f"run-{his}" or 'data-run-status="cancelled"' not in str(
                    bob_seen[-1].data
                ):
                    bob_seen.append(await anext(bob_stream))
        finally:
            await alice_stream.aclose()
            await bob_stream.aclose()
        return alice_seen, bob_seen, hers, his

    assert web.client.portal is not None
    alice_seen, bob_seen, hers, his = web.client.portal.call(scenario)
    assert f"run-{hers}" in [e.event for e in alice_seen]
    assert bob_seen[0].event == "interaction" and f'data-run="{his}"' in str(bob_seen[0].data)
    for event in bob_seen:
        assert hers not in str(event.data) and hers not in (event.event or ""), event
        assert "alice" not in str(event.data)


# --------------------------------------------------------------------------- host requests


def test_a_host_request_in_alices_conversation_is_404_for_bob_and_needs_the_override_for_an_admin(
    host: Host,
) -> None:
    csrf = host.web.login(*ALICE)
    conv = create(host, csrf, "alice's", selection="defaults")
    connect(host, csrf, conv)
    iid, _ = ask(host, csrf, conv, "wait")
    assert f"interaction-{iid}" in host.client.get("/inbox").text
    host.web.logout()

    csrf = host.web.login(*BOB)
    assert f"interaction-{iid}" not in host.client.get("/inbox").text
    for data in ({"action": "decline"}, {"action": "cancel", "override": "true"}):
        r = host.client.post(f"/interactions/{iid}/answer", data=data, headers={**HX, "X-CSRF-Token": csrf})
        assert r.status_code == 404
    host.web.logout()

    csrf = host.web.login(*ADMIN)
    html = card(host.client.get("/inbox").text, iid)
    assert 'data-owner="other"' in html and "the owner of the conversation it was asked in" in html
    headers = {**HX, "X-CSRF-Token": csrf}
    r = host.client.post(f"/interactions/{iid}/answer", data={"action": "decline"}, headers=headers)
    assert r.status_code == 422 and "Answer as administrator" in r.text
    assert app_state(host.web.client.app).services.interactions.get(iid).status == "pending"
    data = {"action": "decline", "override": "true"}
    r = host.client.post(f"/interactions/{iid}/answer", data=data, headers=headers)
    assert r.status_code == 200, r.text
    assert "declined in the browser by user:root as administrator" in r.text


# --------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from webui.cli.common import cli_audit, open_store, server_settings

    with in_process_server(tmp_path_factory.mktemp("ownership")) as server:
        # what `users create` and `users grant` write, written in this process
        engine, registry = open_store(server_settings(server.data_dir, server.database_url))
        try:
            for name, password in (ALICE, BOB):
                prepared.add_user(engine, name, password, admin=False)
                grant_projects(
                    engine, user=name, projects=[LIVE_INTERACTIVE], registry=registry, audit=cli_audit()
                )
            prepared.add_user(engine, *ADMIN, admin=True)
        finally:
            engine.dispose()
        yield server
    assert "Traceback" not in server.log()


def rows(server: LiveServer, table: str) -> list[dict[str, Any]]:
    con = sqlite3.connect(server.data_dir / "steamharness.sqlite3")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(f"select * from {table} order by rowid")]
    finally:
        con.close()


def live_account(server: LiveServer, name: str) -> int:
    return next(int(r["id"]) for r in rows(server, "accounts") if r["name"] == name)


def api(server: LiveServer, key: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30)
    )


async def next_question(http: httpx2.AsyncClient, run_id: str, after: str) -> dict[str, Any]:
    """The run as its owner reads it, once it moved past question `after` (caller bounds it)."""
    while True:
        run = (await http.get(f"/api/runs/{run_id}")).json()["data"]
        if run["status"] in ("success", "failed", "cancelled", "timeout"):
            return run
        pending = run.get("interaction")
        if pending and pending["interactionId"] != after:
            return run
        await anyio.sleep(0.05)  # polling the API, bounded by the caller's fail_after


async def drain_until(events: AsyncIterator[SseEvent], seen: list[SseEvent], name: str) -> SseEvent:
    async for event in events:
        seen.append(event)
        if event.event == name:
            return event
    raise AssertionError(f"the stream ended before {name!r}")


@pytest.mark.anyio
async def test_over_a_real_server_only_alice_answers_her_question_and_an_admin_only_with_the_override(
    live: LiveServer,
) -> None:
    alice_key, bob_key = live.create_key(ALICE[0]), live.create_key(BOB[0])
    body = await call_without_elicitation(live, alice_key, LIVE_INTERACTIVE, "plan_trip", {"traveller": "Al"})
    run_id, first = body["runId"], body["error"]["interactionId"]

    async with api(live, bob_key) as bob, api(live, alice_key) as alice, api(live, live.admin_key) as admin:
        # bob: the run is readable (same project) but the question is not his to see or answer
        for payload in (
            {"action": "accept", "content": TRIP_ANSWERS[0]},
            {"action": "decline", "override": True},
        ):
            r = await bob.post(f"/api/interactions/{first}/answer", json=payload)
            assert r.status_code == 404, r.text
            assert r.json()["error"]["message"] == f"interaction {first!r} not found"
        seen_by_bob = (await bob.get(f"/api/runs/{run_id}")).json()["data"]
        assert seen_by_bob["status"] == "waiting_for_input" and "interaction" not in seen_by_bob

        async with (
            httpx2.AsyncClient(base_url=live.base_url, timeout=httpx2.Timeout(30, read=WAIT)) as bob_web,
            httpx2.AsyncClient(base_url=live.base_url, timeout=httpx2.Timeout(30, read=WAIT)) as alice_web,
        ):
            bob_csrf = await live_login(bob_web, *BOB)
            await live_login(alice_web, *ALICE)
            page = (await bob_web.get("/inbox")).text
            assert first not in page and "Nothing is waiting for an answer." in page
            r = await bob_web.post(
                f"/interactions/{first}/answer",
                data={"action": "cancel", "override": "true"},
                headers={**HX, "X-CSRF-Token": bob_csrf},
            )
            assert r.status_code == 404
            assert (await bob_web.get(f"/runs/{run_id}/timeline")).status_code == 404

            with anyio.fail_after(WAIT):
                async with tab(bob_web) as bob_tab, tab(alice_web) as alice_tab:
                    # alice answers: her tab follows her run, and only her tab
                    r = await alice.post(
                        f"/api/interactions/{first}/answer",
                        json={"action": "accept", "content": TRIP_ANSWERS[0]},
                    )
                    assert r.status_code == 200, r.text
                    await until(alice_tab, f"resolved-{first}")
                    second_card = await until(alice_tab, "interaction")
                    assert f'data-run="{run_id}"' in second_card.data and "Which room?" in second_card.data
                    run = await next_question(alice, run_id, first)
                    second = run["interaction"]["interactionId"]

                    # the admin key: refused without the override, heard with it
                    payload: dict[str, Any] = {"action": "accept", "content": TRIP_ANSWERS[1]}
                    r = await admin.post(f"/api/interactions/{second}/answer", json=payload)
                    assert r.status_code == 403 and r.json()["error"]["code"] == "override_required"
                    r = await admin.post(
                        f"/api/interactions/{second}/answer", json={**payload, "override": True}
                    )
                    assert r.status_code == 200, r.text
                    run = await next_question(alice, run_id, second)
                    third = run["interaction"]["interactionId"]
                    r = await alice.post(f"/api/interactions/{third}/answer", json={"action": "accept"})
                    assert r.status_code == 200, r.text

                    # bob's own question is published after all of alice's: the first card
                    # his tab shows is his, and nothing of alice's run reached it before
                    his = await call_without_elicitation(
                        live, bob_key, LIVE_INTERACTIVE, "plan_trip", {"traveller": "Bo"}
                    )
                    bob_seen: list[SseEvent] = []
                    his_card = await drain_until(bob_tab, bob_seen, "interaction")
                    assert f'data-run="{his["runId"]}"' in his_card.data
                    for event in bob_seen:
                        assert run_id not in event.data and run_id not in event.event, event
                    r = await bob.post(
                        f"/api/interactions/{his['error']['interactionId']}/answer", json={"action": "cancel"}
                    )
                    assert r.status_code == 200, r.text

            final = await next_question(alice, run_id, third)
    alice_id = live_account(live, ALICE[0])
    assert next(r for r in rows(live, "runs") if r["id"] == run_id)["account_id"] == alice_id
    assert final["status"] == "success", final
    assert final["output"]["traveller"] == "Al" and final["output"]["destination"] == "Rome"
    assert final["output"]["room"] == "double" and final["output"]["booked"] is True

    answered = [
        r
        for r in rows(live, "audit_events")
        if r["event"] == "interaction.answered" and r["run_id"] == run_id
    ]
    assert [(r["actor"], json.loads(r["details"])["override"]) for r in answered] == [
        ("user:alice", False),
        ("admin", True),
        ("user:alice", False),
    ]
    assert json.loads(answered[1]["details"])["ownerAccountId"] == alice_id
    overridden = next(r for r in rows(live, "interactions") if r["id"] == second)
    assert overridden["answered_by"] == "admin" and overridden["answer_override"] == 1


@pytest.mark.anyio
async def test_a_sealed_2026_request_state_of_alice_cannot_answer_her_question_with_bobs_key(
    live: LiveServer,
) -> None:
    alice_key, bob_key = live.create_key(ALICE[0]), live.create_key(BOB[0])
    url = live.mcp_url(LIVE_INTERACTIVE)
    args = {"traveller": "Sealed"}

    async def never(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("the server asks through input_required in this era")

    async with sdk_client(url, alice_key, "auto", never) as client:
        asked = await client.session.call_tool("plan_trip", args, allow_input_required=True)
    assert isinstance(asked, types.InputRequiredResult) and asked.request_state
    (iid,) = (asked.input_requests or {}).keys()
    stolen: types.InputResponses = {
        iid: types.ElicitResult(action="accept", content={"destination": "Bobville", "nights": 1})
    }

    async with sdk_client(url, bob_key, "auto", never) as client:
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool(
                "plan_trip", args, input_responses=stolen, request_state=asked.request_state
            )
    assert refused.value.code == -32602
    assert next(r for r in rows(live, "interactions") if r["id"] == iid)["status"] == "pending"

    mine: types.InputResponses = {iid: types.ElicitResult(action="accept", content=TRIP_ANSWERS[0])}
    async with sdk_client(url, alice_key, "auto", never) as client:
        again = await client.session.call_tool(
            "plan_trip",
            args,
            input_responses=mine,
            request_state=asked.request_state,
            allow_input_required=True,
        )
        assert isinstance(again, types.InputRequiredResult)  # resumed: the next question
        (nxt,) = (again.input_requests or {}).keys()
        done = await client.session.call_tool(
            "plan_trip",
            args,
            input_responses={nxt: types.ElicitResult(action="cancel")},
            request_state=again.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, types.CallToolResult)
    answered = next(r for r in rows(live, "interactions") if r["id"] == iid)
    assert answered["answered_by"] == "user:alice" and json.loads(answered["answer"])["destination"] == "Rome"


def test_try_it_runs_belong_to_the_logged_in_person_and_only_she_sees_their_question(
    live: LiveServer,
) -> None:
    csrf_re = re.compile(r'name="csrf_token" value="([^"]+)"')

    @contextlib.contextmanager
    def browser(name: str, password: str) -> Iterator[httpx2.Client]:
        with httpx2.Client(base_url=live.base_url, timeout=WAIT) as client:
            token = csrf_re.search(client.get("/login").text)
            assert token
            r = client.post(
                "/login",
                data={"username": name, "password": password, "csrf_token": token.group(1)},
                follow_redirects=False,
            )
            assert r.status_code == 303, r.text
            yield client

    with browser(*ALICE) as alice, browser(*BOB) as bob:
        page = alice.get(f"/projects/{LIVE_INTERACTIVE}/mcp?target=latest")
        token = csrf_re.search(page.text)
        assert page.status_code == 200 and token
        r = alice.post(
            f"/projects/{LIVE_INTERACTIVE}/mcp/try?target=latest",
            data={"tool": "plan_trip", "t1-traveller": "Tia"},
            headers={"HX-Request": "true", "X-CSRF-Token": token.group(1)},
        )
        assert r.status_code == 200 and "The run is waiting for input" in r.text, r.text
        link = re.search(r'href="/runs/([^"]+)"', r.text)
        assert link
        run = next(row for row in rows(live, "runs") if row["id"] == link.group(1))
        (iid,) = [i["id"] for i in rows(live, "interactions") if i["run_id"] == run["id"]]

        assert f"interaction-{iid}" in alice.get("/inbox").text
        assert f"interaction-{iid}" not in bob.get("/inbox").text
        bob_csrf = csrf_re.search(bob.get("/projects").text)
        assert bob_csrf
        r = bob.post(
            f"/interactions/{iid}/answer", data={"action": "cancel", "csrf_token": bob_csrf.group(1)}
        )
        assert r.status_code == 404
        alice_csrf = csrf_re.search(alice.get("/projects").text)
        assert alice_csrf
        r = alice.post(
            f"/interactions/{iid}/answer",
            data={"action": "cancel", "csrf_token": alice_csrf.group(1)},
            follow_redirects=False,
        )
        assert r.status_code == 303
    assert run["actor"] == "user:alice" and run["account_id"] == live_account(live, ALICE[0])

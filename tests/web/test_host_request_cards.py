"""Host request cards and who may see and answer them, with two accounts and an admin.

A request card names the conversation it was asked in (title, linked), the server (name and
id) and the tool call that caused it (tool name, call id linked to the call on the
conversation page). Another account sees none of a conversation's requests (the
inbox, its live stream, the conversation page and its activity, the JSON API)
and cannot answer them; an administrator answers only with the explicit, audited override.
The server is the real Python SDK test server over stdio (tests/fixtures/host_server.py)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sse_starlette import ServerSentEvent

from tests import prepared
from tests.web.conftest import ADMIN, USER, account_id, audit, details, engine
from tests.web.test_host_pages import (
    FINISHED,
    FOLLOW_SECONDS,
    HX,
    Host,
    activity_of,
    answer,
    ask,
    call,
    card,
    connect,
    create,
    finished_call,
    follow,
    pending_request,
    result_texts,
    start,
)
from webui.admin import create_key
from webui.auth.ui import COOKIE_NAME, UiUser
from webui.host.service import HostService
from webui.store import interactions as interaction_store
from webui.web.conversation_views import build_cards
from webui.web.conversations import Feed, conversation_stream
from webui.web.state import app_state

BOB = ("bob", "bob-password-1")


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    for h in start(tmp_path):
        prepared.add_user(engine(h.web), *BOB, admin=False)
        yield h


def status_of(host: Host, iid: str) -> str:
    row = interaction_store.get_interaction(engine(host.web), interaction_id=iid)
    assert row is not None
    return row.status


def test_a_request_card_names_the_conversation_the_server_and_the_tool_call(host: Host) -> None:
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "Trip <to Rome>", selection="defaults")
    connect(host, csrf, conv)
    iid, fragment = ask(host, csrf, conv, "book")
    [row] = host.service.calls(conv)
    stored = interaction_store.get_interaction(engine(host.web), interaction_id=iid)
    assert stored is not None and stored.host_call_id == row.id and row.tool == "book"

    html_card = card(host.client.get("/inbox").text, iid)
    assert f'data-conversation="{conv}" data-call="{row.id}"' in html_card
    assert f'<a href="/host/conversations/{conv}">Trip &lt;to Rome&gt;</a>' in html_card
    assert "Test_Stdio (<code>mcp-test-stdio</code>)" in html_card
    link = f'<a class="call" href="/host/conversations/{conv}#call-{row.id}"><code>{row.id}</code></a>'
    assert f'tool call <strong class="tool">book</strong> ({link})' in html_card
    # the link's target exists on the conversation page, and the request there names its call too
    page = host.client.get(f"/host/conversations/{conv}").text
    assert f'id="call-{row.id}"' in page
    [request] = activity_of(fragment).requests
    assert request.call is not None and (request.call.id, request.call.tool) == (row.id, "book")
    assert f'during <a href="#call-{row.id}">book <code>{row.id}</code></a>' in fragment.text
    [requested] = [e for e in audit(host.web, "interaction.requested") if details(e)["interactionId"] == iid]
    assert (details(requested)["conversationId"], details(requested)["callId"]) == (conv, row.id)

    assert answer(host, csrf, iid, {"action": "decline"}).status_code == 200
    follow(host, conv, lambda a: finished_call(a, "book"))


def test_a_host_owned_servers_request_names_the_calling_conversations_call(host: Host) -> None:
    """One client serves every conversation: the request still names the call that caused it."""
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "shared", selection="choose", server="mcp-other-server")
    connect(host, csrf, conv, "mcp-other-server")
    r = call(host, csrf, conv, "book", server="mcp-other-server")
    fragment = follow(host, conv, lambda a: pending_request(a) is not None, first=r)
    iid = pending_request(activity_of(fragment))
    assert iid is not None
    [row] = host.service.calls(conv)
    html_card = card(host.client.get("/inbox").text, iid)
    assert "Other Server (<code>mcp-other-server</code>)" in html_card
    link = f'<a class="call" href="/host/conversations/{conv}#call-{row.id}">'
    assert f'tool call <strong class="tool">book</strong> ({link}' in html_card
    assert answer(host, csrf, iid, {"action": "decline"}).status_code == 200
    follow(host, conv, lambda a: finished_call(a, "book"))


def test_another_account_sees_and_answers_none_of_a_conversations_requests(host: Host) -> None:
    ann = host.web.login(*USER)
    conv = create(host, ann, "ann's trip", selection="defaults")
    connect(host, ann, conv)
    iid, _ = ask(host, ann, conv, "wait")
    assert f"interaction-{iid}" in host.client.get("/inbox").text
    host.web.logout()

    bob = host.web.login(*BOB)
    assert f"interaction-{iid}" not in host.client.get("/inbox").text
    assert iid not in host.client.get("/inbox", headers=HX).text
    assert conv not in host.client.get("/host/conversations").text
    for path in (f"/host/conversations/{conv}", f"/host/conversations/{conv}/activity"):
        assert host.client.get(path).status_code == 404, path
        assert host.client.get(path, headers=HX).status_code == 404, path
    # answering: 404 (the id is not confirmed), with or without an override
    for data in ({"action": "decline"}, {"action": "cancel", "override": "true"}):
        r = answer(host, bob, iid, data)
        assert r.status_code == 404, r.text
        assert "wait" not in r.text and conv not in r.text
    r = host.client.post(
        f"/interactions/{iid}/answer", data={"action": "decline", "csrf_token": bob}, follow_redirects=False
    )
    assert r.status_code == 404
    # the JSON API does not reach host requests at all
    raw, _ = create_key(engine(host.web), user=BOB[0], projects=None, scopes=None, name="bob")
    r = host.client.post(
        f"/api/interactions/{iid}/answer",
        json={"action": "decline", "override": True},
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert r.status_code == 404, r.text
    # nothing changed: still pending, nothing answered, the call still waits
    assert status_of(host, iid) == "pending"
    assert not [e for e in audit(host.web, "interaction.answered") if details(e)["interactionId"] == iid]
    [row] = host.service.calls(conv)
    assert row.status == "running"

    # bob's live stream: his snapshot has none of ann's requests, and a new one is not pushed
    app = host.client.app  # type: ignore[attr-defined]
    bob_user = app_state(app).ui_auth.resolve(host.client.cookies.get(COOKIE_NAME))
    assert isinstance(bob_user, UiUser) and not bob_user.is_admin
    services = app_state(app).services
    feed = Feed(services.engine, app_state(app).templates.env, lambda: {"mcp-test-stdio": "Test_Stdio"})
    finished = anyio.Event()

    def bob_login() -> UiUser | None:
        return None if finished.is_set() else bob_user

    async def scenario() -> tuple[list[ServerSentEvent], str]:
        theirs = conversation_stream(feed, services.hub, bob_user, bob_login, recheck_seconds=0.05)
        second: str | None = None
        try:
            with anyio.fail_after(FOLLOW_SECONDS):
                events = [await anext(theirs)]
                with services.hub.subscribe("interactions") as sub:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_call_wait, host.service, conv)
                        async for event in sub:
                            if event.kind == "pending":
                                second = str(event.data["interactionId"])
                                break
                        else:
                            raise AssertionError("the hub's subscription ended before a request came")
                        await services.interactions.answer(
                            second, action="cancel", actor="user:ann", channel="browser"
                        )
                finished.set()
                events += [e async for e in theirs]
        finally:
            await theirs.aclose()
        assert second is not None
        return events, second

    assert host.client.portal is not None
    events, second = host.client.portal.call(scenario)
    assert [e.event for e in events] == ["snapshot"]
    assert iid not in str(events[0].data) and second not in str(events[0].data)
    assert NOTHING in str(events[0].data)
    # the second request came while the first call still waited: each call has a client of
    # its own (per call), so the request names the second call, not the first
    later = interaction_store.get_host(engine(host.web), interaction_id=second)
    assert later is not None and later.call is not None
    assert later.interaction.host_call_id == later.call.id != row.id
    assert later.conversation is not None and later.conversation.id == conv
    [later_card] = build_cards(engine(host.web), [later], feed.server_names)
    assert later.call.id in feed.render("card", card=later_card, user=bob_user)
    host.web.logout()

    # an administrator sees it, marked as someone else's, and answers only with the override
    root = host.web.login(*ADMIN)
    html_card = card(host.client.get("/inbox").text, iid)
    assert 'data-owner="other"' in html_card and 'name="override"' in html_card
    assert f'<a href="/host/conversations/{conv}">ann&#39;s trip</a>' in html_card
    r = answer(host, root, iid, {"action": "decline"})
    assert r.status_code == 422 and "Answer as administrator" in r.text
    assert status_of(host, iid) == "pending"
    r = answer(host, root, iid, {"action": "decline", "override": "true"})
    assert r.status_code == 200, r.text
    assert "Answer sent to Test_Stdio: declined in the browser by user:root as administrator" in r.text
    fragment = follow(host, conv, lambda a: all(c.status in FINISHED for c in a.calls))
    assert sorted(t["action"] for t in result_texts(fragment)) == ["cancel", "decline"]
    [answered] = [e for e in audit(host.web, "interaction.answered") if details(e)["interactionId"] == iid]
    assert answered.actor == "user:root" and answered.outcome == "decline"
    assert details(answered)["override"] is True
    assert details(answered)["ownerAccountId"] == account_id(host.web, USER[0])
    host.web.logout()

    # and ann, the owner, sees who answered for her
    host.web.login(*USER)
    fragment = host.client.get(f"/host/conversations/{conv}/activity", headers=HX)
    [mine] = [r for r in activity_of(fragment).requests if r.interaction.id == iid]
    assert mine.state == "Answer sent to Test_Stdio: declined in the browser by user:root as administrator"


NOTHING = '<p id="no-pending" class="muted">Nothing is waiting'


async def _call_wait(service: HostService, conv: str) -> None:
    await service.call_tool(conv, "mcp-test-stdio", "wait", {}, actor="user:ann")


def test_an_answer_given_the_moment_the_request_appears_reaches_the_server(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `pending` event may reach the browser before the host starts waiting for the
    answer. Here the answer is given inside that window, every time (the request is
    answered, through the service, before `create` returns to the host): the server still
    gets it, not a cancel at expiry."""
    csrf = host.web.login(*USER)
    conv = create(host, csrf, "quick", selection="defaults")
    connect(host, csrf, conv)
    service = host.service
    interactions = service.interactions
    create_row = interactions.create

    def create_and_answer(**kwargs: Any) -> Any:
        row = create_row(**kwargs)
        if row.status == "pending":  # runs in a worker thread: answer on the loop, now
            anyio.from_thread.run(
                functools.partial(interactions.answer, row.id, action="decline", channel="browser")
            )
        return row

    monkeypatch.setattr(interactions, "create", create_and_answer)
    assert host.client.portal is not None
    host.client.portal.call(_call_wait, service, conv)
    fragment = host.client.get(f"/host/conversations/{conv}/activity", headers=HX)
    assert [t["action"] for t in result_texts(fragment)] == ["decline"]
    [request] = activity_of(fragment).requests
    assert request.state == "Answer sent to Test_Stdio: declined in the browser"

"""The inbox: pending interactions of the person's projects as accessible
forms, answered in the browser (which resumes the run), with inline errors, conflicts and
a per-run timeline; and the SSE feed's events, driven in-process against the real hub.
Page tests run as a plain page load and as an htmx request."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest
from sse_starlette import ServerSentEvent

from tests import helpers
from tests.conftest import EXAMPLES, TORTURE
from tests.web.conftest import (
    ADMIN,
    INTERACTIVE,
    USER,
    Web,
    account_id,
    next_step,
    rendered,
    services,
    start_asking,
)
from webui.auth.ui import COOKIE_NAME, UiUser
from webui.events import EventHub
from webui.runs.request import RunRequest
from webui.store import interactions as interaction_store
from webui.web import conversations
from webui.web.conversations import Feed, conversation_stream
from webui.web.state import app_state
from webui.workflows.project import load_project

HX = {"HX-Request": "true"}
TRIP = EXAMPLES / "interactive"
WAIT = 30


@pytest.fixture(params=[False, True], ids=["page", "htmx"])
def hx(request: pytest.FixtureRequest) -> dict[str, str]:
    return HX if request.param else {}


def answer(web: Web, csrf: str, interaction_id: str, data: dict[str, Any], *, htmx: bool = True) -> Any:
    headers = {"X-CSRF-Token": csrf, **(HX if htmx else {})}
    return web.client.post(
        f"/interactions/{interaction_id}/answer", data=data, headers=headers, follow_redirects=False
    )


def card(html: str, interaction_id: str) -> str:
    match = re.search(rf'<article id="interaction-{interaction_id}".*?</article>', html, re.S)
    assert match, html
    return match.group(0)


def status_of(web: Web, interaction_id: str) -> str:
    return services(web).interactions.get(interaction_id).status


def listed(response: Any) -> list[str]:
    """The interactions the inbox was given, in order."""
    template, _, context = rendered(response)
    assert template == "conversations/list.html"
    return [c.interaction.id for c in context["cards"]]


def answered_card(response: Any) -> Any:
    """The card an htmx answer was given back."""
    template, block, context = rendered(response)
    assert (template, block) == ("conversations/list.html", "card")
    return context["card"]


# --------------------------------------------------------------------------- access


@pytest.mark.shares_app
def test_anonymous_visitors_are_sent_to_the_login_page(web: Web) -> None:
    r = web.client.get("/inbox", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Finbox"
    r = web.client.get("/inbox", headers=HX, follow_redirects=False)
    assert r.status_code == 401 and r.headers["hx-redirect"].startswith("/login?next=")
    r = web.client.get("/inbox/events", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")


def test_an_empty_view_says_nothing_is_waiting_and_opens_the_live_feed(web: Web, hx: dict[str, str]) -> None:
    web.login(*USER)
    r = web.client.get("/inbox", headers=hx)
    assert r.status_code == 200
    assert rendered(r)[:2] == ("conversations/list.html", "feed" if hx else None)
    assert listed(r) == []
    assert "Nothing is waiting for an answer." in r.text
    assert ("<html" in r.text) is not bool(hx)
    # the feed fragment is what htmx swaps; the SSE connection lives on the page around it
    assert ('sse-connect="/inbox/events"' in r.text) is not bool(hx)
    assert 'id="interaction-list" sse-swap="interaction"' in r.text
    assert r.headers["vary"] == "HX-Request, HX-History-Restore-Request"
    restored = web.client.get("/inbox", headers={**HX, "HX-History-Restore-Request": "true"})
    assert rendered(restored)[:2] == ("conversations/list.html", None)
    assert "<html" in restored.text


def test_each_pending_question_renders_as_an_accessible_form_from_its_schema(
    web: Web, hx: dict[str, str]
) -> None:
    run_id, iid = start_asking(web, TRIP, "plan_trip", {"traveller": "Bo"})
    web.login(*USER)
    r = web.client.get("/inbox", headers=hx)
    assert r.status_code == 200
    [shown] = rendered(r).context["cards"]
    assert shown.interaction.id == iid and shown.run.id == run_id and shown.pending
    assert [f.name for f in shown.fields] == ["destination", "nights", "start"]
    html = card(r.text, iid)
    assert f'sse-swap="resolved-{iid}"' in html and f'href="/runs/{run_id}"' in html
    assert "Where to?" in html and "Tell us about the trip." in html and "trip-planner" in html
    p = f"{iid}-"
    # labels tied to controls, required markers, defaults filled in, typed inputs
    assert f'<label for="{p}destination">destination' in html and "(required)" in html
    assert re.search(rf'<input id="{p}destination" name="{p}destination" type="text"[^>]* required', html)
    assert re.search(rf'<input id="{p}nights" name="{p}nights" type="number" value="2"', html)
    assert re.search(rf'<input id="{p}start" name="{p}start" type="date"', html)
    assert f'aria-describedby="{p}destination-help' in html
    assert f'<input type="hidden" name="csrf_token" value="{web.csrf()}">' in html
    for value, label in (("accept", "Accept"), ("decline", "Decline"), ("cancel", "Cancel run")):
        assert re.search(rf'<button type="submit" name="action" value="{value}"[^>]*>{label}</button>', html)


def test_a_person_sees_only_interactions_of_projects_she_may_use(web: Web) -> None:
    _, trip = start_asking(web, TRIP, "plan_trip", {"traveller": "Bo"})
    torture_run, secret = start_asking(web, TORTURE, "ask_once")
    csrf = web.login(*USER)
    r = web.client.get("/inbox")
    assert listed(r) == [trip]
    page = r.text
    assert f"interaction-{trip}" in page and secret not in page
    assert answer(web, csrf, secret, {"action": "decline"}).status_code == 404
    assert web.client.get(f"/runs/{torture_run}/timeline").status_code == 404
    assert status_of(web, secret) == "pending"
    web.logout()
    web.login(*ADMIN)
    r = web.client.get("/inbox")
    assert listed(r) == [secret, trip]  # newest first
    page = r.text
    assert page.index(f"interaction-{secret}") < page.index(f"interaction-{trip}")  # drawn in that order


# --------------------------------------------------------------------------- answering


def test_answering_in_the_browser_resumes_the_run_through_every_round_to_its_result(web: Web) -> None:
    run_id, first = start_asking(web, TRIP, "plan_trip", {"traveller": "Bo"})
    csrf = web.login(*USER)
    r = answer(web, csrf, first, {"action": "accept", f"{first}-destination": "Rome", f"{first}-nights": "3"})
    assert r.status_code == 200, r.text
    answered = answered_card(r)
    assert answered.interaction.id == first and answered.interaction.status == "answered"
    assert answered.interaction.answer == {"destination": "Rome", "nights": 3}
    assert answered.state_line == "Answered in the browser by user:ann"
    assert "<html" not in r.text and 'data-status="answered"' in r.text
    assert "Answered in the browser by user:ann" in r.text

    update = next_step(web, run_id)
    assert update.kind == "waiting" and update.interaction is not None
    second = update.interaction.id
    html = card(web.client.get("/inbox").text, second)
    p = f"{second}-"
    # single-select with labels, multi-select as checkboxes in a fieldset
    assert f'<select id="{p}room" name="{p}room" required' in html
    assert '<option value="double">Double room</option>' in html
    assert "<legend>extras" in html
    assert re.search(rf'<input type="checkbox" id="{p}extras-2" name="{p}extras" value="parking">', html)
    # the run's timeline shows the earlier round and who answered it
    assert "Where to?" in html and "Answered in the browser by user:ann" in html and "Rome" in html

    form = {"action": "accept", f"{p}room": "double", f"{p}extras": ["breakfast", "parking"]}
    assert answer(web, csrf, second, form).status_code == 200
    update = next_step(web, run_id)
    assert update.kind == "waiting" and update.interaction is not None
    approval = update.interaction.id
    html = card(web.client.get("/inbox").text, approval)
    assert "Total 240 EUR." in html and "<input id=" not in html.split("<details")[0]
    assert re.search(r'value="accept"[^>]*>Approve</button>', html)

    assert answer(web, csrf, approval, {"action": "accept"}).status_code == 200
    final = next_step(web, run_id)
    assert final.status == "success" and final.output["booked"] is True
    assert final.output["room"] == "double" and final.output["extras"] == ["breakfast", "parking"]

    timeline = web.client.get(f"/runs/{run_id}/timeline")
    assert timeline.status_code == 200 and "<html" not in timeline.text
    template, _, context = rendered(timeline)
    assert template == "conversations/_timeline.html" and context["timeline"].run.status == "success"
    steps = context["timeline"].steps
    assert [s.interaction.id for s in steps] == [first, second, approval]
    assert [s.verdict for s in steps] == ["Answered in the browser by user:ann"] * 3
    assert steps[1].answer_items == [("room", "Double room"), ("extras", "breakfast, parking")]  # labels
    text = timeline.text
    for expected in ("Where to?", "Which room?", "Approval asked", "Double room", "breakfast, parking"):
        assert expected in text
    assert text.count("Answered in the browser by user:ann") == 3
    assert 'data-run-status="success"' in text and "&#34;booked&#34;: true" in text
    after = web.client.get("/inbox")
    assert listed(after) == [] and "Nothing is waiting for an answer." in after.text


@pytest.mark.shares_app
def test_declining_an_approval_lets_the_run_finish_without_it(web: Web) -> None:
    run_id, iid = start_asking(web, TORTURE, "approve_only", owner=None)
    csrf = web.login(*ADMIN)
    html = card(web.client.get("/inbox").text, iid)
    assert "Approve: delete everything" in html and "This cannot be undone." in html
    assert r'value="decline" class="secondary" formnovalidate>Decline' in html
    r = answer(web, csrf, iid, {"action": "decline"})
    assert r.status_code == 200 and "Declined in the browser by user:root" in r.text
    assert answered_card(r).interaction.action == "decline"
    final = next_step(web, run_id)
    assert (final.status, final.output) == ("success", {"approved": False})


@pytest.mark.shares_app
def test_the_cancel_button_cancels_the_run(web: Web) -> None:
    run_id, iid = start_asking(web, TORTURE, "ask_once", owner=None)
    csrf = web.login(*ADMIN)
    r = answer(web, csrf, iid, {"action": "cancel"})
    assert r.status_code == 200 and "Cancelled in the browser by user:root" in r.text
    assert answered_card(r).state_line == "Cancelled in the browser by user:root"
    assert next_step(web, run_id).status == "cancelled"
    assert 'data-run-status="cancelled"' in web.client.get(f"/runs/{run_id}/timeline").text


def test_invalid_answers_are_422_with_inline_errors_and_the_question_stays_open(web: Web) -> None:
    _, iid = start_asking(web, TRIP, "plan_trip", {"traveller": "Bo"})
    csrf = web.login(*USER)
    p = f"{iid}-"
    r = answer(web, csrf, iid, {"action": "accept", f"{p}destination": "", f"{p}nights": "many"})
    assert r.status_code == 422 and "<html" not in r.text
    refused = answered_card(r)
    assert refused.pending and refused.problem == "Some answers need attention."
    assert refused.errors == {"destination": "required", "nights": "not a valid number"}
    assert refused.values["nights"] == "many"  # what was typed is kept, to be fixed
    html = card(r.text, iid)
    assert 'data-status="pending"' in html and "Some answers need attention." in html
    assert f'<small id="{p}destination-error" class="error" role="alert">required</small>' in html
    assert f'<small id="{p}nights-error" class="error" role="alert">not a valid number</small>' in html
    assert f'aria-describedby="{p}destination-help {p}destination-error"' in html
    assert 'value="many"' in html  # what was typed is kept, to be fixed
    assert status_of(web, iid) == "pending"

    # the service's own checks (here: a date that is not a date) land beside the field too
    r = answer(
        web,
        csrf,
        iid,
        {"action": "accept", f"{p}destination": "Oslo", f"{p}nights": "2", f"{p}start": "2026-13-45"},
    )
    assert r.status_code == 422
    assert list(answered_card(r).errors) == ["start"] and "date" in answered_card(r).errors["start"]
    assert re.search(rf'<small id="{p}start-error" class="error" role="alert">[^<]*date', r.text)
    assert status_of(web, iid) == "pending"

    r = answer(web, csrf, iid, {"action": "maybe"})
    assert r.status_code == 422 and "Choose one of the buttons" in r.text
    assert answered_card(r).problem == "Choose one of the buttons: accept, decline or cancel."
    assert status_of(web, iid) == "pending"


@pytest.mark.shares_app
def test_the_identical_answer_again_is_accepted_and_a_different_one_is_a_409(web: Web) -> None:
    run_id, iid = start_asking(web, TORTURE, "ask_once", owner=None)
    csrf = web.login(*ADMIN)
    form = {"action": "accept", f"{iid}-name": "Bo"}
    assert answer(web, csrf, iid, form).status_code == 200
    assert next_step(web, run_id).output == {"name": "Bo"}
    again = answer(web, csrf, iid, form)
    assert again.status_code == 200 and "Answered in the browser by user:root" in again.text
    for different in ({"action": "accept", f"{iid}-name": "Cy"}, {"action": "decline"}, {"action": "accept"}):
        r = answer(web, csrf, iid, different)
        assert r.status_code == 409, r.text
        conflict = answered_card(r)
        assert conflict.interaction.status == "answered" and "already" in (conflict.problem or "")
        assert conflict.interaction.answer == {"name": "Bo"}  # the first answer stands
        assert "already" in r.text and 'data-status="answered"' in r.text


@pytest.mark.shares_app
def test_a_question_whose_run_ended_is_410_and_says_the_run_finished(web: Web) -> None:
    run_id, iid = start_asking(web, TORTURE, "ask_once", owner=None)
    assert web.client.portal is not None
    web.client.portal.call(services(web).runs.cancel, run_id)
    csrf = web.login(*ADMIN)
    view = web.client.get("/inbox")
    assert iid not in listed(view) and f"interaction-{iid}" not in view.text
    r = answer(web, csrf, iid, {"action": "accept", f"{iid}-name": "Bo"})
    assert r.status_code == 410
    closed = answered_card(r)
    assert closed.interaction.status == "closed"
    assert closed.state_line == "Closed without an answer: the run finished (cancelled)"
    assert "Closed without an answer: the run finished (cancelled)" in r.text


@pytest.mark.shares_app
def test_without_htmx_an_answer_redirects_back_and_an_invalid_one_renders_the_page(web: Web) -> None:
    run_id, iid = start_asking(web, TORTURE, "ask_once", owner=None)
    csrf = web.login(*ADMIN)
    r = answer(web, csrf, iid, {"action": "accept", f"{iid}-name": ""}, htmx=False)
    assert r.status_code == 422 and rendered(r)[:2] == ("conversations/list.html", None)
    first = rendered(r).context["cards"][0]  # the refused card leads, with its errors
    assert first.interaction.id == iid and list(first.errors) == ["name"]
    assert "<html" in r.text and f"{iid}-name-error" in r.text
    r = web.client.post(
        f"/interactions/{iid}/answer",
        data={"action": "accept", f"{iid}-name": "Bo", "csrf_token": csrf},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/inbox"
    assert next_step(web, run_id).output == {"name": "Bo"}


@pytest.mark.shares_app
def test_an_answer_without_the_csrf_token_is_refused(web: Web) -> None:
    _, iid = start_asking(web, TORTURE, "ask_once", owner=None)
    web.login(*ADMIN)
    r = web.client.post(f"/interactions/{iid}/answer", data={"action": "decline"}, headers=HX)
    assert r.status_code == 403
    assert status_of(web, iid) == "pending"


@pytest.mark.shares_app
def test_unknown_interactions_and_runs_are_404(web: Web) -> None:
    csrf = web.login(*ADMIN)
    assert answer(web, csrf, "int_0000000000000000", {"action": "decline"}).status_code == 404
    assert web.client.get("/runs/20260101-000000000000/timeline").status_code == 404


# --------------------------------------------------------------------------- the live feed


def test_the_feed_sends_a_snapshot_then_permitted_new_cards_and_resolutions_and_unsubscribes(
    web: Web,
) -> None:
    """In-process: the stream generator against the app's real hub and run service."""
    web.login(*USER)
    app = web.client.app  # type: ignore[attr-defined]
    user = app_state(app).ui_auth.resolve(web.client.cookies.get(COOKIE_NAME))
    assert isinstance(user, UiUser) and user.name == "ann"
    svc = services(web)
    feed = Feed(svc.engine, app_state(app).templates.env)
    trip_project, torture_project = load_project(TRIP), load_project(TORTURE)

    async def begin(project: Any, entrypoint: str, params: dict[str, Any]) -> str:
        ep = project.entrypoint(entrypoint)
        request = RunRequest(
            project=project, entrypoint=ep, params=params, stored_params=params, account_id=user.account_id
        )
        return (await svc.runs.start(request)).run_id

    async def scenario() -> list[ServerSentEvent]:
        seen: list[ServerSentEvent] = []
        stream = conversation_stream(feed, svc.hub, user, lambda: user)
        try:
            with anyio.fail_after(WAIT):
                snapshot = await anext(stream)
                assert snapshot.event == "snapshot" and "Nothing is waiting" in str(snapshot.data)
                assert svc.hub.subscribers_of("runs") == 1
                hidden = await begin(torture_project, "ask_once", {})
                await helpers.next_update(svc, hidden, ("waiting",))
                run_id = await begin(trip_project, "plan_trip", {"traveller": "Bo"})
                pushed = await anext(stream)  # ann may not see the torture question
                seen.append(pushed)
                assert pushed.event == "interaction" and 'data-status="pending"' in str(pushed.data)
                iid = re.search(r'data-interaction="([^"]+)"', str(pushed.data))
                assert iid is not None
                await svc.interactions.answer(
                    iid.group(1),
                    action="accept",
                    content={"destination": "Rome", "nights": 1},
                    actor="user:mcp-client",
                    channel="mcp-elicitation",
                )
                while not any(e.event == "interaction" for e in seen[1:]):
                    seen.append(await anext(stream))
                assert f"resolved-{iid.group(1)}" in [e.event for e in seen]
                assert f"run-{run_id}" in [e.event for e in seen]
                second = re.search(r'data-interaction="([^"]+)"', str(seen[-1].data))
                assert second is not None
                # the run ends while its question is open: the card says so
                await svc.runs.cancel(run_id)
                while seen[-1].event != f"resolved-{second.group(1)}":
                    seen.append(await anext(stream))
                await svc.runs.cancel(hidden)
        finally:
            await stream.aclose()
        assert svc.hub.subscribers_of("runs") == 0
        return seen

    assert web.client.portal is not None
    events = web.client.portal.call(scenario)
    resolved = next(e for e in events if e.event and e.event.startswith("resolved-"))
    assert 'data-status="answered"' in str(resolved.data)
    assert "Answered in the MCP client (form) by user:mcp-client" in str(resolved.data)
    second = [e for e in events if e.event == "interaction"][-1]
    assert "Which room?" in str(second.data) and '<p id="no-pending" hidden hx-swap-oob="true">' in str(
        second.data
    )
    closed = events[-1]
    assert 'data-status="closed"' in str(closed.data)
    assert "Closed without an answer: the run finished (cancelled)" in str(closed.data)


def ann(web: Web, projects: frozenset[str]) -> UiUser:
    return UiUser(account_id(web, USER[0]), "ann", False, "session", "csrf", projects)


def test_the_feed_ends_when_the_login_ends_and_follows_changed_grants(web: Web) -> None:
    _, iid = start_asking(web, TRIP, "plan_trip", {"traveller": "Bo"})
    svc = services(web)
    feed = Feed(svc.engine, app_state(web.client.app).templates.env)
    logins: list[UiUser | None] = [ann(web, frozenset({INTERACTIVE})), None]

    async def scenario() -> list[ServerSentEvent]:
        stream = conversation_stream(
            feed, svc.hub, ann(web, frozenset()), lambda: logins.pop(0), recheck_seconds=0.01
        )
        with anyio.fail_after(WAIT):
            events = [event async for event in stream]
        assert svc.hub.subscribers_of("runs") == 0
        return events

    assert web.client.portal is not None
    first, granted = web.client.portal.call(scenario)
    assert first.event == granted.event == "snapshot"
    assert iid not in str(first.data) and f'id="interaction-{iid}"' in str(granted.data)


@pytest.mark.shares_app
def test_a_feed_that_falls_behind_ends_so_the_browser_reconnects_for_a_fresh_snapshot(web: Web) -> None:
    svc = services(web)
    feed = Feed(svc.engine, app_state(web.client.app).templates.env)
    hub = EventHub(queue_size=4)

    async def scenario() -> list[ServerSentEvent]:
        stream = conversation_stream(feed, hub, ann(web, frozenset({INTERACTIVE})), lambda: None)
        with anyio.fail_after(WAIT):
            events = [await anext(stream)]
            for n in range(10):  # nobody reads while these arrive
                hub.publish("runs", "status", runId=f"run-{n}", projectId=INTERACTIVE, status="running")
            events += [event async for event in stream]
        assert hub.subscribers_of("runs") == 0
        return events

    assert web.client.portal is not None
    assert [e.event for e in web.client.portal.call(scenario)] == ["snapshot"]


# --------------------------------------------------------------------------- one read for many tabs


def test_a_new_question_is_read_and_rendered_once_for_many_open_streams_and_seen_only_by_its_viewers(
    web: Web, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five tabs of ann, two of the administrator and one of bo (who may not use the project)
    are open when ann's run asks: one read of the question, one render per kind of viewer
    (hers; an administrator's, with the override), each tab's card with its own CSRF token,
    and none for bo."""
    app = web.client.app  # type: ignore[attr-defined]
    svc = services(web)
    ann_id, root_id = account_id(web, USER[0]), account_id(web, ADMIN[0])
    tabs = [
        UiUser(ann_id, "ann", False, f"s{i}", f"ann-token-{i}", frozenset({INTERACTIVE})) for i in range(5)
    ]
    admins = [UiUser(root_id, "root", True, f"r{i}", f"root-token-{i}", None) for i in range(2)]
    bo = UiUser(ann_id + 1000, "bo", False, "b", "bo-token", frozenset({INTERACTIVE}))
    feed = Feed(svc.engine, app_state(app).templates.env)  # one app: one shared `SharedWork`
    reads: list[str] = []
    renders: list[str] = []
    read, render = interaction_store.get_with_run, conversations.render_block

    def counted_read(engine: Any, *, interaction_id: str) -> Any:
        reads.append(interaction_id)
        return read(engine, interaction_id=interaction_id)

    def counted_render(env: Any, name: str, block: str, *args: Any, **kw: Any) -> str:
        renders.append(block)
        return render(env, name, block, *args, **kw)

    monkeypatch.setattr(interaction_store, "get_with_run", counted_read)
    monkeypatch.setattr(conversations, "render_block", counted_render)
    finished = anyio.Event()

    def bo_login() -> UiUser | None:
        return None if finished.is_set() else bo

    async def scenario() -> tuple[dict[str, str], list[str]]:
        streams = {
            u.csrf_token: conversation_stream(feed, svc.hub, u, lambda u=u: u, recheck_seconds=0.05)
            for u in (*tabs, *admins)
        }
        theirs = conversation_stream(feed, svc.hub, bo, bo_login, recheck_seconds=0.05)
        cards: dict[str, str] = {}
        run_id: str | None = None
        try:
            with anyio.fail_after(WAIT):
                for stream in [*streams.values(), theirs]:
                    assert (await anext(stream)).event == "snapshot"
                renders.clear()

                async def first_card(token: str) -> None:
                    event = await anext(streams[token])
                    assert event.event == "interaction"
                    cards[token] = str(event.data)

                async with anyio.create_task_group() as tg:
                    for token in streams:
                        tg.start_soon(first_card, token)
                    run_id = (
                        await svc.runs.start(
                            RunRequest(
                                project=load_project(TRIP),
                                entrypoint=load_project(TRIP).entrypoint("plan_trip"),  # type: ignore[arg-type]
                                params={"traveller": "Bo"},
                                stored_params={"traveller": "Bo"},
                                actor="user:ann",
                                account_id=ann_id,
                            )
                        )
                    ).run_id
                finished.set()
                bo_events = [e.event async for e in theirs]
                assert run_id is not None
                await svc.runs.cancel(run_id)
        finally:
            for stream in [*streams.values(), theirs]:
                await stream.aclose()
        return cards, [str(e) for e in bo_events]

    assert web.client.portal is not None
    cards, bo_events = web.client.portal.call(scenario)
    assert bo_events == []  # bo's stream ended (logged out) having sent no card
    iid = re.search(r'data-interaction="([^"]+)"', next(iter(cards.values())))
    assert iid is not None
    assert reads == [iid.group(1)]  # one read of the question for eight open streams
    assert renders == ["card", "card"]  # one render for ann's tabs, one for the administrators'
    for user in (*tabs, *admins):
        html = cards[user.csrf_token]
        assert f'name="csrf_token" value="{user.csrf_token}"' in html
        others = [u.csrf_token for u in (*tabs, *admins) if u is not user]
        assert not any(f'value="{t}"' in html for t in others) and "csrf-" not in html
        assert ("Answer as administrator" in html) is user.is_admin

"""The inbox's routes and live stream (`/inbox`, `/inbox/events`): every pending
interaction the person may answer, live. The cards and run timelines they show are built in
webui.web.conversation_views. The page's first URLs, `/conversations` and
`/conversations/events`, answer a 308 to the new ones (query string kept), so bookmarks and
the links of results written before the rename still arrive.

The page lists the person's own pending questions: those of runs she started (with her
API keys, or through Try it) in projects she may still use, from any source, and the form
and URL requests external MCP servers made in her host conversations. Administrators see
every question; one that belongs to an account carries an "Answer as administrator"
control, the explicit, audited override (webui.interactions.owner). Each card has a form
generated from the stored schema. One SSE stream per tab keeps
the page current: a `snapshot` on connect (so nothing published before the stream opened
is missed, and a reconnect after falling behind re-renders the current state), then one
named event per change. Every event carries an HTML fragment rendered from the same named
blocks as the page:

- `snapshot`            the whole feed (block `feed`), swapped into #conversation-feed;
- `interaction`         a new pending card (block `card`), prepended to #interaction-list;
- `resolved-<id>`       the card of interaction <id>, now answered or closed; the pending
                        card listens for it and replaces itself (outerHTML);
- `run-<runId>`         the run's timeline (conversations/_timeline.html), after any
                        status change of a run whose card this stream has shown.

What an event needs is read and rendered once for every open stream of the process
(`Feed.shared`, webui.web.streams): one read of the question, one render of its card per
kind of viewer (its owner; an administrator looking at someone else's, with the override),
whose CSRF token each stream puts in for its own session. Who may see it is still decided
per stream. An account holds at most `max_sse_streams_per_account` streams; the next one
is refused with 429 (`too_many_streams`) and a slot is given back when its stream ends.

Answers go through `InteractionService.answer(channel="browser")`, which resumes the run
(or hands the answer to the waiting host connection, which sends it to the server); the
service decides validity, this module only translates and presents. A host request's
state after an answer says the answer was sent to the server, never that anything is
done: what the server does with it is the tool call's result, on the host conversation's
page."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import quote_from_bytes

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from jinja2 import Environment
from jinja2_fragments import render_block
from sqlalchemy.engine import Engine
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from webui.auth.ui import COOKIE_NAME, UiUser
from webui.blocking import run_db
from webui.errors import InteractionClosed, InteractionConflict, InvalidAnswer, NotFound, SteamharnessError
from webui.events import Event, EventHub
from webui.host.service import HostService
from webui.interactions.owner import Party
from webui.interactions.service import ACTIONS
from webui.services import Services
from webui.settings import setting_default
from webui.store import runs as run_store
from webui.store.interactions import InteractionWithRun
from webui.web import forms
from webui.web.conversation_views import (
    Card,
    Item,
    RunHider,
    ServerNames,
    Timeline,
    build_cards,
    field_problems,
    load_item,
    may_see,
    no_server_names,
    pending_cards,
    run_timeline,
    submitted_values,
    visible_item,
)
from webui.web.deps import HostDep, ServicesDep, StateDep, UserDep
from webui.web.policies import PUBLIC
from webui.web.runs_pages import run_hider, shown_run
from webui.web.state import Kept
from webui.web.streams import SharedWork, StreamSlots
from webui.web.templating import is_htmx, page

router = APIRouter(tags=["pages"])

INBOX = "/inbox"
INBOX_EVENTS = "/inbox/events"
# The inbox's former URLs and where each now lives.
MOVED = {"/conversations": INBOX, "/conversations/events": INBOX_EVENTS}
# What a query string keeps as it is in a redirect's Location; every other byte (controls,
# spaces, quotes, non-ASCII) is percent-encoded, so nothing in it can end the header.
QUERY_SAFE = "&=+%;:,/?@!$'()*[]"

PAGE = "conversations/list.html"
TIMELINE = "conversations/_timeline.html"
CHANNEL = "browser"
PING_SECONDS = 15
SEND_TIMEOUT_SECONDS = 30.0
OVERRIDE_VALUES = frozenset({"true", "on", "1"})


def server_names_of(host: HostService) -> ServerNames:
    """Display names of the configured MCP servers ({} while the configuration is broken)."""

    def names() -> Mapping[str, str]:
        try:
            return {sid: server.name for sid, server in host.config().servers.items()}
        except SteamharnessError:
            return {}

    return names


def _server_names(host: HostDep) -> ServerNames:
    return server_names_of(host)


ServerNamesDep = Annotated[ServerNames, Depends(_server_names)]


# --------------------------------------------------------------------------- pages


@router.get(INBOX, summary="Your inbox: pending interactions you may answer (live)")
def inbox(request: Request, user: UserDep, services: ServicesDep, names: ServerNamesDep) -> Response:
    # htmx gets the feed alone, except when restoring history, which needs the whole page;
    # caches keep the answers apart.
    restoring = request.headers.get("hx-history-restore-request") == "true"
    context = {"cards": pending_cards(services.engine, user, names, run_hider(services, user))}
    response = page(request, PAGE, context, block=None if restoring else "feed")
    response.headers["Vary"] = "HX-Request, HX-History-Restore-Request"
    return response


@router.get("/runs/{run_id}/timeline", summary="A run's questions, answers and result (HTML fragment)")
def timeline_fragment(run_id: str, request: Request, user: UserDep, services: ServicesDep) -> Response:
    run = run_store.get_run(services.engine, run_id=run_id)
    # The questions and answers are the run owner's: others who may use the project get 404.
    if run is None or not user.may_use(run.project_id) or not Party.of_user(user).may_see(run.account_id):
        raise NotFound(f"run {run_id!r} not found")
    timeline = run_timeline(services.engine, run, run_hider(services, user))
    return page(request, TIMELINE, {"timeline": timeline})


def _card_response(
    request: Request, services: Services, names: ServerNames, user: UiUser, card: Card, status: int
) -> Response:
    if is_htmx(request):
        return page(request, PAGE, {"card": card, "refresh": True}, block="card", status_code=status)
    # Without htmx, the whole page, with this card (and its errors) in place.
    hide = run_hider(services, user)
    cards = [
        c
        for c in pending_cards(services.engine, user, names, hide)
        if c.interaction.id != card.interaction.id
    ]
    return page(request, PAGE, {"cards": [card, *cards]}, status_code=status)


def _settled_response(
    request: Request, services: Services, names: ServerNames, user: UiUser, card: Card
) -> Response:
    """An answer to a question that is no longer open: say so beside its final state."""
    if card.interaction.status == "answered":
        card.problem = "This question was already answered; your answer was not used."
        return _card_response(request, services, names, user, card, InteractionConflict.status)
    card.problem = "This question can no longer be answered."
    return _card_response(request, services, names, user, card, InteractionClosed.status)


def _fresh_card(
    engine: Engine, user: UiUser, interaction_id: str, names: ServerNames, hide: RunHider
) -> Card:
    return build_cards(engine, [visible_item(engine, user, interaction_id)], names, user, hide)[0]


@router.post("/interactions/{interaction_id}/answer", summary="Answer an interaction from the browser")
async def answer(
    interaction_id: str, request: Request, user: UserDep, services: ServicesDep, names: ServerNamesDep
) -> Response:
    engine = services.engine
    item = await run_db(visible_item, engine, user, interaction_id)
    card = (await run_db(build_cards, engine, [item], names, user, run_hider(services, user)))[0]
    form = await request.form()
    action = str(form.get("action") or "")
    if action not in ACTIONS:
        card.problem = "Choose one of the buttons: accept, decline or cancel."
        return await run_db(_card_response, request, services, names, user, card, 422)
    override = str(form.get("override") or "") in OVERRIDE_VALUES
    if not card.owned and not override:
        card.problem = (
            f"This question belongs to {card.owner_label}. Tick “Answer as administrator” "
            "to answer it anyway; the override is recorded in the audit log."
        )
        return await run_db(_card_response, request, services, names, user, card, 422)
    content: dict[str, Any] | None = None
    if action == "accept":
        content, errors = forms.parse(item.interaction.requested_schema, form, prefix=card.prefix)
        if errors:
            if not card.pending:
                return await run_db(_settled_response, request, services, names, user, card)
            card.values, card.errors = submitted_values(card, form, content, errors), errors
            card.problem = "Some answers need attention."
            return await run_db(_card_response, request, services, names, user, card, 422)
    try:
        await services.interactions.answer(
            interaction_id,
            action=action,
            content=content,
            channel=CHANNEL,
            by=Party.of_user(user),
            override=override and not card.owned,
        )
    except InvalidAnswer as exc:
        if not card.pending:
            return await run_db(_settled_response, request, services, names, user, card)
        card.values = content or {}
        card.errors = await field_problems(
            item.interaction.requested_schema, content or {}, account=user.account_id
        )
        card.problem = "Some answers need attention." if card.errors else exc.message
        return await run_db(_card_response, request, services, names, user, card, exc.status)
    except (InteractionConflict, InteractionClosed) as exc:
        fresh = await run_db(_fresh_card, engine, user, interaction_id, names, run_hider(services, user))
        fresh.problem = exc.message
        return await run_db(_card_response, request, services, names, user, fresh, exc.status)
    if not is_htmx(request):
        return RedirectResponse(INBOX, status_code=303)
    fresh = await run_db(_fresh_card, engine, user, interaction_id, names, run_hider(services, user))
    # `refresh`: the run moves on while this response travels, and its SSE updates may
    # reach the page before this card does; the card re-reads its timeline once in place.
    return page(request, PAGE, {"card": fresh, "refresh": True}, block="card")


def moved_to(target: str) -> Callable[[Request], Response]:
    """The route of one of the inbox's former URLs: 308 (the method kept) to `target`. The
    Location is a fixed path of this server; only the query string is carried over,
    percent-encoded, so it can neither lead off the server nor split the header."""

    def redirect(request: Request) -> Response:
        query = quote_from_bytes(request.scope.get("query_string", b""), safe=QUERY_SAFE)
        return RedirectResponse(f"{target}?{query}" if query else target, status_code=308)

    return redirect


for _old, _new in MOVED.items():
    router.add_api_route(
        _old, moved_to(_new), methods=["GET"], include_in_schema=False, dependencies=[PUBLIC]
    )


# --------------------------------------------------------------------------- live updates


@dataclass(frozen=True)
class Viewer:
    """Who a shared card is rendered for: only whether it is theirs. The form's CSRF token
    is a per-render random marker each stream replaces with its own session's token."""

    csrf_token: str


@dataclass(frozen=True)
class CardRender:
    html: str
    marker: str

    def for_user(self, user: UiUser) -> str:
        return self.html.replace(self.marker, user.csrf_token)


@dataclass(frozen=True)
class Loaded:
    """An interaction as every stream's new or resolved card is built from it."""

    item: Item
    timeline: Timeline | None
    server_name: str | None


@dataclass
class Feed:
    """Renders the stream's fragments from the page's own blocks. `shared`: the work the
    process's streams do once per event (one per app; a fresh one shares nothing)."""

    engine: Engine
    env: Environment
    server_names: ServerNames = no_server_names
    shared: SharedWork = field(default_factory=SharedWork)
    services: Any = None  # for redacting runs' configuration secrets (`hide_for`)

    def render(self, block: str, **context: Any) -> str:
        return render_block(self.env, PAGE, block, **context)

    def render_timeline(self, timeline: Timeline) -> str:
        return self.env.get_template(TIMELINE).render(timeline=timeline)

    def load(self, interaction_id: str) -> Loaded | None:
        """One read for every stream: the interaction, its run's timeline, its server's name."""
        item = load_item(self.engine, interaction_id)
        if item is None:
            return None
        card = build_cards(self.engine, [item], self.server_names)[0]
        return Loaded(item, card.timeline, card.server_name)

    def render_card(self, loaded: Loaded, *, owned: bool, pushed: bool) -> CardRender:
        """The card as everyone it belongs to (`owned`), or every administrator looking at
        someone else's, sees it."""
        marker = f"csrf-{secrets.token_urlsafe(24)}"
        timeline = loaded.timeline
        if timeline is not None:
            # The card's owner is the run's account: what it owns, it sees as it is.
            timeline = self.hidden(timeline, own=owned)
        card = Card(loaded.item, timeline, server_name=loaded.server_name, owned=owned)
        html = self.render("card", card=card, user=Viewer(marker), pushed=pushed)
        return CardRender(html, marker)

    def load_timeline(self, run_id: str) -> Timeline | None:
        """One read for every stream: the run and its questions, as they are (`hidden`
        makes each viewer's copy)."""
        run = run_store.get_run(self.engine, run_id=run_id)
        return None if run is None else run_timeline(self.engine, run)

    def hidden(self, timeline: Timeline, *, own: bool) -> Timeline:
        """`timeline` as its run's own account (`own`) or anyone else sees it: the run's
        configuration secrets redacted for others (`runs_pages.shown_run`)."""
        if own or self.services is None:
            return timeline
        run = timeline.run
        return dataclasses.replace(timeline, run=shown_run(run, self.services.configs.run_redaction(run)))


_TICK = object()


async def conversation_stream(
    feed: Feed,
    hub: EventHub,
    user: UiUser,
    recheck: Callable[[], UiUser | None],
    *,
    recheck_seconds: float = setting_default("stream_login_recheck_seconds"),
) -> AsyncGenerator[ServerSentEvent]:
    """The named events of one tab. Subscribes before the snapshot is read, so nothing
    falls between them; the `with` unsubscribes however the stream ends. `recheck` (the
    login as it is now) is asked every `recheck_seconds`: a logged-out session stops
    receiving forms, and changed project grants take effect without a reload."""
    with hub.subscribe("interactions", "runs") as sub:
        shown: set[str] = set()  # pending cards this stream has sent
        runs: set[str] = set()  # runs whose timeline this stream keeps current

        def snapshot() -> ServerSentEvent:
            cards = pending_cards(feed.engine, user, feed.server_names, run_hider(feed.services, user))
            # Only what this snapshot shows is followed from now on: a run of a project the
            # person lost (or no longer sees as an administrator) is dropped with its card.
            shown.clear()
            shown.update(c.interaction.id for c in cards)
            runs.clear()
            runs.update(c.run.id for c in cards if c.run is not None)
            return ServerSentEvent(feed.render("feed", cards=cards, user=user), event="snapshot")

        yield await run_db(snapshot)
        while True:
            got: Any = _TICK
            with anyio.move_on_after(recheck_seconds):
                got = await sub.queue.get()
            if got is None:
                return  # fell behind: the browser reconnects and gets a fresh snapshot
            if got is _TICK:
                fresh = await run_db(recheck)
                if fresh is None:
                    return
                if fresh.projects != user.projects or fresh.is_admin != user.is_admin:
                    user = fresh
                    yield await run_db(snapshot)
                continue
            for out in await _events_for(feed, user, got, shown, runs):
                yield out


async def _events_for(
    feed: Feed, user: UiUser, event: Event, shown: set[str], runs: set[str]
) -> list[ServerSentEvent]:
    """This stream's share of one event. What is read and rendered is shared by every
    stream (`feed.shared`, once per event); who may see it is decided here, per viewer."""
    data = event.data
    if event.topic == "runs":
        run_id = str(data.get("runId"))
        if run_id not in runs:
            return []
        timeline = await feed.shared.get(event, f"run:{run_id}", lambda: feed.load_timeline(run_id))
        if timeline is None:
            return []
        # Rendered once per kind of viewer: the run's own account sees it as it is, anyone
        # else with its configuration secrets redacted.
        own = Party.of_user(user).owns(timeline.run.account_id)
        html = await feed.shared.get(
            event,
            f"run:{run_id}:{'own' if own else 'other'}",
            lambda: feed.render_timeline(feed.hidden(timeline, own=own)),
        )
        return [ServerSentEvent(html, event=f"run-{run_id}")]
    interaction_id = str(data.get("interactionId"))
    if event.kind == "pending":
        if interaction_id in shown:
            return []
        if data.get("runId") is not None:
            project_id = data.get("projectId")
            if not project_id or not user.may_use(str(project_id)):
                return []  # cheap first cut: no query for questions of other projects
    elif event.kind not in ("answered", "closed") or interaction_id not in shown:
        return []
    loaded = await feed.shared.get(event, f"item:{interaction_id}", lambda: feed.load(interaction_id))
    if event.kind != "pending":
        shown.discard(interaction_id)
    if loaded is None or not may_see(user, loaded.item):  # hers, or any for an admin
        return []
    if event.kind == "pending" and loaded.item.interaction.status != "pending":
        return []  # answered already: its `answered` event finds nothing to update
    owned = Party.of_user(user).owns(loaded.item.owner)
    pushed = event.kind == "pending"
    card = await feed.shared.get(
        event,
        f"card:{interaction_id}:{'owned' if owned else 'other'}",
        lambda: feed.render_card(loaded, owned=owned, pushed=pushed),
    )
    if pushed:
        shown.add(interaction_id)
        if isinstance(loaded.item, InteractionWithRun):
            runs.add(loaded.item.run.id)
        return [ServerSentEvent(card.for_user(user), event="interaction")]
    return [ServerSentEvent(card.for_user(user), event=f"resolved-{interaction_id}")]


@router.get(INBOX_EVENTS, summary="Live updates of the inbox (SSE)")
def inbox_events(
    request: Request, user: UserDep, services: ServicesDep, names: ServerNamesDep, state: StateDep
) -> Response:
    feed = Feed(services.engine, state.templates.env, names, INBOX_WORK.of(state), services)
    cookie = request.cookies.get(COOKIE_NAME)
    ui_auth = state.ui_auth

    def recheck() -> UiUser | None:
        return ui_auth.resolve(cookie)

    release = INBOX_SLOTS.of(state).take(user.account_id)  # over the cap: 429, nothing held
    return HeldStream(
        conversation_stream(
            feed, services.hub, user, recheck, recheck_seconds=state.settings.stream_login_recheck_seconds
        ),
        release,
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
    )


class HeldStream(EventSourceResponse):
    """An event stream that holds one of its account's slots until it ends, however it
    ends (sent in full, the client gone, the server shutting down), and closes its
    generator then, so the hub subscription ends with it."""

    def __init__(
        self, content: AsyncGenerator[ServerSentEvent], release: Callable[[], None], **kw: Any
    ) -> None:
        super().__init__(content, **kw)
        self._content = content
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
            with anyio.CancelScope(shield=True):
                await self._content.aclose()


# The process's per-account cap on inbox streams, and what they compute once per event.
INBOX_SLOTS = Kept(lambda state: StreamSlots(state.settings.max_sse_streams_per_account))
INBOX_WORK = Kept(lambda state: SharedWork())

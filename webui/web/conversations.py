"""The conversation view: every pending interaction the person may answer, live.

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

Answers go through `InteractionService.answer(channel="browser")`, which resumes the run
(or hands the answer to the waiting host connection, which sends it to the server); the
service decides validity, this module only translates and presents. A host request's
state after an answer says the answer was sent to the server, never that anything is
done: what the server does with it is the tool call's result, on the host conversation's
page."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from jinja2 import Environment
from jinja2_fragments import render_block
from jsonschema import Draft202012Validator
from sqlalchemy.engine import Engine
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.datastructures import FormData

from webui.auth.ui import COOKIE_NAME, UiUser
from webui.blocking import run_db
from webui.errors import InteractionClosed, InteractionConflict, InvalidAnswer, NotFound, SteamharnessError
from webui.events import Event, EventHub
from webui.interactions.owner import Party
from webui.interactions.service import ACTIONS
from webui.store import interactions as interaction_store
from webui.store import runs as run_store
from webui.store.interactions import HostInteraction, InteractionWithRun
from webui.store.models import Interaction, Run, as_utc
from webui.web import forms
from webui.web.deps import ServicesDep, UserDep
from webui.web.templating import is_htmx, page

router = APIRouter(tags=["pages"])

PAGE = "conversations/list.html"
TIMELINE = "conversations/_timeline.html"
CHANNEL = "browser"
PING_SECONDS = 15
# How often an open stream re-checks its login: a logged-out session stops receiving
# forms, and changed project grants take effect without a reload.
RECHECK_SECONDS = 30.0
SEND_TIMEOUT_SECONDS = 30.0
OUTPUT_PREVIEW_CHARS = 4000

CHANNEL_LABELS = {
    "browser": "the browser",
    "api": "the API",
    "mcp-elicitation": "the MCP client (form)",
    "mcp-input-required": "the MCP client (input required)",
}
VERDICTS = {"accept": "Answered", "decline": "Declined", "cancel": "Cancelled"}
HOST_VERDICTS = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}
HOST_CLOSE_REASONS = {
    "connection closed": "the connection to {server} closed",
    "conversation closed": "the conversation was closed",
    "shutdown": "the host shut down",
}
HOST_ORIGIN = "external server"
OVERRIDE_VALUES = frozenset({"true", "on", "1"})

Item = InteractionWithRun | HostInteraction
ServerNames = Callable[[], Mapping[str, str]]


def channel_label(channel: str | None) -> str:
    return CHANNEL_LABELS.get(channel or "", channel or "an unknown channel")


# --------------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class Step:
    """One question of a run: what was asked and what became of it."""

    interaction: Interaction
    verdict: str  # "Answered in the browser by user:ann", "Closed: the run finished", "Waiting for an answer"
    answer_items: list[tuple[str, str]]


@dataclass(frozen=True)
class Timeline:
    run: Run
    steps: list[Step]

    @property
    def finished(self) -> bool:
        return self.run.status in run_store.FINAL_STATUSES

    @property
    def result_text(self) -> str | None:
        """The output (success) or the error message, short enough for a page."""
        run = self.run
        if not self.finished:
            return None
        if run.status == "success":
            text = json.dumps(run.output, indent=2, ensure_ascii=False, default=str)
            if len(text) > OUTPUT_PREVIEW_CHARS:
                text = text[:OUTPUT_PREVIEW_CHARS] + "\n…"
            return text
        return str((run.error or {}).get("message") or run.status)


def _display(value: Any, choices: dict[str, str]) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_display(v, choices) for v in value) or "—"
    if value is None:
        return "—"
    return choices.get(str(value), str(value))


def answer_items(ia: Interaction) -> list[tuple[str, str]]:
    """The accepted values with the form's labels (option labels, not raw values)."""
    if ia.action != "accept" or not isinstance(ia.answer, dict):
        return []
    items = []
    for f in forms.fields(ia.requested_schema):
        if f.name in ia.answer:
            choices = {str(c.value): c.label for c in f.choices}
            items.append((f.label, _display(ia.answer[f.name], choices)))
    return items


def _expired(ia: Interaction) -> bool:
    if ia.expires_at is None:
        return False
    expires = ia.expires_at if ia.expires_at.tzinfo else ia.expires_at.replace(tzinfo=UTC)
    return expires <= datetime.now(UTC)


def _who(ia: Interaction) -> str:
    who = f" by {ia.answered_by}" if ia.answered_by else ""
    return f"{who} as administrator" if ia.answer_override else who


def verdict(ia: Interaction, run: Run) -> str:
    if ia.status == "answered":
        word = VERDICTS.get(ia.action or "", "Answered")
        return f"{word} in {channel_label(ia.channel)}{_who(ia)}"
    if ia.status == "pending":
        return "Waiting for an answer"
    if _expired(ia):
        return "Expired without an answer"
    if run.status in run_store.FINAL_STATUSES:
        return f"Closed without an answer: the run finished ({run.status})"
    return "Closed without an answer"


def host_verdict(ia: Interaction, server: str) -> str:
    """A host request's state. An accepted answer is "sent to the server", never "done"."""
    if ia.status == "answered":
        word = HOST_VERDICTS.get(ia.action or "", "answered")
        if ia.kind == "url" and ia.action == "accept":
            word = "confirmed as completed"
        return f"Answer sent to {server}: {word} in {channel_label(ia.channel)}{_who(ia)}"
    if ia.status == "pending":
        return "Waiting for an answer"
    reason = ia.close_reason or ""
    if reason == "expired" or (not reason and _expired(ia)):
        return "Expired without an answer"
    if reason.startswith("refused:"):
        return "Refused by the host: " + reason.removeprefix("refused:").strip()
    if reason in HOST_CLOSE_REASONS:
        return "Ended without an answer: " + HOST_CLOSE_REASONS[reason].format(server=server)
    return f"Ended without an answer: {reason}" if reason else "Ended without an answer"


def build_timeline(run: Run, interactions: Iterable[Interaction]) -> Timeline:
    return Timeline(run, [Step(ia, verdict(ia, run), answer_items(ia)) for ia in interactions])


def run_timeline(engine: Engine, run: Run) -> Timeline:
    """The context for conversations/_timeline.html: `{% include %}` it with `timeline`."""
    steps = interaction_store.list_for_runs(engine, run_ids=[run.id])[run.id]
    return build_timeline(run, steps)


# --------------------------------------------------------------------------- cards


@dataclass
class Card:
    """One interaction as the page shows it: a form while pending, a state line after.

    A run's question carries its run and timeline; a host request (`host`) carries the
    conversation it was made in and the server's display name instead."""

    item: Item
    timeline: Timeline | None
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    server_name: str | None = None
    # False: an administrator looks at someone else's question (answering needs the override).
    owned: bool = True

    @property
    def interaction(self) -> Interaction:
        return self.item.interaction

    @property
    def run(self) -> Run | None:
        return self.item.run if isinstance(self.item, InteractionWithRun) else None

    @property
    def host(self) -> HostInteraction | None:
        return self.item if isinstance(self.item, HostInteraction) else None

    @property
    def project_name(self) -> str:
        return self.item.project_name if isinstance(self.item, InteractionWithRun) else ""

    @property
    def server_label(self) -> str:
        return self.server_name or self.interaction.server_id or "the server"

    @property
    def is_url(self) -> bool:
        return self.interaction.kind == "url"

    @property
    def url_host(self) -> str:
        """The destination's host, shown on its own so a look-alike address stands out."""
        try:
            return urlsplit(self.interaction.url or "").hostname or ""
        except ValueError:
            return ""

    @property
    def pending(self) -> bool:
        return self.interaction.status == "pending"

    @property
    def is_approval(self) -> bool:
        return self.interaction.kind == "approval"

    @property
    def prefix(self) -> str:
        """Field names and ids are unique on a page that shows several forms."""
        return f"{self.interaction.id}-"

    @property
    def fields(self) -> list[forms.Field]:
        return forms.fields(self.interaction.requested_schema)

    @property
    def answer_items(self) -> list[tuple[str, str]]:
        return answer_items(self.interaction)

    @property
    def owner_label(self) -> str:
        """Whose question this is, for the override notice."""
        if self.run is not None:
            return self.run.actor or "the account that started the run"
        return "the owner of the conversation it was asked in"

    @property
    def state_line(self) -> str:
        if self.run is None:
            return host_verdict(self.interaction, self.server_label)
        return verdict(self.interaction, self.run)


def _no_names() -> Mapping[str, str]:
    return {}


def server_names_of(request: Request) -> ServerNames:
    """Display names of the configured MCP servers ({} while the configuration is broken)."""
    host = getattr(request.app.state, "host", None)

    def names() -> Mapping[str, str]:
        if host is None:
            return {}
        try:
            return {sid: server.name for sid, server in host.config().servers.items()}
        except SteamharnessError:
            return {}

    return names


def build_cards(
    engine: Engine, items: Iterable[Item], names: ServerNames = _no_names, user: UiUser | None = None
) -> list[Card]:
    """Cards with their run timelines; `names` (read only when a host request is among the
    items) gives the servers' display names; `user`, who looks (whose cards are `owned`)."""
    items = list(items)
    runs = {i.run.id for i in items if isinstance(i, InteractionWithRun)}
    by_run = interaction_store.list_for_runs(engine, run_ids=runs)
    shown = names() if any(isinstance(i, HostInteraction) for i in items) else {}
    cards = []
    party = Party.of_user(user) if user is not None else None
    for i in items:
        owned = party is None or party.owns(i.owner)
        if isinstance(i, InteractionWithRun):
            cards.append(Card(i, build_timeline(i.run, by_run[i.run.id]), owned=owned))
        else:
            name = shown.get(i.interaction.server_id or "")
            cards.append(Card(i, None, server_name=name, owned=owned))
    return cards


def pending_cards(engine: Engine, user: UiUser, names: ServerNames = _no_names) -> list[Card]:
    account = None if user.is_admin else user.account_id
    items: list[Item] = [
        *interaction_store.list_pending(engine, project_ids=user.projects, account_id=account)
    ]
    items += interaction_store.list_pending_host(engine, account_id=account)
    items.sort(key=lambda i: (as_utc(i.interaction.created_at), i.interaction.id), reverse=True)
    return build_cards(engine, items[: interaction_store.PENDING_LIMIT], names, user)


def find_item(engine: Engine, user: UiUser, interaction_id: str) -> Item | None:
    """The interaction with its run or host conversation, if this person may see it: hers
    (a run of a project she may still use), or any for an administrator."""
    party = Party.of_user(user)
    item = interaction_store.get_with_run(engine, interaction_id=interaction_id)
    if item is not None:
        return item if user.may_use(item.run.project_id) and party.may_see(item.owner) else None
    host = interaction_store.get_host(engine, interaction_id=interaction_id)
    if host is not None and party.may_see(host.owner):
        return host
    return None


def visible_item(engine: Engine, user: UiUser, interaction_id: str) -> Item:
    """The interaction, if this person may see it; 404 otherwise (no leak)."""
    item = find_item(engine, user, interaction_id)
    if item is None:
        raise NotFound(f"interaction {interaction_id!r} not found")
    return item


def field_problems(schema: dict[str, Any], content: dict[str, Any]) -> dict[str, str]:
    """Where the service's refusal points, per field, to show it beside the control.

    The service already decided (and is the authority); this only places its reasons."""
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    out: dict[str, str] = {}
    for err in validator.iter_errors(content):
        path = list(err.absolute_path)
        if path:
            out.setdefault(str(path[0]), err.message)
    return out


def submitted_values(
    card: Card, form: FormData, parsed: dict[str, Any], errors: dict[str, str]
) -> dict[str, Any]:
    """Typed values where they parsed, the raw text where they did not (so it can be fixed)."""
    values = dict(parsed)
    for f in card.fields:
        if f.name in errors:
            key = card.prefix + f.name
            values[f.name] = form.getlist(key) if f.widget == "multiselect" else form.get(key)
    return values


# --------------------------------------------------------------------------- pages


@router.get("/conversations", summary="Pending interactions you may answer (live)")
def conversations(request: Request, user: UserDep, services: ServicesDep) -> Response:
    # htmx gets the feed alone, except when restoring history, which needs the whole page;
    # caches keep the answers apart.
    restoring = request.headers.get("hx-history-restore-request") == "true"
    context = {"cards": pending_cards(services.engine, user, server_names_of(request))}
    response = page(request, PAGE, context, block=None if restoring else "feed")
    response.headers["Vary"] = "HX-Request, HX-History-Restore-Request"
    return response


@router.get("/runs/{run_id}/timeline", summary="A run's questions, answers and result (HTML fragment)")
def timeline_fragment(run_id: str, request: Request, user: UserDep, services: ServicesDep) -> Response:
    run = run_store.get_run(services.engine, run_id=run_id)
    # The questions and answers are the run owner's: others who may use the project get 404.
    if run is None or not user.may_use(run.project_id) or not Party.of_user(user).may_see(run.account_id):
        raise NotFound(f"run {run_id!r} not found")
    return page(request, TIMELINE, {"timeline": run_timeline(services.engine, run)})


def _card_response(request: Request, engine: Engine, user: UiUser, card: Card, status: int) -> Response:
    if is_htmx(request):
        return page(request, PAGE, {"card": card, "refresh": True}, block="card", status_code=status)
    # Without htmx, the whole page, with this card (and its errors) in place.
    names = server_names_of(request)
    cards = [c for c in pending_cards(engine, user, names) if c.interaction.id != card.interaction.id]
    return page(request, PAGE, {"cards": [card, *cards]}, status_code=status)


def _settled_response(request: Request, engine: Engine, user: UiUser, card: Card) -> Response:
    """An answer to a question that is no longer open: say so beside its final state."""
    if card.interaction.status == "answered":
        card.problem = "This question was already answered; your answer was not used."
        return _card_response(request, engine, user, card, InteractionConflict.status)
    card.problem = "This question can no longer be answered."
    return _card_response(request, engine, user, card, InteractionClosed.status)


def _fresh_card(engine: Engine, user: UiUser, interaction_id: str, names: ServerNames) -> Card:
    return build_cards(engine, [visible_item(engine, user, interaction_id)], names, user)[0]


@router.post("/interactions/{interaction_id}/answer", summary="Answer an interaction from the browser")
async def answer(interaction_id: str, request: Request, user: UserDep, services: ServicesDep) -> Response:
    engine = services.engine
    names = server_names_of(request)
    item = await run_db(visible_item, engine, user, interaction_id)
    card = (await run_db(build_cards, engine, [item], names, user))[0]
    form = await request.form()
    action = str(form.get("action") or "")
    if action not in ACTIONS:
        card.problem = "Choose one of the buttons: accept, decline or cancel."
        return await run_db(_card_response, request, engine, user, card, 422)
    override = str(form.get("override") or "") in OVERRIDE_VALUES
    if not card.owned and not override:
        card.problem = (
            f"This question belongs to {card.owner_label}. Tick “Answer as administrator” "
            "to answer it anyway; the override is recorded in the audit log."
        )
        return await run_db(_card_response, request, engine, user, card, 422)
    content: dict[str, Any] | None = None
    if action == "accept":
        content, errors = forms.parse(item.interaction.requested_schema, form, prefix=card.prefix)
        if errors:
            if not card.pending:
                return await run_db(_settled_response, request, engine, user, card)
            card.values, card.errors = submitted_values(card, form, content, errors), errors
            card.problem = "Some answers need attention."
            return await run_db(_card_response, request, engine, user, card, 422)
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
            return await run_db(_settled_response, request, engine, user, card)
        card.values = content or {}
        card.errors = field_problems(item.interaction.requested_schema, content or {})
        card.problem = "Some answers need attention." if card.errors else exc.message
        return await run_db(_card_response, request, engine, user, card, exc.status)
    except (InteractionConflict, InteractionClosed) as exc:
        fresh = await run_db(_fresh_card, engine, user, interaction_id, names)
        fresh.problem = exc.message
        return await run_db(_card_response, request, engine, user, fresh, exc.status)
    if not is_htmx(request):
        return RedirectResponse("/conversations", status_code=303)
    fresh = await run_db(_fresh_card, engine, user, interaction_id, names)
    # `refresh`: the run moves on while this response travels, and its SSE updates may
    # reach the page before this card does; the card re-reads its timeline once in place.
    return page(request, PAGE, {"card": fresh, "refresh": True}, block="card")


# --------------------------------------------------------------------------- live updates


@dataclass
class Feed:
    """Renders the stream's fragments from the page's own blocks."""

    engine: Engine
    env: Environment
    server_names: ServerNames = _no_names

    def render(self, block: str, **context: Any) -> str:
        return render_block(self.env, PAGE, block, **context)

    def render_timeline(self, timeline: Timeline) -> str:
        return self.env.get_template(TIMELINE).render(timeline=timeline)


_TICK = object()


async def conversation_stream(
    feed: Feed, hub: EventHub, user: UiUser, recheck: Callable[[], UiUser | None]
) -> AsyncIterator[ServerSentEvent]:
    """The named events of one tab. Subscribes before the snapshot is read, so nothing
    falls between them; the `with` unsubscribes however the stream ends."""
    with hub.subscribe("interactions", "runs") as sub:
        shown: set[str] = set()  # pending cards this stream has sent
        runs: set[str] = set()  # runs whose timeline this stream keeps current

        def snapshot() -> ServerSentEvent:
            cards = pending_cards(feed.engine, user, feed.server_names)
            shown.clear()
            shown.update(c.interaction.id for c in cards)
            runs.update(c.run.id for c in cards if c.run is not None)
            return ServerSentEvent(feed.render("feed", cards=cards, user=user), event="snapshot")

        yield await run_db(snapshot)
        while True:
            got: Any = _TICK
            with anyio.move_on_after(RECHECK_SECONDS):
                got = await sub.queue.get()
            if got is None:
                return  # fell behind: the browser reconnects and gets a fresh snapshot
            if got is _TICK:
                fresh = await run_db(recheck)
                if fresh is None:
                    return
                if fresh.projects != user.projects:
                    user = fresh
                    yield await run_db(snapshot)
                continue
            for out in await run_db(_events_for, feed, user, got, shown, runs):
                yield out


def _events_for(
    feed: Feed, user: UiUser, event: Event, shown: set[str], runs: set[str]
) -> list[ServerSentEvent]:
    data = event.data
    if event.topic == "runs":
        run_id = str(data.get("runId"))
        run = run_store.get_run(feed.engine, run_id=run_id) if run_id in runs else None
        if run is None:
            return []
        html = feed.render_timeline(run_timeline(feed.engine, run))
        return [ServerSentEvent(html, event=f"run-{run_id}")]
    interaction_id = str(data.get("interactionId"))
    if event.kind == "pending":
        if interaction_id in shown:
            return []
        if data.get("runId") is not None:
            project_id = data.get("projectId")
            if not project_id or not user.may_use(str(project_id)):
                return []  # cheap first cut: no query for questions of other projects
        item = find_item(feed.engine, user, interaction_id)  # hers, or any for an admin
        if item is None or item.interaction.status != "pending":
            return []  # answered already: its `answered` event finds nothing to update
        card = build_cards(feed.engine, [item], feed.server_names, user)[0]
        shown.add(interaction_id)
        if card.run is not None:
            runs.add(card.run.id)
        html = feed.render("card", card=card, user=user, pushed=True)
        return [ServerSentEvent(html, event="interaction")]
    if event.kind in ("answered", "closed") and interaction_id in shown:
        item = find_item(feed.engine, user, interaction_id)
        shown.discard(interaction_id)
        if item is None:
            return []
        card = build_cards(feed.engine, [item], feed.server_names, user)[0]
        html = feed.render("card", card=card, user=user)
        return [ServerSentEvent(html, event=f"resolved-{interaction_id}")]
    return []


@router.get("/conversations/events", summary="Live updates of the conversation view (SSE)")
def conversation_events(request: Request, user: UserDep, services: ServicesDep) -> EventSourceResponse:
    feed = Feed(services.engine, request.app.state.templates.env, server_names_of(request))
    cookie = request.cookies.get(COOKIE_NAME)
    ui_auth = request.app.state.ui_auth

    def recheck() -> UiUser | None:
        return ui_auth.resolve(cookie)

    return EventSourceResponse(
        conversation_stream(feed, services.hub, user, recheck),
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
    )

"""What the conversation view shows: cards and run timelines, built from the store.

A `Card` is one interaction as the page shows it (a form while pending, a state line
after); a run's question carries its `Timeline` (every question of the run, what became of
it, and the run's result), a host request the server's display name, its conversation and
the tool call it was asked during (when the host could tell). The verdict lines say
who answered through which channel; a host request's answer is "sent to the server", never
"done". `find_item`/`visible_item` decide who may see an interaction (hers, or any for an
administrator); the routes and the live stream (webui.web.conversations) only present.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.engine import Engine
from starlette.datastructures import FormData

from webui.auth.ui import UiUser
from webui.errors import NotFound
from webui.interactions.client_requests import CLIENT_KINDS, UNDECLARED_CHANNEL, is_client_request
from webui.interactions.owner import Party
from webui.store import interactions as interaction_store
from webui.store import runs as run_store
from webui.store.interactions import HostInteraction, InteractionWithRun
from webui.store.models import Interaction, Run, as_utc
from webui.validation import field_errors, run_check
from webui.web import forms

OUTPUT_PREVIEW_CHARS = 4000
CHANNEL_LABELS = {
    "browser": "the browser",
    "api": "the API",
    "mcp-elicitation": "the MCP client (form)",
    "mcp-input-required": "the MCP client (input required)",
    "mcp-task": "the MCP client (task update)",
    "mcp-sampling": "the MCP client (sampling)",
    "mcp-roots": "the MCP client (roots)",
    UNDECLARED_CHANNEL: "the server: the MCP client did not declare the capability, so it was never asked",
}
VERDICTS = {"accept": "Answered", "decline": "Declined", "cancel": "Cancelled"}
HOST_VERDICTS = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}
HOST_CLOSE_REASONS = {
    "connection closed": "the connection to {server} closed",
    "conversation closed": "the conversation was closed",
    "shutdown": "the host shut down",
}

Item = InteractionWithRun | HostInteraction
ServerNames = Callable[[], Mapping[str, str]]
RunHider = Callable[[Run], Run]


def _shown_as_is(run: Run) -> Run:
    return run


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
    if ia.status == "answered" and ia.channel == UNDECLARED_CHANNEL and ia.kind in CLIENT_KINDS:
        return f"Not sent: the MCP client did not declare {CLIENT_KINDS[ia.kind]}"
    if ia.status == "answered":
        word = VERDICTS.get(ia.action or "", "Answered")
        return f"{word} in {channel_label(ia.channel)}{_who(ia)}"
    if ia.status == "pending":
        return "Waiting for the MCP client" if is_client_request(ia.kind) else "Waiting for an answer"
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


def build_timeline(run: Run, interactions: Iterable[Interaction], hide: RunHider = _shown_as_is) -> Timeline:
    """`hide`: the run as the viewer may see it (its configuration secrets redacted for
    anyone but its own account: `runs_pages.run_hider`)."""
    return Timeline(hide(run), [Step(ia, verdict(ia, run), answer_items(ia)) for ia in interactions])


def run_timeline(engine: Engine, run: Run, hide: RunHider = _shown_as_is) -> Timeline:
    """The context for conversations/_timeline.html: `{% include %}` it with `timeline`."""
    steps = interaction_store.list_for_runs(engine, run_ids=[run.id])[run.id]
    return build_timeline(run, steps, hide)


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
    def for_the_client(self) -> bool:
        """A sampling or roots request: only the MCP client that follows the run answers."""
        return is_client_request(self.interaction.kind)

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


def no_server_names() -> Mapping[str, str]:
    return {}


def build_cards(
    engine: Engine,
    items: Iterable[Item],
    names: ServerNames = no_server_names,
    user: UiUser | None = None,
    hide: RunHider = _shown_as_is,
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
            cards.append(Card(i, build_timeline(i.run, by_run[i.run.id], hide), owned=owned))
        else:
            name = shown.get(i.interaction.server_id or "")
            cards.append(Card(i, None, server_name=name, owned=owned))
    return cards


def pending_cards(
    engine: Engine, user: UiUser, names: ServerNames = no_server_names, hide: RunHider = _shown_as_is
) -> list[Card]:
    """`hide`: each run as `user` may see it (`runs_pages.run_hider`)."""
    account = None if user.is_admin else user.account_id
    items: list[Item] = [
        *interaction_store.list_pending(engine, project_ids=user.projects, account_id=account)
    ]
    items += interaction_store.list_pending_host(engine, account_id=account)
    items.sort(key=lambda i: (as_utc(i.interaction.created_at), i.interaction.id), reverse=True)
    return build_cards(engine, items[: interaction_store.PENDING_LIMIT], names, user, hide)


def load_item(engine: Engine, interaction_id: str) -> Item | None:
    """The interaction with its run or host conversation, whoever looks (check `may_see`)."""
    item = interaction_store.get_with_run(engine, interaction_id=interaction_id)
    if item is not None:
        return item
    return interaction_store.get_host(engine, interaction_id=interaction_id)


def may_see(user: UiUser, item: Item) -> bool:
    """Hers (a run of a project she may still use, or her host conversation's request), or
    any for an administrator."""
    if isinstance(item, InteractionWithRun) and not user.may_use(item.run.project_id):
        return False
    return Party.of_user(user).may_see(item.owner)


def find_item(engine: Engine, user: UiUser, interaction_id: str) -> Item | None:
    """The interaction with its run or host conversation, if this person may see it."""
    item = load_item(engine, interaction_id)
    return item if item is not None and may_see(user, item) else None


def visible_item(engine: Engine, user: UiUser, interaction_id: str) -> Item:
    """The interaction, if this person may see it; 404 otherwise (no leak)."""
    item = find_item(engine, user, interaction_id)
    if item is None:
        raise NotFound(f"interaction {interaction_id!r} not found")
    return item


async def field_problems(
    schema: dict[str, Any], content: dict[str, Any], *, account: int | None
) -> dict[str, str]:
    """Where the service's refusal points, per field, to show it beside the control.

    The service already decided (and is the authority); this only places its reasons. The
    schema may be an external server's: checked in the checks' own threads."""
    errors = await run_check(account, field_errors, schema, content)
    return {name: message for name, message in errors.items() if name}


def submitted_values(
    card: Card, form: FormData, parsed: dict[str, Any], errors: dict[str, str]
) -> dict[str, Any]:
    """Typed values where they parsed, the raw text where they did not (so it can be fixed)."""
    values = dict(parsed)
    for f in card.fields:
        if f.name in errors:
            key = card.prefix + f.key
            values[f.name] = form.getlist(key) if f.widget == "multiselect" else form.get(key)
    return values

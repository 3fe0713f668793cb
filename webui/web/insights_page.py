"""The insights page: calls, failures and durations per tool over the last hour, day or
week (charts as server-rendered SVG, the same figures as tables), the slowest and most
failing tools, the questions waiting, and (for administrators) the worker pool and queue.

Administrators see every project; anyone else sees the projects they may use, one of them
with `?project=` (another project's id shows nothing, as if it had no runs). The page is
whole without JavaScript; with it, `/insights/stream` pushes the page's body again when
runs end or questions change (at most once a settle interval, and every refresh interval
as the window slides: `insights_settle_seconds`, `insights_refresh_seconds`). What a body
shows is read and rendered once per (window, projects, viewer kind) for every open stream
(`InsightsFeed`). The questions waiting are listed (title, tool, run) to the account whose
run asks them and to administrators; other members of a shared project see them counted
only."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from jinja2_fragments import render_block
from sse_starlette import ServerSentEvent

from webui.auth.ui import COOKIE_NAME, UiUser
from webui.blocking import run_db
from webui.events import EventHub
from webui.insights import view
from webui.settings import setting_default
from webui.store import projects as project_store
from webui.web.conversations import HeldStream
from webui.web.deps import ServicesDep, StateDep, UserDep
from webui.web.state import AppState, Kept
from webui.web.streams import StreamSlots
from webui.web.templating import page

router = APIRouter(tags=["pages"])

TEMPLATE = "insights/page.html"
BODY = "body"
PING_SECONDS = 15
SEND_TIMEOUT_SECONDS = 30.0
KEPT_BODIES = 64

WindowName = Literal["hour", "day", "week"]


@dataclass(frozen=True)
class Scope:
    """Whose figures: `project_ids` None for every project (administrators); `questions_of`
    the account whose runs' waiting questions are listed, None for every run's
    (administrators): a member sees other accounts' questions counted, never their titles."""

    window: view.Window
    project_ids: frozenset[str] | None
    project: str  # the `?project=` asked for ("" for all the viewer's)
    admin: bool
    questions_of: int | None

    @property
    def key(self) -> tuple[Any, ...]:
        ids = None if self.project_ids is None else tuple(sorted(self.project_ids))
        return (self.window.name, ids, self.admin, self.questions_of)

    def url(self, path: str = "/insights", **extra: str) -> str:
        query = {"window": self.window.name, "project": self.project, **extra}
        return f"{path}?{urlencode({k: v for k, v in query.items() if v})}"


def scope_of(user: UiUser, window: str, project: str) -> Scope:
    chosen = view.WINDOWS[window]
    if user.projects is None:  # every project
        ids = None if not project else frozenset({project})
    else:
        ids = frozenset(user.projects) if not project else frozenset({project}) & user.projects
    return Scope(
        chosen, ids, project, user.is_admin and not project, None if user.is_admin else user.account_id
    )


def _names(services: Any) -> dict[str, str]:
    return {p.id: p.name for p in project_store.list_projects(services.engine)}


def _model(state: AppState, scope: Scope) -> view.Insights:
    """`state`: the app's (its MCP gateway counts the sessions the pool figures show)."""
    services = state.services
    held = None
    if scope.admin:
        held = services.runs.held(sessions=state.gateway.sessions.by_protocol_version())
    return view.build(
        services.engine,
        scope.window,
        project_ids=scope.project_ids,
        project_names=_names(services),
        questions_of=scope.questions_of,
        pool_now=held,
    )


@router.get("/insights", summary="Calls, failures and durations per tool; questions waiting; the worker pool")
def insights_page(
    request: Request,
    user: UserDep,
    services: ServicesDep,
    state: StateDep,
    window: Annotated[WindowName, Query()] = "hour",
    project: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    scope = scope_of(user, window, project)
    projects = [p for p in project_store.list_projects(services.engine) if user.may_use(p.id)]
    context = {
        "insights": _model(state, scope),
        "scope": scope,
        "projects": projects,
        "windows": view.WINDOWS,
        "stream_url": scope.url("/insights/stream"),
    }
    response = page(request, TEMPLATE, context, block=BODY)
    response.headers["Cache-Control"] = "no-store"
    return response


class InsightsFeed:
    """Bodies rendered for the open streams of one app: one read and render per scope key
    every `fresh_seconds` at most, however many streams want it (single-flight): a body this
    young is reused by every stream that needs it."""

    def __init__(
        self,
        render: Callable[[Scope], str],
        *,
        fresh_seconds: float = setting_default("insights_fresh_seconds"),
    ) -> None:
        self._render = render
        self._fresh_seconds = fresh_seconds
        self._bodies: OrderedDict[tuple[Any, ...], tuple[float, str]] = OrderedDict()
        self._flights: dict[tuple[Any, ...], asyncio.Future[str]] = {}

    async def body(self, scope: Scope) -> str:
        key = scope.key
        kept = self._bodies.get(key)
        if kept is not None and time.monotonic() - kept[0] < self._fresh_seconds:
            return kept[1]
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = asyncio.ensure_future(self._read(key, scope))
        # Shielded: a stream that goes away must not cancel the read the others wait for.
        return await asyncio.shield(flight)

    async def _read(self, key: tuple[Any, ...], scope: Scope) -> str:
        try:
            started = time.monotonic()
            html = await run_db(self._render, scope)
            self._bodies[key] = (started, html)
            self._bodies.move_to_end(key)
            while len(self._bodies) > KEPT_BODIES:
                self._bodies.popitem(last=False)
            return html
        finally:
            self._flights.pop(key, None)


def _new_feed(state: AppState) -> InsightsFeed:
    env = state.templates.env

    def render(scope: Scope) -> str:
        return render_block(env, TEMPLATE, BODY, {"insights": _model(state, scope), "scope": scope})

    return InsightsFeed(render, fresh_seconds=state.settings.insights_fresh_seconds)


# The app's feed and its per-account cap on streams (made at first use; they hold nothing
# to tear down).
FEED = Kept(_new_feed)
SLOTS = Kept(
    lambda state: StreamSlots(
        state.settings.max_sse_streams_per_account, what="insights streams", close="Insights"
    )
)


def feed_of(state: AppState) -> InsightsFeed:
    """The app's feed."""
    return FEED.of(state)


def _wakes_us(event: Any, scope: Scope) -> bool:
    if event.topic != "runs":
        return True  # a question asked, answered or closed
    if event.kind != "status":
        return False
    project = event.data.get("projectId")
    return scope.project_ids is None or project is None or str(project) in scope.project_ids


async def insights_stream(
    feed: InsightsFeed,
    hub: EventHub,
    user: UiUser,
    scope: Scope,
    recheck: Callable[[], UiUser | None],
    *,
    settle_seconds: float = setting_default("insights_settle_seconds"),
    refresh_seconds: float = setting_default("insights_refresh_seconds"),
    recheck_seconds: float = setting_default("stream_login_recheck_seconds"),
) -> AsyncGenerator[ServerSentEvent]:
    """The page's body again whenever it may have changed; ends (the browser reconnects)
    when the stream fell behind the hub, and for good when the login ends. After an event
    it waits `settle_seconds` for the event's neighbours (and its record), it reads again
    every `refresh_seconds` as the window slides, and asks `recheck` for the login every
    `recheck_seconds`."""
    with hub.subscribe("runs", "interactions") as sub:
        sent = ""
        checked = time.monotonic()
        while True:
            html = await feed.body(scope)
            if html != sent:
                yield ServerSentEvent(html, event="insights")
                sent = html
            woken = False
            with anyio.move_on_after(refresh_seconds):
                while not woken:
                    event = await sub.queue.get()
                    if event is None:
                        return
                    woken = _wakes_us(event, scope)
            if woken:
                await anyio.sleep(settle_seconds)
                while not sub.queue.empty():
                    if sub.queue.get_nowait() is None:
                        return
            if time.monotonic() - checked >= recheck_seconds:
                checked = time.monotonic()
                fresh = await run_db(recheck)
                if fresh is None:
                    return
                if fresh.projects != user.projects or fresh.is_admin != user.is_admin:
                    user = fresh
                    scope = scope_of(fresh, scope.window.name, scope.project)


@router.get("/insights/stream", summary="Live updates of the insights page (SSE)")
def insights_events(
    request: Request,
    user: UserDep,
    services: ServicesDep,
    state: StateDep,
    window: Annotated[WindowName, Query()] = "hour",
    project: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    scope = scope_of(user, window, project)
    cookie = request.cookies.get(COOKIE_NAME)
    ui_auth = state.ui_auth

    def recheck() -> UiUser | None:
        return ui_auth.resolve(cookie)

    release = SLOTS.of(state).take(user.account_id)  # over the cap: 429, nothing held
    return HeldStream(
        insights_stream(
            FEED.of(state),
            services.hub,
            user,
            scope,
            recheck,
            settle_seconds=state.settings.insights_settle_seconds,
            refresh_seconds=state.settings.insights_refresh_seconds,
            recheck_seconds=state.settings.stream_login_recheck_seconds,
        ),
        release,
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
    )

"""The application's state: one typed object, built once by `create_app`'s lifespan.

Everything long-lived that requests use (the services, the registry, the gateway, the
host, the calls pages start, the templates, the edge's counters) is a field of `AppState`.
The lifespan publishes it with `publish` once it has built everything; it is read only
through `app_state` (handlers take it through the dependencies in `webui.web.deps`, never
from `request.app.state`)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from starlette.applications import Starlette
from starlette.types import ASGIApp

if TYPE_CHECKING:
    from jinja2_fragments.fastapi import Jinja2Blocks

    from webui.auth.keys import Authenticator
    from webui.auth.throttle import AuthThrottle
    from webui.auth.ui import UiAuth
    from webui.host.service import HostService
    from webui.mcp.http import McpGateway
    from webui.projects.registry import ProjectRegistry
    from webui.services import Services
    from webui.settings import Settings
    from webui.tryit.service import TryIt
    from webui.web.host_calls import HostCalls

STATE_ATTRIBUTE = "steamharness"  # the one attribute of Starlette's `app.state` this sets

Drain = Callable[[float], Awaitable[None]]
T = TypeVar("T")


class NotStarted(RuntimeError):
    """The app's state was read before its lifespan built it (or after a failed start)."""


@dataclass(frozen=True, kw_only=True)
class AppState:
    """What the app holds while it runs; every field set once, by the lifespan."""

    settings: Settings
    templates: Jinja2Blocks
    auth_throttle: AuthThrottle  # failed logins and keys (the guard holds the same one)
    # The edge's refusals, counted for the audit and the metrics: a webui.web.refusals.RefusalAudit
    # (not named here: that module renders pages, which read this state).
    refusals: Any
    services: Services
    registry: ProjectRegistry
    authenticator: Authenticator  # API keys and the admin key
    ui_auth: UiAuth  # browser sessions
    gateway: McpGateway
    host: HostService
    host_calls: HostCalls
    try_it: TryIt
    drain: Drain  # called by `serve` when a signal starts the shutdown (webui/shutdown.py)
    # What pages make at their first use and keep for the app's life (`Kept`).
    kept: dict[Kept[Any], Any] = field(default_factory=dict[Any, Any])
    kept_lock: threading.Lock = field(default_factory=threading.Lock)


class Kept(Generic[T]):
    """One object per app that a page module makes at first use from the app's state (a
    stream cap, a feed its streams share) and that holds nothing to tear down:
    `INBOX_SLOTS = Kept(lambda state: StreamSlots(...))`, then `INBOX_SLOTS.of(state)`."""

    def __init__(self, make: Callable[[AppState], T]) -> None:
        self._make = make

    def of(self, state: AppState) -> T:
        with state.kept_lock:  # sync routes run in threads: one object, made once
            made = state.kept.get(self)
            if made is None:
                made = state.kept[self] = self._make(state)
            return made


def publish(app: Starlette, state: AppState) -> None:
    """Make `state` the app's state: once per start of the app, by its lifespan."""
    setattr(app.state, STATE_ATTRIBUTE, state)


def running_state(app: ASGIApp) -> AppState | None:
    """The app's state, or None before its lifespan built it (or for any other ASGI app)."""
    state = getattr(getattr(app, "state", None), STATE_ATTRIBUTE, None)
    return state if isinstance(state, AppState) else None


def app_state(app: ASGIApp) -> AppState:
    """The app's state; the one accessor (`NotStarted` outside the lifespan)."""
    state = running_state(app)
    if state is None:
        raise NotStarted("the app's state is built by its lifespan, which has not run")
    return state

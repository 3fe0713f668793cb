"""Page tests: the real app (lifespan included) behind Starlette's TestClient, with the
example projects registered and published, an admin and a plain user.

Two kinds of assertion, each for its own kind of fact:

- What the page was given (which rows are listed and in what order, which values were
  computed, which field got which error, whether the whole page or one htmx block was
  rendered): ask `rendered(response)` for the template, the block and the context, and
  assert on those. Such tests survive changes to the markup.
- What the person sees and what the browser acts on (labels and their controls, that an
  error message is shown, escaping, accessibility and htmx attributes, links, security
  headers): assert on the HTML.

`rendered` works only for responses from the TestClient (the `http.response.debug`
extension); a response from a real server (tests/e2e, a browser) has only its HTML."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import httpx2
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from tests import helpers, prepared
from webui.app import create_app
from webui.runs.request import RunRequest
from webui.runs.types import RunUpdate
from webui.settings import Settings
from webui.store import accounts as account_store
from webui.store.models import AuditEvent
from webui.web.state import app_state
from webui.workflows.project import load_project

HELLO, INTERACTIVE, LEDGER = prepared.HELLO, prepared.INTERACTIVE, prepared.LEDGER
ADMIN, USER = prepared.ADMIN, prepared.USER

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


class Rendered(NamedTuple):
    """What a page response was rendered from: the template's name, the block (None: the
    whole page) and the context the template saw."""

    template: str
    block: str | None
    context: dict[str, Any]


def rendered(response: httpx2.Response) -> Rendered:
    """The template, block and context of a TestClient response rendered from a template."""
    info = response.extensions.get("http.response.debug")
    if not isinstance(info, dict) or info.get("template") is None:
        raise AssertionError(
            f"{response.request.method} {response.request.url} -> {response.status_code}"
            f" ({response.headers.get('content-type')}) was not rendered from a template in this process"
        )
    return Rendered(info["template"].name, info.get("block"), info["context"])


@dataclass
class Web:
    client: TestClient
    settings: Settings

    def login(self, name: str, password: str) -> str:
        """Log in; returns the session's CSRF token."""
        page = self.client.get("/login")
        token = CSRF_RE.search(page.text)
        assert token, page.text
        r = self.client.post(
            "/login",
            data={"username": name, "password": password, "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        return self.csrf()

    def csrf(self) -> str:
        token = CSRF_RE.search(self.client.get("/projects").text)
        assert token
        return token.group(1)

    def logout(self) -> None:
        self.client.cookies.clear()


def prepare(data_dir: Path) -> Settings:
    """Settings for a copy, at `data_dir`, of the page tests' prepared data dir (the examples
    registered and published, an admin and a plain user: `tests/prepared.py`)."""
    prepared.copy_prepared("web", data_dir)
    return Settings(data_dir=data_dir)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "shares_app: the page test runs on its module's shared app (`site`): it only reads, or"
        " writes only rows it alone creates and reads back only those",
    )


@contextlib.contextmanager
def running(settings: Settings) -> Iterator[Web]:
    """The app for `settings`, its lifespan started, behind a TestClient."""
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield Web(client, settings)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """One app, on its own copy of the prepared data dir, for the module's tests marked
    `shares_app`. They cannot see each other's writes: each only reads, or writes only rows
    it alone creates (a login's session row and audit event, a run or a key of its own) and
    reads back only those. A test that changes what another reads (a user, a grant, a
    project's state, a count or a listing) keeps an app of its own."""
    with running(prepare(tmp_path_factory.mktemp("site") / "data")) as shared:
        yield shared


@dataclass
class AppSlot:
    """The module's app object for the tests that need a store of their own (see `web`):
    the same `create_app(settings)`, started on a fresh copy of the prepared data dir for
    each test. `app` is None while a test holds it, or once a test left its edge state used."""

    settings: Settings
    app: FastAPI | None = None
    busy: bool = False  # a test holds it (its data dir): two at once would share one store


def edge_untouched(app: FastAPI) -> bool:
    """Whether the in-memory state `create_app` built outside the lifespan is as new: no
    authentication failure counted by the throttle, no refusal tracked for the audit. (The
    rest it built holds no state of a request: routes, templates, middleware, renderer.)"""
    state = app_state(app)
    throttle = state.auth_throttle
    counters = (throttle.login_account, throttle.login_address, throttle.bearer_address)
    tracked = state.refusals._keys  # pyright: ignore[reportPrivateUsage]  # no public view
    return not any(len(counter) for counter in counters) and not tracked


@pytest.fixture(scope="module")
def own_app(tmp_path_factory: pytest.TempPathFactory) -> AppSlot:
    return AppSlot(Settings(data_dir=tmp_path_factory.mktemp("own") / "data"))


@contextlib.contextmanager
def restarted(slot: AppSlot, setup: Callable[[Settings], object] | None = None) -> Iterator[Web]:
    """The slot's app, started for the block on a fresh copy of the prepared data dir (the
    previous test's removed first; then `setup(settings)`: the test's own rows, written
    before the start), behind a new TestClient (an empty cookie jar). The app object is built
    once and kept while tests leave its edge state untouched (`edge_untouched`); a test that
    failed, or counted a failure or a refusal, has the next one build a new app."""
    assert not slot.busy, "a test holds its module's app (`web` and a fixture of `restarted` at once)"
    data_dir = slot.settings.data_dir
    if data_dir.exists():
        shutil.rmtree(data_dir)
    prepared.copy_prepared("web", data_dir)
    if setup is not None:
        setup(slot.settings)
    app, slot.app, slot.busy = slot.app or create_app(slot.settings), None, True
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield Web(client, slot.settings)
            keep = edge_untouched(app)
        if keep:
            slot.app = app
    finally:
        slot.busy = False


@pytest.fixture
def web(request: pytest.FixtureRequest) -> Iterator[Web]:
    """The app a page test runs on: for a test marked `shares_app`, its module's `site` with an
    empty cookie jar (logged out) before and after the test; else a store of its own — a fresh
    copy of the prepared data dir and a fresh lifespan (services, keys, worker pool, host,
    sessions) around the test, and a new client. The app object itself (its routes, whose
    dependencies FastAPI builds at an app's first requests — most of a new app's cost —
    templates and middleware) is the module's (`own_app`, `restarted`): it holds nothing of a
    request but the edge's throttle and refusal counters, and is built anew when a test used those."""
    if request.node.get_closest_marker("shares_app") is None:
        with restarted(request.getfixturevalue("own_app")) as own:
            yield own
        return
    shared: Web = request.getfixturevalue("site")
    shared.logout()
    try:
        yield Web(shared.client, shared.settings)
    finally:
        shared.logout()


@pytest.fixture(params=[False, True], ids=["page", "htmx"])
def hx(request: pytest.FixtureRequest) -> dict[str, str]:
    """Each test twice: as a whole page, and as an htmx swap of its block."""
    return {"HX-Request": "true"} if request.param else {}


def engine(web: Web) -> Any:
    return app_state(web.client.app).services.engine


def audit(web: Web, event: str) -> list[AuditEvent]:
    """The audit events named `event`, oldest first."""
    with Session(engine(web)) as s:
        return list(s.exec(select(AuditEvent).where(AuditEvent.event == event).order_by(col(AuditEvent.id))))


def details(event: AuditEvent) -> dict[str, Any]:
    """The details of an audit row the test expects to have some."""
    assert event.details is not None, event
    return event.details


def services(web: Web) -> Any:
    return app_state(web.client.app).services


def account_id(web: Web, name: str) -> int:
    account = account_store.get_account(services(web).engine, name=name)
    assert account is not None and account.id is not None
    return account.id


def start_asking(
    web: Web,
    folder: Path,
    entrypoint: str,
    params: dict[str, Any] | None = None,
    *,
    owner: str | None = USER[0],
) -> tuple[str, str]:
    """A real run, waited on until it asks; returns (run id, interaction id). It is
    `owner`'s run (None: started with the server admin key, the administrators' run)."""
    project = load_project(folder)
    ep = project.entrypoint(entrypoint)
    assert ep is not None
    svc = services(web)
    owner_id = account_id(web, owner) if owner is not None else None

    async def go() -> tuple[str, str]:
        run_id = (
            await svc.runs.start(
                RunRequest(
                    project=project,
                    entrypoint=ep,
                    params=params or {},
                    stored_params=params or {},
                    actor=f"user:{owner}" if owner else "admin",
                    account_id=owner_id,
                    project_version=project.version,
                )
            )
        ).run_id
        update = await helpers.next_update(svc, run_id, ("waiting",))
        assert update.interaction is not None
        return run_id, update.interaction.id

    assert web.client.portal is not None
    return web.client.portal.call(go)


def next_step(web: Web, run_id: str) -> RunUpdate:
    """After an answer: the run's next question, or its end."""
    assert web.client.portal is not None
    return web.client.portal.call(helpers.next_update, services(web), run_id, ("waiting", "final"))

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

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import httpx2
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from tests.conftest import EXAMPLES, TORTURE
from webui.admin import create_user, grant_projects
from webui.app import create_app
from webui.projects.registry import ProjectRegistry
from webui.settings import Settings
from webui.store.db import make_engine
from webui.store.models import AuditEvent

HELLO = "5b0f3c1e-8d2a-4c61-9a0b-1f6e2d7c3a01"
INTERACTIVE = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
LEDGER = "9a1d2c3b-4e5f-4a6b-8c7d-1e2f3a4b5c6d"
ADMIN = ("root", "admin-password-1")
USER = ("ann", "user-password-1")
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
    template = info.get("template") if isinstance(info, dict) else None
    if template is None:
        raise AssertionError(
            f"{response.request.method} {response.request.url} -> {response.status_code}"
            f" ({response.headers.get('content-type')}) was not rendered from a template in this process"
        )
    return Rendered(template.name, info.get("block"), info["context"])


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
    settings = Settings(data_dir=data_dir)
    engine = make_engine(settings.resolved_database_url)
    registry = ProjectRegistry(engine, settings.versions_dir)
    for folder in (*sorted(p for p in EXAMPLES.iterdir() if p.is_dir()), TORTURE):
        project, _ = registry.register(folder)
        if project.version:
            registry.publish(project.id, project.version)
    create_user(engine, name=ADMIN[0], admin=True, password=ADMIN[1])
    create_user(engine, name=USER[0], admin=False, password=USER[1])
    grant_projects(engine, user=USER[0], projects=[HELLO, INTERACTIVE], registry=registry)
    engine.dispose()
    return settings


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Web]:
    settings = prepare(tmp_path / "data")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield Web(client, settings)


@pytest.fixture(params=[False, True], ids=["page", "htmx"])
def hx(request: pytest.FixtureRequest) -> dict[str, str]:
    """Each test twice: as a whole page, and as an htmx swap of its block."""
    return {"HX-Request": "true"} if request.param else {}


def engine(web: Web) -> Any:
    return web.client.app.state.services.engine  # type: ignore[attr-defined]


def audit(web: Web, event: str) -> list[AuditEvent]:
    """The audit events named `event`, oldest first."""
    with Session(engine(web)) as s:
        return list(s.exec(select(AuditEvent).where(AuditEvent.event == event).order_by(col(AuditEvent.id))))

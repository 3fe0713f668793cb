"""A project's page: description, draft, versions (online/offline by administrators), the
publish preview with the tool contract diff against latest, publishing, recent runs; and the
projects list's tool count and last run. Bad paths: no grant, plain users, a stale review,
an invalid draft, an existing version."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from tests.web.conftest import (
    ADMIN,
    HELLO,
    LEDGER,
    USER,
    AppSlot,
    Web,
    audit,
    rendered,
    restarted,
    services,
)
from webui.admin import grant_projects
from webui.projects.registry import ProjectRegistry
from webui.settings import Settings
from webui.store import projects as project_store
from webui.store import runs as run_store
from webui.store.db import make_engine
from webui.store.models import Run

COPY = "d7e1a3c2-5b4f-4e6a-9c8d-2f1e0a9b8c7d"
PAGE = f"/projects/{COPY}"


def write_package(folder: Path, change: Any) -> None:
    path = folder / "package.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture
def pweb(tmp_path: Path, own_app: AppSlot) -> Iterator[tuple[Web, Path]]:
    """The web app with a copy of hello (its own id) registered, 1.0.0 published, ann granted."""
    folder = tmp_path / "greeter"
    shutil.copytree(EXAMPLES / "hello", folder, ignore=shutil.ignore_patterns("__pycache__"))
    write_package(folder, lambda d: d.update(id=COPY, name="greeter"))

    def setup(settings: Settings) -> None:
        engine = make_engine(settings.resolved_database_url)
        registry = ProjectRegistry(engine, settings.versions_dir)
        registry.register(folder)
        registry.publish(COPY, "1.0.0")
        grant_projects(engine, user=USER[0], projects=[COPY], registry=registry)
        engine.dispose()

    with restarted(own_app, setup) as web:
        yield web, folder


def add_required_param(folder: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["version"] = "1.1.0"
        d["entrypoints"][0]["params"].append({"name": "style", "type": "string", "required": True})

    write_package(folder, change)


def test_the_page_shows_description_draft_versions_and_links(pweb: tuple[Web, Path]) -> None:
    web, _ = pweb
    web.login(*USER)
    r = web.client.get(PAGE)
    assert r.status_code == 200, r.text
    ctx = rendered(r).context
    assert ctx["draft"].project.description == "A plain workflow: greets someone."
    assert [(v.version, v.online, v.latest) for v in ctx["versions"]] == [("1.0.0", True, True)]
    assert ctx["may_publish"] is False
    assert "A plain workflow: greets someone." in r.text
    assert f'href="/projects/{COPY}/mcp"' in r.text and f'href="/projects/{COPY}/config"' in r.text
    assert "Take 1.0.0 offline" not in r.text and "Review publish" not in r.text  # a plain user reads only


def test_an_administrator_takes_a_version_offline_and_back_online_audited(pweb: tuple[Web, Path]) -> None:
    web, _ = pweb
    token = web.login(*ADMIN)
    assert "Take 1.0.0 offline" in web.client.get(PAGE).text
    r = web.client.post(f"{PAGE}/versions/1.0.0/offline", data={"csrf_token": token})
    assert r.status_code == 200, r.text
    [redirect] = r.history  # the page again: a reload does not repeat the change
    assert redirect.status_code == 303
    assert redirect.headers["location"] == f"{PAGE}?done=offline&version=1.0.0"
    ctx = rendered(r).context
    assert ctx["notice"] == "1.0.0 is offline."
    assert [(v.version, v.online, v.latest) for v in ctx["versions"]] == [("1.0.0", False, False)]
    assert "Bring 1.0.0 online" in r.text
    r = web.client.post(f"{PAGE}/versions/1.0.0/online", data={"csrf_token": token})
    assert [(v.online, v.latest) for v in rendered(r).context["versions"]] == [(True, True)]
    forged = web.client.get(f"{PAGE}?done=offline&version=<b>1</b>")
    assert rendered(forged).context["notice"] is None  # only a version label is ever echoed
    events = audit(web, "project.version_offline") + audit(web, "project.version_online")
    assert [(e.event, e.actor, e.source, e.project_id, e.version) for e in events] == [
        ("project.version_offline", "user:root", "ui", COPY, "1.0.0"),
        ("project.version_online", "user:root", "ui", COPY, "1.0.0"),
    ]
    missing = web.client.post(f"{PAGE}/versions/9.9.9/offline", data={"csrf_token": token})
    assert missing.status_code == 404 and "9.9.9" in missing.text


def test_publishing_shows_the_breaking_diff_first_then_publishes(pweb: tuple[Web, Path]) -> None:
    web, folder = pweb
    token = web.login(*ADMIN)
    add_required_param(folder)
    r = web.client.get(f"{PAGE}/publish")
    assert r.status_code == 200, r.text
    preview = rendered(r).context["publish"]
    assert (preview.base, preview.version, preview.problem) == ("1.0.0", "1.1.0", None)
    assert [(c.kind, c.tool, c.param, c.breaking) for c in preview.changes] == [
        ("param_added", "greet", "style", True)
    ]
    assert "breaking" in r.text and "new required param (string)" in r.text
    assert project_store.get_version(services(web).engine, project_id=COPY, version="1.1.0") is None

    r = web.client.post(
        f"{PAGE}/publish", data={"csrf_token": token, "version": "", "revision": preview.revision}
    )
    assert r.status_code == 200, r.text
    ctx = rendered(r).context
    assert ctx["notice"] == "Published 1.1.0."
    assert [(v.version, v.latest, v.published_by) for v in ctx["versions"]] == [
        ("1.1.0", True, "user:root"),
        ("1.0.0", False, None),
    ]
    [event] = audit(web, "project.published")
    assert (event.actor, event.source, event.version) == ("user:root", "ui", "1.1.0")
    assert event.details == {"version": "1.1.0", "revision": preview.revision}

    again = web.client.get(f"{PAGE}/publish")
    assert rendered(again).context["publish"].changes == []
    assert "The tools are the same as in 1.1.0." in again.text


def test_a_version_that_exists_already_is_refused_on_the_page(pweb: tuple[Web, Path]) -> None:
    web, _ = pweb
    token = web.login(*ADMIN)
    revision = rendered(web.client.get(f"{PAGE}/publish")).context["publish"].revision
    r = web.client.post(
        f"{PAGE}/publish", data={"csrf_token": token, "version": "1.0.0", "revision": revision}
    )
    assert r.status_code == 409
    assert "already has version 1.0.0" in rendered(r).context["error"]
    assert 'role="alert"' in r.text and 'value="1.0.0"' in r.text  # what was typed is kept
    bad = web.client.post(
        f"{PAGE}/publish", data={"csrf_token": token, "version": "v2", "revision": revision}
    )
    assert bad.status_code == 422 and "version must look like 1.2.3" in bad.text
    assert audit(web, "project.published") == []


def test_a_draft_that_changed_after_the_review_is_not_published(pweb: tuple[Web, Path]) -> None:
    web, folder = pweb
    token = web.login(*ADMIN)
    revision = rendered(web.client.get(f"{PAGE}/publish")).context["publish"].revision
    add_required_param(folder)
    r = web.client.post(f"{PAGE}/publish", data={"csrf_token": token, "version": "", "revision": revision})
    assert r.status_code == 409
    ctx = rendered(r).context
    assert "changed since you reviewed it" in ctx["error"]
    assert [c.param for c in ctx["publish"].changes] == ["style"]  # the new diff, to review again
    assert [v.version for v in ctx["versions"]] == ["1.0.0"]


def test_an_invalid_draft_shows_its_error_and_cannot_be_published(pweb: tuple[Web, Path]) -> None:
    web, folder = pweb
    token = web.login(*ADMIN)
    revision = rendered(web.client.get(f"{PAGE}/publish")).context["publish"].revision
    write_package(folder, lambda d: d["entrypoints"][0]["params"].append({"name": "bad", "type": "colour"}))
    r = web.client.get(f"{PAGE}/publish")
    assert r.status_code == 422
    problem = rendered(r).context["publish"].problem
    assert "colour" in problem and "package.json" in problem
    assert "cannot be published" in r.text and "Publish version" not in r.text
    posted = web.client.post(
        f"{PAGE}/publish", data={"csrf_token": token, "version": "", "revision": revision}
    )
    assert posted.status_code == 422 and "colour" in rendered(posted).context["error"]
    page = web.client.get(PAGE)
    assert page.status_code == 200 and "The draft does not load" in page.text
    assert [v.version for v in rendered(page).context["versions"]] == ["1.0.0"]


def test_no_grant_is_404_and_plain_users_may_not_change_versions(pweb: tuple[Web, Path]) -> None:
    web, _ = pweb
    token = web.login(*USER)
    assert web.client.get(f"/projects/{LEDGER}").status_code == 404
    assert web.client.get("/projects/no-such-project").status_code == 404
    assert web.client.post(f"/projects/{LEDGER}/publish", data={"csrf_token": token}).status_code == 404
    assert (
        web.client.post(f"/projects/{LEDGER}/versions/1.0.0/offline", data={"csrf_token": token}).status_code
        == 404
    )
    for method, path in (
        ("GET", f"{PAGE}/publish"),
        ("POST", f"{PAGE}/publish"),
        ("POST", f"{PAGE}/versions/1.0.0/offline"),
    ):
        r = web.client.request(method, path, data={"csrf_token": token} if method == "POST" else None)
        assert r.status_code == 403 and "administrators" in r.text, (method, path)
    version = project_store.get_version(services(web).engine, project_id=COPY, version="1.0.0")
    assert version is not None and version.status == "online"


def test_a_write_without_csrf_is_refused(pweb: tuple[Web, Path]) -> None:
    web, folder = pweb
    web.login(*ADMIN)
    add_required_param(folder)
    assert web.client.post(f"{PAGE}/versions/1.0.0/offline", data={}).status_code == 403
    assert web.client.post(f"{PAGE}/publish", data={"csrf_token": "forged"}).status_code == 403
    engine = services(web).engine
    assert project_store.get_version(engine, project_id=COPY, version="1.0.0").status == "online"  # type: ignore[union-attr]
    assert project_store.get_version(engine, project_id=COPY, version="1.1.0") is None


def test_recent_runs_and_the_projects_list_summary(pweb: tuple[Web, Path]) -> None:
    web, _ = pweb
    engine = services(web).engine
    start = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    for n, status in enumerate(("success", "failed")):
        run = Run(
            id=f"run_{n}",
            project_id=COPY,
            entrypoint_id="greet",
            entrypoint_title="Greet",
            status=status,
            actor="user:root",
            project_version="1.0.0",
            created_at=start + timedelta(minutes=n),
        )
        run_store.create_run(engine, run=run)
    web.login(*USER)  # whoever may use the project sees its runs, as on the runs list
    page = web.client.get(PAGE)
    assert [r.id for r in rendered(page).context["runs"]] == ["run_1", "run_0"]
    assert 'href="/runs/run_0"' in page.text
    listing = web.client.get("/projects")
    rows = {p["record"].id: p for p in rendered(listing).context["projects"]}
    assert COPY in rows and HELLO in rows
    summary = rows[COPY]["summary"]
    assert summary.tools == 2 and summary.last_run is not None and summary.last_run.project_id == COPY
    assert rows[HELLO]["summary"].last_run is None
    assert f'href="/projects/{COPY}"' in listing.text and "never" in listing.text

"""The project configuration page (and the JSON API through the browser session): typed
controls for the declared fields, masked secrets, stale saves that keep what was typed,
configurations needing update after a field change, create/copy/rename/delete/activate,
export and import, the administrators' account picker and who may open the page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import prepared
from tests.configs.project import FIELDS, SETTINGS_PROJECT, write_settings_project
from tests.web.conftest import (
    ADMIN,
    HELLO,
    INTERACTIVE,
    USER,
    AppSlot,
    Web,
    audit,
    details,
    rendered,
    restarted,
    services,
)
from webui.admin import grant_projects
from webui.configs.model import ConfigPlace, Who
from webui.configs.places import account_place
from webui.projects.registry import ProjectRegistry
from webui.settings import Settings
from webui.store.db import make_engine
from webui.web.state import app_state

PAGE = f"/projects/{SETTINGS_PROJECT}/config"
API = f"/api/workflows/{SETTINGS_PROJECT}/configs"
SECRET = "page-secret-4b1a"
OTHER = ("bea", "user-password-2")


@pytest.fixture
def cweb(tmp_path: Path, own_app: AppSlot) -> Iterator[tuple[Web, Path]]:
    folder = write_settings_project(tmp_path / "settings")

    def setup(settings: Settings) -> None:
        engine = make_engine(settings.resolved_database_url)
        registry = ProjectRegistry(engine, settings.versions_dir)
        registry.register(folder)
        grant_projects(engine, user=USER[0], projects=[SETTINGS_PROJECT], registry=registry)
        prepared.add_user(engine, *OTHER, admin=False)
        grant_projects(engine, user=OTHER[0], projects=[HELLO, INTERACTIVE], registry=registry)
        engine.dispose()

    with restarted(own_app, setup) as web:
        yield web, folder


def place_of(web: Web, name: str) -> ConfigPlace:
    from webui.store import accounts as account_store

    svc = services(web)
    account = account_store.get_account(svc.engine, name=name)
    assert account is not None
    fields = app_state(web.client.app).registry.draft(SETTINGS_PROJECT).config_fields
    return account_place(SETTINGS_PROJECT, fields, account_id=account.id, account_name=name)


def set_values(web: Web, user: str, name: str, values: dict[str, Any]) -> int:
    """Change `name` of `user`'s scope directly through the service; returns the new revision."""
    svc = services(web).configs
    place = place_of(web, user)
    current = svc.show(place, name)
    return svc.set(place, name, revision=current.revision, values=values, who=Who(actor="test")).revision


def card(context: dict[str, Any], name: str) -> Any:
    return next(c for c in context["cards"] if c.view.name == name)


def save_form(csrf: str, name: str, revision: int, **values: Any) -> list[tuple[str, str]]:
    """The save form as a browser sends it (every declared field; unchecked boxes absent)."""
    data = [("csrf_token", csrf), ("name", name), ("revision", str(revision))]
    defaults = {"endpoint": "", "threshold": "", "region": "", "start": "", "token": ""}
    for key, value in {**defaults, **values}.items():
        if isinstance(value, list):
            data += [(f"v.{key}", v) for v in value]
        elif value is True:
            data.append((f"v.{key}", "on"))
        elif value is not False:
            data.append((f"v.{key}", str(value)))
    return data


def post(web: Web, path: str, data: list[tuple[str, str]], hx: dict[str, str]) -> Any:
    return web.client.post(
        path,
        content="&".join(f"{k}={_quote(v)}" for k, v in data),
        headers={"Content-Type": "application/x-www-form-urlencoded", **hx},
        follow_redirects=False,
    )


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def test_the_page_draws_a_typed_control_for_each_field_and_masks_secrets(cweb: tuple[Web, Path]) -> None:
    web, _ = cweb
    web.login(*USER)
    set_values(web, USER[0], "default", {"token": SECRET, "threshold": 5, "tags": ["a", "c"], "region": "eu"})
    r = web.client.get(PAGE)
    assert r.status_code == 200
    got = rendered(r)
    assert got.template == "projects/config.html" and got.block is None
    assert [f.name for f in got.context["fields"]] == [f["name"] for f in FIELDS]
    assert got.context["scope"] == f"account {USER[0]}"
    default = card(got.context, "default")
    assert default.values["token"] == "********" and default.values["threshold"] == "5"
    html = r.text
    assert SECRET not in html
    assert 'name="v.token" type="password" value="********"' in html
    assert 'name="v.start" type="date"' in html
    assert 'name="v.threshold" type="number" value="5"' in html
    assert 'type="checkbox" id="cfg-1-dry_run" name="v.dry_run"' in html
    assert (
        '<select id="cfg-1-region" name="v.region"' in html
        and '<option value="eu" selected>Europe</option>' in html
    )
    assert 'name="v.tags" value="a" checked' in html and 'name="v.tags" value="b">' in html
    assert 'name="revision" value="1"' not in html  # the default was changed: revision 2
    assert 'name="revision" value="2"' in html
    assert "How many before alerting" in html
    assert f'href="{PAGE}"' in web.client.get(f"/projects/{SETTINGS_PROJECT}/mcp?target=draft").text
    assert f'href="{PAGE}"' in web.client.get("/projects").text


def test_saving_stores_typed_values_and_the_mask_keeps_the_secret(
    cweb: tuple[Web, Path], hx: dict[str, str]
) -> None:
    web, _ = cweb
    csrf = web.login(*USER)
    set_values(web, USER[0], "default", {"token": SECRET})
    form = save_form(
        csrf,
        "default",
        2,
        endpoint="https://b.example",
        threshold="7.5",
        dry_run=True,
        region="us",
        tags=["b"],
        start="2026-12-24",
        token="********",
    )
    r = post(web, f"{PAGE}/save", form, hx)
    assert r.status_code == (200 if hx else 303), r.text
    svc = services(web).configs
    snap = svc.snapshot(place_of(web, USER[0]), "default")
    assert snap.revision == 3
    assert snap.values == {
        "endpoint": "https://b.example",
        "threshold": 7.5,
        "dry_run": True,
        "region": "us",
        "tags": ["b"],
        "start": "2026-12-24",
        "token": SECRET,
    }
    if hx:
        assert rendered(r).block == "panel" and rendered(r).context["outcome"].notice == "Saved default."
    # Empty inputs unset their fields (the default applies again); an empty secret removes it.
    r = post(web, f"{PAGE}/save", save_form(csrf, "default", 3, threshold="2"), hx)
    assert r.status_code in (200, 303)
    view = svc.show(place_of(web, USER[0]), "default")
    assert view.values == {"threshold": 2, "dry_run": False, "tags": []}
    assert isinstance(view.values["threshold"], int)
    row = audit(web, "config.updated")[-1]
    assert row.source == "ui" and row.actor == f"user:{USER[0]}"
    assert SECRET not in json.dumps([e.details for e in audit(web, "config.updated")])


def test_a_stale_save_shows_the_conflict_and_keeps_the_typed_values(
    cweb: tuple[Web, Path], hx: dict[str, str]
) -> None:
    web, _ = cweb
    csrf = web.login(*USER)
    page = rendered(web.client.get(PAGE)).context
    assert card(page, "default").revision == 1
    set_values(web, USER[0], "default", {"threshold": 4})  # someone else saves first: revision 2
    form = save_form(
        csrf, "default", 1, endpoint="https://mine.example", threshold="11", token="typed-secret"
    )
    r = post(web, f"{PAGE}/save", form, hx)
    assert r.status_code == 409
    got = rendered(r)
    assert got.block == ("panel" if hx else None)
    shown = card(got.context, "default")
    assert "revision 2" in shown.message and "revision 1" in shown.message
    assert shown.values["endpoint"] == "https://mine.example" and shown.values["threshold"] == "11"
    assert shown.values["token"] == ""  # a typed secret is never echoed
    assert "type it again" in shown.message
    assert shown.stored == {"endpoint": "https://a.example", "threshold": 4}
    assert shown.revision == 2  # saving again replaces revision 2, deliberately
    assert 'value="https://mine.example"' in r.text and "typed-secret" not in r.text
    assert 'role="alert"' in r.text
    assert services(web).configs.show(place_of(web, USER[0]), "default").values["threshold"] == 4
    # A configuration deleted meanwhile: a conflict of the page's view, shown in the panel.
    r = post(web, f"{PAGE}/save", save_form(csrf, "gone", 1, threshold="1"), hx)
    assert r.status_code == 409 and "deleted meanwhile" in rendered(r).context["outcome"].error


def test_invalid_values_are_marked_on_their_fields_and_kept(
    cweb: tuple[Web, Path], hx: dict[str, str]
) -> None:
    web, _ = cweb
    csrf = web.login(*USER)
    r = post(web, f"{PAGE}/save", save_form(csrf, "default", 1, threshold="lots", start="2026-02-30"), hx)
    assert r.status_code == 422
    shown = card(rendered(r).context, "default")
    assert set(shown.errors) == {"threshold", "start"}
    assert shown.values["threshold"] == "lots"
    assert 'aria-invalid="true"' in r.text and "Not saved" in r.text


def test_a_field_change_marks_configurations_as_needing_update(cweb: tuple[Web, Path]) -> None:
    web, folder = cweb
    csrf = web.login(*USER)
    set_values(web, USER[0], "default", {"threshold": 4, "region": "eu"})
    changed = [f for f in FIELDS if f["name"] != "region"]
    changed = [{**f, "type": "string", "default": "3"} if f["name"] == "threshold" else f for f in changed]
    changed.append({"name": "owner", "type": "string", "required": True})
    write_settings_project(folder, changed)
    r = web.client.get(PAGE)
    default = card(rendered(r).context, "default")
    assert default.view.needs_update
    assert set(default.view.problems) == {"threshold", "region", "owner"}
    assert default.unknown == ["region"]
    assert "needs update" in r.text and "<code>owner</code>" in r.text
    # Saving the form fixes it: the undeclared field goes, the others are given.
    form = save_form(csrf, "default", 2, threshold="four", owner="ops")
    r = post(web, f"{PAGE}/save", form, {})
    assert r.status_code == 303, r.text
    view = services(web).configs.show(place_of(web, USER[0]), "default")
    assert not view.needs_update and view.values["owner"] == "ops" and "region" not in view.values


def test_create_copy_rename_activate_and_delete(cweb: tuple[Web, Path], hx: dict[str, str]) -> None:
    web, _ = cweb
    csrf = web.login(*USER)
    set_values(web, USER[0], "default", {"threshold": 8})
    r = post(web, f"{PAGE}/create", [("csrf_token", csrf), ("name", "staging"), ("copy_of", "default")], hx)
    assert r.status_code in (200, 303)
    svc = services(web).configs
    where = place_of(web, USER[0])
    assert svc.show(where, "staging").values["threshold"] == 8
    r = post(web, f"{PAGE}/create", [("csrf_token", csrf), ("name", "staging"), ("copy_of", "")], hx)
    assert r.status_code == 409
    got = rendered(r).context
    assert "already exists" in got["outcome"].error and got["outcome"].create == {
        "name": "staging",
        "copy_of": "",
    }
    r = post(web, f"{PAGE}/create", [("csrf_token", csrf), ("name", "bad name"), ("copy_of", "")], hx)
    assert r.status_code == 422 and "not valid" in rendered(r).context["outcome"].error

    form = [("csrf_token", csrf), ("name", "staging"), ("revision", "1"), ("new_name", "stage")]
    assert post(web, f"{PAGE}/rename", form, hx).status_code in (200, 303)
    assert post(web, f"{PAGE}/activate", [("csrf_token", csrf), ("name", "stage")], hx).status_code in (
        200,
        303,
    )
    assert svc.active(where).name == "stage"
    assert rendered(web.client.get(PAGE)).context["active"] == "stage"
    stale = post(web, f"{PAGE}/delete", [("csrf_token", csrf), ("name", "stage"), ("revision", "9")], hx)
    assert stale.status_code == 409 and "revision 9" in card(rendered(stale).context, "stage").message
    revision = str(svc.show(where, "stage").revision)
    r = post(web, f"{PAGE}/delete", [("csrf_token", csrf), ("name", "stage"), ("revision", revision)], hx)
    assert r.status_code in (200, 303)
    assert [v.name for v in svc.list(where)] == ["default"]
    events = [
        e.event
        for e in audit(web, "config.copied") + audit(web, "config.renamed") + audit(web, "config.deleted")
    ]
    assert events == ["config.copied", "config.renamed", "config.deleted"]


def test_export_downloads_and_import_uploads(cweb: tuple[Web, Path], hx: dict[str, str]) -> None:
    web, _ = cweb
    csrf = web.login(*USER)
    set_values(web, USER[0], "default", {"token": SECRET, "threshold": 6})
    plain = web.client.get(f"{PAGE}/export")
    assert plain.status_code == 200 and plain.headers["content-disposition"].startswith("attachment;")
    assert SECRET not in plain.text and plain.json()["secretsIncluded"] is False
    full = web.client.post(f"{PAGE}/export", data={"csrf_token": csrf, "secrets": "on"})
    assert full.status_code == 200 and SECRET in full.text
    assert [details(e)["with_secrets"] for e in audit(web, "config.exported")] == [False, True]

    doc = full.json()
    doc["configurations"].append({"name": "imported", "values": {"threshold": 1}})
    files = {"file": ("export.json", json.dumps(doc).encode(), "application/json")}
    r = web.client.post(
        f"{PAGE}/import",
        data={"csrf_token": csrf, "mode": "merge"},
        files=files,
        headers=hx,
        follow_redirects=False,
    )
    assert r.status_code in (200, 303), r.text
    assert services(web).configs.show(place_of(web, USER[0]), "imported").values == {"threshold": 1}

    doc["projectId"] = HELLO
    files = {"file": ("export.json", json.dumps(doc).encode(), "application/json")}
    r = web.client.post(
        f"{PAGE}/import", data={"csrf_token": csrf, "mode": "replace"}, files=files, headers=hx
    )
    assert r.status_code == 422 and HELLO in rendered(r).context["outcome"].error
    files = {"file": ("export.json", b"{oops", "application/json")}
    r = web.client.post(f"{PAGE}/import", data={"csrf_token": csrf}, files=files, headers=hx)
    assert r.status_code == 422 and "export file is not valid JSON" in rendered(r).context["outcome"].error


def test_admins_pick_an_account_and_others_cannot(cweb: tuple[Web, Path]) -> None:
    web, _ = cweb
    web.login(*USER)
    set_values(web, USER[0], "default", {"threshold": 9})
    assert web.client.get(PAGE, params={"account": ADMIN[0]}).status_code == 403
    assert rendered(web.client.get(PAGE)).context["accounts"] == []
    web.logout()

    csrf = web.login(*ADMIN)
    own = rendered(web.client.get(PAGE)).context
    assert own["scope"] == f"account {ADMIN[0]}" and USER[0] in own["accounts"]
    r = web.client.get(PAGE, params={"account": USER[0]})
    assert card(rendered(r).context, "default").view.values["threshold"] == 9
    assert '<option value="ann" selected>ann</option>' in r.text
    form = save_form(csrf, "default", 2, threshold="10")
    r = post(web, f"{PAGE}/save?account={USER[0]}", form, {})
    assert r.status_code == 303 and r.headers["location"] == f"{PAGE}?account={USER[0]}"
    row = audit(web, "config.updated")[-1]
    assert row.actor == f"user:{ADMIN[0]}" and details(row)["scope"] == f"account {USER[0]}"


def test_who_may_open_the_page(cweb: tuple[Web, Path]) -> None:
    web, _ = cweb
    assert web.client.get(PAGE, follow_redirects=False).status_code == 303  # to /login
    web.login(*OTHER)  # no permission on the project: as if it did not exist
    assert web.client.get(PAGE).status_code == 404
    assert web.client.get("/projects/00000000-0000-4000-8000-000000000000/config").status_code == 404
    web.logout()
    web.login(*USER)
    r = web.client.post(f"{PAGE}/create", data={"name": "x"})
    assert r.status_code == 403  # no CSRF token


def test_the_json_api_takes_the_browser_session_with_its_csrf_token(cweb: tuple[Web, Path]) -> None:
    web, _ = cweb
    csrf = web.login(*USER)
    listed = web.client.get(API)
    assert listed.status_code == 200 and listed.json()["data"]["scope"] == f"account {USER[0]}"
    body = {"name": "via-session", "values": {"threshold": 2}}
    refused = web.client.post(API, json=body)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf"
    created = web.client.post(API, json=body, headers={"X-CSRF-Token": csrf})
    assert created.status_code == 201, created.text
    assert audit(web, "config.created")[-1].source == "ui"
    assert web.client.get(API, params={"account": ADMIN[0]}).status_code == 403
    web.logout()
    assert web.client.get(API).status_code == 401
    web.login(*OTHER)
    assert web.client.get(API).status_code == 404
    web.logout()
    web.login(*ADMIN)  # an administrator's session names the account explicitly
    theirs = web.client.get(API, params={"account": USER[0]}).json()["data"]
    assert theirs["scope"] == f"account {USER[0]}"
    assert "via-session" in {c["name"] for c in theirs["configurations"]}

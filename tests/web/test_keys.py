"""API keys page: people create and revoke their own keys; the raw key is shown once.
Every test runs as a plain form post and as an htmx request."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.web.conftest import (
    ADMIN,
    HELLO,
    INTERACTIVE,
    LEDGER,
    USER,
    Web,
    audit,
    engine,
    rendered,
)
from webui.admin import create_key
from webui.auth.keys import AuthError
from webui.store import accounts as account_store
from webui.web.state import app_state

RAW_KEY = re.compile(r"shk_[0-9a-f]{12}_[A-Za-z0-9_-]+")


def ann_keys(web: Web) -> list[Any]:
    account = account_store.get_account(engine(web), name=USER[0])
    assert account is not None
    return [k for k, _ in account_store.list_keys(engine(web), account_id=account.id)]


@pytest.mark.shares_app
def test_the_page_lists_only_projects_the_user_may_use(web: Web, hx: dict[str, str]) -> None:
    web.login(*USER)
    r = web.client.get("/keys", headers=hx)
    assert r.status_code == 200 and 'id="keys-panel"' in r.text
    template, block, context = rendered(r)
    assert (template, block) == ("keys/list.html", "keys_panel" if hx else None)
    assert ("<html" in r.text) is not bool(hx)
    assert {p.id for p in context["projects"]} == {HELLO, INTERACTIVE}
    assert set(context["project_names"]) == {HELLO, INTERACTIVE}
    assert f'value="{HELLO}"' in r.text and f'value="{INTERACTIVE}"' in r.text
    assert f'value="{LEDGER}"' not in r.text
    for control in ("key-name", "key-projects", "key-scope-1", "key-scope-2"):
        assert f'<label for="{control}">' in r.text
    assert context["keys"] == [] and context["created"] is None
    assert "You have no API keys yet." in r.text


def test_a_created_key_is_shown_once_and_works(web: Web, hx: dict[str, str]) -> None:
    headers = {**hx, "X-CSRF-Token": web.login(*USER)}
    r = web.client.post(
        "/keys",
        data={"name": "laptop", "scopes": ["runs.create", "runs.read"], "projects": [HELLO]},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    assert r.headers["cache-control"] == "no-store"
    raws = set(RAW_KEY.findall(r.text))
    assert len(raws) == 1
    raw = raws.pop()
    shown_raw, shown_key = rendered(r).context["created"]
    assert shown_raw == raw
    assert 'data-copy-target="new-key-value"' in r.text
    again = web.client.get("/keys", headers=hx)
    listed = again.text
    assert rendered(again).context["created"] is None
    assert raw not in listed and "shk_" not in listed, "the raw key is never shown again"
    [key] = ann_keys(web)
    assert shown_key.id == key.id
    assert [(k.id, k.name) for k in rendered(again).context["keys"]] == [(key.id, "laptop")]
    assert key.id in listed and "laptop" in listed
    assert (key.name, key.scopes, key.projects) == ("laptop", ["runs.create", "runs.read"], [HELLO])
    principal = app_state(web.client.app).authenticator.authenticate(raw)
    assert principal.actor == "user:ann" and principal.projects == frozenset({HELLO})
    [event] = audit(web, "key.created")[-1:]
    assert (event.actor, event.source, event.outcome) == ("user:ann", "ui", "ok")
    assert event.details is not None and event.details["keyId"] == key.id
    assert raw not in str(event.details)


def test_a_key_without_projects_covers_every_project_the_user_may_use(web: Web, hx: dict[str, str]) -> None:
    headers = {**hx, "X-CSRF-Token": web.login(*USER)}
    r = web.client.post("/keys", data={"name": "all", "scopes": "runs.create"}, headers=headers)
    assert r.status_code == 201
    [key] = ann_keys(web)
    assert key.projects is None
    [listed] = rendered(r).context["keys"]
    assert listed.id == key.id and listed.projects is None
    assert "All you may use" in r.text


@pytest.mark.shares_app
@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "", "scopes": "runs.create"}, "name", "Give the key a name"),
        ({"name": "x" * 101, "scopes": "runs.create"}, "name", "at most 100"),
        ({"name": "k"}, "scopes", "at least one scope"),
        ({"name": "k", "scopes": "admin.everything"}, "scopes", "scopes listed"),
        (
            {"name": "k", "scopes": "runs.create", "projects": LEDGER},
            "projects",
            "You have no run permission on ledger: ask an administrator to grant it "
            "(Users page, or steamharness users grant ann --project ID).",
        ),
        ({"name": "k", "scopes": "runs.create", "projects": "nope"}, "projects", "projects you may use"),
    ],
)
def test_an_invalid_form_is_refused_with_inline_errors(
    web: Web, hx: dict[str, str], data: dict[str, Any], field: str, message: str
) -> None:
    headers = {**hx, "X-CSRF-Token": web.login(*USER)}
    r = web.client.post("/keys", data=data, headers=headers)
    assert r.status_code == 422
    template, block, context = rendered(r)
    assert (template, block) == ("keys/list.html", "keys_panel" if hx else None)
    assert 'id="keys-panel"' in r.text and ("<html" in r.text) is not bool(hx)
    assert list(context["errors"]) == [field] and message in context["errors"][field]
    assert context["values"]["name"] == data["name"].strip(), "the form keeps what was typed"
    error = re.search(rf'<small id="key-{field}-error" class="error">([^<]*)</small>', r.text)
    assert error is not None and message in error.group(1)  # shown beside its field
    assert context["created"] is None and "shk_" not in r.text
    assert ann_keys(web) == []


def test_revoking_a_key_stops_it_at_once(web: Web, hx: dict[str, str]) -> None:
    headers = {**hx, "X-CSRF-Token": web.login(*USER)}
    created = web.client.post("/keys", data={"name": "ci", "scopes": "runs.create"}, headers=headers)
    raw = RAW_KEY.findall(created.text)[0]
    [key] = ann_keys(web)
    r = web.client.post(f"/keys/{key.id}/revoke", headers=headers, follow_redirects=False)
    if hx:
        assert r.status_code == 200 and "Revoked" in r.text
        [shown] = rendered(r).context["keys"]
        assert shown.id == key.id and shown.revoked_at is not None
    else:
        assert r.status_code == 303 and r.headers["location"] == "/keys"
    [key] = ann_keys(web)
    assert key.revoked_at is not None
    with pytest.raises(AuthError, match="revoked"):
        app_state(web.client.app).authenticator.authenticate(raw)
    [event] = audit(web, "key.revoked")
    assert (event.actor, event.source, event.details) == ("user:ann", "ui", {"keyId": key.id})


@pytest.mark.shares_app
def test_nobody_can_revoke_someone_elses_key(web: Web, hx: dict[str, str]) -> None:
    _, roots = create_key(engine(web), user=ADMIN[0], projects=None, scopes=None, name="root's")
    headers = {**hx, "X-CSRF-Token": web.login(*USER)}
    r = web.client.post(f"/keys/{roots.id}/revoke", headers=headers)
    assert r.status_code == 404
    key = account_store.get_key(engine(web), key_id=roots.id)
    assert key is not None and key.revoked_at is None
    assert web.client.post("/keys/key_000000000000/revoke", headers=headers).status_code == 404
    own = web.client.get("/keys")
    assert rendered(own).context["keys"] == [], "the list shows only your own keys"
    assert roots.id not in own.text


@pytest.mark.shares_app
def test_writes_need_the_right_csrf_token(web: Web) -> None:
    web.login(*USER)
    for headers in ({}, {"X-CSRF-Token": "forged"}):
        r = web.client.post("/keys", data={"name": "k", "scopes": "runs.create"}, headers=headers)
        assert r.status_code == 403
    assert ann_keys(web) == []


def test_the_form_field_token_works_without_javascript(web: Web) -> None:
    token = web.login(*USER)
    r = web.client.post("/keys", data={"name": "k", "scopes": "runs.create", "csrf_token": token})
    assert r.status_code == 201 and RAW_KEY.search(r.text)

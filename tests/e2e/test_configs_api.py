"""The configurations JSON API against a real server: accounts' scopes kept apart, the admin's
explicit (audited) access, revision checks, validation naming the fields, export/import and
their refusals, secrets kept out of responses and the audit log, and the `configs` key scope."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from sqlmodel import Session, col, select

from tests.configs.project import SETTINGS_PROJECT, write_settings_project
from tests.e2e.server import HELLO, LiveServer
from tests.support.inprocess import make_in_process_server
from webui.store.db import make_engine
from webui.store.models import AuditEvent

# The end-to-end pass of configurations (revisions, scopes, secrets) on PostgreSQL too
# (tests/pg.py).
pytestmark = pytest.mark.dialects

SECRET = "s3cr3t-token-value-7f1e"
BASE = f"/api/workflows/{SETTINGS_PROJECT}/configs"


class Api:
    """An HTTP client of the server with one credential."""

    def __init__(self, server: LiveServer, key: str) -> None:
        self.client = httpx2.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    def __call__(self, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        return self.client.request(method, path, **kwargs)

    def close(self) -> None:
        self.client.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_database_url: str | None) -> Iterator[LiveServer]:
    server = make_in_process_server(tmp_path_factory.mktemp("configs-api"), server_database_url)
    server.add_project(write_settings_project(server.projects / "settings"), SETTINGS_PROJECT)
    with server.running():
        yield server


def api_for(server: LiveServer, user: str, **kwargs: Any) -> Api:
    return Api(server, server.create_key(user, scopes=kwargs.pop("scopes", ["configs"]), **kwargs))


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> Iterator[Api]:
    api = api_for(server, "alice")
    yield api
    api.close()


@pytest.fixture(scope="module")
def bob(server: LiveServer) -> Iterator[Api]:
    api = api_for(server, "bob")
    yield api
    api.close()


@pytest.fixture(scope="module")
def admin(server: LiveServer) -> Iterator[Api]:
    api = Api(server, server.admin_key)
    yield api
    api.close()


def audit_rows(server: LiveServer, prefix: str = "config.") -> list[AuditEvent]:
    engine = make_engine(server.store_url)
    try:
        with Session(engine) as s:
            rows = s.exec(select(AuditEvent).order_by(col(AuditEvent.id))).all()
            return [r for r in rows if r.event.startswith(prefix)]
    finally:
        engine.dispose()


def error(response: httpx2.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


def create(api: Api, name: str, values: dict[str, Any], **params: str) -> httpx2.Response:
    r = api("POST", BASE, json={"name": name, "values": values}, params=params)
    assert r.status_code == 201, r.text
    return r


def test_each_account_sees_only_its_own_configurations(
    server: LiveServer, alice: Api, bob: Api, admin: Api
) -> None:
    created = create(alice, "iso-prod", {"endpoint": "https://alice.example", "token": SECRET})
    assert created.headers["etag"] == '"1"'
    assert created.headers["location"] == f"{BASE}/iso-prod"
    assert created.json()["data"]["values"]["token"] == "********"

    listed = alice("GET", BASE).json()["data"]
    assert listed["scope"] == "account alice"
    assert listed["active"] == "default"
    assert [f["name"] for f in listed["fields"]] == [
        "endpoint",
        "threshold",
        "dry_run",
        "region",
        "tags",
        "start",
        "token",
    ]
    assert {c["name"] for c in listed["configurations"]} >= {"default", "iso-prod"}

    bobs = bob("GET", BASE).json()["data"]
    assert bobs["scope"] == "account bob"
    assert "iso-prod" not in {c["name"] for c in bobs["configurations"]}
    missing = bob("GET", f"{BASE}/iso-prod")
    assert missing.status_code == 404 and error(missing)["code"] == "config_not_found"

    refused = bob("GET", f"{BASE}/iso-prod", params={"account": "alice"})
    assert refused.status_code == 403
    assert "administrator" in error(refused)["message"]
    refused_write = bob("POST", BASE, json={"name": "x", "values": {}}, params={"account": "alice"})
    assert refused_write.status_code == 403

    seen = admin("GET", f"{BASE}/iso-prod", params={"account": "alice"})
    assert seen.status_code == 200, seen.text
    assert seen.json()["data"]["values"] == {"endpoint": "https://alice.example", "token": "********"}
    changed = admin(
        "PATCH",
        f"{BASE}/iso-prod",
        params={"account": "alice"},
        headers={"If-Match": seen.headers["etag"]},
        json={"values": {"threshold": 9}},
    )
    assert changed.status_code == 200, changed.text
    row = [r for r in audit_rows(server) if r.event == "config.updated" and r.target == "iso-prod"][-1]
    assert row.details is not None and row.actor == "admin" and row.details["scope"] == "account alice"
    assert row.details["fields"] == ["threshold"] and row.source == "api"

    # The admin key's own scope is the admin principal's, not alice's.
    assert "iso-prod" not in {c["name"] for c in admin("GET", BASE).json()["data"]["configurations"]}
    assert admin("GET", BASE).json()["data"]["scope"] == "admin"
    unknown = admin("GET", BASE, params={"account": "nobody-here"})
    assert unknown.status_code == 404


def test_writes_state_the_revision_they_read(alice: Api) -> None:
    create(alice, "rev", {"threshold": 1})
    missing = alice("PATCH", f"{BASE}/rev", json={"values": {"threshold": 2}})
    assert missing.status_code == 428
    assert error(missing)["code"] == "precondition_required"
    assert "If-Match" in error(missing)["message"]
    for method, path, body in (
        ("POST", f"{BASE}/rev/rename", {"newName": "rev2"}),
        ("DELETE", f"{BASE}/rev", None),
    ):
        assert alice(method, path, json=body).status_code == 428

    ok = alice("PATCH", f"{BASE}/rev", headers={"If-Match": '"1"'}, json={"values": {"threshold": 2}})
    assert ok.status_code == 200 and ok.headers["etag"] == '"2"'

    stale = alice("PATCH", f"{BASE}/rev", headers={"If-Match": '"1"'}, json={"values": {"threshold": 5}})
    assert stale.status_code == 409
    body = error(stale)
    assert body["code"] == "config_conflict"
    assert (body["current"], body["read"], body["name"]) == (2, 1, "rev")
    assert "revision 2" in body["message"] and "revision 1" in body["message"]
    assert alice("GET", f"{BASE}/rev").json()["data"]["values"]["threshold"] == 2

    assert (
        alice("POST", f"{BASE}/rev/rename", headers={"If-Match": '"1"'}, json={"newName": "r"}).status_code
        == 409
    )
    assert alice("DELETE", f"{BASE}/rev", headers={"If-Match": '"1"'}).status_code == 409
    bad = alice("PATCH", f"{BASE}/rev", headers={"If-Match": "yesterday"}, json={"values": {}})
    assert bad.status_code == 400 and "If-Match" in error(bad)["message"]

    renamed = alice("POST", f"{BASE}/rev/rename", headers={"If-Match": '"2"'}, json={"newName": "rev2"})
    assert renamed.status_code == 200 and renamed.json()["data"]["name"] == "rev2"
    etag = renamed.headers["etag"]
    activated = alice("POST", f"{BASE}/rev2/activate")
    assert activated.status_code == 200 and activated.json()["data"]["active"] is True
    assert alice("GET", BASE).json()["data"]["active"] == "rev2"
    assert alice("POST", f"{BASE}/default/activate").status_code == 200
    deleted = alice(
        "DELETE", f"{BASE}/rev2", headers={"If-Match": alice("GET", f"{BASE}/rev2").headers["etag"]}
    )
    assert deleted.status_code == 204, (deleted.text, etag)
    assert alice("GET", f"{BASE}/rev2").status_code == 404


def test_invalid_values_are_refused_naming_each_field(alice: Api) -> None:
    r = alice(
        "POST",
        BASE,
        json={"name": "bad", "values": {"threshold": "many", "region": "mars", "nope": 1, "start": "soon"}},
    )
    assert r.status_code == 422
    body = error(r)
    assert body["code"] == "config_invalid"
    assert set(body["fields"]) == {"threshold", "region", "nope", "start"}
    assert "threshold" in body["message"]
    assert alice("GET", f"{BASE}/bad").status_code == 404

    create(alice, "val", {})
    r = alice("PATCH", f"{BASE}/val", headers={"If-Match": '"1"'}, json={"unset": ["endpoint"], "values": {}})
    assert r.status_code == 200  # the default stands in for a required field left unset
    r = alice("PATCH", f"{BASE}/val", headers={"If-Match": '"2"'}, json={"values": {"tags": ["a", "z"]}})
    assert r.status_code == 422 and list(error(r)["fields"]) == ["tags"]
    r = alice("PATCH", f"{BASE}/val", headers={"If-Match": '"2"'}, content=b"{not json")
    assert r.status_code == 400 and error(r)["code"] == "config_refused"
    r = alice("POST", BASE, json={"name": "../etc", "values": {}})
    assert r.status_code == 400 and "not valid" in error(r)["message"]
    r = alice("POST", BASE, json={"name": "val", "values": {}})
    assert r.status_code == 409 and error(r)["current"] == 2


def test_export_and_import_round_trip_and_refusals(server: LiveServer, alice: Api, bob: Api) -> None:
    create(bob, "exp-a", {"threshold": 7, "token": SECRET, "tags": ["a", "b"]})
    create(bob, "exp-b", {"dry_run": True})
    exported = bob("GET", f"{BASE}/export")
    assert exported.status_code == 200
    assert exported.headers["content-disposition"].startswith("attachment;")
    assert exported.headers["cache-control"] == "no-store"
    doc = exported.json()
    assert doc["format"] == "steamharness.configurations" and doc["projectId"] == SETTINGS_PROJECT
    assert doc["secretsIncluded"] is False and SECRET not in exported.text
    entry = next(c for c in doc["configurations"] if c["name"] == "exp-a")
    assert entry["omittedSecrets"] == ["token"] and entry["revision"] == 1

    with_secrets = bob("POST", f"{BASE}/export", params={"secrets": "true"})
    assert SECRET in with_secrets.text
    exports = [r for r in audit_rows(server) if r.event == "config.exported" and r.actor == "user:bob"]
    assert [(r.details or {})["with_secrets"] for r in exports] == [False, True]

    # bob changes exp-a after the export: importing the old document is a conflict…
    assert (
        bob(
            "PATCH", f"{BASE}/exp-a", headers={"If-Match": '"1"'}, json={"values": {"threshold": 8}}
        ).status_code
        == 200
    )
    conflict = bob("POST", f"{BASE}/import", json=doc)
    assert conflict.status_code == 409
    assert "exp-a" in error(conflict)["message"] and "force" in error(conflict)["message"]
    assert bob("GET", f"{BASE}/exp-a").json()["data"]["values"]["threshold"] == 8
    # …unless forced; the secret the document omits stays as stored.
    forced = bob("POST", f"{BASE}/import", params={"force": "true"}, json=doc)
    assert forced.status_code == 200, forced.text
    after = bob("GET", f"{BASE}/exp-a").json()["data"]
    assert after["values"]["threshold"] == 7 and after["values"]["token"] == "********"

    refusals = {
        "formatVersion": ({**doc, "formatVersion": 99}, "version"),
        "projectId": ({**doc, "projectId": HELLO}, HELLO),
        "format": ({**doc, "format": "other"}, "format"),
    }
    for label, (bad, word) in refusals.items():
        r = bob("POST", f"{BASE}/import", json=bad)
        assert r.status_code == 400, label
        assert error(r)["code"] == "config_refused" and word in error(r)["message"], label
    invalid = json.loads(json.dumps(doc))
    next(c for c in invalid["configurations"] if c["name"] == "exp-b")["values"]["dry_run"] = "yes"
    r = bob("POST", f"{BASE}/import", params={"force": "true"}, json=invalid)
    assert r.status_code == 422 and list(error(r)["fields"]) == ["exp-b.dry_run"]
    r = bob("POST", f"{BASE}/import", params={"mode": "sideways"}, json=doc)
    assert r.status_code == 400 and "sideways" in error(r)["message"]

    # Into alice's scope (a fresh copy of bob's, secrets included): replace drops her others.
    create(alice, "only-alice", {})
    secret_doc = with_secrets.json()
    r = alice("POST", f"{BASE}/import", params={"mode": "replace", "force": "true"}, json=secret_doc)
    assert r.status_code == 200, r.text
    names = {c["name"] for c in alice("GET", BASE).json()["data"]["configurations"]}
    assert names == {"default", "exp-a", "exp-b"}
    assert SECRET not in r.text
    imported = [r for r in audit_rows(server) if r.event == "config.imported"]
    details = imported[-1].details
    assert details is not None and details["mode"] == "replace" and details["scope"] == "account alice"


def test_secrets_never_appear_in_responses_or_the_audit_log(server: LiveServer, alice: Api) -> None:
    secret = "another-secret-9d2c"
    responses = [create(alice, "sec", {"token": secret})]
    responses.append(alice("GET", f"{BASE}/sec"))
    responses.append(alice("GET", BASE))
    responses.append(
        alice("PATCH", f"{BASE}/sec", headers={"If-Match": '"1"'}, json={"values": {"token": secret + "2"}})
    )
    responses.append(
        alice("PATCH", f"{BASE}/sec", headers={"If-Match": '"2"'}, json={"values": {"token": "********"}})
    )
    responses.append(alice("GET", f"{BASE}/export"))
    for r in responses:
        assert r.status_code < 300, r.text
        assert secret not in r.text
    details = json.dumps([r.details for r in audit_rows(server, "")])
    assert secret not in details and SECRET not in details


def test_keys_need_the_configs_scope_and_the_project(server: LiveServer) -> None:
    runs_only = api_for(server, "carol", scopes=["runs.create"])
    other_project = api_for(server, "carol", projects=[HELLO])
    try:
        r = runs_only("GET", BASE)
        assert r.status_code == 403 and "configs scope" in error(r)["message"]
        r = other_project("GET", BASE)
        assert r.status_code == 404 and error(r)["code"] == "not_found"
        r = other_project("GET", "/api/workflows/00000000-0000-4000-8000-000000000000/configs")
        assert r.status_code == 404
        r = other_project("GET", f"/api/workflows/{HELLO}/configs")
        assert r.status_code == 200 and r.json()["data"]["fields"] == []
    finally:
        runs_only.close()
        other_project.close()
    no_key = httpx2.get(f"{server.base_url}{BASE}", timeout=30)
    assert no_key.status_code == 401

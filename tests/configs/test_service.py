"""The configuration service over a real store (SQLite and PostgreSQL): scopes, revisions,
secrets, export/import."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from tests import prepared
from webui.audit.log import AuditLog
from webui.configs.model import MASK, ConfigPlace, Who
from webui.configs.secrets import SecretBox
from webui.configs.service import ConfigService
from webui.errors import (
    ConfigurationConflict,
    ConfigurationInvalid,
    ConfigurationNotFound,
    ConfigurationRefused,
)
from webui.store.configs import Scope
from webui.store.db import make_engine
from webui.store.models import AuditEvent, ProjectConfig
from webui.workflows.configuration import parse_config_fields

# The configuration store's queries and revisions: both dialects (tests/pg.py).
pytestmark = pytest.mark.dialects

PROJECT = "5f0c8a52-3a55-4f7b-9d0e-0a1b2c3d4e5f"
FIELDS = parse_config_fields(
    {
        "configuration": {
            "fields": [
                {"name": "endpoint", "type": "string", "required": True, "default": "https://a.example"},
                {"name": "threshold", "type": "number", "default": 3},
                {"name": "dry_run", "type": "boolean"},
                {"name": "region", "type": "select", "options": ["eu", "us"]},
                {"name": "tags", "type": "multiselect", "options": ["a", "b", "c"]},
                {"name": "start", "type": "date"},
                {"name": "token", "type": "secret"},
            ]
        }
    },
    "package.json",
)
WHO = Who(actor="tester")


@pytest.fixture
def service(database_url: str, tmp_path: Path) -> Iterator[ConfigService]:
    if database_url.startswith("sqlite:"):
        prepared.copy_prepared("store", tmp_path / "data")  # migrated once per session
    engine = make_engine(database_url)
    yield ConfigService(engine, box=SecretBox(os.urandom(32)), audit=AuditLog())
    engine.dispose()


def place(owner_id: int = 1, fields: Any = FIELDS) -> ConfigPlace:
    return ConfigPlace(scope=Scope(PROJECT, owner_id), fields=fields, owner=f"account {owner_id}")


def audit_details(service: ConfigService) -> list[tuple[str, Any]]:
    with Session(service.engine) as s:
        rows = s.exec(select(AuditEvent).order_by(col(AuditEvent.id))).all()
        return [(r.event, r.details) for r in rows]


def test_every_scope_starts_with_an_active_default_holding_the_field_defaults(service):
    [default] = service.list(place())
    assert (default.name, default.revision, default.active) == ("default", 1, True)
    assert default.values == {"endpoint": "https://a.example", "threshold": 3}
    assert not default.needs_update


def test_scopes_are_apart(service):
    service.create(place(1), "prod", {"threshold": 9}, WHO)
    assert [c.name for c in service.list(place(1))] == ["default", "prod"]
    assert [c.name for c in service.list(place(2))] == ["default"]
    with pytest.raises(ConfigurationNotFound):
        service.show(place(2), "prod")


def test_every_bad_value_is_named(service):
    with pytest.raises(ConfigurationInvalid) as caught:
        service.create(
            place(),
            "bad",
            {
                "threshold": "x",
                "dry_run": 1,
                "region": "mars",
                "tags": ["a", "z"],
                "start": "2026-13-01",
                "nope": 1,
            },
            WHO,
        )
    assert set(caught.value.fields) == {"threshold", "dry_run", "region", "tags", "start", "nope"}
    assert "unknown field" in caught.value.fields["nope"]
    assert [c.name for c in service.list(place())] == ["default"]


def test_a_write_states_the_revision_it_read(service):
    first = service.set(place(), "default", revision=1, values={"threshold": 5}, who=WHO)
    assert first.revision == 2
    with pytest.raises(ConfigurationConflict) as caught:
        service.set(place(), "default", revision=1, values={"threshold": 6}, who=WHO)
    assert (caught.value.read, caught.value.current) == (1, 2)
    assert "revision 2" in caught.value.message and "revision 1" in caught.value.message
    assert service.show(place(), "default").values["threshold"] == 5


def test_secrets_are_sealed_masked_and_kept_when_the_mask_is_written_back(service):
    view = service.set(place(), "default", revision=1, values={"token": "s3cr3t"}, who=WHO)
    assert view.values["token"] == MASK
    with Session(service.engine) as s:
        stored = s.exec(select(ProjectConfig)).one().values["token"]
    assert "s3cr3t" not in stored and stored.startswith("enc:v1:")
    view = service.set(place(), "default", revision=2, values={"token": MASK, "threshold": 1}, who=WHO)
    assert service.snapshot(place()).values["token"] == "s3cr3t"
    assert all("s3cr3t" not in repr(d) for _, d in audit_details(service))
    with pytest.raises(ConfigurationInvalid):
        service.create(place(), "other", {"token": MASK}, WHO)


def test_rename_copy_delete_activate(service):
    service.create(place(), "staging", {"threshold": 2}, WHO)
    copy = service.copy(place(), "staging", "staging2", WHO)
    assert copy.values["threshold"] == 2 and copy.revision == 1
    service.activate(place(), "staging2", WHO)
    renamed = service.rename(place(), "staging2", "prod", revision=1, who=WHO)
    assert renamed.active and renamed.revision == 2
    with pytest.raises(ConfigurationConflict):
        service.rename(place(), "prod", "staging", revision=2, who=WHO)
    with pytest.raises(ConfigurationRefused):
        service.delete(place(), "default", revision=1, who=WHO)
    with pytest.raises(ConfigurationRefused):
        service.rename(place(), "default", "x", revision=1, who=WHO)
    with pytest.raises(ConfigurationRefused):
        service.create(place(), "../evil", {}, WHO)
    service.delete(place(), "prod", revision=2, who=WHO)
    assert service.active(place()).name == "default"
    assert [e for e, _ in audit_details(service)] == [
        "config.created",
        "config.copied",
        "config.activated",
        "config.renamed",
        "config.deleted",
    ]


def test_a_field_change_makes_a_configuration_need_update_and_refuses_it_for_runs(service):
    service.set(place(), "default", revision=1, values={"region": "eu"}, who=WHO)
    changed = parse_config_fields(
        {
            "configuration": {
                "fields": [
                    {"name": "endpoint", "type": "string"},
                    {"name": "region", "type": "number"},
                    {"name": "api_key", "type": "secret", "required": True},
                ]
            }
        },
        "package.json",
    )
    view = service.show(place(fields=changed), "default")
    assert view.needs_update and {"region", "api_key", "threshold"} <= set(view.problems)
    with pytest.raises(ConfigurationInvalid) as caught:
        service.snapshot(place(fields=changed))
    assert caught.value.code == "config_invalid" and "api_key" in caught.value.fields


def test_snapshot_gives_every_field_with_defaults(service):
    snap = service.snapshot(place())
    assert (snap.name, snap.revision) == ("default", 1)
    assert snap.values == {
        "endpoint": "https://a.example",
        "threshold": 3,
        "dry_run": None,
        "region": None,
        "tags": None,
        "start": None,
        "token": None,
    }


def test_export_import_round_trip_and_refusals(service):
    service.set(place(), "default", revision=1, values={"token": "t0p"}, who=WHO)
    service.create(place(), "prod", {"threshold": 7, "token": "p"}, WHO)
    service.activate(place(), "prod", WHO)
    doc = service.export(place(), secrets=False, who=WHO)
    assert doc["active"] == "prod" and doc["secretsIncluded"] is False
    assert all("token" not in c["values"] for c in doc["configurations"])
    assert "t0p" not in repr(doc)
    with_secrets = service.export(place(), secrets=True, who=WHO)
    assert {c["name"]: c["values"].get("token") for c in with_secrets["configurations"]} == {
        "default": "t0p",
        "prod": "p",
    }
    # Into another scope: everything arrives, secrets included.
    service.import_(place(2), with_secrets, who=WHO)
    assert service.snapshot(place(2)).values["token"] == "p"
    assert service.active(place(2)).name == "prod"
    # Same scope, unchanged since export: merge applies, secrets omitted are kept.
    service.import_(place(), doc, who=WHO)
    assert service.snapshot(place()).values["token"] == "p"
    # Changed since export: refused unless forced.
    service.set(place(), "prod", revision=2, values={"threshold": 8}, who=WHO)
    with pytest.raises(ConfigurationConflict) as caught:
        service.import_(place(), doc, who=WHO)
    assert "force" in caught.value.message
    service.import_(place(), doc, force=True, who=WHO)
    assert service.show(place(), "prod").values["threshold"] == 7
    # Replace removes what the document does not name (never default).
    service.create(place(), "extra", {}, WHO)
    service.import_(
        place(),
        service.export(place(), secrets=False, who=WHO) | {"configurations": [], "active": "default"},
        mode="replace",
        who=WHO,
    )
    assert [c.name for c in service.list(place())] == ["default"]
    for bad, message in [
        ([], "JSON object"),
        ({**doc, "format": "x"}, "format"),
        ({**doc, "formatVersion": 2}, "version 2"),
        ({**doc, "projectId": "other"}, "project"),
        ({**doc, "configurations": [{"name": "a"}, {"name": "a"}]}, "twice"),
        ({**doc, "configurations": [{"name": "a b"}]}, "not valid"),
    ]:
        with pytest.raises(ConfigurationRefused, match=message):
            service.import_(place(), bad, who=WHO)
    with pytest.raises(ConfigurationInvalid) as invalid:
        service.import_(
            place(), {**doc, "configurations": [{"name": "x", "values": {"threshold": "no"}}]}, who=WHO
        )
    assert list(invalid.value.fields) == ["x.threshold"]
    with pytest.raises(ConfigurationRefused):
        service.import_(place(), doc, mode="upsert", who=WHO)
    events = [e for e, d in audit_details(service)]
    assert events.count("config.exported") == 3
    exported = [d for e, d in audit_details(service) if e == "config.exported"]
    assert [d["with_secrets"] for d in exported] == [False, True, False]


def test_a_secret_sealed_for_one_scope_does_not_open_in_another(service):
    service.set(place(1), "default", revision=1, values={"token": "mine"}, who=WHO)
    with Session(service.engine) as s:
        sealed = s.exec(select(ProjectConfig)).one().values["token"]
    with pytest.raises(ValueError):
        service.box.open(sealed, binding=f"{PROJECT}/2/token")


def test_a_sealed_secret_is_never_quoted_when_its_field_changes_type(service):
    service.set(place(), "default", revision=1, values={"token": "plain-secret"}, who=WHO)
    changed = parse_config_fields(
        {"configuration": {"fields": [{"name": "token", "type": "select", "options": ["a"]}]}}, "package.json"
    )
    view = service.show(place(fields=changed), "default")
    assert "enc:v1:" not in view.problems["token"] and MASK in view.problems["token"]

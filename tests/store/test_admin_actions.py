"""Operator actions (webui.admin): each change commits together with its audit event, so a
failing audit write leaves no change behind; bad account input is a field error."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from tests.conftest import EXAMPLES
from webui import admin
from webui.account_rules import InvalidAccount
from webui.audit.log import AuditLog
from webui.projects.registry import ProjectRegistry
from webui.store import accounts as account_store
from webui.store import projects as project_store
from webui.store.db import make_engine
from webui.store.models import AuditEvent


class AuditDown(AuditLog):
    """An audit log whose every write fails, as a full disk or a lost connection would."""

    def record(self, session: Any, event: str, **fields: Any) -> None:
        raise RuntimeError("the audit write failed")


@pytest.fixture
def store(tmp_path: Path, database_url: str) -> Iterator[tuple[Engine, ProjectRegistry, str]]:
    engine = make_engine(database_url)
    registry = ProjectRegistry(engine, tmp_path / "versions")
    project, _ = registry.register(EXAMPLES / "hello")
    admin.create_user(engine, name="ann", admin=False, password=None)
    yield engine, registry, project.id
    engine.dispose()


def events(engine: Engine) -> list[str]:
    with Session(engine) as s:
        return list(s.exec(select(AuditEvent.event).order_by(col(AuditEvent.id))))


def ann_id(engine: Engine) -> int:
    account = account_store.get_account(engine, name="ann")
    assert account is not None and account.id is not None
    return account.id


def test_a_grant_whose_audit_write_fails_leaves_no_grant(store: tuple[Engine, ProjectRegistry, str]) -> None:
    engine, registry, project_id = store
    before = events(engine)
    with pytest.raises(RuntimeError, match="audit write failed"):
        admin.grant_projects(engine, user="ann", projects=[project_id], registry=registry, audit=AuditDown())
    assert account_store.project_grants(engine, account_id=ann_id(engine)) == set()
    assert events(engine) == before
    assert admin.grant_projects(engine, user="ann", projects=[project_id], registry=registry) == [project_id]
    assert account_store.project_grants(engine, account_id=ann_id(engine)) == {project_id}
    assert events(engine) == [*before, "permission.granted"]


def test_an_existing_grant_is_not_granted_or_audited_again(
    store: tuple[Engine, ProjectRegistry, str],
) -> None:
    engine, registry, project_id = store
    admin.grant_projects(engine, user="ann", projects=[project_id], registry=registry)
    before = events(engine)
    assert (
        admin.grant_projects(engine, user="ann", projects=[project_id], registry=registry, audit=AuditDown())
        == []
    )
    assert events(engine) == before


ACTIONS: dict[str, Callable[[Engine, str, AuditLog], object]] = {
    "create_user": lambda e, p, a: admin.create_user(e, name="bob", admin=False, password=None, audit=a),
    "create_key": lambda e, p, a: admin.create_key(
        e, user="ann", projects=None, scopes=None, name="k", audit=a
    ),
    "set_disabled": lambda e, p, a: admin.set_disabled(
        e, account_id=ann_id(e), disabled=True, actor="t", audit=a
    ),
    "set_project_grants": lambda e, p, a: admin.set_project_grants(
        e, account_id=ann_id(e), projects={p}, actor="t", audit=a
    ),
    "set_project_limits": lambda e, p, a: admin.set_project_limits(
        e, project_id=p, run_gate_open=False, max_running=2, max_queued=None, actor="t", audit=a
    ),
}


def state(engine: Engine, project_id: str) -> tuple[object, ...]:
    account = account_store.get_account(engine, name="ann")
    project = project_store.get_project(engine, project_id=project_id)
    assert account is not None and project is not None
    return (
        [a.name for a in account_store.list_accounts(engine)],
        len(account_store.list_keys(engine)),
        account.disabled,
        account_store.project_grants(engine, account_id=ann_id(engine)),
        (project.run_gate_open, project.max_running, project.max_queued),
        events(engine),
    )


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_every_action_commits_with_its_audit_event_or_not_at_all(
    store: tuple[Engine, ProjectRegistry, str], action: str
) -> None:
    engine, _, project_id = store
    before = state(engine, project_id)
    with pytest.raises(RuntimeError, match="audit write failed"):
        ACTIONS[action](engine, project_id, AuditDown())
    assert state(engine, project_id) == before
    ACTIONS[action](engine, project_id, AuditLog())
    after = state(engine, project_id)
    assert after != before and len(after[-1]) == len(before[-1]) + 1  # type: ignore[arg-type]


def test_revoking_a_key_commits_with_its_audit_event(store: tuple[Engine, ProjectRegistry, str]) -> None:
    engine, _, _ = store
    _, key = admin.create_key(engine, user="ann", projects=None, scopes=None, name="k")
    with pytest.raises(RuntimeError, match="audit write failed"):
        admin.revoke_key(engine, key_id=key.id, audit=AuditDown())
    row = account_store.get_key(engine, key_id=key.id)
    assert row is not None and row.revoked_at is None
    admin.revoke_key(engine, key_id=key.id)
    assert events(engine)[-1] == "key.revoked"
    admin.revoke_key(engine, key_id=key.id, audit=AuditDown())  # already revoked: nothing to write


@pytest.mark.parametrize(
    ("name", "password", "errors"),
    [
        ("", None, {"name": "Use 1–64 letters, digits and . _ - @"}),
        ("bad name!", None, {"name": "Use 1–64 letters, digits and . _ - @"}),
        ("x" * 65, None, {"name": "Use 1–64 letters, digits and . _ - @"}),
        ("ann", None, {"name": "A user named ann already exists."}),
        ("dan", "short", {"password": "Use at least 8 characters, or none for an API-key-only account."}),
        ("dan", "p" * 1025, {"password": "Use at most 1024 characters."}),
        (
            "bad name!",
            "",
            {
                "name": "Use 1–64 letters, digits and . _ - @",
                "password": "Use at least 8 characters, or none for an API-key-only account.",
            },
        ),
    ],
)
def test_bad_account_input_is_a_field_error_and_creates_nothing(
    store: tuple[Engine, ProjectRegistry, str], name: str, password: str | None, errors: dict[str, str]
) -> None:
    engine, _, _ = store
    before = events(engine)
    with pytest.raises(InvalidAccount) as caught:
        admin.create_user(engine, name=name, admin=False, password=password)
    assert caught.value.errors == errors and caught.value.status == 422
    assert "\n" not in caught.value.message
    assert [a.name for a in account_store.list_accounts(engine)] == ["ann"]
    assert events(engine) == before

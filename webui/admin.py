"""Operator actions shared by the CLI and the server: accounts, keys, demo set-up.
Each records its audit event in the same transaction as the change."""

from __future__ import annotations

import secrets
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from webui.audit.log import AuditLog
from webui.auth.keys import DEFAULT_SCOPES, new_api_key
from webui.auth.passwords import hash_password
from webui.errors import NotFound, SteamharnessError
from webui.store import accounts as account_store
from webui.store.models import Account, ApiKey, ProjectPermission, ProjectRecord, utcnow
from webui.workflows.registry import ProjectRegistry

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")


def create_user(
    engine: Engine,
    *,
    name: str,
    admin: bool,
    password: str | None,
    actor: str = "cli",
    source: str = "cli",
) -> Account:
    if not name or len(name) > 64 or set(name) - NAME_CHARS:
        raise SteamharnessError(f"user name {name!r}: use 1-64 letters, digits and . _ - @")
    if account_store.get_account(engine, name=name) is not None:
        raise SteamharnessError(f"user {name!r} already exists")
    if password is not None and len(password) < 8:
        raise SteamharnessError("password must have at least 8 characters")
    account = Account(name=name, is_admin=admin, password_hash=hash_password(password) if password else None)
    with Session(engine, expire_on_commit=False) as s:
        s.add(account)
        s.flush()
        AuditLog().record(
            s,
            "user.created",
            actor=actor,
            outcome="ok",
            source=source,
            details={"user": name, "admin": admin},
        )
        s.commit()
    return account


def grant_projects(
    engine: Engine, *, user: str, projects: list[str], registry: ProjectRegistry, actor: str = "cli"
) -> list[str]:
    account = account_store.get_account(engine, name=user)
    if account is None or account.id is None:
        raise NotFound(f"user {user!r} does not exist")
    for project_id in projects:
        registry.record(project_id)
    added = account_store.grant(engine, account_id=account.id, project_ids=projects, granted_by=actor)
    if added:
        with Session(engine) as s:
            AuditLog().record(
                s,
                "permission.granted",
                actor=actor,
                outcome="ok",
                source="cli",
                details={"user": user, "projects": added},
            )
            s.commit()
    return added


def create_key(
    engine: Engine,
    *,
    user: str,
    projects: list[str] | None,
    scopes: list[str] | None,
    name: str | None,
    registry: ProjectRegistry | None = None,
    actor: str = "cli",
    source: str = "cli",
) -> tuple[str, ApiKey]:
    account = account_store.get_account(engine, name=user)
    if account is None or account.id is None:
        raise NotFound(f"user {user!r} does not exist (create it with: steamharness users create {user})")
    if registry is not None:
        for project_id in projects or []:
            registry.record(project_id)
    raw, key = new_api_key(
        account_id=account.id, name=name, scopes=list(scopes or DEFAULT_SCOPES), projects=projects or None
    )
    with Session(engine, expire_on_commit=False) as s:
        s.add(key)
        AuditLog().record(
            s,
            "key.created",
            actor=actor,
            outcome="ok",
            source=source,
            details={"keyId": key.id, "user": user, "scopes": key.scopes, "projects": key.projects},
        )
        s.commit()
    return raw, key


def revoke_key(engine: Engine, *, key_id: str, actor: str = "cli", source: str = "cli") -> ApiKey:
    with Session(engine, expire_on_commit=False) as s:
        key = s.get(ApiKey, key_id)
        if key is None:
            raise NotFound(f"API key {key_id!r} does not exist")
        if key.revoked_at is None:
            key.revoked_at = utcnow()
            s.add(key)
            AuditLog().record(
                s, "key.revoked", actor=actor, outcome="ok", source=source, details={"keyId": key_id}
            )
            s.commit()
        return key


def set_disabled(
    engine: Engine, *, account_id: int, disabled: bool, actor: str, source: str = "cli"
) -> Account:
    """Disable or re-enable an account: its logins and API keys stop (or resume) working."""
    with Session(engine, expire_on_commit=False) as s:
        account = s.get(Account, account_id)
        if account is None:
            raise NotFound(f"user #{account_id} does not exist")
        if account.disabled != disabled:
            account.disabled = disabled
            s.add(account)
            AuditLog().record(
                s,
                "user.disabled" if disabled else "user.enabled",
                actor=actor,
                outcome="ok",
                source=source,
                details={"user": account.name},
            )
            s.commit()
        return account


def set_project_grants(
    engine: Engine, *, account_id: int, projects: set[str], actor: str, source: str = "cli"
) -> tuple[list[str], list[str]]:
    """Make the account's project permissions exactly `projects`; returns (added, removed).
    The grants and their audit events commit together."""
    with Session(engine) as s:
        account = s.get(Account, account_id)
        if account is None:
            raise NotFound(f"user #{account_id} does not exist")
        for project_id in projects:
            if s.get(ProjectRecord, project_id) is None:
                raise NotFound(f"project {project_id!r} is not registered")
        stmt = select(ProjectPermission).where(ProjectPermission.account_id == account_id)
        current = {row.project_id: row for row in s.exec(stmt)}
        added = sorted(projects - current.keys())
        removed = sorted(current.keys() - projects)
        for project_id in added:
            s.add(ProjectPermission(account_id=account_id, project_id=project_id, granted_by=actor))
        for project_id in removed:
            s.delete(current[project_id])
        for event, changed in (("permission.granted", added), ("permission.revoked", removed)):
            if changed:
                AuditLog().record(
                    s,
                    event,
                    actor=actor,
                    outcome="ok",
                    source=source,
                    details={"user": account.name, "projects": changed},
                )
        s.commit()
    return added, removed


def set_project_limits(
    engine: Engine,
    *,
    project_id: str,
    run_gate_open: bool,
    max_running: int | None,
    max_queued: int | None,
    actor: str,
    source: str = "cli",
) -> ProjectRecord:
    """The run gate and queue limits (None: the server default), audited with the change."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(ProjectRecord, project_id)
        if row is None:
            raise NotFound(f"project {project_id!r} is not registered")
        wanted = {"run_gate_open": run_gate_open, "max_running": max_running, "max_queued": max_queued}
        changes = {k: v for k, v in wanted.items() if getattr(row, k) != v}
        if changes:
            for key, value in changes.items():
                setattr(row, key, value)
            s.add(row)
            AuditLog().record(
                s,
                "project.limits_changed",
                actor=actor,
                project_id=project_id,
                outcome="ok",
                source=source,
                details=changes,
            )
            s.commit()
        return row


def setup_demo(engine: Engine, registry: ProjectRegistry, examples: Path) -> tuple[str, str, str]:
    """Register and publish the bundled examples; (re)issue a demo login and key."""
    for folder in sorted(p for p in examples.iterdir() if (p / "package.json").is_file()):
        project, _ = registry.register(folder)
        if project.version and not registry.online_versions(project.id):
            try:
                registry.publish(project.id, project.version, actor="demo")
            except SteamharnessError:
                registry.set_online(project.id, project.version, True)
    password = secrets.token_urlsafe(12)
    account = account_store.get_account(engine, name="demo")
    if account is None:
        account = create_user(engine, name="demo", admin=True, password=password, actor="demo")
    else:
        assert account.id is not None
        account_store.set_password(engine, account_id=account.id, password_hash=hash_password(password))
    raw, _ = create_key(engine, user="demo", projects=None, scopes=None, name="demo", actor="demo")
    return "demo", password, raw

"""Operator actions shared by the CLI and the server: accounts, keys, demo set-up.
Each records its audit event in the same transaction as the change, through the audit log
the caller passes (the server's wakes the live audit tail)."""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from webui.account_rules import InvalidAccount, name_taken, new_account_errors
from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.auth.keys import DEFAULT_SCOPES, KEY_PREFIX, new_api_key, sha256_hex
from webui.auth.passwords import hash_password
from webui.errors import NotFound, NotGranted, SteamharnessError, TooManyKeys
from webui.projects.registry import ProjectRegistry
from webui.store import accounts as account_store
from webui.store import projects as project_store
from webui.store.models import Account, ApiKey, ProjectRecord

# For callers without an event hub (tests, tools): audit events are written all the same.
PLAIN_AUDIT = AuditLog()
DEFAULT_MAX_KEYS = 25  # Settings.max_keys_per_account's default


def create_user(
    engine: Engine,
    *,
    name: str,
    admin: bool,
    password: str | None,
    actor: str = "cli",
    source: str = "cli",
    audit: AuditLog = PLAIN_AUDIT,
) -> Account:
    """Raises InvalidAccount (field errors) for a bad or taken name or a bad password."""
    errors = new_account_errors(name, password)
    if "name" not in errors and account_store.get_account(engine, name=name) is not None:
        errors["name"] = name_taken(name)
    if errors:
        raise InvalidAccount(errors)
    account = Account(name=name, is_admin=admin, password_hash=hash_password(password) if password else None)
    details = {"user": name, "admin": admin}
    try:
        return account_store.add_account(
            engine,
            account=account,
            audit=lambda s: audit.record(
                s, AuditName.USER_CREATED, actor=actor, outcome="ok", source=source, details=details
            ),
        )
    except IntegrityError:  # created by someone else a moment ago
        raise InvalidAccount({"name": name_taken(name)}) from None


def grant_projects(
    engine: Engine,
    *,
    user: str,
    projects: list[str],
    registry: ProjectRegistry,
    actor: str = "cli",
    source: str = "cli",
    audit: AuditLog = PLAIN_AUDIT,
) -> list[str]:
    """Add run permissions; the new grants and their audit event commit together."""
    account = account_store.get_account(engine, name=user)
    if account is None or account.id is None:
        raise NotFound(f"user {user!r} does not exist")
    for project_id in projects:
        registry.record(project_id)

    def record(s: Session, added: list[str]) -> None:
        audit.record(
            s,
            AuditName.PERMISSION_GRANTED,
            actor=actor,
            outcome="ok",
            source=source,
            details={"user": user, "projects": added},
        )

    return account_store.grant(
        engine, account_id=account.id, project_ids=projects, granted_by=actor, audit=record
    )


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
    audit: AuditLog = PLAIN_AUDIT,
    max_keys: int = DEFAULT_MAX_KEYS,
) -> tuple[str, ApiKey]:
    """A new API key of `user`: refused (`too_many_keys`) when the account already holds
    `max_keys` live keys (revoked ones do not count), counted as the key is stored."""
    account = account_store.get_account(engine, name=user)
    if account is None or account.id is None:
        raise NotFound(f"user {user!r} does not exist (create it with: steamharness users create {user})")
    names: dict[str, str] = {}
    if registry is not None:
        for project_id in projects or []:
            names[project_id] = registry.record(project_id).name
    if not account.is_admin and projects:
        granted = account_store.project_grants(engine, account_id=account.id)
        missing = [p for p in dict.fromkeys(projects) if p not in granted]
        if missing:
            which = ", ".join(f"{names[p]} ({p})" if p in names else p for p in missing)
            flags = " ".join(f"--project {p}" for p in missing)
            raise NotGranted(
                f"user {user!r} has no run permission on project(s) {which}, so the key would be "
                f"refused there; grant it first: steamharness users grant {user} {flags}"
            )
    raw, key = new_api_key(
        account_id=account.id, name=name, scopes=list(scopes or DEFAULT_SCOPES), projects=projects or None
    )
    details = {"keyId": key.id, "user": user, "scopes": key.scopes, "projects": key.projects}
    try:
        account_store.add_key(
            engine,
            key=key,
            audit=lambda s: audit.record(
                s, AuditName.KEY_CREATED, actor=actor, outcome="ok", source=source, details=details
            ),
            cap=max_keys,
        )
    except account_store.KeysFull:
        raise TooManyKeys(
            f"too_many_keys: user {user!r} already holds {max_keys} live API keys, the most one"
            " account may hold (STEAMHARNESS_MAX_KEYS_PER_ACCOUNT); revoke one first (steamharness"
            " keys revoke KEY_ID, or the API keys page)",
            limit=max_keys,
        ) from None
    return raw, key


def revoke_key(
    engine: Engine, *, key_id: str, actor: str = "cli", source: str = "cli", audit: AuditLog = PLAIN_AUDIT
) -> ApiKey:
    key = account_store.revoke_key(
        engine,
        key_id=key_id,
        audit=lambda s: audit.record(
            s, AuditName.KEY_REVOKED, actor=actor, outcome="ok", source=source, details={"keyId": key_id}
        ),
    )
    if key is None:
        raise NotFound(f"API key {key_id!r} does not exist")
    return key


def set_disabled(
    engine: Engine,
    *,
    account_id: int,
    disabled: bool,
    actor: str,
    source: str = "cli",
    audit: AuditLog = PLAIN_AUDIT,
) -> Account:
    """Disable or re-enable an account: its logins and API keys stop (or resume) working."""

    def record(s: Session, account: Account) -> None:
        audit.record(
            s,
            AuditName.USER_DISABLED if disabled else AuditName.USER_ENABLED,
            actor=actor,
            outcome="ok",
            source=source,
            details={"user": account.name},
        )

    account = account_store.set_disabled(engine, account_id=account_id, disabled=disabled, audit=record)
    if account is None:
        raise NotFound(f"user #{account_id} does not exist")
    return account


def set_project_grants(
    engine: Engine,
    *,
    account_id: int,
    projects: set[str],
    actor: str,
    source: str = "cli",
    audit: AuditLog = PLAIN_AUDIT,
) -> tuple[list[str], list[str]]:
    """Make the account's project permissions exactly `projects`; returns (added, removed).
    The grants and their audit events commit together."""
    account = account_store.get_account_by_id(engine, account_id=account_id)
    if account is None:
        raise NotFound(f"user #{account_id} does not exist")
    for project_id in projects:
        if project_store.get_project(engine, project_id=project_id) is None:
            raise NotFound(f"project {project_id!r} is not registered")

    def record(s: Session, added: list[str], removed: list[str]) -> None:
        for event, changed in (
            (AuditName.PERMISSION_GRANTED, added),
            (AuditName.PERMISSION_REVOKED, removed),
        ):
            if changed:
                audit.record(
                    s,
                    event,
                    actor=actor,
                    outcome="ok",
                    source=source,
                    details={"user": account.name, "projects": changed},
                )

    return account_store.set_grants(
        engine, account_id=account_id, project_ids=projects, granted_by=actor, audit=record
    )


def set_project_limits(
    engine: Engine,
    *,
    project_id: str,
    run_gate_open: bool,
    max_running: int | None,
    max_queued: int | None,
    actor: str,
    source: str = "cli",
    audit: AuditLog = PLAIN_AUDIT,
) -> ProjectRecord:
    """The run gate and queue limits (None: the server default), audited with the change."""

    def record(s: Session, changes: dict[str, Any]) -> None:
        audit.record(
            s,
            AuditName.PROJECT_LIMITS_CHANGED,
            actor=actor,
            project_id=project_id,
            outcome="ok",
            source=source,
            details=changes,
        )

    wanted = {"run_gate_open": run_gate_open, "max_running": max_running, "max_queued": max_queued}
    row = project_store.change_project(engine, project_id=project_id, values=wanted, audit=record)
    if row is None:
        raise NotFound(f"project {project_id!r} is not registered")
    return row


DEMO_KEY_NAME = "demo"
DEMO_KEY_FILE = "demo-api-key"  # in the data dir, mode 0600: the demo key's raw value


def _live_demo_key(engine: Engine, account_id: int, raw: str) -> str | None:
    """The id of the demo account's live key `raw` is, else None."""
    public, sep, secret = raw.removeprefix(KEY_PREFIX).partition("_")
    if not raw.startswith(KEY_PREFIX) or not sep:
        return None
    row = account_store.get_key(engine, key_id=f"key_{public}")
    if row is None or row.account_id != account_id or row.revoked_at is not None:
        return None
    return row.id if hmac.compare_digest(sha256_hex(secret), row.secret_hash) else None


def _write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with a file only its owner may read (0600)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def demo_key(engine: Engine, *, account_id: int, key_file: Path, audit: AuditLog = PLAIN_AUDIT) -> str:
    """The demo account's one API key: the one kept in `key_file` while it is still live,
    else a new one (written there). Every other live demo key is revoked, so exactly one
    demo key works after each start."""
    try:
        raw: str | None = key_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raw = None
    keep = _live_demo_key(engine, account_id, raw) if raw else None
    if keep is None:
        raw, row = create_key(
            engine, user="demo", projects=None, scopes=None, name=DEMO_KEY_NAME, actor="demo", audit=audit
        )
        _write_private(key_file, raw + "\n")
        keep = row.id
    else:
        os.chmod(key_file, 0o600)
    for key, _ in account_store.list_keys(engine, account_id=account_id):
        if key.id != keep and key.name == DEMO_KEY_NAME and key.revoked_at is None:
            revoke_key(engine, key_id=key.id, actor="demo", audit=audit)
    assert raw is not None
    return raw


def setup_demo(
    engine: Engine,
    registry: ProjectRegistry,
    examples: Path,
    *,
    key_file: Path,
    audit: AuditLog = PLAIN_AUDIT,
) -> tuple[str, str, str]:
    """Register and publish the bundled examples; issue a new demo login password; the demo
    API key stays the same across starts (see `demo_key`)."""
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
        account = create_user(engine, name="demo", admin=True, password=password, actor="demo", audit=audit)
    else:
        assert account.id is not None
        account_store.set_password(engine, account_id=account.id, password_hash=hash_password(password))
    assert account.id is not None
    return "demo", password, demo_key(engine, account_id=account.id, key_file=key_file, audit=audit)

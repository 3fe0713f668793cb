"""Queries for accounts, API keys and project credentials."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, bindparam, func, text
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.db import AuditWrite, add_row, bytewise, get_row
from webui.store.models import Account, ApiKey, ProjectCredential, ProjectPermission, utcnow


def get_account(engine: Engine, *, name: str) -> Account | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.exec(select(Account).where(Account.name == name)).first()


def get_account_by_id(engine: Engine, *, account_id: int) -> Account | None:
    return get_row(engine, Account, account_id)


def add_account(engine: Engine, *, account: Account, audit: AuditWrite | None = None) -> Account:
    """Insert the account (IntegrityError if the name is taken) and its audit event together."""
    with Session(engine, expire_on_commit=False) as s:
        s.add(account)
        s.flush()
        if audit is not None:
            audit(s)
        s.commit()
        return account


def set_disabled(
    engine: Engine,
    *,
    account_id: int,
    disabled: bool,
    audit: Callable[[Session, Account], object] | None = None,
) -> Account | None:
    """None if there is no such account; the audit write runs only when the state changes."""
    with Session(engine, expire_on_commit=False) as s:
        account = s.get(Account, account_id)
        if account is None:
            return None
        if account.disabled != disabled:
            account.disabled = disabled
            s.add(account)
            if audit is not None:
                audit(s, account)
            s.commit()
        return account


def set_password(engine: Engine, *, account_id: int, password_hash: str) -> None:
    with Session(engine) as s:
        row = s.get(Account, account_id)
        if row is not None:
            row.password_hash = password_hash
            s.add(row)
            s.commit()


class KeysFull(Exception):
    """The account would hold more than `cap` live (unrevoked) keys: nothing written."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self.cap = cap


def add_key(
    engine: Engine, *, key: ApiKey, audit: AuditWrite | None = None, cap: int | None = None
) -> ApiKey:
    """The new key and its audit event; with `cap`, its account's live keys are counted in
    the same transaction, the new one included (`KeysFull` past `cap`)."""
    if cap is None:
        return add_row(engine, key, audit=audit)
    with Session(engine, expire_on_commit=False) as s:
        conn = s.connection()
        if conn.dialect.name == "postgresql":  # SQLite: the INSERT already serializes writers
            conn.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"keys:{key.account_id}"}
            )
        s.add(key)
        s.flush()
        live = s.exec(
            select(func.count())
            .select_from(ApiKey)
            .where(col(ApiKey.account_id) == key.account_id, col(ApiKey.revoked_at).is_(None))
        ).one()
        if live > cap:
            s.rollback()
            raise KeysFull(cap)
        if audit is not None:
            audit(s)
        s.commit()
    return key


def get_key(engine: Engine, *, key_id: str) -> ApiKey | None:
    return get_row(engine, ApiKey, key_id)


_KEYS = cast(Table, ApiKey.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_ACCOUNTS = cast(Table, Account.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_GRANTS_TABLE = cast(Table, ProjectPermission.__table__)  # pyright: ignore[reportAttributeAccessIssue]
_KEY_WITH_ACCOUNT = (
    sa_select(
        _KEYS.c.secret_hash,
        _KEYS.c.revoked_at,
        _KEYS.c.scopes,
        _KEYS.c.projects,
        _ACCOUNTS.c.id,
        _ACCOUNTS.c.name,
        _ACCOUNTS.c.is_admin,
        _ACCOUNTS.c.disabled,
    )
    .join(_ACCOUNTS, _ACCOUNTS.c.id == _KEYS.c.account_id)
    .where(_KEYS.c.id == bindparam("key_id"))
)
_GRANTS = sa_select(_GRANTS_TABLE.c.project_id).where(_GRANTS_TABLE.c.account_id == bindparam("account_id"))


@dataclass(frozen=True)
class KeyRecord:
    secret_hash: str
    revoked: bool
    scopes: list[str]
    projects: list[str] | None
    account_id: int
    account_name: str
    is_admin: bool
    disabled: bool
    grants: frozenset[str]


def key_record(engine: Engine, *, key_id: str) -> KeyRecord | None:
    """The authentication hot path: prebuilt Core statements on one connection, no ORM."""
    with engine.connect() as conn:
        row = conn.execute(_KEY_WITH_ACCOUNT, {"key_id": key_id}).first()
        if row is None:
            return None
        grants: frozenset[str] = frozenset()
        if not row.is_admin:
            grants = frozenset(conn.execute(_GRANTS, {"account_id": row.id}).scalars())
    return KeyRecord(
        secret_hash=row.secret_hash,
        revoked=row.revoked_at is not None,
        scopes=list(row.scopes or []),
        projects=list(row.projects) if row.projects is not None else None,
        account_id=row.id,
        account_name=row.name,
        is_admin=bool(row.is_admin),
        disabled=bool(row.disabled),
        grants=grants,
    )


def list_keys(engine: Engine, *, account_id: int | None = None) -> list[tuple[ApiKey, Account]]:
    with Session(engine, expire_on_commit=False) as s:
        stmt = select(ApiKey, Account).join(Account, col(Account.id) == col(ApiKey.account_id))
        if account_id is not None:
            stmt = stmt.where(ApiKey.account_id == account_id)
        return [(k, a) for k, a in s.exec(stmt.order_by(col(ApiKey.created_at), col(ApiKey.id)))]


def revoke_key(engine: Engine, *, key_id: str, audit: AuditWrite | None = None) -> ApiKey | None:
    """None if there is no such key; the audit write runs only when the key was live."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(ApiKey, key_id)
        if row is None:
            return None
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            s.add(row)
            if audit is not None:
                audit(s)
            s.commit()
        return row


def add_project_credential(engine: Engine, *, row: ProjectCredential) -> ProjectCredential:
    return add_row(engine, row)


def find_project_credential(engine: Engine, *, secret_hash: str) -> ProjectCredential | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.exec(select(ProjectCredential).where(ProjectCredential.secret_hash == secret_hash)).first()


def project_grants(engine: Engine, *, account_id: int) -> set[str]:
    with Session(engine) as s:
        stmt = select(ProjectPermission.project_id).where(ProjectPermission.account_id == account_id)
        return set(s.exec(stmt))


def grant(
    engine: Engine,
    *,
    account_id: int,
    project_ids: list[str],
    granted_by: str | None,
    audit: Callable[[Session, list[str]], object] | None = None,
) -> list[str]:
    """Add grants; returns the ones that are new. The audit write sees them and commits with
    them (it runs only when there are some)."""
    added: list[str] = []
    with Session(engine) as s:
        for project_id in project_ids:
            if s.get(ProjectPermission, (account_id, project_id)) is None:
                s.add(ProjectPermission(account_id=account_id, project_id=project_id, granted_by=granted_by))
                added.append(project_id)
        if added and audit is not None:
            audit(s, added)
        s.commit()
    return added


def set_grants(
    engine: Engine,
    *,
    account_id: int,
    project_ids: set[str],
    granted_by: str | None,
    audit: Callable[[Session, list[str], list[str]], object] | None = None,
) -> tuple[list[str], list[str]]:
    """Make the account's grants exactly `project_ids`; returns (added, removed), each sorted.
    The audit write sees both and commits with them."""
    with Session(engine) as s:
        stmt = select(ProjectPermission).where(ProjectPermission.account_id == account_id)
        current = {row.project_id: row for row in s.exec(stmt)}
        added = sorted(project_ids - current.keys())
        removed = sorted(current.keys() - project_ids)
        for project_id in added:
            s.add(ProjectPermission(account_id=account_id, project_id=project_id, granted_by=granted_by))
        for project_id in removed:
            s.delete(current[project_id])
        if audit is not None:
            audit(s, added, removed)
        s.commit()
    return added, removed


def list_accounts(engine: Engine) -> list[Account]:
    with Session(engine, expire_on_commit=False) as s:
        return list(s.exec(select(Account).order_by(bytewise(col(Account.name)))))

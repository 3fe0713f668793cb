"""Queries for accounts, API keys and project credentials."""

from __future__ import annotations

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.models import Account, ApiKey, ProjectCredential, utcnow


def get_account(engine: Engine, *, name: str) -> Account | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.exec(select(Account).where(Account.name == name)).first()


def get_account_by_id(engine: Engine, *, account_id: int) -> Account | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.get(Account, account_id)


def add_account(engine: Engine, *, account: Account) -> Account:
    with Session(engine, expire_on_commit=False) as s:
        s.add(account)
        s.commit()
        return account


def set_password(engine: Engine, *, account_id: int, password_hash: str) -> None:
    with Session(engine) as s:
        row = s.get(Account, account_id)
        if row is not None:
            row.password_hash = password_hash
            s.add(row)
            s.commit()


def add_key(engine: Engine, *, key: ApiKey) -> ApiKey:
    with Session(engine, expire_on_commit=False) as s:
        s.add(key)
        s.commit()
        return key


def get_key(engine: Engine, *, key_id: str) -> ApiKey | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.get(ApiKey, key_id)


def key_with_account(engine: Engine, *, key_id: str) -> tuple[ApiKey, Account] | None:
    """One round trip on the authentication hot path."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.exec(
            select(ApiKey, Account)
            .join(Account, col(Account.id) == col(ApiKey.account_id))
            .where(ApiKey.id == key_id)
        ).first()
        return (row[0], row[1]) if row is not None else None


def list_keys(engine: Engine, *, account_id: int | None = None) -> list[tuple[ApiKey, Account]]:
    with Session(engine, expire_on_commit=False) as s:
        stmt = select(ApiKey, Account).join(Account, col(Account.id) == col(ApiKey.account_id))
        if account_id is not None:
            stmt = stmt.where(ApiKey.account_id == account_id)
        return [(k, a) for k, a in s.exec(stmt.order_by(col(ApiKey.created_at)))]


def revoke_key(engine: Engine, *, key_id: str) -> ApiKey | None:
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(ApiKey, key_id)
        if row is None:
            return None
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            s.add(row)
            s.commit()
        return row


def add_project_credential(engine: Engine, *, row: ProjectCredential) -> ProjectCredential:
    with Session(engine, expire_on_commit=False) as s:
        s.add(row)
        s.commit()
        return row


def find_project_credential(engine: Engine, *, secret_hash: str) -> ProjectCredential | None:
    with Session(engine, expire_on_commit=False) as s:
        return s.exec(select(ProjectCredential).where(ProjectCredential.secret_hash == secret_hash)).first()

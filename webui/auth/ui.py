"""Browser logins: a signed cookie carrying a random token, a server-side session row
(only the token's hash), idle and absolute timeouts, a CSRF token per session.

A new session is created at every login (rotation), so a token seen before login is
never promoted; logout ends the row, so a copied cookie stops working at once. The cookie
never authenticates the MCP endpoint (the gateway refuses it by name)."""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from webui.auth.passwords import hash_password, verify_password
from webui.blocking import is_busy_error
from webui.store import accounts as account_store
from webui.store import ui_sessions as ui_session_store
from webui.store.models import Account, UiSession, as_utc, utcnow

COOKIE_NAME = "steamharness_session"
LAST_SEEN_RESOLUTION = timedelta(seconds=30)  # don't write on every request
# Verifying against a real hash when the user does not exist keeps timing uniform.


def warm_dummy_hash() -> None:
    """Make the dummy hash ahead of the first login (the server does at its start)."""
    _dummy_hash()


@functools.cache
def _dummy_hash() -> str:
    """A hash to verify unknown names against (as slow as a real one): made at the first
    login that needs it, not at import (every CLI command imports this module)."""
    return hash_password(secrets.token_urlsafe(16))


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class UiUser:
    account_id: int
    name: str
    is_admin: bool
    session_id: str
    csrf_token: str
    projects: frozenset[str] | None  # None: every project (admins)

    @property
    def actor(self) -> str:
        return f"user:{self.name}"

    def may_use(self, project_id: str) -> bool:
        return self.projects is None or project_id in self.projects


class UiAuth:
    def __init__(self, engine: Engine, *, secret: bytes, idle: float, absolute: float) -> None:
        self.engine = engine
        self._signer = URLSafeSerializer(secret, salt="steamharness-ui-session")
        self.idle = timedelta(seconds=idle)
        self.absolute = timedelta(seconds=absolute)

    def login(self, name: str, password: str) -> tuple[str, Account] | None:
        """Returns (cookie value, account) or None; the same answer for every failure."""
        account = account_store.get_account(self.engine, name=name)
        if account is None or account.disabled or not account.password_hash:
            verify_password(_dummy_hash(), password)
            return None
        if not verify_password(account.password_hash, password):
            return None
        assert account.id is not None
        token = secrets.token_urlsafe(32)
        ui_session_store.add_session(
            self.engine,
            row=UiSession(id=_hash(token), account_id=account.id, csrf_token=secrets.token_urlsafe(24)),
        )
        return self._signer.dumps(token), account

    def resolve(self, cookie: str | None) -> UiUser | None:
        if not cookie:
            return None
        try:
            token = self._signer.loads(cookie)
        except BadSignature:
            return None
        if not isinstance(token, str):
            return None
        now = utcnow()

        def timed_out(row: UiSession) -> bool:
            return now - as_utc(row.last_seen_at) > self.idle or now - as_utc(row.created_at) > self.absolute

        found = ui_session_store.live_session(
            self.engine, session_id=_hash(token), now=now, timed_out=timed_out
        )
        if found is None:
            return None
        row, account = found
        if account.disabled or account.id is None:
            return None
        if now - as_utc(row.last_seen_at) > LAST_SEEN_RESOLUTION:
            _touch(self.engine, row.id, now)
        projects = (
            None
            if account.is_admin
            else frozenset(account_store.project_grants(self.engine, account_id=account.id))
        )
        return UiUser(account.id, account.name, account.is_admin, row.id, row.csrf_token, projects)

    def logout(self, session_id: str) -> None:
        ui_session_store.end_session(self.engine, session_id=session_id)

    def end_all(self, account_id: int) -> None:
        ui_session_store.end_all_sessions(self.engine, account_id=account_id)


def _touch(engine: Engine, session_id: str, now: datetime) -> None:
    """Best effort: reading a page must not wait for (or fail on) another writer's lock;
    a skipped touch is retried on the next request."""
    try:
        ui_session_store.touch_session(engine, session_id=session_id, now=now)
    except OperationalError as exc:
        if not is_busy_error(exc):
            raise

"""Queries for browser login sessions (webui.auth.ui decides the timeouts and the cookie).

A row is keyed by the hash of the cookie's token; ending a session sets `ended_at`, it is
never deleted. The last-seen touch is a best-effort write (`webui.store.db.quick_write`):
it fails at once rather than wait for another writer.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import cast

from sqlalchemy import Table, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.store.db import add_row, quick_write
from webui.store.models import Account, UiSession, utcnow

_SESSIONS = cast(Table, UiSession.__table__)  # pyright: ignore[reportAttributeAccessIssue]


def add_session(engine: Engine, *, row: UiSession) -> None:
    add_row(engine, row)


def live_session(
    engine: Engine, *, session_id: str, now: datetime, timed_out: Callable[[UiSession], bool]
) -> tuple[UiSession, Account] | None:
    """The session and its account, or None: no such session, it has ended, or its account
    is gone. A session `timed_out` says has outlived its timeouts is ended at `now` (and
    None returned), in one transaction."""
    with Session(engine, expire_on_commit=False) as s:
        row = s.get(UiSession, session_id)
        if row is None or row.ended_at is not None:
            return None
        if timed_out(row):
            row.ended_at = now
            s.add(row)
            s.commit()
            return None
        account = s.get(Account, row.account_id)
        return (row, account) if account is not None else None


def touch_session(engine: Engine, *, session_id: str, now: datetime) -> None:
    """Set the last-seen time; raises OperationalError at once (without waiting) when another
    writer holds the lock."""
    with quick_write(engine) as conn:
        conn.execute(update(_SESSIONS).where(_SESSIONS.c.id == session_id).values(last_seen_at=now))


def end_session(engine: Engine, *, session_id: str) -> None:
    """End the session now, unless it already ended (or is gone)."""
    with Session(engine) as s:
        row = s.get(UiSession, session_id)
        if row is not None and row.ended_at is None:
            row.ended_at = utcnow()
            s.add(row)
            s.commit()


def end_all_sessions(engine: Engine, *, account_id: int) -> None:
    """End every open session of the account, in one transaction."""
    with Session(engine) as s:
        stmt = select(UiSession).where(UiSession.account_id == account_id, col(UiSession.ended_at).is_(None))
        for row in s.exec(stmt):
            row.ended_at = utcnow()
            s.add(row)
        s.commit()

"""Browser login sessions, against a real SQLite file."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy
import sqlalchemy.exc
from sqlalchemy.engine import Engine

from tests.store.conftest import T0, add_account
from webui.blocking import is_busy_error
from webui.store import ui_sessions as ui_session_store
from webui.store.db import make_engine, sqlite_url
from webui.store.models import UiSession, as_utc


def never(_row: UiSession) -> bool:
    return False


def always(_row: UiSession) -> bool:
    return True


def ended_at(engine: Engine, session_id: str) -> object:
    found = ui_session_store.live_session(engine, session_id=session_id, now=T0, timed_out=never)
    return None if found is not None else "ended or gone"


def test_a_live_session_comes_with_its_account(engine: Engine) -> None:
    ann = add_account(engine, "ann")
    ui_session_store.add_session(engine, row=UiSession(id="h1", account_id=ann, csrf_token="c"))
    found = ui_session_store.live_session(engine, session_id="h1", now=T0, timed_out=never)
    assert found is not None
    row, account = found
    assert (row.id, row.csrf_token, account.id, account.name) == ("h1", "c", ann, "ann")
    assert ui_session_store.live_session(engine, session_id="nope", now=T0, timed_out=never) is None


def test_a_timed_out_session_is_ended_at_the_given_time(engine: Engine) -> None:
    ann = add_account(engine, "ann")
    ui_session_store.add_session(engine, row=UiSession(id="h1", account_id=ann, csrf_token="c"))
    seen: list[str] = []

    def timed_out(row: UiSession) -> bool:
        seen.append(row.id)
        return True

    assert ui_session_store.live_session(engine, session_id="h1", now=T0, timed_out=timed_out) is None
    assert seen == ["h1"]
    # ended: not asked again, and it stays ended
    assert ui_session_store.live_session(engine, session_id="h1", now=T0, timed_out=timed_out) is None
    assert seen == ["h1"]
    assert ui_session_store.live_session(engine, session_id="h1", now=T0, timed_out=never) is None


def test_touching_moves_the_last_seen_time(engine: Engine) -> None:
    ann = add_account(engine, "ann")
    ui_session_store.add_session(engine, row=UiSession(id="h1", account_id=ann, csrf_token="c"))
    later = T0 + timedelta(days=400)
    ui_session_store.touch_session(engine, session_id="h1", now=later)
    found = ui_session_store.live_session(engine, session_id="h1", now=later, timed_out=never)
    assert found is not None and as_utc(found[0].last_seen_at) == later


def test_a_touch_fails_at_once_while_another_writer_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    engine = make_engine(sqlite_url(path), busy_timeout=60)
    ann = add_account(engine, "ann")
    ui_session_store.add_session(engine, row=UiSession(id="h1", account_id=ann, csrf_token="c"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlalchemy.exc.OperationalError) as caught:
            ui_session_store.touch_session(engine, session_id="h1", now=T0)
        assert is_busy_error(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    engine.dispose()


def test_ending_one_session_or_all_of_an_accounts(engine: Engine) -> None:
    ann, bob = add_account(engine, "ann"), add_account(engine, "bob")
    for sid, account in [("a1", ann), ("a2", ann), ("a3", ann), ("b1", bob)]:
        ui_session_store.add_session(engine, row=UiSession(id=sid, account_id=account, csrf_token="c"))
    ui_session_store.end_session(engine, session_id="a1")
    ui_session_store.end_session(engine, session_id="a1")  # already ended: nothing to do
    ui_session_store.end_session(engine, session_id="nope")
    assert [ended_at(engine, sid) for sid in ("a1", "a2", "a3", "b1")] == ["ended or gone", None, None, None]
    ui_session_store.end_all_sessions(engine, account_id=ann)
    assert [ended_at(engine, sid) for sid in ("a1", "a2", "a3", "b1")] == ["ended or gone"] * 3 + [None]

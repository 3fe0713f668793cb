"""The demo API key kept across `serve --demo` starts (`webui.admin.demo_key`): reused while
live, replaced when its file is gone, unreadable or names a dead key; every other live demo
key revoked, other keys of the account left alone."""

from __future__ import annotations

import stat
from pathlib import Path

from sqlalchemy.engine import Engine

from tests.store.conftest import add_account, audit_events
from webui.admin import create_key, demo_key
from webui.store import accounts as account_store


def live(engine: Engine, account_id: int) -> list[str]:
    return sorted(
        k.name or ""
        for k, _ in account_store.list_keys(engine, account_id=account_id)
        if k.revoked_at is None
    )


def test_the_kept_key_is_reused_and_older_demo_keys_are_revoked(engine: Engine, tmp_path: Path) -> None:
    account = add_account(engine, "demo")
    older = [create_key(engine, user="demo", projects=None, scopes=None, name="demo")[0] for _ in range(2)]
    create_key(engine, user="demo", projects=None, scopes=None, name="laptop")  # not a demo key
    key_file = tmp_path / "demo-api-key"
    first = demo_key(engine, account_id=account, key_file=key_file)
    assert first not in older
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and key_file.read_text() == f"{first}\n"
    assert live(engine, account) == ["demo", "laptop"]
    key_file.chmod(0o644)
    assert demo_key(engine, account_id=account, key_file=key_file) == first
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert live(engine, account) == ["demo", "laptop"]
    assert audit_events(engine).count("key.revoked") == 2


def test_a_key_file_naming_no_live_demo_key_gets_a_new_key(engine: Engine, tmp_path: Path) -> None:
    account = add_account(engine, "demo")
    add_account(engine, "eve")
    key_file = tmp_path / "demo-api-key"
    first = demo_key(engine, account_id=account, key_file=key_file)
    others, _ = create_key(engine, user="eve", projects=None, scopes=None, name="demo")
    for content in ("garbage", "shk_nothex_secret", others, first[:-1] + "x", ""):
        key_file.write_text(content)
        fresh = demo_key(engine, account_id=account, key_file=key_file)
        assert fresh not in (content, first) and key_file.read_text() == f"{fresh}\n"
        assert live(engine, account) == ["demo"]
        first = fresh
    eve = account_store.get_account(engine, name="eve")
    assert eve is not None and eve.id is not None
    assert live(engine, eve.id) == ["demo"]  # another account's key named "demo" is not touched

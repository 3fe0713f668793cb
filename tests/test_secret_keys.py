"""One secret key for every replica: the derived keys, refusing a weak secret, and the data
dir's own key files when no secret is set."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from webui.audit.log import AuditLog
from webui.configs.secrets import SecretBox
from webui.secret_keys import WeakSecret, derive_key
from webui.services import config_service, persistent_secret
from webui.settings import Settings
from webui.store.db import make_engine, sqlite_url

SECRET = secrets.token_urlsafe(32)
LABELS = ("ui-session.key", "request-state.key", "config.key", "fingerprint.key")


def test_each_label_derives_its_own_key_and_the_same_secret_the_same_keys() -> None:
    keys = [derive_key(SECRET, label) for label in LABELS]
    assert len(set(keys)) == len(LABELS)
    assert all(len(k) == 32 for k in keys)
    assert keys == [derive_key(SECRET, label) for label in LABELS]
    assert derive_key(secrets.token_urlsafe(32), "ui-session.key") != keys[0]


@pytest.mark.parametrize(
    ("raw", "says"),
    [("s3cr3t-but-short", "too short (16 bytes)"), ("ab" * 40, "not random enough (only 2 distinct")],
)
def test_a_weak_secret_key_is_refused_naming_the_setting(
    raw: str, says: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(WeakSecret, match="STEAMHARNESS_SECRET_KEY"):
        derive_key(raw, "config.key")
    monkeypatch.setenv("STEAMHARNESS_SECRET_KEY", raw)
    with pytest.raises(ValidationError) as caught:
        Settings(data_dir=tmp_path)
    # What the CLI prints: the field and the message (webui.cli.common), never the value.
    first = caught.value.errors()[0]
    assert first["loc"] == ("secret_key",)
    assert says in first["msg"] and "token_urlsafe(32)" in first["msg"] and raw not in first["msg"]


def test_an_empty_secret_key_means_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STEAMHARNESS_SECRET_KEY", "")
    assert Settings(data_dir=tmp_path).secret_key is None


def test_replicas_with_one_secret_share_keys_and_write_no_key_files(tmp_path: Path) -> None:
    a = Settings(data_dir=tmp_path / "a", secret_key=SecretStr(SECRET))
    b = Settings(data_dir=tmp_path / "b", secret_key=SecretStr(SECRET))
    for label in LABELS:
        assert persistent_secret(a, label) == persistent_secret(b, label) == derive_key(SECRET, label)
    assert not (tmp_path / "a" / "keys").exists() and not (tmp_path / "b" / "keys").exists()


def test_without_a_secret_each_data_dir_keeps_its_own_key_files(tmp_path: Path) -> None:
    a = Settings(data_dir=tmp_path / "a")
    b = Settings(data_dir=tmp_path / "b")
    key = persistent_secret(a, "ui-session.key")
    assert (
        key
        == persistent_secret(a, "ui-session.key")
        == (tmp_path / "a" / "keys" / "ui-session.key").read_bytes()
    )
    assert persistent_secret(b, "ui-session.key") != key


def test_config_secrets_sealed_under_the_old_key_file_still_open_under_the_secret(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path / "db.sqlite3"))
    before = Settings(data_dir=tmp_path / "d")
    old = SecretBox(persistent_secret(before, "config.key")).seal("hunter2", binding="p/0/token")
    after = Settings(data_dir=tmp_path / "d", secret_key=SecretStr(SECRET))
    box = config_service(after, engine, AuditLog()).box
    assert box.open(old, binding="p/0/token") == "hunter2"
    resealed = box.seal("hunter2", binding="p/0/token")
    # New values are sealed with the derived key: another replica (no key file) opens them.
    assert SecretBox(derive_key(SECRET, "config.key")).open(resealed, binding="p/0/token") == "hunter2"
    with pytest.raises(ValueError, match="cannot be decrypted"):
        SecretBox(derive_key(SECRET, "config.key")).open(old, binding="p/0/token")
    with pytest.raises(ValueError, match="cannot be decrypted"):
        box.open(old, binding="p/0/other")

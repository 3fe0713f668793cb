"""One settings object for every entry point (server, CLI, stdio MCP).

Built explicitly by whoever starts the process (`Settings(...)`), never at import time, so
tests construct their own with temporary directories.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    return Path.home() / ".steamharness"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STEAMHARNESS_", extra="ignore")

    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None
    file_store_dir: Path | None = None
    kv_store_dir: Path | None = None
    persistent_value_store_dir: Path | None = None
    file_create_store_dir: Path | None = None
    auth_dir: Path | None = None

    server_url: str | None = None
    server_admin_key: SecretStr | None = None

    max_concurrent_runs: int = Field(default=8, ge=1)
    # SIGTERM first, SIGKILL after this many seconds, for timeouts and cancellation.
    kill_grace_seconds: float = Field(default=2.0, ge=0)
    max_file_bytes: int = 50 * 1024 * 1024
    request_state_ttl_seconds: float = 3600.0

    # Derived locations: each one an option of its own, defaulting under the data dir.
    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'steamharness.sqlite3'}"

    @property
    def resolved_file_store_dir(self) -> Path:
        return self.file_store_dir or self.data_dir / "files"

    @property
    def resolved_file_create_store_dir(self) -> Path:
        return self.file_create_store_dir or self.data_dir / "created-files"

    @property
    def resolved_auth_dir(self) -> Path:
        return self.auth_dir or self.data_dir

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

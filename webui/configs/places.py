"""Which configurations a caller works on: the place (fields + scope) for each kind of caller.

Locally (the `steamharness mcp` host and the CLI on a project folder) there is one scope per
project in the data dir, the local operator's. On the server every account has its own scope
per project; the admin principal (the server admin key) has one too.
"""

from __future__ import annotations

from pathlib import Path

from webui.configs.model import PRINCIPAL_OWNER_ID, ConfigPlace
from webui.store.configs import Scope
from webui.workflows.configuration import ConfigField, load_config_fields


def local_place(root: Path | str) -> ConfigPlace:
    """The local scope of the project folder at `root` (any project type with an id)."""
    project_id, fields = load_config_fields(root)
    return ConfigPlace(scope=Scope(project_id, PRINCIPAL_OWNER_ID), fields=fields, owner="local")


def local_place_of(project_id: str, fields: tuple[ConfigField, ...]) -> ConfigPlace:
    return ConfigPlace(scope=Scope(project_id, PRINCIPAL_OWNER_ID), fields=fields, owner="local")


def account_place(
    project_id: str, fields: tuple[ConfigField, ...], *, account_id: int | None, account_name: str | None
) -> ConfigPlace:
    """A server scope: the account's, or the admin principal's when `account_id` is None."""
    if account_id is None:
        return ConfigPlace(scope=Scope(project_id, PRINCIPAL_OWNER_ID), fields=fields, owner="admin")
    return ConfigPlace(scope=Scope(project_id, account_id), fields=fields, owner=f"account {account_name}")

"""What the configuration service works with: a place (fields + scope), who asks, a
configuration as shown, a run's snapshot, and the rules for configuration names.

A leaf: the service (`service.py`), the places per caller (`places.py`) and the export
document (`exports.py`) all build on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from webui.errors import ConfigurationRefused
from webui.store.configs import Scope
from webui.workflows.configuration import ConfigField

MASK: Final = "********"
NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_MAX_PER_SCOPE: Final = 50  # Settings.max_configs_per_scope's default
# The owner id of the admin principal's and the local operator's scope (accounts start at 1).
PRINCIPAL_OWNER_ID: Final = 0


@dataclass(frozen=True)
class ConfigPlace:
    """Where configurations live: the project's fields and one scope. `owner` names the scope
    for people and the audit log (an account name, "admin" or "local")."""

    scope: Scope
    fields: tuple[ConfigField, ...]
    owner: str

    @property
    def project_id(self) -> str:
        return self.scope.project_id


@dataclass(frozen=True)
class Who:
    """Who asks, for the audit log."""

    actor: str | None
    source: str = "cli"
    client_address: str | None = None
    user_agent: str | None = None


@dataclass(frozen=True)
class ConfigView:
    """A configuration as people see it: secrets masked, with its problems against today's fields."""

    name: str
    revision: int
    active: bool
    values: dict[str, Any]
    problems: dict[str, str]
    updated_at: datetime
    updated_by: str | None

    @property
    def needs_update(self) -> bool:
        return bool(self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "revision": self.revision,
            "active": self.active,
            "values": self.values,
            "needsUpdate": self.needs_update,
            "problems": self.problems,
            "updatedAt": self.updated_at.isoformat(),
            "updatedBy": self.updated_by,
        }


@dataclass(frozen=True)
class ConfigSnapshot:
    """What a run starts with: `values` as the handler reads them (every field, defaults
    applied, secrets in clear) and `stored` as recorded with the run (secrets sealed)."""

    name: str
    revision: int
    values: dict[str, Any] = field(repr=False)
    stored: dict[str, Any] = field(repr=False)


def check_name(name: Any, what: str = "configuration name") -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigurationRefused(
            f"{what} {name!r} is not valid: 1-64 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    return name

"""The only writer of audit events. Callers pass their open session so the event commits
in the same transaction as the change it records."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.engine import Connection
from sqlmodel import Session

from webui.store.models import AuditEvent

_INSERT = insert(cast(Table, AuditEvent.__table__))  # pyright: ignore[reportAttributeAccessIssue]
SECRET_KEYS = frozenset({"authorization", "key", "api_key", "token", "password", "secret"})


def _scrub(details: dict[str, Any] | None) -> dict[str, Any] | None:
    if not details:
        return None
    return {k: ("[redacted]" if k.lower() in SECRET_KEYS else v) for k, v in details.items()}


class AuditLog:
    def record(self, session: Session | Connection, event: str, **fields: Any) -> None:
        details = _scrub(fields.pop("details", None))
        session.execute(_INSERT, {"event": event, "details": details, **fields})

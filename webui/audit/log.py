"""The only writer of audit events. Callers pass their open session so the event commits
in the same transaction as the change it records."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert
from sqlmodel import Session

from webui.store.models import AuditEvent

SECRET_KEYS = frozenset({"authorization", "key", "api_key", "token", "password", "secret"})


def _scrub(details: dict[str, Any] | None) -> dict[str, Any] | None:
    if not details:
        return None
    return {k: ("[redacted]" if k.lower() in SECRET_KEYS else v) for k, v in details.items()}


class AuditLog:
    def record(self, session: Session, event: str, **fields: Any) -> None:
        details = _scrub(fields.pop("details", None))
        session.execute(insert(AuditEvent).values(event=event, details=details, **fields))

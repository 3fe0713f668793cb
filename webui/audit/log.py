"""The only writer of audit events. Callers pass their open session so the event commits
in the same transaction as the change it records; an event that records no change of its
own (a refusal, a login attempt, an export) is written alone with `record_alone`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session

from webui.audit.events import AuditName
from webui.blocking import after_commit
from webui.store.models import AuditEvent

if TYPE_CHECKING:
    from webui.events import EventHub

_INSERT = insert(cast(Table, AuditEvent.__table__))  # pyright: ignore[reportAttributeAccessIssue]
USER_AGENT_CHARS = 300  # a client's User-Agent is kept up to this length
SECRET_KEYS = frozenset(
    {"authorization", "key", "api_key", "apikey", "token", "password", "secret", "cookie", "rawkey"}
)


def _scrub(value: Any) -> Any:
    """Redact secret-named keys at any depth (defence in depth: callers never pass them)."""
    if isinstance(value, dict):
        return {
            k: ("[redacted]" if str(k).lower().replace("-", "_") in SECRET_KEYS else _scrub(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


class AuditLog:
    """`replica_id`: the serve replica whose events these are (kept on each row); None for
    the CLI and stdio, which are no replicas."""

    def __init__(self, hub: EventHub | None = None, *, replica_id: str | None = None) -> None:
        self.hub = hub
        self.replica_id = replica_id

    def record(self, session: Session | Connection, event: AuditName, **fields: Any) -> None:
        """`fields`: the row's columns; `call` (the MCP method that started the run an event
        is about, e.g. `tools/call`) is kept in its details."""
        details = _scrub(fields.pop("details", None)) or None
        call = fields.pop("call", None)
        if call is not None:
            details = {**(details or {}), "call": call}
        if fields.get("user_agent"):
            fields["user_agent"] = fields["user_agent"][:USER_AGENT_CHARS]
        fields.setdefault("replica_id", self.replica_id)
        result = session.execute(_INSERT, {"event": str(event), "details": details, **fields})
        if self.hub is None:
            return
        # The live tail reads the row when woken: wake it only once the row committed.
        key = cast(Any, result).inserted_primary_key
        row_id = key[0] if key else None
        hub = self.hub
        after_commit(lambda: hub.publish("audit", "recorded", id=row_id, event=str(event)), session)

    def record_alone(self, engine: Engine, event: AuditName, **fields: Any) -> None:
        """The event in a transaction of its own (blocking: call it through `run_db`)."""
        with Session(engine) as s:
            self.record(s, event, **fields)
            s.commit()

"""Audit events name the serve replica that recorded them; the CLI and stdio name none."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session, select

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.store.db import make_engine, sqlite_url
from webui.store.models import AuditEvent


def test_a_replicas_audit_log_records_its_id_and_a_plain_one_records_none(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path / "db.sqlite3"))
    try:
        AuditLog(replica_id="rep_0123456789abcdef").record_alone(
            engine, AuditName.HOST_SERVER_CONNECTING, actor="user:a"
        )
        AuditLog().record_alone(engine, AuditName.HOST_SERVER_CLOSED, actor="user:b")
        with Session(engine) as s:
            rows = {e.event: e.replica_id for e in s.exec(select(AuditEvent))}
        assert rows["host.server.connecting"] == "rep_0123456789abcdef"
        assert rows["host.server.closed"] is None
    finally:
        engine.dispose()

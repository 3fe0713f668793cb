"""Replica leases over a real SQLite file: a lapsed replica's runs are interrupted once,
audited, and only while its lease is still lapsed; a restarting replica ends its own
previous runs; start-up closes only its own MCP sessions; one data dir is not served twice."""

from __future__ import annotations

import os
import socket
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.errors import ConfigError
from webui.events import EventHub
from webui.interactions.service import InteractionService
from webui.replicas import ReplicaInUse, ReplicaLease, check_free, replica_id_for
from webui.store import replicas as replica_store
from webui.store import sessions as session_store
from webui.store.models import AuditEvent, Interaction, McpSession, Replica, Run, RunEvent, utcnow
from webui.store.runs import get_run, interrupt_orphans

TTL = 15.0


def lease(engine: Engine, replica_id: str) -> ReplicaLease:
    audit = AuditLog()
    return ReplicaLease(
        engine, replica_id=replica_id, ttl=TTL, interactions=InteractionService(engine, audit), audit=audit
    )


def add_replica(
    engine: Engine, replica_id: str, *, age: float, pid: int = 1, host: str = "elsewhere"
) -> None:
    with Session(engine) as s:
        s.add(Replica(id=replica_id, host=host, pid=pid, heartbeat_at=utcnow() - timedelta(seconds=age)))
        s.commit()


def add_run(engine: Engine, run_id: str, replica_id: str | None, status: str = "running") -> None:
    with Session(engine) as s:
        s.add(
            Run(
                id=run_id,
                project_id="p",
                entrypoint_id="e",
                entrypoint_title="E",
                status=status,
                replica_id=replica_id,
                owner="1:0",
            )
        )
        s.commit()


def add_session(engine: Engine, sid: str, replica_id: str | None) -> None:
    row = McpSession(
        id=sid,
        credential="c",
        actor="a",
        project_id="p",
        target="latest",
        resolved="1",
        replica_id=replica_id,
    )
    session_store.add_session(engine, row=row)


def status(engine: Engine, run_id: str) -> str:
    run = get_run(engine, run_id=run_id)
    assert run is not None
    return run.status


def interrupted_audit(engine: Engine) -> list[tuple[str | None, str | None, dict[str, object] | None]]:
    with Session(engine) as s:
        rows = s.exec(
            select(AuditEvent).where(AuditEvent.event == "run.interrupted").order_by(col(AuditEvent.id))
        )
        return [(r.run_id, r.actor, r.details) for r in rows]


def test_a_lapsed_replicas_runs_are_interrupted_audited_and_its_questions_closed(engine: Engine) -> None:
    add_replica(engine, "rep_dead", age=TTL * 2)
    add_replica(engine, "rep_live", age=0)
    add_run(engine, "r-dead", "rep_dead")
    add_run(engine, "r-dead-done", "rep_dead", status="success")
    add_run(engine, "r-live", "rep_live")
    add_run(engine, "r-local", None)  # a local process's: judged by its owner, not here
    with Session(engine) as s:
        s.add(Interaction(id="int_d", run_id="r-dead", kind="form", title="t", requested_schema={}))
        s.commit()
    add_session(engine, "s-dead", "rep_dead")
    add_session(engine, "s-live", "rep_live")
    me = lease(engine, "rep_me")
    assert me.claim() == ["r-dead"]
    assert [status(engine, r) for r in ("r-dead", "r-dead-done", "r-live", "r-local")] == [
        "failed",
        "success",
        "running",
        "running",
    ]
    run = get_run(engine, run_id="r-dead")
    assert run is not None and run.error is not None and run.error["code"] == "interrupted"
    assert run.finished_at is not None
    assert interrupted_audit(engine) == [
        ("r-dead", "replica:rep_me", {"replica": "rep_dead", "reason": "lease expired"})
    ]
    with Session(engine) as s:
        events = s.exec(select(RunEvent).where(RunEvent.run_id == "r-dead", RunEvent.text == "failed")).all()
        assert len(events) == 1
        assert s.get(Interaction, "int_d").status == "closed"  # type: ignore[union-attr]
        assert s.get(McpSession, "s-dead").close_reason == "replica lost"  # type: ignore[union-attr]
        assert s.get(McpSession, "s-live").closed_at is None  # type: ignore[union-attr]
    # A second sweep (by this replica or another) changes nothing again.
    assert lease(engine, "rep_other").sweep() == []
    assert me.beat() == []
    assert len(interrupted_audit(engine)) == 1


class RunsUpdateFails(Exception):
    """The database refusing the sweep's run update, as a locked or lost one would."""


def test_a_sweep_closes_the_sessions_before_it_marks_the_runs_and_the_next_one_finishes(
    engine: Engine,
) -> None:
    """Whoever sees a lapsed replica's run interrupted sees its sessions closed too; a sweep
    that fails half way leaves the runs to the next sweep."""
    add_replica(engine, "rep_dead", age=TTL * 2)
    add_run(engine, "r-dead", "rep_dead")
    add_session(engine, "s-dead", "rep_dead")
    updated: list[str] = []

    def refuse_run_updates(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("UPDATE"):
            updated.append(statement.split()[1])
            if statement.split()[1] == "runs":
                raise RunsUpdateFails(statement)

    event.listen(engine, "before_cursor_execute", refuse_run_updates)
    try:
        with pytest.raises(RunsUpdateFails):
            lease(engine, "rep_me").sweep()
    finally:
        event.remove(engine, "before_cursor_execute", refuse_run_updates)
    assert updated == ["mcp_sessions", "runs"]
    with Session(engine) as s:
        assert s.get(McpSession, "s-dead").close_reason == "replica lost"  # type: ignore[union-attr]
    assert status(engine, "r-dead") == "running"
    # The dead replica still has an active run: the next sweep finds it and marks it.
    assert lease(engine, "rep_me").sweep() == ["r-dead"]
    assert status(engine, "r-dead") == "failed"
    assert len(interrupted_audit(engine)) == 1


def test_a_lease_renewed_before_the_update_keeps_its_runs(engine: Engine) -> None:
    add_replica(engine, "rep_slow", age=TTL * 2)
    add_run(engine, "r-slow", "rep_slow")
    before = utcnow() - timedelta(seconds=TTL)
    assert replica_store.lapsed_replicas(engine, before=before, exclude="rep_me") == ["rep_slow"]
    # The slow replica renews its lease between the sweeper's read and its update.
    assert replica_store.heartbeat(engine, replica_id="rep_slow", host="elsewhere", pid=1)
    error = {"code": "interrupted", "message": "gone"}
    assert (
        replica_store.interrupt_runs(engine, replica_id="rep_slow", error=error, lapsed_before=before) == []
    )
    assert status(engine, "r-slow") == "running"
    assert replica_store.lapsed_replicas(engine, before=before, exclude="rep_me") == []


def test_runs_of_a_replica_with_no_lease_row_at_all_are_interrupted(engine: Engine) -> None:
    add_run(engine, "r-nolease", "rep_gone")
    assert lease(engine, "rep_me").sweep() == ["r-nolease"]


def test_a_restarting_replica_ends_its_own_previous_runs_at_once(engine: Engine) -> None:
    add_replica(engine, "rep_me", age=0, host=socket.gethostname(), pid=dead_pid())
    add_run(engine, "r-before", "rep_me")
    add_run(engine, "r-other", "rep_other")
    add_replica(engine, "rep_other", age=0)
    me = lease(engine, "rep_me")
    assert me.claim() == ["r-before"]
    assert status(engine, "r-other") == "running"
    assert interrupted_audit(engine) == [
        ("r-before", "replica:rep_me", {"replica": "rep_me", "reason": "replica restarted"})
    ]
    row = replica_store.get_replica(engine, replica_id="rep_me")
    assert row is not None and row.pid == os.getpid()
    me.release()
    assert replica_store.get_replica(engine, replica_id="rep_me") is None


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=10)
    return proc.pid


def test_a_data_dir_served_by_a_live_process_is_refused(engine: Engine) -> None:
    add_replica(engine, "rep_busy", age=0, host="other-host", pid=4242)
    with pytest.raises(ReplicaInUse, match="already served by process 4242 on other-host"):
        lease(engine, "rep_busy").claim()
    # Same host, live process (this one's parent): refused too.
    add_replica(engine, "rep_here", age=0, host=socket.gethostname(), pid=os.getppid())
    with pytest.raises(ReplicaInUse, match="own --data-dir"):
        check_free(engine, replica_id="rep_here", ttl=TTL, host=socket.gethostname(), pid=os.getpid())
    # Lapsed, or its process gone: the restart takes over.
    add_replica(engine, "rep_old", age=TTL * 2, host="other-host", pid=4242)
    check_free(engine, replica_id="rep_old", ttl=TTL, host=socket.gethostname(), pid=os.getpid())
    add_replica(engine, "rep_killed", age=0, host=socket.gethostname(), pid=dead_pid())
    check_free(engine, replica_id="rep_killed", ttl=TTL, host=socket.gethostname(), pid=os.getpid())


def test_start_up_closes_only_this_replicas_sessions(engine: Engine) -> None:
    add_session(engine, "s-mine", "rep_me")
    add_session(engine, "s-theirs", "rep_other")
    add_session(engine, "s-old", None)  # recorded before replicas were: a previous process's
    assert session_store.close_all_open(engine, reason="server restarted", replica_id="rep_me") == 2
    with Session(engine) as s:
        assert s.get(McpSession, "s-theirs").closed_at is None  # type: ignore[union-attr]
        assert s.get(McpSession, "s-mine").closed_at is not None  # type: ignore[union-attr]


def test_the_process_rule_leaves_replica_runs_to_their_lease(engine: Engine) -> None:
    add_run(engine, "r-replica", "rep_other")
    add_run(engine, "r-local", None)
    assert interrupt_orphans(engine, alive=lambda _: False) == ["r-local"]
    assert status(engine, "r-replica") == "running"


def test_the_replica_id_is_kept_in_the_data_dir(tmp_path: Path) -> None:
    first = replica_id_for(tmp_path / "d")
    assert first.startswith("rep_") and replica_id_for(tmp_path / "d") == first
    assert (tmp_path / "d" / "replica-id").read_text(encoding="utf-8").strip() == first
    assert replica_id_for(tmp_path / "e") != first
    (tmp_path / "d" / "replica-id").write_text("../x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="replica-id: not a replica id"):
        replica_id_for(tmp_path / "d")


class RecordingHub(EventHub):
    """The hub, keeping what was published (no event loop needed)."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[tuple[str, str, dict[str, Any]]] = []

    def publish(self, topic: str, kind: str, **data: Any) -> None:
        self.published.append((topic, kind, data))


def test_a_sweep_tells_live_pages_that_the_lapsed_replicas_runs_ended(engine: Engine) -> None:
    add_replica(engine, "rep_dead", age=TTL * 2)
    add_run(engine, "r-dead", "rep_dead")
    hub = RecordingHub()
    audit = AuditLog(hub)
    me = ReplicaLease(
        engine, replica_id="rep_me", ttl=TTL, interactions=InteractionService(engine, audit, hub), audit=audit
    )
    assert me.claim() == ["r-dead"]
    runs = [(kind, data) for topic, kind, data in hub.published if topic == "runs"]
    assert runs == [("status", {"runId": "r-dead", "projectId": "p", "status": "failed"})]


def test_a_session_closed_twice_is_closed_and_audited_once(engine: Engine) -> None:
    """A revoked key's session is closed by the gateway holding it and, when that gateway's
    answer came late, by the web request too: the second close changes nothing, writes no
    second `session.terminated`, and keeps the first reason."""
    add_session(engine, "s-twice", None)
    audit = AuditLog()

    def terminated(s: Session) -> None:
        audit.record(
            s, AuditName.SESSION_TERMINATED, actor="user:uma", session_id="s-twice", outcome="revoked"
        )

    assert session_store.close_session(engine, session_id="s-twice", reason="revoked", audit=terminated)
    assert not session_store.close_session(
        engine, session_id="s-twice", reason="terminated", audit=terminated
    )
    assert not session_store.close_session(engine, session_id="unknown", reason="revoked", audit=terminated)
    with Session(engine) as s:
        assert s.get(McpSession, "s-twice").close_reason == "revoked"  # type: ignore[union-attr]
        events = s.exec(select(AuditEvent).where(AuditEvent.event == "session.terminated")).all()
        assert [(e.session_id, e.outcome) for e in events] == [("s-twice", "revoked")]

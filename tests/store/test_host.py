"""Host conversations and their tool calls, against a real SQLite file."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from tests.store.conftest import T0, add_account, audit_events
from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.store import host as host_store
from webui.store.models import HostCall, HostConversation, Interaction, Run

AUDIT = AuditLog()


def conversation(engine: Engine, conv_id: str, account_id: int, minutes: int = 0) -> HostConversation:
    row = HostConversation(
        id=conv_id,
        account_id=account_id,
        title=conv_id,
        selection=["s"],
        created_at=T0 + timedelta(minutes=minutes),
    )
    return host_store.add_conversation(engine, row=row)


def test_conversations_are_listed_newest_first_for_their_owner_or_for_everyone(engine: Engine) -> None:
    ann, bob = add_account(engine, "ann"), add_account(engine, "bob")
    conversation(engine, "c1", ann, 1)
    conversation(engine, "c2", bob, 2)
    conversation(engine, "c3", ann, 3)
    assert [c.id for c in host_store.list_conversations(engine, account_id=ann)] == ["c3", "c1"]
    assert [c.id for c in host_store.list_conversations(engine, account_id=None)] == ["c3", "c2", "c1"]
    assert [c.id for c in host_store.list_conversations(engine, account_id=None, limit=1)] == ["c3"]
    got = host_store.get_conversation(engine, conversation_id="c2")
    assert got is not None and got.account_id == bob and got.selection == ["s"]
    assert host_store.get_conversation(engine, conversation_id="nope") is None


def test_a_conversation_and_its_audit_event_commit_together(engine: Engine) -> None:
    ann = add_account(engine, "ann")

    def failing(s: Session) -> None:
        AUDIT.record(s, AuditName.HOST_CONVERSATION_CREATED, source="host")
        raise RuntimeError("audit failed")

    row = HostConversation(id="c1", account_id=ann, title="t")
    with pytest.raises(RuntimeError):
        host_store.add_conversation(engine, row=row, audit=failing)
    assert host_store.get_conversation(engine, conversation_id="c1") is None
    assert audit_events(engine) == []
    host_store.add_conversation(
        engine,
        row=HostConversation(id="c1", account_id=ann, title="t"),
        audit=lambda s: AUDIT.record(s, AuditName.HOST_CONVERSATION_CREATED, source="host"),
    )
    assert host_store.get_conversation(engine, conversation_id="c1") is not None
    assert audit_events(engine) == ["host.conversation.created"]


def test_closing_a_conversation_keeps_the_first_closing_time(engine: Engine) -> None:
    conversation(engine, "c1", add_account(engine, "ann"))
    host_store.close_conversation(engine, conversation_id="c1")
    first = host_store.get_conversation(engine, conversation_id="c1")
    assert first is not None and first.closed_at is not None
    host_store.close_conversation(engine, conversation_id="c1")
    again = host_store.get_conversation(engine, conversation_id="c1")
    assert again is not None and again.closed_at == first.closed_at
    host_store.close_conversation(engine, conversation_id="nope")  # gone: nothing to do


def test_a_call_is_saved_then_its_outcome_written_each_with_its_audit_event(engine: Engine) -> None:
    conversation(engine, "c1", add_account(engine, "ann"))
    first = HostCall(id="call_1", conversation_id="c1", server_id="s", tool="t", created_at=T0)
    second = HostCall(
        id="call_2", conversation_id="c1", server_id="s", tool="t", created_at=T0 + timedelta(seconds=1)
    )
    host_store.save_call(
        engine, row=second, audit=lambda s: AUDIT.record(s, AuditName.HOST_TOOL_CALLED, source="host")
    )
    host_store.save_call(
        engine, row=first, audit=lambda s: AUDIT.record(s, AuditName.HOST_TOOL_CALLED, source="host")
    )
    first.status, first.result, first.finished_at = "success", {"content": []}, T0 + timedelta(seconds=2)
    host_store.save_call(
        engine, row=first, audit=lambda s: AUDIT.record(s, AuditName.HOST_TOOL_FINISHED, source="host")
    )
    calls = host_store.list_calls(engine, conversation_id="c1")
    assert [(c.id, c.status, c.result) for c in calls] == [
        ("call_1", "success", {"content": []}),
        ("call_2", "running", None),
    ]
    assert audit_events(engine) == ["host.tool.called", "host.tool.called", "host.tool.finished"]
    assert host_store.list_calls(engine, conversation_id="other") == []


def test_recovery_fails_running_calls_and_names_the_pending_host_requests(engine: Engine) -> None:
    conversation(engine, "c1", add_account(engine, "ann"))
    host_store.save_call(engine, row=HostCall(id="running", conversation_id="c1", server_id="s", tool="t"))
    host_store.save_call(
        engine, row=HostCall(id="done", conversation_id="c1", server_id="s", tool="t", status="success")
    )
    with Session(engine) as s:
        s.add(Run(id="r1", project_id="p", entrypoint_id="e", entrypoint_title="E"))
        s.commit()
        for ia_id, origin, status, run_id in [
            ("host_pending", "host", "pending", None),
            ("host_answered", "host", "answered", None),
            ("run_pending", "run", "pending", "r1"),
        ]:
            s.add(
                Interaction(
                    id=ia_id,
                    origin=origin,
                    status=status,
                    run_id=run_id,
                    kind="form",
                    title="q",
                    requested_schema={},
                )
            )
        s.commit()
    assert host_store.recover(engine, error="restarted") == ["host_pending"]
    calls = {c.id: c for c in host_store.list_calls(engine, conversation_id="c1")}
    assert (calls["running"].status, calls["running"].error) == ("failed", "restarted")
    assert calls["running"].finished_at is not None
    assert (calls["done"].status, calls["done"].error) == ("success", None)


def test_a_connection_event_is_recorded_on_its_own(engine: Engine) -> None:
    AUDIT.record_alone(engine, AuditName.HOST_SERVER_CONNECTING, source="host", user_agent="x" * 400)
    assert audit_events(engine) == ["host.server.connecting"]

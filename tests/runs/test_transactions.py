"""What one plain run writes: two transactions (created and admitted; its outcome), the
call's own start and end written in them (not in transactions of their own)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from tests import prepared
from tests.conftest import EXAMPLES
from tests.helpers import next_update
from webui.audit.events import AuditName
from webui.runs.request import RunRequest
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store.models import AuditEvent
from webui.workflows.project import load_project

pytestmark = pytest.mark.anyio

CALL = {"actor": "user:ann", "project_id": "p", "tool": "echo", "source": "mcp", "session_id": "s-1"}


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[Services]:
    prepared.copy_prepared("store", tmp_path / "data")
    async with open_services(Settings(data_dir=tmp_path / "data", kill_grace_seconds=0.5)) as services:
        yield services


@contextmanager
def commits(engine: Engine) -> Iterator[list[int]]:
    counted: list[int] = []

    def on_commit(_conn: Any) -> None:
        counted.append(1)

    event.listen(engine, "commit", on_commit)
    try:
        yield counted
    finally:
        event.remove(engine, "commit", on_commit)


def echo_call(text: str) -> RunRequest:
    hello = load_project(EXAMPLES / "hello")
    ep = hello.entrypoint("echo")
    assert ep is not None
    return RunRequest(
        project=hello,
        entrypoint=ep,
        params={"text": text},
        stored_params={"text": text},
        created_audit=(AuditName.TOOL_CALLED, {**CALL, "outcome": "started"}),
        finished_audit=(AuditName.TOOL_COMPLETED, AuditName.TOOL_FAILED, {**CALL, "outcome": "started"}),
    )


def audit_rows(svc: Services, run_id: str) -> list[tuple[str, str | None]]:
    with Session(svc.engine) as s:
        rows = s.exec(select(AuditEvent).where(AuditEvent.run_id == run_id).order_by(AuditEvent.id)).all()  # type: ignore[arg-type]
        return [(r.event, r.outcome) for r in rows]


async def test_a_plain_call_is_two_commits_and_its_end_is_audited_with_the_outcome(svc: Services) -> None:
    with commits(svc.engine) as counted:
        run_id = (await svc.runs.start(echo_call("hi"))).run_id
        final = await next_update(svc, run_id)
    assert (final.status, final.output, final.call_audited) == ("success", {"text": "hi"}, True)
    # created running with tool.called (a slot was free); the outcome with run.finished and
    # tool.completed
    assert len(counted) == 2, counted
    assert audit_rows(svc, run_id) == [
        ("run.created", "queued"),
        ("tool.called", "started"),
        ("run.finished", "success"),
        ("tool.completed", "success"),
    ]


async def test_a_call_that_stopped_following_leaves_its_end_to_whoever_follows_later(svc: Services) -> None:
    """The call answered early (an input round, an interaction_required result) or its client
    left: the run's outcome carries no call event, and its final update says so."""
    run_id = (await svc.runs.start(echo_call("later"))).run_id
    svc.runs.call_ended(run_id)
    final = await next_update(svc, run_id)
    assert (final.status, final.call_audited) == ("success", False)
    assert [event for event, _ in audit_rows(svc, run_id)] == ["run.created", "tool.called", "run.finished"]


async def test_a_failed_run_audits_the_call_as_failed(svc: Services) -> None:
    request = echo_call("x")
    request.params = {}  # the handler raises KeyError: the run fails
    run_id = (await svc.runs.start(request)).run_id
    final = await next_update(svc, run_id)
    assert final.status == "failed" and final.call_audited
    assert audit_rows(svc, run_id)[-2:] == [("run.finished", "failed"), ("tool.failed", "failed")]


async def test_a_call_is_audited_once_on_its_runs_own_events(svc: Services) -> None:
    """One row per fact: the run's `run.created` and `run.finished` carry the call (its target,
    client, `call` in details); no tool.* rows beside them, and still two commits."""
    request = echo_call("once")
    request.created_audit = request.finished_audit = None
    request.session_id = "s-1"
    request.call = {"target": "latest", "client_address": "127.0.0.1", "user_agent": "ua"}
    with commits(svc.engine) as counted:
        run_id = (await svc.runs.start(request)).run_id
        final = await next_update(svc, run_id)
    assert final.status == "success" and len(counted) == 2, counted
    with Session(svc.engine) as s:
        rows = s.exec(select(AuditEvent).where(AuditEvent.run_id == run_id).order_by(AuditEvent.id)).all()  # type: ignore[arg-type]
    assert [(r.event, r.outcome) for r in rows] == [("run.created", "queued"), ("run.finished", "success")]
    for row in rows:
        assert (row.session_id, row.target, row.client_address, row.user_agent) == (
            "s-1",
            "latest",
            "127.0.0.1",
            "ua",
        )
        assert row.details is not None and row.details["call"] == "tools/call"

"""What one plain run writes: two transactions (created and admitted; its outcome), and one
audit row per fact: the call's start and end are the run's own `run.created` and
`run.finished` (no tool.* rows beside them, no transactions of their own)."""

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
from webui.runs.request import RunRequest
from webui.services import Services, open_services
from webui.settings import Settings
from webui.store.models import AuditEvent
from webui.workflows.project import load_project

pytestmark = pytest.mark.anyio

CALL = {"target": "latest", "client_address": "127.0.0.1", "user_agent": "ua"}


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
    """A run as an MCP call starts it: the call (its target, client) named on the run."""
    hello = load_project(EXAMPLES / "hello")
    ep = hello.entrypoint("echo")
    assert ep is not None
    return RunRequest(
        project=hello,
        entrypoint=ep,
        params={"text": text},
        stored_params={"text": text},
        actor="user:ann",
        session_id="s-1",
        call=dict(CALL),
    )


def audit_rows(svc: Services, run_id: str) -> list[tuple[str, str | None]]:
    return [(r.event, r.outcome) for r in audit_events(svc, run_id)]


def audit_events(svc: Services, run_id: str) -> list[AuditEvent]:
    with Session(svc.engine) as s:
        query = select(AuditEvent).where(AuditEvent.run_id == run_id).order_by(AuditEvent.id)  # type: ignore[arg-type]
        return list(s.exec(query).all())


def carry_the_call(rows: list[AuditEvent]) -> None:
    for row in rows:
        assert (row.session_id, row.target, row.client_address, row.user_agent) == ("s-1", *CALL.values())
        assert row.details is not None and row.details["call"] == "tools/call"


async def test_a_plain_call_is_two_commits_and_its_end_is_audited_with_the_outcome(svc: Services) -> None:
    with commits(svc.engine) as counted:
        run_id = (await svc.runs.start(echo_call("hi"))).run_id
        final = await next_update(svc, run_id)
    assert (final.status, final.output) == ("success", {"text": "hi"})
    # created running (a slot was free) with run.created; the outcome with run.finished: the
    # call's start and end are those two rows, written in the run's own two commits
    assert len(counted) == 2, counted
    assert audit_rows(svc, run_id) == [("run.created", "queued"), ("run.finished", "success")]
    carry_the_call(audit_events(svc, run_id))


async def test_a_call_that_stopped_following_leaves_its_end_to_whoever_follows_later(svc: Services) -> None:
    """The call answered early (an input round, an interaction_required result) or its client
    left: nothing of the call's own is written when it stops; the run's `run.finished` is the
    call's end, whoever reads the outcome later."""
    handle = await svc.runs.start(echo_call("later"))
    async with handle.updates() as updates:
        await updates.get()  # where it stands now; then the call stops following
    final = await next_update(svc, handle.run_id)
    assert (final.status, final.output) == ("success", {"text": "later"})
    assert audit_rows(svc, handle.run_id) == [("run.created", "queued"), ("run.finished", "success")]


async def test_a_failed_run_audits_the_call_as_failed(svc: Services) -> None:
    request = echo_call("x")
    request.params = {}  # the handler raises KeyError: the run fails
    run_id = (await svc.runs.start(request)).run_id
    final = await next_update(svc, run_id)
    assert final.status == "failed"
    assert audit_rows(svc, run_id) == [("run.created", "queued"), ("run.finished", "failed")]
    carry_the_call(audit_events(svc, run_id))


async def test_a_call_is_audited_once_on_its_runs_own_events(svc: Services) -> None:
    """One row per fact: the run's `run.created` and `run.finished` carry the call (its target,
    client, `call` in details); no tool.* rows beside them, and still two commits."""
    request = echo_call("once")
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

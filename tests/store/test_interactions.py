"""Writing, closing and answering interactions, against a real SQLite file."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from tests.store.conftest import T0, add_account, audit_events
from webui.audit.events import AuditName
from webui.audit.log import AuditLog
from webui.store import host as host_store
from webui.store import interactions as interaction_store
from webui.store.db import unit_of_work
from webui.store.models import HostConversation, Interaction, Run

AUDIT = AuditLog()


def add_run(engine: Engine, run_id: str, account_id: int | None = None) -> None:
    with Session(engine) as s:
        s.add(Run(id=run_id, project_id="p1", entrypoint_id="e", entrypoint_title="E", account_id=account_id))
        s.commit()


def question(ia_id: str, *, run_id: str | None = None, minutes: int = 0, **fields: object) -> Interaction:
    return Interaction.model_validate(
        {
            "id": ia_id,
            "run_id": run_id,
            "kind": "form",
            "title": "q",
            "requested_schema": {"type": "object"},
            "created_at": T0 + timedelta(minutes=minutes),
            **fields,
        }
    )


def test_an_interaction_and_its_audit_event_commit_together(engine: Engine) -> None:
    def failing(s: Session) -> None:
        AUDIT.record(s, AuditName.INTERACTION_REQUESTED)
        raise RuntimeError("audit failed")

    with pytest.raises(RuntimeError):
        interaction_store.add_interaction(engine, row=question("i1", origin="host"), audit=failing)
    assert interaction_store.get_interaction(engine, interaction_id="i1") is None
    assert audit_events(engine) == []
    interaction_store.add_interaction(
        engine,
        row=question("i1", origin="host"),
        audit=lambda s: AUDIT.record(s, AuditName.INTERACTION_REQUESTED),
    )
    got = interaction_store.get_interaction(engine, interaction_id="i1")
    assert got is not None and got.status == "pending"
    assert audit_events(engine) == ["interaction.requested"]


def test_only_a_pending_interaction_is_closed(engine: Engine) -> None:
    interaction_store.add_interaction(engine, row=question("i1", origin="host"))
    closed = interaction_store.close_interaction(engine, interaction_id="i1", reason="expired")
    assert closed is not None and (closed.status, closed.close_reason) == ("closed", "expired")
    assert interaction_store.close_interaction(engine, interaction_id="i1", reason="again") is None
    assert interaction_store.close_interaction(engine, interaction_id="nope", reason="x") is None
    got = interaction_store.get_interaction(engine, interaction_id="i1")
    assert got is not None and got.close_reason == "expired"


def test_a_runs_pending_questions_newest_first_and_closed_together(engine: Engine) -> None:
    add_run(engine, "r1")
    add_run(engine, "r2")
    for row in [
        question("old", run_id="r1", minutes=1),
        question("new", run_id="r1", minutes=2),
        question("done", run_id="r1", minutes=3, status="answered"),
        question("other", run_id="r2", minutes=4),
    ]:
        interaction_store.add_interaction(engine, row=row)
    pending = interaction_store.pending_for_run(engine, run_id="r1")
    assert pending is not None and pending.id == "new"
    assert sorted(interaction_store.close_pending_for_run(engine, run_id="r1", reason="run finished")) == [
        "new",
        "old",
    ]
    assert interaction_store.pending_for_run(engine, run_id="r1") is None
    done = interaction_store.get_interaction(engine, interaction_id="done")
    assert done is not None and done.status == "answered"
    other = interaction_store.pending_for_run(engine, run_id="r2")
    assert other is not None and other.id == "other"


def test_an_interaction_is_owned_by_its_runs_account_or_its_conversations(engine: Engine) -> None:
    ann = add_account(engine, "ann")
    add_run(engine, "r1", ann)
    host_store.add_conversation(engine, row=HostConversation(id="c1", account_id=ann, title="t"))
    interaction_store.add_interaction(engine, row=question("of_run", run_id="r1"))
    interaction_store.add_interaction(engine, row=question("of_conv", origin="host", conversation_id="c1"))
    interaction_store.add_interaction(engine, row=question("of_host", origin="host"))
    with unit_of_work(engine) as s:
        owned = {
            ia_id: interaction_store.load_owned(s, interaction_id=ia_id)
            for ia_id in ("of_run", "of_conv", "of_host", "nope")
        }
    assert {k: (v.owner, v.project_id) if v else None for k, v in owned.items()} == {
        "of_run": (ann, "p1"),
        "of_conv": (ann, None),
        "of_host": (None, None),
        "nope": None,
    }


def test_an_answer_and_its_audit_event_commit_in_the_session_that_read_it(engine: Engine) -> None:
    interaction_store.add_interaction(engine, row=question("i1", origin="host"))
    with unit_of_work(engine) as s:
        found = interaction_store.load_owned(s, interaction_id="i1")
        assert found is not None
        interaction_store.mark_answered(
            s,
            found.interaction,
            action="accept",
            answer={"x": 1},
            digest="d",
            answered_by="user:ann",
            override=False,
            channel="ui",
            audit=lambda tx: AUDIT.record(tx, AuditName.INTERACTION_ANSWERED),
        )
    got = interaction_store.get_interaction(engine, interaction_id="i1")
    assert got is not None
    assert (got.status, got.action, got.answer, got.answer_digest, got.answered_by, got.channel) == (
        "answered",
        "accept",
        {"x": 1},
        "d",
        "user:ann",
        "ui",
    )
    assert got.answer_override is None and got.answered_at is not None
    assert audit_events(engine) == ["interaction.answered"]


def test_an_expired_question_is_closed_in_the_session_that_read_it(engine: Engine) -> None:
    interaction_store.add_interaction(engine, row=question("i1", origin="host"))
    with unit_of_work(engine) as s:
        found = interaction_store.load_owned(s, interaction_id="i1")
        assert found is not None
        interaction_store.mark_closed(s, found.interaction, reason="expired")
    got = interaction_store.get_interaction(engine, interaction_id="i1")
    assert got is not None and (got.status, got.close_reason) == ("closed", "expired")


def test_a_task_view_names_the_pending_questions_whose_key_an_earlier_one_of_the_run_spent(
    engine: Engine,
) -> None:
    from webui.store import runs as run_store

    add_run(engine, "r1")
    add_run(engine, "r2")
    with Session(engine) as s:
        s.add(Run(id="child", project_id="p1", entrypoint_id="e", entrypoint_title="E", parent_run_id="r1"))
        s.commit()
        for ia in (
            question("spent", run_id="r1", minutes=0, input_key="step", status="answered"),
            question("closed", run_id="r1", minutes=1, input_key="gone", status="closed"),
            question("again", run_id="r1", minutes=2, input_key="step"),  # reuses an answered key
            question("again2", run_id="r1", minutes=3, input_key="gone"),  # reuses a closed one's
            question("fresh", run_id="r1", minutes=4, input_key="new"),
            question("plain", run_id="r1", minutes=5),
            question("other", run_id="r2", minutes=0, input_key="new", status="answered"),  # another run
            question("kid", run_id="child", minutes=6, input_key="step"),
            # An answered question asked *after* a pending one does not take its key away.
            question("later", run_id="r1", minutes=9, input_key="new", status="answered"),
        ):
            s.add(ia)
        s.commit()
    view = run_store.task_view(engine, run_id="r1")
    assert view is not None
    assert [ia.id for ia in view.pending] == ["again", "again2", "fresh", "plain", "kid"]
    # A child run's question is not judged here: a task names every one by its id.
    assert view.reused_keys == {"again", "again2"}


def test_a_task_view_finds_the_newest_progress_among_the_runs_newest_entries_only(engine: Engine) -> None:
    from webui.store import runs as run_store
    from webui.store.models import RunEvent

    add_run(engine, "r1")

    def add(*events: RunEvent) -> None:
        with Session(engine) as s:
            s.add_all(events)
            s.commit()

    add(RunEvent(run_id="r1", kind="progress", data={"message": "first"}))
    add(
        RunEvent(run_id="r1", kind="progress", data={"message": "second"}),
        RunEvent(run_id="r1", kind="stdout"),
    )
    view = run_store.task_view(engine, run_id="r1")
    assert view is not None and view.last_progress is not None
    assert view.last_progress.data == {"message": "second"} and view.last_event is not None
    assert view.last_event.kind == "stdout"
    # Past the look-back the progress is no longer read (the poll stays bounded).
    add(*(RunEvent(run_id="r1", kind="stdout", text="x") for _ in range(run_store.PROGRESS_LOOKBACK)))
    view = run_store.task_view(engine, run_id="r1")
    assert view is not None and view.last_progress is None


def test_a_task_view_reads_a_bounded_number_of_child_runs_per_level(engine: Engine) -> None:
    from webui.store import runs as run_store

    add_run(engine, "root")
    with Session(engine) as s:
        for n in range(5):
            s.add(
                Run(
                    id=f"kid{n}",
                    project_id="p1",
                    entrypoint_id="e",
                    entrypoint_title="E",
                    parent_run_id="root",
                )
            )
        s.commit()
        for n in range(5):
            s.add(question(f"q{n}", run_id=f"kid{n}", minutes=n))
        s.commit()
    assert len(run_store.task_view(engine, run_id="root").pending) == 5  # type: ignore[union-attr]
    bounded = run_store.task_view(engine, run_id="root", max_children=2)
    assert bounded is not None and len(bounded.pending) == 2


@pytest.mark.anyio
@pytest.mark.parametrize("same", [True, False], ids=["same answer", "another answer"])
async def test_an_answer_that_loses_the_race_to_another_channel_is_a_conflict_or_the_same_answer(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, same: bool
) -> None:
    """Two channels read the question pending; the other one's answer is committed between
    this one's read and its write: this one is told what a later reader would be (409 for
    another answer, the answer again for the same one), never that the question is gone."""
    from webui.errors import InteractionConflict
    from webui.interactions.service import InteractionService

    add_run(engine, "r1")
    with unit_of_work(engine) as s:
        s.add(question("q1", run_id="r1", requested_schema={"type": "object", "properties": {"n": {}}}))
        s.commit()
    service = InteractionService(engine, AUDIT)
    mark_answered = interaction_store.mark_answered

    def first_another_channel(s: Session, row: Interaction, **kw: object) -> bool:
        with unit_of_work(engine) as other:
            competing = other.get(Interaction, row.id)
            assert competing is not None
            mark_answered(
                other,
                competing,
                action="accept",
                answer={"n": 1},
                digest=str(kw["digest"]) if same else "another digest",
                answered_by=None,
                override=False,
                channel="api",
            )
        return mark_answered(s, row, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(interaction_store, "mark_answered", first_another_channel)
    if same:
        got = await service.answer("q1", action="accept", content={"n": 1}, channel="mcp-task")
        assert got.repeated
    else:
        with pytest.raises(InteractionConflict):
            await service.answer("q1", action="accept", content={"n": 1}, channel="mcp-task")
    with Session(engine) as s:
        row = s.get(Interaction, "q1")
        assert row is not None and (row.status, row.channel) == ("answered", "api")
